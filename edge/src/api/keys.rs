//! API keys with a lifecycle and scopes (docs/contract.md §5, "Keys, scopes and portal
//! sessions"): `/v1/api_keys` for the account's own full keys, and the same under
//! `/admin/accounts/{id}/keys` for the operator. Rotation is create-then-revoke.

use crate::api::auth::Ctx;
use exactly_core::access::Scope;
use serde::Deserialize;
use serde_json::json;
use worker::{Env, Request, Response};

use crate::api::http::{self as http, Cursor};
use crate::api::{auth, page};
use crate::error::{Conflict, EdgeError};
use crate::platform::{new_id, now, random_hex};
use crate::store::access::{self as keys, Added, Listed, NewKey, Revoked};

/// How many characters of a new key are kept to tell it apart (`sk_` and 7 of its 64 hex).
const PREFIX_CHARS: usize = 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewKeyBody {
    name: String,
    #[serde(default)]
    scope: Option<String>,
}

/// A new secret key: `sk_` and 64 hex characters.
pub fn new_secret() -> Result<String, EdgeError> {
    Ok(format!("sk_{}", random_hex(32)?))
}

/// What is kept of a key to tell it apart.
pub fn prefix(key: &str) -> &str {
    key.get(..PREFIX_CHARS).unwrap_or(key)
}

fn shown(key: &Listed) -> serde_json::Value {
    json!({
        "id": key.id, "name": key.name, "scope": key.scope, "prefix": key.prefix,
        "created_at": key.created_at.to_rfc3339(),
        "last_used_at": key.last_used_at.map(|t| t.to_rfc3339()),
        "revoked_at": key.revoked_at.map(|t| t.to_rfc3339()),
    })
}

async fn create_for(mut req: Request, env: &Env, account_id: &str) -> Result<Response, EdgeError> {
    let body: NewKeyBody = http::json_body(&mut req).await?;
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(EdgeError::invalid("name", "must be 1 to 100 characters"));
    }
    let scope = match body.scope.as_deref() {
        None => Scope::Full,
        Some(s) => Scope::from_name(s).ok_or_else(|| EdgeError::invalid("scope", "must be full, read or endpoints"))?,
    };
    let secret = new_secret()?;
    let (id, at, hash) = (new_id("key")?, now(), auth::key_hash(&secret));
    let key = NewKey { id: &id, account_id, name, scope, key_hash: &hash, prefix: prefix(&secret), at };
    match keys::create(env, &key).await? {
        Added::Added => {}
        Added::NoAccount => return Err(EdgeError::NotFound),
        Added::Full => {
            return Err(EdgeError::Conflict {
                code: Conflict::KeyLimit,
                message: format!("the account holds {} live keys: revoke one first", keys::MAX_LIVE_KEYS),
            })
        }
    }
    http::json(
        201,
        &json!({
            "id": id, "name": name, "scope": scope.as_str(), "prefix": prefix(&secret), "api_key": secret,
            "created_at": at.to_rfc3339(), "last_used_at": null, "revoked_at": null,
        }),
    )
}

async fn list_for(req: &Request, env: &Env, account_id: &str) -> Result<Response, EdgeError> {
    let params = http::query(req);
    let limit = http::limit(&params)?;
    let rows = keys::list(env, account_id, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |k| (k.created_at, &k.id));
    http::json(200, &page(rows.iter().map(shown).collect(), next))
}

async fn revoke_for(env: &Env, account_id: &str, id: &str, operator: bool) -> Result<Response, EdgeError> {
    match keys::revoke(env, account_id, id, now(), operator).await? {
        Revoked::Key(key) => http::json(200, &shown(&key)),
        Revoked::Missing => Err(EdgeError::NotFound),
        Revoked::LastFull => Err(EdgeError::Conflict {
            code: Conflict::LastFullKey,
            message: "the account's last full key: create another full key first".into(),
        }),
    }
}

/// `POST /v1/api_keys` -> 201 with the key, shown once.
pub async fn create(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    create_for(req, env, &account.id).await
}

/// `GET /v1/api_keys`: the account's keys, revoked ones too, newest first.
pub async fn list(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    list_for(&req, env, &account.id).await
}

/// `DELETE /v1/api_keys/{id}`: revokes the key from this moment (409 `last_full_key` for the
/// account's last full key). Revoking a revoked key answers it as it is.
pub async fn revoke(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    revoke_for(env, &account.id, id, false).await
}

/// `POST /admin/accounts/{id}/keys`.
pub async fn admin_create(req: Request, ctx: &Ctx<'_>, account_id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    create_for(req, env, account_id).await
}

/// `GET /admin/accounts/{id}/keys`.
pub async fn admin_list(req: Request, ctx: &Ctx<'_>, account_id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    list_for(&req, env, account_id).await
}

/// `DELETE /admin/accounts/{id}/keys/{key_id}`: the operator may revoke any key, the last full
/// one included.
pub async fn admin_revoke(req: Request, ctx: &Ctx<'_>, account_id: &str, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    revoke_for(env, account_id, id, true).await
}
