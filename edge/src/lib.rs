//! The **exactly** Cloudflare Worker: the IO around `exactly-core`.
//!
//! Entry points only live here; each handler reads decode, decide (core), apply (D1), respond.
//!
//! # Layout
//! - [`ingest`]: `POST /webhooks/{telnyx,twilio,plivo}`: verify, store once, enqueue.
//! - [`processor`]: one stored carrier event -> its guarded effects.
//! - [`dispatch`]: sending an outbound message (claim, carrier call, result).
//! - [`call_events`]: `call.initiated` / `call.answered` / `call.hangup` and the ring they drive.
//! - [`jobs`]: the `jobs` queue (producer and consumer) and its dead-letter queue.
//! - [`deliveries`]: customer webhooks: the `deliveries` queue, signing, retries, disabling.
//! - [`sweeper`]: the cron step that re-enqueues work whose job was lost; [`retention`] the one
//!   that prunes what is no longer needed.
//! - [`health`]: `GET /healthz`.
//! - SQL, one module per resource, guards in the `WHERE` clauses: [`carrier_events`],
//!   [`messages`], [`calls`], [`outbox`] (customer events), [`usage`] (the ledger).
//! - [`api`]: `/admin` and `/v1` handlers, one file per resource; [`auth`] and [`http`] helpers.
//! - [`carrier_api`]: the carrier's REST API (send message, dial, answer, bridge, hang up).
//! - [`ring`]: the per-call Durable Object that owns the sequential-ring cursor.
//! - [`bindings`] (names mirroring `wrangler.toml`), [`config`], [`error`] (the one error type,
//!   mapped once to HTTP), [`db`], [`platform`] (time and randomness), [`faults`] (test-only).

use exactly_core::Provider;
use worker::{event, Context, Env, MessageBatch, Method, Request, Response, ScheduleContext, ScheduledEvent};

pub mod api;
pub mod auth;
pub mod bindings;
pub mod call_events;
pub mod calls;
pub mod carrier_api;
pub mod carrier_events;
pub mod config;
pub mod db;
pub mod deliveries;
pub mod dispatch;
pub mod error;
pub mod faults;
pub mod health;
pub mod http;
pub mod ingest;
pub mod jobs;
pub mod messages;
pub mod outbox;
pub mod platform;
pub mod processor;
pub mod retention;
pub mod ring;
pub mod sweeper;
pub mod usage;

use error::EdgeError;

/// Every route: (method, path pattern). `{id}` matches one path segment.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/webhooks/telnyx"),
    ("POST", "/webhooks/twilio"),
    ("POST", "/webhooks/plivo"),
    ("POST", "/admin/accounts"),
    ("POST", "/admin/numbers"),
    ("GET", "/admin/carrier_events"),
    ("POST", "/admin/carrier_events/{id}/retry"),
    ("POST", "/admin/carrier_events/retry"),
    ("GET", "/admin/webhook_deliveries"),
    ("POST", "/admin/webhook_deliveries/{id}/retry"),
    ("POST", "/v1/messages"),
    ("GET", "/v1/messages"),
    ("GET", "/v1/messages/{id}"),
    ("GET", "/v1/calls"),
    ("GET", "/v1/calls/{id}"),
    ("GET", "/v1/usage"),
    ("POST", "/v1/webhook_endpoints"),
    ("GET", "/v1/webhook_endpoints"),
    ("GET", "/v1/webhook_endpoints/{id}"),
    ("PATCH", "/v1/webhook_endpoints/{id}"),
    ("DELETE", "/v1/webhook_endpoints/{id}"),
    ("POST", "/v1/webhook_endpoints/{id}/rotate_secret"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/{id}"),
    ("POST", "/v1/events/{id}/replay"),
    ("GET", "/openapi.json"),
    ("GET", "/healthz"),
];

/// The OpenAPI 3.1 description of `/v1` and `/admin`, served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("../../docs/openapi.json");

