#!/usr/bin/env python3
"""`make profile`: a CPU profile of a worker's isolate under the benchmark's ingest load, taken
through wrangler dev's inspector (scripts/profile.mjs), and its top functions by self time.

The product is profiled from its own bundle in target/profile/build: the production build
(release, wasm-opt -Oz) with the wasm name section kept (`wasm-opt -g`), so wasm frames have
their Rust names. PROFILE_WORKERS picks the workers (default `exactly,javascript`),
PROFILE_LOAD `new`, `duplicate`, `e2e` (the end-to-end burst of `make bench`: inbound messages
from the carrier's POST to a subscribed endpoint, every consumer running) or `stock` (the same
burst against the product as `make dev` serves it, and the end-to-end floor served the same way:
the production bundle, whose wasm frames are unnamed), PROFILE_INTERVAL_US the sampling interval (200),
BENCH_REQUESTS and BENCH_CONCURRENCY the load. Profiles and tables go to target/profile/."""

import json, os, signal, subprocess, sys

sys.dont_write_bytecode = True  # no scripts/__pycache__ from importing bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

ROOT = bench.ROOT
OUT = os.path.join(ROOT, "target", "profile")
BUNDLE = os.path.join(OUT, "build")
INTERVAL_US = os.environ.get("PROFILE_INTERVAL_US", "200")
# Another checkout to build the product from (a commit to compare with: `git archive`d there).
SOURCE = os.path.abspath(os.environ.get("PROFILE_SOURCE", ROOT))
LOAD = os.environ.get("PROFILE_LOAD", "new")

# The same wasm-opt features as scripts/build-worker.sh, plus -g: names survive the optimizer.
BUILD = f"""set -eu
. .tools/wasm.env
export WASM_BINDGEN_BIN=wasm-bindgen ESBUILD_BIN="$PWD/node_modules/@esbuild/linux-x64/bin/esbuild" CARGO_TARGET_DIR="$PWD/target"
(cd "{SOURCE}" && worker-build --release --no-opt --out-dir "{BUNDLE}" edge)
node_modules/.bin/wasm-opt -Oz -g --enable-mutable-globals --enable-sign-ext --enable-nontrapping-float-to-int \\
    --enable-bulk-memory --enable-multivalue --enable-reference-types --enable-exception-handling \\
    "{BUNDLE}/index_bg.wasm" -o "{BUNDLE}/index_bg.wasm"
"""


def build():
    shim = os.path.join(BUNDLE, "worker", "shim.mjs")
    sources = subprocess.run(["find", "core/src", "core/Cargo.toml", "edge/src", "edge/Cargo.toml", "edge/build.rs", "docs/openapi.json", "Cargo.toml", "Cargo.lock", "-newer", shim, "-type", "f"],
                             cwd=SOURCE, capture_output=True, text=True).stdout if os.path.exists(shim) else "missing"
    stamp = os.path.join(BUNDLE, "source")
    built_from = open(stamp).read() if os.path.exists(stamp) else None
    if sources.strip() or built_from != SOURCE:
        print("profile: building the named bundle (target/profile/build)", flush=True)
        bench.sh("sh", "-c", BUILD)
        os.utime(shim)
        open(stamp, "w").write(SOURCE)
    bench.WORKERS["exactly"] = bench.WORKERS["exactly+log"] = shim


