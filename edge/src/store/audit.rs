//! The running audit's reads and its place in each check's rows (docs/contract.md, "The running
//! audit"). Every read is one page of rows after the check's position, by an ever-growing id
//! (an `AUTOINCREMENT` key; the customer events' rowid, which [`rewind_if_emptied`] keeps
//! honest), with what the check compares each row against read beside it through an index; the
//! decisions are [`crate::work::audit`]'s.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store as db;

/// The most rows one check reads in one page.
pub const PAGE: i64 = 200;

crate::store::row! {
    /// A status a message moved to, with its previous history row (its id and status), whether
    /// the message is inbound, and, for a move to `sent`, how many charges the message has.
    #[derive(Debug)]
    pub struct Moved {
        pub id: i64,
        pub message_id: String,
        pub status: String,
        pub previous_id: Option<i64>,
        pub previous: Option<String>,
        pub inbound: bool,
        pub charges: i64,
    }
}

crate::store::row! {
    /// A charge of the ledger with what it bills: the message's segments and send, or the call's
    /// billed minutes (`NULL`, and not found, where the resource is missing).
    #[derive(Debug)]
    pub struct Charge {
        pub id: i64,
        pub kind: String,
        pub quantity: i64,
        pub resource_id: String,
        pub segments: Option<i64>,
        pub sent_at: Option<i64>,
        pub message_found: bool,
        pub billed_minutes: Option<i64>,
        pub call_found: bool,
    }
}

crate::store::row! {
    /// An attempt, whether it succeeded (2xx), and for a success the id of the first success of
    /// the same delivery recorded before it.
    #[derive(Debug)]
    pub struct Attempt {
        pub id: i64,
        pub delivery_id: String,
        pub succeeded: bool,
        pub earlier: Option<i64>,
    }
}

crate::store::row! {
    /// A customer event, with the first endpoint subscribed to its type since well before it was
    /// written ([`SUBSCRIBED_BEFORE_MILLIS`]) that has no first delivery of it.
    #[derive(Debug)]
    pub struct Written {
        pub id: i64,
        pub event_id: String,
        pub event_type: String,
        pub missing: Option<String>,
    }
}

/// How long before an event an endpoint must have existed, subscribed to its type, for the event
/// to be owed a delivery to it: the event's time is taken before its batch runs, so an endpoint
/// written a moment before that time may still have been written after the batch.
pub const SUBSCRIBED_BEFORE_MILLIS: i64 = 60_000;

crate::store::row! {
    /// Where a check stands.
    #[derive(Debug)]
    pub struct Standing {
        pub name: String,
        pub position: i64,
        pub checked: i64,
        pub found: i64,
        pub ran_at: Option<Timestamp>,
    }
}

/// One page of a check's rows: `sql` binds the position as `?1` and [`PAGE`] as `?2`, then
/// `more`.
async fn page<T: db::FromRow>(
    db: &D1Database,
    sql: &str,
    position: i64,
    more: &[JsValue],
) -> Result<Vec<T>, EdgeError> {
    let args: Vec<JsValue> = [db::int(position), db::int(PAGE)].into_iter().chain(more.iter().cloned()).collect();
    db::all(db::stmt(db, sql, &args)?).await
}

/// Every check's standing in this database, by name.
pub async fn standings(db: &D1Database) -> Result<Vec<Standing>, EdgeError> {
    db::all(db::stmt(db, "SELECT name, position, checked, found, ran_at FROM audit_checks ORDER BY name", &[])?).await
}

/// The page of message moves after `position`.
pub async fn moves(db: &D1Database, position: i64) -> Result<Vec<Moved>, EdgeError> {
    page(
        db,
        "SELECT h.id, h.message_id, h.status, p.id AS previous_id, p.status AS previous,
                COALESCE((SELECT m.direction = 'inbound' FROM messages m WHERE m.id = h.message_id), 0) AS inbound,
                CASE WHEN h.status = 'sent'
                     THEN (SELECT COUNT(*) FROM usage u
                           WHERE u.kind IN ('sms_segments', 'mms') AND u.resource_id = h.message_id)
                     ELSE 0 END AS charges
         FROM message_status_history h
         LEFT JOIN message_status_history p ON p.id = (
             SELECT q.id FROM message_status_history q
             WHERE q.message_id = h.message_id AND q.id < h.id ORDER BY q.id DESC LIMIT 1)
         WHERE h.id > ?1 ORDER BY h.id LIMIT ?2",
        position,
        &[],
    )
    .await
}

