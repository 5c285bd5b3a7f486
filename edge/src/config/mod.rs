//! Configuration from wrangler vars and secrets (docs/deploy.md lists them), validated once per
//! isolate.
//!
//! Every request and job reads the same parsed [`Config`]; a missing or malformed variable is
//! one clear error naming it (never its value), logged and answered as a 503, never a panic.
//! A valid configuration is cached for the isolate's life (a changed secret means a new
//! deployment, hence new isolates); an invalid one is checked again on the next request.
//! The checks ([`load`]) depend on nothing but the variables' text and which bindings exist
//! ([`Vars`]).

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use exactly_core::media::LinkSigner;
use exactly_core::{plivo, telnyx, twilio};
use worker::Env;

use crate::bindings::vars;
use crate::error::EdgeError;

mod tuning;
pub use tuning::Tuning;

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
    /// Customer events, with their deliveries and attempts, are deleted after this many days
    /// (an event with a delivery still pending is kept).
    pub customer_event_days: i64,
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
    /// Retention (`RETENTION_PAYLOAD_DAYS`, `RETENTION_EVENT_DAYS`, `RETENTION_ATTEMPT_DAYS`,
    /// `RETENTION_CUSTOMER_EVENT_DAYS`).
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
    /// `LOG_JOB_OUTCOMES` (default `true`): one structured line per queue job that ended as
    /// planned (an event applied, a delivery sent or waiting in its line, a no-op). Retries,
    /// failures and dead letters are logged whatever it says.
    pub log_job_outcomes: bool,
    /// `LOG_SAMPLE_EVERY` (default [`DEFAULT_LOG_SAMPLE_EVERY`]): of the routine lines the two
    /// switches above turn on, one in this many is written ([`Config::samples`]).
    pub log_sample_every: u64,
    /// `EVENT_SHARDS`: the database of every virtual shard of the dedupe log; unset, all of
    /// them are in `DB` (docs/scaling.md).
    pub event_shards: Rc<exactly_core::shard::ShardMap>,
    /// `ACCOUNT_SHARDS`: the databases new accounts are placed in; unset, `DB`, whatever is
    /// bound ([`crate::store::routes`]).
    pub account_shards: Option<Rc<Vec<String>>>,
    /// The product's timings and policies ([`Tuning`]).
    pub tuning: Rc<Tuning>,
    /// `OPERATOR_WEBHOOK_URL` and `OPERATOR_WEBHOOK_SECRET`, when both are set: where operational
    /// signals go. The cron checks them as it registers the endpoint (a bad one fails only that).
    pub operator_webhook: Option<OperatorWebhook>,
}

/// The operator's webhook, as configured (checked where it is registered).
pub struct OperatorWebhook {
    pub url: String,
    /// The `whsec_` secret; never printed.
    pub secret: String,
}

/// The switch for the per-delivery log line (see [`Config::log_webhook_requests`]): the line
/// costs more than the rest of a delivery's JavaScript in `wrangler dev` (docs/benchmarks.md).
pub const LOG_WEBHOOK_REQUESTS: &str = "LOG_WEBHOOK_REQUESTS";
/// The switch for the line of each job that ended as planned ([`Config::log_job_outcomes`]):
/// a fact's processing and delivery write two or three such lines (docs/benchmarks.md).
pub const LOG_JOB_OUTCOMES: &str = "LOG_JOB_OUTCOMES";
/// How many routine lines one is written of ([`Config::log_sample_every`]): a line per fact at
/// each of ingest, processing and delivery costs the runtime more than the rest of the fact's
/// JavaScript in `wrangler dev` (docs/benchmarks.md), and a sample shows the traffic as well.
pub const LOG_SAMPLE_EVERY: &str = "LOG_SAMPLE_EVERY";
pub const DEFAULT_LOG_SAMPLE_EVERY: i64 = 10;

