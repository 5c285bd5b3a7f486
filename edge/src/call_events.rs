//! Call Control events (`call.initiated`, `call.answered`, `call.hangup`): routed to the machine
//! of their call, which lives in the call's Durable Object ([`crate::ring`]).
//!
//! A dialled leg's events name their call in the tag the platform gave them; the caller's leg
//! events name it through their carrier session, so a caller's hangup that comes before its
//! `call.initiated` reaches the same machine and leaves a tombstone there. The only decision made
//! here is who owns the called number; the machine marks the event processed once the effects
//! before it are written.

use exactly_core::call_machine::{self, Input, Routed};
use exactly_core::ring::RingPlan;
use exactly_core::CarrierEvent;
use serde::Deserialize;
use worker::{D1Database, Env};

use crate::carrier_events::{self, Row};
use crate::db;
use crate::error::EdgeError;
use crate::jobs::Outcome;
use crate::platform::now;
use crate::processor::applied;

#[derive(Deserialize)]
struct Owner {
    account_id: String,
    ring_targets: String,
}

/// Processes one stored call event.
pub async fn process(env: &Env, db: &D1Database, row: &Row, event: &CarrierEvent) -> Result<Outcome, EdgeError> {
    let (call_id, fact) = match call_machine::route(event, now()) {
        Routed::Ignore => return applied(carrier_events::mark_processed(db, &row.id, now()).await?),
        Routed::Fact { call_id, fact } => (call_id, fact),
        Routed::Inbound(inbound) => {
            let owner: Option<Owner> = db::first(db::stmt(
                db,
                "SELECT account_id, ring_targets FROM phone_numbers WHERE phone_number = ?1",
                &[db::text(&inbound.call.to)],
            )?)
            .await?;
            let Some(owner) = owner else {
                carrier_events::mark_failed(db, &row.id, &format!("no account owns the number {}", inbound.call.to)).await?;
                return Ok(Outcome::Done("failed"));
            };
            // The plan was checked when the number was saved; a stored plan that no longer
            // parses rings nobody rather than guessing.
            let targets: Vec<String> = serde_json::from_str(&owner.ring_targets).unwrap_or_default();
            let plan = RingPlan::new(targets).map(|p| p.targets().to_vec()).unwrap_or_default();
            (inbound.call.id.clone(), inbound.fact(&owner.account_id, plan))
        }
    };
    let answer = crate::ring::send(env, &call_id, &Input::Carrier { event: row.id.clone(), fact }).await?;
    // Queued actions (a carrier or D1 failure) are the object's to finish, on its alarm.
    Ok(Outcome::Done(if answer.pending == 0 { "applied" } else { "accepted" }))
}
