//! Sending an outbound message: claim, call the carrier, record the result.
//!
//! The claim (a guarded UPDATE with a lease) is taken *before* the carrier is called, so two
//! dispatch jobs for one message never both call the carrier. Through Telnyx the message id
//! travels as the idempotency key, so a retry after a lost answer cannot send twice either;
//! Twilio and Plivo take no key, so a retry after a lost answer (and only then) first asks the
//! carrier whether the earlier attempt became a message, and takes what it found only when no
//! other message could own it (docs/contract.md §4).

use exactly_core::backoff;
use exactly_core::event::Provider;
use exactly_core::message::MessageStatus;
use exactly_core::Timestamp;
use worker::Env;

use crate::carrier::{self as carrier_api, CallResult, Outgoing};
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::messages::{self as messages, Message};
use crate::store::AccountDb;
use crate::work::outcome::{Done, Outcome, Wait};

/// How long a claim holds: longer than a carrier call may take.
const LEASE_MILLIS: i64 = 30_000;

/// How long a send whose outcome is unknown keeps being retried with its idempotency key: the
/// carrier remembers a key for 24 hours, so within that time a retry can only return the first
/// send's result, never send again. Past it the message is failed instead of risking a second
/// send.
pub const SEND_HORIZON_MILLIS: i64 = 24 * 3600 * 1000;

/// How far before a message could first be sent a carrier's list is read from, for clocks
/// that disagree.
const LOOKUP_SKEW_MILLIS: i64 = 60_000;

/// The longest pause between two tries of a send the carrier did not answer.
const MAX_RETRY_SECS: u64 = 600;

/// Dispatches one message.
pub async fn dispatch(account: &AccountDb, message_id: &str) -> Result<Outcome, EdgeError> {
    let db = account.db();
    let Some(message) = messages::by_id(db, message_id).await? else {
        return Ok(Outcome::Done(Done::NoSuchMessage));
    };
    if !message.undispatched() {
        return Ok(Outcome::Done(Done::AlreadyDispatched));
    }
    let started = now();
    if let (MessageStatus::Scheduled, Some(at)) = (message.status, message.send_at) {
        if at > started {
            // Early (the queue delays 12 hours at most): again when due. Should this enqueue be
            // lost, the sweeper enqueues it once it is due.
            crate::queues::dispatch_at(account, &message.id, at.unix_millis()).await?;
            return Ok(Outcome::Done(Done::NotDue));
        }
    }
    let token = new_id("dsp")?;
    let lease_until = Timestamp::from_unix_millis(started.unix_millis() + LEASE_MILLIS);
    let Some(claimed) = messages::claim(db, message_id, &token, started, lease_until).await? else {
        // Another dispatcher holds the claim; look again once it has had time to finish.
        return Ok(Outcome::RetryIn(until(message.claimed_until, started), Wait::ClaimedByAnotherDispatcher));
    };
    let attempt = message.send_attempts as u32 + 1;
    let config = account.config();
    let carrier = message.carrier;
    let media_urls: Vec<&str> = message.media.iter().map(|m| m.url.as_str()).collect();
    let outgoing = Outgoing {
        id: &message.id,
        from: &message.from_number,
        to: &message.to_number,
        text: &message.text,
        media_urls: &media_urls,
    };
    // An earlier try whose answer was lost may have reached a carrier that takes no idempotency
    // key: ask it first. After a definite answer (a 503 says nothing was taken) the carrier's
    // list can only show other messages' sends, so it is not read.
    if carrier != Provider::Telnyx && claimed.answer_lost {
        let since = Timestamp::from_unix_millis(
            message.send_at.unwrap_or(message.created_at).unix_millis() - LOOKUP_SKEW_MILLIS,
        );
        let retry = |reason: String| retry_or_fail(account, &message, &token, attempt, true, reason);
        match carrier_api::sent_since(config, carrier, &outgoing, since).await? {
            CallResult::Ok(listed) => {
                let found = messages::unowned(db, carrier, &listed).await?;
                if let Some(oldest) = found.first() {
                    return match messages::rivals(db, &message, since, now()).await? {
                        messages::Rivals::None => sent(account, &message, &token, oldest).await,
                        messages::Rivals::InFlight(claimed_until) => {
                            messages::release(db, &message.id, &token, true).await?;
                            Ok(Outcome::RetryIn(until(claimed_until, now()), Wait::ClaimedByAnotherDispatcher))
                        }
                        messages::Rivals::Unconfirmed => unconfirmed(account, &message, &token, &found).await,
                    };
                }
            }
            CallResult::Refused(error) => return retry(format!("lookup refused: {}", error.code)).await,
            CallResult::Transient(reason) | CallResult::Lost(reason) => return retry(reason).await,
        }
    }
    match carrier_api::send_message(config, carrier, &outgoing).await? {
        CallResult::Ok(carrier_id) => sent(account, &message, &token, &carrier_id).await,
        CallResult::Refused(error) => {
            let change = messages::record_send_failed(db, &message, &token, &error, now()).await?;
            crate::queues::deliver_many(account, change.to_enqueue(db).await?).await?;
            Ok(Outcome::Done(Done::RefusedByCarrier))
        }
        CallResult::Transient(reason) => retry_or_fail(account, &message, &token, attempt, false, reason).await,
        CallResult::Lost(reason) => retry_or_fail(account, &message, &token, attempt, true, reason).await,
    }
}

