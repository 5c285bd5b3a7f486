//! What an endpoint may ask for beyond its event types (docs/contract.md §6): a filter over the
//! event body, custom headers sent with every attempt, and test sends of any type in the event
//! catalog.

use std::time::Duration;

use exactly_core::webhook::EVENT_TYPES;
use exactly_tests::{webhook_schema_problems_with, Customer, Worker};
use serde_json::{json, Value};
use sim::customer::Received;

use crate::webhooks::wait_received;
use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "endpoint_options::a_filter_passes_one_event_and_holds_back_another",
        a_filter_passes_one_event_and_holds_back_another,
    ),
    (
        "endpoint_options::custom_headers_go_with_every_attempt_and_never_back",
        custom_headers_go_with_every_attempt_and_never_back,
    ),
    (
        "endpoint_options::bad_filters_and_headers_are_refused_naming_the_problem",
        bad_filters_and_headers_are_refused_naming_the_problem,
    ),
    (
        "endpoint_options::the_catalog_serves_every_type_and_a_test_send_delivers_its_example",
        the_catalog_serves_every_type_and_a_test_send_delivers_its_example,
    ),
    (
        "endpoint_options::an_account_holds_1000_endpoints_and_two_racing_for_the_last_place_get_one",
        an_account_holds_1000_endpoints_and_two_racing_for_the_last_place_get_one,
    ),
];

