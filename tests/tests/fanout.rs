//! An event to many endpoints (docs/contract.md §5, docs/deploy.md "Limits"): one inbound message
//! to an account with more endpoints than one queue send may carry reaches every endpoint once,
//! and a replay reaches each once more, with no send, batch or statement over Cloudflare's limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use exactly_tests::{lit, Customer, Worker};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] =
    &[("fanout::one_message_reaches_120_endpoints_once_and_a_replay_each_once_more", reaches_120_endpoints)];

/// 120 endpoints: more than one `sendBatch` takes (100 messages), on the shared worker.
fn reaches_120_endpoints(w: &Worker) {
    every_endpoint_once_then_once_more(w, 120);
}

/// 1,000 endpoints, on a worker of its own so the thousand attempts load no other test's worker
/// (one of the scale suite's, `make scale`).
pub fn reaches_1000_endpoints(_shared: &Worker) {
    // Dropped at the end, it fails the test if any call crossed a limit.
    let w = Worker::start();
    every_endpoint_once_then_once_more(&w, 1000);
}

/// Creates `n` endpoints subscribed to `message.received` on one account, sends it one inbound
/// message, and checks that each endpoint gets it once (one success, one `webhook-id`, each
/// request a recorded attempt); then replays the event and checks each gets it once more.
fn every_endpoint_once_then_once_more(w: &Worker, n: usize) {
    let c = w.new_customer("fan-out-wide");
    let tag = sim::random_hex();
    let paths = create_endpoints(w, &c, &tag, n);

    let carrier_id = format!("m-{}", sim::random_hex());
    let body = sim::telnyx::envelope(
        &format!("e-{}", sim::random_hex()),
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({"id": carrier_id, "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": c.number}],
               "text": "to every endpoint"}),
        1,
    );
    let a = w.deliver_telnyx(&body);
    assert_eq!(a.status, 200, "{}", a.body);
    let event = wait_every_path(w, &tag, &paths, 1);
    let event_ids: BTreeSet<&str> = event.values().map(String::as_str).collect();
    assert_eq!(event_ids.len(), 1, "one webhook-id for the one event: {event_ids:?}");
    let event_id = event_ids.into_iter().next().unwrap_or_default().to_owned();
    settled_once_each(w, &c, &event_id, n, 1);

    // A replay answers 2xx once its deliveries are written, however many there are.
    let a = w.call("POST", &format!("/v1/events/{event_id}/replay"), &c.key, None, &[]);
    assert_eq!(a.status, 202, "{}", a.body);
    assert_eq!(a.json()["deliveries"].as_array().map(Vec::len), Some(n), "{}", a.body);
    wait_every_path(w, &tag, &paths, 2);
    settled_once_each(w, &c, &event_id, n, 2);
}

/// Creates `n` endpoints at `/wide-{tag}/{i}` of the customer server, eight at a time; returns
/// their paths.
fn create_endpoints(w: &Worker, c: &Customer, tag: &str, n: usize) -> BTreeSet<String> {
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                w.endpoint_at(c, &format!("/wide-{tag}/{i}"), &["message.received"]);
            });
        }
    });
    (0..n).map(|i| format!("/wide-{tag}/{i}")).collect()
}

/// Waits until every path of `paths` received at least `at_least` deliveries; returns the
/// `webhook-id` each received.
fn wait_every_path(w: &Worker, tag: &str, paths: &BTreeSet<String>, at_least: usize) -> BTreeMap<String, String> {
    let prefix = format!("/wide-{tag}/");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeMap::new();
    let reached = w.eventually(Duration::from_secs(60), || {
        counts.clear();
        for r in w.customer.all().into_iter().filter(|r| r.path.starts_with(&prefix)) {
            *counts.entry(r.path.clone()).or_default() += 1;
            ids.insert(r.path.clone(), r.header("webhook-id").unwrap_or_default().to_owned());
        }
        paths.iter().all(|p| counts.get(p).is_some_and(|got| *got >= at_least))
    });
    let short = paths.iter().filter(|p| counts.get(*p).is_none_or(|got| *got < at_least)).count();
    assert!(reached, "{short} of {} endpoints received fewer than {at_least} deliveries", paths.len());
    ids
}

/// Once no delivery of `event_id` is pending, each of its `n` endpoints has exactly `each`
/// deliveries, every one succeeded once, and no endpoint received a request that is not a
/// recorded attempt.
fn settled_once_each(w: &Worker, c: &Customer, event_id: &str, n: usize, each: i64) {
    let pending = format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE event_id = {} AND status = 'pending'",
        lit(event_id)
    );
    assert!(w.eventually(Duration::from_secs(60), || w.count(&pending) == 0), "deliveries of {event_id} still pending");
    let rows = w.sql_for(
        &c.account,
        &format!(
            "SELECT d.endpoint_id, e.url, COUNT(DISTINCT d.id) AS deliveries,
                    SUM(d.status = 'succeeded') AS succeeded,
                    (SELECT COUNT(*) FROM webhook_attempts a JOIN webhook_deliveries x ON x.id = a.delivery_id
                     WHERE x.endpoint_id = d.endpoint_id) AS attempts,
                    (SELECT COUNT(*) FROM webhook_attempts a JOIN webhook_deliveries x ON x.id = a.delivery_id
                     WHERE x.endpoint_id = d.endpoint_id AND a.status_code BETWEEN 200 AND 299) AS successes
             FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
             WHERE d.event_id = {} GROUP BY d.endpoint_id",
            lit(event_id)
        ),
    );
    assert_eq!(rows.len(), n, "a delivery per endpoint");
    let received: BTreeMap<String, usize> = w.customer.all().into_iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.path).or_default() += 1;
        m
    });
    for row in &rows {
        let (deliveries, succeeded, successes) =
            (row["deliveries"].as_i64(), row["succeeded"].as_i64(), row["successes"].as_i64());
        assert_eq!((deliveries, succeeded, successes), (Some(each), Some(each), Some(each)), "{row}");
        let path = row["url"].as_str().and_then(|u| u.strip_prefix(&w.customer.base)).unwrap_or_default();
        let got = received.get(path).copied().unwrap_or(0) as i64;
        let attempts = row["attempts"].as_i64().unwrap_or(0);
        assert!(got >= each && got <= attempts, "{path}: {got} requests, {attempts} recorded attempts");
    }
}
