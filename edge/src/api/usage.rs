//! `GET /v1/usage?from=&to=`: ledger totals per kind.

use crate::api::auth::Ctx;
use exactly_core::Timestamp;
use serde_json::json;
use worker::{Request, Response};

use crate::api::http;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::usage;

use http::time_param;

/// Totals of the caller's account over `[from, to)` (default: everything until now).
pub async fn get(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let params = http::query(&req);
    let from = time_param(&params, "from")?.unwrap_or(Timestamp::from_unix_millis(0));
    let to = time_param(&params, "to")?.unwrap_or_else(|| Timestamp::from_unix_millis(now().unix_millis() + 1));
    if to < from {
        return Err(EdgeError::invalid("to", "must not be before from"));
    }
    let totals = usage::totals(db, &account.id, from, to).await?;
    http::json(
        200,
        &json!({
            "from": from.to_rfc3339(), "to": to.to_rfc3339(),
            "sms_segments": totals.sms_segments, "mms": totals.mms, "call_minutes": totals.call_minutes,
        }),
    )
}
