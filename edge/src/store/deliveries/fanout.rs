//! The deliveries a customer event gets: its fan-out in the batch that writes it (the outbox's),
//! a replay (a recovery's pages are in `recoveries`), and the one delivery of an endpoint's test
//! event. Apart from the rest of `deliveries`, so the outbox reaches these statements without
//! what attempts need.

use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

pub use super::due::Due;
use super::due::{DUE_COLUMNS, IN_FLIGHT, IN_FLIGHT_LIMIT, LINED};
use crate::error::EdgeError;
use crate::store::endpoints::CIRCUIT;
use crate::store::{self as db, opt_text, text, time};

/// The fan-out of event `event_id`, for the batch that writes it: one pending delivery per
/// endpoint of the account subscribed to its type, only if this batch inserted the event. It does
/// not use `changes()`, so it may stand anywhere after the event's INSERT; it sees the endpoints
/// as the statements before it in the batch left them, at the batch's `now`.
///
/// Each delivery starts where its first claim would put it, in the same statement. One whose
/// endpoint has no filter (a filter decides at the gate, before any place is spent, so a delivery
/// it drops is settled at once), is not ordered (its claim decides the order) and whose circuit is not closed, whose line is not empty or which
/// has its most attempts in flight (counted and limited as the claim does) goes straight into its
/// line (`waiting = 1`), with no queue message. Each of those has something that drains the line
/// (the probe or the closing; the line's own chain; an attempt that ends), as when the claim puts
/// it there, and the sweeper wakes any line left waiting. A batch whose `now` is older than the
/// clock (an attempt's record, at the attempt's start) may count as in flight a lease that has
/// just ended, and line a delivery that could have been queued: the line's next take, or the
/// sweeper's wake, sends it.
///
/// With a `lease`, the first of its deliveries whose gates could only let it through and whose
/// endpoint has room and an empty line (what a queue message's read would claim,
/// [`super::due_claiming`]) is written with its first attempt claimed under that lease: the
/// caller sends it beside its own work, with no queue message and no read of its own
/// ([`pending`]). One a batch, so a caller that makes many such batches bounds what it holds. A
/// claim whose caller never starts it (a crash after the commit) holds its endpoint's place until
/// the lease ends, and the sweeper sends it once it is overdue.
pub fn fan_out(
    db: &D1Database,
    event_id: &str,
    account_id: &str,
    event_type: EventType,
    now: Timestamp,
    lease: Option<Timestamp>,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            // `gated`: only the circuit, the line and the room can hold it; `room`: none of them
            // does. `WHERE true`: an INSERT ... SELECT before ON CONFLICT needs a WHERE.
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, waiting,
                 next_attempt_at, in_flight_until, created_at, updated_at)
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, id, account_id, 'initial', 'pending', claim,
                 gated AND NOT room, CASE WHEN claim THEN ?6 ELSE ?2 END, CASE WHEN claim THEN ?6 ELSE 0 END, ?2, ?2
             FROM (
               SELECT id, account_id, gated, room,
                   ?6 IS NOT NULL AND gated AND room
                     AND ROW_NUMBER() OVER (PARTITION BY gated AND room ORDER BY id) = 1 AS claim
               FROM (
                 SELECT e.id, e.account_id,
                     e.enabled = 1 AND e.paused = 0 AND e.filter IS NULL AND e.ordering = 'none' AS gated,
                     e.circuit = 'closed' AND NOT {LINED} AND {IN_FLIGHT} < {IN_FLIGHT_LIMIT} AS room
                 {SUBSCRIBED} AND ?5 IS NULL
                   AND EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1)))
             WHERE true
             ON CONFLICT DO NOTHING"
        ),
        &[
            text(event_id),
            time(now),
            text(account_id),
            text(event_type.as_str()),
            JsValue::NULL,
            lease.map_or(JsValue::NULL, time),
        ],
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

/// The endpoints a delivery of an event goes to: the account's (`?3`) endpoints subscribed to
/// its type (`?4`), or only the one named (`?5`, when not NULL). The fan-out and a replay share
/// it, so they can never disagree on who is subscribed; each binds its time of now as `?2`, as
/// [`IN_FLIGHT`] counts with it. The fan-out records a delivery for every subscribed endpoint
/// whatever its state: a paused or disabled endpoint holds it until it is resumed or enabled, so
/// nothing is lost.
const SUBSCRIBED: &str = "FROM webhook_endpoints e
     WHERE e.account_id = ?3 AND (?5 IS NULL OR e.id = ?5)
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
             SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'replay', 'pending', 0, ?2, ?2, ?2
             {SUBSCRIBED} AND e.enabled = 1
               AND NOT EXISTS (SELECT 1 FROM outbound_events WHERE id = ?1 AND test = 1)
             RETURNING id"
        ),
        &[text(event_id), time(now), text(account_id), text(event_type.as_str()), opt_text(endpoint_id)],
    )?)
    .await
}

