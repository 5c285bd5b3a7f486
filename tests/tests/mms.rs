//! MMS (docs/contract.md §4, §5): inbound media from each carrier is kept with its message once
//! and copied into the R2 bucket once, however often the carrier delivers it and however often
//! a copy job runs; the copy is served through a signed, expiring link; an outbound MMS carries
//! its media URLs to the carrier and is billed as one MMS unit.

use std::io::Read as _;
use std::thread;
use std::time::Duration;

use exactly_core::media::LinkSigner;
use exactly_core::Timestamp;
use exactly_tests::{lit, Customer, Worker, MEDIA_SECRET, PLIVO_TOKEN, TEST_MEDIA_FETCH_TIMEOUT_SECS, TWILIO_TOKEN};
use serde_json::{json, Value};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("mms::telnyx_inbound_media_is_stored_and_copied_once", telnyx_inbound_media_is_stored_and_copied_once),
    ("mms::twilio_inbound_media_is_stored_and_copied_once", twilio_inbound_media_is_stored_and_copied_once),
    ("mms::plivo_inbound_media_is_stored_and_copied_once", plivo_inbound_media_is_stored_and_copied_once),
    ("mms::an_expired_carrier_link_is_given_up_visibly", an_expired_carrier_link_is_given_up_visibly),
    ("mms::a_body_that_stops_coming_is_abandoned_in_time", a_body_that_stops_coming_is_abandoned_in_time),
    ("mms::outbound_mms_carries_its_media_and_is_one_mms_unit", outbound_mms_carries_its_media_and_is_one_mms_unit),
    ("mms::media_urls_are_validated", media_urls_are_validated),
    ("mms::media_links_are_checked_on_every_hop", media_links_are_checked_on_every_hop),
    ("mms::private_media_links_are_refused_in_production", private_media_links_are_refused_in_production),
];

fn uid(tag: &str) -> String {
    format!("{tag}-{}", &sim::random_hex()[..12])
}

/// One media item the fake carrier serves: its name under `/media/` and its link.
pub(crate) struct Item {
    pub(crate) name: String,
    pub(crate) url: String,
}

pub(crate) fn item(w: &Worker, name: String) -> Item {
    Item { url: format!("{}/media/{name}", w.carrier.base), name }
}

/// A plain GET without redirects followed: (status, content type, body, location).
fn fetch(url: &str, token: Option<&str>) -> (u16, String, Vec<u8>, Option<String>) {
    let agent = ureq::AgentBuilder::new().timeout(sim::api::TIMEOUT).redirects(0).build();
    let mut req = agent.get(url);
    if let Some(token) = token {
        req = req.set("authorization", &format!("Bearer {token}"));
    }
    let response = match req.call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let status = response.status();
    let content_type = response.header("content-type").unwrap_or_default().to_owned();
    let location = response.header("location").map(str::to_owned);
    let mut body = Vec::new();
    response.into_reader().read_to_end(&mut body).expect("read the body");
    (status, content_type, body, location)
}

fn wait_settled(w: &Worker, carrier_event_ids: &[String]) {
    let list = carrier_event_ids.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    let total = carrier_event_ids.len() as i64;
    let ok = w.eventually(Duration::from_secs(60), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list})
               AND (processed_at IS NOT NULL OR error IS NOT NULL)"
        )) == total
    });
    assert!(ok, "carrier events {list} not all settled");
}

/// The one message a carrier message id made, and its id.
pub(crate) fn one_message(w: &Worker, carrier: &str, carrier_message_id: &str) -> String {
    let rows = w.sql(&format!(
        "SELECT id FROM messages WHERE carrier = {} AND carrier_message_id = {}",
        lit(carrier),
        lit(carrier_message_id)
    ));
    assert_eq!(rows.len(), 1, "one {carrier} message for {carrier_message_id}: {rows:?}");
    rows[0]["id"].as_str().expect("id").to_owned()
}

pub(crate) fn wait_stored(w: &Worker, message_id: &str, items: usize) {
    let ok = w.eventually(Duration::from_secs(60), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM message_media WHERE message_id = {} AND stored_at IS NOT NULL",
            lit(message_id)
        )) == items as i64
    });
    let rows = w.sql(&format!("SELECT * FROM message_media WHERE message_id = {}", lit(message_id)));
    assert!(ok, "{items} items of {message_id} stored: {rows:?}\n{}", w.log_tail());
}

