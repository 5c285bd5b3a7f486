//! How a queue job ended, and the one place that acknowledges or retries its message by that
//! ([`settle`]), with the job's log line.

use crate::config::Config;
use crate::error::EdgeError;

/// How a queue job ended, when it did not fail: the one place that decides ack or retry is
/// [`settle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Finished (applied, a no-op, or visibly failed): acknowledge.
    Done(Done),
    /// Not possible yet: run again after this many seconds.
    RetryIn(u32, Wait),
}

impl Outcome {
    /// Done: `Applied` when the guarded change happened, else `NoOp`.
    pub fn applied(changed: bool) -> Self {
        Outcome::Done(Done::applied(changed))
    }
}

/// A finished job, as its log line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Its guarded change happened.
    Applied,
    /// Nothing changed: a duplicate or a late event.
    NoOp,
    /// Recorded as a visible failure.
    Failed,
    /// A receipt waits for its message's send result: in `DB` (`in_db`), where a receipt with no
    /// route to its account's database waits, or beside the message in its account's database.
    Parked {
        /// Whether it waits in `DB`; its log line says so (`waits_in`).
        in_db: bool,
    },
    /// The call's Durable Object took the event; it finishes the actions on its alarm.
    Accepted,
    /// The row the job names no longer exists.
    NoSuchEvent,
    /// The event's payload was erased before it was processed: nothing was written.
    Erased,
    /// The message the job names does not exist.
    NoSuchMessage,
    /// The message was handed to the carrier before.
    AlreadyDispatched,
    /// The carrier took the message.
    Sent,
    /// The carrier refused the message.
    RefusedByCarrier,
    /// The send's outcome stayed unknown past the key's horizon: the message failed.
    GaveUp,
    /// A customer webhook was delivered.
    Delivered,
    /// The endpoint answered 410 and was disabled.
    EndpointGone,
    /// The attempt failed; the next one is scheduled.
    RetryScheduled,
    /// The last attempt failed; the delivery failed.
    DeliveryGaveUp,
    /// The delivery does not exist.
    NoSuchDelivery,
    /// The delivery succeeded or failed before.
    AlreadySettled,
    /// The endpoint is disabled or deleted: the delivery failed.
    EndpointDisabled,
    /// An early or duplicate job (a delivery attempt, a scheduled send): the due one will come.
    NotDue,
    /// The endpoint is paused or disabled: the delivery waits, untouched.
    Held,
    /// Another job holds the attempt.
    ClaimedElsewhere,
    /// The attempt got no answer before its invocation's time ran out, with less than the
    /// attempt timeout left when it was sent: recorded as cut, no attempt spent, and the delivery
    /// is back in its endpoint's line.
    CutShort,
    /// The endpoint's filter held the delivery back: nothing was sent.
    Filtered,
    /// The endpoint has its most attempts in flight: the delivery waits in its line.
    WaitingForEndpoint,
    /// The endpoint's circuit is open (or its probe is in flight): the delivery waits in its line.
    WaitingForCircuit,
    /// The endpoint is ordered and an earlier event of the delivery's resource is not yet
    /// delivered to it: the delivery waits for that one.
    WaitingForPrevious,
    /// An endpoint's line was woken.
    Woke,
    /// A media item was copied into the bucket.
    Copied,
    /// The media item the job names does not exist.
    NoSuchMedia,
}

impl Done {
    /// Whether it records a failure (of the event, the send, an attempt or the delivery): its
    /// line is written whatever `LOG_JOB_OUTCOMES` says.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Done::Failed
                | Done::RefusedByCarrier
                | Done::GaveUp
                | Done::EndpointGone
                | Done::RetryScheduled
                | Done::DeliveryGaveUp
                | Done::EndpointDisabled
        )
    }

    /// The name in the log line's `outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Done::Applied => "applied",
            Done::NoOp => "no-op",
            Done::Failed => "failed",
            Done::Parked { .. } => "parked",
            Done::Accepted => "accepted",
            Done::NoSuchEvent => "no such event",
            Done::Erased => "erased",
            Done::NoSuchMessage => "no such message",
            Done::AlreadyDispatched => "already dispatched",
            Done::Sent => "sent",
            Done::RefusedByCarrier => "refused by carrier",
            Done::GaveUp => "gave up",
            Done::Delivered => "delivered",
            Done::EndpointGone => "gone: endpoint disabled",
            Done::RetryScheduled => "failed: retry scheduled",
            Done::DeliveryGaveUp => "failed: gave up",
            Done::NoSuchDelivery => "no such delivery",
            Done::AlreadySettled => "already settled",
            Done::EndpointDisabled => "endpoint disabled",
            Done::WaitingForEndpoint => "waiting: endpoint busy",
            Done::WaitingForCircuit => "waiting: circuit open",
            Done::WaitingForPrevious => "waiting: previous event of its resource",
            Done::Woke => "woke",
            Done::NotDue => "not due",
            Done::Held => "held: endpoint paused or disabled",
            Done::ClaimedElsewhere => "claimed by another job",
            Done::CutShort => "cut short: retried, no attempt spent",
            Done::Filtered => "filtered out",
            Done::Copied => "copied",
            Done::NoSuchMedia => "no such media",
        }
    }

    /// `Applied` when the guarded change happened, else `NoOp`.
    pub fn applied(changed: bool) -> Self {
        if changed {
            Done::Applied
        } else {
            Done::NoOp
        }
    }
}

