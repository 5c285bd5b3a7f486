//! The carrier simulator: plays the carrier toward the worker (signed webhooks that misbehave on
//! request) for tests, benchmarks and users checking their own deployment.
//!
//! # Layout
//! - [`telnyx`]: a Telnyx webhook signer, envelope builder and sender.
//! - [`twilio`], [`plivo`]: signers for those carriers' form posts.
//! - [`chaos`]: the chaos scenario (the three carriers' facts, scheduled messages and cancels,
//!   calls whose hangup only reconciliation learns; duplicated, re-signed, reordered, in
//!   bursts) and its report of duplicate and missing effects.
//! - [`api`]: a small client of the worker's API.
//! - [`carrier`]: a fake Telnyx REST API that records every request and misbehaves on request.
//! - [`customer`]: a customer webhook endpoint that records deliveries and fails on request.
//! - [`load`]: a fixed-concurrency load of signed deliveries, for the benchmark.
//! - [`devkeys`]: reads the development signing keys that `make dev` writes to `.dev.keys`.

pub mod api;
pub mod carrier;
pub mod chaos;
pub mod customer;
pub mod dev;
pub mod devkeys;
pub mod facts;
pub mod listen;
pub mod load;
pub mod plivo;
pub mod telnyx;
pub mod twilio;

/// Seconds since the Unix epoch, from this machine's clock.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Milliseconds since the Unix epoch, from this machine's clock.
pub fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// 16 random bytes as lowercase hex, for unique event ids.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    // The OS generator does not fail on the machines this runs on; fall back to the clock.
    if getrandom::getrandom(&mut bytes).is_err() {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        bytes = nanos.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
