//! The delivery log of an endpoint (docs/contract.md §6, "The delivery log"): every attempt with
//! what was sent and what came back, filtered; and "retry all failed", one bounded operation with
//! its progress.

use crate::api::auth::Ctx;
use exactly_core::headers::REDACTED;
use serde::Deserialize;
use serde_json::json;
use worker::{Request, Response};

use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::deliveries::retries::{self, NewRetry, MAX_PER_RETRY};
use crate::store::deliveries::{self, DeliveryStatus, LogFilter};
use crate::store::endpoints::Endpoint;

/// The caller's account and its endpoint `id`; 404 for another account's.
async fn endpoint(ctx: &Ctx<'_>, id: &str) -> Result<(String, Endpoint), EdgeError> {
    let account = ctx.account()?;
    let found = crate::api::webhook_endpoints::find(ctx.db()?, &account.id, id).await?;
    Ok((account.id, found))
}

fn stored_headers(text: &str) -> Option<serde_json::Value> {
    serde_json::from_slice(text.as_bytes()).ok()
}

/// The log's filter from a query: `status`, `event_type`, `since`, `until`, `resource_id`,
/// `webhook_id`.
fn filter_of(params: &[(String, String)]) -> Result<LogFilter, EdgeError> {
    let status = match http::given(params, "status") {
        None => None,
        Some(name) => Some(
            DeliveryStatus::from_name(name)
                .ok_or_else(|| EdgeError::invalid("status", "must be pending, succeeded, failed or filtered"))?,
        ),
    };
    let owned = |name| http::param(params, name).map(str::to_owned);
    Ok(LogFilter {
        status,
        event_type: owned("event_type"),
        since: http::time_param(params, "since")?,
        until: http::time_param(params, "until")?,
        resource_id: owned("resource_id"),
        event_id: owned("webhook_id"),
    })
}

/// `GET /v1/webhook_endpoints/{id}/attempts?status=&event_type=&since=&until=&resource_id=&webhook_id=&limit=&cursor=`:
/// every attempt to this endpoint, newest first: its outcome (status, latency, error, the
/// response's headers and first 1 KiB), and the request as it was sent (headers, signature and
/// body; the endpoint's own header values read `[redacted]`).
pub async fn attempts(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let (_, endpoint) = endpoint(ctx, id).await?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let filter = filter_of(&params)?;
    let db = ctx.db()?;
    let rows =
        deliveries::attempts_of_endpoint(db, &endpoint.id, &filter, Cursor::from_params(&params)?, limit).await?;
    let next = if rows.len() == limit as usize {
        rows.last().map(|a| Cursor { created_at: a.attempted_at.unix_millis(), id: a.id.to_string() })
    } else {
        None
    };
    let custom: Vec<&str> = endpoint.headers.names().collect();
    let data = rows
        .iter()
        .map(|a| {
            let mut sent = serde_json::Map::new();
            for name in &custom {
                sent.insert((*name).to_owned(), json!(REDACTED));
            }
            sent.insert("content-type".into(), json!("application/json"));
            sent.insert("user-agent".into(), json!("exactly-webhooks/1"));
            sent.insert("webhook-id".into(), json!(a.event_id));
            sent.insert("webhook-timestamp".into(), json!(a.webhook_timestamp.to_string()));
            sent.insert("webhook-signature".into(), json!(a.request_signature));
            json!({
                "delivery_id": a.delivery_id, "event_id": a.event_id, "event_type": a.event_type,
                "resource_id": a.resource_id, "delivery_status": a.delivery_status.as_str(), "attempt": a.attempt,
                "attempted_at": a.attempted_at.to_rfc3339(),
                "status_code": a.status_code, "latency_ms": a.latency_ms, "error": a.error,
                "response_body": a.response_body,
                "response_headers": a.response_headers.as_deref().and_then(stored_headers),
                "request": { "method": "POST", "url": endpoint.url, "headers": sent, "body": a.payload },
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    resource_id: Option<String>,
    #[serde(default)]
    webhook_id: Option<String>,
}

fn time_field(name: &'static str, text: Option<&str>) -> Result<Option<exactly_core::Timestamp>, EdgeError> {
    text.map(|t| {
        exactly_core::Timestamp::parse_rfc3339(t).ok_or_else(|| EdgeError::invalid(name, "must be an RFC 3339 time"))
    })
    .transpose()
}

fn shown(p: &retries::Progress) -> serde_json::Value {
    let filter: serde_json::Value = serde_json::from_str(&p.filter).unwrap_or_else(|_| json!({}));
    json!({
        "id": p.id, "endpoint_id": p.endpoint_id, "filter": filter, "total": p.total,
        "pending": p.pending, "succeeded": p.succeeded, "failed": p.failed,
        "status": if p.pending == 0 { "done" } else { "running" },
        "limit": MAX_PER_RETRY, "created_at": p.created_at.to_rfc3339(),
    })
}

/// `POST /v1/webhook_endpoints/{id}/retries` `{event_type?, since?, until?, resource_id?, webhook_id?}`
/// -> 202: re-sends the endpoint's failed deliveries the filter keeps (by when each was created),
/// at most 1,000, oldest first, each once; the answer is the operation, its progress at
/// `GET .../retries/{retry_id}`.
pub async fn create(mut req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let (account_id, endpoint) = endpoint(ctx, id).await?;
    let body: RetryBody = http::optional_json_body(&mut req).await?;
    let filter = LogFilter {
        status: Some(DeliveryStatus::Failed),
        event_type: body.event_type.clone(),
        since: time_field("since", body.since.as_deref())?,
        until: time_field("until", body.until.as_deref())?,
        resource_id: body.resource_id.clone(),
        event_id: body.webhook_id.clone(),
    };
    let filter_json = json!({
        "event_type": body.event_type, "since": filter.since.map(|t| t.to_rfc3339()),
        "until": filter.until.map(|t| t.to_rfc3339()), "resource_id": body.resource_id,
        "webhook_id": body.webhook_id,
    })
    .to_string();
    let retry_id = new_id("rtr")?;
    let retry = NewRetry {
        id: &retry_id,
        account_id: &account_id,
        endpoint_id: &endpoint.id,
        filter_json: &filter_json,
        at: now(),
    };
    let db = ctx.db()?;
    let taken = retries::start(db, &retry, &filter).await?;
    // A paused or disabled endpoint holds them until it is resumed; a send lost here is found
    // by the sweeper once it is overdue.
    if endpoint.enabled && !endpoint.paused {
        crate::queues::deliver_written(ctx.account_db()?, taken).await;
    }
    let progress = retries::progress(db, &endpoint.id, &retry_id).await?.ok_or(EdgeError::NotFound)?;
    http::json(202, &shown(&progress))
}

/// `GET /v1/webhook_endpoints/{id}/retries/{retry_id}`: the operation and its progress.
pub async fn get(_req: Request, ctx: &Ctx<'_>, id: &str, retry_id: &str) -> Result<Response, EdgeError> {
    let (_, endpoint) = endpoint(ctx, id).await?;
    let db = ctx.db()?;
    let progress = retries::progress(db, &endpoint.id, retry_id).await?.ok_or(EdgeError::NotFound)?;
    http::json(200, &shown(&progress))
}
