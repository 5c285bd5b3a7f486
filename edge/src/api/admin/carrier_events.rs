//! `/admin/carrier_events`: the dedupe log by state, and the re-drive of failed events.

use crate::api::auth::Ctx;
use serde_json::json;
use worker::{Request, Response};

use crate::api::auth;
use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::error::EdgeError;
use crate::store::carrier_events;
use crate::store::carrier_events::EventState;

/// `GET /admin/carrier_events?status=failed|pending|processed&limit=&cursor=`.
pub async fn list_carrier_events(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let params = http::query(&req);
    let state = EventState::from_name(http::given(&params, "status").unwrap_or("failed"))
        .ok_or_else(|| EdgeError::invalid("status", "must be failed, pending or processed"))?;
    let limit = http::limit(&params)?;
    let rows = carrier_events::Log::open(env, ctx.config).list(state, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    let data = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "carrier": r.carrier.as_str(), "carrier_event_id": r.carrier_event_id, "event_type": r.event_type,
                "status": match (&r.error, r.processed_at) {
                    (Some(_), _) => "failed",
                    (None, Some(_)) => "processed",
                    (None, None) => "pending",
                },
                "error": r.error, "attempts": r.attempts,
                "processed_at": r.processed_at.map(|t| t.to_rfc3339()),
                "created_at": r.created_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

/// `POST /admin/carrier_events/{id}/retry`: re-drives a failed (or stuck) event. As idempotent
/// as the first run: a processed event is left alone, and a second re-drive of a pending one
/// only enqueues a job the guards make a no-op.
pub async fn retry_carrier_event(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let log = carrier_events::Log::open(env, ctx.config);
    let row = log.load(id).await?.ok_or(EdgeError::NotFound)?;
    if row.processed_at.is_some() {
        return http::json(200, &json!({ "id": row.id, "status": "processed", "requeued": false }));
    }
    log.clear_failure(std::slice::from_ref(&row)).await?;
    crate::queues::enqueue(env, crate::queues::Job::carrier_event(&row.id)).await?;
    http::json(202, &json!({ "id": row.id, "status": "pending", "requeued": true }))
}

/// `POST /admin/carrier_events/retry?status=failed`: re-drives up to 100 failed events at once.
pub async fn retry_failed_carrier_events(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let params = http::query(&req);
    let state = EventState::from_name(http::given(&params, "status").unwrap_or("failed"));
    if state != Some(EventState::Failed) {
        return Err(EdgeError::invalid("status", "only failed events are re-driven in bulk"));
    }
    let log = carrier_events::Log::open(env, ctx.config);
    let mut rows = Vec::new();
    for listed in log.list(EventState::Failed, None, 100).await? {
        rows.extend(log.load(&listed.id).await?);
    }
    log.clear_failure(&rows).await?;
    let ids: Vec<String> = rows.into_iter().map(|r| r.id).collect();
    let jobs = ids.iter().map(|id| crate::queues::Job::carrier_event(id)).collect();
    crate::queues::enqueue_many(env, jobs).await?;
    http::json(202, &json!({ "requeued": ids.len(), "ids": ids }))
}
