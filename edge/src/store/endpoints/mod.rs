//! The `webhook_endpoints` table: where an account's customer events are delivered. Every
//! statement names the account in its `WHERE`, so one account never reads or changes
//! another's endpoint.

pub mod circuit;

use exactly_core::headers::CustomHeaders;
use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use exactly_core::breaker::{self, State};

use crate::error::EdgeError;
use crate::store::{self as db, int, opt_text, text, time, Cursor};

exactly_core::text_enum! {
    /// How an endpoint receives the events of one resource (`webhook_endpoints.ordering`,
    /// docs/contract.md "Ordered delivery per resource").
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Ordering {
        /// As each is ready, several at once: the receiver sorts by `sequence`.
        None = "none",
        /// Each message's and each call's events in `sequence` order, one at a time.
        Resource = "resource",
    }
}

exactly_core::text_enum! {
    /// What an ordered endpoint does when a delivery of a resource is exhausted
    /// (`webhook_endpoints.on_exhausted`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum OnExhausted {
        /// The next event of the resource goes, naming the skipped one in `exactly-skipped`.
        Skip = "skip",
        /// The resource waits until the exhausted event is delivered (a retry, replay or recovery).
        Hold = "hold",
    }
}
crate::store::row::named!(Ordering, OnExhausted);

crate::store::row! {
    /// An endpoint as the API shows it (never its secret).
    #[derive(Debug)]
    pub struct Endpoint {
        pub id: String,
        pub url: String,
        /// What it subscribes to.
        pub event_types: Vec<EventType>,
        pub enabled: bool,
        pub paused: bool,
        pub rate_limit_per_second: Option<i64>,
        pub disabled_reason: Option<String>,
        pub consecutive_failures: i64,
        pub max_in_flight: Option<i64>,
        /// Its filter's text (`core::filter`), when it has one.
        pub filter: Option<String>,
        /// Its custom headers (`core::headers`), as the column holds them.
        pub headers: CustomHeaders,
        pub ordering: Ordering,
        pub on_exhausted: OnExhausted,
        pub created_at: Timestamp,
        pub updated_at: Timestamp,
        /// Its circuit breaker.
        pub circuit: Columns = flatten,
    }
}

const COLUMNS: &str = "e.id, e.url, e.event_types, e.enabled, e.paused, e.rate_limit_per_second, e.disabled_reason,
     e.consecutive_failures, e.max_in_flight, e.filter, e.headers, e.ordering, e.on_exhausted, e.created_at,
     e.updated_at";

/// The `event_types` column: a JSON array of wire names, sorted and each once, as the
/// fan-out's `json_each` reads it.
fn types_column(types: &[EventType]) -> Result<String, EdgeError> {
    let mut names: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    serde_json::to_string(&names).map_err(|e| EdgeError::platform("encode", e))
}

/// The `headers` column: a JSON object of lower-case name to value, NULL for none.
pub fn headers_column(headers: &CustomHeaders) -> JsValue {
    if headers.is_empty() {
        return JsValue::NULL;
    }
    let object: serde_json::Map<String, Value> =
        headers.iter().map(|(name, value)| (name.to_owned(), Value::String(value.to_owned()))).collect();
    text(&Value::Object(object).to_string())
}

/// What an endpoint's custom header values show as when it is read back: they are often keys.
pub use exactly_core::headers::REDACTED;

/// The in-flight limit of an endpoint created without one.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 4;

impl Endpoint {
    /// The endpoint as the API shows it at `now`: `circuit` is `closed`, `open` or
    /// `half_open`, with `next_probe_at` while it is not closed.
    pub fn to_json(&self, now: Timestamp) -> Value {
        let state = self.circuit.state();
        let probe = breaker::next_probe_at(&breaker::DEFAULT_POLICY, state, now.unix_millis());
        json!({
            "id": self.id,
            "url": self.url,
            "event_types": self.event_types.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "enabled": self.enabled,
            "paused": self.paused,
            "rate_limit_per_second": self.rate_limit_per_second,
            "disabled_reason": self.disabled_reason,
            "consecutive_failures": self.consecutive_failures,
            "max_in_flight": self.max_in_flight.unwrap_or(i64::from(DEFAULT_MAX_IN_FLIGHT)),
            "filter": self.filter,
            "headers": self.headers.names().map(|name| (name.to_owned(), json!(REDACTED))).collect::<serde_json::Map<_, _>>(),
            "ordering": self.ordering.as_str(),
            "on_exhausted": self.on_exhausted.as_str(),
            "circuit": state.name(),
            "next_probe_at": probe.map(|at| Timestamp::from_unix_millis(at).to_rfc3339()),
            "created_at": self.created_at.to_rfc3339(),
            "updated_at": self.updated_at.to_rfc3339(),
        })
    }
}

