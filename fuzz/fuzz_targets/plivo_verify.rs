//! Plivo V2/V3 verification on arbitrary URLs, headers and bodies: errors, never panics.
#![no_main]

use exactly_core::{plivo, Timestamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Input layout: url \n v3 signature \n v3 nonce \n v2 signature \n v2 nonce \n body.
    let mut parts = data.splitn(6, |b| *b == b'\n');
    let mut text = || parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let url = text().unwrap_or_default();
    let (v3_signature, v3_nonce, v2_signature, v2_nonce) = (text(), text(), text(), text());
    let body = parts.next().unwrap_or_default();
    let request = plivo::Request { url, v3_signature, v3_nonce, v2_signature, v2_nonce, body };
    // Both policies: the V2 path is only reached when V2-only requests are accepted.
    for policy in [plivo::V2Policy::Refuse, plivo::V2Policy::Accept] {
        let verifier = plivo::Verifier::new("my_auth_token").expect("a token").with_v2_policy(policy);
        let _ = verifier.verify(request, Timestamp::from_unix_seconds(1_700_000_000));
    }
});
