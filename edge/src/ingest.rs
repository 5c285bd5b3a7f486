//! `POST /webhooks/{carrier}`: verify, store once, enqueue. Nothing else happens on the request
//! path, so carriers get their answer in tens of milliseconds.

use exactly_core::telnyx;
use exactly_core::{Rejection, MAX_BODY_BYTES};
use worker::{Env, Request, Response};

use crate::bindings::{self, vars};
use crate::carrier_events::{self, Stored};
use crate::error::EdgeError;
use crate::jobs;
use crate::platform::{new_id, now};

/// Handles one Telnyx delivery.
pub async fn telnyx(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    let verifier = telnyx_verifier(env)?;
    if declared_length(&req).is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(Rejection::TooLarge { limit: MAX_BODY_BYTES }.into());
    }
    let body = req.bytes().await.map_err(|e| EdgeError::platform("read body", e))?;
    let headers = req.headers();
    let signature = headers.get(telnyx::SIGNATURE_HEADER).ok().flatten();
    let timestamp = headers.get(telnyx::TIMESTAMP_HEADER).ok().flatten();
    let now = now();
    let verified = verifier.verify(
        telnyx::Headers { signature: signature.as_deref(), timestamp: timestamp.as_deref() },
        &body,
        now,
    )?;
    // The verifier parsed the body as JSON, so it is UTF-8.
    let payload = std::str::from_utf8(&body)
        .map_err(|_| Rejection::Malformed(exactly_core::PayloadError::NotParseable))?;

    let db = env.d1(bindings::DB).map_err(|e| EdgeError::platform("DB binding", e))?;
    let stored = carrier_events::store(&db, &new_id("cev")?, &verified, payload, now).await?;
    let outcome = match &stored {
        Stored::New { id } => {
            // If this send fails the row stays unprocessed: the carrier's retry re-enqueues it
            // (below) and the sweeper finds it, so answering 503 loses nothing.
            jobs::enqueue(env, id).await?;
            "accepted"
        }
        Stored::PendingDuplicate { id } => {
            jobs::enqueue(env, id).await?;
            "duplicate-requeued"
        }
        Stored::SettledDuplicate { .. } => "duplicate",
    };
    let event = verified.event();
    worker::console_log!(
        "{}",
        serde_json::json!({
            "request": "webhook", "provider": event.provider.as_str(), "event_id": event.event_id,
            "event_type": event.event_type, "outcome": outcome,
            "latency_ms": crate::platform::now().unix_millis() - now.unix_millis(),
        })
    );
    let id = match stored {
        Stored::New { id } | Stored::PendingDuplicate { id } | Stored::SettledDuplicate { id } => id,
    };
    Response::from_json(&serde_json::json!({ "id": id, "outcome": outcome }))
        .map_err(|e| EdgeError::platform("respond", e))
}

fn telnyx_verifier(env: &Env) -> Result<telnyx::Verifier, EdgeError> {
    let text = env
        .secret(vars::TELNYX_PUBLIC_KEY)
        .map(|s| s.to_string())
        .or_else(|_| env.var(vars::TELNYX_PUBLIC_KEY).map(|v| v.to_string()))
        .map_err(|_| EdgeError::Config { variable: vars::TELNYX_PUBLIC_KEY, problem: "is not set".into() })?;
    telnyx::Verifier::from_base64_keys(&text).map_err(|e| EdgeError::Config {
        variable: vars::TELNYX_PUBLIC_KEY,
        problem: format!("is invalid: {e}"),
    })
}

fn declared_length(req: &Request) -> Option<usize> {
    req.headers().get("content-length").ok().flatten()?.trim().parse().ok()
}
