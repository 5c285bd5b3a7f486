//! The `carrier_events` table: one row per provider event id, guarded by
//! `UNIQUE (carrier, carrier_event_id)`.
//!
//! Duplicates are told apart by rows changed (`meta.changes`), never by error text. The id is
//! the rowid (`INTEGER PRIMARY KEY`), handed around as its decimal text. An event
//! is settled once: `processed_at` (its effects committed, in the same batch) or `error` (a
//! visible, permanent failure).

use exactly_core::{Provider, Timestamp, VerifiedEvent};
use serde::Deserialize;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

/// The public form of an event's key: `cev_` and 16 hex digits of its rowid, opaque to clients.
/// SQL writes it as `{ID}`; [`key`] reads it back.
const ID: &str = "('cev_' || printf('%016x', id))";

/// The rowid inside a public id (`cev_...`; the bare decimal that jobs enqueued by earlier
/// versions carry is read too), bound for a `WHERE id = ?`; NULL, matching nothing, for anything
/// else.
fn key(id: &str) -> JsValue {
    let rowid = match id.strip_prefix("cev_") {
        Some(hex) if hex.len() == 16 => i64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => id.parse::<i64>().ok(),
    };
    rowid.map_or(JsValue::NULL, int)
}

/// What storing a delivery found.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored {
    /// The first delivery of this provider event id: a new row.
    New { id: String },
    /// A later delivery of an event that is not settled yet; its job may have been lost.
    PendingDuplicate { id: String },
    /// A later delivery of an event that was already processed or visibly failed.
    SettledDuplicate { id: String },
}

/// A stored carrier event, as the processor reads it.
#[derive(Debug, Deserialize)]
pub struct Row {
    pub id: String,
    pub carrier: String,
    pub carrier_event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub processed_at: Option<f64>,
    pub error: Option<String>,
    pub attempts: f64,
    /// When the first delivery was stored (Unix ms).
    pub created_at: f64,
}

impl Row {
    /// Processed or failed: nothing more to do.
    pub fn settled(&self) -> bool {
        self.processed_at.is_some() || self.error.is_some()
    }
}

/// Inserts the event unless its provider event id is already stored, in one round trip.
///
/// The INSERT is `ON CONFLICT DO NOTHING`; its `changes` says whether this delivery was the
/// first. The SELECT in the same batch (one transaction) reads the row either way. Also returns
/// the rows D1 wrote (`meta.rows_written`, indexes included), for the logs and the benchmark.
pub async fn store(
    db: &D1Database,
    event: &VerifiedEvent,
    payload: &str,
    now: Timestamp,
) -> Result<(Stored, usize), EdgeError> {
    let e = event.event();
    let insert = db::stmt(
        db,
        "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at)
         VALUES (?1, ?2, ?3, ?4, 0, ?5)
         ON CONFLICT (carrier, carrier_event_id) DO NOTHING",
        &[text(e.provider.as_str()), text(&e.event_id), text(&e.event_type), text(payload), time(now)],
    )?;
    let select = db::stmt(
        db,
        &format!(
            "SELECT {ID} AS id, processed_at, error FROM carrier_events WHERE carrier = ?1 AND carrier_event_id = ?2"
        ),
        &[text(e.provider.as_str()), text(&e.event_id)],
    )?;
    // Read field by field from D1's own objects: this runs on every delivery (see batch_raw).
    let results = db::batch_raw(db, &[insert, select]).await?;
    let [inserted, selected] = results.as_slice() else {
        return Err(EdgeError::Unavailable("store carrier event: short batch".into()));
    };
    let row =
        db::first_row(selected).ok_or_else(|| EdgeError::Unavailable("carrier event vanished after insert".into()))?;
    let id = db::field(&row, "id")
        .as_string()
        .ok_or_else(|| EdgeError::Unavailable("carrier event without an id".into()))?;
    let settled = !db::field(&row, "processed_at").is_null() || !db::field(&row, "error").is_null();
    let rows_written = db::meta_count(inserted, "rows_written") + db::meta_count(selected, "rows_written");
    let stored = if db::meta_count(inserted, "changes") == 1 {
        Stored::New { id }
    } else if settled {
        Stored::SettledDuplicate { id }
    } else {
        Stored::PendingDuplicate { id }
    };
    Ok((stored, rows_written))
}

