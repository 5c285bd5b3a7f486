//! `sim listen`: a local receiver for an account's webhooks while developing. It registers itself
//! as an endpoint of the account (or serves one given), verifies every delivery with the
//! endpoint's secret using the official Standard Webhooks library, prints each event as it
//! arrives, optionally forwards it to a local URL and answers with that URL's status, and removes
//! the endpoint it created on Ctrl-C.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::api::Client;
use crate::dev::Target;

/// What `sim listen` was asked to do.
pub struct Options {
    pub target: Target,
    /// Where the receiver listens on loopback (0: any free port).
    pub port: u16,
    /// The event types to subscribe to (empty: every type there is).
    pub event_types: Vec<String>,
    /// An endpoint that exists already (its id and secret): served, never removed.
    pub existing: Option<(String, String)>,
    /// Prints each event as one JSON object per line.
    pub json: bool,
    /// Forwards each verified delivery here, headers and body unchanged.
    pub forward_to: Option<String>,
    /// Prints the endpoint's signing secret once it is known (to stderr).
    pub print_secret: bool,
    /// Prints each delivery's headers and body under its line (in `json`: as fields).
    pub verbose: bool,
}

/// A delivery's headers (names lowercased) and body, as it arrived.
type Raw<'a> = (&'a [(String, String)], &'a [u8]);

/// A delivery, as printed.
struct Arrival {
    webhook_id: String,
    /// The how-manyth verified delivery of this webhook-id this receiver has seen (1 the first
    /// time); none for one that did not verify.
    attempt: Option<u32>,
    verified: Result<(), String>,
    event: Value,
    /// The forward target's status, or why it gave none, when forwarding.
    forwarded: Option<Result<u16, String>>,
}

impl Arrival {
    fn render(&self, json_lines: bool, verbose: Option<Raw<'_>>) -> String {
        let event = &self.event;
        if json_lines {
            let mut line = json!({
                "webhook_id": self.webhook_id,
                "attempt": self.attempt,
                "verified": self.verified.is_ok(),
                "error": self.verified.as_ref().err(),
                "forwarded_status": self.forwarded.as_ref().and_then(|f| f.as_ref().ok()),
                "forward_error": self.forwarded.as_ref().and_then(|f| f.as_ref().err()),
                "event": event,
            });
            if let Some((headers, _)) = verbose {
                line["headers"] = headers.iter().map(|(k, v)| (k.clone(), json!(printable(v)))).collect();
            }
            return line.to_string();
        }
        let resource = event["data"]["id"].as_str().or(event["data"]["endpoint_id"].as_str()).unwrap_or("-");
        let sequence = event["sequence"].as_i64().map(|s| format!("seq {s}")).unwrap_or_else(|| "-".into());
        let mark = match &self.verified {
            Ok(()) => "verified".to_owned(),
            Err(e) => format!("NOT VERIFIED ({e})"),
        };
        let forwarded = match &self.forwarded {
            Some(Ok(status)) => format!("  -> {status}"),
            Some(Err(e)) => format!("  -> no answer ({e})"),
            None => String::new(),
        };
        let attempt = self.attempt.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
        let mut line = format!(
            "{:<24} {:<38} {:<7} webhook-id {} attempt {attempt}  {mark}{forwarded}",
            printable(event["type"].as_str().unwrap_or("?")),
            printable(resource),
            sequence,
            printable(&self.webhook_id),
        );
        if let Some((headers, body)) = verbose {
            for (name, value) in headers {
                line.push_str(&format!("\n    {}: {}", printable(name), printable(value)));
            }
            let shown = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
            for body_line in shown.lines() {
                line.push_str(&format!("\n    {}", printable(body_line)));
            }
        }
        line
    }
}

/// The most of a delivery's body the receiver reads (the worker sends far less).
const MAX_BODY: u64 = 1 << 20;

