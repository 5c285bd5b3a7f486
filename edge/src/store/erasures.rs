//! The `erasures` table, in `DB`: each erasure of a phone number's data, how far its pages got
//! and what they erased (docs/contract.md §5, "Erasure"). The number is kept only as a MAC; the
//! pages' jobs carry it.
//!
//! Also the one way a page reads a table: a window of the [`WINDOW`] rows after its cursor, at
//! most [`MATCHES`] matching rows of it, so no statement grows with the table.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, int, opt_text, opt_time, text, time};

/// The rows one page reads past its cursor.
pub const WINDOW: i64 = 10_000;

/// The matching rows one page takes at most: each may cost a call (a stored copy to delete, a
/// call's object to clear), so a page stays far inside an invocation's subrequests.
pub const MATCHES: i64 = 25;

crate::store::row! {
    /// An erasure and how far it got.
    #[derive(Debug)]
    pub struct Erasure {
        pub id: String,
        pub account_id: Option<String>,
        /// What it erased so far, per kind (a JSON object).
        pub counts: String,
        pub state: State,
        /// 1, then 2 for the tail.
        pub pass: i64,
        /// The index of the step it is in.
        pub step: i64,
        /// The last row id the step has read.
        pub after_row: i64,
        /// Where pass 1 ended each step (a JSON array): pass 2 starts each there.
        pub marks: String,
        /// Its steps by name (a JSON array), which `step` and `marks` index; empty before its
        /// first page.
        pub plan: String,
        pub pages: i64,
        pub created_at: Timestamp,
        pub updated_at: Option<Timestamp>,
        pub finished_at: Option<Timestamp>,
    }
}

exactly_core::text_enum! {
    /// Where an erasure stands.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum State {
        /// Its pages run.
        Running = "running",
        /// Its last page ran.
        Finished = "finished",
    }
}
crate::store::row::named!(State);

/// What each count of an erasure's record counts.
pub const COUNTS: [&str; 7] =
    ["messages", "media_copies", "calls", "call_states", "ring_targets", "customer_events", "carrier_events"];

/// Counts of nothing yet.
pub fn no_counts() -> serde_json::Value {
    serde_json::Value::Object(COUNTS.iter().map(|k| ((*k).to_owned(), serde_json::json!(0))).collect())
}

const COLUMNS: &str =
    "id, account_id, counts, state, pass, step, after_row, marks, plan, pages, created_at, updated_at, finished_at";

/// Records a new erasure, with no page run yet, unless one of the same number and scope runs
/// (a unique index keeps one); whether it did.
pub async fn start(
    db: &D1Database,
    id: &str,
    number_mac: &str,
    account_id: Option<&str>,
    counts: &serde_json::Value,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let added = db::run(db::stmt(
        db,
        "INSERT OR IGNORE INTO erasures (id, number_mac, account_id, counts, state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
        &[text(id), text(number_mac), opt_text(account_id), text(&counts.to_string()), time(now)],
    )?)
    .await?;
    Ok(added == 1)
}

/// Erasure `id`.
pub async fn find(db: &D1Database, id: &str) -> Result<Option<Erasure>, EdgeError> {
    db::first(db::stmt(db, &format!("SELECT {COLUMNS} FROM erasures WHERE id = ?1"), &[text(id)])?).await
}

/// The erasure of the number `number_mac` names, for `account_id` (or every account), that is
/// still running.
pub async fn running(
    db: &D1Database,
    number_mac: &str,
    account_id: Option<&str>,
) -> Result<Option<Erasure>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!(
            "SELECT {COLUMNS} FROM erasures WHERE number_mac = ?1 AND state = 'running' AND account_id IS ?2
             ORDER BY created_at LIMIT 1"
        ),
        &[text(number_mac), opt_text(account_id)],
    )?)
    .await
}

/// Where a page leaves an erasure.
pub struct Next {
    pub pass: i64,
    pub step: i64,
    pub after_row: i64,
    pub marks: String,
    /// Its steps by name (a JSON array).
    pub plan: String,
    pub counts: serde_json::Value,
    pub finished: bool,
}

