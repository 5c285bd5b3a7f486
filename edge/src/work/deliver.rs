//! Customer webhook delivery: the `deliveries` queue, and each endpoint's line.
//!
//! One endpoint never slows another (docs/contract.md §6): a queue message only claims an
//! attempt, which then runs beside the batch; an endpoint has at most `max_in_flight` attempts
//! in flight and a circuit breaker (`core::breaker`); a delivery they hold waits in the
//! endpoint's line, with no queue message, and an attempt that ends takes the oldest in line.
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

use std::rc::Rc;
use std::time::Duration;

use async_lock::Semaphore;

use exactly_core::endpoint::EndpointUrl;
use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use exactly_core::{backoff, breaker};
use futures_util::future::join_all;
use worker::{Context, D1Database, Env, Headers, Message, MessageBatch, MessageExt};

use crate::bindings;
use crate::config;
use crate::error::Wait;
use crate::error::{Done, EdgeError, Outcome};
use crate::platform::{endpoint_url, fetch, now, random_u32};
use crate::queues::{self, DeliveryJob};
use crate::store::circuit;
use crate::store::deliveries::{self, Attempt, Claim, Due, Subject};
use crate::store::endpoints::DEFAULT_MAX_IN_FLIGHT;

/// Success is any 2xx within this long. Of the body, only the first [`MAX_REPLY_BYTES`] are read,
/// as far as they come within it.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// [`ATTEMPT_TIMEOUT`], or the test build's shorter one ([`crate::faults::attempt_timeout`]).
fn attempt_timeout(env: &Env) -> Duration {
    crate::faults::attempt_timeout(env).unwrap_or(ATTEMPT_TIMEOUT)
}

/// While an attempt is in flight, other jobs for the delivery stand back this long, and it
/// holds one of its endpoint's in-flight places.
const ATTEMPT_LEASE_MILLIS: i64 = 60_000;
/// Consecutive failed attempts that disable an endpoint.
pub const DISABLE_AFTER_FAILURES: i64 = 100;
/// An attempt that ends takes the next delivery in its endpoint's line, and so on, at most this
/// many times or for this long; then a wake message carries the line on.
const CHAIN_MAX: usize = 25;
const CHAIN_MILLIS: i64 = 30_000;
/// A wake starts at most this many deliveries of a line (fewer when the endpoint fills up).
const WAKE_MAX: usize = 50;

/// Consumes the `deliveries` queue; each message is acked or retried by itself.
///
/// A message only claims: its delivery goes through the endpoint's gates (paused, circuit,
/// rate limit, in-flight limit) and its attempt is claimed by compare-and-swap, so two messages
/// for one delivery never send one attempt twice, whatever their order. The claimed attempt then
/// runs beside the batch (`wait_until`), so no message of the batch, and no later batch, waits
/// for an endpoint to answer; its lease stands for it until its outcome is recorded.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env, ctx: &Context) -> worker::Result<()> {
    let messages = batch.messages()?;
    let connections = Rc::new(Semaphore::new(CONNECTIONS));
    join_all(messages.iter().map(|message| consume_one(env, ctx, &connections, message))).await;
    Ok(())
}

/// How many attempts of one invocation are sent at once. An invocation keeps at most six
/// connections open; a fetch beyond them would wait inside the runtime while its timeout already
/// runs, so an attempt never sent could be recorded as timed out. An attempt takes a place here
/// before its clock starts.
const CONNECTIONS: usize = 6;

/// The invocation's places for attempts in flight ([`CONNECTIONS`]).
type Connections = Rc<Semaphore>;

/// The bindings and database of the account database a delivery job names.
fn scoped(env: &Env, job: &DeliveryJob) -> Result<(Env, D1Database), EdgeError> {
    let env = crate::store::account_scope(env, job.database.as_deref().unwrap_or(bindings::DB))?;
    let db = crate::store::database(&env)?;
    Ok((env, db))
}

async fn consume_one(env: &Env, ctx: &Context, connections: &Connections, message: &Message<serde_json::Value>) {
    let Ok(job) = serde_json::from_value::<DeliveryJob>(message.body().clone()) else {
        message.ack();
        return;
    };
    let (env, db) = match scoped(env, &job) {
        Ok(scoped) => scoped,
        Err(e) => return crate::error::settle(message, Err(e), |line| tag(line, &job)),
    };
    if let Some(endpoint) = &job.wake {
        let result = wake(&env, &db, ctx, connections, endpoint).await.map(Outcome::Done);
        return crate::error::settle(message, result, |line| tag(line, &job));
    }
    match gate(&env, &db, &job.delivery_id).await {
        Ok(Gate::Claimed(claimed)) => {
            // Its outcome is logged when it is recorded.
            message.ack();
            ctx.wait_until(run(env, *claimed, Rc::clone(connections)));
        }
        Ok(Gate::Done(done)) => crate::error::settle(message, Ok(Outcome::Done(done)), |line| tag(line, &job)),
        Ok(Gate::LookAgain) => {
            crate::error::settle(message, Ok(Outcome::RetryIn(1, Wait::CircuitChanging)), |line| tag(line, &job))
        }
        Err(e) => crate::error::settle(message, Err(e), |line| tag(line, &job)),
    }
}

