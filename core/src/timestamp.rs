//! The one time type of the core: milliseconds since the Unix epoch, UTC.

use std::fmt;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A point in time, as milliseconds since the Unix epoch (UTC).
///
/// The core never reads a clock: the edge passes `now` in, tests pass a simulated one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// A timestamp from whole seconds since the Unix epoch.
    pub const fn from_unix_seconds(seconds: i64) -> Self {
        Self(seconds.saturating_mul(1000))
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the Unix epoch, rounded toward the past.
    pub const fn unix_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// Parses an RFC 3339 date-time such as `2026-11-30T05:20:01.123456Z`.
    ///
    /// Returns `None` for anything else; sub-millisecond digits are truncated.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let parsed = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        let millis = parsed.unix_timestamp_nanos().div_euclid(1_000_000);
        i64::try_from(millis).ok().map(Self)
    }

    /// This timestamp as RFC 3339 in UTC with millisecond precision.
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000_000;
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => {
                let t = t.replace_nanosecond((t.nanosecond() / 1_000_000) * 1_000_000).unwrap_or(t);
                t.format(&Rfc3339).unwrap_or_else(|_| self.0.to_string())
            }
            // Only reachable for timestamps beyond year 9999, which nothing here produces.
            Err(_) => self.0.to_string(),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn parses_carrier_formats() {
        let t = Timestamp::parse_rfc3339("2018-02-02T22:25:27.521992Z").unwrap();
        assert_eq!(t.unix_millis(), 1_517_610_327_521);
        let t = Timestamp::parse_rfc3339("2026-11-30T05:20:01+01:00").unwrap();
        assert_eq!(t.unix_seconds(), 1_796_016_001 - 3600);
    }

    #[test]
    fn rejects_non_rfc3339() {
        for text in ["", "yesterday", "2026-11-30", "2026-11-30 05:20:01", "1700000000"] {
            assert_eq!(Timestamp::parse_rfc3339(text), None, "{text}");
        }
    }

    #[test]
    fn formats_round_trip() {
        let t = Timestamp::from_unix_millis(1_700_000_000_123);
        assert_eq!(t.to_rfc3339(), "2023-11-14T22:13:20.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
    }

    #[test]
    fn seconds_round_toward_the_past() {
        assert_eq!(Timestamp::from_unix_millis(1999).unix_seconds(), 1);
        assert_eq!(Timestamp::from_unix_millis(-1).unix_seconds(), -1);
    }
}