/// Moves `erasure` to `next`, only from where its page began: of two runs of one page, one
/// moves it. Whether this one did.
pub async fn advance(db: &D1Database, erasure: &Erasure, next: &Next, now: Timestamp) -> Result<bool, EdgeError> {
    let finished_at = next.finished.then_some(now);
    let changed = db::run(db::stmt(
        db,
        "UPDATE erasures SET pass = ?5, step = ?6, after_row = ?7, marks = ?8, counts = ?9, pages = pages + 1,
             state = CASE WHEN ?10 IS NULL THEN 'running' ELSE 'finished' END, finished_at = ?10, updated_at = ?11,
             plan = ?12
         WHERE id = ?1 AND state = 'running' AND pass = ?2 AND step = ?3 AND after_row = ?4",
        &[
            text(&erasure.id),
            int(erasure.pass),
            int(erasure.step),
            int(erasure.after_row),
            int(next.pass),
            int(next.step),
            int(next.after_row),
            text(&next.marks),
            text(&next.counts.to_string()),
            opt_time(finished_at),
            time(now),
            text(&next.plan),
        ],
    )?)
    .await?;
    Ok(changed == 1)
}

impl Erasure {
    /// As the API shows it: never the number.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "account_id": self.account_id,
            "state": self.state.as_str(),
            "counts": serde_json::from_str::<serde_json::Value>(&self.counts).unwrap_or_default(),
            "pages": self.pages,
            "created_at": self.created_at.to_rfc3339(),
            "finished_at": self.finished_at.map(|t| t.to_rfc3339()),
        })
    }
}

crate::store::row! {
    /// A row a page found: its row id, its id, and its body when the page reads one.
    pub struct Hit {
        pub row_no: i64,
        pub id: String,
        pub body: Option<String>,
    }
}

impl std::fmt::Debug for Hit {
    /// Without the body: a carrier event's payload names a person.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hit").field("row_no", &self.row_no).field("id", &self.id).finish_non_exhaustive()
    }
}

/// What a page found in its window.
#[derive(Debug)]
pub struct Found {
    pub hits: Vec<Hit>,
    /// The last row id the page read: the next page starts after it.
    pub upto: i64,
    /// Whether no row of the table is past it.
    pub done: bool,
    /// The table's last row id when the page read it.
    pub last: i64,
}

/// A table an erasure reads in windows.
#[derive(Clone, Copy, Debug)]
pub enum Table {
    Messages,
    Calls,
    PhoneNumbers,
    CarrierEvents,
}

/// The rows of `table` among its next [`WINDOW`] rows past row id `after` (in row id order, so
/// ids need not be dense: the dedupe log's are spread over the shards) that `hits` selects:
/// `hits` reads `row_no` (the row id), `id` and `body` of the rows with row id in (`?1`, `?2`]
/// that match, `ORDER BY rowid LIMIT 25` ([`MATCHES`]); its own parameters start at `?3`.
pub async fn window(
    db: &D1Database,
    table: Table,
    hits: &str,
    params: &[JsValue],
    after: i64,
) -> Result<Found, EdgeError> {
    if !hits.ends_with(&format!("ORDER BY rowid LIMIT {MATCHES}")) {
        return Err(EdgeError::platform("erasure page", "a window's query must take at most MATCHES rows"));
    }
    let table = match table {
        Table::Messages => "messages",
        Table::Calls => "calls",
        Table::PhoneNumbers => "phone_numbers",
        Table::CarrierEvents => "carrier_events",
    };
    crate::store::row! {
        struct Ends {
            upto: i64,
            last: i64,
        }
    }
    // The window's last row: the WINDOW-th past `after`, or the table's last when fewer are left,
    // found by walking the row id b-tree.
    let ends: Option<Ends> = db::first(db::stmt(
        db,
        &format!(
            "SELECT COALESCE((SELECT rowid FROM {table} WHERE rowid > ?1 ORDER BY rowid LIMIT 1 OFFSET ?2),
                             (SELECT MAX(rowid) FROM {table}), ?1) AS upto,
                    COALESCE((SELECT MAX(rowid) FROM {table}), 0) AS last"
        ),
        &[int(after), int(WINDOW - 1)],
    )?)
    .await?;
    let (end, last) = ends.map_or((after, after), |e| (e.upto, e.last));
    let mut args = vec![int(after), int(end)];
    args.extend_from_slice(params);
    let hits: Vec<Hit> = db::all(db::stmt(db, hits, &args)?).await?;
    let full = hits.len() as i64 >= MATCHES;
    let upto = match hits.last() {
        Some(hit) if full => hit.row_no,
        _ => end,
    };
    Ok(Found { hits, upto, done: !full && upto >= last, last })
}

/// The ids of `hits` as a JSON array, for `json_each`.
pub fn ids<'a>(hits: impl IntoIterator<Item = &'a Hit>) -> Result<String, EdgeError> {
    serde_json::to_string(&hits.into_iter().map(|h| h.id.as_str()).collect::<Vec<_>>())
        .map_err(|e| EdgeError::platform("encode", e))
}
