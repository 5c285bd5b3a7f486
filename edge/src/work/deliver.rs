//! Customer webhook delivery: the `deliveries` queue, one message per attempt.
//!
//! Every attempt is signed per Standard Webhooks v1 (`webhook-id` = the event id on every
//! attempt, a fresh `webhook-timestamp`), counts as a success on any 2xx within 15 s, and is
//! recorded (time, status, latency, error, next attempt). Failures retry on the schedule of
//! [`backoff::WEBHOOK_SCHEDULE_SECS`] with jitter, honouring `Retry-After` (seconds or an HTTP
//! date). Redirects are never followed: a 3xx is a failure recorded with its `Location`.
//! `410 Gone` disables the endpoint at once, and 100 consecutive failed attempts disable it.
//! The endpoint URL is checked again before every attempt (`core::endpoint`), so a row stored
//! before a rule existed is never sent to. An attempt is claimed by compare-and-swap on the
//! delivery's attempt count before it is sent, so duplicate queue messages never send one
//! attempt twice, and a delivery that succeeded is never sent again.

use std::time::Duration;

use exactly_core::backoff;
use exactly_core::endpoint::EndpointUrl;
use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use futures_util::future::join_all;
use worker::{D1Database, Env, Headers, Message, MessageBatch, MessageExt};

use crate::bindings;
use crate::config;
use crate::error::{Done, EdgeError, Outcome};
use crate::platform::{endpoint_url, fetch, now, random_u32};
use crate::queues::{self, DeliveryJob};
use crate::store::deliveries::{self, Attempt, Due, Subject};
use crate::work::MESSAGES_IN_FLIGHT;

/// Success is any 2xx within this long. Of the body, only the first [`MAX_REPLY_BYTES`] are read,
/// as far as they come within it.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// [`ATTEMPT_TIMEOUT`], or the test build's shorter one ([`crate::faults::attempt_timeout`]).
fn attempt_timeout(env: &Env) -> Duration {
    crate::faults::attempt_timeout(env).unwrap_or(ATTEMPT_TIMEOUT)
}

/// While an attempt is in flight, other jobs for the delivery stand back this long.
const ATTEMPT_LEASE_MILLIS: i64 = 60_000;
/// Consecutive failed attempts that disable an endpoint.
pub const DISABLE_AFTER_FAILURES: i64 = 100;

/// Consumes the `deliveries` queue; each message is acked or retried by itself.
///
/// The batch's messages run concurrently, [`MESSAGES_IN_FLIGHT`] at a time: each attempt is claimed by compare-and-swap before it
/// is sent, so two messages for one delivery never send one attempt twice, whatever their order.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let messages = batch.messages()?;
    for chunk in messages.chunks(MESSAGES_IN_FLIGHT) {
        join_all(chunk.iter().map(|message| consume_one(env, message))).await;
    }
    Ok(())
}

/// The bindings and database of the account database a delivery job names.
fn scoped(env: &Env, job: &DeliveryJob) -> Result<(Env, D1Database), EdgeError> {
    let env = crate::store::account_scope(env, job.database.as_deref().unwrap_or(bindings::DB))?;
    let db = crate::store::database(&env)?;
    Ok((env, db))
}

async fn consume_one(env: &Env, message: &Message<serde_json::Value>) {
    let Ok(job) = serde_json::from_value::<DeliveryJob>(message.body().clone()) else {
        message.ack();
        return;
    };
    let result = match scoped(env, &job) {
        Ok((env, db)) => attempt(&env, &db, &job.delivery_id).await.map(Outcome::Done),
        Err(e) => Err(e),
    };
    crate::error::settle(message, result, |line| {
        line["delivery"] = serde_json::json!(job.delivery_id);
    });
}

/// Consumes the deliveries dead-letter queue: the delivery fails visibly.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    for message in batch.messages()? {
        let result = match serde_json::from_value::<DeliveryJob>(message.body().clone()) {
            Ok(job) => match scoped(env, &job) {
                Ok((_, db)) => dead_letter(&db, &job.delivery_id).await,
                Err(e) => Err(e),
            },
            Err(_) => Ok(()),
        };
        match result {
            Ok(()) => message.ack(),
            Err(_) => message.retry(),
        }
    }
    Ok(())
}

async fn dead_letter(db: &D1Database, delivery_id: &str) -> Result<(), EdgeError> {
    deliveries::fail(db, delivery_id, "dead-lettered: the delivery job failed on every retry", now()).await?;
    Ok(())
}

/// The outcome of one attempt, as the endpoint answered.
enum Answer {
    Success(u16),
    Gone,
    Failure { status: Option<u16>, error: String, retry_after: Option<u64> },
}

