//! Endpoint filters on arbitrary text: an answer, never a panic; whatever parses prints as a
//! canonical text that parses back to the same filter, and evaluating it never panics.
#![no_main]

use exactly_core::filter::Filter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(filter) = Filter::parse(text) {
        let canonical = filter.to_string();
        assert_eq!(Filter::parse(&canonical).as_ref(), Ok(&filter), "{canonical:?}");
        let body = serde_json::json!({"type": "message.received", "data": {"direction": "inbound", "n": [1, 2.5]}});
        filter.matches(&body);
    }
});