/// Every way the media of one inbound message must hold, whichever carrier sent it: one row per
/// item, each fetched from the carrier once though its copy job ran again (twice more per item,
/// as redelivered queue messages), each served through its signed link with its bytes and
/// content type, a tampered or expired link refused, and the stable path of the event leading to
/// a fresh link.
fn check_media(w: &Worker, c: &Customer, message_id: &str, items: &[Item], content_types: &[&str]) {
    assert_eq!(
        w.count(&format!("SELECT COUNT(*) AS n FROM message_media WHERE message_id = {}", lit(message_id))),
        items.len() as i64,
        "one row per item"
    );
    wait_stored(w, message_id, items.len());
    // A redelivered copy job (twice per item) finds the item stored and copies nothing.
    for position in 0..items.len() {
        for _ in 0..2 {
            let job = json!({"type": "copy_media", "message_id": message_id, "position": position,
                             "database": w.database_of(&c.account)});
            let a = w.post("/__e2e/jobs", &[("content-type", "application/json")], job.to_string().as_bytes());
            assert_eq!(a.status, 202, "{}", a.body);
        }
    }
    let ran = w.eventually(Duration::from_secs(30), || {
        (0..items.len()).all(|p| {
            w.log_lines(&[r#""job":"copy_media""#, &format!(r#""id":"{message_id}/{p}""#), r#""outcome":"no-op""#]) >= 2
        })
    });
    assert!(ran, "the repeated copy jobs ran:\n{}", w.log_tail());
    for item in items {
        assert_eq!(w.carrier.media_fetches(&item.name), 1, "{} was fetched from the carrier once", item.name);
    }
    assert_eq!(w.log_lines(&[r#""media":"stored""#, &format!("media/{message_id}/")]), items.len(), "one put per item");

    let shown = w.call("GET", &format!("/v1/messages/{message_id}"), &c.key, None, &[]);
    assert_eq!(shown.status, 200, "{}", shown.body);
    let shown = shown.json();
    assert_eq!(shown["type"], "mms");
    let media = shown["media"].as_array().expect("media").clone();
    assert_eq!(media.len(), items.len(), "{shown}");
    for (position, (m, item)) in media.iter().zip(items).enumerate() {
        assert_eq!(m["position"], position);
        assert_eq!(m["source_url"], item.url.as_str());
        assert_eq!(m["stored"], true);
        assert_eq!(m["path"], format!("/v1/messages/{message_id}/media/{position}"));
        let url = m["url"].as_str().unwrap_or_else(|| panic!("a signed url: {m}"));
        assert!(m["url_expires_at"].is_string(), "{m}");
        let (status, content_type, body, _) = fetch(url, None);
        assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&body));
        assert_eq!(content_type, content_types[position], "{url}");
        assert_eq!(body, sim::carrier::media_bytes(&item.name), "{url}");

        // Tampered: another position, another expiry, a changed signature, none at all.
        let (path, query) = url.split_once('?').expect("a query");
        let signature = query.split("signature=").nth(1).expect("signature");
        let expires = query.split('&').next().and_then(|e| e.strip_prefix("expires=")).expect("expires");
        let later = expires.parse::<i64>().expect("a number") + 3600;
        let mut flipped = signature.as_bytes().to_vec();
        flipped[3] = if flipped[3] == b'a' { b'b' } else { b'a' };
        let flipped = String::from_utf8(flipped).expect("ascii");
        let other = format!("{}/{}", path.rsplit_once('/').expect("a position").0, position + 1);
        for tampered in [
            format!("{other}?{query}"),
            format!("{path}?expires={later}&signature={signature}"),
            format!("{path}?expires={expires}&signature={flipped}"),
            path.to_owned(),
        ] {
            let (status, _, body, _) = fetch(&tampered, None);
            assert_eq!(status, 403, "{tampered}");
            let code = serde_json::from_slice::<Value>(&body).expect("JSON")["error"]["code"].clone();
            assert_eq!(code, "invalid_link", "{tampered}");
        }
        // A genuine signature whose time is up.
        let two_hours_ago = Timestamp::from_unix_seconds(sim::unix_now() - 7200);
        let signer = LinkSigner::new(MEDIA_SECRET).expect("the test key");
        let expired = signer.sign(message_id, position as u32, two_hours_ago);
        let (status, _, body, _) = fetch(&format!("{path}?{}", expired.query()), None);
        assert_eq!(status, 403);
        assert_eq!(serde_json::from_slice::<Value>(&body).expect("JSON")["error"]["code"], "link_expired");

        // The stable path (what events carry) leads an account to a fresh link.
        let stable = format!("{}{}", w.base, m["path"].as_str().expect("path"));
        let (status, _, _, location) = fetch(&stable, Some(&c.key));
        assert_eq!(status, 302, "{stable}");
        let (status, content_type, body, _) = fetch(&location.expect("a location"), None);
        assert_eq!((status, content_type.as_str()), (200, content_types[position]));
        assert_eq!(body, sim::carrier::media_bytes(&item.name));
        let (_, other_key) = w.create_account("not-the-owner");
        assert_eq!(fetch(&stable, Some(&other_key)).0, 404, "another account's message");
    }

    // The event was written before the copies: its items carry the stable path, no link.
    let events = w.sql(&format!(
        "SELECT payload FROM outbound_events WHERE resource_id = {} AND type = 'message.received'",
        lit(message_id)
    ));
    assert_eq!(events.len(), 1, "one message.received");
    let payload: Value = serde_json::from_str(events[0]["payload"].as_str().expect("payload")).expect("JSON");
    let event_media = payload["data"]["media"].as_array().expect("media in the event").clone();
    assert_eq!(event_media.len(), items.len(), "{payload}");
    for (position, m) in event_media.iter().enumerate() {
        assert_eq!(m["path"], format!("/v1/messages/{message_id}/media/{position}"));
        assert_eq!((m["url"].clone(), m["stored"].clone()), (Value::Null, json!(false)));
        assert_eq!(m["source_url"], items[position].url.as_str());
    }
    assert_eq!(payload["data"]["type"], "mms");
}

pub(crate) fn telnyx_body(event_id: &str, carrier_message_id: &str, to: &str, items: &[Item]) -> String {
    let media: Vec<Value> = items
        .iter()
        .map(|i| {
            json!({"url": i.url, "content_type": sim::carrier::media_type(&i.name), "size": 30,
            "hash_sha256": "00"})
        })
        .collect();
    sim::telnyx::envelope(
        event_id,
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({"id": carrier_message_id, "direction": "inbound", "type": "MMS", "text": "look",
               "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": to,
                   "status": "webhook_delivered"}], "media": media}),
        1,
    )
}

/// Telnyx: three deliveries in parallel, then the same fact re-signed under a new event id.
fn telnyx_inbound_media_is_stored_and_copied_once(w: &Worker) {
    let c = w.new_customer("mms-telnyx");
    // The first item answers slowly (3 s), so more work arrives while its copy is in flight.
    let items = [item(w, format!("slow-{}.jpg", uid("tlx"))), item(w, format!("{}.png", uid("tlx")))];
    let carrier_id = uid("tlx-mms");
    let event_id = uid("tlx-evt");
    let body = telnyx_body(&event_id, &carrier_id, &c.number, &items);
    let statuses: Vec<u16> = thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| w.deliver_telnyx(&body).status)).collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(statuses, vec![200; 3]);
    // As soon as the message is recorded, two more copy jobs for the slow item are enqueued while
    // its first copy may still be fetching, as redelivered queue messages would be.
    let mut id = String::new();
    let recorded = w.eventually(Duration::from_secs(30), || {
        let rows = w.sql(&format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&carrier_id)));
        id = rows.first().and_then(|r| r["id"].as_str()).unwrap_or_default().to_owned();
        !id.is_empty()
    });
    assert!(recorded, "the message was recorded");
    for _ in 0..2 {
        let job = json!({"type": "copy_media", "message_id": id, "position": 0, "database": w.database_of(&c.account)});
        assert_eq!(
            w.post("/__e2e/jobs", &[("content-type", "application/json")], job.to_string().as_bytes()).status,
            202
        );
    }
    let resigned = uid("tlx-evt-resigned");
    assert_eq!(w.deliver_telnyx(&telnyx_body(&resigned, &carrier_id, &c.number, &items)).status, 200);
    wait_settled(w, &[event_id, resigned]);
    assert_eq!(one_message(w, "telnyx", &carrier_id), id);
    check_media(w, &c, &id, &items, &["image/jpeg", "image/png"]);
    let sizes = w.sql(&format!("SELECT size FROM message_media WHERE message_id = {} ORDER BY position", lit(&id)));
    assert_eq!(sizes, vec![json!({"size": 30}), json!({"size": 30})], "the size Telnyx gave is kept");
    // Each body went into the bucket as it came (the fake declares its length), never whole in
    // the worker: the bytes check_media read back are those streamed.
    let stored = |streamed: &str| w.log_lines(&["\"media\":\"stored\"", &format!("media/{id}/"), streamed]);
    assert_eq!((stored("\"streamed\":true"), stored("\"streamed\":false")), (2, 0), "both items streamed");
}

