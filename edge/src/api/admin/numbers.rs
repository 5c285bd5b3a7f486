//! `/admin/numbers`: numbers, each owned by one account, with their ring plans.

use crate::api::auth::Ctx;
use exactly_core::event::Provider;
use exactly_core::ring_plan::{RingPlan, TargetKind, DEFAULT_RING_TIMEOUT_SECS, RING_TIMEOUT_SECS};
use serde::Deserialize;
use serde_json::json;
use worker::{Request, Response};

use crate::api::auth;
use crate::api::e164;
use crate::api::http;
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::{accounts, numbers, routes};

#[derive(Deserialize)]
struct NewNumber {
    account_id: Option<String>,
    phone_number: Option<String>,
    #[serde(default, deserialize_with = "crate::api::http::null_as_default")]
    ring_targets: Vec<String>,
    ring_timeout_secs: Option<serde_json::Value>,
    carrier: Option<String>,
}

/// `POST /admin/numbers` `{account_id, phone_number, ring_targets, ring_timeout_secs?, carrier?}`.
/// Without `carrier`, the number's carrier is the one its first message comes from.
pub async fn create_number(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let body: NewNumber = http::json_body(&mut req).await?;
    let account_id = body.account_id.ok_or_else(|| EdgeError::invalid("account_id", "is required"))?;
    let phone_number =
        e164("phone_number", &body.phone_number.ok_or_else(|| EdgeError::invalid("phone_number", "is required"))?)?;
    for target in &body.ring_targets {
        if TargetKind::of(target) == TargetKind::Phone {
            e164("ring_targets", target)?;
        }
    }
    if !body.ring_targets.is_empty() {
        RingPlan::new(body.ring_targets.clone())
            .map_err(|e| EdgeError::invalid("ring_targets", format!("is not a valid ring plan ({e:?})")))?;
    }
    let ring_timeout_secs = match body.ring_timeout_secs {
        None | Some(serde_json::Value::Null) => DEFAULT_RING_TIMEOUT_SECS,
        Some(value) => value
            .as_u64()
            .and_then(|secs| u32::try_from(secs).ok())
            .filter(|secs| RING_TIMEOUT_SECS.contains(secs))
            .ok_or_else(|| {
                EdgeError::invalid(
                    "ring_timeout_secs",
                    format!("must be a whole number from {} to {}", RING_TIMEOUT_SECS.start(), RING_TIMEOUT_SECS.end()),
                )
            })?,
    };
    let carrier = body
        .carrier
        .map(|name| {
            Provider::from_name(&name).ok_or_else(|| EdgeError::invalid("carrier", "must be telnyx, twilio or plivo"))
        })
        .transpose()?;
    let binding = routes::of_account(env, ctx.config, &account_id).await?;
    let in_db = binding.as_deref().is_none_or(|b| b == crate::bindings::DB);
    let scoped = crate::store::AccountDb::named(env, ctx.config, binding.as_deref())?;
    let db = scoped.db();
    if !accounts::exists(db, &account_id).await? {
        return Err(EdgeError::invalid("account_id", "no such account"));
    }
    let id = new_id("num")?;
    let created = now();
    let new = || numbers::NewNumber {
        id: &id,
        account_id: &account_id,
        number: &phone_number,
        targets: &body.ring_targets,
        ring_timeout_secs,
        carrier: carrier.map(Provider::as_str),
    };
    // Numbers are unique across every account database: claimed in `DB` first, and for an
    // account in `DB` assigned in the same batch.
    let row = if in_db { Some(numbers::create_stmt(db, new(), created, true)?) } else { None };
    let assigned = match routes::claim_number(env, phone_number.as_str(), &account_id, row).await? {
        routes::Claim::Assigned => true,
        routes::Claim::Claimed => numbers::create(db, new(), created).await?,
        routes::Claim::Taken | routes::Claim::Already => false,
    };
    if !assigned {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::NumberTaken,
            message: format!("{phone_number} is already assigned"),
        });
    }
    http::json(
        201,
        &json!({
            "id": id, "account_id": account_id, "phone_number": phone_number.as_str(),
                "ring_targets": body.ring_targets, "ring_timeout_secs": ring_timeout_secs,
                "carrier": carrier.map(Provider::as_str),
            "created_at": created.to_rfc3339(),
        }),
    )
}
