#!/bin/sh
# The quick inner loop (`make check`): formatting, lints (the Rust code and the OpenAPI document),
# the native unit tests (with the query plans and the layout test) and the core's tests on wasm32
# under Node. No worker is started.
set -eu
cd "$(dirname "$0")/.."
[ -f .tools/wasm.env ] || sh scripts/setup.sh

echo "check: formatting (cargo fmt --check, rustfmt.toml's width)"
cargo fmt --all --check
(cd fuzz && cargo fmt --check)

echo "check: lints (cargo clippy -D warnings: every crate natively, the edge for wasm32)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The Rust floor's `core` feature, which only `make bench` builds otherwise.
cargo clippy -p exactly-bench-wasm-floor --features core --all-targets --quiet -- -D warnings
if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    # One wasm32 run with the test build's faults compiled in: the production build's side of
    # each `cfg(feature = "fault-injection")` is the one the native run above lints.
    cargo clippy -p exactly-edge --target wasm32-unknown-unknown --all-targets --features fault-injection --quiet -- -D warnings
else
    # Debian's rustc-web (the fallback toolchain) ships no clippy; the native run above covers
    # the edge's code, which is the same on both targets.
    echo "check: (the edge's wasm32 lint needs rustup's wasm32 target; linted natively above)"
fi

echo "check: docs/openapi.json (redocly lint, recommended rules: redocly.yaml)"
# A warning fails it too: redocly exits non-zero only on errors.
if ! lint=$(REDOCLY_SUPPRESS_UPDATE_NOTICE=true REDOCLY_TELEMETRY=off node_modules/.bin/redocly lint docs/openapi.json 2>&1) \
    || printf '%s\n' "$lint" | grep -q 'You have [0-9]* warning'
then
    printf '%s\n' "$lint"
    exit 1
fi

echo "check: the TypeScript client (regenerated from docs/openapi.json, diffed, and type-checked with the console's use of it)"
generated=$(mktemp "${TMPDIR:-/tmp}/exactly-schema.XXXXXX.d.ts")
trap 'rm -f "$generated"' EXIT
if ! made=$(node_modules/.bin/openapi-typescript docs/openapi.json --redocly clients/typescript/redocly.yaml -o "$generated" 2>&1); then
    printf '%s\n' "$made"
    exit 1
fi
if ! diff -u clients/typescript/schema.d.ts "$generated"; then
    echo "check: clients/typescript/schema.d.ts is not what docs/openapi.json generates; regenerate it (clients/typescript/README.md)"
    exit 1
fi
node_modules/.bin/tsc -p tsconfig.json

echo "check: native unit tests"
cargo test --workspace --exclude exactly-tests --exclude exactly-bench --quiet

echo "check: core on wasm32 (wasm-bindgen-test under Node)"
(
    . .tools/wasm.env
    # Building std from source for tests also needs the test crate.
    if [ -n "${CARGO_UNSTABLE_BUILD_STD:-}" ]; then
        export CARGO_UNSTABLE_BUILD_STD="$CARGO_UNSTABLE_BUILD_STD,test"
    fi
    cargo test -p exactly-core --target wasm32-unknown-unknown --lib --tests
)