/// `text` without control characters: what an unverified sender wrote reaches no terminal raw.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// Registers the endpoint (unless one was given), serves until interrupted, then removes it.
pub fn run(options: Options) -> Result<(), String> {
    let server = tiny_http::Server::http(("127.0.0.1", options.port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", options.port))?;
    let port = server.server_addr().to_ip().map(|a| a.port()).ok_or("the receiver has no port")?;
    let url = format!("http://127.0.0.1:{port}/");
    let (id, secret) = match &options.existing {
        Some((id, secret)) => {
            ctrlc::set_handler(|| std::process::exit(0)).map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
            (id.clone(), secret.clone())
        }
        None => {
            let cleanup = Cleanup::install(&options.target)?;
            let (id, secret) = register(&cleanup.client, &cleanup.key, &url, &options.event_types)?;
            cleanup.registered(&id);
            (id, secret)
        }
    };
    let webhook = Arc::new(standardwebhooks::Webhook::new(&secret).map_err(|e| format!("the endpoint's secret: {e}"))?);
    let removal = if options.existing.is_none() { " (Ctrl-C removes it)" } else { "" };
    eprintln!("sim: listening on {url} as endpoint {id}{removal}");
    if options.print_secret {
        eprintln!("sim: its signing secret: {secret} (WEBHOOK_SECRET for docs/receivers/receiver.py)");
    }
    let forward = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(10)).redirects(0).build();
    let attempts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let options = Arc::new(options);
    // Each delivery on a thread of its own: a slow forward target holds up no other delivery.
    for request in server.incoming_requests() {
        let (webhook, forward, attempts, options) =
            (Arc::clone(&webhook), forward.clone(), Arc::clone(&attempts), Arc::clone(&options));
        std::thread::spawn(move || serve(request, &webhook, &forward, &attempts, &options));
    }
    Ok(())
}

/// Verifies, forwards, prints and answers one delivery.
fn serve(
    mut request: tiny_http::Request,
    webhook: &standardwebhooks::Webhook,
    forward: &ureq::Agent,
    attempts: &Mutex<HashMap<String, u32>>,
    options: &Options,
) {
    let mut body = Vec::new();
    let read = std::io::Read::read_to_end(&mut std::io::Read::take(request.as_reader(), MAX_BODY + 1), &mut body);
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|h| (h.field.as_str().as_str().to_ascii_lowercase(), h.value.to_string()))
        .collect();
    let webhook_id = headers.iter().find(|(k, _)| k == "webhook-id").map(|(_, v)| v.clone()).unwrap_or_default();
    let verified = match read {
        Err(e) => Err(format!("unreadable body: {e}")),
        Ok(_) if body.len() as u64 > MAX_BODY => Err(format!("body larger than {MAX_BODY} bytes")),
        Ok(_) => verify(webhook, &headers, &body),
    };
    // Only a verified delivery counts as an attempt: a forged one is not the worker's.
    let attempt = match verified {
        Ok(()) => {
            let mut seen = attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let n = seen.entry(webhook_id.clone()).or_default();
            *n += 1;
            Some(*n)
        }
        Err(_) => None,
    };
    let forwarded = match (&options.forward_to, &verified) {
        (Some(to), Ok(())) => Some(forward_one(forward, to, &headers, &body)),
        _ => None,
    };
    let status = match (&verified, &forwarded) {
        (Err(_), _) => 401,
        (Ok(()), Some(Err(_))) => 502,
        (Ok(()), Some(Ok(status))) => *status,
        (Ok(()), None) => 204,
    };
    let event = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let arrival = Arrival { webhook_id, attempt, verified, event, forwarded };
    println!("{}", arrival.render(options.json, options.verbose.then_some((&headers, &body))));
    let _ = request.respond(tiny_http::Response::empty(status));
}

/// Removes the endpoint `listen` created when it is interrupted: also when Ctrl-C comes while
/// the endpoint is being created (it is removed as soon as it exists).
struct Cleanup {
    client: Client,
    key: String,
    state: Arc<Mutex<(Option<String>, bool)>>,
}