/// Stores a fact the platform learned by asking the carrier (reconciliation), in the carrier's
/// own format under its own dedupe key, unless that key is stored already. Returns the row's id
/// when this call stored it: a fact learned twice, or learned after the carrier's own webhook
/// with the same key, is stored once.
pub async fn store_learned(
    db: &D1Database,
    carrier: &str,
    carrier_event_id: &str,
    event_type: &str,
    payload: &str,
    now: Timestamp,
) -> Result<Option<String>, EdgeError> {
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at)
                 VALUES (?1, ?2, ?3, ?4, 0, ?5)
                 ON CONFLICT (carrier, carrier_event_id) DO NOTHING",
                &[text(carrier), text(carrier_event_id), text(event_type), text(payload), time(now)],
            )?,
            db::stmt(
                db,
                &format!("SELECT {ID} AS id FROM carrier_events WHERE carrier = ?1 AND carrier_event_id = ?2"),
                &[text(carrier), text(carrier_event_id)],
            )?,
        ],
    )
    .await?;
    if results.first().map(db::changes) != Some(1) {
        return Ok(None);
    }
    Ok(results.get(1).map(db::ids).transpose()?.and_then(|ids| ids.into_iter().next()))
}

/// One stored event.
pub async fn load(db: &D1Database, id: &str) -> Result<Option<Row>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!(
            "SELECT {ID} AS id, carrier, carrier_event_id, event_type, payload, processed_at, error,
             attempts, created_at FROM carrier_events WHERE id = ?1"
        ),
        &[key(id)],
    )?)
    .await
}

/// The statement that marks the event processed, for the batch that commits its effects. The
/// guard `processed_at IS NULL` makes a second run change nothing; `attempts` counts the runs
/// that did work.
pub fn mark_processed_stmt(db: &D1Database, id: &str, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS
             NULL AND error IS NULL",
        &[key(id), time(now)],
    )
}

/// Marks an event with no effects processed. Returns whether this run applied it.
pub async fn mark_processed(db: &D1Database, id: &str, now: Timestamp) -> Result<bool, EdgeError> {
    Ok(db::run(mark_processed_stmt(db, id, now)?).await? == 1)
}

/// Records a permanent failure on an event that is not settled, once, with its
/// `carrier_event.failed` signal in the same batch.
pub async fn mark_failed(db: &D1Database, id: &str, error: &str) -> Result<Failed, EdgeError> {
    let now = crate::platform::now();
    let data = serde_json::json!({ "carrier_event_id": id, "error": error });
    let signal = crate::store::signals::Signal::new("carrier_event.failed", id, None, data, now)?;
    let mut statements = vec![db::stmt(
        db,
        "UPDATE carrier_events SET error = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS NULL
             AND error IS NULL",
        &[key(id), text(error)],
    )?];
    statements.extend(signal.statements(db, now)?);
    let results = db::batch(db, statements).await?;
    Ok(Failed { changed: results.first().map(db::changes) == Some(1), signals: signal.event_ids() })
}

/// A failure recorded (or found recorded before), with the `carrier_event.failed` signal's
/// event ids to announce.
#[derive(Debug)]
pub struct Failed {
    /// This call recorded it.
    pub changed: bool,
    /// The signal's events (written only if `changed`).
    pub signals: Vec<String>,
}

/// Clears the recorded failure of events that are not processed, so a re-driven job runs them
/// afresh (with a fresh retry count).
pub async fn clear_failure(db: &D1Database, ids: &[String]) -> Result<(), EdgeError> {
    if ids.is_empty() {
        return Ok(());
    }
    let statements = ids
        .iter()
        .map(|id| {
            db::stmt(
                db,
                "UPDATE carrier_events SET error = NULL, attempts = 0 WHERE id = ?1 AND processed_at IS NULL",
                &[key(id)],
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    db::batch(db, statements).await?;
    Ok(())
}

/// Parks a receipt whose message is not recorded yet: it waits on `carrier_message_id` and is
/// not retried. Refused (false) when the message exists by now, so no wake-up can be missed:
/// the check and the park are one statement, and the batch that records a send wakes what is
/// parked on its id in one statement too ([`wake_stmt`]).
pub async fn park(db: &D1Database, id: &str, carrier: Provider, carrier_message_id: &str) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE carrier_events SET waiting_for = ?2
         WHERE id = ?1 AND processed_at IS NULL AND error IS NULL
           AND NOT EXISTS (SELECT 1 FROM messages WHERE carrier = ?3 AND carrier_message_id = ?2)",
        &[key(id), text(carrier_message_id), text(carrier.as_str())],
    )?)
    .await?;
    Ok(changed == 1)
}

