//! Operating it: configuration validation, readiness, re-driving dead letters, retention and
//! secret rotation.

use std::time::Duration;

use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use exactly_tests::{fresh_number, lit, Worker, ADMIN_TOKEN};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "operations::a_misconfigured_worker_answers_503_naming_the_variable",
        a_misconfigured_worker_answers_503_naming_the_variable,
    ),
    ("operations::healthz_reports_readiness_without_secrets", healthz_reports_readiness_without_secrets),
    ("operations::redriving_a_failed_event_twice_has_one_effect", redriving_a_failed_event_twice_has_one_effect),
    ("operations::retention_prunes_payloads_and_keeps_dedupe_keys", retention_prunes_payloads_and_keeps_dedupe_keys),
    (
        "operations::retention_deletes_settled_customer_events_once_and_keeps_held_ones",
        retention_deletes_settled_customer_events_once_and_keeps_held_ones,
    ),
    (
        "operations::rotated_endpoint_secret_signs_with_both_for_a_while",
        rotated_endpoint_secret_signs_with_both_for_a_while,
    ),
    ("operations::carrier_events_pages_neither_skip_nor_repeat", carrier_events_pages_neither_skip_nor_repeat),
    ("operations::failed_deliveries_page_with_a_cursor", failed_deliveries_page_with_a_cursor),
    ("operations::metrics_are_prometheus_text_and_move", metrics_are_prometheus_text_and_move),
    ("operations::accounts_page_with_their_numbers", accounts_page_with_their_numbers),
    ("operations::routine_lines_are_sampled_and_refusals_never", routine_lines_are_sampled_and_refusals_never),
];

/// Walks `/admin/...` pages of `limit` from the first, until `done` says enough was seen or the
/// last page; returns every row in order.
fn walk(
    w: &Worker,
    path: &str,
    limit: u32,
    mut done: impl FnMut(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let url = match &cursor {
            Some(c) => format!("{path}&limit={limit}&cursor={c}"),
            None => format!("{path}&limit={limit}"),
        };
        let page = w.call("GET", &url, ADMIN_TOKEN, None, &[]);
        assert_eq!(page.status, 200, "{url}: {}", page.body);
        let page = page.json();
        rows.extend(page["data"].as_array().cloned().unwrap_or_default());
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() || done(&rows) {
            return rows;
        }
    }
    panic!("{path}: more than 1000 pages");
}

/// Rows whose rowids cross a digit boundary (99998 -> 100008), all stored in the same
/// millisecond: sorted as text ("99999" > "100008") the pages once skipped and repeated rows.
/// Dated in the future, so they are the first rows of `status=processed` whatever else the run
/// stores meanwhile.
fn carrier_events_pages_neither_skip_nor_repeat(w: &Worker) {
    let tag = sim::random_hex();
    let at = (sim::unix_now() + 10 * 365 * 86_400) * 1000 + i64::from(u16::from_str_radix(&tag[..4], 16).unwrap());
    let ids: Vec<i64> = (99_998..=100_008).collect();
    let values: Vec<String> = ids
        .iter()
        .map(|id| {
            format!(
                "({id}, 'telnyx', {}, 'message.received', NULL, {at}, NULL, 1, {at})",
                lit(&format!("page-{tag}-{id}"))
            )
        })
        .collect();
    w.sql_at(
        "DB",
        &format!(
            "INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, processed_at, error,
            attempts, created_at) VALUES {}",
            values.join(", ")
        ),
    );
    let mine = |rows: &[serde_json::Value]| -> Vec<i64> {
        rows.iter()
            .filter(|r| r["carrier_event_id"].as_str().is_some_and(|e| e.starts_with(&format!("page-{tag}-"))))
            .map(|r| i64::from_str_radix(r["id"].as_str().unwrap().trim_start_matches("cev_"), 16).unwrap())
            .collect()
    };
    for limit in [1, 3, 4, 100] {
        let rows = walk(w, "/admin/carrier_events?status=processed", limit, |rows| {
            mine(rows).len() >= ids.len() || rows.len() > ids.len() + 200
        });
        let expected: Vec<i64> = ids.iter().rev().copied().collect();
        assert_eq!(mine(&rows), expected, "limit {limit}: every row once, newest (largest id) first");
    }
    let bad = w.call("GET", "/admin/carrier_events?status=processed&cursor=bm90LWEtY3Vyc29y", ADMIN_TOKEN, None, &[]);
    assert_eq!((bad.status, bad.json()["error"]["field"].as_str()), (422, Some("cursor")), "{}", bad.body);
    let bad = w.call("GET", "/admin/carrier_events?status=processed&cursor=1.abc", ADMIN_TOKEN, None, &[]);
    assert_eq!(bad.status, 422, "a carrier event cursor carries an integer id: {}", bad.body);
}

