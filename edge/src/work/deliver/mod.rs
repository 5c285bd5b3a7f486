//! Customer webhook delivery: the `deliveries` queue, and each endpoint's line.
//!
//! One endpoint never slows another (docs/contract.md §6): a queue message only claims an
//! attempt, which then runs beside the batch; an endpoint has at most `max_in_flight` attempts
//! in flight and a circuit breaker (`core::breaker`); a delivery they hold waits in the
//! endpoint's line, with no queue message, and an attempt that ends takes the oldest in line.
//! A first attempt claimed in the batch that wrote its inbound message runs beside that `jobs`
//! batch instead ([`Beside`]), with no queue message and no read.
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

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use exactly_core::breaker;
use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use futures_util::future::join_all;
use worker::{Context, Env, Message, MessageBatch, MessageExt};

use crate::config::Config;
use crate::error::EdgeError;
use crate::platform::{endpoint_url, now, random_u32};
use crate::queues::{self, DeliveryJob};
use crate::store::deliveries::{self, Due, Taken};
use crate::store::endpoints::{self, circuit};
use crate::store::AccountDb;
use crate::work::outcome::Wait;
use crate::work::outcome::{Done, Outcome};

mod beside;
mod filtering;
mod gate;
mod http;
mod lanes;
mod record;
use gate::{gate_queued, gate_taken, lease_from, take, Claimed, Gate};
use http::{send, Answer, Reply};
use record::{cut, record};

pub use beside::Beside;

/// Success is any 2xx within this long ([`crate::config::Tuning::attempt_timeout`]). Of the
/// body, only the first [`http::MAX_REPLY_BYTES`] are read, as far as they come within it.
fn attempt_timeout(config: &Config) -> Duration {
    config.tuning.attempt_timeout
}

/// An attempt sent this soon after its claim goes under the claim's own lease (59 s of it are
/// left, four attempt timeouts) and the circuit it was claimed under: renewing would cost a
/// round trip to learn nothing.
const RENEW_AFTER_MILLIS: i64 = 1_000;
/// An attempt that ends takes the next delivery in its endpoint's line, and so on, at most this
/// many times or for this long; then a wake message carries the line on.
const CHAIN_MAX: usize = 8;
const CHAIN_MILLIS: i64 = 15_000;
/// A wake starts at most this many deliveries of a line (fewer when the endpoint fills up).
const WAKE_MAX: usize = 50;

/// Attempts an invocation has claimed and not yet finished, beyond which a wake claims no more
/// (the batch's own messages always may): each waits for a lane at most a few attempt timeouts,
/// well inside its lease.
const OUTSTANDING_MAX: usize = 8;
/// Attempts an invocation runs in all, chains included: each costs about eight D1 queries, and
/// an invocation may make a thousand.
const ROUNDS_MAX: usize = 60;
/// The longest an attempt waits for its rate-limit turn before it goes back into the line (a
/// turn is at most a second away unless clocks disagree).
const TURN_WAIT_MAX_MILLIS: f64 = 5_000.0;

/// How long after the attempts beside an invocation start (its batch's start; a `jobs`
/// batch's end) the last of them may still be sending
/// ([`crate::config::Tuning::beside_millis`]).
fn beside_millis(config: &Config) -> i64 {
    config.tuning.beside_millis
}
/// The least time an attempt is sent with. With less left in its invocation it is not sent:
/// it goes back into its endpoint's line, no attempt spent, and a wake sends it from an
/// invocation of its own.
const SEND_MIN_MILLIS: i64 = 3_000;

/// What the attempts that run beside one invocation's batch share.
struct Invocation {
    lanes: lanes::Lanes,
    outstanding: Cell<usize>,
    rounds: Cell<usize>,
    /// When its attempts began to run beside it: their time ends [`BESIDE_MILLIS`] later.
    began: Cell<Timestamp>,
}

impl Invocation {
    fn new() -> Self {
        Invocation {
            lanes: lanes::Lanes::default(),
            outstanding: Cell::default(),
            rounds: Cell::default(),
            began: Cell::new(now()),
        }
    }

