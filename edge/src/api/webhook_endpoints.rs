//! `/v1/webhook_endpoints`: where an account's customer events are delivered.

use exactly_core::endpoint::EndpointUrl;
use exactly_core::webhook::{SigningSecret, EVENT_TYPES};
use serde::Deserialize;
use serde_json::json;
use worker::{D1Database, Env, Request, Response};

use crate::api::auth;
use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::config;
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::endpoints::{self, Endpoint};

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
        return Err(EdgeError::invalid(
            "event_types",
            format!("unknown event type {unknown}; known: {}", EVENT_TYPES.join(", ")),
        ));
    }
    let mut unique = types.to_vec();
    unique.sort();
    unique.dedup();
    serde_json::to_string(&unique).map_err(|e| EdgeError::platform("encode", e))
}

async fn find(db: &D1Database, account_id: &str, id: &str) -> Result<Endpoint, EdgeError> {
    endpoints::get(db, account_id, id).await?.ok_or(EdgeError::NotFound)
}

#[derive(Deserialize)]
struct NewEndpoint {
    url: Option<String>,
    event_types: Option<Vec<String>>,
}

/// `POST /v1/webhook_endpoints` `{url, event_types}` -> the endpoint and its `whsec_` secret
/// (32 random bytes), shown here once.
pub async fn create(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    let db = crate::store::database(env)?;
    let account = auth::account(&req, &db).await?;
    let body: NewEndpoint = http::json_body(&mut req).await?;
    let url = check_url(env, &body.url.ok_or_else(|| EdgeError::invalid("url", "is required"))?)?;
    let types = check_types(&body.event_types.ok_or_else(|| EdgeError::invalid("event_types", "is required"))?)?;
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let id = new_id("ep")?;
    let created = now();
    endpoints::create(&db, &id, &account.id, &url, &types, &secret, created).await?;
    let mut shown = find(&db, &account.id, &id).await?.to_json();
    shown["secret"] = json!(secret);
    http::json(201, &shown)
}

/// `GET /v1/webhook_endpoints?limit=&cursor=`.
pub async fn list(req: Request, env: &Env) -> Result<Response, EdgeError> {
    let db = crate::store::database(env)?;
    let account = auth::account(&req, &db).await?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let rows = endpoints::list(&db, &account.id, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    http::json(200, &page(rows.iter().map(Endpoint::to_json).collect(), next))
}

/// `GET /v1/webhook_endpoints/{id}` (without the secret).
pub async fn get(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::store::database(env)?;
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
    let db = crate::store::database(env)?;
    let account = auth::account(&req, &db).await?;
    let patch: Patch = http::json_body(&mut req).await?;
    let current = find(&db, &account.id, id).await?;
    // An unchanged URL is checked again too: a row written before a rule cannot keep it.
    let url = check_url(env, &patch.url.unwrap_or(current.url))?;
    let types = match patch.event_types {
        Some(types) => check_types(&types)?,
        None => current.event_types,
    };
    endpoints::update(&db, &account.id, id, &url, &types, patch.enabled, now()).await?;
    http::json(200, &find(&db, &account.id, id).await?.to_json())
}

/// `DELETE /v1/webhook_endpoints/{id}`: 204. Its pending deliveries fail at their next attempt.
pub async fn delete(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    let db = crate::store::database(env)?;
    let account = auth::account(&req, &db).await?;
    if !endpoints::delete(&db, &account.id, id).await? {
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
    let db = crate::store::database(env)?;
    let account = auth::account(&req, &db).await?;
    find(&db, &account.id, id).await?;
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let at = now();
    let previous_until = exactly_core::Timestamp::from_unix_millis(at.unix_millis() + ROTATION_WINDOW_MILLIS);
    endpoints::rotate_secret(&db, &account.id, id, &secret, previous_until, at).await?;
    let mut shown = find(&db, &account.id, id).await?.to_json();
    shown["secret"] = json!(secret);
    http::json(200, &shown)
}