async fn attempt(env: &Env, db: &D1Database, delivery_id: &str) -> Result<Done, EdgeError> {
    let Some(due) = deliveries::due(db, delivery_id).await? else { return Ok(Done::NoSuchDelivery) };
    if due.status != "pending" {
        return Ok(Done::AlreadySettled);
    }
    let started = now();
    let (Some(url), Some(secret)) = (due.url.as_deref(), due.secret.as_deref()) else {
        deliveries::fail(db, &due.id, "the endpoint was deleted", started).await?;
        return Ok(Done::EndpointDisabled);
    };
    // A paused or disabled endpoint holds its deliveries, untouched, until it is resumed or
    // enabled (which makes them due again); the sweeper does not pick them up meanwhile.
    if due.enabled != Some(1.0) || due.paused != Some(0.0) {
        return Ok(Done::Held);
    }
    // An early or duplicate job: the scheduled one (or the sweeper) will come.
    if due.next_attempt_at as i64 > started.unix_millis() + 1000 {
        return Ok(Done::NotDue);
    }
    // Beyond the endpoint's rate limit the delivery waits for its slot; it is never dropped.
    if let Some(rate) = due.rate_limit_per_second.filter(|r| *r >= 1.0) {
        if let Some(wait_ms) = deliveries::take_slot(db, &due.endpoint_id, rate as u32, started).await? {
            let delay = u64::try_from(wait_ms.div_euclid(1000) + 1).unwrap_or(1);
            queues::deliver_later(env, &due.id, delay).await?;
            return Ok(Done::RateLimited);
        }
    }
    let number = due.attempts as i64 + 1;
    let lease = Timestamp::from_unix_millis(started.unix_millis() + ATTEMPT_LEASE_MILLIS);
    if !deliveries::claim_attempt(db, &due.id, number, lease, started).await? {
        return Ok(Done::ClaimedElsewhere);
    }

    let allow_private = config::get(env)?.allow_private_endpoints;
    // Checked again at every attempt, so a URL stored before a rule existed is never sent to;
    // the parsed form is what `fetch` gets, the same text that was checked.
    let answer = match (endpoint_url(url, allow_private), SigningSecret::parse(secret)) {
        (Err(problem), _) => (
            Answer::Failure {
                status: None,
                error: format!("endpoint URL refused: {}", problem.message()),
                retry_after: None,
            },
            Reply::default(),
        ),
        (_, Err(_)) => (
            Answer::Failure { status: None, error: "the endpoint secret is unreadable".into(), retry_after: None },
            Reply::default(),
        ),
        (Ok(url), Ok(secret)) => {
            // During a rotation window the previous secret signs too.
            let previous = match (&due.previous_secret, due.previous_secret_expires_at) {
                (Some(old), Some(until)) if until as i64 > started.unix_millis() => SigningSecret::parse(old).ok(),
                _ => None,
            };
            let timeout = attempt_timeout(env);
            send(&url, &secret, previous.as_ref(), &due.event_id, &due.payload, started, timeout).await
        }
    };
    let (answer, reply) = answer;
    let latency_ms = now().unix_millis() - started.unix_millis();
    record(env, db, &due, number, started, latency_ms, answer, reply).await
}

async fn send(
    url: &EndpointUrl,
    secret: &SigningSecret,
    previous: Option<&SigningSecret>,
    event_id: &str,
    payload: &str,
    at: Timestamp,
    timeout: Duration,
) -> (Answer, Reply) {
    let headers = Headers::new();
    let mut signature = secret.sign(event_id, at, payload.as_bytes());
    if let Some(previous) = previous {
        signature.push(' ');
        signature.push_str(&previous.sign(event_id, at, payload.as_bytes()));
    }
    for (name, value) in [
        ("content-type", "application/json"),
        ("user-agent", "exactly-webhooks/1"),
        ("webhook-id", event_id),
        ("webhook-timestamp", &at.unix_seconds().to_string()),
        ("webhook-signature", &signature),
    ] {
        if headers.set(name, value).is_err() {
            let error = format!("cannot set header {name}");
            return (Answer::Failure { status: None, error, retry_after: None }, Reply::default());
        }
    }
    // Never follow a redirect: the next hop is an address nobody checked (and `fetch` would
    // turn the POST into a GET there). A 3xx is a failed attempt, recorded with its Location.
    let request = match crate::platform::request("POST", url.as_str(), Some(&headers), Some(payload), false) {
        Ok(r) => r,
        Err(e) => {
            let error = format!("invalid request: {e}");
            return (Answer::Failure { status: None, error, retry_after: None }, Reply::default());
        }
    };
    match fetch(request, timeout, MAX_REPLY_BYTES).await {
        Ok(answer) => {
            let status = answer.status;
            let reply = Reply::of(&answer);
            let header = |name: &str| answer.headers.get(name).ok().flatten();
            let retry_after = header("retry-after").and_then(|v| backoff::parse_retry_after(&v, now()));
            let answer = match status {
                200..=299 => Answer::Success(status),
                410 => Answer::Gone,
                300..=399 => {
                    let error = match header("location") {
                        Some(location) => format!(
                            "answered {status} redirecting to {}; redirects are not followed",
                            bounded(&location, MAX_LOCATION_CHARS)
                        ),
                        None => format!("answered {status} (a redirect without Location); redirects are not followed"),
                    };
                    Answer::Failure { status: Some(status), error, retry_after }
                }
                _ => Answer::Failure { status: Some(status), error: format!("answered {status}"), retry_after },
            };
            (answer, reply)
        }
        Err(reason) => (Answer::Failure { status: None, error: reason, retry_after: None }, Reply::default()),
    }
}

