//! The dedupe log: the `carrier_events` table, one row per provider event id, guarded by
//! `UNIQUE (carrier, carrier_event_id)`, spread over one or more D1 databases (docs/scaling.md,
//! "The dedupe log across databases").
//!
//! A key's virtual shard (`exactly_core::shard`) and the shard map (`EVENT_SHARDS`) say which
//! database holds its row; with no map every shard is in `DB`. Duplicates are told apart by
//! rows changed (`meta.changes`), never by error text. An event is settled once: `processed_at`
//! (written after its effects committed, which are guarded on their own: docs/scaling.md point
//! 4) or `error` (a visible, permanent failure).
//!
//! Moving virtual shards: the database a shard leaves records `moved_to` in `shard_moves`, and
//! from then on its insert for that shard changes nothing (the guard is in the same statement),
//! so every writer that still goes there learns where the shard went and follows. The database
//! it arrives in records `moved_from`; until the copy is done, a key is looked up in the source
//! (which no longer takes new rows of the shard) before a row is written.

use std::rc::Rc;

use exactly_core::shard::{self, ShardMap};
use exactly_core::{Provider, Timestamp, VerifiedEvent};
use serde::Deserialize;
use wasm_bindgen::JsValue;
use worker::{D1Database, Env};

use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

/// The public form of an event's key: `cev_` and 16 hex digits of its rowid, opaque to clients.
/// SQL writes it as `{ID}`; [`key`] reads it back.
const ID: &str = "('cev_' || printf('%016x', e.id))";

/// The id a new row gets in its database (`exactly_core::shard`): the next sequence number of
/// the database (after every id it holds, including ids written before sharding, and after
/// every id it ever held: [`ID_FLOOR`]), the virtual shard (bound as `?6`) and the database's
/// tag (`?7`). Computed inside the INSERT, which D1 runs alone on its database, so two writers
/// never take the same number.
const NEXT_ID: &str = "(4503599627370496 + ((SELECT CASE WHEN m >= 4503599627370496 THEN ((m - 4503599627370496) >> 16) + 1 ELSE m + 1 END
       FROM (SELECT MAX(COALESCE((SELECT MAX(id) FROM carrier_events), 0),
                        COALESCE((SELECT last_id FROM retention_marks WHERE name = 'id_floor'), 0)) AS m)) << 16) + ?6 * 64 + ?7)";

/// Raises the database's id floor to its highest id, for the batch that deletes rows (a move's
/// removals, retention): an id once given out is never given out again, even after the rows
/// above it are gone.
pub const ID_FLOOR: &str = "INSERT INTO retention_marks (name, last_id)
     SELECT 'id_floor', COALESCE(MAX(id), 0) FROM carrier_events WHERE true
     ON CONFLICT (name) DO UPDATE SET last_id = MAX(last_id, excluded.last_id)";

/// How many databases a lookup follows a moved shard through before giving up.
const MAX_HOPS: usize = 4;

/// The rowid inside a public id (`cev_...`; the bare decimal that jobs enqueued by earlier
/// versions carry is read too).
fn rowid(id: &str) -> Option<i64> {
    match id.strip_prefix("cev_") {
        Some(hex) if hex.len() == 16 => i64::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None => id.parse::<i64>().ok(),
    }
}

/// [`rowid`], bound for a `WHERE id = ?`; NULL, matching nothing, for anything else.
fn key(id: &str) -> JsValue {
    rowid(id).map_or(JsValue::NULL, int)
}

/// What storing a delivery found.
#[derive(Debug, PartialEq, Eq)]
pub enum Stored {
    /// The first delivery of this provider event id: a new row.
    New { id: String },
    /// A later delivery of an event that is not settled yet; its job may have been lost.
    PendingDuplicate { id: String },
    /// A later delivery of an event that was already processed or visibly failed.
    SettledDuplicate { id: String },
}

/// A stored carrier event, as the processor reads it.
#[derive(Debug)]
pub struct Row {
    pub id: String,
    pub carrier: String,
    pub carrier_event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub processed_at: Option<f64>,
    pub error: Option<String>,
    pub attempts: f64,
    /// When the first delivery was stored (Unix ms).
    pub created_at: f64,
    /// The binding of the database the row was read from, where its marks go.
    pub binding: String,
}

impl Row {
    /// Processed or failed: nothing more to do.
    pub fn settled(&self) -> bool {
        self.processed_at.is_some() || self.error.is_some()
    }
}

/// A row read together with its shard's move record (every column optional: the row or the
/// record may be absent).
#[derive(Debug, Deserialize)]
struct Found {
    id: Option<String>,
    carrier: Option<String>,
    carrier_event_id: Option<String>,
    event_type: Option<String>,
    payload: Option<String>,
    processed_at: Option<f64>,
    error: Option<String>,
    attempts: Option<f64>,
    created_at: Option<f64>,
    moved_to: Option<String>,
    moved_from: Option<String>,
    copied_at: Option<f64>,
}

impl Found {
    fn row(self, binding: &str) -> Option<Row> {
        Some(Row {
            id: self.id?,
            carrier: self.carrier?,
            carrier_event_id: self.carrier_event_id?,
            event_type: self.event_type?,
            payload: self.payload,
            processed_at: self.processed_at,
            error: self.error,
            attempts: self.attempts.unwrap_or(0.0),
            created_at: self.created_at.unwrap_or(0.0),
            binding: binding.to_owned(),
        })
    }

    /// Where to look next when the row is not here: the shard moved on, or is still arriving.
    fn next(&self) -> Option<&str> {
        self.moved_to.as_deref().or(self.moved_from.as_deref().filter(|_| self.copied_at.is_none()))
    }
}

/// The columns of [`Found`], for a query joining `carrier_events e` and `shard_moves m`.
const FOUND: &str = "CASE WHEN e.id IS NULL THEN NULL ELSE ('cev_' || printf('%016x', e.id)) END AS id, e.carrier,
    e.carrier_event_id, e.event_type, e.payload, e.processed_at, e.error, e.attempts, e.created_at, m.moved_to,
    m.moved_from, m.copied_at";

/// The dedupe log of a deployment: the shard map and the bindings.
pub struct Log {
    env: Env,
    map: Rc<ShardMap>,
}

