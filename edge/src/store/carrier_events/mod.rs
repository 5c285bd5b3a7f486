//! The dedupe log: the `carrier_events` table, one row per provider event id, guarded by
//! `UNIQUE (carrier, carrier_event_id)`, spread over one or more D1 databases (docs/scaling.md,
//! "The dedupe log across databases").
//!
//! A key's virtual shard (`exactly_core::shard`) and the shard map (`EVENT_SHARDS`) say which
//! database holds its row; with no map every shard is in `DB`. Duplicates are told apart by
//! rows changed (`meta.changes`), never by error text. An event is settled once: `processed_at`
//! (written with its effects or after they committed, which are guarded on their own:
//! docs/scaling.md point 4) or `error` (a visible, permanent failure).
//!
//! Moving virtual shards: the database a shard leaves records `moved_to` in `shard_moves`, and
//! from then on its insert for that shard changes nothing (the guard is in the same statement),
//! so every writer that still goes there learns where the shard went and follows. The database
//! it arrives in records `moved_from`; until the copy is done, a key is looked up in the source
//! (which no longer takes new rows of the shard) before a row is written.
//!
//! # Layout
//! - this file: the log itself: where a key's row lives, storing a delivery, loading a row
//!   (following moved shards), the settled marks, and the sweeper's scan of pending rows;
//! - [`parked`]: receipts that wait for their message (`parked_receipts`): parking, waking,
//!   expiry after 24 hours, and the sweeper's look at woken ones;
//! - [`moves`]: moving virtual shards between databases (`shard_moves`);
//! - [`listing`]: the operator's pages of events by state.

use std::rc::Rc;

use crate::store::Reply;
use exactly_core::shard::{self, ShardMap};
use exactly_core::webhook::EventType;
use exactly_core::{Provider, Timestamp, VerifiedEvent};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, Env};

use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

mod listing;
mod moves;
mod parked;
mod prune;

pub use listing::{EventState, Listed};
pub use moves::Move;
pub use parked::{
    expired_parks, still_woken, wake_legacy_stmt, wake_routed_stmt, wake_stmt, woken, Woken, PARK_HORIZON_MILLIS,
};
pub use prune::{erase_payloads, erasure_page, prune_payloads, prune_rows, redact_payload, unsettled_of};

/// The public form of an event's key: `cev_` and 16 hex digits of its rowid, opaque to clients.
/// SQL writes it as `{ID}`; [`key`] reads it back.
pub const ID: &str = "('cev_' || printf('%016x', e.id))";

/// The id a new row gets in its database (`exactly_core::shard`): the next sequence number of
/// the database (after every id it holds, including ids written before sharding, and after
/// every id it ever held: `retention::raise_id_floor`), the virtual shard (bound as `?6`) and the database's
/// tag (`?7`). Computed inside the INSERT, which D1 runs alone on its database, so two writers
/// never take the same number.
const NEXT_ID: &str = "(4503599627370496 + ((SELECT CASE WHEN m >= 4503599627370496 THEN ((m - 4503599627370496) >> 16) + 1 ELSE m + 1 END
       FROM (SELECT MAX(COALESCE((SELECT MAX(id) FROM carrier_events), 0),
                        COALESCE((SELECT last_id FROM retention_marks WHERE name = 'id_floor'), 0)) AS m)) << 16) + ?6 * 64 + ?7)";

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

impl Stored {
    /// The `outcome` the carrier's answer and the request's log line give.
    pub fn outcome(&self) -> &'static str {
        match self {
            Stored::New { .. } => "accepted",
            Stored::PendingDuplicate { .. } => "duplicate-requeued",
            Stored::SettledDuplicate { .. } => "duplicate",
        }
    }
}

/// A stored carrier event, as the processor reads it.
#[derive(Debug)]
pub struct Row {
    pub id: String,
    pub carrier: Provider,
    pub carrier_event_id: String,
    pub event_type: String,
    pub payload: Option<String>,
    pub processed_at: Option<Timestamp>,
    pub error: Option<String>,
    pub attempts: i64,
    /// When the first delivery was stored.
    pub created_at: Timestamp,
    /// The binding of the database the row was read from, where its marks go.
    pub binding: String,
}

