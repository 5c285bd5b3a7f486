//! The Standard Webhooks verifier on arbitrary ids, timestamps, signature lists, bodies and
//! clocks: a yes or a no, never a panic (`webhook-timestamp: -9223372036854775808` once
//! overflowed), and whatever it is given, what `sign` produced verifies at its own time.
#![no_main]

use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Input layout: 8 bytes of clock (i64 millis, little-endian), then
    // secret \n id \n webhook-timestamp \n webhook-signature \n body.
    let Some((clock, rest)) = data.split_first_chunk::<8>() else { return };
    let now = Timestamp::from_unix_millis(i64::from_le_bytes(*clock));
    let mut parts = rest.splitn(5, |b| *b == b'\n');
    let mut text = || parts.next().and_then(|p| std::str::from_utf8(p).ok()).unwrap_or_default();
    let (secret_text, id, timestamp, signatures) = (text(), text(), text(), text());
    let body = parts.next().unwrap_or_default();

    let secret =
        SigningSecret::parse(secret_text).unwrap_or_else(|_| SigningSecret::from_bytes(secret_text.as_bytes()));
    let _ = secret.verify(id, timestamp, signatures, body, now);
    let _ = secret.to_whsec();

    let signed = secret.sign(id, now, body);
    assert!(secret.verify(id, &now.unix_seconds().to_string(), &signed, body, now), "a fresh signature verifies");
    let listed = format!("{signatures} {signed}");
    assert!(secret.verify(id, &now.unix_seconds().to_string(), &listed, body, now), "any listed signature may match");
});
