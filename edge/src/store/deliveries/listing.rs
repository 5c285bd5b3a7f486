//! What the API and the console read of deliveries and attempts: pages, an event's deliveries,
//! an endpoint's attempts. Nothing here writes.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::D1Database;

use super::{DeliveryKind, DeliveryStatus};
use crate::error::EdgeError;
use crate::store::{self as db, int, text, Cursor};

crate::store::row! {
    /// A delivery as `/admin/webhook_deliveries` lists it.
    #[derive(Debug)]
    pub struct Listed {
        pub id: String,
        pub event_id: String,
        pub endpoint_id: String,
        pub account_id: String,
        pub attempts: i64,
        pub last_error: Option<String>,
        pub created_at: Timestamp,
        pub updated_at: Timestamp,
    }
}

/// A page of deliveries in one status, newest first by (`created_at`, `id`), which never change
/// (`updated_at` moves on every attempt, so a cursor on it would skip or repeat rows).
pub async fn list(
    db: &D1Database,
    status: DeliveryStatus,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Listed>, EdgeError> {
    let (at, after) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        "SELECT id, event_id, endpoint_id, account_id, attempts, last_error, created_at, updated_at FROM
             webhook_deliveries
         WHERE status = ?1 AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
         ORDER BY created_at DESC, id DESC LIMIT ?4",
        &[text(status.as_str()), at, after, int(i64::from(limit))],
    )?)
    .await
}

crate::store::row! {
    /// A delivery as `/v1/events/{id}` shows it.
    #[derive(Debug)]
    pub struct OfEvent {
        pub id: String,
        pub endpoint_id: String,
        pub kind: DeliveryKind,
        pub status: DeliveryStatus,
        pub attempts: i64,
        pub next_attempt_at: Timestamp,
        pub last_error: Option<String>,
    }
}

crate::store::row! {
    /// A recorded attempt.
    #[derive(Debug)]
    pub struct Recorded {
        pub delivery_id: String,
        pub attempt: i64,
        pub attempted_at: Timestamp,
        pub webhook_timestamp: i64,
        pub status_code: Option<u16>,
        pub latency_ms: i64,
        pub error: Option<String>,
        pub next_attempt_at: Option<Timestamp>,
        pub response_body: Option<String>,
    }
}

/// The deliveries of an event, oldest first.
pub async fn of_event(db: &D1Database, event_id: &str) -> Result<Vec<OfEvent>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT id, endpoint_id, kind, status, attempts, next_attempt_at, last_error FROM webhook_deliveries
         WHERE event_id = ?1 ORDER BY created_at, id",
        &[text(event_id)],
    )?)
    .await
}

/// Every attempt of every delivery of an event.
pub async fn attempts_of_event(db: &D1Database, event_id: &str) -> Result<Vec<Recorded>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT a.delivery_id, a.attempt, a.attempted_at, a.webhook_timestamp, a.status_code, a.latency_ms,
             a.error, a.next_attempt_at, a.response_body
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.event_id = ?1 ORDER BY a.delivery_id, a.attempt",
        &[text(event_id)],
    )?)
    .await
}

/// How many deliveries an endpoint holds (pending, not attempted while paused or disabled).
pub async fn pending_count(db: &D1Database, endpoint_id: &str) -> Result<u64, EdgeError> {
    crate::store::row! {
        struct N {
            n: i64,
        }
    }
    let row: Option<N> = db::first(db::stmt(
        db,
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?1 AND status = 'pending'",
        &[text(endpoint_id)],
    )?)
    .await?;
    Ok(row.map_or(0, |r| u64::try_from(r.n).unwrap_or(0)))
}

crate::store::row! {
    /// An attempt as `/v1/webhook_endpoints/{id}/attempts` lists it: the delivery log, with the
    /// request as it was sent (the event's payload, its id, the attempt's timestamp and signature).
    #[derive(Debug)]
    pub struct EndpointAttempt {
        pub id: i64,
        pub delivery_id: String,
        pub event_id: String,
        pub event_type: String,
        pub resource_id: String,
        pub delivery_status: DeliveryStatus,
        pub attempt: i64,
        pub attempted_at: Timestamp,
        pub webhook_timestamp: i64,
        pub status_code: Option<u16>,
        pub latency_ms: i64,
        pub error: Option<String>,
        pub response_body: Option<String>,
        pub response_headers: Option<String>,
        pub request_signature: Option<String>,
        pub payload: String,
    }
}

/// Which attempts or deliveries of an endpoint to read or retry; every field narrows.
#[derive(Debug, Default)]
pub struct LogFilter {
    /// The delivery's status.
    pub status: Option<DeliveryStatus>,
    pub event_type: Option<String>,
    /// From this time (inclusive) to `until` (exclusive): of the attempt for the log, of the
    /// delivery for a retry.
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// The message or call the event is about.
    pub resource_id: Option<String>,
    /// The `webhook-id` sent: the event's id.
    pub event_id: Option<String>,
}

impl LogFilter {
    /// The filter's values, bound as `?first` to `?first + 5`.
    pub(super) fn args(&self) -> [JsValue; 6] {
        [
            db::opt_text(self.status.map(DeliveryStatus::as_str)),
            db::opt_text(self.event_type.as_deref()),
            db::opt_time(self.since),
            db::opt_time(self.until),
            db::opt_text(self.resource_id.as_deref()),
            db::opt_text(self.event_id.as_deref()),
        ]
    }
}

/// A page of an endpoint's attempts that `filter` keeps, newest first, by (`attempted_at`,
/// attempt id).
pub async fn attempts_of_endpoint(
    db: &D1Database,
    endpoint_id: &str,
    filter: &LogFilter,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<EndpointAttempt>, EdgeError> {
    let (at, after) = match &cursor {
        Some(c) => (int(c.created_at), c.id.parse::<i64>().map_or(JsValue::NULL, int)),
        None => (JsValue::NULL, JsValue::NULL),
    };
    let mut args = vec![text(endpoint_id), at, after, int(i64::from(limit))];
    args.extend(filter.args());
    db::all(db::stmt(
        db,
        "SELECT a.id, a.delivery_id, d.event_id, e.type AS event_type, e.resource_id, d.status AS delivery_status,
                a.attempt, a.attempted_at, a.webhook_timestamp, a.status_code, a.latency_ms, a.error,
                a.response_body, a.response_headers, a.request_signature, e.payload
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
              JOIN outbound_events e ON e.id = d.event_id
         WHERE d.endpoint_id = ?1 AND (?2 IS NULL OR a.attempted_at < ?2 OR (a.attempted_at = ?2 AND a.id < ?3))
           AND (?5 IS NULL OR d.status = ?5) AND (?6 IS NULL OR e.type = ?6)
           AND (?7 IS NULL OR a.attempted_at >= ?7) AND (?8 IS NULL OR a.attempted_at < ?8)
           AND (?9 IS NULL OR e.resource_id = ?9) AND (?10 IS NULL OR d.event_id = ?10)
         ORDER BY a.attempted_at DESC, a.id DESC LIMIT ?4",
        &args,
    )?)
    .await
}
