//! Call Control events: `call.initiated`, `call.answered`, `call.hangup`.
//!
//! Carrier commands (answer, dial, bridge, hang up) are issued *before* the batch that marks
//! the event processed, each with an id that makes a repeat a no-op at the carrier: a job that
//! crashes in between runs again and finishes the same way. The sequential ring's decisions are
//! the call's Durable Object's ([`crate::ring`]).

use exactly_core::call::{self, HangupDecision};
use exactly_core::event::{CallLegEvent, CallDirection, Hangup};
use exactly_core::ring::LegTag;
use exactly_core::{CarrierEvent, Timestamp};
use serde::Deserialize;
use worker::{D1Database, Env};

use crate::carrier_api::{self, CallResult, Command};
use crate::carrier_events::{self, Row};
use crate::calls::{self, Call};
use crate::db;
use crate::error::EdgeError;
use crate::jobs::Outcome;
use crate::platform::now;
use crate::processor::applied;
use crate::ring::{self, Op};

#[derive(Deserialize)]
struct Owner {
    account_id: String,
    ring_targets: String,
}


/// Issues a command; a transient failure retries the whole job.
async fn command(env: &Env, call_control_id: &str, command: Command<'_>, command_id: &str) -> Result<Option<Outcome>, EdgeError> {
    Ok(match carrier_api::command(env, call_control_id, command, command_id).await? {
        CallResult::Ok(()) => None,
        // The leg is gone or the command no longer applies: nothing to repeat.
        CallResult::Refused(e) => {
            worker::console_warn!("{}", serde_json::json!({"command": command_id, "outcome": "refused", "code": e.code}));
            None
        }
        CallResult::Transient(_) => Some(Outcome::RetryIn(5, "carrier command failed")),
    })
}

/// `call.initiated`: an inbound call creates the call and starts its ring.
pub async fn initiated(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, leg: &CallLegEvent) -> Result<Outcome, EdgeError> {
    // Legs the platform dialled carry its tag; their initiation changes nothing.
    if leg.direction == CallDirection::Outgoing || leg.client_state.as_deref().and_then(LegTag::parse).is_some() {
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    }
    let owner: Option<Owner> = db::first(db::stmt(
        db,
        "SELECT account_id, ring_targets FROM phone_numbers WHERE phone_number = ?1",
        &[db::text(&leg.to)],
    )?)
    .await?;
    let Some(owner) = owner else {
        carrier_events::mark_failed(db, &row.id, &format!("no account owns the number {}", leg.to)).await?;
        return Ok(Outcome::Done("failed"));
    };
    let (call, created) = calls::create_inbound(db, &owner.account_id, event.provider, leg, now()).await?;
    crate::deliveries::announce(env, db, &created).await?;
    let targets: Vec<String> = serde_json::from_str(&owner.ring_targets).unwrap_or_default();
    if call.ended_at.is_none() && !targets.is_empty() {
        if let Some(retry) = command(env, &call.call_control_id, Command::Answer, &format!("{}:answer", call.id)).await? {
            return Ok(retry);
        }
        let answer = ring::send(env, &call.id, &Op::Start { call_id: call.id.clone(), caller_number: call.to_number.clone(), targets }).await?;
        if answer.decision == "pending" {
            return Ok(Outcome::RetryIn(10, "a dial is in flight"));
        }
    }
    applied(carrier_events::mark_processed(db, &row.id, now()).await?)
}

/// `call.answered`: a dialled leg answered; the ring stops and the legs are bridged.
pub async fn answered(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, leg: &CallLegEvent) -> Result<Outcome, EdgeError> {
    let Some(tag) = leg.client_state.as_deref().and_then(LegTag::parse) else {
        // The caller's own leg, answered by the platform: nothing to decide.
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    };
    let Some(call) = calls::by_id(db, &tag.call).await? else {
        carrier_events::mark_failed(db, &row.id, &format!("no call {}", tag.call)).await?;
        return Ok(Outcome::Done("failed"));
    };
    let answer = ring::send(env, &call.id, &Op::LegAnswered { position: tag.position }).await?;
    if answer.decision != "bridge" {
        // A second leg answering after the first: hang it up, it will not be bridged.
        if answer.state == "answered" && answer.position != tag.position {
            if let Some(retry) = command(env, &leg.leg.call_control_id, Command::Hangup, &format!("{}:leg:{}:hangup", call.id, tag.position)).await? {
                return Ok(retry);
            }
        }
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    }
    let bridge = Command::Bridge { other_call_control_id: &leg.leg.call_control_id };
    if let Some(retry) = command(env, &call.call_control_id, bridge, &format!("{}:bridge:{}", call.id, tag.position)).await? {
        return Ok(retry);
    }
    let at = event.occurred_at.unwrap_or_else(now);
    crate::processor::announced(env, db, calls::answer(db, &call, tag.position, at, &row.id, now()).await?).await
}

