//! The carrier's REST API (Telnyx v2): sending messages (SMS and MMS). Requests carry the message id as the
//! idempotency key, so a retried send never becomes a second message at the carrier.

use serde_json::{json, Value};
use worker::{Headers, Method};

use super::request::{answered, result_of, text_of, CallResult, Outgoing};
use crate::config::Config;
use crate::error::EdgeError;

/// `POST {TELNYX_API_BASE}/v2/messages`; on success, the carrier's message id. Media URLs make it
/// an MMS (Telnyx's `media_urls`).
pub async fn send_message(config: &Config, outgoing: &Outgoing<'_>) -> Result<CallResult<String>, EdgeError> {
    let mut body = json!({ "from": outgoing.from, "to": outgoing.to });
    if !outgoing.text.is_empty() || outgoing.media_urls.is_empty() {
        body["text"] = json!(outgoing.text);
    }
    if !outgoing.media_urls.is_empty() {
        body["media_urls"] = json!(outgoing.media_urls);
    }
    if let Some(profile) = &config.telnyx_messaging_profile_id {
        body["messaging_profile_id"] = json!(profile);
    }
    Ok(post(config, "/v2/messages", outgoing.id, &body).await?.and_then(|answer| match answer["data"]["id"].as_str() {
        Some(id) if !id.is_empty() => CallResult::Ok(id.to_owned()),
        _ => CallResult::Lost("carrier answered 2xx without data.id".into()),
    }))
}

/// POSTs JSON to the Telnyx API with the API key and an idempotency key.
pub async fn post(
    config: &Config,
    path: &str,
    idempotency_key: &str,
    body: &Value,
) -> Result<CallResult<Value>, EdgeError> {
    call(config, Method::Post, path, Some((idempotency_key, body))).await
}

/// GETs a Telnyx API resource with the API key.
pub async fn get(config: &Config, path: &str) -> Result<CallResult<Value>, EdgeError> {
    call(config, Method::Get, path, None).await
}

async fn call(
    config: &Config,
    method: Method,
    path: &str,
    keyed_body: Option<(&str, &Value)>,
) -> Result<CallResult<Value>, EdgeError> {
    let url = format!("{}{path}", config.telnyx_api_base);
    let headers = Headers::new();
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|e| EdgeError::platform("header", e));
    set("authorization", &format!("Bearer {}", config.telnyx_api_key))?;
    set("accept", "application/json")?;
    if let Some((idempotency_key, _)) = keyed_body {
        set("content-type", "application/json")?;
        set("idempotency-key", idempotency_key)?;
    }
    let body = keyed_body.map(|(_, body)| body.to_string());
    let request = crate::platform::request(method.as_ref(), &url, Some(&headers), body.as_deref(), true)
        .map_err(|e| EdgeError::platform("carrier request", e))?;

    Ok(match answered(request).await {
        Ok((status, answer)) => result_of(status, answer, path, "TELNYX_API_KEY", refusal),
        Err(reason) => CallResult::Lost(reason.to_string()),
    })
}

/// The code and title of a Telnyx refusal: its first error's.
fn refusal(answer: &Value) -> (Option<String>, Option<String>) {
    let first = &answer["errors"][0];
    (text_of(&first["code"]), text_of(&first["title"]).or_else(|| text_of(&first["detail"])))
}

/// The ids of a leg the carrier dialled.
#[derive(Clone, Debug)]
pub struct DialedLeg {
    /// The handle commands are sent to.
    pub call_control_id: String,
    /// The leg's id.
    pub call_leg_id: String,
}