impl Row {
    /// Processed or failed: nothing more to do.
    pub fn settled(&self) -> bool {
        self.processed_at.is_some() || self.error.is_some()
    }
}

/// A carrier event to store, with its virtual shard.
struct NewEvent<'a> {
    carrier: Provider,
    carrier_event_id: &'a str,
    event_type: &'a str,
    payload: &'a str,
    now: Timestamp,
    vshard: u16,
}

crate::store::row! {
    /// A row read together with its shard's move record (every column optional: the row or the
    /// record may be absent).
    #[derive(Debug)]
    struct Found {
        id: Option<String>,
        carrier: Option<Provider>,
        carrier_event_id: Option<String>,
        event_type: Option<String>,
        payload: Option<String>,
        processed_at: Option<Timestamp>,
        error: Option<String>,
        attempts: Option<i64>,
        created_at: Option<Timestamp>,
        moved_to: Option<String>,
        moved_from: Option<String>,
        copied_at: Option<Timestamp>,
    }
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
            attempts: self.attempts.unwrap_or(0),
            created_at: self.created_at.unwrap_or(Timestamp::from_unix_millis(0)),
            binding: binding.to_owned(),
        })
    }

    /// Where to look next when the row is not here: the shard moved on, or is still arriving.
    fn next(&self) -> Option<&str> {
        self.moved_to.as_deref().or(self.moved_from.as_deref().filter(|_| self.copied_at.is_none()))
    }
}

/// The query that finds stored event `rowid` in one database, with its shard's move (if any).
fn load_query(db: &D1Database, rowid: i64, vshard: Option<u16>) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        &format!(
            "SELECT {FOUND} FROM (SELECT ?2 AS v) AS k
             LEFT JOIN carrier_events e ON e.id = ?1
             LEFT JOIN shard_moves m ON m.vshard = k.v"
        ),
        &[int(rowid), vshard.map_or(JsValue::NULL, |v| int(i64::from(v)))],
    )
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

/// The processed mark: once, and never over a failure.
const MARK_PROCESSED: &str = "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1, waiting_for = NULL
     WHERE id = ?1 AND processed_at IS NULL AND error IS NULL";

