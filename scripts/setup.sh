#!/bin/sh
# Installs what building and testing need, skipping whatever is already there at the right
# version. Safe to run again. One line per step.
#   sh scripts/setup.sh          everything `make test` needs (what `make check` and `make test` run)
#   sh scripts/setup.sh serve    only what building and serving need (what `make dev` runs): no
#                                rustfmt, clippy, Chromium or sqlite3
set -eu
cd "$(dirname "$0")/.."
MODE="${1:-test}"

WORKER_BUILD_VERSION=0.8.7
WRANGLER_VERSION=4.86.0
TOOLS="$PWD/.tools"
mkdir -p "$TOOLS/bin"
step() { printf 'setup: %s\n' "$*"; }

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
APT_UPDATED=""
apt_install() {
    missing=""
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
    done
    [ -z "$missing" ] && return 0
    if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -qq >/dev/null; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
}

# 1. A Rust compiler that can target wasm32-unknown-unknown.
ENV_FILE="$TOOLS/wasm.env"
# EXACTLY_WASM_TOOLCHAIN=debian skips rustup and uses the Debian recipe (to check that path).
if [ "${EXACTLY_WASM_TOOLCHAIN:-}" != debian ] && {
       rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
       || timeout 20 rustup target add wasm32-unknown-unknown >/dev/null 2>&1; }; then
    step "wasm32 target: rustup's (installed)"
    cat > "$ENV_FILE" <<ENV
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
ENV
else
    apt_install rustc-web cargo-web rust-web-src lld-19
    # worker-build checks that this directory exists; with build-std it is never read.
    $SUDO mkdir -p /usr/lib/rustlib/wasm32-unknown-unknown/lib
    mkdir -p "$TOOLS/wasm-bin"
    ln -sf /usr/bin/cargo "$TOOLS/wasm-bin/cargo"
    ln -sf /usr/bin/rustc "$TOOLS/wasm-bin/rustc"
    ln -sf /usr/bin/rustdoc "$TOOLS/wasm-bin/rustdoc"
    step "wasm32 target: Debian rustc-web $(/usr/bin/rustc --version | cut -d' ' -f2) with std built from source"
    cat > "$ENV_FILE" <<ENV
export PATH="$TOOLS/wasm-bin:\$PATH"
export RUSTC_BOOTSTRAP=1
export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-19
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner
ENV
fi

# 1b. rustfmt and clippy for the formatting and lint steps of `make test` (not to serve).
if [ "$MODE" != serve ]; then
    if cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; then
        step "rustfmt and clippy (installed)"
    else
        step "rustfmt and clippy (installing)"
        timeout 120 rustup component add rustfmt clippy >/dev/null
    fi
fi

# 2 and 3. worker-build, exactly this version, and wasm-bindgen-cli at the version Cargo.lock
# pins for the wasm-bindgen library. Building them is the slow part of a first setup, so they
# build in the background while the steps after this one download, and in one target directory,
# so the dependencies they share build once. They build at opt-level 1: measured on two cores,
# 293 s against 403 s at the release profile's 3, and wasm-bindgen then takes 246 ms against
# 216 ms to bind the worker (docs/testing.md, "The first run").
INSTALL_TARGET="${CARGO_TARGET_DIR:-$HOME/.cache/exactly/target}/install"
BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/[^0-9.]/, ""); print; exit}' Cargo.lock)
TOOLS_LOG="$TOOLS/cargo-install.log"
TOOLS_PID=""
need_worker_build=""
need_bindgen=""
if [ "$(worker-build --version 2>/dev/null | awk '{print $NF}')" = "$WORKER_BUILD_VERSION" ]; then
    step "worker-build $WORKER_BUILD_VERSION (installed)"
else
    need_worker_build=1
fi
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $NF}')" = "$BINDGEN_VERSION" ] \
   && command -v wasm-bindgen-test-runner >/dev/null; then
    step "wasm-bindgen-cli $BINDGEN_VERSION (installed)"
else
    need_bindgen=1
fi
if [ -n "$need_worker_build$need_bindgen" ]; then
    step "worker-build $WORKER_BUILD_VERSION and wasm-bindgen-cli $BINDGEN_VERSION (building in the background, a few minutes)"
    TOOLS_STARTED=$(date +%s)
    (
        export CARGO_PROFILE_RELEASE_OPT_LEVEL=1
        if [ -n "$need_worker_build" ]; then
            cargo install worker-build --version "$WORKER_BUILD_VERSION" --locked --quiet --target-dir "$INSTALL_TARGET"
        fi
        if [ -n "$need_bindgen" ]; then
            # Not --locked: the lock file published with 0.2.130 pins a webpki-roots release the
            # registry no longer serves. The version that matters, wasm-bindgen's own, is pinned
            # by --version.
            cargo install wasm-bindgen-cli --version "$BINDGEN_VERSION" --quiet --target-dir "$INSTALL_TARGET"
        fi
    ) >"$TOOLS_LOG" 2>&1 &
    TOOLS_PID=$!
