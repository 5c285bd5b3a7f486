//! The running audit (docs/contract.md, "The running audit"): a part of the cron's tick in each
//! account database that reads the rows written since its last run and checks the product's
//! promises against them, with the same rules the product applies:
//!
//! - `status_order`: every move of a message's status is one the lattice allows from the
//!   status before it ([`exactly_core::message::transition`]), so no status went back and no
//!   fact was applied twice; a message's first move is one only an outbound message makes
//!   (`sent`, `failed`, `canceled`: an inbound one has no moves); and a move to `sent` has its
//!   charge beside it.
//! - `charges`: every charge matches what it bills, which exists (nothing deletes a message or a
//!   call): a message's segments (one unit for an MMS) once it was sent, a call's billed minutes.
//! - `one_success`: no delivery succeeded twice: its endpoint received the same webhook once,
//!   an operator's re-drive of a delivery that had succeeded included.
//! - `deliveries`: every customer event has its first delivery to each endpoint of its account
//!   that was subscribed to its type since well before it was written (a minute: the event's
//!   time is taken before its batch runs); a deleted endpoint is no longer asked about.
//!
//! Each check reads one page ([`audit::PAGE`] rows) after its position per run, and raises at
//! most [`FINDINGS_PER_RUN`] findings: the position stops at the row of the last one, so a
//! systematic fault is reported a bounded batch at a time rather than failing the run. A full
//! page goes on at once with the next, up to the cron's `MAX_ROUNDS` a tick, only while no check
//! has found anything in the tick: a run that found something is its tick's last, so each check
//! raises at most [`FINDINGS_PER_RUN`] a tick, and the rows after its last finding wait for the
//! next tick. Each finding raises `audit.violation` once, naming the rows, and counts once.

use exactly_core::message::{transition, MessageStatus, Transition};

use crate::error::EdgeError;
use crate::platform::now;
use crate::store::audit::{self, PAGE};
use crate::store::signals::{self, Finding};
use crate::store::usage::Kind;
use crate::store::AccountDb;
use worker::D1Database;

/// The most findings one check raises in one run: each is a batch and a read, and a run stays
/// well within an invocation's queries.
pub const FINDINGS_PER_RUN: usize = 20;

/// What one run did: rows read, findings raised (their signals' events, and the findings), and
/// whether a check has more to read.
#[derive(Debug, Default)]
pub struct Report {
    pub checked: usize,
    pub found: usize,
    pub findings: usize,
    pub more: bool,
}

impl Report {
    /// Whether the tick runs the next page at once: a check has more to read, and no check found
    /// anything in this run (what it found bounds the tick to [`FINDINGS_PER_RUN`] a check).
    pub fn goes_on(&self) -> bool {
        self.more && self.findings == 0
    }
}

/// Runs one page of every check in `account`'s database, the binding `database`.
pub async fn run(account: &AccountDb, database: &str) -> Result<Report, EdgeError> {
    let db = account.db();
    let at = now();
    let mut report = Report::default();
    for standing in audit::standings(db).await? {
        let Some(check) = Check::from_name(&standing.name) else { continue };
        let decided = decide(db, check, standing.position).await?;
        if decided.is_empty() && check == Check::Deliveries && standing.position > 0 {
            audit::rewind_if_emptied(db, &standing.name, standing.position).await?;
        }
        let (read, findings) = bounded(decided);
        let Some(&last) = read.last() else { continue };
        let mut raised = Vec::new();
        for finding in &findings {
            raised.extend(signals::audit_violation(db, finding, database, at).await?);
        }
        // A run that moved it first read the same rows; their findings are raised once.
        audit::advance(db, &standing.name, standing.position, last, read.len(), at).await?;
        report.checked += read.len();
        report.found += raised.len();
        report.findings += findings.len();
        report.more |= read.len() as i64 == PAGE || findings.len() == FINDINGS_PER_RUN;
        crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &raised).await?).await?;
    }
    Ok(report)
}

/// A page of `check` after `position`: each row's id and what it breaks, if anything.
async fn decide(db: &D1Database, check: Check, position: i64) -> Result<Vec<(i64, Option<Finding>)>, EdgeError> {
    Ok(match check {
        Check::StatusOrder => audit::moves(db, position).await?.iter().map(|r| (r.id, status_order(r))).collect(),
        Check::Charges => audit::charges(db, position).await?.iter().map(|r| (r.id, charge(r))).collect(),
        Check::OneSuccess => audit::attempts(db, position).await?.iter().map(|r| (r.id, one_success(r))).collect(),
        Check::Deliveries => audit::written(db, position).await?.iter().map(|r| (r.id, delivered(r))).collect(),
    })
}

/// The ids of a page's rows up to its [`FINDINGS_PER_RUN`]th finding (the whole page when it
/// has fewer), and their findings.
fn bounded(decided: Vec<(i64, Option<Finding>)>) -> (Vec<i64>, Vec<Finding>) {
    let mut read = Vec::new();
    let mut findings = Vec::new();
    for (id, finding) in decided {
        read.push(id);
        findings.extend(finding);
        if findings.len() == FINDINGS_PER_RUN {
            break;
        }
    }
    (read, findings)
}