/// One endpoint of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Endpoint>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {COLUMNS}, {CIRCUIT} FROM webhook_endpoints e WHERE e.id = ?1 AND e.account_id = ?2"),
        &[text(id), text(account_id)],
    )?)
    .await
}

/// How many endpoints an account may hold: an event's fan-out writes one delivery per endpoint in
/// one statement, so this bounds it (docs/deploy.md, "Limits").
pub const MAX_ENDPOINTS: i64 = 1_000;

/// A new endpoint (`url` already checked), unless the account holds [`MAX_ENDPOINTS`] already
/// (`false`): the count and the insert are one statement, so two creates at once never pass it.
pub async fn create(db: &D1Database, new: &New<'_>, now: Timestamp) -> Result<bool, EdgeError> {
    let added = db::run(db::stmt(
        db,
        "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, rate_limit_per_second, max_in_flight,
                                        filter, headers, ordering, on_exhausted, created_at, updated_at)
         SELECT ?1, ?2, ?3, ?4, ?5, ?7, ?8, ?9, ?10, ?12, ?13, ?6, ?6
         WHERE (SELECT COUNT(*) FROM webhook_endpoints WHERE account_id = ?2) < ?11",
        &[
            text(new.id),
            text(new.account_id),
            text(new.url),
            text(&types_column(new.event_types)?),
            text(new.secret),
            time(now),
            new.rate_limit.map_or(JsValue::NULL, |r| int(i64::from(r))),
            int(i64::from(new.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT))),
            opt_text(new.filter),
            headers_column(new.headers),
            int(MAX_ENDPOINTS),
            text(new.ordering.as_str()),
            text(new.on_exhausted.as_str()),
        ],
    )?)
    .await?;
    Ok(added == 1)
}

/// An endpoint about to be created.
pub struct New<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    /// Already checked.
    pub url: &'a str,
    /// What it subscribes to.
    pub event_types: &'a [EventType],
    /// Its `whsec_` secret.
    pub secret: &'a str,
    /// At most this many deliveries a second.
    pub rate_limit: Option<u32>,
    /// At most this many attempts in flight ([`DEFAULT_MAX_IN_FLIGHT`] when absent).
    pub max_in_flight: Option<u32>,
    /// Its filter's text, already parsed once.
    pub filter: Option<&'a str>,
    /// Its custom headers.
    pub headers: &'a CustomHeaders,
    pub ordering: Ordering,
    pub on_exhausted: OnExhausted,
}

/// A page of an account's endpoints, newest first.
pub async fn list(
    db: &D1Database,
    account_id: &str,
    only: Option<&[String]>,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Endpoint>, EdgeError> {
    let (at, after) = Cursor::args(&cursor);
    let only = only.map(|ids| serde_json::to_string(ids).map_err(|e| EdgeError::platform("encode", e))).transpose()?;
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {COLUMNS}, {CIRCUIT} FROM webhook_endpoints e WHERE e.account_id = ?1
               AND (?2 IS NULL OR e.created_at < ?2 OR (e.created_at = ?2 AND e.id < ?3))
               AND (?5 IS NULL OR e.id IN (SELECT value FROM json_each(?5)))
             ORDER BY e.created_at DESC, e.id DESC LIMIT ?4"
        ),
        &[text(account_id), at, after, int(i64::from(limit)), crate::store::opt_text(only.as_deref())],
    )?)
    .await
}

