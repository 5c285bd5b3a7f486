//! The call state machine.
//!
//! ```text
//! ringing --answer--> in_progress --hangup--> completed
//!    \------------------hangup--------------> missed
//! ```
//!
//! A call ends once: the edge's guard is `ended_at IS NULL`. Duration runs from answer to
//! hangup; billable minutes are that duration rounded up to whole minutes.

use crate::Timestamp;

/// Where a call stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallStatus {
    /// Created, not answered.
    Ringing,
    /// Answered, not ended.
    InProgress,
    /// Answered, then ended (terminal).
    Completed,
    /// Ended without an answer (terminal).
    Missed,
}

impl CallStatus {
    /// Every status.
    pub const ALL: [CallStatus; 4] =
        [CallStatus::Ringing, CallStatus::InProgress, CallStatus::Completed, CallStatus::Missed];

    /// The name stored in `calls.status` and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ringing => "ringing",
            CallStatus::InProgress => "in_progress",
            CallStatus::Completed => "completed",
            CallStatus::Missed => "missed",
        }
    }

    /// The status named `name`, as stored.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The customer event announcing this status.
    pub fn event_type(self) -> &'static str {
        match self {
            CallStatus::Ringing => "call.initiated",
            CallStatus::InProgress => "call.answered",
            CallStatus::Completed => "call.completed",
            CallStatus::Missed => "call.missed",
        }
    }
}

/// What the edge knows about a call when an event arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallState {
    /// Current status.
    pub status: CallStatus,
    /// When it was answered, if it was.
    pub answered_at: Option<Timestamp>,
    /// When it ended, if it did.
    pub ended_at: Option<Timestamp>,
}

/// The outcome of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerDecision {
    /// The call moves to in progress at this time.
    Answered {
        /// When the answer happened.
        at: Timestamp,
    },
    /// Already answered or already ended: nothing changes.
    Unchanged,
}

/// The outcome of a hangup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HangupDecision {
    /// The call ends now.
    Ended(CallEnd),
    /// The call had already ended: nothing changes.
    Unchanged,
}

/// How a call ended, written in the same batch as the status change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallEnd {
    /// `Completed` if it was answered, else `Missed`.
    pub status: CallStatus,
    /// When it ended.
    pub ended_at: Timestamp,
    /// Whole seconds from answer to hangup, rounded up (0 when missed).
    pub duration_secs: u64,
    /// Minutes billed: the duration rounded up to whole minutes (0 when missed).
    pub billable_minutes: u64,
}

/// Decides what an answer at `at` does.
pub fn answer(state: CallState, at: Timestamp) -> AnswerDecision {
    if state.status == CallStatus::Ringing && state.ended_at.is_none() {
        AnswerDecision::Answered { at }
    } else {
        AnswerDecision::Unchanged
    }
}

/// Decides what the call's hangup at `at` does.
pub fn hang_up(state: CallState, at: Timestamp) -> HangupDecision {
    if state.ended_at.is_some() || matches!(state.status, CallStatus::Completed | CallStatus::Missed) {
        return HangupDecision::Unchanged;
    }
    HangupDecision::Ended(match state.answered_at {
        Some(answered) => {
            let duration_secs = duration_secs(answered, at);
            CallEnd {
                status: CallStatus::Completed,
                ended_at: at,
                duration_secs,
                billable_minutes: billable_minutes(duration_secs),
            }
        }
        None => CallEnd { status: CallStatus::Missed, ended_at: at, duration_secs: 0, billable_minutes: 0 },
    })
}

/// Whole seconds from `start` to `end`, rounded up; 0 if the end is not after the start (events
/// from different clocks may disagree by a few milliseconds).
pub fn duration_secs(start: Timestamp, end: Timestamp) -> u64 {
    let millis = end.unix_millis().saturating_sub(start.unix_millis());
    if millis <= 0 {
        0
    } else {
        (millis as u64).div_ceil(1000)
    }
}

/// Minutes billed for a duration: rounded up to whole minutes.
pub fn billable_minutes(duration_secs: u64) -> u64 {
    duration_secs.div_ceil(60)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_seconds(secs)
    }

    const RINGING: CallState = CallState { status: CallStatus::Ringing, answered_at: None, ended_at: None };

    #[test]
    fn answered_call_completes_with_rounded_minutes() {
        let AnswerDecision::Answered { at: answered } = answer(RINGING, at(100)) else { panic!() };
        let state = CallState { status: CallStatus::InProgress, answered_at: Some(answered), ended_at: None };
        assert_eq!(answer(state, at(101)), AnswerDecision::Unchanged, "a second answer changes nothing");
        let HangupDecision::Ended(end) = hang_up(state, at(100 + 61)) else { panic!() };
        assert_eq!(end, CallEnd { status: CallStatus::Completed, ended_at: at(161), duration_secs: 61, billable_minutes: 2 });
        let ended = CallState { status: end.status, answered_at: Some(answered), ended_at: Some(end.ended_at) };
        assert_eq!(hang_up(ended, at(170)), HangupDecision::Unchanged, "a second hangup changes nothing");
        assert_eq!(answer(ended, at(171)), AnswerDecision::Unchanged, "a late answer changes nothing");
    }

    #[test]
    fn unanswered_call_is_missed_and_free() {
        let HangupDecision::Ended(end) = hang_up(RINGING, at(130)) else { panic!() };
        assert_eq!(end, CallEnd { status: CallStatus::Missed, ended_at: at(130), duration_secs: 0, billable_minutes: 0 });
    }

    #[test]
    fn rounding() {
        assert_eq!(billable_minutes(0), 0);
        assert_eq!(billable_minutes(1), 1);
        assert_eq!(billable_minutes(60), 1);
        assert_eq!(billable_minutes(61), 2);
        assert_eq!(duration_secs(Timestamp::from_unix_millis(0), Timestamp::from_unix_millis(1)), 1);
        assert_eq!(duration_secs(Timestamp::from_unix_millis(0), Timestamp::from_unix_millis(60_000)), 60);
        assert_eq!(duration_secs(at(10), at(5)), 0, "clock disagreement is not a negative duration");
    }

    #[test]
    fn names_round_trip() {
        for s in CallStatus::ALL {
            assert_eq!(CallStatus::from_name(s.as_str()), Some(s));
        }
    }
}
