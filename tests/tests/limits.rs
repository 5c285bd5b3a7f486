//! API rate limits (docs/contract.md §5, "Rate limits"): a key over its limit is answered 429
//! with `Retry-After`, and only that key: another account's key, the carriers' webhooks and the
//! work they cause go on.

use std::time::Duration;

use exactly_tests::{Worker, ADMIN_TOKEN, QUOTAS_PROBE, RATE_LIMIT_VAR};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "limits::a_burst_over_the_limit_is_answered_429_and_slows_no_one_else",
        a_burst_over_the_limit_is_answered_429_and_slows_no_one_else,
    ),
    (
        "limits::guessed_tokens_are_limited_by_address_and_a_known_key_there_is_still_served",
        guessed_tokens_are_limited_by_address_and_a_known_key_there_is_still_served,
    ),
    (
        "limits::the_guard_lets_an_invocations_thousandth_query_through_and_refuses_the_next",
        the_guard_lets_an_invocations_thousandth_query_through_and_refuses_the_next,
    ),
    (
        "limits::the_guard_reads_each_statements_time_as_d1_measures_it",
        the_guard_reads_each_statements_time_as_d1_measures_it,
    ),
];

/// The limit of the test's worker, requests a minute per key.
const LIMIT: usize = 20;
/// Requests in a burst: a burst sent within a minute falls in at most two of the limiter's
/// minutes, so at most `2 * LIMIT` pass and at least `BURST - 2 * LIMIT` are refused, wherever the
/// minute turns ([`windows`] for a burst that a loaded machine stretches longer).
const BURST: usize = 45;

/// How many of the limiter's windows a burst that took `elapsed` can fall in, wherever their
/// edges are: two within a window's length, one more for each length past it.
fn windows(elapsed: std::time::Duration) -> usize {
    let length = exactly_edge::api::limits::WINDOW_SECS.unsigned_abs();
    usize::try_from(elapsed.as_secs() / length).unwrap_or(usize::MAX).saturating_add(2)
}

/// (status, Retry-After) of a GET; status 0 when no answer came back (the local dev proxy closes
/// a connection unanswered now and then under load). Sent once: the limiter may have counted a
/// request whose answer was lost, so a burst counts those apart instead of sending them again.
fn get(w: &Worker, path: &str, token: &str) -> (u16, Option<u64>) {
    get_from(w, path, Some(token), None)
}

/// [`get`] with or without a token, from a client address (`cf-connecting-ip`) when one is given.
fn get_from(w: &Worker, path: &str, token: Option<&str>, address: Option<&str>) -> (u16, Option<u64>) {
    let mut request = ureq::get(&format!("{}{path}", w.base)).timeout(sim::api::TIMEOUT);
    if let Some(token) = token {
        request = request.set("authorization", &format!("Bearer {token}"));
    }
    if let Some(address) = address {
        request = request.set("cf-connecting-ip", address);
    }
    let answer = request.call();
    match answer {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.header("retry-after").and_then(|v| v.parse().ok())),
        Err(e) => {
            eprintln!("GET {path}: no answer: {e}");
            (0, None)
        }
    }
}