/// The page of charges after `position`.
pub async fn charges(db: &D1Database, position: i64) -> Result<Vec<Charge>, EdgeError> {
    page(
        db,
        "SELECT u.id, u.kind, u.quantity, u.resource_id, m.segments, m.sent_at, m.id IS NOT NULL AS message_found,
                c.billed_minutes, c.id IS NOT NULL AS call_found
         FROM usage u
         LEFT JOIN messages m ON u.kind IN ('sms_segments', 'mms') AND m.id = u.resource_id
         LEFT JOIN calls c ON u.kind = 'call_minutes' AND c.id = u.resource_id
         WHERE u.id > ?1 ORDER BY u.id LIMIT ?2",
        position,
        &[],
    )
    .await
}

/// The page of attempts after `position`, every attempt read so the position moves past
/// failures too.
pub async fn attempts(db: &D1Database, position: i64) -> Result<Vec<Attempt>, EdgeError> {
    page(
        db,
        "SELECT a.id, a.delivery_id, COALESCE(a.status_code BETWEEN 200 AND 299, 0) AS succeeded,
                CASE WHEN a.status_code BETWEEN 200 AND 299 THEN
                    (SELECT MIN(o.id) FROM webhook_attempts o
                     WHERE o.delivery_id = a.delivery_id AND o.id < a.id AND o.status_code BETWEEN 200 AND 299)
                END AS earlier
         FROM webhook_attempts a WHERE a.id > ?1 ORDER BY a.id LIMIT ?2",
        position,
        &[],
    )
    .await
}

/// The page of customer events after `position` (their rowids), test sends left out (each goes
/// to the one endpoint it was sent to). The endpoints are the account's (an index), each
/// account's are bounded, and the delivery is looked up by the first deliveries' unique index.
pub async fn written(db: &D1Database, position: i64) -> Result<Vec<Written>, EdgeError> {
    page(
        db,
        "SELECT o.rowid AS id, o.id AS event_id, o.type AS event_type,
                (SELECT e.id FROM webhook_endpoints e
                 WHERE e.account_id = o.account_id
                   AND e.created_at < o.created_at - ?3 AND e.types_at < o.created_at - ?3
                   AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = o.type)
                   AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                                   WHERE d.event_id = o.id AND d.endpoint_id = e.id AND d.kind = 'initial')
                 ORDER BY e.id LIMIT 1) AS missing
         FROM outbound_events o WHERE o.rowid > ?1 AND o.test = 0 ORDER BY o.rowid LIMIT ?2",
        position,
        &[db::int(SUBSCRIBED_BEFORE_MILLIS)],
    )
    .await
}

/// Puts check `name` back to the start when its table's rowids restarted below its position:
/// customer events have no `AUTOINCREMENT` key, and once retention has emptied the table the
/// next one is numbered from 1 again.
pub async fn rewind_if_emptied(db: &D1Database, name: &str, position: i64) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE audit_checks SET position = 0
         WHERE name = ?1 AND position = ?2 AND (SELECT COALESCE(MAX(rowid), 0) FROM outbound_events) < ?2",
        &[db::text(name), db::int(position)],
    )?)
    .await
    .map(|_| ())
}

/// Counts one finding of check `name`, only if the statement before it in the batch (the
/// finding's signal, written once) changed a row.
pub fn counted(db: &D1Database, name: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(db, "UPDATE audit_checks SET found = found + 1 WHERE name = ?1 AND changes() = 1", &[db::text(name)])
}

/// Moves check `name` from `from` to `to`, counting `checked` rows; `false` when another run
/// moved it first (the rows were checked twice; their findings are raised and counted once).
pub async fn advance(
    db: &D1Database,
    name: &str,
    from: i64,
    to: i64,
    checked: usize,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let moved = db::run(db::stmt(
        db,
        "UPDATE audit_checks SET position = ?3, checked = checked + ?4, ran_at = ?5
         WHERE name = ?1 AND position = ?2",
        &[db::text(name), db::int(from), db::int(to), db::int(checked as i64), db::time(now)],
    )?)
    .await?;
    Ok(moved == 1)
}

crate::store::row! {
    /// An `audit.violation` the operator was sent: its event id, body and time.
    #[derive(Debug)]
    pub struct Violation {
        pub id: String,
        pub payload: String,
        pub created_at: Timestamp,
    }
}

/// The `limit` newest `audit.violation` events of this database, through their own partial
/// index.
pub async fn violations(db: &D1Database, limit: i64) -> Result<Vec<Violation>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT id, payload, created_at FROM outbound_events
         WHERE type = 'audit.violation' ORDER BY created_at DESC, id DESC LIMIT ?1",
        &[db::int(limit)],
    )?)
    .await
}
