//! Compresses `docs/openapi.json` (zlib, the runtime's `DecompressionStream("deflate")`) into
//! the build's output, for `GET /openapi.json`: the document is served as it is written, and
//! the bundle holds a tenth of its size.

use std::path::Path;

fn main() {
    // Read at run time: the build script's binary may be reused by a clone at another path that
    // shares the target directory, and a path compiled in would point into that clone.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let source = Path::new(&manifest).join("../docs/openapi.json");
    println!("cargo:rerun-if-changed={}", source.display());
    let document = std::fs::read(&source).expect("read docs/openapi.json");
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(&document, 10);
    let out = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("openapi.json.zlib");
    std::fs::write(out, packed).expect("write the compressed OpenAPI document");
}
