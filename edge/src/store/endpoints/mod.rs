//! The `webhook_endpoints` table: where an account's customer events are delivered. Every
//! statement names the account in its `WHERE`, so one account never reads or changes
//! another's endpoint.

use exactly_core::Timestamp;
use serde::Deserialize;
use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::D1Database;

use exactly_core::breaker;

use crate::error::EdgeError;
use crate::store::circuit::{Columns, CIRCUIT};
use crate::store::{self as db, int, text, time, Cursor};

/// An endpoint as the API shows it (never its secret).
#[derive(Debug, Deserialize)]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    /// JSON array of event types.
    pub event_types: String,
    pub enabled: f64,
    pub paused: f64,
    pub rate_limit_per_second: Option<f64>,
    pub disabled_reason: Option<String>,
    pub consecutive_failures: f64,
    pub max_in_flight: Option<f64>,
    pub created_at: f64,
    pub updated_at: f64,
    /// Its circuit breaker.
    #[serde(flatten)]
    pub circuit: Columns,
}

const COLUMNS: &str = "e.id, e.url, e.event_types, e.enabled, e.paused, e.rate_limit_per_second, e.disabled_reason,
     e.consecutive_failures, e.max_in_flight, e.created_at, e.updated_at";

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
            "event_types": serde_json::from_slice::<Value>(self.event_types.as_bytes()).unwrap_or(Value::Null),
            "enabled": self.enabled == 1.0,
            "paused": self.paused == 1.0,
            "rate_limit_per_second": self.rate_limit_per_second.map(|r| r as i64),
            "disabled_reason": self.disabled_reason,
            "consecutive_failures": self.consecutive_failures as i64,
            "max_in_flight": self.max_in_flight.map_or(i64::from(DEFAULT_MAX_IN_FLIGHT), |m| m as i64),
            "circuit": state.name(),
            "next_probe_at": probe.map(|at| Timestamp::from_unix_millis(at).to_rfc3339()),
            "created_at": db::millis(self.created_at).to_rfc3339(),
            "updated_at": db::millis(self.updated_at).to_rfc3339(),
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

/// A new endpoint (`url` already checked, `event_types` a JSON array).
pub async fn create(db: &D1Database, new: &New<'_>, now: Timestamp) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, rate_limit_per_second, max_in_flight,
                                        created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?8, ?6, ?6)",
        &[
            text(new.id),
            text(new.account_id),
            text(new.url),
            text(new.event_types),
            text(new.secret),
            time(now),
            new.rate_limit.map_or(JsValue::NULL, |r| int(i64::from(r))),
            int(i64::from(new.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT))),
        ],
    )?)
    .await?;
    Ok(())
}

/// An endpoint about to be created.
pub struct New<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    /// Already checked.
    pub url: &'a str,
    /// A JSON array of event types.
    pub event_types: &'a str,
    /// Its `whsec_` secret.
    pub secret: &'a str,
    /// At most this many deliveries a second.
    pub rate_limit: Option<u32>,
    /// At most this many attempts in flight ([`DEFAULT_MAX_IN_FLIGHT`] when absent).
    pub max_in_flight: Option<u32>,
}

/// A page of an account's endpoints, newest first.
pub async fn list(
    db: &D1Database,
    account_id: &str,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Endpoint>, EdgeError> {
    let (at, after) = Cursor::args(&cursor);
    db::all(db::stmt(
        db,
        &format!(
            "SELECT {COLUMNS}, {CIRCUIT} FROM webhook_endpoints e WHERE e.account_id = ?1
               AND (?2 IS NULL OR e.created_at < ?2 OR (e.created_at = ?2 AND e.id < ?3))
             ORDER BY e.created_at DESC, e.id DESC LIMIT ?4"
        ),
        &[text(account_id), at, after, int(i64::from(limit))],
    )?)
    .await
}

/// A change to an endpoint: each field changes only when given.
#[derive(Debug, Default)]
pub struct Update<'a> {
    /// The URL (already checked).
    pub url: &'a str,
    /// The event types (a JSON array).
    pub event_types: &'a str,
    /// Enable (clearing the failure count and the reason) or disable.
    pub enabled: Option<bool>,
    /// Pause (deliveries wait) or resume.
    pub paused: Option<bool>,
    /// Set (`Some(Some(n))`) or clear (`Some(None)`) the rate limit.
    pub rate_limit: Option<Option<u32>>,
    /// Set the in-flight limit.
    pub max_in_flight: Option<u32>,
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
             consecutive_failures = CASE WHEN ?6 = 1 AND enabled = 0 THEN 0 ELSE consecutive_failures END,
             disabled_reason = CASE WHEN ?6 = 1 THEN NULL WHEN ?6 = 0 THEN 'disabled by the account'
                                    ELSE disabled_reason END,
             enabled = COALESCE(?6, enabled),
             paused = COALESCE(?7, paused),
             rate_limit_per_second = CASE WHEN ?8 = 1 THEN ?9 ELSE rate_limit_per_second END,
             max_in_flight = COALESCE(?10, max_in_flight)
         WHERE id = ?1 AND account_id = ?2",
        &[
            text(id),
            text(account_id),
            text(change.url),
            text(change.event_types),
            time(now),
            flag(change.enabled),
            flag(change.paused),
            flag(change.rate_limit.map(|_| true)),
            change.rate_limit.flatten().map_or(JsValue::NULL, |r| int(i64::from(r))),
            change.max_in_flight.map_or(JsValue::NULL, |m| int(i64::from(m))),
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
