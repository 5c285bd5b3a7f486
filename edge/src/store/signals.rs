//! Operational signals: `endpoint.disabled`, `delivery.exhausted`, `carrier_event.failed`,
//! `backlog.high`, `endpoint.circuit_opened`, `endpoint.circuit_closed`, `audit.violation`.
//!
//! A signal is a customer event like every other, written in the batch of the guarded change it
//! reports and only if that change happened, so it is exactly-once too. `backlog.high` reports
//! no change but a state the cron finds (work waiting too long), so its guard is the outbox's
//! unique `(resource_id, type)`: one signal per stuck item ([`backlog_high`]). It is written twice:
//! for the operator (the reserved account [`OPERATOR_ACCOUNT`], whose one endpoint is
//! `OPERATOR_WEBHOOK_URL`, registered by the cron with [`register_operator`]) and, when it
//! concerns an account, for that account, whose own endpoints may subscribe to it.
//!
//! Signals are not written with [`crate::store::transition`], the recipe of a message's or a
//! call's change, because their shape is another: a signal has two events chained one after
//! the other (the operator's copy and the account's), it rides on a guarded change of a
//! delivery or an endpoint that stands wherever its batch needs it (after the attempt's row and
//! the failure count it depends on), one batch may carry two of them (a delivery exhausted and
//! its endpoint disabled, each after its own guard), and its deliveries are announced by event
//! id after the commit, not read back in the batch. [`Signal`] is their one recipe: every
//! signal's statements come from [`Signal::statements`] or [`Signal::statements_once`].

use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store as db;
use crate::store::outbox::Event;

/// The reserved account operator signals belong to (created by the migrations; no API key can
/// reach it).
pub const OPERATOR_ACCOUNT: &str = "acct_operator";
/// The endpoint of `OPERATOR_WEBHOOK_URL`.
pub const OPERATOR_ENDPOINT: &str = "ep_operator";
/// Every signal the operator receives.
pub const OPERATOR_TYPES: [EventType; 7] = [
    EventType::EndpointDisabled,
    EventType::DeliveryExhausted,
    EventType::CarrierEventFailed,
    EventType::BacklogHigh,
    EventType::EndpointCircuitOpened,
    EventType::EndpointCircuitClosed,
    EventType::AuditViolation,
];

/// One signal: the operator's copy and, when it concerns an account, the account's.
pub struct Signal {
    copies: Vec<Event>,
}

impl Signal {
    /// A signal of `event_type` about `resource`; `account` is the account it concerns, if any
    /// (the operator's own account gets one copy, not two).
    pub fn new(
        event_type: EventType,
        resource: &str,
        account: Option<&str>,
        data: Value,
        now: Timestamp,
    ) -> Result<Self, EdgeError> {
        let account = account.filter(|a| *a != OPERATOR_ACCOUNT);
        let mut operator_data = data.clone();
        operator_data["account_id"] = account.map_or(Value::Null, |a| Value::String(a.to_owned()));
        let mut copies = vec![Event::new(OPERATOR_ACCOUNT, event_type, &format!("op:{resource}"), operator_data, now)?];
        if let Some(account) = account {
            copies.push(Event::new(account, event_type, resource, data, now)?);
        }
        Ok(Signal { copies })
    }

    /// The inserts, to stand right after the guarded statement (each is written only if the
    /// statement before it changed a row, so the chain holds), then the fan-outs.
    pub fn statements(&self, db: &D1Database, now: Timestamp) -> Result<Vec<D1PreparedStatement>, EdgeError> {
        self.chain(db, now, false)
    }

    /// The statements of a signal no guarded change precedes: the operator's copy is written
    /// once per resource and type ([`Event::insert_once`]) and guards the account's copy.
    pub fn statements_once(&self, db: &D1Database, now: Timestamp) -> Result<Vec<D1PreparedStatement>, EdgeError> {
        self.chain(db, now, true)
    }

    fn chain(&self, db: &D1Database, now: Timestamp, once: bool) -> Result<Vec<D1PreparedStatement>, EdgeError> {
        let mut out = Vec::with_capacity(2 * self.copies.len());
        for (i, copy) in self.copies.iter().enumerate() {
            out.push(if once && i == 0 { copy.insert_once(db, now)? } else { copy.insert_if_changed(db, now)? });
        }
        for copy in &self.copies {
            out.push(copy.fan_out(db, now)?);
        }
        Ok(out)
    }

