//! The one time type of the core: milliseconds since the Unix epoch, UTC.

use std::fmt;

use time::format_description::well_known::{Rfc2822, Rfc3339};
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

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

    /// Parses an RFC 2822 date with its zone (`Wed, 18 Aug 2010 20:01:40 +0000`), as Twilio's
    /// REST API writes `date_created`.
    pub fn parse_rfc2822(text: &str) -> Option<Self> {
        let parsed = OffsetDateTime::parse(text.trim(), &Rfc2822).ok()?;
        let millis = parsed.unix_timestamp_nanos().div_euclid(1_000_000);
        i64::try_from(millis).ok().map(Self)
    }

    /// Parses an HTTP date (RFC 9110 section 5.6.7), as `Retry-After` may carry one:
    /// the preferred IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, and the two obsolete forms a
    /// recipient must still accept, RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` and asctime
    /// `Sun Nov  6 08:49:37 1994`. The weekday is not checked against the date (a sender that
    /// gets it wrong still meant the date). Returns `None` for anything else.
    pub fn parse_http_date(text: &str) -> Option<Self> {
        let text = text.trim();
        let (weekday, rest) = text.split_once([',', ' '])?;
        if !weekday.bytes().all(|b| b.is_ascii_alphabetic()) {
            return None;
        }
        let digits = |text: &str, len: usize| -> Option<u16> {
            (text.len() == len && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
        };
        let fields: Vec<&str> = rest.split(' ').filter(|f| !f.is_empty()).collect();
        let (day, month, year, clock) = match fields.as_slice() {
            // IMF-fixdate: `, 06 Nov 1994 08:49:37 GMT`.
            [day, month, year, clock, "GMT"] if text.as_bytes().get(3) == Some(&b',') => {
                (*day, *month, i32::from(digits(year, 4)?), *clock)
            }
            // RFC 850: `, 06-Nov-94 08:49:37 GMT`; a two-digit year more than 50 years ahead
            // is in the past century (RFC 9110 section 5.6.7), read here as 19xx/20xx at 70.
            [date, clock, "GMT"] if text.contains(',') => {
                let mut parts = date.split('-');
                let (day, month, year) = (parts.next()?, parts.next()?, parts.next()?);
                if parts.next().is_some() {
                    return None;
                }
                let year = i32::from(digits(year, 2)?);
                (day, month, if year >= 70 { 1900 + year } else { 2000 + year }, *clock)
            }
            // asctime: ` Nov  6 08:49:37 1994`.
            [month, day, clock, year] if !text.contains(',') => (*day, *month, i32::from(digits(year, 4)?), *clock),
            _ => return None,
        };
        let month = match month {
            "Jan" => Month::January,
            "Feb" => Month::February,
            "Mar" => Month::March,
            "Apr" => Month::April,
            "May" => Month::May,
            "Jun" => Month::June,
            "Jul" => Month::July,
            "Aug" => Month::August,
            "Sep" => Month::September,
            "Oct" => Month::October,
            "Nov" => Month::November,
            "Dec" => Month::December,
            _ => return None,
        };
        let number = |digits: &str, len: std::ops::RangeInclusive<usize>| -> Option<u8> {
            (len.contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        };
        let mut clock = clock.split(':');
        let (hour, minute, second) =
            (number(clock.next()?, 2..=2)?, number(clock.next()?, 2..=2)?, number(clock.next()?, 2..=2)?);
        if clock.next().is_some() {
            return None;
        }
        let date = Date::from_calendar_date(year, month, number(day, 1..=2)?).ok()?;
        // A leap second (`:60`) is refused by `from_hms`, like any other impossible time.
        let time = Time::from_hms(hour, minute, second).ok()?;
        let seconds = PrimitiveDateTime::new(date, time).assume_utc().unix_timestamp();
        Some(Self::from_unix_seconds(seconds))
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

/// Stored as its milliseconds since the Unix epoch.
impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        i64::deserialize(deserializer).map(Timestamp)
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn rfc2822_as_twilio_writes_it() {
        let t = Timestamp::parse_rfc2822("Wed, 18 Aug 2010 20:01:40 +0000");
        assert_eq!(t, Timestamp::parse_rfc3339("2010-08-18T20:01:40Z"));
        let zoned = Timestamp::parse_rfc2822("Wed, 18 Aug 2010 22:01:40 +0200");
        assert_eq!(zoned, t);
        assert_eq!(Timestamp::parse_rfc2822("2010-08-18T20:01:40Z"), None);
        assert_eq!(Timestamp::parse_rfc2822(""), None);
    }

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
    fn http_dates_in_all_three_forms() {
        // RFC 9110's own example, in each of its three forms.
        let expected = Some(Timestamp::from_unix_seconds(784_111_777));
        assert_eq!(Timestamp::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), expected);
        assert_eq!(Timestamp::parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), expected);
        assert_eq!(Timestamp::parse_http_date("Sun Nov  6 08:49:37 1994"), expected);
        assert_eq!(
            Timestamp::parse_http_date(" Wed, 21 Oct 2026 07:28:00 GMT "),
            Timestamp::parse_rfc3339("2026-10-21T07:28:00Z")
        );
        assert_eq!(
            Timestamp::parse_http_date("Thursday, 01-Jan-26 00:00:00 GMT"),
            Timestamp::parse_rfc3339("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            Timestamp::parse_http_date("Mon, 29 Feb 2028 23:59:59 GMT"),
            Timestamp::parse_rfc3339("2028-02-29T23:59:59Z")
        );
    }

    #[test]
    fn not_http_dates() {
        for text in [
            "",
            "120",
            "-1",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37 +0000",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:60 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37:00 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 006 Nov 1994 08:49:37 GMT",
            "Sun, +6 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov  6 08:49:37 94",
            "2026-11-30T05:20:01Z",
            "Sun, 06 Nov -999 08:49:37 GMT",
            "Sun, 06 Nov 99999 08:49:37 GMT",
            "\u{0}, 06 Nov 1994 08:49:37 GMT",
            "Sun,",
        ] {
            assert_eq!(Timestamp::parse_http_date(text), None, "{text:?}");
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
