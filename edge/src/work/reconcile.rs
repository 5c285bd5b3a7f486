//! Reconciliation (docs/contract.md §4): the cron asks the carrier about calls and messages
//! whose next webhook is overdue, and applies what it learns as one more carrier fact, in the
//! carrier's own format (built in `exactly_core::learned`, beside the carrier's parser), under a
//! dedupe key of its own. The fact then takes the path every webhook takes, so a reconciled ending and a late real webhook never both take effect: the
//! call machine and the message lattice apply the first and ignore the second.

use exactly_core::event::Provider;
use exactly_core::learned::Learned;
use exactly_core::Timestamp;
use serde_json::json;

use crate::carrier::{telnyx, CallResult};
use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self as jobs, Job};
use crate::store::reconcile::{self as stale, StaleCall, StaleMessage};
use crate::store::{calls, carrier_events, messages, AccountDb};

/// At most this many calls and this many messages are asked about per run.
const BATCH: u32 = 20;

/// Messages left `sent` longer than this are no longer asked about: some carriers never give a
/// final word, and asking forever would crowd out the messages reconciliation is for.
const MESSAGE_HORIZON_SECS: i64 = 3 * 24 * 3600;

/// How long a ringing call may outlast its ring plan (every target rung for its timeout).
const RING_MARGIN_MILLIS: i64 = 120_000;

/// What one run did.
#[derive(Debug, Default)]
pub struct Report {
    /// Calls and messages asked about.
    pub asked: usize,
    /// Facts learned and stored (each then processed like a webhook).
    pub learned: usize,
}

/// One reconciliation run in `account` (its part of the cron's tick, `work::cron`).
pub async fn run_database(account: &AccountDb) -> Result<Report, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let config = account.config();
    let now = now();
    let ago = |secs: i64| Timestamp::from_unix_millis(now.unix_millis() - secs * 1000);
    let mut report = Report::default();
    let mut learned = Vec::new();

    let call_cutoff = ago(config.reconcile_call_idle_secs);
    let mut calls = stale::idle_calls(db, call_cutoff, call_cutoff, BATCH).await?;
    calls.extend(stale::ringing_calls(db, now, RING_MARGIN_MILLIS, call_cutoff, BATCH).await?);
    for call in calls {
        // One call the carrier cannot answer about does not stop the others.
        match ask_about_call(account, &call, call_cutoff, now).await {
            Ok((asked, fact)) => {
                report.asked += usize::from(asked);
                learned.extend(fact);
            }
            Err(e) => {
                worker::console_error!("{}", json!({"cron": "reconcile", "call": call.id, "error": e.to_string()}))
            }
        }
    }
    let message_cutoff = ago(config.reconcile_message_secs);
    let oldest = ago(MESSAGE_HORIZON_SECS);
    for message in stale::stale_messages(db, oldest, message_cutoff, message_cutoff, BATCH).await? {
        match ask_about_message(account, &message, message_cutoff, now).await {
            Ok((asked, fact)) => {
                report.asked += usize::from(asked);
                learned.extend(fact);
            }
            Err(e) => {
                worker::console_error!(
                    "{}",
                    json!({"cron": "reconcile", "message": message.id, "error": e.to_string()})
                )
            }
        }
    }
    report.learned = learned.len();
    jobs::enqueue_many(env, learned.iter().map(|id| Job::carrier_event(id)).collect()).await?;
    Ok(report)
}

async fn ask_about_call(
    account: &AccountDb,
    call: &StaleCall,
    cutoff: Timestamp,
    now: Timestamp,
) -> Result<(bool, Option<String>), EdgeError> {
    if !calls::claim_check(account.db(), &call.id, cutoff, now).await? {
        return Ok((false, None));
    }
    Ok((true, reconcile_call(account, call, now).await?))
}

async fn ask_about_message(
    account: &AccountDb,
    message: &StaleMessage,
    cutoff: Timestamp,
    now: Timestamp,
) -> Result<(bool, Option<String>), EdgeError> {
    if !messages::claim_check(account.db(), &message.id, cutoff, now).await? {
        return Ok((false, None));
    }
    Ok((true, reconcile_message(account, message, now).await?))
}

/// Asks whether the caller's leg is still up; if it is gone, stores its hangup as a Telnyx
/// `call.hangup` under the key `reconciled:{call}:hangup`.
async fn reconcile_call(account: &AccountDb, call: &StaleCall, now: Timestamp) -> Result<Option<String>, EdgeError> {
    if call.carrier != Provider::Telnyx {
        return Ok(None);
    }
    let config = account.config();
    let status = match telnyx::call_status(config, &call.call_control_id).await? {
        CallResult::Ok(status) => status,
        CallResult::Refused(_) | CallResult::Transient(_) | CallResult::Lost(_) => return Ok(None),
    };
    // Alive, or gone without saying when: nothing to learn (a guessed end would bill a guess).
    let (false, Some(ended_at)) = (status.alive, status.ended_at) else {
        if !status.alive {
            worker::console_error!(
                "{}",
                json!({"cron": "reconcile", "call": call.id, "problem": "the carrier says the call ended but not when"})
            );
        }
        return Ok(None);
    };
    let of = exactly_core::telnyx::CallOf {
        call_control_id: &call.call_control_id,
        call_leg_id: &call.call_leg_id,
        call_session_id: &call.call_session_id,
        from: &call.from_number,
        to: &call.to_number,
    };
    learned(account, Provider::Telnyx, &exactly_core::telnyx::learned_hangup(&call.id, &of, ended_at), now).await
}

/// Asks what became of a sent message; a final word (delivered or failed) is stored as the
/// carrier's own status report.
async fn reconcile_message(
    account: &AccountDb,
    message: &StaleMessage,
    now: Timestamp,
) -> Result<Option<String>, EdgeError> {
    let carrier = message.carrier;
    let id = &message.carrier_message_id;
    let answer = crate::carrier::message_status(account.config(), carrier, id).await?;
    let CallResult::Ok((status, errors)) = answer else { return Ok(None) };
    match exactly_core::learned::final_status(carrier, id, &status, &errors, now) {
        Some(fact) => learned(account, carrier, &fact, now).await,
        None => Ok(None),
    }
}

/// Stores `fact`, learned from `carrier`'s API, as that carrier's event.
async fn learned(
    account: &AccountDb,
    carrier: Provider,
    fact: &Learned,
    now: Timestamp,
) -> Result<Option<String>, EdgeError> {
    let log = carrier_events::Log::open(account.env(), account.config());
    let stored = log.store_learned(carrier, &fact.event_id, fact.event_type, &fact.body, now).await?;
    worker::console_log!(
        "{}",
        json!({"cron": "reconcile", "carrier": carrier.as_str(), "event": fact.event_id, "stored": stored.is_some()})
    );
    Ok(stored)
}
