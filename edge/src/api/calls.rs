//! `/v1/calls`: a call with its legs, and the list of calls.

use crate::api::auth::Ctx;
use exactly_core::call::CallStatus;
use worker::{Request, Response};

use crate::api::http::{self as http, Cursor};
use crate::api::{page, with_charge};
use crate::error::EdgeError;
use crate::store::calls;

/// `GET /v1/calls/{id}`: status, legs dialled with their outcomes and times, duration, billed
/// minutes and the charge.
pub async fn get(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let (call, legs, charge) = calls::get_shown(db, &account.id, id).await?.ok_or(EdgeError::NotFound)?;
    http::json(200, &with_charge(call.to_json(&legs), charge))
}

/// `GET /v1/calls?status=&limit=&cursor=`, newest first.
pub async fn list(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let params = http::query(&req);
    let status = http::given(&params, "status")
        .map(|s| {
            CallStatus::from_name(s)
                .ok_or_else(|| EdgeError::invalid("status", "must be ringing, in_progress, completed or missed"))
        })
        .transpose()?;
    let limit = http::limit(&params)?;
    let rows = calls::list(db, &account.id, status, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |c| (c.created_at, &c.id));
    let ids: Vec<&str> = rows.iter().map(|c| c.id.as_str()).collect();
    let legs = calls::legs_of(db, &ids).await?;
    let data = rows.iter().map(|call| call.to_json(legs.get(&call.id).map_or(&[], Vec::as_slice))).collect();
    http::json(200, &page(data, next))
}