    /// Milliseconds left for what runs beside the invocation.
    fn left_millis(&self, config: &Config) -> i64 {
        self.began.get().unix_millis() + beside_millis(config) - now().unix_millis()
    }

    /// Milliseconds left in which an attempt may still start (waits for a place or turn end then).
    fn sendable_millis(&self, config: &Config) -> i64 {
        self.left_millis(config) - SEND_MIN_MILLIS
    }

    /// Whether a whole attempt still fits in what is left of the invocation's time.
    fn fits_an_attempt(&self, config: &Config) -> bool {
        self.sendable_millis(config) >= attempt_timeout(config).as_millis() as i64
    }
}

type Shared = Rc<Invocation>;

/// Consumes the `deliveries` queue; each message is acked or retried by itself.
///
/// A message only claims: its delivery goes through the endpoint's gates (paused, circuit,
/// in-flight limit, its line) and its attempt is claimed by compare-and-swap, so two messages
/// for one delivery never send one attempt twice, whatever their order. The claimed attempt then
/// runs beside the batch (`wait_until`), so no message of the batch, and no later batch, waits
/// for an endpoint to answer; its lease stands for it, renewed right before it is sent.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env, ctx: &Context) -> worker::Result<()> {
    // Read once for the batch and handed to every delivery; while it is invalid none can go.
    let Some(config) = crate::work::outcome::configured(&batch, env) else { return Ok(()) };
    let messages = batch.messages()?;
    let shared = Rc::new(Invocation::new());
    join_all(messages.iter().map(|message| consume_one(env, &config, ctx, &shared, message))).await;
    Ok(())
}

async fn consume_one(
    env: &Env,
    config: &Rc<Config>,
    ctx: &Context,
    shared: &Shared,
    message: &Message<serde_json::Value>,
) {
    let Ok(job) = serde_json::from_value::<DeliveryJob>(message.body().clone()) else {
        message.ack();
        return;
    };
    // The account database the job names.
    let account = match AccountDb::named(env, config, job.database.as_deref()) {
        Ok(account) => account,
        Err(e) => return crate::work::outcome::settle(config, message, Err(e), key(&job), |line| tag(line, &job)),
    };
    if let Some(endpoint) = &job.wake {
        let result = wake(&account, ctx, shared, endpoint).await.map(Outcome::Done);
        return crate::work::outcome::settle(config, message, result, key(&job), |line| tag(line, &job));
    }
    match gate_queued(&account, &job.delivery_id).await {
        Ok(Gate::Claimed(claimed)) => {
            // Its outcome is logged when it is recorded.
            message.ack();
            start(ctx, &account, *claimed, shared);
        }
        Ok(Gate::Done(done)) => {
            crate::work::outcome::settle(config, message, Ok(Outcome::Done(done)), key(&job), |line| tag(line, &job))
        }
        Ok(Gate::LookAgain) => crate::work::outcome::settle(
            config,
            message,
            Ok(Outcome::RetryIn(1, Wait::CircuitChanging)),
            key(&job),
            |line| tag(line, &job),
        ),
        Err(e) => crate::work::outcome::settle(config, message, Err(e), key(&job), |line| tag(line, &job)),
    }
}

/// What a delivery job's line is sampled by: the endpoint it wakes, or its delivery.
fn key(job: &DeliveryJob) -> &str {
    job.wake.as_deref().unwrap_or(&job.delivery_id)
}

fn tag(line: &mut serde_json::Value, job: &DeliveryJob) {
    match &job.wake {
        Some(endpoint) => line["wake"] = serde_json::json!(endpoint),
        None => line["delivery"] = serde_json::json!(job.delivery_id),
    }
}

