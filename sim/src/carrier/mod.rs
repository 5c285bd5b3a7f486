//! A fake carrier REST API on loopback: Telnyx, and the message APIs of Twilio
//! (`/2010-04-01/Accounts/{sid}/Messages.json`) and Plivo (`/v1/Account/{id}/Message/`). It
//! records every request, answers like each carrier, honours Telnyx's idempotency keys, lists
//! the Twilio and Plivo messages it took, and misbehaves on request.
//!
//! Calls: `POST /v2/calls` (dial) answers a leg whose ids derive from the idempotency key, and
//! `POST /v2/calls/{id}/actions/{answer,bridge,hangup}` are recorded and acknowledged;
//! `GET /v2/calls/{id}` says a leg is alive until [`FakeCarrier::end_call`] ends it. `GET` of a
//! message (each carrier's own path) reports `sent` unless [`FakeCarrier::set_message_status`]
//! says otherwise. Dials to
//! a number ending in `0000` are refused (`422`).
//!
//! Media: `GET /media/{name}` serves [`media_bytes`] (or redirects, for the names [`redirect`]
//! knows) of the name with a content type taken from
//! its extension (`.jpg`, `.png`, `.gif`, `.mp4`), as a carrier's media link does; a name that
//! starts with `gone` answers 404 (an expired link), one that starts with `slow` answers
//! after 3 s, and one that starts with `stuck` answers at once with its first 8 bytes and then
//! stalls the rest of its body for [`STUCK_BODY_SECS`]. Every fetch is recorded, so a test
//! counts how often the worker copied an item.
//! Sends with `media_urls` answer as an MMS.
//!
//! Message behaviour is chosen by markers in the text, so one fake serves many tests at once:
//! - `[refuse]`: 400 with a Telnyx error (`40310`).
//! - `[flaky]`: the first request for an idempotency key answers 503, later ones 200.
//! - `[receipt-first]`: on the first request for a key, fires the signed `message.finalized`
//!   (delivered) and `message.sent` webhooks at the worker, waits for their answers, and then
//!   stalls for 12 s (past the worker's 10 s timeout), as a carrier does whose answer is lost
//!   after it accepted the message. A retry with the same key gets the same message back.
//! - `[slow-receipts]`: on the first request for a key, takes 7 s to answer (inside the
//!   worker's timeout) while it delivers the signed `message.finalized` (delivered) for that
//!   message 14 times under one event id, as a carrier retrying a receipt does.
//! - `[deliver]`: answers at once, then a second later fires the signed `message.sent` and
//!   `message.finalized` (delivered) webhooks, as a carrier whose handset answered does; `[fail]`
//!   likewise with a failure (`delivery_failed` and a Telnyx error). Without a marker no receipt
//!   comes (tests and `sim chaos` send their own), unless the carrier delivers by default
//!   ([`FakeCarrier::deliver_by_default`], what `sim carrier` does for `make dev`): then every
//!   message without another marker is delivered, and `[no-receipt]` keeps its receipts back.
//!
//! - a text held with [`FakeCarrier::hold`]: every request for it after the first answers 503
//!   until [`FakeCarrier::release`], so a test decides when the send's result reaches the worker
//!   (say, once a receipt fired by `[receipt-first]` was seen waiting for it).
//!
//! - a word of the text that starts with `fault-` is carried in the message's carrier id, so the
//!   receipts of the message (whose event ids contain it) arm that fault of the worker.
//!
//! Twilio and Plivo sends take `[refuse]`, `[flaky]` (keyed by from, to and text: they have no
//! idempotency key), `[deliver]` and `[fail]` (status callbacks to the request's `StatusCallback` / `url`,
//! signed with the auth token as each carrier signs) and `[lost-answer]`: the message is taken
//! and listed, but the answer comes only after 12 s, past the worker's timeout. Telnyx sends take
//! `[lost-answer]` too: the first request for a key answers after 12 s.

use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Value};

mod rest;
mod state;
use rest::{rest_list, rest_send, Rest};
use state::{lock, receipts_due, State};
pub use state::{Recorded, WebhookTarget};

/// A running fake carrier.
pub struct FakeCarrier {
    /// `http://127.0.0.1:PORT`: set it as `TELNYX_API_BASE`.
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl FakeCarrier {
    /// Starts the fake on a free loopback port; it serves until the process exits.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0")
    }

