//! The `jobs` queue: one message per carrier event to process, message to dispatch, media item
//! to copy, recovery page, erasure page, or part of the cron's tick.
//!
//! Every message is acknowledged only after its effects committed, and any message may run
//! twice: the guards make the second run a no-op. A message that fails on every retry goes to
//! the dead-letter queue, whose consumer records the failure visibly.

use std::rc::Rc;

use async_lock::Semaphore;
use futures_util::future::join_all;
use worker::{Context, Env, Message, MessageBatch, MessageExt};

use crate::bindings;
use crate::config::Config;
use crate::error::EdgeError;
use crate::queues::{enqueue_later, Job, Part};
use crate::store::{carrier_events, AccountDb};
use crate::work::outcome::Outcome;
use crate::work::{cron, deliver, dispatch, erase, media, process, recover};

/// Consumes a batch from the `jobs` queue, acknowledging or retrying each message itself.
///
/// The batch's jobs run in lanes ([`Job::lane`]): the jobs of one lane (the receipts of one
/// message, every call event) one after another in the batch's order, the lanes side by side, so
/// a fact waits for the facts about its own resource only, not for the whole batch. At most
/// [`CALLING_OUT_AT_ONCE`] of them call out at a time. A batch none of whose jobs calls out
/// sends the first attempts its inbound messages' batches claimed beside it once its jobs have
/// ended ([`deliver::Beside`]), so they share no connection with a job.
pub async fn consume(batch: MessageBatch<serde_json::Value>, env: &Env, ctx: &Context) -> worker::Result<()> {
    // Read once for the batch and handed to every job; while it is invalid no job can run.
    let Some(config) = crate::work::outcome::configured(&batch, env) else { return Ok(()) };
    let config = &config;
    let calling_out = Semaphore::new(CALLING_OUT_AT_ONCE);
    let mut lanes: Vec<(String, Lane)> = Vec::new();
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
        let lane = job.lane();
        match lanes.iter_mut().find(|(name, _)| *name == lane) {
            Some((_, jobs)) => jobs.push((message, job)),
            None => lanes.push((lane, vec![(message, job)])),
        }
    }
    let calling_out = &calling_out;
    let calls_out = lanes.iter().flat_map(|(_, jobs)| jobs).any(|(_, job)| {
        matches!(job, Job::Dispatch { .. } | Job::CopyMedia { .. } | Job::Tick { part: Part::Sweep, .. })
    });
    let beside = (!calls_out).then(|| deliver::Beside::new(ctx));
    let beside = beside.as_ref();
    join_all(lanes.iter().map(|(_, jobs)| async move {
        for (message, job) in jobs {
            // A job that calls out waits for its turn here, before its deadline starts.
            let _turn = match job {
                Job::Dispatch { .. } | Job::CopyMedia { .. } | Job::Tick { part: Part::Sweep, .. } => {
                    Some(calling_out.acquire().await)
                }
                Job::CarrierEvent { .. } | Job::Tick { .. } | Job::Recover { .. } | Job::Erase { .. } => None,
            };
            one(env, config, message, job, beside).await;
        }
    }))
    .await;
    if let Some(beside) = beside {
        beside.go();
    }
    Ok(())
}

/// Jobs of one invocation that call out at once (a send to a carrier; a media fetch and its
/// copy into the bucket, two connections). The runtime keeps at most six connections open per
/// invocation and holds a further call while its deadline already runs: behind sends whose
/// carrier does not answer, the held calls went out just as their deadlines ended, their
/// answers were dropped, and they were made again (seen in the chaos run: five sends and two
/// media fetches timed out together after 10.1 to 10.3 s, each asked of the carrier twice).
/// Carrier events reach only D1 and the call's Durable Object, with no deadline of their own.
const CALLING_OUT_AT_ONCE: usize = 3;

/// How long after its last retry a dead-lettered recovery or erasure page runs again.
const PAGE_AGAIN_SECS: u32 = 300;

/// One lane's jobs, in the batch's order, each with its message.
type Lane = Vec<(Message<serde_json::Value>, Job)>;

/// Runs one job and settles its message.
async fn one(
    env: &Env,
    config: &Rc<Config>,
    message: &Message<serde_json::Value>,
    job: &Job,
    beside: Option<&deliver::Beside<'_>>,
) {
    let started = crate::platform::now();
    let (outcome, event_read) = run(env, config, job, beside).await;
    let latency_ms = crate::platform::now().unix_millis() - started.unix_millis();
    let (kind, id) = match job {
        Job::CarrierEvent { id, .. } => ("carrier_event", id.clone()),
        Job::Dispatch { message_id, .. } => ("dispatch", message_id.clone()),
        Job::CopyMedia { message_id, position, .. } => ("copy_media", format!("{message_id}/{position}")),
        Job::Tick { part, database, .. } => ("tick", format!("{database}/{}", part.as_str())),
        Job::Recover { id, .. } => ("recover", id.clone()),
        Job::Erase { id, .. } => ("erase", id.clone()),
    };
    crate::work::outcome::settle(config, message, outcome, &id, |line| {
        line["job"] = serde_json::json!(kind);
        line["id"] = serde_json::json!(id);
        line["latency_ms"] = serde_json::json!(latency_ms);
        if let Some(read) = event_read {
            line["event_read"] = serde_json::json!(read);
        }
    });
}