/// Twilio: three deliveries, a copy re-signed over another URL (a query the carrier added), and a
/// processing job that crashes after its commit and runs again.
fn twilio_inbound_media_is_stored_and_copied_once(w: &Worker) {
    let c = w.new_customer("mms-twilio");
    let items = [item(w, format!("{}.jpg", uid("twl"))), item(w, format!("{}.mp4", uid("twl")))];
    // The processor's commit is followed by an injected crash: the job runs twice.
    let sid = uid("MMfault-crash-after-commit");
    let params = [
        ("MessageSid", sid.as_str()),
        ("SmsStatus", "received"),
        ("From", "+15559990000"),
        ("To", c.number.as_str()),
        ("Body", ""),
        ("NumMedia", "2"),
        ("MediaUrl0", items[0].url.as_str()),
        ("MediaContentType0", "image/jpeg"),
        ("MediaUrl1", items[1].url.as_str()),
        ("MediaContentType1", "video/mp4"),
    ];
    for path in ["/webhooks/twilio", "/webhooks/twilio", "/webhooks/twilio", "/webhooks/twilio?retry=1"] {
        let (body, signature) = sim::twilio::sign(TWILIO_TOKEN, &format!("{}{path}", w.base), &params);
        let a = w.post(
            path,
            &[("x-twilio-signature", &signature), ("content-type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        );
        assert_eq!(a.status, 200, "{path}: {}", a.body);
    }
    wait_settled(w, &[format!("{sid}:received")]);
    let crashed = w.eventually(Duration::from_secs(30), || w.log_lines(&["injected crash after commit", &sid]) >= 1);
    assert!(crashed, "the first processing crashed after its commit");
    let id = one_message(w, "twilio", &sid);
    check_media(w, &c, &id, &items, &["image/jpeg", "video/mp4"]);
}

/// Plivo: three deliveries under one nonce, then the same body re-signed under a new nonce.
fn plivo_inbound_media_is_stored_and_copied_once(w: &Worker) {
    let c = w.new_customer("mms-plivo");
    let items = [item(w, format!("{}.gif", uid("plv")))];
    let uuid = uid("plivo-mms");
    let url = format!("{}/webhooks/plivo", w.base);
    let to = c.number.trim_start_matches('+');
    let params = [
        ("MessageUUID", uuid.as_str()),
        ("From", "15559990000"),
        ("To", to),
        ("Type", "mms"),
        ("Body", "via plivo"),
        ("MediaCount", "1"),
        ("Media1", items[0].url.as_str()),
    ];
    for nonce in ["nonce-1", "nonce-1", "nonce-1", "nonce-2"] {
        let (body, signature) = sim::plivo::sign_v3(PLIVO_TOKEN, &url, nonce, &params);
        let a = w.post(
            "/webhooks/plivo",
            &[("x-plivo-signature-v3", &signature), ("x-plivo-signature-v3-nonce", nonce)],
            body.as_bytes(),
        );
        assert_eq!(a.status, 200, "{nonce}: {}", a.body);
    }
    wait_settled(w, &[format!("{uuid}:received")]);
    let id = one_message(w, "plivo", &uuid);
    let shown = w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]).json();
    assert_eq!(shown["text"], "via plivo", "an MMS's text is in Body");
    // Plivo names no content type: the copy keeps what its link answered.
    check_media(w, &c, &id, &items, &["image/gif"]);
}

/// A carrier link that has already expired (404): the copy is given up once, visibly, and the
/// message is kept with the item's source.
fn an_expired_carrier_link_is_given_up_visibly(w: &Worker) {
    let c = w.new_customer("mms-gone");
    let items = [item(w, format!("gone-{}.jpg", uid("gone")))];
    let carrier_id = uid("tlx-gone");
    let event_id = uid("tlx-gone-evt");
    assert_eq!(w.deliver_telnyx(&telnyx_body(&event_id, &carrier_id, &c.number, &items)).status, 200);
    wait_settled(w, &[event_id]);
    let id = one_message(w, "telnyx", &carrier_id);
    let failed = w.eventually(Duration::from_secs(30), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM message_media WHERE message_id = {} AND copy_error IS NOT NULL",
            lit(&id)
        )) == 1
    });
    assert!(failed, "the copy is given up:\n{}", w.log_tail());
    assert_eq!(w.carrier.media_fetches(&items[0].name), 1, "an expired link is asked once");
    let shown = w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]).json();
    assert_eq!(shown["media"][0]["stored"], false);
    assert_eq!(shown["media"][0]["url"], Value::Null);
    assert_eq!(shown["media"][0]["source_url"], items[0].url.as_str());
    let (status, _, body, _) = fetch(&format!("{}/v1/messages/{id}/media/0", w.base), Some(&c.key));
    assert_eq!(status, 404);
    assert_eq!(serde_json::from_slice::<Value>(&body).expect("JSON")["error"]["code"], "media_not_stored");
}

