//! The `calls` and `call_legs` tables and every guarded statement that moves a call.
//!
//! A call ends once: `WHERE ended_at IS NULL`. Its duration, billed minutes, the usage row and
//! the `call.completed`/`call.missed` event are written in that same batch, each only if the
//! end happened.

use exactly_core::call::{CallEnd, CallState, CallStatus};
use exactly_core::event::CallLegEvent;
use exactly_core::{Provider, Timestamp};
use serde::Deserialize;
use serde_json::{json, Value};
use worker::{D1Database, D1PreparedStatement};

use crate::carrier_api::DialedLeg;
use crate::db::{self, int, opt_text, text, time};
use crate::error::EdgeError;
use crate::http::Cursor;
use crate::outbox::{Change, Event};
use crate::platform::new_id;
use crate::usage;

/// A call row.
#[derive(Clone, Debug, Deserialize)]
pub struct Call {
    pub id: String,
    pub account_id: String,
    pub direction: String,
    pub from_number: String,
    pub to_number: String,
    pub status: String,
    pub carrier: String,
    pub call_session_id: String,
    pub call_control_id: String,
    pub call_leg_id: String,
    pub answered_at: Option<f64>,
    pub ended_at: Option<f64>,
    pub duration_secs: Option<f64>,
    pub billed_minutes: Option<f64>,
    pub created_at: f64,
    pub updated_at: f64,
}

/// A leg row.
#[derive(Clone, Debug, Deserialize)]
pub struct Leg {
    pub position: f64,
    pub target: String,
    pub call_control_id: Option<String>,
    pub call_leg_id: Option<String>,
    pub outcome: String,
    pub hangup_cause: Option<String>,
}

const COLUMNS: &str = "id, account_id, direction, from_number, to_number, status, carrier, call_session_id, call_control_id,
    call_leg_id, answered_at, ended_at, duration_secs, billed_minutes, created_at, updated_at";

impl Call {
    /// The state the core's call machine decides on.
    pub fn state(&self) -> CallState {
        CallState {
            status: CallStatus::from_name(&self.status).unwrap_or(CallStatus::Ringing),
            answered_at: self.answered_at.map(db::millis),
            ended_at: self.ended_at.map(db::millis),
        }
    }

    /// The call as the API (and every customer event) shows it.
    pub fn to_json(&self, legs: &[Leg]) -> Value {
        let at = |t: Option<f64>| t.map(|t| db::millis(t).to_rfc3339());
        json!({
            "id": self.id,
            "direction": self.direction,
            "from": self.from_number,
            "to": self.to_number,
            "status": self.status,
            "answered_at": at(self.answered_at),
            "ended_at": at(self.ended_at),
            "duration_secs": self.duration_secs.map(|d| d as i64),
            "billed_minutes": self.billed_minutes.map(|m| m as i64),
            "legs": legs.iter().map(|l| json!({
                "position": l.position as i64, "target": l.target, "outcome": l.outcome,
                "hangup_cause": l.hangup_cause, "call_control_id": l.call_control_id,
            })).collect::<Vec<_>>(),
            "created_at": db::millis(self.created_at).to_rfc3339(),
            "updated_at": db::millis(self.updated_at).to_rfc3339(),
        })
    }
}

