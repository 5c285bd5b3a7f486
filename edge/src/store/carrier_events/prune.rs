//! Retention of the dedupe log (run by `store::retention`): payloads, then rows, visited in
//! insertion order from the watermarks `store::retention` keeps.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::config::Retention;
use crate::error::EdgeError;
use crate::store::{self as db, int, retention};

crate::store::row! {
    struct Visit {
        rid: i64,
        created_at: Timestamp,
        settled: bool,
    }
}

/// The last rowid of the leading run of `rows` that are older than `cutoff` and settled.
fn prefix_end(rows: &[Visit], cutoff: Timestamp) -> Option<i64> {
    rows.iter().take_while(|r| r.created_at < cutoff && r.settled).last().map(|r| r.rid)
}

/// Whether a step that visited `rows` (a page of [`retention::BATCH`]) and pruned up to `upto`
/// has more to do at once: its page was full and all of it was past the cutoff.
fn more(rows: &[Visit], upto: Option<i64>) -> bool {
    rows.len() == retention::BATCH as usize && upto.is_some() && upto == rows.last().map(|r| r.rid)
}

const VISIT: &str = "SELECT rowid AS rid, created_at, (processed_at IS NOT NULL OR error IS NOT NULL) AS settled
     FROM carrier_events";

/// One page of the payload step of one database's retention: the payloads of settled events
/// after `RETENTION_PAYLOAD_DAYS`, from the watermark on.
pub async fn prune_payloads(db: &D1Database, limits: Retention, now: Timestamp) -> Result<retention::Page, EdgeError> {
    let from = retention::mark(db, "payloads").await?;
    let rows: Vec<Visit> = db::all(db::stmt(
        db,
        &format!("{VISIT} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"),
        &[int(from), int(retention::BATCH)],
    )?)
    .await?;
    let cutoff = Timestamp::from_unix_millis(now.unix_millis() - limits.payload_days * retention::DAY_MILLIS);
    let upto = prefix_end(&rows, cutoff);
    let Some(upto_id) = upto else { return Ok(retention::Page::default()) };
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "UPDATE carrier_events SET payload = NULL WHERE rowid > ?1 AND rowid <= ?2 AND payload IS NOT NULL
                   AND created_at < ?3 AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                &[int(from), int(upto_id), crate::store::time(cutoff)],
            )?,
            retention::set_mark(db, "payloads", from, upto_id)?,
        ],
    )
    .await?;
    // The watermark moved past the page, so the next page is a new one; when it did not (another
    // page or a move got there first), the next tick goes on from where it stands.
    let moved = results.get(1).map(db::changes).unwrap_or(0) == 1;
    Ok(retention::Page { pruned: results.first().map(db::changes).unwrap_or(0), more: moved && more(&rows, upto) })
}

/// One page of the row step of one database's retention: the rows of settled events after
/// `RETENTION_EVENT_DAYS`, the oldest first; deletion keeps the front of the table the oldest
/// remaining.
pub async fn prune_rows(db: &D1Database, limits: Retention, now: Timestamp) -> Result<retention::Page, EdgeError> {
    let rows: Vec<Visit> =
        db::all(db::stmt(db, &format!("{VISIT} ORDER BY rowid LIMIT ?1"), &[int(retention::BATCH)])?).await?;
    let cutoff = Timestamp::from_unix_millis(
        now.unix_millis() - limits.event_days.max(crate::config::MIN_EVENT_RETENTION_DAYS) * retention::DAY_MILLIS,
    );
    let upto = prefix_end(&rows, cutoff);
    let Some(upto_id) = upto else { return Ok(retention::Page::default()) };
    // Only settled rows older than the cutoff, whatever lies below `upto`: a row copied in by a
    // move may carry an id below rows it is younger than.
    let results = db::batch(
        db,
        vec![
            retention::raise_id_floor(db)?,
            db::stmt(
                db,
                "DELETE FROM carrier_events WHERE rowid <= ?1 AND created_at < ?2
                   AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                &[int(upto_id), crate::store::time(cutoff)],
            )?,
        ],
    )
    .await?;
    let pruned = results.get(1).map(db::changes).unwrap_or(0);
    // There is no watermark: the next page starts at the front again, so it is a new one only if
    // this one deleted something.
    Ok(retention::Page { pruned, more: pruned > 0 && more(&rows, upto) })
}

/// Erasure: the next page of this database's carrier events whose payload holds `digits` (a
/// number's digits: every way a carrier writes it holds them) after row `after`, each with its
/// payload, for the caller to read by meaning (`exactly_core::erasure`).
pub async fn erasure_page(
    db: &D1Database,
    digits: &str,
    after: i64,
) -> Result<crate::store::erasures::Found, EdgeError> {
    crate::store::erasures::window(
        db,
        crate::store::erasures::Table::CarrierEvents,
        "SELECT rowid AS row_no, CAST(id AS TEXT) AS id, payload AS body FROM carrier_events
         WHERE rowid > ?1 AND rowid <= ?2 AND payload IS NOT NULL AND instr(payload, ?3) > 0
         ORDER BY rowid LIMIT 25",
        &[crate::store::text(digits)],
        after,
    )
    .await
}

/// Of the carrier events `ids` (a JSON array), those neither processed nor failed, with their
/// carrier: an erasure takes the number out of those it can (their job still comes) rather than
/// clearing them.
pub async fn unsettled_of(db: &D1Database, ids: &str) -> Result<Vec<(String, exactly_core::Provider)>, EdgeError> {
    crate::store::row! {
        struct Open {
            id: String,
            carrier: exactly_core::Provider,
        }
    }
    let open: Vec<Open> = db::all(db::stmt(
        db,
        "SELECT CAST(id AS TEXT) AS id, carrier FROM carrier_events
         WHERE id IN (SELECT CAST(value AS INTEGER) FROM json_each(?1)) AND processed_at IS NULL AND error IS NULL",
        &[crate::store::text(ids)],
    )?)
    .await?;
    Ok(open.into_iter().map(|o| (o.id, o.carrier)).collect())
}

/// Erasure of a number from an event not processed yet that goes on without it: its payload
/// becomes `redacted`, if it is still `was`. Whether it did.
pub async fn redact_payload(db: &D1Database, id: &str, was: &str, redacted: &str) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE carrier_events SET payload = ?3 WHERE id = CAST(?1 AS INTEGER) AND payload = ?2",
        &[crate::store::text(id), crate::store::text(was), crate::store::text(redacted)],
    )?)
    .await?;
    Ok(changed == 1)
}

/// Erasure: clears the payloads of the carrier events `ids` (a JSON array). The rows, the dedupe
/// keys, stay, so a late retry of one is still a duplicate; one not yet processed is settled as
/// erased when its job comes (work::process). How many payloads were cleared.
pub async fn erase_payloads(db: &D1Database, ids: &str) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE carrier_events SET payload = NULL
         WHERE id IN (SELECT CAST(value AS INTEGER) FROM json_each(?1)) AND payload IS NOT NULL",
        &[crate::store::text(ids)],
    )?)
    .await
}
