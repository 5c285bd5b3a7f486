#!/bin/sh
# Runs every fuzz target for FUZZ_SECONDS (default 60) each and fails on the first crash.
# Needs cargo-fuzz (installed here when missing); RUSTC_BOOTSTRAP lets the stable toolchain
# take the sanitizer flags cargo-fuzz passes.
set -eu
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
export RUSTC_BOOTSTRAP=1
mkdir -p target
for target in $(cargo fuzz list); do
    log="target/$target.log"
    if cargo fuzz run "$target" -- -max_total_time="$SECONDS_EACH" -max_len=4096 >"$log" 2>&1; then
        echo "fuzz: $target: $(grep -E '^Done' "$log" | tail -n 1)"
    else
        echo "fuzz: $target FAILED (input saved under fuzz/artifacts/$target):"
        tail -n 40 "$log"
        exit 1
    fi
done
