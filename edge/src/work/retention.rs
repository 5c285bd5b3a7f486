//! The cron's retention steps (docs/architecture.md, "Retention"): expired portal sessions (in
//! `DB`), the carrier events of each database of the dedupe log (payloads, then rows), and the
//! delivered attempts, old customer events and expired idempotency keys of each account
//! database. Each page of a step is one job (`work::cron`), pruned by the table's own store
//! module from the watermarks `store::retention` keeps.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::config::Retention;
use crate::error::EdgeError;
use crate::queues::Step;
use crate::store::retention::{Page, BATCH};
use crate::store::{access, carrier_events, deliveries, idempotency, outbox};

/// One page of the retention step `step` in the database `db`.
pub async fn page(db: &D1Database, step: Step, retention: Retention, now: Timestamp) -> Result<Page, EdgeError> {
    match step {
        Step::Sessions => {
            // Kept a day after they expire, so a link just expired is still told apart from one
            // never minted in the logs.
            let day_ago = Timestamp::from_unix_millis(now.unix_millis() - crate::store::retention::DAY_MILLIS);
            Ok(Page::of_deleted(access::prune_sessions(db, day_ago, BATCH).await?, BATCH))
        }
        Step::Payloads => carrier_events::prune_payloads(db, retention, now).await,
        Step::CarrierEvents => carrier_events::prune_rows(db, retention, now).await,
        Step::Attempts => deliveries::prune_attempts(db, retention, now).await,
        Step::CustomerEvents => outbox::prune_events(db, retention, now).await,
        Step::IdempotencyKeys => Ok(Page::of_deleted(idempotency::prune(db, now, BATCH).await?, BATCH)),
    }
}
