//! Page cursors: `(created_at, id)` of the last row of a page.

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
    /// The form handed to clients: `<created_at>.<id>` (docs/openapi.json, `Cursor`). Any text of
    /// that form is a position in the list, so any is answered: with the items after it.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.created_at, self.id)
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

    /// Reads the `cursor` parameter (absent or blank: the first page); 422 when it is not of
    /// the form [`Cursor::encode`] writes.
    pub fn from_params(params: &[(String, String)]) -> Result<Option<Self>, EdgeError> {
        let Some(text) = exactly_core::form::get(params, "cursor") else { return Ok(None) };
        Self::parse(text).map(Some).ok_or_else(|| EdgeError::invalid("cursor", "is not a cursor from a previous page"))
    }

    /// `<created_at>.<id>`: up to 15 digits, then letters, digits and underscores, at most 100.
    /// A cursor of the earlier form (the same two, `:`-separated and base64url-encoded), which a
    /// client may still hold across a deploy, is read too.
    fn parse(text: &str) -> Option<Self> {
        let earlier = || {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).ok()?;
            String::from_utf8(decoded).ok().map(|d| d.replacen(':', ".", 1))
        };
        let text = if text.contains('.') { std::borrow::Cow::Borrowed(text) } else { earlier()?.into() };
        let (created_at, id) = text.split_once('.')?;
        let digits = !created_at.is_empty() && created_at.len() <= 15 && created_at.bytes().all(|b| b.is_ascii_digit());
        let word = !id.is_empty() && id.len() <= 100 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !(digits && word) {
            return None;
        }
        Some(Cursor { created_at: created_at.parse().ok()?, id: id.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_cursor_reads_back_and_only_its_form_reads() {
        let cursor = Cursor { created_at: 1_733_450_000_123, id: "msg_0a1b".to_owned() };
        assert_eq!(cursor.encode(), "1733450000123.msg_0a1b");
        assert_eq!(Cursor::parse(&cursor.encode()), Some(cursor.clone()));
        assert_eq!(Cursor::parse("0.a").map(|c| c.created_at), Some(0));
        // The earlier form: base64url of `1733450000123:msg_0a1b`.
        assert_eq!(Cursor::parse("MTczMzQ1MDAwMDEyMzptc2dfMGExYg"), Some(cursor.clone()));
        for bad in ["", ".", "1.", ".msg", "x.msg", "1:msg", "1.msg-1", "1.msg 1", "1234567890123456.m", "-1.m"] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
    }
}
