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

/// Retention of one database's carrier events: the payloads of settled events after
/// `RETENTION_PAYLOAD_DAYS`, the rows after `RETENTION_EVENT_DAYS`; returns how many of each.
pub async fn prune(db: &D1Database, limits: Retention, now: Timestamp) -> Result<(usize, usize), EdgeError> {
    let (mut payloads, mut events) = (0, 0);
    let visit = "SELECT rowid AS rid, created_at, (processed_at IS NOT NULL OR error IS NOT NULL) AS settled
         FROM carrier_events";

    // Payloads: from the watermark onwards.
    let from = retention::mark(db, "payloads").await?;
    let rows: Vec<Visit> = db::all(db::stmt(
        db,
        &format!("{visit} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2"),
        &[int(from), int(retention::BATCH)],
    )?)
    .await?;
    let cutoff = Timestamp::from_unix_millis(now.unix_millis() - limits.payload_days * retention::DAY_MILLIS);
    if let Some(upto) = prefix_end(&rows, cutoff) {
        let results = db::batch(
            db,
            vec![
                db::stmt(
                    db,
                    "UPDATE carrier_events SET payload = NULL WHERE rowid > ?1 AND rowid <= ?2 AND payload IS NOT NULL
                       AND created_at < ?3 AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                    &[int(from), int(upto), crate::store::time(cutoff)],
                )?,
                retention::set_mark(db, "payloads", upto)?,
            ],
        )
        .await?;
        payloads = results.first().map(db::changes).unwrap_or(0);
    }

    // Rows: the oldest first; deletion keeps the front of the table the oldest remaining.
    let rows: Vec<Visit> =
        db::all(db::stmt(db, &format!("{visit} ORDER BY rowid LIMIT ?1"), &[int(retention::BATCH)])?).await?;
    let cutoff = Timestamp::from_unix_millis(
        now.unix_millis() - limits.event_days.max(crate::config::MIN_EVENT_RETENTION_DAYS) * retention::DAY_MILLIS,
    );
    if let Some(upto) = prefix_end(&rows, cutoff) {
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
                    &[int(upto), crate::store::time(cutoff)],
                )?,
            ],
        )
        .await?;
        events = results.get(1).map(db::changes).unwrap_or(0);
    }
    Ok((payloads, events))
}

/// Erasure: clears the payload of every carrier event of this database whose body names `number`
/// (as JSON writes it, or form-encoded as Twilio and Plivo send it); the rows, the dedupe keys,
/// stay, so a late retry of one is still a duplicate. Returns how many payloads were cleared.
pub async fn erase_payloads(db: &D1Database, number: &str) -> Result<usize, EdgeError> {
    let encoded: String = form_urlencoded::byte_serialize(number.as_bytes()).collect();
    db::run(db::stmt(
        db,
        "UPDATE carrier_events SET payload = NULL
         WHERE payload IS NOT NULL AND (instr(payload, ?1) > 0 OR instr(payload, ?2) > 0)",
        &[crate::store::text(number), crate::store::text(&encoded)],
    )?)
    .await
}
