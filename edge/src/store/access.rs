//! The `api_keys` and `portal_sessions` tables, in `DB` whatever database an account lives in
//! (docs/contract.md §5, "Keys, scopes and portal sessions"): a request's credential is found
//! with one read, joined to its account's route for the database the account lives in.

use exactly_core::access::Scope;
use exactly_core::Timestamp;
use worker::{D1Database, D1PreparedStatement, Env};

use crate::error::EdgeError;
use crate::store::signals::OPERATOR_ACCOUNT;
use crate::store::{self as db, int, opt_text, text, time, Cursor};

/// How long a key's `last_used_at` may lag: a key used again sooner is not written again.
const LAST_USED_STEP_MS: i64 = 60_000;

crate::store::row! {
    /// A live API key, found by its hash.
    #[derive(Debug)]
    pub struct LiveKey {
        pub id: String,
        pub account_id: String,
        pub scope: String,
        pub last_used_at: Option<Timestamp>,
        /// The account's database (`None`: `DB`).
        pub binding: Option<String>,
    }
}

/// The live (not revoked) key that hashes to `key_hash`, with its account's database.
pub async fn live_key(root: &D1Database, key_hash: &str) -> Result<Option<LiveKey>, EdgeError> {
    db::first(db::stmt(
        root,
        "SELECT k.id, k.account_id, k.scope, k.last_used_at, r.binding
         FROM api_keys k LEFT JOIN account_routes r ON r.account_id = k.account_id
         WHERE k.key_hash = ?1 AND k.revoked_at IS NULL",
        &[text(key_hash)],
    )?)
    .await
}

/// Records that key `id` was used at `now`, unless a use less than a minute ago is recorded.
pub async fn touch(root: &D1Database, id: &str, now: Timestamp) -> Result<(), EdgeError> {
    db::run(db::stmt(
        root,
        "UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1 AND (last_used_at IS NULL OR last_used_at < ?3)",
        &[text(id), time(now), int(now.unix_millis() - LAST_USED_STEP_MS)],
    )?)
    .await?;
    Ok(())
}

/// Whether a key used last at `last_used_at` is to be touched at `now`.
pub fn stale(last_used_at: Option<Timestamp>, now: Timestamp) -> bool {
    last_used_at.is_none_or(|t| t.unix_millis() < now.unix_millis() - LAST_USED_STEP_MS)
}

/// A new key, as written.
pub struct NewKey<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub name: &'a str,
    pub scope: Scope,
    pub key_hash: &'a str,
    pub prefix: &'a str,
    pub at: Timestamp,
}

fn key_args(key: &NewKey<'_>) -> [wasm_bindgen::JsValue; 9] {
    [
        text(key.id),
        text(key.account_id),
        text(key.name),
        text(key.scope.as_str()),
        text(key.key_hash),
        text(key.prefix),
        time(key.at),
        text(OPERATOR_ACCOUNT),
        int(MAX_LIVE_KEYS),
    ]
}

/// The insert of a new key; nothing for the operator's own account, which no key reaches.
pub fn insert(root: &D1Database, key: &NewKey<'_>) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        root,
        "INSERT INTO api_keys (id, account_id, name, scope, key_hash, prefix, created_at)
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 WHERE ?2 != ?8",
        // All but the cap, which a new account's first key is not held to.
        &key_args(key)[..8],
    )
}

/// How many live keys an account may hold.
pub const MAX_LIVE_KEYS: i64 = 50;

/// The insert of a key for a customer account that has a route (every account has one), while it
/// holds fewer than [`MAX_LIVE_KEYS`] live keys.
const ADD_TO_ROUTED: &str = "INSERT INTO api_keys (id, account_id, name, scope, key_hash, prefix, created_at)
     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
     WHERE ?2 != ?8 AND EXISTS (SELECT 1 FROM account_routes WHERE account_id = ?2)
       AND (SELECT COUNT(*) FROM api_keys WHERE account_id = ?2 AND revoked_at IS NULL) < ?9";

/// What [`create`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Added {
    Added,
    /// No such customer account.
    NoAccount,
    /// The account holds [`MAX_LIVE_KEYS`] live keys already.
    Full,
}

crate::store::row! {
    struct Live {
        routed: i64,
        live: i64,
    }
}