/// The statement that puts into their endpoints' lines the deliveries of event `event_id` not
/// attempted yet that the fan-out would put there now ([`fan_out`]), for a batch that reads them
/// after the fan-out's own ([`pending_initial`]): the endpoint may have filled, its
/// circuit opened or a line formed since.
pub fn line_up(db: &D1Database, event_id: &str, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET waiting = 1 WHERE event_id = ?1 AND status = 'pending' AND attempts = 0
               AND waiting = 0 AND EXISTS (
                 SELECT 1 FROM webhook_endpoints e
                 WHERE e.id = webhook_deliveries.endpoint_id AND e.enabled = 1 AND e.paused = 0
                   AND e.filter IS NULL AND e.ordering = 'none'
                   AND (e.circuit != 'closed'
                        OR {LINED}
                        OR {IN_FLIGHT} >= {IN_FLIGHT_LIMIT}))"
        ),
        &[text(event_id), time(now)],
    )
}

/// The statement that reads the deliveries of event `event_id` its batch leaves to do, to end
/// that batch ([`pending_of`]): those not attempted yet to endpoints that take attempts now, to
/// enqueue, and the one whose first attempt [`fan_out`] claimed at `now` under `lease`, whole,
/// for the caller to send. Only a claimed one carries the event's payload.
pub fn pending(
    db: &D1Database,
    event_id: &str,
    now: Timestamp,
    lease: Option<Timestamp>,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            "SELECT {DUE_COLUMNS}, {CIRCUIT}, CASE WHEN d.attempts = 0 THEN '' ELSE o.payload END AS payload
             FROM webhook_deliveries d
             JOIN outbound_events o ON o.id = d.event_id
             JOIN webhook_endpoints e ON e.id = d.endpoint_id
             WHERE d.event_id = ?1 AND d.status = 'pending'
               AND ((d.attempts = 0 AND d.waiting = 0 AND e.enabled = 1 AND e.paused = 0)
                    OR (d.kind = 'initial' AND d.attempts = 1 AND d.in_flight_until = ?2 AND d.updated_at = ?3))"
        ),
        &[text(event_id), lease.map_or(JsValue::NULL, time), time(now)],
    )
}

/// What a batch that ended with [`pending`] left to do.
#[derive(Default)]
pub struct Pending {
    /// The deliveries to enqueue, with their endpoint's URL.
    pub queued: Vec<(String, String)>,
    /// The deliveries whose first attempt the batch claimed.
    pub claimed: Vec<Due>,
    /// Why a claimed delivery could not be read, if one could not.
    pub unread: Option<String>,
}

/// The deliveries of a batch that ended with [`pending`]. A claimed delivery that does not read
/// leaves the others to be enqueued all the same.
pub fn pending_of(results: &[crate::store::Reply]) -> Result<Pending, EdgeError> {
    use crate::store::row::{column, FromRow as _, Source};
    enum Row {
        Queued(String, String),
        Claimed(Box<Due>),
        Unread(String),
    }
    let read = |row: &dyn Source| -> Result<Row, String> {
        if column::<i64>(row, "attempts")? == 0 {
            Ok(Row::Queued(column(row, "id")?, column(row, "url")?))
        } else {
            Ok(Due::from_row(row).map_or_else(Row::Unread, |due| Row::Claimed(Box::new(due))))
        }
    };
    let mut pending = Pending::default();
    let Some(last) = results.last() else { return Ok(pending) };
    for row in db::read_rows(last, read)? {
        match row {
            Row::Queued(id, url) => pending.queued.push((id, url)),
            Row::Claimed(due) => pending.claimed.push(*due),
            Row::Unread(why) => pending.unread = Some(format!("claimed delivery: {why}")),
        }
    }
    Ok(pending)
}

/// The deliveries of an event not attempted yet to endpoints that take attempts now, with their
/// endpoint's URL, to enqueue. Those that the fan-out would put into their endpoint's line now
/// (its circuit not closed, its line not empty, or full) go there in the same batch, with no
/// queue message ([`line_up`]): while a circuit is open or an endpoint is busy, its new
/// deliveries take no consumer time until the line reaches them.
pub async fn pending_initial(
    db: &D1Database,
    event_id: &str,
    now: Timestamp,
) -> Result<Vec<(String, String)>, EdgeError> {
    let statements = vec![line_up(db, event_id, now)?, pending(db, event_id, now, None)?];
    let results = db::batch(db, statements).await?;
    Ok(pending_of(&results)?.queued)
}
