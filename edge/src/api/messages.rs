//! `/v1/messages`: send a message, SMS or MMS (with `Idempotency-Key`), read one (with its charge
//! and fresh links to its media), list them.

use crate::api::auth::Ctx;
use exactly_core::media::MAX_OUTBOUND_ITEMS;
use exactly_core::message::MessageStatus;
use exactly_core::segments;
use exactly_core::Timestamp;
use serde::Deserialize;
use worker::{Request, Response};

use crate::api::auth::Account;
use crate::api::http::{self as http, Cursor};
use crate::api::media;
use crate::api::{e164, page, with_charge};
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::queues::{self as jobs, Job};
use crate::store::messages::{self as messages, Direction, ListFilter, NewOutbound};

/// The longest text one API call may send (10 concatenated GSM-7 segments).
const MAX_TEXT_CHARS: usize = 1600;

/// How far ahead `send_at` may be.
const MAX_SCHEDULE_MILLIS: i64 = 7 * 24 * 3600 * 1000;

#[derive(Deserialize)]
struct NewMessage {
    from: Option<String>,
    to: Option<String>,
    text: Option<String>,
    send_at: Option<String>,
    media_urls: Option<Vec<String>>,
}

/// `POST /v1/messages` `{from, to, text, send_at?, media_urls?}`: 201 with the queued (or
/// scheduled) message, or 200 with the same message when the `Idempotency-Key` was used before
/// (no second send). `media_urls` (1 to 10 `https` URLs) makes it an MMS, whose text may be empty.
pub async fn create(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let db = ctx.db()?;
    let Account { id: account_id } = ctx.account()?;
    let key =
        req.headers().get("idempotency-key").ok().flatten().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
    if key.as_ref().is_some_and(|k| k.len() > 255) {
        return Err(EdgeError::invalid("Idempotency-Key", "must be at most 255 characters"));
    }
    let body: NewMessage = http::json_body(&mut req).await?;
    let from = e164("from", &body.from.ok_or_else(|| EdgeError::invalid("from", "is required"))?)?;
    let to = e164("to", &body.to.ok_or_else(|| EdgeError::invalid("to", "is required"))?)?;
    let media_urls = media_urls(body.media_urls)?;
    let text = match (body.text, media_urls.is_empty()) {
        (Some(text), _) => text,
        (None, false) => String::new(),
        (None, true) => return Err(EdgeError::invalid("text", "is required")),
    };
    if text.trim().is_empty() && media_urls.is_empty() {
        return Err(EdgeError::invalid("text", "must not be empty"));
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(EdgeError::invalid("text", format!("must be at most {MAX_TEXT_CHARS} characters")));
    }
    let created_at = now();
    let send_at = body.send_at.as_deref().map(parse_send_at).transpose()?;
    if let Some(at) = send_at {
        // A replay of a scheduled request may come after its time: it answers with the message.
        let replay = match key.as_deref() {
            Some(key) => messages::by_idempotency_key(db, &account_id, key).await?.is_some(),
            None => false,
        };
        if !replay {
            schedule_window(at, created_at)?;
        }
    }
    if !crate::store::numbers::owned_by(db, &from, &account_id).await? {
        return Err(EdgeError::invalid("from", "is not a number of this account"));
    }

    let count = segments::count(&text);
    let id = new_id("msg")?;
    let new = NewOutbound {
        id: &id,
        account_id: &account_id,
        from: &from,
        to: &to,
        text: &text,
        segments: i64::from(count.count),
        encoding: count.encoding,
        idempotency_key: key.as_deref(),
        send_at,
        media_urls: &media_urls,
    };
    let (message, created) = messages::create_outbound(db, new, created_at).await?;
    let same_time = message.send_at == send_at;
    if !created
        && (message.from_number != from.as_str()
            || message.to_number != to.as_str()
            || message.text != text
            || !same_time
            || !message.media.iter().map(|m| &m.url).eq(media_urls.iter()))
    {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::IdempotencyKeyReused,
            message: "this Idempotency-Key was used for a different message".into(),
        });
    }
    // A replay of a message whose first dispatch job may have been lost enqueues it again; the
    // dispatcher's claim makes a second job a no-op.
    match (message.status, message.send_at) {
        (MessageStatus::Queued, _) => jobs::enqueue(env, Job::dispatch(ctx.account_db()?, &message.id)).await?,
        // Due then; if this job is lost, the sweeper enqueues the send once due.
        (MessageStatus::Scheduled, Some(at)) if created => {
            jobs::dispatch_at(ctx.account_db()?, &message.id, at.unix_millis()).await?
        }
        _ => {}
    }
    http::json(if created { 201 } else { 200 }, &media::shown(&message, ctx.config)?)
}