/// Adds a key to an account that has a route (every account has one), in one batch with what
/// tells a refusal's reason.
pub async fn create(env: &Env, key: &NewKey<'_>) -> Result<Added, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let add = db::stmt(&root, ADD_TO_ROUTED, &key_args(key))?;
    let state = db::stmt(
        &root,
        "SELECT (SELECT COUNT(*) FROM account_routes WHERE account_id = ?1 AND account_id != ?2) AS routed,
                (SELECT COUNT(*) FROM api_keys WHERE account_id = ?1 AND revoked_at IS NULL) AS live",
        &[text(key.account_id), text(OPERATOR_ACCOUNT)],
    )?;
    let results = db::batch(&root, vec![add, state]).await?;
    if results.first().map(db::changes) == Some(1) {
        return Ok(Added::Added);
    }
    let state: Option<Live> = results.get(1).map(db::rows).transpose()?.and_then(|mut r| r.pop());
    Ok(match state {
        Some(s) if s.routed > 0 && s.live >= MAX_LIVE_KEYS => Added::Full,
        _ => Added::NoAccount,
    })
}

/// Rotation by the operator: a new key (the caller makes it `full`) for the account and every
/// other key revoked, in one batch, so from its commit exactly the new key works. False when
/// there is no such customer account.
pub async fn replace_all(env: &Env, key: &NewKey<'_>) -> Result<bool, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let revoke = db::stmt(
        &root,
        "UPDATE api_keys SET revoked_at = ?2 WHERE account_id = ?1 AND revoked_at IS NULL
           AND EXISTS (SELECT 1 FROM account_routes WHERE account_id = ?1)",
        &[text(key.account_id), time(key.at)],
    )?;
    let add = db::stmt(&root, ADD_TO_ROUTED, &key_args(key))?;
    let results = db::batch(&root, vec![revoke, add]).await?;
    Ok(results.get(1).map(db::changes) == Some(1))
}

crate::store::row! {
    /// A key as the API lists it: never the key, which is not stored.
    #[derive(Debug)]
    pub struct Listed {
        pub id: String,
        pub name: String,
        pub scope: String,
        pub prefix: String,
        pub created_at: Timestamp,
        pub last_used_at: Option<Timestamp>,
        pub revoked_at: Option<Timestamp>,
    }
}

const LISTED: &str = "SELECT id, name, scope, prefix, created_at, last_used_at, revoked_at FROM api_keys";

/// A page of an account's keys, revoked ones included, newest first.
pub async fn list(env: &Env, account_id: &str, cursor: Option<Cursor>, limit: u32) -> Result<Vec<Listed>, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let (at, id) = Cursor::args(&cursor);
    db::all(db::stmt(
        &root,
        &format!(
            "{LISTED} WHERE account_id = ?1 AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
             ORDER BY created_at DESC, id DESC LIMIT ?4"
        ),
        &[text(account_id), at, id, int(i64::from(limit))],
    )?)
    .await
}

/// What [`revoke`] did.
#[derive(Debug)]
pub enum Revoked {
    /// Revoked now, or before (a second revocation changes nothing): the key as it is.
    Key(Listed),
    /// The account's last live `full` key, which a customer cannot revoke.
    LastFull,
    /// No such key in the account.
    Missing,
}

/// Revokes key `id` of the account; unless `last_full_too` (the operator), never the account's
/// last live `full` key, so a customer cannot lock the account out of its own keys. The count is
/// inside the guarded statement: two revocations of the last two full keys leave one.
pub async fn revoke(
    env: &Env,
    account_id: &str,
    id: &str,
    now: Timestamp,
    last_full_too: bool,
) -> Result<Revoked, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let guard = db::stmt(
        &root,
        "UPDATE api_keys SET revoked_at = ?3 WHERE id = ?1 AND account_id = ?2 AND revoked_at IS NULL
           AND (?4 = 1 OR scope != 'full'
                OR (SELECT COUNT(*) FROM api_keys WHERE account_id = ?2 AND scope = 'full' AND revoked_at IS NULL) > 1)",
        &[text(id), text(account_id), time(now), int(i64::from(last_full_too))],
    )?;
    let read = db::stmt(&root, &format!("{LISTED} WHERE id = ?1 AND account_id = ?2"), &[text(id), text(account_id)])?;
    let results = db::batch(&root, vec![guard, read]).await?;
    let key: Option<Listed> = results.get(1).map(db::rows).transpose()?.and_then(|mut r| r.pop());
    Ok(match key {
        None => Revoked::Missing,
        Some(key) if key.revoked_at.is_none() => Revoked::LastFull,
        Some(key) => Revoked::Key(key),
    })
}

/// A new portal session, as written.
pub struct NewSession<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    /// The key that minted it: revoking that key ends the session.
    pub key_id: &'a str,
    pub secret_hash: &'a str,
    pub read_only: bool,
    /// A JSON array of endpoint ids, or `None` for all of the account's.
    pub endpoint_ids: Option<&'a str>,
    pub at: Timestamp,
    pub expires_at: Timestamp,
}

