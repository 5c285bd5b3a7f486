//! The per-endpoint circuit breaker: when a customer endpoint keeps failing, stop sending to it,
//! probe it now and then, and start again once it answers.
//!
//! Sans-IO like [`crate::call_machine`]: the state is a plain value the edge stores on the
//! endpoint's row and replaces by compare-and-swap; [`admit`] and [`record`] take it with `now`
//! and return the next state. Nothing here sleeps, reads a clock or counts in memory.
//!
//! ```text
//!            failures reach the threshold               the probe time comes
//!   closed ------------------------------> open ---------------------------> half-open
//!     ^                                     ^                                  |  one probe at a time
//!     |         enough probes succeed       |        a probe fails             |
//!     +-------------------------------------+----------------------------------+
//! ```
//!
//! # The rules
//! - **Closed**: every attempt goes. A failure starts a window of [`Policy::window_millis`];
//!   within it every outcome is counted, a success as 1 point, a failure as 1 and a timeout or
//!   connection failure (the endpoint holds a sender's time) as 2. The circuit opens when the
//!   window has seen at least [`Policy::min_attempts`] attempts and failures make at least
//!   [`Policy::failure_percent`] of the points. A success while the window holds no failure
//!   changes nothing, so a healthy endpoint's state is never written. Only outcomes that say
//!   something of the endpoint are fed ([`counts`]): not a retry failing again.
//! - **Open**: nothing is attempted until the probe time ([`Policy::open_millis`] after
//!   opening, doubled each time a probe fails, at most [`Policy::max_open_millis`]), less up to
//!   a tenth drawn at random, so that endpoints that failed together, or one that fails on a
//!   fixed period, are not probed in step with it.
//! - **Half-open**: one attempt at a time is let through as a probe, leased for
//!   [`Policy::probe_lease_millis`] (a probe that never reports frees its turn then). A failed
//!   probe opens the circuit again; [`Policy::close_after`] probes that succeed in a row close
//!   it. An outcome of an attempt that was not the current probe (one sent before the circuit
//!   opened, or a probe whose lease ran out) changes nothing.
//! - **Clock jumps**: a stored time further ahead of `now` than the rules could have set (the
//!   clock moved back) counts as passed, so a circuit never stays open longer than
//!   [`Policy::max_open_millis`] of the clock that reads it.

/// The breaker's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long a window of counting lasts from its first failure.
    pub window_millis: i64,
    /// The fewest attempts in a window that can open the circuit.
    pub min_attempts: u32,
    /// The share of failure points, in percent, that opens it.
    pub failure_percent: u32,
    /// How long it stays open before the first probe.
    pub open_millis: i64,
    /// The longest it stays open before a probe, however often probes failed.
    pub max_open_millis: i64,
    /// How long a probe holds its turn.
    pub probe_lease_millis: i64,
    /// Probes that must succeed in a row to close it.
    pub close_after: u32,
}

/// The policy every endpoint gets (docs/contract.md §6, "One endpoint never slows another").
pub const DEFAULT_POLICY: Policy = Policy {
    window_millis: 60_000,
    min_attempts: 5,
    failure_percent: 50,
    open_millis: 30_000,
    max_open_millis: 600_000,
    probe_lease_millis: 60_000,
    close_after: 2,
};

/// How an attempt ended, as the breaker weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx.
    Success,
    /// An answer other than 2xx.
    Failure,
    /// No answer in time, or no connection: the endpoint held the sender's time.
    Timeout,
}

impl Outcome {
    fn points(self) -> u32 {
        match self {
            Outcome::Success | Outcome::Failure => 1,
            Outcome::Timeout => 2,
        }
    }
}

/// Whether an attempt's outcome is fed to [`record`]. A probe's always is (it settles the
/// circuit). Through a closed circuit, a success always is; a failure only when it says
/// something new of the endpoint: not when the attempt was cut short by the time its sender had
/// left (`cut_short`: the endpoint was not given its timeout), and not when the delivery had
/// failed before (`spent`, its attempts spent with this one, is past 1). So the circuit opens
/// when the endpoint fails its deliveries, not when one delivery it cannot take (one poison event
/// type beside healthy traffic) is retried on its schedule, which would hold every other webhook
/// behind a probe.
pub fn counts(admission: Admission, outcome: Outcome, cut_short: bool, spent: i64) -> bool {
    match admission {
        Admission::Send => outcome == Outcome::Success || (!cut_short && spent <= 1),
        Admission::Probe(_) | Admission::Hold(_) => true,
    }
}