    /// Starts the fake on `addr` (e.g. `127.0.0.1:8788`); it serves until the process exits.
    pub fn start_on(addr: &str) -> std::io::Result<Self> {
        let server = tiny_http::Server::http(addr).map_err(std::io::Error::other)?;
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or_default();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        thread::spawn(move || {
            for request in server.incoming_requests() {
                let state = Arc::clone(&shared);
                thread::spawn(move || serve(request, &state));
            }
        });
        Ok(Self { base: format!("http://127.0.0.1:{port}"), state })
    }

    /// Sets where scenario webhooks go (the worker under test).
    pub fn set_webhook_target(&self, target: WebhookTarget) {
        lock(&self.state).target = Some(target);
    }

    /// From now on every message without a marker is delivered (its receipts come a second
    /// later) and `[no-receipt]` keeps them back: what a developer trying the product expects.
    pub fn deliver_by_default(&self) {
        lock(&self.state).deliver_by_default = true;
    }

    /// Every request received so far on `path`.
    pub fn requests(&self, path: &str) -> Vec<Recorded> {
        lock(&self.state).requests.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// Every request whose path starts with `prefix`.
    pub fn requests_under(&self, prefix: &str) -> Vec<Recorded> {
        lock(&self.state).requests.iter().filter(|r| r.path.starts_with(prefix)).cloned().collect()
    }

    /// Ends a call leg at the carrier without telling the worker (its hangup webhook is lost):
    /// `GET /v2/calls/{id}` says it is no longer alive, ended at `end_time` (RFC 3339).
    pub fn end_call(&self, call_control_id: &str, end_time: &str) {
        lock(&self.state).ended_calls.insert(call_control_id.to_owned(), end_time.to_owned());
    }

    /// Sets what a `GET` of a message reports as its status (by default `sent`), in the words
    /// of the carrier that took it.
    pub fn set_message_status(&self, carrier_message_id: &str, status: &str) {
        lock(&self.state).message_statuses.insert(carrier_message_id.to_owned(), status.to_owned());
    }

    /// How many times the media item `name` (`/media/{name}`) was fetched.
    pub fn media_fetches(&self, name: &str) -> usize {
        let path = format!("/media/{name}");
        lock(&self.state).requests.iter().filter(|r| r.method == "GET" && r.path == path).count()
    }

    /// Holds the sends of messages with exactly this text: after the first request, each answers
    /// 503 until [`FakeCarrier::release`].
    pub fn hold(&self, text: &str) {
        lock(&self.state).held.insert(text.to_owned());
    }

    /// Lets the sends of messages with this text through again.
    pub fn release(&self, text: &str) {
        lock(&self.state).held.remove(text);
    }

    /// The carrier message id given to the send with this idempotency key, once one came.
    pub fn carrier_id(&self, idempotency_key: &str) -> Option<String> {
        lock(&self.state).carrier_ids.get(idempotency_key).cloned()
    }

    /// How many send requests carried this idempotency key.
    pub fn sends_for(&self, idempotency_key: &str) -> usize {
        self.send_times(idempotency_key).len()
    }

    /// When each send request that carried this idempotency key arrived (Unix milliseconds).
    pub fn send_times(&self, idempotency_key: &str) -> Vec<i64> {
        self.requests("/v2/messages")
            .iter()
            .filter(|r| r.idempotency_key.as_deref() == Some(idempotency_key))
            .map(|r| r.at_millis)
            .collect()
    }

    /// The idempotency keys of the Telnyx send requests that carried exactly this text: one
    /// key however often a send whose answer was lost is tried again.
    pub fn keys_with_text(&self, text: &str) -> std::collections::BTreeSet<Option<String>> {
        self.requests("/v2/messages")
            .into_iter()
            .filter(|r| r.body["text"] == text)
            .map(|r| r.idempotency_key)
            .collect()
    }

    /// The ids of the messages with exactly this text that `carrier` (`twilio` or `plivo`) took,
    /// in order: one per SMS that would reach a handset, however often it was requested.
    pub fn taken_with_text(&self, carrier: &str, text: &str) -> Vec<String> {
        lock(&self.state)
            .taken
            .iter()
            .filter(|(name, _, taken)| *name == carrier && taken == text)
            .filter_map(|(_, listed, _)| listed["sid"].as_str().or(listed["message_uuid"].as_str()).map(str::to_owned))
            .collect()
    }

    /// How many send requests, to any of the three carriers, carried exactly this text. Twilio
    /// and Plivo take no idempotency key, so a message's sends are told apart by their text.
    pub fn sends_with_text(&self, text: &str) -> usize {
        lock(&self.state)
            .requests
            .iter()
            .filter(|r| r.method == "POST")
            .filter(|r| {
                let field = if r.path == "/v2/messages" {
                    "text"
                } else if r.path.starts_with("/2010-04-01/Accounts/") && r.path.ends_with("/Messages.json") {
                    "Body"
                } else if r.path.starts_with("/v1/Account/") && r.path.ends_with("/Message/") {
                    "text"
                } else {
                    return false;
                };
                r.body[field] == text
            })
            .count()
    }
}

fn serve(mut request: tiny_http::Request, state: &Mutex<State>) {
    let header = |request: &tiny_http::Request, name: &str| {
        request
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_owned())
    };
    let mut raw = String::new();
    let _ = request.as_reader().read_to_string(&mut raw);
    let query = request.url().split_once('?').map(|(_, q)| q.to_owned()).unwrap_or_default();
    let form = header(&request, "content-type").is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let body = if form {
        Value::Object(form_urlencoded::parse(raw.as_bytes()).map(|(k, v)| (k.into_owned(), json!(v))).collect())
    } else {
        serde_json::from_str(&raw).unwrap_or(Value::Null)
    };
    let recorded = Recorded {
        method: request.method().as_str().to_owned(),
        path: request.url().split('?').next().unwrap_or_default().to_owned(),
        idempotency_key: header(&request, "idempotency-key"),
        authorization: header(&request, "authorization"),
        body,
        at_millis: crate::unix_millis(),
    };
    lock(state).requests.push(recorded.clone());
    if let ("GET", Some(name)) = (recorded.method.as_str(), recorded.path.strip_prefix("/media/")) {
        if name.starts_with("stuck") {
            stuck(request, name);
        } else if let Some(location) = redirect(name) {
            let header = tiny_http::Header::from_bytes("location", location.as_bytes()).expect("a valid header");
            let _ = request.respond(tiny_http::Response::empty(302).with_header(header));
        } else {
            let _ = request.respond(media(name));
        }
        return;
    }
    let (status, body) = match (recorded.method.as_str(), recorded.path.as_str()) {
        ("POST", "/v2/messages") => send_message(&recorded, state),
        ("POST", "/v2/calls") => dial(&recorded),
        ("GET", path) if path.starts_with("/v2/calls/") => call_status(path, state),
        ("GET", path) if path.starts_with("/v2/messages/") => {
            let id = path.trim_start_matches("/v2/messages/");
            let status = lock(state).message_statuses.get(id).cloned().unwrap_or_else(|| "sent".to_owned());
            (200, json!({"data": {"record_type": "message", "id": id, "to": [{"status": status}], "errors": []}}))
        }
        ("GET", path) if path.starts_with("/2010-04-01/Accounts/") && path.contains("/Messages/") => {
            let sid = path.rsplit('/').next().unwrap_or_default().trim_end_matches(".json");
            let status = lock(state).message_statuses.get(sid).cloned().unwrap_or_else(|| "sent".to_owned());
            (200, json!({"sid": sid, "status": status, "error_code": null, "error_message": null}))
        }
        ("GET", path)
            if path.starts_with("/v1/Account/") && path.contains("/Message/") && !path.ends_with("/Message/") =>
        {
            let uuid = path.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
            let state_word = lock(state).message_statuses.get(uuid).cloned().unwrap_or_else(|| "sent".to_owned());
            (200, json!({"message_uuid": uuid, "message_state": state_word, "error_code": "0"}))
        }
        ("POST", path) if path.starts_with("/2010-04-01/Accounts/") && path.ends_with("/Messages.json") => {
            rest_send(&recorded, state, Rest::Twilio)
        }
        ("GET", path) if path.starts_with("/2010-04-01/Accounts/") && path.ends_with("/Messages.json") => {
            rest_list(&query, state, Rest::Twilio)
        }
        ("POST", path) if path.starts_with("/v1/Account/") && path.ends_with("/Message/") => {
            rest_send(&recorded, state, Rest::Plivo)
        }
        ("GET", path) if path.starts_with("/v1/Account/") && path.ends_with("/Message/") => {
            rest_list(&query, state, Rest::Plivo)
        }
        ("POST", path) if path.starts_with("/v2/calls/") && path.contains("/actions/") => {
            (200, json!({"data": {"result": "ok"}}))
        }
        _ => (404, json!({"errors": [{"code": "10005", "title": "Resource not found"}]})),
    };
    let response = tiny_http::Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(tiny_http::Header::from_bytes("content-type", "application/json").expect("a valid header"));
    let _ = request.respond(response);
}