/// Logs what became of a delivery that no queue message of its own carried (taken from its
/// endpoint's line), as [`crate::work::outcome::settle`] logs a message's.
fn log(config: &Config, delivery_id: &str, result: &Result<Done, EdgeError>) {
    match result {
        Ok(done) if done.is_failure() || config.logs_routine(delivery_id) => {
            worker::console_log!("{}", serde_json::json!({"delivery": delivery_id, "outcome": done.as_str()}))
        }
        Ok(_) => {}
        Err(e) => worker::console_error!(
            "{}",
            serde_json::json!({"delivery": delivery_id, "outcome": "not recorded", "error": e.to_string()})
        ),
    }
}

/// Consumes the deliveries dead-letter queue: the delivery fails visibly.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let Some(config) = crate::work::outcome::configured(&batch, env) else { return Ok(()) };
    for message in batch.messages()? {
        let result = match serde_json::from_value::<DeliveryJob>(message.body().clone()) {
            Ok(job) if job.wake.is_none() => match AccountDb::named(env, &config, job.database.as_deref()) {
                Ok(account) => dead_letter(&account, &job.delivery_id).await,
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

async fn dead_letter(account: &AccountDb, delivery_id: &str) -> Result<(), EdgeError> {
    gate::fail(account, delivery_id, "dead-lettered: the delivery job failed on every retry", now()).await
}

/// Starts a claimed attempt beside the batch.
fn start(ctx: &Context, account: &AccountDb, claimed: Claimed, shared: &Shared) {
    shared.outstanding.set(shared.outstanding.get() + 1);
    ctx.wait_until(crate::quotas::beside(run(account.clone(), claimed, Rc::clone(shared))));
}

/// Runs a claimed attempt, then, while the endpoint has a line, the next delivery in it: an
/// attempt that ends hands its in-flight place to the oldest waiting, with no queue message
/// between (at most [`CHAIN_MAX`] in a row and [`ROUNDS_MAX`] in the invocation, then a wake
/// carries the line on).
async fn run(account: AccountDb, first: Claimed, shared: Shared) {
    chain(&account, first, &shared).await;
    shared.outstanding.set(shared.outstanding.get().saturating_sub(1));
}

async fn chain(account: &AccountDb, first: Claimed, shared: &Invocation) {
    let db = account.db();
    let began = now();
    let mut claimed = first;
    for round in 1.. {
        shared.rounds.set(shared.rounds.get() + 1);
        let endpoint = claimed.due.endpoint_id.clone();
        let id = claimed.due.id.clone();
        // The next goes only if a whole attempt fits in what is left of the invocation's time.
        let goes_on = || {
            let spent = round >= CHAIN_MAX || shared.rounds.get() >= ROUNDS_MAX;
            !spent
                && now().unix_millis() - began.unix_millis() <= CHAIN_MILLIS
                && shared.fits_an_attempt(account.config())
        };
        // A success's record takes the next in line in its own batch when the chain still goes on
        // as the attempt ends (one round trip fewer); a delivery taken so is gated even if the
        // chain ran out meanwhile.
        let (result, taken) = attempt(account, claimed, shared, &goes_on).await;
        log(account.config(), &id, &result);
        let next = match taken {
            Some(next) => next,
            None if !goes_on() => {
                if let Err(e) = queues::wake_later(account, &endpoint, 0).await {
                    log(account.config(), &id, &Err(e));
                }
                return;
            }
            None => match take(db, &endpoint).await {
                Ok(next) => next,
                Err(e) => return log(account.config(), &id, &Err(e)),
            },
        };
        let Some(taken) = claim_next(account, &endpoint, next, shared).await else { return };
        claimed = taken;
    }
}

/// Takes `next` through its gates for the chain; one its endpoint's filter holds back, or one
/// that waits for an earlier event of its resource, gives its turn to the one behind it. Each
/// such turn counts as a round of the invocation, so a long run of held-back deliveries stops at
/// [`ROUNDS_MAX`] (or [`CHAIN_MAX`] in a row) like attempts do, or once a whole attempt no longer
/// fits in the invocation's time, and a wake carries the line on. A delivery taken out of the
/// line is always gated: the budget is checked before the next one is taken.
async fn claim_next(
    account: &AccountDb,
    endpoint: &str,
    mut next: Option<Taken>,
    shared: &Invocation,
) -> Option<Claimed> {
    let db = account.db();
    let mut held_back = 0;
    loop {
        let taken = next?;
        let id = taken.id.clone();
        match gate_taken(account, taken).await {
            Ok(Gate::Claimed(c)) => return Some(*c),
            // Settled, or waiting for an earlier event of its resource: the next in line goes.
            Ok(Gate::Done(done @ (Done::Filtered | Done::WaitingForPrevious))) => log(account.config(), &id, &Ok(done)),
            Ok(Gate::Done(done)) => {
                log(account.config(), &id, &Ok(done));
                return None;
            }
            // Out of line and due: the sweeper finds it.
            Ok(Gate::LookAgain) => {
                log(account.config(), &id, &Ok(Done::ClaimedElsewhere));
                return None;
            }
            Err(e) => {
                log(account.config(), &id, &Err(e));
                return None;
            }
        }
        held_back += 1;
        shared.rounds.set(shared.rounds.get() + 1);
        // The next is taken only while a whole attempt still fits, as in the chain; else the
        // wake carries the line on in an invocation with its whole time.
        let spent = held_back >= CHAIN_MAX || shared.rounds.get() >= ROUNDS_MAX;
        if spent || !shared.fits_an_attempt(account.config()) {
            break;
        }
        next = match take(db, endpoint).await {
            Ok(next) => next,
            Err(e) => {
                log(account.config(), &id, &Err(e));
                return None;
            }
        };
    }
    if let Err(e) = queues::wake_later(account, endpoint, 0).await {
        log(account.config(), endpoint, &Err(e));
    }
    None
}

/// Wakes an endpoint's line: its oldest deliveries go through their gates again until one goes
/// back into line (its circuit holds), the endpoint is full (the oldest then stays in line) or
/// the line is empty; each
/// claimed attempt runs beside the batch as [`run`]. An invocation that has as many attempts
/// outstanding as it should hold wakes the line again a second later instead, and so does one
/// that took its [`WAKE_MAX`] deliveries (held back by a filter, or settled) with the line not
/// yet drained: the next wake goes on from an invocation of its own.
async fn wake(account: &AccountDb, ctx: &Context, shared: &Shared, endpoint: &str) -> Result<Done, EdgeError> {
    let db = account.db();
    for round in 0..=WAKE_MAX {
        if round == WAKE_MAX {
            queues::wake_later(account, endpoint, 0).await?;
            break;
        }
        if shared.outstanding.get() >= OUTSTANDING_MAX {
            queues::wake_later(account, endpoint, 1).await?;
            break;
        }
        let Some(taken) = take(db, endpoint).await? else { break };
        let id = taken.id.clone();
        match gate_taken(account, taken).await {
            Ok(Gate::Claimed(claimed)) => start(ctx, account, *claimed, shared),
            Ok(Gate::Done(done)) => {
                log(account.config(), &id, &Ok(done));
                if matches!(done, Done::WaitingForEndpoint | Done::WaitingForCircuit | Done::Held) {
                    break;
                }
            }
            Ok(Gate::LookAgain) => break,
            Err(e) => {
                log(account.config(), &id, &Err(e));
                break;
            }
        }
    }
    Ok(Done::Woke)
}

/// Sends a claimed attempt and records its outcome. Before it is sent it takes a place in its
/// lane, renews its lease, then takes its rate-limit turn, so the turn is the time it starts; if
/// it cannot, its claim was lost to a later attempt or is given back (into the line, no attempt
/// spent), and nothing is sent.
///
/// While `goes_on` holds as the attempt ends, a success's record also takes the next delivery in
/// the endpoint's line: the second value is then what it took (`None` when nothing was taken).
/// It is asked then, not before the attempt: an attempt may end with too little time left for
/// another, and a delivery taken then would be gated and claimed only to be given back.
async fn attempt(
    account: &AccountDb,
    claimed: Claimed,
    shared: &Invocation,
    goes_on: &dyn Fn() -> bool,
) -> (Result<Done, EdgeError>, Option<Option<Taken>>) {
    // The wait for a place ends when too little time is left to send in: the claim goes back,
    // at once when none is left (a free place would otherwise be taken, and a lease renewed
    // and a turn taken, for nothing).
    let sendable = shared.sendable_millis(account.config());
    if sendable <= 0 {
        return (out_of_time(account, &claimed).await.map(|()| Done::ClaimedElsewhere), None);
    }
    let ends = worker::Delay::from(Duration::from_millis(u64::try_from(sendable).unwrap_or(0)));
    let Some(_place) = shared.lanes.place_within(&claimed.due.endpoint_id, claimed.fast(), ends).await else {
        return (out_of_time(account, &claimed).await.map(|()| Done::ClaimedElsewhere), None);
    };
    let taken = Cell::new(None);
    let result = attempt_in_lane(account, claimed, shared, (&taken, goes_on)).await;
    (result, taken.take())
}

/// [`attempt`], with its place in a lane taken.
async fn attempt_in_lane(
    account: &AccountDb,
    claimed: Claimed,
    shared: &Invocation,
    (take_into, goes_on): (&Cell<Option<Option<Taken>>>, &dyn Fn() -> bool),
) -> Result<Done, EdgeError> {
    let db = account.db();
    let (circuit_now, started) = match ready(account, &claimed, shared).await {
        Ok(Some(ready)) => ready,
        Ok(None) => return Ok(Done::ClaimedElsewhere),
        Err(e) => {
            unsent(db, &claimed).await?;
            return Err(e);
        }
    };
    // An attempt never outlives its invocation's time (its lane wait and turn counted in it):
    // with too little left it is not sent but given back, and one sent is cut at the end of the
    // time and recorded as no answer, to be sent again under its webhook-id.
    let left = shared.left_millis(account.config());
    if left < SEND_MIN_MILLIS {
        out_of_time(account, &claimed).await?;
        return Ok(Done::ClaimedElsewhere);
    }
    let timeout = attempt_timeout(account.config()).min(Duration::from_millis(u64::try_from(left).unwrap_or(0)));
    // Cut short by the invocation's time, not by the endpoint: an attempt that got no answer in
    // it says nothing about the endpoint's health, so the breaker does not count it (a probe's
    // outcome always settles its circuit).
    let cut_short = timeout < attempt_timeout(account.config());
    let Claimed { due, number, admission, .. } = claimed;
    let (Some(url), Some(secret)) = (due.url.as_deref(), due.secret.as_deref()) else {
        gate::fail(account, &due.id, "the endpoint was deleted", started).await?;
        return Ok(Done::EndpointDisabled);
    };
    let allow_private = account.config().allow_private_endpoints;
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
                (Some(old), Some(until)) if until > started => SigningSecret::parse(old).ok(),
                _ => None,
            };
            let signed = http::Signed {
                secret: &secret,
                previous: previous.as_ref(),
                headers: &due.headers,
                skipped: due.skipped.as_deref(),
            };
            send(&url, &signed, &due.event_id, &due.payload, started, timeout).await
        }
    };
    let (answer, reply) = answer;
    let ended = now();
    let latency_ms = ended.unix_millis() - started.unix_millis();
    if let (true, Answer::Failure { timed_out: true, error, .. }) = (cut_short, &answer) {
        let error = format!("{error}: cut short by the invocation's time, no attempt spent");
        return cut(account, &due, (number, started, latency_ms, error), admission, reply).await;
    }
    let outcome = answer.outcome();
    // The next in line is taken while the chain goes on as the attempt ends, and claimed in the
    // record's batch only when this attempt's outcome cannot change the circuit (`feed_breaker`,
    // which runs after it): a success through a closed circuit that counted no failure. Any other
    // success may open or close it, and the one taken goes through its gates as the circuit is then.
    let take_next = goes_on().then(|| (take_into, leaves_circuit_alone(admission, &circuit_now)));
    let done = record(account, &due, (number, started, latency_ms), answer, reply, take_next).await?;
    if breaker::counts(admission, outcome, cut_short, number - due.cut) {
        feed_breaker(account, &due, &circuit_now, admission, outcome, ended).await?;
    }
    Ok(done)
}

