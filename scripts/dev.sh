#!/bin/sh
# Serves the worker on http://127.0.0.1:8787 with local D1, Queues, Durable Objects and a
# once-a-minute cron, all persisted under .wrangler/state. Settings (README, "The two commands"):
#   PORT          the worker's port (8787)
#   CARRIER_PORT  the fake carrier APIs' port (8788)
#   DEV_VARS      the development variables (.dev.vars; .dev.keys is written beside them)
#   DEV_STATE     where local D1, Queues and Durable Objects persist (.wrangler/state)
set -eu
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false WRANGLER_SEND_ERROR_REPORTS=false CLOUDFLARE_CF_FETCH_ENABLED=false
PORT="${PORT:-8787}"
# The fake carrier's port: the *_API_BASE lines of .dev.vars follow it (scripts/dev-vars.sh).
CARRIER_PORT="${CARRIER_PORT:-8788}"
export PORT CARRIER_PORT
# A port another process holds would send this worker's traffic to that one: stop instead.
for pair in "PORT $PORT" "CARRIER_PORT $CARRIER_PORT"; do
    set -- $pair
    if ! node -e 'require("net").createServer().once("error", () => process.exit(1))
        .listen(+process.argv[1], "127.0.0.1", function () { this.close(); })' "$2"; then
        echo "dev: port $2 ($1) is taken by another process (another make dev?); choose another, e.g. $1=$(($2 + 10)) make dev" >&2
        exit 1
    fi
done
# Derived from PORT so two `make dev`s on one machine never share an inspector (8787 -> 9229).
INSPECTOR_PORT="${INSPECTOR_PORT:-$((PORT + 442))}"
STATE="${DEV_STATE:-.wrangler/state}"
VARS="${DEV_VARS:-.dev.vars}"
KEYS="$(dirname "$VARS")/.dev.keys"
export DEV_VARS="$VARS"

sh scripts/dev-vars.sh
echo "dev: applying local D1 migrations (to every D1 binding in wrangler.toml)"
for binding in $(sed -n 's/^binding = "\(DB\|EVENTS_[0-9]*\|ACCOUNTS_[0-9]*\)"$/\1/p' wrangler.toml); do
    npx wrangler d1 migrations apply "$binding" --local --persist-to "$STATE" >/dev/null
done

# The fake carrier API that .dev.vars points TELNYX_API_BASE at (sends work without an account).
cargo build -q -p sim
"${CARGO_TARGET_DIR:-target}/debug/sim" carrier --listen "127.0.0.1:$CARRIER_PORT" --worker "http://127.0.0.1:$PORT" --keys "$KEYS" &
SIM_PID=$!

# wrangler dev does not fire cron triggers locally; this loop does, every minute.
(
    while sleep 60; do
        curl -fsS -o /dev/null "http://127.0.0.1:$PORT/__scheduled?cron=*+*+*+*+*" 2>/dev/null || true
    done
) &
CRON_PID=$!
trap 'kill $CRON_PID $SIM_PID 2>/dev/null || true' EXIT INT TERM

# The console (static assets built by scripts/build-console.sh, `[assets]` in wrangler.toml) is
# served ahead of the worker: only paths that are files under console/dist, all below /console/.
# wrangler's output passes through, with two changes: where everything is, said after its
# bindings table, where it stays in sight; and not its line for the second build it always runs
# when its file watcher starts ("The file edge/src,core/src changed"), which names no file that
# changed. A real change names its file and is kept.
WHERE="dev: the worker (API and home page): http://127.0.0.1:$PORT/
dev: the console: http://127.0.0.1:$PORT/console/
dev: the fake carrier APIs: http://127.0.0.1:$CARRIER_PORT (their receipts go to the worker)
dev: variables: $VARS; simulator keys: $KEYS; local state: $STATE"
echo "dev: serving on http://127.0.0.1:$PORT"
npx wrangler dev --local --ip 127.0.0.1 --port "$PORT" --inspector-port "$INSPECTOR_PORT" --persist-to "$STATE" \
    --env-file "$VARS" --test-scheduled 2>&1 |
    WATCHED="$(sed -n 's/^watch_dir = \["\(.*\)"\]$/\1/p' wrangler.toml | sed 's/", *"/,/g')" WHERE="$WHERE" awk '
        $0 == "The file " ENVIRON["WATCHED"] " changed, restarting build..." { next }
        { print; fflush() }
        /Ready on http/ && !told { print ENVIRON["WHERE"]; fflush(); told = 1 }'
