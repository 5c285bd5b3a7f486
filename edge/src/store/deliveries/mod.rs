//! The `webhook_deliveries` and `webhook_attempts` tables: one delivery per (event, endpoint)
//! from the fan-out, a replay as a new delivery, and every attempt.
//!
//! An attempt is claimed by compare-and-swap on the delivery's attempt count
//! (`WHERE status = 'pending' AND attempts = <seen>`), so duplicate queue messages never send one
//! attempt twice; a delivery leaves `pending` once (`WHERE status = 'pending'`).

use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use serde_json::json;
use wasm_bindgen::JsValue;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::endpoints;
use crate::store::signals::Signal;
use crate::store::{self as db, int, opt_text, text, time};

mod claims;
mod due;
pub mod fanout;
mod listing;
pub mod prune;
pub mod recoveries;
pub mod retries;
pub use claims::{
    claim_attempt, due_claiming, give_back, next_in_line, renew, unclaim, unclaim_probe, wait_for_circuit, Claim,
    Queued, Taken,
};
use claims::{next_in_line_stmts, taken, BEHIND};
pub use due::{due, DeliveryKind, DeliveryStatus, Due, DUE_COLUMNS, IN_FLIGHT, IN_FLIGHT_LIMIT, LINED, OLDEST_IN_LINE};
pub use fanout::replay;
pub use listing::{
    attempts_of_endpoint, attempts_of_event, list, of_event, pending_count, EndpointAttempt, Listed, LogFilter,
    OfEvent, Recorded,
};
pub use prune::prune_attempts;

/// One attempt as it is recorded.
pub struct Attempt {
    pub delivery_id: String,
    pub number: i64,
    pub at: Timestamp,
    pub status: Option<u16>,
    pub latency_ms: i64,
    pub error: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    /// The first 1 KiB of what the endpoint answered.
    pub response_body: Option<String>,
    /// The response headers, as a JSON object.
    pub response_headers: Option<String>,
    /// The `webhook-signature` the request was sent with (`None` when nothing was sent).
    pub request_signature: Option<String>,
}

crate::store::row! {
    /// An endpoint's line and in-flight attempts.
    #[derive(Debug, Default)]
    pub struct Load {
        /// Deliveries in line, and those waiting for an earlier event of their resource.
        pub waiting: i64,
        /// Attempts in flight.
        pub in_flight: i64,
    }
}

/// How many deliveries wait in an endpoint's line, and how many attempts are in flight.
pub async fn load(db: &D1Database, endpoint_id: &str, now: Timestamp) -> Result<Load, EdgeError> {
    let row = db::first(db::stmt(
        db,
        &format!(
            "SELECT (SELECT COUNT(*) FROM webhook_deliveries INDEXED BY webhook_deliveries_line
                     WHERE endpoint_id = e.id AND waiting = 1 AND status = 'pending')
                  + (SELECT COUNT(*) FROM webhook_deliveries INDEXED BY webhook_deliveries_behind
                     WHERE endpoint_id = e.id AND waiting = 2 AND status = 'pending') AS waiting,
                 {IN_FLIGHT} AS in_flight
             FROM webhook_endpoints e WHERE e.id = ?1"
        ),
        &[text(endpoint_id), time(now)],
    )?)
    .await?;
    Ok(row.unwrap_or_default())
}

fn attempt_row(db: &D1Database, a: &Attempt) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code,
             latency_ms, error, next_attempt_at, response_body, response_headers, request_signature)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (delivery_id, attempt) DO NOTHING",
        &[
            text(&a.delivery_id),
            int(a.number),
            time(a.at),
            int(a.at.unix_seconds()),
            a.status.map_or(JsValue::NULL, |s| int(i64::from(s))),
            int(a.latency_ms),
            opt_text(a.error.as_deref()),
            a.next_attempt_at.map_or(JsValue::NULL, time),
            opt_text(a.response_body.as_deref()),
            opt_text(a.response_headers.as_deref()),
            opt_text(a.request_signature.as_deref()),
        ],
    )
}

/// A 2xx: the attempt, the delivery succeeded, the endpoint's failure streak reset. With
/// `take_next` (the time, and a lease to claim under), the same batch takes the oldest delivery of the
/// endpoint's line out of it, as [`next_in_line`] does after the place is freed, and returns it:
/// `Some(None)` when nothing was taken (the line empty, or the endpoint full: [`next_in_line`]),
/// `None` when it was not asked.
pub async fn record_success(
    db: &D1Database,
    a: &Attempt,
    endpoint_id: &str,
    take_next: Option<(Timestamp, Option<Timestamp>)>,
) -> Result<Option<Option<Taken>>, EdgeError> {
    let mut statements = vec![
        attempt_row(db, a)?,
        db::stmt(
            db,
            // Its in-flight place is freed only if no later attempt holds it.
            "UPDATE webhook_deliveries SET status = 'succeeded', last_error = NULL, updated_at = ?2,
                 in_flight_until = CASE WHEN attempts = ?3 THEN 0 ELSE in_flight_until END
             WHERE id = ?1 AND status = 'pending'",
            &[text(&a.delivery_id), time(a.at), int(a.number)],
        )?,
        endpoints::reset_failures(db, endpoint_id, a.at)?,
    ];
    if let Some((now, lease)) = take_next {
        statements.extend(next_in_line_stmts(db, endpoint_id, now, lease)?);
    }
    let results = db::batch(db, statements).await?;
    match take_next {
        Some((now, _)) => taken(&results, now).map(Some),
        None => Ok(None),
    }
}