/// How long a `stuck` media item's body stalls after its first bytes: far past any deadline of
/// the worker.
pub const STUCK_BODY_SECS: u64 = 600;

/// Answers a `stuck` media item: the head and the first 8 bytes of the body at once, the rest
/// after [`STUCK_BODY_SECS`], as a link whose server hangs mid-transfer. Written by hand so the
/// first part leaves at once rather than waiting in a buffer.
fn stuck(request: tiny_http::Request, name: &str) {
    use std::io::Write as _;
    let bytes = media_bytes(name);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        media_type(name),
        bytes.len()
    );
    let mut writer = request.into_writer();
    let (first, rest) = bytes.split_at(8.min(bytes.len()));
    if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(first)).and_then(|()| writer.flush()).is_err() {
        return;
    }
    thread::sleep(std::time::Duration::from_secs(STUCK_BODY_SECS));
    let _ = writer.write_all(rest).and_then(|()| writer.flush());
}

/// Where a redirecting media link sends its fetcher: `loop-*` to itself, `bounce-*` to a
/// `file:` URL, `hop-<rest>` to `landed-<rest>` (a relative `Location`).
fn redirect(name: &str) -> Option<String> {
    if name.starts_with("loop-") {
        Some(format!("/media/{name}"))
    } else if name.starts_with("bounce-") {
        Some("file:///etc/passwd".to_owned())
    } else {
        name.strip_prefix("hop-").map(|rest| format!("landed-{rest}"))
    }
}

