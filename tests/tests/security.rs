//! Hostile input (docs/security.md): who may call what, and carrier signatures that prove less
//! than they seem to.

use std::time::Duration;

use exactly_tests::{fresh_number, lit, Worker, ADMIN_TOKEN, PLIVO_TOKEN};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("security::every_route_is_in_the_authorization_table", every_route_is_in_the_authorization_table),
    ("security::plivo_requires_v3_unless_v2_is_accepted", plivo_requires_v3_unless_v2_is_accepted),
    ("security::every_json_body_is_capped", every_json_body_is_capped),
    ("security::a_rotated_api_key_replaces_the_old_one_at_once", a_rotated_api_key_replaces_the_old_one_at_once),
];

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Anyone.
    Public,
    /// A carrier: the request's signature is the credential.
    Carrier,
    /// The operator's `ADMIN_TOKEN`.
    Admin,
    /// An account's API key, on the account's own collection.
    Account,
    /// An account's API key, on one resource of that account.
    Owned(Resource),
    /// A signed, expiring link: the signature in the query is the credential.
    Signed,
}

/// The kinds of `/v1` resource a route with `{id}` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    /// A scheduled MMS: the one kind of message a cancel changes.
    Message,
    /// An inbound MMS with its item stored: the one kind whose media route answers 200 to its owner.
    Media,
    Call,
    Endpoint,
    Event,
    /// A second API key of the account (read scope), so B's revocation would lock nobody out.
    Key,
    /// A portal session of the account.
    PortalSession,
}

/// Every route of `exactly_edge::ROUTES`, with who may call it. A route added to the router
/// without a row here fails [`every_route_is_in_the_authorization_table`].
const TABLE: &[(&str, &str, Access)] = &[
    ("POST", "/webhooks/telnyx", Access::Carrier),
    ("POST", "/webhooks/twilio", Access::Carrier),
    ("POST", "/webhooks/plivo", Access::Carrier),
    ("POST", "/admin/accounts", Access::Admin),
    ("GET", "/admin/accounts", Access::Admin),
    ("POST", "/admin/accounts/{id}/rotate_key", Access::Admin),
    ("POST", "/admin/numbers", Access::Admin),
    ("POST", "/admin/erasures", Access::Admin),
    ("GET", "/admin/erasures/{id}", Access::Admin),
    ("GET", "/admin/carrier_events", Access::Admin),
    ("POST", "/admin/carrier_events/{id}/retry", Access::Admin),
    ("POST", "/admin/carrier_events/retry", Access::Admin),
    ("POST", "/admin/event_shards/move", Access::Admin),
    ("GET", "/admin/webhook_deliveries", Access::Admin),
    ("GET", "/admin/metrics", Access::Admin),
    ("POST", "/admin/webhook_deliveries/{id}/retry", Access::Admin),
    ("POST", "/v1/messages", Access::Account),
    ("GET", "/v1/messages", Access::Account),
    ("GET", "/v1/messages/{id}", Access::Owned(Resource::Message)),
    ("GET", "/v1/messages/{id}/history", Access::Owned(Resource::Message)),
    ("POST", "/v1/messages/{id}/cancel", Access::Owned(Resource::Message)),
    ("GET", "/v1/messages/{id}/media/{position}", Access::Owned(Resource::Media)),
    ("GET", "/v1/media/{id}/{position}", Access::Signed),
    ("GET", "/v1/calls", Access::Account),
    ("GET", "/v1/calls/{id}", Access::Owned(Resource::Call)),
    ("GET", "/v1/usage", Access::Account),
    ("POST", "/v1/webhook_endpoints", Access::Account),
    ("GET", "/v1/webhook_endpoints", Access::Account),
    ("GET", "/v1/webhook_endpoints/{id}", Access::Owned(Resource::Endpoint)),
    ("PATCH", "/v1/webhook_endpoints/{id}", Access::Owned(Resource::Endpoint)),
    ("DELETE", "/v1/webhook_endpoints/{id}", Access::Owned(Resource::Endpoint)),
    ("POST", "/v1/webhook_endpoints/{id}/rotate_secret", Access::Owned(Resource::Endpoint)),
    ("POST", "/v1/webhook_endpoints/{id}/recover", Access::Owned(Resource::Endpoint)),
    ("POST", "/v1/webhook_endpoints/{id}/test", Access::Owned(Resource::Endpoint)),
    ("GET", "/v1/webhook_endpoints/{id}/attempts", Access::Owned(Resource::Endpoint)),
    ("GET", "/v1/events", Access::Account),
    ("GET", "/v1/event_types", Access::Account),
    ("GET", "/v1/events/{id}", Access::Owned(Resource::Event)),
    ("POST", "/v1/events/{id}/replay", Access::Owned(Resource::Event)),
    ("POST", "/v1/webhook_endpoints/{id}/retries", Access::Owned(Resource::Endpoint)),
    ("GET", "/v1/webhook_endpoints/{id}/retries/{retry_id}", Access::Owned(Resource::Endpoint)),
    ("GET", "/v1/webhook_endpoints/{id}/recoveries/{recovery_id}", Access::Owned(Resource::Endpoint)),
    ("GET", "/v1/api_keys", Access::Account),
    ("POST", "/v1/api_keys", Access::Account),
    ("DELETE", "/v1/api_keys/{id}", Access::Owned(Resource::Key)),
    ("GET", "/admin/accounts/{id}/keys", Access::Admin),
    ("POST", "/admin/accounts/{id}/keys", Access::Admin),
    ("DELETE", "/admin/accounts/{id}/keys/{key_id}", Access::Admin),
    ("PATCH", "/admin/accounts/{id}", Access::Admin),
    ("GET", "/admin/metrics/series", Access::Admin),
    ("GET", "/admin/audit", Access::Admin),
    ("GET", "/v1/account", Access::Account),
    ("PATCH", "/v1/account", Access::Account),
    ("POST", "/v1/portal_sessions", Access::Account),
    ("GET", "/v1/portal_sessions", Access::Account),
    ("DELETE", "/v1/portal_sessions/{id}", Access::Owned(Resource::PortalSession)),
    ("GET", "/portal/{id}", Access::Public),
    ("GET", "/openapi.json", Access::Public),
    ("GET", "/healthz", Access::Public),
    ("GET", "/", Access::Public),
];