/// Gives a claimed attempt back, unsent, when its invocation has too little time left to send
/// it in: into its endpoint's line, no attempt spent, and a wake carries the line on from an
/// invocation of its own.
async fn out_of_time(account: &AccountDb, claimed: &Claimed) -> Result<(), EdgeError> {
    unsent(account.db(), claimed).await?;
    queues::wake_later(account, &claimed.due.endpoint_id, 0).await
}

/// Gives a claimed attempt back unsent, into its endpoint's line, no attempt spent. A probe gives
/// its circuit's token back with it: the token would otherwise hold the endpoint's line until
/// its lease ran out, with nothing in flight.
async fn unsent(db: &worker::D1Database, claimed: &Claimed) -> Result<bool, EdgeError> {
    let (due, number) = (&claimed.due, claimed.number);
    match claimed.admission {
        breaker::Admission::Probe(lease) => {
            deliveries::unclaim_probe(db, &due.id, &due.endpoint_id, number, lease, now()).await
        }
        breaker::Admission::Send | breaker::Admission::Hold(_) => deliveries::unclaim(db, &due.id, number, now()).await,
    }
}

/// Everything an attempt needs before it is sent: a renewed lease, then its rate-limit turn.
/// `Ok(None)` when the attempt is no longer this job's (a later attempt was claimed after its
/// lease lapsed, or its turn was too far off or no time was left to send in, and it went back
/// into line); else the endpoint's
/// circuit as it is now and the time the attempt starts (its turn, under a rate limit). A turn
/// is too far off past [`TURN_WAIT_MAX_MILLIS`], or past the time its invocation leaves to send
/// in: a wait is never slept through only to find the time gone.
async fn ready(
    account: &AccountDb,
    claimed: &Claimed,
    shared: &Invocation,
) -> Result<Option<(endpoints::Columns, Timestamp)>, EdgeError> {
    let db = account.db();
    let due = &claimed.due;
    let rate = due.rate_limit_per_second.filter(|r| *r >= 1);
    // Sent right after its claim (no lane to wait for, no turn to take) through the circuit it
    // was admitted by: the claim's lease and that circuit stand, and nobody else can have claimed
    // it since. A probe is not: its gate swapped the circuit after reading it.
    let sent_as_claimed = claimed.admission == breaker::Admission::Send
        && now().unix_millis() - claimed.at.unix_millis() < RENEW_AFTER_MILLIS;
    if rate.is_none() && sent_as_claimed {
        return Ok(Some((due.circuit.clone(), now())));
    }
    // With no time left to send in, neither the lease is renewed nor a turn taken (a turn taken
    // for nothing would push the endpoint's next attempts back by one interval).
    let sendable = || shared.sendable_millis(account.config()) as f64;
    if sendable() <= 0.0 {
        unsent(db, claimed).await?;
        return Ok(None);
    }
    let lease = lease_from(now());
    let Some(columns) = deliveries::renew(db, &due.id, &due.endpoint_id, claimed.number, lease).await? else {
        return Ok(None);
    };
    let Some(rate) = rate else { return Ok(Some((columns, now()))) };
    let mut waited = 0.0;
    loop {
        if sendable() <= 0.0 {
            unsent(db, claimed).await?;
            return Ok(None);
        }
        let at = now();
        let Some(wait) = crate::store::endpoints::take_turn(db, &due.endpoint_id, rate as u32, at).await? else {
            return Ok(Some((columns, at)));
        };
        if waited + wait > TURN_WAIT_MAX_MILLIS || wait > sendable() {
            unsent(db, claimed).await?;
            return Ok(None);
        }
        worker::Delay::from(Duration::from_millis(wait.ceil() as u64)).await;
        waited += wait;
    }
}

