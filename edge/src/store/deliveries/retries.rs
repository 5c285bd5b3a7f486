//! Retry all failed (docs/contract.md §6, "The delivery log"): one operation re-queues an
//! endpoint's failed deliveries that a filter keeps, at most [`MAX_PER_RETRY`], each marked with
//! the operation's id; its progress is counted from those deliveries.

use exactly_core::Timestamp;
use worker::D1Database;

use super::LogFilter;
use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

/// The most deliveries one operation re-queues; the rest wait for another.
pub const MAX_PER_RETRY: u32 = 1000;

/// What a new operation is asked to do.
pub struct NewRetry<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub endpoint_id: &'a str,
    /// The filter as the API shows it (JSON).
    pub filter_json: &'a str,
    pub at: Timestamp,
}

/// Re-queues the endpoint's failed deliveries that `filter` keeps (by when the delivery was
/// created), oldest first, and records the operation, in one batch: a delivery is taken from
/// `failed` by one operation only (the status is in the guard), so two operations at once, or
/// one asked twice, re-send each delivery once. Returns the ids re-queued.
pub async fn start(db: &D1Database, retry: &NewRetry<'_>, filter: &LogFilter) -> Result<Vec<String>, EdgeError> {
    let mut args = vec![text(retry.id), text(retry.endpoint_id), text(retry.account_id), time(retry.at)];
    args.extend(filter.args());
    args.push(int(i64::from(MAX_PER_RETRY)));
    let take = db::stmt(
        db,
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?4, updated_at = ?4, retry_id = ?1
         WHERE status = 'failed' AND id IN (
             SELECT d.id FROM webhook_deliveries d JOIN outbound_events e ON e.id = d.event_id
             WHERE d.endpoint_id = ?2 AND d.account_id = ?3 AND d.status = 'failed'
               AND (?6 IS NULL OR e.type = ?6) AND (?7 IS NULL OR d.created_at >= ?7)
               AND (?8 IS NULL OR d.created_at < ?8) AND (?9 IS NULL OR e.resource_id = ?9)
               AND (?10 IS NULL OR d.event_id = ?10) AND (?5 IS NULL OR ?5 = 'failed')
             ORDER BY d.created_at, d.id LIMIT ?11)",
        &args,
    )?;
    let record = db::stmt(
        db,
        "INSERT INTO delivery_retries (id, account_id, endpoint_id, filter, total, created_at)
         SELECT ?1, ?2, ?3, ?4, COUNT(*), ?5 FROM webhook_deliveries WHERE retry_id = ?1",
        &[text(retry.id), text(retry.account_id), text(retry.endpoint_id), text(retry.filter_json), time(retry.at)],
    )?;
    let taken = db::stmt(db, "SELECT id FROM webhook_deliveries WHERE retry_id = ?1", &[text(retry.id)])?;
    let results = db::batch(db, vec![take, record, taken]).await?;
    results.get(2).map(db::ids).transpose().map(Option::unwrap_or_default)
}

crate::store::row! {
    /// An operation with its progress.
    #[derive(Debug)]
    pub struct Progress {
        pub id: String,
        pub endpoint_id: String,
        pub filter: String,
        pub total: i64,
        pub created_at: Timestamp,
        /// Of its deliveries (those no later operation took): how many wait, went, failed again.
        pub pending: i64,
        pub succeeded: i64,
        pub failed: i64,
    }
}

/// Operation `id` of the endpoint, with its deliveries counted by status.
pub async fn progress(db: &D1Database, endpoint_id: &str, id: &str) -> Result<Option<Progress>, EdgeError> {
    db::first(db::stmt(
        db,
        "SELECT r.id, r.endpoint_id, r.filter, r.total, r.created_at,
                (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.retry_id = r.id AND d.status = 'pending') AS pending,
                (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.retry_id = r.id AND d.status = 'succeeded')
                    AS succeeded,
                (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.retry_id = r.id AND d.status = 'failed') AS failed
         FROM delivery_retries r WHERE r.id = ?1 AND r.endpoint_id = ?2",
        &[text(id), text(endpoint_id)],
    )?)
    .await
}