/// Account A's resources, one of each kind.
struct Owned {
    key: String,
    message: String,
    media: String,
    call: String,
    endpoint: String,
    event: String,
    api_key: String,
    /// The portal session's id, and its bearer token.
    portal_session: (String, String),
}

impl Owned {
    fn id(&self, resource: Resource) -> &str {
        match resource {
            Resource::Message => &self.message,
            Resource::Media => &self.media,
            Resource::Call => &self.call,
            Resource::Endpoint => &self.endpoint,
            Resource::Event => &self.event,
            Resource::Key => &self.api_key,
            Resource::PortalSession => &self.portal_session.0,
        }
    }
}

fn account_with_resources(w: &Worker) -> Owned {
    let (account, key) = w.create_account("owner");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let endpoint = w.call(
        "POST",
        "/v1/webhook_endpoints",
        &key,
        Some(&json!({"url": format!("{}/owner/{}", w.customer.base, sim::random_hex()),
            "event_types": ["message.received"]})),
        &[],
    );
    assert_eq!(endpoint.status, 201, "{}", endpoint.body);
    // A scheduled MMS: a cancel without the account in its WHERE would cancel it for anyone.
    let send_at = exactly_core::Timestamp::from_unix_seconds(sim::unix_now() + 3600).to_rfc3339();
    let sent = w.call(
        "POST",
        "/v1/messages",
        &key,
        Some(&json!({"from": number, "to": "+15559990000", "text": "mine", "send_at": send_at,
                     "media_urls": ["https://media.example.com/a.jpg"]})),
        &[],
    );
    assert_eq!(sent.status, 201, "{}", sent.body);
    assert_eq!(sent.json()["status"], "scheduled", "{}", sent.body);
    // An inbound MMS with its item stored: a media route without the account would serve it.
    let items = [crate::mms::item(w, format!("authz-{}.jpg", sim::random_hex()))];
    let carrier_id = format!("authz-mms-{}", sim::random_hex());
    let event_id = format!("authz-mms-evt-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&crate::mms::telnyx_body(&event_id, &carrier_id, &number, &items)).status, 200);
    let found = w.eventually(Duration::from_secs(30), || {
        !w.sql(&format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&carrier_id))).is_empty()
    });
    assert!(found, "account A's inbound MMS is recorded");
    let media = crate::mms::one_message(w, "telnyx", &carrier_id);
    crate::mms::wait_stored(w, &media, 1);
    let own = w.call("GET", &format!("/v1/messages/{media}/media/0"), &key, None, &[]).status;
    assert!(matches!(own, 200 | 302), "account A reaches its stored item: {own}");
    // An inbound message makes a customer event.
    let body = sim::telnyx::envelope(
        &format!("authz-{}", sim::random_hex()),
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({
            "id": format!("m-{}", sim::random_hex()), "from": {"phone_number": "+15559990000"},
                "to": [{"phone_number": number}], "text": "in",
        }),
        1,
    );
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    let mut event = String::new();
    let found = w.eventually(Duration::from_secs(30), || {
        event = w.call("GET", "/v1/events", &key, None, &[]).json()["data"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        !event.is_empty()
    });
    assert!(found, "account A has an event");
    // A call needs a carrier session to ring through; the row is all the API reads.
    let call = format!("call_{}", sim::random_hex());
    w.sql_for(
        &account,
        &format!(
            "INSERT INTO calls (id, account_id, direction, from_number, to_number, status, carrier, call_session_id,
            call_control_id, call_leg_id, created_at, updated_at)
         VALUES ({}, {}, 'inbound', '+15559990000', {}, 'completed', 'telnyx', {}, 'cc', 'leg', 1, 1)",
            lit(&call),
            lit(&account),
            lit(&number),
            lit(&format!("sess-{}", sim::random_hex()))
        ),
    );
    assert_eq!(
        w.call("GET", &format!("/v1/calls/{call}"), &key, None, &[]).status,
        200,
        "account A reads its own call"
    );
    let second = w.call("POST", "/v1/api_keys", &key, Some(&json!({"name": "second", "scope": "read"})), &[]);
    assert_eq!(second.status, 201, "{}", second.body);
    let session = w.call("POST", "/v1/portal_sessions", &key, Some(&json!({"read_only": true})), &[]);
    assert_eq!(session.status, 201, "{}", session.body);
    let portal_session =
        (session.json()["id"].as_str().unwrap().to_owned(), session.json()["token"].as_str().unwrap().to_owned());
    Owned {
        portal_session,
        api_key: second.json()["id"].as_str().unwrap().to_owned(),
        key,
        message: sent.json()["id"].as_str().unwrap().to_owned(),
        media,
        call,
        endpoint: endpoint.json()["id"].as_str().unwrap().to_owned(),
        event,
    }
}

