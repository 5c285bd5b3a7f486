//! The producers of the two queues: `jobs` (carrier events to process, messages to dispatch)
//! and `deliveries` (customer webhook attempts). Every wing that enqueues goes through here;
//! the consumers live in [`crate::work`].

use exactly_core::backoff;
use serde::{Deserialize, Serialize};
use worker::{Env, MessageBuilder};

use crate::bindings;
use crate::error::EdgeError;
use crate::quotas;
use crate::store::AccountDb;

/// A message on the `jobs` queue.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Job {
    /// Process the stored carrier event with this id, in lane `lane` of its batch
    /// ([`exactly_core::CarrierEvent::lane`]; absent for an event enqueued again by a sweep or a
    /// re-drive, which runs in the lane of such events).
    CarrierEvent {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lane: Option<String>,
        /// The number an inbound message was sent to, as ingest read it: its owner is read in
        /// one round trip with the event (work::process). Only a hint: processing decides on the
        /// number of the stored event, and reads the owner again when the two differ.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        number: Option<String>,
        /// The stored event itself, as ingest stored it: processing an inbound message then
        /// reads nothing before its effects' batch (work::process). Only on the job of a new
        /// event whose row is in `DB` with every account.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<Box<Carried>>,
    },
    /// Send the outbound message with this id, kept in account database `database` (absent:
    /// `DB`).
    Dispatch {
        message_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
    },
    /// Copy item `position` of inbound message `message_id` (in account database `database`)
    /// from the carrier's link into the media bucket.
    CopyMedia {
        message_id: String,
        position: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
    },
    /// The next page of recovery `id` (`store::deliveries::recoveries`), kept in account
    /// database `database` (absent: `DB`).
    Recover {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
    },
    /// The next page of erasure `id` (`work::erase`; its row is in `DB`). The job carries the
    /// number, which the row holds only as a MAC.
    Erase { id: String, number: Personal },
    /// One part of the cron's tick in one database (`work::cron`): the tick enqueues one per
    /// database and part, so no invocation works in every database.
    Tick {
        part: Part,
        /// The binding of the database it works in.
        database: String,
        /// The pages of this retention step or audit that ran before this one in the same tick
        /// (0 for a part the tick enqueued itself).
        #[serde(default)]
        round: u32,
        /// The cron expression that fired the tick, which the part's log line names.
        #[serde(default)]
        trigger: String,
    },
}

/// A person's phone number a job carries: never in its `Debug`, so never in a log line.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Personal(pub String);

impl std::fmt::Debug for Personal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[number]")
    }
}

/// A part of the cron's tick ([`Job::Tick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The dedupe log as a whole (`DB`): carrier events whose job was lost, and the backlog
    /// signals about the oldest of them.
    Log,
    /// An account database: work whose job was lost, its backlog signal, reconciliation.
    Sweep,
    /// A page of a retention step.
    Retain(Step),
    /// A page of each check of the running audit in an account database (work::audit).
    Audit,
}

exactly_core::text_enum! {
    /// A retention step, pruned a page at a time ([`Part::Retain`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Step {
        /// Expired portal sessions (`DB`).
        Sessions = "sessions",
        /// Settled carrier events' payloads (a dedupe database).
        Payloads = "payloads",
        /// Settled carrier events' rows (a dedupe database).
        CarrierEvents = "carrier_events",
        /// Delivered webhooks' attempts (an account database).
        Attempts = "attempts",
        /// Old customer events (an account database).
        CustomerEvents = "customer_events",
        /// Idempotency keys past their 24 hours (an account database).
        IdempotencyKeys = "idempotency_keys",
    }
}

impl Step {
    /// The steps of each dedupe database.
    pub const LOG: [Step; 2] = [Step::Payloads, Step::CarrierEvents];
    /// The steps of each account database.
    pub const ACCOUNTS: [Step; 3] = [Step::Attempts, Step::CustomerEvents, Step::IdempotencyKeys];
}

impl Part {
    /// Its name in log lines and lanes.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Log => "log",
            Part::Sweep => "sweep",
            Part::Retain(step) => step.as_str(),
            Part::Audit => "audit",
        }
    }
}

/// A stored carrier event carried by its job: the row's columns as ingest wrote them.
#[derive(Serialize, Deserialize)]
pub struct Carried {
    pub carrier: exactly_core::Provider,
    pub carrier_event_id: String,
    pub event_type: String,
    pub payload: String,
    /// When it was stored (Unix milliseconds).
    pub created_at: i64,
}