/// A burst from one key, then from the admin token: each passes between `LIMIT` and `2 * LIMIT`
/// requests and refuses the rest with 429 `rate_limited` and a `Retry-After` of at most a minute.
/// Meanwhile another account's key is answered, and every carrier webhook is accepted and its
/// message delivered to the account's endpoint. A portal session's burst leaves its account's
/// full key served.
fn a_burst_over_the_limit_is_answered_429_and_slows_no_one_else(_shared: &Worker) {
    let w = Worker::start_with(&[(RATE_LIMIT_VAR, &LIMIT.to_string())]);
    let noisy = w.new_customer("noisy");
    let quiet = w.new_customer("quiet");
    let (_, path) = {
        let path = format!("/hook/{}", sim::random_hex());
        (w.endpoint_at(&quiet, &path, &["message.received"]).0, path)
    };
    let (mut passed, mut refused, mut lost) = (0, 0, 0);
    let mut carrier_ids = Vec::new();
    let began = std::time::Instant::now();
    for n in 0..BURST {
        match get(&w, "/v1/usage", &noisy.key) {
            (200, _) => passed += 1,
            (429, Some(wait)) if (1..=60).contains(&wait) => refused += 1,
            (0, _) => lost += 1,
            other => panic!("request {n}: {other:?}"),
        }
        // The carrier keeps delivering to the quiet account's number throughout.
        if n % 5 == 0 {
            let carrier_id = format!("m-{}", sim::random_hex());
            let body =
                exactly_tests::telnyx_inbound(&format!("e-{}", sim::random_hex()), &carrier_id, &quiet.number, "hi");
            assert_eq!(w.deliver_telnyx(&body).status, 200, "carrier webhooks are never limited");
            carrier_ids.push(carrier_id);
        }
    }
    // A request whose answer was lost may or may not have been counted.
    let most = windows(began.elapsed()) * LIMIT;
    assert!(passed <= most && passed + lost >= LIMIT, "{passed} of {BURST} passed (at most {most}), {lost} unanswered");
    assert_eq!(passed + refused + lost, BURST);
    assert!(lost <= 2, "{lost} of {BURST} unanswered");
    let a = w.call("GET", "/v1/usage", &noisy.key, None, &[]);
    if a.status == 429 {
        assert_eq!(a.json()["error"]["code"], "rate_limited", "{}", a.body);
    }
    // Another key is counted on its own.
    assert_eq!(w.call("GET", "/v1/usage", &quiet.key, None, &[]).status, 200, "another account's key is not limited");
    let got = w.eventually(Duration::from_secs(60), || w.customer.received(&path).len() >= carrier_ids.len());
    assert!(got, "every inbound message reached the quiet account's endpoint");

    let (mut passed, mut refused, mut lost) = (0, 0, 0);
    let began = std::time::Instant::now();
    for n in 0..BURST {
        match get(&w, "/admin/accounts", ADMIN_TOKEN) {
            (200, _) => passed += 1,
            (429, Some(wait)) if (1..=60).contains(&wait) => refused += 1,
            (0, _) => lost += 1,
            other => panic!("admin request {n}: {other:?}"),
        }
    }
    // The admin token made a few calls (accounts, numbers) before the burst.
    let most = windows(began.elapsed()) * LIMIT;
    assert!(
        passed <= most && refused + lost >= BURST.saturating_sub(most) && lost <= 2,
        "admin: {passed} passed (at most {most}), {refused} refused, {lost} unanswered"
    );
    let body = json!({"from": quiet.number, "to": "+15559990000", "text": "still served"});
    assert_eq!(w.call("POST", "/v1/messages", &quiet.key, Some(&body), &[]).status, 201);

    // A read-only portal session, in an end user's hands, loops GETs past its limit: it uses up
    // only the sessions' share, and the account's full key is still served.
    let minted = w.call("POST", "/v1/portal_sessions", &quiet.key, Some(&json!({"read_only": true})), &[]);
    assert_eq!(minted.status, 201, "{}", minted.body);
    let session = minted.json()["token"].as_str().expect("a session token").to_owned();
    let mut refused = 0;
    for n in 0..BURST {
        match get(&w, "/v1/webhook_endpoints", &session) {
            (200, _) | (0, _) => {}
            (429, Some(_)) => refused += 1,
            other => panic!("portal request {n}: {other:?}"),
        }
    }
    assert!(refused > 0, "the portal session was limited");
    let body = json!({"from": quiet.number, "to": "+15559990000", "text": "served after the portal's burst"});
    let sent = w.call("POST", "/v1/messages", &quiet.key, Some(&body), &[]);
    assert_eq!(sent.status, 201, "the account's full key is served after a portal session's burst: {}", sent.body);
}

/// Made-up tokens from one address: each is counted against the address, not only against
/// itself, so past the limit the address's guesses (keys, portal sessions, the admin token, none
/// at all) are answered 429 with `Retry-After`, while a key that authenticated from that address
/// before is still served, and a guess from another address is still answered 401.
fn guessed_tokens_are_limited_by_address_and_a_known_key_there_is_still_served(_shared: &Worker) {
    let w = Worker::start_with(&[(RATE_LIMIT_VAR, &LIMIT.to_string())]);
    let customer = w.new_customer("shared-address");
    let (guesser, elsewhere) = ("203.0.113.7", "198.51.100.9");
    assert_eq!(get_from(&w, "/v1/usage", Some(&customer.key), Some(guesser)).0, 200);
    let (mut unauthorized, mut refused, mut lost) = (0, 0, 0);
    let began = std::time::Instant::now();
    // When the address's last refusal said its minute ends.
    let mut blocked_until = began;
    for n in 0..BURST {
        let guess = format!("sk_{}{}", sim::random_hex(), sim::random_hex());
        match get_from(&w, "/v1/usage", Some(&guess), Some(guesser)) {
            (401, _) => unauthorized += 1,
            (429, Some(wait)) if (1..=60).contains(&wait) => {
                refused += 1;
                blocked_until = std::time::Instant::now() + Duration::from_secs(wait);
            }
            (0, _) => lost += 1,
            other => panic!("guess {n}: {other:?}"),
        }
    }
    let most = windows(began.elapsed()) * LIMIT;
    assert!(
        unauthorized <= most && refused + lost >= BURST.saturating_sub(most) && lost <= 2,
        "{unauthorized} guesses answered 401 (at most {most}), {refused} refused, {lost} unanswered"
    );
    assert!(refused > 0, "the guesses were limited");
    // Whatever the address tries next, while its minute lasts, is refused before any read...
    let session_guess = format!("ps_{}.{}", sim::random_hex(), sim::random_hex());
    let next = [
        ("/v1/usage", Some("sk_0123456789abcdef")),
        ("/v1/usage", Some(session_guess.as_str())),
        ("/v1/usage", Some("not a key at all")),
        ("/v1/usage", None),
        ("/admin/accounts", Some("a-guessed-admin-token")),
    ];
    for (path, token) in next {
        let (status, wait) = get_from(&w, path, token, Some(guesser));
        if status == 401 {
            // Only once the minute the refusals named has ended (Retry-After is rounded up to a
            // second) is the address counted anew.
            let now = std::time::Instant::now();
            assert!(now + Duration::from_secs(2) >= blocked_until, "{path} {token:?}: 401 inside the refused minute");
            continue;
        }
        assert_eq!(status, 429, "{path} {token:?}");
        assert!(wait.is_some_and(|s| (1..=60).contains(&s)), "{path} {token:?}: Retry-After {wait:?}");
    }
    // ...but the customer's key, which authenticated from there, is served; and a guess from
    // another address is its own.
    assert_eq!(get_from(&w, "/v1/usage", Some(&customer.key), Some(guesser)).0, 200, "the known key is served");
    let guess = format!("sk_{}", sim::random_hex());
    assert_eq!(get_from(&w, "/v1/usage", Some(&guess), Some(elsewhere)).0, 401, "another address is not limited");
    let a = w.call("GET", "/admin/accounts", ADMIN_TOKEN, None, &[]);
    assert_eq!(a.status, 200, "the admin token, from the test's own address, is served: {}", a.body);
}

