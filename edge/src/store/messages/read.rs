//! Reading messages: one by id, key or carrier id (with its charge, in one transaction), a page
//! of an account's messages, a message's status history. Nothing here writes.

use exactly_core::message::MessageStatus;
use exactly_core::{Provider, Timestamp};
use serde_json::Value;
use worker::{D1Database, D1PreparedStatement};

use super::{Direction, Message, MESSAGE_COLUMNS};
use crate::error::EdgeError;
use crate::store::usage;
use crate::store::Cursor;
use crate::store::{self as db, int, opt_text, text};

/// One message of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Message>, EdgeError> {
    db::first(get_stmt(db, account_id, id)?).await
}

fn get_stmt(db: &D1Database, account_id: &str, id: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1 AND account_id = ?2"),
        &[text(id), text(account_id)],
    )
}

/// One message of one account with its charge, read in one batch (one transaction): a message
/// is never shown still sending beside the charge its send wrote, nor sent without it.
pub async fn get_charged(
    db: &D1Database,
    account_id: &str,
    id: &str,
) -> Result<Option<(Message, Option<Value>)>, EdgeError> {
    let results =
        db::batch(db, vec![get_stmt(db, account_id, id)?, usage::message_charge_stmt(db, account_id, id)?]).await?;
    let message: Option<Message> = results.first().map(db::rows).transpose()?.and_then(|rows| rows.into_iter().next());
    let Some(message) = message else { return Ok(None) };
    let charge = results.get(1).map(usage::charge_in).transpose()?.flatten();
    Ok(Some((message, charge)))
}

/// The account's message sent with this `Idempotency-Key`, if any.
pub async fn by_idempotency_key(db: &D1Database, account_id: &str, key: &str) -> Result<Option<Message>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE account_id = ?1 AND idempotency_key = ?2"),
        &[text(account_id), text(key)],
    )?)
    .await
}

/// One message by id, whatever its account (for jobs).
pub async fn by_id(db: &D1Database, id: &str) -> Result<Option<Message>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"), &[text(id)])?).await
}

/// The message a carrier knows by `carrier_message_id`.
pub async fn by_carrier_id(
    db: &D1Database,
    carrier: Provider,
    carrier_message_id: &str,
) -> Result<Option<Message>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2"),
        &[text(carrier.as_str()), text(carrier_message_id)],
    )?)
    .await
}

/// Filters of a message list.
pub struct ListFilter {
    pub status: Option<MessageStatus>,
    pub direction: Option<Direction>,
    pub cursor: Option<Cursor>,
    pub limit: u32,
}

/// A page of an account's messages, newest first.
pub async fn list(db: &D1Database, account_id: &str, filter: ListFilter) -> Result<Vec<Message>, EdgeError> {
    let (cursor_at, cursor_id) = Cursor::args(&filter.cursor);
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages
             WHERE account_id = ?1
               AND (?2 IS NULL OR status = ?2)
               AND (?3 IS NULL OR direction = ?3)
               AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND id < ?5))
             ORDER BY created_at DESC, id DESC LIMIT ?6"
        ),
        &[
            text(account_id),
            opt_text(filter.status.map(MessageStatus::as_str)),
            opt_text(filter.direction.map(Direction::as_str)),
            cursor_at,
            cursor_id,
            int(i64::from(filter.limit)),
        ],
    )?)
    .await
}

crate::store::row! {
    /// One step of a message's status history.
    #[derive(Debug)]
    pub struct HistoryStep {
        pub status: MessageStatus,
        pub carrier_status: Option<String>,
        pub created_at: Timestamp,
    }
}

/// A message's status history, oldest first: one row per move that happened.
pub async fn history(db: &D1Database, message_id: &str) -> Result<Vec<HistoryStep>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT status, carrier_status, created_at FROM message_status_history WHERE message_id = ?1 ORDER BY id",
        &[text(message_id)],
    )?)
    .await
}
