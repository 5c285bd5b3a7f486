#!/bin/sh
# Every test: formatting and lints, native unit tests, the core's tests on wasm32 under Node
# (wasm-bindgen-test), and the end-to-end tests against the real worker in wrangler dev.
set -eu
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false WRANGLER_SEND_ERROR_REPORTS=false CLOUDFLARE_CF_FETCH_ENABLED=false

echo "test: formatting (cargo fmt --check, rustfmt.toml's width)"
cargo fmt --all --check
(cd fuzz && cargo fmt --check)

echo "test: lints (cargo clippy -D warnings: every crate natively, the edge for wasm32)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    cargo clippy -p exactly-edge --target wasm32-unknown-unknown --all-targets --quiet -- -D warnings
    cargo clippy -p exactly-edge --target wasm32-unknown-unknown --features fault-injection --quiet -- -D warnings
else
    # Debian's rustc-web (the fallback toolchain) ships no clippy; the native run above covers
    # the edge's code, which is the same on both targets.
    echo "test: (the edge's wasm32 lint needs rustup's wasm32 target; linted natively above)"
fi

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
echo "test: end-to-end again sharded: the dedupe log in DB and EVENTS_0, the accounts in ACCOUNTS_0 and ACCOUNTS_1 (docs/scaling.md)"
E2E_SHARDED=1 cargo test -p exactly-tests --test e2e
echo "test: the console in headless Chromium (node --test tests/browser/)"; node --test tests/browser/
