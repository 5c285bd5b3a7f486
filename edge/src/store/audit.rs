//! The running audit's reads and its place in each check's rows (docs/contract.md, "The running
//! audit"). Every read is one page of rows after the check's position, by an ever-growing id
//! (an `AUTOINCREMENT` key), with what the check compares each row against read beside it
//! through an index; the decisions are [`crate::work::audit`]'s.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store as db;

/// The most rows one check reads in one page.
pub const PAGE: i64 = 200;

crate::store::row! {
    /// A status a message moved to, with the status it had before (its previous history row)
    /// and, for a move to `sent`, how many charges the message has.
    #[derive(Debug)]
    pub struct Moved {
        pub id: i64,
        pub message_id: String,
        pub status: String,
        pub previous: Option<String>,
        pub charges: i64,
    }
}

crate::store::row! {
    /// A charge of the ledger with what it bills: the message's segments, media and send, or the
    /// call's billed minutes (`NULL` where the resource is gone, as after an erasure).
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
    /// A successful attempt, with the attempt number of an earlier success of the same delivery.
    #[derive(Debug)]
    pub struct Success {
        pub id: i64,
        pub delivery_id: String,
        pub attempt: i64,
        pub earlier: Option<i64>,
    }
}

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

/// Every check's standing in this database, by name.
pub async fn standings(db: &D1Database) -> Result<Vec<Standing>, EdgeError> {
    db::all(db::stmt(db, "SELECT name, position, checked, found, ran_at FROM audit_checks ORDER BY name", &[])?).await
}

/// The page of message moves after `position`.
pub async fn moves(db: &D1Database, position: i64) -> Result<Vec<Moved>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT h.id, h.message_id, h.status,
                (SELECT p.status FROM message_status_history p
                 WHERE p.message_id = h.message_id AND p.id < h.id ORDER BY p.id DESC LIMIT 1) AS previous,
                CASE WHEN h.status = 'sent'
                     THEN (SELECT COUNT(*) FROM usage u
                           WHERE u.kind IN ('sms_segments', 'mms') AND u.resource_id = h.message_id)
                     ELSE 0 END AS charges
         FROM message_status_history h WHERE h.id > ?1 ORDER BY h.id LIMIT ?2",
        &[db::int(position), db::int(PAGE)],
    )?)
    .await
}

/// The page of charges after `position`.
pub async fn charges(db: &D1Database, position: i64) -> Result<Vec<Charge>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT u.id, u.kind, u.quantity, u.resource_id, m.segments, m.sent_at, m.id IS NOT NULL AS message_found,
                c.billed_minutes, c.id IS NOT NULL AS call_found
         FROM usage u
         LEFT JOIN messages m ON u.kind IN ('sms_segments', 'mms') AND m.id = u.resource_id
         LEFT JOIN calls c ON u.kind = 'call_minutes' AND c.id = u.resource_id
         WHERE u.id > ?1 ORDER BY u.id LIMIT ?2",
        &[db::int(position), db::int(PAGE)],
    )?)
    .await
}

/// The page of successful attempts after `position`.
pub async fn successes(db: &D1Database, position: i64) -> Result<Vec<Success>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT a.id, a.delivery_id, a.attempt,
                (SELECT MIN(o.attempt) FROM webhook_attempts o
                 WHERE o.delivery_id = a.delivery_id AND o.attempt < a.attempt
                   AND o.status_code BETWEEN 200 AND 299) AS earlier
         FROM webhook_attempts a
         WHERE a.id > ?1 AND a.status_code BETWEEN 200 AND 299 ORDER BY a.id LIMIT ?2",
        &[db::int(position), db::int(PAGE)],
    )?)
    .await
}

/// Moves check `name` from `from` to `to`, counting `checked` rows and `found` findings; `false`
/// when another run moved it first (the rows were checked twice; their findings are raised once).
pub async fn advance(
    db: &D1Database,
    name: &str,
    from: i64,
    to: i64,
    checked: usize,
    found: usize,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let moved = db::run(db::stmt(
        db,
        "UPDATE audit_checks SET position = ?3, checked = checked + ?4, found = found + ?5, ran_at = ?6
         WHERE name = ?1 AND position = ?2",
        &[db::text(name), db::int(from), db::int(to), db::int(checked as i64), db::int(found as i64), db::time(now)],
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

/// The `limit` newest `audit.violation` events of this database (through the outbox's unique
/// `(resource_id, type)`: only the audit's own resources are read).
pub async fn violations(db: &D1Database, limit: i64) -> Result<Vec<Violation>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT id, payload, created_at FROM outbound_events
         WHERE resource_id >= 'op:audit:' AND resource_id < 'op:audit;' AND type = 'audit.violation'
         ORDER BY created_at DESC, id DESC LIMIT ?1",
        &[db::int(limit)],
    )?)
    .await
}
