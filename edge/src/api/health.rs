//! `GET /healthz`: readiness without secrets: the configuration is valid and D1 answers (`DB`,
//! every database of the dedupe log, and every account database), checked at most once per
//! isolate every [`CACHE_MILLIS`].

use serde_json::json;
use worker::{Env, Response};

use crate::bindings;
use crate::config;
use crate::error::EdgeError;

/// How long an isolate answers `/healthz` from its last check: the route is public and answers
/// before any limit, so a flood of it costs each isolate one round of pings per period.
pub const CACHE_MILLIS: i64 = 5_000;

thread_local! {
    /// The isolate's last check: when, its status, its body.
    static LAST: std::cell::RefCell<Option<(i64, u16, serde_json::Value)>> = const { std::cell::RefCell::new(None) };
}

/// 200 when ready, 503 otherwise; the body says which check failed (naming a variable, never
/// its value) and when it was checked (`checked_at`): an isolate checks at most once per
/// [`CACHE_MILLIS`] and answers from that check in between.
pub async fn check(env: &Env) -> Result<Response, EdgeError> {
    let now = crate::platform::now();
    let fresh = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|(at, _, _)| now.unix_millis() - at < CACHE_MILLIS)
            .map(|(_, s, b)| (*s, b.clone()))
    });
    let (status, body) = match fresh {
        Some(cached) => cached,
        None => {
            let loaded = config::get(env);
            let d1 = d1_problems(env, loaded.as_deref().ok()).await;
            let config = loaded.err().map(|e| e.to_string());
            let ready = config.is_none() && d1.is_none();
            let shown = |problem: Option<String>| problem.unwrap_or_else(|| "ok".to_owned());
            let status = if ready { 200 } else { 503 };
            let body = json!({
                "status": if ready { "ok" } else { "unavailable" },
                "checks": { "config": shown(config), "d1": shown(d1) },
                "checked_at": now.to_rfc3339(),
            });
            LAST.with(|last| *last.borrow_mut() = Some((now.unix_millis(), status, body.clone())));
            (status, body)
        }
    };
    crate::api::http::json(status, &body)
}

/// What keeps D1 from answering, if anything: `DB` first; then the other databases of the
/// dedupe log and of the accounts, when the configuration (while it is valid) names or binds any.
async fn d1_problems(env: &Env, config: Option<&config::Config>) -> Option<String> {
    match env.d1(bindings::DB) {
        Ok(db) => {
            if crate::store::ping(&db).await.is_err() {
                return Some("unreachable".to_owned());
            }
        }
        Err(_) => return Some("binding missing".to_owned()),
    }
    let log = config.map(|c| crate::store::carrier_events::Log::open(env, c));
    let mut others: Vec<String> = log.as_ref().map(|l| l.bindings()).unwrap_or_default();
    for binding in config.map(|c| crate::store::routes::databases(env, c)).unwrap_or_default() {
        if !others.contains(&binding) {
            others.push(binding);
        }
    }
    let mut problems = Vec::new();
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
    (!problems.is_empty()).then(|| problems.join("; "))
}