/// An attempt the platform cut short (migrations/0036_cut_attempts.sql): the attempt is
/// recorded, it spends none of the delivery's attempts (`cut` counts it), the endpoint's failure
/// streak is left alone, and the delivery goes into its endpoint's line, due now, to be sent
/// again under its webhook-id (the caller wakes the line). A probe's attempt (`probe`: its
/// endpoint and token) gives its token back in the same batch, so the next delivery may probe at
/// once. Returns whether the delivery was this attempt's to put back.
pub async fn record_cut(db: &D1Database, a: &Attempt, probe: Option<(&str, i64)>) -> Result<bool, EdgeError> {
    let mut statements = vec![
        attempt_row(db, a)?,
        db::stmt(
            db,
            // Only the attempt that holds the delivery puts it back.
            "UPDATE webhook_deliveries SET cut = cut + 1, next_attempt_at = ?2, in_flight_until = 0, waiting = 1,
                 last_error = ?3, updated_at = ?2
             WHERE id = ?1 AND status = 'pending' AND attempts = ?4",
            &[text(&a.delivery_id), time(a.at), opt_text(a.error.as_deref()), int(a.number)],
        )?,
    ];
    if let Some((endpoint_id, lease)) = probe {
        statements.push(endpoints::circuit::release_probe(db, endpoint_id, lease)?);
    }
    let results = db::batch(db, statements).await?;
    Ok(results.get(1).map(db::changes) == Some(1))
}

/// What an endpoint's signals need to say about it.
pub struct Subject<'a> {
    /// The endpoint.
    pub endpoint_id: &'a str,
    /// Its account.
    pub account_id: &'a str,
    /// Its URL.
    pub url: &'a str,
    /// The event the delivery carries.
    pub event_id: &'a str,
}

fn disabled(subject: &Subject<'_>, a: &Attempt, reason: &str) -> Result<Signal, EdgeError> {
    let data = json!({
        "endpoint_id": subject.endpoint_id, "url": subject.url, "reason": reason,
        "last_attempt": {"delivery_id": a.delivery_id, "event_id": subject.event_id, "attempt": a.number,
                         "status_code": a.status, "error": a.error, "attempted_at": a.at.to_rfc3339()},
    });
    // One signal per time the endpoint is disabled.
    let resource = format!("{}@{}", subject.endpoint_id, a.at.unix_millis());
    Signal::new(EventType::EndpointDisabled, &resource, Some(subject.account_id), data, a.at)
}

/// A 410: the attempt, the delivery failed, the endpoint disabled (once: `enabled = 1`), and
/// the `endpoint.disabled` signal if it was. Returns the signal's event ids.
pub async fn record_gone(db: &D1Database, a: &Attempt, subject: &Subject<'_>) -> Result<Vec<String>, EdgeError> {
    let signal = disabled(subject, a, "answered 410 Gone")?;
    let mut statements = vec![
        attempt_row(db, a)?,
        db::stmt(
            db,
            "UPDATE webhook_deliveries SET status = 'failed', last_error = '410 Gone: endpoint disabled',
                in_flight_until = CASE WHEN attempts = ?3 THEN 0 ELSE in_flight_until END, updated_at = ?2
             WHERE id = ?1 AND status = 'pending'",
            &[text(&a.delivery_id), time(a.at), int(a.number)],
        )?,
        endpoints::disable(db, subject.endpoint_id, 0, "answered 410 Gone", a.at)?,
    ];
    statements.extend(signal.statements(db, a.at)?);
    db::batch(db, statements).await?;
    Ok(signal.event_ids())
}

