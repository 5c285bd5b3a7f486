//! Request and response helpers shared by the API handlers.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::{Request, Response};

use crate::error::EdgeError;

/// The largest JSON body the API accepts.
const MAX_JSON_BYTES: usize = 64 * 1024;

/// Reads a JSON body into `T`; 400 when it is not JSON of that shape.
pub async fn json_body<T: DeserializeOwned>(req: &mut Request) -> Result<T, EdgeError> {
    let bytes = req.bytes().await.map_err(|e| EdgeError::platform("read body", e))?;
    if bytes.len() > MAX_JSON_BYTES {
        return Err(EdgeError::BadRequest(format!("body larger than {MAX_JSON_BYTES} bytes")));
    }
    serde_json::from_slice(&bytes).map_err(|e| EdgeError::BadRequest(format!("body is not valid JSON for this request: {e}")))
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
    req.url().map(|u| u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()).unwrap_or_default()
}

/// One query parameter, if present and not blank.
pub fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    exactly_core::form::get(params, name)
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

/// A position in a list ordered newest first: (created_at, id) of the last item seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// `created_at` of the last item, Unix ms.
    pub created_at: i64,
    /// Its id, breaking ties.
    pub id: String,
}

impl Cursor {
    /// The opaque form handed to clients.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.created_at, self.id))
    }

    /// The cursor as the two SQL arguments of a page query (`created_at`, `id`), NULL for the
    /// first page.
    pub fn args(cursor: &Option<Cursor>) -> (wasm_bindgen::JsValue, wasm_bindgen::JsValue) {
        match cursor {
            Some(c) => (crate::db::int(c.created_at), crate::db::text(&c.id)),
            None => (wasm_bindgen::JsValue::NULL, wasm_bindgen::JsValue::NULL),
        }
    }

    /// The cursor of the next page: after the last of `rows` when the page was full.
    pub fn after<T>(rows: &[T], limit: u32, key: impl Fn(&T) -> (f64, &str)) -> Option<Cursor> {
        if rows.len() != limit as usize {
            return None;
        }
        rows.last().map(|last| {
            let (created_at, id) = key(last);
            Cursor { created_at: created_at as i64, id: id.to_owned() }
        })
    }

    /// Reads the `cursor` parameter; 422 when it is not one this API handed out.
    pub fn from_params(params: &[(String, String)]) -> Result<Option<Self>, EdgeError> {
        let Some(text) = param(params, "cursor") else { return Ok(None) };
        let invalid = || EdgeError::invalid("cursor", "is not a cursor from a previous page");
        let decoded = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let decoded = String::from_utf8(decoded).map_err(|_| invalid())?;
        let (created_at, id) = decoded.split_once(':').ok_or_else(invalid)?;
        Ok(Some(Cursor { created_at: created_at.parse().map_err(|_| invalid())?, id: id.to_owned() }))
    }
}
