//! Page cursors: `(created_at, id)` of the last row of a page, opaque to clients.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use exactly_core::Timestamp;

use crate::error::EdgeError;
use crate::store::{int, text};

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
            Some(c) => (int(c.created_at), text(&c.id)),
            None => (wasm_bindgen::JsValue::NULL, wasm_bindgen::JsValue::NULL),
        }
    }

    /// The cursor of the next page: after the last of `rows` when the page was full.
    pub fn after<T>(rows: &[T], limit: u32, key: impl Fn(&T) -> (Timestamp, &str)) -> Option<Cursor> {
        if rows.len() != limit as usize {
            return None;
        }
        rows.last().map(|last| {
            let (created_at, id) = key(last);
            Cursor { created_at: created_at.unix_millis(), id: id.to_owned() }
        })
    }

    /// Reads the `cursor` parameter (absent or blank: the first page); 422 when it is not one
    /// this API handed out.
    pub fn from_params(params: &[(String, String)]) -> Result<Option<Self>, EdgeError> {
        let Some(text) = exactly_core::form::get(params, "cursor") else { return Ok(None) };
        let invalid = || EdgeError::invalid("cursor", "is not a cursor from a previous page");
        let decoded = URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let decoded = String::from_utf8(decoded).map_err(|_| invalid())?;
        let (created_at, id) = decoded.split_once(':').ok_or_else(invalid)?;
        Ok(Some(Cursor { created_at: created_at.parse().map_err(|_| invalid())?, id: id.to_owned() }))
    }
}