/// Why a job runs again later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Another dispatcher holds the message's claim.
    ClaimedByAnotherDispatcher,
    /// The carrier did not answer the send; retried with the same idempotency key.
    CarrierUnavailable,
    /// The receipt's message appeared while the receipt was being parked: decide again.
    MessageAppeared,
    /// The carrier's media link did not answer, or answered that it may later.
    MediaUnavailable,
    /// The endpoint's circuit changed while the delivery went into its line: look again.
    CircuitChanging,
}

impl Wait {
    /// The reason in the log line.
    pub fn as_str(self) -> &'static str {
        match self {
            Wait::ClaimedByAnotherDispatcher => "claimed by another dispatcher",
            Wait::CarrierUnavailable => "carrier unavailable",
            Wait::MessageAppeared => "the message appeared while parking",
            Wait::MediaUnavailable => "media link unavailable",
            Wait::CircuitChanging => "the endpoint's circuit was changing",
        }
    }
}

/// Seconds before a job that hit a platform error runs again.
pub const ERROR_RETRY_SECS: u32 = 5;

/// Acknowledges or retries one queue message by how its job ended, and logs one line (for a job
/// that ended as planned, only with `LOG_JOB_OUTCOMES` on and when `key`, the job's id, is
/// sampled: Config::samples); `tag` adds the job's own fields (kind, id) to the line.
pub fn settle<T>(
    config: &Config,
    message: &worker::Message<T>,
    result: Result<Outcome, EdgeError>,
    key: &str,
    tag: impl FnOnce(&mut serde_json::Value),
) {
    use worker::{MessageExt as _, QueueRetryOptionsBuilder};
    if matches!(result, Ok(Outcome::Done(done)) if !done.is_failure()) && !config.logs_routine(key) {
        message.ack();
        return;
    }
    let retry =
        |secs: u32| message.retry_with_options(&QueueRetryOptionsBuilder::new().with_delay_seconds(secs).build());
    let mut line = serde_json::json!({});
    tag(&mut line);
    match result {
        Ok(Outcome::Done(done)) => {
            line["outcome"] = serde_json::json!(done.as_str());
            if let Done::Parked { in_db } = done {
                line["waits_in"] = serde_json::json!(if in_db { "DB" } else { "account database" });
            }
            worker::console_log!("{line}");
            message.ack();
        }
        Ok(Outcome::RetryIn(secs, why)) => {
            line["outcome"] = serde_json::json!("retried");
            line["reason"] = serde_json::json!(why.as_str());
            line["delay_s"] = serde_json::json!(secs);
            worker::console_log!("{line}");
            retry(secs);
        }
        Err(e) => {
            line["outcome"] = serde_json::json!("retried");
            line["error"] = serde_json::json!(e.to_string());
            worker::console_error!("{line}");
            retry(ERROR_RETRY_SECS);
        }
    }
}

/// The configuration a queue batch runs with, read once for the batch; `None` after retrying
/// every message of the batch when it is invalid (no job can run meanwhile, and every request
/// answers 503 naming the variable).
pub fn configured(batch: &worker::MessageBatch<serde_json::Value>, env: &worker::Env) -> Option<std::rc::Rc<Config>> {
    match crate::config::get(env) {
        Ok(config) => Some(config),
        Err(e) => {
            worker::console_error!("{}", serde_json::json!({"batch": "retried", "error": e.to_string()}));
            batch.retry_all();
            None
        }
    }
}
