//! The transactional outbox: every customer event is inserted in the same D1 batch as the
//! change it announces, conditioned on that change having happened (`WHERE changes() = 1`, the
//! statement just before it in the batch being the guarded UPDATE or INSERT). The same batch
//! fans the event out: one `webhook_deliveries` row per enabled endpoint of the account
//! subscribed to its type, written only if the event row was (its id is new in this batch).

use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::{D1Database, D1PreparedStatement};

use crate::db;
use crate::error::EdgeError;
use crate::platform::new_id;

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
    /// The whole webhook body (contract §6).
    pub payload: String,
}

impl Event {
    /// A new event whose `data` is the resource as the API shows it after the change.
    pub fn new(account_id: &str, event_type: &'static str, resource_id: &str, data: Value, now: Timestamp) -> Result<Self, EdgeError> {
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
            &[db::text(&self.id), db::text(&self.account_id), db::text(self.event_type), db::text(&self.resource_id), db::text(&self.payload), db::time(now)],
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
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at, created_at, updated_at)
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'initial', 'pending', 0, ?3, ?3, ?3
             FROM webhook_endpoints e
             WHERE e.account_id = ?2 AND e.enabled = 1
               AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ?4)
               AND EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1)
             ON CONFLICT DO NOTHING",
            &[db::text(&self.id), db::text(&self.account_id), db::time(now), db::text(self.event_type)],
        )
    }
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
