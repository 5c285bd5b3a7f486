//! The `accounts` table. An account's API key is stored only as its SHA-256
//! (`UNIQUE (api_key_hash)`).

use exactly_core::Timestamp;
use serde::Deserialize;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, text, time};

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
