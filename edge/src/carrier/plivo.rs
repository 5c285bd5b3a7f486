//! Plivo's REST API: sending a message (`Message/`, with our callback `url`) and listing the
//! outbound messages it took since a time, to find a send whose answer was lost. Plivo takes no
//! idempotency key, and its list does not show the text: a candidate matches on the numbers and
//! the time.

use exactly_core::event::CarrierError;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::Method;

use super::request::{basic_call, text_of, Body, CallResult, Outgoing};
use crate::config::{Config, Rest};
use crate::error::EdgeError;

const CREDENTIALS: &str = "PLIVO_AUTH_ID and PLIVO_AUTH_TOKEN";

fn error(answer: &Value) -> (Option<String>, Option<String>) {
    (None, text_of(&answer["error"]))
}

fn messages_url(rest: &Rest) -> String {
    let account: String = form_urlencoded::byte_serialize(rest.account.as_bytes()).collect();
    format!("{}/v1/Account/{account}/Message/", rest.base)
}

fn unconfigured<T>() -> CallResult<T> {
    worker::console_error!(
        "{}",
        serde_json::json!({"carrier_api": "plivo", "error": format!("sending through Plivo needs {CREDENTIALS}")})
    );
    CallResult::Transient(format!("sending through Plivo needs {CREDENTIALS}"))
}

/// Plivo writes numbers without the `+`.
fn digits(number: &str) -> &str {
    number.trim_start_matches('+')
}

/// `POST /v1/Account/{auth_id}/Message/`; on success, the message's uuid.
pub async fn send_message(config: &Config, message: &Outgoing<'_>) -> Result<CallResult<String>, EdgeError> {
    let Some(rest) = &config.plivo_rest else { return Ok(unconfigured()) };
    let mut body = json!({
        "src": digits(message.from), "dst": digits(message.to), "text": message.text,
        "url": format!("{}/webhooks/plivo", config.public_base_url), "method": "POST",
    });
    if !message.media_urls.is_empty() {
        body["type"] = json!("mms");
        body["media_urls"] = json!(message.media_urls);
    }
    let url = messages_url(rest);
    let answer =
        basic_call(Method::Post, &url, &rest.account, &rest.token, Body::Json(body), CREDENTIALS, error).await?;
    Ok(answer.and_then(|answer| match text_of(&answer["message_uuid"][0]) {
        Some(uuid) => CallResult::Ok(uuid),
        None => CallResult::Lost("Plivo answered 2xx without a message_uuid".into()),
    }))
}

/// The uuids of outbound messages from `from` to `to` since `since`, oldest first. Plivo's list
/// filters by time and direction but not by number, 20 to a page: up to [`LOOKUP_PAGES`] pages
/// are read, so a lost send is found among the account's next 100 messages.
pub async fn sent_since(
    config: &Config,
    message: &Outgoing<'_>,
    since: Timestamp,
) -> Result<CallResult<Vec<String>>, EdgeError> {
    let Some(rest) = &config.plivo_rest else { return Ok(unconfigured()) };
    // Plivo's time filter reads `YYYY-MM-DD HH:MM:SS` (UTC).
    let at = since.to_rfc3339().replace('T', " ");
    let mut found: Vec<(String, String)> = Vec::new();
    for page in 0..LOOKUP_PAGES {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("message_direction", "outbound")
            .append_pair("message_time__gte", at.get(..19).unwrap_or(&at))
            .append_pair("limit", &PAGE.to_string())
            .append_pair("offset", &(page * PAGE).to_string())
            .finish();
        let url = format!("{}?{query}", messages_url(rest));
        let answer =
            match basic_call(Method::Get, &url, &rest.account, &rest.token, Body::Empty, CREDENTIALS, error).await? {
                CallResult::Ok(answer) => answer,
                CallResult::Refused(CarrierError { code, .. }) => {
                    return Ok(CallResult::Transient(format!("Plivo list refused: {code}")))
                }
                CallResult::Transient(e) => return Ok(CallResult::Transient(e)),
                CallResult::Lost(e) => return Ok(CallResult::Lost(e)),
            };
        let objects = answer["objects"].as_array().cloned().unwrap_or_default();
        found.extend(
            objects
                .iter()
                .filter(|m| {
                    m["from_number"].as_str().map(digits) == Some(digits(message.from))
                        && m["to_number"].as_str().map(digits) == Some(digits(message.to))
                })
                .filter_map(|m| Some((text_of(&m["message_time"]).unwrap_or_default(), text_of(&m["message_uuid"])?))),
        );
        if objects.len() < PAGE {
            break;
        }
    }
    found.sort();
    Ok(CallResult::Ok(found.into_iter().map(|(_, uuid)| uuid).collect()))
}

/// Plivo's page size for its message list.
const PAGE: usize = 20;

/// How many pages a lookup reads at most.
const LOOKUP_PAGES: usize = 5;

/// `GET /v1/Account/{auth_id}/Message/{uuid}/`: the message's `message_state` as Plivo words it,
/// with its error code.
pub async fn message_status(config: &Config, uuid: &str) -> Result<CallResult<(String, Value)>, EdgeError> {
    let Some(rest) = &config.plivo_rest else { return Ok(unconfigured()) };
    let uuid: String = form_urlencoded::byte_serialize(uuid.as_bytes()).collect();
    let url = format!("{}{uuid}/", messages_url(rest));
    let answer = basic_call(Method::Get, &url, &rest.account, &rest.token, Body::Empty, CREDENTIALS, error).await?;
    Ok(answer.and_then(|answer| {
        let status = answer["message_state"].as_str().unwrap_or_default().to_owned();
        CallResult::Ok((status, json!({"code": answer["error_code"]})))
    }))
}
