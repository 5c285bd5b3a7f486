//! An attempt's record: what the endpoint answered, written with its consequences (the
//! delivery settled or its next attempt scheduled, the endpoint's failure streak, the signals),
//! or, for an attempt the invocation's time cut short, written as cut.

use std::cell::Cell;

use exactly_core::backoff;
use exactly_core::breaker;
use exactly_core::Timestamp;

use super::gate::lease_from;
use super::http::{Answer, Reply};
use crate::config::Config;
use crate::error::EdgeError;
use crate::platform::{now, random_u32};
use crate::queues;
use crate::store::deliveries::{self, Attempt, Due, Subject, Taken};
use crate::store::AccountDb;
use crate::work::outcome::Done;

/// Consecutive failed attempts that disable an endpoint.
const DISABLE_AFTER_FAILURES: i64 = 100;

/// Records attempt `number` (when it started, its latency, its error) of `due` as cut short: sent with
/// less than the attempt timeout left in its invocation, it got no answer before that time ran
/// out. That says nothing about the endpoint, which may answer within its timeout: no attempt is
/// spent, neither its failure streak nor its circuit counts it (a probe's token is given back),
/// and the delivery goes back into its line, to be sent again under its webhook-id by the wake
/// its chain sends on ending.
pub(super) async fn cut(
    account: &AccountDb,
    due: &Due,
    (number, started, latency_ms, error): (i64, Timestamp, i64, String),
    admission: breaker::Admission,
    reply: Reply,
) -> Result<Done, EdgeError> {
    let attempt = Attempt {
        delivery_id: due.id.clone(),
        number,
        at: started,
        status: None,
        latency_ms,
        error: Some(error),
        next_attempt_at: None,
        response_body: reply.body,
        response_headers: reply.headers,
        request_signature: reply.signature,
    };
    let probe = match admission {
        breaker::Admission::Probe(lease) => Some((due.endpoint_id.as_str(), lease)),
        breaker::Admission::Send | breaker::Admission::Hold(_) => None,
    };
    // The chain it ended carries the line on: too little time is left for another attempt, so a
    // wake does, from an invocation of its own.
    deliveries::record_cut(account.db(), &attempt, probe).await?;
    Ok(Done::CutShort)
}

/// Records an attempt (`number`, when it started, its latency) and its answer. A success with
/// `take_next` also takes the endpoint's next delivery in line, into its cell, claiming its
/// attempt in the same batch when its flag says the circuit stays as it is.
pub(super) async fn record(
    account: &AccountDb,
    due: &Due,
    (number, started, latency_ms): (i64, Timestamp, i64),
    answer: Answer,
    reply: Reply,
    take_next: Option<(&Cell<Option<Option<Taken>>>, bool)>,
) -> Result<Done, EdgeError> {
    let db = account.db();
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
        request_signature: reply.signature.clone(),
    };
    let subject = Subject {
        endpoint_id: &due.endpoint_id,
        account_id: &due.account_id,
        url: due.url.as_deref().unwrap_or_default(),
        event_id: &due.event_id,
    };
    match answer {
        Answer::Success(status) => {
            let attempt = attempt(Some(status), None, None);
            let take_at = take_next.map(|(_, claim)| {
                let at = now();
                (at, claim.then(|| lease_from(at)))
            });
            let taken = deliveries::record_success(db, &attempt, &due.endpoint_id, take_at).await?;
            if let Some((cell, _)) = take_next {
                cell.set(taken);
            }
            Ok(Done::Delivered)
        }
        Answer::Gone => {
            let signals =
                deliveries::record_gone(db, &attempt(Some(410), Some("410 Gone".into()), None), &subject).await?;
            queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &signals).await?).await?;
            Ok(Done::EndpointGone)
        }
        Answer::Failure { status, error, retry_after, .. } => {
            // The attempts it spent: those cut short spent none.
            let spent = number - due.cut;
            let next = delay_before(account.config(), spent + 1).map(|d| backoff::with_retry_after(d, retry_after));
            let next_at = next.map(|d| Timestamp::from_unix_millis(started.unix_millis() + (d as i64) * 1000));
            let final_error = format!("gave up after {spent} attempts: {error}");
            let signals = deliveries::record_failure(
                db,
                &attempt(status, Some(error), next_at),
                &subject,
                &final_error,
                DISABLE_AFTER_FAILURES,
            )
            .await?;
            // The retry first: a signal whose enqueue fails is found by the sweeper, and so is a
            // retry whose enqueue fails, once it is overdue.
            let done = match next {
                Some(delay) => {
                    if let Err(e) = queues::deliver_later(account, &due.id, delay).await {
                        worker::console_error!("{}", serde_json::json!({"delivery": due.id, "error": e.to_string()}));
                    }
                    Done::RetryScheduled
                }
                None => Done::DeliveryGaveUp,
            };
            queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &signals).await?).await?;
            Ok(done)
        }
    }
}

/// The delay before attempt `next` (1-based), or `None` after the last.
fn delay_before(config: &Config, next: i64) -> Option<u64> {
    let next = u32::try_from(next).ok()?;
    if let Some(schedule) = &config.tuning.webhook_schedule {
        return schedule.get(usize::try_from(next).ok()?.checked_sub(1)?).copied();
    }
    backoff::webhook_delay(next, random_u32())
}