impl Log {
    /// The log as configured (`EVENT_SHARDS`, default: everything in `DB`).
    pub fn open(env: &Env) -> Result<Self, EdgeError> {
        Ok(Log { env: db::root_env(env), map: Rc::clone(&crate::config::get(env)?.event_shards) })
    }

    /// The database of a dedupe binding.
    pub fn database(&self, binding: &str) -> Result<D1Database, EdgeError> {
        db::d1(&self.env, binding)
    }

    /// Every dedupe database the worker has: `DB`, every `EVENTS_<n>` binding, and any other the
    /// map names; `DB` first.
    pub fn bindings(&self) -> Vec<String> {
        db::databases_of_kind(
            &self.env,
            |k| k.starts_with(crate::bindings::EVENTS_PREFIX) && shard::binding_tag(k).is_some(),
            self.map.bindings(),
            shard::binding_tag,
        )
    }

    /// Inserts the event unless its provider event id is already stored, in one round trip to
    /// the database of its shard (more only while the shard moves).
    ///
    /// The INSERT is `ON CONFLICT DO NOTHING`; its `changes` says whether this delivery was the
    /// first. The SELECT in the same batch (one transaction) reads the row either way. Also
    /// returns the rows D1 wrote (`meta.rows_written`, indexes included), for the logs and the
    /// benchmark.
    pub async fn store(
        &self,
        event: &VerifiedEvent,
        payload: &str,
        now: Timestamp,
    ) -> Result<(Stored, usize), EdgeError> {
        let e = event.event();
        self.insert(e.provider.as_str(), &e.event_id, &e.event_type, payload, now).await
    }

    /// Stores a fact the platform learned by asking the carrier (reconciliation), in the
    /// carrier's own format under its own dedupe key, unless that key is stored already. Returns
    /// the row's id when this call stored it: a fact learned twice, or learned after the
    /// carrier's own webhook with the same key, is stored once.
    pub async fn store_learned(
        &self,
        carrier: &str,
        carrier_event_id: &str,
        event_type: &str,
        payload: &str,
        now: Timestamp,
    ) -> Result<Option<String>, EdgeError> {
        Ok(match self.insert(carrier, carrier_event_id, event_type, payload, now).await?.0 {
            Stored::New { id } => Some(id),
            _ => None,
        })
    }

    async fn insert(
        &self,
        carrier: &str,
        carrier_event_id: &str,
        event_type: &str,
        payload: &str,
        now: Timestamp,
    ) -> Result<(Stored, usize), EdgeError> {
        let vshard = shard::virtual_shard(carrier, carrier_event_id);
        let mut binding = self.map.binding(vshard).to_owned();
        let mut checked = false;
        let mut rows_written = 0;
        for _ in 0..MAX_HOPS {
            let tag = shard::binding_tag(&binding)
                .ok_or_else(|| EdgeError::Unavailable(format!("{binding} is not a dedupe binding")))?;
            let db = self.database(&binding)?;
            let insert = db::stmt(
                &db,
                &format!(
                    "INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, attempts, created_at)
                     SELECT {NEXT_ID}, ?1, ?2, ?3, ?4, 0, ?5
                     WHERE NOT EXISTS (SELECT 1 FROM shard_moves WHERE vshard = ?6
                        AND (moved_to IS NOT NULL OR (moved_from IS NOT NULL AND copied_at IS NULL AND ?8 = 0)))
                     ON CONFLICT (carrier, carrier_event_id) DO NOTHING"
                ),
                &[
                    text(carrier),
                    text(carrier_event_id),
                    text(event_type),
                    text(payload),
                    time(now),
                    int(i64::from(vshard)),
                    int(i64::from(tag)),
                    int(i64::from(checked)),
                ],
            )?;
            let select = db::stmt(
                &db,
                &format!(
                    "SELECT CASE WHEN e.id IS NULL THEN NULL ELSE {ID} END AS id, e.processed_at, e.error, m.moved_to,
                        m.moved_from, m.copied_at
                     FROM (SELECT ?3 AS v) AS k
                     LEFT JOIN carrier_events e ON e.carrier = ?1 AND e.carrier_event_id = ?2
                     LEFT JOIN shard_moves m ON m.vshard = k.v"
                ),
                &[text(carrier), text(carrier_event_id), int(i64::from(vshard))],
            )?;
            // Read field by field from D1's own objects: this runs on every delivery (see
            // store::batch_raw).
            let results = db::batch_raw(&db, &[insert, select]).await?;
            let [inserted, selected] = results.as_slice() else {
                return Err(EdgeError::Unavailable("store carrier event: short batch".into()));
            };
            rows_written += db::meta_count(inserted, "rows_written") + db::meta_count(selected, "rows_written");
            let found = db::first_row(selected)
                .ok_or_else(|| EdgeError::Unavailable("store carrier event: no answer".into()))?;
            if let Some(id) = db::field(&found, "id").as_string() {
                let settled = !db::field(&found, "processed_at").is_null() || !db::field(&found, "error").is_null();
                let stored = if db::meta_count(inserted, "changes") == 1 {
                    Stored::New { id }
                } else if settled {
                    Stored::SettledDuplicate { id }
                } else {
                    Stored::PendingDuplicate { id }
                };
                return Ok((stored, rows_written));
            }
            if let Some(to) = db::field(&found, "moved_to").as_string() {
                binding = to;
                checked = false;
                continue;
            }
            let arriving = db::field(&found, "copied_at").is_null();
            match db::field(&found, "moved_from").as_string() {
                Some(from) if arriving && !checked => {
                    // Still being copied here: the source holds the keys not copied yet. It
                    // takes no new rows of this shard once it records the move, so a key it
                    // lacks now it never gets, and this database may take it.
                    let source = self.database(&from)?;
                    let there: Option<Found> = db::first(db::stmt(
                        &source,
                        &format!(
                            "SELECT {FOUND} FROM (SELECT ?3 AS v) AS k
                             LEFT JOIN carrier_events e ON e.carrier = ?1 AND e.carrier_event_id = ?2
                             LEFT JOIN shard_moves m ON m.vshard = k.v"
                        ),
                        &[text(carrier), text(carrier_event_id), int(i64::from(vshard))],
                    )?)
                    .await?;
                    let there = there.ok_or_else(|| EdgeError::Unavailable("store carrier event: no answer".into()))?;
                    if there.moved_to.as_deref() != Some(binding.as_str()) {
                        return Err(EdgeError::Unavailable(format!(
                            "virtual shard {vshard} is arriving in {binding}, but {from} has not handed it over"
                        )));
                    }
                    if let Some(row) = there.row(&from) {
                        let id = row.id.clone();
                        return Ok((
                            if row.settled() {
                                Stored::SettledDuplicate { id }
                            } else {
                                Stored::PendingDuplicate { id }
                            },
                            rows_written,
                        ));
                    }
                    checked = true;
                }
                _ => return Err(EdgeError::Unavailable("carrier event not stored and not refused".into())),
            }
        }
        Err(EdgeError::Unavailable(format!("virtual shard {vshard} moved more than {MAX_HOPS} times")))
    }

