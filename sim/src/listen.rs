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
}

/// A delivery, as printed.
struct Arrival {
    webhook_id: String,
    /// The how-manyth delivery of this webhook-id this receiver has seen (1 the first time).
    attempt: u32,
    verified: Result<(), String>,
    event: Value,
    /// The forward target's status (0: no answer), when forwarding.
    forwarded: Option<u16>,
}

impl Arrival {
    fn render(&self, json_lines: bool) -> String {
        let event = &self.event;
        if json_lines {
            return json!({
                "webhook_id": self.webhook_id,
                "attempt": self.attempt,
                "verified": self.verified.is_ok(),
                "error": self.verified.as_ref().err(),
                "forwarded_status": self.forwarded,
                "event": event,
            })
            .to_string();
        }
        let resource = event["data"]["id"].as_str().or(event["data"]["endpoint_id"].as_str()).unwrap_or("-");
        let sequence = event["sequence"].as_i64().map(|s| format!("seq {s}")).unwrap_or_else(|| "-".into());
        let mark = match &self.verified {
            Ok(()) => "verified".to_owned(),
            Err(e) => format!("NOT VERIFIED ({e})"),
        };
        let forwarded = self.forwarded.map(|s| format!("  -> {s}")).unwrap_or_default();
        format!(
            "{:<24} {:<38} {:<7} webhook-id {} attempt {}  {mark}{forwarded}",
            event["type"].as_str().unwrap_or("?"),
            resource,
            sequence,
            self.webhook_id,
            self.attempt
        )
    }
}

/// Registers the endpoint (unless one was given), serves until interrupted, then removes it.
pub fn run(options: Options) -> Result<(), String> {
    let server = tiny_http::Server::http(("127.0.0.1", options.port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", options.port))?;
    let port = server.server_addr().to_ip().map(|a| a.port()).ok_or("the receiver has no port")?;
    let url = format!("http://127.0.0.1:{port}/");
    let (id, secret, created) = match &options.existing {
        Some((id, secret)) => (id.clone(), secret.clone(), false),
        None => {
            let key = options.target.api_key()?;
            let client = Client::new(&options.target.url);
            let (id, secret) = register(&client, &key, &url, &options.event_types)?;
            remove_on_interrupt(client, key, id.clone())?;
            (id, secret, true)
        }
    };
    let webhook = standardwebhooks::Webhook::new(&secret).map_err(|e| format!("the endpoint's secret: {e}"))?;
    let removal = if created { " (Ctrl-C removes it)" } else { "" };
    println!("sim: listening on {url} as endpoint {id}{removal}");
    let forward = ureq::AgentBuilder::new().timeout(std::time::Duration::from_secs(10)).redirects(0).build();
    let mut attempts: HashMap<String, u32> = HashMap::new();
    for mut request in server.incoming_requests() {
        let mut body = Vec::new();
        if request.as_reader().read_to_end(&mut body).is_err() {
            continue;
        }
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .map(|h| (h.field.as_str().as_str().to_ascii_lowercase(), h.value.to_string()))
            .collect();
        let webhook_id = headers.iter().find(|(k, _)| k == "webhook-id").map(|(_, v)| v.clone()).unwrap_or_default();
        let attempt = attempts.entry(webhook_id.clone()).or_default();
        *attempt += 1;
        let verified = verify(&webhook, &headers, &body);
        let forwarded = match (&options.forward_to, &verified) {
            (Some(to), Ok(())) => Some(forward_one(&forward, to, &headers, &body)),
            _ => None,
        };
        let status = match (&verified, forwarded) {
            (Err(_), _) => 401,
            (Ok(()), Some(0)) => 502,
            (Ok(()), Some(status)) => status,
            (Ok(()), None) => 204,
        };
        let event = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let arrival = Arrival { webhook_id, attempt: *attempt, verified, event, forwarded };
        println!("{}", arrival.render(options.json));
        let _ = request.respond(tiny_http::Response::empty(status));
    }
    Ok(())
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

/// On Ctrl-C (or a termination signal), deletes the endpoint and exits.
fn remove_on_interrupt(client: Client, key: String, id: String) -> Result<(), String> {
    let once = Arc::new(Mutex::new(false));
    ctrlc::set_handler(move || {
        let mut removed = once.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !*removed {
            *removed = true;
            let answer = client.call("DELETE", &format!("/v1/webhook_endpoints/{id}"), &key, None);
            match answer.status {
                204 | 404 => println!("sim: endpoint {id} removed"),
                status => eprintln!("sim: could not remove endpoint {id}: {status} {}", answer.body),
            }
        }
        std::process::exit(0);
    })
    .map_err(|e| format!("cannot handle Ctrl-C: {e}"))
}

/// Verifies a delivery with the official Standard Webhooks library.
fn verify(webhook: &standardwebhooks::Webhook, headers: &[(String, String)], body: &[u8]) -> Result<(), String> {
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

/// Posts the delivery to `to` with its `webhook-*` and content headers; returns the status (0:
/// no answer).
fn forward_one(agent: &ureq::Agent, to: &str, headers: &[(String, String)], body: &[u8]) -> u16 {
    let mut request = agent.post(to);
    for (name, value) in headers {
        if name.starts_with("webhook-") || name == "content-type" {
            request = request.set(name, value);
        }
    }
    match request.send_bytes(body) {
        Ok(answer) => answer.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(_) => 0,
    }
}
