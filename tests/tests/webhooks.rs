//! Customer webhooks (docs/contract.md §5, §6): signed per Standard Webhooks, retried, disabled, replayed.

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::Duration;

use exactly_core::webhook::{SigningSecret, EVENT_TYPES};
use exactly_core::Timestamp;
use exactly_tests::{
    fresh_number, lit, webhook_schema_problems, Answer, Customer, Worker, OPERATOR_PATH, OPERATOR_SECRET,
    TEST_ATTEMPT_TIMEOUT_SECS,
};
use serde_json::{json, Value};
use sim::customer::Received;

use crate::calls;
use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("webhooks::fails_twice_then_succeeds_with_one_webhook_id", fails_twice_then_succeeds_with_one_webhook_id),
    ("webhooks::gone_disables_the_endpoint", gone_disables_the_endpoint),
    (
        "webhooks::resuming_or_enabling_never_releases_an_attempt_in_flight",
        resuming_or_enabling_never_releases_an_attempt_in_flight,
    ),
    ("webhooks::hundred_consecutive_failures_disable_the_endpoint", hundred_consecutive_failures_disable_the_endpoint),
    (
        "webhooks::endpoints_get_only_their_types_and_disabled_ones_nothing",
        endpoints_get_only_their_types_and_disabled_ones_nothing,
    ),
    ("webhooks::one_event_reaches_each_of_its_endpoints_once", one_event_reaches_each_of_its_endpoints_once),
    ("webhooks::replay_sends_the_same_event_again", replay_sends_the_same_event_again),
    ("webhooks::private_endpoints_are_refused_in_production", private_endpoints_are_refused_in_production),
    ("webhooks::redirects_are_not_followed", redirects_are_not_followed),
    ("webhooks::retry_after_as_an_http_date_is_honoured", retry_after_as_an_http_date_is_honoured),
    ("webhooks::endpoint_management", endpoint_management),
    ("webhooks::every_route_is_served", every_route_is_served),
    ("webhooks::disabled_then_enabled_and_recovered_loses_nothing", disabled_then_enabled_and_recovered_loses_nothing),
    ("webhooks::paused_endpoint_holds_and_resume_delivers", paused_endpoint_holds_and_resume_delivers),
    ("webhooks::sequence_increases_per_resource", sequence_increases_per_resource),
    ("webhooks::test_event_attempts_and_history_are_visible", test_event_attempts_and_history_are_visible),
    ("webhooks::test_events_sent_at_once_are_each_delivered", test_events_sent_at_once_are_each_delivered),
    ("webhooks::an_attempt_keeps_the_first_kib_of_the_answer", an_attempt_keeps_the_first_kib_of_the_answer),
    ("webhooks::operational_signals_fire_once", operational_signals_fire_once),
    ("webhooks::rate_limit_spreads_deliveries_and_drops_none", rate_limit_spreads_deliveries_and_drops_none),
    ("webhooks::every_event_type_matches_its_openapi_schema", every_event_type_matches_its_openapi_schema),
    ("webhooks::stalled_endpoint_times_out_and_is_retried", stalled_endpoint_times_out_and_is_retried),
    (
        "webhooks::an_attempt_never_outlives_its_invocations_time_and_is_retried_under_its_id",
        an_attempt_never_outlives_its_invocation,
    ),
    (
        "webhooks::an_attempt_cut_short_by_its_invocation_spends_no_attempt",
        an_attempt_cut_short_by_its_invocation_spends_no_attempt,
    ),
    ("webhooks::backlog_high_fires_once_per_stuck_item", backlog_high_fires_once_per_stuck_item),
    (
        "webhooks::a_first_attempt_claimed_before_a_crash_is_swept_and_sent_once",
        a_first_attempt_claimed_before_a_crash_is_swept_and_sent_once,
    ),
];

/// Creates an endpoint at a fresh path of the test customer server; returns (id, path, secret).
fn endpoint(w: &Worker, c: &Customer, types: &[&str]) -> (String, String, String) {
    endpoint_at(w, c, &format!("/hook/{}", sim::random_hex()), types)
}

/// Like [`endpoint`], for an endpoint whose circuit never opens in the test worker (its URL has
/// the `no-breaker` marker): a test of the retry schedule, exhaustion or disabling, which an open
/// circuit would stretch over minutes.
fn endpoint_without_breaker(w: &Worker, c: &Customer, types: &[&str]) -> (String, String, String) {
    endpoint_at(w, c, &format!("/hook/no-breaker-{}", sim::random_hex()), types)
}

/// Creates an endpoint at `path` of the test customer server; returns (id, path, secret).
fn endpoint_at(w: &Worker, c: &Customer, path: &str, types: &[&str]) -> (String, String, String) {
    let (id, secret) = w.endpoint_at(c, path, types);
    (id, path.to_owned(), secret)
}

/// A Telnyx `message.received` envelope of carrier event `event_id`: message `carrier_id` from
/// +15559990000 to `to`, saying `text`.
fn inbound_body(event_id: &str, carrier_id: &str, to: &str, text: &str) -> String {
    sim::telnyx::envelope(
        event_id,
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({"id": carrier_id, "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": to}], "text": text}),
        1,
    )
}

fn inbound_sms(w: &Worker, c: &Customer) -> String {
    inbound_sms_answered(w, c).0
}

/// Like [`inbound_sms`], with the worker's answer, which says whether it enqueued a job.
fn inbound_sms_answered(w: &Worker, c: &Customer) -> (String, Answer) {
    let carrier_id = format!("m-{}", sim::random_hex());
    let body = inbound_body(&format!("e-{}", sim::random_hex()), &carrier_id, &c.number, "hook me");
    let a = w.deliver_telnyx(&body);
    assert_eq!(a.status, 200, "{}", a.body);
    (carrier_id, a)
}