    /// One stored event, wherever its shard is now.
    pub async fn load(&self, id: &str) -> Result<Option<Row>, EdgeError> {
        let Some(rowid) = rowid(id) else {
            return Ok(None);
        };
        let Some(vshard) = shard::shard_of_id(rowid) else {
            // Written before the log was sharded: in `DB`, or copied along with its shard. Looked
            // for twice, so a row moved between two lookups is still found.
            for _ in 0..2 {
                for binding in self.bindings() {
                    if let Some(row) = self.load_in(&binding, rowid, None).await?.and_then(|f| f.row(&binding)) {
                        return Ok(Some(row));
                    }
                }
            }
            return Ok(None);
        };
        let mut binding = self.map.binding(vshard).to_owned();
        for _ in 0..MAX_HOPS {
            let Some(found) = self.load_in(&binding, rowid, Some(vshard)).await? else {
                return Ok(None);
            };
            let next = found.next().map(str::to_owned);
            if let Some(row) = found.row(&binding) {
                return Ok(Some(row));
            }
            match next {
                Some(next) => binding = next,
                None => return Ok(None),
            }
        }
        Err(EdgeError::Unavailable(format!(
            "carrier event {id}: virtual shard {vshard} moved more than {MAX_HOPS} times"
        )))
    }

    async fn load_in(&self, binding: &str, rowid: i64, vshard: Option<u16>) -> Result<Option<Found>, EdgeError> {
        let db = self.database(binding)?;
        db::first(db::stmt(
            &db,
            &format!(
                "SELECT {FOUND} FROM (SELECT ?2 AS v) AS k
                 LEFT JOIN carrier_events e ON e.id = ?1
                 LEFT JOIN shard_moves m ON m.vshard = k.v"
            ),
            &[int(rowid), vshard.map_or(JsValue::NULL, |v| int(i64::from(v)))],
        )?)
        .await
    }

    /// Marks the event processed, once its effects committed. The guard `processed_at IS NULL`
    /// makes a second run change nothing; `attempts` counts the runs that did work. Returns
    /// whether this run applied it.
    pub async fn mark_processed(&self, row: &Row, now: Timestamp) -> Result<bool, EdgeError> {
        if crate::faults::crash_before_mark(&row.carrier_event_id) {
            return Err(EdgeError::Unavailable(format!(
                "injected crash between the effects and the processed mark of {}",
                row.carrier_event_id
            )));
        }
        let db = self.database(&row.binding)?;
        Ok(db::run(db::stmt(
            &db,
            "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1, waiting_for = NULL WHERE id = ?1 AND processed_at IS
                 NULL AND error IS NULL",
            &[key(&row.id), time(now)],
        )?)
        .await?
            == 1)
    }

    /// [`Log::mark_processed`] by id.
    pub async fn mark_processed_id(&self, id: &str, now: Timestamp) -> Result<bool, EdgeError> {
        match self.load(id).await? {
            Some(row) => self.mark_processed(&row, now).await,
            None => Ok(false),
        }
    }

    /// Records a permanent failure on an event that is not settled, once, with its
    /// `carrier_event.failed` signal. The signal is written first, in the resources' database
    /// `resources`, at most once per event; then the failure, guarded, in the event's own.
    pub async fn mark_failed(&self, resources: &D1Database, row: &Row, error: &str) -> Result<Failed, EdgeError> {
        if row.settled() {
            return Ok(Failed { changed: false, signals: Vec::new() });
        }
        let now = crate::platform::now();
        let data = serde_json::json!({ "carrier_event_id": row.id, "error": error });
        let signal = crate::store::signals::Signal::new("carrier_event.failed", &row.id, None, data, now)?;
        let written = db::batch(resources, signal.statements_once(resources, now)?).await?;
        let db = self.database(&row.binding)?;
        let changed = db::run(db::stmt(
            &db,
            "UPDATE carrier_events SET error = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS NULL
                 AND error IS NULL",
            &[key(&row.id), text(error)],
        )?)
        .await?
            == 1;
        let signals = if written.first().map(db::changes) == Some(1) { signal.event_ids() } else { Vec::new() };
        Ok(Failed { changed, signals })
    }

    /// [`Log::mark_failed`] by id; `None` when there is no such event.
    pub async fn mark_failed_id(
        &self,
        resources: &D1Database,
        id: &str,
        error: &str,
    ) -> Result<Option<Failed>, EdgeError> {
        match self.load(id).await? {
            Some(row) => Ok(Some(self.mark_failed(resources, &row, error).await?)),
            None => Ok(None),
        }
    }

    /// Clears the recorded failure of events that are not processed, so a re-driven job runs them
    /// afresh (with a fresh retry count).
    pub async fn clear_failure(&self, rows: &[Row]) -> Result<(), EdgeError> {
        for row in rows {
            let db = self.database(&row.binding)?;
            db::run(db::stmt(
                &db,
                "UPDATE carrier_events SET error = NULL, attempts = 0 WHERE id = ?1 AND processed_at IS NULL",
                &[key(&row.id)],
            )?)
            .await?;
        }
        Ok(())
    }

