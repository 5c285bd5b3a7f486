//! An attempt's claim and an endpoint's line: a delivery read with its attempt claimed in one
//! batch, the claim by compare-and-swap on the attempt count, its lease's renewal and release,
//! and the takes of the oldest delivery in a line.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use super::due::{due_query, Due, IN_FLIGHT, IN_FLIGHT_LIMIT, OLDEST_IN_LINE};
use crate::error::EdgeError;
use crate::store::endpoints::{Columns, CIRCUIT};
use crate::store::{self as db, int, text, time};

/// What [`due_claiming`] found.
pub enum Queued {
    /// Attempt `number` is claimed; the delivery as it was before the claim.
    Claimed(Due, i64),
    /// Its gates let it through but the endpoint is full or older deliveries wait in its line:
    /// it is in the line now, as [`claim_attempt`] would have put it there.
    InLine,
    /// Neither: the delivery as read (`None`: there is no such delivery), for its gates.
    Read(Option<Due>),
}

/// Reads delivery `id` and, in the same batch, claims its next attempt under `lease` when its
/// gates could only let it through, as a take from its endpoint's line does
/// ([`next_in_line_stmts`]), and no older delivery waits in that line ([`claim_attempt`]). When
/// its gates would let it through but the claim found no room (the endpoint full, or older
/// deliveries in its line), the batch puts it into the line: what the claim after the gates
/// would have done, without that second round trip.
pub async fn due_claiming(db: &D1Database, id: &str, now: Timestamp, lease: Timestamp) -> Result<Queued, EdgeError> {
    let claim = db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?3, in_flight_until = ?3,
                 waiting = 0, updated_at = ?2
             WHERE id = ?1 AND {READY} AND EXISTS (SELECT 1 FROM {GATES_OPEN} AND {IN_FLIGHT} < {IN_FLIGHT_LIMIT})
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries l WHERE l.endpoint_id = webhook_deliveries.endpoint_id
                    AND l.waiting = 1 AND l.status = 'pending'
                    AND (l.created_at, l.id) < (webhook_deliveries.created_at, ?1))
             RETURNING attempts"
        ),
        &[text(id), time(now), time(lease)],
    )?;
    // Only when the claim changed nothing: the same gates, so what stopped it was the room.
    let line = db::stmt(
        db,
        &format!(
            "UPDATE webhook_deliveries SET waiting = 1, updated_at = ?2
             WHERE id = ?1 AND changes() = 0 AND {READY} AND EXISTS (SELECT 1 FROM {GATES_OPEN})"
        ),
        &[text(id), time(now)],
    )?;
    let results = db::batch(db, vec![due_query(db, Some(id), None)?, claim, line]).await?;
    crate::store::row! {
        struct Took {
            attempts: i64,
        }
    }
    let [read, claimed, lined] = results.as_slice() else {
        return Err(EdgeError::unavailable("store", "due and claim: short batch"));
    };
    let read = db::rows::<Due>(read);
    if db::changes(lined) == 1 {
        // One whose row does not decode fails its job as any other, so it is retried and at
        // last dead-lettered (failed visibly), not acknowledged into the line.
        return read.map(|_| Queued::InLine);
    }
    let claimed = db::rows::<Took>(claimed)?.into_iter().next().map(|took| took.attempts);
    match read {
        Ok(rows) => Ok(match (rows.into_iter().next(), claimed) {
            (Some(due), Some(number)) => Queued::Claimed(due, number),
            (due, _) => Queued::Read(due),
        }),
        Err(e) => {
            // A row that does not decode sends nothing: the claim is given back, so a retry of
            // the job neither spends an attempt nor holds an in-flight place.
            if let Some(number) = claimed {
                unclaim(db, id, number, now).await?;
            }
            Err(e)
        }
    }
}

/// The delivery being updated, when it is up for an attempt at `?2`: pending, due (within a
/// second) and none of its attempts in flight. The claims, and the statements that put a delivery
/// into its line or leave it there instead of claiming, all ask it so, so they cannot disagree.
const READY: &str = "status = 'pending' AND in_flight_until <= ?2 AND next_attempt_at <= ?2 + 1000";