/// The bytes the fake serves for the media item `name`.
pub fn media_bytes(name: &str) -> Vec<u8> {
    format!("fake carrier media {name}\n").into_bytes()
}

/// The content type the fake serves `name` with, by its extension.
pub fn media_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("png") => "image/png",
        Some("gif") => "image/gif",
        Some("mp4") => "video/mp4",
        _ => "application/octet-stream",
    }
}

fn media(name: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    if name.starts_with("gone") {
        return tiny_http::Response::from_data(b"gone".to_vec()).with_status_code(404);
    }
    if name.starts_with("slow") {
        thread::sleep(std::time::Duration::from_secs(3));
    }
    tiny_http::Response::from_data(media_bytes(name))
        .with_header(tiny_http::Header::from_bytes("content-type", media_type(name)).expect("a valid header"))
}

fn send_message(req: &Recorded, state: &Mutex<State>) -> (u16, Value) {
    let key = req.idempotency_key.clone().unwrap_or_default();
    let text = req.body["text"].as_str().unwrap_or_default().to_owned();
    {
        // Held: every request after the first for this key, whatever the first was answered.
        let s = lock(state);
        if s.held.contains(&text) && s.attempts.contains_key(&key) {
            return (503, json!({"errors": [{"code": "10011", "title": "Service unavailable"}]}));
        }
        if let Some(answer) = s.answers.get(&key).cloned() {
            return answer;
        }
    }
    let (attempt, carrier_id) = {
        let mut s = lock(state);
        let n = s.attempts.entry(key.clone()).or_insert(0);
        *n += 1;
        let attempt = *n;
        let id = s.carrier_ids.entry(key.clone()).or_insert_with(|| carrier_id_for(&text)).clone();
        (attempt, id)
    };
    if text.contains("[refuse]") {
        let answer = (
            400,
            json!({"errors": [{"code": "40310", "title": "Invalid 'to' address",
                "detail": "The 'to' address is not reachable"}]}),
        );
        lock(state).answers.insert(key, answer.clone());
        return answer;
    }
    if text.contains("[flaky]") && attempt == 1 {
        return (503, json!({"errors": [{"code": "10011", "title": "Service unavailable"}]}));
    }
    if text.contains("[slow-receipts]") && attempt == 1 {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            let carrier_id = carrier_id.clone();
            thread::spawn(move || repeat_receipt(&target, &carrier_id, 14));
        }
        thread::sleep(std::time::Duration::from_secs(7));
    }
    if text.contains("[lost-answer]") && attempt == 1 {
        thread::sleep(std::time::Duration::from_secs(12));
    }
    if text.contains("[receipt-first]") && attempt == 1 {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            fire_receipts(&target, &carrier_id, &["delivered", "sent"]);
        }
        thread::sleep(std::time::Duration::from_secs(12));
    }
    // The lock is taken and released before the `if let`: its temporary would live through the
    // whole block, where the target is locked again.
    let by_default = lock(state).deliver_by_default;
    if let Some(delivered) = receipts_due(&text, by_default) {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            let carrier_id = carrier_id.clone();
            thread::spawn(move || {
                thread::sleep(std::time::Duration::from_secs(1));
                fire_receipts(&target, &carrier_id, &["sent", if delivered { "delivered" } else { "delivery_failed" }]);
            });
        }
    }
    let media: Vec<Value> = req.body["media_urls"]
        .as_array()
        .map(|urls| urls.iter().map(|url| json!({"url": url, "content_type": null, "size": null})).collect())
        .unwrap_or_default();
    let kind = if media.is_empty() { "SMS" } else { "MMS" };
    let answer = (
        200,
        json!({"data": {
            "record_type": "message", "direction": "outbound", "id": carrier_id, "type": kind,
            "messaging_profile_id": req.body["messaging_profile_id"],
            "from": {"phone_number": req.body["from"], "carrier": "Telnyx", "line_type": "Wireless"},
            "to": [{"phone_number": req.body["to"], "status": "queued", "carrier": "T-Mobile USA",
                "line_type": "Wireless"}],
            "text": text, "media": media, "parts": 1, "encoding": "GSM-7", "cost": null, "errors": [],
        }}),
    );
    lock(state).answers.insert(key, answer.clone());
    answer
}

