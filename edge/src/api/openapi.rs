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

/// The answer of `GET /v1/event_types`, zlib-compressed: `core::catalog` with each type's schema
/// from the document (`build.rs`, which also refuses a document that differs from the catalog).
pub const EVENT_TYPES: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/event_types.json.zlib"));

/// The event catalog, as JSON.
pub fn event_types() -> Result<Response, EdgeError> {
    inflated(EVENT_TYPES, "application/json")
        .map(Response::from)
        .map_err(|e| EdgeError::platform("respond", format!("{e:?}")))
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

    /// The catalog names every type once, in core's order, each with a schema and an example
    /// whose type is its own.
    #[test]
    fn the_catalog_is_core_s_with_schemas() {
        let inflated = miniz_oxide::inflate::decompress_to_vec_zlib(super::EVENT_TYPES).expect("zlib");
        let catalog: serde_json::Value = serde_json::from_slice(&inflated).expect("JSON");
        let entries = catalog["data"].as_array().expect("data");
        let names: Vec<&str> = entries.iter().filter_map(|e| e["type"].as_str()).collect();
        let expected: Vec<&str> = exactly_core::webhook::EventType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, expected);
        for entry in entries {
            assert_eq!(entry["example"]["type"], entry["type"]);
            assert!(entry["schema"]["$schema"].is_string(), "{entry}");
        }
    }
}
