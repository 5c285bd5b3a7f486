//! Call Control events (`call.initiated`, `call.answered`, `call.hangup`): routed to the machine
//! of their call, which lives in the call's Durable Object ([`crate::call_object`]).
//!
//! A dialled leg's events name their call in the tag the platform gave them; the caller's leg
//! events name it through their carrier session, so a caller's hangup that comes before its
//! `call.initiated` reaches the same machine and leaves a tombstone there. The only decision made
//! here is who owns the called number; the machine marks the event processed once the effects
//! before it are written.

use exactly_core::call_machine::{self, Input, Routed};
use exactly_core::CarrierEvent;

use crate::error::EdgeError;
use crate::platform::now;
use crate::store::carrier_events::{Log, Row};
use crate::store::numbers;
use crate::store::AccountDb;
use crate::work::outcome::{Done, Outcome};

/// Processes one stored call event.
pub async fn process(account: &AccountDb, log: &Log, row: &Row, event: &CarrierEvent) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let (call_id, fact) = match call_machine::route(event, now()) {
        Routed::Ignore => return Ok(Outcome::applied(log.mark_processed(row, now()).await?)),
        Routed::Fact { call_id, fact } => (call_id, fact),
        Routed::Inbound(inbound) => {
            let binding = crate::store::routes::of_number(env, account.config(), &inbound.call.to).await?;
            let owners = account.other(binding.as_deref())?;
            let Some(owner) = numbers::owner(owners.db(), &inbound.call.to).await? else {
                let problem = format!("no account owns the number {}", inbound.call.to);
                let failed = log.mark_failed(db, row, &problem).await?;
                crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &failed.signals).await?)
                    .await?;
                return Ok(Outcome::Done(Done::Failed));
            };
            let plan = owner.plan.map(|p| p.targets().to_vec()).unwrap_or_default();
            (inbound.call.id.clone(), inbound.fact(&owner.account_id, plan, owner.ring_timeout_secs))
        }
    };
    let answer = crate::call_object::send(env, &call_id, &Input::Carrier { event: row.id.clone(), fact }).await?;
    // Queued actions (a carrier or D1 failure) are the object's to finish, on its alarm.
    Ok(Outcome::Done(if answer.pending == 0 { Done::Applied } else { Done::Accepted }))
}