/// For every route: `/v1` routes that take an id answer 404 to account B's key on account A's
/// resource (and A's resource is unchanged after B's attempt), every `/v1` route answers 401
/// without a key, every `/admin` route answers 401 without the admin token (and with an
/// account's key), and the carrier routes answer 401 unsigned. The table must name exactly the
/// routes the router serves.
fn every_route_is_in_the_authorization_table(w: &Worker) {
    let served: Vec<(&str, &str)> = exactly_edge::ROUTES.to_vec();
    let missing: Vec<_> = served.iter().filter(|(m, p)| !TABLE.iter().any(|(tm, tp, _)| tm == m && tp == p)).collect();
    assert!(missing.is_empty(), "routes without a row in the authorization table: {missing:?}");
    let stale: Vec<_> = TABLE.iter().filter(|(m, p, _)| !served.contains(&(*m, *p))).collect();
    assert!(stale.is_empty(), "rows for routes the router does not serve: {stale:?}");

    let a = account_with_resources(w);
    // B lives in A's account database, so only each statement's account filter tells them apart
    // (in the sharded run an account in another database would get 404 whatever the SQL says).
    let a_account = w.sql(&format!("SELECT account_id FROM messages WHERE id = {}", lit(&a.message)))[0]["account_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut b_key = String::new();
    let same = (0..20).any(|_| {
        let (b, key) = w.create_account("intruder");
        b_key = key;
        w.database_of(&b) == w.database_of(&a_account)
    });
    assert!(same, "an intruder in account A's database");
    let body = |method: &str| (method == "POST" || method == "PATCH").then(|| json!({}));
    for (method, pattern, access) in TABLE {
        let path = match access {
            Access::Owned(resource) => pattern.replace("{id}", a.id(*resource)),
            _ => pattern.replace("{id}", "x"),
        }
        .replace("{position}", "0")
        .replace("{key_id}", "key_x")
        .replace("{retry_id}", "rtr_x")
        .replace("{recovery_id}", "rcv_x");
        let call = |token: &str| w.call(method, &path, token, body(method).as_ref(), &[]);
        let unauthenticated = w.call(method, &path, "", body(method).as_ref(), &[]);
        match access {
            Access::Public => assert_eq!(unauthenticated.status, 200, "{method} {pattern}: {}", unauthenticated.body),
            Access::Carrier => {
                assert_eq!(unauthenticated.status, 401, "{method} {pattern} unsigned: {}", unauthenticated.body)
            }
            Access::Signed => {
                // No link signature: refused whatever key comes with it.
                for token in ["", b_key.as_str(), ADMIN_TOKEN] {
                    let answer = call(token);
                    assert_eq!(answer.status, 403, "{method} {pattern} unsigned with {token:?}: {}", answer.body);
                    assert_eq!(answer.json()["error"]["code"], "invalid_link", "{method} {pattern}");
                }
            }
            Access::Admin => {
                for token in ["", "not-the-admin-token", b_key.as_str(), &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]] {
                    let answer = call(token);
                    assert_eq!(answer.status, 401, "{method} {pattern} with {token:?}: {}", answer.body);
                    assert_eq!(answer.json()["error"]["code"], "unauthorized", "{method} {pattern}");
                }
            }
            Access::Account | Access::Owned(_) => {
                for token in ["", "sk_not_a_key", ADMIN_TOKEN] {
                    let answer = call(token);
                    assert_eq!(answer.status, 401, "{method} {pattern} with {token:?}: {}", answer.body);
                }
            }
        }
        if let Access::Owned(resource) = access {
            let answer = call(&b_key);
            assert_eq!(
                answer.status, 404,
                "{method} {pattern}: account B on account A's {resource:?}: {}",
                answer.body
            );
            assert_eq!(answer.json()["error"]["code"], "not_found", "{method} {pattern}");
            assert!(
                !answer.body.contains(a.id(*resource)),
                "{method} {pattern}: nothing of A's resource in the answer"
            );
        }
    }
    // Nothing B tried changed A's resources, and B's lists show none of them.
    let keys = w.call("GET", "/v1/api_keys", &a.key, None, &[]).json();
    let second = keys["data"].as_array().into_iter().flatten().find(|k| k["id"] == a.api_key.as_str()).cloned();
    assert!(second.is_some_and(|k| k["revoked_at"].is_null()), "B's revocation changed nothing: {keys}");
    let session = w.call("GET", "/v1/webhook_endpoints", &a.portal_session.1, None, &[]);
    assert_eq!(session.status, 200, "B's revocation of A's portal session changed nothing: {}", session.body);
    let still_scheduled = w.call("GET", &format!("/v1/messages/{}", a.message), &a.key, None, &[]).json();
    assert_eq!(still_scheduled["status"], "scheduled", "B's cancel changed nothing: {still_scheduled}");
    for (path, id) in [
        ("/v1/messages", &a.message),
        ("/v1/messages", &a.media),
        ("/v1/calls", &a.call),
        ("/v1/webhook_endpoints", &a.endpoint),
        ("/v1/events", &a.event),
    ] {
        assert_eq!(w.call("GET", &format!("{path}/{id}"), &a.key, None, &[]).status, 200, "A still reads {path}/{id}");
        let listed = w.call("GET", &format!("{path}?limit=100"), &b_key, None, &[]);
        assert_eq!(listed.status, 200, "{path}: {}", listed.body);
        assert!(!listed.body.contains(id.as_str()), "B's {path} lists nothing of A's");
    }
    let still = w.call("GET", &format!("/v1/webhook_endpoints/{}", a.endpoint), &a.key, None, &[]).json();
    assert_eq!(still["event_types"], json!(["message.received"]), "B's PATCH changed nothing: {still}");
    let from_a = w.call("GET", &format!("/v1/messages/{}", a.message), &a.key, None, &[]).json()["from"].clone();
    let as_a = w.call(
        "POST",
        "/v1/messages",
        &b_key,
        Some(&json!({"from": from_a, "to": "+15559990000", "text": "spoof"})),
        &[],
    );
    assert_eq!(
        (as_a.status, as_a.json()["error"]["field"].as_str()),
        (422, Some("from")),
        "B cannot send from A's number: {}",
        as_a.body
    );
}

