//! Retention: a cron step that prunes, in bounded batches, what is no longer needed.
//!
//! - The payload of a settled carrier event after `RETENTION_PAYLOAD_DAYS` (default 30): the
//!   row, its dedupe key, stays, so a late duplicate is still answered 200 without an effect.
//! - The carrier event row itself after `RETENTION_EVENT_DAYS` (default 90, never under 3 days,
//!   longer than any carrier retries).
//! - The attempts of delivered customer webhooks after `RETENTION_ATTEMPT_DAYS` (default 30);
//!   attempts of failed deliveries stay for the dead-letter view.
//!
//! Rows are visited in insertion order (rowid) from a watermark kept in `retention_marks`, so
//! no index is added to the hot tables and each run reads at most [`BATCH`] rows per step. A
//! shard move that copies rows in under ids below a database's payload watermark moves the
//! watermark back below them (`carrier_events::Log::move_shards`), so they are pruned too.

use exactly_core::Timestamp;
use serde::Deserialize;
use worker::D1Database;

use crate::config::Retention;
use crate::error::EdgeError;
use crate::store::{self as db, int, text};

/// Rows visited per step per run.
pub const BATCH: i64 = 500;
const DAY_MILLIS: i64 = 86_400_000;

/// What one run pruned.
#[derive(Debug, Default, serde::Serialize)]
pub struct Pruned {
    /// Carrier event payloads cleared.
    pub payloads: usize,
    /// Carrier event rows deleted.
    pub events: usize,
    /// Webhook attempts deleted.
    pub attempts: usize,
}

#[derive(Deserialize)]
struct Visit {
    rid: f64,
    created_at: f64,
    settled: f64,
}

async fn mark(db: &D1Database, name: &str) -> Result<i64, EdgeError> {
    #[derive(Deserialize)]
    struct Mark {
        last_id: f64,
    }
    let row: Option<Mark> =
        db::first(db::stmt(db, "SELECT last_id FROM retention_marks WHERE name = ?1", &[text(name)])?).await?;
    Ok(row.map_or(0, |m| m.last_id as i64))
}

fn set_mark(db: &D1Database, name: &str, last_id: i64) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO retention_marks (name, last_id) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET last_id =
             excluded.last_id",
        &[text(name), int(last_id)],
    )
}

/// The last rowid of the leading run of `rows` that are older than `cutoff` and settled.
fn prefix_end(rows: &[Visit], cutoff: Timestamp) -> Option<i64> {
    rows.iter()
        .take_while(|r| (r.created_at as i64) < cutoff.unix_millis() && r.settled == 1.0)
        .last()
        .map(|r| r.rid as i64)
}

/// One retention run: the carrier event steps in every database of the dedupe log (each keeps
/// its own watermarks), the attempts step in every account database.
pub async fn run(env: &worker::Env, retention: Retention, now: Timestamp) -> Result<Pruned, EdgeError> {
    let mut pruned = Pruned::default();
    let log = crate::store::carrier_events::Log::open(env)?;
    for binding in log.bindings() {
        let (payloads, events) = prune_events(&log.database(&binding)?, retention, now).await?;
        pruned.payloads += payloads;
        pruned.events += events;
    }
    // One account database that fails is logged and skipped; the others are still pruned.
    for binding in crate::store::routes::databases(env) {
        let attempts = match crate::store::routes::open(env, Some(binding.clone())) {
            Ok((_, db)) => prune_attempts(&db, retention, now).await,
            Err(e) => Err(e),
        };
        match attempts {
            Ok(n) => pruned.attempts += n,
            Err(e) => worker::console_error!(
                "{}",
                serde_json::json!({"cron": "retention", "database": binding, "error": e.to_string()})
            ),
        }
    }
    Ok(pruned)
}

