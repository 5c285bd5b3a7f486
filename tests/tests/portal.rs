//! Keys with scopes and a lifecycle, portal sessions, the delivery log and "retry all failed"
//! (docs/contract.md §5, "Keys, scopes and portal sessions"; §6, "The delivery log").

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use exactly_tests::{lit, Customer, Worker, ADMIN_TOKEN};
use serde_json::{json, Value};
use sim::customer::Received;

use crate::webhooks::wait_received;
use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("portal::every_v1_route_checks_the_callers_scope", every_v1_route_checks_the_callers_scope),
    ("portal::keys_rotate_by_create_then_revoke", keys_rotate_by_create_then_revoke),
    ("portal::a_portal_session_reaches_only_what_it_allows", a_portal_session_reaches_only_what_it_allows),
    (
        "portal::the_delivery_log_shows_the_signed_request_and_filters",
        the_delivery_log_shows_the_signed_request_and_filters,
    ),
    ("portal::retry_all_failed_resends_each_failed_delivery_once", retry_all_failed_resends_each_failed_delivery_once),
    (
        "portal::a_limited_sessions_pages_reveal_nothing_it_may_not_see",
        a_limited_sessions_pages_reveal_nothing_it_may_not_see,
    ),
    ("portal::an_account_holds_at_most_500_unexpired_sessions", an_account_holds_at_most_500_unexpired_sessions),
    ("portal::one_portal_session_is_listed_and_revoked_alone", one_portal_session_is_listed_and_revoked_alone),
];

