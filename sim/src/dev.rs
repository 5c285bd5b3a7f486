//! The commands a developer reaches for against a running worker: create an account (kept in a
//! profile file, so no id or key is copied by hand), give it a number, send a message, make the
//! fake carrier deliver an inbound SMS or call, and list or follow the account's events.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::api::{Answer, Client};

/// The account the commands act for, as `account create` saved it.
#[derive(Serialize, Deserialize)]
pub struct Profile {
    /// The worker it was created on.
    pub url: String,
    pub account_id: String,
    /// The account's API key: a development secret, kept in a file only readable by its owner.
    pub api_key: String,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile").field("url", &self.url).field("account_id", &self.account_id).finish_non_exhaustive()
    }
}

impl Profile {
    /// Reads the profile at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!("cannot read {}: {e} (create an account first: `sim account create NAME`)", path.display())
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{} is not a profile: {e}", path.display()))
    }

    /// Writes the profile to `path`, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let write = |mut file: std::fs::File| std::io::Write::write_all(&mut file, format!("{text}\n").as_bytes());
        options.open(path).and_then(write).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// The worker `make dev` serves when nothing else is named.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8787";

/// The worker `make dev` serves, and where that was read: the `PUBLIC_BASE_URL` of its
/// variables (`make dev` points it at its `PORT`), else [`DEFAULT_URL`].
pub fn dev_worker(vars: &Path) -> (String, String) {
    let named = std::fs::read_to_string(vars).ok().and_then(|text| {
        text.lines().find_map(|l| l.trim().strip_prefix("PUBLIC_BASE_URL=").map(|u| u.trim().to_owned()))
    });
    match named.filter(|u| !u.is_empty()) {
        Some(url) => (url, format!("PUBLIC_BASE_URL in {}", vars.display())),
        None => (DEFAULT_URL.to_owned(), "the default; set EXACTLY_URL for another worker".to_owned()),
    }
}

/// Where the worker is and who is asking.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    /// Where `url` came from, for errors: `EXACTLY_URL`, the profile, or the default.
    pub url_from: String,
    pub profile: PathBuf,
    /// `make dev`'s variables: where the admin token comes from when `ADMIN_TOKEN` is unset.
    pub vars: PathBuf,
}

impl Target {
    /// The worker `url` names (`--url` or `EXACTLY_URL`); without one, the worker the profile's
    /// account was created on; without a profile, [`dev_worker`].
    pub fn resolve(url: Option<String>, profile: PathBuf, vars: PathBuf) -> Self {
        let (url, url_from) = match url.filter(|u| !u.trim().is_empty()) {
            Some(url) => (url, "EXACTLY_URL or --url".to_owned()),
            None => match Profile::load(&profile) {
                Ok(kept) => (kept.url, format!("the profile {}", profile.display())),
                Err(_) => dev_worker(&vars),
            },
        };
        Target { url: url.trim_end_matches('/').to_owned(), url_from, profile, vars }
    }

    /// `error`, with the worker and the key it was met with, so a wrong one is plain to see.
    pub fn explain(&self, error: &str) -> String {
        let key = match key_from_env() {
            Some(_) => "EXACTLY_API_KEY".to_owned(),
            None => format!("the profile {}", self.profile.display()),
        };
        format!("{error}\n  worker: {} (from {})\n  API key: from {key}", self.url, self.url_from)
    }

    fn client(&self) -> Client {
        Client::new(&self.url)
    }

    /// The admin token: `ADMIN_TOKEN` from the environment, else from the vars file.
    fn admin_token(&self) -> Result<String, String> {
        if let Ok(token) = std::env::var("ADMIN_TOKEN") {
            return Ok(token);
        }
        std::fs::read_to_string(&self.vars)
            .ok()
            .and_then(|text| text.lines().find_map(|l| l.trim().strip_prefix("ADMIN_TOKEN=").map(str::to_owned)))
            .ok_or_else(|| format!("no ADMIN_TOKEN in the environment or in {}", self.vars.display()))
    }