exactly_core::text_enum! {
    /// The audit's checks, by the names their rows in `audit_checks` have.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Check {
        StatusOrder = "status_order",
        Charges = "charges",
        OneSuccess = "one_success",
        Deliveries = "deliveries",
    }
}

/// A message's move that the lattice does not allow from the status before it, a first move
/// only an outbound message makes made by another, or a move to `sent` without its one charge.
fn status_order(row: &audit::Moved) -> Option<Finding> {
    let mut rows = vec![format!("message_status_history:{}", row.id)];
    rows.extend(row.previous_id.map(|id| format!("message_status_history:{id}")));
    let found = |detail: String| Some(Finding { check: Check::StatusOrder.as_str(), rows: rows.clone(), detail });
    let Some(to) = MessageStatus::from_name(&row.status) else {
        return found(format!("message {} has the unknown status {}", row.message_id, row.status));
    };
    match &row.previous {
        Some(previous) => {
            let allowed =
                MessageStatus::from_name(previous).map(|from| matches!(transition(from, to), Transition::Move { .. }));
            if allowed != Some(true) {
                return found(format!("message {} went from {previous} to {}", row.message_id, row.status));
            }
        }
        None => {
            let first = matches!(to, MessageStatus::Sent | MessageStatus::Failed | MessageStatus::Canceled);
            if row.inbound || !first {
                let which = if row.inbound { "inbound" } else { "outbound" };
                return found(format!("{which} message {} moved to {} first", row.message_id, row.status));
            }
        }
    }
    if to == MessageStatus::Sent && row.charges != 1 {
        return found(format!("message {} was sent with {} charges, not one", row.message_id, row.charges));
    }
    None
}

/// A charge that does not match what it bills, or bills nothing that exists.
fn charge(row: &audit::Charge) -> Option<Finding> {
    let sent = |at: Option<i64>| if at.is_some() { "sent" } else { "never sent" };
    let kind = Kind::from_name(&row.kind);
    let wrong = match kind {
        Some(Kind::SmsSegments | Kind::Mms) if !row.message_found => {
            Some(format!("{} charged for no message", row.resource_id))
        }
        Some(Kind::CallMinutes) if !row.call_found => Some(format!("{} charged for no call", row.resource_id)),
        Some(Kind::SmsSegments) => (row.sent_at.is_none() || row.segments != Some(row.quantity)).then(|| {
            let segments = row.segments.map_or("no".to_owned(), |s| s.to_string());
            format!(
                "{} segments charged for message {} ({}, {segments} segments)",
                row.quantity,
                row.resource_id,
                sent(row.sent_at)
            )
        }),
        Some(Kind::Mms) => (row.sent_at.is_none() || row.quantity != 1).then(|| {
            format!("{} units charged for MMS {} ({}, one unit each)", row.quantity, row.resource_id, sent(row.sent_at))
        }),
        Some(Kind::CallMinutes) => (row.billed_minutes != Some(row.quantity)).then(|| {
            let billed = row.billed_minutes.map_or("no".to_owned(), |m| m.to_string());
            format!("{} minutes charged for call {} ({billed} minutes billed)", row.quantity, row.resource_id)
        }),
        None => Some(format!("charge of the unknown kind {} for {}", row.kind, row.resource_id)),
    };
    let table = if kind == Some(Kind::CallMinutes) { "calls" } else { "messages" };
    wrong.map(|detail| Finding {
        check: Check::Charges.as_str(),
        rows: vec![format!("usage:{}", row.id), format!("{table}:{}", row.resource_id)],
        detail,
    })
}

/// A success of a delivery that had already succeeded (recorded before it).
fn one_success(row: &audit::Attempt) -> Option<Finding> {
    let earlier = row.earlier.filter(|_| row.succeeded)?;
    Some(Finding {
        check: Check::OneSuccess.as_str(),
        rows: vec![format!("webhook_attempts:{}", row.id), format!("webhook_attempts:{earlier}")],
        detail: format!("delivery {} succeeded again after attempt row {earlier} had", row.delivery_id),
    })
}

