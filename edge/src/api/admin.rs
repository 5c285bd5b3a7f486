//! `/admin`: accounts, numbers and the carrier-event dead letters. Bearer `ADMIN_TOKEN`.

use exactly_core::ring::RingPlan;
use serde::Deserialize;
use serde_json::{json, Value};
use worker::{Env, Request, Response};

use crate::api::{e164, page};
use crate::auth;
use crate::carrier_events;
use crate::db::{self, text, time};
use crate::error::EdgeError;
use crate::http::{self, Cursor};
use crate::platform::{new_id, now, random_hex};


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
        &crate::db::database(env)?,
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
    let db = crate::db::database(env)?;
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
    let rows = carrier_events::list(&crate::db::database(env)?, state, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
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

/// `POST /admin/carrier_events/{id}/retry`: re-drives a failed (or stuck) event. As idempotent
/// as the first run: a processed event is left alone, and a second re-drive of a pending one
/// only enqueues a job the guards make a no-op.
pub async fn retry_carrier_event(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let db = crate::db::database(env)?;
    let row = carrier_events::load(&db, id).await?.ok_or(EdgeError::NotFound)?;
    if row.processed_at.is_some() {
        return http::json(200, &json!({ "id": row.id, "status": "processed", "requeued": false }));
    }
    carrier_events::clear_failure(&db, std::slice::from_ref(&row.id)).await?;
    crate::jobs::enqueue(env, crate::jobs::Job::CarrierEvent { id: row.id.clone() }).await?;
    http::json(202, &json!({ "id": row.id, "status": "pending", "requeued": true }))
}

/// `POST /admin/carrier_events/retry?status=failed`: re-drives up to 100 failed events at once.
pub async fn retry_failed_carrier_events(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    if http::param(&params, "status").unwrap_or("failed") != "failed" {
        return Err(EdgeError::invalid("status", "only failed events are re-driven in bulk"));
    }
    let db = crate::db::database(env)?;
    let ids: Vec<String> = carrier_events::list(&db, "failed", None, 100).await?.into_iter().map(|r| r.id).collect();
    carrier_events::clear_failure(&db, &ids).await?;
    let jobs = ids.iter().map(|id| crate::jobs::Job::CarrierEvent { id: id.clone() }).collect();
    crate::jobs::enqueue_many(env, jobs).await?;
    http::json(202, &json!({ "requeued": ids.len(), "ids": ids }))
}

#[derive(Deserialize)]
struct ListedDelivery {
    id: String,
    event_id: String,
    endpoint_id: String,
    account_id: String,
    attempts: f64,
    last_error: Option<String>,
    created_at: f64,
    updated_at: f64,
}

/// `GET /admin/webhook_deliveries?status=failed|pending|succeeded&limit=&cursor=`: exhausted
/// (or refused) customer deliveries by default, newest first.
///
/// Paged by (`created_at`, `id`), which never change: `updated_at` moves on every attempt, so a
/// cursor on it would skip or repeat rows that were retried between two pages.
pub async fn list_failed_deliveries(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let status = http::param(&params, "status").unwrap_or("failed");
    if !matches!(status, "failed" | "pending" | "succeeded") {
        return Err(EdgeError::invalid("status", "must be failed, pending or succeeded"));
    }
    let limit = http::limit(&params)?;
    let (at, after) = Cursor::args(&Cursor::from_params(&params)?);
    let rows: Vec<ListedDelivery> = db::all(db::stmt(
        &crate::db::database(env)?,
        "SELECT id, event_id, endpoint_id, account_id, attempts, last_error, created_at, updated_at FROM webhook_deliveries
         WHERE status = ?1 AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
         ORDER BY created_at DESC, id DESC LIMIT ?4",
        &[text(status), at, after, db::int(i64::from(limit))],
    )?)
    .await?;
    let next = Cursor::after(&rows, limit, |d| (d.created_at, &d.id));
    let data = rows
        .iter()
        .map(|d| json!({
            "id": d.id, "event_id": d.event_id, "endpoint_id": d.endpoint_id, "account_id": d.account_id,
            "attempts": d.attempts as i64, "last_error": d.last_error,
            "created_at": db::millis(d.created_at).to_rfc3339(), "updated_at": db::millis(d.updated_at).to_rfc3339(),
        }))
        .collect();
    http::json(200, &page(data, next))
}

/// `POST /admin/webhook_deliveries/{id}/retry`: one more attempt of a failed delivery, now.
pub async fn retry_delivery(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let db = crate::db::database(env)?;
    let changed = db::run(db::stmt(
        &db,
        "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?2, updated_at = ?2 WHERE id = ?1 AND status = 'failed'",
        &[text(id), time(now())],
    )?)
    .await?;
    if changed == 0 {
        let exists: Option<Value> = db::first(db::stmt(&db, "SELECT id FROM webhook_deliveries WHERE id = ?1", &[text(id)])?).await?;
        return match exists {
            None => Err(EdgeError::NotFound),
            Some(_) => Err(EdgeError::Conflict { code: "not_failed", message: "only a failed delivery is re-driven".into() }),
        };
    }
    crate::deliveries::enqueue_many(env, vec![id.to_owned()]).await?;
    http::json(202, &json!({ "id": id, "status": "pending" }))
}
