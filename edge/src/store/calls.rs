//! The `calls` and `call_legs` tables, written only from the call machine's actions
//! (`exactly_core::call_machine`, executed by the call's Durable Object in [`crate::call_object`]).
//!
//! Every write is guarded so running it again changes nothing: the call is inserted once per
//! carrier session, answered once (`status = 'ringing'`), ended once (`ended_at IS NULL`), and a
//! leg's row only takes a write newer than the one it holds (`version`). Each customer event,
//! and for an end the usage row, is written in the same batch, only if the guarded statement
//! changed a row.

use exactly_core::call::CallStatus;
use exactly_core::call_machine::{CallEnd, CallView, LegOutcome, LegView};
use exactly_core::Provider;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::platform::new_id;
use crate::store::messages::Direction;
use crate::store::outbox::{Change, Event};
use crate::store::transition::Transition;
use crate::store::usage;
use crate::store::Cursor;
use crate::store::{self as db, int, opt_text, opt_time, text, time};

crate::store::row! {
    /// A call row.
    #[derive(Clone, Debug)]
    pub struct Call {
        pub id: String,
        pub account_id: String,
        pub direction: Direction,
        pub from_number: String,
        pub to_number: String,
        pub status: CallStatus,
        pub carrier: Provider,
        pub call_session_id: String,
        pub call_control_id: String,
        pub call_leg_id: String,
        pub answered_at: Option<Timestamp>,
        pub ended_at: Option<Timestamp>,
        pub duration_secs: Option<i64>,
        pub billed_minutes: Option<i64>,
        pub created_at: Timestamp,
        pub updated_at: Timestamp,
    }
}

crate::store::row! {
    /// A leg row.
    #[derive(Clone, Debug)]
    pub struct Leg {
        pub position: i64,
        pub target: String,
        pub call_control_id: Option<String>,
        pub call_leg_id: Option<String>,
        pub outcome: LegOutcome,
        pub hangup_cause: Option<String>,
        /// When the leg was dialled (its row's first write); unknown in a change not yet written.
        pub created_at: Option<Timestamp>,
        pub answered_at: Option<Timestamp>,
        pub ended_at: Option<Timestamp>,
    }
}

const COLUMNS: &str =
    "id, account_id, direction, from_number, to_number, status, carrier, call_session_id, call_control_id,
    call_leg_id, answered_at, ended_at, duration_secs, billed_minutes, created_at, updated_at";

impl Call {
    /// The call as the API (and every customer event) shows it.
    pub fn to_json(&self, legs: &[Leg]) -> Value {
        let at = |t: Option<Timestamp>| t.map(|t| t.to_rfc3339());
        json!({
            "id": self.id,
            "direction": self.direction.as_str(),
            "from": self.from_number,
            "to": self.to_number,
            "status": self.status,
            "answered_at": at(self.answered_at),
            "ended_at": at(self.ended_at),
            "duration_secs": self.duration_secs,
            "billed_minutes": self.billed_minutes,
            "legs": legs.iter().map(|l| {
                let mut leg = json!({
                    "position": l.position, "target": l.target, "outcome": l.outcome.as_str(),
                    "hangup_cause": l.hangup_cause, "call_control_id": l.call_control_id,
                    "answered_at": at(l.answered_at), "ended_at": at(l.ended_at),
                });
                if let (Some(dialed), Some(fields)) = (l.created_at, leg.as_object_mut()) {
                    fields.insert("dialed_at".into(), json!(dialed.to_rfc3339()));
                }
                leg
            }).collect::<Vec<_>>(),
            "created_at": self.created_at.to_rfc3339(),
            "updated_at": self.updated_at.to_rfc3339(),
        })
    }
}

/// One call of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Call>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {COLUMNS} FROM calls WHERE id = ?1 AND account_id = ?2"),
        &[text(id), text(account_id)],
    )?)
    .await
}

