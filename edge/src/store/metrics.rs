//! What `/admin/metrics` reports, each figure from an indexed query (a partial index, a rowid
//! bound or an index's first entry), so the cost stays flat as the tables grow.

use serde::Deserialize;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store as db;

/// The figures, as D1 returns them.
#[derive(Debug, Default, Deserialize)]
pub struct Figures {
    /// Carrier events ever stored (the highest rowid: retention does not lower it).
    pub events_ingested: Option<f64>,
    /// Carrier events neither processed nor failed.
    pub events_pending: f64,
    /// Carrier events recorded as failed (and not pruned).
    pub events_failed: f64,
    /// Receipts waiting for their message's send result.
    pub events_parked: f64,
    /// When the oldest pending carrier event was stored (Unix ms).
    pub oldest_pending_event: Option<f64>,
    /// Deliveries ever created (the highest rowid).
    pub deliveries_created: Option<f64>,
    /// Deliveries pending (due, scheduled or held).
    pub deliveries_pending: f64,
    /// Deliveries failed.
    pub deliveries_failed: f64,
    /// The earliest next attempt of a pending delivery (Unix ms).
    pub oldest_pending_delivery: Option<f64>,
}

/// Reads every figure in one round trip.
pub async fn figures(db: &D1Database) -> Result<Figures, EdgeError> {
    let row: Option<Figures> = db::first(db::stmt(
        db,
        "SELECT
           (SELECT MAX(rowid) FROM carrier_events) AS events_ingested,
           (SELECT COUNT(*) FROM carrier_events WHERE processed_at IS NULL AND error IS NULL) AS events_pending,
           (SELECT COUNT(*) FROM carrier_events WHERE error IS NOT NULL) AS events_failed,
           (SELECT COUNT(*) FROM carrier_events WHERE waiting_for IS NOT NULL) AS events_parked,
           (SELECT MIN(created_at) FROM carrier_events WHERE processed_at IS NULL AND error IS NULL) AS
               oldest_pending_event,
           (SELECT MAX(rowid) FROM webhook_deliveries) AS deliveries_created,
           (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending') AS deliveries_pending,
           (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed') AS deliveries_failed,
           (SELECT MIN(next_attempt_at) FROM webhook_deliveries WHERE status = 'pending') AS oldest_pending_delivery",
        &[],
    )?)
    .await?;
    Ok(row.unwrap_or_default())
}