fn dial(req: &Recorded) -> (u16, Value) {
    let to = req.body["to"].as_str().unwrap_or_default();
    if to.ends_with("0000") {
        return (422, json!({"errors": [{"code": "90018", "title": "Call recipient is not reachable"}]}));
    }
    let key = req.idempotency_key.clone().unwrap_or_else(crate::random_hex);
    (
        200,
        json!({"data": {
            "record_type": "call", "call_control_id": format!("v3:cc-{key}"), "call_leg_id": format!("leg-{key}"),
            "call_session_id": format!("sess-{key}"), "is_alive": false,
        }}),
    )
}

/// Decodes a dial request's `client_state` (base64) back to text.
pub fn client_state(req: &Recorded) -> Option<String> {
    use base64::Engine as _;
    let encoded = req.body["client_state"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

/// Fires the receipts of a message with these recipient statuses, in that order.
fn fire_receipts(target: &WebhookTarget, carrier_id: &str, statuses: &[&str]) {
    for &status in statuses {
        let errors =
            if status == "delivery_failed" { json!([{"code": "40300", "title": "Blocked"}]) } else { json!([]) };
        let body = crate::telnyx::receipt(&format!("{carrier_id}-{status}"), carrier_id, status, errors);
        // Like the carrier, retry until the worker answers 2xx (a few times, a second apart).
        for _ in 0..10 {
            let (status, _) = crate::telnyx::deliver(&target.base, &target.signer, &body, crate::unix_now());
            if (200..300).contains(&status) {
                break;
            }
            thread::sleep(std::time::Duration::from_secs(1));
        }
    }
}

/// Delivers the same `message.finalized` (delivered) `times` times under one event id, a few
/// hundred milliseconds apart, while the send is still unanswered.
fn repeat_receipt(target: &WebhookTarget, carrier_id: &str, times: usize) {
    let body = crate::telnyx::receipt(&format!("{carrier_id}-delivered"), carrier_id, "delivered", json!([]));
    for _ in 0..times {
        let _ = crate::telnyx::deliver(&target.base, &target.signer, &body, crate::unix_now());
        thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// `GET /v2/calls/{id}`: alive unless [`FakeCarrier::end_call`] ended it.
fn call_status(path: &str, state: &Mutex<State>) -> (u16, Value) {
    let encoded = path.trim_start_matches("/v2/calls/");
    let id: String = form_urlencoded::parse(format!("id={encoded}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let ended = lock(state).ended_calls.get(&id).cloned();
    (
        200,
        json!({"data": {"record_type": "call", "call_control_id": id, "is_alive": ended.is_none(),
            "end_time": ended}}),
    )
}

/// A Telnyx message id: random, with the text's `fault-` marker if it has one.
fn carrier_id_for(text: &str) -> String {
    match text.split_whitespace().find(|word| word.starts_with("fault-")) {
        Some(marker) => format!("tlx-{marker}-{}", crate::random_hex()),
        None => format!("tlx-{}", crate::random_hex()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn receipts_come_when_marked_or_by_default() {
        use super::receipts_due;
        assert_eq!(receipts_due("hello", false), None, "the tests' carrier sends none unmarked");
        assert_eq!(receipts_due("hello [deliver]", false), Some(true));
        assert_eq!(receipts_due("hello [fail]", false), Some(false));
        assert_eq!(receipts_due("hello", true), Some(true), "sim carrier delivers by default");
        assert_eq!(receipts_due("hello [fail]", true), Some(false));
        for held in ["[no-receipt]", "[receipt-first]", "[slow-receipts]", "[refuse]", "[lost-answer]"] {
            assert_eq!(receipts_due(&format!("hello {held}"), true), None, "{held}");
        }
    }
}