/// A page of an account's calls, newest first.
pub async fn list(
    db: &D1Database,
    account_id: &str,
    status: Option<CallStatus>,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Call>, EdgeError> {
    let (at, id) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {COLUMNS} FROM calls WHERE account_id = ?1 AND (?2 IS NULL OR status = ?2)
               AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
             ORDER BY created_at DESC, id DESC LIMIT ?5"
        ),
        &[text(account_id), opt_text(status.map(CallStatus::as_str)), at, id, int(i64::from(limit))],
    )?)
    .await
}

/// The columns of a [`Leg`].
const LEG_COLUMNS: &str =
    "position, target, call_control_id, call_leg_id, outcome, hangup_cause, created_at, answered_at, ended_at";

/// One call of one account with its legs, in ring order, and its charge (`{kind, quantity,
/// charged_at}`, none until charged): one batch, so the three agree.
pub async fn get_shown(
    db: &D1Database,
    account_id: &str,
    id: &str,
) -> Result<Option<(Call, Vec<Leg>, Option<Value>)>, EdgeError> {
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                &format!("SELECT {COLUMNS} FROM calls WHERE id = ?1 AND account_id = ?2"),
                &[text(id), text(account_id)],
            )?,
            db::stmt(
                db,
                &format!("SELECT {LEG_COLUMNS} FROM call_legs WHERE call_id = ?1 ORDER BY position"),
                &[text(id)],
            )?,
            usage::call_charge_stmt(db, account_id, id)?,
        ],
    )
    .await?;
    let call: Option<Call> = results.first().map(db::rows).transpose()?.and_then(|rows| rows.into_iter().next());
    let Some(call) = call else { return Ok(None) };
    let legs: Vec<Leg> = results.get(1).map(db::rows).transpose()?.unwrap_or_default();
    let charge = results.get(2).map(usage::charge_in).transpose()?.flatten();
    Ok(Some((call, legs, charge)))
}

/// The legs of the calls `ids`, by call, each in ring order: one query for a page of calls.
pub async fn legs_of(db: &D1Database, ids: &[&str]) -> Result<std::collections::BTreeMap<String, Vec<Leg>>, EdgeError> {
    crate::store::row! {
        struct Row {
            call_id: String,
            leg: Leg = flatten,
        }
    }
    let ids = serde_json::to_string(ids).map_err(|e| EdgeError::platform("encode", e))?;
    let rows: Vec<Row> = db::all(db::stmt(
        db,
        &format!(
            "SELECT call_id, {LEG_COLUMNS} FROM call_legs WHERE call_id IN (SELECT value FROM json_each(?1))
             ORDER BY call_id, position"
        ),
        &[text(&ids)],
    )?)
    .await?;
    let mut by_call: std::collections::BTreeMap<String, Vec<Leg>> = std::collections::BTreeMap::new();
    for row in rows {
        by_call.entry(row.call_id).or_default().push(row.leg);
    }
    Ok(by_call)
}

/// The call and its legs as the rows will hold them after the machine's change at `now`.
fn rows_of(view: &CallView, now: Timestamp) -> (Call, Vec<Leg>) {
    let info = &view.info;
    let call = Call {
        id: info.id.clone(),
        account_id: info.account_id.clone(),
        direction: Direction::Inbound,
        from_number: info.from.clone(),
        to_number: info.to.clone(),
        status: view.status,
        carrier: info.carrier,
        call_session_id: info.call_session_id.clone(),
        call_control_id: info.call_control_id.clone(),
        call_leg_id: info.call_leg_id.clone(),
        answered_at: view.answered_at,
        ended_at: view.end.map(|e| e.ended_at),
        duration_secs: view.end.map(|e| i64::try_from(e.duration_secs).unwrap_or(i64::MAX)),
        billed_minutes: view.end.map(|e| i64::try_from(e.billable_minutes).unwrap_or(i64::MAX)),
        created_at: info.created_at,
        updated_at: now,
    };
    let legs = view.legs.iter().map(leg_row).collect();
    (call, legs)
}

