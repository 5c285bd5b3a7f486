//! Fault injection for the end-to-end tests.
//!
//! Compiled in only with the `fault-injection` feature, which the test build of the worker
//! enables and the production build (`scripts/build-worker.sh`) never does: no configuration can
//! turn a fault on in a deployed worker. A fault fires for carrier events whose provider event
//! id contains its marker, so one test can arm it without touching any other.

/// The processor commits an event's effects and then fails before the queue message is acked,
/// as if the isolate died: the queue runs the job again.
pub fn crash_after_commit(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-crash-after-commit")
}

/// The processor commits an event's effects and then fails, once per isolate: where the mark is
/// a commit of its own (docs/scaling.md point 4), before it, and the rerun must change nothing
/// but the mark; where it commits with the effects, before their announcement, and the rerun
/// must change nothing at all.
pub fn crash_before_mark(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-crash-before-mark") && first_time("before-mark", carrier_event_id)
}

/// A job that carried its inbound message's event fails before it writes anything, for as long
/// as the stored event still holds the payload it carried: it runs again every few seconds until
/// an erasure clears or redacts it, and then goes on with what it carried.
pub fn hold_until_erased(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-hold-until-erased")
}

/// The dispatcher writes the route of a send's carrier id and then fails before the send is
/// recorded (two commits in two databases when the account is outside `DB`, docs/scaling.md),
/// once per message whose text has the marker: the job runs again, and a receipt that came
/// between the two waits beside the message.
pub fn crash_after_route(text: &str, message_id: &str) -> bool {
    armed(text, "fault-crash-after-route") && first_time("after-route", message_id)
}

/// The circuit breaker of the endpoint at `url`: `policy`, except that in the test build a URL
/// with the marker `no-breaker` never opens its circuit (tests of the retry schedule, exhaustion
/// and disabling, which the breaker would otherwise stretch over minutes).
#[cfg(feature = "fault-injection")]
pub fn breaker_for(url: &str, mut policy: exactly_core::breaker::Policy) -> exactly_core::breaker::Policy {
    if armed(url, "no-breaker") {
        policy.min_attempts = u32::MAX;
    }
    policy
}

/// Production builds use `policy` for every endpoint.
#[cfg(not(feature = "fault-injection"))]
pub fn breaker_for(_url: &str, policy: exactly_core::breaker::Policy) -> exactly_core::breaker::Policy {
    policy
}

/// Another move of the same shards, to the binding `E2E_RIVAL_MOVE_TO`, whose claim lands
/// between a move call's checks and its own claim, as a concurrent call's can.
#[cfg(feature = "fault-injection")]
pub fn rival_move(env: &worker::Env) -> Option<String> {
    crate::config::optional(env, "E2E_RIVAL_MOVE_TO")
}

/// Production builds never inject a rival move.
#[cfg(not(feature = "fault-injection"))]
pub fn rival_move(_env: &worker::Env) -> Option<String> {
    None
}

/// Storing a carrier event fails (the D1 write does not happen) the first time an event id
/// with the marker arrives: the carrier sees 503 and retries.
pub fn d1_write_fails_once(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-d1-write") && first_time("d1-write", carrier_event_id)
}

/// The queue send after a new event's insert fails the first time: the carrier sees 503, the
/// row stays unprocessed until a retry re-enqueues it or the sweeper finds it.
pub fn queue_send_fails_once(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-queue-send") && first_time("queue-send", carrier_event_id)
}

/// The first write of a call's leg row fails when the leg's target has the marker, right after
/// the carrier placed the dial: the call's Durable Object must retry the write, not lose it.
pub fn d1_write_after_dial_fails(target: &str, call_id: &str) -> bool {
    armed(target, "fault-d1-after-dial") && first_time("d1-leg", call_id)
}

/// The first queue message of a delivery to an endpoint whose URL has the marker is lost.
pub fn delivery_message_lost(endpoint_url: &str) -> bool {
    armed(endpoint_url, "fault-lose-delivery")
}

/// The dedupe database is out for a receipt marked `fault-dedupe-outage` from the moment its
/// message is found (a woken receipt's job) until the jobs dead-letter consumer has spent its
/// `attempts` on it too: every job run and every dead-letter write fails meanwhile, so the
/// queue gives the job up for good, and only what the sweeper does can still apply it.
pub fn dedupe_outage(carrier_event_id: &str, attempts: u32) -> bool {
    armed(carrier_event_id, "fault-dedupe-outage") && dead_letters_failed(carrier_event_id, false) < attempts
}

/// Every dead-letter write of a receipt marked `fault-dedupe-outage` fails; the first
/// `attempts` of them (one job's dead letter, given up for good) end the outage of its jobs.
/// Whatever job of it the queue gives up on later is never recorded as failed either, so only
/// the sweeper can still apply it.
pub fn dead_letter_outage(carrier_event_id: &str) -> bool {
    armed(carrier_event_id, "fault-dedupe-outage") && {
        dead_letters_failed(carrier_event_id, true);
        true
    }
}

/// How many dead-letter writes of `key` failed so far in this isolate; `count` counts one more
/// first.
#[cfg(feature = "fault-injection")]
fn dead_letters_failed(key: &str, count: bool) -> u32 {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static FAILED: RefCell<HashMap<String, u32>> = RefCell::new(HashMap::new());
    }
    FAILED.with(|failed| {
        let mut failed = failed.borrow_mut();
        let n = failed.entry(key.to_owned()).or_insert(0);
        *n += u32::from(count);
        *n
    })
}

#[cfg(not(feature = "fault-injection"))]
fn dead_letters_failed(_key: &str, _count: bool) -> u32 {
    0
}

/// Whether this build injects faults at all: a fault that needs a read to decide is checked
/// only where it can fire.
pub const ENABLED: bool = cfg!(feature = "fault-injection");

#[cfg(feature = "fault-injection")]
fn armed(key: &str, marker: &str) -> bool {
    key.contains(marker)
}

/// True the first time this isolate sees (`fault`, `key`).
#[cfg(feature = "fault-injection")]
fn first_time(fault: &str, key: &str) -> bool {
    use std::cell::RefCell;
    use std::collections::HashSet;
    thread_local! {
        static SEEN: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    }
    SEEN.with(|seen| seen.borrow_mut().insert(format!("{fault}:{key}")))
}

#[cfg(not(feature = "fault-injection"))]
fn first_time(_fault: &str, _key: &str) -> bool {
    false
}

#[cfg(not(feature = "fault-injection"))]
fn armed(_key: &str, _marker: &str) -> bool {
    false
}
