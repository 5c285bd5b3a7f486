//! What reconciliation asks the carrier about: calls and messages whose next webhook is overdue.
//! Each is claimed by a guarded UPDATE of its `checked_at` ([`calls::claim_check`],
//! [`messages::claim_check`]: each table is written from its own module) so one run asks about it
//! once per interval.
//!
//! [`calls::claim_check`]: crate::store::calls::claim_check
//! [`messages::claim_check`]: crate::store::messages::claim_check

use exactly_core::Provider;
use exactly_core::Timestamp;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, int, time};

crate::store::row! {
    /// A call that may have ended without its hangup reaching the platform.
    #[derive(Debug)]
    pub struct StaleCall {
        pub id: String,
        pub carrier: Provider,
        pub call_control_id: String,
        pub call_leg_id: String,
        pub call_session_id: String,
        pub from_number: String,
        pub to_number: String,
    }
}

/// Telnyx calls `in_progress` with no change since `idle_before` and no check since
/// `checked_before`, oldest first.
pub async fn idle_calls(
    db: &D1Database,
    idle_before: Timestamp,
    checked_before: Timestamp,
    limit: u32,
) -> Result<Vec<StaleCall>, EdgeError> {
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {CALL_COLUMNS} FROM calls c
             WHERE c.status = 'in_progress' AND c.updated_at < ?1 AND c.checked_at < ?2 AND c.carrier = 'telnyx'
             ORDER BY c.updated_at LIMIT ?3"
        ),
        &[time(idle_before), time(checked_before), int(i64::from(limit))],
    )?)
    .await
}

/// Telnyx calls still `ringing` longer than their number's ring plan allows (every target rung
/// for its timeout, plus `margin_ms`) and not checked since `checked_before`, oldest first.
pub async fn ringing_calls(
    db: &D1Database,
    now: Timestamp,
    margin_ms: i64,
    checked_before: Timestamp,
    limit: u32,
) -> Result<Vec<StaleCall>, EdgeError> {
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {CALL_COLUMNS} FROM calls c LEFT JOIN phone_numbers n ON n.phone_number = c.to_number
             WHERE c.status = 'ringing' AND c.updated_at < ?1 - ?2 AND c.checked_at < ?3 AND c.carrier = 'telnyx'
               AND c.updated_at < ?1 - ?2 - COALESCE(CASE WHEN json_valid(n.ring_targets)
                   THEN json_array_length(n.ring_targets) END, 10) * COALESCE(n.ring_timeout_secs, 120) * 1000
             ORDER BY c.updated_at LIMIT ?4"
        ),
        &[time(now), int(margin_ms), time(checked_before), int(i64::from(limit))],
    )?)
    .await
}

const CALL_COLUMNS: &str =
    "c.id, c.carrier, c.call_control_id, c.call_leg_id, c.call_session_id, c.from_number, c.to_number";

crate::store::row! {
    /// A message the carrier took whose final word has not come.
    #[derive(Debug)]
    pub struct StaleMessage {
        pub id: String,
        pub carrier: Provider,
        pub carrier_message_id: String,
    }
}

/// Messages `sent` between `since` and `before` (older ones had their chances: some carriers
/// never give a final word) and not checked since `checked_before`, oldest first.
pub async fn stale_messages(
    db: &D1Database,
    since: Timestamp,
    before: Timestamp,
    checked_before: Timestamp,
    limit: u32,
) -> Result<Vec<StaleMessage>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT id, carrier, carrier_message_id FROM messages
         WHERE status = 'sent' AND updated_at >= ?1 AND updated_at < ?2 AND checked_at < ?3
           AND carrier_message_id IS NOT NULL
         ORDER BY updated_at LIMIT ?4",
        &[time(since), time(before), time(checked_before), int(i64::from(limit))],
    )?)
    .await
}
