//! The `jobs` queue: one message per carrier event to process or message to dispatch.
//!
//! Every message is acknowledged only after its effects committed, and any message may run
//! twice: the guards make the second run a no-op. A message that fails on every retry goes to
//! the dead-letter queue, whose consumer records the failure visibly.

use serde::{Deserialize, Serialize};
use worker::{D1Database, Env, MessageBatch, MessageBuilder, MessageExt, Queue, QueueRetryOptionsBuilder};

use crate::bindings;
use crate::carrier_events;
use crate::dispatch;
use crate::error::EdgeError;
use crate::processor;

/// A message on the `jobs` queue.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Job {
    /// Process the stored carrier event with this row id.
    CarrierEvent { id: String },
    /// Send the outbound message with this id.
    Dispatch { message_id: String },
}

/// How a job ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Finished (applied, no-op or visibly failed): acknowledge.
    Done(&'static str),
    /// Not possible yet: run again after this many seconds.
    RetryIn(u32, &'static str),
}

/// Seconds before a job that hit a platform error is tried again.
const ERROR_RETRY_SECS: u32 = 5;

fn queue(env: &Env) -> Result<Queue, EdgeError> {
    env.queue(bindings::JOBS).map_err(|e| EdgeError::platform("jobs binding", e))
}

/// Enqueues one job.
pub async fn enqueue(env: &Env, job: Job) -> Result<(), EdgeError> {
    queue(env)?.send(job).await.map_err(|e| EdgeError::platform("enqueue job", e))
}

/// Enqueues one job to run after `delay_seconds`.
pub async fn enqueue_later(env: &Env, job: Job, delay_seconds: u32) -> Result<(), EdgeError> {
    let message = MessageBuilder::new(job).delay_seconds(delay_seconds).build();
    queue(env)?.send(message).await.map_err(|e| EdgeError::platform("enqueue job", e))
}

/// Enqueues several jobs in one call.
pub async fn enqueue_many(env: &Env, jobs: Vec<Job>) -> Result<(), EdgeError> {
    if jobs.is_empty() {
        return Ok(());
    }
    queue(env)?.send_batch(jobs).await.map_err(|e| EdgeError::platform("enqueue jobs", e))
}

/// Consumes a batch from the `jobs` queue, acknowledging or retrying each message itself.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        let job = match serde_json::from_value::<Job>(message.body().clone()) {
            Ok(job) => job,
            Err(e) => {
                // A message no version of this worker wrote: retrying cannot help.
                worker::console_error!("{}", serde_json::json!({"job": "invalid", "error": e.to_string()}));
                message.ack();
                continue;
            }
        };
        let started = crate::platform::now();
        let outcome = run(env, &db, &job).await;
        let latency_ms = crate::platform::now().unix_millis() - started.unix_millis();
        let (kind, id) = match &job {
            Job::CarrierEvent { id } => ("carrier_event", id),
            Job::Dispatch { message_id } => ("dispatch", message_id),
        };
        let retry = |secs: u32| message.retry_with_options(&QueueRetryOptionsBuilder::new().with_delay_seconds(secs).build());
        match outcome {
            Ok(Outcome::Done(what)) => {
                worker::console_log!("{}", serde_json::json!({"job": kind, "id": id, "outcome": what, "latency_ms": latency_ms}));
                message.ack();
            }
            Ok(Outcome::RetryIn(secs, why)) => {
                worker::console_log!("{}", serde_json::json!({"job": kind, "id": id, "outcome": "retried", "reason": why, "delay_s": secs}));
                retry(secs);
            }
            Err(e) => {
                worker::console_error!("{}", serde_json::json!({"job": kind, "id": id, "outcome": "retried", "error": e.to_string()}));
                retry(ERROR_RETRY_SECS);
            }
        }
    }
    Ok(())
}

async fn run(env: &Env, db: &D1Database, job: &Job) -> Result<Outcome, EdgeError> {
    match job {
        Job::CarrierEvent { id } => processor::process(env, db, id).await,
        Job::Dispatch { message_id } => dispatch::dispatch(env, db, message_id).await,
    }
}

/// A dispatch that failed on every retry fails the message only when that cannot hide a send
/// ([`crate::messages::fail_undispatched`]); otherwise it is tried again later, with the same
/// idempotency key.
async fn dead_dispatch(env: &Env, db: &D1Database, message_id: &str) -> Result<(), EdgeError> {
    let now = crate::platform::now();
    let horizon = exactly_core::Timestamp::from_unix_millis(now.unix_millis() - dispatch::SEND_HORIZON_MILLIS);
    let change = crate::messages::fail_undispatched(db, message_id, now, horizon).await?;
    if change.changed {
        return crate::deliveries::announce(env, db, &change).await;
    }
    let undispatched = crate::messages::by_id(db, message_id)
        .await?
        .is_some_and(|m| m.carrier_message_id.is_none() && matches!(m.status.as_str(), "queued" | "scheduled" | "sending"));
    if undispatched {
        enqueue_later(env, Job::Dispatch { message_id: message_id.to_owned() }, 60).await?;
    }
    Ok(())
}

/// Consumes the jobs dead-letter queue: the failure is recorded where operators look.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        let recorded = match serde_json::from_value::<Job>(message.body().clone()) {
            Ok(Job::CarrierEvent { id }) => {
                carrier_events::mark_failed(&db, &id, "processing failed on every retry (dead-lettered)").await.map(|_| ())
            }
            Ok(Job::Dispatch { message_id }) => dead_dispatch(env, &db, &message_id).await,
            Err(_) => Ok(()),
        };
        match recorded {
            Ok(()) => message.ack(),
            Err(_) => message.retry(),
        }
    }
    Ok(())
}