async fn route(req: Request, env: &Env) -> Result<Response, EdgeError> {
    let method = req.method();
    let path = req.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segments.as_slice() == ["healthz"] {
        return health::check(env).await;
    }
    // Validated once per isolate; until it is valid, every route answers 503 naming the
    // variable.
    config::get(env)?;
    match (method, segments.as_slice()) {
        (Method::Post, ["webhooks", "telnyx"]) => ingest::webhook(Provider::Telnyx, req, env).await,
        (Method::Post, ["webhooks", "twilio"]) => ingest::webhook(Provider::Twilio, req, env).await,
        (Method::Post, ["webhooks", "plivo"]) => ingest::webhook(Provider::Plivo, req, env).await,
        (Method::Post, ["admin", "accounts"]) => api::admin::create_account(req, env).await,
        (Method::Post, ["admin", "numbers"]) => api::admin::create_number(req, env).await,
        (Method::Get, ["admin", "carrier_events"]) => api::admin::list_carrier_events(req, env).await,
        (Method::Post, ["admin", "carrier_events", "retry"]) => api::admin::retry_failed_carrier_events(req, env).await,
        (Method::Post, ["admin", "carrier_events", id, "retry"]) => api::admin::retry_carrier_event(req, env, id).await,
        (Method::Get, ["admin", "webhook_deliveries"]) => api::admin::list_failed_deliveries(req, env).await,
        (Method::Post, ["admin", "webhook_deliveries", id, "retry"]) => api::admin::retry_delivery(req, env, id).await,
        (Method::Post, ["v1", "messages"]) => api::messages::create(req, env).await,
        (Method::Get, ["v1", "messages"]) => api::messages::list(req, env).await,
        (Method::Get, ["v1", "messages", id]) => api::messages::get(req, env, id).await,
        (Method::Get, ["v1", "calls"]) => api::calls::list(req, env).await,
        (Method::Get, ["v1", "calls", id]) => api::calls::get(req, env, id).await,
        (Method::Get, ["v1", "usage"]) => api::usage::get(req, env).await,
        (Method::Post, ["v1", "webhook_endpoints"]) => api::webhook_endpoints::create(req, env).await,
        (Method::Get, ["v1", "webhook_endpoints"]) => api::webhook_endpoints::list(req, env).await,
        (Method::Get, ["v1", "webhook_endpoints", id]) => api::webhook_endpoints::get(req, env, id).await,
        (Method::Patch, ["v1", "webhook_endpoints", id]) => api::webhook_endpoints::update(req, env, id).await,
        (Method::Delete, ["v1", "webhook_endpoints", id]) => api::webhook_endpoints::delete(req, env, id).await,
        (Method::Post, ["v1", "webhook_endpoints", id, "rotate_secret"]) => api::webhook_endpoints::rotate_secret(req, env, id).await,
        (Method::Get, ["v1", "events"]) => api::events::list(req, env).await,
        (Method::Get, ["v1", "events", id]) => api::events::get(req, env, id).await,
        (Method::Post, ["v1", "events", id, "replay"]) => api::events::replay(req, env, id).await,
        (Method::Get, ["openapi.json"]) => {
            let mut response = Response::ok(OPENAPI).map_err(|e| EdgeError::platform("respond", e))?;
            response.headers_mut().set("content-type", "application/json").map_err(|e| EdgeError::platform("header", e))?;
            Ok(response)
        }
        #[cfg(feature = "fault-injection")]
        (Method::Post, ["__e2e", "sql"]) => faults::sql(req, env).await,
        _ if known_path(&segments) => Err(EdgeError::MethodNotAllowed),
        _ => Err(EdgeError::NoRoute),
    }
}

fn known_path(segments: &[&str]) -> bool {
    ROUTES.iter().any(|(_, pattern)| {
        let parts: Vec<&str> = pattern.trim_matches('/').split('/').collect();
        parts.len() == segments.len() && parts.iter().zip(segments).all(|(p, s)| p.starts_with('{') || p == s)
    })
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    let path = req.path();
    let method = req.method().to_string();
    let started = platform::now();
    match route(req, &env).await {
        Ok(response) => {
            // Webhook ingest logs its own, richer line.
            if !path.starts_with("/webhooks/") {
                worker::console_log!(
                    "{}",
                    serde_json::json!({
                        "request": path, "method": method, "status": response.status_code(), "outcome": "ok",
                        "latency_ms": platform::now().unix_millis() - started.unix_millis(),
                    })
                );
            }
            Ok(response)
        }
        Err(error) => {
            let status = error.status();
            let line = serde_json::json!({
                "request": path, "method": method, "status": status, "outcome": "rejected", "error": error.to_string(),
            });
            if status >= 500 {
                worker::console_error!("{line}");
            } else {
                worker::console_log!("{line}");
            }
            error.to_response()
        }
    }
}

#[event(queue)]
async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, _ctx: Context) -> worker::Result<()> {
    // Returning Err would abort the isolate and retry the whole batch, so every consumer acks or
    // retries each message itself.
    let queue = batch.queue();
    match queue.as_str() {
        bindings::queues::JOBS => jobs::consume(batch, &env).await,
        bindings::queues::JOBS_DEAD_LETTER => jobs::consume_dead_letters(batch, &env).await,
        bindings::queues::DELIVERIES => deliveries::consume(batch, &env).await,
        bindings::queues::DELIVERIES_DEAD_LETTER => deliveries::consume_dead_letters(batch, &env).await,
        other => {
            worker::console_error!("{}", serde_json::json!({"queue": other, "outcome": "unknown queue"}));
            batch.retry_all();
            Ok(())
        }
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    match prune(&env).await {
        Ok(pruned) => worker::console_log!("{}", serde_json::json!({"cron": "retention", "pruned": pruned})),
        Err(e) => worker::console_error!("{}", serde_json::json!({"cron": "retention", "error": e.to_string()})),
    }
    match sweeper::sweep(&env).await {
        Ok(report) => worker::console_log!(
            "{}",
            serde_json::json!({"cron": "sweep", "events": report.events, "dispatches": report.dispatches, "deliveries": report.deliveries})
        ),
        Err(e) => worker::console_error!("{}", serde_json::json!({"cron": "sweep", "error": e.to_string()})),
    }
}

async fn prune(env: &Env) -> Result<retention::Pruned, EdgeError> {
    let config = config::get(env)?;
    let db = db::database(env)?;
    retention::run(&db, config.retention, platform::now()).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{OPENAPI, ROUTES};

    /// Every `/v1` and `/admin` route the router serves is in the OpenAPI document, and every
    /// operation the document describes is served.
    #[test]
    fn openapi_matches_the_router() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("docs/openapi.json is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, ops)| ops.as_object().expect("operations").keys().map(move |m| (m.to_uppercase(), path.clone())))
            .collect();
        let served: BTreeSet<(String, String)> = ROUTES
            .iter()
            .filter(|(_, path)| path.starts_with("/v1/") || path.starts_with("/admin/"))
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let missing: Vec<_> = served.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&served).collect();
        assert!(missing.is_empty(), "served but not documented: {missing:?}");
        assert!(extra.is_empty(), "documented but not served: {extra:?}");
    }
}