/// The deliveries to endpoint `endpoint`, oldest first.
fn deliveries_to(w: &Worker, endpoint: &str) -> Vec<String> {
    let rows =
        w.sql(&format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {} ORDER BY created_at", lit(endpoint)));
    rows.iter().filter_map(|r| r["id"].as_str().map(str::to_owned)).collect()
}

/// Waits until every queue message of every delivery to `endpoint` has run: the `first` each
/// was enqueued with from outside (1 for an endpoint that was active when its event came or
/// that released it since; 0 for a delivery held and never released) and every retry its
/// attempts scheduled. Any job for it after that finds it settled, or held.
fn wait_deliveries_to(w: &Worker, endpoint: &str, first: usize) {
    let caused: Vec<(String, usize)> = deliveries_to(w, endpoint).into_iter().map(|d| (d, first)).collect();
    assert!(!caused.is_empty(), "no delivery to {endpoint}");
    w.wait_jobs(&caused);
}

/// Waits like [`wait_deliveries_to`] for every delivery (each enqueued once when its event was
/// written) of the events whose payload names `about`: the signals about an endpoint, a
/// delivery or a carrier event.
fn wait_deliveries_about(w: &Worker, about: &[&str]) {
    let names = about.iter().map(|a| format!("o.payload LIKE {}", lit(&format!("%{a}%")))).collect::<Vec<_>>();
    let rows = w.sql(&format!(
        "SELECT d.id FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id WHERE {}",
        names.join(" OR ")
    ));
    let caused: Vec<(String, usize)> =
        rows.iter().filter_map(|r| r["id"].as_str()).map(|d| (d.to_owned(), 1)).collect();
    assert!(!caused.is_empty(), "no delivery of any event about {about:?}");
    w.wait_jobs(&caused);
}

/// Waits until `path` of the test customer server received at least `n` deliveries; returns them.
pub fn wait_received(w: &Worker, path: &str, n: usize) -> Vec<Received> {
    let mut got = Vec::new();
    let ok = w.eventually(Duration::from_secs(60), || {
        got = w.customer.received(path);
        got.len() >= n
    });
    assert!(ok, "{path} received {} of {n} deliveries", got.len());
    got
}

/// Every one of `deliveries` verifies with the official Standard Webhooks library under `secret`.
fn verify_with_official_library(secret: &str, deliveries: &[Received]) {
    assert!(!deliveries.is_empty(), "nothing to verify");
    let verified = exactly_tests::verify_standard_webhooks(&[secret], deliveries)
        .unwrap_or_else(|report| panic!("standardwebhooks refused a delivery:\n{report}"));
    assert_eq!(verified, deliveries.len());
}

fn fails_twice_then_succeeds_with_one_webhook_id(w: &Worker) {
    let c = w.new_customer("hooks");
    let (endpoint_id, path, secret) = endpoint(w, &c, &["message.received"]);
    w.customer.script(&path, &[500, 503]);
    inbound_sms(w, &c);
    let got = wait_received(w, &path, 3);
    assert_eq!(got.iter().map(|r| r.answered).collect::<Vec<_>>(), vec![500, 503, 200]);
    let ids: Vec<&str> = got.iter().map(|r| r.header("webhook-id").unwrap()).collect();
    assert!(ids.iter().all(|id| *id == ids[0] && id.starts_with("evt_")), "one webhook-id: {ids:?}");
    let mut stamps: Vec<&str> = got.iter().map(|r| r.header("webhook-timestamp").unwrap()).collect();
    stamps.dedup();
    assert_eq!(stamps.len(), 3, "a fresh timestamp on every attempt");
    let key = SigningSecret::parse(&secret).unwrap();
    for r in &got {
        let now = Timestamp::from_unix_seconds(sim::unix_now());
        assert!(key.verify(
            ids[0],
            r.header("webhook-timestamp").unwrap(),
            r.header("webhook-signature").unwrap(),
            r.body.as_bytes(),
            now
        ));
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!((body["id"].as_str(), body["type"].as_str()), (Some(ids[0]), Some("message.received")));
        assert_eq!(body["data"]["text"], "hook me");
    }
    verify_with_official_library(&secret, &got);
    // The attempts are recorded, and the delivery that succeeded is never sent again: every
    // queue message of it (the first, and the retry each failure scheduled) has run.
    wait_deliveries_to(w, &endpoint_id, 1);
    assert_eq!(w.sent_as_recorded(&endpoint_id, &path), 1, "one success");
    let shown = w.call("GET", &format!("/v1/events/{}", ids[0]), &c.key, None, &[]).json();
    let delivery = &shown["deliveries"][0];
    assert_eq!(delivery["status"], "succeeded", "{shown}");
    let attempts = delivery["attempts"].as_array().unwrap();
    let codes: Vec<i64> = attempts.iter().filter_map(|a| a["status_code"].as_i64()).collect();
    assert_eq!(codes, vec![500, 503, 200], "{shown}");
    // An attempt that got no answer in time (which a loaded machine can cause) is recorded, and
    // retried like the others.
    let mut unanswered = attempts.iter().filter(|a| a["status_code"].is_null());
    assert!(unanswered.all(|a| a["error"].as_str().is_some_and(|e| e.contains("no answer within"))), "{shown}");
    assert!(delivery["attempts"][0]["next_attempt_at"].is_string());
    assert!(delivery["attempts"][0]["latency_ms"].is_i64());
    // The success ended the endpoint's failure streak. A delivery that succeeds at once to an
    // endpoint with no streak leaves the endpoint's row as it was.
    let read = || w.call("GET", &format!("/v1/webhook_endpoints/{endpoint_id}"), &c.key, None, &[]).json();
    let before = read();
    assert_eq!(before["consecutive_failures"], 0, "{before}");
    inbound_sms(w, &c);
    wait_received(w, &path, 4);
    wait_deliveries_to(w, &endpoint_id, 1);
    let after = read();
    assert_eq!(after["consecutive_failures"], 0, "{after}");
    assert_eq!(after["updated_at"], before["updated_at"], "a healthy endpoint is not written: {after}");
}

fn gone_disables_the_endpoint(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    w.customer.always(&path, 410);
    inbound_sms(w, &c);
    wait_received(w, &path, 1);
    let ok = w.eventually(Duration::from_secs(20), || {
        w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json()["enabled"] == false
    });
    assert!(ok, "410 disables the endpoint");
    let (_, after) = inbound_sms_answered(w, &c);
    // The refused delivery's job has run, and so has the new event's, which wrote its delivery
    // held by the disabled endpoint: nothing about this endpoint is due.
    let refused = deliveries_to(w, &id).remove(0);
    w.wait_jobs(&[(refused, 1)]);
    w.wait_jobs_of(&[&after]);
    w.sent_as_recorded(&id, &path);
    let answered = w.sql(&format!(
        "SELECT a.status_code FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.endpoint_id = {} AND a.status_code IS NOT NULL",
        lit(&id)
    ));
    assert_eq!(answered, vec![json!({"status_code": 410})], "no attempt after 410");
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert!(shown["disabled_reason"].as_str().unwrap_or("").contains("410"), "{shown}");
}

fn hundred_consecutive_failures_disable_the_endpoint(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint_without_breaker(w, &c, &["message.received"]);
    w.customer.always(&path, 500);
    // 13 events x 8 attempts on the short test schedule: more than 100 failures on offer.
    let answers: Vec<Answer> = (0..13).map(|_| inbound_sms_answered(w, &c).1).collect();
    let disabled = w.eventually(Duration::from_secs(90), || {
        w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json()["enabled"] == false
    });
    assert!(disabled, "100 consecutive failures disable the endpoint");
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert!(shown["consecutive_failures"].as_i64().unwrap() >= 100, "{shown}");
    assert!(shown["disabled_reason"].as_str().unwrap().contains("100 consecutive"), "{shown}");
    let attempts = w.count(&format!(
        "SELECT COUNT(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE
            d.endpoint_id = {}",
        lit(&id)
    ));
    assert!(attempts >= 100, "{attempts} attempts recorded");
    // Once disabled, new events create no deliveries and no requests. First every queue message
    // of the 13 deliveries (the first, and each retry scheduled) has run: an attempt in flight
    // when the endpoint was disabled has ended, and the later ones found it disabled.
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    wait_deliveries_to(w, &id, 1);
    let before = w.customer.received(&path).len();
    let (_, after) = inbound_sms_answered(w, &c);
    // The new event's job has run: whatever it wrote for this endpoint is held, not due.
    w.wait_jobs_of(&[&after]);
    assert_eq!(w.customer.received(&path).len(), before, "nothing is sent to a disabled endpoint");
}

fn endpoints_get_only_their_types_and_disabled_ones_nothing(w: &Worker) {
    let c = w.new_customer("hooks");
    let (received_id, received_path, _) = endpoint(w, &c, &["message.received"]);
    let (sent_id, sent_path, _) = endpoint(w, &c, &["message.sent"]);
    let (disabled, disabled_path, _) = endpoint(w, &c, &["message.received", "message.sent"]);
    let a =
        w.call("PATCH", &format!("/v1/webhook_endpoints/{disabled}"), &c.key, Some(&json!({"enabled": false})), &[]);
    assert_eq!((a.status, a.json()["enabled"].clone()), (200, json!(false)));
    let (_, inbound) = inbound_sms_answered(w, &c);
    let sent = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": "out"})),
        &[],
    );
    assert_eq!(sent.status, 201);
    let r = wait_received(w, &received_path, 1);
    let s = wait_received(w, &sent_path, 1);
    // Both events were written (the inbound's job and the send's dispatch job have run), and
    // every queue message of every delivery to the two active endpoints has run; what the
    // disabled one was given is held, never enqueued.
    w.wait_jobs_of(&[&inbound]);
    w.wait_jobs(&[(sent.json()["id"].as_str().unwrap_or_default().to_owned(), 1)]);
    wait_deliveries_to(w, &received_id, 1);
    wait_deliveries_to(w, &sent_id, 1);
    let types = |list: Vec<Received>| {
        list.iter()
            .map(|d| serde_json::from_str::<Value>(&d.body).unwrap()["type"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(types(w.customer.received(&received_path)), vec!["message.received"]);
    assert_eq!(types(w.customer.received(&sent_path)), vec!["message.sent"]);
    assert!(w.customer.received(&disabled_path).is_empty(), "a disabled endpoint gets nothing");
    let sent_event: Value = serde_json::from_str(&s[0].body).unwrap();
    assert_eq!(sent_event["data"]["id"], sent.json()["id"]);
    assert_eq!(sent_event["data"]["status"], "sent");
    drop(r);
}

/// One inbound message, delivered by its carrier twice and once more re-signed under a new event
/// id, to an account with three endpoints subscribed to it: the batch that writes its event
/// sends one delivery's first attempt itself and queues the others, and each endpoint gets the
/// event once, under one `webhook-id`.
fn one_event_reaches_each_of_its_endpoints_once(w: &Worker) {
    let c = w.new_customer("fan-out");
    let endpoints: Vec<(String, String, String)> = (0..3).map(|_| endpoint(w, &c, &["message.received"])).collect();
    let carrier_id = format!("m-{}", sim::random_hex());
    let body = inbound_body(&format!("e-{}", sim::random_hex()), &carrier_id, &c.number, "to all");
    let resigned = inbound_body(&format!("e-{}", sim::random_hex()), &carrier_id, &c.number, "to all");
    let answers: Vec<Answer> = [&body, &body, &resigned].iter().map(|body| w.deliver_telnyx(body)).collect();
    assert!(answers.iter().all(|a| a.status == 200), "{:?}", answers.iter().map(|a| &a.body).collect::<Vec<_>>());
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    let mut ids = BTreeSet::new();
    for (id, path, secret) in &endpoints {
        wait_deliveries_to(w, id, 1);
        let got = w.customer.received(path);
        assert_eq!(got.len(), 1, "{path} gets the event once");
        verify_with_official_library(secret, &got);
        ids.extend(got.iter().filter_map(|r| r.header("webhook-id").map(str::to_owned)));
    }
    assert_eq!(ids.len(), 1, "one webhook-id for the one event: {ids:?}");
    let rows = w.sql(&format!(
        "SELECT d.status, d.attempts FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
         JOIN messages m ON m.id = o.resource_id WHERE m.carrier_message_id = {}",
        lit(&carrier_id)
    ));
    assert_eq!(rows, vec![json!({"status": "succeeded", "attempts": 1}); 3], "one attempt each");
}

fn replay_sends_the_same_event_again(w: &Worker) {
    let c = w.new_customer("hooks");
    let (_, path, secret) = endpoint(w, &c, &["message.received"]);
    inbound_sms(w, &c);
    let first = wait_received(w, &path, 1);
    let event_id = first[0].header("webhook-id").unwrap().to_owned();
    let a = w.call("POST", &format!("/v1/events/{event_id}/replay"), &c.key, None, &[]);
    assert_eq!(a.status, 202, "{}", a.body);
    let got = wait_received(w, &path, 2);
    assert_eq!(got[1].header("webhook-id"), Some(event_id.as_str()), "a replay keeps the webhook-id");
    assert_eq!(got[1].body, got[0].body);
    verify_with_official_library(&secret, &got);
    let shown = w.call("GET", &format!("/v1/events/{event_id}"), &c.key, None, &[]).json();
    let deliveries = shown["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2, "{shown}");
    assert_eq!(deliveries.iter().map(|d| d["kind"].as_str().unwrap()).collect::<Vec<_>>(), vec!["initial", "replay"]);
    let ok = w.eventually(Duration::from_secs(10), || {
        let shown = w.call("GET", &format!("/v1/events/{event_id}"), &c.key, None, &[]).json();
        shown["deliveries"][1]["attempts"].as_array().map(Vec::len) == Some(1)
    });
    assert!(ok, "the replay's attempt is recorded");
    let other = w.new_customer("hooks");
    assert_eq!(w.call("POST", &format!("/v1/events/{event_id}/replay"), &other.key, None, &[]).status, 404);
}

fn private_endpoints_are_refused_in_production(_shared: &Worker) {
    let w = Worker::start_with(&[("ALLOW_PRIVATE_ENDPOINTS", "false")]);
    let c = w.new_customer("hooks");
    let create = |url: &str| w.try_endpoint(&c.key, url, &["message.received"]);
    for url in [
        "http://127.0.0.1:9/hook",
        "https://127.0.0.1/hook",
        "https://10.1.2.3/hook",
        "https://169.254.169.254/latest",
        "https://localhost/x",
        "http://example.com/hook",
        // Each reaches a private address once parsed the way fetch parses it.
        "https://169.254.169.254\\latest/meta-data",
        "https://127.0.0.%31/",
        "https://[::127.0.0.1]/",
        "https://[64:ff9b::a00:1]/",
        "https://0x7f.1/",
        "https://[::ffff:10.0.0.1]/",
        "https://metadata.google.internal/x",
        "https://nas.home.arpa/",
        "https://user:pw@example.com/",
    ] {
        let a = create(url);
        assert_eq!(a.status, 422, "{url}: {}", a.body);
        assert_eq!(a.json()["error"]["field"], "url", "{url}");
    }
    let ok = create("https://hooks.example.com/in");
    assert_eq!(ok.status, 201, "{}", ok.body);
    // A portal may be framed by a local page only where private endpoints are allowed.
    for (origin, status) in
        [("http://localhost:3000", 422), ("http://127.0.0.1", 422), ("https://app.example.com", 200)]
    {
        let a = w.call("PATCH", "/v1/account", &c.key, Some(&json!({ "portal_origins": [origin] })), &[]);
        assert_eq!(a.status, status, "{origin}: {}", a.body);
    }
    // What is stored is the parsed form: the text that was checked is the text fetch gets.
    let normalized = create("HTTPS://H%6Foks.Example.COM\\in");
    assert_eq!(
        (normalized.status, normalized.json()["url"].as_str()),
        (201, Some("https://hooks.example.com/in")),
        "{}",
        normalized.body
    );
    let id = ok.json()["id"].as_str().unwrap().to_owned();
    let patched = w.call(
        "PATCH",
        &format!("/v1/webhook_endpoints/{id}"),
        &c.key,
        Some(&json!({"url": "https://127.0.0.%31/"})),
        &[],
    );
    assert_eq!(patched.status, 422, "{}", patched.body);

    // A row written before the rule (here: by hand) is checked again before every attempt and
    // never sent to.
    w.sql(&format!("UPDATE webhook_endpoints SET url = 'https://127.0.0.%31/' WHERE id = {}", lit(&id)));
    w.sql(&format!("DELETE FROM webhook_endpoints WHERE id = {}", lit(normalized.json()["id"].as_str().unwrap())));
    inbound_sms(&w, &c);
    let refused = format!(
        "SELECT COUNT(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.endpoint_id = {} AND a.error LIKE 'endpoint URL refused%' AND a.status_code IS NULL",
        lit(&id)
    );
    assert!(
        w.eventually(Duration::from_secs(30), || w.count(&refused) >= 1),
        "the stored private URL is refused at delivery time"
    );
    let touched = w.call(
        "PATCH",
        &format!("/v1/webhook_endpoints/{id}"),
        &c.key,
        Some(&json!({"event_types": ["message.sent"]})),
        &[],
    );
    assert_eq!(touched.status, 422, "an unchanged private URL is refused on any update: {}", touched.body);
}

/// An endpoint that answers 302 elsewhere is not followed there: the attempt fails with the
/// status and the Location recorded, and the address it pointed at gets nothing.
fn redirects_are_not_followed(w: &Worker) {
    let c = w.new_customer("hooks");
    let (_, path, _) = endpoint(w, &c, &["message.received"]);
    let elsewhere = format!("/elsewhere/{}", sim::random_hex());
    let location = format!("{}{elsewhere}", w.customer.base);
    w.customer.always_with(&path, 302, &[("location", &location)]);
    inbound_sms(w, &c);
    let got = wait_received(w, &path, 2);
    assert!(got.iter().all(|r| r.answered == 302), "the redirect is retried like any failure");
    let event_id = got[0].header("webhook-id").unwrap().to_owned();
    let ok = w.eventually(Duration::from_secs(10), || {
        let shown = w.call("GET", &format!("/v1/events/{event_id}"), &c.key, None, &[]).json();
        shown["deliveries"][0]["attempts"].as_array().is_some_and(|a| a.len() >= 2)
    });
    assert!(ok, "the attempts are recorded");
    let shown = w.call("GET", &format!("/v1/events/{event_id}"), &c.key, None, &[]).json();
    let first = &shown["deliveries"][0]["attempts"][0];
    assert_eq!(first["status_code"], 302, "{shown}");
    let error = first["error"].as_str().unwrap_or_default();
    assert!(error.contains(&location) && error.contains("not followed"), "{error}");
    // No wait: the attempts above are recorded only once their request ended, so a redirect
    // one of them followed would have reached the Location already.
    assert!(w.customer.received(&elsewhere).is_empty(), "the Location was never requested");
}

/// `Retry-After` as an HTTP date pushes the next attempt to that date, past the (1 s) test
/// schedule.
fn retry_after_as_an_http_date_is_honoured(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    let until = sim::unix_now() + 20;
    let date = httpdate(until);
    w.customer.always_with(&path, 503, &[("retry-after", &date)]);
    inbound_sms(w, &c);
    wait_received(w, &path, 1);
    let next = format!(
        "SELECT COUNT(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.endpoint_id = {} AND a.attempt = 1 AND a.next_attempt_at >= {}",
        lit(&id),
        (until - 1) * 1000
    );
    assert!(w.eventually(Duration::from_secs(10), || w.count(&next) == 1), "the next attempt waits for {date}");
    assert_eq!(w.customer.received(&path).len(), 1, "no retry before the date");
    // The retry itself, when it comes, comes at the date (a job may run an attempt up to 1 s
    // before its time, and arrivals are counted in whole seconds).
    let got = wait_received(w, &path, 2);
    assert!(got[1].received_at >= until - 2, "no retry before the date: {} < {until}", got[1].received_at);
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for Unix seconds.
fn httpdate(unix_seconds: i64) -> String {
    let t = Timestamp::from_unix_seconds(unix_seconds).to_rfc3339();
    // 2026-11-30T05:20:01.000Z -> fields; the weekday is computed from days since 1970-01-01 (a Thursday).
    let (date, time) = t.split_once('T').unwrap();
    let mut parts = date.split('-');
    let (year, month, day) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        [month.parse::<usize>().unwrap() - 1];
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(unix_seconds.div_euclid(86_400) % 7) as usize];
    format!("{weekday}, {day} {month} {year} {} GMT", &time[..8])
}

fn endpoint_management(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, _, _) = endpoint(w, &c, &["call.completed"]);
    let got = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert!(got.get("secret").is_none(), "the secret is shown only at creation: {got}");
    let listed = w.call("GET", "/v1/webhook_endpoints", &c.key, None, &[]).json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1));
    let bad = w.call(
        "POST",
        "/v1/webhook_endpoints",
        &c.key,
        Some(&json!({"url": "http://127.0.0.1/x", "event_types": ["sms.whatever"]})),
        &[],
    );
    assert_eq!((bad.status, bad.json()["error"]["field"].as_str()), (422, Some("event_types")));
    let patched = w
        .call(
            "PATCH",
            &format!("/v1/webhook_endpoints/{id}"),
            &c.key,
            Some(&json!({"event_types": ["call.missed", "call.completed"]})),
            &[],
        )
        .json();
    assert_eq!(patched["event_types"], json!(["call.completed", "call.missed"]));
    let other = w.new_customer("hooks");
    assert_eq!(w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &other.key, None, &[]).status, 404);
    assert_eq!(w.call("DELETE", &format!("/v1/webhook_endpoints/{id}"), &other.key, None, &[]).status, 404);
    assert_eq!(w.call("DELETE", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).status, 204);
    assert_eq!(w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).status, 404);
}