/// The copy follows a carrier's redirects by hand, each hop checked like the link: a link that
/// redirects to a relative path is stored from where it landed; one that redirects to a `file:`
/// URL is refused without that hop being fetched; one that redirects forever is given up after
/// five hops (seen: redirects were followed by the runtime, to any address and scheme).
fn media_links_are_checked_on_every_hop(w: &Worker) {
    let c = w.new_customer("mms-hops");
    let tag = uid("hops");
    let items =
        [item(w, format!("hop-{tag}.jpg")), item(w, format!("bounce-{tag}.jpg")), item(w, format!("loop-{tag}.jpg"))];
    let carrier_id = uid("tlx-hops");
    let event_id = uid("tlx-hops-evt");
    assert_eq!(w.deliver_telnyx(&telnyx_body(&event_id, &carrier_id, &c.number, &items)).status, 200);
    wait_settled(w, &[event_id]);
    let id = one_message(w, "telnyx", &carrier_id);
    let settled = w.eventually(Duration::from_secs(60), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM message_media WHERE message_id = {}
               AND (stored_at IS NOT NULL OR copy_error IS NOT NULL)",
            lit(&id)
        )) == 3
    });
    let rows = w.sql(&format!(
        "SELECT position, stored_at, copy_error FROM message_media WHERE message_id = {} ORDER BY position",
        lit(&id)
    ));
    assert!(settled, "every item stored or given up: {rows:?}");
    assert!(rows[0]["stored_at"].is_number(), "the hop landed and was stored: {rows:?}");
    assert_eq!(w.carrier.media_fetches(&format!("landed-{tag}.jpg")), 1);
    let error = |position: usize| rows[position]["copy_error"].as_str().unwrap_or_default().to_owned();
    assert!(error(1).contains("redirect of the carrier's media link is refused"), "{rows:?}");
    assert_eq!(w.carrier.media_fetches(&items[1].name), 1, "the bounce was asked once, its target never");
    assert!(error(2).contains("redirected more than 5 times"), "{rows:?}");
    assert_eq!(w.carrier.media_fetches(&items[2].name), 6, "the link and five hops, no more");
}