    /// The account's API key: `EXACTLY_API_KEY` from the environment, else the profile's.
    pub fn api_key(&self) -> Result<String, String> {
        match key_from_env() {
            Some(key) => Ok(key),
            None => Ok(Profile::load(&self.profile)?.api_key),
        }
    }
}

/// `EXACTLY_API_KEY`, which overrides the profile's key.
fn key_from_env() -> Option<String> {
    std::env::var("EXACTLY_API_KEY").ok()
}

/// The answer's JSON when it has `status`, else an error naming the request and the answer.
fn expect(answer: Answer, status: u16, what: &str) -> Result<Value, String> {
    if answer.status == status {
        return Ok(answer.json());
    }
    if answer.status == 0 {
        return Err(format!("{what}: no answer ({}; is the worker running? `make dev`)", answer.body));
    }
    Err(format!("{what}: {} {}", answer.status, answer.body))
}

/// Creates an account named `name` and saves it, with its key, as the profile. A profile for the
/// same worker whose key still works is kept instead (its key was shown once), unless `fresh`.
pub fn create_account(target: &Target, name: &str, fresh: bool) -> Result<String, String> {
    if let (false, Ok(kept)) = (fresh, Profile::load(&target.profile)) {
        let works = kept.url == target.url
            && target.client().call("GET", "/v1/messages?limit=1", &kept.api_key, None).status == 200;
        if works {
            let path = target.profile.display();
            return Ok(format!("keeping account {} of {path} (--new makes another)", kept.account_id));
        }
    }
    let admin = target.admin_token()?;
    let answer = target.client().call("POST", "/admin/accounts", &admin, Some(&json!({ "name": name })));
    let account = expect(answer, 201, "POST /admin/accounts")?;
    // Never the answer itself in an error: it carries the key.
    let field = |k: &str| account[k].as_str().map(str::to_owned).ok_or(format!("the new account's answer has no {k}"));
    let profile = Profile { url: target.url.clone(), account_id: field("id")?, api_key: field("api_key")? };
    profile.save(&target.profile)?;
    Ok(format!("account {} created; its API key is in {}", profile.account_id, target.profile.display()))
}

/// Gives the profile's account the number `phone` (messages from it go through `carrier`).
pub fn add_number(target: &Target, phone: &str, carrier: Option<&str>) -> Result<String, String> {
    let admin = target.admin_token()?;
    let profile = Profile::load(&target.profile)?;
    let mut body = json!({ "account_id": profile.account_id, "phone_number": phone });
    if let Some(carrier) = carrier {
        body["carrier"] = json!(carrier);
    }
    let client = target.client();
    let answer = client.call("POST", "/admin/numbers", &admin, Some(&body));
    if answer.status == 409 {
        // Assigned already: to this account (the same command run before) is what was asked.
        let accounts = client.all("/admin/accounts", &admin)?;
        let ours = accounts.iter().find(|a| a["id"] == profile.account_id.as_str());
        let has = ours.is_some_and(|a| a["numbers"].as_array().is_some_and(|n| n.iter().any(|n| n == phone)));
        if has {
            return Ok(format!("number {phone} belongs to {} (already)", profile.account_id));
        }
        return Err(format!("{phone} belongs to another account; choose another number"));
    }
    let number = expect(answer, 201, "POST /admin/numbers")?;
    Ok(format!("number {} belongs to {}", number["phone_number"].as_str().unwrap_or(phone), profile.account_id))
}

/// Sends a message from the account; prints its id and status.
pub fn send(target: &Target, from: &str, to: &str, text: &str) -> Result<String, String> {
    let key = target.api_key()?;
    let body = json!({ "from": from, "to": to, "text": text });
    let idempotency = format!("sim-{}", crate::random_hex());
    let answer = target.client().call_keyed("POST", "/v1/messages", &key, &body, &idempotency);
    let message = match answer.status {
        200 => answer.json(),
        _ => expect(answer, 201, "POST /v1/messages")?,
    };
    Ok(format!("message {} {}", message["id"].as_str().unwrap_or("?"), message["status"].as_str().unwrap_or("?")))
}

