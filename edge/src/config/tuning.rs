//! The product's timings and policies (docs/contract.md §6 for the customer webhooks): how long
//! an attempt and a media fetch may take, the retry schedule, the circuit breaker, how long
//! attempts may run beside an invocation, and the waits of the sweeper, the call objects and
//! erasures. Each has its production value here; only the test build can shorten one, through
//! its `E2E_*` variable, so that the end-to-end tests run in seconds what takes minutes in
//! production. A deployed worker ignores those variables.

use std::time::Duration;

use exactly_core::breaker;

use super::Vars;

/// Success is any 2xx within this long.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the fetch of a carrier's media link may take, body included.
const MEDIA_FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after the attempts beside an invocation start the last of them may still be
/// sending: the runtime ends what runs beside an invocation (`wait_until`) 30 s after the
/// invocation, and an attempt's record needs a few round trips after its answer.
const BESIDE_MILLIS: i64 = 25_000;
/// How long after its wake a woken receipt is looked at again: the sweeper's two minutes.
const WOKEN_RECHECK: Duration = Duration::from_secs(120);
/// How long a settled call's object keeps its storage: as long as the dedupe log keeps its
/// events at the least, so a late copy of one of its events can never start a second call in
/// an empty object.
const CALL_GRACE_MILLIS: i64 = super::MIN_EVENT_RETENTION_DAYS * 86_400_000;
/// How long after pass 1 an erasure's tail pass begins.
const ERASURE_TAIL_SECS: i64 = 60;

/// The timings and policies one worker runs by.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// The delays before attempts 1, 2, ... of a customer webhook; `None`: the randomized
    /// schedule of docs/contract.md §6 ([`exactly_core::backoff::webhook_delay`]).
    pub webhook_schedule: Option<Vec<u64>>,
    /// How long an attempt waits for the endpoint's answer.
    pub attempt_timeout: Duration,
    /// How long the fetch of a carrier's media link may take.
    pub media_fetch_timeout: Duration,
    /// The circuit breaker of every endpoint.
    pub breaker: breaker::Policy,
    /// How long the attempts beside an invocation may run from their start, in milliseconds.
    pub beside_millis: i64,
    /// How long after its wake a woken receipt is looked at again.
    pub woken_recheck: Duration,
    /// How long a settled call's object keeps its storage, in milliseconds.
    pub call_grace_millis: i64,
    /// How long after pass 1 an erasure's tail pass begins, in seconds.
    pub erasure_tail_secs: i64,
}

impl Tuning {
    /// Production's values.
    pub fn production() -> Self {
        Tuning {
            webhook_schedule: None,
            attempt_timeout: ATTEMPT_TIMEOUT,
            media_fetch_timeout: MEDIA_FETCH_TIMEOUT,
            breaker: breaker::DEFAULT_POLICY,
            beside_millis: BESIDE_MILLIS,
            woken_recheck: WOKEN_RECHECK,
            call_grace_millis: CALL_GRACE_MILLIS,
            erasure_tail_secs: ERASURE_TAIL_SECS,
        }
    }

    /// Production's values, each shortened by its `E2E_*` variable where that is set (whole
    /// seconds; the schedule comma-separated): `E2E_WEBHOOK_SCHEDULE_SECS`,
    /// `E2E_ATTEMPT_TIMEOUT_SECS`, `E2E_MEDIA_FETCH_TIMEOUT_SECS`, `E2E_BREAKER_OPEN_SECS` (open
    /// that long, four times that at most), `E2E_BESIDE_SECS`, `E2E_WOKEN_RECHECK_SECS`,
    /// `E2E_CALL_GRACE_SECS` and `E2E_ERASURE_TAIL_SECS` (1 s when unset).
    #[cfg(feature = "fault-injection")]
    pub fn load(env: &impl Vars) -> Self {
        let mut tuning = Self::production();
        let text = |name: &str| super::value(env, name);
        let secs = |name: &str| -> Option<i64> { text(name)?.parse::<i64>().ok().filter(|s| *s > 0) };
        let duration = |name: &str| secs(name).map(|s| Duration::from_secs(s.unsigned_abs()));
        tuning.webhook_schedule = text("E2E_WEBHOOK_SCHEDULE_SECS")
            .and_then(|t| t.split(',').map(|d| d.trim().parse().ok()).collect::<Option<Vec<u64>>>());
        tuning.attempt_timeout = duration("E2E_ATTEMPT_TIMEOUT_SECS").unwrap_or(tuning.attempt_timeout);
        tuning.media_fetch_timeout = duration("E2E_MEDIA_FETCH_TIMEOUT_SECS").unwrap_or(tuning.media_fetch_timeout);
        if let Some(open) = secs("E2E_BREAKER_OPEN_SECS") {
            tuning.breaker.open_millis = open * 1000;
            tuning.breaker.max_open_millis = 4 * tuning.breaker.open_millis;
        }
        tuning.beside_millis = secs("E2E_BESIDE_SECS").map_or(tuning.beside_millis, |s| s * 1000);
        tuning.woken_recheck = duration("E2E_WOKEN_RECHECK_SECS").unwrap_or(tuning.woken_recheck);
        tuning.call_grace_millis = secs("E2E_CALL_GRACE_SECS").map_or(tuning.call_grace_millis, |s| s * 1000);
        tuning.erasure_tail_secs = secs("E2E_ERASURE_TAIL_SECS").unwrap_or(1);
        tuning
    }

    /// A deployed worker runs production's values, whatever its variables say.
    #[cfg(not(feature = "fault-injection"))]
    pub fn load(_env: &impl Vars) -> Self {
        Self::production()
    }
}
