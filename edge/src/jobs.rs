//! The `jobs` queue: one message per carrier event to process.
//!
//! Every message is acknowledged only after its effects committed, and any message may run
//! twice: the guards in [`crate::carrier_events`] make the second run a no-op.

use serde::{Deserialize, Serialize};
use worker::{Env, MessageBatch, MessageExt, Queue, QueueRetryOptionsBuilder};

use crate::bindings;
use crate::carrier_events;
use crate::error::EdgeError;
use crate::platform::now;

/// A message on the `jobs` queue.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Job {
    /// Process the stored carrier event with this row id.
    CarrierEvent { id: String },
}

/// Seconds before a failed job is tried again.
const RETRY_DELAY_SECS: u32 = 5;

/// Enqueues processing of one stored carrier event.
pub async fn enqueue(env: &Env, carrier_event_id: &str) -> Result<(), EdgeError> {
    let queue: Queue = env.queue(bindings::JOBS).map_err(|e| EdgeError::platform("jobs binding", e))?;
    queue
        .send(Job::CarrierEvent { id: carrier_event_id.to_owned() })
        .await
        .map_err(|e| EdgeError::platform("enqueue job", e))
}

/// Enqueues several stored carrier events in one call.
pub async fn enqueue_many(env: &Env, ids: Vec<String>) -> Result<(), EdgeError> {
    if ids.is_empty() {
        return Ok(());
    }
    let queue: Queue = env.queue(bindings::JOBS).map_err(|e| EdgeError::platform("jobs binding", e))?;
    let jobs: Vec<Job> = ids.into_iter().map(|id| Job::CarrierEvent { id }).collect();
    queue
        .send_batch(jobs)
        .await
        .map_err(|e| EdgeError::platform("enqueue jobs", e))
}

/// Consumes a batch from the `jobs` queue, acknowledging or retrying each message itself.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        let job = serde_json::from_value::<Job>(message.body().clone());
        let outcome = match job {
            Ok(Job::CarrierEvent { ref id }) => process(&db, id).await,
            Err(e) => {
                // A message no version of this worker wrote: retrying cannot help.
                worker::console_error!("{}", serde_json::json!({"job": "invalid", "error": e.to_string()}));
                message.ack();
                continue;
            }
        };
        match outcome {
            Ok(()) => message.ack(),
            Err(e) => {
                worker::console_error!(
                    "{}",
                    serde_json::json!({"job": "carrier_event", "outcome": "retried", "error": e.to_string()})
                );
                message.retry_with_options(
                    &QueueRetryOptionsBuilder::new().with_delay_seconds(RETRY_DELAY_SECS).build(),
                );
            }
        }
    }
    Ok(())
}

async fn process(db: &worker::D1Database, id: &str) -> Result<(), EdgeError> {
    let applied = carrier_events::mark_processed(db, id, now()).await?;
    worker::console_log!(
        "{}",
        serde_json::json!({"job": "carrier_event", "id": id, "outcome": if applied { "applied" } else { "no-op" }})
    );
    Ok(())
}

/// Consumes the jobs dead-letter queue: the event is recorded as failed, visibly.
pub async fn consume_dead_letters(
    batch: MessageBatch<serde_json::Value>,
    env: &Env,
) -> worker::Result<()> {
    let db = env.d1(bindings::DB)?;
    for message in batch.messages()? {
        match serde_json::from_value::<Job>(message.body().clone()) {
            Ok(Job::CarrierEvent { id }) => {
                match carrier_events::mark_failed(&db, &id, "processing failed on every retry (dead-lettered)").await {
                    Ok(_) => message.ack(),
                    Err(_) => message.retry(),
                }
            }
            Err(_) => message.ack(),
        }
    }
    Ok(())
}
