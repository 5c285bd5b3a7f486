//! Erasure of one phone number's messages (docs/contract.md §5, "Erasure"): the messages sent to
//! or from it lose their text and show `[erased]` for the number; their ids stay, so receipts and
//! duplicates still find them and change nothing.

use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::erasures::{self, Found};
use crate::store::{self as db, opt_text, text};

/// What an erased number reads as.
pub const ERASED: &str = exactly_core::erasure::MARKER;

/// The next page of the messages to or from `number` (of `account`, or of every account) after
/// row `after` (`store::erasures::window`).
pub async fn page(db: &D1Database, number: &str, account: Option<&str>, after: i64) -> Result<Found, EdgeError> {
    erasures::window(
        db,
        erasures::Table::Messages,
        "SELECT rowid AS row_no, id, NULL AS body FROM messages
         WHERE rowid > ?1 AND rowid <= ?2 AND (from_number = ?3 OR to_number = ?3) AND (?4 IS NULL OR account_id = ?4)
         ORDER BY rowid LIMIT 25",
        &[text(number), opt_text(account)],
        after,
    )
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