/// `POST {TELNYX_API_BASE}/v2/calls`: dials `to` from `from`, tagging the leg with
/// `client_state` (base64 on the wire), ringing for `timeout_secs`. The idempotency key names the call and position, so a
/// retried dial is one leg at the carrier.
pub async fn dial(
    config: &Config,
    idempotency_key: &str,
    from: &str,
    to: &str,
    client_state: &str,
    timeout_secs: u32,
) -> Result<CallResult<DialedLeg>, EdgeError> {
    let connection_id = config.telnyx_connection_id.clone();
    let body = json!({
        "connection_id": connection_id, "to": to, "from": from, "timeout_secs": timeout_secs,
        "client_state": exactly_core::telnyx::encode_client_state(client_state),
    });
    Ok(post(config, "/v2/calls", idempotency_key, &body).await?.and_then(|answer| {
        let data = &answer["data"];
        match (data["call_control_id"].as_str(), data["call_leg_id"].as_str()) {
            (Some(control), Some(leg)) => {
                CallResult::Ok(DialedLeg { call_control_id: control.to_owned(), call_leg_id: leg.to_owned() })
            }
            _ => CallResult::Lost("carrier answered 2xx without call ids".into()),
        }
    }))
}

/// A Call Control command on one leg.
#[derive(Clone, Copy, Debug)]
pub enum Command<'a> {
    /// Answer an incoming leg.
    Answer,
    /// Bridge this leg to another.
    Bridge { other_call_control_id: &'a str },
    /// Hang this leg up.
    Hangup,
}

/// `POST {TELNYX_API_BASE}/v2/calls/{id}/actions/{answer|bridge|hangup}`. `command_id` makes a
/// repeated command a no-op at the carrier.
pub async fn command(
    config: &Config,
    call_control_id: &str,
    command: Command<'_>,
    command_id: &str,
) -> Result<CallResult<()>, EdgeError> {
    let (action, mut body) = match command {
        Command::Answer => ("answer", json!({})),
        Command::Bridge { other_call_control_id } => ("bridge", json!({ "call_control_id": other_call_control_id })),
        Command::Hangup => ("hangup", json!({})),
    };
    body["command_id"] = json!(command_id);
    let id: String = form_urlencoded::byte_serialize(call_control_id.as_bytes()).collect();
    Ok(post(config, &format!("/v2/calls/{id}/actions/{action}"), command_id, &body)
        .await?
        .and_then(|_| CallResult::Ok(())))
}

/// What the carrier says of a call leg: whether it is still up, and when it ended if it says.
pub struct LegStatus {
    /// `is_alive`.
    pub alive: bool,
    /// `end_time`, or `start_time` plus `call_duration` (seconds), when the carrier gives them.
    pub ended_at: Option<exactly_core::Timestamp>,
}

/// `GET /v2/calls/{call_control_id}`. Only an answer that says `is_alive: false` ends a leg; a
/// refusal (the carrier no longer knows the id, or anything else) says nothing about it.
pub async fn call_status(config: &Config, call_control_id: &str) -> Result<CallResult<LegStatus>, EdgeError> {
    use exactly_core::Timestamp;
    let id: String = form_urlencoded::byte_serialize(call_control_id.as_bytes()).collect();
    Ok(get(config, &format!("/v2/calls/{id}")).await?.and_then(|answer| {
        let data = &answer["data"];
        let time = |field: &str| data[field].as_str().and_then(Timestamp::parse_rfc3339);
        let ended_at = time("end_time").or_else(|| {
            let (start, secs) = (time("start_time")?, data["call_duration"].as_i64()?);
            Some(Timestamp::from_unix_millis(start.unix_millis() + secs.checked_mul(1000)?))
        });
        CallResult::Ok(LegStatus { alive: data["is_alive"].as_bool().unwrap_or(true), ended_at })
    }))
}

/// `GET /v2/messages/{id}`: the recipient's status as Telnyx words it (`delivered`, `sent`, ...)
/// and the errors it lists.
pub async fn message_status(
    config: &Config,
    carrier_message_id: &str,
) -> Result<CallResult<(String, Value)>, EdgeError> {
    let id: String = form_urlencoded::byte_serialize(carrier_message_id.as_bytes()).collect();
    Ok(get(config, &format!("/v2/messages/{id}")).await?.and_then(|answer| {
        let data = &answer["data"];
        let status = data["to"][0]["status"].as_str().unwrap_or_default().to_owned();
        CallResult::Ok((status, data["errors"].clone()))
    }))
}
