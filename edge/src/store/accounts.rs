//! The `accounts` table. An account's API keys are in `api_keys` (`store::access`); the row
//! keeps the hash of the key it was created with, no longer read.

use exactly_core::Timestamp;
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

/// Whether the account exists.
pub async fn exists(db: &D1Database, id: &str) -> Result<bool, EdgeError> {
    let found = db::all_ids(db::stmt(db, "SELECT id FROM accounts WHERE id = ?1", &[text(id)])?).await?;
    Ok(!found.is_empty())
}

crate::store::row! {
    /// One account as the operator lists it (never its key, which is not stored).
    pub struct Listed {
        pub id: String,
        pub name: String,
        pub created_at: Timestamp,
        /// The account's numbers, a JSON array.
        pub numbers: String,
    }
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
