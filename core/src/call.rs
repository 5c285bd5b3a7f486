//! Call statuses and what a call costs.
//!
//! ```text
//! ringing --answer--> in_progress --hangup--> completed
//!    \------------------hangup--------------> missed
//! ```
//!
//! Duration runs from answer to hangup; billable minutes are that duration rounded up to whole
//! minutes. Which status a call reaches, and when, is the call machine's decision
//! ([`crate::call_machine`]).

use crate::webhook::EventType;
use crate::Timestamp;

crate::text_enum! {
    /// Where a call stands.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum CallStatus {
        /// Created, not answered.
        Ringing = "ringing",
        /// Answered, not ended.
        InProgress = "in_progress",
        /// Answered, then ended (terminal).
        Completed = "completed",
        /// Ended without an answer (terminal).
        Missed = "missed",
    }
}

impl CallStatus {
    /// The customer event announcing this status.
    pub fn event_type(self) -> EventType {
        match self {
            CallStatus::Ringing => EventType::CallInitiated,
            CallStatus::InProgress => EventType::CallAnswered,
            CallStatus::Completed => EventType::CallCompleted,
            CallStatus::Missed => EventType::CallMissed,
        }
    }
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