/// Creates an endpoint for `message.received` at a fresh path with `extra` fields; returns (id,
/// path).
fn endpoint_with(w: &Worker, c: &Customer, extra: Value) -> (String, String) {
    let path = format!("/hook/{}", sim::random_hex());
    let mut body = json!({"url": format!("{}{path}", w.customer.base), "event_types": ["message.received"]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let a = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    (a.json()["id"].as_str().expect("an id").to_owned(), path)
}

/// An inbound SMS to the customer's number saying `text`, verified and accepted.
fn inbound(w: &Worker, c: &Customer, text: &str) {
    let body = sim::telnyx::envelope(
        &format!("e-{}", sim::random_hex()),
        "message.received",
        "2026-12-02T10:00:00Z",
        json!({
            "id": format!("m-{}", sim::random_hex()), "from": {"phone_number": "+15559990000"},
            "to": [{"phone_number": c.number}], "text": text,
        }),
        1,
    );
    let a = w.deliver_telnyx(&body);
    assert_eq!(a.status, 200, "{}", a.body);
}

fn text_of(received: &Received) -> String {
    let body: Value = serde_json::from_str(&received.body).expect("a JSON body");
    body["data"]["text"].as_str().unwrap_or_default().to_owned()
}

/// The status of the delivery of `event_id` to `endpoint_id`, as the event shows it.
fn delivery_status(w: &Worker, c: &Customer, event_id: &str, endpoint_id: &str) -> Option<String> {
    let shown = w.call("GET", &format!("/v1/events/{event_id}"), &c.key, None, &[]).json();
    let deliveries = shown["deliveries"].as_array()?;
    let to = deliveries.iter().rev().find(|d| d["endpoint_id"] == endpoint_id)?;
    to["status"].as_str().map(str::to_owned)
}

/// An endpoint with a filter gets the event that passes it; the one that does not is settled
/// `filtered` on its event, never silently absent, and never sent; a neighbour endpoint without a
/// filter gets both. Changing the filter and replaying delivers the held-back event.
fn a_filter_passes_one_event_and_holds_back_another(w: &Worker) {
    let c = w.new_customer("filters");
    let (filtered, filtered_path) =
        endpoint_with(w, &c, json!({"filter": "data.text = \"pass me\" and data.direction in [\"inbound\"]"}));
    let (_, open_path) = endpoint_with(w, &c, json!({}));
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{filtered}"), &c.key, None, &[]).json();
    assert_eq!(shown["filter"], "data.text = \"pass me\" and data.direction in [\"inbound\"]", "{shown}");
    inbound(w, &c, "hold me");
    inbound(w, &c, "pass me");
    let both = wait_received(w, &open_path, 2);
    let held_id = both.iter().find(|r| text_of(r) == "hold me").and_then(|r| r.header("webhook-id")).expect("held");
    let passed_id = both.iter().find(|r| text_of(r) == "pass me").and_then(|r| r.header("webhook-id")).expect("passed");
    // Settled as filtered: after this nothing of it can still be sent.
    let settled = w.eventually(Duration::from_secs(60), || {
        delivery_status(w, &c, held_id, &filtered).as_deref() == Some("filtered")
    });
    assert!(settled, "held back: {:?}", delivery_status(w, &c, held_id, &filtered));
    let got = wait_received(w, &filtered_path, 1);
    assert_eq!(got.iter().map(text_of).collect::<Vec<_>>(), ["pass me"]);
    assert_eq!(got[0].header("webhook-id"), Some(passed_id));
    let shown = w.call("GET", &format!("/v1/events/{held_id}"), &c.key, None, &[]).json();
    let to_filtered = shown["deliveries"].as_array().and_then(|all| all.iter().find(|d| d["endpoint_id"] == filtered));
    let to_filtered = to_filtered.expect("the held-back delivery is listed on its event");
    assert_eq!(to_filtered["attempts"], json!([]), "nothing was sent: {shown}");
    assert!(to_filtered["last_error"].as_str().is_some_and(|e| e.contains("filter")), "{shown}");
    // A recovery of the window finds nothing to deliver again: one event was received, the
    // other was held back on purpose.
    let since = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() - 3600).to_rfc3339();
    assert_eq!(w.recover(&c.key, &filtered, &since)["queued"], json!(0));
    // The filter now lets "hold me" through: a replay of the held event reaches it, once.
    let patch = json!({"filter": "not data.text = \"pass me\""});
    let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{filtered}"), &c.key, Some(&patch), &[]);
    assert_eq!((a.status, a.json()["filter"].clone()), (200, json!("not data.text = \"pass me\"")), "{}", a.body);
    let a = w.call("POST", &format!("/v1/events/{held_id}/replay"), &c.key, None, &[]);
    assert_eq!(a.status, 202, "{}", a.body);
    let got = wait_received(w, &filtered_path, 2);
    assert_eq!(got.iter().map(text_of).collect::<Vec<_>>(), ["pass me", "hold me"]);
    wait_received(w, &open_path, 3);
    // Cleared with null: everything passes again.
    let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{filtered}"), &c.key, Some(&json!({"filter": null})), &[]);
    assert_eq!((a.status, a.json()["filter"].clone()), (200, Value::Null), "{}", a.body);
    assert_eq!(w.customer.received(&filtered_path).len(), 2, "nothing else was sent to the filtered endpoint");
}

/// Custom headers reach the endpoint on the first attempt and on its retry, beside the
/// signature headers they cannot replace; reading the endpoint back shows their names, never
/// their values.
fn custom_headers_go_with_every_attempt_and_never_back(w: &Worker) {
    let c = w.new_customer("headers");
    let headers = json!({"X-Gateway-Key": "gw-key-4f1c9a", "Authorization": "Bearer tok-77e2"});
    let (id, path) = endpoint_with(w, &c, json!({ "headers": headers }));
    w.customer.script(&path, &[503]);
    inbound(w, &c, "with headers");
    let got = wait_received(w, &path, 2);
    assert_eq!(got.iter().map(|r| r.answered).collect::<Vec<_>>(), [503, 200]);
    for attempt in &got {
        assert_eq!(attempt.header("x-gateway-key"), Some("gw-key-4f1c9a"));
        assert_eq!(attempt.header("authorization"), Some("Bearer tok-77e2"));
        assert!(attempt.header("webhook-signature").is_some_and(|s| s.starts_with("v1,")));
    }
    let one = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]);
    let list = w.call("GET", "/v1/webhook_endpoints", &c.key, None, &[]);
    for answer in [&one, &list] {
        assert!(!answer.body.contains("gw-key-4f1c9a") && !answer.body.contains("tok-77e2"), "{}", answer.body);
    }
    assert_eq!(one.json()["headers"], json!({"authorization": "[redacted]", "x-gateway-key": "[redacted]"}));
    // Replaced as a whole; null clears them.
    let patch = json!({"headers": {"X-Other": "v2"}});
    let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&patch), &[]);
    assert_eq!(a.json()["headers"], json!({"x-other": "[redacted]"}), "{}", a.body);
    inbound(w, &c, "after the change");
    let got = wait_received(w, &path, 3);
    assert_eq!((got[2].header("x-other"), got[2].header("x-gateway-key")), (Some("v2"), None));
    let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({"headers": null})), &[]);
    assert_eq!(a.json()["headers"], json!({}), "{}", a.body);
}

