//! The transactional outbox: every customer event is inserted in the same D1 batch as the
//! change it announces, conditioned on that change having happened (`WHERE changes() = 1`, the
//! statement just before it in the batch being the guarded UPDATE or INSERT).

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