/// Every route of the router's table answers as a route (never `no_route` or 405), and the
/// OpenAPI document is served.
fn every_route_is_served(w: &Worker) {
    let c = w.new_customer("hooks");
    for (method, pattern) in exactly_edge::ROUTES {
        let path = pattern.replace("{id}", "x");
        let token = if path.starts_with("/admin") { exactly_tests::ADMIN_TOKEN } else { c.key.as_str() };
        let body = (*method != "GET" && *method != "DELETE").then(|| json!({}));
        let a = w.call(method, &path, token, body.as_ref(), &[]);
        assert_ne!(a.status, 405, "{method} {pattern}: {}", a.body);
        assert_ne!(a.json()["error"]["code"], "no_route", "{method} {pattern}");
    }
    let doc = w.get("/openapi.json").json();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(w.get("/nowhere").json()["error"]["code"], "no_route");
}

fn event_ids(received: &[Received]) -> Vec<String> {
    received.iter().filter_map(|r| r.header("webhook-id").map(str::to_owned)).collect()
}

/// Waits until the requests to `path` after its first `skip` carry `n` webhook-ids (a lost
/// answer's event comes again under its id, so counting requests would end early); the ids, sorted.
fn wait_event_ids(w: &Worker, path: &str, skip: usize, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let ok = w.eventually(Duration::from_secs(60), || {
        ids = event_ids(w.customer.received(path).get(skip..).unwrap_or_default());
        ids.sort();
        ids.dedup();
        ids.len() >= n
    });
    assert!(ok, "{path} received {} of {n} events", ids.len());
    ids
}