fn leg_row(leg: &LegView) -> Leg {
    Leg {
        position: i64::from(leg.position),
        target: leg.target.clone(),
        call_control_id: leg.call_control_id.clone(),
        call_leg_id: None,
        outcome: leg.outcome,
        hangup_cause: leg.cause.clone(),
        created_at: None,
        answered_at: leg.answered_at,
        ended_at: leg.ended_at,
    }
}

/// The customer event announcing `view`, with the call as the API shows it.
fn event_of(view: &CallView, status: CallStatus, now: Timestamp) -> Result<Event, EdgeError> {
    let (call, legs) = rows_of(view, now);
    Event::new(&view.info.account_id, status.event_type(), &view.info.id, call.to_json(&legs), now)
}

/// Records the call once per carrier session (`ringing`), with its `call.initiated` event.
pub async fn record(db: &D1Database, view: &CallView, now: Timestamp) -> Result<Change, EdgeError> {
    let info = &view.info;
    let event = event_of(view, CallStatus::Ringing, now)?;
    let guard = db::stmt(
        db,
        "INSERT INTO calls (id, account_id, direction, from_number, to_number, status, carrier,
                 call_session_id, call_control_id,
                                call_leg_id, created_at, updated_at)
             VALUES (?1, ?2, 'inbound', ?3, ?4, 'ringing', ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT DO NOTHING",
        &[
            text(&info.id),
            text(&info.account_id),
            text(&info.from),
            text(&info.to),
            text(info.carrier.as_str()),
            text(&info.call_session_id),
            text(&info.call_control_id),
            text(&info.call_leg_id),
            time(info.created_at),
            time(now),
        ],
    )?;
    Ok(Transition::new(guard, Some(event)).commit(db, now).await?.change)
}

/// Writes a leg's outcome; a write older than the row's (`version`) changes nothing. Returns
/// whether the row changed.
pub async fn record_leg(
    db: &D1Database,
    call_id: &str,
    leg: &LegView,
    version: u32,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "INSERT INTO call_legs (id, call_id, position, target, call_control_id, outcome, hangup_cause, version,
             answered_at, ended_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)
         ON CONFLICT (call_id, position) DO UPDATE
           SET outcome = excluded.outcome, hangup_cause = excluded.hangup_cause,
               call_control_id = COALESCE(excluded.call_control_id, call_legs.call_control_id),
               answered_at = excluded.answered_at, ended_at = excluded.ended_at,
               version = excluded.version, updated_at = excluded.updated_at
           WHERE call_legs.version < excluded.version",
        &[
            text(&new_id("leg")?),
            text(call_id),
            int(i64::from(leg.position)),
            text(&leg.target),
            opt_text(leg.call_control_id.as_deref()),
            text(leg.outcome.as_str()),
            opt_text(leg.cause.as_deref()),
            int(i64::from(version)),
            opt_time(leg.answered_at),
            opt_time(leg.ended_at),
            time(now),
        ],
    )?)
    .await?;
    Ok(changed == 1)
}

/// `ringing -> in_progress` once, with the `call.answered` event.
pub async fn record_answered(
    db: &D1Database,
    view: &CallView,
    at: Timestamp,
    now: Timestamp,
) -> Result<Change, EdgeError> {
    let event = event_of(view, CallStatus::InProgress, now)?;
    let guard = db::stmt(
        db,
        "UPDATE calls SET status = 'in_progress', answered_at = ?2, updated_at = ?3 WHERE id = ?1 AND
         status = 'ringing' AND ended_at IS NULL",
        &[text(&view.info.id), time(at), time(now)],
    )?;
    Ok(Transition::new(guard, Some(event)).commit(db, now).await?.change)
}

