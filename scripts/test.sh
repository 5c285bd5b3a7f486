#!/bin/sh
# Every test: native unit tests, the core's tests on wasm32 under Node (wasm-bindgen-test), and
# the end-to-end tests against the real worker in wrangler dev.
set -eu
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false WRANGLER_SEND_ERROR_REPORTS=false CLOUDFLARE_CF_FETCH_ENABLED=false

echo "test: native unit tests"
cargo test --workspace --exclude exactly-tests --exclude exactly-bench --quiet

echo "test: core on wasm32 (wasm-bindgen-test under Node)"
(
    . .tools/wasm.env
    # Building std from source for tests also needs the test crate.
    if [ -n "${CARGO_UNSTABLE_BUILD_STD:-}" ]; then
        export CARGO_UNSTABLE_BUILD_STD="$CARGO_UNSTABLE_BUILD_STD,test"
    fi
    cargo test -p exactly-core --target wasm32-unknown-unknown --lib --tests
)

echo "test: deploy bundle and config (wrangler deploy --dry-run)"
npx wrangler deploy --dry-run --outdir target/deploy-dry-run | tail -n 1

echo "test: end-to-end against wrangler dev"
cargo test -p exactly-tests --test e2e
