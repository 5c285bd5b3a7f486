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
use serde::{Deserialize, Serialize};
use worker::{D1Database, Env, Headers, MessageBatch, MessageBuilder, MessageExt, Method, Queue, Request, RequestInit, RequestRedirect};

use crate::bindings;
use crate::config;
use crate::db::{self, int, opt_text, text, time};
use crate::error::EdgeError;
use crate::outbox::Change;
use crate::platform::{fetch_with_timeout, now, random_u32};

/// Success is any 2xx within this long.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// While an attempt is in flight, other jobs for the delivery stand back this long.
const ATTEMPT_LEASE_MILLIS: i64 = 60_000;
/// Consecutive failed attempts that disable an endpoint.
pub const DISABLE_AFTER_FAILURES: i64 = 100;

/// A message on the `deliveries` queue.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeliveryJob {
    /// The `webhook_deliveries` row to attempt.
    pub delivery_id: String,
}

fn queue(env: &Env) -> Result<Queue, EdgeError> {
    env.queue(bindings::DELIVERIES).map_err(|e| EdgeError::platform("deliveries binding", e))
}

/// Enqueues the first attempt of every pending delivery of the event a change wrote. If this
/// fails, the sweeper enqueues them once they are overdue.
pub async fn announce(env: &Env, db: &D1Database, change: &Change) -> Result<(), EdgeError> {
    let Some(event_id) = &change.event else { return Ok(()) };
    #[derive(Deserialize)]
    struct Pending {
        id: String,
        url: String,
    }
    let pending: Vec<Pending> = db::all(db::stmt(
        db,
        "SELECT d.id, e.url FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.event_id = ?1 AND d.status = 'pending' AND d.attempts = 0",
        &[text(event_id)],
    )?)
    .await?;
    let ids = pending.into_iter().filter(|p| !crate::faults::delivery_message_lost(&p.url)).map(|p| p.id).collect();
    enqueue_many(env, ids).await
}

/// Enqueues attempts of these deliveries now.
pub async fn enqueue_many(env: &Env, ids: Vec<String>) -> Result<(), EdgeError> {
    if ids.is_empty() {
        return Ok(());
    }
    let jobs: Vec<DeliveryJob> = ids.into_iter().map(|delivery_id| DeliveryJob { delivery_id }).collect();
    queue(env)?.send_batch(jobs).await.map_err(|e| EdgeError::platform("enqueue deliveries", e))
}

async fn enqueue_later(env: &Env, delivery_id: &str, delay_secs: u64) -> Result<(), EdgeError> {
    // Queues accept delays up to 12 hours; the schedule's longest is 10.
    let delay = u32::try_from(delay_secs.min(backoff::MAX_RETRY_AFTER_SECS)).unwrap_or(u32::MAX);
    let message = MessageBuilder::new(DeliveryJob { delivery_id: delivery_id.to_owned() }).delay_seconds(delay).build();
    queue(env)?.send(message).await.map_err(|e| EdgeError::platform("enqueue delivery", e))
}

/// Consumes the `deliveries` queue; each message is acked or retried by itself.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        let Ok(job) = serde_json::from_value::<DeliveryJob>(message.body().clone()) else {
            message.ack();
            continue;
        };
        match attempt(env, &db, &job.delivery_id).await {
            Ok(outcome) => {
                worker::console_log!("{}", serde_json::json!({"delivery": job.delivery_id, "outcome": outcome}));
                message.ack();
            }
            Err(e) => {
                worker::console_error!("{}", serde_json::json!({"delivery": job.delivery_id, "outcome": "retried", "error": e.to_string()}));
                message.retry();
            }
        }
    }
    Ok(())
}

/// Consumes the deliveries dead-letter queue: the delivery fails visibly.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        let result = match serde_json::from_value::<DeliveryJob>(message.body().clone()) {
            Ok(job) => dead_letter(&db, &job.delivery_id).await,
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
    db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET status = 'failed', last_error = 'dead-lettered: the delivery job failed on every retry', updated_at = ?2
         WHERE id = ?1 AND status = 'pending'",
        &[text(delivery_id), time(now())],
    )?)
    .await?;
    Ok(())
}

#[derive(Debug, Deserialize)]
struct Due {
    id: String,
    event_id: String,
    status: String,
    attempts: f64,
    next_attempt_at: f64,
    endpoint_id: String,
    url: Option<String>,
    secret: Option<String>,
    enabled: Option<f64>,
    previous_secret: Option<String>,
    previous_secret_expires_at: Option<f64>,
    payload: String,
}

/// The outcome of one attempt, as the endpoint answered.
enum Answer {
    Success(u16),
    Gone,
    Failure { status: Option<u16>, error: String, retry_after: Option<u64> },
}

