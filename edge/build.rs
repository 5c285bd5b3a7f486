//! Compresses `docs/openapi.json` (zlib, the runtime's `DecompressionStream("deflate")`) into
//! the build's output, for `GET /openapi.json`: the document is served as it is written, and
//! the bundle holds a tenth of its size.
//!
//! Beside it, the answer of `GET /v1/event_types`: `core::catalog`'s entries, each with the JSON
//! Schema of its body taken from the document's `webhooks` (made self-contained) and an example
//! body. A document whose webhooks differ from the catalog (a type more or less, another summary)
//! fails the build, so the two cannot drift.

use std::collections::BTreeSet;
use std::path::Path;

use exactly_core::catalog::CATALOG;
use exactly_core::webhook::EventType;
use serde_json::{json, Map, Value};

fn main() {
    // Read at run time: the build script's binary may be reused by a clone at another path that
    // shares the target directory, and a path compiled in would point into that clone.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let source = Path::new(&manifest).join("../docs/openapi.json");
    println!("cargo:rerun-if-changed={}", source.display());
    let document = std::fs::read(&source).expect("read docs/openapi.json");
    let out = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).to_owned();
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(&document, 10);
    std::fs::write(out.join("openapi.json.zlib"), packed).expect("write the compressed OpenAPI document");
    let parsed: Value = serde_json::from_slice(&document).expect("docs/openapi.json is JSON");
    let catalog = serde_json::to_vec(&event_types(&parsed)).expect("encode the catalog");
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(&catalog, 10);
    std::fs::write(out.join("event_types.json.zlib"), packed).expect("write the compressed catalog");
}

/// The answer of `GET /v1/event_types`.
fn event_types(document: &Value) -> Value {
    let webhooks = document["webhooks"].as_object().expect("docs/openapi.json has webhooks");
    let components = &document["components"]["schemas"];
    let documented: BTreeSet<&str> = webhooks.keys().map(String::as_str).collect();
    let catalogued: BTreeSet<&str> = CATALOG.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(documented, catalogued, "docs/openapi.json's webhooks and core::catalog name different types");
    let data: Vec<Value> = CATALOG
        .iter()
        .map(|entry| {
            let name = entry.event_type.as_str();
            let post = &webhooks[name]["post"];
            assert_eq!(
                post["summary"].as_str(),
                Some(entry.summary),
                "docs/openapi.json's summary of {name} differs from core::catalog's"
            );
            let body = &post["requestBody"]["content"]["application/json"]["schema"];
            let example: Value = serde_json::from_str(entry.example).expect("a catalog example is JSON");
            json!({
                "type": name,
                "summary": entry.summary,
                "description": entry.description,
                "subscribable": EventType::SUBSCRIBABLE.contains(&entry.event_type),
                "schema": self_contained(body, components),
                "example": {
                    "id": "evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "type": name, "created_at": "2026-12-01T10:00:05Z",
                    "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60", "sequence": 1, "data": example,
                },
            })
        })
        .collect();
    json!({ "data": data })
}

const COMPONENT: &str = "#/components/schemas/";

/// `schema` with every component it reaches, directly or through another, under its own
/// `$defs` (each `$ref` rewritten to match): a JSON Schema (2020-12) that stands alone.
fn self_contained(schema: &Value, components: &Value) -> Value {
    let mut defs = Map::new();
    let mut todo = Vec::new();
    let mut root = rewrite(schema, &mut todo);
    while let Some(name) = todo.pop() {
        if defs.contains_key(&name) {
            continue;
        }
        let component = components.get(&name).unwrap_or_else(|| panic!("docs/openapi.json has no schema {name}"));
        let rewritten = rewrite(component, &mut todo);
        defs.insert(name, rewritten);
    }
    if let Some(root) = root.as_object_mut() {
        root.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        if !defs.is_empty() {
            root.insert("$defs".into(), Value::Object(defs));
        }
    }
    root
}

/// `value` with `#/components/schemas/X` references rewritten to `#/$defs/X`; each X is pushed
/// to `found`.
fn rewrite(value: &Value, found: &mut Vec<String>) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(|v| rewrite(v, found)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match (k.as_str(), v.as_str().and_then(|r| r.strip_prefix(COMPONENT))) {
                    ("$ref", Some(name)) => {
                        found.push(name.to_owned());
                        (k.clone(), json!(format!("#/$defs/{name}")))
                    }
                    _ => (k.clone(), rewrite(v, found)),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}