/// An endpoint answers 410 and is disabled; three more events happen; it is enabled again and
/// recovered: the three and the refused one arrive once each, and recovering again re-sends
/// nothing.
fn disabled_then_enabled_and_recovered_loses_nothing(w: &Worker) {
    let c = w.new_customer("hooks");
    let since = Timestamp::from_unix_millis(Timestamp::from_unix_seconds(sim::unix_now()).unix_millis() - 60_000);
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    w.customer.always(&path, 410);
    inbound_sms(w, &c);
    wait_received(w, &path, 1);
    let disabled = w.eventually(Duration::from_secs(20), || {
        w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json()["enabled"] == false
    });
    assert!(disabled, "410 disables the endpoint");
    let answers: Vec<Answer> = (0..3).map(|_| inbound_sms_answered(w, &c).1).collect();
    // The refused delivery's job and the three events' jobs have run: what they wrote for this
    // endpoint is held, not due.
    let refused = deliveries_to(w, &id).remove(0);
    w.wait_jobs(&[(refused, 1)]);
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    assert_eq!(w.customer.received(&path).len(), 1, "nothing is sent while disabled");
    let held = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert_eq!(held["held_count"], 3, "the three events are held, not dropped: {held}");

    w.customer.always(&path, 200);
    let enabled = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"enabled": true})), &[]);
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    let recover = |w: &Worker| w.recover(&c.key, &id, &since.to_rfc3339())["queued"].as_u64().unwrap();
    assert_eq!(recover(w), 1, "only the refused event needs a new delivery; the three were held");
    // Counted by webhook-id: an attempt whose 2xx came after its time ran out is rightly sent
    // again under its id.
    let ids = wait_event_ids(w, &path, 1, 4);
    assert_eq!(ids.len(), 4, "the refused event and the three held ones: {ids:?}");
    assert_eq!(recover(w), 0, "recovering again queues nothing");
    // Every queue message of every delivery to the endpoint has run: each was enqueued once
    // (the refused one when its event came, the held ones by the enabling, the new one by the
    // recovery), and again for each retry it scheduled.
    wait_deliveries_to(w, &id, 1);
    assert_eq!(w.sent_as_recorded(&id, &path), 4, "and re-sends nothing: the four events succeed once each");
}

/// Resuming or enabling an endpoint while an attempt to it is in flight (claimed by another
/// consumer, its lease not over, its outcome not yet recorded: deployed Queues run several
/// consumers at once) releases what the endpoint held, never the attempt's lease: nothing is
/// sent beside the attempt in flight.
fn resuming_or_enabling_never_releases_an_attempt_in_flight(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    let patch = |change: Value| {
        let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&change), &[]);
        assert_eq!(a.status, 200, "{change}: {}", a.body);
    };
    patch(json!({"paused": true}));
    let (_, first) = inbound_sms_answered(w, &c);
    w.wait_jobs_of(&[&first]);
    let in_flight = deliveries_to(w, &id).remove(0);
    let (_, second) = inbound_sms_answered(w, &c);
    w.wait_jobs_of(&[&second]);
    let held: Vec<String> = deliveries_to(w, &id).into_iter().filter(|d| *d != in_flight).collect();
    // Attempt 1 of the first delivery claimed elsewhere and in flight (its lease and in-flight
    // place taken, its outcome not recorded): a consumer running beside this one.
    let lease = (sim::unix_now() + 60) * 1000;
    w.sql(&format!(
        "UPDATE webhook_deliveries SET attempts = 1, next_attempt_at = {lease}, in_flight_until = {lease}
         WHERE id = {} AND attempts = 0",
        lit(&in_flight)
    ));
    patch(json!({"paused": false}));
    patch(json!({"enabled": false}));
    patch(json!({"enabled": true}));
    // The held delivery went into the endpoint's line and arrives; the one in flight stays as it
    // was, out of the line, so no job sends it beside the attempt in flight.
    wait_received(w, &path, 1);
    // Its attempt is recorded once its answer reaches the worker, and its job logs it after.
    let delivered = w.eventually(Duration::from_secs(60), || w.job_outcomes(&held[0], "delivered") == 1);
    assert!(delivered, "the held delivery was delivered: {}", w.log_tail());
    let row = w.sql(&format!(
        "SELECT attempts, next_attempt_at, in_flight_until, waiting FROM webhook_deliveries WHERE id = {}",
        lit(&in_flight)
    ));
    assert_eq!(
        row,
        vec![json!({"attempts": 1, "next_attempt_at": lease, "in_flight_until": lease, "waiting": 0})],
        "the lease stands"
    );
    // Every request is the held delivery's event (an attempt whose answer came after its time ran
    // out is rightly sent again under its id), none the one in flight's.
    let event_of = |d: &str| {
        let rows = w.sql(&format!("SELECT event_id FROM webhook_deliveries WHERE id = {}", lit(d)));
        rows[0]["event_id"].as_str().unwrap_or_default().to_owned()
    };
    let (held_event, in_flight_event) = (event_of(&held[0]), event_of(&in_flight));
    let sent = event_ids(&w.customer.received(&path));
    let only_held = sent.iter().all(|e| *e == held_event);
    assert!(only_held, "only the held delivery was sent, not {in_flight_event}: {sent:?}");
    assert_eq!(w.sent_as_recorded(&id, &path), 1);
}

/// A paused endpoint receives nothing; on resume everything held arrives, oldest first.
fn paused_endpoint_holds_and_resume_delivers(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    let paused = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"paused": true})), &[]);
    assert_eq!((paused.status, paused.json()["paused"].clone()), (200, json!(true)), "{}", paused.body);
    let (first, one) = inbound_sms_answered(w, &c);
    let (second, two) = inbound_sms_answered(w, &c);
    // Both events' jobs have run: what they wrote for this endpoint is held, never enqueued.
    w.wait_jobs_of(&[&one, &two]);
    assert!(w.customer.received(&path).is_empty(), "a paused endpoint receives nothing");
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert_eq!(shown["held_count"], 2, "{shown}");
    let resumed = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"paused": false})), &[]);
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let got = wait_received(w, &path, 2);
    let carrier_ids: Vec<String> = got
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(&r.body).unwrap()["data"]["carrier_message_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut expected = vec![first, second];
    expected.sort();
    let mut seen = carrier_ids.clone();
    seen.sort();
    assert_eq!(seen, expected, "both held events arrive");
    // Every queue message of both deliveries (each enqueued once, by the resume) has run.
    wait_deliveries_to(w, &id, 1);
    assert_eq!(w.sent_as_recorded(&id, &path), 2, "once each");
}

/// `sequence` increases per resource: a message's `message.sent` comes before its
/// `message.delivered` in any receiver's eyes.
fn sequence_increases_per_resource(w: &Worker) {
    let c = w.new_customer("hooks");
    let (_, path, _) = endpoint(w, &c, &["message.sent", "message.delivered"]);
    let sent = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": "[deliver] seq"})),
        &[],
    );
    assert_eq!(sent.status, 201, "{}", sent.body);
    let id = sent.json()["id"].as_str().unwrap().to_owned();
    let got = wait_received(w, &path, 2);
    let by_type: BTreeMap<String, i64> = got
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .filter(|v| v["data"]["id"] == id.as_str())
        .map(|v| (v["type"].as_str().unwrap().to_owned(), v["sequence"].as_i64().unwrap_or(-1)))
        .collect();
    assert_eq!(by_type.get("message.sent"), Some(&1), "{by_type:?}");
    assert_eq!(by_type.get("message.delivered"), Some(&2), "{by_type:?}");
}

/// An attempt keeps what the endpoint answered, up to its first 1 KiB: a short body whole, and
/// the start of a longer one (an error page), whose declared length is over the limit.
fn an_attempt_keeps_the_first_kib_of_the_answer(w: &Worker) {
    let c = w.new_customer("hooks-body");
    let (short_id, short_path, _) = endpoint(w, &c, &["message.received"]);
    let (long_id, long_path, _) = endpoint_without_breaker(w, &c, &["message.received"]);
    w.customer.always_with_body(&short_path, 200, "received, thank you");
    let page: String = (0..3000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    w.customer.always_with_body(&long_path, 500, &page);
    for id in [&short_id, &long_id] {
        let sent = w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[]);
        assert_eq!(sent.status, 202, "{}", sent.body);
    }
    let first = |id: &str| {
        let page = w.call("GET", &format!("/v1/webhook_endpoints/{id}/attempts"), &c.key, None, &[]).json();
        page["data"].as_array().and_then(|d| d.last().cloned())
    };
    let recorded = w.eventually(Duration::from_secs(30), || first(&short_id).is_some() && first(&long_id).is_some());
    assert!(recorded, "both attempts are recorded");
    let short = first(&short_id).unwrap_or_default();
    assert_eq!(
        (short["status_code"].as_i64(), short["response_body"].as_str()),
        (Some(200), Some("received, thank you")),
        "{short}"
    );
    let long = first(&long_id).unwrap_or_default();
    assert_eq!(long["status_code"].as_i64(), Some(500), "{long}");
    assert_eq!(long["response_body"].as_str(), Some(&page[..1024]), "the first 1 KiB of the page: {long}");
}

