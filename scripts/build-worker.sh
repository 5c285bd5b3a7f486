#!/bin/sh
# Builds the worker bundle (edge/build/worker/shim.mjs + wasm) unless it is newer than every
# source it is made from. `make build` and wrangler's [build] command both run this.
set -eu
cd "$(dirname "$0")/.."

OUT=edge/build/worker/shim.mjs
if [ -f "$OUT" ] && [ -z "$(find core edge/src edge/Cargo.toml Cargo.toml Cargo.lock -newer "$OUT" -type f -not -path '*/build/*' 2>/dev/null | head -n 1)" ]; then
    echo "build: worker up to date"
    exit 0
fi
[ -f .tools/wasm.env ] || sh scripts/setup.sh
. .tools/wasm.env
export WASM_BINDGEN_BIN=wasm-bindgen
export ESBUILD_BIN="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild"
export CARGO_TARGET_DIR="$PWD/target"
echo "build: worker (release wasm, no wasm-opt)"
worker-build --release --no-opt edge
touch "$OUT"