/// In production (no `ALLOW_PRIVATE_ENDPOINTS`) a media link to a private address is refused and
/// never fetched, as a customer endpoint there would be.
fn private_media_links_are_refused_in_production(_shared: &Worker) {
    let w = Worker::start_with(&[("ALLOW_PRIVATE_ENDPOINTS", "false")]);
    let c = w.new_customer("mms-private");
    let items = [item(&w, format!("{}.jpg", uid("private")))];
    let carrier_id = uid("tlx-private");
    let event_id = uid("tlx-private-evt");
    assert_eq!(w.deliver_telnyx(&telnyx_body(&event_id, &carrier_id, &c.number, &items)).status, 200);
    wait_settled(&w, &[event_id]);
    let id = one_message(&w, "telnyx", &carrier_id);
    let refused = w.eventually(Duration::from_secs(60), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM message_media WHERE message_id = {} AND copy_error LIKE '%is refused%'",
            lit(&id)
        )) == 1
    });
    assert!(refused, "the private link is refused: {:?}", w.sql("SELECT copy_error FROM message_media"));
    assert_eq!(w.carrier.media_fetches(&items[0].name), 0, "and never fetched");
}

/// A link whose server sends the head and then stops mid-body: the copy job gives up on the body
/// at its deadline (and tries again later), rather than waiting for the server, which would hold
/// the queue's invocation, and every job after it, for as long as the server likes.
fn a_body_that_stops_coming_is_abandoned_in_time(w: &Worker) {
    let c = w.new_customer("mms-stuck");
    let items = [item(w, format!("stuck-{}.jpg", uid("stuck")))];
    let carrier_id = uid("tlx-stuck");
    let event_id = uid("tlx-stuck-evt");
    assert_eq!(w.deliver_telnyx(&telnyx_body(&event_id, &carrier_id, &c.number, &items)).status, 200);
    wait_settled(w, &[event_id]);
    let id = one_message(w, "telnyx", &carrier_id);
    // The reason names the test worker's deadline (30 s deployed).
    let reason = format!("did not end within {TEST_MEDIA_FETCH_TIMEOUT_SECS}s");
    let needles = [r#""job":"copy_media""#, &format!(r#""message_id":"{id}""#), r#""outcome":"retried""#, &reason];
    // The fetch deadline and some room; the server would stall for ten minutes.
    const DEADLINE_SECS: u64 = TEST_MEDIA_FETCH_TIMEOUT_SECS + 45;
    let abandoned = w.eventually(Duration::from_secs(DEADLINE_SECS), || w.log_lines(&needles) >= 1);
    // Whatever happened, the item is given up now, so its later tries stall nobody else's jobs.
    w.sql(&format!("UPDATE message_media SET copy_error = 'test over' WHERE message_id = {}", lit(&id)));
    assert!(abandoned, "the copy gave up on the stalled body at its deadline:\n{}", w.log_tail());
    assert_eq!(w.carrier.media_fetches(&items[0].name), 1);
    const { assert!(sim::carrier::STUCK_BODY_SECS > DEADLINE_SECS) };
    let shown = w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]).json();
    assert_eq!(shown["media"][0]["stored"], false, "a partial body is never stored: {shown}");
}

