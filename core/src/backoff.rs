//! Retry schedules the edge uses, as pure functions of the attempt number (and, for jitter, a
//! random value the caller draws).

use crate::Timestamp;

/// Customer webhook schedule: the delay before attempt `n` (1-based), measured
/// from the previous attempt. Attempt 1 is immediate; there are 8 attempts in all.
pub const WEBHOOK_SCHEDULE_SECS: [u64; 8] = [0, 5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600];

/// The longest delay a `Retry-After` header can impose (queues accept at most 12 hours).
pub const MAX_RETRY_AFTER_SECS: u64 = 12 * 3600;

/// Delays before re-running a job that cannot be applied yet (a receipt that arrived before the
/// message carries its carrier id), by retry number (1-based). After the last one the event is
/// recorded as failed.
pub const NOT_YET_SCHEDULE_SECS: [u64; 8] = [2, 5, 10, 30, 60, 120, 300, 600];

/// The delay before customer webhook attempt `attempt` (1-based), with ±10% jitter drawn from
/// `random` (any `u32`), or `None` after the last attempt.
pub fn webhook_delay(attempt: u32, random: u32) -> Option<u64> {
    let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
    let base = *WEBHOOK_SCHEDULE_SECS.get(index)?;
    Some(jitter(base, random))
}

/// Applies ±10% jitter to `base` seconds: spreads retries of many failed deliveries.
pub fn jitter(base: u64, random: u32) -> u64 {
    let spread = base / 10;
    if spread == 0 {
        return base;
    }
    // random maps uniformly onto [base - spread, base + spread].
    let offset = u64::from(random) % (2 * spread + 1);
    // No overflow: offset <= u32::MAX, and whenever base is near u64::MAX, spread exceeds that.
    base - spread + offset
}

/// Honours a `Retry-After` of `retry_after` seconds: the delay is at least the schedule's and at
/// least what the endpoint asked for, but never beyond [`MAX_RETRY_AFTER_SECS`].
pub fn with_retry_after(scheduled: u64, retry_after: Option<u64>) -> u64 {
    match retry_after {
        Some(asked) => scheduled.max(asked.min(MAX_RETRY_AFTER_SECS)),
        None => scheduled,
    }
}

/// Reads a `Retry-After` value as a delay in seconds from `now`: either delay-seconds or an
/// HTTP date (RFC 9110 section 10.2.3). A date in the past asks for no delay; anything else is
/// `None`, and the schedule alone decides.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still "a very long time": clamped by the caller.
        return Some(value.parse::<u64>().unwrap_or(u64::MAX));
    }
    let at = Timestamp::parse_http_date(value)?;
    let millis = at.unix_millis().saturating_sub(now.unix_millis()).max(0);
    // Round up: retrying a fraction of a second before the date is retrying too early.
    u64::try_from(millis).ok().map(|m| m.div_ceil(1000))
}

/// The delay before retry `retry` (1-based) of a job that cannot be applied yet, or `None` when
/// it is time to give up and record the failure.
pub fn not_yet_delay(retry: u32) -> Option<u64> {
    let index = usize::try_from(retry).ok()?.checked_sub(1)?;
    NOT_YET_SCHEDULE_SECS.get(index).copied()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn webhook_schedule_has_eight_attempts() {
        assert_eq!(webhook_delay(1, 12345), Some(0));
        assert_eq!(webhook_delay(2, 0), Some(5));
        assert_eq!(webhook_delay(3, 0), Some(270));
        assert_eq!(webhook_delay(8, 0), Some(32_400));
        assert_eq!(webhook_delay(9, 0), None);
        assert_eq!(webhook_delay(0, 0), None);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for random in [0, 1, 59, 60, 61, u32::MAX / 2, u32::MAX] {
            let d = jitter(600, random);
            assert!((540..=660).contains(&d), "{d}");
        }
        assert_eq!(jitter(600, 0), 540);
        assert_eq!(jitter(600, 120), 660);
        assert_eq!(jitter(5, u32::MAX), 5, "too small to jitter");
        assert!(jitter(u64::MAX, u32::MAX) >= u64::MAX - u64::MAX / 10, "the largest base does not overflow");
    }

    #[test]
    fn retry_after_is_honoured_and_clamped() {
        assert_eq!(with_retry_after(300, None), 300);
        assert_eq!(with_retry_after(300, Some(10)), 300, "never sooner than the schedule");
        assert_eq!(with_retry_after(5, Some(120)), 120);
        assert_eq!(with_retry_after(5, Some(10 * 86_400)), MAX_RETRY_AFTER_SECS);
    }

    #[test]
    fn retry_after_as_seconds_or_a_date() {
        let now = Timestamp::parse_rfc3339("2026-10-21T07:27:00.250Z").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(120));
        assert_eq!(parse_retry_after(" 0 ", now), Some(0));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(u64::MAX),
            "huge, then clamped by with_retry_after"
        );
        assert_eq!(parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT", now), Some(60), "59.75 s rounds up");
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2026 07:27:00 GMT", now),
            Some(0),
            "a date in the past asks for no delay"
        );
        assert_eq!(parse_retry_after("Wednesday, 21-Oct-26 09:27:01 GMT", now), Some(7201));
        assert_eq!(parse_retry_after("Wed Oct 21 07:37:01 2026", now), Some(601));
        for value in ["", "-5", "1.5", "+5", "soon", "5 s", "2026-10-21T07:28:00Z", "Wed, 21 Oct 2026 07:28:00 PST"] {
            assert_eq!(parse_retry_after(value, now), None, "{value:?}");
        }
        assert_eq!(with_retry_after(5, parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now)), MAX_RETRY_AFTER_SECS);
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", Timestamp::from_unix_millis(i64::MIN)).map(|d| d > 0),
            Some(true),
            "no overflow"
        );
    }

    #[test]
    fn not_yet_schedule_ends() {
        assert_eq!(not_yet_delay(1), Some(2));
        assert_eq!(not_yet_delay(8), Some(600));
        assert_eq!(not_yet_delay(9), None);
        assert_eq!(not_yet_delay(0), None);
    }
}