/// The endpoint row `e` of the delivery being updated, when its gates can only let a delivery
/// through: enabled, not paused, without a filter (a filter decides at the gate), not ordered
/// (the claim decides the order, [`BEHIND`]) and with its circuit closed (which admits every
/// attempt).
const GATES_OPEN: &str = "webhook_endpoints e WHERE e.id = webhook_deliveries.endpoint_id
     AND e.enabled = 1 AND e.paused = 0 AND e.filter IS NULL AND e.circuit = 'closed' AND e.ordering = 'none'";

/// Whether the delivery being updated (`webhook_deliveries`) waits for an earlier event of its
/// resource to its endpoint, which is ordered now: one whose delivery is pending, or, at an
/// endpoint that holds a resource whose event was exhausted, one failed and not delivered since
/// (by a replay or a recovery). Through the resource's index; a delivery with no resource (its
/// endpoint was not ordered when it was written) never waits. Only a delivery not behind is put
/// back into a line from waiting (`super::unblock`, `super::requeue_waiting`, the settling's
/// trigger of migrations/0035_hand_on_the_next.sql), so a line holds nothing that must wait.
pub const BEHIND: &str = "(webhook_deliveries.resource_id IS NOT NULL AND EXISTS (
     SELECT 1 FROM webhook_endpoints o WHERE o.id = webhook_deliveries.endpoint_id AND o.ordering = 'resource'
       AND EXISTS (SELECT 1 FROM webhook_deliveries p INDEXED BY webhook_deliveries_resource
         WHERE p.endpoint_id = webhook_deliveries.endpoint_id AND p.resource_id = webhook_deliveries.resource_id
           AND p.resource_id IS NOT NULL AND p.sequence < webhook_deliveries.sequence
           AND (p.status = 'pending'
                OR (p.status = 'failed' AND o.on_exhausted = 'hold'
                    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries s INDEXED BY webhook_deliveries_event
                                    WHERE s.event_id = p.event_id AND s.endpoint_id = p.endpoint_id
                                      AND s.status = 'succeeded'))))))";

/// The events of the resource of the delivery being updated (`webhook_deliveries`) that were
/// exhausted at its endpoint and never delivered there since (by a retry, a replay or a
/// recovery), comma-separated; NULL for none, or for a delivery with no resource. Read in the
/// statement that claims the attempt, so it is what the claim's own check of the order saw.
const SKIPPED: &str =
    "(SELECT group_concat(DISTINCT p.event_id) FROM webhook_deliveries p INDEXED BY webhook_deliveries_resource
     WHERE webhook_deliveries.resource_id IS NOT NULL AND p.endpoint_id = webhook_deliveries.endpoint_id
       AND p.resource_id = webhook_deliveries.resource_id AND p.resource_id IS NOT NULL
       AND p.sequence < webhook_deliveries.sequence AND p.status = 'failed'
       AND NOT EXISTS (SELECT 1 FROM webhook_deliveries s INDEXED BY webhook_deliveries_event
                       WHERE s.event_id = p.event_id AND s.endpoint_id = p.endpoint_id
                         AND s.status = 'succeeded'))";

/// Whether a delivery of the line of endpoint `?6` would be taken before the delivery `?1` being
/// updated (`webhook_deliveries`), in the line's order ([`OLDEST_IN_LINE`]): an older one; while
/// the circuit is not closed, an older one that has not failed yet when this one has not either,
/// and any that has not failed yet when this one has. Each through a line's index.
const AHEAD_IN_LINE: &str = "(CASE
     WHEN webhook_deliveries.attempts = webhook_deliveries.cut
          AND EXISTS (SELECT 1 FROM webhook_endpoints c WHERE c.id = ?6 AND c.circuit <> 'closed')
       THEN EXISTS (SELECT 1 FROM webhook_deliveries l INDEXED BY webhook_deliveries_fresh_line
                    WHERE l.endpoint_id = ?6 AND l.waiting = 1 AND l.status = 'pending' AND l.attempts = l.cut
                      AND (l.created_at, l.id) < (webhook_deliveries.created_at, ?1))
     ELSE EXISTS (SELECT 1 FROM webhook_deliveries l INDEXED BY webhook_deliveries_line
                  WHERE l.endpoint_id = ?6 AND l.waiting = 1 AND l.status = 'pending'
                    AND (l.created_at, l.id) < (webhook_deliveries.created_at, ?1))
       OR (EXISTS (SELECT 1 FROM webhook_endpoints c WHERE c.id = ?6 AND c.circuit <> 'closed')
           AND EXISTS (SELECT 1 FROM webhook_deliveries l INDEXED BY webhook_deliveries_fresh_line
                       WHERE l.endpoint_id = ?6 AND l.waiting = 1 AND l.status = 'pending'
                         AND l.attempts = l.cut))
     END)";

