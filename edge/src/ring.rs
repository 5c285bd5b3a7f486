//! The per-call ring owner: a SQLite-backed Durable Object that holds a call's ring plan and the
//! cursor of its sequential ring.
//!
//! One object per call means every hangup of that call is serialized through one owner, and the
//! cursor advances by compare-and-swap in the object's own storage before any dial.

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

/// The Durable Object class bound as `CALL_RING` in `wrangler.toml`.
#[durable_object]
pub struct CallRing {
    #[allow(dead_code)]
    state: State,
}

impl DurableObject for CallRing {
    fn new(state: State, _env: Env) -> Self {
        Self { state }
    }

    async fn fetch(&self, _req: Request) -> Result<Response> {
        Ok(Response::from_json(&serde_json::json!({
            "error": { "code": "not_found", "message": "this call has no ring plan" }
        }))?
        .with_status(404))
    }
}