/// A change to an endpoint: each field changes only when given.
#[derive(Debug, Default)]
pub struct Update<'a> {
    /// The URL (already checked).
    pub url: &'a str,
    /// What it subscribes to.
    pub event_types: &'a [EventType],
    /// Enable (clearing the failure count and the reason) or disable.
    pub enabled: Option<bool>,
    /// Pause (deliveries wait) or resume.
    pub paused: Option<bool>,
    /// Set (`Some(Some(n))`) or clear (`Some(None)`) the rate limit.
    pub rate_limit: Option<Option<u32>>,
    /// Set the in-flight limit.
    pub max_in_flight: Option<u32>,
    /// Set (`Some(Some(text))`, already parsed once) or clear (`Some(None)`) the filter.
    pub filter: Option<Option<&'a str>>,
    /// Replace the custom headers (empty clears them).
    pub headers: Option<&'a CustomHeaders>,
    /// Set how it receives each resource's events.
    pub ordering: Option<Ordering>,
    /// Set what an exhausted delivery of a resource does to the next.
    pub on_exhausted: Option<OnExhausted>,
}

/// Applies an [`Update`] to one endpoint of one account.
pub async fn update(
    db: &D1Database,
    account_id: &str,
    id: &str,
    change: &Update<'_>,
    now: Timestamp,
) -> Result<(), EdgeError> {
    let flag = |f: Option<bool>| f.map_or(JsValue::NULL, |e| int(i64::from(e)));
    db::run(db::stmt(
        db,
        "UPDATE webhook_endpoints SET url = ?3, event_types = ?4, updated_at = ?5,
             types_at = CASE WHEN event_types IS NOT ?4 THEN ?5 ELSE types_at END,
             consecutive_failures = CASE WHEN ?6 = 1 AND enabled = 0 THEN 0 ELSE consecutive_failures END,
             disabled_reason = CASE WHEN ?6 = 1 THEN NULL WHEN ?6 = 0 THEN 'disabled by the account'
                                    ELSE disabled_reason END,
             enabled = COALESCE(?6, enabled),
             paused = COALESCE(?7, paused),
             rate_limit_per_second = CASE WHEN ?8 = 1 THEN ?9 ELSE rate_limit_per_second END,
             max_in_flight = COALESCE(?10, max_in_flight),
             filter = CASE WHEN ?11 = 1 THEN ?12 ELSE filter END,
             headers = CASE WHEN ?13 = 1 THEN ?14 ELSE headers END,
             ordering = COALESCE(?15, ordering),
             on_exhausted = COALESCE(?16, on_exhausted)
         WHERE id = ?1 AND account_id = ?2",
        &[
            text(id),
            text(account_id),
            text(change.url),
            text(&types_column(change.event_types)?),
            time(now),
            flag(change.enabled),
            flag(change.paused),
            flag(change.rate_limit.map(|_| true)),
            change.rate_limit.flatten().map_or(JsValue::NULL, |r| int(i64::from(r))),
            change.max_in_flight.map_or(JsValue::NULL, |m| int(i64::from(m))),
            flag(change.filter.map(|_| true)),
            opt_text(change.filter.flatten()),
            flag(change.headers.map(|_| true)),
            change.headers.map_or(JsValue::NULL, headers_column),
            opt_text(change.ordering.map(Ordering::as_str)),
            opt_text(change.on_exhausted.map(OnExhausted::as_str)),
        ],
    )?)
    .await?;
    Ok(())
}

/// Deletes an endpoint; whether it existed.
pub async fn delete(db: &D1Database, account_id: &str, id: &str) -> Result<bool, EdgeError> {
    Ok(db::run(db::stmt(
        db,
        "DELETE FROM webhook_endpoints WHERE id = ?1 AND account_id = ?2",
        &[text(id), text(account_id)],
    )?)
    .await?
        == 1)
}

/// A new secret; the previous one keeps signing until `previous_until`.
pub async fn rotate_secret(
    db: &D1Database,
    account_id: &str,
    id: &str,
    secret: &str,
    previous_until: Timestamp,
    now: Timestamp,
) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = ?4, secret = ?3,
             updated_at = ?5
         WHERE id = ?1 AND account_id = ?2",
        &[text(id), text(account_id), text(secret), time(previous_until), time(now)],
    )?)
    .await?;
    Ok(())
}