/// A Plivo inbound message signed with V3 by the official `plivo` Python SDK (4.63.0) for
/// `https://exactly.example.com/webhooks/plivo`, and the V2 signature of the same URL and nonce
/// (checked with the SDK's `validate_signature`). Made with:
///
/// ```python
/// from plivo.utils.signature_v3 import construct_post_url, get_signature_v3
/// get_signature_v3(b"e2e-plivo-token", construct_post_url(URL, dict(PARAMS)).decode(), NONCE.encode())
/// base64.b64encode(hmac.new(b"e2e-plivo-token", (URL + NONCE).encode(), hashlib.sha256).digest())
/// ```
mod plivo_sdk {
    pub const PUBLIC_BASE_URL: &str = "https://exactly.example.com";
    pub const NONCE: &str = "30118726458519374066";
    pub const PARAMS: [(&str, &str); 5] = [
        ("MessageUUID", "sdk-e2e-5f0c2a1e-0c5c-11f0-b1e3-0242ac110002"),
        ("From", "15559990000"),
        ("To", "15550001111"),
        ("Text", "signed by the plivo SDK"),
        ("Type", "sms"),
    ];
    pub const V3_SIGNATURE: &str = "8SEV10pekgSdR/FSPVR0kaCEbvRyDd4YHFQHs1HnpP0=";
    pub const V2_SIGNATURE: &str = "+Ir0SU7V0yIqtjbUgAhKIBnx1krdLanb2jkJ+KKE3Gg=";
}

