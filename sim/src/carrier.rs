//! A fake Telnyx REST API on loopback: records every request, answers like Telnyx, honours
//! idempotency keys, and misbehaves on request.
//!
//! Calls: `POST /v2/calls` (dial) answers a leg whose ids derive from the idempotency key, and
//! `POST /v2/calls/{id}/actions/{answer,bridge,hangup}` are recorded and acknowledged. Dials to
//! a number ending in `0000` are refused (`422`).
//!
//! Media: `GET /media/{name}` serves [`media_bytes`] of the name with a content type taken from
//! its extension (`.jpg`, `.png`, `.gif`, `.mp4`), as a carrier's media link does; a name that
//! starts with `gone` answers 404 (an expired link), and one that starts with `slow` answers
//! after 3 s. Every fetch is recorded, so a test counts how often the worker copied an item.
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
//!   `message.finalized` (delivered) webhooks, as a carrier whose handset answered does. Without
//!   a marker no receipt comes (tests and `sim chaos` send their own).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Value};

use crate::telnyx::Signer;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `POST`, ...
    pub method: String,
    /// `/v2/messages`, ...
    pub path: String,
    /// The `Idempotency-Key` header, if any.
    pub idempotency_key: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body (Null when not JSON).
    pub body: Value,
}

/// Where the fake sends webhooks when a scenario asks it to.
#[derive(Clone)]
pub struct WebhookTarget {
    /// The worker's origin, e.g. `http://127.0.0.1:8787`.
    pub base: String,
    /// Signs like Telnyx, with the key the worker trusts.
    pub signer: Signer,
}

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    /// Idempotency key -> the answer given, replayed for a repeated key.
    answers: HashMap<String, (u16, Value)>,
    attempts: HashMap<String, u32>,
    /// Idempotency key -> the carrier message id, fixed on first sight.
    carrier_ids: HashMap<String, String>,
    target: Option<WebhookTarget>,
}

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

    /// Every request received so far on `path`.
    pub fn requests(&self, path: &str) -> Vec<Recorded> {
        lock(&self.state).requests.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// Every request whose path starts with `prefix`.
    pub fn requests_under(&self, prefix: &str) -> Vec<Recorded> {
        lock(&self.state).requests.iter().filter(|r| r.path.starts_with(prefix)).cloned().collect()
    }

    /// How many times the media item `name` (`/media/{name}`) was fetched.
    pub fn media_fetches(&self, name: &str) -> usize {
        let path = format!("/media/{name}");
        lock(&self.state).requests.iter().filter(|r| r.method == "GET" && r.path == path).count()
    }

    /// How many send requests carried this idempotency key.
    pub fn sends_for(&self, idempotency_key: &str) -> usize {
        self.requests("/v2/messages").iter().filter(|r| r.idempotency_key.as_deref() == Some(idempotency_key)).count()
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panicked handler thread leaves the data usable; keep serving.
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
    let recorded = Recorded {
        method: request.method().as_str().to_owned(),
        path: request.url().split('?').next().unwrap_or_default().to_owned(),
        idempotency_key: header(&request, "idempotency-key"),
        authorization: header(&request, "authorization"),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
    };
    lock(state).requests.push(recorded.clone());
    if let ("GET", Some(name)) = (recorded.method.as_str(), recorded.path.strip_prefix("/media/")) {
        let _ = request.respond(media(name));
        return;
    }
    let (status, body) = match (recorded.method.as_str(), recorded.path.as_str()) {
        ("POST", "/v2/messages") => send_message(&recorded, state),
        ("POST", "/v2/calls") => dial(&recorded),
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
    if let Some(answer) = lock(state).answers.get(&key).cloned() {
        return answer;
    }
    let text = req.body["text"].as_str().unwrap_or_default().to_owned();
    let (attempt, carrier_id) = {
        let mut s = lock(state);
        let n = s.attempts.entry(key.clone()).or_insert(0);
        *n += 1;
        let attempt = *n;
        let id = s.carrier_ids.entry(key.clone()).or_insert_with(|| format!("tlx-{}", crate::random_hex())).clone();
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
            let (carrier_id, req) = (carrier_id.clone(), req.clone());
            thread::spawn(move || repeat_receipt(&target, &carrier_id, &req, 14));
        }
        thread::sleep(std::time::Duration::from_secs(7));
    }
    if text.contains("[receipt-first]") && attempt == 1 {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            fire_receipts(&target, &carrier_id, req, &[("message.finalized", "delivered"), ("message.sent", "sent")]);
        }
        thread::sleep(std::time::Duration::from_secs(12));
    }
    if text.contains("[deliver]") {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            let (carrier_id, req) = (carrier_id.clone(), req.clone());
            thread::spawn(move || {
                thread::sleep(std::time::Duration::from_secs(1));
                fire_receipts(
                    &target,
                    &carrier_id,
                    &req,
                    &[("message.sent", "sent"), ("message.finalized", "delivered")],
                );
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

/// Fires `receipts` ((event type, recipient status), in that order) for a message.
fn fire_receipts(target: &WebhookTarget, carrier_id: &str, req: &Recorded, receipts: &[(&str, &str)]) {
    for &(event_type, status) in receipts {
        let payload = json!({"id": carrier_id, "direction": "outbound", "to": [{"phone_number": req.body["to"],
            "status": status}], "errors": []});
        let body =
            crate::telnyx::envelope(&format!("{carrier_id}-{status}"), event_type, "2026-11-30T10:00:00Z", payload, 1);
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
fn repeat_receipt(target: &WebhookTarget, carrier_id: &str, req: &Recorded, times: usize) {
    let payload = json!({"id": carrier_id, "direction": "outbound", "to": [{"phone_number": req.body["to"],
        "status": "delivered"}], "errors": []});
    let body = crate::telnyx::envelope(
        &format!("{carrier_id}-delivered"),
        "message.finalized",
        "2026-11-30T10:00:00Z",
        payload,
        1,
    );
    for _ in 0..times {
        let _ = crate::telnyx::deliver(&target.base, &target.signer, &body, crate::unix_now());
        thread::sleep(std::time::Duration::from_millis(300));
    }
}
