//! Reconciliation (docs/contract.md §4): the cron asks the carrier about calls and messages
//! whose next webhook is overdue, and applies what it learns as one more carrier fact, in the
//! carrier's own format, under a dedupe key of its own. The fact then takes the path every
//! webhook takes, so a reconciled ending and a late real webhook never both take effect: the
//! call machine and the message lattice apply the first and ignore the second.

use exactly_core::event::Provider;
use exactly_core::message::MessageStatus;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::Env;

use crate::carrier::{plivo, telnyx, twilio, CallResult};
use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self as jobs, Job};
use crate::store::reconcile::{self as stale, StaleCall, StaleMessage};
use crate::store::{self as db, calls, carrier_events, messages};

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

/// One reconciliation run in the account database `env` is scoped to (its part of the cron's
/// tick, `work::cron`).
pub async fn run_database(env: &Env) -> Result<Report, EdgeError> {
    let config = crate::config::get(env)?;
    let db = db::database(env)?;
    let now = now();
    let ago = |secs: i64| Timestamp::from_unix_millis(now.unix_millis() - secs * 1000);
    let mut report = Report::default();
    let mut learned = Vec::new();

    let call_cutoff = ago(config.reconcile_call_idle_secs);
    let mut calls = stale::idle_calls(&db, call_cutoff, call_cutoff, BATCH).await?;
    calls.extend(stale::ringing_calls(&db, now, RING_MARGIN_MILLIS, call_cutoff, BATCH).await?);
    for call in calls {
        // One call the carrier cannot answer about does not stop the others.
        match ask_about_call(env, &db, &call, call_cutoff, now).await {
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
    for message in stale::stale_messages(&db, oldest, message_cutoff, message_cutoff, BATCH).await? {
        match ask_about_message(env, &db, &message, message_cutoff, now).await {
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
    env: &Env,
    db: &worker::D1Database,
    call: &StaleCall,
    cutoff: Timestamp,
    now: Timestamp,
) -> Result<(bool, Option<String>), EdgeError> {
    if !calls::claim_check(db, &call.id, cutoff, now).await? {
        return Ok((false, None));
    }
    Ok((true, reconcile_call(env, call, now).await?))
}

async fn ask_about_message(
    env: &Env,
    db: &worker::D1Database,
    message: &StaleMessage,
    cutoff: Timestamp,
    now: Timestamp,
) -> Result<(bool, Option<String>), EdgeError> {
    if !messages::claim_check(db, &message.id, cutoff, now).await? {
        return Ok((false, None));
    }
    Ok((true, reconcile_message(env, message, now).await?))
}

/// Asks whether the caller's leg is still up; if it is gone, stores its hangup as a Telnyx
/// `call.hangup` under the key `reconciled:{call}:hangup`.
async fn reconcile_call(env: &Env, call: &StaleCall, now: Timestamp) -> Result<Option<String>, EdgeError> {
    if call.carrier != Provider::Telnyx {
        return Ok(None);
    }
    let status = match telnyx::call_status(env, &call.call_control_id).await? {
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
    let event_id = format!("reconciled:{}:hangup", call.id);
    let body = telnyx_envelope(
        &event_id,
        "call.hangup",
        ended_at,
        json!({
            "call_control_id": call.call_control_id, "call_leg_id": call.call_leg_id,
            "call_session_id": call.call_session_id, "from": call.from_number, "to": call.to_number,
            "direction": "incoming", "hangup_cause": "normal_clearing", "hangup_source": "unknown",
        }),
    );
    learned(env, Provider::Telnyx, &event_id, "call.hangup", &body, now).await
}

/// Asks what became of a sent message; a final word (delivered or failed) is stored as the
/// carrier's own status report.
async fn reconcile_message(env: &Env, message: &StaleMessage, now: Timestamp) -> Result<Option<String>, EdgeError> {
    let carrier = message.carrier;
    let id = &message.carrier_message_id;
    let answer = match carrier {
        Provider::Telnyx => telnyx::message_status(env, id).await?,
        Provider::Twilio => twilio::message_status(env, id).await?,
        Provider::Plivo => plivo::message_status(env, id).await?,
    };
    let CallResult::Ok((status, errors)) = answer else { return Ok(None) };
    let mapped = match carrier {
        Provider::Telnyx => exactly_core::telnyx::message_status(&status),
        Provider::Twilio => exactly_core::twilio::message_status(&status),
        Provider::Plivo => exactly_core::plivo::message_status(&status),
    };
    if !mapped.is_some_and(MessageStatus::is_terminal) {
        return Ok(None);
    }
    let form = |pairs: &[(&str, &str)]| form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
    let code = |v: &Value| crate::carrier::text_of(v).filter(|c| c != "0");
    let (event_id, event_type, body) = match carrier {
        Provider::Telnyx => {
            let event_id = format!("reconciled:{id}:{status}");
            let payload = json!({"id": id, "direction": "outbound", "to": [{"status": status}], "errors": errors});
            let body = telnyx_envelope(&event_id, "message.finalized", now, payload);
            (event_id, "message.finalized", body)
        }
        // The same key as the carrier's own callback for this status: whichever comes first is
        // the fact, the other its duplicate.
        Provider::Twilio => {
            let error = code(&errors["code"]);
            let mut pairs = vec![("MessageSid", id.as_str()), ("MessageStatus", status.as_str())];
            if let Some(error) = &error {
                pairs.push(("ErrorCode", error));
            }
            (format!("{id}:{status}"), "message.status", form(&pairs))
        }
        Provider::Plivo => {
            let error = code(&errors["code"]);
            let mut pairs = vec![("MessageUUID", id.as_str()), ("Status", status.as_str())];
            if let Some(error) = &error {
                pairs.push(("ErrorCode", error));
            }
            (format!("{id}:{status}"), "message.status", form(&pairs))
        }
    };
    learned(env, carrier, &event_id, event_type, &body, now).await
}

async fn learned(
    env: &Env,
    carrier: Provider,
    event_id: &str,
    event_type: &str,
    body: &str,
    now: Timestamp,
) -> Result<Option<String>, EdgeError> {
    let stored = carrier_events::Log::open(env)?.store_learned(carrier, event_id, event_type, body, now).await?;
    worker::console_log!(
        "{}",
        json!({"cron": "reconcile", "carrier": carrier.as_str(), "event": event_id, "stored": stored.is_some()})
    );
    Ok(stored)
}

/// A Telnyx v2 webhook envelope, as the carrier would have sent it.
fn telnyx_envelope(id: &str, event_type: &str, occurred_at: Timestamp, payload: Value) -> String {
    json!({
        "data": {"record_type": "event", "id": id, "event_type": event_type,
            "occurred_at": occurred_at.to_rfc3339(), "payload": payload},
        "meta": {"attempt": 1, "delivered_to": "reconciliation"},
    })
    .to_string()
}
