//! Request and response helpers shared by the API handlers.

use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::{Request, Response};

use crate::error::EdgeError;

/// How much of an oversized body is read and discarded before answering (see [`body_capped`]).
pub const MAX_DRAIN_BYTES: usize = 1024 * 1024;

/// The largest JSON body the API accepts.
pub const MAX_JSON_BYTES: usize = 64 * 1024;

/// For a request body's optional field: `null` reads as the field's default, as absent does
/// (docs/openapi.json allows `null` for every optional field of a request).
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// Reads a JSON body into `T`; 413 when it is larger than 64 KiB (refused before more is held),
/// 400 when it is not JSON of that shape.
pub async fn json_body<T: DeserializeOwned>(req: &mut Request) -> Result<T, EdgeError> {
    let bytes = body_capped(req, MAX_JSON_BYTES, || EdgeError::BodyTooLarge { max: MAX_JSON_BYTES }).await?;
    parse_json(&bytes)
}

/// Like [`json_body`], for a route whose body is optional: an empty (or blank) body is `T`'s
/// default.
pub async fn optional_json_body<T: DeserializeOwned + Default>(req: &mut Request) -> Result<T, EdgeError> {
    let bytes = body_capped(req, MAX_JSON_BYTES, || EdgeError::BodyTooLarge { max: MAX_JSON_BYTES }).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    parse_json(&bytes)
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, EdgeError> {
    let bad = |e: serde_json::Error| EdgeError::BadRequest(format!("body is not valid JSON for this request: {e}"));
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(bad)?;
    // Every body docs/openapi.json takes is an object; serde would also read a struct from an
    // array of its fields in order.
    if !value.is_object() {
        return Err(EdgeError::BadRequest("body is not valid JSON for this request: not a JSON object".into()));
    }
    whole_numbers(&mut value);
    serde_json::from_value(value).map_err(bad)
}

/// Writes each number with no fraction (`3600.0`, `1e3`) as the integer it is: JSON Schema's
/// `integer`, which docs/openapi.json uses, is any such number, where serde's integers take
/// only the digits.
fn whole_numbers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Below 2^53 every whole f64 is exact, and so is the integer written for it.
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers),
        _ => {}
    }
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

/// The header that carries a D1 session bookmark both ways (docs/contract.md §5).
pub const BOOKMARK: &str = "x-d1-bookmark";

/// The longest bookmark accepted; D1's are under a hundred characters.
const MAX_BOOKMARK_CHARS: usize = 256;

/// The bookmark a client sent back, if any; 400 when it cannot be one.
pub fn bookmark(req: &web_sys::Request) -> Result<Option<String>, EdgeError> {
    parse_bookmark(req.headers().get(BOOKMARK).ok().flatten().as_deref())
}

fn parse_bookmark(header: Option<&str>) -> Result<Option<String>, EdgeError> {
    let Some(text) = header.map(str::trim).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    // Bookmarks are opaque, but every one D1 hands out is hex digits and dashes.
    if text.len() > MAX_BOOKMARK_CHARS || !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(EdgeError::BadRequest(format!("{BOOKMARK} must be a bookmark an answer of this API carried")));
    }
    Ok(Some(text.to_owned()))
}

/// The token of an `Authorization: Bearer <token>` header's value.
pub fn bearer_of(header: &str) -> Option<String> {
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

/// A parameter whose value has a type (a number, one of a list of names), as given: a blank one
/// is given too, and refused by its reader, as docs/openapi.json's type refuses it. (Free text,
/// a cursor and a time read blank as absent: [`param`].)
pub fn given<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
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
    match given(params, "limit") {
        None => Ok(20),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(EdgeError::invalid("limit", "must be an integer from 1 to 100")),
        },
    }
}

pub use crate::store::Cursor;

#[cfg(test)]
mod tests {
    #[test]
    fn a_whole_number_written_with_a_fraction_reads_as_an_integer() {
        #[derive(serde::Deserialize)]
        struct Body {
            expires_in: i64,
            items: Vec<u32>,
        }
        let body: Body =
            super::parse_json(br#"{"expires_in": 894.0, "items": [1e3, 2]}"#).expect("whole numbers are integers");
        assert_eq!((body.expires_in, body.items), (894, vec![1000, 2]));
        assert!(super::parse_json::<Body>(br#"{"expires_in": 894.5, "items": []}"#).is_err());
        assert!(super::parse_json::<Body>(br#"{"expires_in": 1e300, "items": []}"#).is_err());
    }

    #[test]
    fn null_in_an_optional_field_reads_as_absent() {
        #[derive(serde::Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "super::null_as_default")]
            read_only: bool,
            #[serde(default, deserialize_with = "super::null_as_default")]
            targets: Vec<String>,
        }
        let body: Body = super::parse_json(br#"{"read_only": null, "targets": null}"#).expect("null is absent");
        assert!(!body.read_only && body.targets.is_empty());
        let body: Body = super::parse_json(br#"{"read_only": true, "targets": ["+15550001111"]}"#).expect("values");
        assert!(body.read_only && body.targets.len() == 1);
        assert!(super::parse_json::<Body>(br#"{"read_only": "yes"}"#).is_err());
        assert!(super::parse_json::<Body>(b"[]").is_err(), "an array is not a body");
        assert!(super::parse_json::<Body>(b"[true, []]").is_err(), "not even one of the fields in order");
    }

    use super::parse_bookmark;

    #[test]
    fn a_bookmark_is_taken_as_sent_and_anything_else_refused() {
        let d1 = "00000085-0000024c-00004c6d-8e61117bf38d7adb71b934ebbf891683";
        assert_eq!(parse_bookmark(Some(d1)).ok().flatten().as_deref(), Some(d1));
        assert_eq!(parse_bookmark(Some(&format!("  {d1} "))).ok().flatten().as_deref(), Some(d1));
        assert!(matches!(parse_bookmark(None), Ok(None)));
        assert!(matches!(parse_bookmark(Some("  ")), Ok(None)));
        for bad in ["first-primary; drop", "a b", "x".repeat(257).as_str(), "b\u{e9}"] {
            assert!(parse_bookmark(Some(bad)).is_err(), "{bad:?}");
        }
    }
}