    /// Parks a receipt whose message is not recorded yet: it waits on `carrier_message_id` and is
    /// not retried. Refused (false) when the message exists by now, or a route to it does, so no
    /// wake-up can be missed: in the account database `resources` the check and the park are one
    /// statement, and the batch that records a send wakes what is parked on its id in one
    /// statement too ([`wake_stmt`]). A receipt with no route parks in `DB`, where the batch that
    /// writes a route wakes it ([`wake_routed_stmt`]). The event's own row then notes what it
    /// waits for, so the sweeper leaves it be. A receipt woken but parked again (its job found
    /// nothing yet) is parked afresh, no longer woken, so removing the woken record cannot lose
    /// it.
    pub async fn park(
        &self,
        resources: &D1Database,
        row: &Row,
        carrier: Provider,
        carrier_message_id: &str,
        now: Timestamp,
    ) -> Result<bool, EdgeError> {
        let results = db::batch(
            resources,
            vec![
                db::stmt(
                    resources,
                    "INSERT INTO parked_receipts (carrier, carrier_message_id, carrier_event, parked_at)
                     SELECT ?1, ?2, ?3, ?4
                     WHERE NOT EXISTS (SELECT 1 FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2)
                       AND NOT EXISTS (SELECT 1 FROM message_routes WHERE carrier = ?1 AND carrier_message_id = ?2)
                     ON CONFLICT DO UPDATE SET woken_at = NULL, parked_at = excluded.parked_at
                       WHERE parked_receipts.woken_at > 0",
                    &[text(carrier.as_str()), text(carrier_message_id), text(&row.id), time(now)],
                )?,
                db::stmt(
                    resources,
                    "SELECT id FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2
                     UNION ALL SELECT carrier_message_id AS id FROM message_routes
                     WHERE carrier = ?1 AND carrier_message_id = ?2",
                    &[text(carrier.as_str()), text(carrier_message_id)],
                )?,
            ],
        )
        .await?;
        if results.get(1).map(db::ids).transpose()?.is_some_and(|ids| !ids.is_empty()) {
            return Ok(false);
        }
        let db = self.database(&row.binding)?;
        db::run(db::stmt(
            &db,
            "UPDATE carrier_events SET waiting_for = ?2 WHERE id = ?1 AND processed_at IS NULL AND error IS NULL",
            &[key(&row.id), text(carrier_message_id)],
        )?)
        .await?;
        Ok(true)
    }

    /// Events stored before `older_than` that are neither processed nor failed nor parked: their
    /// job was lost or is stuck. Oldest first, at most `limit`, across every database.
    pub async fn unprocessed(&self, older_than: Timestamp, limit: u32) -> Result<Vec<(String, f64)>, EdgeError> {
        #[derive(Deserialize)]
        struct Pending {
            id: String,
            created_at: f64,
        }
        let mut all = Vec::new();
        for binding in self.bindings() {
            let db = self.database(&binding)?;
            let rows: Vec<Pending> = db::all(db::stmt(
                &db,
                &format!(
                    "SELECT {ID} AS id, e.created_at FROM carrier_events e
                     WHERE e.processed_at IS NULL AND e.error IS NULL AND e.created_at < ?1 AND e.waiting_for IS NULL
                     ORDER BY e.created_at LIMIT ?2"
                ),
                &[time(older_than), int(i64::from(limit))],
            )?)
            .await?;
            all.extend(rows.into_iter().map(|r| (r.id, r.created_at)));
        }
        all.sort_by(|a, b| a.1.total_cmp(&b.1));
        all.truncate(limit as usize);
        Ok(all)
    }

    /// Records a receipt that waited past the horizon (`parked_before`) without its message as
    /// failed, visibly: the event's error, then the operator's `carrier_event.failed` in `root`
    /// (once: its resource is the event), and only then its parked record is removed.
    ///
    /// The park is claimed for expiry first, in the statement that checks it was never woken
    /// (`woken_at = -1`, which no wake, fresh park or re-enqueue of woken receipts touches): a
    /// wake that comes after finds nothing to wake (the receipt waited past its horizon), and
    /// one that came between [`expired_parks`] and here leaves nothing to claim, so a receipt
    /// woken in time is never failed. A claim whose expiry was interrupted is found again by
    /// [`expired_parks`] and finished. A park whose event is not found, or found neither failed
    /// by this expiry nor settled (a shard move between the read and the write), is kept,
    /// claimed, for the next sweep: a receipt is never left neither applied, failed nor parked.
    pub async fn expire_park(
        &self,
        resources: &D1Database,
        root: &D1Database,
        park: &Woken,
        parked_before: Timestamp,
    ) -> Result<Failed, EdgeError> {
        let unchanged = Failed { changed: false, signals: Vec::new() };
        let claimed = db::run(db::stmt(
            resources,
            "UPDATE parked_receipts SET woken_at = -1
             WHERE carrier = ?1 AND carrier_message_id = ?2 AND carrier_event = ?3
               AND (woken_at = -1 OR (woken_at IS NULL AND parked_at < ?4))",
            &[text(&park.carrier), text(&park.carrier_message_id), text(&park.id), time(parked_before)],
        )?)
        .await?;
        if claimed == 0 {
            return Ok(unchanged);
        }
        let error = format!("no message with carrier id {} appeared within 24 hours", park.carrier_message_id);
        let Some(row) = self.load(&park.id).await? else { return Ok(unchanged) };
        let db = self.database(&row.binding)?;
        let changed = db::run(db::stmt(
            &db,
            "UPDATE carrier_events SET error = ?2, waiting_for = NULL
             WHERE id = ?1 AND processed_at IS NULL AND error IS NULL",
            &[key(&row.id), text(&error)],
        )?)
        .await?
            == 1;
        let failed_here = changed || row.error.as_deref() == Some(error.as_str());
        if !failed_here && !row.settled() {
            // Not where it was read (moved meanwhile): the next sweep finds it again.
            return Ok(unchanged);
        }
        let mut signals = Vec::new();
        if failed_here {
            let now = crate::platform::now();
            let data = serde_json::json!({ "carrier_event_id": row.id, "error": error });
            let signal = crate::store::signals::Signal::new("carrier_event.failed", &row.id, None, data, now)?;
            let written = db::batch(root, signal.statements_once(root, now)?).await?;
            if written.first().map(db::changes) == Some(1) {
                signals = signal.event_ids();
            }
        }
        drop_park(resources, park).await?;
        Ok(Failed { changed, signals })
    }