impl std::fmt::Debug for Carried {
    /// Without the payload: it holds what the carrier said about a person's message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Carried").field("carrier_event_id", &self.carrier_event_id).finish_non_exhaustive()
    }
}

/// The largest payload a job carries. Queue messages hold at most 128 KB; a larger event is
/// read from its row.
pub const CARRIED_PAYLOAD_MAX: usize = 32 * 1024;

impl Job {
    /// The dispatch of a message of the account database `account` is.
    pub fn dispatch(account: &AccountDb, message_id: &str) -> Self {
        Job::Dispatch { message_id: message_id.to_owned(), database: account.binding() }
    }

    /// The copy of a media item of a message of the account database `account` is.
    pub fn copy_media(account: &AccountDb, message_id: &str, position: u32) -> Self {
        Job::CopyMedia { message_id: message_id.to_owned(), position, database: account.binding() }
    }

    /// The next page of a recovery of the account database `account` is.
    pub fn recover(account: &AccountDb, id: &str) -> Self {
        Job::Recover { id: id.to_owned(), database: account.binding() }
    }

    /// A carrier event to process again (a sweep, a re-drive): its lane is not known.
    pub fn carrier_event(id: &str) -> Self {
        Job::CarrierEvent { id: id.to_owned(), lane: None, number: None, event: None }
    }

    /// The lane of the jobs consumer this job runs in: jobs of one lane run one after another in
    /// the batch's order, lanes side by side (work::jobs).
    pub fn lane(&self) -> String {
        match self {
            Job::CarrierEvent { lane: Some(lane), .. } => lane.clone(),
            Job::CarrierEvent { lane: None, .. } => "again".to_owned(),
            Job::Dispatch { message_id, .. } => format!("dispatch:{message_id}"),
            Job::CopyMedia { message_id, .. } => format!("media:{message_id}"),
            Job::Tick { part, database, .. } => format!("tick:{database}:{}", part.as_str()),
            Job::Recover { id, .. } => format!("recover:{id}"),
            Job::Erase { id, .. } => format!("erase:{id}"),
        }
    }

    /// The account database the job's rows are in (`None`: `DB`, or found from the event).
    pub fn database(&self) -> Option<&str> {
        match self {
            Job::CarrierEvent { .. } | Job::Tick { .. } | Job::Erase { .. } => None,
            Job::Dispatch { database, .. } | Job::CopyMedia { database, .. } | Job::Recover { database, .. } => {
                database.as_deref()
            }
        }
    }

    /// A part of the cron's tick in `database`, fired by `trigger`.
    pub fn tick(part: Part, database: &str, trigger: &str) -> Self {
        Job::Tick { part, database: database.to_owned(), round: 0, trigger: trigger.to_owned() }
    }
}

/// A message on the `deliveries` queue: a delivery to attempt, or an endpoint whose line to
/// wake.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeliveryJob {
    /// The `webhook_deliveries` row to attempt (empty in a wake).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub delivery_id: String,
    /// The endpoint whose line to wake: as many of its oldest deliveries in line as it has
    /// room for go through their gates again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<String>,
    /// The account database it is in (absent: `DB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}

/// Sends one message to the queue bound as `queue` after `delay_seconds`, within the queue's
/// limits (`what` names the send in its error).
async fn send_one<T: Serialize>(
    env: &Env,
    queue: &str,
    message: T,
    delay_seconds: u32,
    what: &str,
) -> Result<(), EdgeError> {
    quotas::queue_send(queue, std::slice::from_ref(&message))?;
    let binding = env.queue(queue).map_err(|e| EdgeError::platform("queue binding", e))?;
    let message = MessageBuilder::new(message).delay_seconds(delay_seconds).build();
    binding.send(message).await.map_err(|e| EdgeError::platform(what, e))
}

/// Sends `messages` to the queue bound as `queue` now, in as few calls as the queue's batch
/// limits allow (`what` names the sends in their error).
async fn send_many<T: Serialize>(env: &Env, queue: &str, messages: Vec<T>, what: &str) -> Result<(), EdgeError> {
    if messages.is_empty() {
        return Ok(());
    }
    let binding = env.queue(queue).map_err(|e| EdgeError::platform("queue binding", e))?;
    for chunk in chunks(messages) {
        quotas::queue_send(queue, &chunk)?;
        binding.send_batch(chunk).await.map_err(|e| EdgeError::platform(what, e))?;
    }
    Ok(())
}

