//! `/admin/webhook_deliveries`: failed customer deliveries, and their re-drive.

use crate::api::auth::Ctx;
use serde_json::json;
use worker::{Request, Response};

use super::newest_first;
use crate::api::auth;
use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::deliveries::{self, Redrive};
use crate::store::routes;

/// `GET /admin/webhook_deliveries?status=failed|pending|succeeded&limit=&cursor=`: exhausted
/// (or refused) customer deliveries by default, newest first.
///
/// Paged by (`created_at`, `id`), which never change: `updated_at` moves on every attempt, so a
/// cursor on it would skip or repeat rows that were retried between two pages.
pub async fn list_failed_deliveries(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let params = http::query(&req);
    let status = match http::given(&params, "status") {
        None => deliveries::DeliveryStatus::Failed,
        Some(name) => deliveries::DeliveryStatus::from_name(name)
            .ok_or_else(|| EdgeError::invalid("status", "must be failed, pending or succeeded"))?,
    };
    let limit = http::limit(&params)?;
    let cursor = Cursor::from_params(&params)?;
    let mut rows = Vec::new();
    for scoped in routes::each(env, ctx.config)? {
        rows.extend(deliveries::list(scoped.db(), status, cursor.clone(), limit).await?);
    }
    let rows = newest_first(rows, limit, |d| (d.created_at, &d.id));
    let next = Cursor::after(&rows, limit, |d| (d.created_at, &d.id));
    let data = rows
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "event_id": d.event_id, "endpoint_id": d.endpoint_id, "account_id": d.account_id,
                "attempts": d.attempts, "last_error": d.last_error,
                "created_at": d.created_at.to_rfc3339(), "updated_at": d.updated_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

/// `POST /admin/webhook_deliveries/{id}/retry`: one more attempt of a failed delivery, now.
pub async fn retry_delivery(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    // The delivery's id names no account: it is looked for in each account database.
    for scoped in routes::each(env, ctx.config)? {
        match deliveries::redrive(scoped.db(), id, now()).await? {
            Redrive::Pending => {
                crate::queues::deliver_written(&scoped, vec![id.to_owned()]).await;
                return http::json(202, &json!({ "id": id, "status": "pending" }));
            }
            Redrive::Missing => {}
            Redrive::NotFailed => {
                return Err(EdgeError::Conflict {
                    code: crate::error::Conflict::NotFailed,
                    message: "only a failed delivery is re-driven".into(),
                })
            }
        }
    }
    Err(EdgeError::NotFound)
}