/// A test event reaches the endpoint signed; its attempt shows the response; a message's history
/// lists its moves.
fn test_event_attempts_and_history_are_visible(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, secret) = endpoint(w, &c, &["message.received"]);
    w.customer.always_with(&path, 200, &[("x-receiver", "seen")]);
    let a = w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[]);
    assert_eq!(a.status, 202, "{}", a.body);
    let got = wait_received(w, &path, 1);
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["type"], "endpoint.test");
    assert_eq!(body["data"]["endpoint_id"], id.as_str());
    let signing = SigningSecret::parse(&secret).unwrap();
    let timestamp: i64 = got[0].header("webhook-timestamp").unwrap().parse().unwrap();
    let expected = signing.sign(
        got[0].header("webhook-id").unwrap(),
        Timestamp::from_unix_seconds(timestamp),
        got[0].body.as_bytes(),
    );
    assert!(got[0].header("webhook-signature").unwrap().split(' ').any(|s| s == expected), "signed like every event");
    let listed = w.eventually(Duration::from_secs(10), || {
        let page = w.call("GET", &format!("/v1/webhook_endpoints/{id}/attempts"), &c.key, None, &[]).json();
        page["data"].as_array().is_some_and(|d| !d.is_empty())
    });
    assert!(listed, "the attempt is listed");
    let page = w.call("GET", &format!("/v1/webhook_endpoints/{id}/attempts"), &c.key, None, &[]).json();
    assert_eq!(page["data"][0]["status_code"], 200, "{page}");
    assert_eq!(page["data"][0]["response_headers"]["x-receiver"], "seen", "{page}");

    let sent = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": "[deliver] history"})),
        &[],
    );
    let message = sent.json()["id"].as_str().unwrap().to_owned();
    let moved = w.eventually(Duration::from_secs(30), || {
        let h = w.call("GET", &format!("/v1/messages/{message}/history"), &c.key, None, &[]).json();
        h["data"]
            .as_array()
            .map(|d| d.iter().map(|s| s["status"].as_str().unwrap_or("").to_owned()).collect::<Vec<_>>())
            == Some(vec!["sent".into(), "delivered".into()])
    });
    assert!(moved, "the history lists sent then delivered");
    // Every event is recorded whoever subscribes; the filter finds exactly this message's.
    let events = w.call("GET", &format!("/v1/events?resource_id={message}"), &c.key, None, &[]).json();
    let types: Vec<&str> = events["data"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["message.delivered", "message.sent"], "newest first: {events}");
}

/// The distinct events of `event_type` whose `data[key]` is `value` that reached `path`.
///
/// An event may arrive more than once only as the contract allows: an attempt that got no 2xx
/// within the attempt timeout (a loaded machine can make that happen to any endpoint) is sent
/// again under the same id. So each repeat must be backed by an attempt the worker recorded,
/// and at most one attempt may have succeeded; anything else fails here.
fn signals_at(w: &Worker, path: &str, event_type: &str, key: &str, value: &str) -> Vec<Value> {
    let copies: Vec<Value> = w
        .customer
        .received(path)
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .filter(|v| v["type"] == event_type && v["data"][key] == value)
        .collect();
    let mut distinct: Vec<Value> = Vec::new();
    for copy in &copies {
        if !distinct.iter().any(|d| d["id"] == copy["id"]) {
            distinct.push(copy.clone());
        }
    }
    for event in &distinct {
        let received = copies.iter().filter(|c| c["id"] == event["id"]).count() as i64;
        if received > 1 {
            let attempts = w.sql(&format!(
                "SELECT COUNT(*) AS n, COALESCE(SUM(a.status_code BETWEEN 200 AND 299), 0) AS ok
                 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
                 JOIN webhook_endpoints e ON e.id = d.endpoint_id
                 WHERE d.event_id = {} AND e.url = {}",
                lit(event["id"].as_str().unwrap_or_default()),
                lit(&format!("{}{path}", w.customer.base))
            ));
            // One row per account database.
            let sum = |column: &str| attempts.iter().map(|r| r[column].as_i64().unwrap_or(0)).sum::<i64>();
            let (made, ok) = (sum("n"), sum("ok"));
            assert!(
                received <= made && ok <= 1,
                "{event_type} {} reached {path} {received} times, but {made} attempts were recorded ({ok} succeeded)",
                event["id"]
            );
        }
    }
    distinct
}

/// Operational signals: an endpoint disabled by a 410, a delivery that exhausted its attempts
/// and a carrier event that failed reach the operator's endpoint once each, signed, and the
/// account's own signals reach its other endpoint once each, whatever is repeated.
fn operational_signals_fire_once(w: &Worker) {
    assert_eq!(w.cron().status, 200, "the cron registers the operator's endpoint");
    let c = w.new_customer("hooks");
    let (_, watcher_path, watcher_secret) = endpoint(w, &c, &["endpoint.disabled", "delivery.exhausted"]);
    let (gone, gone_path, _) = endpoint(w, &c, &["message.received"]);
    w.customer.always(&gone_path, 410);
    let (failing, failing_path, _) = endpoint_without_breaker(w, &c, &["message.received"]);
    w.customer.always(&failing_path, 500);
    inbound_sms(w, &c);
    let operator = OPERATOR_PATH;
    let fired = w.eventually(Duration::from_secs(60), || {
        signals_at(w, &watcher_path, "endpoint.disabled", "endpoint_id", &gone).len() == 1
            && signals_at(w, &watcher_path, "delivery.exhausted", "endpoint_id", &failing).len() == 1
            && signals_at(w, operator, "endpoint.disabled", "endpoint_id", &gone).len() == 1
            && signals_at(w, operator, "delivery.exhausted", "endpoint_id", &failing).len() == 1
    });
    assert!(fired, "each signal reached the account's watcher and the operator");
    // A carrier event that fails, delivered three times: one failure, one signal.
    let unowned = fresh_number();
    let body =
        inbound_body(&format!("signal-{}", sim::random_hex()), &format!("m-{}", sim::random_hex()), &unowned, "nobody");
    let mut stored = String::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let a = w.deliver_telnyx(&body);
        assert_eq!(a.status, 200);
        stored = a.json()["id"].as_str().unwrap().to_owned();
        answers.push(a);
    }
    let failed = w.eventually(Duration::from_secs(30), || {
        signals_at(w, operator, "carrier_event.failed", "carrier_event_id", &stored).len() == 1
    });
    assert!(failed, "the failed carrier event reached the operator");
    // Everything that could write a signal again has run: the failed event's jobs (a repeat may
    // have re-enqueued one) and every queue message of the deliveries to the two endpoints. Then
    // every delivery of every signal about them has run too.
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    wait_deliveries_to(w, &gone, 1);
    wait_deliveries_to(w, &failing, 1);
    wait_deliveries_about(w, &[&gone, &failing, &stored]);
    assert_eq!(signals_at(w, &watcher_path, "endpoint.disabled", "endpoint_id", &gone).len(), 1);
    assert_eq!(signals_at(w, operator, "endpoint.disabled", "endpoint_id", &gone).len(), 1);
    assert_eq!(signals_at(w, operator, "delivery.exhausted", "endpoint_id", &failing).len(), 1);
    assert_eq!(signals_at(w, operator, "carrier_event.failed", "carrier_event_id", &stored).len(), 1);
    // The operator's copies are signed with its secret.
    let secret = SigningSecret::parse(OPERATOR_SECRET).unwrap();
    let received = w.customer.received(operator);
    let r = received
        .iter()
        .find(|r| serde_json::from_str::<Value>(&r.body).unwrap()["data"]["carrier_event_id"] == stored.as_str())
        .unwrap();
    let timestamp: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
    let expected =
        secret.sign(r.header("webhook-id").unwrap(), Timestamp::from_unix_seconds(timestamp), r.body.as_bytes());
    assert!(
        r.header("webhook-signature").unwrap().split(' ').any(|s| s == expected),
        "signed with the operator secret"
    );
    // Every signal the operator and the watcher received verifies with the official library.
    verify_with_official_library(OPERATOR_SECRET, &w.customer.received(operator));
    verify_with_official_library(&watcher_secret, &w.customer.received(&watcher_path));
}

/// An endpoint limited to 2 deliveries a second receives 10 events spread over at least 4 s,
/// every one of them, once.
fn rate_limit_spreads_deliveries_and_drops_none(w: &Worker) {
    let c = w.new_customer("hooks");
    let bad = w.call(
        "POST",
        "/v1/webhook_endpoints",
        &c.key,
        Some(&json!({
            "url": format!("{}/hook/x", w.customer.base), "event_types": ["message.received"],
                "rate_limit_per_second": 0,
        })),
        &[],
    );
    assert_eq!((bad.status, bad.json()["error"]["field"].as_str()), (422, Some("rate_limit_per_second")));
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    let limited = w.call(
        "PATCH",
        &format!("/v1/webhook_endpoints/{id}"),
        &c.key,
        Some(&json!({"rate_limit_per_second": 2})),
        &[],
    );
    assert_eq!(limited.json()["rate_limit_per_second"], 2, "{}", limited.body);
    for _ in 0..10 {
        inbound_sms(w, &c);
    }
    let ids = wait_event_ids(w, &path, 0, 10);
    assert_eq!(ids.len(), 10, "every event: {ids:?}");
    // Each once: every delivery recorded succeeded, one success each, each request an attempt.
    let succeeded = || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'succeeded'",
            lit(&id)
        ))
    };
    assert!(w.eventually(Duration::from_secs(60), || succeeded() == 10), "ten deliveries succeeded");
    assert_eq!(w.sent_as_recorded(&id, &path), 10);
    // Measured between each event's first arrival (whole seconds), not from the end of the sends,
    // which on a loaded machine may come after the first deliveries. At 2/s the worker gives the
    // ten slots 500 ms apart (4.5 s from first to last); unlimited they arrive within a second or
    // two.
    let mut first: BTreeMap<String, i64> = BTreeMap::new();
    for r in w.customer.received(&path) {
        if let Some(event) = r.header("webhook-id") {
            first.entry(event.to_owned()).and_modify(|t| *t = (*t).min(r.received_at)).or_insert(r.received_at);
        }
    }
    let spread = first.values().max().unwrap_or(&0) - first.values().min().unwrap_or(&0);
    assert!(spread >= 3, "10 deliveries at 2/s arrive over at least 3 whole seconds, arrived over {spread}");
    let cleared = w.call(
        "PATCH",
        &format!("/v1/webhook_endpoints/{id}"),
        &c.key,
        Some(&json!({"rate_limit_per_second": null})),
        &[],
    );
    assert!(cleared.json()["rate_limit_per_second"].is_null(), "{}", cleared.body);
}

