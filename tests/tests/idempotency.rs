//! `Idempotency-Key` on every POST and PATCH of `/v1` and `/admin` (docs/contract.md §5,
//! "Idempotency"): the same key and request answer the first answer again and do the work once;
//! the same key with another request is refused; concurrent requests with one key do it once.

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use exactly_tests::{fresh_number, lit, Customer, Worker, ADMIN_TOKEN};
use serde_json::{json, Value};
use sim::api::Answer;

use crate::webhooks::wait_received;
use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("idempotency::every_post_and_patch_answers_once_per_key", every_post_and_patch_answers_once_per_key),
    (
        "idempotency::concurrent_requests_with_one_key_do_the_work_once",
        concurrent_requests_with_one_key_do_the_work_once,
    ),
];

/// One row of the route table: the route as the router names it, and the request to make.
struct Row<'a> {
    method: &'static str,
    pattern: &'static str,
    path: String,
    token: String,
    body: Option<Value>,
    /// Counts what the request did (rows, sends): the same after the request and after its
    /// replay. `None` where the answer alone shows it (an error, which is not kept).
    count: Option<Box<dyn Fn() -> usize + 'a>>,
}

fn call(w: &Worker, row: &Row<'_>, key: &str, body: Option<&Value>) -> Answer {
    w.call(row.method, &row.path, &row.token, body, &[("idempotency-key", key)])
}

fn count_rows<'a>(w: &'a Worker, account: &str, sql: String) -> Box<dyn Fn() -> usize + 'a> {
    let account = account.to_owned();
    Box::new(move || w.sql_for(&account, &sql).len())
}

/// Every POST and PATCH route of `/v1` and `/admin` in docs/openapi.json (which the router
/// matches, see edge/src/lib.rs's tests).
fn documented_routes() -> BTreeSet<(String, String)> {
    let doc: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).expect("docs/openapi.json is JSON");
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            let method = method.to_uppercase();
            if (method == "POST" || method == "PATCH") && (path.starts_with("/v1/") || path.starts_with("/admin/")) {
                routes.insert((method, path.clone()));
            }
        }
    }
    routes
}