fn new_key(w: &Worker, c: &Customer, scope: &str) -> (String, String) {
    let a = w.call("POST", "/v1/api_keys", &c.key, Some(&json!({"name": format!("{scope} key"), "scope": scope})), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    let v = a.json();
    assert_eq!(v["scope"], scope);
    (v["id"].as_str().unwrap().to_owned(), v["api_key"].as_str().unwrap().to_owned())
}

fn portal(w: &Worker, c: &Customer, body: &Value) -> Value {
    let a = w.call("POST", "/v1/portal_sessions", &c.key, Some(body), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    a.json()
}

/// The part of the API a `/v1` route belongs to, from its path alone (the spec, restated apart
/// from the worker's own mapping): keys, messaging, or the webhook area.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Area {
    Keys,
    Messaging,
    Webhooks,
}

fn area(method: &str, pattern: &str) -> Area {
    let keys = pattern.starts_with("/v1/api_keys")
        || pattern.starts_with("/v1/portal_sessions")
        || (pattern == "/v1/account" && method != "GET");
    let messaging = ["/v1/messages", "/v1/calls", "/v1/usage", "/v1/media"].iter().any(|p| pattern.starts_with(p));
    if keys {
        Area::Keys
    } else if messaging {
        Area::Messaging
    } else {
        Area::Webhooks
    }
}

/// Every `/v1` route (but the signed media link, which takes no key) with every scope and two
/// kinds of portal session: 403 `forbidden` exactly where the scope does not reach, and never
/// where it does. Ids are made up (`x`), so what a permitted request does is answer 404 or 422:
/// nothing of the account changes.
fn every_v1_route_checks_the_callers_scope(w: &Worker) {
    let c = w.new_customer("scopes");
    let (allowed, _) = w.endpoint_at(&c, &format!("/scopes/{}", sim::random_hex()), &["message.received"]);
    let (_, read) = new_key(w, &c, "read");
    let (_, endpoints) = new_key(w, &c, "endpoints");
    let limited =
        portal(w, &c, &json!({"read_only": true, "endpoint_ids": [allowed]}))["token"].as_str().unwrap().to_owned();
    let open = portal(w, &c, &json!({}))["token"].as_str().unwrap().to_owned();
    let mut checked = 0;
    for (method, pattern) in exactly_edge::ROUTES.iter().filter(|(_, p)| p.starts_with("/v1/")) {
        if pattern.starts_with("/v1/media/") {
            continue;
        }
        let write = *method != "GET";
        let area = area(method, pattern);
        let under_endpoint = pattern.starts_with("/v1/webhook_endpoints/{id}");
        let account_wide = pattern.starts_with("/v1/events/")
            || *pattern == "/v1/events"
            || (*pattern == "/v1/webhook_endpoints" && write);
        let credentials: [(&str, &str, bool); 5] = [
            ("full", c.key.as_str(), false),
            ("read", read.as_str(), write || area == Area::Keys),
            ("endpoints", endpoints.as_str(), area != Area::Webhooks),
            ("open portal", open.as_str(), area != Area::Webhooks),
            (
                "limited read-only portal",
                limited.as_str(),
                area != Area::Webhooks || write || account_wide || under_endpoint,
            ),
        ];
        let path = pattern.replace("{id}", "x").replace("{position}", "0").replace("{retry_id}", "rtr_x");
        let body = write.then(|| json!({}));
        for (name, token, refused) in credentials {
            let a = w.call(method, &path, token, body.as_ref(), &[]);
            let forbidden = a.status == 403;
            assert_eq!(forbidden, refused, "{method} {pattern} with the {name} credential: {} {}", a.status, a.body);
            if forbidden {
                assert_eq!(a.json()["error"]["code"], "forbidden", "{method} {pattern}: {}", a.body);
            } else {
                assert_ne!(a.status, 401, "{method} {pattern} with the {name} credential: {}", a.body);
            }
            checked += 1;
        }
        // The limited portal session reaches its own endpoint's reads.
        if under_endpoint && !write {
            let own = pattern.replace("{id}", &allowed).replace("{retry_id}", "rtr_x");
            let a = w.call(method, &own, &limited, None, &[]);
            assert_ne!(a.status, 403, "{method} {own} with the limited portal: {}", a.body);
        }
    }
    assert!(checked >= 5 * 30, "every /v1 route with every credential ({checked} requests)");
    // A made-up portal token or a key with the portal's form is refused as any unknown credential.
    let (id, _) = limited.split_once('.').unwrap();
    for token in [format!("{id}.not-the-secret"), "ps_none.secret".into(), format!("{id}.")] {
        let a = w.call("GET", "/v1/webhook_endpoints", &token, None, &[]);
        assert_eq!(a.status, 401, "{token}: {}", a.body);
    }
    // What each caller is, as the account route tells it.
    let me = w.call("GET", "/v1/account", &limited, None, &[]).json();
    assert_eq!(me["access"], json!({"type": "portal_session", "read_only": true, "endpoint_ids": [allowed]}), "{me}");
    let me = w.call("GET", "/v1/account", &read, None, &[]).json();
    assert_eq!(
        (me["access"]["type"].as_str(), me["access"]["scope"].as_str()),
        (Some("api_key"), Some("read")),
        "{me}"
    );
    assert!(me["access"]["key_id"].as_str().is_some_and(|k| k.starts_with("key_")), "{me}");
}

/// Create-then-revoke: a second full key works beside the first, the first works until it is
/// revoked and is refused from that moment, a revoked key stays listed, the last full key cannot
/// be revoked by the account (the operator can), and each key's last use is recorded.
fn keys_rotate_by_create_then_revoke(w: &Worker) {
    let c = w.new_customer("key lifecycle");
    let list = |key: &str| w.call("GET", "/v1/api_keys", key, None, &[]);
    let first = list(&c.key);
    assert_eq!(first.status, 200, "{}", first.body);
    let first_id = first.json()["data"][0]["id"].as_str().unwrap().to_owned();
    let (second_id, second) = new_key(w, &c, "full");
    assert!(second.starts_with("sk_") && second.len() == 67, "{second}");
    assert_eq!(list(&second).status, 200, "the new key works");
    assert_eq!(list(&c.key).status, 200, "the old key works until it is revoked");
    let listed = list(&second).json();
    let second_row = listed["data"].as_array().unwrap().iter().find(|k| k["id"] == second_id.as_str()).unwrap().clone();
    assert_eq!(second_row["prefix"], &second[..10], "{second_row}");
    assert!(second_row["last_used_at"].is_string(), "its use is recorded: {second_row}");
    assert!(!listed.to_string().contains(&second), "no key is ever shown again");
    let revoked = w.call("DELETE", &format!("/v1/api_keys/{first_id}"), &second, None, &[]);
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert!(revoked.json()["revoked_at"].is_string());
    assert_eq!(list(&c.key).status, 401, "the revoked key is refused at once");
    let again = w.call("DELETE", &format!("/v1/api_keys/{first_id}"), &second, None, &[]);
    assert_eq!((again.status, &again.json()["revoked_at"]), (200, &revoked.json()["revoked_at"]), "{}", again.body);
    let last = w.call("DELETE", &format!("/v1/api_keys/{second_id}"), &second, None, &[]);
    assert_eq!((last.status, last.json()["error"]["code"].clone()), (409, json!("last_full_key")), "{}", last.body);
    assert_eq!(list(&second).status, 200, "the refused revocation changed nothing");
    let bad = w.call("POST", "/v1/api_keys", &second, Some(&json!({"name": "x", "scope": "admin"})), &[]);
    assert_eq!((bad.status, bad.json()["error"]["field"].clone()), (422, json!("scope")), "{}", bad.body);
    // The operator sees the same keys, and may revoke the last one.
    let admin = w.call("GET", &format!("/admin/accounts/{}/keys", c.account), ADMIN_TOKEN, None, &[]).json();
    assert_eq!(admin["data"].as_array().map(Vec::len), Some(2), "{admin}");
    let gone = w.call("DELETE", &format!("/admin/accounts/{}/keys/{second_id}", c.account), ADMIN_TOKEN, None, &[]);
    assert_eq!(gone.status, 200, "{}", gone.body);
    assert_eq!(list(&second).status, 401);
    let made =
        w.call("POST", &format!("/admin/accounts/{}/keys", c.account), ADMIN_TOKEN, Some(&json!({"name": "ops"})), &[]);
    assert_eq!(made.status, 201, "{}", made.body);
    let key = made.json()["api_key"].as_str().unwrap().to_owned();
    let sent = w.call("GET", "/v1/messages?limit=1", &key, None, &[]);
    assert_eq!(sent.status, 200, "the operator's new key reaches the account's data: {}", sent.body);
    let nobody = w.call("POST", "/admin/accounts/acct_nobody/keys", ADMIN_TOKEN, Some(&json!({"name": "x"})), &[]);
    assert_eq!(nobody.status, 404, "{}", nobody.body);
    let operator = w.call("POST", "/admin/accounts/acct_operator/keys", ADMIN_TOKEN, Some(&json!({"name": "x"})), &[]);
    assert_eq!(operator.status, 404, "no key ever reaches the operator's account: {}", operator.body);
    // At most 50 live keys: the 51st is refused until one is revoked.
    let live = |k: &str| {
        let listed = w.call("GET", "/v1/api_keys?limit=100", k, None, &[]).json();
        listed["data"].as_array().unwrap().iter().filter(|k| k["revoked_at"].is_null()).count()
    };
    let mut last = String::new();
    for i in live(&key)..50 {
        let made =
            w.call("POST", "/v1/api_keys", &key, Some(&json!({"name": format!("filler {i}"), "scope": "read"})), &[]);
        assert_eq!(made.status, 201, "{}", made.body);
        last = made.json()["id"].as_str().unwrap().to_owned();
    }
    let over = w.call("POST", "/v1/api_keys", &key, Some(&json!({"name": "one too many"})), &[]);
    assert_eq!((over.status, over.json()["error"]["code"].clone()), (409, json!("key_limit")), "{}", over.body);
    assert_eq!(w.call("DELETE", &format!("/v1/api_keys/{last}"), &key, None, &[]).status, 200);
    assert_eq!(w.call("POST", "/v1/api_keys", &key, Some(&json!({"name": "room again"})), &[]).status, 201);
}

fn header<'a>(a: &'a sim::api::Answer, name: &str) -> &'a str {
    a.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map_or("", |(_, v)| v.as_str())
}