exactly_core::text_enum! {
    /// A circuit's state as its column holds it: [`breaker::State::name`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Circuit {
        Closed = "closed",
        Open = "open",
        HalfOpen = "half_open",
    }
}
crate::store::row::named!(Circuit);
crate::store::row! {
    /// The circuit columns as a row holds them (also read with a delivery, see
    /// [`crate::store::deliveries::Due`]).
    #[derive(Clone, Debug)]
    pub struct Columns {
        /// None for an endpoint stored before the breaker existed (closed); a name the breaker does
        /// not know is an error where the row is read.
        pub circuit: Option<Circuit>,
        /// Unix milliseconds, as `core::breaker` counts time.
        pub circuit_at: Option<i64>,
        pub circuit_attempts: Option<i64>,
        pub circuit_failed: Option<i64>,
        pub circuit_succeeded: Option<i64>,
        pub circuit_opens: Option<i64>,
        pub circuit_version: Option<i64>,
    }
}

/// The SELECT list of [`Columns`] for the endpoint aliased `e`.
pub const CIRCUIT: &str = "e.circuit, e.circuit_at, e.circuit_attempts, e.circuit_failed, e.circuit_succeeded,
    e.circuit_opens, e.circuit_version";

fn count(value: Option<i64>) -> u32 {
    value.map_or(0, |v| u32::try_from(v.max(0)).unwrap_or(u32::MAX))
}

impl Columns {
    /// The breaker's state (closed when the row has none, as an endpoint stored before the
    /// breaker existed).
    pub fn state(&self) -> State {
        let at = self.circuit_at.unwrap_or(0);
        let opens = count(self.circuit_opens);
        match self.circuit {
            Some(Circuit::Open) => State::Open { probe_at: at, opens },
            Some(Circuit::HalfOpen) => {
                State::HalfOpen { probe: (at != 0).then_some(at), succeeded: count(self.circuit_succeeded), opens }
            }
            Some(Circuit::Closed) | None => State::Closed {
                since: at,
                attempts: count(self.circuit_attempts),
                failed: count(self.circuit_failed),
                succeeded: count(self.circuit_succeeded),
            },
        }
    }

    /// The version a swap must find.
    pub fn version(&self) -> i64 {
        self.circuit_version.unwrap_or(0)
    }
}

/// The statement that ends an endpoint's failure streak (an attempt succeeded). An endpoint
/// with no streak is not written: a healthy endpoint's row is not touched by its deliveries.
pub fn reset_failures(db: &D1Database, id: &str, at: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_endpoints SET consecutive_failures = 0, updated_at = ?2
         WHERE id = ?1 AND consecutive_failures <> 0",
        &[text(id), time(at)],
    )
}

/// The statement that counts one more failed attempt in an endpoint's streak.
pub fn count_failure(db: &D1Database, id: &str, at: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1, updated_at = ?2 WHERE id = ?1",
        &[text(id), time(at)],
    )
}

/// The statement that disables an endpoint for `reason`, once (`enabled = 1`), and only when
/// its failure streak reached `streak` (0 for at once). The `endpoint.disabled` signal stands
/// right after it in the batch.
pub fn disable(
    db: &D1Database,
    id: &str,
    streak: i64,
    reason: &str,
    at: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_endpoints SET enabled = 0, disabled_reason = ?3, updated_at = ?4
         WHERE id = ?1 AND enabled = 1 AND consecutive_failures >= ?2",
        &[text(id), int(streak), text(reason), time(at)],
    )
}

/// Writes the operator's endpoint `id` of account `account_id` (or brings it up to date):
/// `url`, signed with `secret`, subscribed to `event_types`.
pub async fn put_operator(
    db: &D1Database,
    ids: (&str, &str),
    url: &str,
    event_types: &[EventType],
    secret: &str,
    now: Timestamp,
) -> Result<(), EdgeError> {
    let (id, account_id) = ids;
    db::run(db::stmt(
        db,
        "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, secret = excluded.secret,
             event_types = excluded.event_types,
             types_at = CASE WHEN webhook_endpoints.event_types IS NOT excluded.event_types
                             THEN excluded.updated_at ELSE webhook_endpoints.types_at END,
             updated_at = excluded.updated_at
           WHERE webhook_endpoints.url IS NOT excluded.url OR webhook_endpoints.secret IS NOT excluded.secret
              OR webhook_endpoints.event_types IS NOT excluded.event_types",
        &[text(id), text(account_id), text(url), text(&types_column(event_types)?), text(secret), time(now)],
    )?)
    .await?;
    Ok(())
}

