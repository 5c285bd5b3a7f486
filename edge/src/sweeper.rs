//! The cron sweeper: re-enqueues anything persisted but not yet done.

use exactly_core::Timestamp;
use worker::Env;

use crate::bindings;
use crate::carrier_events;
use crate::error::EdgeError;
use crate::jobs;
use crate::platform::now;

/// An event unprocessed for this long has lost its job (or is stuck behind retries).
const STALE_AFTER_MILLIS: i64 = 2 * 60 * 1000;
/// At most this many events are re-enqueued per run, so one run stays well inside its limits.
const BATCH: u32 = 100;

/// One sweep. Re-enqueueing an event that is in fact still queued is harmless: the processor's
/// guard makes the second run a no-op.
pub async fn sweep(env: &Env) -> Result<usize, EdgeError> {
    let db = env.d1(bindings::DB).map_err(|e| EdgeError::platform("DB binding", e))?;
    let cutoff = Timestamp::from_unix_millis(now().unix_millis() - STALE_AFTER_MILLIS);
    let ids = carrier_events::unprocessed(&db, cutoff, BATCH).await?;
    let count = ids.len();
    jobs::enqueue_many(env, ids).await?;
    Ok(count)
}