/// Five failed deliveries of one event (five endpoints that answer 410) paged two at a time:
/// each appears once, and the listing has a `next_cursor` at all.
fn failed_deliveries_page_with_a_cursor(w: &Worker) {
    let (account, key) = w.create_account("paging");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let mut endpoints = Vec::new();
    for _ in 0..5 {
        let path = format!("/gone/{}", sim::random_hex());
        w.customer.always(&path, 410);
        let a = w.call(
            "POST",
            "/v1/webhook_endpoints",
            &key,
            Some(&json!({"url": format!("{}{path}", w.customer.base), "event_types": ["message.received"]})),
            &[],
        );
        assert_eq!(a.status, 201, "{}", a.body);
        endpoints.push(a.json()["id"].as_str().unwrap().to_owned());
    }
    let event_id = format!("paging-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&event_id, &number)).status, 200);
    let failed = format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE account_id = {} AND status = 'failed'",
        lit(&account)
    );
    assert!(w.eventually(Duration::from_secs(30), || w.count(&failed) == 5), "five deliveries fail on 410");
    let mine = |rows: &[serde_json::Value]| -> Vec<String> {
        rows.iter()
            .filter(|r| r["account_id"] == account.as_str())
            .map(|r| r["endpoint_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let rows = walk(w, "/admin/webhook_deliveries?status=failed", 2, |rows| mine(rows).len() >= 5);
    let mut seen = mine(&rows);
    assert_eq!(seen.len(), 5, "each failed delivery once: {seen:?}");
    seen.sort();
    endpoints.sort();
    assert_eq!(seen, endpoints);
    let first = w.call("GET", "/admin/webhook_deliveries?status=failed&limit=1", ADMIN_TOKEN, None, &[]).json();
    assert!(first["next_cursor"].is_string(), "{first}");
    assert!(first["data"][0]["created_at"].is_string(), "{first}");
}

/// A worker without `TELNYX_PUBLIC_KEY`: the API, the carrier webhooks and the admin routes each
/// answer 503 `misconfigured` naming it (never a secret's value), `/healthz` says so, and the
/// error is logged. Which variables are checked, and how, is unit-tested with the configuration
/// (`edge/src/config.rs`); this is the wiring.
fn a_misconfigured_worker_answers_503_naming_the_variable(_shared: &Worker) {
    let variable = "TELNYX_PUBLIC_KEY";
    let w = Worker::start_with(&[(variable, "")]);
    for path in ["/v1/messages", "/webhooks/telnyx", "/admin/carrier_events"] {
        let a =
            if path.starts_with("/webhooks") { w.deliver_telnyx("{}") } else { w.call("GET", path, "sk_x", None, &[]) };
        assert_eq!(a.status, 503, "{path}: {}", a.body);
        let error = &a.json()["error"];
        assert_eq!(error["code"], "misconfigured", "{}", a.body);
        assert!(error["message"].as_str().unwrap_or("").contains(variable), "names {variable}: {}", a.body);
        assert!(
            !a.body.contains("e2e-telnyx-api-key") && !a.body.contains(ADMIN_TOKEN),
            "no secret values: {}",
            a.body
        );
    }
    let health = w.get("/healthz");
    assert_eq!(health.status, 503, "{}", health.body);
    assert!(health.json()["checks"]["config"].as_str().unwrap_or("").contains(variable), "{}", health.body);
    let logged = w.eventually(Duration::from_secs(15), || w.log_lines(&[variable, "\"status\":503"]) >= 1);
    assert!(logged, "the error is logged, naming {variable}");
}

/// `/healthz` is public and answers before any limit, so an isolate checks at most once per
/// `CACHE_MILLIS` and answers from that check in between: two answers never show checks that
/// ran closer together than that.
fn healthz_reports_readiness_without_secrets(w: &Worker) {
    let a = w.get("/healthz");
    assert_eq!(a.status, 200, "{}", a.body);
    let checked_at = |v: &serde_json::Value| {
        Timestamp::parse_rfc3339(v["checked_at"].as_str().expect("checked_at")).expect("a time")
    };
    let first = a.json();
    assert_eq!((first["status"].clone(), first["checks"].clone()), (json!("ok"), json!({"config": "ok", "d1": "ok"})));
    assert!(!a.body.contains(ADMIN_TOKEN));
    for _ in 0..5 {
        let again = w.get("/healthz").json();
        let apart = checked_at(&again).unix_millis() - checked_at(&first).unix_millis();
        assert!(
            apart == 0 || apart >= exactly_edge::api::health::CACHE_MILLIS,
            "checks {apart} ms apart: {first} then {again}"
        );
    }
}

fn inbound(event_id: &str, number: &str) -> String {
    sim::telnyx::inbound(event_id, &format!("msg-{event_id}"), number, "again")
}

fn state(w: &Worker, event_id: &str) -> serde_json::Value {
    w.events_sql(&format!(
        "SELECT processed_at, error, payload FROM carrier_events WHERE carrier_event_id = {}",
        lit(event_id)
    ))
    .into_iter()
    .next()
    .unwrap_or_default()
}

fn redriving_a_failed_event_twice_has_one_effect(w: &Worker) {
    let number = fresh_number();
    let event_id = format!("redrive-{}", sim::random_hex());
    let delivered = w.deliver_telnyx(&inbound(&event_id, &number));
    assert_eq!(delivered.status, 200);
    // Nobody owns the number yet: a visible dead letter.
    assert!(w.eventually(Duration::from_secs(30), || state(w, &event_id)["error"].is_string()));
    let row_id = w.events_sql(&format!(
        "SELECT 'cev_' || printf('%016x', id) AS id FROM carrier_events WHERE carrier_event_id = {}",
        lit(&event_id)
    ))[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (account, key) = w.create_account("redrive");
    w.create_number(&account, &number, &[]);
    let first = w.call("POST", &format!("/admin/carrier_events/{row_id}/retry"), ADMIN_TOKEN, None, &[]);
    let second = w.call("POST", &format!("/admin/carrier_events/{row_id}/retry"), ADMIN_TOKEN, None, &[]);
    assert!(
        matches!(first.status, 200 | 202) && matches!(second.status, 200 | 202),
        "{} / {}",
        first.body,
        second.body
    );
    assert!(w.eventually(Duration::from_secs(30), || state(w, &event_id)["processed_at"].is_number()));
    let third = w.call("POST", &format!("/admin/carrier_events/{row_id}/retry"), ADMIN_TOKEN, None, &[]);
    assert_eq!((third.status, third.json()["status"].as_str()), (200, Some("processed")));
    // The delivery's job and each retry's that was requeued (each answer says whether it was)
    // have run.
    let redriven = [&first, &second, &third].iter().filter(|a| a.json()["requeued"] == true).count();
    let (stored, once) = Worker::jobs_enqueued(&delivered).expect("the delivery was stored");
    w.wait_jobs(&[(stored, once + redriven)]);
    let messages = w.call("GET", "/v1/messages", &key, None, &[]).json();
    assert_eq!(messages["data"].as_array().map(Vec::len), Some(1), "one message: {messages}");
    let id = messages["data"][0]["id"].as_str().unwrap();
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {} AND type = 'message.received'",
            lit(id)
        )),
        1
    );

    // In bulk: another dead letter, re-driven with every other failed one.
    let number2 = fresh_number();
    let bulk = format!("redrive-bulk-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&bulk, &number2)).status, 200);
    assert!(w.eventually(Duration::from_secs(30), || state(w, &bulk)["error"].is_string()));
    w.create_number(&account, &number2, &[]);
    let a = w.call("POST", "/admin/carrier_events/retry?status=failed", ADMIN_TOKEN, None, &[]);
    assert_eq!(a.status, 202, "{}", a.body);
    assert!(a.json()["requeued"].as_u64().unwrap_or(0) >= 1);
    assert!(w.eventually(Duration::from_secs(30), || state(w, &bulk)["processed_at"].is_number()));
    assert_eq!(w.call("POST", "/admin/carrier_events/cev_nope/retry", ADMIN_TOKEN, None, &[]).status, 404);
}

fn retention_prunes_payloads_and_keeps_dedupe_keys(_shared: &Worker) {
    // Its own worker: moving every row's clock back would disturb the other tests.
    let w = Worker::start();
    let (account, key) = w.create_account("retention");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let event_id = format!("retained-{}", sim::random_hex());
    let body = inbound(&event_id, &number);
    let first = w.deliver_telnyx(&body);
    assert_eq!(first.status, 200);
    assert!(w.eventually(Duration::from_secs(30), || state(&w, &event_id)["processed_at"].is_number()));
    // 31 days later, the payload goes and the dedupe key stays.
    w.events_sql("UPDATE carrier_events SET created_at = created_at - 31 * 86400000");
    assert_eq!(w.cron().status, 200);
    assert!(w.eventually(Duration::from_secs(20), || state(&w, &event_id)["payload"].is_null()), "payload pruned");
    let again = w.deliver_telnyx(&body);
    assert_eq!((again.status, again.json()["outcome"].as_str()), (200, Some("duplicate")), "{}", again.body);
    // The repeat enqueued nothing ("duplicate"); the first delivery's job has run.
    w.wait_jobs_of(&[&first, &again]);
    let messages = w.call("GET", "/v1/messages", &key, None, &[]).json();
    assert_eq!(messages["data"].as_array().map(Vec::len), Some(1), "no second effect: {messages}");
    // After the event retention (90 days by default) the row itself goes.
    w.events_sql("UPDATE carrier_events SET created_at = created_at - 60 * 86400000");
    assert_eq!(w.cron().status, 200);
    let gone = w.eventually(Duration::from_secs(20), || {
        w.events_count(&format!("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {}", lit(&event_id)))
            == 0
    });
    assert!(gone, "the dedupe key is deleted after the event retention");
    // Each page logs what it pruned: the one payload, then the one row.
    let page = |step: &str| w.log_lines(&["\"cron\":\"retention\"", &format!("\"step\":\"{step}\""), "\"pruned\":1,"]);
    assert_eq!((page("payloads"), page("carrier_events")), (1, 1), "each retention page logs what it pruned");
}

/// Customer events older than `RETENTION_CUSTOMER_EVENT_DAYS` (90) go with their deliveries and
/// attempts; one whose delivery a paused endpoint still holds stays whole. A second run over the
/// same rows with the same clock deletes nothing more.
fn retention_deletes_settled_customer_events_once_and_keeps_held_ones(_shared: &Worker) {
    // Its own worker: moving every event's clock back would disturb the other tests.
    let w = Worker::start();
    let (account, key) = w.create_account("retention-events");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let path = format!("/hook/{}", sim::random_hex());
    let body = json!({"url": format!("{}{path}", w.customer.base), "event_types": ["message.received"]});
    assert_eq!(w.call("POST", "/v1/webhook_endpoints", &key, Some(&body), &[]).status, 201);
    let count = |sql: &str| w.sql_for(&account, sql).first().and_then(|r| r["n"].as_u64()).unwrap_or(u64::MAX);
    for n in 0..2 {
        assert_eq!(w.deliver_telnyx(&inbound(&format!("kept-{n}-{}", sim::random_hex()), &number)).status, 200);
    }
    assert!(w.eventually(Duration::from_secs(60), || w.customer.received(&path).len() >= 2), "two delivered");
    let held_path = format!("/hook/{}", sim::random_hex());
    let held = json!({"url": format!("{}{held_path}", w.customer.base), "event_types": ["message.received"]});
    let held = w.call("POST", "/v1/webhook_endpoints", &key, Some(&held), &[]).json();
    let held = held["id"].as_str().expect("an endpoint").to_owned();
    let paused = w.call("PATCH", &format!("/v1/webhook_endpoints/{held}"), &key, Some(&json!({"paused": true})), &[]);
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(w.deliver_telnyx(&inbound(&format!("held-{}", sim::random_hex()), &number)).status, 200);
    assert!(w.eventually(Duration::from_secs(60), || w.customer.received(&path).len() >= 3), "three delivered");
    let settled = "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE status = 'succeeded'";
    assert!(w.eventually(Duration::from_secs(60), || count(settled) == 3), "every attempt recorded");
    assert_eq!(count("SELECT COUNT(*) AS n FROM outbound_events"), 3);
    // A hundred days on.
    w.sql_for(&account, "UPDATE outbound_events SET created_at = created_at - 100 * 86400000");
    // The customer events step's pages in the account's database, and those that pruned `n`.
    let database = format!("\"database\":\"{}\"", w.database_of(&account).as_deref().unwrap_or("DB"));
    let pages =
        |pruned: &str| w.log_lines(&["\"cron\":\"retention\"", "\"step\":\"customer_events\"", &database, pruned]);
    assert_eq!(w.cron().status, 200);
    // Once a tick: one tick was fired, though one whose answer was lost may have run twice.
    assert_eq!(pages(""), w.ticks_logged(), "the retention step ran once a tick");
    assert_eq!(count("SELECT COUNT(*) AS n FROM outbound_events"), 1, "the two settled events are gone");
    assert_eq!(count("SELECT COUNT(*) AS n FROM webhook_deliveries"), 2, "the held event keeps both deliveries");
    let pending = format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE status = 'pending' AND endpoint_id = {}",
        lit(&held)
    );
    assert_eq!(count(&pending), 1);
    let orphans = "SELECT COUNT(*) AS n FROM webhook_attempts a
                   WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = a.delivery_id)";
    assert_eq!((count(orphans), count("SELECT COUNT(*) AS n FROM webhook_attempts")), (0, 1));
    assert_eq!(pages("\"pruned\":2,"), 1);
    // Again, on the same rows and clock: nothing more.
    assert_eq!(w.cron().status, 200);
    assert_eq!(pages(""), w.ticks_logged(), "the retention step ran again");
    assert_eq!(count("SELECT COUNT(*) AS n FROM outbound_events"), 1);
    assert_eq!(pages("\"pruned\":0,"), w.ticks_logged() - 1, "each tick after the first pruned nothing");
    // The held delivery still goes out when its endpoint resumes.
    let resumed = w.call("PATCH", &format!("/v1/webhook_endpoints/{held}"), &key, Some(&json!({"paused": false})), &[]);
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert!(
        w.eventually(Duration::from_secs(60), || w.customer.received(&held_path).len() == 1),
        "the held one is delivered"
    );
}