/// Ends the call once (`ended_at IS NULL`): status, duration and billed minutes, the usage row
/// and the `call.completed`/`call.missed` event in the same batch, each only if the end happened.
pub async fn record_end(db: &D1Database, view: &CallView, end: CallEnd, now: Timestamp) -> Result<Change, EdgeError> {
    let event = event_of(view, end.status, now)?;
    let guard = db::stmt(
        db,
        "UPDATE calls SET status = ?2, ended_at = ?3, duration_secs = ?4, billed_minutes = ?5, updated_at = ?6
             WHERE id = ?1 AND ended_at IS NULL",
        &[
            text(&view.info.id),
            text(end.status.as_str()),
            time(end.ended_at),
            int(end.duration_secs as i64),
            int(end.billable_minutes as i64),
            time(now),
        ],
    )?;
    let mut transition = Transition::new(guard, Some(event));
    if end.billable_minutes > 0 {
        transition = transition.then(usage::charge_if_changed(
            db,
            &view.info.account_id,
            usage::Kind::CallMinutes,
            end.billable_minutes as i64,
            &view.info.id,
            now,
        )?);
    }
    Ok(transition.commit(db, now).await?.change)
}

/// Claims reconciliation's check of one call: whether this run asks the carrier (no other run
/// did since `checked_before`).
pub async fn claim_check(
    db: &D1Database,
    id: &str,
    checked_before: Timestamp,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE calls SET checked_at = ?3 WHERE id = ?1 AND checked_at < ?2 AND status IN ('ringing', 'in_progress')",
        &[text(id), time(checked_before), time(now)],
    )?)
    .await?;
    Ok(changed == 1)
}

/// The next page of the calls from or to `number`, that dialled it as a ring target, whose
/// events' bodies name it, or that still ring or talk while their number's ring plan holds it
/// (their object holds the plan: a call that ended never dialled a target it did not reach, and
/// its object's storage is gone), of `account` or of every account, after row `after`
/// (`store::erasures::window`).
pub async fn erasure_page(
    db: &D1Database,
    number: &str,
    account: Option<&str>,
    after: i64,
) -> Result<crate::store::erasures::Found, EdgeError> {
    crate::store::erasures::window(
        db,
        crate::store::erasures::Table::Calls,
        "SELECT rowid AS row_no, id, NULL AS body FROM calls
         WHERE rowid > ?1 AND rowid <= ?2
           AND (from_number = ?3 OR to_number = ?3
                OR EXISTS (SELECT 1 FROM call_legs l WHERE l.call_id = calls.id AND l.target = ?3)
                OR (status IN ('ringing', 'in_progress')
                    AND EXISTS (SELECT 1 FROM phone_numbers p, json_each(p.ring_targets) t
                                WHERE p.phone_number = calls.to_number AND t.value = ?3))
                OR EXISTS (SELECT 1 FROM outbound_events e
                           WHERE e.resource_id = calls.id AND instr(e.payload, ?5) > 0))
           AND (?4 IS NULL OR account_id = ?4)
         ORDER BY rowid LIMIT 25",
        // An event's body holds the number as a whole JSON string (its legs' targets).
        &[text(number), opt_text(account), text(&format!("\"{number}\""))],
        after,
    )
    .await
}

/// The statements that erase `number` from the calls `ids` (a JSON array) and from any leg that
/// dialled it: it reads as `erased` from then on.
pub fn redact(db: &D1Database, number: &str, ids: &str, erased: &str) -> Result<[D1PreparedStatement; 2], EdgeError> {
    Ok([
        db::stmt(
            db,
            "UPDATE calls SET from_number = CASE WHEN from_number = ?1 THEN ?3 ELSE from_number END,
                 to_number = CASE WHEN to_number = ?1 THEN ?3 ELSE to_number END
             WHERE id IN (SELECT value FROM json_each(?2))",
            &[text(number), text(ids), text(erased)],
        )?,
        db::stmt(
            db,
            "UPDATE call_legs SET target = ?2 WHERE call_id IN (SELECT value FROM json_each(?3)) AND target = ?1",
            &[text(number), text(erased), text(ids)],
        )?,
    ])
}
