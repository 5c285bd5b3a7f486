//! The usage ledger: rows written only in the batch whose guarded change earned them.

use exactly_core::Timestamp;
use serde::Serialize;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store as db;

exactly_core::text_enum! {
    /// What a usage row counts.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kind {
        /// SMS segments sent.
        SmsSegments = "sms_segments",
        /// MMS sent: one unit per message, whatever its text's length.
        Mms = "mms",
        /// Call minutes (rounded up per call).
        CallMinutes = "call_minutes",
    }
}
crate::store::row::named!(Kind);

/// The charge, written only if the previous statement of the batch changed exactly one row,
/// and at most once per resource and kind (`UNIQUE (kind, resource_id)`).
pub fn charge_if_changed(
    db: &D1Database,
    account_id: &str,
    kind: Kind,
    quantity: i64,
    resource_id: &str,
    now: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO usage (account_id, kind, quantity, resource_id, created_at)
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE changes() = 1
         ON CONFLICT (kind, resource_id) DO NOTHING",
        &[db::text(account_id), db::text(kind.as_str()), db::int(quantity), db::text(resource_id), db::time(now)],
    )
}

crate::store::row! {
    /// Totals per kind for one account between two times.
    #[derive(Debug, Default, Serialize, PartialEq, Eq)]
    pub struct Totals {
        /// SMS segments billed.
        pub sms_segments: i64,
        /// MMS billed.
        pub mms: i64,
        /// Call minutes billed.
        pub call_minutes: i64,
    }
}

crate::store::row! {
    struct TotalRow {
        sms_segments: Option<i64>,
        mms: Option<i64>,
        call_minutes: Option<i64>,
    }
}

/// Sums the ledger for `account_id` over `[from, to)`.
pub async fn totals(db: &D1Database, account_id: &str, from: Timestamp, to: Timestamp) -> Result<Totals, EdgeError> {
    let row: Option<TotalRow> = db::first(db::stmt(
        db,
        "SELECT SUM(CASE WHEN kind = 'sms_segments' THEN quantity END) AS sms_segments,
                SUM(CASE WHEN kind = 'mms' THEN quantity END) AS mms,
                SUM(CASE WHEN kind = 'call_minutes' THEN quantity END) AS call_minutes
         FROM usage WHERE account_id = ?1 AND created_at >= ?2 AND created_at < ?3",
        &[db::text(account_id), db::time(from), db::time(to)],
    )?)
    .await?;
    Ok(row
        .map(|r| Totals {
            sms_segments: r.sms_segments.unwrap_or(0),
            mms: r.mms.unwrap_or(0),
            call_minutes: r.call_minutes.unwrap_or(0),
        })
        .unwrap_or_default())
}

/// A message's charge (SMS segments or one MMS unit, whichever it was charged as), for a batch
/// that reads it with the message ([`charge_in`] reads its result).
pub fn message_charge_stmt(
    db: &D1Database,
    account_id: &str,
    message_id: &str,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "SELECT kind, quantity, created_at FROM usage
         WHERE kind IN ('sms_segments', 'mms') AND resource_id = ?1 AND account_id = ?2",
        &[db::text(message_id), db::text(account_id)],
    )
}

/// The statement that reads what a call was charged, for the batch that reads the call.
pub fn call_charge_stmt(
    db: &D1Database,
    account_id: &str,
    call_id: &str,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "SELECT kind, quantity, created_at FROM usage WHERE kind = 'call_minutes' AND resource_id = ?1 AND account_id = ?2",
        &[db::text(call_id), db::text(account_id)],
    )
}

/// The charge [`message_charge_stmt`] or [`call_charge_stmt`] read, as the API shows it:
/// `{kind, quantity, charged_at}`.
pub fn charge_in(result: &crate::store::Reply) -> Result<Option<serde_json::Value>, EdgeError> {
    crate::store::row! {
        struct Row {
            kind: String,
            quantity: i64,
            created_at: Timestamp,
        }
    }
    let rows: Vec<Row> = db::rows(result)?;
    Ok(rows.into_iter().next().map(|r| shown(&r.kind, r.quantity, r.created_at)))
}

/// A charge as the API shows it: `{kind, quantity, charged_at}`.
fn shown(kind: &str, quantity: i64, charged_at: Timestamp) -> serde_json::Value {
    serde_json::json!({ "kind": kind, "quantity": quantity, "charged_at": charged_at.to_rfc3339() })
}