    /// What the sweeper does with a receipt woken at least a sweep interval ago. A woken receipt
    /// keeps its parked record until its event is settled (processed or failed), so it is never
    /// left where nothing looks: its event still notes what it waited for, which keeps it out of
    /// [`Log::unprocessed`], and its job may have been lost after the wake (an enqueue that
    /// failed, retries spent and a dead-letter write that failed with them).
    ///
    /// Settled, or gone from the log (nothing left to apply): the record is removed. Otherwise
    /// its job is to be enqueued again (true), and its wake is moved to `now`, so the next look
    /// is an interval later and a receipt that cannot be applied yet never holds up the others
    /// behind it. A receipt parked afresh meanwhile (its job found no message yet) is no longer
    /// woken, and neither statement touches it.
    pub async fn recheck_woken(&self, resources: &D1Database, park: &Woken, now: Timestamp) -> Result<bool, EdgeError> {
        let pending = self.load(&park.id).await?.is_some_and(|row| !row.settled());
        let key = [text(&park.carrier), text(&park.carrier_message_id), text(&park.id)];
        let statement = if pending {
            db::stmt(
                resources,
                "UPDATE parked_receipts SET woken_at = ?4
                 WHERE carrier = ?1 AND carrier_message_id = ?2 AND carrier_event = ?3 AND woken_at > 0",
                &[key[0].clone(), key[1].clone(), key[2].clone(), time(now)],
            )?
        } else {
            db::stmt(
                resources,
                "DELETE FROM parked_receipts WHERE carrier = ?1 AND carrier_message_id = ?2 AND carrier_event = ?3
                   AND woken_at > 0",
                &key,
            )?
        };
        db::run(statement).await?;
        Ok(pending)
    }

    /// A page of carrier events in one state, newest first, across every database.
    ///
    /// The order and the cursor both use the integer rowid, unique across databases (its tag
    /// says which database wrote it). The row's `id` is selected in its public form, and an
    /// unqualified `id` in ORDER BY would name that text alias while the WHERE compared
    /// integers, so pages skipped rows; `e.id` names the column in both, and the cursor's id is
    /// bound as the integer inside it.
    pub async fn list(
        &self,
        state: EventState,
        cursor: Option<crate::store::Cursor>,
        limit: u32,
    ) -> Result<Vec<Listed>, EdgeError> {
        let condition = match state {
            EventState::Failed => "e.error IS NOT NULL",
            EventState::Pending => "e.processed_at IS NULL AND e.error IS NULL",
            EventState::Processed => "e.processed_at IS NOT NULL",
        };
        let (at, id) = match &cursor {
            Some(c) => {
                let rowid = key(&c.id);
                if rowid.is_null() {
                    return Err(EdgeError::invalid("cursor", "is not a cursor from a previous page"));
                }
                (int(c.created_at), rowid)
            }
            None => (JsValue::NULL, JsValue::NULL),
        };
        let mut all: Vec<Listed> = Vec::new();
        for binding in self.bindings() {
            let db = self.database(&binding)?;
            all.extend(
                db::all::<Listed>(db::stmt(
                    &db,
                    &format!(
                        "SELECT {ID} AS id, e.id AS rid, e.carrier, e.carrier_event_id, e.event_type, e.processed_at,
                             e.error, e.attempts, e.created_at FROM carrier_events e
                         WHERE {condition} AND (?1 IS NULL OR e.created_at < ?1 OR (e.created_at = ?1 AND e.id < ?2))
                         ORDER BY e.created_at DESC, e.id DESC LIMIT ?3"
                    ),
                    &[at.clone(), id.clone(), int(i64::from(limit))],
                )?)
                .await?,
            );
        }
        all.sort_by(|a, b| b.created_at.total_cmp(&a.created_at).then(b.rid.total_cmp(&a.rid)));
        all.truncate(limit as usize);
        Ok(all)
    }
}

/// A move of virtual shards `first..=last` to another database (docs/scaling.md, "Moving virtual
/// shards"), as far as one call took it.
#[derive(Debug, serde::Serialize)]
pub struct Move {
    /// The binding the shards leave (the map's, for all of them).
    pub from: String,
    /// The binding they move to.
    pub to: String,
    pub first: u16,
    pub last: u16,
    /// Rows this call copied (and removed from `from`).
    pub copied: usize,
    /// The last id of `from` visited: the next call goes on after it.
    pub after: i64,
    /// Every row is copied: the shards live in `to`, which no longer asks `from` about keys.
    /// The map may now name `to` for them.
    pub done: bool,
}

/// Rows read per page of a move.
const MOVE_PAGE: u32 = 100;

/// A carrier event row as a move copies it.
#[derive(Clone, Deserialize)]
struct Copy {
    id: f64,
    carrier: String,
    carrier_event_id: String,
    event_type: String,
    payload: Option<String>,
    processed_at: Option<f64>,
    error: Option<String>,
    attempts: f64,
    created_at: f64,
    waiting_for: Option<String>,
}

/// The columns of [`Copy`].
const COPY: &str = "id, carrier, carrier_event_id, event_type, payload, processed_at, error, attempts, created_at,
    waiting_for";

