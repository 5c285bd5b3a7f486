//! The cron's retention step (docs/architecture.md, "Retention"): expired portal sessions, the
//! carrier events of every database of the dedupe log, and the delivered attempts, old customer
//! events and expired idempotency keys of every account database, each pruned by
//! its own store module from the watermarks `store::retention` keeps.

use exactly_core::Timestamp;

use crate::config::Retention;
use crate::error::EdgeError;
use crate::store::retention::BATCH;
use crate::store::{carrier_events, deliveries, idempotency, outbox};

/// What one run pruned.
#[derive(Debug, Default, serde::Serialize)]
pub struct Pruned {
    /// Carrier event payloads cleared.
    pub payloads: usize,
    /// Carrier event rows deleted.
    pub events: usize,
    /// Webhook attempts deleted.
    pub attempts: usize,
    /// Customer events deleted, with their deliveries and attempts.
    pub customer_events: usize,
    /// Idempotency keys past their 24 hours deleted.
    pub idempotency_keys: usize,
    /// Portal sessions expired for a day deleted (kept that day, so a link just expired is
    /// still told apart from one never minted in the logs).
    pub portal_sessions: usize,
}

/// The steps of one account database: delivered attempts, customer events, idempotency keys.
async fn prune_accounts(db: &worker::D1Database, retention: Retention, now: Timestamp) -> Result<Pruned, EdgeError> {
    Ok(Pruned {
        attempts: deliveries::prune_attempts(db, retention, now).await?,
        customer_events: outbox::prune_events(db, retention, now).await?,
        idempotency_keys: idempotency::prune(db, now, BATCH).await?,
        ..Pruned::default()
    })
}

/// One retention run: the carrier event steps in every database of the dedupe log (each keeps
/// its own watermarks), the attempts step in every account database.
pub async fn run(env: &worker::Env, retention: Retention, now: Timestamp) -> Result<Pruned, EdgeError> {
    let mut pruned = Pruned::default();
    let day_ago = Timestamp::from_unix_millis(now.unix_millis() - 86_400_000);
    let root = crate::store::d1(env, crate::bindings::DB)?;
    pruned.portal_sessions = crate::store::access::prune_sessions(&root, day_ago, BATCH).await?;
    let log = crate::store::carrier_events::Log::open(env)?;
    for binding in log.bindings() {
        let (payloads, events) = carrier_events::prune(&log.database(&binding)?, retention, now).await?;
        pruned.payloads += payloads;
        pruned.events += events;
    }
    // One account database that fails is logged and skipped; the others are still pruned.
    for binding in crate::store::routes::databases(env) {
        let pruning = match crate::store::routes::open(env, Some(binding.clone())) {
            Ok((_, db)) => prune_accounts(&db, retention, now).await,
            Err(e) => Err(e),
        };
        match pruning {
            Ok(these) => {
                pruned.attempts += these.attempts;
                pruned.customer_events += these.customer_events;
                pruned.idempotency_keys += these.idempotency_keys;
            }
            Err(e) => worker::console_error!(
                "{}",
                serde_json::json!({"cron": "retention", "database": binding, "error": e.to_string()})
            ),
        }
    }
    Ok(pruned)
}