/// A filter that does not parse is answered 422 naming where; headers the delivery owns, too
/// many, or values that could split a request are answered 422 naming the header, and the
/// value never comes back in the error.
fn bad_filters_and_headers_are_refused_naming_the_problem(w: &Worker) {
    let c = w.new_customer("options");
    let url = format!("{}/hook/{}", w.customer.base, sim::random_hex());
    let create = |extra: Value| {
        let mut body = json!({"url": url, "event_types": ["message.received"]});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[])
    };
    for (filter, position) in [("data.text = ", 13), ("data.text == \"x\"", 12), ("(type exists", 13)] {
        let a = create(json!({ "filter": filter }));
        let error = &a.json()["error"];
        assert_eq!((a.status, error["field"].as_str()), (422, Some("filter")), "{filter}: {}", a.body);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("position {position}")), "{filter}: {message}");
    }
    assert_eq!(create(json!({"filter": 7})).status, 422);
    let eleven: serde_json::Map<String, Value> = (0..11).map(|i| (format!("x-h{i}"), json!("v"))).collect();
    let refused = [
        json!({"Webhook-Signature": "v1,forged"}),
        json!({"Content-Length": "1"}),
        json!({"Transfer-Encoding": "chunked"}),
        json!({"x-split": "a\r\nx-injected: secret-value-9"}),
        json!({"x-number": 5}),
        Value::Object(eleven),
    ];
    for headers in refused {
        let a = create(json!({ "headers": headers }));
        assert_eq!((a.status, a.json()["error"]["field"].as_str()), (422, Some("headers")), "{headers}: {}", a.body);
        assert!(!a.body.contains("secret-value-9") && !a.body.contains("forged"), "{}", a.body);
    }
    let listed = w.call("GET", "/v1/webhook_endpoints", &c.key, None, &[]).json();
    assert_eq!(listed["data"], json!([]), "nothing refused was stored");
}

/// `GET /v1/event_types` serves every type with a schema that its own example passes (and
/// docs/openapi.json's too); a test send of a type delivers that example, signed, marked as a
/// test, past the endpoint's filter and whatever it subscribes to; an unknown or operator-only
/// type is refused.
fn the_catalog_serves_every_type_and_a_test_send_delivers_its_example(w: &Worker) {
    let c = w.new_customer("catalog");
    assert_eq!(w.call("GET", "/v1/event_types", "sk_not_a_key", None, &[]).status, 401);
    let a = w.call("GET", "/v1/event_types", &c.key, None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    let catalog = a.json();
    let entries = catalog["data"].as_array().cloned().unwrap_or_default();
    let subscribable: Vec<&str> =
        entries.iter().filter(|e| e["subscribable"] == true).filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(subscribable, EVENT_TYPES, "{catalog}");
    assert_eq!(
        entries.len(),
        EVENT_TYPES.len() + 3,
        "with endpoint.test and the operator's carrier_event.failed and audit.violation"
    );
    let examples: Vec<String> = entries.iter().map(|e| e["example"].to_string()).collect();
    let texts: Vec<&str> = examples.iter().map(String::as_str).collect();
    let problems: Vec<String> = webhook_schema_problems_with(&texts, Some(&catalog)).into_iter().flatten().collect();
    assert!(problems.is_empty(), "examples that fail their own schema: {problems:?}");

    let (id, path) = endpoint_with(w, &c, json!({"filter": "data.text = \"never sent\""}));
    let secret = w.sql_for(&c.account, &format!("SELECT secret FROM webhook_endpoints WHERE id = '{id}'"));
    let secret = secret.first().and_then(|r| r["secret"].as_str()).expect("a secret").to_owned();
    let test =
        |body: Option<Value>| w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, body.as_ref(), &[]);
    for refused in ["carrier_event.failed", "audit.violation", "message.nope"] {
        let a = test(Some(json!({ "event_type": refused })));
        assert_eq!((a.status, a.json()["error"]["field"].as_str()), (422, Some("event_type")), "{refused}: {}", a.body);
    }
    let sent = test(Some(json!({"event_type": "call.completed"})));
    assert_eq!(sent.status, 202, "{}", sent.body);
    let plain = test(None);
    assert_eq!(plain.status, 202, "{}", plain.body);
    let got = wait_received(w, &path, 2);
    let bodies: Vec<Value> = got.iter().map(|r| serde_json::from_str(&r.body).expect("JSON")).collect();
    let completed = bodies.iter().find(|b| b["type"] == "call.completed").expect("the call.completed test");
    let example = entries.iter().find(|e| e["type"] == "call.completed").map(|e| e["example"]["data"].clone());
    assert_eq!(Some(completed["data"].clone()), example);
    assert_eq!((completed["test"].clone(), completed["id"].clone()), (json!(true), sent.json()["event_id"].clone()));
    let endpoint_test = bodies.iter().find(|b| b["type"] == "endpoint.test").expect("the endpoint.test");
    assert_eq!((endpoint_test["test"].clone(), endpoint_test["data"]["endpoint_id"].clone()), (json!(true), json!(id)));
    exactly_tests::verify_standard_webhooks(&[&secret], &got).unwrap_or_else(|report| panic!("{report}"));
    // A test send goes to its one endpoint only: never replayed, recovered into another endpoint
    // subscribed to its type, or listed with that type's real events.
    let test_event = sent.json()["event_id"].as_str().unwrap_or_default().to_owned();
    let other = w.call(
        "POST",
        "/v1/webhook_endpoints",
        &c.key,
        Some(&json!({"url": format!("{}/hook/{}", w.customer.base, sim::random_hex()), "event_types": ["call.completed"]})),
        &[],
    );
    let other = other.json()["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(w.call("POST", &format!("/v1/events/{test_event}/replay"), &c.key, None, &[]).status, 409);
    let since = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() - 3600).to_rfc3339();
    assert_eq!(w.recover(&c.key, &other, &since)["queued"], json!(0));
    let listed = w.call("GET", "/v1/events?type=call.completed", &c.key, None, &[]).json();
    assert_eq!(listed["data"], json!([]), "{listed}");
    assert_eq!(w.call("GET", &format!("/v1/events/{test_event}"), &c.key, None, &[]).status, 200);
}

