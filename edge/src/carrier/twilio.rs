//! Twilio's REST API: sending a message (`Messages.json`, with our status callback) and listing
//! the messages it took, to find a send whose answer was lost. Twilio takes no idempotency key.

use exactly_core::event::CarrierError;
use exactly_core::Timestamp;
use serde_json::Value;
use worker::Method;

use super::request::{basic_call, text_of, Body, CallResult, Outgoing};
use crate::config::{Config, Rest};
use crate::error::EdgeError;

const CREDENTIALS: &str = "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN";

fn error(answer: &Value) -> (Option<String>, Option<String>) {
    (text_of(&answer["code"]), text_of(&answer["message"]))
}

fn messages_url(rest: &Rest) -> String {
    let account: String = form_urlencoded::byte_serialize(rest.account.as_bytes()).collect();
    format!("{}/2010-04-01/Accounts/{account}/Messages.json", rest.base)
}

/// Not configured: retried (and logged) like a refused credential, so fixing the variables
/// sends the message rather than losing it.
fn unconfigured<T>() -> CallResult<T> {
    worker::console_error!(
        "{}",
        serde_json::json!({"carrier_api": "twilio", "error": format!("sending through Twilio needs {CREDENTIALS}")})
    );
    CallResult::Transient(format!("sending through Twilio needs {CREDENTIALS}"))
}

/// `POST /2010-04-01/Accounts/{sid}/Messages.json`; on success, the message's `sid`.
pub async fn send_message(config: &Config, message: &Outgoing<'_>) -> Result<CallResult<String>, EdgeError> {
    let Some(rest) = &config.twilio_rest else { return Ok(unconfigured()) };
    let mut form = vec![
        ("To", message.to.to_owned()),
        ("From", message.from.to_owned()),
        ("StatusCallback", format!("{}/webhooks/twilio", config.public_base_url)),
    ];
    if !message.text.is_empty() || message.media_urls.is_empty() {
        form.push(("Body", message.text.to_owned()));
    }
    // An MMS: `MediaUrl` once per item.
    form.extend(message.media_urls.iter().map(|url| ("MediaUrl", (*url).to_owned())));
    let url = messages_url(rest);
    let answer =
        basic_call(Method::Post, &url, &rest.account, &rest.token, Body::Form(form), CREDENTIALS, error).await?;
    Ok(answer.and_then(|answer| match text_of(&answer["sid"]) {
        Some(sid) => CallResult::Ok(sid),
        None => CallResult::Lost("Twilio answered 2xx without a sid".into()),
    }))
}

/// The sids of the latest messages from `from` to `to` whose body is the message's text and that
/// Twilio created at `since` or later (`date_created`), oldest first. Twilio's list has no time
/// filter that covers messages not yet sent, so the newest page is read and filtered here; the
/// caller skips sids another message already owns.
pub async fn sent_since(
    config: &Config,
    message: &Outgoing<'_>,
    since: Timestamp,
) -> Result<CallResult<Vec<String>>, EdgeError> {
    let Some(rest) = &config.twilio_rest else { return Ok(unconfigured()) };
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("To", message.to)
        .append_pair("From", message.from)
        .append_pair("PageSize", "50")
        .finish();
    let url = format!("{}?{query}", messages_url(rest));
    Ok(match basic_call(Method::Get, &url, &rest.account, &rest.token, Body::Empty, CREDENTIALS, error).await? {
        CallResult::Ok(answer) => {
            let mut sids: Vec<String> = answer["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["body"].as_str() == Some(message.text))
                .filter(|m| {
                    m["date_created"]
                        .as_str()
                        .and_then(Timestamp::parse_rfc2822)
                        .is_some_and(|created| created.unix_millis() >= since.unix_millis())
                })
                .filter_map(|m| text_of(&m["sid"]))
                .collect();
            // Twilio lists newest first.
            sids.reverse();
            CallResult::Ok(sids)
        }
        CallResult::Refused(CarrierError { code, .. }) => CallResult::Transient(format!("Twilio list refused: {code}")),
        CallResult::Transient(e) => CallResult::Transient(e),
        CallResult::Lost(e) => CallResult::Lost(e),
    })
}

/// `GET .../Messages/{sid}.json`: the message's `status` as Twilio words it, with its error.
pub async fn message_status(config: &Config, sid: &str) -> Result<CallResult<(String, Value)>, EdgeError> {
    let Some(rest) = &config.twilio_rest else { return Ok(unconfigured()) };
    let sid: String = form_urlencoded::byte_serialize(sid.as_bytes()).collect();
    let url = messages_url(rest).replace("/Messages.json", &format!("/Messages/{sid}.json"));
    let answer = basic_call(Method::Get, &url, &rest.account, &rest.token, Body::Empty, CREDENTIALS, error).await?;
    Ok(answer.and_then(|answer| {
        let status = answer["status"].as_str().unwrap_or_default().to_owned();
        CallResult::Ok((status, serde_json::json!({"code": answer["error_code"], "message": answer["error_message"]})))
    }))
}
