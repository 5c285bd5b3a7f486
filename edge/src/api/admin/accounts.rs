//! `/admin/accounts`: accounts, with their first key, and key rotation.

use crate::api::auth::Ctx;
use serde::Deserialize;
use serde_json::json;
use worker::{Request, Response};

use super::newest_first;
use crate::api::auth;
use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::{access, accounts, routes};

#[derive(Deserialize)]
struct NewAccount {
    #[serde(default)]
    name: Option<String>,
}

/// `POST /admin/accounts` -> `{id, name, api_key}`; the key is shown here once, stored hashed.
pub async fn create_account(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let body: NewAccount = http::json_body(&mut req).await?;
    let name = body.name.unwrap_or_default();
    if name.len() > 200 {
        return Err(EdgeError::invalid("name", "must be at most 200 characters"));
    }
    let id = new_id("acct")?;
    let api_key = crate::api::keys::new_secret()?;
    let created = now();
    // The route and the first key first (docs/scaling.md, "Accounts across databases"): until
    // the account row is written, the key leads to no account.
    let key_hash = auth::key_hash(&api_key);
    let root = crate::store::d1(env, crate::bindings::DB)?;
    let key_id = new_id("key")?;
    let key = access::NewKey {
        id: &key_id,
        account_id: &id,
        name: "default",
        scope: exactly_core::access::Scope::Full,
        key_hash: &key_hash,
        prefix: crate::api::keys::prefix(&api_key),
        at: created,
    };
    let binding = routes::place_account(env, ctx.config, &id, &key_hash, created, access::insert(&root, &key)?).await?;
    let scoped = crate::store::AccountDb::new(env, ctx.config, &binding)?;
    accounts::create(scoped.db(), &id, &name, &key_hash, created).await?;
    http::json(201, &json!({ "id": id, "name": name, "api_key": api_key, "created_at": created.to_rfc3339() }))
}

/// `POST /admin/accounts/{id}/rotate_key` -> `{id, api_key}`: a new full API key for the
/// account, shown once, and every other key of the account revoked in the same batch: from the
/// moment this answers only the new key works (docs/security.md, "Rotating each secret"). A
/// rotation without an outage is create-then-revoke (`/v1/api_keys`). 404 for no such customer
/// account.
pub async fn rotate_account_key(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let api_key = crate::api::keys::new_secret()?;
    let (key_id, hash) = (new_id("key")?, auth::key_hash(&api_key));
    let key = access::NewKey {
        id: &key_id,
        account_id: id,
        name: "rotated",
        scope: exactly_core::access::Scope::Full,
        key_hash: &hash,
        prefix: crate::api::keys::prefix(&api_key),
        at: now(),
    };
    if !access::replace_all(env, &key).await? {
        return Err(EdgeError::NotFound);
    }
    worker::console_log!("{}", json!({"admin": "rotate account key", "account": id}));
    http::json(200, &json!({ "id": id, "api_key": api_key }))
}

/// `GET /admin/accounts?limit=&cursor=`: the accounts with their numbers, newest first.
pub async fn list_accounts(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let cursor = Cursor::from_params(&params)?;
    let mut rows = Vec::new();
    for scoped in routes::each(env, ctx.config)? {
        rows.extend(accounts::list(scoped.db(), cursor.clone(), limit).await?);
    }
    let rows = newest_first(rows, limit, |a| (a.created_at, &a.id));
    let next = Cursor::after(&rows, limit, |a| (a.created_at, &a.id));
    let data = rows
        .iter()
        .map(|a| {
            let numbers: serde_json::Value = serde_json::from_slice(a.numbers.as_bytes()).unwrap_or_else(|_| json!([]));
            json!({
                "id": a.id, "name": a.name, "numbers": numbers,
                "created_at": a.created_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}