/// A warning when no account owns `number`: the carrier's event is stored, and then fails,
/// which its `accepted` answer does not say. Empty when an account owns it, or when the admin
/// token is not at hand to ask.
fn unowned_warning(target: &Target, number: &str) -> String {
    let Ok(admin) = target.admin_token() else { return String::new() };
    let Ok(accounts) = target.client().all("/admin/accounts", &admin) else { return String::new() };
    let owned = accounts.iter().any(|a| a["numbers"].as_array().is_some_and(|n| n.iter().any(|n| n == number)));
    if owned {
        return String::new();
    }
    format!(
        "\nsim: warning: no account owns {number}: the event is stored, then fails as unowned \
         (GET /admin/carrier_events?status=failed); give it to the account first: sim number add {number}"
    )
}

/// Delivers a signed Telnyx `message.received` for an SMS from `from` to `to`, as the carrier would.
pub fn inbound_sms(target: &Target, keys: &Path, from: &str, to: &str, text: &str) -> Result<String, String> {
    let id = crate::random_hex();
    let body = crate::facts::envelope(
        &format!("evt-{id}"),
        "message.received",
        &now_rfc3339(),
        json!({"id": format!("sim-msg-{id}"), "direction": "inbound", "type": "SMS", "text": text,
               "from": {"phone_number": from}, "to": [{"phone_number": to}], "media": []}),
        1,
    );
    Ok(deliver_telnyx(target, keys, &body)? + &unowned_warning(target, to))
}

/// Delivers a signed Telnyx `call.initiated` for a call from `from` to `to`, as the carrier would.
pub fn inbound_call(target: &Target, keys: &Path, from: &str, to: &str) -> Result<String, String> {
    let id = crate::random_hex();
    let (event, control, session) = (format!("evt-{id}"), format!("sim-cc-{id}"), format!("sim-sess-{id}"));
    let body = crate::facts::call_initiated(&event, &now_rfc3339(), &control, &session, from, to);
    Ok(deliver_telnyx(target, keys, &body)? + &unowned_warning(target, to))
}

