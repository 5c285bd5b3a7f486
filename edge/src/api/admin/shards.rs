//! `/admin/event_shards/move`: moving virtual shards of the dedupe log between databases.

use crate::api::auth::Ctx;
use serde::Deserialize;
use serde_json::json;
use worker::{Request, Response};

use crate::api::auth;
use crate::api::http;
use crate::error::EdgeError;
use crate::store::carrier_events;

/// `POST /admin/event_shards/move` `{first, last, to, after?, pages?}`: moves virtual shards of
/// the dedupe log to another database, up to `pages` (default and most 20) pages of 100 rows per
/// call; call again with the answer's
/// `after` until it says `done` (docs/scaling.md, "Moving virtual shards").
pub async fn move_event_shards(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        first: u16,
        last: u16,
        to: String,
        #[serde(default, deserialize_with = "crate::api::http::null_as_default")]
        after: i64,
        #[serde(default)]
        pages: Option<usize>,
    }
    auth::admin(&req, ctx.config)?;
    let body: Body = http::json_body(&mut req).await?;
    let pages = body.pages.unwrap_or(20);
    if !(1..=20).contains(&pages) {
        return Err(EdgeError::invalid("pages", "must be from 1 to 20"));
    }
    let log = carrier_events::Log::open(env, ctx.config);
    let rival = crate::faults::rival_move(env);
    let moved = log.move_shards(body.first, body.last, &body.to, body.after, pages, rival.as_deref()).await?;
    worker::console_log!("{}", json!({"admin": "move event shards", "move": &moved}));
    http::json(200, &moved)
}