fn outbound_mms_carries_its_media_and_is_one_mms_unit(w: &Worker) {
    let c = w.new_customer("mms-outbound");
    let urls = ["https://cdn.example.com/a.jpg", "https://cdn.example.com/b.png"];
    let text = "x".repeat(200); // two SMS segments, but an MMS is one unit
    let body = json!({"from": c.number, "to": "+15559990000", "text": text, "media_urls": urls});
    let key = uid("mms-key");
    let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &[("idempotency-key", &key)]);
    assert_eq!(a.status, 201, "{}", a.body);
    let sent = a.json();
    assert_eq!(sent["type"], "mms");
    let id = sent["id"].as_str().expect("id").to_owned();
    let shown: Vec<Value> = sent["media"].as_array().expect("media").clone();
    assert_eq!(shown.len(), 2);
    for (position, (m, url)) in shown.iter().zip(urls).enumerate() {
        assert_eq!((m["position"].clone(), m["source_url"].clone()), (json!(position), json!(url)));
        assert_eq!((m["path"].clone(), m["url"].clone()), (Value::Null, Value::Null), "outbound media is not copied");
    }
    // The same key again: the first answer, no second send; another set of media is refused.
    let again = w.call("POST", "/v1/messages", &c.key, Some(&body), &[("idempotency-key", &key)]);
    assert_eq!((again.status, &again.body), (201, &a.body));
    let mut changed = body.clone();
    changed["media_urls"] = json!(["https://cdn.example.com/a.jpg"]);
    let conflict = w.call("POST", "/v1/messages", &c.key, Some(&changed), &[("idempotency-key", &key)]);
    assert_eq!(conflict.status, 422, "{}", conflict.body);
    assert_eq!(conflict.json()["error"]["code"], "idempotency_key_reused");

    let ok = w.eventually(Duration::from_secs(40), || {
        w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]).json()["status"] == "sent"
    });
    assert!(ok, "the MMS was sent");
    let sends = w.carrier.requests("/v2/messages");
    let send: Vec<_> = sends.iter().filter(|r| r.idempotency_key.as_deref() == Some(id.as_str())).collect();
    assert_eq!(send.len(), 1, "one send");
    assert_eq!(send[0].body["media_urls"], json!(urls), "the carrier got the media");
    assert_eq!(send[0].body["text"], text.as_str());

    let message = w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]).json();
    assert_eq!((message["charge"]["kind"].clone(), message["charge"]["quantity"].clone()), (json!("mms"), json!(1)));
    let ledger = w.sql(&format!("SELECT kind, quantity FROM usage WHERE resource_id = {}", lit(&id)));
    assert_eq!(ledger, vec![json!({"kind": "mms", "quantity": 1})], "one mms unit, no segments");
    let usage = w.call("GET", "/v1/usage", &c.key, None, &[]).json();
    assert_eq!((usage["mms"].clone(), usage["sms_segments"].clone()), (json!(1), json!(0)), "{usage}");

    // Media only: no text at all.
    let bare = json!({"from": c.number, "to": "+15559990000", "media_urls": [urls[0]]});
    let a = w.call("POST", "/v1/messages", &c.key, Some(&bare), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    let bare_id = a.json()["id"].as_str().expect("id").to_owned();
    let ok = w.eventually(Duration::from_secs(40), || {
        w.carrier.requests("/v2/messages").iter().any(|r| r.idempotency_key.as_deref() == Some(bare_id.as_str()))
    });
    assert!(ok, "the media-only MMS was sent");
    let send = w.carrier.requests("/v2/messages");
    let send = send.iter().find(|r| r.idempotency_key.as_deref() == Some(bare_id.as_str())).expect("sent");
    assert_eq!(send.body["media_urls"], json!([urls[0]]));
    assert_eq!(send.body.get("text"), None, "no empty text is sent");
}