impl Log {
    /// The log as `config` maps it (`EVENT_SHARDS`, default: everything in `DB`).
    pub fn open(env: &Env, config: &crate::config::Config) -> Self {
        Log { env: env.clone(), map: Rc::clone(&config.event_shards) }
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

    /// Whether the shard map puts every event in `DB`, so that a new row is written there.
    pub fn all_in_db(&self) -> bool {
        self.map.bindings().iter().all(|b| b == crate::bindings::DB)
    }

    /// A row as a job carried it ([`crate::queues::Carried`]): what ingest stored, not yet
    /// settled as far as the job knows: the effects' batch checks that it is
    /// (`messages::insert_inbound`).
    pub fn carried(
        id: &str,
        carrier: Provider,
        carrier_event_id: &str,
        event_type: &str,
        payload: &str,
        created_at: Timestamp,
    ) -> Row {
        Row {
            id: id.to_owned(),
            carrier,
            carrier_event_id: carrier_event_id.to_owned(),
            event_type: event_type.to_owned(),
            payload: Some(payload.to_owned()),
            processed_at: None,
            error: None,
            attempts: 0,
            created_at,
            binding: crate::bindings::DB.to_owned(),
        }
    }

    /// The argument naming `row` in a statement of its own database: its rowid there.
    pub fn key_of(row: &Row) -> JsValue {
        key(&row.id)
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
        self.insert(e.provider, &e.event_id, &e.event_type, payload, now).await
    }

    /// Stores a fact the platform learned by asking the carrier (reconciliation), in the
    /// carrier's own format under its own dedupe key, unless that key is stored already. Returns
    /// the row's id when this call stored it: a fact learned twice, or learned after the
    /// carrier's own webhook with the same key, is stored once.
    pub async fn store_learned(
        &self,
        carrier: Provider,
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
        carrier: Provider,
        carrier_event_id: &str,
        event_type: &str,
        payload: &str,
        now: Timestamp,
    ) -> Result<(Stored, usize), EdgeError> {
        let vshard = shard::virtual_shard(carrier.as_str(), carrier_event_id);
        let event = NewEvent { carrier, carrier_event_id, event_type, payload, now, vshard };
        let mut binding = self.map.binding(vshard).to_owned();
        let mut checked = false;
        let mut rows_written = 0;
        for _ in 0..MAX_HOPS {
            let (inserted, found, written) = self.insert_in(&binding, &event, checked).await?;
            rows_written += written;
            if let Some(id) = db::field(&found, "id").as_string() {
                let settled = !db::field(&found, "processed_at").is_null() || !db::field(&found, "error").is_null();
                let stored = if inserted {
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
                    if let Some(stored) = self.in_source(&from, &binding, &event).await? {
                        return Ok((stored, rows_written));
                    }
                    checked = true;
                }
                _ => return Err(EdgeError::unavailable("store", "carrier event not stored and not refused")),
            }
        }
        Err(EdgeError::unavailable("store", format!("virtual shard {vshard} moved more than {MAX_HOPS} times")))
    }

    /// Inserts `event` into the database of `binding` unless its shard left or is arriving
    /// there unchecked (`checked`: the source was asked and lacks the key), and reads the key's
    /// row and shard state after: whether it inserted, that row (D1's own object), and the rows
    /// written.
    async fn insert_in(
        &self,
        binding: &str,
        event: &NewEvent<'_>,
        checked: bool,
    ) -> Result<(bool, JsValue, usize), EdgeError> {
        let tag = shard::binding_tag(binding)
            .ok_or_else(|| EdgeError::unavailable("store", format!("{binding} is not a dedupe binding")))?;
        let db = self.database(binding)?;
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
                text(event.carrier.as_str()),
                text(event.carrier_event_id),
                text(event.event_type),
                text(event.payload),
                time(event.now),
                int(i64::from(event.vshard)),
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
            &[text(event.carrier.as_str()), text(event.carrier_event_id), int(i64::from(event.vshard))],
        )?;
        // Read field by field from D1's own objects: this runs on every delivery (see
        // store::batch_raw).
        let results = db::batch_raw(&db, &[insert, select]).await?;
        let [inserted, selected] = results.as_slice() else {
            return Err(EdgeError::unavailable("store", "store carrier event: short batch"));
        };
        let written = db::meta_count(inserted, "rows_written") + db::meta_count(selected, "rows_written");
        let found =
            db::first_row(selected).ok_or_else(|| EdgeError::unavailable("store", "store carrier event: no answer"))?;
        Ok((db::meta_count(inserted, "changes") == 1, found, written))
    }

    /// The key of `event`, whose shard is still being copied into `binding` from `from`: the
    /// source holds the keys not copied yet. It takes no new rows of the shard once it records
    /// the move, so a key it lacks now it never gets, and `binding` may take it (`None`).
    async fn in_source(&self, from: &str, binding: &str, event: &NewEvent<'_>) -> Result<Option<Stored>, EdgeError> {
        let source = self.database(from)?;
        let there: Option<Found> = db::first(db::stmt(
            &source,
            &format!(
                "SELECT {FOUND} FROM (SELECT ?3 AS v) AS k
                 LEFT JOIN carrier_events e ON e.carrier = ?1 AND e.carrier_event_id = ?2
                 LEFT JOIN shard_moves m ON m.vshard = k.v"
            ),
            &[text(event.carrier.as_str()), text(event.carrier_event_id), int(i64::from(event.vshard))],
        )?)
        .await?;
        let there = there.ok_or_else(|| EdgeError::unavailable("store", "store carrier event: no answer"))?;
        if there.moved_to.as_deref() != Some(binding) {
            return Err(EdgeError::unavailable(
                "store",
                format!("virtual shard {} is arriving in {binding}, but {from} has not handed it over", event.vshard),
            ));
        }
        Ok(there.row(from).map(|row| {
            let id = row.id.clone();
            if row.settled() {
                Stored::SettledDuplicate { id }
            } else {
                Stored::PendingDuplicate { id }
            }
        }))
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
        Err(EdgeError::unavailable(
            "store",
            format!("carrier event {id}: virtual shard {vshard} moved more than {MAX_HOPS} times"),
        ))
    }

