//! What `/admin/metrics` reports, each figure from an indexed query (a partial index, a rowid
//! bound or an index's first entry), so the cost stays flat as the tables grow.

use std::rc::Rc;

use exactly_core::Timestamp;

use crate::config::Config;
use crate::error::EdgeError;
use crate::store as db;

crate::store::row! {
    /// The figures, as D1 returns them.
    #[derive(Debug, Default)]
    pub struct Figures {
        /// Carrier events ever stored: the sum of each database's sequence (its highest id, or its
        /// id floor; retention does not lower it). Rows copied by a shard move count in the
        /// sequence of the database they came from and move the target's on too, so after a move
        /// the figure runs ahead of the true count.
        pub events_ingested: Option<i64>,
        /// Carrier events neither processed nor failed.
        pub events_pending: i64,
        /// Carrier events recorded as failed (and not pruned).
        pub events_failed: i64,
        /// Receipts waiting for their message's send result.
        pub events_parked: i64,
        /// When the oldest pending carrier event was stored (Unix ms).
        pub oldest_pending_event: Option<Timestamp>,
        /// Deliveries ever created (the sum of each account database's highest rowid).
        pub deliveries_created: Option<i64>,
        /// Deliveries pending (due, scheduled or held).
        pub deliveries_pending: i64,
        /// Deliveries failed.
        pub deliveries_failed: i64,
        /// The earliest next attempt of a pending delivery (Unix ms).
        pub oldest_pending_delivery: Option<Timestamp>,
        /// Rows the running audit has checked, and the violations it found.
        pub audit_checked: i64,
        pub audit_found: i64,
    }
}

crate::store::row! {
    /// The dedupe log's figures of one database.
    #[derive(Debug, Default)]
    struct EventFigures {
        events_ingested: Option<i64>,
        events_pending: i64,
        events_failed: i64,
        oldest_pending_event: Option<Timestamp>,
    }
}

