//! `/v1/events`: the customer events of an account, their delivery attempts, and replay.

use crate::api::auth::Ctx;
use exactly_core::webhook::EventType;
use serde::Deserialize;
use serde_json::{json, Value};
use worker::{D1Database, Request, Response};

use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::deliveries;
use crate::store::outbox::{self, Stored};

async fn find(db: &D1Database, account_id: &str, id: &str) -> Result<Stored, EdgeError> {
    outbox::get(db, account_id, id).await?.ok_or(EdgeError::NotFound)
}

/// `GET /v1/event_types`: the event catalog, every type with its summary, description, whether
/// an endpoint may subscribe to it, the JSON Schema of its body and an example body.
pub async fn types(_req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    ctx.account()?;
    crate::api::openapi::event_types()
}

/// `GET /v1/events?type=&resource_id=&since=&until=&limit=&cursor=`, newest first; each is the
/// webhook body itself.
pub async fn list(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let event_type = http::given(&params, "type");
    if event_type.is_some_and(|t| EventType::from_name(t).is_none()) {
        return Err(EdgeError::invalid("type", "is not an event type; see GET /v1/event_types"));
    }
    let filter = outbox::Filter {
        event_type,
        resource_id: http::param(&params, "resource_id"),
        since: http::time_param(&params, "since")?,
        until: http::time_param(&params, "until")?,
    };
    let rows = outbox::list(db, &account.id, &filter, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    let data =
        rows.iter().map(|r| serde_json::from_slice::<Value>(r.payload.as_bytes()).unwrap_or(Value::Null)).collect();
    http::json(200, &page(data, next))
}

/// `GET /v1/events/{id}`: the event with its deliveries and every attempt.
pub async fn get(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let event = find(db, &account.id, id).await?;
    let deliveries = deliveries::of_event(db, &event.id).await?;
    let attempts = deliveries::attempts_of_event(db, &event.id).await?;
    let deliveries: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "endpoint_id": d.endpoint_id, "kind": d.kind, "status": d.status,
                "attempts_made": d.attempts, "last_error": d.last_error,
                "next_attempt_at": (d.status == deliveries::DeliveryStatus::Pending).then(|| d.next_attempt_at.to_rfc3339()),
                "attempts": attempts.iter().filter(|a| a.delivery_id == d.id).map(|a| json!({
                    "attempt": a.attempt,
                    "attempted_at": a.attempted_at.to_rfc3339(),
                    "webhook_timestamp": a.webhook_timestamp,
                    "status_code": a.status_code,
                    "latency_ms": a.latency_ms,
                    "error": a.error,
                    "response_snippet": a.response_body,
                    "next_attempt_at": a.next_attempt_at.map(|t| t.to_rfc3339()),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut shown =
        json!({ "event": serde_json::from_slice::<Value>(event.payload.as_bytes()).unwrap_or(Value::Null) });
    shown["deliveries"] = Value::Array(deliveries);
    http::json(200, &shown)
}

#[derive(Deserialize, Default)]
struct ReplayRequest {
    endpoint_id: Option<String>,
}

/// `POST /v1/events/{id}/replay` `{endpoint_id?}`: a new delivery of the same event (same
/// `webhook-id`) to each enabled endpoint subscribed to its type, or to the one named.
pub async fn replay(mut req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    // Capped like every JSON body, before anything is looked up.
    let body: ReplayRequest = http::optional_json_body(&mut req).await?;
    let event = find(db, &account.id, id).await?;
    let at = now();
    let ids = deliveries::replay(db, &event.id, &account.id, event.event_type, body.endpoint_id.as_deref(), at).await?;
    if ids.is_empty() {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::NoEndpoint,
            message: "no enabled endpoint is subscribed to this event's type (a test send is never replayed)".into(),
        });
    }
    crate::queues::deliver_written(ctx.account_db()?, ids.clone()).await;
    http::json(202, &json!({ "event_id": event.id, "deliveries": ids }))
}
