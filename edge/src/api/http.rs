//! Request and response helpers shared by the API handlers.

use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::{Request, Response};

use crate::error::EdgeError;

/// How much of an oversized body is read and discarded before answering (see [`body_capped`]).
pub const MAX_DRAIN_BYTES: usize = 1024 * 1024;

/// The largest JSON body the API accepts.
const MAX_JSON_BYTES: usize = 64 * 1024;

/// Reads a JSON body into `T`; 400 when it is not JSON of that shape or larger than 64 KiB.
pub async fn json_body<T: DeserializeOwned>(req: &mut Request) -> Result<T, EdgeError> {
    let bytes =
        body_capped(req, MAX_JSON_BYTES, || EdgeError::BadRequest(format!("body larger than {MAX_JSON_BYTES} bytes")))
            .await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| EdgeError::BadRequest(format!("body is not valid JSON for this request: {e}")))
}

/// Reads a request body of at most `max` bytes, answering `too_large()` as soon as it is
/// longer.
///
/// A declared `Content-Length` over `max` is refused before anything is read, and one within it
/// is read whole. A body without one (`Transfer-Encoding: chunked`) is read chunk by chunk and
/// refused at the first chunk that would take it past `max`, so no more than `max` bytes are
/// ever held, whatever the sender streams.
///
/// Past the cap the rest is read and thrown away, up to [`MAX_DRAIN_BYTES`], before the 413
/// goes out, as HTTP servers commonly do: a client still sending its body may not read an
/// early answer, and a body abandoned mid-stream resets the connection (in `wrangler dev` it
/// broke the next request on the proxy's pooled connection). A sender that keeps streaming past
/// that bound gets the 413 on a connection that is then dropped.
pub async fn body_capped(
    req: &mut Request,
    max: usize,
    too_large: impl Fn() -> EdgeError,
) -> Result<Vec<u8>, EdgeError> {
    read_capped(req.inner(), &req.headers().0, max, too_large).await
}

/// [`body_capped`] on the runtime's request and its `Headers`, for a handler that reads both
/// without the worker crate's conversion.
pub async fn read_capped(
    req: &web_sys::Request,
    headers: &web_sys::Headers,
    max: usize,
    too_large: impl Fn() -> EdgeError,
) -> Result<Vec<u8>, EdgeError> {
    use wasm_bindgen::JsCast as _;
    let declared = headers.get("content-length").ok().flatten().and_then(|n| n.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    if declared.is_some() {
        // The runtime holds a body to its declared length, which is within the cap: read it
        // whole, one promise instead of a reader and a promise per chunk.
        let buffer = req.array_buffer().map_err(|e| EdgeError::platform("read body", format!("{e:?}")))?;
        let buffer = worker::wasm_bindgen_futures::JsFuture::from(buffer)
            .await
            .map_err(|e| EdgeError::platform("read body", format!("{e:?}")))?;
        return Ok(js_sys::Uint8Array::new(&buffer).to_vec());
    }
    // A request without a body (an empty POST) has no stream at all.
    let Some(raw) = req.body() else { return Ok(Vec::new()) };
    let mut stream = wasm_streams::ReadableStream::from_raw(raw.unchecked_into());
    let mut reader = stream.get_reader();
    let mut body = Vec::new();
    loop {
        let chunk = match reader.read().await {
            Ok(Some(chunk)) => js_sys::Uint8Array::new(&chunk),
            Ok(None) => break,
            Err(e) => return Err(EdgeError::platform("read body", format!("{e:?}"))),
        };
        let len = chunk.length() as usize;
        if body.len().saturating_add(len) > max {
            let mut drained = body.len().saturating_add(len);
            drop(body);
            while drained <= MAX_DRAIN_BYTES {
                match reader.read().await {
                    Ok(Some(chunk)) => {
                        drained = drained.saturating_add(js_sys::Uint8Array::new(&chunk).length() as usize)
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            return Err(too_large());
        }
        let start = body.len();
        body.resize(start + len, 0);
        chunk.copy_to(&mut body[start..]);
    }
    Ok(body)
}

/// A JSON response with `status`.
pub fn json<T: Serialize>(status: u16, value: &T) -> Result<Response, EdgeError> {
    Response::from_json(value).map(|r| r.with_status(status)).map_err(|e| EdgeError::platform("respond", e))
}

/// The bearer token of the `Authorization` header.
pub fn bearer(req: &Request) -> Option<String> {
    let header = req.headers().get("authorization").ok().flatten()?;
    let (scheme, token) = header.trim().split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim().to_owned())
}

/// The query parameters of a request, decoded.
pub fn query(req: &Request) -> Vec<(String, String)> {
    // The runtime's URL is serialized already: the query is whatever follows the first `?`.
    let url = req.inner().url();
    let query = url.split('#').next().unwrap_or_default().split_once('?').map_or("", |(_, query)| query);
    exactly_core::form::parse(query.as_bytes())
}

/// One query parameter, if present and not blank.
pub fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    exactly_core::form::get(params, name)
}

/// Reads an RFC 3339 time parameter; 422 naming it when it is not one.
pub fn time_param(
    params: &[(String, String)],
    name: &'static str,
) -> Result<Option<exactly_core::Timestamp>, EdgeError> {
    param(params, name)
        .map(|text| {
            exactly_core::Timestamp::parse_rfc3339(text)
                .ok_or_else(|| EdgeError::invalid(name, "must be an RFC 3339 time"))
        })
        .transpose()
}

/// The page size of a list request: `limit` between 1 and 100, default 20.
pub fn limit(params: &[(String, String)]) -> Result<u32, EdgeError> {
    match param(params, "limit") {
        None => Ok(20),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(EdgeError::invalid("limit", "must be an integer from 1 to 100")),
        },
    }
}

pub use crate::store::Cursor;
