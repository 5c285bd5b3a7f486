//! The transactional outbox: every customer event is inserted in the same D1 batch as the
//! change it announces, conditioned on that change having happened (`WHERE changes() = 1`, the
//! statement just before it in the batch being the guarded UPDATE or INSERT). The same batch
//! fans the event out: one `webhook_deliveries` row per enabled endpoint of the account
//! subscribed to its type, written only if the event row was (its id is new in this batch).

use exactly_core::Timestamp;
use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::store::Cursor;

use crate::error::EdgeError;
use crate::platform::new_id;
use crate::store as db;

/// A customer event about to be written.
#[derive(Clone, Debug)]
pub struct Event {
    /// `evt_...`, the `webhook-id` of every delivery of it.
    pub id: String,
    /// The account it belongs to.
    pub account_id: String,
    /// `message.delivered`, `call.completed`, ...
    pub event_type: &'static str,
    /// The message or call it is about.
    pub resource_id: String,
    /// The whole webhook body (docs/contract.md §6).
    pub payload: String,
}

impl Event {
    /// A new event whose `data` is the resource as the API shows it after the change.
    pub fn new(
        account_id: &str,
        event_type: &'static str,
        resource_id: &str,
        data: Value,
        now: Timestamp,
    ) -> Result<Self, EdgeError> {
        let id = new_id("evt")?;
        let payload = json!({
            "id": id, "type": event_type, "created_at": now.to_rfc3339(), "account_id": account_id, "data": data,
        })
        .to_string();
        Ok(Event { id, account_id: account_id.to_owned(), event_type, resource_id: resource_id.to_owned(), payload })
    }

    /// The INSERT that writes this event only if the previous statement of the batch changed
    /// exactly one row. At most one event of a type per resource.
    pub fn insert_if_changed(&self, db: &D1Database, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        db::stmt(
            db,
            "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6 WHERE changes() = 1
             ON CONFLICT (resource_id, type) DO NOTHING",
            &[
                db::text(&self.id),
                db::text(&self.account_id),
                db::text(self.event_type),
                db::text(&self.resource_id),
                db::text(&self.payload),
                db::time(now),
            ],
        )
    }
}

impl Event {
    /// The fan-out, for the same batch: one pending delivery per enabled endpoint subscribed to
    /// this event's type, only if this batch inserted the event. It does not use `changes()`,
    /// so it may stand anywhere after the event's INSERT.
    pub fn fan_out(&self, db: &D1Database, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        db::stmt(
            db,
            &format!(
                "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts,
                     next_attempt_at, created_at, updated_at)
                 SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'initial', 'pending', 0, ?3,
                     ?3, ?3
                 {SUBSCRIBED} AND ?5 IS NULL
                   AND EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1)
                 ON CONFLICT DO NOTHING"
            ),
            &[db::text(&self.id), db::text(&self.account_id), db::time(now), db::text(self.event_type), JsValue::NULL],
        )
    }
}

/// The endpoints a delivery of an event goes to: the account's enabled endpoints subscribed to
/// its type (`?4`), or only the one named (`?5`, when not NULL). The fan-out and a replay share
/// it, so they can never disagree on who is subscribed.
const SUBSCRIBED: &str = "FROM webhook_endpoints e
     WHERE e.account_id = ?2 AND e.enabled = 1 AND (?5 IS NULL OR e.id = ?5)
       AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ?4)";

/// A replay: a new delivery (`kind = 'replay'`, same event, so the same `webhook-id`) to every
/// subscribed endpoint, or to `endpoint_id` only. Returns the new deliveries' ids.
pub async fn replay(
    db: &D1Database,
    event_id: &str,
    account_id: &str,
    event_type: &str,
    endpoint_id: Option<&str>,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    let created: Vec<Id> = db::all(db::stmt(
        db,
        &format!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts,
                 next_attempt_at, created_at, updated_at)
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'replay', 'pending', 0, ?3, ?3, ?3
             {SUBSCRIBED}
             RETURNING id"
        ),
        &[db::text(event_id), db::text(account_id), db::time(now), db::text(event_type), db::opt_text(endpoint_id)],
    )?)
    .await?;
    Ok(created.into_iter().map(|c| c.id).collect())
}

/// A stored customer event: its id, the webhook body, when it was written.
#[derive(Debug, serde::Deserialize)]
pub struct Stored {
    pub id: String,
    pub payload: String,
    pub created_at: f64,
}

/// One event of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Stored>, EdgeError> {
    db::first(db::stmt(
        db,
        "SELECT id, payload, created_at FROM outbound_events WHERE id = ?1 AND account_id = ?2",
        &[db::text(id), db::text(account_id)],
    )?)
    .await
}

/// A page of an account's events, newest first, of one type or all.
pub async fn list(
    db: &D1Database,
    account_id: &str,
    event_type: Option<&str>,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Stored>, EdgeError> {
    let (at, after) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        "SELECT id, payload, created_at FROM outbound_events WHERE account_id = ?1 AND (?2 IS NULL OR type = ?2)
           AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
         ORDER BY created_at DESC, id DESC LIMIT ?5",
        &[db::text(account_id), db::opt_text(event_type), at, after, db::int(i64::from(limit))],
    )?)
    .await
}

/// What a guarded change committed: whether it happened, and the customer event it wrote.
#[derive(Debug, Default)]
pub struct Change {
    /// The guarded statement changed a row.
    pub changed: bool,
    /// The event written with it, whose deliveries are now pending.
    pub event: Option<String>,
}

impl Change {
    /// The change of a batch whose first statement was the guard and which wrote `event`.
    pub fn of(results: &[worker::D1Result], event: Option<&Event>) -> Self {
        let changed = results.first().map(db::changes) == Some(1);
        Change { changed, event: if changed { event.map(|e| e.id.clone()) } else { None } }
    }
}
