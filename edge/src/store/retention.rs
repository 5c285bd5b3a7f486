//! Retention: a cron step that prunes, in bounded batches, what is no longer needed.
//!
//! - The payload of a settled carrier event after `RETENTION_PAYLOAD_DAYS` (default 30): the
//!   row, its dedupe key, stays, so a late duplicate is still answered 200 without an effect.
//! - The carrier event row itself after `RETENTION_EVENT_DAYS` (default 90, never under 3 days,
//!   longer than any carrier retries).
//! - The attempts of delivered customer webhooks after `RETENTION_ATTEMPT_DAYS` (default 30);
//!   attempts of failed deliveries stay for the dead-letter view.
//! - Customer events after `RETENTION_CUSTOMER_EVENT_DAYS` (default 90), with their deliveries and
//!   attempts, unless a delivery of theirs is still pending.
//!
//! This module keeps the steps' watermarks in `retention_marks`, which it alone writes; each
//! table's own module prunes it ([`crate::store::carrier_events::prune_payloads`] and
//! [`crate::store::carrier_events::prune_rows`],
//! [`crate::store::deliveries::prune_attempts`], [`crate::store::outbox::prune_events`]), and the
//! cron runs the steps
//! (`work::retention`).
//!
//! Rows are visited in insertion order (rowid) from a watermark kept in `retention_marks`, so
//! no index is added to the hot tables and each page reads at most [`BATCH`] rows. A
//! shard move that copies rows in under ids below a database's payload watermark moves the
//! watermark back below them (`carrier_events::Log::move_shards`), so they are pruned too.

use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, int, text};

/// Rows visited per page of a step. A step whose page was full goes on with its next page in a
/// job of its own (`work::cron`), so a backlog drains as fast as pages run, not a page a minute.
pub const BATCH: i64 = 1000;

/// What one page of a retention step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// Rows deleted (or payloads cleared).
    pub pruned: usize,
    /// Whether the next page has work at once: this one was full and all of it past its cutoff.
    pub more: bool,
}

impl Page {
    /// The page of a step that deletes at most `limit` rows in one statement and keeps no
    /// watermark: more may wait when it deleted all it could.
    pub fn of_deleted(pruned: usize, limit: i64) -> Self {
        Page { pruned, more: i64::try_from(pruned).is_ok_and(|n| n >= limit) }
    }
}
/// Milliseconds in a day.
pub const DAY_MILLIS: i64 = 86_400_000;

/// Where the step `name` goes on from: the last id it visited.
pub async fn mark(db: &D1Database, name: &str) -> Result<i64, EdgeError> {
    crate::store::row! {
        struct Mark {
            last_id: i64,
        }
    }
    let row: Option<Mark> =
        db::first(db::stmt(db, "SELECT last_id FROM retention_marks WHERE name = ?1", &[text(name)])?).await?;
    Ok(row.map_or(0, |m| m.last_id))
}

/// The statement that moves the step `name`'s mark from `from` (where its page began) to
/// `last_id`, only if it is still at `from`: of two pages of one step that ran at once (a tick's
/// chain still going when the next tick starts one) one moves it; and a mark a shard move lowered
/// meanwhile ([`lower_payload_mark`]) stays lowered, so the rows it copied in are visited. Changes
/// one row when it moved.
pub fn set_mark(
    db: &D1Database,
    name: &str,
    from: i64,
    last_id: i64,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO retention_marks (name, last_id) VALUES (?1, ?3)
         ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id WHERE last_id = ?2",
        &[text(name), int(from), int(last_id)],
    )
}

/// Raises the database's carrier event id floor to its highest id, for the batch that deletes
/// rows (a move's removals, retention): an id once given out is never given out again, even
/// after the rows above it are gone (`carrier_events`'s `NEXT_ID` reads it).
pub fn raise_id_floor(db: &D1Database) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO retention_marks (name, last_id)
         SELECT 'id_floor', COALESCE(MAX(id), 0) FROM carrier_events WHERE true
         ON CONFLICT (name) DO UPDATE SET last_id = MAX(last_id, excluded.last_id)",
        &[],
    )
}

/// The statement that moves the payload step's watermark back below `lowest`, for the batch
/// that copies carrier events in under ids from `lowest` on: retention visits a database's rows
/// from that watermark on, so a row copied in below it would keep its payload past the retention.
pub fn lower_payload_mark(db: &D1Database, lowest: i64) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(db, "UPDATE retention_marks SET last_id = MIN(last_id, ?1 - 1) WHERE name = 'payloads'", &[int(lowest)])
}
