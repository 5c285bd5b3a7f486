//! A delivery as its attempt reads it ([`Due`]), its status and kind, and the SQL fragments the
//! claim, the fan-out and an endpoint's load share so that none of them counts differently. A leaf:
//! the fan-out ([`super::fanout`]) and the claims read it without reaching the rest of `deliveries`.

use exactly_core::headers::CustomHeaders;
use exactly_core::Timestamp;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::endpoints::{Columns, CIRCUIT};
use crate::store::{self as db, opt_text};

exactly_core::text_enum! {
    /// Where a delivery stands (`webhook_deliveries.status`); a row with any other value is an error
    /// where it is read.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum DeliveryStatus {
        /// Its next attempt is due at `next_attempt_at` (or it waits in its endpoint's line).
        Pending = "pending",
        /// An attempt was answered 2xx.
        Succeeded = "succeeded",
        /// Exhausted, or refused for good (`410`, a disabled endpoint).
        Failed = "failed",
        /// Its endpoint's filter held it back: nothing was sent.
        Filtered = "filtered",
    }
}
crate::store::row::named!(DeliveryStatus);

exactly_core::text_enum! {
    /// Why a delivery exists (`webhook_deliveries.kind`): its event's first fan-out, or a replay an
    /// account or the operator asked for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum DeliveryKind {
        Initial = "initial",
        Replay = "replay",
    }
}
crate::store::row::named!(DeliveryKind);
crate::store::row! {
    /// A delivery as its attempt needs it: the delivery, its endpoint (absent when deleted) and the
    /// event's payload.
    #[derive(Debug)]
    pub struct Due {
        pub id: String,
        pub event_id: String,
        pub account_id: String,
        pub status: DeliveryStatus,
        pub attempts: i64,
        /// Of its attempts, those the platform cut short (migrations/0036_cut_attempts.sql): they
        /// spent none of its retries.
        pub cut: i64,
        pub next_attempt_at: Timestamp,
        pub endpoint_id: String,
        pub url: Option<String>,
        pub secret: Option<String>,
        pub enabled: Option<bool>,
        pub paused: Option<bool>,
        pub rate_limit_per_second: Option<i64>,
        pub previous_secret: Option<String>,
        pub previous_secret_expires_at: Option<Timestamp>,
        /// The endpoint's filter's text, when it has one.
        pub filter: Option<String>,
        /// The endpoint's custom headers.
        pub headers: CustomHeaders,
        /// A test send (its event's `test` column): it exists to reach the endpoint.
        pub test: bool,
        /// At an ordered endpoint, the events of its resource skipped before it (exhausted and
        /// never delivered since), comma-separated, as its claim read them: its request names
        /// them in `exactly-skipped`. Never read with the delivery ([`DUE_COLUMNS`]: NULL).
        pub skipped: Option<String>,
        pub payload: String,
        /// The endpoint's circuit breaker.
        pub circuit: Columns = flatten,
    }
}

/// A [`Due`]'s columns of delivery row `d`, endpoint row `e` and event row `o` (its test flag),
/// before the circuit's ([`CIRCUIT`]) and the event's payload (`o.payload`).
pub const DUE_COLUMNS: &str = "d.id, d.event_id, d.account_id, d.status, d.attempts, d.cut, d.next_attempt_at,
     d.endpoint_id, e.url, e.secret, e.enabled, e.paused, e.rate_limit_per_second, e.previous_secret,
     e.previous_secret_expires_at, e.filter, e.headers, o.test, NULL AS skipped";

/// How many attempts to endpoint row `e` are in flight at `?2` (claimed, their lease not over).
/// The claim, the fan-out's look at an endpoint and an endpoint's load all count with it, so
/// that none of them counts differently; each binds its time of now as `?2`.
pub const IN_FLIGHT: &str = "(SELECT COUNT(*) FROM webhook_deliveries f WHERE f.endpoint_id = e.id
     AND f.in_flight_until > 0 AND f.in_flight_until > ?2)";

/// The most attempts endpoint row `e` takes in flight at once: its `max_in_flight`, no more than
/// it takes in a second when it is rate-limited (each waits at most a second for its turn, the
/// rest wait in line), and at least one. The claim and the fan-out's look both limit with it.
pub const IN_FLIGHT_LIMIT: &str = "MAX(1, MIN(e.max_in_flight, CASE WHEN e.rate_limit_per_second >= 1
     THEN e.rate_limit_per_second ELSE e.max_in_flight END))";

/// Whether endpoint row `e` has deliveries in its line. Through the line's own index, named: the
/// planner would otherwise walk every delivery the endpoint has (of those kept) to find the line
/// empty.
pub const LINED: &str = "EXISTS (SELECT 1 FROM webhook_deliveries l INDEXED BY webhook_deliveries_line
     WHERE l.endpoint_id = e.id AND l.waiting = 1 AND l.status = 'pending')";

/// The delivery of the line of endpoint `?1` taken first: the oldest, except that while the
/// circuit is not closed the oldest that has not failed yet goes first where one waits
/// (migrations/0037_fresh_probes.sql), so a probe asks whether the endpoint is up, not whether
/// one refused event is still refused. The claim orders the line alike
/// ([`super::claims::claim_attempt`]).
pub const OLDEST_IN_LINE: &str = "COALESCE(
     CASE WHEN EXISTS (SELECT 1 FROM webhook_endpoints c WHERE c.id = ?1 AND c.circuit <> 'closed')
       THEN (SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_fresh_line
             WHERE endpoint_id = ?1 AND waiting = 1 AND status = 'pending' AND attempts = cut
             ORDER BY created_at, id LIMIT 1) END,
     (SELECT id FROM webhook_deliveries WHERE endpoint_id = ?1 AND waiting = 1
      AND status = 'pending' ORDER BY created_at, id LIMIT 1))";

/// The delivery `id` with its endpoint and payload.
pub async fn due(db: &D1Database, id: &str) -> Result<Option<Due>, EdgeError> {
    db::first(due_query(db, Some(id), None)?).await
}

/// The query of the [`Due`] of delivery `id`, or (`id` `None`) of the oldest delivery in the
/// line of endpoint `line`.
pub(super) fn due_query(
    db: &D1Database,
    id: Option<&str>,
    line: Option<&str>,
) -> Result<D1PreparedStatement, EdgeError> {
    let sql = format!(
        "SELECT {DUE_COLUMNS}, {CIRCUIT}, o.payload
         FROM webhook_deliveries d
         JOIN outbound_events o ON o.id = d.event_id
         LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.id = COALESCE(?2, {OLDEST_IN_LINE})"
    );
    db::stmt(db, &sql, &[opt_text(line), opt_text(id)])
}
