//! Configuration from wrangler vars and secrets (docs/deploy.md lists them), validated once per
//! isolate.
//!
//! Every request and job reads the same parsed [`Config`]; a missing or malformed variable is
//! one clear error naming it (never its value), logged and answered as a 503, never a panic.
//! A valid configuration is cached for the isolate's life (a changed secret means a new
//! deployment, hence new isolates); an invalid one is checked again on the next request.

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use exactly_core::media::LinkSigner;
use exactly_core::{plivo, telnyx, twilio};
use worker::Env;

use crate::bindings::vars;
use crate::error::EdgeError;

/// Retention settings (days), see [`crate::store::retention`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// Carrier event payloads of settled events are cleared after this many days.
    pub payload_days: i64,
    /// Carrier event rows (the dedupe keys) are deleted after this many days; at least 3,
    /// longer than any carrier retries.
    pub event_days: i64,
    /// Attempts of delivered customer webhooks are deleted after this many days.
    pub attempt_days: i64,
}

/// The least a dedupe key is kept: carriers retry for up to about three days.
pub const MIN_EVENT_RETENTION_DAYS: i64 = 3;

/// How long work may wait before `backlog.high`: five times the sweeper's two minutes, so a
/// lost job the sweeper re-enqueues never raises it, and work still waiting after that has a
/// cause someone must look at.
pub const DEFAULT_BACKLOG_ALERT_SECS: i64 = 600;

/// The worker's configuration.
pub struct Config {
    /// Verifies Telnyx webhooks (`TELNYX_PUBLIC_KEY`, several keys during a rotation).
    pub telnyx: telnyx::Verifier,
    /// `TELNYX_API_KEY`.
    pub telnyx_api_key: String,
    /// `TELNYX_API_BASE`, without a trailing slash.
    pub telnyx_api_base: String,
    /// `TELNYX_CONNECTION_ID`: the Call Control connection legs are dialled on.
    pub telnyx_connection_id: String,
    /// `TELNYX_MESSAGING_PROFILE_ID`, if messages are sent through a profile.
    pub telnyx_messaging_profile_id: Option<String>,
    /// Verifies Twilio webhooks, when `TWILIO_AUTH_TOKEN` is set.
    pub twilio: Option<twilio::Verifier>,
    /// Verifies Plivo webhooks, when `PLIVO_AUTH_TOKEN` is set; V3 is required unless
    /// `PLIVO_ACCEPT_V2=true`.
    pub plivo: Option<plivo::Verifier>,
    /// Sending through Twilio, when `TWILIO_ACCOUNT_SID` and `TWILIO_AUTH_TOKEN` are set.
    pub twilio_rest: Option<Rest>,
    /// Sending through Plivo, when `PLIVO_AUTH_ID` and `PLIVO_AUTH_TOKEN` are set.
    pub plivo_rest: Option<Rest>,
    /// `PUBLIC_BASE_URL`, without a trailing slash.
    pub public_base_url: String,
    /// `ADMIN_TOKEN`.
    pub admin_token: String,
    /// Signs media links: keyed with `MEDIA_SIGNING_SECRET`, or with a key derived from
    /// `ADMIN_TOKEN` when that is unset (docs/security.md).
    pub media_links: LinkSigner,
    /// `ALLOW_PRIVATE_ENDPOINTS=true` (development only).
    pub allow_private_endpoints: bool,
    /// Retention (`RETENTION_PAYLOAD_DAYS`, `RETENTION_EVENT_DAYS`, `RETENTION_ATTEMPT_DAYS`).
    pub retention: Retention,
    /// `BACKLOG_ALERT_SECS` (default [`DEFAULT_BACKLOG_ALERT_SECS`]): work that has waited
    /// longer raises `backlog.high` ([`crate::work::sweep`]).
    pub backlog_alert_secs: i64,
    /// `RECONCILE_CALL_IDLE_SECS` (default 7200).
    pub reconcile_call_idle_secs: i64,
    /// `RECONCILE_MESSAGE_SECS` (default 21600).
    pub reconcile_message_secs: i64,
    /// `LOG_WEBHOOK_REQUESTS` (default `true`): one structured line per carrier delivery that
    /// was stored. Refusals and failures are logged whatever it says.
    pub log_webhook_requests: bool,
    /// `EVENT_SHARDS`: the database of every virtual shard of the dedupe log; unset, all of
    /// them are in `DB` (docs/scaling.md).
    pub event_shards: Rc<exactly_core::shard::ShardMap>,
    /// `ACCOUNT_SHARDS`: the databases new accounts are placed in; unset, `DB`, whatever is
    /// bound ([`crate::store::routes`]).
    pub account_shards: Option<Rc<Vec<String>>>,
}