/// Creates the call for an inbound leg, once per carrier session, with its `call.initiated`
/// event. Returns the stored call and what this run changed.
pub async fn create_inbound(db: &D1Database, account_id: &str, carrier: Provider, leg: &CallLegEvent, now: Timestamp) -> Result<(Call, Change), EdgeError> {
    let id = new_id("call")?;
    let draft = Call {
        id: id.clone(),
        account_id: account_id.to_owned(),
        direction: "inbound".into(),
        from_number: leg.from.clone(),
        to_number: leg.to.clone(),
        status: CallStatus::Ringing.as_str().into(),
        carrier: carrier.as_str().into(),
        call_session_id: leg.leg.call_session_id.clone(),
        call_control_id: leg.leg.call_control_id.clone(),
        call_leg_id: leg.leg.call_leg_id.clone(),
        answered_at: None,
        ended_at: None,
        duration_secs: None,
        billed_minutes: None,
        created_at: now.unix_millis() as f64,
        updated_at: now.unix_millis() as f64,
    };
    let event = Event::new(account_id, CallStatus::Ringing.event_type(), &id, draft.to_json(&[]), now)?;
    let results = db::batch(db, vec![
        db::stmt(
            db,
            "INSERT INTO calls (id, account_id, direction, from_number, to_number, status, carrier, call_session_id, call_control_id,
                                call_leg_id, created_at, updated_at)
             VALUES (?1, ?2, 'inbound', ?3, ?4, 'ringing', ?5, ?6, ?7, ?8, ?9, ?9)
             ON CONFLICT (carrier, call_session_id) DO NOTHING",
            &[text(&id), text(account_id), text(&leg.from), text(&leg.to), text(carrier.as_str()), text(&leg.leg.call_session_id),
              text(&leg.leg.call_control_id), text(&leg.leg.call_leg_id), time(now)],
        )?,
        event.insert_if_changed(db, now)?,
        event.fan_out(db, now)?,
        db::stmt(db, &format!("SELECT {COLUMNS} FROM calls WHERE carrier = ?1 AND call_session_id = ?2"), &[text(carrier.as_str()), text(&leg.leg.call_session_id)])?,
    ])
    .await?;
    let call = results
        .get(3)
        .map(db::rows::<Call>)
        .transpose()?
        .and_then(|rows| rows.into_iter().next())
        .ok_or_else(|| EdgeError::Unavailable("call vanished after insert".into()))?;
    Ok((call, Change::of(&results, Some(&event))))
}

/// One call by id, whatever its account (for jobs).
pub async fn by_id(db: &D1Database, id: &str) -> Result<Option<Call>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM calls WHERE id = ?1"), &[text(id)])?).await
}

/// The call whose caller leg is `call_control_id`.
pub async fn by_caller_leg(db: &D1Database, carrier: Provider, call_control_id: &str) -> Result<Option<Call>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM calls WHERE carrier = ?1 AND call_control_id = ?2"), &[text(carrier.as_str()), text(call_control_id)])?).await
}

/// One call of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Call>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM calls WHERE id = ?1 AND account_id = ?2"), &[text(id), text(account_id)])?).await
}

/// A page of an account's calls, newest first.
pub async fn list(db: &D1Database, account_id: &str, status: Option<&str>, cursor: Option<Cursor>, limit: u32) -> Result<Vec<Call>, EdgeError> {
    let (at, id) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {COLUMNS} FROM calls WHERE account_id = ?1 AND (?2 IS NULL OR status = ?2)
               AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
             ORDER BY created_at DESC, id DESC LIMIT ?5"
        ),
        &[text(account_id), opt_text(status), at, id, int(i64::from(limit))],
    )?)
    .await
}

/// The legs of a call, in ring order.
pub async fn legs(db: &D1Database, call_id: &str) -> Result<Vec<Leg>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT position, target, call_control_id, call_leg_id, outcome, hangup_cause FROM call_legs WHERE call_id = ?1 ORDER BY position",
        &[text(call_id)],
    )?)
    .await
}

/// Records a dialled (or refused) leg, once per position.
#[allow(clippy::too_many_arguments)]
pub async fn record_leg(
    db: &D1Database,
    call_id: &str,
    position: u32,
    target: &str,
    leg: Option<&DialedLeg>,
    outcome: &str,
    hangup_cause: Option<&str>,
    now: Timestamp,
) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "INSERT INTO call_legs (id, call_id, position, target, call_control_id, call_leg_id, outcome, hangup_cause, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)
         ON CONFLICT (call_id, position) DO NOTHING",
        &[text(&new_id("leg")?), text(call_id), int(i64::from(position)), text(target), opt_text(leg.map(|l| l.call_control_id.as_str())),
          opt_text(leg.map(|l| l.call_leg_id.as_str())), text(outcome), opt_text(hangup_cause), time(now)],
    )?)
    .await?;
    Ok(())
}

/// A leg's unanswered hangup, with the carrier event's processed mark.
pub fn leg_no_answer_stmt(db: &D1Database, call_id: &str, position: u32, cause: &str, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE call_legs SET outcome = 'no_answer', hangup_cause = ?3, updated_at = ?4 WHERE call_id = ?1 AND position = ?2 AND outcome = 'dialing'",
        &[text(call_id), int(i64::from(position)), text(cause), time(now)],
    )
}

