//! Bearer authentication: the admin token, and account API keys (stored as SHA-256 hashes).

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use worker::{Env, Request};

use crate::api::http::bearer;
use crate::config;
use crate::error::EdgeError;

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
        Ok(())
    } else {
        Err(EdgeError::Unauthorized)
    }
}

/// The SHA-256 (hex) under which an API key is stored.
pub fn key_hash(api_key: &str) -> String {
    Sha256::digest(api_key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The account whose API key is the request's bearer token: the one whose key's route
/// [`account_scope`] matched, or, with every account in `DB`, the one `accounts` names.
pub async fn account(req: &Request, env: &Env) -> Result<Account, EdgeError> {
    let key = bearer(req).ok_or(EdgeError::Unauthorized)?;
    if let Some(id) = crate::store::routed_account(env) {
        return Ok(Account { id });
    }
    let db = crate::store::database(env)?;
    let id = crate::store::accounts::by_key_hash(&db, &key_hash(&key)).await?;
    id.map(|id| Account { id }).ok_or(EdgeError::Unauthorized)
}

/// The bindings a `/v1` request runs with: those of the database of the account whose API key
/// the bearer token is (docs/scaling.md, "Accounts across databases"), marked with that account;
/// `DB`'s when the token names no routed account, where [`account`] then finds the account or
/// refuses the request.
pub async fn account_scope(req: &web_sys::Request, env: &Env) -> Result<Env, EdgeError> {
    let header = req.headers().get("authorization").ok().flatten();
    let route = match header.as_deref().and_then(crate::api::http::bearer_of) {
        Some(key) => crate::store::routes::of_key(env, &key_hash(&key)).await?,
        None => None,
    };
    match route {
        Some(route) => {
            let scoped = crate::store::routes::scope(env, Some(route.binding))?;
            crate::store::with_account(&scoped, &route.account_id)
        }
        None => crate::store::routes::scope(env, None),
    }
}
