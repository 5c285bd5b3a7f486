//! Recovery (docs/contract.md §6, "Recovery"): a new delivery to one endpoint of every event of
//! a window it is subscribed to and has neither received successfully nor has pending, in pages
//! of at most [`PAGE`] of the account's events, each page from where the recovery's row says the
//! last one ended. A page run twice (a job that ran again) writes nothing twice: the deliveries'
//! guard finds them pending, and the row moves only from where that page began.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, int, opt_text, text, time};

/// The account's events one page looks at: a page's statements stay small however long the
/// window or busy the account.
pub const PAGE: i64 = 1000;

crate::store::row! {
    /// A recovery and how far it got.
    #[derive(Debug)]
    pub struct Recovery {
        pub id: String,
        pub account_id: String,
        pub endpoint_id: String,
        pub since: Timestamp,
        pub until: Timestamp,
        pub after_created_at: Option<Timestamp>,
        pub after_id: Option<String>,
        /// Deliveries written so far.
        pub queued: i64,
        /// When its last page ran.
        pub finished_at: Option<Timestamp>,
        pub created_at: Timestamp,
    }
}

/// What a new recovery is asked to do.
pub struct NewRecovery<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub endpoint_id: &'a str,
    pub since: Timestamp,
    pub until: Timestamp,
    pub at: Timestamp,
}

/// Records a new recovery, with no page run yet.
pub async fn start(db: &D1Database, new: &NewRecovery<'_>) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "INSERT INTO endpoint_recoveries (id, account_id, endpoint_id, since, until, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        &[text(new.id), text(new.account_id), text(new.endpoint_id), time(new.since), time(new.until), time(new.at)],
    )?)
    .await
    .map(|_| ())
}

const COLUMNS: &str =
    "id, account_id, endpoint_id, since, until, after_created_at, after_id, queued, finished_at, created_at";

/// Recovery `id` of the endpoint.
pub async fn find(db: &D1Database, endpoint_id: &str, id: &str) -> Result<Option<Recovery>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {COLUMNS} FROM endpoint_recoveries WHERE id = ?1 AND endpoint_id = ?2"),
        &[text(id), text(endpoint_id)],
    )?)
    .await
}

/// Recovery `id`, whichever endpoint's (for its pages, which carry only its id).
pub async fn find_any(db: &D1Database, id: &str) -> Result<Option<Recovery>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM endpoint_recoveries WHERE id = ?1"), &[text(id)])?).await
}

impl Recovery {
    /// As the API shows it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "since": self.since.to_rfc3339(),
            "until": self.until.to_rfc3339(),
            "status": if self.finished_at.is_some() { "done" } else { "running" },
            "queued": self.queued,
            "progressed_to": self.after_created_at.map(|t| t.to_rfc3339()),
            "created_at": self.created_at.to_rfc3339(),
            "finished_at": self.finished_at.map(|t| t.to_rfc3339()),
        })
    }
}

/// What one page did.
#[derive(Debug, Default)]
pub struct Page {
    /// The deliveries it wrote.
    pub queued: Vec<String>,
    /// Whether the recovery has more pages (false once the last ran, or when another run of this
    /// page got there first).
    pub more: bool,
}

crate::store::row! {
    struct Mark {
        created_at: Timestamp,
        id: String,
    }
}

/// Runs the next page of `recovery` as its row says: the account's next [`PAGE`] events of the
/// window after where the last page ended, a delivery for each the endpoint is subscribed to
/// and lacks, and the row moved past them, in one batch.
pub async fn page(db: &D1Database, recovery: &Recovery, now: Timestamp) -> Result<Page, EdgeError> {
    if recovery.finished_at.is_some() {
        return Ok(Page::default());
    }
    let after_at = recovery.after_created_at.map_or(JsValue::NULL, time);
    let after_id = opt_text(recovery.after_id.as_deref());
    // The page's times, as bounds the account's index walks between: from where the last page
    // ended (or the window's start) ...
    let from = time(recovery.after_created_at.unwrap_or(recovery.since));
    // ... to its PAGE-th event of the window, or the window's end when fewer are left.
    let end: Option<Mark> = db::first(db::stmt(
        db,
        "SELECT created_at, id FROM outbound_events
         WHERE account_id = ?1 AND created_at >= ?2 AND created_at < ?3
           AND (?4 IS NULL OR (created_at, id) > (?4, ?5))
         ORDER BY created_at, id LIMIT 1 OFFSET ?6",
        &[
            text(&recovery.account_id),
            from.clone(),
            time(recovery.until),
            after_at.clone(),
            after_id.clone(),
            int(PAGE - 1),
        ],
    )?)
    .await?;
    let (end_at, end_id) = end.as_ref().map_or((JsValue::NULL, JsValue::NULL), |m| (time(m.created_at), text(&m.id)));
    let to = end.map_or(time(recovery.until), |m| time(Timestamp::from_unix_millis(m.created_at.unix_millis() + 1)));
    let insert = db::stmt(
        db,
        "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at,
                                         created_at, updated_at)
         SELECT 'dlv_' || lower(hex(randomblob(16))), o.id, e.id, e.account_id, 'replay', 'pending', 0, ?9, ?9, ?9
         FROM outbound_events o JOIN webhook_endpoints e ON e.id = ?2 AND e.account_id = o.account_id
         WHERE o.account_id = ?1 AND o.created_at >= ?3 AND o.created_at < ?4 AND o.test = 0
           AND (?5 IS NULL OR (o.created_at, o.id) > (?5, ?6))
           AND (?7 IS NULL OR (o.created_at, o.id) <= (?7, ?8))
           AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = o.type)
           -- By the event's deliveries (a few), never by the endpoint's (all it ever had): `+`
           -- keeps the planner off the endpoint's index.
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                           WHERE d.event_id = o.id AND +d.endpoint_id = e.id
                             AND d.status IN ('succeeded', 'pending', 'filtered'))
           AND EXISTS (SELECT 1 FROM endpoint_recoveries r WHERE r.id = ?10 AND r.finished_at IS NULL
                         AND r.after_created_at IS ?5 AND r.after_id IS ?6)
         ORDER BY o.created_at, o.id
         RETURNING id",
        &[
            text(&recovery.account_id),
            text(&recovery.endpoint_id),
            from,
            to,
            after_at.clone(),
            after_id.clone(),
            end_at.clone(),
            end_id.clone(),
            time(now),
            text(&recovery.id),
        ],
    )?;
    // The guard: only from where this page began. The last page (no end) finishes it.
    let advance = db::stmt(
        db,
        "UPDATE endpoint_recoveries SET after_created_at = COALESCE(?4, after_created_at),
             after_id = COALESCE(?5, after_id), queued = queued + changes(),
             finished_at = CASE WHEN ?4 IS NULL THEN ?6 END, updated_at = ?6
         WHERE id = ?1 AND finished_at IS NULL AND after_created_at IS ?2 AND after_id IS ?3",
        &[text(&recovery.id), after_at, after_id, end_at.clone(), end_id, time(now)],
    )?;
    let results = db::batch(db, vec![insert, advance]).await?;
    let queued = results.first().map(db::ids).transpose()?.unwrap_or_default();
    let moved = results.get(1).map(db::changes).unwrap_or(0) == 1;
    Ok(Page { queued, more: moved && !end_at.is_null() })
}
