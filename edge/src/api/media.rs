//! Media of messages (docs/contract.md §5): the stored copy of an inbound item, served to whoever
//! holds a signed, expiring link (`GET /v1/media/{message_id}/{position}`), and the stable
//! route an account follows to a fresh link (`GET /v1/messages/{id}/media/{position}`).
//!
//! Customer events carry the stable route, never a link: an event body is stored once and
//! delivered for days, and a link in it would expire.

use crate::api::auth::Ctx;
use exactly_core::media::LinkSigner;
use exactly_core::Timestamp;
use serde_json::Value;
use worker::{Headers, Request, Response};

use crate::api::http;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::media;
use crate::store::messages::{self, Message};

/// A position from the path: a plain decimal number, else no such item.
fn position(text: &str) -> Result<u32, EdgeError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EdgeError::NotFound);
    }
    text.parse().map_err(|_| EdgeError::NotFound)
}

/// A signed link to item `position` of `message_id`, valid for an hour from `now`, and when it
/// expires.
fn link(links: &LinkSigner, base: &str, message_id: &str, position: u32, now: Timestamp) -> (String, Timestamp) {
    let signed = links.sign(message_id, position, now);
    (format!("{base}/v1/media/{message_id}/{position}?{}", signed.query()), signed.expires)
}

/// The message as an API answer shows it: every stored item with a fresh signed `url`.
pub fn shown(message: &Message, config: &crate::config::Config) -> Result<Value, EdgeError> {
    let now = now();
    let mut json = message.to_json();
    if let Some(items) = json["media"].as_array_mut() {
        for (shown, item) in items.iter_mut().zip(&message.media) {
            if item.stored_at.is_some() && item.r2_key.is_some() {
                let (url, expires) =
                    link(&config.media_links, &config.public_base_url, &message.id, item.position, now);
                shown["url"] = Value::String(url);
                shown["url_expires_at"] = Value::String(expires.to_rfc3339());
            }
        }
    }
    Ok(json)
}

/// `GET /v1/media/{message_id}/{position}?expires=&signature=`: the stored copy, with its content
/// type. No API key: the signature is the credential. 403 for a signature that is not valid or
/// a link past its time, 404 while the item is not copied.
pub async fn serve(req: Request, ctx: &Ctx<'_>, message_id: &str, position_text: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let config = ctx.config;
    let params = http::query(&req);
    let expires = http::param(&params, "expires").unwrap_or_default();
    let signature = http::param(&params, "signature").unwrap_or_default();
    // A position that is not a number was never signed.
    let position =
        position(position_text).map_err(|_| EdgeError::Forbidden(exactly_core::media::LinkError::BadSignature))?;
    config.media_links.verify(message_id, position, expires, signature, now()).map_err(EdgeError::Forbidden)?;
    // A signed link names no account: with accounts in more than one database, the item is
    // looked for in each.
    let mut found = None;
    for scoped in crate::store::routes::each(env, ctx.config)? {
        found = media::stored(scoped.db(), message_id, position).await?;
        if found.is_some() {
            break;
        }
    }
    let stored = found.ok_or(EdgeError::MediaNotStored)?;
    let object = media::open_copy(env, &stored.r2_key).await?.ok_or(EdgeError::MediaNotStored)?;
    let content_type = object
        .http_metadata()
        .content_type
        .or(stored.content_type)
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    let size = object.size();
    let body = object
        .body()
        .ok_or_else(|| EdgeError::platform("r2 get", "the object has no body"))?
        .response_body()
        .map_err(|e| EdgeError::platform("r2 body", e))?;
    let headers = Headers::new();
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|e| EdgeError::platform("header", e));
    set("content-type", &content_type)?;
    set("content-length", &size.to_string())?;
    // Whatever a sender attached is shown as what it is and can run nothing on this origin (the
    // console shares it): no sniffing, a sandbox, and anything but images, audio and video is a
    // download.
    set("x-content-type-options", "nosniff")?;
    set("content-security-policy", "default-src 'none'; sandbox")?;
    let inline = ["image/", "audio/", "video/"].iter().any(|p| content_type.starts_with(p));
    set("content-disposition", if inline { "inline" } else { "attachment" })?;
    set("cache-control", "private, max-age=300")?;
    Ok(Response::from_body(body).map_err(|e| EdgeError::platform("respond", e))?.with_headers(headers))
}

/// `GET /v1/messages/{id}/media/{position}`: 302 to a fresh signed link to the stored copy of one
/// item of the caller's message. 404 for another account's message, an item that does not
/// exist or is outbound (not copied), and while the copy is not stored.
pub async fn redirect(
    _req: Request,
    ctx: &Ctx<'_>,
    message_id: &str,
    position_text: &str,
) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let message = messages::get(db, &account.id, message_id).await?.ok_or(EdgeError::NotFound)?;
    let position = position(position_text)?;
    let item = message.media.iter().find(|m| m.position == position).ok_or(EdgeError::NotFound)?;
    if item.r2_key.is_none() {
        return Err(EdgeError::NotFound);
    }
    if item.stored_at.is_none() {
        return Err(EdgeError::MediaNotStored);
    }
    let config = ctx.config;
    let (url, expires) = link(&config.media_links, &config.public_base_url, &message.id, position, now());
    let mut response = http::json(302, &serde_json::json!({"url": url, "url_expires_at": expires.to_rfc3339()}))?;
    response.headers_mut().set("location", &url).map_err(|e| EdgeError::platform("header", e))?;
    Ok(response)
}