/// The routes that read a JSON body, with who may call them.
const JSON_BODIES: &[(&str, &str, Access)] = &[
    ("POST", "/admin/accounts", Access::Admin),
    ("POST", "/admin/numbers", Access::Admin),
    ("POST", "/admin/erasures", Access::Admin),
    ("POST", "/admin/event_shards/move", Access::Admin),
    ("POST", "/v1/messages", Access::Account),
    ("POST", "/v1/webhook_endpoints", Access::Account),
    ("PATCH", "/v1/webhook_endpoints/{id}", Access::Owned(Resource::Endpoint)),
    ("POST", "/v1/webhook_endpoints/{id}/recover", Access::Owned(Resource::Endpoint)),
    ("POST", "/v1/events/{id}/replay", Access::Owned(Resource::Event)),
];

/// Every route that reads a JSON body refuses one over 64 KiB with 413 before it holds more or
/// looks anything up (seen: replay read its body whole, uncapped, so any API key could run the
/// isolate out of memory), with the caller's own credential and resource, so nothing but the
/// size can refuse it; a route still answers a body within the cap.
fn every_json_body_is_capped(w: &Worker) {
    let a = account_with_resources(w);
    let big = json!({"padding": "x".repeat(70 * 1024)});
    for (method, pattern, access) in JSON_BODIES {
        assert!(TABLE.contains(&(*method, *pattern, *access)), "{method} {pattern} is a route of the table");
        let (path, token) = match access {
            Access::Owned(resource) => (pattern.replace("{id}", a.id(*resource)), a.key.as_str()),
            Access::Admin => (pattern.to_string(), ADMIN_TOKEN),
            _ => (pattern.to_string(), a.key.as_str()),
        };
        let answer = w.call(method, &path, token, Some(&big), &[]);
        assert_eq!(answer.status, 413, "{method} {pattern} with 70 KiB: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], "body_too_large", "{method} {pattern}: {}", answer.body);
        let small = w.call(method, &path, token, Some(&json!({"padding": "x"})), &[]);
        assert_ne!(small.status, 413, "{method} {pattern} with a small body: {}", small.body);
    }
}

fn form(params: &[(&str, &str)]) -> String {
    params.iter().map(|(k, v)| format!("{}={}", k, v.replace(' ', "+"))).collect::<Vec<_>>().join("&")
}

/// V2 signs the URL and the nonce but not the body: by default a V2-only request is refused
/// (its genuine body and a forged one alike), while the SDK's V3 request is accepted. With
/// `PLIVO_ACCEPT_V2=true` the forged body is accepted, which is exactly the risk that setting
/// takes.
fn plivo_requires_v3_unless_v2_is_accepted(_shared: &Worker) {
    assert_eq!(PLIVO_TOKEN, "e2e-plivo-token", "the SDK vector was signed with this token");
    let body = form(&plivo_sdk::PARAMS);
    let forged = body.replace("signed+by+the+plivo+SDK", "forged").replace("sdk-e2e-", "forged-");
    let v2 = [("x-plivo-signature-v2", plivo_sdk::V2_SIGNATURE), ("x-plivo-signature-v2-nonce", plivo_sdk::NONCE)];
    let v3 = [("x-plivo-signature-v3", plivo_sdk::V3_SIGNATURE), ("x-plivo-signature-v3-nonce", plivo_sdk::NONCE)];
    let stored = |w: &Worker, uuid_prefix: &str| {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier = 'plivo' AND carrier_event_id LIKE {}",
            lit(&format!("{uuid_prefix}%"))
        ))
    };

    let w = Worker::start_with(&[("PUBLIC_BASE_URL", plivo_sdk::PUBLIC_BASE_URL)]);
    for (what, body) in [("genuine body", &body), ("forged body", &forged)] {
        let a = w.post("/webhooks/plivo", &v2, body.as_bytes());
        assert_eq!(a.status, 401, "V2 only, {what}: {}", a.body);
        assert!(
            a.json()["error"]["message"].as_str().unwrap_or_default().contains("x-plivo-signature-v3"),
            "{}",
            a.body
        );
    }
    assert_eq!(stored(&w, "sdk-e2e-") + stored(&w, "forged-"), 0, "nothing refused was stored");
    let a = w.post("/webhooks/plivo", &v3, body.as_bytes());
    assert_eq!((a.status, a.json()["outcome"].as_str()), (200, Some("accepted")), "the SDK's V3 request: {}", a.body);
    let both: Vec<(&str, &str)> = v3.iter().chain(v2.iter()).copied().collect();
    let a = w.post("/webhooks/plivo", &both, forged.as_bytes());
    assert_eq!(a.status, 401, "a V3 that fails is not rescued by V2: {}", a.body);
    assert_eq!(stored(&w, "forged-"), 0);
    drop(w);

    let w = Worker::start_with(&[("PUBLIC_BASE_URL", plivo_sdk::PUBLIC_BASE_URL), ("PLIVO_ACCEPT_V2", "true")]);
    let a = w.post("/webhooks/plivo", &v2, forged.as_bytes());
    assert_eq!(
        a.status, 200,
        "with PLIVO_ACCEPT_V2=true a V2-only request is accepted, forged body and all: {}",
        a.body
    );
    assert_eq!(stored(&w, "forged-"), 1);
    drop(w);

    let w = Worker::start_with(&[("PLIVO_ACCEPT_V2", "yes")]);
    let a = w.post("/webhooks/plivo", &v3, body.as_bytes());
    assert_eq!(a.status, 503, "a switch that is neither true nor false is a configuration error: {}", a.body);
    assert!(a.json()["error"]["message"].as_str().unwrap_or_default().contains("PLIVO_ACCEPT_V2"), "{}", a.body);
}

