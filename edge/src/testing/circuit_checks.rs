//! Store checks of an endpoint's circuit (`tests/tests/store.rs`), beside those of
//! [`super::checks`]: each sets up fresh rows and runs one guarded batch twice.

use serde_json::{json, Value};
use worker::Env;

use super::checks::{delivery_fixture, quote, raw, rows, DeliveryFixture, Report};
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::deliveries;

/// A probe's attempt, claimed under its half-open circuit's token, given back unsent: into its
/// line, with the token. With `token_taken`, a later probe holds the circuit's token since, and
/// it stays as it is.
pub async fn unclaim_probe(env: &Env, token_taken: bool) -> Result<Value, EdgeError> {
    let db = &crate::store::d1(env, crate::bindings::DB)?;
    let DeliveryFixture { endpoint, delivery, .. } = delivery_fixture(db, "deliveries.unclaim_probe").await?;
    let lease = now().unix_millis() + 60_000;
    let token = if token_taken { lease + 1 } else { lease };
    let setup = [
        format!(
            "UPDATE webhook_endpoints SET circuit = 'half_open', circuit_at = {token}, circuit_version = 3
             WHERE id = {}",
            quote(&endpoint)
        ),
        format!(
            "UPDATE webhook_deliveries SET attempts = 1, in_flight_until = {lease}, next_attempt_at = {lease}
             WHERE id = {}",
            quote(&delivery)
        ),
    ];
    for sql in &setup {
        raw(db, sql).await.map_err(|e| EdgeError::unavailable("test build", e))?;
    }
    let show = format!(
        "SELECT d.attempts, d.waiting, d.in_flight_until > 0 AS in_flight, e.circuit, e.circuit_at > 0 AS token,
                e.circuit_version
         FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.id = {}",
        quote(&delivery)
    );
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let given = deliveries::unclaim_probe(db, &delivery, &endpoint, 1, lease, now()).await?;
        r.runs.push((json!(given), rows(db, &show).await?));
    }
    Ok(r.into_json())
}
