//! The cron sweeper: re-enqueues anything persisted but not yet done.

use exactly_core::Timestamp;
use worker::Env;

use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self as jobs, Job};
use crate::store::carrier_events;
use crate::store::messages;

/// Work unfinished for this long has lost its job (or is stuck behind retries).
const STALE_AFTER_MILLIS: i64 = 2 * 60 * 1000;
/// At most this many items of each kind are re-enqueued per run, so one run stays well inside
/// its limits.
const BATCH: u32 = 100;

/// What one sweep re-enqueued.
pub struct Report {
    /// Carrier events neither processed nor failed.
    pub events: usize,
    /// Outbound messages not handed to the carrier, and scheduled ones now due.
    pub dispatches: usize,
    /// Customer webhook deliveries whose attempt is overdue.
    pub deliveries: usize,
    /// Inbound media items whose copy job was lost.
    pub media: usize,
}

/// A delivery attempt overdue by this long has lost its queue message.
const DELIVERY_GRACE_MILLIS: i64 = 60 * 1000;

/// One sweep. Re-enqueueing work that is in fact still queued is harmless: the guards make the
/// second run a no-op.
pub async fn sweep(env: &Env) -> Result<Report, EdgeError> {
    let db = crate::store::database(env)?;
    let cutoff = Timestamp::from_unix_millis(now().unix_millis() - STALE_AFTER_MILLIS);
    let events = carrier_events::unprocessed(&db, cutoff, BATCH).await?;
    let parked_horizon = Timestamp::from_unix_millis(now().unix_millis() - carrier_events::PARK_HORIZON_MILLIS);
    let expired = carrier_events::expire_parked(&db, parked_horizon, BATCH).await?;
    if expired > 0 {
        worker::console_error!(
            "{}",
            serde_json::json!({"cron": "sweep", "outcome": "receipts failed",
                "reason": "no message within 24 hours", "count": expired})
        );
    }
    let mut dispatches = messages::undispatched(&db, cutoff, BATCH).await?;
    dispatches.extend(messages::due(&db, now(), BATCH).await?);
    let overdue = crate::store::deliveries::overdue(
        &db,
        Timestamp::from_unix_millis(now().unix_millis() - DELIVERY_GRACE_MILLIS),
        BATCH,
    )
    .await?;
    let uncopied = crate::store::media::uncopied(&db, cutoff, BATCH).await?;
    let report =
        Report { events: events.len(), dispatches: dispatches.len(), deliveries: overdue.len(), media: uncopied.len() };
    crate::queues::deliver_many(env, overdue).await?;
    let mut work: Vec<Job> = events.into_iter().map(|id| Job::CarrierEvent { id }).collect();
    work.extend(dispatches.into_iter().map(|message_id| Job::Dispatch { message_id }));
    work.extend(uncopied.into_iter().map(|m| Job::CopyMedia { message_id: m.message_id, position: m.position }));
    jobs::enqueue_many(env, work).await?;
    Ok(report)
}

/// Registers the operator's endpoint from `OPERATOR_WEBHOOK_URL` and `OPERATOR_WEBHOOK_SECRET`
/// (both optional; unset, signals are recorded and listed but delivered to no operator). The URL
/// is checked like any endpoint's, and the secret must be a `whsec_` secret.
pub async fn register_operator(env: &Env) -> Result<bool, EdgeError> {
    use crate::bindings::vars;
    let (Some(url), Some(secret)) = (
        crate::config::optional(env, vars::OPERATOR_WEBHOOK_URL),
        crate::config::optional(env, vars::OPERATOR_WEBHOOK_SECRET),
    ) else {
        return Ok(false);
    };
    let allow_private = crate::config::get(env)?.allow_private_endpoints;
    let url = exactly_core::endpoint::EndpointUrl::parse(&url, allow_private).map_err(|problem| EdgeError::Config {
        variable: vars::OPERATOR_WEBHOOK_URL,
        problem: problem.message().to_owned(),
    })?;
    exactly_core::webhook::SigningSecret::parse(&secret).map_err(|_| EdgeError::Config {
        variable: vars::OPERATOR_WEBHOOK_SECRET,
        problem: "must be a whsec_ secret".into(),
    })?;
    let db = crate::store::database(env)?;
    crate::store::signals::register_operator(&db, url.as_str(), &secret, now()).await?;
    Ok(true)
}