/// What claiming an attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The attempt is this job's to send; at an ordered endpoint, with the events of its resource
    /// skipped before it ([`SKIPPED`]).
    Claimed(Option<String>),
    /// The endpoint has its most attempts in flight: the delivery is in its line now.
    Full,
    /// An earlier event of its resource is not yet delivered to its ordered endpoint: the delivery
    /// waits for it now (`waiting = 2`), and is put into the line when it settles.
    Behind,
    /// Another job claimed it, or it settled.
    Elsewhere,
}

/// Claims attempt `number` (the count was `number - 1`), leasing the delivery until `lease`,
/// if no attempt of it is in flight, the endpoint has fewer attempts in flight than it takes
/// ([`IN_FLIGHT_LIMIT`], read from its row as it is now), no delivery its line takes first waits
/// there ([`AHEAD_IN_LINE`]), its circuit is still at `version` (the state the caller
/// admitted the attempt under) and, at an ordered endpoint, no earlier event of its resource
/// waits to be delivered ([`BEHIND`]). Otherwise, in the same batch, the delivery waits for that
/// earlier one (`waiting = 2`: its settling wakes it, migrations/0034_ordering.sql)
/// or goes into the endpoint's line, so an attempt that ends after this either found it in line
/// or left room for it, and a delivery that settles after this found it waiting.
pub async fn claim_attempt(
    db: &D1Database,
    id: &str,
    endpoint_id: &str,
    number: i64,
    lease: Timestamp,
    now: Timestamp,
    version: i64,
) -> Result<Claim, EdgeError> {
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                &format!(
                    "UPDATE webhook_deliveries SET attempts = ?3, next_attempt_at = ?4, in_flight_until = ?4,
                         waiting = 0, updated_at = ?2
                     WHERE id = ?1 AND status = 'pending' AND attempts = ?5 AND in_flight_until <= ?2
                       AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = ?6 AND e.circuit_version = ?7
                                   AND {IN_FLIGHT} < {IN_FLIGHT_LIMIT})
                       AND NOT {AHEAD_IN_LINE}
                       AND NOT {BEHIND}
                     RETURNING {SKIPPED} AS skipped"
                ),
                &[text(id), time(now), int(number), time(lease), int(number - 1), text(endpoint_id), int(version)],
            )?,
            db::stmt(
                db,
                &format!(
                    "UPDATE webhook_deliveries SET waiting = 2, updated_at = ?3
                     WHERE id = ?1 AND status = 'pending' AND attempts = ?2 AND in_flight_until <= ?3
                       AND changes() = 0 AND {BEHIND}"
                ),
                &[text(id), int(number - 1), time(now)],
            )?,
            db::stmt(
                db,
                "UPDATE webhook_deliveries SET waiting = 1, updated_at = ?3
                 WHERE id = ?1 AND status = 'pending' AND attempts = ?2 AND in_flight_until <= ?3 AND changes() = 0",
                &[text(id), int(number - 1), time(now)],
            )?,
        ],
    )
    .await?;
    crate::store::row! {
        struct Took {
            skipped: Option<String>,
        }
    }
    let changed = |n: usize| results.get(n).map(db::changes);
    Ok(match (changed(0), changed(1), changed(2)) {
        (Some(1), _, _) => {
            let took = results.first().map(db::rows::<Took>).transpose()?.and_then(|rows| rows.into_iter().next());
            Claim::Claimed(took.and_then(|t| t.skipped))
        }
        (_, Some(1), _) => Claim::Behind,
        (_, _, Some(1)) => Claim::Full,
        _ => Claim::Elsewhere,
    })
}