/// The table: a request to each route, made to succeed where the test can arrange it.
fn table<'a>(w: &'a Worker, c: &Customer) -> Vec<Row<'a>> {
    let admin = ADMIN_TOKEN.to_owned();
    let account_name = format!("idem-{}", sim::random_hex());
    let (endpoint, _) = w.endpoint_at(c, &format!("/hook/{}", sim::random_hex()), &["message.received"]);
    let tomorrow = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() + 86_400).to_rfc3339();
    let yesterday = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() - 86_400).to_rfc3339();
    let scheduled = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": "later", "send_at": tomorrow})),
        &[],
    );
    assert_eq!(scheduled.status, 201, "{}", scheduled.body);
    let scheduled = scheduled.json()["id"].as_str().expect("an id").to_owned();
    // An event of a type the endpoint subscribes to, to replay (a test send never is).
    let inbound = exactly_tests::telnyx_inbound(
        &format!("e-{}", sim::random_hex()),
        &format!("m-{}", sim::random_hex()),
        &c.number,
        "to replay",
    );
    assert_eq!(w.deliver_telnyx(&inbound).status, 200);
    let mut event = String::new();
    let written = w.eventually(Duration::from_secs(30), || {
        let listed = w.call("GET", "/v1/events?type=message.received", &c.key, None, &[]).json();
        event = listed["data"][0]["id"].as_str().unwrap_or_default().to_owned();
        !event.is_empty()
    });
    assert!(written, "the inbound message's event was written");
    let number = fresh_number();
    let sent_text = format!("once {}", sim::random_hex());
    let rows = |sql: String| Some(count_rows(w, &c.account, sql));
    // Keys and portal sessions are in `DB` whatever database the account lives in.
    let keyed =
        |sql: String| -> Option<Box<dyn Fn() -> usize + 'a>> { Some(Box::new(move || w.sql_at("DB", &sql).len())) };
    let key_name = format!("idem-key-{}", sim::random_hex());
    let admin_key_name = format!("idem-admin-key-{}", sim::random_hex());
    let portal_ttl = 3000 + i64::from(u8::from_str_radix(&sim::random_hex()[..2], 16).unwrap_or(0));
    vec![
        Row {
            method: "POST",
            pattern: "/admin/accounts",
            path: "/admin/accounts".into(),
            token: admin.clone(),
            body: Some(json!({ "name": account_name })),
            count: Some(Box::new(move || {
                let listed = w.call("GET", "/admin/accounts?limit=100", ADMIN_TOKEN, None, &[]).json();
                listed["data"].as_array().map_or(0, |all| all.iter().filter(|a| a["name"] == account_name).count())
            })),
        },
        Row {
            method: "POST",
            pattern: "/admin/accounts/{id}/rotate_key",
            path: format!("/admin/accounts/{}/rotate_key", w.new_customer("idem-rotate").account),
            token: admin.clone(),
            body: None,
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/admin/numbers",
            path: "/admin/numbers".into(),
            token: admin.clone(),
            body: Some(json!({"account_id": c.account, "phone_number": number, "ring_targets": []})),
            count: rows(format!("SELECT id FROM phone_numbers WHERE phone_number = {}", lit(&number))),
        },
        Row {
            method: "POST",
            pattern: "/admin/erasures",
            path: "/admin/erasures".into(),
            token: admin.clone(),
            // A number nobody has used: the erasure finds nothing, and is recorded once.
            body: Some(json!({ "phone_number": fresh_number() })),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/admin/carrier_events/{id}/retry",
            path: "/admin/carrier_events/cev_none/retry".into(),
            token: admin.clone(),
            body: None,
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/admin/carrier_events/retry",
            path: "/admin/carrier_events/retry".into(),
            token: admin.clone(),
            body: Some(json!({"since": "2030-01-01T00:00:00Z"})),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/admin/event_shards/move",
            path: "/admin/event_shards/move".into(),
            token: admin.clone(),
            body: Some(json!({})),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/admin/webhook_deliveries/{id}/retry",
            path: "/admin/webhook_deliveries/dlv_none/retry".into(),
            token: admin.clone(),
            body: None,
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/v1/messages",
            path: "/v1/messages".into(),
            token: c.key.clone(),
            body: Some(json!({"from": c.number, "to": "+15559990000", "text": sent_text})),
            count: rows(format!("SELECT id FROM messages WHERE text = {}", lit(&sent_text))),
        },
        Row {
            method: "POST",
            pattern: "/v1/messages/{id}/cancel",
            path: format!("/v1/messages/{scheduled}/cancel"),
            token: c.key.clone(),
            body: None,
            count: rows(format!("SELECT id FROM messages WHERE id = {} AND status = 'canceled'", lit(&scheduled))),
        },
        Row {
            method: "POST",
            pattern: "/v1/webhook_endpoints",
            path: "/v1/webhook_endpoints".into(),
            token: c.key.clone(),
            body: Some(json!({"url": format!("{}/hook/idem-table", w.customer.base), "event_types": ["call.missed"]})),
            count: rows("SELECT id FROM webhook_endpoints WHERE url LIKE '%/hook/idem-table'".into()),
        },
        Row {
            method: "PATCH",
            pattern: "/v1/webhook_endpoints/{id}",
            path: format!("/v1/webhook_endpoints/{endpoint}"),
            token: c.key.clone(),
            body: Some(json!({"max_in_flight": 7})),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/v1/webhook_endpoints/{id}/rotate_secret",
            path: format!("/v1/webhook_endpoints/{endpoint}/rotate_secret"),
            token: c.key.clone(),
            body: None,
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/v1/webhook_endpoints/{id}/recover",
            path: format!("/v1/webhook_endpoints/{endpoint}/recover"),
            token: c.key.clone(),
            body: Some(json!({ "since": yesterday })),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/v1/webhook_endpoints/{id}/test",
            path: format!("/v1/webhook_endpoints/{endpoint}/test"),
            token: c.key.clone(),
            body: Some(json!({"event_type": "call.missed"})),
            count: rows(format!(
                "SELECT id FROM outbound_events WHERE type = 'call.missed' AND resource_id LIKE {}",
                lit(&format!("{endpoint}@%"))
            )),
        },
        Row {
            method: "POST",
            pattern: "/v1/events/{id}/replay",
            path: format!("/v1/events/{event}/replay"),
            token: c.key.clone(),
            body: Some(json!({ "endpoint_id": endpoint })),
            count: rows(format!(
                "SELECT id FROM webhook_deliveries WHERE event_id = {} AND kind = 'replay'",
                lit(&event)
            )),
        },
        Row {
            method: "POST",
            pattern: "/v1/webhook_endpoints/{id}/retries",
            path: format!("/v1/webhook_endpoints/{endpoint}/retries"),
            token: c.key.clone(),
            body: Some(json!({ "event_type": "message.received" })),
            count: rows(format!("SELECT id FROM delivery_retries WHERE endpoint_id = {}", lit(&endpoint))),
        },
        Row {
            method: "POST",
            pattern: "/v1/api_keys",
            path: "/v1/api_keys".into(),
            token: c.key.clone(),
            body: Some(json!({ "name": key_name, "scope": "read" })),
            count: keyed(format!("SELECT id FROM api_keys WHERE name = {}", lit(&key_name))),
        },
        Row {
            method: "POST",
            pattern: "/admin/accounts/{id}/keys",
            path: format!("/admin/accounts/{}/keys", c.account),
            token: admin.clone(),
            body: Some(json!({ "name": admin_key_name })),
            count: keyed(format!("SELECT id FROM api_keys WHERE name = {}", lit(&admin_key_name))),
        },
        Row {
            method: "PATCH",
            pattern: "/admin/accounts/{id}",
            path: format!("/admin/accounts/{}", c.account),
            token: admin.clone(),
            body: Some(json!({ "portal_origins": ["https://admin.example.com"] })),
            count: None,
        },
        Row {
            method: "PATCH",
            pattern: "/v1/account",
            path: "/v1/account".into(),
            token: c.key.clone(),
            body: Some(json!({ "portal_origins": ["https://app.example.com"] })),
            count: None,
        },
        Row {
            method: "POST",
            pattern: "/v1/portal_sessions",
            path: "/v1/portal_sessions".into(),
            token: c.key.clone(),
            body: Some(json!({ "read_only": true, "expires_in": portal_ttl })),
            count: keyed(format!(
                "SELECT id FROM portal_sessions WHERE account_id = {} AND expires_at - created_at = {}",
                lit(&c.account),
                portal_ttl * 1000
            )),
        },
    ]
}