/// Test events asked for at once are each their own event, delivered once (seen: two in the
/// same millisecond shared a resource id, and the second answered 503).
fn test_events_sent_at_once_are_each_delivered(w: &Worker) {
    let c = w.new_customer("hooks");
    let (id, path, _) = endpoint(w, &c, &["message.received"]);
    let answers: Vec<Answer> = thread::scope(|s| {
        let calls: Vec<_> = (0..24)
            .map(|_| s.spawn(|| w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[])))
            .collect();
        calls.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert!(statuses.iter().all(|s| *s == 202), "every test event accepted: {statuses:?}");
    let events: BTreeSet<String> = answers.iter().map(|a| a.json()["event_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(events.len(), 24, "each its own event");
    wait_received(w, &path, 24);
    wait_deliveries_to(w, &id, 1);
    assert_eq!(w.sent_as_recorded(&id, &path), 24, "each delivered once");
}

/// The `type` of each body received on `path`.
fn types_at(w: &Worker, path: &str) -> BTreeSet<String> {
    w.customer
        .received(path)
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok()?["type"].as_str().map(str::to_owned))
        .collect()
}

/// Every type of customer event, each caused for real, reaches an endpoint subscribed to all of
/// them (the operator's only signal reaches the operator), and every body received matches the
/// schema of its type in docs/openapi.json's `webhooks`: required fields, their types, nothing
/// unknown. The same validator refuses bodies with a field missing, mistyped or extra.
fn every_event_type_matches_its_openapi_schema(w: &Worker) {
    assert_eq!(w.cron().status, 200, "the cron registers the operator's endpoint");
    let (account, key) = w.create_account("schema");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let c = Customer { account: account.clone(), key: key.clone(), number };
    let (all, all_path, _) = endpoint(w, &c, &EVENT_TYPES);
    // One endpoint answers 410 (endpoint.disabled), one always 500 (delivery.exhausted), one 500
    // until its circuit opens (endpoint.circuit_opened: five deliveries' first attempts failed;
    // a retry's failure is not counted) and then 200, with two more events held meanwhile, so two
    // probes succeed and it closes (endpoint.circuit_closed).
    let (_, gone_path, _) = endpoint(w, &c, &["message.received"]);
    w.customer.always(&gone_path, 410);
    let (_, failing_path, _) = endpoint_without_breaker(w, &c, &["message.received"]);
    w.customer.always(&failing_path, 500);
    let (flapping, flapping_path, _) = endpoint(w, &c, &["message.received"]);
    w.customer.always(&flapping_path, 500);
    for _ in 0..5 {
        inbound_sms(w, &c);
    }
    let opened = w.eventually(Duration::from_secs(60), || {
        w.call("GET", &format!("/v1/webhook_endpoints/{flapping}"), &key, None, &[]).json()["circuit"] == "open"
    });
    assert!(opened, "five failed deliveries open the circuit");
    w.customer.always(&flapping_path, 200);
    inbound_sms(w, &c);
    inbound_sms(w, &c);
    for text in ["[deliver] schema", "[refuse] schema"] {
        let body = json!({"from": c.number, "to": "+15559990000", "text": text});
        let a = w.call("POST", "/v1/messages", &key, Some(&body), &[]);
        assert_eq!(a.status, 201, "{}", a.body);
    }
    assert_eq!(w.call("POST", &format!("/v1/webhook_endpoints/{all}/test"), &key, None, &[]).status, 202);
    let outcomes: [fn(&Worker, &calls::Ring); 2] = [calls::answered_then_hung_up, calls::nobody_answers];
    for outcome in outcomes {
        let ringing = fresh_number();
        w.create_number(&account, &ringing, &calls::TARGETS);
        outcome(w, &calls::ring_on(w, key.clone(), &ringing));
    }
    // A carrier event for a number nobody owns fails: the operator's carrier_event.failed.
    let body = inbound_body(
        &format!("schema-{}", sim::random_hex()),
        &format!("m-{}", sim::random_hex()),
        &fresh_number(),
        "nobody",
    );
    let failed = w.deliver_telnyx(&body);
    assert_eq!(failed.status, 200);
    let failed = failed.json()["id"].as_str().unwrap().to_owned();

    let mut expected: BTreeSet<String> = EVENT_TYPES.iter().map(|t| t.to_string()).collect();
    // backlog.high needs a worker whose threshold is seconds: backlog_high_fires_once_per_stuck_item.
    expected.remove("backlog.high");
    expected.insert("endpoint.test".into());
    let mut seen = BTreeSet::new();
    let complete = w.eventually(Duration::from_secs(120), || {
        seen = types_at(w, &all_path);
        expected.is_subset(&seen)
            && signals_at(w, OPERATOR_PATH, "carrier_event.failed", "carrier_event_id", &failed).len() == 1
    });
    assert!(complete, "every type reached the endpoint; missing: {:?}", expected.difference(&seen));

    let mut received = w.customer.received(&all_path);
    for r in &received {
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["account_id"], c.account.as_str(), "an account's endpoint gets only its events: {body}");
    }
    received.extend(w.customer.received(OPERATOR_PATH));
    let bodies: Vec<&str> = received.iter().map(|r| r.body.as_str()).collect();
    let problems: Vec<String> = webhook_schema_problems(&bodies).into_iter().flatten().collect();
    assert!(problems.is_empty(), "bodies that do not match docs/openapi.json:\n{}", problems.join("\n"));
    // What was checked covers every documented webhook but backlog.high (which another test on
    // this worker may raise, by moving a row's clock back: then it is checked too) and
    // audit.violation (raised by rows planted on a worker of its own, whose bodies that test
    // checks the same way: audit::planted_violations_are_each_reported_once), and nothing
    // undocumented.
    let doc: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    let documented: BTreeSet<String> = doc["webhooks"].as_object().unwrap().keys().cloned().collect();
    let mut required = documented.clone();
    required.remove("backlog.high");
    required.remove("audit.violation");
    let checked: BTreeSet<String> = received
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok()?["type"].as_str().map(str::to_owned))
        .collect();
    let missing: Vec<&String> = required.difference(&checked).collect();
    assert!(missing.is_empty(), "every documented webhook type was received and checked; missing {missing:?}");
    let undocumented: Vec<&String> = checked.difference(&documented).collect();
    assert!(undocumented.is_empty(), "undocumented webhook types: {undocumented:?}");

    // The schemas are strict: each way to be wrong is refused.
    let valid = received
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .find(|v| v["type"] == "message.failed")
        .unwrap();
    let wrong = |change: &dyn Fn(&mut Value)| {
        let mut body = valid.clone();
        change(&mut body);
        body.to_string()
    };
    let broken = [
        wrong(&|b| drop(b.as_object_mut().unwrap().remove("sequence"))),
        wrong(&|b| drop(b["data"].as_object_mut().unwrap().remove("carrier_message_id"))),
        wrong(&|b| b["data"]["segments"] = json!("1")),
        wrong(&|b| b["data"]["error"]["code"] = json!(40310)),
        wrong(&|b| b["data"]["surprise"] = json!(true)),
        wrong(&|b| b["created_at"] = json!("yesterday")),
        wrong(&|b| b["type"] = json!("call.completed")),
        wrong(&|b| b["type"] = json!("message.unknown")),
    ];
    let refused = webhook_schema_problems(&broken.iter().map(String::as_str).collect::<Vec<_>>());
    for (body, problem) in broken.iter().zip(&refused) {
        assert!(problem.is_some(), "the schema accepted a wrong body: {body}");
    }
    assert!(webhook_schema_problems(&[&valid.to_string()])[0].is_none(), "the unchanged body passes");
}