impl Config {
    /// Whether the routine line keyed by `key` (the carrier event's, the job's or the delivery's
    /// id) is written: the same key gives the same answer in every isolate, so a sampled
    /// carrier event's ingest line and its processing line are written together. Errors,
    /// refusals, retries, failures, dead letters and operator signals are never sampled.
    pub fn samples(&self, key: &str) -> bool {
        use sha2::Digest as _;
        if self.log_sample_every <= 1 {
            return true;
        }
        let digest = sha2::Sha256::digest(key.as_bytes());
        let head = digest.first_chunk::<8>().copied().unwrap_or_default();
        u64::from_be_bytes(head) % self.log_sample_every == 0
    }

    /// Whether a job's line keyed by `key` that ended as planned is written: `LOG_JOB_OUTCOMES`
    /// on and the key sampled.
    pub fn logs_routine(&self, key: &str) -> bool {
        self.log_job_outcomes && self.samples(key)
    }
}

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
            .field("log_job_outcomes", &self.log_job_outcomes)
            .field("log_sample_every", &self.log_sample_every)
            .field("event_shards", &self.event_shards.bindings())
            .field("account_shards", &self.account_shards)
            .field("operator_webhook", &self.operator_webhook.as_ref().map(|o| &o.url))
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

/// What the configuration is read from: the worker's variables and secrets, and its bindings.
/// [`load`] is a function of these answers alone.
pub trait Vars {
    /// The text of variable or secret `name`, as set (untrimmed); `None` when it is not set.
    fn lookup(&self, name: &str) -> Option<String>;
    /// Whether the worker has a binding named `name`.
    fn bound(&self, name: &str) -> bool;
}

/// The worker's own: a secret before a plain variable of the same name.
impl Vars for Env {
    fn lookup(&self, name: &str) -> Option<String> {
        self.secret(name).map(|s| s.to_string()).or_else(|_| self.var(name).map(|v| v.to_string())).ok()
    }