/// An account's API key rotated by the operator: from the answer on, the new key works and the
/// old one is refused, in whichever database the account lives, and a second rotation does the
/// same again. Nothing else of the account changes: its resources are the new key's.
///
/// Seen before: no way to rotate a key at all; and a rotation that changed the account row but
/// not the key's route in `DB` would refuse both keys of an account outside `DB`.
fn a_rotated_api_key_replaces_the_old_one_at_once(w: &Worker) {
    let (account, first) = w.create_account("rotated key");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let list = |key: &str| w.call("GET", "/v1/messages", key, None, &[]);
    assert_eq!(list(&first).status, 200);
    let sent = w.call(
        "POST",
        "/v1/messages",
        &first,
        Some(&json!({"from": number, "to": "+15550001111", "text": "before the rotation"})),
        &[("idempotency-key", &format!("rot-{}", sim::random_hex()))],
    );
    assert_eq!(sent.status, 201, "{}", sent.body);
    let message = sent.json()["id"].as_str().unwrap().to_owned();

    let rotate = |id: &str, token: &str| w.call("POST", &format!("/admin/accounts/{id}/rotate_key"), token, None, &[]);
    let mut old = first;
    for round in 0..2 {
        let answer = rotate(&account, ADMIN_TOKEN);
        assert_eq!(answer.status, 200, "round {round}: {}", answer.body);
        let answer = answer.json();
        assert_eq!(answer["id"], account.as_str());
        let new = answer["api_key"].as_str().unwrap().to_owned();
        assert!(new.starts_with("sk_") && new != old, "round {round}: a new key");
        let refused = list(&old);
        assert_eq!(refused.status, 401, "round {round}: the old key is refused: {}", refused.body);
        let own = w.call("GET", &format!("/v1/messages/{message}"), &new, None, &[]);
        assert_eq!(own.status, 200, "round {round}: the new key reads the account's message: {}", own.body);
        assert_eq!(own.json()["id"], message.as_str());
        // Exactly the new key is live (each key is stored only as its hash, in `DB`).
        let hash = sha256_hex(&new);
        let live = w.sql_at(
            "DB",
            &format!("SELECT key_hash FROM api_keys WHERE account_id = {} AND revoked_at IS NULL", lit(&account)),
        );
        assert_eq!(live, vec![json!({ "key_hash": hash })], "round {round}: only the new key is live");
        old = new;
    }
    // Only the operator rotates, and only a customer account.
    let (_, other_key) = w.create_account("not the operator");
    for token in ["", old.as_str(), other_key.as_str()] {
        assert_eq!(rotate(&account, token).status, 401, "with {token:?}");
    }
    assert_eq!(list(&old).status, 200, "refused rotations changed nothing");
    for id in ["acct_nobody", "acct_operator"] {
        let answer = rotate(id, ADMIN_TOKEN);
        assert_eq!(answer.status, 404, "{id}: {}", answer.body);
    }
}

fn sha256_hex(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