/// Seconds from `now` until another dispatcher's claim ends (1 to 30): when to look again.
fn until(claimed_until: Timestamp, now: Timestamp) -> u32 {
    ((claimed_until.unix_millis() - now.unix_millis()) / 1000).clamp(1, 30) as u32
}

/// A lost answer whose lookup found carrier ids that another message with a lost answer could
/// own as well: a guess could give this message another's id, and that one would then be sent a
/// second time. It is neither guessed nor sent again: it fails as `send_unconfirmed` (uncharged,
/// `message.failed`), and the log names what the carrier listed, for the operator to check.
async fn unconfirmed(
    account: &AccountDb,
    message: &Message,
    token: &str,
    found: &[String],
) -> Result<Outcome, EdgeError> {
    let db = account.db();
    worker::console_error!(
        "{}",
        serde_json::json!({"job": "dispatch", "message_id": message.id, "outcome": "send_unconfirmed",
            "carrier": message.carrier.as_str(), "carrier_ids_listed": found})
    );
    let error = exactly_core::event::CarrierError {
        code: "send_unconfirmed".into(),
        title: Some(
            "the carrier may have sent this message, but another message of the same sender and recipient \
             could own what it listed; it was not sent again"
                .into(),
        ),
    };
    let change = messages::record_send_failed(db, message, token, &error, now()).await?;
    crate::queues::deliver_many(account, change.to_enqueue(db).await?).await?;
    Ok(Outcome::Done(Done::Failed))
}

/// Records the carrier's id for the claim's owner, wakes the receipts parked on it and announces
/// `message.sent`.
async fn sent(account: &AccountDb, message: &Message, token: &str, carrier_id: &str) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    // The route of the carrier id first (docs/scaling.md, "Accounts across databases"): a
    // receipt that comes after the route waits beside the message, one before it in `DB`.
    let routed =
        crate::store::routes::record_message(account, message.carrier, carrier_id, &message.account_id, now()).await?;
    if crate::faults::crash_after_route(&message.text, &message.id) {
        return Err(EdgeError::unavailable(
            "injected fault",
            format!("injected crash after the route of {}", message.id),
        ));
    }
    // Nothing but these two commits stands between the carrier's acceptance and its record: the
    // woken receipts are enqueued after both, and a lost enqueue is the sweeper's.
    let (change, woken) = messages::record_sent(db, message, token, carrier_id, now()).await?;
    wake(env, carrier_id, &[woken, routed].concat()).await;
    crate::queues::deliver_many(account, change.to_enqueue(db).await?).await?;
    Ok(Outcome::Done(if change.changed { Done::Sent } else { Done::NoOp }))
}

/// Enqueues receipts that arrived before this result, woken in `db`. They stay recorded as
/// woken until the sweeper finds their events settled, so a failure here, or a job lost after
/// it, is logged and left to the sweeper, which enqueues again every woken receipt not yet
/// applied: the send is recorded either way.
async fn wake(env: &Env, carrier_id: &str, woken: &[String]) {
    if woken.is_empty() {
        return;
    }
    let jobs = woken.iter().map(|id| crate::queues::Job::carrier_event(id)).collect();
    if let Err(error) = crate::queues::enqueue_many(env, jobs).await {
        wake_later(carrier_id, &error);
    }
}

fn wake_later(about: &str, error: &EdgeError) {
    worker::console_warn!(
        "{}",
        serde_json::json!({"job": "dispatch", "woken_receipts_of": about, "outcome": "left to the sweeper", "error": error.to_string()})
    );
}

/// A failure worth another try (timeout, 5xx, 429): tried again with the same idempotency key,
/// which returns the first send's result if there was one. `answer_lost` says whether the
/// carrier may have taken the message, so that the next try of a carrier without keys looks it
/// up first. It fails only past [`SEND_HORIZON_MILLIS`].
async fn retry_or_fail(
    account: &AccountDb,
    message: &Message,
    token: &str,
    attempt: u32,
    answer_lost: bool,
    reason: String,
) -> Result<Outcome, EdgeError> {
    let db = account.db();
    // Counted from when it could first be sent: a scheduled message waited by design.
    let age = now().unix_millis() - message.send_at.unwrap_or(message.created_at).unix_millis();
    if age < SEND_HORIZON_MILLIS {
        messages::release(db, &message.id, token, answer_lost).await?;
        let delay = backoff::not_yet_delay(attempt).unwrap_or(MAX_RETRY_SECS).min(MAX_RETRY_SECS);
        worker::console_warn!(
            "{}",
            serde_json::json!({"job": "dispatch", "message_id": message.id, "outcome": "retried", "reason": reason})
        );
        return Ok(Outcome::RetryIn(delay as u32, Wait::CarrierUnavailable));
    }
    let error = exactly_core::event::CarrierError {
        code: "carrier_unavailable".into(),
        title: Some(format!("the carrier did not answer for 24 hours ({attempt} attempts): {reason}")),
    };
    let change = messages::record_send_failed(db, message, token, &error, now()).await?;
    crate::queues::deliver_many(account, change.to_enqueue(db).await?).await?;
    Ok(Outcome::Done(Done::GaveUp))
}