/// What an endpoint answered, kept with the attempt for debugging: the first
/// [`MAX_REPLY_BYTES`] of the body and the headers.
#[derive(Default)]
struct Reply {
    body: Option<String>,
    headers: Option<String>,
}

/// How much of a response body an attempt keeps.
const MAX_REPLY_BYTES: usize = 1024;

impl Reply {
    /// The answer's headers and the start of its body (the rest is never read).
    fn of(answer: &crate::platform::Answer) -> Self {
        let headers: serde_json::Map<String, serde_json::Value> =
            answer.headers.entries().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
        let body = Some(String::from_utf8_lossy(&answer.body).into_owned());
        Reply { body, headers: Some(serde_json::Value::Object(headers).to_string()) }
    }
}

/// The most of a `Location` header kept in an attempt's error: enough to see where it pointed,
/// not a place for an endpoint to store kilobytes.
const MAX_LOCATION_CHARS: usize = 512;

/// `text` cut to at most `max` characters, marked when cut.
fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// The delay before attempt `next` (1-based), or `None` after the last.
fn delay_before(env: &Env, next: i64) -> Option<u64> {
    let next = u32::try_from(next).ok()?;
    if let Some(schedule) = crate::faults::webhook_schedule(env) {
        return schedule.get(usize::try_from(next).ok()?.checked_sub(1)?).copied();
    }
    backoff::webhook_delay(next, random_u32())
}

#[allow(clippy::too_many_arguments)]
async fn record(
    env: &Env,
    db: &D1Database,
    due: &Due,
    number: i64,
    started: Timestamp,
    latency_ms: i64,
    answer: Answer,
    reply: Reply,
) -> Result<Done, EdgeError> {
    let attempt = |status: Option<u16>, error: Option<String>, next_attempt_at: Option<Timestamp>| Attempt {
        delivery_id: due.id.clone(),
        number,
        at: started,
        status,
        latency_ms,
        error,
        next_attempt_at,
        response_body: reply.body.clone(),
        response_headers: reply.headers.clone(),
    };
    let subject = Subject {
        endpoint_id: &due.endpoint_id,
        account_id: &due.account_id,
        url: due.url.as_deref().unwrap_or_default(),
        event_id: &due.event_id,
    };
    match answer {
        Answer::Success(status) => {
            deliveries::record_success(db, &attempt(Some(status), None, None), &due.endpoint_id).await?;
            Ok(Done::Delivered)
        }
        Answer::Gone => {
            let signals =
                deliveries::record_gone(db, &attempt(Some(410), Some("410 Gone".into()), None), &subject).await?;
            queues::announce_events(env, db, &signals).await?;
            Ok(Done::EndpointGone)
        }
        Answer::Failure { status, error, retry_after } => {
            let next = delay_before(env, number + 1).map(|d| backoff::with_retry_after(d, retry_after));
            let next_at = next.map(|d| Timestamp::from_unix_millis(started.unix_millis() + (d as i64) * 1000));
            let final_error = format!("gave up after {number} attempts: {error}");
            let signals = deliveries::record_failure(
                db,
                &attempt(status, Some(error), next_at),
                &subject,
                &final_error,
                DISABLE_AFTER_FAILURES,
            )
            .await?;
            queues::announce_events(env, db, &signals).await?;
            match next {
                // If this send fails the sweeper finds the delivery once it is overdue.
                Some(delay) => {
                    if let Err(e) = queues::deliver_later(env, &due.id, delay).await {
                        worker::console_error!("{}", serde_json::json!({"delivery": due.id, "error": e.to_string()}));
                    }
                    Ok(Done::RetryScheduled)
                }
                None => Ok(Done::DeliveryGaveUp),
            }
        }
    }
}