/// A breaker's state, as the endpoint's row keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Attempts go. `since` is the start of the counting window (0: no window), with the
    /// attempts and points counted in it.
    Closed { since: i64, attempts: u32, failed: u32, succeeded: u32 },
    /// Nothing goes until `probe_at`. `opens` counts the times it opened (or re-opened) since it
    /// last closed, for the doubling.
    Open { probe_at: i64, opens: u32 },
    /// One probe at a time: `probe` is the lease end of the probe in flight (its token), if any;
    /// `succeeded` counts the probes that succeeded in a row.
    HalfOpen { probe: Option<i64>, succeeded: u32, opens: u32 },
}

/// A closed circuit with no window.
pub const CLOSED: State = State::Closed { since: 0, attempts: 0, failed: 0, succeeded: 0 };

/// Whether an attempt may go now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The circuit is closed: send.
    Send,
    /// Send as the probe; report the outcome with this token.
    Probe(i64),
    /// Wait: the circuit is open, or a probe is in flight; ask again at this time.
    Hold(i64),
}

/// A change a caller reports once (the operational signals `endpoint.circuit_opened` and
/// `endpoint.circuit_closed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Closed to open.
    Opened,
    /// Half-open to closed.
    Closed,
}

impl State {
    /// The state's name as the API shows it.
    pub fn name(&self) -> &'static str {
        match self {
            State::Closed { .. } => "closed",
            State::Open { .. } => "open",
            State::HalfOpen { .. } => "half_open",
        }
    }
}

/// Whether an attempt may go at `now`, and the state to store first if it goes as the probe
/// (the caller stores it by compare-and-swap; whoever loses waits).
pub fn admit(policy: &Policy, state: State, now: i64) -> (Admission, Option<State>) {
    match state {
        State::Closed { .. } => (Admission::Send, None),
        State::Open { probe_at, opens } => {
            if now < probe_at && probe_at - now <= policy.max_open_millis {
                (Admission::Hold(probe_at), None)
            } else {
                probe(policy, 0, opens, now)
            }
        }
        State::HalfOpen { probe: Some(lease), .. } if now < lease && lease - now <= policy.probe_lease_millis => {
            (Admission::Hold(lease), None)
        }
        State::HalfOpen { succeeded, opens, .. } => probe(policy, succeeded, opens, now),
    }
}

fn probe(policy: &Policy, succeeded: u32, opens: u32, now: i64) -> (Admission, Option<State>) {
    let lease = now.saturating_add(policy.probe_lease_millis);
    (Admission::Probe(lease), Some(State::HalfOpen { probe: Some(lease), succeeded, opens }))
}

/// The state after an attempt that was admitted as `admitted` ended with `outcome` at `now`,
/// and the transition to report, if any. `random` (any `u32`, drawn by the caller) spreads an
/// opening's probe time ([`open_for`]).
pub fn record(
    policy: &Policy,
    state: State,
    admitted: Admission,
    outcome: Outcome,
    now: i64,
    random: u32,
) -> (State, Option<Transition>) {
    match state {
        State::Closed { since, attempts, failed, succeeded } => {
            let live = since != 0 && now >= since && now - since < policy.window_millis;
            let (since, attempts, failed, succeeded) =
                if live { (since, attempts, failed, succeeded) } else { (0, 0, 0, 0) };
            if outcome == Outcome::Success && failed == 0 {
                return (CLOSED, None);
            }
            let since = if since == 0 { now } else { since };
            let attempts = attempts.saturating_add(1);
            let (failed, succeeded) = match outcome {
                Outcome::Success => (failed, succeeded.saturating_add(1)),
                _ => (failed.saturating_add(outcome.points()), succeeded),
            };
            let total = u64::from(failed) + u64::from(succeeded);
            if attempts >= policy.min_attempts && u64::from(failed) * 100 >= u64::from(policy.failure_percent) * total {
                let open = State::Open { probe_at: now.saturating_add(open_for(policy, 0, random)), opens: 1 };
                return (open, Some(Transition::Opened));
            }
            (State::Closed { since, attempts, failed, succeeded }, None)
        }
        State::Open { .. } => (state, None),
        State::HalfOpen { probe: Some(lease), succeeded, opens } if admitted == Admission::Probe(lease) => {
            if outcome == Outcome::Success {
                let succeeded = succeeded.saturating_add(1);
                if succeeded >= policy.close_after {
                    return (CLOSED, Some(Transition::Closed));
                }
                (State::HalfOpen { probe: None, succeeded, opens }, None)
            } else {
                (
                    State::Open {
                        probe_at: now.saturating_add(open_for(policy, opens, random)),
                        opens: opens.saturating_add(1),
                    },
                    None,
                )
            }
        }
        State::HalfOpen { .. } => (state, None),
    }
}

