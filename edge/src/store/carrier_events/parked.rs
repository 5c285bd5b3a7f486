//! Receipts that arrived before their message's send was recorded (`parked_receipts`, beside the
//! messages): parked, woken by the batch that records the send, enqueued, and kept until their
//! events are settled; failed visibly after 24 hours without their message.

use exactly_core::{Provider, Timestamp};
use worker::D1Database;

use super::{key, Failed, Log, Row};
use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

impl Log {
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
            &[text(park.carrier.as_str()), text(&park.carrier_message_id), text(&park.id), time(parked_before)],
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
        // Failed by this expiry, by an earlier one that was interrupted, or otherwise: either
        // way its `carrier_event.failed` is written once (the signal's resource is the event).
        let failed = changed || row.error.is_some();
        if !failed && !row.settled() {
            // Not where it was read (moved meanwhile): the next sweep finds it again.
            return Ok(unchanged);
        }
        let reason = row.error.as_deref().unwrap_or(&error);
        let signals = if failed { super::signal_failed(root, &row, reason).await? } else { Vec::new() };
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
        let key = [text(park.carrier.as_str()), text(&park.carrier_message_id), text(&park.id)];
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
}

/// For the batch that records a send, after the statement that records it: wakes the receipts
/// parked on its carrier id (`woken_at`), if the message with that id is recorded by now, and
/// returns their event ids (`RETURNING`), to enqueue once the batch committed. The records stay,
/// woken, until the sweeper finds their events settled ([`Log::recheck_woken`]).
pub fn wake_stmt(
    db: &D1Database,
    carrier: Provider,
    carrier_message_id: &str,
    now: Timestamp,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE parked_receipts SET woken_at = ?3 WHERE carrier = ?1 AND carrier_message_id = ?2 AND woken_at IS NULL
           AND EXISTS (SELECT 1 FROM messages WHERE carrier = ?1 AND carrier_message_id = ?2)
         RETURNING carrier_event AS id",
        &[text(carrier.as_str()), text(carrier_message_id), time(now)],
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
    carrier: Provider,
    carrier_message_id: &str,
    now: Timestamp,
) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE parked_receipts SET woken_at = COALESCE(woken_at, ?3)
         WHERE carrier = ?1 AND carrier_message_id = ?2 AND (woken_at IS NULL OR woken_at > 0)
           AND EXISTS (SELECT 1 FROM message_routes WHERE carrier = ?1 AND carrier_message_id = ?2)
         RETURNING carrier_event AS id",
        &[text(carrier.as_str()), text(carrier_message_id), time(now)],
    )
}

/// The ids a [`wake_stmt`] returned.
pub fn woken(result: &crate::store::Reply) -> Result<Vec<String>, EdgeError> {
    db::ids(result)
}

/// For the batch that records a send, in `DB`: wakes receipts parked by a version older than
/// `parked_receipts` (on `carrier_events.waiting_for` alone, while that version still ran), and
/// returns their ids like [`wake_stmt`].
pub fn wake_legacy_stmt(
    db: &D1Database,
    carrier: Provider,
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
        &[text(carrier.as_str()), text(carrier_message_id)],
    )
}

crate::store::row! {
    /// A parked receipt, as the sweeper finds it.
    #[derive(Debug)]
    pub struct Woken {
        pub id: String,
        pub carrier: Provider,
        pub carrier_message_id: String,
    }
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
        &[text(park.carrier.as_str()), text(&park.carrier_message_id), text(&park.id)],
    )?)
    .await
    .map(|_| ())
}

/// How long a parked receipt waits for its message before it is recorded as failed.
pub const PARK_HORIZON_MILLIS: i64 = 24 * 3600 * 1000;
