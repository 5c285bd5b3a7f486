//! `/v1/webhook_endpoints`: where an account's customer events are delivered.

use exactly_core::endpoint::EndpointUrl;
use exactly_core::webhook::{SigningSecret, EVENT_TYPES};
use serde::Deserialize;
use serde_json::{json, Value};
use worker::{D1Database, Env, Request, Response};

use crate::api::page;
use crate::auth;
use crate::config;
use crate::db::{self, int, text, time};
use crate::error::EdgeError;
use crate::http::{self, Cursor};
use crate::platform::{new_id, now};

#[derive(Debug, Deserialize)]
struct Row {
    id: String,
    url: String,
    event_types: String,
    enabled: f64,
    disabled_reason: Option<String>,
    consecutive_failures: f64,
    created_at: f64,
    updated_at: f64,
}

const COLUMNS: &str = "id, url, event_types, enabled, disabled_reason, consecutive_failures, created_at, updated_at";

impl Row {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "url": self.url,
            "event_types": serde_json::from_str::<Value>(&self.event_types).unwrap_or(Value::Null),
            "enabled": self.enabled == 1.0,
            "disabled_reason": self.disabled_reason,
            "consecutive_failures": self.consecutive_failures as i64,
            "created_at": db::millis(self.created_at).to_rfc3339(),
            "updated_at": db::millis(self.updated_at).to_rfc3339(),
        })
    }
}


/// Checks `url` as `fetch` will parse it and returns the normalized form, which is what is
/// stored: the text checked here is the text every attempt sends to.
fn check_url(env: &Env, url: &str) -> Result<String, EdgeError> {
    let allow_private = config::get(env)?.allow_private_endpoints;
    EndpointUrl::parse(url, allow_private)
        .map(|parsed| parsed.as_str().to_owned())
        .map_err(|problem| EdgeError::invalid("url", problem.message()))
}

fn check_types(types: &[String]) -> Result<String, EdgeError> {
    if types.is_empty() {
        return Err(EdgeError::invalid("event_types", "must list at least one event type"));
    }
    if let Some(unknown) = types.iter().find(|t| !EVENT_TYPES.contains(&t.as_str())) {
        return Err(EdgeError::invalid("event_types", format!("unknown event type {unknown}; known: {}", EVENT_TYPES.join(", "))));
    }
    let mut unique = types.to_vec();
    unique.sort();
    unique.dedup();
    serde_json::to_string(&unique).map_err(|e| EdgeError::platform("encode", e))
}

async fn find(db: &D1Database, account_id: &str, id: &str) -> Result<Row, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM webhook_endpoints WHERE id = ?1 AND account_id = ?2"), &[text(id), text(account_id)])?)
        .await?
        .ok_or(EdgeError::NotFound)
}

#[derive(Deserialize)]
struct NewEndpoint {
    url: Option<String>,
    event_types: Option<Vec<String>>,
}

/// `POST /v1/webhook_endpoints` `{url, event_types}` -> the endpoint and its `whsec_` secret
/// (32 random bytes), shown here once.
pub async fn create(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let body: NewEndpoint = http::json_body(&mut req).await?;
    let url = check_url(env, &body.url.ok_or_else(|| EdgeError::invalid("url", "is required"))?)?;
    let types = check_types(&body.event_types.ok_or_else(|| EdgeError::invalid("event_types", "is required"))?)?;
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let id = new_id("ep")?;
    let created = now();
    db::run(db::stmt(
        &db,
        "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        &[text(&id), text(&account.id), text(&url), text(&types), text(&secret), time(created)],
    )?)
    .await?;
    let mut shown = find(&db, &account.id, &id).await?.to_json();
    shown["secret"] = json!(secret);
    http::json(201, &shown)
}

/// `GET /v1/webhook_endpoints?limit=&cursor=`.
pub async fn list(req: Request, env: &Env) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let (at, after) = Cursor::args(&Cursor::from_params(&params)?);
    let rows: Vec<Row> = db::all(db::stmt(
        &db,
        &format!(
            "SELECT {COLUMNS} FROM webhook_endpoints WHERE account_id = ?1
               AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
             ORDER BY created_at DESC, id DESC LIMIT ?4"
        ),
        &[text(&account.id), at, after, int(i64::from(limit))],
    )?)
    .await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    http::json(200, &page(rows.iter().map(Row::to_json).collect(), next))
}

/// `GET /v1/webhook_endpoints/{id}` (without the secret).
pub async fn get(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    http::json(200, &find(&db, &account.id, id).await?.to_json())
}

#[derive(Deserialize)]
struct Patch {
    url: Option<String>,
    event_types: Option<Vec<String>>,
    enabled: Option<bool>,
}

/// `PATCH /v1/webhook_endpoints/{id}` `{url?, event_types?, enabled?}`. Enabling again clears
/// the failure count and the reason it was disabled.
pub async fn update(mut req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let patch: Patch = http::json_body(&mut req).await?;
    let current = find(&db, &account.id, id).await?;
    // An unchanged URL is checked again too: a row written before a rule cannot keep it.
    let url = check_url(env, &patch.url.unwrap_or(current.url))?;
    let types = match patch.event_types {
        Some(types) => check_types(&types)?,
        None => current.event_types,
    };
    let changed = now();
    let enabled = patch.enabled.map_or(wasm_bindgen::JsValue::NULL, |e| int(i64::from(e)));
    db::run(db::stmt(
        &db,
        "UPDATE webhook_endpoints SET url = ?3, event_types = ?4, updated_at = ?5,
             consecutive_failures = CASE WHEN ?6 = 1 AND enabled = 0 THEN 0 ELSE consecutive_failures END,
             disabled_reason = CASE WHEN ?6 = 1 THEN NULL WHEN ?6 = 0 THEN 'disabled by the account' ELSE disabled_reason END,
             enabled = COALESCE(?6, enabled)
         WHERE id = ?1 AND account_id = ?2",
        &[text(id), text(&account.id), text(&url), text(&types), time(changed), enabled],
    )?)
    .await?;
    http::json(200, &find(&db, &account.id, id).await?.to_json())
}

/// `DELETE /v1/webhook_endpoints/{id}`: 204. Its pending deliveries fail at their next attempt.
pub async fn delete(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    let removed = db::run(db::stmt(&db, "DELETE FROM webhook_endpoints WHERE id = ?1 AND account_id = ?2", &[text(id), text(&account.id)])?).await?;
    if removed == 0 {
        return Err(EdgeError::NotFound);
    }
    Ok(Response::empty().map_err(|e| EdgeError::platform("respond", e))?.with_status(204))
}

/// How long the previous secret keeps signing after a rotation.
const ROTATION_WINDOW_MILLIS: i64 = 24 * 3600 * 1000;

/// `POST /v1/webhook_endpoints/{id}/rotate_secret` -> `{secret}`: a new `whsec_` secret. For 24
/// hours every delivery carries a signature under each of the two secrets (space-separated in
/// `webhook-signature`, as Standard Webhooks allows), so receivers switch without downtime.
pub async fn rotate_secret(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::db::database(env)?;
    let account = auth::account(&req, &db).await?;
    find(&db, &account.id, id).await?;
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let at = now();
    db::run(db::stmt(
        &db,
        "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = ?4, secret = ?3, updated_at = ?5
         WHERE id = ?1 AND account_id = ?2",
        &[text(id), text(&account.id), text(&secret), int(at.unix_millis() + ROTATION_WINDOW_MILLIS), time(at)],
    )?)
    .await?;
    let mut shown = find(&db, &account.id, id).await?.to_json();
    shown["secret"] = json!(secret);
    http::json(200, &shown)
}
