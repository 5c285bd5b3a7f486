//! One customer's endpoint never slows another's webhooks (docs/contract.md §6): a hung endpoint
//! with a long backlog beside a healthy one, the circuit breaker that holds the backlog and lets
//! it go oldest first once the endpoint answers, and a rate limit that holds many deliveries
//! without churning the queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use exactly_tests::{fresh_number, lit, Customer, Worker};
use serde_json::{json, Value};
use sim::customer::CustomerEndpoint;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "isolation::a_hung_endpoint_never_slows_another_accounts_webhooks",
        a_hung_endpoint_never_slows_another_accounts_webhooks,
    ),
    (
        "isolation::a_rate_limit_holds_a_backlog_without_churn_and_exactly",
        a_rate_limit_holds_a_backlog_without_churn_and_exactly,
    ),
    (
        "isolation::a_busy_endpoints_new_deliveries_wait_in_its_line_with_no_queue_message",
        a_busy_endpoints_new_deliveries_wait_in_its_line_with_no_queue_message,
    ),
    (
        "isolation::a_deleted_endpoints_line_is_failed_not_left_pending",
        a_deleted_endpoints_line_is_failed_not_left_pending,
    ),
    (
        "isolation::a_busy_endpoints_filter_settles_what_it_drops_at_once",
        a_busy_endpoints_filter_settles_what_it_drops_at_once,
    ),
    (
        "isolation::one_poison_event_type_leaves_the_endpoints_other_webhooks_flowing",
        one_poison_event_type_leaves_the_endpoints_other_webhooks_flowing,
    ),
    (
        "isolation::an_open_circuit_probes_with_a_delivery_that_has_not_failed_yet",
        an_open_circuit_probes_with_a_delivery_that_has_not_failed_yet,
    ),
];

/// Creates an endpoint of `c` at `path` of the test customer server with `extra` settings;
/// returns its id.
fn endpoint(w: &Worker, c: &Customer, path: &str, types: &[&str], extra: Value) -> String {
    endpoint_on(w, &w.customer.base, c, path, types, extra)
}

/// Like [`endpoint`], on the server at `base`.
fn endpoint_on(w: &Worker, base: &str, c: &Customer, path: &str, types: &[&str], extra: Value) -> String {
    let mut body = json!({"url": format!("{base}{path}"), "event_types": types});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let a = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    a.json()["id"].as_str().expect("id").to_owned()
}

fn shown(w: &Worker, c: &Customer, id: &str) -> Value {
    let a = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

/// How many of endpoint `id`'s deliveries meet `condition` (SQL over `webhook_deliveries`).
fn deliveries_where(w: &Worker, id: &str, condition: &str) -> i64 {
    w.count(&format!("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = {} AND {condition}", lit(id)))
}

/// `n` `endpoint.test` events for endpoint `id`: each one delivery to it, created in this order.
fn test_events(w: &Worker, c: &Customer, id: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let a = w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[]);
            assert_eq!(a.status, 202, "{}", a.body);
            a.json()["delivery_id"].as_str().expect("delivery_id").to_owned()
        })
        .collect()
}

/// The recorded attempts to endpoint `id`: (delivery, started at, latency, status), by start.
fn attempts(w: &Worker, id: &str) -> Vec<(String, i64, i64, Option<i64>)> {
    let rows = w.sql(&format!(
        "SELECT a.delivery_id, a.attempted_at, a.latency_ms, a.status_code FROM webhook_attempts a
         JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = {} ORDER BY a.attempted_at, a.id",
        lit(id)
    ));
    rows.iter()
        .map(|r| {
            let int = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r}"));
            (
                r["delivery_id"].as_str().unwrap().to_owned(),
                int("attempted_at"),
                int("latency_ms"),
                r["status_code"].as_i64(),
            )
        })
        .collect()
}