/// How many unexpired portal sessions an account may hold.
pub const MAX_LIVE_SESSIONS: i64 = 500;

/// Records a portal session, while the account holds fewer than [`MAX_LIVE_SESSIONS`] live ones
/// (unexpired, minted by a live key: those [`list_sessions`] shows, so the account can always
/// revoke its way back under the cap); whether it did.
pub async fn create_session(env: &Env, s: &NewSession<'_>) -> Result<bool, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let added = db::run(db::stmt(
        &root,
        "INSERT INTO portal_sessions (id, account_id, key_id, secret_hash, read_only, endpoint_ids, created_at, expires_at)
         SELECT ?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7
         WHERE (SELECT COUNT(*) FROM portal_sessions s JOIN api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
                WHERE s.account_id = ?2 AND s.expires_at > ?6) < ?9",
        &[
            text(s.id),
            text(s.account_id),
            text(s.secret_hash),
            int(i64::from(s.read_only)),
            opt_text(s.endpoint_ids),
            time(s.at),
            time(s.expires_at),
            text(s.key_id),
            int(MAX_LIVE_SESSIONS),
        ],
    )?)
    .await?;
    Ok(added == 1)
}

crate::store::row! {
    /// A portal session as a request or the portal's page finds it, with its account's route.
    #[derive(Debug)]
    pub struct Session {
        pub account_id: String,
        pub secret_hash: String,
        pub read_only: bool,
        pub endpoint_ids: Option<String>,
        pub expires_at: Timestamp,
        pub binding: Option<String>,
        /// The origins that may embed the account's portal, a JSON array.
        pub portal_origins: Option<String>,
    }
}

/// The portal session `id`, expired or not (the caller compares the time), while the key that
/// minted it is live: revoking a key (or the operator's rotation) ends its sessions.
pub async fn session(root: &D1Database, id: &str) -> Result<Option<Session>, EdgeError> {
    db::first(db::stmt(
        root,
        "SELECT s.account_id, s.secret_hash, s.read_only, s.endpoint_ids, s.expires_at, r.binding, r.portal_origins
         FROM portal_sessions s JOIN api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
              LEFT JOIN account_routes r ON r.account_id = s.account_id
         WHERE s.id = ?1",
        &[text(id)],
    )?)
    .await
}

crate::store::row! {
    /// A live portal session as its account lists it: never its secret.
    #[derive(Debug)]
    pub struct ListedSession {
        pub id: String,
        pub key_id: String,
        pub read_only: bool,
        /// A JSON array of endpoint ids, or `None` for all of the account's.
        pub endpoint_ids: Option<String>,
        pub created_at: Timestamp,
        pub expires_at: Timestamp,
    }
}

/// The account's live portal sessions (unexpired, minted by a live key), those that end last
/// first, `limit` after `cursor` (`expires_at`, `id`).
pub async fn list_sessions(
    env: &Env,
    account_id: &str,
    cursor: Option<Cursor>,
    limit: u32,
    now: Timestamp,
) -> Result<Vec<ListedSession>, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let (at, id) = Cursor::args(&cursor);
    db::all(db::stmt(
        &root,
        "SELECT s.id, s.key_id, s.read_only, s.endpoint_ids, s.created_at, s.expires_at
         FROM portal_sessions s JOIN api_keys k ON k.id = s.key_id AND k.revoked_at IS NULL
         WHERE s.account_id = ?1 AND s.expires_at > ?5
           AND (?2 IS NULL OR s.expires_at < ?2 OR (s.expires_at = ?2 AND s.id < ?3))
         ORDER BY s.expires_at DESC, s.id DESC LIMIT ?4",
        &[text(account_id), at, id, int(i64::from(limit)), time(now)],
    )?)
    .await
}

/// Ends portal session `id` of the account now (its `expires_at` becomes `now`); whether a live
/// one was ended. Its link and token are refused from this moment.
pub async fn revoke_session(env: &Env, account_id: &str, id: &str, now: Timestamp) -> Result<bool, EdgeError> {
    let root = db::d1(env, crate::bindings::DB)?;
    let ended = db::run(db::stmt(
        &root,
        "UPDATE portal_sessions SET expires_at = ?3 WHERE id = ?1 AND account_id = ?2 AND expires_at > ?3",
        &[text(id), text(account_id), time(now)],
    )?)
    .await?;
    Ok(ended == 1)
}

/// Deletes the portal sessions that expired before `before`, at most `limit`; how many.
pub async fn prune_sessions(root: &D1Database, before: Timestamp, limit: i64) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        root,
        "DELETE FROM portal_sessions WHERE id IN
           (SELECT id FROM portal_sessions WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)",
        &[time(before), int(limit)],
    )?)
    .await
}
