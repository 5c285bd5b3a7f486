//! Core cost per Telnyx delivery: `telnyx::Verifier::verify` (size check, headers, tolerance,
//! `verify_strict`, envelope and payload parsing) against a bare `verify_strict` over the same
//! bytes: the floor nothing can go under.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ed25519_dalek::{Signature, Signer, SigningKey};
use exactly_core::{telnyx, Timestamp};

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_bytes(&[42; 32]);
    let body = br#"{"data":{"record_type":"event","id":"bf6307bd-884d-4c1f-b6ea-c62b8c495d3c",
        "event_type":"message.received","occurred_at":"2026-11-30T10:00:00.000Z",
        "payload":{"id":"b301ed3f-1490-491f-995f-6e64e69674d4","record_type":"message","direction":"inbound",
        "type":"SMS","text":"Hello from the benchmark","from":{"phone_number":"+15550001111",
        "carrier":"T-Mobile USA","line_type":"Wireless"},"to":[{"phone_number":"+15550002222",
        "status":"webhook_delivered"}],"media":[],"encoding":"GSM-7","parts":1,"cost":null,"errors":[]}},
        "meta":{"attempt":1,"delivered_to":"https://example.com/webhooks/telnyx"}}"#;
    let timestamp = "1796032800";
    let mut message = format!("{timestamp}|").into_bytes();
    message.extend_from_slice(body);
    let signature = key.sign(&message);
    let signature_b64 = STANDARD.encode(signature.to_bytes());
    let verifier =
        telnyx::Verifier::from_base64_keys(&STANDARD.encode(key.verifying_key().as_bytes())).expect("a valid key");
    let verifying_key = key.verifying_key();
    let now = Timestamp::from_unix_seconds(1_796_032_800);

    let mut group = c.benchmark_group("telnyx");
    group.bench_function("bare_verify_strict", |b| {
        b.iter(|| {
            let mut m = Vec::with_capacity(timestamp.len() + 1 + body.len());
            m.extend_from_slice(timestamp.as_bytes());
            m.push(b'|');
            m.extend_from_slice(black_box(body));
            let sig = Signature::from_bytes(&signature.to_bytes());
            verifying_key.verify_strict(&m, &sig).expect("valid")
        })
    });
    group.bench_function("verify_and_parse", |b| {
        b.iter(|| {
            let headers = telnyx::Headers { signature: Some(&signature_b64), timestamp: Some(timestamp) };
            verifier.verify(headers, black_box(body), now).expect("valid")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