    async fn load_in(&self, binding: &str, rowid: i64, vshard: Option<u16>) -> Result<Option<Found>, EdgeError> {
        db::first(load_query(&self.database(binding)?, rowid, vshard)?).await
    }

    /// [`Log::load`], with `also` (a query on `DB`) answered in the same batch when the event's
    /// shard is in `DB` (always, in the default layout): one round trip for the event and what
    /// its processing reads next. `also`'s result is `None` when the event was looked for
    /// elsewhere; then nothing of it ran.
    pub async fn load_with(
        &self,
        id: &str,
        also: impl FnOnce(&D1Database) -> Result<D1PreparedStatement, EdgeError>,
    ) -> Result<(Option<Row>, Option<Reply>), EdgeError> {
        let home = rowid(id).and_then(|rowid| Some((rowid, shard::shard_of_id(rowid)?)));
        let Some((rowid, vshard)) = home.filter(|(_, vshard)| self.map.binding(*vshard) == crate::bindings::DB) else {
            return Ok((self.load(id).await?, None));
        };
        let db = self.database(crate::bindings::DB)?;
        let mut results = db::batch(&db, vec![load_query(&db, rowid, Some(vshard))?, also(&db)?]).await?.into_iter();
        let found: Option<Found> =
            results.next().map(|r| db::rows(&r)).transpose()?.and_then(|rows| rows.into_iter().next());
        let also = results.next();
        let Some(found) = found else { return Ok((None, also)) };
        let moved = found.next().is_some();
        match found.row(crate::bindings::DB) {
            Some(row) => Ok((Some(row), also)),
            // The shard moved on: the usual walk.
            None if moved => Ok((self.load(id).await?, None)),
            None => Ok((None, also)),
        }
    }

    /// The processed mark of `row` as a statement of `resources`' batch, when the two can commit
    /// together: the event's row and the account's rows in the one database `DB` (the default
    /// layout). With the dedupe log or the account in another database, `None`: the mark is a
    /// commit of its own after the effects ([`Log::mark_processed`]).
    pub fn mark_with_effects(
        &self,
        resources: &D1Database,
        account_binding: Option<&str>,
        row: &Row,
        now: Timestamp,
    ) -> Result<Option<D1PreparedStatement>, EdgeError> {
        let together = row.binding == crate::bindings::DB && account_binding.is_none_or(|b| b == crate::bindings::DB);
        if !together {
            return Ok(None);
        }
        Ok(Some(db::stmt(resources, MARK_PROCESSED, &[key(&row.id), time(now)])?))
    }

    /// [`Log::mark_with_effects`] for a row a job carried, in `DB`: it marks only a row that
    /// still holds the payload the job carried, as the message's insert requires
    /// (`messages::insert_inbound`), so a row an erasure cleared or redacted while the job waited
    /// is neither written from nor marked, and the reading path decides from what is stored.
    pub fn mark_carried(
        &self,
        resources: &D1Database,
        row: &Row,
        now: Timestamp,
    ) -> Result<D1PreparedStatement, EdgeError> {
        // Only while the stored payload is the one the job carried: an erasure since cleared it,
        // or took a number out of it (docs/contract.md §5, "Erasure"), and the stored one decides.
        db::stmt(
            resources,
            &format!("{MARK_PROCESSED} AND payload = ?3"),
            &[key(&row.id), time(now), db::opt_text(row.payload.as_deref())],
        )
    }