async fn attempt(env: &Env, db: &D1Database, delivery_id: &str) -> Result<&'static str, EdgeError> {
    let due: Option<Due> = db::first(db::stmt(
        db,
        "SELECT d.id, d.event_id, d.status, d.attempts, d.next_attempt_at, d.endpoint_id, e.url, e.secret, e.enabled,
                e.previous_secret, e.previous_secret_expires_at, o.payload
         FROM webhook_deliveries d
         JOIN outbound_events o ON o.id = d.event_id
         LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.id = ?1",
        &[text(delivery_id)],
    )?)
    .await?;
    let Some(due) = due else { return Ok("no such delivery") };
    if due.status != "pending" {
        return Ok("already settled");
    }
    let started = now();
    let (Some(url), Some(secret), Some(1.0)) = (due.url.as_deref(), due.secret.as_deref(), due.enabled) else {
        fail(db, &due, "the endpoint is disabled or deleted", started).await?;
        return Ok("endpoint disabled");
    };
    // An early or duplicate job: the scheduled one (or the sweeper) will come.
    if due.next_attempt_at as i64 > started.unix_millis() + 1000 {
        return Ok("not due");
    }
    let number = due.attempts as i64 + 1;
    let lease = Timestamp::from_unix_millis(started.unix_millis() + ATTEMPT_LEASE_MILLIS);
    let claimed = db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET attempts = ?2, next_attempt_at = ?3, updated_at = ?4
         WHERE id = ?1 AND status = 'pending' AND attempts = ?5",
        &[text(&due.id), int(number), time(lease), time(started), int(number - 1)],
    )?)
    .await?;
    if claimed != 1 {
        return Ok("claimed by another job");
    }

    let allow_private = config::get(env)?.allow_private_endpoints;
    // Checked again at every attempt, so a URL stored before a rule existed is never sent to;
    // the parsed form is what `fetch` gets, the same text that was checked.
    let answer = match (EndpointUrl::parse(url, allow_private), SigningSecret::parse(secret)) {
        (Err(problem), _) => Answer::Failure { status: None, error: format!("endpoint URL refused: {}", problem.message()), retry_after: None },
        (_, Err(_)) => Answer::Failure { status: None, error: "the endpoint secret is unreadable".into(), retry_after: None },
        (Ok(url), Ok(secret)) => {
            // During a rotation window the previous secret signs too.
            let previous = match (&due.previous_secret, due.previous_secret_expires_at) {
                (Some(old), Some(until)) if until as i64 > started.unix_millis() => SigningSecret::parse(old).ok(),
                _ => None,
            };
            send(&url, &secret, previous.as_ref(), &due.event_id, &due.payload, started).await
        }
    };
    let latency_ms = now().unix_millis() - started.unix_millis();
    record(env, db, &due, number, started, latency_ms, answer).await
}

