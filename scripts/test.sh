#!/bin/sh
# Every test: `make check` (formatting, lints, native and wasm32 unit tests), then at once the
# end-to-end tests against the real worker in wrangler dev in both layouts of the databases, the
# console in headless Chromium, and the deploy dry-run; then the API against its document
# (Schemathesis). docs/testing.md says where the time goes.
#   E2E_THREADS   tests at a time in each end-to-end layout (default 6: they wait on the worker)
set -eu
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false WRANGLER_SEND_ERROR_REPORTS=false CLOUDFLARE_CF_FETCH_ENABLED=false
THREADS="${E2E_THREADS:-6}"
LOGS=target/test-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started )) s"; }

sh scripts/check.sh
echo "test: check passed after $(elapsed)"

echo "test: building the end-to-end harness and the simulator"
cargo test -p exactly-tests --test e2e --no-run --quiet
cargo build -p sim -p exactly-tests --bins --quiet
# The README's quickstart test runs bin/sim (`cargo run -p sim`) as the README does: built here, alone (the
# features cargo picks for one package can differ from those for two), it starts at once there.
cargo build -p sim --bins --quiet
# The databases every worker starts from, migrated once for both passes (docs/testing.md).
E2E_PREPARE=1 cargo test -q -p exactly-tests --test e2e

# Each job runs in the background with its output in its own log, printed whole when it ends.
PIDS=""
job() {
    name=$1
    shift
    ( if "$@" >"$LOGS/$name.log" 2>&1; then echo 0; else echo $?; fi >"$LOGS/$name.rc" ) &
    PIDS="$PIDS $!"
}
echo "test: at once: end-to-end with one database and sharded ($THREADS tests at a time each), the console in Chromium, the deploy dry-run"
job e2e-one-database cargo test -q -p exactly-tests --test e2e -- --test-threads "$THREADS"
job e2e-sharded env E2E_SHARDED=1 cargo test -q -p exactly-tests --test e2e -- --test-threads "$THREADS"
job browser node --test tests/browser/
job deploy-dry-run node_modules/.bin/wrangler deploy --dry-run --outdir target/deploy-dry-run
# shellcheck disable=SC2086
wait $PIDS
# The API against its document (docs/testing.md): Schemathesis, alone, so that it slows no other test.
echo "test: then the API against its document (Schemathesis), after $(elapsed)"
PIDS=""
job contract env E2E_CONTRACT=1 cargo test -q -p exactly-tests --test e2e -- --test-threads 2
# shellcheck disable=SC2086
wait $PIDS

failed=""
for name in deploy-dry-run browser e2e-one-database e2e-sharded contract; do
    case $name in
        deploy-dry-run) title="deploy bundle and config (wrangler deploy --dry-run)" ;;
        browser) title="the console in headless Chromium (node --test tests/browser/)" ;;
        e2e-one-database) title="end-to-end against wrangler dev, one database" ;;
        e2e-sharded) title="end-to-end again sharded: the dedupe log in DB and EVENTS_0, the accounts in ACCOUNTS_0 and ACCOUNTS_1 (docs/scaling.md)" ;;
        contract) title="the API against docs/openapi.json (Schemathesis, every phase)" ;;
    esac
    rc=$(cat "$LOGS/$name.rc")
    echo "test: $title: $( [ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)" )"
    if [ "$name" = deploy-dry-run ] && [ "$rc" = 0 ]; then tail -n 1 "$LOGS/$name.log"; else cat "$LOGS/$name.log"; fi
    [ "$rc" = 0 ] || failed="$failed $name"
done
echo "test: everything ran in $(elapsed)"
if [ -n "$failed" ]; then
    # The last lines are what a reader of a long log sees first: which tests failed, and why.
    for name in $failed; do
        echo "test: in $name:"
        grep -E "^---- |panicked at|^    [a-z_:]+$|^test result:" "$LOGS/$name.log" | tail -n 40 | sed 's/^/test:   /'
        grep -A 3 "panicked at" "$LOGS/$name.log" | grep -vE "panicked at|^--$|^note:" | head -n 20 | sed 's/^/test:     /'
        # What failed the run after its tests passed: a delivery against the contract, a limit crossed.
        grep -A 6 "^e2e: FAILED" "$LOGS/$name.log" | cut -c 1-400 | head -n 14 | sed 's/^/test:   /'
    done
    echo "test: FAILED:$failed"
    exit 1
fi