/// An endpoint that hangs past the worker's attempt timeout (15 s deployed, the test worker's
/// [`TEST_ATTEMPT_TIMEOUT_SECS`] here): the attempt is recorded as failed with no status, retried,
/// and the event delivered once, under one webhook-id; the late answer to the first request
/// changes nothing.
fn stalled_endpoint_times_out_and_is_retried(w: &Worker) {
    let c = w.new_customer("hooks");
    let (_, path, secret) = endpoint(w, &c, &["message.received"]);
    let timeout = Duration::from_secs(TEST_ATTEMPT_TIMEOUT_SECS);
    // Well past the timeout: the endpoint starts its stall only once the request reached it.
    let stall_secs = TEST_ATTEMPT_TIMEOUT_SECS + 5;
    let stall = Duration::from_secs(stall_secs);
    w.customer.stall(&path, stall, 1);
    inbound_sms(w, &c);
    let got = wait_received(w, &path, 2);
    assert_eq!((got[0].stalled, got[1].stalled), (Some(stall), None));
    // That the retry waited for the timeout is read from the worker's record of the attempt
    // below (its error and latency), not from when the two requests arrived here: on a loaded
    // machine the first reaches this endpoint a while after the worker sent it, so the gap seen
    // here can be shorter than the worker's timeout.
    let id = got[0].header("webhook-id").unwrap().to_owned();
    assert_eq!(got[1].header("webhook-id"), Some(id.as_str()), "one webhook-id");
    assert_ne!(got[0].header("webhook-timestamp"), got[1].header("webhook-timestamp"));
    verify_with_official_library(&secret, &got);
    // Past the stalled request's own (late) answer: one request per recorded attempt, all under
    // the one webhook-id, and one success, the last. (On a loaded machine a retry may itself get
    // no answer within the timeout: the contract retries it too, on its schedule, and records it.)
    let answered_late = got[0].received_at + stall_secs as i64 + 1;
    let mut shown = Value::Null;
    let succeeded = w.eventually(Duration::from_secs(180), || {
        shown = w.call("GET", &format!("/v1/events/{id}"), &c.key, None, &[]).json();
        shown["deliveries"][0]["status"] == "succeeded" && sim::unix_now() > answered_late
    });
    assert!(succeeded, "the delivery succeeded: {shown}");
    let delivery = &shown["deliveries"][0];
    let attempts = delivery["attempts"].as_array().unwrap();
    let received = w.customer.received(&path);
    assert_eq!(received.len(), attempts.len(), "one request per recorded attempt: {shown}");
    assert!(received.iter().all(|r| r.header("webhook-id") == Some(id.as_str())), "one webhook-id");
    assert!(attempts.len() >= 2, "{shown}");
    assert!(attempts[0]["status_code"].is_null(), "{shown}");
    let late = format!("no answer within {TEST_ATTEMPT_TIMEOUT_SECS}s");
    assert!(attempts[0]["error"].as_str().unwrap().contains(&late), "{shown}");
    let at_least = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
    assert!(attempts[0]["latency_ms"].as_i64().unwrap() >= at_least, "{shown}");
    let succeeded: Vec<bool> = attempts.iter().map(|a| a["status_code"] == 200).collect();
    assert_eq!(succeeded.iter().filter(|s| **s).count(), 1, "one success: {shown}");
    assert_eq!(succeeded.last(), Some(&true), "the last attempt succeeded: {shown}");
}

/// An attempt never outlives the time the runtime gives what runs beside its invocation
/// (`wait_until`): on a worker where that time is 5 s (`E2E_BESIDE_SECS`; 25 s of the runtime's
/// 30 deployed), an attempt to an endpoint that stalls past it is cut within it, well before its
/// own timeout, recorded as no answer rather than lost with the invocation, and sent again under
/// the same webhook-id, which then succeeds once.
fn an_attempt_never_outlives_its_invocation(_shared: &Worker) {
    let w = Worker::start_with(&[("E2E_BESIDE_SECS", "5")]);
    let c = w.new_customer("beside");
    let (_, path, secret) = endpoint(&w, &c, &["message.received"]);
    w.customer.stall(&path, Duration::from_secs(TEST_ATTEMPT_TIMEOUT_SECS + 5), 1);
    inbound_sms(&w, &c);
    let got = wait_received(&w, &path, 2);
    let id = got[0].header("webhook-id").unwrap_or_default().to_owned();
    assert_eq!(got[1].header("webhook-id"), Some(id.as_str()), "one webhook-id");
    verify_with_official_library(&secret, &got);
    let mut shown = Value::Null;
    let succeeded = w.eventually(Duration::from_secs(120), || {
        shown = w.call("GET", &format!("/v1/events/{id}"), &c.key, None, &[]).json();
        shown["deliveries"][0]["status"] == "succeeded"
    });
    assert!(succeeded, "the delivery succeeded: {shown}");
    let attempts = shown["deliveries"][0]["attempts"].as_array().cloned().unwrap_or_default();
    assert!(attempts.len() >= 2, "{shown}");
    assert!(attempts[0]["status_code"].is_null(), "{shown}");
    assert!(attempts[0]["error"].as_str().unwrap_or_default().contains("no answer within"), "{shown}");
    let cut_at = attempts[0]["latency_ms"].as_i64().unwrap_or(i64::MAX);
    let own_timeout = i64::try_from(TEST_ATTEMPT_TIMEOUT_SECS * 1000).unwrap_or(i64::MAX);
    assert!(cut_at < own_timeout, "cut by its invocation's 5 s, not its own timeout: {shown}");
    let successes = attempts.iter().filter(|a| a["status_code"] == 200).count();
    assert_eq!((successes, attempts.last().map(|a| a["status_code"] == 200)), (1, Some(true)), "{shown}");
}

/// An endpoint that answers every request in 8 s, inside its 12 s timeout, on a worker whose
/// attempts have 14 s beside their invocation (`E2E_BESIDE_SECS`): its four held deliveries,
/// released at once, are claimed by one wake, whose invocation sends three at once (the places
/// one endpoint may hold) and the fourth once a place frees, 8 s later, with 6 s left. That one
/// is cut short by the invocation's time, not by the endpoint: it is recorded as cut, spends no
/// attempt, and goes again under its webhook-id; every delivery succeeds having spent one attempt,
/// and no attempt is held against the endpoint.
fn an_attempt_cut_short_by_its_invocation_spends_no_attempt(_shared: &Worker) {
    let w = Worker::start_with(&[("E2E_BESIDE_SECS", "14"), ("E2E_ATTEMPT_TIMEOUT_SECS", "12")]);
    let c = w.new_customer("cut");
    let (id, path, secret) = endpoint(&w, &c, &["message.received"]);
    let pause = |paused: bool| {
        let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"paused": paused})), &[]);
        assert_eq!((a.status, a.json()["paused"].as_bool()), (200, Some(paused)), "{}", a.body);
    };
    pause(true);
    for _ in 0..4 {
        inbound_sms(&w, &c);
    }
    let held = w.eventually(Duration::from_secs(60), || deliveries_to(&w, &id).len() == 4);
    assert!(held, "four deliveries held: {:?}", deliveries_to(&w, &id));
    w.customer.stall(&path, Duration::from_secs(8), 100);
    pause(false);
    let rows = || {
        w.sql(&format!(
            "SELECT d.status, d.attempts, d.cut, d.event_id,
                    (SELECT COUNT(*) FROM webhook_attempts a WHERE a.delivery_id = d.id AND a.status_code = 200) AS ok
             FROM webhook_deliveries d WHERE d.endpoint_id = {}",
            lit(&id)
        ))
    };
    let done = w.eventually(Duration::from_secs(180), || rows().iter().all(|r| r["status"] == "succeeded"));
    assert!(done, "every delivery succeeded: {:?}", rows());
    let attempts = w.sql(&format!(
        "SELECT a.status_code, a.error, a.latency_ms FROM webhook_attempts a
         JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = {} ORDER BY a.id",
        lit(&id)
    ));
    for r in rows() {
        let spent = r["attempts"].as_i64().unwrap_or(-1) - r["cut"].as_i64().unwrap_or(-1);
        assert_eq!((spent, r["ok"].as_i64()), (1, Some(1)), "one attempt spent, one success: {r}; {attempts:?}");
    }
    let cut: Vec<&Value> = attempts.iter().filter(|a| a["status_code"].is_null()).collect();
    assert!(!cut.is_empty(), "the fourth was cut: {attempts:?}");
    for a in &cut {
        let error = a["error"].as_str().unwrap_or_default();
        assert!(error.contains("cut short by the invocation's time"), "recorded as cut: {attempts:?}");
        assert!(a["latency_ms"].as_i64() < Some(8_000), "cut before the endpoint's answer: {attempts:?}");
    }
    let circuit = w.sql(&format!("SELECT circuit, circuit_failed FROM webhook_endpoints WHERE id = {}", lit(&id)));
    assert_eq!((&circuit[0]["circuit"], &circuit[0]["circuit_failed"]), (&json!("closed"), &json!(0)), "{circuit:?}");
    // Each cut request came again under its webhook-id, and each verifies.
    let got = w.customer.received(&path);
    assert_eq!(got.len(), attempts.len(), "one request per recorded attempt: {attempts:?}");
    verify_with_official_library(&secret, &got);
}

