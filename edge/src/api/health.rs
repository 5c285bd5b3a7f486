//! `GET /healthz`: readiness without secrets: the configuration is valid and D1 answers (`DB`,
//! and every database of the dedupe log).

use serde_json::json;
use worker::{Env, Response};

use crate::bindings;
use crate::config;
use crate::error::EdgeError;

/// 200 when ready, 503 otherwise; the body says which check failed (naming a variable, never
/// its value).
pub async fn check(env: &Env) -> Result<Response, EdgeError> {
    let config = match config::get(env) {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let mut d1 = match env.d1(bindings::DB) {
        Ok(db) => match crate::store::ping(&db).await {
            Ok(_) => "ok".to_owned(),
            Err(_) => "unreachable".to_owned(),
        },
        Err(_) => "binding missing".to_owned(),
    };
    if d1 == "ok" {
        // The other databases of the dedupe log, when the configuration names or binds any.
        let log = crate::store::carrier_events::Log::open(env);
        let mut problems = Vec::new();
        for binding in log.as_ref().map(|l| l.bindings()).unwrap_or_default().iter().filter(|b| *b != bindings::DB) {
            let answered = match log.as_ref().map(|l| l.database(binding)) {
                Ok(Ok(db)) => match crate::store::ping(&db).await {
                    Ok(_) => None,
                    Err(_) => Some("unreachable"),
                },
                _ => Some("binding missing"),
            };
            problems.extend(answered.map(|p| format!("{binding}: {p}")));
        }
        if !problems.is_empty() {
            d1 = problems.join("; ");
        }
    }
    let ready = config == "ok" && d1 == "ok";
    crate::api::http::json(
        if ready { 200 } else { 503 },
        &json!({
            "status": if ready { "ok" } else { "unavailable" },
            "checks": { "config": config, "d1": d1 },
        }),
    )
}