/// `call.hangup`: a dialled leg (advance the ring) or the caller (end the call).
pub async fn hangup(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, hangup: &Hangup) -> Result<Outcome, EdgeError> {
    let at = event.occurred_at.unwrap_or_else(now);
    match hangup.client_state.as_deref().and_then(LegTag::parse) {
        Some(tag) => leg_hangup(env, db, row, hangup, tag, at).await,
        None => caller_hangup(env, db, row, event, hangup, at).await,
    }
}

async fn leg_hangup(env: &Env, db: &D1Database, row: &Row, hangup: &Hangup, tag: LegTag, at: Timestamp) -> Result<Outcome, EdgeError> {
    let Some(call) = calls::by_id(db, &tag.call).await? else {
        carrier_events::mark_failed(db, &row.id, &format!("no call {}", tag.call)).await?;
        return Ok(Outcome::Done("failed"));
    };
    let answer = ring::send(env, &call.id, &Op::LegHungUp { position: tag.position }).await?;
    if answer.decision == "pending" {
        return Ok(Outcome::RetryIn(10, "a dial is in flight"));
    }
    // The answered leg hung up: the conversation is over, hang up the caller too; the caller's
    // hangup ends the call.
    if answer.state == "answered" && answer.position == tag.position {
        if let Some(retry) = command(env, &call.call_control_id, Command::Hangup, &format!("{}:hangup", call.id)).await? {
            return Ok(retry);
        }
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    }
    // Every target tried and none answered: the call ends as missed.
    let exhausted = answer.state == "over" && answer.position == answer.targets && call.answered_at.is_none();
    if exhausted {
        if let Some(retry) = command(env, &call.call_control_id, Command::Hangup, &format!("{}:hangup", call.id)).await? {
            return Ok(retry);
        }
        db::batch(db, vec![calls::leg_no_answer_stmt(db, &call.id, tag.position, &hangup.cause, now())?]).await?;
        return end_call(env, db, &call, at, row).await;
    }
    let results = db::batch(db, vec![
        calls::leg_no_answer_stmt(db, &call.id, tag.position, &hangup.cause, now())?,
        carrier_events::mark_processed_stmt(db, &row.id, now())?,
    ])
    .await?;
    applied(results.first().map(db::changes) == Some(1))
}

async fn caller_hangup(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, hangup: &Hangup, at: Timestamp) -> Result<Outcome, EdgeError> {
    let Some(call) = calls::by_caller_leg(db, event.provider, &hangup.leg.call_control_id).await? else {
        // A leg this product did not create a call for (e.g. to a number without an owner).
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    };
    if call.ended_at.is_none() {
        let answer = ring::send(env, &call.id, &Op::CallerLeft).await?;
        // A leg still ringing is hung up with the caller.
        if answer.decision == "stopped" || (answer.state == "over" && answer.dialed == answer.position && call.answered_at.is_none()) {
            let ringing = calls::legs(db, &call.id).await?.into_iter().find(|l| l.position as u32 == answer.position && l.outcome == "dialing");
            if let Some(control) = ringing.and_then(|l| l.call_control_id) {
                if let Some(retry) = command(env, &control, Command::Hangup, &format!("{}:leg:{}:hangup", call.id, answer.position)).await? {
                    return Ok(retry);
                }
            }
        }
    }
    end_call(env, db, &call, at, row).await
}

async fn end_call(env: &Env, db: &D1Database, call: &Call, at: Timestamp, row: &Row) -> Result<Outcome, EdgeError> {
    match call::hang_up(call.state(), at) {
        HangupDecision::Ended(end) => match calls::end(db, call, end, Some(&row.id), now()).await? {
            Some(change) => crate::processor::announced(env, db, change).await,
            None => Ok(Outcome::RetryIn(1, "the call changed under the decision")),
        },
        HangupDecision::Unchanged => applied(carrier_events::mark_processed(db, &row.id, now()).await?),
    }
}