/// The switch for the per-delivery log line (see [`Config::log_webhook_requests`]): the line
/// costs more than the rest of a delivery's JavaScript in `wrangler dev` (docs/benchmarks.md).
pub const LOG_WEBHOOK_REQUESTS: &str = "LOG_WEBHOOK_REQUESTS";

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets stay out: only what is configured, not with what.
        f.debug_struct("Config")
            .field("telnyx", &self.telnyx)
            .field("telnyx_api_base", &self.telnyx_api_base)
            .field("twilio", &self.twilio.is_some())
            .field("plivo", &self.plivo)
            .field("twilio_rest", &self.twilio_rest.as_ref().map(|r| &r.base))
            .field("plivo_rest", &self.plivo_rest.as_ref().map(|r| &r.base))
            .field("public_base_url", &self.public_base_url)
            .field("allow_private_endpoints", &self.allow_private_endpoints)
            .field("retention", &self.retention)
            .field("backlog_alert_secs", &self.backlog_alert_secs)
            .field("reconcile_call_idle_secs", &self.reconcile_call_idle_secs)
            .field("reconcile_message_secs", &self.reconcile_message_secs)
            .field("log_webhook_requests", &self.log_webhook_requests)
            .field("event_shards", &self.event_shards.bindings())
            .field("account_shards", &self.account_shards)
            .finish_non_exhaustive()
    }
}

/// A carrier REST API: where, and the HTTP Basic credentials. `Debug` shows only the base.
pub struct Rest {
    /// The API's origin, without a trailing slash.
    pub base: String,
    /// The account (Twilio's SID, Plivo's auth id).
    pub account: String,
    /// The secret (the first auth token).
    pub token: String,
}

impl fmt::Debug for Rest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rest").field("base", &self.base).finish_non_exhaustive()
    }
}

/// The REST credentials of a carrier: `account` and the first of the comma-separated tokens,
/// when both are set; the base URL must be absolute.
fn rest(
    env: &Env,
    account: &'static str,
    tokens: &'static str,
    base: &'static str,
    default_base: &str,
) -> Result<Option<Rest>, EdgeError> {
    let base_url = optional(env, base).unwrap_or_else(|| default_base.to_owned());
    if exactly_core::form::Url::parse(&base_url).is_none() {
        return Err(invalid(base, "not an absolute URL"));
    }
    let token =
        optional(env, tokens).and_then(|t| t.split(',').map(str::trim).find(|t| !t.is_empty()).map(str::to_owned));
    Ok(match (optional(env, account), token) {
        (Some(account), Some(token)) => Some(Rest { base: base_url.trim_end_matches('/').to_owned(), account, token }),
        _ => None,
    })
}

thread_local! {
    static CACHED: RefCell<Option<Rc<Config>>> = const { RefCell::new(None) };
}

/// The isolate's configuration, validated on first use.
pub fn get(env: &Env) -> Result<Rc<Config>, EdgeError> {
    if let Some(config) = CACHED.with(|c| c.borrow().clone()) {
        return Ok(config);
    }
    let config = Rc::new(load(env)?);
    CACHED.with(|c| *c.borrow_mut() = Some(Rc::clone(&config)));
    Ok(config)
}

/// An optional variable or secret, trimmed; `None` when missing or blank.
pub fn optional(env: &Env, name: &str) -> Option<String> {
    let value = env.secret(name).map(|s| s.to_string()).or_else(|_| env.var(name).map(|v| v.to_string())).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn required(env: &Env, name: &'static str) -> Result<String, EdgeError> {
    optional(env, name).ok_or(EdgeError::Config { variable: name, problem: "is not set".into() })
}

/// Whether the worker has a binding named `name`.
fn bound(env: &Env, name: &str) -> bool {
    js_sys::Reflect::get(env.as_ref(), &wasm_bindgen::JsValue::from_str(name))
        .is_ok_and(|b| !b.is_undefined() && !b.is_null())
}

fn invalid(variable: &'static str, problem: impl fmt::Display) -> EdgeError {
    EdgeError::Config { variable, problem: format!("is invalid: {problem}") }
}

fn days(env: &Env, name: &'static str, default: i64, least: i64) -> Result<i64, EdgeError> {
    whole(env, name, default, least, "days")
}

/// A whole number of `unit`, at least `least`; `default` when unset.
fn whole(env: &Env, name: &'static str, default: i64, least: i64, unit: &str) -> Result<i64, EdgeError> {
    match optional(env, name) {
        None => Ok(default),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= least => Ok(n),
            _ => Err(invalid(name, format!("must be a whole number of {unit}, at least {least}"))),
        },
    }
}

/// A `true`/`false` switch, `false` when unset; anything else is refused, so a typo such as
/// `PLIVO_ACCEPT_V2=yes` is a loud 503 rather than a silent default.
fn flag(env: &Env, name: &'static str) -> Result<bool, EdgeError> {
    flag_or(env, name, false)
}

/// A `true`/`false` switch, `default` when unset.
fn flag_or(env: &Env, name: &'static str, default: bool) -> Result<bool, EdgeError> {
    match optional(env, name).as_deref() {
        None => Ok(default),
        Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(invalid(name, "must be true or false")),
    }
}

