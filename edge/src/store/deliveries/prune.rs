//! Retention of webhook attempts, run by `store::retention` from the watermark it keeps.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::config::Retention;
use crate::error::EdgeError;
use crate::store::{self as db, int, retention};

/// One page of the retention of webhook attempts: the attempts of delivered webhooks after
/// `RETENTION_ATTEMPT_DAYS`, from the watermark `store::retention` keeps.
pub async fn prune_attempts(db: &D1Database, limits: Retention, now: Timestamp) -> Result<retention::Page, EdgeError> {
    // Attempts of delivered webhooks: the window after the watermark, up to the cutoff.
    crate::store::row! {
        struct Attempt {
            id: i64,
            attempted_at: Timestamp,
        }
    }
    let from = retention::mark(db, "attempts").await?;
    let window: Vec<Attempt> = db::all(db::stmt(
        db,
        "SELECT id, attempted_at FROM webhook_attempts WHERE id > ?1 ORDER BY id LIMIT ?2",
        &[int(from), int(retention::BATCH)],
    )?)
    .await?;
    let cutoff = now.unix_millis() - limits.attempt_days * retention::DAY_MILLIS;
    let upto = window.iter().take_while(|a| a.attempted_at.unix_millis() < cutoff).last().map(|a| a.id);
    let Some(upto) = upto else { return Ok(retention::Page::default()) };
    let more = window.len() == retention::BATCH as usize && window.last().map(|a| a.id) == Some(upto);
    {
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
                retention::set_mark(db, "attempts", from, upto)?,
            ],
        )
        .await?;
        let moved = results.get(1).map(db::changes).unwrap_or(0) == 1;
        Ok(retention::Page { pruned: results.first().map(db::changes).unwrap_or(0), more: moved && more })
    }
}

/// The deliveries and attempts of the customer events with rowid in (`from`, `upto`] none of whose
/// deliveries is pending (held, waiting in a line or behind a circuit all count as pending): the
/// two statements that delete them, attempts first, for the batch that then deletes the events
/// ([`crate::store::outbox::prune_events`]).
pub fn of_settled_events(db: &D1Database, from: i64, upto: i64) -> Result<[worker::D1PreparedStatement; 2], EdgeError> {
    Ok([
        db::stmt(
            db,
            "DELETE FROM webhook_attempts WHERE delivery_id IN
                 (SELECT d.id FROM outbound_events o JOIN webhook_deliveries d ON d.event_id = o.id
                  WHERE o.rowid > ?1 AND o.rowid <= ?2
                    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.event_id = o.id AND p.status = 'pending'))",
            &[int(from), int(upto)],
        )?,
        db::stmt(
            db,
            "DELETE FROM webhook_deliveries WHERE event_id IN
                 (SELECT o.id FROM outbound_events o
                  WHERE o.rowid > ?1 AND o.rowid <= ?2
                    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.event_id = o.id AND p.status = 'pending'))",
            &[int(from), int(upto)],
        )?,
    ])
}

/// The statement that forgets what endpoints answered to the deliveries of the events about the
/// resources `ids` (a JSON array): an answer may repeat the body it was sent. An erasure.
pub fn erase_answers(db: &D1Database, ids: &str) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_attempts SET response_body = NULL, response_headers = NULL
         WHERE delivery_id IN (SELECT d.id FROM outbound_events o JOIN webhook_deliveries d ON d.event_id = o.id
                               WHERE o.resource_id IN (SELECT value FROM json_each(?1)))",
        &[crate::store::text(ids)],
    )
}