/// `backlog.high` (docs/contract.md §6) on a worker whose threshold is 2 s: a carrier event whose
/// job was never enqueued and a delivery whose queue message was lost wait past it. Three rounds
/// of three concurrent sweeps, and two more, raise one signal about each: to the operator, and
/// for the delivery also to its account's subscribed endpoint; signed, and matching the schema.
/// A receipt parked for a message that never came, stored after the stuck event, is raised
/// beside it, not hidden behind it. Once the carrier's retry processes the event, the sweeps
/// raise nothing new.
fn backlog_high_fires_once_per_stuck_item(_shared: &Worker) {
    let w = Worker::start_with(&[("BACKLOG_ALERT_SECS", "2")]);
    assert_eq!(w.cron().status, 200, "the cron registers the operator's endpoint");
    let c = w.new_customer("hooks");
    let (_, watcher_path, watcher_secret) = endpoint(&w, &c, &["backlog.high"]);
    // Each first queue message of a delivery to this endpoint is lost (edge/src/faults.rs).
    let (lossy, _, _) =
        endpoint_at(&w, &c, &format!("/hook/fault-lose-delivery-{}", sim::random_hex()), &["message.received"]);
    inbound_sms(&w, &c);
    // Stored, but its job was never enqueued: the carrier was answered 503.
    let stuck_event = format!("backlog-fault-queue-send-{}", sim::random_hex());
    let stuck_body = inbound_body(&stuck_event, &format!("m-{}", sim::random_hex()), &c.number, "stuck");
    assert_eq!(w.deliver_telnyx(&stuck_body).status, 503);
    let stored = w.events_sql(&format!(
        "SELECT 'cev_' || printf('%016x', id) AS id FROM carrier_events WHERE carrier_event_id = {}",
        lit(&stuck_event)
    ));
    let stored = stored[0]["id"].as_str().unwrap().to_owned();
    let mut delivery = String::new();
    let lost = w.eventually(Duration::from_secs(30), || {
        let rows = w.sql(&format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {}", lit(&lossy)));
        delivery = rows.first().and_then(|r| r["id"].as_str()).unwrap_or_default().to_owned();
        !delivery.is_empty()
    });
    assert!(lost, "the delivery to the lossy endpoint exists");
    // A receipt for a message no send recorded: it parks, waiting for the message, which never
    // comes; stored after the stuck event, which it must neither hide nor be hidden by.
    let orphan = format!("backlog-orphan-{}", sim::random_hex());
    let receipt = sim::telnyx::receipt(&orphan, &format!("never-sent-{}", sim::random_hex()), "delivered", json!([]));
    assert_eq!(w.deliver_telnyx(&receipt).status, 200);
    let mut parked = String::new();
    let waits = w.eventually(Duration::from_secs(30), || {
        let rows = w.events_sql(&format!(
            "SELECT 'cev_' || printf('%016x', id) AS id FROM carrier_events
             WHERE carrier_event_id = {} AND waiting_for IS NOT NULL",
            lit(&orphan)
        ));
        parked = rows.first().and_then(|r| r["id"].as_str()).unwrap_or_default().to_owned();
        !parked.is_empty()
    });
    assert!(waits, "the orphan receipt is parked");
    // An ordered endpoint's delivery stranded waiting for a hand-on that never came: it waits
    // (`waiting = 2`) for an earlier event of its resource, and there is none, since three
    // minutes. The cron's look at long waits puts it into its line, and raises it.
    let stranded = stranded_delivery(&w, &c);
    // A condition of time itself: the items must wait past the 2 s BACKLOG_ALERT_SECS.
    thread::sleep(Duration::from_secs(3));

    let sweep = || assert_eq!(w.cron().status, 200);
    for _ in 0..3 {
        thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(sweep);
            }
        });
    }
    let backlog = |path: &str, key: &str, value: &str| signals_at(&w, path, "backlog.high", key, value);
    let raised = w.eventually(Duration::from_secs(30), || {
        backlog(OPERATOR_PATH, "carrier_event_id", &stored).len() == 1
            && backlog(OPERATOR_PATH, "carrier_event_id", &parked).len() == 1
            && backlog(OPERATOR_PATH, "delivery_id", &delivery).len() == 1
            && backlog(&watcher_path, "delivery_id", &delivery).len() == 1
            && backlog(OPERATOR_PATH, "delivery_id", &stranded).len() == 1
    });
    assert!(
        raised,
        "one backlog.high about each stuck item (the parked receipt beside the older stuck event, the stranded delivery beside the overdue one) reached the operator, and the account's about its delivery"
    );
    sweep();
    sweep();
    // A sweep writes its signals before the cron answers: every delivery of every signal about
    // the two items has run.
    wait_deliveries_about(&w, &[&stored, &delivery]);
    assert_eq!(backlog(OPERATOR_PATH, "carrier_event_id", &stored).len(), 1, "once, however many sweeps");
    assert_eq!(backlog(OPERATOR_PATH, "carrier_event_id", &parked).len(), 1, "once, however many sweeps");
    assert_eq!(backlog(OPERATOR_PATH, "delivery_id", &delivery).len(), 1, "once, however many sweeps");
    assert_eq!(backlog(&watcher_path, "delivery_id", &delivery).len(), 1, "once, however many sweeps");
    assert_eq!(backlog(OPERATOR_PATH, "delivery_id", &stranded).len(), 1, "the stranded one, once");
    let lined = w.count(&format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE id = {} AND (status = 'succeeded' OR waiting = 1)",
        lit(&stranded)
    ));
    assert_eq!(lined, 1, "the stranded delivery went into its line");
    assert!(backlog(&watcher_path, "carrier_event_id", &stored).is_empty(), "a carrier event is no account's");

    let about = &backlog(OPERATOR_PATH, "delivery_id", &delivery)[0]["data"];
    assert_eq!((about["kind"].as_str(), about["endpoint_id"].as_str()), (Some("delivery"), Some(lossy.as_str())));
    assert_eq!(about["account_id"], c.account.as_str(), "the operator is told whose delivery it is");
    assert_eq!(about["threshold_seconds"], 2);
    assert!(about["age_seconds"].as_i64().unwrap() >= 2, "{about}");
    let about = &backlog(OPERATOR_PATH, "carrier_event_id", &stored)[0]["data"];
    assert_eq!((about["kind"].as_str(), about["account_id"].as_null()), (Some("carrier_event"), Some(())));
    verify_with_official_library(OPERATOR_SECRET, &w.customer.received(OPERATOR_PATH));
    verify_with_official_library(&watcher_secret, &w.customer.received(&watcher_path));
    if let Err(problems) = w.audit_deliveries() {
        panic!("{problems}");
    }

    // The carrier's retry gets the event processed; later sweeps raise nothing more about it.
    assert_eq!(w.deliver_telnyx(&stuck_body).status, 200);
    let processed = w.eventually(Duration::from_secs(30), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND processed_at IS NOT NULL",
            lit(&stuck_event)
        )) == 1
    });
    assert!(processed, "the retried event was processed");
    // (The lossy endpoint loses the new event's delivery too; once the sweeper re-sends the first
    // one, that one may be the oldest stuck delivery and raise its own signal, rightly.)
    let before = w.customer.received(OPERATOR_PATH).len();
    sweep();
    // Every delivery of every signal the sweeps wrote has run: any about a carrier event
    // names it.
    wait_deliveries_about(&w, &["\"kind\":\"carrier_event\""]);
    let after: Vec<Value> = w.customer.received(OPERATOR_PATH)[before..]
        .iter()
        .map(|r| serde_json::from_str::<Value>(&r.body).unwrap())
        .filter(|v| v["type"] == "backlog.high" && v["data"]["kind"] == "carrier_event")
        .collect();
    assert!(after.is_empty(), "nothing new: the parked receipt was raised once already: {after:?}");
    assert_eq!(backlog(OPERATOR_PATH, "carrier_event_id", &parked).len(), 1, "the parked receipt, once");
}

/// A delivery of a new ordered endpoint of `c`, its `endpoint.test` delivered once and then set
/// back as if it had waited three minutes for an earlier event of its resource that does not
/// exist: a hand-on that never came. Returns its id.
fn stranded_delivery(w: &Worker, c: &Customer) -> String {
    let (id, _, _) = endpoint(w, c, &["message.received"]);
    let ordered =
        w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"ordering": "resource"})), &[]);
    assert_eq!(ordered.status, 200, "{}", ordered.body);
    let test = w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[]);
    assert_eq!(test.status, 202, "{}", test.body);
    let delivery = test.json()["delivery_id"].as_str().expect("delivery_id").to_owned();
    let succeeded = || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE id = {} AND status = 'succeeded'",
            lit(&delivery)
        )) == 1
    };
    assert!(w.eventually(Duration::from_secs(30), succeeded), "the test event was delivered");
    let planted = w.sql(&format!(
        "UPDATE webhook_deliveries SET status = 'pending', waiting = 2, resource_id = 'stranded', sequence = 2,
             in_flight_until = 0, next_attempt_at = unixepoch() * 1000 - 180000,
             updated_at = unixepoch() * 1000 - 180000
         WHERE id = {}",
        lit(&delivery)
    ));
    assert!(planted.is_empty(), "{planted:?}");
    delivery
}

/// The first attempt an inbound message's batch claimed, cut off by a crash between that commit
/// and the attempt's start (edge/src/faults.rs, `fault-crash-before-mark`; where the processed
/// mark commits with the effects): nothing is sent while its lease holds, and the job's retry
/// sends nothing either; once the lease and the sweeper's grace are past, the sweeper sends it,
/// once. A worker of its own, so that the message's job is alone in its batch, whose jobs call
/// nothing out, and so claims the attempt.
fn a_first_attempt_claimed_before_a_crash_is_swept_and_sent_once(_shared: &Worker) {
    let w = Worker::start_with(&[]);
    let c = w.new_customer("claim-crash");
    let (endpoint, path, _) = endpoint(&w, &c, &["message.received"]);
    let event_id = format!("fault-crash-before-mark-{}", sim::random_hex());
    let body = inbound_body(&event_id, &format!("m-{}", sim::random_hex()), &c.number, "claimed, then a crash");
    let accepted = w.deliver_telnyx(&body);
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    let crashed = w.eventually(Duration::from_secs(30), || w.log_lines(&["injected crash between the effects"]) >= 1);
    assert!(crashed, "the first run crashed between its commit and the attempt's start");
    // The job's retry finds the event processed and changes nothing.
    w.wait_jobs_of(&[&accepted]);
    let row = |w: &Worker| {
        w.sql(&format!(
            "SELECT status, attempts, waiting, in_flight_until > 0 AS in_flight FROM webhook_deliveries
             WHERE endpoint_id = {}",
            lit(&endpoint)
        ))
    };
    assert_eq!(
        row(&w),
        vec![json!({"status": "pending", "attempts": 1, "waiting": 0, "in_flight": 1})],
        "the delivery's first attempt was claimed with its message and never started"
    );
    assert!(w.customer.received(&path).is_empty(), "nothing was sent");
    // Three minutes later: the lease is over and the delivery overdue past the sweeper's grace.
    w.sql(&format!(
        "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at - 180000,
             in_flight_until = in_flight_until - 180000 WHERE endpoint_id = {}",
        lit(&endpoint)
    ));
    assert_eq!(w.cron().status, 200);
    let delivered = w.eventually(Duration::from_secs(30), || w.customer.received(&path).len() == 1);
    assert!(delivered, "the swept delivery arrived");
    let delivery = deliveries_to(&w, &endpoint).pop().unwrap_or_default();
    w.wait_jobs(&[(delivery, 1)]);
    assert_eq!(w.sent_as_recorded(&endpoint, &path), 1, "exactly once");
    assert_eq!(row(&w)[0]["status"], "succeeded");
}