/// For the batch that records a send: un-parks the receipts waiting on its carrier id and
/// returns their ids (`RETURNING id`), to enqueue once the batch committed.
pub fn wake_stmt(db: &D1Database, carrier: &str, carrier_message_id: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            "UPDATE carrier_events SET waiting_for = NULL WHERE carrier = ?1 AND waiting_for = ?2 RETURNING {ID} AS id"
        ),
        &[text(carrier), text(carrier_message_id)],
    )
}

/// The ids a [`wake_stmt`] returned.
pub fn woken(result: &worker::D1Result) -> Result<Vec<String>, EdgeError> {
    db::ids(result)
}

/// How long a parked receipt waits for its message before it is recorded as failed.
pub const PARK_HORIZON_MILLIS: i64 = 24 * 3600 * 1000;

/// Receipts parked since before `older_than` whose message never appeared: recorded as failed,
/// visibly, at most `limit` per run. Returns how many.
pub async fn expire_parked(db: &D1Database, older_than: Timestamp, limit: u32) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE carrier_events
         SET error = 'no message with carrier id ' || waiting_for || ' appeared within 24 hours', waiting_for = NULL
         WHERE id IN (SELECT id FROM carrier_events WHERE waiting_for IS NOT NULL AND created_at < ?1 LIMIT ?2)
           AND processed_at IS NULL AND error IS NULL",
        &[time(older_than), int(i64::from(limit))],
    )?)
    .await
}

/// Events stored before `older_than` that are neither processed nor failed nor parked: their
/// job was lost or is stuck. Oldest first, at most `limit`.
pub async fn unprocessed(db: &D1Database, older_than: Timestamp, limit: u32) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        &format!(
            "SELECT {ID} AS id FROM carrier_events
         WHERE processed_at IS NULL AND error IS NULL AND created_at < ?1 AND waiting_for IS NULL
         ORDER BY created_at LIMIT ?2"
        ),
        &[time(older_than), int(i64::from(limit))],
    )?)
    .await
}

/// A carrier event as `/admin/carrier_events` lists it.
#[derive(Debug, Deserialize)]
pub struct Listed {
    pub id: String,
    pub carrier: String,
    pub carrier_event_id: String,
    pub event_type: String,
    pub processed_at: Option<f64>,
    pub error: Option<String>,
    pub attempts: f64,
    pub created_at: f64,
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

/// A page of carrier events in one state (`failed`, `pending` or `processed`), newest first.
///
/// The order and the cursor both use the integer rowid. The row's `id` is selected in its public
/// form, and an unqualified `id` in ORDER BY would name that text alias while the WHERE compared
/// integers, so pages skipped rows; `carrier_events.id` names the column in both, and the
/// cursor's id is bound as the integer inside it.
pub async fn list(
    db: &D1Database,
    state: EventState,
    cursor: Option<crate::store::Cursor>,
    limit: u32,
) -> Result<Vec<Listed>, EdgeError> {
    let condition = match state {
        EventState::Failed => "error IS NOT NULL",
        EventState::Pending => "processed_at IS NULL AND error IS NULL",
        EventState::Processed => "processed_at IS NOT NULL",
    };
    let (at, id) = match &cursor {
        Some(c) => {
            let rowid = key(&c.id);
            if rowid.is_null() {
                return Err(EdgeError::invalid("cursor", "is not a cursor from a previous page"));
            }
            (crate::store::int(c.created_at), rowid)
        }
        None => (wasm_bindgen::JsValue::NULL, wasm_bindgen::JsValue::NULL),
    };
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {ID} AS id, carrier, carrier_event_id, event_type, processed_at, error, attempts,
                 created_at FROM carrier_events
             WHERE {condition} AND (?1 IS NULL OR created_at < ?1 OR (created_at = ?1 AND carrier_events.id < ?2))
             ORDER BY created_at DESC, carrier_events.id DESC LIMIT ?3"
        ),
        &[at, id, int(i64::from(limit))],
    )?)
    .await
}