fn tag(line: &mut serde_json::Value, job: &DeliveryJob) {
    match &job.wake {
        Some(endpoint) => line["wake"] = serde_json::json!(endpoint),
        None => line["delivery"] = serde_json::json!(job.delivery_id),
    }
}

/// Logs what became of a delivery that no queue message of its own carried (taken from its
/// endpoint's line), as [`crate::error::settle`] logs a message's.
fn log(delivery_id: &str, result: &Result<Done, EdgeError>) {
    match result {
        Ok(done) => {
            worker::console_log!("{}", serde_json::json!({"delivery": delivery_id, "outcome": done.as_str()}))
        }
        Err(e) => worker::console_error!(
            "{}",
            serde_json::json!({"delivery": delivery_id, "outcome": "not recorded", "error": e.to_string()})
        ),
    }
}

/// Consumes the deliveries dead-letter queue: the delivery fails visibly.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    for message in batch.messages()? {
        let result = match serde_json::from_value::<DeliveryJob>(message.body().clone()) {
            Ok(job) if job.wake.is_none() => match scoped(env, &job) {
                Ok((_, db)) => dead_letter(&db, &job.delivery_id).await,
                Err(e) => Err(e),
            },
            // A wake that failed every retry: the sweeper wakes the line.
            _ => Ok(()),
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
    /// `no_answer`: no connection or no answer in time (the endpoint held the sender's time).
    Failure {
        status: Option<u16>,
        error: String,
        retry_after: Option<u64>,
        no_answer: bool,
    },
}

impl Answer {
    fn refused(error: String) -> Self {
        Answer::Failure { status: None, error, retry_after: None, no_answer: false }
    }

    /// How the circuit breaker weighs it.
    fn outcome(&self) -> breaker::Outcome {
        match self {
            Answer::Success(_) => breaker::Outcome::Success,
            Answer::Failure { no_answer: true, .. } => breaker::Outcome::Timeout,
            _ => breaker::Outcome::Failure,
        }
    }
}

/// What a delivery's gates decided.
enum Gate {
    /// Its attempt is claimed: send it.
    Claimed(Box<Claimed>),
    /// Nothing to send now.
    Done(Done),
    /// The endpoint's circuit kept changing while the delivery tried to get into line: a job
    /// looks again shortly (one taken from a line is found by the sweeper).
    LookAgain,
}

/// An attempt this job claimed.
struct Claimed {
    due: Due,
    number: i64,
    admission: breaker::Admission,
}