    fn bound(&self, name: &str) -> bool {
        js_sys::Reflect::get(self.as_ref(), &wasm_bindgen::JsValue::from_str(name))
            .is_ok_and(|b| !b.is_undefined() && !b.is_null())
    }
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

/// The product's timings and policies: the configuration's, or, while the configuration is
/// invalid (every request answers for that), the same values read alone, so work that only
/// needs a timing never fails for another variable.
pub fn tuning(env: &Env) -> Rc<Tuning> {
    get(env).map_or_else(|_| Rc::new(Tuning::load(env)), |config| Rc::clone(&config.tuning))
}

/// An optional variable or secret, trimmed; `None` when missing or blank.
pub fn optional(env: &Env, name: &str) -> Option<String> {
    value(env, name)
}

/// Variable `name`, trimmed; `None` when missing or blank.
fn value(env: &impl Vars, name: &str) -> Option<String> {
    let value = env.lookup(name)?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

fn required(env: &impl Vars, name: &'static str) -> Result<String, EdgeError> {
    value(env, name).ok_or(EdgeError::Config { variable: name, problem: "is not set".into() })
}

fn invalid(variable: &'static str, problem: impl fmt::Display) -> EdgeError {
    EdgeError::Config { variable, problem: format!("is invalid: {problem}") }
}

fn days(env: &impl Vars, name: &'static str, default: i64, least: i64) -> Result<i64, EdgeError> {
    whole(env, name, default, least, "days")
}

/// A whole number of `unit`, at least `least`; `default` when unset.
fn whole(env: &impl Vars, name: &'static str, default: i64, least: i64, unit: &str) -> Result<i64, EdgeError> {
    match value(env, name) {
        None => Ok(default),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= least => Ok(n),
            _ => Err(invalid(name, format!("must be a whole number of {unit}, at least {least}"))),
        },
    }
}

/// A `true`/`false` switch, `false` when unset; anything else is refused, so a typo such as
/// `PLIVO_ACCEPT_V2=yes` is a loud 503 rather than a silent default.
fn flag(env: &impl Vars, name: &'static str) -> Result<bool, EdgeError> {
    flag_or(env, name, false)
}

/// A `true`/`false` switch, `default` when unset.
fn flag_or(env: &impl Vars, name: &'static str, default: bool) -> Result<bool, EdgeError> {
    match value(env, name).as_deref() {
        None => Ok(default),
        Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(invalid(name, "must be true or false")),
    }
}

/// The REST credentials of a carrier: `account` and the first of the comma-separated tokens,
/// when both are set; the base URL must be absolute.
fn rest(
    env: &impl Vars,
    account: &'static str,
    tokens: &'static str,
    base: &'static str,
    default_base: &str,
) -> Result<Option<Rest>, EdgeError> {
    let base_url = value(env, base).unwrap_or_else(|| default_base.to_owned());
    if exactly_core::form::Url::parse(&base_url).is_none() {
        return Err(invalid(base, "not an absolute URL"));
    }
    let token = value(env, tokens).and_then(|t| t.split(',').map(str::trim).find(|t| !t.is_empty()).map(str::to_owned));
    Ok(match (value(env, account), token) {
        (Some(account), Some(token)) => Some(Rest { base: base_url.trim_end_matches('/').to_owned(), account, token }),
        _ => None,
    })
}

/// Reads and checks every variable, in the order docs/deploy.md lists them: the first missing
/// or malformed one is the error.
pub fn load(env: &impl Vars) -> Result<Config, EdgeError> {
    let telnyx = telnyx::Verifier::from_base64_keys(&required(env, vars::TELNYX_PUBLIC_KEY)?)
        .map_err(|e| invalid(vars::TELNYX_PUBLIC_KEY, e))?;
    let telnyx_api_key = required(env, vars::TELNYX_API_KEY)?;
    let telnyx_api_base = value(env, vars::TELNYX_API_BASE).unwrap_or_else(|| "https://api.telnyx.com".to_owned());
    if exactly_core::form::Url::parse(&telnyx_api_base).is_none() {
        return Err(invalid(vars::TELNYX_API_BASE, "not an absolute URL"));
    }
    let telnyx_connection_id = required(env, vars::TELNYX_CONNECTION_ID)?;
    let telnyx_messaging_profile_id = value(env, vars::TELNYX_MESSAGING_PROFILE_ID);
    let twilio = value(env, vars::TWILIO_AUTH_TOKEN)
        .map(|t| twilio::Verifier::new(&t))
        .transpose()
        .map_err(|e| invalid(vars::TWILIO_AUTH_TOKEN, e))?;
    let plivo_v2 = match flag(env, vars::PLIVO_ACCEPT_V2)? {
        true => plivo::V2Policy::Accept,
        false => plivo::V2Policy::Refuse,
    };
    let plivo = value(env, vars::PLIVO_AUTH_TOKEN)
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
    let media_links = match value(env, vars::MEDIA_SIGNING_SECRET) {
        Some(secret) => LinkSigner::new(&secret).map_err(|e| invalid(vars::MEDIA_SIGNING_SECRET, e))?,
        None => LinkSigner::derived_from(&admin_token),
    };
    let allow_private_endpoints = flag(env, vars::ALLOW_PRIVATE_ENDPOINTS)?;
    let retention = Retention {
        payload_days: days(env, vars::RETENTION_PAYLOAD_DAYS, 30, 1)?,
        event_days: days(env, vars::RETENTION_EVENT_DAYS, 90, MIN_EVENT_RETENTION_DAYS)?,
        attempt_days: days(env, vars::RETENTION_ATTEMPT_DAYS, 30, 1)?,
        customer_event_days: days(env, vars::RETENTION_CUSTOMER_EVENT_DAYS, 90, 1)?,
    };
    let backlog_alert_secs = whole(env, vars::BACKLOG_ALERT_SECS, DEFAULT_BACKLOG_ALERT_SECS, 1, "seconds")?;
    let reconcile_call_idle_secs = whole(env, vars::RECONCILE_CALL_IDLE_SECS, 7200, 1, "seconds")?;
    let reconcile_message_secs = whole(env, vars::RECONCILE_MESSAGE_SECS, 21600, 1, "seconds")?;
    let log_webhook_requests = flag_or(env, LOG_WEBHOOK_REQUESTS, true)?;
    let log_job_outcomes = flag_or(env, LOG_JOB_OUTCOMES, true)?;
    let log_sample_every = whole(env, LOG_SAMPLE_EVERY, DEFAULT_LOG_SAMPLE_EVERY, 1, "lines")?.unsigned_abs();
    let event_shards = match value(env, vars::EVENT_SHARDS) {
        None => exactly_core::shard::ShardMap::single(),
        Some(text) => exactly_core::shard::ShardMap::parse(&text).map_err(|e| invalid(vars::EVENT_SHARDS, e))?,
    };
    let account_shards = value(env, vars::ACCOUNT_SHARDS)
        .map(|text| exactly_core::shard::parse_account_shards(&text).map_err(|e| invalid(vars::ACCOUNT_SHARDS, e)))
        .transpose()?
        .map(Rc::new);
    // New accounts must never be placed in a database the worker does not have.
    if let Some(missing) = account_shards.iter().flat_map(|names| names.iter()).find(|name| !env.bound(name)) {
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
        log_job_outcomes,
        log_sample_every,
        event_shards: Rc::new(event_shards),
        account_shards,
        tuning: Rc::new(Tuning::load(env)),
        operator_webhook: operator_webhook(env),
    })
}

