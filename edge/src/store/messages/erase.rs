//! Erasure of one phone number's messages (docs/contract.md §5, "Erasure"): the messages sent to
//! or from it lose their text and show `[erased]` for the number; their ids stay, so receipts and
//! duplicates still find them and change nothing.

use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::{self as db, opt_text, text};

/// What an erased number reads as.
pub const ERASED: &str = "[erased]";

/// The ids of the messages to or from `number` (of `account`, or of every account).
pub async fn of_number(db: &D1Database, number: &str, account: Option<&str>) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        "SELECT id FROM messages WHERE (from_number = ?1 OR to_number = ?1) AND (?2 IS NULL OR account_id = ?2)",
        &[text(number), opt_text(account)],
    )?)
    .await
}

/// The statement that erases the messages of `ids` (a JSON array) of their text and of `number`.
pub fn redact(db: &D1Database, number: &str, ids: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE messages SET text = '',
             from_number = CASE WHEN from_number = ?1 THEN ?3 ELSE from_number END,
             to_number = CASE WHEN to_number = ?1 THEN ?3 ELSE to_number END
         WHERE id IN (SELECT value FROM json_each(?2))",
        &[text(number), text(ids), text(ERASED)],
    )
}
