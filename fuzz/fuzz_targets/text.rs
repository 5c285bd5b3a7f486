//! The small text parsers (URLs, amounts, RFC 3339 and HTTP dates, `Retry-After`, ring plans)
//! and segment counting on arbitrary text: answers, never panics, and segment counts that hold
//! together.
#![no_main]

use exactly_core::event::Cost;
use exactly_core::form::Url;
use exactly_core::{segments, Timestamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(url) = Url::parse(text) {
        let _ = url.with_port(url.default_port());
    }
    let _ = Cost::parse_amount(text);
    if let Some(t) = Timestamp::parse_rfc3339(text) {
        let _ = t.to_rfc3339();
    }
    let _ = Timestamp::parse_http_date(text);
    for now in [i64::MIN, 0, 1_700_000_000_000, i64::MAX] {
        let _ = exactly_core::backoff::parse_retry_after(text, Timestamp::from_unix_millis(now));
    }
    let s = segments::count(text);
    assert!(s.count >= 1);
    assert!(u64::from(s.count) * 160 >= u64::from(s.units) || s.encoding == segments::Encoding::Ucs2);
    let _ = exactly_core::ring_plan::RingPlan::new(text.split(',').map(str::to_owned).collect());
});