impl Log {
    /// Moves virtual shards `first..=last` from the database the map gives them to `to`, in
    /// steps: the first call records the move in both databases (the target first, so the moment
    /// the source refuses new rows and sends writers on, the target already looks keys up in the
    /// source), and every call copies up to `pages` pages of rows after `after`, removing each
    /// copied row from the source. Calling again with the answer's `after` goes on; repeating a
    /// call is harmless. One move of a shard at a time: a call whose claim on the source finds
    /// any of the shards moving elsewhere is refused (409), and the move is marked copied only
    /// once every row from the first on was visited, whatever `after` a call names.
    /// `rival` (the tests' `E2E_RIVAL_MOVE_TO`) lands another move's claim just before this
    /// call's own.
    pub async fn move_shards(
        &self,
        first: u16,
        last: u16,
        to: &str,
        after: i64,
        pages: usize,
        rival: Option<&str>,
    ) -> Result<Move, EdgeError> {
        if first > last || last >= shard::VIRTUAL_SHARDS {
            return Err(EdgeError::invalid(
                "first",
                "first and last must be virtual shards (0 to 1023), first <= last",
            ));
        }
        if shard::binding_tag(to).is_none() {
            return Err(EdgeError::invalid("to", "must be DB or EVENTS_<n> (n from 0 to 62)"));
        }
        let from = self.map.binding(first).to_owned();
        if (first..=last).any(|v| self.map.binding(v) != from) {
            return Err(EdgeError::invalid("first", "the shards of one move must all be in one database"));
        }
        if from == to {
            return Err(EdgeError::invalid("to", "the shards are in that database already"));
        }
        let (source, target) = (self.database(&from)?, self.database(to)?);
        // The shards must be where this isolate's map says, and not on their way anywhere else:
        // a call from an isolate on an older map, or one overlapping another move, is refused
        // before it writes anything.
        #[derive(Deserialize)]
        struct State {
            vshard: f64,
            moved_to: Option<String>,
            moved_from: Option<String>,
            copied_at: Option<f64>,
        }
        let states = "SELECT vshard, moved_to, moved_from, copied_at FROM shard_moves WHERE vshard BETWEEN ?1 AND ?2";
        let bounds = [int(i64::from(first)), int(i64::from(last))];
        let conflict = |message: String| EdgeError::Conflict { code: "shard_move_conflict", message };
        for s in db::all::<State>(db::stmt(&source, states, &bounds)?).await? {
            let holds = s.moved_to.is_none() && (s.moved_from.is_none() || s.copied_at.is_some());
            if !holds && s.moved_to.as_deref() != Some(to) {
                return Err(conflict(format!(
                    "virtual shard {} is not held by {from} (moving to {:?}, arriving from {:?}); is the map deployed?",
                    s.vshard, s.moved_to, s.moved_from
                )));
            }
        }
        for s in db::all::<State>(db::stmt(&target, states, &bounds)?).await? {
            let elsewhere = s.moved_to.as_deref().is_some_and(|t| t != from)
                || (s.moved_from.as_deref().is_some_and(|f| f != from) && s.copied_at.is_none());
            if elsewhere {
                return Err(conflict(format!(
                    "virtual shard {} is moving between other databases in {to} (to {:?}, from {:?})",
                    s.vshard, s.moved_to, s.moved_from
                )));
            }
        }
        let now = crate::platform::now();
        if let Some(rival) = rival.filter(|r| *r != to && *r != from) {
            // Another call, moving the same shards elsewhere, got its claim in first.
            self.begin_move(&source, &self.database(rival)?, first, last, &from, rival, now).await?;
        }
        if !self.begin_move(&source, &target, first, last, &from, to, now).await? {
            return Err(conflict(format!(
                "virtual shards {first} to {last} of {from} are being moved by another call; finish that move first"
            )));
        }
        // Never after a row this move has not copied: a call that names a later `after` than
        // the move reached starts where it is, so no row is skipped and none is left behind.
        #[derive(Deserialize)]
        struct Progress {
            through: Option<f64>,
        }
        let progress: Option<Progress> = db::first(db::stmt(
            &target,
            "SELECT MIN(copied_through) AS through FROM shard_moves WHERE vshard BETWEEN ?1 AND ?2 AND moved_from = ?3",
            &[int(i64::from(first)), int(i64::from(last)), text(&from)],
        )?)
        .await?;
        let reached = progress.and_then(|p| p.through).map_or(0, |t| t as i64);
        let mut done =
            Move { from, to: to.to_owned(), first, last, copied: 0, after: after.clamp(0, reached), done: false };
        for _ in 0..pages {
            let start = done.after;
            let page: Vec<Copy> = db::all(db::stmt(
                &source,
                &format!("SELECT {COPY} FROM carrier_events WHERE id > ?1 ORDER BY id LIMIT ?2"),
                &[int(start), int(i64::from(MOVE_PAGE))],
            )?)
            .await?;
            let last_page = page.len() < MOVE_PAGE as usize;
            if let Some(row) = page.last() {
                done.after = row.id as i64;
            }
            // By key, not by id: the row's key is at hand, and an id written by an older version
            // during its rollout does not carry its shard.
            let moving: Vec<&Copy> = page
                .iter()
                .filter(|r| (first..=last).contains(&shard::virtual_shard(&r.carrier, &r.carrier_event_id)))
                .collect();
            done.copied += self.copy_rows(&source, &target, moving).await?;
            // The move's progress, only on from where it stood: the copied mark below needs
            // every row from the first on to have been visited.
            let reached = db::run(db::stmt(
                &target,
                "UPDATE shard_moves SET copied_through = MAX(copied_through, ?4),
                   copied_at = CASE WHEN ?5 THEN COALESCE(copied_at, ?6) ELSE copied_at END, updated_at = ?6
                 WHERE vshard BETWEEN ?1 AND ?2 AND moved_from = ?3 AND copied_through >= ?7",
                &[
                    int(i64::from(first)),
                    int(i64::from(last)),
                    text(&done.from),
                    int(done.after),
                    int(i64::from(last_page)),
                    time(now),
                    int(start),
                ],
            )?)
            .await?;
            if reached == 0 {
                return Err(conflict(format!(
                    "the move of virtual shards {first} to {last} changed while this call copied; call again"
                )));
            }
            if last_page {
                done.done = true;
                break;
            }
        }
        Ok(done)
    }