impl Cleanup {
    /// Installs the Ctrl-C (and termination) handler before anything is created.
    fn install(target: &Target) -> Result<Self, String> {
        let key = target.api_key()?;
        // A short wait for the removal: a second Ctrl-C cannot cut a handler short.
        let client = Client::with_timeout(&target.url, std::time::Duration::from_secs(5));
        let state: Arc<Mutex<(Option<String>, bool)>> = Arc::default();
        let (handler_state, handler_client, handler_key) = (Arc::clone(&state), client.clone(), key.clone());
        ctrlc::set_handler(move || {
            let mut state = handler_state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.1 = true;
            // Not created yet: the creating thread removes it once it is.
            if let Some(id) = state.0.take() {
                std::process::exit(remove(&handler_client, &handler_key, &id));
            }
        })
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
        Ok(Self { client, key, state })
    }

    /// The endpoint exists: removed at once if Ctrl-C came meanwhile, else on the next one.
    fn registered(&self, id: &str) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.1 {
            std::process::exit(remove(&self.client, &self.key, id));
        }
        state.0 = Some(id.to_owned());
    }
}

/// Deletes endpoint `id`; returns the exit status (1 when it could not be removed).
fn remove(client: &Client, key: &str, id: &str) -> i32 {
    let answer = client.call("DELETE", &format!("/v1/webhook_endpoints/{id}"), key, None);
    match answer.status {
        204 | 404 => {
            eprintln!("sim: endpoint {id} removed");
            0
        }
        status => {
            eprintln!(
                "sim: could not remove endpoint {id} ({status} {}); delete it with DELETE /v1/webhook_endpoints/{id}",
                answer.body
            );
            1
        }
    }
}

/// Creates the endpoint at `url`; returns its id and secret.
fn register(client: &Client, key: &str, url: &str, types: &[String]) -> Result<(String, String), String> {
    let types: Vec<&str> = match types.is_empty() {
        true => exactly_core::webhook::EVENT_TYPES.to_vec(),
        false => types.iter().map(String::as_str).collect(),
    };
    let body = json!({ "url": url, "event_types": types });
    let answer = client.call("POST", "/v1/webhook_endpoints", key, Some(&body));
    if answer.status != 201 {
        let hint = if answer.status == 422 && answer.body.contains("url") {
            " (a loopback URL needs ALLOW_PRIVATE_ENDPOINTS=true, as make dev's .dev.vars sets)"
        } else {
            ""
        };
        return Err(format!("POST /v1/webhook_endpoints: {} {}{hint}", answer.status, answer.body));
    }
    let endpoint = answer.json();
    let field = |k: &str| endpoint[k].as_str().map(str::to_owned).ok_or(format!("no {k} in the new endpoint"));
    Ok((field("id")?, field("secret")?))
}

/// Verifies a delivery with the official Standard Webhooks library.
fn verify(webhook: &standardwebhooks::Webhook, headers: &[(String, String)], body: &[u8]) -> Result<(), String> {
    // The library subtracts the timestamp from its clock unchecked: anything that is not a time
    // near now is refused before it gets there.
    let timestamp = headers.iter().find(|(k, _)| k == "webhook-timestamp").map(|(_, v)| v.trim().parse::<i64>());
    match timestamp {
        Some(Ok(at)) if at.abs_diff(crate::unix_now()) <= exactly_core::webhook::TOLERANCE_SECS.unsigned_abs() => {}
        Some(_) => return Err("webhook-timestamp is not within 5 minutes of now".into()),
        None => return Err("no webhook-timestamp".into()),
    }
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) =
            (http::header::HeaderName::from_bytes(name.as_bytes()), http::header::HeaderValue::from_str(value))
        {
            map.append(name, value);
        }
    }
    webhook.verify(body, &map).map_err(|e| e.to_string())
}

/// Posts the delivery to `to` with its `webhook-*` and content headers; returns the status, or
/// why there was none.
fn forward_one(agent: &ureq::Agent, to: &str, headers: &[(String, String)], body: &[u8]) -> Result<u16, String> {
    let mut request = agent.post(to);
    for (name, value) in headers {
        if name.starts_with("webhook-") || name == "content-type" {
            request = request.set(name, value);
        }
    }
    match request.send_bytes(body) {
        Ok(answer) => Ok(answer.status()),
        Err(ureq::Error::Status(status, _)) => Ok(status),
        Err(e) => Err(e.to_string()),
    }
}