crate::store::row! {
    /// The delivery and parking figures of one account database.
    #[derive(Debug, Default)]
    struct AccountFigures {
        events_parked: i64,
        deliveries_created: Option<i64>,
        deliveries_pending: i64,
        deliveries_failed: i64,
        oldest_pending_delivery: Option<Timestamp>,
        audit_checked: i64,
        audit_found: i64,
    }
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads every figure: one round trip to each account database and one to each database of the
/// dedupe log (`DB` is both).
pub async fn figures(env: &worker::Env, config: &Rc<Config>) -> Result<Figures, EdgeError> {
    let mut figures = Figures::default();
    for scoped in crate::store::routes::each(env, config)? {
        let a: AccountFigures = db::first(db::stmt(
            scoped.db(),
            "SELECT
               (SELECT COUNT(*) FROM parked_receipts WHERE woken_at IS NULL) AS events_parked,
               (SELECT MAX(rowid) FROM webhook_deliveries) AS deliveries_created,
               (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending') AS deliveries_pending,
               (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed') AS deliveries_failed,
               (SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending')
                   AS oldest_pending_delivery,
               (SELECT COALESCE(SUM(checked), 0) FROM audit_checks) AS audit_checked,
               (SELECT COALESCE(SUM(found), 0) FROM audit_checks) AS audit_found",
            &[],
        )?)
        .await?
        .unwrap_or_default();
        figures.events_parked += a.events_parked;
        if let Some(created) = a.deliveries_created {
            figures.deliveries_created = Some(figures.deliveries_created.unwrap_or(0) + created);
        }
        figures.deliveries_pending += a.deliveries_pending;
        figures.deliveries_failed += a.deliveries_failed;
        figures.oldest_pending_delivery = earliest(figures.oldest_pending_delivery, a.oldest_pending_delivery);
        figures.audit_checked += a.audit_checked;
        figures.audit_found += a.audit_found;
    }
    let log = crate::store::carrier_events::Log::open(env, config);
    for binding in log.bindings() {
        let events = log.database(&binding)?;
        // Ingested: the sequence number of the highest id or the id floor (exactly_core::shard),
        // which retention does not lower; ids written before sharding count themselves.
        let e: EventFigures = db::first(db::stmt(
            &events,
            "SELECT
               (SELECT CASE WHEN m >= 4503599627370496 THEN (m - 4503599627370496) >> 16 ELSE m END
                  FROM (SELECT MAX(COALESCE((SELECT MAX(rowid) FROM carrier_events), 0),
                                   COALESCE((SELECT last_id FROM retention_marks WHERE name = 'id_floor'), 0)) AS m))
                   AS events_ingested,
               (SELECT COUNT(*) FROM carrier_events WHERE processed_at IS NULL AND error IS NULL) AS events_pending,
               (SELECT COUNT(*) FROM carrier_events WHERE error IS NOT NULL) AS events_failed,
               (SELECT MIN(created_at) FROM carrier_events WHERE processed_at IS NULL AND error IS NULL) AS
                   oldest_pending_event",
            &[],
        )?)
        .await?
        .unwrap_or_default();
        figures.events_ingested = Some(figures.events_ingested.unwrap_or(0) + e.events_ingested.unwrap_or(0));
        figures.events_pending += e.events_pending;
        figures.events_failed += e.events_failed;
        figures.oldest_pending_event = earliest(figures.oldest_pending_event, e.oldest_pending_event);
    }
    Ok(figures)
}

crate::store::row! {
    /// One bucket of the operator's charts (`/admin/metrics/series`), summed over the account
    /// databases.
    #[derive(Debug, Default, Clone)]
    pub struct Bucket {
        /// Its start, in Unix milliseconds.
        pub start: i64,
        pub attempts: i64,
        /// Answered 2xx.
        pub succeeded: i64,
        /// Answered, but not 2xx.
        pub refused: i64,
        /// No answer (no connection, or none in time).
        pub no_answer: i64,
        /// First attempts, and the sum and the most of their time from the event to the attempt.
        pub first_attempts: i64,
        pub time_to_webhook_ms_sum: i64,
        pub time_to_webhook_ms_max: i64,
        /// Deliveries created by the bucket's end and not settled then (summed from [`Flow`]s, not
        /// read with the attempts).
        pub backlog: i64 = default,
    }
}

/// Attempts by outcome, time-to-webhook and backlog in `buckets` buckets of `width_ms` ending
/// at `to`, of the deliveries of events' first fan-out (replays, recoveries and test sends are
/// asked for, not waited on). The backlog at a bucket's end is counted from each delivery's
/// creation and its last change (a settled delivery's `updated_at` is when it settled; one
/// re-driven later counts as open from its creation until it settles again).
pub async fn series(
    env: &worker::Env,
    config: &Rc<Config>,
    to: i64,
    width_ms: i64,
    buckets: i64,
) -> Result<Vec<Bucket>, EdgeError> {
    let from = to - width_ms * buckets;
    let mut out: Vec<Bucket> =
        (0..buckets).map(|i| Bucket { start: from + i * width_ms, ..Bucket::default() }).collect();
    // Deliveries open when the window began, and each bucket's created less its settled.
    let mut open_before = 0;
    let mut changes = vec![0; out.len()];
    for scoped in crate::store::routes::each(env, config)? {
        let database = scoped.db();
        // Bound as numbers D1 passes as REAL: every bucket's start is cast back to an integer
        // (an integer division of REALs would not floor).
        let args = [db::int(from), db::int(width_ms), db::int(to)];
        let attempts = db::stmt(
            database,
            "SELECT CAST(?1 + CAST((a.attempted_at - ?1) / ?2 AS INTEGER) * ?2 AS INTEGER) AS start, COUNT(*) AS attempts,
                    COALESCE(SUM(a.status_code BETWEEN 200 AND 299), 0) AS succeeded,
                    COALESCE(SUM(a.status_code IS NOT NULL AND NOT (a.status_code BETWEEN 200 AND 299)), 0) AS refused,
                    COALESCE(SUM(a.status_code IS NULL), 0) AS no_answer,
                    COALESCE(SUM(a.attempt = 1), 0) AS first_attempts,
                    COALESCE(SUM(CASE WHEN a.attempt = 1 THEN a.attempted_at - e.created_at END), 0)
                        AS time_to_webhook_ms_sum,
                    COALESCE(MAX(CASE WHEN a.attempt = 1 THEN a.attempted_at - e.created_at END), 0)
                        AS time_to_webhook_ms_max
             FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
                  JOIN outbound_events e ON e.id = d.event_id
             WHERE a.attempted_at >= ?1 AND a.attempted_at < ?3 AND d.kind = 'initial'
             GROUP BY 1",
            &args,
        )?;
        // The backlog at each bucket's end in one pass: those open when the first bucket began,
        // plus each bucket's created less its settled (a settled delivery's `updated_at` is when
        // it settled), summed below.
        let flows = db::stmt(
            database,
            "SELECT CAST(?1 + CAST((created_at - ?1) / ?2 AS INTEGER) * ?2 AS INTEGER) AS start, COUNT(*) AS opened,
                    0 AS settled
             FROM webhook_deliveries WHERE created_at >= ?1 AND created_at < ?3 GROUP BY 1
             UNION ALL
             SELECT CAST(?1 + CAST((updated_at - ?1) / ?2 AS INTEGER) * ?2 AS INTEGER), 0, COUNT(*)
             FROM webhook_deliveries WHERE status != 'pending' AND updated_at >= ?1 AND updated_at < ?3 GROUP BY 1
             UNION ALL
             SELECT CAST(?1 - ?2 AS INTEGER), COUNT(*), 0
             FROM webhook_deliveries WHERE created_at < ?1 AND (status = 'pending' OR updated_at >= ?1)",
            &args,
        )?;
        let results = db::batch(database, vec![attempts, flows]).await?;
        let flow: Vec<Flow> = results.get(1).map(db::rows).transpose()?.unwrap_or_default();
        for f in &flow {
            match out.iter().position(|b| b.start == f.start) {
                Some(i) => changes[i] += f.opened - f.settled,
                None if f.start < from => open_before += f.opened,
                None => {}
            }
        }
        if let Some(result) = results.first() {
            for row in db::rows::<Bucket>(result)? {
                let Some(slot) = out.iter_mut().find(|b| b.start == row.start) else { continue };
                slot.attempts += row.attempts;
                slot.succeeded += row.succeeded;
                slot.refused += row.refused;
                slot.no_answer += row.no_answer;
                slot.first_attempts += row.first_attempts;
                slot.time_to_webhook_ms_sum += row.time_to_webhook_ms_sum;
                slot.time_to_webhook_ms_max = slot.time_to_webhook_ms_max.max(row.time_to_webhook_ms_max);
            }
        }
    }
    // Each bucket's backlog: the open before the window and every bucket's flow up to its end.
    let mut running = open_before;
    for (slot, change) in out.iter_mut().zip(changes) {
        running += change;
        slot.backlog = running;
    }
    Ok(out)
}

crate::store::row! {
    /// Deliveries created and settled in one bucket (`start` before the window: those open then).
    struct Flow {
        start: i64,
        opened: i64,
        settled: i64,
    }
}