fn media_urls_are_validated(w: &Worker) {
    let c = w.new_customer("mms-validation");
    let post = |extra: Value| {
        let mut body = json!({"from": c.number, "to": "+15559990000", "text": "x"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        w.call("POST", "/v1/messages", &c.key, Some(&body), &[])
    };
    let eleven: Vec<String> = (0..11).map(|i| format!("https://cdn.example.com/{i}.jpg")).collect();
    for extra in [
        json!({"media_urls": ["http://cdn.example.com/a.jpg"]}),
        json!({"media_urls": ["not a url"]}),
        json!({"media_urls": ["https://user:pw@cdn.example.com/a.jpg"]}),
        json!({"media_urls": [format!("https://cdn.example.com/{}", "a".repeat(2100))]}),
        json!({"media_urls": eleven}),
    ] {
        let a = post(extra.clone());
        assert_eq!(a.status, 422, "{extra}: {}", a.body);
        assert_eq!(a.json()["error"]["field"], "media_urls", "{extra}");
    }
    let a = post(json!({"media_urls": "https://cdn.example.com/a.jpg"}));
    assert_eq!(a.status, 400, "not an array: {}", a.body);
    let a = post(json!({"media_urls": []}));
    assert_eq!((a.status, a.json()["type"].clone()), (201, json!("sms")), "no media: an SMS: {}", a.body);
    let bare = json!({"from": c.number, "to": "+15559990000"});
    let a = w.call("POST", "/v1/messages", &c.key, Some(&bare), &[]);
    assert_eq!((a.status, a.json()["error"]["field"].clone()), (422, json!("text")), "{}", a.body);
}