/// The operator's webhook: both its variables, or none.
fn operator_webhook(env: &impl Vars) -> Option<OperatorWebhook> {
    let (url, secret) = (value(env, vars::OPERATOR_WEBHOOK_URL)?, value(env, vars::OPERATOR_WEBHOOK_SECRET)?);
    Some(OperatorWebhook { url, secret })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// Variables and bindings as a deployment sets them.
    struct Fake {
        vars: BTreeMap<&'static str, String>,
        bindings: BTreeSet<&'static str>,
    }

    impl Vars for Fake {
        fn lookup(&self, name: &str) -> Option<String> {
            self.vars.get(name).cloned()
        }

        fn bound(&self, name: &str) -> bool {
            self.bindings.contains(name)
        }
    }

    impl Fake {
        fn with(mut self, name: &'static str, value: &str) -> Self {
            self.vars.insert(name, value.to_owned());
            self
        }

        fn without(mut self, name: &'static str) -> Self {
            self.vars.remove(name);
            self
        }
    }

    /// RFC 8032 test 1's public key.
    const PUBLIC_KEY: &str = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
    const API_KEY: &str = "KEY0123-telnyx-api-key-value";
    const CONNECTION_ID: &str = "connection-id-7781";
    const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef";
    const MEDIA_SECRET: &str = "media-signing-secret-0123456789abcdef";
    const TWILIO_TOKEN: &str = "twilio-auth-token-value";
    const TWILIO_NEXT_TOKEN: &str = "twilio-next-token-value";
    const PLIVO_TOKEN: &str = "plivo-auth-token-value";
    const OPERATOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    /// Every secret value [`everything`] sets: no error or `Debug` may show one.
    const SECRETS: [&str; 8] = [
        API_KEY,
        CONNECTION_ID,
        ADMIN_TOKEN,
        MEDIA_SECRET,
        TWILIO_TOKEN,
        TWILIO_NEXT_TOKEN,
        PLIVO_TOKEN,
        OPERATOR_SECRET,
    ];

    /// The required variables only.
    fn required_only() -> Fake {
        let vars = [
            (vars::TELNYX_PUBLIC_KEY, PUBLIC_KEY),
            (vars::TELNYX_API_KEY, API_KEY),
            (vars::TELNYX_CONNECTION_ID, CONNECTION_ID),
            (vars::PUBLIC_BASE_URL, "https://exactly.example.workers.dev"),
            (vars::ADMIN_TOKEN, ADMIN_TOKEN),
        ];
        Fake {
            vars: vars.into_iter().map(|(k, v)| (k, v.to_owned())).collect(),
            bindings: BTreeSet::from([crate::bindings::DB]),
        }
    }

    /// Every variable set, valid, with the account and dedupe databases spread out.
    fn everything() -> Fake {
        let mut fake = required_only()
            .with(vars::TELNYX_API_BASE, "https://api.telnyx.example/")
            .with(vars::TELNYX_MESSAGING_PROFILE_ID, "profile-1")
            .with(vars::TWILIO_AUTH_TOKEN, &format!("{TWILIO_TOKEN}, {TWILIO_NEXT_TOKEN}"))
            .with(vars::TWILIO_ACCOUNT_SID, "AC0123")
            .with(vars::TWILIO_API_BASE, "https://api.twilio.example")
            .with(vars::PLIVO_AUTH_TOKEN, PLIVO_TOKEN)
            .with(vars::PLIVO_AUTH_ID, "MA0123")
            .with(vars::PLIVO_ACCEPT_V2, "true")
            .with(vars::PUBLIC_BASE_URL, " https://exactly.example.com/ ")
            .with(vars::MEDIA_SIGNING_SECRET, MEDIA_SECRET)
            .with(vars::ALLOW_PRIVATE_ENDPOINTS, "false")
            .with(vars::RETENTION_PAYLOAD_DAYS, "7")
            .with(vars::RETENTION_EVENT_DAYS, "3")
            .with(vars::RETENTION_ATTEMPT_DAYS, "14")
            .with(vars::RETENTION_CUSTOMER_EVENT_DAYS, "9")
            .with(vars::BACKLOG_ALERT_SECS, "120")
            .with(vars::RECONCILE_CALL_IDLE_SECS, "3600")
            .with(vars::RECONCILE_MESSAGE_SECS, "7200")
            .with(LOG_WEBHOOK_REQUESTS, "false")
            .with(LOG_JOB_OUTCOMES, "false")
            .with(LOG_SAMPLE_EVERY, "1")
            .with(vars::EVENT_SHARDS, "DB=0-511, EVENTS_0=512-1023")
            .with(vars::ACCOUNT_SHARDS, "DB ACCOUNTS_0")
            .with(vars::OPERATOR_WEBHOOK_URL, "https://ops.example.com/signals")
            .with(vars::OPERATOR_WEBHOOK_SECRET, OPERATOR_SECRET);
        fake.bindings.extend(["EVENTS_0", "ACCOUNTS_0"]);
        fake
    }

    /// `load` refuses `fake` with a 503 naming `variable`, and no secret value shows in the error's
    /// `Display` or `Debug`, nor the refused `value` (unless short enough to occur by chance).
    fn refused(fake: &Fake, variable: &str, value: Option<&str>) -> String {
        let error = match load(fake) {
            Ok(config) => panic!("{variable}={value:?} was accepted: {config:?}"),
            Err(e) => e,
        };
        let EdgeError::Config { variable: named, .. } = &error else {
            panic!("{variable}: not a config error: {error:?}")
        };
        assert_eq!(*named, variable, "{error}");
        let (shown, debug) = (error.to_string(), format!("{error:?}"));
        assert!(shown.contains(variable), "names {variable}: {shown}");
        for secret in SECRETS.iter().copied().chain(value.filter(|v| v.len() >= 8)) {
            assert!(!shown.contains(secret) && !debug.contains(secret), "{variable}: shows a secret: {debug}");
        }
        assert_eq!(error.status(), 503);
        shown
    }

    #[test]
    fn each_required_variable_missing_or_blank_is_named() {
        for name in [
            vars::TELNYX_PUBLIC_KEY,
            vars::TELNYX_API_KEY,
            vars::TELNYX_CONNECTION_ID,
            vars::PUBLIC_BASE_URL,
            vars::ADMIN_TOKEN,
        ] {
            for fake in [everything().without(name), everything().with(name, "  \t ")] {
                let shown = refused(&fake, name, None);
                assert_eq!(shown, format!("configuration variable {name} is not set"));
            }
        }
    }

    #[test]
    fn a_public_key_that_is_not_a_key_is_named() {
        let shown = refused(&everything().with(vars::TELNYX_PUBLIC_KEY, "not-a-key"), vars::TELNYX_PUBLIC_KEY, None);
        assert!(shown.contains("is invalid"), "{shown}");
        assert!(!shown.contains("not-a-key"), "{shown}");
        // Right length, not a point of the curve.
        let weak = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        refused(&everything().with(vars::TELNYX_PUBLIC_KEY, weak), vars::TELNYX_PUBLIC_KEY, None);
        // One bad key of a rotation's two spoils both.
        let two = format!("{PUBLIC_KEY},c2hvcnQ=");
        refused(&everything().with(vars::TELNYX_PUBLIC_KEY, &two), vars::TELNYX_PUBLIC_KEY, None);
    }

    #[test]
    fn a_shard_map_that_leaves_shards_without_a_database_is_named() {
        let shown = refused(&everything().with(vars::EVENT_SHARDS, "DB=0-511"), vars::EVENT_SHARDS, None);
        assert!(shown.contains("virtual shard 512 has no database"), "{shown}");
        for map in ["DB=0-1023,EVENTS_0=7", "DB=0-2000", "FOO=0-1023", "DB=9-0"] {
            refused(&everything().with(vars::EVENT_SHARDS, map), vars::EVENT_SHARDS, None);
        }
    }

    #[test]
    fn account_shards_must_name_bound_account_databases() {
        let shown =
            refused(&everything().with(vars::ACCOUNT_SHARDS, "DB ACCOUNTS_0 ACCOUNTS_1"), vars::ACCOUNT_SHARDS, None);
        assert!(shown.contains("ACCOUNTS_1 is not bound"), "{shown}");
        for list in ["EVENTS_0", "DB DB", ","] {
            refused(&everything().with(vars::ACCOUNT_SHARDS, list), vars::ACCOUNT_SHARDS, None);
        }
    }

    #[test]
    fn numbers_below_their_least_or_not_whole_are_named() {
        for (name, value) in [
            (vars::RETENTION_EVENT_DAYS, "2"),
            (vars::RETENTION_PAYLOAD_DAYS, "0"),
            (vars::RETENTION_ATTEMPT_DAYS, "thirty"),
            (vars::RETENTION_ATTEMPT_DAYS, "1.5"),
            (vars::BACKLOG_ALERT_SECS, "0"),
            (vars::RECONCILE_CALL_IDLE_SECS, "-1"),
            (vars::RECONCILE_MESSAGE_SECS, "6h"),
            (LOG_SAMPLE_EVERY, "0"),
            (LOG_SAMPLE_EVERY, "one in ten"),
        ] {
            let shown = refused(&everything().with(name, value), name, Some(value));
            assert!(shown.contains("must be a whole number of"), "{shown}");
        }
        let shown = refused(&everything().with(vars::RETENTION_EVENT_DAYS, "2"), vars::RETENTION_EVENT_DAYS, None);
        assert!(shown.contains(&format!("days, at least {MIN_EVENT_RETENTION_DAYS}")), "{shown}");
    }

    #[test]
    fn routine_lines_are_sampled_by_key_alike_everywhere() {
        let every = |n: &str| load(&everything().with(LOG_SAMPLE_EVERY, n)).expect("valid");
        let (all, tenth) = (every("1"), every("10"));
        let keys: Vec<String> = (0..10_000).map(|n| format!("ce_{n:016x}")).collect();
        assert!(keys.iter().all(|k| all.samples(k)), "one in one is every line");
        let kept: Vec<&String> = keys.iter().filter(|k| tenth.samples(k)).collect();
        assert!((800..1200).contains(&kept.len()), "about one in ten kept: {}", kept.len());
        // Another isolate (another load of the same configuration) keeps the same lines.
        let again = every("10");
        assert!(kept.iter().all(|k| again.samples(k)));
        assert_eq!(keys.iter().filter(|k| again.samples(k)).count(), kept.len());
    }

    #[test]
    fn switches_are_true_or_false_only() {
        for name in [vars::PLIVO_ACCEPT_V2, vars::ALLOW_PRIVATE_ENDPOINTS, LOG_WEBHOOK_REQUESTS, LOG_JOB_OUTCOMES] {
            for value in ["yes", "1", "TRUE", "off"] {
                let shown = refused(&everything().with(name, value), name, Some(value));
                assert!(shown.ends_with("must be true or false"), "{shown}");
            }
        }
    }

    #[test]
    fn urls_must_be_absolute() {
        for name in [vars::PUBLIC_BASE_URL, vars::TELNYX_API_BASE, vars::TWILIO_API_BASE, vars::PLIVO_API_BASE] {
            for value in ["exactly.example.com", "/v1", "https//broken"] {
                let shown = refused(&everything().with(name, value), name, Some(value));
                assert!(shown.ends_with("not an absolute URL"), "{shown}");
            }
        }
    }

    #[test]
    fn short_secrets_are_named_not_shown() {
        let short = "admin-tok-15chr";
        assert_eq!(short.len(), 15);
        let shown = refused(&everything().with(vars::ADMIN_TOKEN, short), vars::ADMIN_TOKEN, Some(short));
        assert!(shown.ends_with("must be at least 16 characters"), "{shown}");
        assert!(load(&everything().with(vars::ADMIN_TOKEN, &format!("{short}x"))).is_ok(), "16 characters suffice");
        let media = "media-secret-too-short";
        refused(&everything().with(vars::MEDIA_SIGNING_SECRET, media), vars::MEDIA_SIGNING_SECRET, Some(media));
    }

    #[test]
    fn a_full_configuration_loads() {
        let config = load(&everything()).expect("valid");
        assert_eq!(config.telnyx_api_key, API_KEY);
        assert_eq!(config.telnyx_api_base, "https://api.telnyx.example");
        assert_eq!(config.telnyx_connection_id, CONNECTION_ID);
        assert_eq!(config.telnyx_messaging_profile_id.as_deref(), Some("profile-1"));
        assert!(config.twilio.is_some() && config.plivo.is_some());
        let twilio = config.twilio_rest.as_ref().expect("Twilio sending");
        assert_eq!(
            (twilio.base.as_str(), twilio.account.as_str(), twilio.token.as_str()),
            ("https://api.twilio.example", "AC0123", TWILIO_TOKEN)
        );
        let plivo = config.plivo_rest.as_ref().expect("Plivo sending");
        assert_eq!(
            (plivo.base.as_str(), plivo.account.as_str(), plivo.token.as_str()),
            ("https://api.plivo.com", "MA0123", PLIVO_TOKEN)
        );
        assert_eq!(config.public_base_url, "https://exactly.example.com");
        assert_eq!(config.admin_token, ADMIN_TOKEN);
        assert!(!config.allow_private_endpoints);
        assert_eq!(
            config.retention,
            Retention { payload_days: 7, event_days: 3, attempt_days: 14, customer_event_days: 9 }
        );
        assert_eq!(
            (config.backlog_alert_secs, config.reconcile_call_idle_secs, config.reconcile_message_secs),
            (120, 3600, 7200)
        );
        assert!(!config.log_webhook_requests && !config.log_job_outcomes);
        assert_eq!(config.log_sample_every, 1);
        assert_eq!(config.event_shards.bindings(), ["DB", "EVENTS_0"]);
        assert_eq!((config.event_shards.binding(511), config.event_shards.binding(512)), ("DB", "EVENTS_0"));
        assert_eq!(
            config.account_shards.as_deref().map(Vec::as_slice),
            Some(&["DB".to_owned(), "ACCOUNTS_0".to_owned()][..])
        );
        let operator = config.operator_webhook.as_ref().expect("the operator's webhook");
        assert_eq!(
            (operator.url.as_str(), operator.secret.as_str()),
            ("https://ops.example.com/signals", OPERATOR_SECRET)
        );
        let debug = format!("{config:?}");
        assert!(debug.contains("https://ops.example.com/signals"), "{debug}");
        for secret in SECRETS {
            assert!(!debug.contains(secret), "Debug shows a secret: {debug}");
        }
        let half = everything().without(vars::OPERATOR_WEBHOOK_SECRET);
        assert!(load(&half).expect("valid").operator_webhook.is_none(), "a URL without its secret registers nothing");
    }

    #[test]
    fn the_required_variables_alone_load_with_the_defaults() {
        let config = load(&required_only()).expect("valid");
        assert_eq!(config.telnyx_api_base, "https://api.telnyx.com");
        assert_eq!(config.telnyx_messaging_profile_id, None);
        assert!(config.twilio.is_none() && config.plivo.is_none());
        assert!(config.twilio_rest.is_none() && config.plivo_rest.is_none());
        assert!(!config.allow_private_endpoints);
        assert_eq!(
            config.retention,
            Retention { payload_days: 30, event_days: 90, attempt_days: 30, customer_event_days: 90 }
        );
        assert_eq!(
            (config.backlog_alert_secs, config.reconcile_call_idle_secs, config.reconcile_message_secs),
            (DEFAULT_BACKLOG_ALERT_SECS, 7200, 21600)
        );
        assert!(config.log_webhook_requests && config.log_job_outcomes);
        assert_eq!(config.log_sample_every, DEFAULT_LOG_SAMPLE_EVERY.unsigned_abs());
        assert_eq!(config.event_shards.bindings(), ["DB"]);
        assert!(config.account_shards.is_none());
        // A token without its account (or the reverse) verifies webhooks but sends nothing.
        let config = load(&required_only().with(vars::TWILIO_ACCOUNT_SID, "AC0123")).expect("valid");
        assert!(config.twilio.is_none() && config.twilio_rest.is_none());
        let config = load(&required_only().with(vars::PLIVO_AUTH_TOKEN, PLIVO_TOKEN)).expect("valid");
        assert!(config.plivo.is_some() && config.plivo_rest.is_none());
    }

    #[test]
    fn tuning_holds_production_values_and_only_the_test_build_shortens_them() {
        let production = Tuning::production();
        assert_eq!(production.attempt_timeout, std::time::Duration::from_secs(15));
        assert_eq!(production.media_fetch_timeout, std::time::Duration::from_secs(30));
        assert_eq!((production.beside_millis, production.erasure_tail_secs), (25_000, 60));
        assert_eq!(production.call_grace_millis, MIN_EVENT_RETENTION_DAYS * 86_400_000);
        assert!(production.webhook_schedule.is_none());
        let shortened = required_only()
            .with("E2E_ATTEMPT_TIMEOUT_SECS", "10")
            .with("E2E_BREAKER_OPEN_SECS", "2")
            .with("E2E_WEBHOOK_SCHEDULE_SECS", "1, 2,3")
            .with("E2E_BESIDE_SECS", "0");
        let tuning = load(&shortened).expect("valid").tuning;
        if cfg!(feature = "fault-injection") {
            assert_eq!(tuning.attempt_timeout, std::time::Duration::from_secs(10));
            assert_eq!((tuning.breaker.open_millis, tuning.breaker.max_open_millis), (2_000, 8_000));
            assert_eq!(tuning.webhook_schedule, Some(vec![1, 2, 3]));
            assert_eq!(tuning.beside_millis, 25_000, "zero is not a duration: production's holds");
            assert_eq!(tuning.erasure_tail_secs, 1, "the test build's tail, unset");
            let bad = load(&required_only().with("E2E_WEBHOOK_SCHEDULE_SECS", "1,x")).expect("valid").tuning;
            assert!(bad.webhook_schedule.is_none(), "a schedule that does not parse is none");
        } else {
            assert_eq!(tuning.attempt_timeout, production.attempt_timeout);
            assert_eq!(tuning.breaker.open_millis, production.breaker.open_millis);
            assert!(tuning.webhook_schedule.is_none());
        }
    }
}