def profile(name, public_key, keys):
    directory, path = bench.config(name, public_key)
    state = os.path.join(OUT, f"state-{name}")
    subprocess.run(["rm", "-rf", state], check=True)
    bench.sh("npx", "wrangler", "d1", "migrations", "apply", "DB", "--local", "--config", path, "--persist-to", state, stdout=subprocess.DEVNULL)
    port, inspector = bench.free_port(), bench.free_port()
    log = open(os.path.join(OUT, f"wrangler-{name}.log"), "w")
    proc = subprocess.Popen(["npx", "wrangler", "dev", "--local", "--ip", "127.0.0.1", "--port", str(port), "--inspector-port", str(inspector),
                             "--config", path, "--persist-to", state, "--show-interactive-dev-session=false"],
                            cwd=ROOT, env=bench.ENV, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    out = os.path.join(OUT, f"{name}-{LOAD}.cpuprofile")
    try:
        bench.wait_ready(base)
        bench.load(base, keys, f"warm-{name}", 300, False)
        prefix = f"{LOAD}-{name}"
        if LOAD == "duplicate":
            # As `make bench` measures duplicates: of an event that was processed already.
            bench.processed_duplicate(base, keys, path, state, prefix)
        recorder = subprocess.Popen(["node", "scripts/profile.mjs", "record", str(inspector), out, INTERVAL_US],
                                    cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if recorder.stdout.readline().strip() != "profiling":
            raise SystemExit("profile: the inspector did not start profiling")
        measured = bench.load(base, keys, prefix, bench.REQUESTS, LOAD == "duplicate")
        recorder.stdin.close()
        recorder.wait(timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    table = subprocess.run(["node", "scripts/profile.mjs", "summarize", out, str(bench.REQUESTS), os.environ.get("PROFILE_TOP", "25")],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return measured, table


def main():
    os.makedirs(OUT, exist_ok=True)
    bench.sh("sh", "scripts/setup.sh")
    if LOAD != "stock":  # served as `make dev` serves it: its own production bundle
        build()
    # The Rust floors as `make bench` builds them (wasm-opt -Oz: their wasm frames are unnamed).
    bench.build_floors()
    bench.sh("cargo", "build", "--release", "-q", "-p", "sim")
    keygen = subprocess.run([bench.SIM, "keygen"], check=True, capture_output=True, text=True).stdout
    keys = os.path.join(OUT, "keys")
    open(keys, "w").write(keygen)
    public_key = next(line.split("=", 1)[1] for line in keygen.splitlines() if line.startswith("TELNYX_PUBLIC_KEY="))
    report = []
    if LOAD in ("e2e", "stock"):
        stock = LOAD == "stock"
        seed = next(line.split("=", 1)[1] for line in keygen.splitlines() if line.startswith("TELNYX_PRIVATE_SEED="))
        report = []
        names = os.environ.get("PROFILE_WORKERS", "exactly,floor").split(",")
        floors = ["floor"] if stock else list(bench.E2E_FLOORS)
        unknown = [name for name in names if name != "exactly" and name not in floors]
        if unknown:
            raise SystemExit(f"profile: no end-to-end worker named {', '.join(unknown)} (exactly, {', '.join(floors)})")
        for name in names:
            print(f"profile: {name}, end to end{' as make dev serves it' if stock else ''}, {bench.E2E_EVENTS} inbound messages", flush=True)
            out = os.path.join(OUT, f"{name}-{LOAD}.cpuprofile")
            measured = bench.end_to_end(public_key, seed, 1, floor=name if name in bench.E2E_FLOORS else None, profile=out, stock=stock)
            table = subprocess.run(["node", "scripts/profile.mjs", "summarize", out, str(measured["delivered"]), os.environ.get("PROFILE_TOP", "25")],
                                   cwd=ROOT, check=True, capture_output=True, text=True).stdout
            report.append(f"### {name}, end to end{' as make dev serves it' if stock else ''} ({measured['facts_per_s']:.1f} facts/s, workerd {measured['workerd_cpu_ms_per_fact']:.1f} ms CPU per fact while profiled)\n\n{table}")
    for name in ([] if LOAD in ("e2e", "stock") else os.environ.get("PROFILE_WORKERS", "exactly,javascript").split(",")):
        print(f"profile: {name}, {bench.REQUESTS} {LOAD} events at concurrency {bench.CONCURRENCY}", flush=True)
        measured, table = profile(name, public_key, keys)
        report.append(f"### {name}, {LOAD} events ({measured['throughput_rps']:.0f} req/s, p50 {measured['p50_ms']:.1f} ms while profiled)\n\n{table}")
    text = "\n".join(report)
    open(os.path.join(OUT, f"profile-{LOAD}.md"), "w").write(text)
    print(text)
    print(json.dumps({"written": os.path.relpath(os.path.join(OUT, f"profile-{LOAD}.md"), ROOT)}))


if __name__ == "__main__":
    main()