/// Enqueues one job.
pub async fn enqueue(env: &Env, job: Job) -> Result<(), EdgeError> {
    send_one(env, bindings::JOBS, job, 0, "enqueue job").await
}

/// The longest delay a queue message takes (12 hours).
const MAX_DELAY_SECS: i64 = 12 * 3600;

/// Enqueues the dispatch of a scheduled message to run when it is due (Unix ms `at`), or as
/// close as the queue's longest delay allows: rounded up, so it never runs early by a fraction of
/// a second; a job that is still early (12 hours at most) enqueues itself again.
pub async fn dispatch_at(account: &AccountDb, message_id: &str, at: i64) -> Result<(), EdgeError> {
    let remaining = at - crate::platform::now().unix_millis();
    let delay = ((remaining + 999) / 1000).clamp(0, MAX_DELAY_SECS);
    let job = Job::dispatch(account, message_id);
    enqueue_later(account.env(), job, u32::try_from(delay).unwrap_or(0)).await
}

/// Enqueues one job to run after `delay_seconds`.
pub async fn enqueue_later(env: &Env, job: Job, delay_seconds: u32) -> Result<(), EdgeError> {
    send_one(env, bindings::JOBS, job, delay_seconds, "enqueue job").await
}

/// Enqueues several jobs, in as few calls as the queue's batch limits allow.
pub async fn enqueue_many(env: &Env, batch: Vec<Job>) -> Result<(), EdgeError> {
    send_many(env, bindings::JOBS, batch, "enqueue jobs").await
}

/// `messages` in sends of at most [`quotas::QUEUE_BATCH_MESSAGES`] messages and
/// [`quotas::QUEUE_BATCH_BYTES`] bytes, in their order. Every message of the producers is far
/// under a sendBatch's bytes (a job carries at most [`CARRIED_PAYLOAD_MAX`] of payload), so a
/// chunk always takes at least one.
fn chunks<T: Serialize>(messages: Vec<T>) -> Vec<Vec<T>> {
    let mut chunks: Vec<Vec<T>> = Vec::new();
    let mut bytes = 0;
    for message in messages {
        // Its JSON, as the queue stores it, and the queue's own metadata.
        let size = serde_json::to_vec(&message).map_or(quotas::QUEUE_MESSAGE_BYTES, |b| b.len())
            + quotas::QUEUE_MESSAGE_OVERHEAD;
        match chunks.last_mut() {
            Some(last) if last.len() < quotas::QUEUE_BATCH_MESSAGES && bytes + size <= quotas::QUEUE_BATCH_BYTES => {
                last.push(message);
                bytes += size;
            }
            _ => {
                chunks.push(vec![message]);
                bytes = size;
            }
        }
    }
    chunks
}

/// Enqueues the copy of each of the first `count` media items of an inbound message.
pub async fn copy_media(account: &AccountDb, message_id: &str, count: usize) -> Result<(), EdgeError> {
    let positions = 0..u32::try_from(count).unwrap_or(u32::MAX);
    enqueue_many(account.env(), positions.map(|position| Job::copy_media(account, message_id, position)).collect())
        .await
}

/// Enqueues attempts of these deliveries now, in as few calls as the queue's batch limits allow.
pub async fn deliver_many(account: &AccountDb, ids: Vec<String>) -> Result<(), EdgeError> {
    let database = account.binding();
    let batch: Vec<DeliveryJob> = ids
        .into_iter()
        .map(|delivery_id| DeliveryJob { delivery_id, wake: None, database: database.clone() })
        .collect();
    send_many(account.env(), bindings::DELIVERIES, batch, "enqueue deliveries").await
}

/// Enqueues attempts of these deliveries, whose rows an API request has just written: a send
/// that fails is logged and left to the sweeper, which enqueues every pending delivery once it is
/// overdue, so the request still answers with what it wrote (asking again would write it twice).
pub async fn deliver_written(account: &AccountDb, ids: Vec<String>) {
    let count = ids.len();
    if let Err(e) = deliver_many(account, ids).await {
        let line =
            serde_json::json!({"enqueue": "deliveries", "count": count, "left_to": "sweeper", "error": e.to_string()});
        worker::console_error!("{line}");
    }
}

