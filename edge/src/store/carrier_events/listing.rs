//! The operator's pages of carrier events in one state (`/admin/carrier_events`).

use exactly_core::{Provider, Timestamp};
use wasm_bindgen::JsValue;

use super::{key, Log, ID};
use crate::error::EdgeError;
use crate::store::{self as db, int};

impl Log {
    /// A page of carrier events in one state, newest first, across every database.
    ///
    /// The order and the cursor both use the integer rowid, unique across databases (its tag
    /// says which database wrote it). The row's `id` is selected in its public form, and an
    /// unqualified `id` in ORDER BY would name that text alias while the WHERE compared
    /// integers, so pages skipped rows; `e.id` names the column in both, and the cursor's id is
    /// bound as the integer inside it.
    pub async fn list(
        &self,
        state: EventState,
        cursor: Option<crate::store::Cursor>,
        limit: u32,
    ) -> Result<Vec<Listed>, EdgeError> {
        let condition = match state {
            EventState::Failed => "e.error IS NOT NULL",
            EventState::Pending => "e.processed_at IS NULL AND e.error IS NULL",
            EventState::Processed => "e.processed_at IS NOT NULL",
        };
        let (at, id) = match &cursor {
            Some(c) => {
                let rowid = key(&c.id);
                if rowid.is_null() {
                    return Err(EdgeError::invalid("cursor", "is not a cursor from a previous page"));
                }
                (int(c.created_at), rowid)
            }
            None => (JsValue::NULL, JsValue::NULL),
        };
        let mut all: Vec<Listed> = Vec::new();
        for binding in self.bindings() {
            let db = self.database(&binding)?;
            all.extend(
                db::all::<Listed>(db::stmt(
                    &db,
                    &format!(
                        "SELECT {ID} AS id, e.id AS rid, e.carrier, e.carrier_event_id, e.event_type, e.processed_at,
                             e.error, e.attempts, e.created_at FROM carrier_events e
                         WHERE {condition} AND (?1 IS NULL OR e.created_at < ?1 OR (e.created_at = ?1 AND e.id < ?2))
                         ORDER BY e.created_at DESC, e.id DESC LIMIT ?3"
                    ),
                    &[at.clone(), id.clone(), int(i64::from(limit))],
                )?)
                .await?,
            );
        }
        all.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.rid)));
        all.truncate(limit as usize);
        Ok(all)
    }
}

crate::store::row! {
    /// A carrier event as `/admin/carrier_events` lists it.
    #[derive(Debug)]
    pub struct Listed {
        pub id: String,
        /// The integer behind `id`, for ordering across databases.
        rid: i64,
        pub carrier: Provider,
        pub carrier_event_id: String,
        pub event_type: String,
        pub processed_at: Option<Timestamp>,
        pub error: Option<String>,
        pub attempts: i64,
        pub created_at: Timestamp,
    }
}

/// Where a carrier event stands, as `/admin/carrier_events?status=` filters it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventState {
    /// Recorded as a permanent failure (`error`).
    Failed,
    /// Neither processed nor failed.
    Pending,
    /// Its effects committed (`processed_at`).
    Processed,
}

impl EventState {
    /// The state named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "failed" => Some(EventState::Failed),
            "pending" => Some(EventState::Pending),
            "processed" => Some(EventState::Processed),
            _ => None,
        }
    }
}