    /// The events' ids, whose first deliveries are enqueued once the batch committed.
    pub fn event_ids(&self) -> Vec<String> {
        self.copies.iter().map(|c| c.id.clone()).collect()
    }
}

/// Registers (or updates) the operator's endpoint: `url` (already checked) signed with
/// `secret`, subscribed to every operator signal.
pub async fn register_operator(db: &D1Database, url: &str, secret: &str, now: Timestamp) -> Result<(), EdgeError> {
    crate::store::endpoints::put_operator(db, (OPERATOR_ENDPOINT, OPERATOR_ACCOUNT), url, &OPERATOR_TYPES, secret, now)
        .await
}

/// The oldest work of one kind that has waited longer than the backlog threshold.
#[derive(Debug)]
pub enum Stuck<'a> {
    /// A carrier event neither processed nor failed, stored at `since`.
    CarrierEvent { id: &'a str, since: Timestamp },
    /// A pending delivery to an endpoint neither paused nor disabled, due since `since`.
    Delivery { id: &'a str, event_id: &'a str, endpoint_id: &'a str, account_id: &'a str, since: Timestamp },
}

/// Writes `backlog.high` about `stuck`, once: the item's id is the signal's resource
/// (`backlog:<id>`), so a later sweep that finds the same item still waiting, or one running at
/// the same time, writes nothing. A delivery's signal also goes to its account. Returns the
/// events' ids if this call wrote them.
pub async fn backlog_high(
    db: &D1Database,
    stuck: &Stuck<'_>,
    threshold_secs: i64,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    let waited = |since: Timestamp| (now.unix_millis() - since.unix_millis()).max(0) / 1000;
    let (id, account, data) = match *stuck {
        Stuck::CarrierEvent { id, since } => (
            id,
            None,
            json!({
                "kind": "carrier_event", "carrier_event_id": id, "waiting_since": since.to_rfc3339(),
                "age_seconds": waited(since), "threshold_seconds": threshold_secs,
            }),
        ),
        Stuck::Delivery { id, event_id, endpoint_id, account_id, since } => (
            id,
            Some(account_id),
            json!({
                "kind": "delivery", "delivery_id": id, "event_id": event_id, "endpoint_id": endpoint_id,
                "waiting_since": since.to_rfc3339(), "age_seconds": waited(since), "threshold_seconds": threshold_secs,
            }),
        ),
    };
    let signal = Signal::new(EventType::BacklogHigh, &format!("backlog:{id}"), account, data, now)?;
    let results = db::batch(db, signal.statements_once(db, now)?).await?;
    Ok(if results.first().map(db::changes) == Some(1) { signal.event_ids() } else { Vec::new() })
}

/// What the running audit found: the check, the rows that break its promise (the first names
/// the finding) and what is wrong with them.
#[derive(Debug)]
pub struct Finding {
    pub check: &'static str,
    pub rows: Vec<String>,
    pub detail: String,
}

/// Writes `audit.violation` about `finding` in `db` (the database whose rows it names), once:
/// the check and its first row are the signal's resource, so a later run that reads the same
/// rows again writes nothing. The operator's alone. Returns the event's id if this call wrote it.
pub async fn audit_violation(
    db: &D1Database,
    finding: &Finding,
    database: &str,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    let first = finding.rows.first().map_or("", String::as_str);
    let data = json!({"check": finding.check, "database": database, "rows": finding.rows, "detail": finding.detail});
    let signal = Signal::new(EventType::AuditViolation, &format!("audit:{}:{first}", finding.check), None, data, now)?;
    // The operator's copy alone: its insert, then (counted only if it wrote) its fan-out.
    let mut statements = signal.statements_once(db, now)?;
    statements.insert(1, crate::store::audit::counted(db, finding.check)?);
    let results = db::batch(db, statements).await?;
    Ok(if results.first().map(db::changes) == Some(1) { signal.event_ids() } else { Vec::new() })
}