/// A read-only session limited to one endpoint: it lists and reads that endpoint only, its
/// writes are refused by the server (403), another endpoint and the account's events are out of
/// its reach, and it stops at its expiry. The portal's page names the origins the account allows
/// in `frame-ancestors`, and none for an unknown session.
fn a_portal_session_reaches_only_what_it_allows(w: &Worker) {
    let c = w.new_customer("portal");
    let (mine, _) = w.endpoint_at(&c, &format!("/portal/{}", sim::random_hex()), &["message.received"]);
    let (other, _) = w.endpoint_at(&c, &format!("/portal/{}", sim::random_hex()), &["message.received"]);
    let session = portal(w, &c, &json!({"read_only": true, "endpoint_ids": [mine], "expires_in": 600}));
    let token = session["token"].as_str().unwrap().to_owned();
    let url = session["url"].as_str().unwrap();
    let (page_url, secret) = url.split_once('#').unwrap();
    assert!(page_url.ends_with(&format!("/portal/{}", session["id"].as_str().unwrap())), "{url}");
    assert_eq!(token, format!("{}.{secret}", session["id"].as_str().unwrap()), "the secret travels in the fragment");
    let listed = w.call("GET", "/v1/webhook_endpoints?limit=100", &token, None, &[]).json();
    let ids: Vec<&str> = listed["data"].as_array().unwrap().iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, vec![mine.as_str()], "only its endpoint: {listed}");
    assert_eq!(w.call("GET", &format!("/v1/webhook_endpoints/{mine}"), &token, None, &[]).status, 200);
    let attempts = w.call("GET", &format!("/v1/webhook_endpoints/{mine}/attempts"), &token, None, &[]);
    assert_eq!(attempts.status, 200, "{}", attempts.body);
    for (method, path, body) in [
        ("PATCH", format!("/v1/webhook_endpoints/{mine}"), Some(json!({"paused": true}))),
        ("POST", format!("/v1/webhook_endpoints/{mine}/retries"), Some(json!({}))),
        ("GET", format!("/v1/webhook_endpoints/{other}"), None),
        ("GET", "/v1/events".to_owned(), None),
        ("POST", "/v1/events/evt_x/replay".to_owned(), Some(json!({}))),
        ("GET", "/v1/messages".to_owned(), None),
        ("POST", "/v1/portal_sessions".to_owned(), Some(json!({}))),
    ] {
        let a = w.call(method, &path, &token, body.as_ref(), &[]);
        assert_eq!(a.status, 403, "{method} {path}: {}", a.body);
    }
    let still = w.call("GET", &format!("/v1/webhook_endpoints/{mine}"), &c.key, None, &[]).json();
    assert_eq!(still["paused"], false, "the refused pause changed nothing: {still}");

    // A writable session limited to one endpoint may pause it, never point it elsewhere or widen
    // what it receives (that would read the account's other events through its delivery log).
    let writer = portal(w, &c, &json!({"endpoint_ids": [mine]}))["token"].as_str().unwrap().to_owned();
    let paused =
        w.call("PATCH", &format!("/v1/webhook_endpoints/{mine}"), &writer, Some(&json!({"paused": true})), &[]);
    assert_eq!((paused.status, paused.json()["paused"].clone()), (200, json!(true)), "{}", paused.body);
    for body in [
        json!({"url": "https://elsewhere.example.com/hook"}),
        json!({"event_types": ["message.received", "call.completed"]}),
        json!({"filter": null}),
        json!({"headers": {"x-token": "t"}}),
        json!({"ordering": "resource"}),
        json!({"on_exhausted": "hold"}),
    ] {
        let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{mine}"), &writer, Some(&body), &[]);
        assert_eq!((a.status, a.json()["error"]["code"].clone()), (403, json!("forbidden")), "{body}: {}", a.body);
    }
    let after = w.call("GET", &format!("/v1/webhook_endpoints/{mine}"), &c.key, None, &[]).json();
    assert_eq!(after["event_types"], json!(["message.received"]), "{after}");
    assert_eq!((&after["ordering"], &after["on_exhausted"]), (&json!("none"), &json!("skip")), "{after}");
    // It may rotate its endpoint's secret and delete it (docs/contract.md: both act on its own
    // endpoint and show nothing of another), never another's.
    let (own, _) = w.endpoint_at(&c, &format!("/own/{}", sim::random_hex()), &["message.received"]);
    let (foreign, _) = w.endpoint_at(&c, &format!("/foreign/{}", sim::random_hex()), &["message.received"]);
    let owner = portal(w, &c, &json!({"endpoint_ids": [own]}))["token"].as_str().unwrap().to_owned();
    let rotated = w.call("POST", &format!("/v1/webhook_endpoints/{own}/rotate_secret"), &owner, Some(&json!({})), &[]);
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    for (method, path) in [
        ("POST", format!("/v1/webhook_endpoints/{foreign}/rotate_secret")),
        ("DELETE", format!("/v1/webhook_endpoints/{foreign}")),
    ] {
        let a = w.call(method, &path, &owner, (method == "POST").then(|| json!({})).as_ref(), &[]);
        assert_eq!(a.status, 403, "{method} {path}: {}", a.body);
    }
    let deleted = w.call("DELETE", &format!("/v1/webhook_endpoints/{own}"), &owner, None, &[]);
    assert!(matches!(deleted.status, 200 | 204), "{}", deleted.body);
    assert_eq!(w.call("GET", &format!("/v1/webhook_endpoints/{foreign}"), &c.key, None, &[]).status, 200);
    // Revoking the key that minted a session ends it.
    let (minter_id, minter) = new_key(w, &c, "full");
    let minted = w.call("POST", "/v1/portal_sessions", &minter, Some(&json!({})), &[]).json();
    let minted = minted["token"].as_str().unwrap().to_owned();
    assert_eq!(w.call("GET", "/v1/webhook_endpoints", &minted, None, &[]).status, 200);
    assert_eq!(w.call("DELETE", &format!("/v1/api_keys/{minter_id}"), &c.key, None, &[]).status, 200);
    assert_eq!(
        w.call("GET", "/v1/webhook_endpoints", &minted, None, &[]).status,
        401,
        "the session ended with its key"
    );

    // The page: framable by the account's origins once it names some, by none before.
    let page = |id: &str| w.get(&format!("/portal/{id}"));
    let csp = |a: &sim::api::Answer| header(a, "content-security-policy").to_owned();
    let before = page(session["id"].as_str().unwrap());
    assert_eq!(before.status, 200);
    assert!(before.body.contains("/console/app.js"), "the console's page: {}", before.body);
    assert!(csp(&before).ends_with("frame-ancestors 'none'"), "{}", csp(&before));
    let bad = w.call("PATCH", "/v1/account", &c.key, Some(&json!({"portal_origins": ["https://x.com/path"]})), &[]);
    assert_eq!((bad.status, bad.json()["error"]["field"].clone()), (422, json!("portal_origins")), "{}", bad.body);
    let set =
        w.call("PATCH", "/v1/account", &c.key, Some(&json!({"portal_origins": ["https://app.example.com"]})), &[]);
    assert_eq!(set.status, 200, "{}", set.body);
    let refused =
        w.call("PATCH", "/v1/account", &token, Some(&json!({"portal_origins": ["https://evil.example"]})), &[]);
    assert_eq!(refused.status, 403, "a portal session cannot widen its own framing: {}", refused.body);
    let after = page(session["id"].as_str().unwrap());
    assert!(csp(&after).ends_with("frame-ancestors https://app.example.com"), "{}", csp(&after));
    assert_eq!(header(&after, "x-frame-options"), "", "no X-Frame-Options beside allowed origins");
    let unknown = page("ps_unknown");
    assert!(csp(&unknown).ends_with("frame-ancestors 'none'"), "{}", csp(&unknown));
    assert_eq!(header(&unknown, "x-frame-options"), "DENY");
    // The operator sets them too.
    let ops = w.call(
        "PATCH",
        &format!("/admin/accounts/{}", c.account),
        ADMIN_TOKEN,
        Some(&json!({"portal_origins": ["https://b.example.com", "https://a.example.com"]})),
        &[],
    );
    assert_eq!(ops.json()["portal_origins"], json!(["https://a.example.com", "https://b.example.com"]), "{}", ops.body);
    // Expired: refused, and its page framable by none.
    w.sql_at(
        "DB",
        &format!("UPDATE portal_sessions SET expires_at = 1 WHERE id = {}", lit(session["id"].as_str().unwrap())),
    );
    let expired = w.call("GET", "/v1/webhook_endpoints", &token, None, &[]);
    assert_eq!(expired.status, 401, "{}", expired.body);
    assert!(csp(&page(session["id"].as_str().unwrap())).ends_with("frame-ancestors 'none'"));
    // A day after its expiry the cron's retention deletes it.
    let row = format!("SELECT id FROM portal_sessions WHERE id = {}", lit(session["id"].as_str().unwrap()));
    assert_eq!(w.cron().status, 200);
    assert!(w.eventually(Duration::from_secs(30), || w.sql_at("DB", &row).is_empty()), "the expired session is pruned");
    for body in [
        json!({"expires_in": 10}),
        json!({"expires_in": 100_000}),
        json!({"endpoint_ids": ["we_other_account"]}),
        json!({"endpoint_ids": []}),
    ] {
        let a = w.call("POST", "/v1/portal_sessions", &c.key, Some(&body), &[]);
        assert_eq!(a.status, 422, "{body}: {}", a.body);
    }
}