/// A customer event with no first delivery to an endpoint subscribed to its type since well
/// before it was written.
fn delivered(row: &audit::Written) -> Option<Finding> {
    row.missing.as_ref().map(|endpoint| Finding {
        check: Check::Deliveries.as_str(),
        rows: vec![format!("outbound_events:{}", row.event_id), format!("webhook_endpoints:{endpoint}")],
        detail: format!(
            "event {} ({}) has no delivery to endpoint {endpoint}, subscribed to it before",
            row.event_id, row.event_type
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(status: &str, previous: Option<&str>, charges: i64) -> audit::Moved {
        audit::Moved {
            id: 7,
            message_id: "msg_1".to_owned(),
            status: status.to_owned(),
            previous_id: previous.map(|_| 6),
            previous: previous.map(str::to_owned),
            inbound: false,
            charges,
        }
    }

    #[test]
    fn moves_the_lattice_allows_pass_and_others_are_named() {
        for (to, from, charges) in [
            ("sent", None, 1),
            ("failed", None, 0),
            ("canceled", None, 0),
            ("delivered", Some("sent"), 0),
            ("failed", Some("sent"), 0),
        ] {
            assert!(status_order(&moved(to, from, charges)).is_none(), "{from:?} -> {to}");
        }
        for (to, from, charges, says) in [
            ("sent", Some("delivered"), 1, "went from delivered to sent"),
            ("delivered", Some("delivered"), 0, "went from delivered to delivered"),
            ("sent", None, 0, "with 0 charges"),
            ("sent", Some("queued"), 2, "with 2 charges"),
            ("delivered", None, 0, "outbound message msg_1 moved to delivered first"),
            ("bogus", Some("sent"), 0, "unknown status"),
        ] {
            let f = status_order(&moved(to, from, charges)).expect("a finding");
            assert_eq!(f.check, "status_order");
            assert_eq!(f.rows[0], "message_status_history:7");
            assert_eq!(f.rows.get(1).map(String::as_str), from.map(|_| "message_status_history:6"));
            assert!(f.detail.contains(says), "{}", f.detail);
        }
        let inbound = audit::Moved { inbound: true, ..moved("failed", None, 0) };
        let f = status_order(&inbound).expect("an inbound message has no moves");
        assert!(f.detail.contains("inbound message msg_1 moved to failed first"), "{}", f.detail);
    }

    fn charged(kind: &str, quantity: i64) -> audit::Charge {
        audit::Charge {
            id: 3,
            kind: kind.to_owned(),
            quantity,
            resource_id: "msg_1".to_owned(),
            segments: Some(2),
            sent_at: Some(1),
            message_found: true,
            billed_minutes: Some(4),
            call_found: true,
        }
    }

    #[test]
    fn charges_match_what_they_bill() {
        assert!(charge(&charged("sms_segments", 2)).is_none());
        assert!(charge(&charged("mms", 1)).is_none());
        assert!(charge(&charged("call_minutes", 4)).is_none());
        let gone = audit::Charge { message_found: false, segments: None, sent_at: None, ..charged("sms_segments", 2) };
        for (row, says) in [
            (charged("sms_segments", 3), "3 segments charged"),
            (audit::Charge { sent_at: None, ..charged("sms_segments", 2) }, "never sent"),
            (charged("mms", 2), "2 units charged"),
            (charged("call_minutes", 5), "5 minutes charged"),
            (audit::Charge { call_found: false, ..charged("call_minutes", 4) }, "charged for no call"),
            (gone, "charged for no message"),
            (charged("minutes", 5), "unknown kind"),
        ] {
            let f = charge(&row).expect("a finding");
            assert_eq!(f.rows[0], "usage:3");
            assert!(f.detail.contains(says), "{}", f.detail);
        }
        assert_eq!(
            charge(&charged("call_minutes", 5)).map(|f| f.rows),
            Some(vec!["usage:3".to_owned(), "calls:msg_1".to_owned()])
        );
    }

    #[test]
    fn an_event_missing_a_delivery_names_it_and_the_endpoint() {
        let owed = audit::Written {
            id: 4,
            event_id: "evt_1".to_owned(),
            event_type: "message.received".to_owned(),
            missing: None,
        };
        assert!(delivered(&owed).is_none());
        let f = delivered(&audit::Written { missing: Some("ep_2".to_owned()), ..owed }).expect("a finding");
        assert_eq!(f.check, "deliveries");
        assert_eq!(f.rows, ["outbound_events:evt_1", "webhook_endpoints:ep_2"]);
        assert!(f.detail.contains("has no delivery to endpoint ep_2"), "{}", f.detail);
    }

    #[test]
    fn a_second_success_is_named_with_the_first() {
        let first = audit::Attempt { id: 9, delivery_id: "dlv_1".to_owned(), succeeded: true, earlier: None };
        assert!(one_success(&first).is_none());
        let failed = audit::Attempt { succeeded: false, earlier: Some(5), ..first };
        assert!(one_success(&failed).is_none(), "a failure after a success is no second success");
        let again = audit::Attempt { succeeded: true, ..failed };
        let f = one_success(&again).expect("a finding");
        assert_eq!(f.rows, ["webhook_attempts:9", "webhook_attempts:5"]);
        assert!(f.detail.contains("delivery dlv_1 succeeded again"), "{}", f.detail);
    }

    #[test]
    fn a_page_stops_at_its_last_allowed_finding() {
        let finding = || Some(Finding { check: "charges", rows: vec!["usage:1".to_owned()], detail: String::new() });
        let page: Vec<(i64, Option<Finding>)> =
            (1..=200).map(|id| (id, if id % 3 == 0 { finding() } else { None })).collect();
        let (read, findings) = bounded(page);
        assert_eq!(findings.len(), FINDINGS_PER_RUN);
        assert_eq!(read.last(), Some(&(3 * FINDINGS_PER_RUN as i64)), "the position stops at the last finding");
        let (read, findings) = bounded((1..=10).map(|id| (id, None)).collect());
        assert_eq!((read.len(), findings.len()), (10, 0));
    }
}
