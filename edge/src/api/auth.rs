//! Bearer authentication: the admin token, account API keys and portal sessions (both stored in
//! `DB` as SHA-256 hashes; docs/contract.md §5, "Keys, scopes and portal sessions").

use exactly_core::access::{portal_token, Access, Scope};
use std::rc::Rc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use worker::{Env, Request};

use crate::config::Config;
use crate::error::{EdgeError, Refused};
use crate::platform::now;
use crate::store::access as keys;
use crate::store::AccountDb;

/// The account a request acts for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// `acct_...`.
    pub id: String,
}

/// Checks `Authorization: Bearer $ADMIN_TOKEN`, in constant time.
pub fn admin(req: &Request, config: &Config) -> Result<(), EdgeError> {
    let expected = &config.admin_token;
    let header = req.headers().get("authorization").ok().flatten();
    let given = bearer_token(header.as_deref())?;
    if same_token(&given, expected) {
        crate::api::limits::passed(key_hash(&given), now());
        Ok(())
    } else if portal_token(&given).is_some() || exactly_core::access::key_shaped(&given) {
        Err(EdgeError::Unauthorized(Refused::AccountKeyOnAdmin))
    } else {
        Err(EdgeError::Unauthorized(Refused::NotTheAdminToken))
    }
}

/// The bearer token of an `Authorization` header; 401 saying which is wrong when there is none.
fn bearer_token(header: Option<&str>) -> Result<String, EdgeError> {
    let header = header.ok_or(EdgeError::Unauthorized(Refused::NoHeader))?;
    crate::api::http::bearer_of(header).ok_or(EdgeError::Unauthorized(Refused::NotBearer))
}

/// Whether `given` is `expected`, in constant time: digests are compared, so the comparison
/// does not leak the token's length either.
fn same_token(given: &str, expected: &str) -> bool {
    Sha256::digest(given.as_bytes()).ct_eq(&Sha256::digest(expected.as_bytes())).into()
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
pub async fn caller(req: &web_sys::Request, env: &Env, config: &Config) -> Result<Caller, EdgeError> {
    let header = req.headers().get("authorization").ok().flatten();
    let token = bearer_token(header.as_deref())?;
    let root = crate::store::d1(env, crate::bindings::DB)?;
    let at = now();
    if let Some((id, secret)) = portal_token(&token) {
        let session = keys::session(&root, id).await?.ok_or(EdgeError::Unauthorized(Refused::NotASession))?;
        let same: bool = key_hash(secret).as_bytes().ct_eq(session.secret_hash.as_bytes()).into();
        if !same || session.expires_at <= at {
            return Err(EdgeError::Unauthorized(Refused::NotASession));
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
        let admin = same_token(&token, &config.admin_token);
        let why = if admin { Refused::AdminTokenOnV1 } else { Refused::NotAKey };
        return Err(EdgeError::Unauthorized(why));
    }
    let hash = key_hash(&token);
    let key = keys::live_key(&root, &hash).await?.ok_or(EdgeError::Unauthorized(Refused::NotAKey))?;
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

/// What a caller may do, as `GET /v1/account` shows it (`access`).
#[derive(serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Described<'a> {
    ApiKey { scope: &'static str, key_id: &'a str },
    PortalSession { read_only: bool, endpoint_ids: Option<&'a [String]> },
}

/// What one API request runs with, built once where it is routed and handed to its handler:
/// the worker's bindings and, for `/v1`, who the caller is and the caller's account database
/// (docs/scaling.md, "Accounts across databases"), in the request's D1 session.
pub struct Ctx<'a> {
    pub env: &'a Env,
    /// The configuration, read once for the request.
    pub config: &'a Rc<Config>,
    /// The `/v1` caller; `None` for `/admin`, pages and signed media links.
    pub caller: Option<&'a Caller>,
    /// The `/v1` caller's account database; `None` where there is no caller.
    pub database: Option<&'a AccountDb>,
}

impl Ctx<'_> {
    /// The `/v1` caller's account database; 401 outside `/v1`.
    pub fn account_db(&self) -> Result<&AccountDb, EdgeError> {
        self.database.ok_or(EdgeError::Unauthorized(Refused::NotAKey))
    }

    /// The `/v1` caller's account database's handle (the request's session over it).
    pub fn db(&self) -> Result<&worker::D1Database, EdgeError> {
        Ok(self.account_db()?.db())
    }

    /// The account the `/v1` caller acts for; 401 outside `/v1`.
    pub fn account(&self) -> Result<Account, EdgeError> {
        self.caller.map(|c| Account { id: c.account_id.clone() }).ok_or(EdgeError::Unauthorized(Refused::NotAKey))
    }

    /// What the caller may do, as `GET /v1/account` shows it.
    pub fn access(&self) -> serde_json::Value {
        let Some(caller) = self.caller else { return serde_json::Value::Null };
        let described = match &caller.access {
            Access::Key(scope) => {
                Described::ApiKey { scope: scope.as_str(), key_id: caller.key_id.as_deref().unwrap_or_default() }
            }
            Access::Portal { read_only, endpoints } => {
                Described::PortalSession { read_only: *read_only, endpoint_ids: endpoints.as_deref() }
            }
        };
        serde_json::to_value(described).unwrap_or(serde_json::Value::Null)
    }

    /// The id of the caller's API key (`None` for a portal session).
    pub fn key_id(&self) -> Option<String> {
        self.caller.and_then(|c| c.key_id.clone())
    }

    /// The endpoints the caller reaches, when it reaches only some (a limited portal session);
    /// outside `/v1`, none.
    pub fn endpoints(&self) -> Option<Vec<String>> {
        match self.caller.map(|c| &c.access) {
            Some(Access::Key(_)) => None,
            Some(Access::Portal { endpoints, .. }) => endpoints.clone(),
            None => Some(Vec::new()),
        }
    }
}