/// Events for an endpoint that answers with headers of its own: each attempt in the log shows
/// the response's headers and body and the request as it was sent, whose signature verifies with
/// the endpoint's secret (the official library); each filter keeps exactly its attempts.
fn the_delivery_log_shows_the_signed_request_and_filters(w: &Worker) {
    let c = w.new_customer("delivery log");
    let path = format!("/log/{}", sim::random_hex());
    w.customer.always_with(&path, 202, &[("x-receiver", "kept")]);
    let (endpoint, secret) = w.endpoint_at(&c, &path, &["message.received"]);
    let since = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() - 1).to_rfc3339();
    let mut resources = Vec::new();
    for i in 0..3 {
        let carrier_id = format!("log-{i}-{}", sim::random_hex());
        let body = exactly_tests::telnyx_inbound(&format!("e-{}", sim::random_hex()), &carrier_id, &c.number, "hi");
        assert_eq!(w.deliver_telnyx(&body).status, 200);
        resources.push(carrier_id);
    }
    wait_received(w, &path, 3);
    let log = |query: &str| {
        let a = w.call("GET", &format!("/v1/webhook_endpoints/{endpoint}/attempts?{query}"), &c.key, None, &[]);
        assert_eq!(a.status, 200, "{query}: {}", a.body);
        a.json()["data"].as_array().cloned().unwrap_or_default()
    };
    // A request reaches the endpoint before its answer reaches the worker, which records the
    // attempt after: wait for the three deliveries' records. An attempt whose 202 reached the
    // worker after its time ran out is recorded as no answer and rightly tried again: the log
    // shows it too, and every filter keeps it with its delivery's other attempts.
    let mut all = Vec::new();
    let recorded = w.eventually(Duration::from_secs(60), || {
        all = log("limit=100");
        let events: BTreeSet<&str> = all.iter().filter_map(|a| a["event_id"].as_str()).collect();
        events.len() == 3 && all.iter().all(|a| a["delivery_status"] == "succeeded")
    });
    assert!(recorded, "three deliveries recorded: {all:?}");
    let (answered, unanswered): (Vec<&Value>, Vec<&Value>) = all.iter().partition(|a| !a["status_code"].is_null());
    let answered_events: BTreeSet<&str> = answered.iter().filter_map(|a| a["event_id"].as_str()).collect();
    assert_eq!((answered.len(), answered_events.len()), (3, 3), "one answered attempt each: {all:?}");
    assert!(unanswered.iter().all(|a| a["error"].is_string()), "an attempt with no answer says why: {all:?}");
    let mut sent = Vec::new();
    for a in &answered {
        assert_eq!(a["response_headers"]["x-receiver"], "kept", "{a}");
        assert_eq!((a["status_code"].as_u64(), a["delivery_status"].as_str()), (Some(202), Some("succeeded")), "{a}");
        let request = &a["request"];
        assert_eq!(request["headers"]["webhook-id"], a["event_id"], "{a}");
        let headers: HashMap<String, String> = request["headers"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        let at = headers["webhook-timestamp"].parse().unwrap();
        sent.push(Received {
            path: path.clone(),
            headers,
            body: request["body"].as_str().unwrap().to_owned(),
            answered: 202,
            stalled: None,
            received_at: at,
            arrived: Instant::now(),
        });
    }
    let verified = exactly_tests::verify_standard_webhooks(&[&secret], &sent);
    assert_eq!(verified, Ok(3), "the logged requests are what was signed");
    // The bodies logged are the bodies received.
    let received: Vec<String> = w.customer.received(&path).into_iter().map(|r| r.body).collect();
    for s in &sent {
        assert!(received.contains(&s.body), "logged body was received");
    }
    // Each filter keeps exactly the attempts it names.
    let with = |key: &str, value: &Value| all.iter().filter(|a| a[key] == *value).count();
    let one = &answered[1]["event_id"];
    let by_id = log(&format!("webhook_id={}", one.as_str().unwrap_or_default()));
    assert_eq!(by_id.len(), with("event_id", one));
    assert!(by_id.iter().all(|a| a["event_id"] == *one), "{by_id:?}");
    let resource = &answered[2]["resource_id"];
    let by_resource = log(&format!("resource_id={}", resource.as_str().unwrap_or_default()));
    assert_eq!(by_resource.len(), with("resource_id", resource));
    assert_eq!(log("status=succeeded").len(), all.len());
    assert_eq!(log("status=failed").len(), 0);
    assert_eq!(log("event_type=message.received").len(), all.len());
    assert_eq!(log("event_type=call.missed").len(), 0);
    assert_eq!(log(&format!("since={since}")).len(), all.len());
    assert_eq!(log(&format!("until={since}")).len(), 0);
    let bad = w.call("GET", &format!("/v1/webhook_endpoints/{endpoint}/attempts?status=lost"), &c.key, None, &[]);
    assert_eq!((bad.status, bad.json()["error"]["field"].clone()), (422, json!("status")), "{}", bad.body);
}