fn rotated_endpoint_secret_signs_with_both_for_a_while(w: &Worker) {
    let (account, key) = w.create_account("rotation");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let path = format!("/rotate/{}", sim::random_hex());
    let created = w
        .call(
            "POST",
            "/v1/webhook_endpoints",
            &key,
            Some(&json!({"url": format!("{}{path}", w.customer.base), "event_types": ["message.received"]})),
            &[],
        )
        .json();
    let (id, old) = (created["id"].as_str().unwrap().to_owned(), created["secret"].as_str().unwrap().to_owned());
    let rotated = w.call("POST", &format!("/v1/webhook_endpoints/{id}/rotate_secret"), &key, None, &[]);
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let event_id = format!("rotate-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&event_id, &number)).status, 200);
    assert!(w.eventually(Duration::from_secs(30), || !w.customer.received(&path).is_empty()));
    let got = &w.customer.received(&path)[0];
    let (webhook_id, ts, sigs) = (
        got.header("webhook-id").unwrap(),
        got.header("webhook-timestamp").unwrap(),
        got.header("webhook-signature").unwrap(),
    );
    assert_eq!(sigs.split(' ').count(), 2, "two signatures during the rotation: {sigs}");
    let now = Timestamp::from_unix_seconds(sim::unix_now());
    for secret in [&old, &new] {
        assert!(
            SigningSecret::parse(secret).unwrap().verify(webhook_id, ts, sigs, got.body.as_bytes(), now),
            "verifies under {}",
            &secret[..10]
        );
    }
}

/// `/admin/metrics` speaks the Prometheus text format and its figures move with the work.
fn metrics_are_prometheus_text_and_move(w: &Worker) {
    let read = |w: &Worker| {
        let a = w.call("GET", "/admin/metrics", ADMIN_TOKEN, None, &[]);
        assert_eq!(a.status, 200, "{}", a.body);
        a.body
    };
    let value = |text: &str, series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let before = read(w);
    assert!(before.contains("# TYPE exactly_carrier_events_ingested_total counter"), "{before}");
    let ingested = value(&before, "exactly_carrier_events_ingested_total");
    let number = fresh_number();
    assert_eq!(w.deliver_telnyx(&inbound(&format!("metrics-{}", sim::random_hex()), &number)).status, 200);
    let after = read(w);
    assert!(value(&after, "exactly_carrier_events_ingested_total") >= ingested + 1.0, "{after}");
    assert!(value(&after, "exactly_oldest_pending_event_age_seconds") >= 0.0);
    // The wasm instance's memory: whole 64 KiB pages, at least the one the module starts with.
    let memory = value(&after, "exactly_isolate_wasm_memory_bytes");
    assert!(memory >= 65_536.0 && memory % 65_536.0 == 0.0, "{memory}");
    assert_eq!(w.call("GET", "/admin/metrics", "wrong", None, &[]).status, 401);
}

/// `/admin/accounts` pages newest first, each account once with its numbers; the operator's own
/// account is never listed.
fn accounts_page_with_their_numbers(w: &Worker) {
    let mut mine = Vec::new();
    for i in 0..5 {
        let (account, _) = w.create_account(&format!("listed {i}"));
        let numbers: Vec<String> = (0..i % 3).map(|_| fresh_number()).collect();
        for number in &numbers {
            w.create_number(&account, number, &[]);
        }
        mine.push((account, numbers));
    }
    let rows =
        walk(w, "/admin/accounts?", 2, |rows| mine.iter().all(|(id, _)| rows.iter().any(|r| r["id"] == id.as_str())));
    let ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "no account repeats across pages: {ids:?}");
    assert!(!ids.contains(&"acct_operator"), "{ids:?}");
    for (i, (id, numbers)) in mine.iter().enumerate() {
        let row = rows.iter().find(|r| r["id"] == id.as_str()).unwrap_or_else(|| panic!("{id} listed"));
        assert_eq!(row["name"], format!("listed {i}"));
        let mut listed: Vec<String> =
            row["numbers"].as_array().into_iter().flatten().filter_map(|n| n.as_str().map(str::to_owned)).collect();
        listed.sort();
        let mut expected = numbers.clone();
        expected.sort();
        assert_eq!(listed, expected, "{row}");
    }
    // Newest first: the last account created comes before the first.
    let position = |id: &str| ids.iter().position(|x| *x == id);
    assert!(position(&mine[4].0) < position(&mine[0].0), "{ids:?}");
    assert_eq!(w.call("GET", "/admin/accounts", "wrong", None, &[]).status, 401);
}