/// The most attempts that were in flight at once, from the worker's own record of each
/// attempt's start and latency.
fn most_in_flight(attempts: &[(String, i64, i64, Option<i64>)]) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for (_, at, latency, _) in attempts {
        edges.push((*at, 1));
        edges.push((at + latency, -1));
    }
    // An attempt that ends at the instant another starts was not beside it.
    edges.sort();
    let (mut now, mut most) = (0_i32, 0_i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The signals of `event_type` about endpoint `about` that reached `path`, by event id.
fn signals(w: &Worker, path: &str, event_type: &str, about: &str) -> BTreeSet<String> {
    w.customer
        .received(path)
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter(|v| v["type"] == event_type && v["data"]["endpoint_id"] == about)
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

/// Account A's endpoint accepts connections and never answers, with 120 deliveries pending;
/// account B's answers at once and gets a burst of inbound messages meanwhile. B's webhooks
/// arrive without waiting for any of A's attempts (a batch that waited would hold them until
/// A's attempts time out); A never has more than its in-flight limit of attempts at once; A's
/// circuit opens (visibly, with one signal), holds the backlog without spending its attempts,
/// and once A answers again closes (one signal) and delivers every event once, oldest first.
fn a_hung_endpoint_never_slows_another_accounts_webhooks(w: &Worker) {
    const BACKLOG: usize = 120;
    const MOST: usize = 5;
    const BURST: usize = 12;
    let (healthy, healthy_key) = w.create_account("healthy");
    let number = fresh_number();
    w.create_number(&healthy, &number, &[]);
    let healthy = Customer { account: healthy, key: healthy_key, number };
    let healthy_path = format!("/hook/healthy-{}", sim::random_hex());
    let healthy_id = endpoint(w, &healthy, &healthy_path, &["message.received"], json!({}));

    let hung = w.new_customer("hung");
    let watch_path = format!("/hook/watch-{}", sim::random_hex());
    endpoint(w, &hung, &watch_path, &["endpoint.circuit_opened", "endpoint.circuit_closed"], json!({}));
    // A's endpoint is a server of its own, as another customer's is.
    let server = CustomerEndpoint::start().expect("start A's endpoint");
    let hung_path = format!("/hook/hung-{}", sim::random_hex());
    let hung_id =
        endpoint_on(w, &server.base, &hung, &hung_path, &["message.received"], json!({"max_in_flight": MOST}));
    assert_eq!(shown(w, &hung, &hung_id)["max_in_flight"], MOST);
    server.hang(&hung_path);
    // B's burst goes as soon as A's first attempt hangs, while A's backlog is still growing.
    let (backlog, (burst_at, sent)) = std::thread::scope(|scope| {
        let burst = scope.spawn(|| {
            let hanging = w.eventually(Duration::from_secs(30), || !server.received(&hung_path).is_empty());
            assert!(hanging, "A's first attempt reached its endpoint");
            // This machine's clock, the one the worker records its attempts by.
            let burst_at = sim::unix_millis();
            // All at once: sent one after another, the burst took 7.2 s of the attempt timeout's
            // margin on a loaded machine (clean-clone run 87).
            let sent: BTreeMap<String, Instant> = std::thread::scope(|scope| {
                let sends: Vec<_> = (0..BURST)
                    .map(|_| {
                        scope.spawn(|| {
                            let at = Instant::now();
                            (inbound(w, &healthy, "beside a hung neighbour"), at)
                        })
                    })
                    .collect();
                sends.into_iter().map(|s| s.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
            });
            (burst_at, sent)
        });
        let backlog = test_events(w, &hung, &hung_id, BACKLOG);
        (backlog, burst.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    let arrived = w.eventually(Duration::from_secs(60), || w.customer.received(&healthy_path).len() >= BURST);
    assert!(arrived, "B's webhooks arrived");
    let mut waits: Vec<Duration> = w
        .customer
        .received(&healthy_path)
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_str(&r.body).unwrap();
            let carrier_id = body["data"]["carrier_message_id"].as_str().unwrap();
            r.arrived.duration_since(sent[carrier_id])
        })
        .collect();
    waits.sort();
    eprintln!(
        "isolation: B's time to webhook beside a hung endpoint: p50 {:.2} s, max {:.2} s ({BURST} webhooks)",
        waits[waits.len() / 2].as_secs_f64(),
        waits[waits.len() - 1].as_secs_f64()
    );
    // Waiting behind one of A's attempts would mean starting only once it ended: at its timeout,
    // TEST_ATTEMPT_TIMEOUT_SECS after it began. So B's attempts, in the worker's own record,
    // started before the first of A's attempts that hung when B's burst was sent gave up: all of
    // them would start after it if they waited behind it. Not each one: on a loaded machine a
    // message's processing and delivery alone took up to 4.4 and 4.3 s (run 87, no attempt
    // waiting for a place), so the last of twelve can end past the margin without waiting for A.
    let gave_up = w.eventually(Duration::from_secs(60), || !attempts(w, &hung_id).is_empty());
    assert!(gave_up, "the worker gave up on A's first attempt");
    let hanging_ended: Option<i64> = attempts(w, &hung_id)
        .iter()
        .filter(|(_, at, _, _)| *at <= burst_at)
        .map(|(_, at, latency, _)| at + latency)
        .min();
    let hanging_ended = hanging_ended.expect("an attempt of A's began before B's burst");
    eprintln!("isolation: A's first attempt gave up {} ms after B's burst began", hanging_ended - burst_at);
    // A request arrives before its answer reaches the worker, which records the attempt after.
    // Each of B's deliveries' first attempt: one whose 2xx reached the worker after its timeout
    // is rightly tried again, and that retry is not what this measures.
    let mut starts: BTreeMap<String, i64> = BTreeMap::new();
    let recorded = w.eventually(Duration::from_secs(60), || {
        starts = BTreeMap::new();
        for (delivery, at, _, _) in attempts(w, &healthy_id) {
            starts.entry(delivery).or_insert(at);
        }
        starts.len() >= BURST
    });
    assert!(recorded && starts.len() == BURST, "an attempt for each of B's webhooks: {starts:?}");
    let mut ordered: Vec<i64> = starts.values().copied().collect();
    ordered.sort();
    assert!(
        ordered[BURST / 2] < hanging_ended,
        "most of B's attempts started before A's hanging attempt ended at {hanging_ended}: {starts:?}"
    );

    // A's circuit opens once its attempts time out; the backlog waits in its line, visibly.
    let mut seen = Value::Null;
    let opened = w.eventually(Duration::from_secs(60), || {
        seen = shown(w, &hung, &hung_id);
        seen["circuit"] != "closed"
    });
    assert!(opened, "A's circuit opened: {seen}");
    assert!(seen["next_probe_at"].is_string(), "{seen}");
    let held = w.eventually(Duration::from_secs(30), || shown(w, &hung, &hung_id)["held_count"].as_u64() > Some(0));
    assert!(held, "the backlog waits in A's line: {}", shown(w, &hung, &hung_id));
    let spent = deliveries_where(w, &hung_id, "attempts > 0");
    assert!(spent < BACKLOG as i64 / 2, "an open circuit spends no attempts of what it holds: {spent} of {BACKLOG}");

    // A answers again: its probes succeed, the circuit closes, the backlog arrives.
    server.let_go(&hung_path);
    let settled = w.eventually(Duration::from_secs(120), || {
        deliveries_where(w, &hung_id, "status = 'succeeded'") == BACKLOG as i64
    });
    assert!(settled, "every held delivery succeeded: {}", shown(w, &hung, &hung_id));
    let closed = w.eventually(Duration::from_secs(30), || {
        signals(w, &watch_path, "endpoint.circuit_closed", &hung_id).len() == 1
    });
    assert!(closed, "endpoint.circuit_closed reached A's watcher");
    let after = shown(w, &hung, &hung_id);
    assert_eq!((after["circuit"].as_str(), after["held_count"].as_u64()), (Some("closed"), Some(0)), "{after}");
    assert_eq!(signals(w, &watch_path, "endpoint.circuit_opened", &hung_id).len(), 1, "opened once");
    assert_eq!(signals(w, &watch_path, "endpoint.circuit_closed", &hung_id).len(), 1, "closed once");

    // Every event exactly once (a request the worker gave up on is a recorded attempt), never
    // more than MOST at once, and oldest first: the line is drained in creation order, so a
    // delivery's first success comes at most MOST places from its place in the backlog.
    let record = attempts(w, &hung_id);
    assert!(server.received(&hung_path).len() <= record.len(), "every request A received is a recorded attempt");
    let mut succeeded: BTreeMap<&str, usize> = BTreeMap::new();
    for (delivery, _, _, status) in &record {
        if status.is_some_and(|s| (200..300).contains(&s)) {
            *succeeded.entry(delivery.as_str()).or_default() += 1;
        }
    }
    assert!(succeeded.len() == BACKLOG && succeeded.values().all(|n| *n == 1), "each of A's events succeeded once");
    assert!(most_in_flight(&record) <= MOST, "at most {MOST} in flight: {}", most_in_flight(&record));
    // Oldest first: a delivery that waited in the line from before its first attempt is taken
    // from it in creation order, so its success comes at most a few places (the in-flight window)
    // from its place among them. A delivery attempted before the circuit closed is left out: its
    // retry comes on its own schedule (seen: a timed-out attempt's retry, due a second after the
    // close, arriving behind fifteen younger ones).
    let first_try: Vec<&str> =
        backlog.iter().filter(|d| record.iter().filter(|(id, ..)| id == *d).count() == 1).map(String::as_str).collect();
    let mut firsts: Vec<&str> = Vec::new();
    for (delivery, _, _, status) in &record {
        let ok = status.is_some_and(|s| (200..300).contains(&s));
        if ok && first_try.contains(&delivery.as_str()) && !firsts.contains(&delivery.as_str()) {
            firsts.push(delivery);
        }
    }
    assert!(firsts.len() >= BACKLOG / 2, "most of the backlog waited in the line: {}", firsts.len());
    for (place, delivery) in firsts.iter().enumerate() {
        let rank = first_try.iter().position(|d| d == delivery).expect("a delivery of the backlog");
        assert!(rank.abs_diff(place) <= 2 * MOST, "{delivery}: created {rank}th, first delivered {place}th");
    }
    // B never noticed: its circuit stayed closed and each of its events arrived once.
    assert_eq!(shown(w, &healthy, &healthy_id)["circuit"], "closed");
    assert_eq!(w.sent_as_recorded(&healthy_id, &healthy_path), BURST);
}

/// An endpoint limited to 3 a second (333⅓ ms apart, a rate that does not divide 1000) holds
/// 24 deliveries while paused and is resumed: every one arrives once, no two attempts start less
/// than 333⅓ ms apart in the worker's record, and the backlog waits in the endpoint's line
/// rather than in the queue: each delivery is carried by a few queue messages, not one every
/// second while it waits.
fn a_rate_limit_holds_a_backlog_without_churn_and_exactly(w: &Worker) {
    const BACKLOG: usize = 24;
    let c = w.new_customer("limited");
    let path = format!("/hook/limited-{}", sim::random_hex());
    let id = endpoint(w, &c, &path, &["message.received"], json!({"rate_limit_per_second": 3}));
    let patch = |change: Value| {
        let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&change), &[]);
        assert_eq!(a.status, 200, "{change}: {}", a.body);
        a.json()
    };
    patch(json!({"paused": true}));
    // A test event for a paused endpoint is held at once: no queue message carries it.
    let held = test_events(w, &c, &id, BACKLOG);
    assert_eq!(shown(w, &c, &id)["held_count"], BACKLOG);
    patch(json!({"paused": false}));
    let done =
        w.eventually(Duration::from_secs(60), || deliveries_where(w, &id, "status = 'succeeded'") == BACKLOG as i64);
    assert!(done, "every delivery succeeded: {}", shown(w, &c, &id));
    assert_eq!(w.sent_as_recorded(&id, &path), BACKLOG);
    let record = attempts(w, &id);
    let starts: Vec<i64> = record.iter().map(|(_, at, _, _)| *at).collect();
    for pair in starts.windows(2) {
        assert!(3 * (pair[1] - pair[0]) >= 1000, "attempts 333⅓ ms apart at least: {starts:?}");
    }
    // Every queue message that carried one of these deliveries logged a line about it, and so
    // did each attempt taken from the line without a message: a few each in all. A delivery
    // re-enqueued while it waited for its turn would log one every second or two, for 8 s.
    let lines: usize = held.iter().map(|d| w.job_lines(d)).sum();
    assert!(lines <= 2 * BACKLOG, "{lines} job lines for {BACKLOG} deliveries held for 8 s");
}

/// Sends one signed `message.received` to `c`'s number; returns its carrier message id.
fn inbound(w: &Worker, c: &Customer, text: &str) -> String {
    let carrier_id = format!("m-{}", sim::random_hex());
    let body = sim::telnyx::envelope(
        &format!("e-{}", sim::random_hex()),
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({"id": carrier_id, "from": {"phone_number": "+15559990000"},
               "to": [{"phone_number": c.number}], "text": text}),
        1,
    );
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    carrier_id
}

/// Makes requests on `path` of the test customer server hang, sends `c` an inbound message
/// `text`, and waits until its webhook reaches `path` (and hangs there).
fn first_webhook_hangs(w: &Worker, c: &Customer, path: &str, text: &str) {
    w.customer.hang(path);
    inbound(w, c, text);
    let hanging = w.eventually(Duration::from_secs(30), || !w.customer.received(path).is_empty());
    assert!(hanging, "the first webhook reached the endpoint");
}

/// An endpoint that takes one attempt at a time is busy with a message's webhook (its request
/// hangs) while more messages arrive: their deliveries go into its line in the batch that writes
/// them, with no queue message to find the endpoint full, and once it answers they arrive once
/// each, oldest first, each taken from the line.
///
/// The first attempt has to be in flight while the others are written: it gives up after
/// TEST_ATTEMPT_TIMEOUT_SECS, and on a worker whose jobs queue is busy with other tests the six
/// messages may take longer than that to be processed. Such a try shows nothing about the line
/// (the endpoint was free again), so it is let go and tried afresh on a new endpoint.
fn a_busy_endpoints_new_deliveries_wait_in_its_line_with_no_queue_message(w: &Worker) {
    const BEHIND: usize = 6;
    const TRIES: usize = 3;
    let c = w.new_customer("busy");
    for _ in 0..TRIES {
        let path = format!("/hook/busy-{}", sim::random_hex());
        let id = endpoint(w, &c, &path, &["message.received"], json!({"max_in_flight": 1}));
        if busy_endpoint_line(w, &c, &id, &path, BEHIND) {
            return;
        }
        eprintln!("isolation: {id}'s first attempt gave up before the messages behind it were written; again");
    }
    panic!("in {TRIES} tries, the first attempt never stayed in flight while {BEHIND} messages were processed");
}

/// One try of [`a_busy_endpoints_new_deliveries_wait_in_its_line_with_no_queue_message`] on
/// endpoint `id` at `path`; false when its first attempt gave up too soon to show anything.
fn busy_endpoint_line(w: &Worker, c: &Customer, id: &str, path: &str, behind: usize) -> bool {
    first_webhook_hangs(w, c, path, "the first, whose webhook hangs");
    for n in 0..behind {
        inbound(w, c, &format!("behind it, {n}"));
    }
    let deliveries = |extra: &str| {
        w.sql(&format!(
            "SELECT id, waiting, attempts FROM webhook_deliveries WHERE endpoint_id = {} {extra}
             ORDER BY created_at, id",
            lit(id)
        ))
    };
    // Every later delivery written, and waiting in the line unattempted (a wake of the line, by
    // another test's cron run, leaves it as it is while the endpoint is full), while the first
    // attempt hangs.
    let in_line = w.eventually(Duration::from_secs(60), || {
        !attempts(w, id).is_empty() || deliveries("AND waiting = 1 AND attempts = 0").len() == behind
    });
    if !attempts(w, id).is_empty() {
        w.customer.let_go(path);
        return false;
    }
    assert!(in_line, "the later deliveries wait in the line, unattempted: {:?}", deliveries(""));
    assert_eq!(deliveries("").len(), behind + 1, "one delivery per message: {:?}", deliveries(""));
    let later: Vec<String> = deliveries("").iter().skip(1).map(|r| r["id"].as_str().unwrap().to_owned()).collect();
    w.customer.let_go(path);
    let done = w
        .eventually(Duration::from_secs(60), || deliveries_where(w, id, "status = 'succeeded'") == (behind + 1) as i64);
    assert!(done, "every delivery succeeded: {}", shown(w, c, id));
    assert_eq!(w.sent_as_recorded(id, path), behind + 1);
    let record = attempts(w, id);
    assert_eq!(most_in_flight(&record), 1, "one attempt at a time");
    // No queue message carried them to find the endpoint full: each delivery's job lines are its
    // one attempt, taken from the line, and whatever a wake of the line caused. Another test's
    // cron run wakes every line with deliveries waiting. A wake's take, like an ending attempt's,
    // claims the oldest in line in the same statement when the endpoint has room and takes
    // nothing when it is full, so neither logs "endpoint busy"; only a delivery taken without its
    // claim and then refused by the claim would. A wake of this endpoint stays under two such
    // lines (there are none on a quiet worker), where a queue message each would log one per
    // delivery.
    // A delivery's job logs its attempt after recording it: wait for each line.
    let logged = w.eventually(Duration::from_secs(60), || later.iter().all(|d| w.job_outcomes(d, "delivered") >= 1));
    assert!(logged, "each later delivery's attempt logged");
    let busy: usize = later.iter().map(|d| w.job_outcomes(d, "waiting: endpoint busy")).sum();
    let wakes = w.log_lines(&[&format!("\"wake\":\"{id}\"")]);
    assert!(busy <= 2 * wakes, "{busy} deliveries found the endpoint full, with {wakes} wakes of its line");
    for d in &later {
        assert_eq!(w.job_outcomes(d, "delivered"), 1, "{d}: one attempt, taken from the line");
    }
    // Oldest first. A wake can take the next delivery in the instant between an attempt's end
    // taking the oldest out of the line and claiming it, and send it first; with no wake, the
    // order is the line's.
    let order: Vec<&str> = record.iter().skip(1).map(|(d, ..)| d.as_str()).collect();
    if wakes == 0 {
        assert_eq!(order, later.iter().map(String::as_str).collect::<Vec<_>>(), "taken from the line in order");
    }
    true
}

/// An endpoint is deleted while deliveries wait in its line, and the attempt in flight ends:
/// the chain that would take the next fails it and stops, and the sweeper wakes the line of the
/// deleted endpoint too, so every delivery left in it fails ("the endpoint was deleted") rather
/// than staying pending for ever.
fn a_deleted_endpoints_line_is_failed_not_left_pending(w: &Worker) {
    const EVENTS: usize = 4;
    let c = w.new_customer("deleted-line");
    let path = format!("/hook/deleted-line-{}", sim::random_hex());
    let id = endpoint(w, &c, &path, &["message.received"], json!({"max_in_flight": 1}));
    w.customer.hang(&path);
    let deliveries = test_events(w, &c, &id, EVENTS);
    let waiting = |w: &Worker| deliveries_where(w, &id, "waiting = 1 AND status = 'pending'");
    let queued = w.eventually(Duration::from_secs(60), || !w.customer.received(&path).is_empty() && waiting(w) >= 2);
    assert!(queued, "one attempt hangs and deliveries wait in the line: {}", shown(w, &c, &id));
    assert_eq!(w.call("DELETE", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).status, 204);
    w.customer.let_go(&path);
    let pending = |w: &Worker| deliveries_where(w, &id, "status = 'pending'");
    let settled = w.eventually(Duration::from_secs(90), || {
        assert_eq!(w.cron().status, 200);
        pending(w) == 0
    });
    assert!(settled, "{} deliveries of the deleted endpoint still pending", pending(w));
    let failed = deliveries_where(w, &id, "status = 'failed' AND last_error = 'the endpoint was deleted'");
    let succeeded = deliveries_where(w, &id, "status = 'succeeded'");
    assert_eq!(failed + succeeded, EVENTS as i64, "each failed as deleted or had succeeded: {deliveries:?}");
    assert!(failed >= 1, "the deliveries that waited in the line failed: {failed}");
}

/// A busy endpoint with a filter: while its one attempt hangs, the messages its filter drops are
/// settled `filtered` at once by their own queue messages, not put in the line to wait for the
/// attempt to end. (Tried afresh, as the busy test above, when the first attempt gives up too
/// soon to show it.)
fn a_busy_endpoints_filter_settles_what_it_drops_at_once(w: &Worker) {
    const DROPPED: usize = 3;
    const TRIES: usize = 3;
    let c = w.new_customer("busy-filter");
    for _ in 0..TRIES {
        let path = format!("/hook/busy-filter-{}", sim::random_hex());
        let filter = json!({"max_in_flight": 1, "filter": "data.text = \"keep\""});
        let id = endpoint(w, &c, &path, &["message.received"], filter);
        first_webhook_hangs(w, &c, &path, "keep");
        for _ in 0..DROPPED {
            inbound(w, &c, "drop");
        }
        let filtered = |w: &Worker| deliveries_where(w, &id, "status = 'filtered'");
        let in_line = |w: &Worker| deliveries_where(w, &id, "status = 'pending' AND waiting = 1");
        let mut waited = 0;
        let settled = w.eventually(Duration::from_secs(60), || {
            if !attempts(w, &id).is_empty() {
                return true;
            }
            waited = in_line(w);
            waited > 0 || filtered(w) == DROPPED as i64
        });
        let still_hanging = attempts(w, &id).is_empty();
        w.customer.let_go(&path);
        assert_eq!(waited, 0, "deliveries the filter drops waited in the busy endpoint's line");
        if !still_hanging {
            eprintln!("isolation: {id}'s first attempt gave up before the dropped messages were processed; again");
            continue;
        }
        assert!(settled, "the dropped messages were settled while the attempt hung: {}", shown(w, &c, &id));
        assert_eq!(shown(w, &c, &id)["held_count"], 0, "nothing the filter drops waits in the line");
        return;
    }
    panic!("in {TRIES} tries, the first attempt never stayed in flight while {DROPPED} messages were processed");
}

/// An ordered endpoint whose handler for one event type is broken (it answers 500 to every
/// `message.sent`) and that answers everything else, beside healthy traffic (three inbound
/// messages before each message it refuses): each refused event is retried on its schedule
/// until it is spent and skipped, and the circuit never opens (a retry failing again says
/// nothing new of the endpoint), so every other webhook goes as it comes, none held behind a
/// probe.
fn one_poison_event_type_leaves_the_endpoints_other_webhooks_flowing(w: &Worker) {
    let c = w.new_customer("poison");
    let path = format!("/hook/poison-{}", sim::random_hex());
    w.customer.refuse_bodies_with(&path, &["\"type\":\"message.sent\""]);
    let types = ["message.received", "message.sent"];
    let id = endpoint(w, &c, &path, &types, json!({"ordering": "resource"}));
    let run = sim::random_hex();
    let healthy = |n: usize| {
        let got = w.customer.received(&path);
        got.iter().filter(|r| r.body.contains(&run) && (200..300).contains(&r.answered)).count() >= n
    };
    for round in 0..4 {
        for i in 0..3 {
            inbound(w, &c, &format!("healthy {round}.{i} {run}"));
        }
        let went = w.eventually(Duration::from_secs(60), || healthy(3 * (round + 1)));
        assert!(went, "round {round}: the healthy webhooks went: {}", shown(w, &c, &id));
        let body = json!({"from": c.number, "to": "+15559990000", "text": format!("poison {round}")});
        let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &[]);
        assert_eq!(a.status, 201, "{}", a.body);
        let spent = w.eventually(Duration::from_secs(120), || {
            deliveries_where(w, &id, "status = 'failed' AND attempts >= 8") == i64::try_from(round + 1).unwrap_or(0)
        });
        assert!(spent, "round {round}: message.sent retried until spent: {}", shown(w, &c, &id));
        let now = shown(w, &c, &id);
        assert_eq!(now["circuit"], "closed", "round {round}: the circuit stays closed: {now}");
    }
    let opened = w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE type = 'endpoint.circuit_opened' AND payload LIKE {}",
        lit(&format!("%{id}%"))
    ));
    assert_eq!(opened, 0, "the circuit never opened");
}