/// Each route, twice with one key: the second answer is the first, byte for byte (ids, secrets
/// and times included) and what the first did is done once; the key with another body is 422
/// `idempotency_key_reused`. An error answer is not kept: the same request runs again.
fn every_post_and_patch_answers_once_per_key(w: &Worker) {
    let c = w.new_customer("idempotency");
    let rows = table(w, &c);
    let covered: BTreeSet<(String, String)> =
        rows.iter().map(|r| (r.method.to_owned(), r.pattern.to_owned())).collect();
    assert_eq!(covered, documented_routes(), "the table covers every POST and PATCH of /v1 and /admin");
    for row in &rows {
        let key = format!("k-{}", sim::random_hex());
        let first = call(w, row, &key, row.body.as_ref());
        let route = format!("{} {}", row.method, row.pattern);
        // Every route the test can make succeed does (the rest answer an error, which is not kept).
        let fails =
            ["/admin/carrier_events/{id}/retry", "/admin/event_shards/move", "/admin/webhook_deliveries/{id}/retry"];
        assert_eq!((200..300).contains(&first.status), !fails.contains(&row.pattern), "{route}: {}", first.body);
        let done = row.count.as_ref().map(|count| count());
        let again = call(w, row, &key, row.body.as_ref());
        assert_eq!((again.status, &again.body), (first.status, &first.body), "{route}: {}", first.body);
        if let (Some(count), Some(done)) = (&row.count, done) {
            assert_eq!((done, count()), (1, 1), "{route}: done once, and once only");
        }
        let other = json!({"other": sim::random_hex()});
        let reused = call(w, row, &key, Some(&other));
        if (200..300).contains(&first.status) {
            let code = reused.json()["error"]["code"].clone();
            assert_eq!((reused.status, code), (422, json!("idempotency_key_reused")), "{route}: {}", reused.body);
        } else {
            // Not kept: the key is free, so another body runs as a request of its own.
            assert_ne!(reused.json()["error"]["code"], "idempotency_key_reused", "{route}: {}", reused.body);
        }
    }
    // A key is the caller's: another account's same key and body is a request of its own.
    let other = w.new_customer("idempotency");
    let key = format!("k-{}", sim::random_hex());
    let body = json!({"url": format!("{}/hook/idem-shared", w.customer.base), "event_types": ["call.missed"]});
    let mine = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[("idempotency-key", &key)]);
    let theirs = w.call("POST", "/v1/webhook_endpoints", &other.key, Some(&body), &[("idempotency-key", &key)]);
    assert_eq!((mine.status, theirs.status), (201, 201), "{} {}", mine.body, theirs.body);
    assert_ne!(mine.json()["id"], theirs.json()["id"]);
    let long = "k".repeat(256);
    let a = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[("idempotency-key", &long)]);
    assert_eq!((a.status, a.json()["error"]["field"].clone()), (422, json!("Idempotency-Key")), "{}", a.body);
}