/// Renews the lease of attempt `number` right before it is sent, if the attempt is still the
/// delivery's (no job claimed a later one after a lapsed lease: a claim needs the lease over,
/// and this renewal and that claim are one statement each, so only one of them happens).
/// Returns the endpoint's circuit as it is now, or `None` when the attempt is no longer this
/// job's to send.
pub async fn renew(
    db: &D1Database,
    id: &str,
    endpoint_id: &str,
    number: i64,
    lease: Timestamp,
) -> Result<Option<Columns>, EdgeError> {
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "UPDATE webhook_deliveries SET next_attempt_at = ?3, in_flight_until = ?3
                 WHERE id = ?1 AND status = 'pending' AND attempts = ?2",
                &[text(id), int(number), time(lease)],
            )?,
            db::stmt(db, &format!("SELECT {CIRCUIT} FROM webhook_endpoints e WHERE e.id = ?1"), &[text(endpoint_id)])?,
        ],
    )
    .await?;
    if results.first().map(db::changes) != Some(1) {
        return Ok(None);
    }
    let columns: Option<Columns> = results.get(1).map(db::rows).transpose()?.and_then(|rows| rows.into_iter().next());
    Ok(columns)
}

/// Gives a claimed attempt `number` back before it was sent: the delivery goes into its
/// endpoint's line with its attempt count as before, so no attempt is spent.
pub async fn unclaim(db: &D1Database, id: &str, number: i64, now: Timestamp) -> Result<bool, EdgeError> {
    give_back(db, id, number, now, true).await
}

/// [`unclaim`] of an attempt admitted as its endpoint's probe, whose token is `lease`: in the same
/// batch the half-open circuit's token is given back, so the next delivery in line may probe at
/// once, not after the token's lease. Only the token's holder can match it, and only while it
/// still holds the delivery's claim: a circuit another writer changed meanwhile (a probe after
/// this token's lease, a closing) stays as it is. Returns whether the delivery was given back.
pub async fn unclaim_probe(
    db: &D1Database,
    id: &str,
    endpoint_id: &str,
    number: i64,
    lease: i64,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let results = db::batch(
        db,
        vec![
            give_back_stmt(db, id, number, now, true)?,
            crate::store::endpoints::circuit::release_probe(db, endpoint_id, lease)?,
        ],
    )
    .await?;
    Ok(results.first().map(db::changes) == Some(1))
}

/// [`unclaim`], into the line (`line`) or out of it: a delivery out of its line is found by a
/// queue message or, once overdue, by the sweeper.
pub async fn give_back(db: &D1Database, id: &str, number: i64, now: Timestamp, line: bool) -> Result<bool, EdgeError> {
    Ok(db::run(give_back_stmt(db, id, number, now, line)?).await? == 1)
}

fn give_back_stmt(
    db: &D1Database,
    id: &str,
    number: i64,
    now: Timestamp,
    line: bool,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_deliveries SET attempts = ?2 - 1, in_flight_until = 0, waiting = ?4, next_attempt_at = ?3,
             updated_at = ?3
         WHERE id = ?1 AND status = 'pending' AND attempts = ?2",
        &[text(id), int(number), time(now), int(i64::from(line))],
    )
}

/// Puts a delivery (its attempt count still `attempts`) into its endpoint's line while the
/// circuit holds, if the circuit is still at `version` (else the caller looks again: a probe
/// that closed it meanwhile may have woken the line already). Returns whether it did.
pub async fn wait_for_circuit(
    db: &D1Database,
    id: &str,
    endpoint_id: &str,
    attempts: i64,
    version: i64,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET waiting = 1, updated_at = ?4
         WHERE id = ?1 AND status = 'pending' AND attempts = ?3
           AND (SELECT circuit_version FROM webhook_endpoints WHERE id = ?2) = ?5",
        &[text(id), text(endpoint_id), int(attempts), time(now), int(version)],
    )?)
    .await?;
    Ok(changed == 1)
}