    /// Records a move of shards `first..=last` from `source` (binding `from`) to `target`
    /// (binding `to`): the target first, so that from the moment the source refuses new rows
    /// and sends writers on, the target already looks keys up in the source; then the source,
    /// claimed in one statement that writes nothing if any of the shards is moving anywhere else
    /// or still arriving. Of two calls moving the same shards to different databases, one claims
    /// them all and the other none (false): its arrival record in its target is removed again.
    /// Calling again with the same target claims again (a no-op).
    #[allow(clippy::too_many_arguments)]
    async fn begin_move(
        &self,
        source: &D1Database,
        target: &D1Database,
        first: u16,
        last: u16,
        from: &str,
        to: &str,
        now: Timestamp,
    ) -> Result<bool, EdgeError> {
        let range = "WITH RECURSIVE r(v) AS (SELECT ?1 UNION ALL SELECT v + 1 FROM r WHERE v < ?2)";
        let bounds = [int(i64::from(first)), int(i64::from(last))];
        db::run(db::stmt(
            target,
            &format!(
                "{range} INSERT INTO shard_moves (vshard, moved_to, moved_from, copied_at, updated_at)
                 SELECT v, NULL, ?3, NULL, ?4 FROM r WHERE true
                 ON CONFLICT (vshard) DO UPDATE SET moved_to = NULL, moved_from = excluded.moved_from,
                   copied_at = CASE WHEN shard_moves.moved_from = excluded.moved_from THEN shard_moves.copied_at END,
                   copied_through = CASE WHEN shard_moves.moved_from = excluded.moved_from
                                         THEN shard_moves.copied_through ELSE 0 END,
                   updated_at = excluded.updated_at"
            ),
            &[bounds[0].clone(), bounds[1].clone(), text(from), time(now)],
        )?)
        .await?;
        // SQLite computes the SELECT of an INSERT that reads its own table in full before it
        // writes a row, so the guard sees the shards as they were: all claimed, or none.
        let claimed = db::run(db::stmt(
            source,
            &format!(
                "{range} INSERT INTO shard_moves (vshard, moved_to, moved_from, copied_at, updated_at)
                 SELECT v, ?3, NULL, NULL, ?4 FROM r
                 WHERE NOT EXISTS (SELECT 1 FROM shard_moves s WHERE s.vshard BETWEEN ?1 AND ?2
                                   AND ((s.moved_to IS NOT NULL AND s.moved_to != ?3)
                                        OR (s.moved_to IS NULL AND s.moved_from IS NOT NULL AND s.copied_at IS NULL)))
                 ON CONFLICT (vshard) DO UPDATE SET moved_to = excluded.moved_to, moved_from = NULL, copied_at = NULL,
                   updated_at = excluded.updated_at"
            ),
            &[bounds[0].clone(), bounds[1].clone(), text(to), time(now)],
        )?)
        .await?;
        if claimed > 0 {
            return Ok(true);
        }
        db::run(db::stmt(
            target,
            "DELETE FROM shard_moves WHERE vshard BETWEEN ?1 AND ?2 AND moved_from = ?3 AND moved_to IS NULL
               AND copied_at IS NULL AND updated_at = ?4",
            &[bounds[0].clone(), bounds[1].clone(), text(from), time(now)],
        )?)
        .await?;
        Ok(false)
    }

    /// Copies `rows` from `source` into `target` under their own ids, then removes each from
    /// the source only if it is unchanged since it was read (a processed mark, a failure, a
    /// park or a re-drive written meanwhile is copied again first). A row with the same id but
    /// another key in the target is an error, never skipped. Returns how many moved.
    async fn copy_rows(
        &self,
        source: &D1Database,
        target: &D1Database,
        mut rows: Vec<&Copy>,
    ) -> Result<usize, EdgeError> {
        let mut moved = 0;
        let mut owned: Vec<Copy>;
        for _ in 0..3 {
            if rows.is_empty() {
                return Ok(moved);
            }
            let copies = rows
                .iter()
                .map(|r| {
                    db::stmt(
                        target,
                        "INSERT INTO carrier_events (id, carrier, carrier_event_id, event_type, payload, processed_at,
                             error, attempts, created_at, waiting_for)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                         ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, processed_at = excluded.processed_at,
                           error = excluded.error, attempts = excluded.attempts, waiting_for = excluded.waiting_for
                         WHERE carrier_events.carrier = excluded.carrier
                           AND carrier_events.carrier_event_id = excluded.carrier_event_id",
                        &[
                            int(r.id as i64),
                            text(&r.carrier),
                            text(&r.carrier_event_id),
                            text(&r.event_type),
                            db::opt_text(r.payload.as_deref()),
                            r.processed_at.map_or(JsValue::NULL, JsValue::from_f64),
                            db::opt_text(r.error.as_deref()),
                            JsValue::from_f64(r.attempts),
                            JsValue::from_f64(r.created_at),
                            db::opt_text(r.waiting_for.as_deref()),
                        ],
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut copies = copies;
            // Retention visits a database's rows from its payload watermark on: a row copied in
            // under an id below it would keep its payload past the retention, so the watermark
            // goes back below the lowest, in the same commit as the copies.
            let lowest = rows.iter().map(|r| r.id as i64).min().unwrap_or(0);
            copies.push(db::stmt(
                target,
                "UPDATE retention_marks SET last_id = MIN(last_id, ?1 - 1) WHERE name = 'payloads'",
                &[int(lowest)],
            )?);
            let results = db::batch(target, copies).await?;
            if let Some(clash) = results.iter().zip(&rows).find(|(r, _)| db::changes(r) != 1).map(|(_, row)| row) {
                return Err(EdgeError::Unavailable(format!(
                    "moving carrier event {}: the target holds another event under its id",
                    clash.carrier_event_id
                )));
            }
            // Only once the copies committed, and only rows as they were read: a crash between
            // leaves rows in both, and the next call copies them again and removes them.
            let removals = rows
                .iter()
                .map(|r| {
                    db::stmt(
                        source,
                        "DELETE FROM carrier_events WHERE id = ?1 AND processed_at IS ?2 AND error IS ?3
                             AND waiting_for IS ?4 AND attempts = ?5 AND payload IS ?6",
                        &[
                            int(r.id as i64),
                            r.processed_at.map_or(JsValue::NULL, JsValue::from_f64),
                            db::opt_text(r.error.as_deref()),
                            db::opt_text(r.waiting_for.as_deref()),
                            JsValue::from_f64(r.attempts),
                            db::opt_text(r.payload.as_deref()),
                        ],
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut batch = vec![db::stmt(source, ID_FLOOR, &[])?];
            batch.extend(removals);
            let results = db::batch(source, batch).await?;
            let changed: Vec<i64> = results[1..]
                .iter()
                .zip(&rows)
                .filter(|(r, _)| db::changes(r) != 1)
                .map(|(_, row)| row.id as i64)
                .collect();
            moved += rows.len() - changed.len();
            // Changed since they were read: read again (a row gone meanwhile needs nothing more).
            owned = Vec::new();
            for id in changed {
                owned.extend(
                    db::first::<Copy>(db::stmt(
                        source,
                        &format!("SELECT {COPY} FROM carrier_events WHERE id = ?1"),
                        &[int(id)],
                    )?)
                    .await?,
                );
            }
            rows = owned.iter().collect();
        }
        if rows.is_empty() {
            Ok(moved)
        } else {
            Err(EdgeError::Unavailable("carrier events kept changing while they were moved; call again".into()))
        }
    }
}

/// For the batch that records a send, after the statement that records it: wakes the receipts
/// parked on its carrier id (`woken_at`), if the message with that id is recorded by now, and
/// returns their event ids (`RETURNING`), to enqueue once the batch committed. The records stay,
/// woken, until the sweeper finds their events settled ([`Log::recheck_woken`]).
pub fn wake_stmt(
    db: &D1Database,
    carrier: &str,
    carrier_message_id: &str,
    now: Timestamp,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE parked_receipts SET woken_at = ?3 WHERE carrier = ?1 AND carrier_message_id = ?2 AND woken_at IS NULL
           AND EXISTS (SELECT 1 FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2)
         RETURNING carrier_event AS id",
        &[text(carrier), text(carrier_message_id), time(now)],
    )
}

/// For the batch in `DB` that writes the route of a send's carrier id, after the statement that
/// writes it ([`crate::store::routes::record_message`]): wakes the receipts parked in `DB` on
/// that id for want of a route, and returns their event ids like [`wake_stmt`], with those an
/// earlier run woke and nobody has enqueued and forgotten yet. The route is written again by a
/// send's every retry, so a send that crashed after its route enqueues them on its rerun
/// instead of leaving them to the sweeper (a second enqueue of one is a no-op job).
pub fn wake_routed_stmt(
    db: &D1Database,
    carrier: &str,
    carrier_message_id: &str,
    now: Timestamp,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE parked_receipts SET woken_at = COALESCE(woken_at, ?3)
         WHERE carrier = ?1 AND carrier_message_id = ?2 AND (woken_at IS NULL OR woken_at > 0)
           AND EXISTS (SELECT 1 FROM message_routes WHERE carrier = ?1 AND carrier_message_id = ?2)
         RETURNING carrier_event AS id",
        &[text(carrier), text(carrier_message_id), time(now)],
    )
}

/// The ids a [`wake_stmt`] returned.
pub fn woken(result: &worker::D1Result) -> Result<Vec<String>, EdgeError> {
    db::ids(result)
}

/// For the batch that records a send, in `DB`: wakes receipts parked by a version older than
/// `parked_receipts` (on `carrier_events.waiting_for` alone, while that version still ran), and
/// returns their ids like [`wake_stmt`].
pub fn wake_legacy_stmt(
    db: &D1Database,
    carrier: &str,
    carrier_message_id: &str,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE carrier_events SET waiting_for = NULL WHERE carrier = ?1 AND waiting_for = ?2
           AND processed_at IS NULL AND error IS NULL
           AND EXISTS (SELECT 1 FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2)
           AND NOT EXISTS (SELECT 1 FROM parked_receipts p WHERE p.carrier = ?1 AND p.carrier_message_id = ?2
                           AND p.carrier_event = 'cev_' || printf('%016x', carrier_events.id))
         RETURNING 'cev_' || printf('%016x', id) AS id",
        &[text(carrier), text(carrier_message_id)],
    )
}

/// A parked receipt, as the sweeper finds it.
#[derive(Debug, Deserialize)]
pub struct Woken {
    pub id: String,
    pub carrier: String,
    pub carrier_message_id: String,
}

/// Receipts woken before `older_than` (or last looked at then, [`Log::recheck_woken`]) and still
/// recorded, at most `limit`, the longest waiting first.
pub async fn still_woken(db: &D1Database, older_than: Timestamp, limit: u32) -> Result<Vec<Woken>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT carrier_event AS id, carrier, carrier_message_id FROM parked_receipts
         WHERE woken_at > 0 AND woken_at < ?1 ORDER BY woken_at LIMIT ?2",
        &[time(older_than), int(i64::from(limit))],
    )?)
    .await
}