    /// Marks the event processed, once its effects committed. The guard `processed_at IS NULL`
    /// makes a second run change nothing; `attempts` counts the runs that did work. Returns
    /// whether this run applied it.
    pub async fn mark_processed(&self, row: &Row, now: Timestamp) -> Result<bool, EdgeError> {
        if crate::faults::crash_before_mark(&row.carrier_event_id) {
            return Err(EdgeError::unavailable(
                "injected fault",
                format!("injected crash between the effects and the processed mark of {}", row.carrier_event_id),
            ));
        }
        let db = self.database(&row.binding)?;
        Ok(db::run(db::stmt(&db, MARK_PROCESSED, &[key(&row.id), time(now)])?).await? == 1)
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
        let signals = signal_failed(resources, row, error).await?;
        let db = self.database(&row.binding)?;
        let changed = db::run(db::stmt(
            &db,
            "UPDATE carrier_events SET error = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS NULL
                 AND error IS NULL",
            &[key(&row.id), text(error)],
        )?)
        .await?
            == 1;
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

    /// Events stored before `older_than` that are neither processed nor failed nor parked: their
    /// job was lost or is stuck. Oldest first, at most `limit`, across every database.
    pub async fn unprocessed(&self, older_than: Timestamp, limit: u32) -> Result<Vec<(String, Timestamp)>, EdgeError> {
        self.unsettled(
            &format!(
                "SELECT {ID} AS id, e.created_at FROM carrier_events e
                 WHERE e.processed_at IS NULL AND e.error IS NULL AND e.created_at < ?1 AND e.waiting_for IS NULL
                 ORDER BY e.created_at LIMIT ?2"
            ),
            older_than,
            limit,
        )
        .await
    }

    /// The oldest receipt stored before `older_than` and parked for its message, neither
    /// processed nor failed, across every database. Its message's send is recorded within
    /// seconds as a rule; one that waits longer is work the operator should know of, raised
    /// beside the oldest unparked event so neither hides the other.
    pub async fn oldest_parked(&self, older_than: Timestamp) -> Result<Option<(String, Timestamp)>, EdgeError> {
        let statement = format!(
            "SELECT {ID} AS id, e.created_at FROM carrier_events e
             WHERE e.processed_at IS NULL AND e.error IS NULL AND e.created_at < ?1 AND e.waiting_for IS NOT NULL
             ORDER BY e.created_at LIMIT ?2"
        );
        Ok(self.unsettled(&statement, older_than, 1).await?.pop())
    }

    async fn unsettled(
        &self,
        statement: &str,
        older_than: Timestamp,
        limit: u32,
    ) -> Result<Vec<(String, Timestamp)>, EdgeError> {
        crate::store::row! {
            struct Pending {
                id: String,
                created_at: Timestamp,
            }
        }
        let mut all = Vec::new();
        for binding in self.bindings() {
            let db = self.database(&binding)?;
            let rows: Vec<Pending> =
                db::all(db::stmt(&db, statement, &[time(older_than), int(i64::from(limit))])?).await?;
            all.extend(rows.into_iter().map(|r| (r.id, r.created_at)));
        }
        all.sort_by_key(|a| a.1);
        all.truncate(limit as usize);
        Ok(all)
    }
}

/// Writes the operator's `carrier_event.failed` signal about `row` into `resources`, at most once
/// per event; the ids of the events written (none when it was written before).
async fn signal_failed(resources: &D1Database, row: &Row, error: &str) -> Result<Vec<String>, EdgeError> {
    let now = crate::platform::now();
    let data = serde_json::json!({ "carrier_event_id": row.id, "error": error });
    let signal = crate::store::signals::Signal::new(EventType::CarrierEventFailed, &row.id, None, data, now)?;
    let written = db::batch(resources, signal.statements_once(resources, now)?).await?;
    Ok(if written.first().map(db::changes) == Some(1) { signal.event_ids() } else { Vec::new() })
}

/// A failure recorded (or found recorded before), with the `carrier_event.failed` signal's
/// event ids to announce.
#[derive(Debug)]
pub struct Failed {
    /// This call recorded it.
    pub changed: bool,
    /// The signal's events (empty when it was written before).
    pub signals: Vec<String>,
}
