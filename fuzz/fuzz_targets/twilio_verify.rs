//! Twilio verification on arbitrary URLs, headers and bodies: errors, never panics.
#![no_main]

use exactly_core::{twilio, Timestamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Input layout: url \n signature \n settings \n body.
    let mut parts = data.splitn(4, |b| *b == b'\n');
    let url = parts.next().and_then(|p| std::str::from_utf8(p).ok()).unwrap_or_default();
    let signature = parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let signature_settings = parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let body = parts.next().unwrap_or_default();
    let verifier = twilio::Verifier::new("12345").expect("a token");
    let request = twilio::Request { url, signature, signature_settings, body };
    let _ = verifier.verify(request, Timestamp::from_unix_seconds(1_700_000_000));
});
