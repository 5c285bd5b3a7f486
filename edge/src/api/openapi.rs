//! `GET /openapi.json`: the OpenAPI 3.1 description of `/v1` and `/admin` (docs/openapi.json).
//!
//! The bundle holds the document zlib-compressed (`build.rs`), about a tenth of its 55 KB, and
//! the runtime's own `DecompressionStream` inflates it into the response as it is sent, so the
//! answer is the document byte for byte.

use wasm_bindgen::prelude::wasm_bindgen;
use worker::Response;

use crate::error::EdgeError;

/// docs/openapi.json, zlib-compressed.
pub const COMPRESSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.zlib"));

#[wasm_bindgen(inline_js = "
export function inflated(bytes, contentType) {
    // The bytes are a view of the module's memory: the copy is the response's own.
    const body = new Response(bytes.slice()).body.pipeThrough(new DecompressionStream('deflate'));
    return new Response(body, { headers: { 'content-type': contentType } });
}
")]
extern "C" {
    #[wasm_bindgen(catch)]
    fn inflated(bytes: &[u8], content_type: &str) -> Result<web_sys::Response, wasm_bindgen::JsValue>;
}

/// The document, as JSON.
pub fn document() -> Result<Response, EdgeError> {
    inflated(COMPRESSED, "application/json")
        .map(Response::from)
        .map_err(|e| EdgeError::platform("respond", format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    /// The compressed copy inflates to the document in docs/.
    #[test]
    fn the_compressed_document_is_the_document() {
        let inflated = miniz_oxide::inflate::decompress_to_vec_zlib(super::COMPRESSED).expect("zlib");
        assert_eq!(inflated, include_bytes!("../../../docs/openapi.json"));
    }
}