/// Takes delivery `id` through its endpoint's gates, in order: settled or deleted; paused or
/// disabled (held untouched); early; the circuit (open: into the line); the in-flight limit
/// (full: into the line; under a rate limit, at most the rate); then claims the attempt.
async fn gate(env: &Env, db: &D1Database, id: &str) -> Result<Gate, EdgeError> {
    for _ in 0..3 {
        let Some(due) = deliveries::due(db, id).await? else { return Ok(Gate::Done(Done::NoSuchDelivery)) };
        if due.status != "pending" {
            return Ok(Gate::Done(Done::AlreadySettled));
        }
        let started = now();
        if due.url.is_none() || due.secret.is_none() {
            deliveries::fail(db, &due.id, "the endpoint was deleted", started).await?;
            return Ok(Gate::Done(Done::EndpointDisabled));
        }
        // A paused or disabled endpoint holds its deliveries, untouched, until it is resumed or
        // enabled (which puts them in its line); the sweeper does not pick them up meanwhile.
        if due.enabled != Some(1.0) || due.paused != Some(0.0) {
            return Ok(Gate::Done(Done::Held));
        }
        // An early or duplicate job: the scheduled one (or the sweeper) will come.
        if due.next_attempt_at as i64 > started.unix_millis() + 1000 {
            return Ok(Gate::Done(Done::NotDue));
        }
        let attempts = due.attempts as i64;
        let policy = crate::faults::breaker_policy(env, due.url.as_deref().unwrap_or_default());
        let (admission, probe) = breaker::admit(&policy, due.circuit.state(), started.unix_millis());
        if let breaker::Admission::Hold(_) = admission {
            if deliveries::wait_for_circuit(db, &due.id, &due.endpoint_id, attempts, due.circuit.version(), started)
                .await?
            {
                return Ok(Gate::Done(Done::WaitingForCircuit));
            }
            continue;
        }
        if let Some(probe) = probe {
            let about = circuit::About {
                endpoint_id: &due.endpoint_id,
                account_id: &due.account_id,
                url: due.url.as_deref().unwrap_or_default(),
            };
            // Whoever swaps first sends the probe; the other looks again and waits.
            if circuit::swap(db, &about, due.circuit.version(), probe, None, started).await?.is_none() {
                continue;
            }
        }
        let number = attempts + 1;
        let lease = Timestamp::from_unix_millis(started.unix_millis() + ATTEMPT_LEASE_MILLIS);
        // A rate-limited endpoint has no more in flight than it takes in a second: each waits at
        // most a second for its turn ([`attempt`]), and the rest wait in line.
        let rate = due.rate_limit_per_second.filter(|r| *r >= 1.0).map(|r| r as i64);
        let most = due
            .max_in_flight
            .map_or(i64::from(DEFAULT_MAX_IN_FLIGHT), |m| m as i64)
            .min(rate.unwrap_or(i64::MAX))
            .max(1);
        return Ok(
            match deliveries::claim_attempt(db, &due.id, &due.endpoint_id, number, lease, started, most).await? {
                Claim::Claimed => Gate::Claimed(Box::new(Claimed { due, number, admission })),
                Claim::Full => Gate::Done(Done::WaitingForEndpoint),
                Claim::Elsewhere => Gate::Done(Done::ClaimedElsewhere),
            },
        );
    }
    Ok(Gate::LookAgain)
}

/// Runs a claimed attempt, then, while the endpoint has a line, the next delivery in it: an
/// attempt that ends hands its in-flight place to the oldest waiting, with no queue message
/// between (at most [`CHAIN_MAX`] in a row, then a wake carries on).
async fn run(env: Env, first: Claimed, connections: Connections) {
    let db = match crate::store::database(&env) {
        Ok(db) => db,
        // The lease runs out and the sweeper finds the delivery.
        Err(e) => return log(&first.due.id, &Err(e)),
    };
    let began = now();
    let mut claimed = first;
    for round in 1.. {
        let endpoint = claimed.due.endpoint_id.clone();
        let id = claimed.due.id.clone();
        log(&id, &attempt(&env, &db, claimed, &connections).await);
        if round >= CHAIN_MAX || now().unix_millis() - began.unix_millis() > CHAIN_MILLIS {
            if let Err(e) = queues::wake_later(&env, &endpoint, 0).await {
                log(&id, &Err(e));
            }
            return;
        }
        let next = match deliveries::next_in_line(&db, &endpoint, now()).await {
            Ok(Some(next)) => next,
            Ok(None) => return,
            Err(e) => return log(&id, &Err(e)),
        };
        claimed = match gate(&env, &db, &next).await {
            Ok(Gate::Claimed(c)) => *c,
            Ok(Gate::Done(done)) => return log(&next, &Ok(done)),
            // Out of line and due: the sweeper finds it.
            Ok(Gate::LookAgain) => return log(&next, &Ok(Done::ClaimedElsewhere)),
            Err(e) => return log(&next, &Err(e)),
        };
    }
}

/// Wakes an endpoint's line: its oldest deliveries go through their gates again until one goes
/// back into line (the endpoint is full, or its circuit holds) or the line is empty; each
/// claimed attempt runs beside the batch as [`run`].
async fn wake(
    env: &Env,
    db: &D1Database,
    ctx: &Context,
    connections: &Connections,
    endpoint: &str,
) -> Result<Done, EdgeError> {
    for _ in 0..WAKE_MAX {
        let Some(id) = deliveries::next_in_line(db, endpoint, now()).await? else { break };
        match gate(env, db, &id).await {
            Ok(Gate::Claimed(claimed)) => ctx.wait_until(run(env.clone(), *claimed, Rc::clone(connections))),
            Ok(Gate::Done(done)) => {
                log(&id, &Ok(done));
                if matches!(done, Done::WaitingForEndpoint | Done::WaitingForCircuit | Done::Held) {
                    break;
                }
            }
            Ok(Gate::LookAgain) => break,
            Err(e) => {
                log(&id, &Err(e));
                break;
            }
        }
    }
    Ok(Done::Woke)
}