/// Reads and checks every variable, in the order docs/deploy.md lists them.
pub fn load(env: &Env) -> Result<Config, EdgeError> {
    let telnyx = telnyx::Verifier::from_base64_keys(&required(env, vars::TELNYX_PUBLIC_KEY)?)
        .map_err(|e| invalid(vars::TELNYX_PUBLIC_KEY, e))?;
    let telnyx_api_key = required(env, vars::TELNYX_API_KEY)?;
    let telnyx_api_base = optional(env, vars::TELNYX_API_BASE).unwrap_or_else(|| "https://api.telnyx.com".to_owned());
    if exactly_core::form::Url::parse(&telnyx_api_base).is_none() {
        return Err(invalid(vars::TELNYX_API_BASE, "not an absolute URL"));
    }
    let telnyx_connection_id = required(env, vars::TELNYX_CONNECTION_ID)?;
    let telnyx_messaging_profile_id = optional(env, vars::TELNYX_MESSAGING_PROFILE_ID);
    let twilio = optional(env, vars::TWILIO_AUTH_TOKEN)
        .map(|t| twilio::Verifier::new(&t))
        .transpose()
        .map_err(|e| invalid(vars::TWILIO_AUTH_TOKEN, e))?;
    let plivo_v2 = match flag(env, vars::PLIVO_ACCEPT_V2)? {
        true => plivo::V2Policy::Accept,
        false => plivo::V2Policy::Refuse,
    };
    let plivo = optional(env, vars::PLIVO_AUTH_TOKEN)
        .map(|t| plivo::Verifier::new(&t).map(|v| v.with_v2_policy(plivo_v2)))
        .transpose()
        .map_err(|e| invalid(vars::PLIVO_AUTH_TOKEN, e))?;
    let twilio_rest =
        rest(env, vars::TWILIO_ACCOUNT_SID, vars::TWILIO_AUTH_TOKEN, vars::TWILIO_API_BASE, "https://api.twilio.com")?;
    let plivo_rest =
        rest(env, vars::PLIVO_AUTH_ID, vars::PLIVO_AUTH_TOKEN, vars::PLIVO_API_BASE, "https://api.plivo.com")?;
    let public_base_url = required(env, vars::PUBLIC_BASE_URL)?;
    if exactly_core::form::Url::parse(&public_base_url).is_none() {
        return Err(invalid(vars::PUBLIC_BASE_URL, "not an absolute URL"));
    }
    let admin_token = required(env, vars::ADMIN_TOKEN)?;
    if admin_token.len() < 16 {
        return Err(invalid(vars::ADMIN_TOKEN, "must be at least 16 characters"));
    }
    let media_links = match optional(env, vars::MEDIA_SIGNING_SECRET) {
        Some(secret) => LinkSigner::new(&secret).map_err(|e| invalid(vars::MEDIA_SIGNING_SECRET, e))?,
        None => LinkSigner::derived_from(&admin_token),
    };
    let allow_private_endpoints = flag(env, vars::ALLOW_PRIVATE_ENDPOINTS)?;
    let retention = Retention {
        payload_days: days(env, vars::RETENTION_PAYLOAD_DAYS, 30, 1)?,
        event_days: days(env, vars::RETENTION_EVENT_DAYS, 90, MIN_EVENT_RETENTION_DAYS)?,
        attempt_days: days(env, vars::RETENTION_ATTEMPT_DAYS, 30, 1)?,
    };
    let backlog_alert_secs = whole(env, vars::BACKLOG_ALERT_SECS, DEFAULT_BACKLOG_ALERT_SECS, 1, "seconds")?;
    let reconcile_call_idle_secs = whole(env, vars::RECONCILE_CALL_IDLE_SECS, 7200, 1, "seconds")?;
    let reconcile_message_secs = whole(env, vars::RECONCILE_MESSAGE_SECS, 21600, 1, "seconds")?;
    let log_webhook_requests = flag_or(env, LOG_WEBHOOK_REQUESTS, true)?;
    let event_shards = match optional(env, vars::EVENT_SHARDS) {
        None => exactly_core::shard::ShardMap::single(),
        Some(text) => exactly_core::shard::ShardMap::parse(&text).map_err(|e| invalid(vars::EVENT_SHARDS, e))?,
    };
    let account_shards = optional(env, vars::ACCOUNT_SHARDS)
        .map(|text| exactly_core::shard::parse_account_shards(&text).map_err(|e| invalid(vars::ACCOUNT_SHARDS, e)))
        .transpose()?
        .map(Rc::new);
    // New accounts must never be placed in a database the worker does not have.
    if let Some(missing) = account_shards.iter().flat_map(|names| names.iter()).find(|name| !bound(env, name)) {
        return Err(invalid(vars::ACCOUNT_SHARDS, format!("{missing} is not bound")));
    }
    Ok(Config {
        telnyx,
        telnyx_api_key,
        telnyx_api_base: telnyx_api_base.trim_end_matches('/').to_owned(),
        telnyx_connection_id,
        telnyx_messaging_profile_id,
        twilio,
        plivo,
        twilio_rest,
        plivo_rest,
        public_base_url: public_base_url.trim_end_matches('/').to_owned(),
        admin_token,
        media_links,
        allow_private_endpoints,
        retention,
        backlog_alert_secs,
        reconcile_call_idle_secs,
        reconcile_message_secs,
        log_webhook_requests,
        event_shards: Rc::new(event_shards),
        account_shards,
    })
}
