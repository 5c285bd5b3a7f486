//! The `accounts` table. An account's API key is stored only as its SHA-256
//! (`UNIQUE (api_key_hash)`).

use exactly_core::Timestamp;
use serde::Deserialize;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::signals::OPERATOR_ACCOUNT;
use crate::store::{self as db, int, text, time, Cursor};

/// Creates an account.
pub async fn create(
    db: &D1Database,
    id: &str,
    name: &str,
    api_key_hash: &str,
    now: Timestamp,
) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "INSERT INTO accounts (id, name, api_key_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        &[text(id), text(name), text(api_key_hash), time(now)],
    )?)
    .await?;
    Ok(())
}

/// Gives account `account_id` the API key that hashes to `api_key_hash`, in place of its
/// previous one; false when there is no such customer account.
///
/// The key's route in `DB` is what authenticates a key once accounts may live outside `DB`
/// (docs/scaling.md, "Accounts across databases"), and `accounts` is what does while every
/// account is in `DB`. Both change in one batch when the account is in `DB`; for an account in
/// another database the route changes first, in one statement, and that is the switch: from its
/// commit the old key is refused and the new one accepted. The account row's copy is written
/// after it, to the same value.
pub async fn rotate_key(env: &worker::Env, account_id: &str, api_key_hash: &str) -> Result<bool, EdgeError> {
    use crate::store::routes;
    if account_id == OPERATOR_ACCOUNT {
        return Ok(false);
    }
    let root = db::d1(env, crate::bindings::DB)?;
    let binding = routes::of_account(env, account_id).await?;
    let route = routes::rekey(&root, account_id, api_key_hash)?;
    let row = "UPDATE accounts SET api_key_hash = ?2 WHERE id = ?1";
    let args = [text(account_id), text(api_key_hash)];
    match binding.filter(|b| b != crate::bindings::DB) {
        None => {
            let results = db::batch(&root, vec![route, db::stmt(&root, row, &args)?]).await?;
            Ok(results.get(1).map(db::changes) == Some(1))
        }
        Some(binding) => {
            let routed = db::run(route).await? == 1;
            let (_, account_db) = routes::open(env, Some(binding))?;
            let copied = db::run(db::stmt(&account_db, row, &args)?).await? == 1;
            Ok(routed && copied)
        }
    }
}

#[derive(Deserialize)]
struct Id {
    id: String,
}

/// Whether the account exists.
pub async fn exists(db: &D1Database, id: &str) -> Result<bool, EdgeError> {
    let row: Option<Id> = db::first(db::stmt(db, "SELECT id FROM accounts WHERE id = ?1", &[text(id)])?).await?;
    Ok(row.is_some())
}

/// The account whose API key hashes to `api_key_hash`.
pub async fn by_key_hash(db: &D1Database, api_key_hash: &str) -> Result<Option<String>, EdgeError> {
    let row: Option<Id> =
        db::first(db::stmt(db, "SELECT id FROM accounts WHERE api_key_hash = ?1", &[text(api_key_hash)])?).await?;
    Ok(row.map(|r| r.id))
}

/// One account as the operator lists it (never its key, which is not stored).
#[derive(Deserialize)]
pub struct Listed {
    pub id: String,
    pub name: String,
    #[serde(deserialize_with = "crate::store::read::at")]
    pub created_at: Timestamp,
    /// The account's numbers, a JSON array.
    pub numbers: String,
}

/// A page of the customer accounts, newest first; the operator's own account is not one.
pub async fn list(db: &D1Database, cursor: Option<Cursor>, limit: u32) -> Result<Vec<Listed>, EdgeError> {
    let (at, id) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        "SELECT a.id, a.name, a.created_at,
                (SELECT json_group_array(n.phone_number) FROM phone_numbers n WHERE n.account_id = a.id) AS numbers
         FROM accounts a
         WHERE a.id != ?1 AND (?2 IS NULL OR a.created_at < ?2 OR (a.created_at = ?2 AND a.id < ?3))
         ORDER BY a.created_at DESC, a.id DESC LIMIT ?4",
        &[text(OPERATOR_ACCOUNT), at, id, int(i64::from(limit))],
    )?)
    .await
}
