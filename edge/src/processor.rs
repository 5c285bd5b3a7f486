//! Processing one stored carrier event: decode (core), decide (core), apply (one D1 batch).
//!
//! Any job may run twice; every effect below is guarded, and the event's processed mark is
//! written in the same batch as the effect it records.

use exactly_core::event::EventKind;
use exactly_core::message::{transition, Transition};
use exactly_core::{CarrierEvent, Provider};
use worker::{D1Database, Env};

use crate::carrier_events::{self, Row};
use crate::db;
use crate::error::EdgeError;
use crate::jobs::Outcome;
use crate::messages;
use crate::outbox::Change;
use crate::platform::{new_id, now};

/// Processes the stored carrier event `id`.
pub async fn process(env: &Env, db: &D1Database, id: &str) -> Result<Outcome, EdgeError> {
    let Some(row) = carrier_events::load(db, id).await? else {
        return Ok(Outcome::Done("no such event"));
    };
    if row.settled() {
        return Ok(Outcome::Done("no-op"));
    }
    let event = match parse(&row) {
        Ok(event) => event,
        Err(problem) => {
            carrier_events::mark_failed(db, id, &problem).await?;
            return Ok(Outcome::Done("failed"));
        }
    };
    let outcome = match &event.kind {
        EventKind::MessageReceived(inbound) => received(env, db, &row, &event, inbound).await?,
        EventKind::MessageStatus(report) => status_report(env, db, &row, &event, report).await?,
        EventKind::CallInitiated(_) | EventKind::CallAnswered(_) | EventKind::CallHangup(_) => crate::call_events::process(env, db, &row, &event).await?,
        // Calls, bridges and events this product does not act on are acknowledged as processed.
        _ => applied(carrier_events::mark_processed(db, id, now()).await?)?,
    };
    if outcome == Outcome::Done("applied") && crate::faults::crash_after_commit(&row.carrier_event_id) {
        return Err(EdgeError::Unavailable(format!("injected crash after commit of {}", row.carrier_event_id)));
    }
    Ok(outcome)
}

fn parse(row: &Row) -> Result<CarrierEvent, String> {
    let provider = Provider::from_name(&row.carrier).ok_or_else(|| format!("unknown carrier {}", row.carrier))?;
    let payload = row.payload.as_deref().ok_or("the payload was pruned before processing")?;
    exactly_core::parse_stored(provider, payload.as_bytes()).map_err(|e| format!("stored payload does not parse: {e}"))
}

/// A finished job: `applied` when its guarded change happened, `no-op` when not.
pub fn applied(changed: bool) -> Result<Outcome, EdgeError> {
    Ok(Outcome::Done(if changed { "applied" } else { "no-op" }))
}

/// After a change committed: enqueue its event's deliveries, and say what happened.
pub async fn announced(env: &Env, db: &D1Database, change: Change) -> Result<Outcome, EdgeError> {
    crate::deliveries::announce(env, db, &change).await?;
    applied(change.changed)
}

#[derive(serde::Deserialize)]
struct Owner {
    account_id: String,
}

async fn received(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, inbound: &exactly_core::event::InboundMessage) -> Result<Outcome, EdgeError> {
    let owner: Option<Owner> =
        db::first(db::stmt(db, "SELECT account_id FROM phone_numbers WHERE phone_number = ?1", &[db::text(&inbound.to)])?).await?;
    let Some(owner) = owner else {
        carrier_events::mark_failed(db, &row.id, &format!("no account owns the number {}", inbound.to)).await?;
        return Ok(Outcome::Done("failed"));
    };
    let id = new_id("msg")?;
    announced(env, db, messages::insert_inbound(db, &id, &owner.account_id, event.provider, inbound, &row.id, now()).await?).await
}

async fn status_report(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent, report: &exactly_core::event::StatusReport) -> Result<Outcome, EdgeError> {
    let Some(message) = messages::by_carrier_id(db, event.provider, &report.carrier_message_id).await? else {
        // The receipt beat the send result. It waits, parked on the carrier's message id, and
        // the batch that records the send wakes it; duplicates and sweeps park it again and
        // spend nothing. The park is refused if the message appeared meanwhile: decide again.
        return Ok(if carrier_events::park(db, &row.id, event.provider, &report.carrier_message_id).await? {
            Outcome::Done("parked")
        } else {
            Outcome::RetryIn(1, "the message appeared while parking")
        });
    };
    let (Some(current), Some(reported)) = (message.status(), report.status) else {
        return applied(carrier_events::mark_processed(db, &row.id, now()).await?);
    };
    match transition(current, reported) {
        Transition::Move { to, .. } => announced(env, db, messages::apply_report(db, &message, to, report, &row.id, now()).await?).await,
        // Duplicate, late or after a terminal word: nothing moves, the event is done.
        Transition::Unchanged(_) => {
            carrier_events::mark_processed(db, &row.id, now()).await?;
            Ok(Outcome::Done("no-op"))
        }
    }
}
