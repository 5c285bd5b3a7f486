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
    pub created_at: f64,
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
