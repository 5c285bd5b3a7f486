//! The deliveries a customer event gets: its fan-out in the batch that writes it (the outbox's),
//! a replay, a recovery, and the one delivery of an endpoint's test event. Apart from the rest
//! of `deliveries`, so the outbox reaches these statements without what attempts need.

use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use super::claims::{GATES_OPEN, READY};
pub use super::Due;
use super::{DUE_COLUMNS, IN_FLIGHT, IN_FLIGHT_LIMIT, LINED};
use crate::error::EdgeError;
use crate::store::endpoints::CIRCUIT;
use crate::store::{self as db, opt_text, text, time};

/// The fan-out of event `event_id`, for the batch that writes it: one pending delivery per
/// endpoint of the account subscribed to its type, only if this batch inserted the event. It does
/// not use `changes()`, so it may stand anywhere after the event's INSERT.
pub fn fan_out(
    db: &D1Database,
    event_id: &str,
    account_id: &str,
    event_type: EventType,
    now: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts,
                 next_attempt_at, created_at, updated_at)
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'initial', 'pending', 0, ?3,
                 ?3, ?3
             {SUBSCRIBED} AND ?5 IS NULL
               AND EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1)
             ON CONFLICT DO NOTHING"
        ),
        &[text(event_id), text(account_id), time(now), text(event_type.as_str()), JsValue::NULL],
    )
}

/// The statement that writes one pending delivery of event `event_id` to `endpoint_id`.
pub fn insert_initial(
    db: &D1Database,
    id: &str,
    event_id: &str,
    endpoint_id: &str,
    account_id: &str,
    now: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at,
             created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'initial', 'pending', 0, ?5, ?5, ?5)",
        &[text(id), text(event_id), text(endpoint_id), text(account_id), time(now)],
    )
}

/// The endpoints a delivery of an event goes to: the account's endpoints subscribed to its type
/// (`?4`), or only the one named (`?5`, when not NULL). The fan-out and a replay share it, so
/// they can never disagree on who is subscribed. The fan-out records a delivery for every
/// subscribed endpoint whatever its state: a paused or disabled endpoint holds it until it is
/// resumed or enabled, so nothing is lost.
const SUBSCRIBED: &str = "FROM webhook_endpoints e
     WHERE e.account_id = ?2 AND (?5 IS NULL OR e.id = ?5)
       AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ?4)";

/// A replay: a new delivery (`kind = 'replay'`, same event, so the same `webhook-id`) to every
/// subscribed endpoint, or to `endpoint_id` only; none of a test send, which goes only to the
/// endpoint it was sent to. Returns the new deliveries' ids.
pub async fn replay(
    db: &D1Database,
    event_id: &str,
    account_id: &str,
    event_type: EventType,
    endpoint_id: Option<&str>,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        &format!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts,
                 next_attempt_at, created_at, updated_at)
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'replay', 'pending', 0, ?3, ?3, ?3
             {SUBSCRIBED} AND e.enabled = 1
               AND NOT EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1 AND test = 1)
             RETURNING id"
        ),
        &[text(event_id), text(account_id), time(now), text(event_type.as_str()), opt_text(endpoint_id)],
    )?)
    .await
}

/// Recovery: a new delivery to `endpoint_id` of every event of the account written in
/// [`since`, `until`) that the endpoint is subscribed to and has neither received successfully
/// nor has pending, oldest first. Running it again finds those pending or received and adds
/// nothing. Returns the new deliveries' ids.
pub async fn recover(
    db: &D1Database,
    account_id: &str,
    endpoint_id: &str,
    since: Timestamp,
    until: Timestamp,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at,
                                         created_at, updated_at)
         SELECT 'dlv_' || lower(hex(randomblob(16))), o.id, e.id, e.account_id, 'replay', 'pending', 0, ?5, ?5, ?5
         FROM outbound_events o JOIN webhook_endpoints e ON e.id = ?2 AND e.account_id = o.account_id
         WHERE o.account_id = ?1 AND o.created_at >= ?3 AND o.created_at < ?4 AND o.test = 0
           AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = o.type)
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                           WHERE d.event_id = o.id AND d.endpoint_id = e.id
                             AND d.status IN ('succeeded', 'pending', 'filtered'))
         ORDER BY o.created_at, o.id
         RETURNING id",
        &[text(account_id), text(endpoint_id), time(since), time(until), time(now)],
    )?)
    .await
}

