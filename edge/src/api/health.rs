//! `GET /healthz`: readiness without secrets: the configuration is valid and D1 answers (`DB`,
//! every database of the dedupe log, and every account database).

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
        // The other databases of the dedupe log and of the accounts, when the configuration names
        // or binds any.
        let log = crate::store::carrier_events::Log::open(env);
        let mut problems = Vec::new();
        let mut others: Vec<String> = log.as_ref().map(|l| l.bindings()).unwrap_or_default();
        // And every account database.
        for binding in crate::store::routes::databases(env) {
            if !others.contains(&binding) {
                others.push(binding);
            }
        }
        for binding in others.iter().filter(|b| *b != bindings::DB) {
            let answered = match crate::store::d1(env, binding) {
                Ok(db) => match crate::store::ping(&db).await {
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