/// Sends a claimed attempt and records its outcome.
async fn attempt(env: &Env, db: &D1Database, claimed: Claimed, connections: &Semaphore) -> Result<Done, EdgeError> {
    let Claimed { due, number, admission } = claimed;
    // Under a rate limit the attempt starts at its turn, never before.
    if let Some(rate) = due.rate_limit_per_second.filter(|r| *r >= 1.0) {
        while let Some(wait) = deliveries::take_turn(db, &due.endpoint_id, rate as u32, now()).await? {
            worker::Delay::from(Duration::from_millis(wait.ceil() as u64)).await;
        }
    }
    let _connection = connections.acquire().await;
    let started = now();
    let (Some(url), Some(secret)) = (due.url.as_deref(), due.secret.as_deref()) else {
        deliveries::fail(db, &due.id, "the endpoint was deleted", started).await?;
        return Ok(Done::EndpointDisabled);
    };
    let allow_private = config::get(env)?.allow_private_endpoints;
    // Checked again at every attempt, so a URL stored before a rule existed is never sent to;
    // the parsed form is what `fetch` gets, the same text that was checked.
    let answer = match (endpoint_url(url, allow_private), SigningSecret::parse(secret)) {
        (Err(problem), _) => {
            (Answer::refused(format!("endpoint URL refused: {}", problem.message())), Reply::default())
        }
        (_, Err(_)) => (Answer::refused("the endpoint secret is unreadable".into()), Reply::default()),
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
    let ended = now();
    let latency_ms = ended.unix_millis() - started.unix_millis();
    let outcome = answer.outcome();
    let done = record(env, db, &due, number, started, latency_ms, answer, reply).await?;
    feed_breaker(env, db, &due, admission, outcome, ended).await?;
    Ok(done)
}

/// Counts an attempt's outcome in its endpoint's circuit breaker. The swap is retried against
/// the state another attempt wrote meanwhile; an opening schedules the wake at the probe time,
/// a closing wakes the line now.
async fn feed_breaker(
    env: &Env,
    db: &D1Database,
    due: &Due,
    admission: breaker::Admission,
    outcome: breaker::Outcome,
    at: Timestamp,
) -> Result<(), EdgeError> {
    // A success sent through a closed circuit that held no failures changes nothing: a healthy
    // endpoint's row is never written.
    let clean = matches!(due.circuit.state(), breaker::State::Closed { failed: 0, .. });
    if admission == breaker::Admission::Send && outcome == breaker::Outcome::Success && clean {
        return Ok(());
    }
    let url = due.url.as_deref().unwrap_or_default();
    let about = circuit::About { endpoint_id: &due.endpoint_id, account_id: &due.account_id, url };
    let policy = crate::faults::breaker_policy(env, url);
    for _ in 0..8 {
        let Some(columns) = circuit::read(db, &due.endpoint_id).await? else { return Ok(()) };
        let state = columns.state();
        let (next, transition) = breaker::record(&policy, state, admission, outcome, at.unix_millis());
        if next == state {
            return Ok(());
        }
        let Some(signals) = circuit::swap(db, &about, columns.version(), next, transition, at).await? else {
            continue;
        };
        queues::announce_events(env, db, &signals).await?;
        match next {
            breaker::State::Open { probe_at, .. } => {
                let secs = (probe_at - at.unix_millis()).max(0).div_euclid(1000) + 1;
                queues::wake_later(env, &due.endpoint_id, u64::try_from(secs).unwrap_or(1)).await?;
            }
            breaker::State::Closed { .. } => queues::wake_later(env, &due.endpoint_id, 0).await?,
            breaker::State::HalfOpen { .. } => {}
        }
        return Ok(());
    }
    Ok(())
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
            return (Answer::refused(format!("cannot set header {name}")), Reply::default());
        }
    }
    // Never follow a redirect: the next hop is an address nobody checked (and `fetch` would
    // turn the POST into a GET there). A 3xx is a failed attempt, recorded with its Location.
    let request = match crate::platform::request("POST", url.as_str(), Some(&headers), Some(payload), false) {
        Ok(r) => r,
        Err(e) => {
            return (Answer::refused(format!("invalid request: {e}")), Reply::default());
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
                    Answer::Failure { status: Some(status), error, retry_after, no_answer: false }
                }
                _ => Answer::Failure {
                    status: Some(status),
                    error: format!("answered {status}"),
                    retry_after,
                    no_answer: false,
                },
            };
            (answer, reply)
        }
        Err(reason) => {
            (Answer::Failure { status: None, error: reason, retry_after: None, no_answer: true }, Reply::default())
        }
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
        Answer::Failure { status, error, retry_after, .. } => {
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