/// Takes the endpoint's next turn under its rate limit of `rate` a second: attempts start at
/// least `1000 / rate` ms apart (fractional milliseconds kept, so every limit from 1 to 1000 is
/// exact), whatever their order: a guarded UPDATE moves the endpoint's next free time on, so
/// two attempts never take one turn. `Ok(None)` when taken, else how many milliseconds until the
/// next turn.
pub async fn take_turn(
    db: &D1Database,
    endpoint_id: &str,
    rate: u32,
    now: Timestamp,
) -> Result<Option<f64>, EdgeError> {
    crate::store::row! {
        struct Next {
            rate_next_at: f64,
        }
    }
    let interval = JsValue::from_f64(turn_interval(rate));
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "UPDATE webhook_endpoints SET rate_next_at = ?2 + ?3 WHERE id = ?1 AND rate_next_at <= ?2",
                &[text(endpoint_id), time(now), interval],
            )?,
            db::stmt(db, "SELECT rate_next_at FROM webhook_endpoints WHERE id = ?1", &[text(endpoint_id)])?,
        ],
    )
    .await?;
    if results.first().map(db::changes) == Some(1) {
        return Ok(None);
    }
    let next: Option<Next> = results.get(1).map(db::rows).transpose()?.and_then(|rows| rows.into_iter().next());
    let next = next.ok_or_else(|| EdgeError::unavailable("store", "the endpoint was deleted"))?;
    Ok(Some((next.rate_next_at - now.unix_millis() as f64).max(1.0)))
}

/// The milliseconds between two attempts under a limit of `rate` a second (1 to 1000).
pub fn turn_interval(rate: u32) -> f64 {
    1000.0 / f64::from(rate.clamp(1, 1000))
}

#[cfg(test)]
mod tests {
    use super::{turn_interval, Circuit, Columns};
    use crate::store::row::{Cell, Column as _, FromRow as _};
    use exactly_core::breaker::State;

    /// The column holds what the breaker names its states, each read back as that state; a
    /// name it does not know is an error, never a closed circuit.
    #[test]
    fn every_circuit_name_reads_back_and_no_other() {
        let closed = State::Closed { since: 5, attempts: 1, failed: 0, succeeded: 1 };
        let open = State::Open { probe_at: 9, opens: 2 };
        let half = State::HalfOpen { probe: Some(9), succeeded: 0, opens: 2 };
        for state in [closed, open, half] {
            let columns = Columns::from_row(&serde_json::json!({
                "circuit": state.name(), "circuit_at": 0, "circuit_attempts": 0, "circuit_failed": 0,
                "circuit_succeeded": 0, "circuit_opens": 0, "circuit_version": 1,
            }))
            .unwrap_or_else(|e| panic!("{}: {e}", state.name()));
            assert_eq!(columns.state().name(), state.name());
        }
        assert_eq!(Circuit::read(Cell::Text("half_open".into())), Ok(Circuit::HalfOpen));
        assert!(Circuit::read(Cell::Text("opened".into())).is_err());
    }

    /// Every limit from 1 to 1000 a second is kept exactly: `rate` turns span less than a
    /// second and one more spans at least a second (integer division made 501 to 999 behave as
    /// 1000).
    #[test]
    fn every_rate_from_1_to_1000_is_exact() {
        for rate in 1..=1000_u32 {
            let interval = turn_interval(rate);
            let span = |turns: u32| f64::from(turns) * interval;
            assert!(span(rate - 1) < 1000.0, "{rate}");
            assert!(span(rate) >= 1000.0 - 1e-9, "{rate}: {}", span(rate));
        }
        assert_eq!(turn_interval(0), 1000.0);
        assert_eq!(turn_interval(5000), 1.0);
    }
}
