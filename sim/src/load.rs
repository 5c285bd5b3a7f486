//! A fixed-concurrency load of signed Telnyx deliveries, for the ingest benchmark.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

use serde_json::json;

use crate::api::Client;
use crate::telnyx::{envelope, Signer};

/// What one load run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measured {
    /// Requests sent.
    pub requests: usize,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Requests per second over the whole run.
    pub throughput_rps: f64,
    /// Answers that were not 200.
    pub errors: usize,
}

/// Sends `requests` deliveries with `concurrency` senders. With `duplicate`, every delivery
/// repeats one event id (`{prefix}-dup`); otherwise each has its own (`{prefix}-{i}`). The
/// event id also travels in `x-event-id` for workers that do not parse.
pub fn run(
    base: &str,
    signer: &Signer,
    prefix: &str,
    requests: usize,
    concurrency: usize,
    duplicate: bool,
) -> Measured {
    let client = Client::new(base);
    let next = AtomicUsize::new(0);
    let latencies = Mutex::new(Vec::with_capacity(requests));
    let errors = AtomicUsize::new(0);
    let started = Instant::now();
    thread::scope(|s| {
        for _ in 0..concurrency.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                let id = if duplicate { format!("{prefix}-dup") } else { format!("{prefix}-{i}") };
                let body = envelope(
                    &id,
                    "message.received",
                    "2026-11-30T10:00:00Z",
                    json!({
                        "id": format!("msg-{id}"), "direction": "inbound", "type": "SMS", "text": "benchmark",
                        "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": "+15550002222"}], "media": [],
                    }),
                    1,
                );
                let h = signer.sign(body.as_bytes(), crate::unix_now());
                let t = Instant::now();
                let a = client.post(
                    "/webhooks/telnyx",
                    &[
                        ("content-type", "application/json"),
                        ("telnyx-timestamp", &h.timestamp),
                        ("telnyx-signature-ed25519", &h.signature),
                        ("x-event-id", &id),
                    ],
                    body.as_bytes(),
                );
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if a.status != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut l) = latencies.lock() {
                    l.push(ms);
                }
            });
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let mut l = latencies.into_inner().unwrap_or_default();
    l.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| if l.is_empty() { 0.0 } else { l[(((l.len() - 1) as f64) * p).round() as usize] };
    Measured {
        requests,
        concurrency,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        throughput_rps: requests as f64 / wall.max(1e-9),
        errors: errors.load(Ordering::Relaxed),
    }
}
