//! Moving virtual shards of the dedupe log from one database to another (docs/scaling.md,
//! "Moving virtual shards"), recorded in `shard_moves` in both.

use exactly_core::shard;
use exactly_core::{Provider, Timestamp};
use worker::D1Database;

use super::Log;
use crate::error::EdgeError;
use crate::store::{self as db, int, retention, text, time};

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

crate::store::row! {
    /// A carrier event row as a move copies it.
    #[derive(Clone)]
    struct Copy {
        id: i64,
        carrier: Provider,
        carrier_event_id: String,
        event_type: String,
        payload: Option<String>,
        processed_at: Option<Timestamp>,
        error: Option<String>,
        attempts: i64,
        created_at: Timestamp,
        waiting_for: Option<String>,
    }
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
        let from = self.move_source(first, last, to)?;
        // A name of the right form that no binding has is the caller's mistake, not an outage.
        let target =
            self.database(to).map_err(|_| EdgeError::invalid("to", "no D1 database is bound under that name"))?;
        let source = self.database(&from)?;
        check_holders(&source, &target, first, last, &from, to).await?;
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
        crate::store::row! {
            struct Progress {
                through: Option<i64>,
            }
        }
        let progress: Option<Progress> = db::first(db::stmt(
            &target,
            "SELECT MIN(copied_through) AS through FROM shard_moves WHERE vshard BETWEEN ?1 AND ?2 AND moved_from = ?3",
            &[int(i64::from(first)), int(i64::from(last)), text(&from)],
        )?)
        .await?;
        let reached = progress.and_then(|p| p.through).unwrap_or(0);
        let mut done =
            Move { from, to: to.to_owned(), first, last, copied: 0, after: after.clamp(0, reached), done: false };
        for _ in 0..pages {
            if self.copy_page(&source, &target, &mut done, now).await? {
                done.done = true;
                break;
            }
        }
        Ok(done)
    }

    /// The binding shards `first..=last` leave for `to`: all of them in one database by this
    /// isolate's map, and not `to`.
    fn move_source(&self, first: u16, last: u16, to: &str) -> Result<String, EdgeError> {
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
        Ok(from)
    }

    /// Copies the page of `source` after `done.after` (the rows of the moving shards) and
    /// records how far the move reached. True once that page was the last.
    async fn copy_page(
        &self,
        source: &D1Database,
        target: &D1Database,
        done: &mut Move,
        now: Timestamp,
    ) -> Result<bool, EdgeError> {
        let (first, last) = (done.first, done.last);
        let start = done.after;
        let page: Vec<Copy> = db::all(db::stmt(
            source,
            &format!("SELECT {COPY} FROM carrier_events WHERE id > ?1 ORDER BY id LIMIT ?2"),
            &[int(start), int(i64::from(MOVE_PAGE))],
        )?)
        .await?;
        let last_page = page.len() < MOVE_PAGE as usize;
        if let Some(row) = page.last() {
            done.after = row.id;
        }
        // By key, not by id: the row's key is at hand, and an id written by an older version
        // during its rollout does not carry its shard.
        let moving: Vec<&Copy> = page
            .iter()
            .filter(|r| (first..=last).contains(&shard::virtual_shard(r.carrier.as_str(), &r.carrier_event_id)))
            .collect();
        done.copied += self.copy_rows(source, target, moving).await?;
        // The move's progress, only on from where it stood: the copied mark below needs
        // every row from the first on to have been visited.
        let reached = db::run(db::stmt(
            target,
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
        Ok(last_page)
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
            let copies = copy_stmts(target, &rows)?;
            let results = db::batch(target, copies).await?;
            if let Some(clash) = results.iter().zip(&rows).find(|(r, _)| db::changes(r) != 1).map(|(_, row)| row) {
                return Err(EdgeError::unavailable(
                    "store",
                    format!(
                        "moving carrier event {}: the target holds another event under its id",
                        clash.carrier_event_id
                    ),
                ));
            }
            // Only once the copies committed, and only rows as they were read: a crash between
            // leaves rows in both, and the next call copies them again and removes them.
            let changed = remove_unchanged(source, &rows).await?;
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
            Err(EdgeError::unavailable("store", "carrier events kept changing while they were moved; call again"))
        }
    }
}

