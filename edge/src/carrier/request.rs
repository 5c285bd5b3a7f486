//! What every request to a carrier's REST API shares: its [`CallResult`], the reading of its
//! answer within a timeout, the one mapping of a carrier's status to a result ([`result_of`]),
//! and the Basic-auth call Twilio and Plivo take. A leaf of the carrier wing: each carrier's file
//! uses it, and it uses none of them.

use std::time::Duration;

use base64::Engine as _;
use exactly_core::event::CarrierError;
use serde_json::Value;
use worker::{Headers, Method};

use crate::error::EdgeError;

/// The outcome of a carrier API call.
#[derive(Debug)]
pub enum CallResult<T> {
    /// 2xx: what the carrier answered.
    Ok(T),
    /// 4xx: the carrier refused; retrying cannot help.
    Refused(CarrierError),
    /// A definite answer that took nothing and may change (5xx but 502 and 504, 408, 429,
    /// 401/403, missing credentials): safe to retry.
    Transient(String),
    /// No answer to act on: a timeout, a network error, an answer that broke off, a gateway's
    /// 502 or 504, or a 2xx that does not say what it made. The carrier may have acted on the
    /// request: a retry repeats the idempotency key (Telnyx) or first looks for what it made
    /// (Twilio, Plivo).
    Lost(String),
}

impl<T> CallResult<T> {
    /// What a 2xx answer means, as `f` reads it (a 2xx without what it should carry is
    /// transient); a refusal or a transient failure stays what it is.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> CallResult<U>) -> CallResult<U> {
        match self {
            CallResult::Ok(answer) => f(answer),
            CallResult::Refused(e) => CallResult::Refused(e),
            CallResult::Transient(e) => CallResult::Transient(e),
            CallResult::Lost(e) => CallResult::Lost(e),
        }
    }
}

/// How a carrier's HTTP status that is neither 2xx nor a refusal is retried: a gateway's 502 or
/// 504 means the carrier's own answer was lost on the way; any other is the carrier's.
pub fn unsuccessful<T>(status: u16, reason: String) -> CallResult<T> {
    match status {
        502 | 504 => CallResult::Lost(reason),
        _ => CallResult::Transient(reason),
    }
}

/// How long one carrier API call may take, answer read whole, before it counts as a transient
/// failure.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One outbound message as a carrier's send API takes it.
pub struct Outgoing<'a> {
    /// The platform's id: Telnyx's idempotency key.
    pub id: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    /// May be empty for an MMS.
    pub text: &'a str,
    /// Public `https` URLs the carrier fetches and attaches (an MMS).
    pub media_urls: &'a [&'a str],
}

/// A request body.
pub enum Body {
    /// `application/x-www-form-urlencoded`.
    Form(Vec<(&'static str, String)>),
    /// `application/json`.
    Json(Value),
    /// None (a GET).
    Empty,
}

/// The most of a carrier's answer that is read: its JSON answers are far smaller.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Sends one carrier API request and reads its answer whole within [`TIMEOUT`]: the status and
/// the JSON body (`Null` when the body is not JSON). An answer that broke off or ran past
/// [`MAX_ANSWER_BYTES`] says nothing reliable and is [`Unanswered`] too.
pub async fn answered(request: worker::Request) -> Result<(u16, Value), Unanswered> {
    let answer = crate::platform::fetch(request, TIMEOUT, MAX_ANSWER_BYTES, crate::platform::Longer::Unread)
        .await
        .map_err(Unanswered::NoAnswer)?;
    match answer.cut {
        None => Ok((answer.status, serde_json::from_slice(&answer.body).unwrap_or(Value::Null))),
        Some(crate::platform::Cut::OverLimit) => Err(Unanswered::OverLimit { status: answer.status }),
        Some(crate::platform::Cut::Broken(reason)) => Err(Unanswered::Broken { status: answer.status, reason }),
    }
}

/// Why a carrier request has no answer to act on.
#[derive(Debug)]
pub enum Unanswered {
    /// No status came.
    NoAnswer(crate::platform::NoAnswer),
    /// The answer ran past [`MAX_ANSWER_BYTES`].
    OverLimit { status: u16 },
    /// The answer broke off.
    Broken { status: u16, reason: String },
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unanswered::NoAnswer(why) => write!(f, "{why}"),
            Unanswered::OverLimit { status } => {
                write!(f, "carrier answered {status} with more than {MAX_ANSWER_BYTES} bytes")
            }
            Unanswered::Broken { status, reason } => write!(f, "carrier answered {status}: {reason}"),
        }
    }
}

/// One REST call with HTTP Basic credentials: 2xx is `Ok` with the JSON answer; 401/403 and
/// 5xx, 408 and 429 are transient (the log names `credentials_hint` for 401/403); timeouts,
/// network errors and a gateway's 502/504 are lost; any other 4xx is the carrier refusing, with
/// `error` reading its code and title.
pub async fn basic_call(
    method: Method,
    url: &str,
    user: &str,
    password: &str,
    body: Body,
    credentials_hint: &str,
    error: fn(&Value) -> (Option<String>, Option<String>),
) -> Result<CallResult<Value>, EdgeError> {
    let (content_type, payload) = match body {
        Body::Form(pairs) => {
            let mut form = form_urlencoded::Serializer::new(String::new());
            for (name, value) in &pairs {
                form.append_pair(name, value);
            }
            (Some("application/x-www-form-urlencoded"), Some(form.finish()))
        }
        Body::Json(value) => (Some("application/json"), Some(value.to_string())),
        Body::Empty => (None, None),
    };
    let headers = Headers::new();
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|e| EdgeError::platform("header", e));
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    set("authorization", &format!("Basic {basic}"))?;
    set("accept", "application/json")?;
    if let Some(content_type) = content_type {
        set("content-type", content_type)?;
    }
    let request = crate::platform::request(method.as_ref(), url, Some(&headers), payload.as_deref(), true)
        .map_err(|e| EdgeError::platform("carrier request", e))?;
    Ok(match answered(request).await {
        Ok((status, answer)) => result_of(status, answer, url_path(url), credentials_hint, error),
        Err(reason) => CallResult::Lost(reason.to_string()),
    })
}

/// What a carrier's answer of `status` to the call of `path` means, for every carrier: 2xx is
/// `Ok` with the JSON answer; 401/403 is transient, and the log names `credentials_hint` (a
/// wrong or rotated key says nothing about the message or the call: retried with the same
/// idempotency key); another 4xx but 408 and 429 is the carrier refusing, with `error` reading
/// its code and title; anything else is [`unsuccessful`].
pub fn result_of(
    status: u16,
    answer: Value,
    path: &str,
    credentials_hint: &str,
    error: fn(&Value) -> (Option<String>, Option<String>),
) -> CallResult<Value> {
    match status {
        200..=299 => CallResult::Ok(answer),
        401 | 403 => {
            worker::console_error!(
                "{}",
                serde_json::json!({"carrier_api": path, "status": status,
                    "error": format!("the carrier refused the credentials: check {credentials_hint}")})
            );
            CallResult::Transient(format!("carrier answered {status}: check {credentials_hint}"))
        }
        400..=499 if status != 408 && status != 429 => {
            let (code, title) = error(&answer);
            CallResult::Refused(CarrierError { code: code.unwrap_or_else(|| format!("http_{status}")), title })
        }
        _ => unsuccessful(status, format!("carrier answered {status}")),
    }
}

/// The path of `url`, for logs (no host, no query).
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.split('?').next().unwrap_or(path)
}

/// A JSON value as text: strings as they are, numbers printed.
pub fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