/// Counts an attempt's outcome in its endpoint's circuit breaker. `sent_under` is the circuit
/// as the attempt was sent. The swap is retried against the state another attempt wrote
/// meanwhile; an opening schedules the wake at the probe time, a closing wakes the line now.
async fn feed_breaker(
    account: &AccountDb,
    due: &Due,
    sent_under: &endpoints::Columns,
    admission: breaker::Admission,
    outcome: breaker::Outcome,
    at: Timestamp,
) -> Result<(), EdgeError> {
    let db = account.db();
    // A success sent through a closed circuit that held no failures changes nothing: a healthy
    // endpoint's row is never written.
    if outcome == breaker::Outcome::Success && leaves_circuit_alone(admission, sent_under) {
        return Ok(());
    }
    let url = due.url.as_deref().unwrap_or_default();
    let about = circuit::About { endpoint_id: &due.endpoint_id, account_id: &due.account_id, url };
    let policy = crate::faults::breaker_for(url, account.config().tuning.breaker);
    let mut known = Some(sent_under.clone());
    for _ in 0..8 {
        let columns = match known.take() {
            Some(columns) => columns,
            None => match circuit::read(db, &due.endpoint_id).await? {
                Some(columns) => columns,
                None => return Ok(()),
            },
        };
        let state = columns.state();
        let (next, transition) = breaker::record(&policy, state, admission, outcome, at.unix_millis(), random_u32());
        if next == state {
            return Ok(());
        }
        let Some(signals) = circuit::swap(db, &about, columns.version(), next, transition, at).await? else {
            continue;
        };
        match next {
            breaker::State::Open { probe_at, .. } => {
                let secs = (probe_at - at.unix_millis()).max(0).div_euclid(1000) + 1;
                queues::wake_later(account, &due.endpoint_id, u64::try_from(secs).unwrap_or(1)).await?;
            }
            breaker::State::Closed { .. } => queues::wake_later(account, &due.endpoint_id, 0).await?,
            breaker::State::HalfOpen { .. } => {}
        }
        queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &signals).await?).await?;
        return Ok(());
    }
    Ok(())
}

