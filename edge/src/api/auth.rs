//! Bearer authentication: the admin token, account API keys and portal sessions (both stored in
//! `DB` as SHA-256 hashes; docs/contract.md §5, "Keys, scopes and portal sessions").

use exactly_core::access::{portal_token, Access, Scope};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use worker::{Env, Request};

use crate::api::http::bearer;
use crate::config;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::access as keys;

/// The account a request acts for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// `acct_...`.
    pub id: String,
}

/// Checks `Authorization: Bearer $ADMIN_TOKEN`, in constant time.
pub fn admin(req: &Request, env: &Env) -> Result<(), EdgeError> {
    let config = config::get(env)?;
    let expected = &config.admin_token;
    let given = bearer(req).ok_or(EdgeError::Unauthorized)?;
    // Compare digests so the comparison does not leak the token's length either.
    let same: bool = Sha256::digest(given.as_bytes()).ct_eq(&Sha256::digest(expected.as_bytes())).into();
    if same {
        crate::api::limits::passed(key_hash(&given), now());
        Ok(())
    } else {
        Err(EdgeError::Unauthorized)
    }
}

/// The SHA-256 (hex) under which an API key or a portal session's secret is stored.
pub use exactly_core::access::secret_hash as key_hash;

/// Who a `/v1` request is: the account, the database it lives in, and what its credential
/// allows.
pub struct Caller {
    pub account_id: String,
    /// The API key's id (`None` for a portal session).
    pub key_id: Option<String>,
    /// The account's database (`None`: `DB`).
    pub binding: Option<String>,
    pub access: Access,
}

/// The caller whose API key or portal session the bearer token is; 401 for none, a revoked key
/// or an expired session.
pub async fn caller(req: &web_sys::Request, env: &Env) -> Result<Caller, EdgeError> {
    let header = req.headers().get("authorization").ok().flatten();
    let token = header.as_deref().and_then(crate::api::http::bearer_of).ok_or(EdgeError::Unauthorized)?;
    let root = crate::store::d1(env, crate::bindings::DB)?;
    let at = now();
    if let Some((id, secret)) = portal_token(&token) {
        let session = keys::session(&root, id).await?.ok_or(EdgeError::Unauthorized)?;
        let same: bool = key_hash(secret).as_bytes().ct_eq(session.secret_hash.as_bytes()).into();
        if !same || session.expires_at <= at {
            return Err(EdgeError::Unauthorized);
        }
        let endpoints = match session.endpoint_ids.as_deref() {
            Some(ids) => Some(
                serde_json::from_str::<Vec<String>>(ids)
                    .map_err(|e| EdgeError::unavailable("store", format!("a portal session's endpoints: {e}")))?,
            ),
            None => None,
        };
        let access = Access::Portal { read_only: session.read_only, endpoints };
        crate::api::limits::passed(key_hash(&token), at);
        return Ok(Caller { account_id: session.account_id, key_id: None, binding: session.binding, access });
    }
    // Nothing shaped otherwise is ever a key: refused without a read.
    if !exactly_core::access::key_shaped(&token) {
        return Err(EdgeError::Unauthorized);
    }
    let hash = key_hash(&token);
    let key = keys::live_key(&root, &hash).await?.ok_or(EdgeError::Unauthorized)?;
    let scope = Scope::from_name(&key.scope).ok_or_else(|| {
        EdgeError::unavailable("store", format!("key {} has the unknown scope {}", key.id, key.scope))
    })?;
    if keys::stale(key.last_used_at, at) {
        // When a key was last used is for people deciding what to revoke; a request never fails
        // for want of it.
        if let Err(e) = keys::touch(&root, &key.id, at).await {
            worker::console_error!("{}", serde_json::json!({"key": key.id, "last_used": e.to_string()}));
        }
    }
    crate::api::limits::passed(hash, at);
    Ok(Caller { account_id: key.account_id, key_id: Some(key.id), binding: key.binding, access: Access::Key(scope) })
}

/// What a caller may do, as `GET /v1/account` shows it (`access`) and as a request's bindings
/// carry it to the handlers.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Described {
    ApiKey { scope: String, key_id: String },
    PortalSession { read_only: bool, endpoint_ids: Option<Vec<String>> },
}

fn described(caller: &Caller) -> Described {
    match &caller.access {
        Access::Key(scope) => {
            Described::ApiKey { scope: scope.as_str().to_owned(), key_id: caller.key_id.clone().unwrap_or_default() }
        }
        Access::Portal { read_only, endpoints } => {
            Described::PortalSession { read_only: *read_only, endpoint_ids: endpoints.clone() }
        }
    }
}

/// The bindings a `/v1` request runs with: those of the caller's account database
/// (docs/scaling.md, "Accounts across databases"), marked with the account and with what the
/// caller may do.
pub fn scope(env: &Env, caller: &Caller) -> Result<Env, EdgeError> {
    let scoped = crate::store::routes::scope(env, caller.binding.clone())?;
    let marked = serde_json::to_string(&described(caller))
        .map_err(|e| EdgeError::unavailable("store", format!("describe access: {e}")))?;
    crate::store::with_account(&scoped, &caller.account_id, &marked)
}

/// The account the request's caller acts for, as [`scope`] marked it.
pub async fn account(_req: &Request, env: &Env) -> Result<Account, EdgeError> {
    crate::store::routed_account(env).map(|id| Account { id }).ok_or(EdgeError::Unauthorized)
}

fn marked(env: &Env) -> Option<Described> {
    serde_json::from_str(&crate::store::routed_access(env)?).ok()
}

/// What the caller may do, as [`scope`] marked it.
pub fn access(env: &Env) -> serde_json::Value {
    marked(env).and_then(|d| serde_json::to_value(d).ok()).unwrap_or(serde_json::Value::Null)
}

/// The id of the caller's API key (`None` for a portal session).
pub fn key_id(env: &Env) -> Option<String> {
    match marked(env) {
        Some(Described::ApiKey { key_id, .. }) => Some(key_id),
        _ => None,
    }
}

/// The endpoints the caller reaches, when it reaches only some (a limited portal session). A
/// caller whose access cannot be read reaches none.
pub fn endpoints(env: &Env) -> Option<Vec<String>> {
    match marked(env) {
        Some(Described::ApiKey { .. }) => None,
        Some(Described::PortalSession { endpoint_ids, .. }) => endpoint_ids,
        None => Some(Vec::new()),
    }
}