/// Runs a job; for a carrier event, also whether its row was read (`false`: processed from what
/// its job carried, work::process).
async fn run(
    env: &Env,
    config: &Rc<Config>,
    job: &Job,
    beside: Option<&deliver::Beside<'_>>,
) -> (Result<Outcome, EdgeError>, Option<bool>) {
    // A part of the cron's tick names its own database, of either kind.
    if let Job::Tick { part, database, round, trigger } = job {
        let place = cron::Place { database, round: *round, trigger };
        return (cron::run(env, config, *part, place).await, None);
    }
    // An erasure's record is in `DB`; its pages visit every database they name.
    if let Job::Erase { id, number } = job {
        return (erase::next_page(env, config, id, &number.0).await, None);
    }
    // The account database the job names.
    let account = match AccountDb::named(env, config, job.database()) {
        Ok(account) => account,
        Err(e) => return (Err(e), None),
    };
    let account = &account;
    match job {
        Job::CarrierEvent { id, number, event, .. } => {
            match process::process(account, id, number.as_deref(), event.as_deref(), beside).await {
                Ok((outcome, read)) => (Ok(outcome), Some(read)),
                Err(e) => (Err(e), None),
            }
        }
        Job::Dispatch { message_id, .. } => (dispatch::dispatch(account, message_id).await, None),
        Job::CopyMedia { message_id, position, .. } => (media::copy(account, message_id, *position).await, None),
        Job::Recover { id, .. } => (recover::next_page(account, id).await, None),
        Job::Tick { .. } | Job::Erase { .. } => (Ok(Outcome::applied(false)), None),
    }
}

/// A dispatch that failed on every retry fails the message only when that cannot hide a send
/// ([`crate::store::messages::fail_undispatched`]); otherwise it is tried again later, with the same
/// idempotency key.
async fn dead_dispatch(account: &AccountDb, message_id: &str) -> Result<(), EdgeError> {
    let (env, db) = (account.env(), account.db());
    let now = crate::platform::now();
    let horizon = exactly_core::Timestamp::from_unix_millis(now.unix_millis() - dispatch::SEND_HORIZON_MILLIS);
    let change = crate::store::messages::fail_undispatched(db, message_id, now, horizon).await?;
    if change.changed {
        return crate::queues::deliver_many(account, change.to_enqueue(db).await?).await;
    }
    let undispatched = crate::store::messages::by_id(db, message_id).await?.is_some_and(|m| m.undispatched());
    if undispatched {
        enqueue_later(env, Job::dispatch(account, message_id), 60).await?;
    }
    Ok(())
}

/// Consumes the jobs dead-letter queue: the failure is recorded where operators look.
///
/// A write that fails is retried ([`bindings::queues::JOBS_DEAD_LETTER_ATTEMPTS`] in all) and
/// logged; after the last the message is gone, and what it would have recorded is the
/// sweeper's to find: a carrier event neither processed nor failed, a woken receipt, a message
/// still queued.
pub async fn consume_dead_letters(batch: MessageBatch<serde_json::Value>, env: &Env) -> worker::Result<()> {
    let Some(config) = crate::work::outcome::configured(&batch, env) else { return Ok(()) };
    for message in batch.messages()? {
        let Ok(job) = serde_json::from_value::<Job>(message.body().clone()) else {
            message.ack();
            continue;
        };
        match dead_letter(env, &config, &job).await {
            Ok(()) => message.ack(),
            Err(e) => {
                // The job as its Debug shows it: a carried event's payload is left out.
                worker::console_error!(
                    "{}",
                    serde_json::json!({"job": "dead_letter", "body": format!("{job:?}"), "outcome": "retried",
                        "error": e.to_string()})
                );
                message.retry();
            }
        }
    }
    Ok(())
}

async fn dead_letter(env: &Env, config: &Rc<Config>, job: &Job) -> Result<(), EdgeError> {
    let account = &AccountDb::named(env, config, job.database())?;
    match job {
        Job::CarrierEvent { id, .. } => {
            // The failure signal goes to the operator, whose account is in `DB`.
            let root = account.other(Some(bindings::DB))?;
            let problem = "processing failed on every retry (dead-lettered)";
            let log = carrier_events::Log::open(env, config);
            if crate::faults::ENABLED {
                let row = log.load(id).await?;
                if let Some(row) = row.filter(|r| crate::faults::dead_letter_outage(&r.carrier_event_id)) {
                    return Err(EdgeError::unavailable(
                        "injected fault",
                        format!("injected outage of the dedupe database at {}", row.id),
                    ));
                }
            }
            match log.mark_failed_id(root.db(), id, problem).await? {
                Some(failed) => {
                    crate::queues::deliver_many(
                        &root,
                        crate::store::outbox::to_enqueue_for(root.db(), &failed.signals).await?,
                    )
                    .await
                }
                None => Ok(()),
            }
        }
        Job::Dispatch { message_id, .. } => dead_dispatch(account, message_id).await,
        Job::CopyMedia { message_id, position, .. } => {
            let problem = "copying failed on every retry (dead-lettered)";
            let at = crate::platform::now();
            crate::store::media::record_failed(account.db(), message_id, *position, None, problem, at).await.map(|_| ())
        }
        // The next tick does the part again; its failures were logged by each try.
        Job::Tick { .. } => Ok(()),
        // A recovery's or an erasure's page that failed on every retry is tried again later from
        // where its row says: the row is the cursor, so nothing is done twice, and a recovery or
        // erasure never stays running with no job.
        Job::Recover { id, database } => {
            enqueue_later(env, Job::Recover { id: id.clone(), database: database.clone() }, PAGE_AGAIN_SECS).await
        }
        Job::Erase { id, number } => {
            enqueue_later(env, Job::Erase { id: id.clone(), number: number.clone() }, PAGE_AGAIN_SECS).await
        }
    }
}