fi
# Waits for the background build of the tools; stops setup if it failed.
tools_built() {
    [ -n "$TOOLS_PID" ] || return 0
    if wait "$TOOLS_PID"; then
        step "worker-build and wasm-bindgen-cli built ($(( $(date +%s) - TOOLS_STARTED )) s)"
    else
        cat "$TOOLS_LOG" >&2
        step "building worker-build or wasm-bindgen-cli FAILED (above; $TOOLS_LOG)"
        exit 1
    fi
    TOOLS_PID=""
}
# Whatever stops setup early does not leave the build running behind it.
trap '[ -z "$TOOLS_PID" ] || { pkill -P "$TOOLS_PID" 2>/dev/null; kill "$TOOLS_PID" 2>/dev/null; } || true' EXIT

# 4. wrangler (and the esbuild worker-build bundles with), pinned in package-lock.json.
if [ "$(node -p 'require("./node_modules/wrangler/package.json").version' 2>/dev/null)" = "$WRANGLER_VERSION" ] \
   && [ node_modules/.package-lock.json -nt package-lock.json ]; then
    step "wrangler $WRANGLER_VERSION (installed)"
else
    step "wrangler $WRANGLER_VERSION (npm ci)"
    npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi

# 4b. The local Queues fix (scripts/patch-miniflare.mjs says what and why); idempotent.
PATCHED=$(node scripts/patch-miniflare.mjs)
step "$PATCHED"

# 5. The console's packages (Preact, htm, playwright-core), pinned in console/package-lock.json.
if [ console/node_modules/.package-lock.json -nt console/package-lock.json ]; then
    step "console packages (installed)"
else
    step "console packages (npm ci in console/)"
    (cd console && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi

if [ "$MODE" = serve ]; then
    tools_built
    exit 0
fi

# 6. Chromium for the console's browser test (driven headless by playwright-core).
if [ -x /usr/bin/chromium ]; then
    step "chromium (installed)"
else
    step "chromium (apt-get install, a minute or two)"
    apt_install chromium
fi

# 7. The sqlite3 shell: edge/tests/query_plans.rs plans every store statement with it.
if command -v sqlite3 >/dev/null; then
    step "sqlite3 (installed)"
else
    step "sqlite3 (apt-get install)"
    apt_install sqlite3
fi

# 8. Python's official Standard Webhooks library, for the Python receiver snippet's test
# (docs/receivers/receiver.py), into .tools/python: nothing is installed system-wide.
PY_SW_VERSION=1.1.0
if [ -d ".tools/python/standardwebhooks-$PY_SW_VERSION.dist-info" ]; then
    step "python standardwebhooks $PY_SW_VERSION (installed)"
else
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3 python3-pip
    step "python standardwebhooks $PY_SW_VERSION (pip install --target .tools/python)"
    rm -rf .tools/python
    # The variable, not the flag: a pip older than 22.1 would refuse the flag.
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target .tools/python \
        "standardwebhooks==$PY_SW_VERSION"
fi

# 9. The Python client (clients/python): its generator into .tools/pygen, and, for the test that
# installs the client into a fresh virtualenv without the network, its run-time packages and
# build backend (pinned in clients/python/requirements.txt) into .tools/python-wheels.
WHEELS=.tools/python-wheels
python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
sh scripts/python-client.sh install
if cmp -s clients/python/requirements.txt "$WHEELS/requirements.txt" 2>/dev/null; then
    step "python client's packages (downloaded)"
else
    step "python client's packages (pip download into $WHEELS)"
    rm -rf "$WHEELS"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip download --quiet --disable-pip-version-check -d "$WHEELS" \
        -r clients/python/requirements.txt
    cp clients/python/requirements.txt "$WHEELS/requirements.txt"
fi

# 10. Schemathesis, the property-based tester of the API against docs/openapi.json
# (tests/tests/contract.rs), into its own virtualenv, every package pinned.
# Schemathesis 4.32 and its Hypothesis need Python 3.11 or newer.
ST=.tools/schemathesis
if cmp -s tests/schemathesis/requirements.txt "$ST/requirements.txt" 2>/dev/null \
    && "$ST/bin/python" -c 'import schemathesis' 2>/dev/null; then
    step "schemathesis (installed)"
else
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "setup: schemathesis needs Python 3.11 or newer; python3 is $(python3 --version 2>&1)" >&2
        exit 1
    fi
    step "schemathesis (pip install into $ST)"
    rm -rf "$ST"
    python3 -m venv "$ST"
    PIP_ROOT_USER_ACTION=ignore "$ST/bin/pip" install --quiet --disable-pip-version-check \
        -r tests/schemathesis/requirements.txt
    cp tests/schemathesis/requirements.txt "$ST/requirements.txt"
fi

tools_built