/// Payloads and rows of one database's carrier events; returns how many of each.
async fn prune_events(db: &D1Database, retention: Retention, now: Timestamp) -> Result<(usize, usize), EdgeError> {
    let (mut payloads, mut events) = (0, 0);
    let visit = "SELECT rowid AS rid, created_at, (processed_at IS NOT NULL OR error IS NOT NULL) AS settled
         FROM carrier_events";

    // Payloads: from the watermark onwards.
    let from = mark(db, "payloads").await?;
    let rows: Vec<Visit> =
        db::all(db::stmt(db, &format!("{visit} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"), &[int(from), int(BATCH)])?)
            .await?;
    let cutoff = Timestamp::from_unix_millis(now.unix_millis() - retention.payload_days * DAY_MILLIS);
    if let Some(upto) = prefix_end(&rows, cutoff) {
        let results = db::batch(
            db,
            vec![
                db::stmt(
                    db,
                    "UPDATE carrier_events SET payload = NULL WHERE rowid > ?1 AND rowid <= ?2 AND payload IS NOT NULL
                       AND created_at < ?3 AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                    &[int(from), int(upto), crate::store::time(cutoff)],
                )?,
                set_mark(db, "payloads", upto)?,
            ],
        )
        .await?;
        payloads = results.first().map(db::changes).unwrap_or(0);
    }

    // Rows: the oldest first; deletion keeps the front of the table the oldest remaining.
    let rows: Vec<Visit> = db::all(db::stmt(db, &format!("{visit} ORDER BY rowid LIMIT ?1"), &[int(BATCH)])?).await?;
    let cutoff = Timestamp::from_unix_millis(
        now.unix_millis() - retention.event_days.max(crate::config::MIN_EVENT_RETENTION_DAYS) * DAY_MILLIS,
    );
    if let Some(upto) = prefix_end(&rows, cutoff) {
        // Only settled rows older than the cutoff, whatever lies below `upto`: a row copied in by a
        // move may carry an id below rows it is younger than.
        let results = db::batch(
            db,
            vec![
                db::stmt(db, crate::store::carrier_events::ID_FLOOR, &[])?,
                db::stmt(
                    db,
                    "DELETE FROM carrier_events WHERE rowid <= ?1 AND created_at < ?2
                       AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                    &[int(upto), crate::store::time(cutoff)],
                )?,
            ],
        )
        .await?;
        events = results.get(1).map(db::changes).unwrap_or(0);
    }
    Ok((payloads, events))
}

/// Attempts of delivered webhooks; returns how many were deleted.
async fn prune_attempts(db: &D1Database, retention: Retention, now: Timestamp) -> Result<usize, EdgeError> {
    let mut attempts = 0;

    // Attempts of delivered webhooks: the window after the watermark, up to the cutoff.
    #[derive(Deserialize)]
    struct Attempt {
        id: f64,
        attempted_at: f64,
    }
    let from = mark(db, "attempts").await?;
    let window: Vec<Attempt> = db::all(db::stmt(
        db,
        "SELECT id, attempted_at FROM webhook_attempts WHERE id > ?1 ORDER BY id LIMIT ?2",
        &[int(from), int(BATCH)],
    )?)
    .await?;
    let cutoff = now.unix_millis() - retention.attempt_days * DAY_MILLIS;
    if let Some(upto) = window.iter().take_while(|a| (a.attempted_at as i64) < cutoff).last().map(|a| a.id as i64) {
        let results = db::batch(
            db,
            vec![
                db::stmt(
                    db,
                    // A lookup per attempt of the window, not `IN (SELECT ...)`, which would read
                    // every succeeded delivery (edge/tests/query_plans.rs).
                    "DELETE FROM webhook_attempts WHERE id > ?1 AND id <= ?2
                   AND EXISTS (SELECT 1 FROM webhook_deliveries d
                               WHERE d.id = webhook_attempts.delivery_id AND d.status = 'succeeded')",
                    &[int(from), int(upto)],
                )?,
                set_mark(db, "attempts", upto)?,
            ],
        )
        .await?;
        attempts = results.first().map(db::changes).unwrap_or(0);
    }
    Ok(attempts)
}