/// Three deliveries fail (the endpoint answers 410, which fails the delivery for good and
/// disables the endpoint, enabled again before the next event); a neighbour's endpoint hangs all
/// the while. Once the endpoint is healthy, one retry-all operation re-sends each failed
/// delivery exactly once (two operations asked at once share them, none twice), its progress
/// ends `done` with three succeeded, and a later operation finds nothing to re-send.
fn retry_all_failed_resends_each_failed_delivery_once(w: &Worker) {
    let neighbour = w.new_customer("retry neighbour");
    let hung = format!("/hung/{}", sim::random_hex());
    w.customer.hang(&hung);
    w.endpoint_at(&neighbour, &hung, &["message.received"]);
    let c = w.new_customer("retry all");
    let path = format!("/retry-all/{}", sim::random_hex());
    w.customer.always(&path, 410);
    let (endpoint, _) = w.endpoint_at(&c, &path, &["message.received"]);
    let failed =
        format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'failed'", lit(&endpoint));
    let inbound = |who: &Customer| {
        let body = exactly_tests::telnyx_inbound(
            &format!("e-{}", sim::random_hex()),
            &format!("m-{}", sim::random_hex()),
            &who.number,
            "retry",
        );
        assert_eq!(w.deliver_telnyx(&body).status, 200);
    };
    for n in 1..=3 {
        inbound(&neighbour);
        inbound(&c);
        let failed_now = w.eventually(Duration::from_secs(60), || w.sql_for(&c.account, &failed).len() == n);
        assert!(failed_now, "delivery {n} failed on 410");
        let enabled =
            w.call("PATCH", &format!("/v1/webhook_endpoints/{endpoint}"), &c.key, Some(&json!({"enabled": true})), &[]);
        assert_eq!(enabled.status, 200, "{}", enabled.body);
    }
    let before = w.customer.received(&path).len();
    w.customer.always(&path, 200);
    // Two operations at once: the failed deliveries are taken by one or the other, never both.
    let retry = || w.call("POST", &format!("/v1/webhook_endpoints/{endpoint}/retries"), &c.key, Some(&json!({})), &[]);
    let ops: Vec<Value> = std::thread::scope(|scope| {
        let racing: Vec<_> = (0..2).map(|_| scope.spawn(retry)).collect();
        racing.into_iter().map(|h| h.join().expect("a retry request")).collect::<Vec<_>>()
    })
    .into_iter()
    .map(|op| {
        assert_eq!(op.status, 202, "{}", op.body);
        op.json()
    })
    .collect();
    let totals: Vec<i64> = ops.iter().filter_map(|op| op["total"].as_i64()).collect();
    assert_eq!(totals.iter().sum::<i64>(), 3, "each failed delivery taken by one operation: {ops:?}");
    let id = ops.iter().find(|op| op["total"] == 3).and_then(|op| op["id"].as_str()).map(str::to_owned);
    let id = id.unwrap_or_else(|| panic!("one operation takes all three in its one statement: {ops:?}"));
    let mut progress = Value::Null;
    let done = w.eventually(Duration::from_secs(60), || {
        progress = w.call("GET", &format!("/v1/webhook_endpoints/{endpoint}/retries/{id}"), &c.key, None, &[]).json();
        progress["status"] == "done"
    });
    assert!(done, "the operation finishes: {progress}");
    assert_eq!((progress["succeeded"].as_i64(), progress["failed"].as_i64()), (Some(3), Some(0)), "{progress}");
    let second = w.call("POST", &format!("/v1/webhook_endpoints/{endpoint}/retries"), &c.key, Some(&json!({})), &[]);
    assert_eq!((second.status, second.json()["total"].as_i64()), (202, Some(0)), "{}", second.body);
    // Each failed delivery went once more, and only once: a settle of every queue first.
    let sent =
        format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'succeeded'", lit(&endpoint));
    assert!(w.eventually(Duration::from_secs(30), || w.sql_for(&c.account, &sent).len() == 3));
    let resent: Vec<Received> = w.customer.received(&path).into_iter().skip(before).collect();
    let mut ids: Vec<&str> = resent.iter().filter_map(|r| r.header("webhook-id")).collect();
    ids.sort();
    let unique = {
        let mut u = ids.clone();
        u.dedup();
        u
    };
    assert_eq!((ids.len(), unique.len()), (3, 3), "each failed delivery re-sent once: {ids:?}");
    let other = w.call("GET", &format!("/v1/webhook_endpoints/{endpoint}/retries/{id}"), &neighbour.key, None, &[]);
    assert_eq!(other.status, 404, "another account's operation: {}", other.body);
    // The operator's charts count these attempts: three refused (410) and three that went.
    let series = w.call("GET", "/admin/metrics/series?hours=1&bucket_minutes=5", ADMIN_TOKEN, None, &[]);
    assert_eq!(series.status, 200, "{}", series.body);
    let data = series.json()["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 12, "an hour in buckets of five minutes");
    let sum = |key: &str| data.iter().filter_map(|b| b[key].as_i64()).sum::<i64>();
    assert!(sum("refused") >= 3 && sum("succeeded") >= 3, "{data:?}");
    assert_eq!(sum("attempts"), sum("succeeded") + sum("refused") + sum("no_answer"));
    assert!(data.iter().all(|b| b["backlog"].as_i64().is_some_and(|n| n >= 0)), "{data:?}");
    let bad = w.call("GET", "/admin/metrics/series?hours=0", ADMIN_TOKEN, None, &[]);
    assert_eq!((bad.status, bad.json()["error"]["field"].clone()), (422, json!("hours")), "{}", bad.body);
    w.customer.let_go(&hung);
}

/// A session limited to one endpoint of five walks the endpoint list one at a time: it sees its
/// endpoint, and no page, empty or not, carries a cursor past an endpoint it may not see (a
/// cursor holds an endpoint's id and creation time).
fn a_limited_sessions_pages_reveal_nothing_it_may_not_see(w: &Worker) {
    let c = w.new_customer("portal-pages");
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(w.endpoint_at(&c, &format!("/pages/{n}/{}", sim::random_hex()), &["message.received"]).0);
    }
    let allowed = ids[2].clone();
    let limited =
        portal(w, &c, &json!({"read_only": true, "endpoint_ids": [allowed]}))["token"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    let mut cursors = Vec::new();
    let mut path = "/v1/webhook_endpoints?limit=1".to_owned();
    for _ in 0..10 {
        let page = w.call("GET", &path, &limited, None, &[]);
        assert_eq!(page.status, 200, "{}", page.body);
        let page = page.json();
        seen.extend(page["data"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_owned()));
        let Some(next) = page["next_cursor"].as_str() else { break };
        cursors.push(next.to_owned());
        path = format!("/v1/webhook_endpoints?limit=1&cursor={next}");
    }
    assert_eq!(seen, vec![allowed.clone()], "the session sees its endpoint only");
    assert!(cursors.len() <= 1, "cursors past endpoints the session may not see: {cursors:?}");
    // The account's key walks all five.
    let all = w.call("GET", "/v1/webhook_endpoints?limit=10", &c.key, None, &[]).json();
    assert_eq!(all["data"].as_array().map(Vec::len), Some(5), "{all}");
}

/// A key that mints sessions without end is stopped at 500 live ones (409 `session_limit`,
/// naming the way out); once they expire, or the key that minted them is revoked (which ends
/// them, and the list no longer shows them), the account mints again.
fn an_account_holds_at_most_500_unexpired_sessions(w: &Worker) {
    let c = w.new_customer("session-cap");
    let (minter_id, minter) = new_key(w, &c, "full");
    // 499 of the second key's written straight into the table (minting them through the API
    // takes a minute and a half here), then the 500th through the API.
    let until = sim::unix_millis() + 3_600_000;
    w.sql(&format!(
        "INSERT INTO portal_sessions (id, account_id, key_id, secret_hash, read_only, endpoint_ids, created_at, expires_at)
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 499)
         SELECT 'ps_cap_' || x || '_' || {account}, {account}, {key}, 'h', 1, NULL, {now}, {until} FROM c",
        account = lit(&c.account),
        key = lit(&minter_id),
        now = sim::unix_millis(),
    ));
    let last = w.call("POST", "/v1/portal_sessions", &minter, Some(&json!({"expires_in": 60})), &[]);
    assert_eq!(last.status, 201, "the 500th session: {}", last.body);
    let over = w.call("POST", "/v1/portal_sessions", &c.key, Some(&json!({})), &[]);
    assert_eq!((over.status, over.json()["error"]["code"].clone()), (409, json!("session_limit")), "{}", over.body);
    assert!(over.json()["error"]["message"].as_str().is_some_and(|m| m.contains("500")), "{}", over.body);
    let revoked = w.call("DELETE", &format!("/v1/api_keys/{minter_id}"), &c.key, None, &[]);
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let listed = w.call("GET", "/v1/portal_sessions", &c.key, None, &[]).json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(0), "the revoked key's sessions ended: {listed}");
    let after_revoke = w.call("POST", "/v1/portal_sessions", &c.key, Some(&json!({"expires_in": 60})), &[]);
    assert_eq!(after_revoke.status, 201, "a revoked key's sessions do not count: {}", after_revoke.body);
    w.sql(&format!("UPDATE portal_sessions SET expires_at = 1 WHERE account_id = {}", lit(&c.account)));
    let again = w.call("POST", "/v1/portal_sessions", &c.key, Some(&json!({})), &[]);
    assert_eq!(again.status, 201, "expired sessions do not count: {}", again.body);
}