/// Whether a success admitted as `admission` through circuit `sent_under` leaves the circuit as
/// it is (`feed_breaker` then writes nothing).
fn leaves_circuit_alone(admission: breaker::Admission, sent_under: &endpoints::Columns) -> bool {
    admission == breaker::Admission::Send && matches!(sent_under.state(), breaker::State::Closed { failed: 0, .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::endpoints::{Circuit, Columns};

    fn closed(attempts: i64, failed: i64, at: i64) -> Columns {
        Columns {
            circuit: Some(Circuit::Closed),
            circuit_at: Some(at),
            circuit_attempts: Some(attempts),
            circuit_failed: Some(failed),
            circuit_succeeded: Some(attempts - failed),
            circuit_opens: Some(0),
            circuit_version: Some(3),
        }
    }

    #[test]
    fn the_record_claims_the_next_in_line_only_when_its_success_cannot_move_the_circuit() {
        let policy = exactly_core::breaker::DEFAULT_POLICY;
        let at = 1_000_000;
        // Four failed attempts in the window: the fifth, a success, opens the circuit, so the
        // next in line must not be claimed under the closed circuit the record's batch reads.
        let failing = closed(4, 4, at);
        let (after, _) = breaker::record(
            &policy,
            failing.state(),
            breaker::Admission::Send,
            breaker::Outcome::Success,
            at + 1_000,
            0,
        );
        assert!(matches!(after, breaker::State::Open { .. }), "{after:?}");
        assert!(!leaves_circuit_alone(breaker::Admission::Send, &failing));
        // A closed circuit that counted no failure stays as it is after a success.
        let clean = closed(0, 0, 0);
        assert!(leaves_circuit_alone(breaker::Admission::Send, &clean));
        let (after, transition) =
            breaker::record(&policy, clean.state(), breaker::Admission::Send, breaker::Outcome::Success, at, 0);
        assert_eq!((after, transition), (clean.state(), None));
        // A probe's success may close a circuit: never.
        assert!(!leaves_circuit_alone(breaker::Admission::Probe(at), &clean));
    }
}