/// How long the circuit stays open after its `opens`-th opening (0: the first): doubled each
/// time, bounded, less up to a tenth as `random` draws (0 takes nothing off). Never more than
/// [`Policy::max_open_millis`], so a spread probe time is never read as a clock jump.
fn open_for(policy: &Policy, opens: u32, random: u32) -> i64 {
    let doubled = policy.open_millis.saturating_mul(1_i64.checked_shl(opens.min(20)).unwrap_or(i64::MAX));
    let open = doubled.min(policy.max_open_millis).max(0);
    let spread = i128::from(open / 10) * i128::from(random) / (i128::from(u32::MAX) + 1);
    open - i64::try_from(spread).unwrap_or(0)
}

/// When the next probe may go, for a state that holds: the time the API shows as
/// `next_probe_at`.
pub fn next_probe_at(policy: &Policy, state: State, now: i64) -> Option<i64> {
    match admit(policy, state, now).0 {
        Admission::Hold(at) => Some(at),
        Admission::Probe(_) => Some(now),
        Admission::Send => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Policy = DEFAULT_POLICY;
    const T0: i64 = 1_800_000_000_000;

    #[test]
    fn a_retry_that_fails_again_is_not_counted() {
        assert!(counts(Admission::Send, Outcome::Failure, false, 1), "a first attempt's failure counts");
        assert!(counts(Admission::Send, Outcome::Timeout, false, 1));
        assert!(!counts(Admission::Send, Outcome::Failure, false, 2), "a retry's does not");
        assert!(!counts(Admission::Send, Outcome::Timeout, true, 1), "nor one its sender's time cut");
        assert!(counts(Admission::Send, Outcome::Success, false, 5), "a success always counts");
        assert!(counts(Admission::Probe(1), Outcome::Failure, false, 5), "a probe always settles");
    }

    /// Feeds outcomes of attempts admitted as they come, one at a time, from `state` at `now`
    /// (each attempt is admitted, then its outcome recorded `step` ms later). Returns the state
    /// and the transitions seen.
    fn run(mut state: State, now: &mut i64, step: i64, outcomes: &[Outcome]) -> (State, Vec<Transition>) {
        let mut seen = Vec::new();
        for &outcome in outcomes {
            let (admission, stored) = admit(&P, state, *now);
            if let Admission::Hold(_) = admission {
                continue;
            }
            if let Some(s) = stored {
                state = s;
            }
            *now += step;
            let (next, transition) = record(&P, state, admission, outcome, *now, 0);
            state = next;
            seen.extend(transition);
        }
        (state, seen)
    }

    use Outcome::{Failure as F, Success as S, Timeout as X};

    #[test]
    fn a_healthy_endpoint_never_changes_state() {
        let mut now = T0;
        let (state, seen) = run(CLOSED, &mut now, 10, &[S; 1000]);
        assert_eq!(state, CLOSED);
        assert!(seen.is_empty());
    }

    #[test]
    fn never_opens_below_the_minimum_count() {
        for outcomes in [&[X, X, X, X][..], &[F, F, F, F], &[X, F, X, F]] {
            let mut now = T0;
            let (state, seen) = run(CLOSED, &mut now, 10, outcomes);
            assert!(matches!(state, State::Closed { .. }), "{outcomes:?}: {state:?}");
            assert!(seen.is_empty());
        }
    }

    #[test]
    fn opens_at_the_minimum_count_when_failures_make_half_the_points() {
        let mut now = T0;
        let (state, seen) = run(CLOSED, &mut now, 10, &[F, F, F, F, F]);
        assert_eq!(state, State::Open { probe_at: now + P.open_millis, opens: 1 });
        assert_eq!(seen, vec![Transition::Opened]);
        // Timeouts weigh twice: two timeouts outweigh three successes.
        let mut now = T0;
        let (state, seen) = run(CLOSED, &mut now, 10, &[X, S, S, X, S]);
        assert!(matches!(state, State::Open { .. }), "{state:?}");
        assert_eq!(seen, vec![Transition::Opened]);
        // Plain failures do not: two failures and three successes stay closed.
        let mut now = T0;
        let (state, _) = run(CLOSED, &mut now, 10, &[F, S, S, F, S]);
        assert!(matches!(state, State::Closed { .. }), "{state:?}");
    }

    #[test]
    fn failures_spread_beyond_the_window_never_open_it() {
        let mut now = T0;
        let mut state = CLOSED;
        for _ in 0..50 {
            let (next, seen) = run(state, &mut now, P.window_millis / 4, &[F]);
            assert!(seen.is_empty());
            state = next;
        }
        assert!(matches!(state, State::Closed { .. }));
    }

    #[test]
    fn open_holds_until_the_probe_time_then_lets_one_probe_through() {
        let mut now = T0;
        let (state, _) = run(CLOSED, &mut now, 10, &[X; 5]);
        let State::Open { probe_at, .. } = state else { panic!("{state:?}") };
        assert_eq!(admit(&P, state, now), (Admission::Hold(probe_at), None));
        assert_eq!(admit(&P, state, probe_at - 1), (Admission::Hold(probe_at), None));
        let (admission, stored) = admit(&P, state, probe_at);
        let lease = probe_at + P.probe_lease_millis;
        assert_eq!(admission, Admission::Probe(lease));
        let half = stored.expect("the probe's state is stored");
        // While the probe is in flight, nobody else goes.
        for at in [probe_at, probe_at + 1, lease - 1] {
            assert_eq!(admit(&P, half, at), (Admission::Hold(lease), None), "at {at}");
        }
        // A probe that never reports frees its turn when its lease ends.
        assert!(matches!(admit(&P, half, lease).0, Admission::Probe(l) if l == lease + P.probe_lease_millis));
    }

    #[test]
    fn probes_that_succeed_close_it_once() {
        let mut now = T0;
        let (state, _) = run(CLOSED, &mut now, 10, &[X; 5]);
        now += P.open_millis;
        let (state, seen) = run(state, &mut now, 10, &[S]);
        assert!(matches!(state, State::HalfOpen { probe: None, succeeded: 1, .. }), "{state:?}");
        assert!(seen.is_empty());
        let (state, seen) = run(state, &mut now, 10, &[S]);
        assert_eq!(state, CLOSED);
        assert_eq!(seen, vec![Transition::Closed]);
        let (state, seen) = run(state, &mut now, 10, &[S, S, S]);
        assert_eq!(state, CLOSED);
        assert!(seen.is_empty());
    }

    #[test]
    fn a_random_draw_takes_up_to_a_tenth_off_each_opening_and_never_passes_the_bound() {
        // Opened by five timeouts at T0, then re-opened by a failed probe `reopens` times, with
        // `random` drawn for the last opening.
        let opened = |reopens: u32, random: u32| -> i64 {
            let mut state = CLOSED;
            let mut now = T0;
            for attempt in 0..5 {
                let last = attempt == 4 && reopens == 0;
                state = record(&P, state, Admission::Send, X, now, if last { random } else { 0 }).0;
            }
            for reopen in 1..=reopens {
                let State::Open { probe_at, .. } = state else { panic!("{state:?}") };
                now = probe_at;
                let (Admission::Probe(lease), stored) = admit(&P, state, now) else { panic!("{state:?}") };
                let draw = if reopen == reopens { random } else { 0 };
                state = record(&P, stored.unwrap_or(state), Admission::Probe(lease), X, now, draw).0;
            }
            let State::Open { probe_at, .. } = state else { panic!("{state:?}") };
            // Held until then, never read as a clock that jumped.
            assert_eq!(admit(&P, state, now).0, Admission::Hold(probe_at));
            probe_at - now
        };
        for (reopens, full) in [(0, 30_000), (1, 60_000), (4, 480_000), (5, P.max_open_millis), (30, P.max_open_millis)]
        {
            assert_eq!(opened(reopens, 0), full, "nothing taken off at 0");
            let least = opened(reopens, u32::MAX);
            assert!(least < full && least >= full - full / 10, "{reopens}: {least} of {full}");
            let half = opened(reopens, u32::MAX / 2);
            assert!(half > least && half < full, "{reopens}: {half} between {least} and {full}");
            for random in [0, 1, u32::MAX / 3, u32::MAX] {
                assert!(opened(reopens, random) <= P.max_open_millis);
            }
        }
    }

    #[test]
    fn a_failed_probe_opens_it_again_for_longer_up_to_the_bound() {
        let mut now = T0;
        let (mut state, _) = run(CLOSED, &mut now, 0, &[X; 5]);
        let mut waits = Vec::new();
        for _ in 0..10 {
            let State::Open { probe_at, .. } = state else { panic!("{state:?}") };
            waits.push(probe_at - now);
            now = probe_at;
            let (next, seen) = run(state, &mut now, 0, &[X]);
            assert!(seen.is_empty(), "re-opening is not a new opening");
            state = next;
        }
        assert_eq!(&waits[..5], &[30_000, 60_000, 120_000, 240_000, 480_000]);
        assert!(waits[5..].iter().all(|w| *w == P.max_open_millis), "{waits:?}");
        // A success in between does not close it: two in a row do.
        let State::Open { probe_at, .. } = state else { panic!() };
        now = probe_at;
        let (state, _) = run(state, &mut now, 0, &[S, X]);
        assert!(matches!(state, State::Open { .. }));
    }

    #[test]
    fn outcomes_of_attempts_that_were_not_the_probe_change_nothing() {
        let mut now = T0;
        let (open, _) = run(CLOSED, &mut now, 0, &[X; 5]);
        // Sent while closed, answered after it opened.
        for outcome in [S, F, X] {
            assert_eq!(record(&P, open, Admission::Send, outcome, now, 0), (open, None));
        }
        let State::Open { probe_at, .. } = open else { panic!() };
        let (Admission::Probe(token), Some(half)) = admit(&P, open, probe_at) else { panic!() };
        for outcome in [S, F, X] {
            assert_eq!(record(&P, half, Admission::Send, outcome, probe_at, 0), (half, None));
            // A probe whose lease ran out, answering after the next probe went.
            assert_eq!(record(&P, half, Admission::Probe(token - 1), outcome, probe_at, 0), (half, None));
        }
    }

    #[test]
    fn every_order_of_outcomes_opens_at_most_once_and_closes_only_after_opening() {
        // Every sequence of 8 outcomes, each admitted and recorded in turn, with the clock
        // moving by a window-sized step or not: transitions alternate, starting with Opened.
        let choices = [S, F, X];
        let steps = [0, 10, P.open_millis, P.window_millis];
        for code in 0..3_u32.pow(8) {
            for &step in &steps {
                let outcomes: Vec<Outcome> = (0..8).map(|i| choices[(code / 3_u32.pow(i) % 3) as usize]).collect();
                let mut now = T0;
                let (state, seen) = run(CLOSED, &mut now, step, &outcomes);
                for pair in seen.windows(2) {
                    assert_ne!(pair[0], pair[1], "{outcomes:?} step {step}: {seen:?}");
                }
                assert_ne!(seen.first(), Some(&Transition::Closed), "{outcomes:?}");
                let fails = outcomes.iter().filter(|o| **o != S).count();
                if fails < P.min_attempts as usize / 2 {
                    assert!(seen.is_empty(), "{outcomes:?}: {seen:?}");
                }
                if let State::Closed { attempts, .. } = state {
                    assert!(attempts < 8 + 1);
                }
            }
        }
    }

    #[test]
    fn a_clock_that_jumps_back_never_keeps_it_open_beyond_the_bound() {
        let mut now = T0;
        let (open, _) = run(CLOSED, &mut now, 0, &[X; 5]);
        // The clock moved back a day: the stored probe time is impossible, so a probe goes.
        let back = now - 86_400_000;
        assert!(matches!(admit(&P, open, back), (Admission::Probe(_), Some(_))));
        let (_, Some(half)) = admit(&P, open, now + P.open_millis) else { panic!() };
        assert!(matches!(admit(&P, half, back), (Admission::Probe(_), Some(_))));
        // A window whose start is in the future is no window.
        let window = State::Closed { since: now + 86_400_000, attempts: 4, failed: 8, succeeded: 0 };
        let (state, seen) = record(&P, window, Admission::Send, F, now, 0);
        assert_eq!(state, State::Closed { since: now, attempts: 1, failed: 1, succeeded: 0 });
        assert!(seen.is_none());
        // A clock far ahead ends the window and the open period alike.
        let far = now + 10 * P.max_open_millis;
        assert!(matches!(admit(&P, open, far).0, Admission::Probe(_)));
        assert_eq!(record(&P, window, Admission::Send, S, far, 0), (CLOSED, None));
    }

    #[test]
    fn next_probe_at_is_shown_only_when_not_closed() {
        let mut now = T0;
        assert_eq!(next_probe_at(&P, CLOSED, now), None);
        let (open, _) = run(CLOSED, &mut now, 0, &[X; 5]);
        assert_eq!(next_probe_at(&P, open, now), Some(now + P.open_millis));
        assert_eq!(next_probe_at(&P, open, now + P.open_millis + 5), Some(now + P.open_millis + 5));
    }
}
