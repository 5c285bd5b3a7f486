//! `Idempotency-Key` on every POST and PATCH of `/v1` and `/admin` (docs/contract.md §5,
//! "Idempotency"): for 24 hours the same key and the same request (method, path, body) answer the
//! first answer again, status and body, without running twice; the same key with another
//! request answers 422 `idempotency_key_reused`; while the first still runs, 409
//! `idempotency_key_in_use` with `Retry-After: 1`. A refusal (4xx) is not kept: nothing was done,
//! and the same request may run again. A 5xx answer is kept like a success, since its work may
//! have been done (a batch committed, then a queue send failed); and a request that stopped
//! without an answer leaves its key in use, its outcome unknown, until the key expires.
//!
//! The kept answer is sealed (ChaCha20-Poly1305) under a key derived from the Idempotency-Key
//! and `ADMIN_TOKEN` (HMAC-SHA256): an answer that showed a secret once (an API key, an
//! endpoint's signing secret) is never readable from the database alone.

use std::future::Future;

use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use worker::{D1Database, Request, RequestInit, Response};

use crate::api::http;
use crate::config::Config;
use crate::error::{Conflict, EdgeError};
use crate::platform::now;
use crate::store::idempotency::{self, Taken};

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// The answer header that says an answer is a kept one.
pub const REPLAYED: &str = "idempotent-replayed";
/// The longest key.
const MAX_KEY_LEN: usize = 255;

/// Whether requests of `method` (as the route table names it) take an Idempotency-Key.
fn applies(method: &str) -> bool {
    matches!(worker::Method::from(method.to_owned()), worker::Method::Post | worker::Method::Patch)
}

/// Whether a request of `method` sent an Idempotency-Key that [`once`] must honour.
pub fn requested(method: &str, req: &Request) -> bool {
    applies(method) && req.headers().get(HEADER).ok().flatten().is_some_and(|k| !k.trim().is_empty())
}

/// The request's Idempotency-Key, if it sent one (blank is none).
fn key_of(req: &Request) -> Result<Option<String>, EdgeError> {
    let key = req.headers().get(HEADER).ok().flatten().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty());
    if key.as_ref().is_some_and(|k| k.len() > MAX_KEY_LEN) {
        return Err(EdgeError::invalid("Idempotency-Key", "must be at most 255 characters"));
    }
    Ok(key)
}

/// The request's fingerprint (its method, path, query and body, each length-prefixed, hashed),
/// and its body, read under the JSON cap.
async fn fingerprint(req: &mut Request) -> Result<(String, Vec<u8>), EdgeError> {
    let method = req.method().to_string();
    // The runtime's own serialization of the URL (no URL parser in the bundle for it).
    let url = req.inner().url();
    let parts =
        exactly_core::form::Url::parse(&url).ok_or_else(|| EdgeError::BadRequest("an unreadable URL".into()))?;
    let body =
        http::body_capped(req, http::MAX_JSON_BYTES, || EdgeError::BodyTooLarge { max: http::MAX_JSON_BYTES }).await?;
    let mut print = Sha256::new();
    for part in [method.as_bytes(), parts.path.as_bytes(), parts.query.unwrap_or_default().as_bytes(), &body] {
        print.update((part.len() as u64).to_be_bytes());
        print.update(part);
    }
    Ok((print.finalize().iter().map(|b| format!("{b:02x}")).collect(), body))
}

