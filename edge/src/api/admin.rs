//! `/admin`: accounts, numbers and the carrier-event dead letters. Bearer `ADMIN_TOKEN`.

use exactly_core::ring::RingPlan;
use serde::Deserialize;
use serde_json::{json, Value};
use worker::{Env, Request, Response};

use crate::api::{e164, page};
use crate::auth;
use crate::bindings;
use crate::carrier_events;
use crate::db::{self, text, time};
use crate::error::EdgeError;
use crate::http::{self, Cursor};
use crate::platform::{new_id, now, random_hex};

fn database(env: &Env) -> Result<worker::D1Database, EdgeError> {
    env.d1(bindings::DB).map_err(|e| EdgeError::platform("DB binding", e))
}

#[derive(Deserialize)]
struct NewAccount {
    #[serde(default)]
    name: Option<String>,
}

/// `POST /admin/accounts` -> `{id, name, api_key}`; the key is shown here once, stored hashed.
pub async fn create_account(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let body: NewAccount = http::json_body(&mut req).await?;
    let name = body.name.unwrap_or_default();
    if name.len() > 200 {
        return Err(EdgeError::invalid("name", "must be at most 200 characters"));
    }
    let id = new_id("acct")?;
    let api_key = format!("sk_{}", random_hex(32)?);
    let created = now();
    db::run(db::stmt(
        &database(env)?,
        "INSERT INTO accounts (id, name, api_key_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        &[text(&id), text(&name), text(&auth::key_hash(&api_key)), time(created)],
    )?)
    .await?;
    http::json(201, &json!({ "id": id, "name": name, "api_key": api_key, "created_at": created.to_rfc3339() }))
}

#[derive(Deserialize)]
struct NewNumber {
    account_id: Option<String>,
    phone_number: Option<String>,
    #[serde(default)]
    ring_targets: Vec<String>,
}

/// `POST /admin/numbers` `{account_id, phone_number, ring_targets}`.
pub async fn create_number(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let body: NewNumber = http::json_body(&mut req).await?;
    let account_id = body.account_id.ok_or_else(|| EdgeError::invalid("account_id", "is required"))?;
    let phone_number = body.phone_number.ok_or_else(|| EdgeError::invalid("phone_number", "is required"))?;
    e164("phone_number", &phone_number)?;
    for target in &body.ring_targets {
        if !target.starts_with("sip:") {
            e164("ring_targets", target)?;
        }
    }
    if !body.ring_targets.is_empty() {
        RingPlan::new(body.ring_targets.clone())
            .map_err(|e| EdgeError::invalid("ring_targets", format!("is not a valid ring plan ({e:?})")))?;
    }
    let db = database(env)?;
    let exists: Option<Value> = db::first(db::stmt(&db, "SELECT id FROM accounts WHERE id = ?1", &[text(&account_id)])?).await?;
    if exists.is_none() {
        return Err(EdgeError::invalid("account_id", "no such account"));
    }
    let id = new_id("num")?;
    let targets = serde_json::to_string(&body.ring_targets).map_err(|e| EdgeError::platform("encode", e))?;
    let created = now();
    let inserted = db::run(db::stmt(
        &db,
        "INSERT INTO phone_numbers (id, account_id, phone_number, ring_targets, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (phone_number) DO NOTHING",
        &[text(&id), text(&account_id), text(&phone_number), text(&targets), time(created)],
    )?)
    .await?;
    if inserted == 0 {
        return Err(EdgeError::Conflict { code: "number_taken", message: format!("{phone_number} is already assigned") });
    }
    http::json(201, &json!({
        "id": id, "account_id": account_id, "phone_number": phone_number, "ring_targets": body.ring_targets,
        "created_at": created.to_rfc3339(),
    }))
}

/// `GET /admin/carrier_events?status=failed|pending|processed&limit=&cursor=`.
pub async fn list_carrier_events(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let state = http::param(&params, "status").unwrap_or("failed");
    if !matches!(state, "failed" | "pending" | "processed") {
        return Err(EdgeError::invalid("status", "must be failed, pending or processed"));
    }
    let limit = http::limit(&params)?;
    let rows = carrier_events::list(&database(env)?, state, Cursor::from_params(&params)?, limit).await?;
    let next = (rows.len() == limit as usize)
        .then(|| rows.last().map(|r| Cursor { created_at: r.created_at as i64, id: r.id.clone() }))
        .flatten();
    let data = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "carrier": r.carrier, "carrier_event_id": r.carrier_event_id, "event_type": r.event_type,
                "status": if r.error.is_some() { "failed" } else if r.processed_at.is_some() { "processed" } else { "pending" },
                "error": r.error, "attempts": r.attempts as i64,
                "processed_at": r.processed_at.map(|t| db::millis(t).to_rfc3339()),
                "created_at": db::millis(r.created_at).to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}
