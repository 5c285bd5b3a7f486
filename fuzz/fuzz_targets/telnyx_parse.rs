//! Telnyx envelope and payload parsing on arbitrary bytes: errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = exactly_core::telnyx::parse_event(data);
});