/// Any other failure: the attempt; the next one scheduled, or, with none left, the delivery
/// failed with `final_error` and the `delivery.exhausted` signal; the endpoint's failure streak
/// counted, and at `disable_after` the endpoint disabled (once) with the `endpoint.disabled`
/// signal. Returns the signals' event ids.
pub async fn record_failure(
    db: &D1Database,
    a: &Attempt,
    subject: &Subject<'_>,
    final_error: &str,
    disable_after: i64,
) -> Result<Vec<String>, EdgeError> {
    let error = a.error.as_deref().unwrap_or_default();
    let mut statements = vec![attempt_row(db, a)?];
    let mut ids = Vec::new();
    match a.next_attempt_at {
        Some(next_at) => statements.push(db::stmt(
            db,
            // Only the attempt that holds the delivery schedules its next one.
            "UPDATE webhook_deliveries SET next_attempt_at = ?2, last_error = ?3, in_flight_until = 0, updated_at = ?4
             WHERE id = ?1 AND status = 'pending' AND attempts = ?5",
            &[text(&a.delivery_id), time(next_at), text(error), time(a.at), int(a.number)],
        )?),
        None => {
            statements.push(db::stmt(
                db,
                "UPDATE webhook_deliveries SET status = 'failed', last_error = ?2, in_flight_until = 0, updated_at = ?3
                 WHERE id = ?1 AND status = 'pending' AND attempts = ?4",
                &[text(&a.delivery_id), text(final_error), time(a.at), int(a.number)],
            )?);
            let data = json!({
                "delivery_id": a.delivery_id, "event_id": subject.event_id, "endpoint_id": subject.endpoint_id,
                "url": subject.url, "attempts": a.number, "last_error": error,
            });
            let exhausted =
                Signal::new(EventType::DeliveryExhausted, &a.delivery_id, Some(subject.account_id), data, a.at)?;
            statements.extend(exhausted.statements(db, a.at)?);
            ids.extend(exhausted.event_ids());
        }
    }
    statements.push(endpoints::count_failure(db, subject.endpoint_id, a.at)?);
    let reason = format!("disabled after {disable_after} consecutive failed attempts");
    statements.push(endpoints::disable(db, subject.endpoint_id, disable_after, &reason, a.at)?);
    let signal = disabled(subject, a, &reason)?;
    statements.extend(signal.statements(db, a.at)?);
    ids.extend(signal.event_ids());
    db::batch(db, statements).await?;
    Ok(ids)
}

crate::store::row! {
    /// A delivery settled by a call of this module outside an attempt ([`fail`], [`filter_out`]).
    pub struct Settled {
        /// Its endpoint, when the delivery had a place among its resource's events there
        /// (migrations/0034_ordering.sql) and a later one of them waits: its settling put the
        /// resource's next events back into the endpoint's line, and no attempt's chain is there
        /// to take them, so the caller wakes the line.
        pub hands_on: Option<String>,
    }
}

/// What a settling statement returns ([`Settled`]). A waiter is counted whether it is read
/// before the settling's trigger put it into the line (`waiting = 2`) or after (`waiting = 1`).
const SETTLED: &str = "RETURNING CASE WHEN resource_id IS NOT NULL AND EXISTS (
         SELECT 1 FROM webhook_deliveries n INDEXED BY webhook_deliveries_resource
         WHERE n.endpoint_id = webhook_deliveries.endpoint_id AND n.resource_id = webhook_deliveries.resource_id
           AND n.resource_id IS NOT NULL AND n.waiting IN (1, 2) AND n.status = 'pending')
     THEN endpoint_id END AS hands_on";

/// Fails a pending delivery with `reason`, once. `None` when it was not pending.
pub async fn fail(db: &D1Database, id: &str, reason: &str, now: Timestamp) -> Result<Option<Settled>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET status = 'failed', last_error = ?2, in_flight_until = 0, waiting = 0,
                 updated_at = ?3 WHERE id = ?1 AND status = 'pending' {SETTLED}"
        ),
        &[text(id), text(reason), time(now)],
    )?)
    .await
}

/// Settles delivery `id` as held back by its endpoint's filter, unless another job claimed an
/// attempt of it since the gate read `attempts` (or one is in flight). `None` when this call
/// did not.
pub async fn filter_out(
    db: &D1Database,
    id: &str,
    attempts: i64,
    now: Timestamp,
) -> Result<Option<Settled>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET status = 'filtered', last_error = 'held back by the endpoint''s filter',
                 waiting = 0, in_flight_until = 0, updated_at = ?3
             WHERE id = ?1 AND status = 'pending' AND attempts = ?2 AND in_flight_until <= ?3 {SETTLED}"
        ),
        &[text(id), int(attempts), time(now)],
    )?)
    .await
}

/// Pending deliveries of endpoints that are neither paused nor disabled whose next attempt is
/// before `before`: their queue message was lost. Oldest first, at most `limit`. A delivery in
/// its endpoint's line has no message; the sweeper wakes the line instead
/// ([`circuit::with_line`]).
pub async fn overdue(db: &D1Database, before: Timestamp, limit: u32) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        // Held deliveries (their endpoint paused or disabled) wait for a resume, not the sweeper.
        // A deleted endpoint's deliveries are still swept: their attempt fails them.
        "SELECT d.id FROM webhook_deliveries d LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.status = 'pending' AND d.waiting = 0 AND d.next_attempt_at < ?1
           AND (e.id IS NULL OR (e.enabled = 1 AND e.paused = 0))
         ORDER BY d.next_attempt_at, d.created_at LIMIT ?2",
        &[time(before), int(i64::from(limit))],
    )?)
    .await
}