/// `LOG_SAMPLE_EVERY=4`: a stored carrier event's line and its job's line are written for the
/// events whose row id the sample keeps (the first 8 bytes of its SHA-256, big-endian, a
/// multiple of 4) and for no other; a refused delivery is logged whatever the sample says.
fn routine_lines_are_sampled_and_refusals_never(_shared: &Worker) {
    use sha2::Digest as _;
    const EVERY: u64 = 4;
    let w = Worker::start_with(&[("LOG_SAMPLE_EVERY", "4")]);
    let number = fresh_number();
    let (account, _) = w.create_account("sampled");
    w.create_number(&account, &number, &[]);
    let kept = |id: &str| {
        let digest = sha2::Sha256::digest(id.as_bytes());
        u64::from_be_bytes(digest[..8].try_into().expect("eight bytes")) % EVERY == 0
    };
    let mut events = Vec::new();
    for n in 0..40 {
        let event_id = format!("sampled-{n}-{}", sim::random_hex());
        let a = w.deliver_telnyx(&inbound(&event_id, &number));
        assert_eq!(a.status, 200, "{}", a.body);
        let id = a.json()["id"].as_str().expect("the row's id").to_owned();
        events.push((event_id, kept(&id), id));
    }
    let sampled = events.iter().filter(|e| e.1).count();
    assert!((1..events.len()).contains(&sampled), "the sample keeps some and drops some: {sampled}");
    // Every job has ended as planned (a message stored) once every event is processed and the
    // sampled ones' lines are written.
    let job_line = |id: &str| w.log_lines(&["\"job\":\"carrier_event\"", &format!("\"id\":\"{id}\"")]);
    let settled = w.eventually(Duration::from_secs(60), || {
        events.iter().filter(|e| e.1).all(|e| job_line(&e.2) >= 1)
            && w.events_sql("SELECT COUNT(*) AS n FROM carrier_events WHERE processed_at IS NULL AND carrier_event_id LIKE 'sampled-%'")
                [0]["n"]
                == 0
    });
    assert!(settled, "every event processed and the sampled ones' job lines written");
    for (event_id, kept, id) in &events {
        let stored = w.log_lines(&["\"request\":\"webhook\"", &format!("\"event_id\":\"{event_id}\"")]);
        assert_eq!(stored, usize::from(*kept), "{event_id}'s ingest line, kept: {kept}");
        assert_eq!(job_line(id).min(1), usize::from(*kept), "{id}'s job line, kept: {kept}");
    }
    for n in 0..3 {
        let body = inbound(&format!("refused-{n}"), &number);
        let a = w.post(
            "/webhooks/telnyx",
            &[("telnyx-timestamp", "1"), ("telnyx-signature-ed25519", "AAAA")],
            body.as_bytes(),
        );
        assert!(a.status >= 400, "{}", a.body);
    }
    let refusals = w.eventually(Duration::from_secs(15), || {
        w.log_lines(&["\"request\":\"/webhooks/telnyx\"", "\"outcome\":\"rejected\""]) >= 3
    });
    assert!(refusals, "every refusal is logged");
}