/// `ringing -> in_progress` when the leg at `position` answered: the `call.answered` event and
/// the leg's outcome, with the carrier event's processed mark.
pub async fn answer(db: &D1Database, call: &Call, position: u32, at: Timestamp, carrier_event: &str, now: Timestamp) -> Result<Change, EdgeError> {
    let after = Call { status: CallStatus::InProgress.as_str().into(), answered_at: Some(at.unix_millis() as f64), updated_at: now.unix_millis() as f64, ..call.clone() };
    let mut legs = legs(db, &call.id).await?;
    legs.iter_mut().filter(|l| l.position as u32 == position).for_each(|l| l.outcome = "answered".into());
    let event = Event::new(&call.account_id, CallStatus::InProgress.event_type(), &call.id, after.to_json(&legs), now)?;
    let results = db::batch(db, vec![
        db::stmt(
            db,
            "UPDATE calls SET status = 'in_progress', answered_at = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'ringing' AND ended_at IS NULL",
            &[text(&call.id), time(at), time(now)],
        )?,
        event.insert_if_changed(db, now)?,
        db::stmt(
            db,
            "UPDATE call_legs SET outcome = 'answered', updated_at = ?3 WHERE call_id = ?1 AND position = ?2 AND outcome = 'dialing'",
            &[text(&call.id), int(i64::from(position)), time(now)],
        )?,
        event.fan_out(db, now)?,
        crate::carrier_events::mark_processed_stmt(db, carrier_event, now)?,
    ])
    .await?;
    Ok(Change::of(&results, Some(&event)))
}

/// Ends the call once (`ended_at IS NULL`), as decided by the core from the state read before:
/// the guard also checks that the answer time is still the one the decision saw. The duration,
/// billed minutes, usage row and `call.completed`/`call.missed` event go in the same batch.
/// Returns `None` when the call changed under the decision (decide again), else what this run
/// changed.
pub async fn end(db: &D1Database, call: &Call, end: CallEnd, carrier_event: Option<&str>, now: Timestamp) -> Result<Option<Change>, EdgeError> {
    let after = Call {
        status: end.status.as_str().into(),
        ended_at: Some(end.ended_at.unix_millis() as f64),
        duration_secs: Some(end.duration_secs as f64),
        billed_minutes: Some(end.billable_minutes as f64),
        updated_at: now.unix_millis() as f64,
        ..call.clone()
    };
    let mut legs = legs(db, &call.id).await?;
    legs.iter_mut().filter(|l| l.outcome == "dialing").for_each(|l| l.outcome = "canceled".into());
    let event = Event::new(&call.account_id, end.status.event_type(), &call.id, after.to_json(&legs), now)?;
    let answered = call.answered_at.map_or(wasm_bindgen::JsValue::NULL, |t| db::int(t as i64));
    let mut statements = vec![
        db::stmt(
            db,
            "UPDATE calls SET status = ?2, ended_at = ?3, duration_secs = ?4, billed_minutes = ?5, updated_at = ?6
             WHERE id = ?1 AND ended_at IS NULL AND answered_at IS ?7",
            &[text(&call.id), text(end.status.as_str()), time(end.ended_at), int(end.duration_secs as i64), int(end.billable_minutes as i64), time(now), answered],
        )?,
        event.insert_if_changed(db, now)?,
    ];
    if end.billable_minutes > 0 {
        statements.push(usage::charge_if_changed(db, &call.account_id, usage::Kind::CallMinutes, end.billable_minutes as i64, &call.id, now)?);
    }
    statements.push(db::stmt(db, "UPDATE call_legs SET outcome = 'canceled', updated_at = ?2 WHERE call_id = ?1 AND outcome = 'dialing'", &[text(&call.id), time(now)])?);
    statements.push(event.fan_out(db, now)?);
    if let Some(id) = carrier_event {
        // Processed only once the call is ended (by this batch or before): if its answer time
        // moved under the decision, the event stays pending and is decided again.
        statements.push(db::stmt(
            db,
            "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1
             WHERE id = ?1 AND processed_at IS NULL AND error IS NULL
               AND EXISTS (SELECT 1 FROM calls WHERE id = ?3 AND ended_at IS NOT NULL)",
            &[text(id), time(now), text(&call.id)],
        )?);
    }
    let results = db::batch(db, statements).await?;
    let change = Change::of(&results, Some(&event));
    if change.changed {
        return Ok(Some(change));
    }
    // Nothing changed: either it had ended (done) or its answer time moved (decide again).
    let fresh = by_id(db, &call.id).await?;
    Ok(match fresh {
        Some(c) if c.ended_at.is_none() => None,
        _ => Some(change),
    })
}