/// An endpoint that answers 500 to every `message.sent` and 200 to everything else, its circuit
/// opened by five such first failures: while it is open the refused events' retries wait in its
/// line, older than anything that comes after. A probe is a delivery that has not failed yet
/// where one waits, so the inbound messages that arrive meanwhile are the probes: they succeed,
/// close the circuit and arrive, instead of waiting while the refused retries fail the probe
/// again and again (each failure reopening the circuit for longer). Only an attempt claimed
/// before the first inbound delivery entered the line may be a refused one.
fn an_open_circuit_probes_with_a_delivery_that_has_not_failed_yet(w: &Worker) {
    let c = w.new_customer("probe-fresh");
    let path = format!("/hook/probe-{}", sim::random_hex());
    w.customer.refuse_bodies_with(&path, &["\"type\":\"message.sent\""]);
    let id = endpoint(w, &c, &path, &["message.received", "message.sent"], json!({}));
    for i in 0..5 {
        let body = json!({"from": c.number, "to": "+15559990000", "text": format!("refused {i}")});
        let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &[]);
        assert_eq!(a.status, 201, "{}", a.body);
    }
    let opened = w.eventually(Duration::from_secs(60), || shown(w, &c, &id)["circuit"] != "closed");
    assert!(opened, "five first failures opened the circuit: {}", shown(w, &c, &id));
    let retries_wait = w.eventually(Duration::from_secs(60), || {
        deliveries_where(w, &id, "waiting = 1 AND status = 'pending' AND attempts > cut") > 0
    });
    assert!(retries_wait, "a refused retry waits in the line: {}", shown(w, &c, &id));
    let run = sim::random_hex();
    for i in 0..3 {
        inbound(w, &c, &format!("fresh {i} {run}"));
    }
    let delivered = w.eventually(Duration::from_secs(90), || {
        let got = w.customer.received(&path);
        got.iter().filter(|r| r.body.contains(&run) && (200..300).contains(&r.answered)).count() >= 3
    });
    // Every attempt at the endpoint, by start, each with whether its event is a refused one.
    let rows = w.sql(&format!(
        "SELECT o.type, a.attempted_at FROM webhook_attempts a
         JOIN webhook_deliveries d ON d.id = a.delivery_id JOIN outbound_events o ON o.id = d.event_id
         WHERE d.endpoint_id = {} ORDER BY a.attempted_at, a.id",
        lit(&id)
    ));
    let first_fresh = w.count(&format!(
        "SELECT MIN(d.created_at) AS n FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
         WHERE d.endpoint_id = {} AND o.type = 'message.received'",
        lit(&id)
    ));
    let refused_first = rows
        .iter()
        .filter(|r| r["attempted_at"].as_i64() >= Some(first_fresh))
        .take_while(|r| r["type"] == "message.sent")
        .count();
    assert!(
        delivered,
        "the inbound webhooks arrived; {refused_first} refused attempts went first: {}",
        shown(w, &c, &id)
    );
    assert!(refused_first <= 1, "{refused_first} refused retries probed before an inbound delivery that waited");
    let closed = w.eventually(Duration::from_secs(30), || shown(w, &c, &id)["circuit"] == "closed");
    assert!(closed, "the inbound probes closed the circuit: {}", shown(w, &c, &id));
}
