//! Telnyx verification on arbitrary headers and bodies: errors, never panics.
#![no_main]

use exactly_core::{telnyx, Timestamp};
use libfuzzer_sys::fuzz_target;

// The public key of the shared test vector.
const KEY: &str = "1SiA4o9hyqTCpIqC5V9HUakiiaeACeqfZTInDBbOir4=";

fuzz_target!(|data: &[u8]| {
    // Input layout: signature \n timestamp \n body.
    let mut parts = data.splitn(3, |b| *b == b'\n');
    let signature = parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let timestamp = parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let body = parts.next().unwrap_or_default();
    let verifier = telnyx::Verifier::from_base64_keys(KEY).expect("the vector key is valid");
    let _ =
        verifier.verify(telnyx::Headers { signature, timestamp }, body, Timestamp::from_unix_seconds(1_700_000_000));
    let _ = telnyx::Verifier::from_base64_keys(&String::from_utf8_lossy(data));
});