/// The account's webhook endpoints, one line each: id, state, URL, the types it takes.
pub fn endpoints(target: &Target) -> Result<String, String> {
    let key = target.api_key()?;
    let listed = target.client().all("/v1/webhook_endpoints", &key)?;
    if listed.is_empty() {
        return Ok("no endpoints (sim listen registers one while it runs)".to_owned());
    }
    let lines: Vec<String> = listed
        .iter()
        .map(|e| {
            let state = match (e["enabled"].as_bool(), e["paused"].as_bool()) {
                (Some(false), _) => "disabled".to_owned(),
                (_, Some(true)) => "paused".to_owned(),
                _ => format!("circuit {}", e["circuit"].as_str().unwrap_or("?")),
            };
            let types: Vec<&str> =
                e["event_types"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let types = if types.is_empty() { "every type".to_owned() } else { types.join(",") };
            format!("{}  {state:<16} {}  {types}", e["id"].as_str().unwrap_or("?"), e["url"].as_str().unwrap_or("?"))
        })
        .collect();
    Ok(lines.join("\nsim: "))
}

/// Delivers event `event_id` again: to every endpoint subscribed to its type, or to `endpoint`.
pub fn replay(target: &Target, event_id: &str, endpoint: Option<&str>) -> Result<String, String> {
    let key = target.api_key()?;
    let body = match endpoint {
        Some(id) => json!({ "endpoint_id": id }),
        None => json!({}),
    };
    let path = format!("/v1/events/{event_id}/replay");
    let answer = target.client().call("POST", &path, &key, Some(&body));
    let replayed = expect(answer, 202, &format!("POST {path}"))?;
    let deliveries = replayed["deliveries"].as_array().map_or(0, Vec::len);
    Ok(format!("event {event_id}: {deliveries} new deliveries (sim listen or the console shows them arrive)"))
}

fn deliver_telnyx(target: &Target, keys: &Path, body: &str) -> Result<String, String> {
    let signer = crate::devkeys::telnyx_signer(keys)?;
    let h = signer.sign(body.as_bytes(), crate::unix_now());
    let headers = [("telnyx-timestamp", h.timestamp.as_str()), ("telnyx-signature-ed25519", h.signature.as_str())];
    let answer = target.client().post("/webhooks/telnyx", &headers, body.as_bytes());
    let stored = expect(answer, 200, "POST /webhooks/telnyx")?;
    Ok(format!("carrier event {} {}", stored["id"].as_str().unwrap_or("?"), stored["outcome"].as_str().unwrap_or("?")))
}

/// The current time as RFC 3339, for the carrier's `occurred_at`.
fn now_rfc3339() -> String {
    exactly_core::Timestamp::from_unix_seconds(crate::unix_now()).to_rfc3339()
}

/// One line for an event: its type, resource and sequence.
pub fn event_line(event: &Value) -> String {
    let resource = event["data"]["id"].as_str().or(event["data"]["endpoint_id"].as_str()).unwrap_or("-");
    let sequence = event["sequence"].as_i64().map(|s| format!("seq {s}")).unwrap_or_else(|| "-".into());
    format!(
        "{:<24} {:<38} {:<7} {}",
        event["type"].as_str().unwrap_or("?"),
        resource,
        sequence,
        event["id"].as_str().unwrap_or("?")
    )
}

/// Prints the account's events, oldest first; with `follow`, then every new one as it is written.
pub fn events(target: &Target, follow: bool, json_lines: bool) -> Result<(), String> {
    let key = target.api_key()?;
    let client = target.client();
    let print = |event: &Value| println!("{}", if json_lines { event.to_string() } else { event_line(event) });
    // The list is newest first: everything once, then the first page again and again.
    let mut listed = client.all("/v1/events", &key)?;
    let mut seen: std::collections::HashSet<String> =
        listed.iter().filter_map(|e| e["id"].as_str().map(str::to_owned)).collect();
    listed.reverse();
    listed.iter().for_each(print);
    if !follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let page = expect(client.call("GET", "/v1/events?limit=100", &key, None), 200, "GET /v1/events")?;
        let mut new: Vec<Value> = page["data"].as_array().cloned().unwrap_or_default();
        new.retain(|e| e["id"].as_str().is_some_and(|id| seen.insert(id.to_owned())));
        new.reverse();
        new.iter().for_each(print);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_is_the_named_one_else_the_profiles_else_make_devs_else_the_default() {
        let dir = std::env::temp_dir().join(format!("sim-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let profile = dir.join("account.json");
        let vars = dir.join("vars");
        let none = Target::resolve(None, profile.clone(), vars.clone());
        assert_eq!((none.url.as_str(), none.url_from.starts_with("the default")), (DEFAULT_URL, true));
        std::fs::write(&vars, "ADMIN_TOKEN=t\nPUBLIC_BASE_URL=http://127.0.0.1:8797\n").expect("write vars");
        let moved = Target::resolve(None, profile.clone(), vars.clone());
        assert_eq!(moved.url, "http://127.0.0.1:8797", "make dev's PORT, as its variables name it");
        assert!(moved.url_from.starts_with("PUBLIC_BASE_URL in "), "{}", moved.url_from);

        let kept = Profile { url: "http://127.0.0.1:9787".into(), account_id: "acct_1".into(), api_key: "sk_1".into() };
        kept.save(&profile).expect("save");
        let from_profile = Target::resolve(None, profile.clone(), vars.clone());
        assert_eq!(from_profile.url, "http://127.0.0.1:9787");
        assert!(from_profile.url_from.contains("account.json"), "{}", from_profile.url_from);
        let named = Target::resolve(Some("http://127.0.0.1:7000/".into()), profile.clone(), vars.clone());
        assert_eq!((named.url.as_str(), named.url_from.as_str()), ("http://127.0.0.1:7000", "EXACTLY_URL or --url"));

        let explained = from_profile.explain("GET /v1/events: 401");
        assert!(explained.contains("http://127.0.0.1:9787 (from the profile"), "{explained}");
        assert!(explained.contains("API key: from"), "{explained}");
        assert!(!explained.contains("sk_1"), "never the key itself: {explained}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