/// Enqueues the next attempt of a delivery after `delay_secs`.
pub async fn deliver_later(account: &AccountDb, delivery_id: &str, delay_secs: u64) -> Result<(), EdgeError> {
    // Queues accept delays up to 12 hours; the schedule's longest is 10.
    let delay = u32::try_from(delay_secs.min(backoff::MAX_RETRY_AFTER_SECS)).unwrap_or(u32::MAX);
    let job = DeliveryJob { delivery_id: delivery_id.to_owned(), wake: None, database: account.binding() };
    send_one(account.env(), bindings::DELIVERIES, job, delay, "enqueue delivery").await
}

/// Enqueues a wake of an endpoint's line after `delay_secs` (the queue's longest delay at most:
/// a wake that comes early finds the circuit still open and leaves the line as it is; the
/// sweeper wakes every line each minute).
pub async fn wake_later(account: &AccountDb, endpoint_id: &str, delay_secs: u64) -> Result<(), EdgeError> {
    let delay = u32::try_from(delay_secs.min(MAX_DELAY_SECS as u64)).unwrap_or(0);
    let job =
        DeliveryJob { delivery_id: String::new(), wake: Some(endpoint_id.to_owned()), database: account.binding() };
    send_one(account.env(), bindings::DELIVERIES, job, delay, "enqueue wake").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_are_chunked_by_count_and_by_bytes() {
        let ids = |n: usize| (0..n).map(|i| format!("dlv_{i:032x}")).collect::<Vec<_>>();
        let sizes = |chunks: &[Vec<String>]| chunks.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(&chunks(ids(250))), vec![100, 100, 50]);
        assert_eq!(sizes(&chunks(ids(100))), vec![100]);
        assert_eq!(sizes(&chunks(ids(101))), vec![100, 1]);
        assert!(chunks(Vec::<String>::new()).is_empty());
        // Ten messages of 60 KiB: four fit in a sendBatch's 256 KB.
        let large: Vec<String> = (0..10).map(|_| "x".repeat(60 * 1024)).collect();
        let chunked = chunks(large);
        assert_eq!(sizes(&chunked), vec![4, 4, 2]);
        for chunk in &chunked {
            let bytes: usize =
                chunk.iter().map(|m| serde_json::to_vec(m).unwrap().len() + quotas::QUEUE_MESSAGE_OVERHEAD).sum();
            assert!(bytes <= quotas::QUEUE_BATCH_BYTES, "{bytes}");
        }
        // The order is kept.
        assert_eq!(chunks(ids(150)).concat(), ids(150));
    }

    #[test]
    fn a_carried_event_goes_with_its_job_and_an_older_job_reads_without_one() {
        let carried = Carried {
            carrier: exactly_core::Provider::Telnyx,
            carrier_event_id: "evt-1".into(),
            event_type: "message.received".into(),
            payload: r#"{"data":{"id":"evt-1"}}"#.into(),
            created_at: 1_700_000_000_000,
        };
        let job = Job::CarrierEvent {
            id: "cev_1".into(),
            lane: Some("msg:1".into()),
            number: Some("+15550001111".into()),
            event: Some(Box::new(carried)),
        };
        let json = serde_json::to_value(&job).unwrap();
        assert_eq!(json["event"]["carrier"], "telnyx");
        assert_eq!(json["event"]["payload"], r#"{"data":{"id":"evt-1"}}"#);
        let Ok(Job::CarrierEvent { event: Some(back), .. }) = serde_json::from_value::<Job>(json) else {
            panic!("the job reads back with its event");
        };
        assert_eq!((back.carrier_event_id.as_str(), back.created_at), ("evt-1", 1_700_000_000_000));
        // Its Debug leaves the payload out.
        assert!(!format!("{job:?}").contains("data"), "{job:?}");

        let older = serde_json::json!({"type": "carrier_event", "id": "cev_2", "number": "+15550001111"});
        let Ok(Job::CarrierEvent { event: None, number: Some(_), .. }) = serde_json::from_value::<Job>(older) else {
            panic!("a job without an event reads");
        };
        let sweep = serde_json::to_value(Job::carrier_event("cev_3")).unwrap();
        assert!(sweep.get("event").is_none(), "{sweep}");
    }
}
