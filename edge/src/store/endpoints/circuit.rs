//! An endpoint's circuit breaker ([`exactly_core::breaker`]) on its `webhook_endpoints` row.
//!
//! The state lives in the `circuit*` columns and is replaced by compare-and-swap on
//! `circuit_version`, so two attempts that end at once never both apply their outcome to the
//! same state, and only one of two jobs that find the probe time passed sends the probe. The
//! signals `endpoint.circuit_opened` and `endpoint.circuit_closed` stand right after the swap in
//! its batch: each is written only if the swap happened, once per transition.

use exactly_core::breaker::{State, Transition};
use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use serde_json::json;
use worker::{D1Database, D1PreparedStatement};

use super::{Columns, CIRCUIT};
use crate::error::EdgeError;
use crate::store::signals::Signal;
use crate::store::{self as db, int, text};

/// The columns of `state`: (circuit, at, attempts, failed, succeeded, opens).
fn columns(state: State) -> (&'static str, i64, u32, u32, u32, u32) {
    match state {
        State::Closed { since, attempts, failed, succeeded } => ("closed", since, attempts, failed, succeeded, 0),
        State::Open { probe_at, opens } => ("open", probe_at, 0, 0, 0, opens),
        State::HalfOpen { probe, succeeded, opens } => ("half_open", probe.unwrap_or(0), 0, 0, succeeded, opens),
    }
}

/// Reads an endpoint's circuit.
pub async fn read(db: &D1Database, endpoint_id: &str) -> Result<Option<Columns>, EdgeError> {
    db::first(db::stmt(
        db,
        &format!("SELECT {CIRCUIT} FROM webhook_endpoints e WHERE e.id = ?1"),
        &[text(endpoint_id)],
    )?)
    .await
}

/// What a transition's signal says about the endpoint.
pub struct About<'a> {
    pub endpoint_id: &'a str,
    pub account_id: &'a str,
    pub url: &'a str,
}

/// Gives a half-open circuit's probe token back, for a batch whose statement before it gave the
/// probe's claimed attempt back: only when that statement did (`changes()`), and only the token
/// `lease` (no later probe's). The version moves on as a swap's does, so every compare-and-swap
/// that read the circuit before reads it again.
pub fn release_probe(db: &D1Database, endpoint_id: &str, lease: i64) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE webhook_endpoints SET circuit_at = 0, circuit_version = circuit_version + 1
         WHERE id = ?1 AND circuit = 'half_open' AND circuit_at = ?2 AND changes() = 1",
        &[text(endpoint_id), int(lease)],
    )
}

/// Replaces the circuit at `version` with `next`, writing the transition's signal in the same
/// batch if the swap happened. Returns `None` if another writer swapped first, else the
/// signal's event ids (empty without a transition).
pub async fn swap(
    db: &D1Database,
    about: &About<'_>,
    version: i64,
    next: State,
    transition: Option<Transition>,
    now: Timestamp,
) -> Result<Option<Vec<String>>, EdgeError> {
    let (circuit, at, attempts, failed, succeeded, opens) = columns(next);
    let mut statements = vec![db::stmt(
        db,
        "UPDATE webhook_endpoints SET circuit = ?3, circuit_at = ?4, circuit_attempts = ?5, circuit_failed = ?6,
             circuit_succeeded = ?7, circuit_opens = ?8, circuit_version = ?2 + 1
         WHERE id = ?1 AND circuit_version = ?2",
        &[
            text(about.endpoint_id),
            int(version),
            text(circuit),
            int(at),
            int(i64::from(attempts)),
            int(i64::from(failed)),
            int(i64::from(succeeded)),
            int(i64::from(opens)),
        ],
    )?];
    let signal = transition.map(|t| signal(about, t, next, version + 1, now)).transpose()?;
    if let Some(signal) = &signal {
        statements.extend(signal.statements(db, now)?);
    }
    let results = db::batch(db, statements).await?;
    if results.first().map(db::changes) != Some(1) {
        return Ok(None);
    }
    Ok(Some(signal.map(|s| s.event_ids()).unwrap_or_default()))
}

fn signal(
    about: &About<'_>,
    transition: Transition,
    next: State,
    version: i64,
    now: Timestamp,
) -> Result<Signal, EdgeError> {
    let (kind, data) = match (transition, next) {
        (Transition::Opened, State::Open { probe_at, .. }) => (
            EventType::EndpointCircuitOpened,
            json!({"endpoint_id": about.endpoint_id, "url": about.url, "opened_at": now.to_rfc3339(),
                   "next_probe_at": Timestamp::from_unix_millis(probe_at).to_rfc3339()}),
        ),
        _ => (
            EventType::EndpointCircuitClosed,
            json!({"endpoint_id": about.endpoint_id, "url": about.url, "closed_at": now.to_rfc3339()}),
        ),
    };
    // One signal per transition: the swap that makes it happens once, and writes this version.
    let resource = format!("{}@v{version}", about.endpoint_id);
    Signal::new(kind, &resource, Some(about.account_id), data, now)
}

/// Active endpoints (neither paused nor disabled) with deliveries in line, those whose line
/// has gone longest without a change first, at most `limit`: the sweeper wakes each (a wake lost
/// in a crash costs a minute or so, never a delivery). A wake that finds the line still held
/// (its circuit open) puts its oldest back, which moves that line to the back. A deleted
/// endpoint's line is woken too: its gates fail each delivery in it, as they fail one the
/// sweeper finds overdue.
pub async fn with_line(db: &D1Database, limit: u32) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        "SELECT d.endpoint_id AS id FROM webhook_deliveries d LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id
         WHERE d.waiting = 1 AND d.status = 'pending' AND (e.id IS NULL OR (e.enabled = 1 AND e.paused = 0))
         GROUP BY d.endpoint_id ORDER BY MAX(d.updated_at) LIMIT ?1",
        &[int(i64::from(limit))],
    )?)
    .await
}