/// `media_urls`: absent or empty for an SMS; else 1 to 10 `https` URLs, each checked as the
/// carrier will read it.
fn media_urls(urls: Option<Vec<String>>) -> Result<Vec<String>, EdgeError> {
    let urls = urls.unwrap_or_default();
    if urls.len() > MAX_OUTBOUND_ITEMS {
        return Err(EdgeError::invalid("media_urls", format!("must hold at most {MAX_OUTBOUND_ITEMS} URLs")));
    }
    urls.iter()
        .map(|url| {
            crate::platform::media_url(url).map_err(|e| EdgeError::invalid("media_urls", format!("{url:?} {e}")))
        })
        .collect()
}

/// `send_at`: an RFC 3339 time.
fn parse_send_at(at: &str) -> Result<Timestamp, EdgeError> {
    Timestamp::parse_rfc3339(at).ok_or_else(|| EdgeError::invalid("send_at", "must be an RFC 3339 time"))
}

/// A new scheduled message's `send_at`: after `now` and at most 7 days ahead.
fn schedule_window(at: Timestamp, now: Timestamp) -> Result<(), EdgeError> {
    if at.unix_millis() <= now.unix_millis() {
        return Err(EdgeError::invalid("send_at", "must be in the future"));
    }
    if at.unix_millis() - now.unix_millis() > MAX_SCHEDULE_MILLIS {
        return Err(EdgeError::invalid("send_at", "must be at most 7 days ahead"));
    }
    Ok(())
}

/// `POST /v1/messages/{id}/cancel`: a scheduled message is canceled and never sent (200 with the
/// message; again 200 once canceled). 409 once it is on its way or was never scheduled.
pub async fn cancel(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    messages::cancel(db, &account.id, id, now()).await?;
    let message = messages::get(db, &account.id, id).await?.ok_or(EdgeError::NotFound)?;
    if message.status != MessageStatus::Canceled {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::NotScheduled,
            message: format!("the message is {}, not scheduled: it can no longer be canceled", message.status.as_str()),
        });
    }
    http::json(200, &media::shown(&message, ctx.config)?)
}

/// `GET /v1/messages/{id}`; another account's message is 404.
pub async fn get(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let (message, charge) = messages::get_charged(db, &account.id, id).await?.ok_or(EdgeError::NotFound)?;
    http::json(200, &with_charge(media::shown(&message, ctx.config)?, charge))
}

/// `GET /v1/messages/{id}/history`: every status the message moved to, oldest first, with the
/// carrier's own word for it.
pub async fn history(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let message = messages::get(db, &account.id, id).await?.ok_or(EdgeError::NotFound)?;
    let steps = messages::history(db, &message.id).await?;
    let data: Vec<serde_json::Value> = steps
        .iter()
        .map(|h| {
            serde_json::json!({
                "status": h.status, "carrier_status": h.carrier_status,
                "at": h.created_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &serde_json::json!({ "message_id": message.id, "data": data }))
}

/// `GET /v1/messages?status=&direction=&limit=&cursor=`, newest first.
pub async fn list(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let params = http::query(&req);
    let status = http::given(&params, "status")
        .map(|s| MessageStatus::from_name(s).ok_or_else(|| EdgeError::invalid("status", "is not a message status")))
        .transpose()?;
    let direction = http::given(&params, "direction")
        .map(|d| Direction::from_name(d).ok_or_else(|| EdgeError::invalid("direction", "must be inbound or outbound")))
        .transpose()?;
    let limit = http::limit(&params)?;
    let rows =
        messages::list(db, &account.id, ListFilter { status, direction, cursor: Cursor::from_params(&params)?, limit })
            .await?;
    let next = Cursor::after(&rows, limit, |m| (m.created_at, &m.id));
    let data = rows.iter().map(|m| media::shown(m, ctx.config)).collect::<Result<Vec<_>, _>>()?;
    http::json(200, &page(data, next))
}