/// An account holds at most 1,000 endpoints (docs/deploy.md, "Limits"), so an event's fan-out
/// is one bounded statement: with 999 stored, two creates at once get one place (201) and one
/// `endpoint_limit` (409), never a 1,001st; deleting one frees its place.
fn an_account_holds_1000_endpoints_and_two_racing_for_the_last_place_get_one(w: &Worker) {
    let c = w.new_customer("endpoint-limit");
    let account = exactly_tests::lit(&c.account);
    w.sql_for(
        &c.account,
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 999)
             INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, created_at, updated_at)
             SELECT 'ep_' || lower(hex(randomblob(16))), {account}, 'https://example.com/' || i,
                    '[\"message.received\"]', 'whsec_AAAA', 0, 0 FROM n"
        ),
    );
    let stored = || {
        let rows =
            w.sql_for(&c.account, &format!("SELECT COUNT(*) AS n FROM webhook_endpoints WHERE account_id = {account}"));
        rows.first().and_then(|r| r["n"].as_i64()).unwrap_or(-1)
    };
    assert_eq!(stored(), 999);
    let create =
        || w.try_endpoint(&c.key, &format!("{}/hook/{}", w.customer.base, sim::random_hex()), &["message.received"]);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(create);
        let b = s.spawn(create);
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{} / {}", a.body, b.body);
    let refused = if a.status == 409 { &a } else { &b };
    assert_eq!(refused.json()["error"]["code"], "endpoint_limit", "{}", refused.body);
    assert_eq!(stored(), 1_000, "never a 1,001st");
    let again = create();
    assert_eq!((again.status, again.json()["error"]["code"].clone()), (409, json!("endpoint_limit")), "{}", again.body);
    let seventh = w.sql_for(
        &c.account,
        &format!("SELECT id FROM webhook_endpoints WHERE account_id = {account} AND url = 'https://example.com/7'"),
    );
    let seventh = seventh.first().and_then(|r| r["id"].as_str()).unwrap_or_default().to_owned();
    let deleted = w.call("DELETE", &format!("/v1/webhook_endpoints/{seventh}"), &c.key, None, &[]);
    assert!((200..300).contains(&deleted.status), "{}", deleted.body);
    assert_eq!(create().status, 201, "a deleted endpoint's place is free again");
    assert_eq!(stored(), 1_000);
}
