#!/bin/sh
# Builds a worker bundle unless it is newer than every source it is made from.
#   sh scripts/build-worker.sh        production bundle: edge/build (wrangler.toml's main),
#                                     size-optimized with wasm-opt -Oz
#   sh scripts/build-worker.sh e2e    test bundle with fault injection: edge/build-e2e
#   sh scripts/build-worker.sh wasm-floor
#                                     `make bench`'s Rust floor (bench/wasm-floor/build),
#                                     built as the production bundle is
#   sh scripts/build-worker.sh wasm-floor-core
#                                     the same with the product's core (bench/wasm-floor/build-core)
# `make build` and wrangler's [build] command run the first; `make test` the first two;
# `make bench` the first and the floors.
set -eu
cd "$(dirname "$0")/.."

CRATE=edge
SOURCES="core/src core/Cargo.toml edge/src edge/Cargo.toml edge/build.rs docs/openapi.json"
case "${1:-production}" in
    e2e) OUT_DIR=build-e2e; FEATURES="--features fault-injection" ;;
    wasm-floor) CRATE=bench/wasm-floor; SOURCES="$CRATE/src $CRATE/Cargo.toml"; OUT_DIR=build; FEATURES="" ;;
    wasm-floor-core) CRATE=bench/wasm-floor; SOURCES="$CRATE/src $CRATE/Cargo.toml core/src core/Cargo.toml"; OUT_DIR=build-core; FEATURES="--features core" ;;
    *) OUT_DIR=build; FEATURES="" ;;
esac
OUT="$CRATE/$OUT_DIR/worker/shim.mjs"
# shellcheck disable=SC2086
if [ -f "$OUT" ] && [ -z "$(find $SOURCES Cargo.toml Cargo.lock scripts/build-worker.sh package-lock.json -newer "$OUT" -type f 2>/dev/null | head -n 1)" ]; then
    echo "build: worker ($CRATE/$OUT_DIR) up to date"
    exit 0
fi
[ -f .tools/wasm.env ] || sh scripts/setup.sh
. .tools/wasm.env
export WASM_BINDGEN_BIN=wasm-bindgen
export ESBUILD_BIN="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
echo "build: worker ($CRATE/$OUT_DIR; release wasm, no wasm-opt)"
# shellcheck disable=SC2086
worker-build --release --no-opt --out-dir "$OUT_DIR" "$CRATE" $FEATURES
if [ "$OUT_DIR" != build-e2e ]; then
    # worker-build would download wasm-opt; binaryen's npm build of it is pinned in package.json.
    # The features are the ones rustc's wasm32 target and wasm-bindgen use, listed rather than
    # --all-features so no encoding newer than workerd understands is emitted.
    echo "build: wasm-opt -Oz"
    node_modules/.bin/wasm-opt -Oz --enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int \
        --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling \
        "$CRATE/$OUT_DIR/index_bg.wasm" -o "$CRATE/$OUT_DIR/index_bg.wasm"
fi
touch "$OUT"