async fn send(url: &EndpointUrl, secret: &SigningSecret, previous: Option<&SigningSecret>, event_id: &str, payload: &str, at: Timestamp) -> Answer {
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
            return Answer::Failure { status: None, error: format!("cannot set header {name}"), retry_after: None };
        }
    }
    let mut init = RequestInit::new();
    // Never follow a redirect: the next hop is an address nobody checked (and `fetch` would
    // turn the POST into a GET there). A 3xx is a failed attempt, recorded with its Location.
    init.with_method(Method::Post).with_headers(headers).with_body(Some(payload.into())).with_redirect(RequestRedirect::Manual);
    let request = match Request::new_with_init(url.as_str(), &init) {
        Ok(r) => r,
        Err(e) => return Answer::Failure { status: None, error: format!("invalid request: {e}"), retry_after: None },
    };
    match fetch_with_timeout(request, ATTEMPT_TIMEOUT).await {
        Ok(response) => {
            let status = response.status_code();
            let header = |name: &str| response.headers().get(name).ok().flatten();
            let retry_after = header("retry-after").and_then(|v| backoff::parse_retry_after(&v, now()));
            match status {
                200..=299 => Answer::Success(status),
                410 => Answer::Gone,
                300..=399 => {
                    let error = match header("location") {
                        Some(location) => format!("answered {status} redirecting to {}; redirects are not followed", bounded(&location, MAX_LOCATION_CHARS)),
                        None => format!("answered {status} (a redirect without Location); redirects are not followed"),
                    };
                    Answer::Failure { status: Some(status), error, retry_after }
                }
                _ => Answer::Failure { status: Some(status), error: format!("answered {status}"), retry_after },
            }
        }
        Err(reason) => Answer::Failure { status: None, error: reason, retry_after: None },
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
async fn record(env: &Env, db: &D1Database, due: &Due, number: i64, started: Timestamp, latency_ms: i64, answer: Answer) -> Result<&'static str, EdgeError> {
    let attempt_row = |status: Option<u16>, error: Option<&str>, next: Option<Timestamp>| {
        db::stmt(
            db,
            "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms, error, next_attempt_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (delivery_id, attempt) DO NOTHING",
            &[text(&due.id), int(number), time(started), int(started.unix_seconds()), status.map_or(wasm_bindgen::JsValue::NULL, |s| int(i64::from(s))),
              int(latency_ms), opt_text(error), next.map_or(wasm_bindgen::JsValue::NULL, time)],
        )
    };
    let at = time(started);
    match answer {
        Answer::Success(status) => {
            db::batch(db, vec![
                attempt_row(Some(status), None, None)?,
                db::stmt(db, "UPDATE webhook_deliveries SET status = 'succeeded', last_error = NULL, updated_at = ?2 WHERE id = ?1 AND status = 'pending'", &[text(&due.id), at.clone()])?,
                db::stmt(db, "UPDATE webhook_endpoints SET consecutive_failures = 0, updated_at = ?2 WHERE id = ?1", &[text(&due.endpoint_id), at])?,
            ])
            .await?;
            Ok("delivered")
        }
        Answer::Gone => {
            db::batch(db, vec![
                attempt_row(Some(410), Some("410 Gone"), None)?,
                db::stmt(db, "UPDATE webhook_deliveries SET status = 'failed', last_error = '410 Gone: endpoint disabled', updated_at = ?2 WHERE id = ?1 AND status = 'pending'", &[text(&due.id), at.clone()])?,
                db::stmt(db, "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = 'answered 410 Gone', updated_at = ?2 WHERE id = ?1", &[text(&due.endpoint_id), at])?,
            ])
            .await?;
            Ok("gone: endpoint disabled")
        }
        Answer::Failure { status, error, retry_after } => {
            let next = delay_before(env, number + 1).map(|d| backoff::with_retry_after(d, retry_after));
            let next_at = next.map(|d| Timestamp::from_unix_millis(started.unix_millis() + (d as i64) * 1000));
            let delivery = match next_at {
                Some(next_at) => db::stmt(
                    db,
                    "UPDATE webhook_deliveries SET next_attempt_at = ?2, last_error = ?3, updated_at = ?4 WHERE id = ?1 AND status = 'pending'",
                    &[text(&due.id), time(next_at), text(&error), at.clone()],
                )?,
                None => db::stmt(
                    db,
                    "UPDATE webhook_deliveries SET status = 'failed', last_error = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'pending'",
                    &[text(&due.id), text(&format!("gave up after {number} attempts: {error}")), at.clone()],
                )?,
            };
            db::batch(db, vec![
                attempt_row(status, Some(&error), next_at)?,
                delivery,
                db::stmt(
                    db,
                    "UPDATE webhook_endpoints
                     SET consecutive_failures = consecutive_failures + 1,
                         disabled_reason = CASE WHEN enabled = 1 AND consecutive_failures + 1 >= ?3 THEN 'disabled after ' || CAST(?3 AS INTEGER) || ' consecutive failed attempts' ELSE disabled_reason END,
                         enabled = CASE WHEN consecutive_failures + 1 >= ?3 THEN 0 ELSE enabled END,
                         updated_at = ?2
                     WHERE id = ?1",
                    &[text(&due.endpoint_id), at, int(DISABLE_AFTER_FAILURES)],
                )?,
            ])
            .await?;
            match next {
                // If this send fails the sweeper finds the delivery once it is overdue.
                Some(delay) => {
                    if let Err(e) = enqueue_later(env, &due.id, delay).await {
                        worker::console_error!("{}", serde_json::json!({"delivery": due.id, "error": e.to_string()}));
                    }
                    Ok("failed: retry scheduled")
                }
                None => Ok("failed: gave up"),
            }
        }
    }
}

async fn fail(db: &D1Database, due: &Due, reason: &str, now: Timestamp) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE webhook_deliveries SET status = 'failed', last_error = ?2, updated_at = ?3 WHERE id = ?1 AND status = 'pending'",
        &[text(&due.id), text(reason), time(now)],
    )?)
    .await?;
    Ok(())
}

/// Pending deliveries whose next attempt is overdue by more than `grace`: their queue message
/// was lost. Oldest first, at most `limit`.
pub async fn overdue(db: &D1Database, before: Timestamp, limit: u32) -> Result<Vec<String>, EdgeError> {
    #[derive(Deserialize)]
    struct Id {
        id: String,
    }
    let rows: Vec<Id> = db::all(db::stmt(
        db,
        "SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at < ?1 ORDER BY next_attempt_at LIMIT ?2",
        &[time(before), int(i64::from(limit))],
    )?)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}