/// The test build's guard counts D1 queries per invocation against Cloudflare's 1,000
/// (docs/deploy.md, "Limits"): a request that runs 1,000 statements is served; one that runs
/// 1,001 is refused at the last, with the line that fails an end-to-end run. Two requests at once
/// each count their own.
///
/// In a worker of its own: local D1 runs one statement at a time for the whole worker, and these
/// 3,001 statements held every other test's D1 calls for 10 to 15 s (seen: no attempt of any
/// endpoint for that long, and work beside a `deliveries` invocation pushed past its 30 s).
fn the_guard_lets_an_invocations_thousandth_query_through_and_refuses_the_next(_shared: &Worker) {
    let w = &Worker::start();
    let crossings = || w.log().lines().filter(|l| l.contains("\"limit_crossed\"") && l.contains(QUOTAS_PROBE)).count();
    let before = crossings();
    // A probe whose connection wrangler's proxy closed unanswered is sent again (as in run 142):
    // another invocation, which counts its own queries and logs its own crossing.
    let sends = std::sync::atomic::AtomicUsize::new(0);
    let probe = |n: usize| {
        let body = json!({ "statements": n }).to_string();
        let send = || {
            sends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            w.post("/__e2e/quotas/probe", &[], body.as_bytes())
        };
        sim::api::sent_again(send, 3, Duration::from_millis(200), sim::api::unanswered)
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| probe(1_000));
        let b = s.spawn(|| probe(1_000));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!((a.status, b.status), (200, 200), "{} / {}", a.body, b.body);
    assert_eq!(a.json()["ran"], 1_000);
    assert_eq!(crossings(), before, "1,000 queries in each of two invocations cross nothing");
    sends.store(0, std::sync::atomic::Ordering::SeqCst);
    let over = probe(1_001);
    assert_eq!(over.status, 503, "{}", over.body);
    // One line for the invocation answered; one more at most for each sent before it unanswered.
    let invocations = sends.load(std::sync::atomic::Ordering::SeqCst);
    assert!(w.eventually(Duration::from_secs(10), || crossings() > before), "the crossing is logged");
    assert!(crossings() <= before + invocations, "the crossing is logged once an invocation: {invocations} sent");
    let line = w
        .log()
        .lines()
        .rev()
        .find(|l| l.contains("\"limit_crossed\"") && l.contains(QUOTAS_PROBE))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(
        line.contains("\"limit_crossed\":\"D1 queries per invocation\"")
            && line.contains("\"value\":1001")
            && line.contains("\"limit\":1000"),
        "{line}"
    );
}

/// The guard reads each D1 statement's time from D1's own measure (`meta.duration`), the figure
/// it holds against D1's 30 s (docs/deploy.md, "Limits"): a statement that counts to 2,000,000 in
/// SQL takes at least tens of milliseconds by that measure (more on a loaded machine, never less),
/// and one that counts to 1 is far under it. In a worker of its own, as the test above, so that
/// its long statement holds no other test's D1 calls.
fn the_guard_reads_each_statements_time_as_d1_measures_it(_shared: &Worker) {
    let w = &Worker::start();
    let probe = |rows: i64| {
        // It only reads: one whose connection wrangler's proxy closed unanswered is sent again
        // (run 142).
        let body = json!({ "statements": 1, "rows": rows }).to_string();
        let send = || w.post("/__e2e/quotas/probe", &[], body.as_bytes());
        let a = sim::api::sent_again(send, 3, Duration::from_millis(200), sim::api::unanswered);
        assert_eq!(a.status, 200, "{}", a.body);
        a.json()["longest_ms"].as_f64().unwrap_or(-1.0)
    };
    let long = probe(2_000_000);
    assert!(long >= 20.0, "a statement counting to 2,000,000 took {long} ms by D1's measure");
    let short = probe(1);
    assert!((0.0..long).contains(&short), "a statement counting to 1 took {short} ms, the long one {long} ms");
}