/// [`super::pending_initial`]'s statements, to end the batch that wrote the event: its
/// deliveries then come back with the batch's results ([`pending_of`], [`claimed_of`]), with no
/// read of their own.
///
/// A delivery whose first claim could only put it into its endpoint's line goes there in this
/// batch, with no queue message: the endpoint has no filter (a filter decides at the gate, before
/// any place is spent, so a delivery it drops is settled at once) and its circuit is not closed,
/// deliveries wait in its line (a newer one takes its place behind them), or it has its most
/// attempts in flight (counted and limited as the claim does). Each of those has something that drains the
/// line (the probe or the closing; the line's own chain; an attempt that ends), as when the
/// claim puts it there, and the sweeper wakes any line left waiting. An endpoint with room and
/// an empty line gets its queue message as before, so no delivery waits in a line that nothing
/// drains.
///
/// With a `lease`, the batch also claims the first attempt of one delivery whose gates could
/// only let it through and whose endpoint has room and an empty line (what a queue message's
/// read would claim, [`super::due_claiming`]) and returns it whole: the caller sends it beside
/// its own work, with no queue message and no read; the others are queued or in line as
/// without one. One a batch, so a caller that makes many such batches bounds what it holds. A
/// claim whose caller never starts it (a crash after the commit) holds its endpoint's place until
/// the lease ends, and the sweeper sends it once it is overdue.
pub fn pending_initial(
    db: &D1Database,
    event_id: &str,
    now: Timestamp,
    lease: Option<Timestamp>,
) -> Result<Vec<D1PreparedStatement>, EdgeError> {
    let mut statements = vec![db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET waiting = 1 WHERE event_id = ?1 AND status = 'pending' AND attempts = 0
               AND waiting = 0 AND EXISTS (
                 SELECT 1 FROM webhook_endpoints e
                 WHERE e.id = webhook_deliveries.endpoint_id AND e.enabled = 1 AND e.paused = 0
                   AND e.filter IS NULL
                   AND (e.circuit != 'closed'
                        OR {LINED}
                        OR {IN_FLIGHT} >= {IN_FLIGHT_LIMIT}))"
        ),
        &[text(event_id), time(now)],
    )?];
    if let Some(lease) = lease {
        statements.push(db::stmt(
            db,
            &format!(
                // The statement before it put every delivery whose endpoint is full or has a line
                // into that line (`waiting = 1`): one still out of it with its gates open has room
                // and an empty line, counted as the claim counts them.
                "UPDATE webhook_deliveries SET attempts = 1, next_attempt_at = ?3, in_flight_until = ?3, updated_at = ?2
                 WHERE id = (
                   SELECT id FROM webhook_deliveries WHERE event_id = ?1 AND attempts = 0 AND waiting = 0 AND {READY}
                     AND EXISTS (SELECT 1 FROM {GATES_OPEN})
                   LIMIT 1)"
            ),
            &[text(event_id), time(now), time(lease)],
        )?);
        statements.push(db::stmt(
            db,
            &format!(
                "SELECT {DUE_COLUMNS}, {CIRCUIT}, o.payload
                 FROM webhook_deliveries d
                 JOIN outbound_events o ON o.id = d.event_id
                 JOIN webhook_endpoints e ON e.id = d.endpoint_id
                 WHERE d.event_id = ?1 AND d.kind = 'initial' AND d.status = 'pending' AND d.attempts = 1
                   AND d.in_flight_until = ?2 AND d.updated_at = ?3"
            ),
            &[text(event_id), time(lease), time(now)],
        )?);
    }
    statements.push(db::stmt(
        db,
        "SELECT d.id, e.url FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.event_id = ?1 AND d.status = 'pending' AND d.attempts = 0 AND d.waiting = 0 AND e.enabled = 1
           AND e.paused = 0",
        &[text(event_id)],
    )?);
    Ok(statements)
}

/// The delivery a batch that ended with [`pending_initial`] under a lease claimed, if any: its
/// attempt 1 claimed under that lease.
pub fn claimed_of(results: &[crate::store::Reply]) -> Result<Vec<Due>, EdgeError> {
    match results.len().checked_sub(2).and_then(|at| results.get(at)) {
        Some(claimed) => db::rows(claimed),
        None => Err(EdgeError::unavailable("store", "fan-out: short batch")),
    }
}

/// The pending deliveries of a batch that ended with [`pending_initial`].
pub fn pending_of(results: &[crate::store::Reply]) -> Result<Vec<(String, String)>, EdgeError> {
    crate::store::row! {
        struct Pending {
            id: String,
            url: String,
        }
    }
    let rows: Vec<Pending> = results.last().map(db::rows).transpose()?.unwrap_or_default();
    Ok(rows.into_iter().map(|p| (p.id, p.url)).collect())
}