/// Runs `handle` on `req` once per Idempotency-Key of `scope` (the account, or `admin`), whose
/// keys are kept in `db` (the account's database, or `DB`), or as it
/// is when the request sent none. The body is read here (under the JSON cap) to fingerprint the
/// request, and handed on unchanged.
pub async fn once<F, Fut>(
    mut req: Request,
    config: &Config,
    db: &D1Database,
    scope: &str,
    handle: F,
) -> Result<Response, EdgeError>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Result<Response, EdgeError>>,
{
    let Some(key) = key_of(&req)? else { return handle(req).await };
    let (fingerprint, body) = fingerprint(&mut req).await?;
    match idempotency::take(db, scope, &key, &fingerprint, now()).await? {
        Taken::Run => {}
        Taken::Answered { status, sealed } => return replay(status, &open(config, scope, &key, &sealed)?),
        Taken::Reused => {
            return Err(EdgeError::Conflict {
                code: Conflict::IdempotencyKeyReused,
                message: "this Idempotency-Key was used for a different request".into(),
            })
        }
        Taken::Running => {
            return Err(EdgeError::Conflict {
                code: Conflict::IdempotencyKeyInUse,
                message: "a request with this Idempotency-Key is still running; ask again shortly".into(),
            })
        }
        Taken::Unknown => {
            return Err(EdgeError::Conflict {
                code: Conflict::IdempotencyKeyInUse,
                message: "the first request with this Idempotency-Key stopped without an answer and may have \
                          done its work; read the resource, and use a new key to try again"
                    .into(),
            })
        }
    }
    let mut init = RequestInit::new();
    init.with_method(req.method()).with_headers(req.headers().clone());
    if !body.is_empty() {
        init.with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
    }
    let rebuilt = Request::new_with_init(&req.inner().url(), &init).map_err(|e| EdgeError::platform("request", e))?;
    let answered = handle(rebuilt).await;
    let refused = match &answered {
        Ok(response) => (400..500).contains(&response.status_code()),
        Err(e) => (400..500).contains(&e.status()),
    };
    if refused {
        // Not kept: nothing was done, so the same request may run again. A release that fails
        // leaves the key in use until it expires.
        if let Err(e) = idempotency::release(db, scope, &key).await {
            log_unkept(&e);
        }
        return answered;
    }
    let mut response = match answered {
        Ok(response) => response,
        Err(e) => {
            // Kept as the answer; the cause goes to the log, as the router logs any failure.
            worker::console_error!(
                "{}",
                serde_json::json!({"idempotency": "failed answer kept", "error": e.to_string()})
            );
            e.to_response().map_err(|e| EdgeError::platform("respond", e))?
        }
    };
    let status = response.status_code();
    let text = response.text().await.map_err(|e| EdgeError::platform("answer", e))?;
    // The work is done: an answer that cannot be kept is still given (a retry after the lock
    // then runs again, as without a key).
    let kept = match seal(config, scope, &key, &text) {
        Ok(sealed) => idempotency::finish(db, scope, &key, status, &sealed).await,
        Err(e) => Err(e),
    };
    if let Err(e) = kept {
        log_unkept(&e);
    }
    answer(status, &text, false)
}

fn log_unkept(e: &EdgeError) {
    worker::console_error!("{}", serde_json::json!({"idempotency": "answer not kept", "error": e.to_string()}));
}

fn replay(status: u16, text: &str) -> Result<Response, EdgeError> {
    answer(status, text, true)
}

fn answer(status: u16, text: &str, replayed: bool) -> Result<Response, EdgeError> {
    let mut response = if text.is_empty() { Response::empty() } else { Response::from_bytes(text.as_bytes().to_vec()) }
        .map_err(|e| EdgeError::platform("respond", e))?
        .with_status(status);
    let headers = response.headers_mut();
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|e| EdgeError::platform("header", e));
    if !text.is_empty() {
        set("content-type", "application/json")?;
    }
    if replayed {
        set(REPLAYED, "true")?;
    }
    Ok(response)
}

/// The sealing key of `key` in `scope`: HMAC-SHA256 under `ADMIN_TOKEN`.
fn cipher(config: &Config, scope: &str, key: &str) -> Result<ChaCha20Poly1305, EdgeError> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(config.admin_token.as_bytes())
        .map_err(|e| EdgeError::platform("seal", e))?;
    for part in [b"exactly idempotency v1".as_slice(), scope.as_bytes(), key.as_bytes()] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part);
    }
    let derived = mac.finalize().into_bytes();
    Ok(ChaCha20Poly1305::new(Key::from_slice(&derived)))
}

/// `text` sealed: base64 of a random 12-byte nonce and the ciphertext.
fn seal(config: &Config, scope: &str, key: &str, text: &str) -> Result<String, EdgeError> {
    let mut nonce = [0u8; 12];
    getrandom::getrandom(&mut nonce).map_err(|e| EdgeError::platform("random", e))?;
    let sealed = cipher(config, scope, key)?
        .encrypt(Nonce::from_slice(&nonce), text.as_bytes())
        .map_err(|_| EdgeError::platform("seal", "encryption failed"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode([nonce.as_slice(), &sealed].concat()))
}

/// What [`seal`] sealed. A kept answer that does not open (`ADMIN_TOKEN` changed since) is an
/// error, never another answer.
fn open(config: &Config, scope: &str, key: &str, sealed: &str) -> Result<String, EdgeError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(sealed)
        .map_err(|e| EdgeError::unavailable("store", format!("a kept answer is not base64: {e}")))?;
    if bytes.len() < 12 {
        return Err(EdgeError::unavailable("store", "a kept answer is too short"));
    }
    let (nonce, sealed) = bytes.split_at(12);
    let text = cipher(config, scope, key)?
        .decrypt(Nonce::from_slice(nonce), sealed)
        .map_err(|_| EdgeError::unavailable("store", "a kept answer does not open (ADMIN_TOKEN changed?)"))?;
    String::from_utf8(text).map_err(|e| EdgeError::unavailable("store", e))
}