/// A leaked link is ended alone: the account's full key lists its live sessions (never their
/// secrets, paged) and revokes one; that one's token and page are refused from then on, while
/// the account's other session and the key that minted both go on. Another account's session
/// cannot be revoked, and a session can neither list nor revoke.
fn one_portal_session_is_listed_and_revoked_alone(w: &Worker) {
    let c = w.new_customer("revoke one session");
    let other = w.new_customer("revoke another's session");
    let (leaked, kept) = (portal(w, &c, &json!({})), portal(w, &c, &json!({"read_only": true})));
    let foreign = portal(w, &other, &json!({}));
    let id = |s: &Value| s["id"].as_str().unwrap().to_owned();
    let token = |s: &Value| s["token"].as_str().unwrap().to_owned();
    let listed = w.call("GET", "/v1/portal_sessions", &c.key, None, &[]);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let ids: Vec<String> = listed.json()["data"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(ids.len(), 2, "the account's two sessions, not the other account's: {}", listed.body);
    assert!(ids.contains(&id(&leaked)) && ids.contains(&id(&kept)), "{}", listed.body);
    for s in [&leaked, &kept] {
        let secret = token(s).split_once('.').unwrap().1.to_owned();
        assert!(!listed.body.contains(&secret), "a listed session shows no secret: {}", listed.body);
    }
    let shown = listed.json()["data"].as_array().unwrap().iter().find(|s| id(s) == id(&kept)).cloned().unwrap();
    assert_eq!((shown["read_only"].clone(), shown["endpoint_ids"].clone()), (json!(true), Value::Null), "{shown}");
    // Paged: one at a time, the cursor reaches the other and then ends.
    let first = w.call("GET", "/v1/portal_sessions?limit=1", &c.key, None, &[]).json();
    let cursor = first["next_cursor"].as_str().expect("a next page").to_owned();
    let second = w.call("GET", &format!("/v1/portal_sessions?limit=1&cursor={cursor}"), &c.key, None, &[]).json();
    let mut paged: Vec<String> = [&first, &second].iter().map(|p| id(&p["data"][0])).collect();
    paged.sort();
    let mut both = vec![id(&leaked), id(&kept)];
    both.sort();
    assert_eq!(paged, both, "{first} {second}");

    // A session can neither list nor revoke.
    assert_eq!(w.call("GET", "/v1/portal_sessions", &token(&kept), None, &[]).status, 403);
    let own = format!("/v1/portal_sessions/{}", id(&kept));
    assert_eq!(w.call("DELETE", &own, &token(&kept), None, &[]).status, 403);
    // Another account's session is not this account's to end.
    let theirs = format!("/v1/portal_sessions/{}", id(&foreign));
    assert_eq!(w.call("DELETE", &theirs, &c.key, None, &[]).status, 404);
    assert_eq!(w.call("GET", "/v1/webhook_endpoints", &token(&foreign), None, &[]).status, 200);

    let revoke = format!("/v1/portal_sessions/{}", id(&leaked));
    let a = w.call("DELETE", &revoke, &c.key, None, &[]);
    assert_eq!(a.status, 204, "{}", a.body);
    assert_eq!(w.call("GET", "/v1/webhook_endpoints", &token(&leaked), None, &[]).status, 401, "the leaked link ended");
    let page = w.get(&format!("/portal/{}", id(&leaked)));
    assert!(header(&page, "content-security-policy").ends_with("frame-ancestors 'none'"));
    assert_eq!(w.call("GET", "/v1/webhook_endpoints", &token(&kept), None, &[]).status, 200, "the other goes on");
    assert_eq!(w.call("GET", "/v1/webhook_endpoints", &c.key, None, &[]).status, 200, "the key goes on");
    assert_eq!(w.call("DELETE", &revoke, &c.key, None, &[]).status, 404, "revoked already");
    let after = w.call("GET", "/v1/portal_sessions", &c.key, None, &[]).json();
    let left: Vec<String> = after["data"].as_array().unwrap().iter().map(id).collect();
    assert_eq!(left, vec![id(&kept)], "{after}");
}