/// What re-driving a delivery found.
#[derive(Debug, PartialEq, Eq)]
pub enum Redrive {
    /// It was failed and is pending again.
    Pending,
    /// It exists but is not failed.
    NotFailed,
    /// No such delivery.
    Missing,
}

/// A failed delivery back to `pending`, due now (`WHERE status = 'failed'`).
pub async fn redrive(db: &D1Database, id: &str, now: Timestamp) -> Result<Redrive, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?2, updated_at = ?2 WHERE id = ?1
             AND status = 'failed'",
        &[text(id), time(now)],
    )?)
    .await?;
    if changed == 1 {
        return Ok(Redrive::Pending);
    }
    let found = db::all_ids(db::stmt(db, "SELECT id FROM webhook_deliveries WHERE id = ?1", &[text(id)])?).await?;
    Ok(if found.is_empty() { Redrive::Missing } else { Redrive::NotFailed })
}

/// The most deliveries one statement looks at to put back into a line from waiting for an
/// earlier event ([`unblock`], [`requeue_waiting`]); the cron looks at the rest, as many each
/// minute.
pub const UNBLOCK_MAX: u32 = 1_000;

/// Puts into the line of endpoint `endpoint_id` those of the deliveries that wait for an earlier
/// event of their resource (at most [`UNBLOCK_MAX`] are looked at) that no longer do: the
/// endpoint's ordering changed. One still behind an earlier event stays as it is, out of the
/// line, so no delivery that may go waits in the line behind it. The caller wakes the line.
/// Returns how many went into line.
pub async fn unblock(db: &D1Database, endpoint_id: &str, now: Timestamp) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET waiting = 1, updated_at = ?2
             WHERE id IN (SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_behind
                          WHERE endpoint_id = ?1 AND waiting = 2 AND status = 'pending' LIMIT ?3)
               AND NOT {BEHIND}"
        ),
        &[text(endpoint_id), time(now), int(i64::from(UNBLOCK_MAX))],
    )?)
    .await
}

/// Looks at up to `limit` deliveries that have waited for an earlier event of their resource
/// since before `before`: each that no longer does goes back into its endpoint's line (a hand-on
/// that never came: the earlier event pruned, say; the sweeper's wake of lines drains them),
/// and each still behind waits on, looked at again after as long (so a page of resources held
/// for good never hides the rest). Nothing still behind enters a line, where it would stand ahead
/// of the endpoint's deliveries that may go. Returns, of those it put into a line, the one due
/// longest ago when that was before `alert_before`: a delivery that could have gone, stranded
/// waiting for a hand-on that never came.
pub async fn requeue_waiting(
    db: &D1Database,
    before: Timestamp,
    limit: u32,
    now: Timestamp,
    alert_before: Timestamp,
) -> Result<Option<String>, EdgeError> {
    crate::store::row! {
        struct Looked {
            id: String,
            waiting: i64,
            next_attempt_at: Timestamp,
        }
    }
    let looked: Vec<Looked> = db::all(db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET waiting = CASE WHEN {BEHIND} THEN 2 ELSE 1 END, updated_at = ?3
             WHERE id IN (SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_behind
                          WHERE waiting = 2 AND status = 'pending' AND updated_at < ?1 LIMIT ?2)
             RETURNING id, waiting, next_attempt_at"
        ),
        &[time(before), int(i64::from(limit)), time(now)],
    )?)
    .await?;
    Ok(looked
        .into_iter()
        .filter(|l| l.waiting == 1 && l.next_attempt_at.unix_millis() < alert_before.unix_millis())
        .min_by_key(|l| l.next_attempt_at.unix_millis())
        .map(|l| l.id))
}

/// Releases what a paused or disabled endpoint held: its pending deliveries go into its line,
/// due now, oldest first, except one whose attempt is in flight (claimed, its lease not over,
/// its outcome not yet recorded): its lease stands, so the attempt is never sent a second time
/// beside itself. The caller wakes the line. Returns how many went into line.
pub async fn release(db: &D1Database, endpoint_id: &str, now: Timestamp) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET waiting = CASE WHEN waiting = 2 THEN 2 ELSE 1 END, next_attempt_at = ?2,
             updated_at = ?2
         WHERE endpoint_id = ?1 AND status = 'pending' AND NOT (in_flight_until > 0 AND in_flight_until > ?2)",
        &[text(endpoint_id), time(now)],
    )?)
    .await
}
