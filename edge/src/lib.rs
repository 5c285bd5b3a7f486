//! The **exactly** Cloudflare Worker: the IO around `exactly-core`.
//!
//! Entry points only live here; each handler reads decode, decide (core), apply (D1), respond.
//!
//! # Layout
//! - [`ingest`]: `POST /webhooks/{carrier}`: verify, store once, enqueue.
//! - [`carrier_events`]: the `carrier_events` SQL, with its guards in the `WHERE` clauses.
//! - [`jobs`]: the `jobs` queue (producer and consumer) and its dead-letter queue.
//! - [`sweeper`]: the cron step that re-enqueues events whose job was lost.
//! - [`ring`]: the per-call Durable Object that owns the sequential-ring cursor.
//! - [`bindings`]: binding and variable names, mirroring `wrangler.toml`.
//! - [`error`]: the one error type, mapped once to HTTP.
//! - [`platform`]: time and randomness from the runtime.

use worker::{event, Context, Env, MessageBatch, Method, Request, Response, ScheduleContext, ScheduledEvent};

pub mod bindings;
pub mod carrier_events;
pub mod error;
pub mod ingest;
pub mod jobs;
pub mod platform;
pub mod ring;
pub mod sweeper;

use error::EdgeError;

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    let method = req.method();
    let path = req.path();
    let result = match (method, path.as_str()) {
        (Method::Post, "/webhooks/telnyx") => ingest::telnyx(req, &env).await,
        (_, "/webhooks/telnyx") => Err(EdgeError::MethodNotAllowed),
        _ => Err(EdgeError::NotFound),
    };
    match result {
        Ok(response) => Ok(response),
        Err(error) => {
            let status = error.status();
            let line = serde_json::json!({
                "request": path, "status": status, "outcome": "rejected", "error": error.to_string(),
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
        other => {
            worker::console_error!("{}", serde_json::json!({"queue": other, "outcome": "unknown queue"}));
            batch.retry_all();
            Ok(())
        }
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    match sweeper::sweep(&env).await {
        Ok(count) => worker::console_log!("{}", serde_json::json!({"cron": "sweep", "requeued": count})),
        Err(e) => worker::console_error!("{}", serde_json::json!({"cron": "sweep", "error": e.to_string()})),
    }
}