/// A delivery taken out of its endpoint's line, with what its gates read as it was taken.
pub struct Taken {
    pub id: String,
    /// Read in the batch that took it, so its gates need no read of their own the first time.
    pub due: Option<Box<Due>>,
    /// The attempt the take claimed, when every gate let it through as it was taken
    /// ([`next_in_line_stmts`]): its number, leased until the lease the take was given.
    pub claimed: Option<i64>,
    /// When it was taken.
    pub at: Timestamp,
}

/// Takes the oldest delivery out of an endpoint's line, claiming its next attempt under `lease`
/// (when there is one) if every gate lets it through; otherwise it goes through the gates again
/// (it may go back in). `None` when the line is empty, or (with a lease) when only the room kept
/// the oldest from its claim: it stays in the line.
pub async fn next_in_line(
    db: &D1Database,
    endpoint_id: &str,
    now: Timestamp,
    lease: Option<Timestamp>,
) -> Result<Option<Taken>, EdgeError> {
    let results = db::batch(db, next_in_line_stmts(db, endpoint_id, now, lease)?.into()).await?;
    taken(&results, now)
}

/// The statements that take the oldest delivery out of an endpoint's line, in one batch (one
/// transaction: all find the same delivery): the read of its [`Due`]; the take that also claims
/// its next attempt, under `lease` (none: never), as the claim would ([`claim_attempt`]) when the gates before
/// it could only let it through (its endpoint enabled, not paused, with no filter and a closed
/// circuit, fewer attempts in flight than it takes, the delivery due and none of its attempts in
/// flight; it is the oldest in line); or else the plain take. With a lease, a delivery that only
/// the room kept from its claim stays in the line and nothing is taken: its gates and claim would
/// put it straight back, and an attempt in flight takes it when it ends.
pub(super) fn next_in_line_stmts(
    db: &D1Database,
    endpoint_id: &str,
    now: Timestamp,
    lease: Option<Timestamp>,
) -> Result<[D1PreparedStatement; 3], EdgeError> {
    Ok([
        due_query(db, None, Some(endpoint_id))?,
        db::stmt(
            db,
            &format!(
                "UPDATE webhook_deliveries SET waiting = 0, attempts = attempts + 1, next_attempt_at = ?3,
                     in_flight_until = ?3, updated_at = ?2
                 WHERE ?3 IS NOT NULL AND id = {OLDEST_IN_LINE} AND {READY}
                   AND EXISTS (SELECT 1 FROM {GATES_OPEN} AND {IN_FLIGHT} < {IN_FLIGHT_LIMIT})
                 RETURNING id, attempts"
            ),
            &[text(endpoint_id), time(now), lease.map_or(JsValue::NULL, time)],
        )?,
        db::stmt(
            db,
            &format!(
                "UPDATE webhook_deliveries SET waiting = 0, updated_at = ?2 WHERE id = {OLDEST_IN_LINE}
                   AND changes() = 0
                   AND NOT (?3 IS NOT NULL AND {READY} AND EXISTS (SELECT 1 FROM {GATES_OPEN}))
                 RETURNING id, NULL AS attempts"
            ),
            &[text(endpoint_id), time(now), lease.map_or(JsValue::NULL, time)],
        )?,
    ])
}

/// What the last three results of a batch ending in [`next_in_line_stmts`] took.
pub(super) fn taken(results: &[crate::store::Reply], at: Timestamp) -> Result<Option<Taken>, EdgeError> {
    crate::store::row! {
        struct Took {
            id: String,
            attempts: Option<i64>,
        }
    }
    let [read, claim, take] = results.get(results.len().saturating_sub(3)..).unwrap_or_default() else {
        return Err(EdgeError::unavailable("store", "next in line: short batch"));
    };
    let took = db::rows::<Took>(claim)?.into_iter().chain(db::rows::<Took>(take)?).next();
    let Some(Took { id, attempts }) = took else { return Ok(None) };
    let due = db::rows::<Due>(read)?.into_iter().next().filter(|due| due.id == id).map(Box::new);
    Ok(Some(Taken { id, due, claimed: attempts, at }))
}