/// Receipts parked since before `older_than` and never woken, at most `limit`, after any whose
/// expiry was claimed but not finished.
pub async fn expired_parks(db: &D1Database, older_than: Timestamp, limit: u32) -> Result<Vec<Woken>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT carrier_event AS id, carrier, carrier_message_id FROM parked_receipts WHERE woken_at = -1
         UNION ALL
         SELECT * FROM (SELECT carrier_event AS id, carrier, carrier_message_id FROM parked_receipts
                        WHERE woken_at IS NULL AND parked_at < ?1 ORDER BY parked_at LIMIT ?2)",
        &[time(older_than), int(i64::from(limit))],
    )?)
    .await
}

/// Removes a parked receipt claimed for expiry (its event was recorded as failed).
async fn drop_park(db: &D1Database, park: &Woken) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "DELETE FROM parked_receipts WHERE carrier = ?1 AND carrier_message_id = ?2 AND carrier_event = ?3
           AND woken_at = -1",
        &[text(&park.carrier), text(&park.carrier_message_id), text(&park.id)],
    )?)
    .await
    .map(|_| ())
}

/// How long a parked receipt waits for its message before it is recorded as failed.
pub const PARK_HORIZON_MILLIS: i64 = 24 * 3600 * 1000;

/// A failure recorded (or found recorded before), with the `carrier_event.failed` signal's
/// event ids to announce.
#[derive(Debug)]
pub struct Failed {
    /// This call recorded it.
    pub changed: bool,
    /// The signal's events (empty when it was written before).
    pub signals: Vec<String>,
}

/// A carrier event as `/admin/carrier_events` lists it.
#[derive(Debug, Deserialize)]
pub struct Listed {
    pub id: String,
    /// The integer behind `id`, for ordering across databases.
    rid: f64,
    pub carrier: String,
    pub carrier_event_id: String,
    pub event_type: String,
    pub processed_at: Option<f64>,
    pub error: Option<String>,
    pub attempts: f64,
    pub created_at: f64,
}

/// Where a carrier event stands, as `/admin/carrier_events?status=` filters it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventState {
    /// Recorded as a permanent failure (`error`).
    Failed,
    /// Neither processed nor failed.
    Pending,
    /// Its effects committed (`processed_at`).
    Processed,
}

impl EventState {
    /// The state named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "failed" => Some(EventState::Failed),
            "pending" => Some(EventState::Pending),
            "processed" => Some(EventState::Processed),
            _ => None,
        }
    }
}
