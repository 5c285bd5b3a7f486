//! The `carrier_events` table: one row per provider event id, guarded by
//! `UNIQUE (carrier, carrier_event_id)`.
//!
//! Duplicates are told apart by rows changed (`meta.changes`), never by error text.

use exactly_core::{Timestamp, VerifiedEvent};
use serde::Deserialize;
use wasm_bindgen::JsValue;
use worker::D1Database;

use crate::error::EdgeError;
use crate::platform::millis_arg;

/// What storing a delivery found.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored {
    /// The first delivery of this provider event id: a new row.
    New { id: String },
    /// A later delivery of an event that is not processed yet; its job may have been lost.
    PendingDuplicate { id: String },
    /// A later delivery of an event that was already processed (or visibly failed).
    SettledDuplicate { id: String },
}

#[derive(Deserialize)]
struct KeyRow {
    id: String,
    processed_at: Option<f64>,
    error: Option<String>,
}

/// Inserts the event unless its provider event id is already stored, in one round trip.
///
/// The INSERT is `ON CONFLICT DO NOTHING`; its `changes` says whether this delivery was the
/// first. The SELECT in the same batch (one transaction) reads the row either way.
pub async fn store(
    db: &D1Database,
    new_id: &str,
    event: &VerifiedEvent,
    payload: &str,
    now: Timestamp,
) -> Result<Stored, EdgeError> {
    let e = event.event();
    let carrier = JsValue::from_str(e.provider.as_str());
    let key = JsValue::from_str(&e.event_id);
    let insert = db
        .prepare(
            "INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, attempts, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)
             ON CONFLICT (carrier, carrier_event_id) DO NOTHING",
        )
        .bind(&[
            JsValue::from_str(new_id),
            carrier.clone(),
            key.clone(),
            JsValue::from_str(&e.event_type),
            JsValue::from_str(payload),
            millis_arg(now),
        ])
        .map_err(|err| EdgeError::platform("bind insert", err))?;
    let select = db
        .prepare(
            "SELECT id, processed_at, error FROM carrier_events
             WHERE carrier = ?1 AND carrier_event_id = ?2",
        )
        .bind(&[carrier, key])
        .map_err(|err| EdgeError::platform("bind select", err))?;

    let results = db
        .batch(vec![insert, select])
        .await
        .map_err(|err| EdgeError::platform("store carrier event", err))?;
    let [inserted, selected] = results.as_slice() else {
        return Err(EdgeError::Unavailable("store carrier event: short batch".into()));
    };
    let changes = inserted
        .meta()
        .map_err(|err| EdgeError::platform("insert meta", err))?
        .and_then(|m| m.changes)
        .unwrap_or(0);
    let row = selected
        .results::<KeyRow>()
        .map_err(|err| EdgeError::platform("read carrier event", err))?
        .into_iter()
        .next()
        .ok_or_else(|| EdgeError::Unavailable("carrier event vanished after insert".into()))?;
    Ok(if changes == 1 {
        Stored::New { id: row.id }
    } else if row.processed_at.is_none() && row.error.is_none() {
        Stored::PendingDuplicate { id: row.id }
    } else {
        Stored::SettledDuplicate { id: row.id }
    })
}

/// Marks the event processed. The guard `processed_at IS NULL` makes a second run change
/// nothing; `attempts` counts the processing runs that took effect.
///
/// Returns whether this run was the one that applied.
pub async fn mark_processed(db: &D1Database, id: &str, now: Timestamp) -> Result<bool, EdgeError> {
    let result = db
        .prepare(
            "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1
             WHERE id = ?1 AND processed_at IS NULL",
        )
        .bind(&[JsValue::from_str(id), millis_arg(now)])
        .map_err(|err| EdgeError::platform("bind mark processed", err))?
        .run()
        .await
        .map_err(|err| EdgeError::platform("mark processed", err))?;
    Ok(changes(&result)? == 1)
}

/// Records a permanent failure on an event that is not processed, once.
pub async fn mark_failed(db: &D1Database, id: &str, error: &str) -> Result<bool, EdgeError> {
    let result = db
        .prepare(
            "UPDATE carrier_events SET error = ?2
             WHERE id = ?1 AND processed_at IS NULL AND error IS NULL",
        )
        .bind(&[JsValue::from_str(id), JsValue::from_str(error)])
        .map_err(|err| EdgeError::platform("bind mark failed", err))?
        .run()
        .await
        .map_err(|err| EdgeError::platform("mark failed", err))?;
    Ok(changes(&result)? == 1)
}

#[derive(Deserialize)]
struct IdRow {
    id: String,
}

/// Events stored before `older_than` that are neither processed nor failed: their job was
/// lost or is stuck. Oldest first, at most `limit`.
pub async fn unprocessed(
    db: &D1Database,
    older_than: Timestamp,
    limit: u32,
) -> Result<Vec<String>, EdgeError> {
    let rows = db
        .prepare(
            "SELECT id FROM carrier_events
             WHERE processed_at IS NULL AND error IS NULL AND created_at < ?1
             ORDER BY created_at LIMIT ?2",
        )
        .bind(&[millis_arg(older_than), JsValue::from_f64(f64::from(limit))])
        .map_err(|err| EdgeError::platform("bind unprocessed", err))?
        .all()
        .await
        .map_err(|err| EdgeError::platform("select unprocessed", err))?
        .results::<IdRow>()
        .map_err(|err| EdgeError::platform("read unprocessed", err))?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

fn changes(result: &worker::D1Result) -> Result<usize, EdgeError> {
    Ok(result
        .meta()
        .map_err(|err| EdgeError::platform("result meta", err))?
        .and_then(|m| m.changes)
        .unwrap_or(0))
}