/// A refused move (409).
fn conflict(message: String) -> EdgeError {
    EdgeError::Conflict { code: crate::error::Conflict::ShardMove, message }
}

/// The shards must be where this isolate's map says, and not on their way anywhere else: a call
/// from an isolate on an older map, or one overlapping another move, is refused before it
/// writes anything.
async fn check_holders(
    source: &D1Database,
    target: &D1Database,
    first: u16,
    last: u16,
    from: &str,
    to: &str,
) -> Result<(), EdgeError> {
    crate::store::row! {
        struct State {
            vshard: u16,
            moved_to: Option<String>,
            moved_from: Option<String>,
            copied_at: Option<Timestamp>,
        }
    }
    let states = "SELECT vshard, moved_to, moved_from, copied_at FROM shard_moves WHERE vshard BETWEEN ?1 AND ?2";
    let bounds = [int(i64::from(first)), int(i64::from(last))];
    for s in db::all::<State>(db::stmt(source, states, &bounds)?).await? {
        let holds = s.moved_to.is_none() && (s.moved_from.is_none() || s.copied_at.is_some());
        if !holds && s.moved_to.as_deref() != Some(to) {
            return Err(conflict(format!(
                "virtual shard {} is not held by {from} (moving to {:?}, arriving from {:?}); is the map deployed?",
                s.vshard, s.moved_to, s.moved_from
            )));
        }
    }
    for s in db::all::<State>(db::stmt(target, states, &bounds)?).await? {
        let elsewhere = s.moved_to.as_deref().is_some_and(|t| t != from)
            || (s.moved_from.as_deref().is_some_and(|f| f != from) && s.copied_at.is_none());
        if elsewhere {
            return Err(conflict(format!(
                "virtual shard {} is moving between other databases in {to} (to {:?}, from {:?})",
                s.vshard, s.moved_to, s.moved_from
            )));
        }
    }
    Ok(())
}

/// The statements that write `rows` into `target` under their own ids (a row already there
/// under the same key is brought up to date), and lower the target's payload retention
/// watermark below the lowest of them in the same commit: retention visits a database's rows
/// from that watermark on, so a row copied in under an id below it would keep its payload past
/// the retention.
fn copy_stmts(target: &D1Database, rows: &[&Copy]) -> Result<Vec<worker::D1PreparedStatement>, EdgeError> {
    let mut copies = rows
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
                    int(r.id),
                    text(r.carrier.as_str()),
                    text(&r.carrier_event_id),
                    text(&r.event_type),
                    db::opt_text(r.payload.as_deref()),
                    db::opt_time(r.processed_at),
                    db::opt_text(r.error.as_deref()),
                    int(r.attempts),
                    time(r.created_at),
                    db::opt_text(r.waiting_for.as_deref()),
                ],
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let lowest = rows.iter().map(|r| r.id).min().unwrap_or(0);
    copies.push(retention::lower_payload_mark(target, lowest)?);
    Ok(copies)
}

/// Removes `rows` from `source`, each only if it is unchanged since it was read; returns the
/// ids of those that changed (or went) meanwhile.
async fn remove_unchanged(source: &D1Database, rows: &[&Copy]) -> Result<Vec<i64>, EdgeError> {
    let mut batch = vec![retention::raise_id_floor(source)?];
    for r in rows {
        batch.push(db::stmt(
            source,
            "DELETE FROM carrier_events WHERE id = ?1 AND processed_at IS ?2 AND error IS ?3
                 AND waiting_for IS ?4 AND attempts = ?5 AND payload IS ?6",
            &[
                int(r.id),
                db::opt_time(r.processed_at),
                db::opt_text(r.error.as_deref()),
                db::opt_text(r.waiting_for.as_deref()),
                int(r.attempts),
                db::opt_text(r.payload.as_deref()),
            ],
        )?);
    }
    let results = db::batch(source, batch).await?;
    // The first result is the id floor's.
    Ok(results.iter().skip(1).zip(rows).filter(|(r, _)| db::changes(r) != 1).map(|(_, row)| row.id).collect())
}