/// Eight requests with one key at once, to create an endpoint and to send a message: each is done
/// once; every answer is the one answer or 409 `idempotency_key_in_use`, and asking again
/// after a 409 gets the one answer.
fn concurrent_requests_with_one_key_do_the_work_once(w: &Worker) {
    let c = w.new_customer("idempotency");
    let (_, path) = {
        let path = format!("/hook/{}", sim::random_hex());
        (w.endpoint_at(&c, &path, &["message.sent"]).0, path)
    };
    let text = format!("concurrent {}", sim::random_hex());
    let requests = [
        (
            "/v1/webhook_endpoints",
            json!({"url": format!("{}/hook/idem-race", w.customer.base), "event_types": ["call.missed"]}),
        ),
        ("/v1/messages", json!({"from": c.number, "to": "+15559990000", "text": text})),
    ];
    for (route, body) in &requests {
        let key = format!("k-{}", sim::random_hex());
        let answers: Vec<Answer> = thread::scope(|s| {
            let calls: Vec<_> = (0..8)
                .map(|_| s.spawn(|| w.call("POST", route, &c.key, Some(body), &[("idempotency-key", &key)])))
                .collect();
            calls.into_iter().map(|t| t.join().expect("a request thread")).collect()
        });
        let done: Vec<&Answer> = answers.iter().filter(|a| a.status == 201).collect();
        assert!(
            !done.is_empty(),
            "{route}: one request ran: {:?}",
            answers.iter().map(|a| a.status).collect::<Vec<_>>()
        );
        for a in &answers {
            match a.status {
                201 => assert_eq!(a.body, done[0].body, "{route}: one answer"),
                409 => assert_eq!(a.json()["error"]["code"], "idempotency_key_in_use", "{route}: {}", a.body),
                other => panic!("{route}: answered {other}: {}", a.body),
            }
        }
        let again = w.call("POST", route, &c.key, Some(body), &[("idempotency-key", &key)]);
        assert_eq!((again.status, &again.body), (201, &done[0].body), "{route}");
    }
    let endpoints = w.sql_for(&c.account, "SELECT id FROM webhook_endpoints WHERE url LIKE '%/hook/idem-race'");
    assert_eq!(endpoints.len(), 1, "one endpoint");
    let messages = w.sql_for(&c.account, &format!("SELECT id FROM messages WHERE text = {}", lit(&text)));
    assert_eq!(messages.len(), 1, "one message");
    let id = messages[0]["id"].as_str().unwrap_or_default().to_owned();
    let sent = w.eventually(Duration::from_secs(60), || w.carrier.sends_for(&id) >= 1);
    assert!(sent, "the message was sent");
    wait_received(w, &path, 1);
    assert_eq!(w.carrier.sends_for(&id), 1, "sent once");
}
