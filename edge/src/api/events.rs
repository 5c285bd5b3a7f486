//! `/v1/events`: the customer events of an account, their delivery attempts, and replay.

use serde::Deserialize;
use serde_json::{json, Value};
use worker::{D1Database, Env, Request, Response};

use crate::api::page;
use crate::auth;
use crate::db::{self, int, opt_text, text, time};
use crate::deliveries;
use crate::error::EdgeError;
use crate::http::{self, Cursor};
use crate::platform::now;

#[derive(Debug, Deserialize)]
struct EventRow {
    id: String,
    payload: String,
    created_at: f64,
}


async fn find(db: &D1Database, account_id: &str, id: &str) -> Result<EventRow, EdgeError> {
    db::first(db::stmt(db, "SELECT id, payload, created_at FROM outbound_events WHERE id = ?1 AND account_id = ?2", &[text(id), text(account_id)])?)
        .await?
        .ok_or(EdgeError::NotFound)
}

/// `GET /v1/events?type=&limit=&cursor=`, newest first; each is the webhook body itself.
pub async fn list(req: Request, env: &Env) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let (at, after) = Cursor::args(&Cursor::from_params(&params)?);
    let rows: Vec<EventRow> = db::all(db::stmt(
        &db,
        "SELECT id, payload, created_at FROM outbound_events WHERE account_id = ?1 AND (?2 IS NULL OR type = ?2)
           AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
         ORDER BY created_at DESC, id DESC LIMIT ?5",
        &[text(&account.id), opt_text(http::param(&params, "type")), at, after, int(i64::from(limit))],
    )?)
    .await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    let data = rows.iter().map(|r| serde_json::from_str::<Value>(&r.payload).unwrap_or(Value::Null)).collect();
    http::json(200, &page(data, next))
}

#[derive(Debug, Deserialize)]
struct DeliveryRow {
    id: String,
    endpoint_id: String,
    kind: String,
    status: String,
    attempts: f64,
    next_attempt_at: f64,
    last_error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AttemptRow {
    delivery_id: String,
    attempt: f64,
    attempted_at: f64,
    webhook_timestamp: f64,
    status_code: Option<f64>,
    latency_ms: f64,
    error: Option<String>,
    next_attempt_at: Option<f64>,
}

/// `GET /v1/events/{id}`: the event with its deliveries and every attempt.
pub async fn get(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let event = find(&db, &account.id, id).await?;
    let deliveries: Vec<DeliveryRow> = db::all(db::stmt(
        &db,
        "SELECT id, endpoint_id, kind, status, attempts, next_attempt_at, last_error FROM webhook_deliveries WHERE event_id = ?1 ORDER BY created_at, id",
        &[text(&event.id)],
    )?)
    .await?;
    let attempts: Vec<AttemptRow> = db::all(db::stmt(
        &db,
        "SELECT a.delivery_id, a.attempt, a.attempted_at, a.webhook_timestamp, a.status_code, a.latency_ms, a.error, a.next_attempt_at
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.event_id = ?1 ORDER BY a.delivery_id, a.attempt",
        &[text(&event.id)],
    )?)
    .await?;
    let deliveries: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "endpoint_id": d.endpoint_id, "kind": d.kind, "status": d.status,
                "attempts_made": d.attempts as i64, "last_error": d.last_error,
                "next_attempt_at": (d.status == "pending").then(|| db::millis(d.next_attempt_at).to_rfc3339()),
                "attempts": attempts.iter().filter(|a| a.delivery_id == d.id).map(|a| json!({
                    "attempt": a.attempt as i64,
                    "attempted_at": db::millis(a.attempted_at).to_rfc3339(),
                    "webhook_timestamp": a.webhook_timestamp as i64,
                    "status_code": a.status_code.map(|s| s as i64),
                    "latency_ms": a.latency_ms as i64,
                    "error": a.error,
                    "next_attempt_at": a.next_attempt_at.map(|t| db::millis(t).to_rfc3339()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut shown = json!({ "event": serde_json::from_str::<Value>(&event.payload).unwrap_or(Value::Null) });
    shown["deliveries"] = Value::Array(deliveries);
    http::json(200, &shown)
}

#[derive(Deserialize, Default)]
struct ReplayRequest {
    endpoint_id: Option<String>,
}

/// `POST /v1/events/{id}/replay` `{endpoint_id?}`: a new delivery of the same event (same
/// `webhook-id`) to each enabled endpoint subscribed to its type, or to the one named.
pub async fn replay(mut req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let bytes = req.bytes().await.map_err(|e| EdgeError::platform("read body", e))?;
    let body: ReplayRequest = if bytes.iter().all(u8::is_ascii_whitespace) {
        ReplayRequest::default()
    } else {
        serde_json::from_slice(&bytes).map_err(|e| EdgeError::BadRequest(format!("body is not valid JSON for this request: {e}")))?
    };
    let event = find(&db, &account.id, id).await?;
    let event_type = serde_json::from_str::<Value>(&event.payload).ok().and_then(|v| v["type"].as_str().map(str::to_owned)).unwrap_or_default();
    let at = now();
    #[derive(Deserialize)]
    struct Id {
        id: String,
    }
    let created: Vec<Id> = db::all(db::stmt(
        &db,
        "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at, created_at, updated_at)
         SELECT 'dlv_' || lower(hex(randomblob(16))), ?1, e.id, e.account_id, 'replay', 'pending', 0, ?3, ?3, ?3
         FROM webhook_endpoints e
         WHERE e.account_id = ?2 AND e.enabled = 1 AND (?4 IS NULL OR e.id = ?4)
           AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ?5)
         RETURNING id",
        &[text(&event.id), text(&account.id), time(at), opt_text(body.endpoint_id.as_deref()), text(&event_type)],
    )?)
    .await?;
    if created.is_empty() {
        return Err(EdgeError::Conflict { code: "no_endpoint", message: "no enabled endpoint is subscribed to this event's type".into() });
    }
    let ids: Vec<String> = created.into_iter().map(|c| c.id).collect();
    deliveries::enqueue_many(env, ids.clone()).await?;
    http::json(202, &json!({ "event_id": event.id, "deliveries": ids }))
}
