//! One attempt over HTTP: the signed request to a customer's endpoint, and what it answered.

use std::time::Duration;

use exactly_core::backoff;
use exactly_core::breaker;
use exactly_core::endpoint::EndpointUrl;
use exactly_core::headers::CustomHeaders;
use exactly_core::webhook::SigningSecret;
use exactly_core::Timestamp;
use worker::Headers;

use crate::platform::{fetch, now, Longer};

/// The outcome of one attempt, as the endpoint answered.
pub(super) enum Answer {
    Success(u16),
    Gone,
    /// `no_answer`: no connection or no answer in time (the endpoint held the sender's time);
    /// `timed_out`: no answer before the attempt's timeout.
    Failure {
        status: Option<u16>,
        error: String,
        retry_after: Option<u64>,
        no_answer: bool,
        timed_out: bool,
    },
}

impl Answer {
    pub(super) fn refused(error: String) -> Self {
        Answer::Failure { status: None, error, retry_after: None, no_answer: false, timed_out: false }
    }

    /// How the circuit breaker weighs it.
    pub(super) fn outcome(&self) -> breaker::Outcome {
        match self {
            Answer::Success(_) => breaker::Outcome::Success,
            Answer::Failure { no_answer: true, .. } => breaker::Outcome::Timeout,
            _ => breaker::Outcome::Failure,
        }
    }
}

/// How an attempt is signed, and the endpoint's own headers that go with it.
pub(super) struct Signed<'a> {
    pub(super) secret: &'a SigningSecret,
    /// During a rotation window, the previous secret signs too.
    pub(super) previous: Option<&'a SigningSecret>,
    pub(super) headers: &'a CustomHeaders,
    /// At an ordered endpoint, the events of the resource skipped before this one.
    pub(super) skipped: Option<&'a str>,
}

pub(super) async fn send(
    url: &EndpointUrl,
    signed: &Signed<'_>,
    event_id: &str,
    payload: &str,
    at: Timestamp,
    timeout: Duration,
) -> (Answer, Reply) {
    let Signed { secret, previous, .. } = *signed;
    let headers = Headers::new();
    // The endpoint's own first: none of them can name a header set below (`core::headers`).
    for (name, value) in signed.headers.iter() {
        if headers.set(name, value).is_err() {
            return (Answer::refused(format!("cannot set the custom header {name}")), Reply::default());
        }
    }
    let mut signature = secret.sign(event_id, at, payload.as_bytes());
    if let Some(previous) = previous {
        signature.push(' ');
        signature.push_str(&previous.sign(event_id, at, payload.as_bytes()));
    }
    for (name, value) in [
        ("content-type", "application/json"),
        ("user-agent", "exactly-webhooks/1"),
        ("webhook-id", event_id),
        ("webhook-timestamp", &at.unix_seconds().to_string()),
        ("webhook-signature", &signature),
    ]
    .into_iter()
    .chain(signed.skipped.map(|ids| ("exactly-skipped", ids)))
    {
        if headers.set(name, value).is_err() {
            return (Answer::refused(format!("cannot set header {name}")), Reply::default());
        }
    }
    // Never follow a redirect: the next hop is an address nobody checked (and `fetch` would
    // turn the POST into a GET there). A 3xx is a failed attempt, recorded with its Location.
    let request = match crate::platform::request("POST", url.as_str(), Some(&headers), Some(payload), false) {
        Ok(r) => r,
        Err(e) => {
            return (Answer::refused(format!("invalid request: {e}")), Reply::default());
        }
    };
    match fetch(request, timeout, MAX_REPLY_BYTES, Longer::Start).await {
        Ok(answer) => {
            let status = answer.status;
            let reply = Reply { signature: Some(signature), ..Reply::of(&answer) };
            let header = |name: &str| answer.headers.get(name).ok().flatten();
            let retry_after = header("retry-after").and_then(|v| backoff::parse_retry_after(&v, now()));
            let answer = match status {
                200..=299 => Answer::Success(status),
                410 => Answer::Gone,
                300..=399 => {
                    let error = match header("location") {
                        Some(location) => format!(
                            "answered {status} redirecting to {}; redirects are not followed",
                            bounded(&location, MAX_LOCATION_CHARS)
                        ),
                        None => format!("answered {status} (a redirect without Location); redirects are not followed"),
                    };
                    Answer::Failure { status: Some(status), error, retry_after, no_answer: false, timed_out: false }
                }
                _ => Answer::Failure {
                    status: Some(status),
                    error: format!("answered {status}"),
                    retry_after,
                    no_answer: false,
                    timed_out: false,
                },
            };
            (answer, reply)
        }
        Err(reason) => {
            let error = reason.to_string();
            let timed_out = matches!(reason, crate::platform::NoAnswer::Timeout(_));
            let reply = Reply { signature: Some(signature), ..Reply::default() };
            (Answer::Failure { status: None, error, retry_after: None, no_answer: true, timed_out }, reply)
        }
    }
}

/// What an endpoint answered, kept with the attempt for debugging: the first
/// [`MAX_REPLY_BYTES`] of the body and the headers; and the signature the request went with
/// (the delivery log shows the request as it was sent).
#[derive(Default)]
pub(super) struct Reply {
    pub(super) body: Option<String>,
    pub(super) headers: Option<String>,
    pub(super) signature: Option<String>,
}

/// How much of a response body an attempt keeps.
pub(super) const MAX_REPLY_BYTES: usize = 1024;

impl Reply {
    /// The answer's headers and the start of its body (the rest is never read).
    fn of(answer: &crate::platform::Answer) -> Self {
        let headers: serde_json::Map<String, serde_json::Value> =
            answer.headers.entries().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
        let body = Some(String::from_utf8_lossy(&answer.body).into_owned());
        Reply { body, headers: Some(serde_json::Value::Object(headers).to_string()), signature: None }
    }
}

/// The most of a `Location` header kept in an attempt's error: enough to see where it pointed,
/// not a place for an endpoint to store kilobytes.
const MAX_LOCATION_CHARS: usize = 512;

/// `text` cut to at most `max` characters, marked when cut.
fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}
