#!/usr/bin/env python3
"""`make bench`: ingest latency and throughput of the product's worker against a floor worker
(the same D1 insert and queue send, no verification or parsing) and an idiomatic JavaScript
worker (WebCrypto Ed25519), all on local workerd in one run; D1 rows written per new event and
per duplicate; wasm size; and the core's verify+parse against bare verify_strict (criterion).
Writes target/bench/results.json and the results block of docs/benchmarks.md."""

import gzip, json, os, re, signal, socket, statistics, subprocess, sys, time, urllib.request
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench")
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
SIM = os.path.join(ROOT, "target", "release", "sim")
ENV = dict(os.environ, WRANGLER_SEND_METRICS="false", WRANGLER_SEND_ERROR_REPORTS="false", CLOUDFLARE_CF_FETCH_ENABLED="false", NO_COLOR="1")

WORKERS = {
    "floor": os.path.join(ROOT, "bench", "floor", "worker.js"),
    "javascript": os.path.join(ROOT, "bench", "js", "worker.js"),
    "exactly": os.path.join(ROOT, "edge", "build", "worker", "shim.mjs"),
}


def sh(*args, **kw):
    return subprocess.run(args, cwd=ROOT, env=ENV, check=True, **kw)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def config(name, public_key):
    """A wrangler config per worker: one D1 database with the product's schema and a jobs queue
    producer; no consumers, so only ingest is measured."""
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "wrangler.toml")
    extra = ""
    if name == "exactly":
        extra = '\n[[durable_objects.bindings]]\nname = "CALL_RING"\nclass_name = "CallRing"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["CallRing"]\n'
    with open(path, "w") as f:
        f.write(f'''name = "bench-{name}"
main = "{WORKERS[name]}"
compatibility_date = "2026-04-20"

[vars]
TELNYX_PUBLIC_KEY = "{public_key}"
TELNYX_API_KEY = "bench"
TELNYX_CONNECTION_ID = "bench"
PUBLIC_BASE_URL = "http://127.0.0.1"
ADMIN_TOKEN = "bench-admin-token-0123456789"

[[d1_databases]]
binding = "DB"
database_name = "exactly"
database_id = "00000000-0000-0000-0000-000000000000"
migrations_dir = "{os.path.join(ROOT, 'migrations')}"

[[queues.producers]]
binding = "JOBS"
queue = "exactly-jobs"
{extra}''')
    return directory, path


def wait_ready(base):
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(base + "/", timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except Exception:
            time.sleep(0.25)
    raise SystemExit(f"worker at {base} did not start")


def load(base, keys, prefix, requests, duplicate):
    out = subprocess.run([SIM, "load", base, keys, prefix, str(requests), str(CONCURRENCY), "duplicate" if duplicate else "new"],
                         cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def run_worker(name, public_key, keys, round_no):
    directory, path = config(name, public_key)
    state = os.path.join(directory, f"state-{round_no}")
    subprocess.run(["rm", "-rf", state], check=True)
    sh("npx", "wrangler", "d1", "migrations", "apply", "DB", "--local", "--config", path, "--persist-to", state, stdout=subprocess.DEVNULL)
    port = free_port()
    log_path = os.path.join(directory, f"wrangler-{round_no}.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(["npx", "wrangler", "dev", "--local", "--ip", "127.0.0.1", "--port", str(port), "--inspector-port", str(free_port()),
                             "--config", path, "--persist-to", state, "--show-interactive-dev-session=false"]
                            + (["--log-level", os.environ["BENCH_LOG_LEVEL"]] if os.environ.get("BENCH_LOG_LEVEL") else []),
                            cwd=ROOT, env=ENV, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base)
        load(base, keys, f"warm-{name}-{round_no}", 300, False)
        new = load(base, keys, f"new-{name}-{round_no}", REQUESTS, False)
        # The duplicates repeat an event that was already processed, as a carrier's retries
        # usually do: store it once and mark it processed, then hammer it.
        prefix = f"dup-{name}-{round_no}"
        load(base, keys, prefix, 1, True)
        for _ in range(20):
            done = subprocess.run(["npx", "wrangler", "d1", "execute", "DB", "--local", "--config", path, "--persist-to", state, "--command",
                                   f"UPDATE carrier_events SET processed_at = 1 WHERE carrier_event_id = '{prefix}-dup'"],
                                  cwd=ROOT, env=ENV, capture_output=True)
            if done.returncode == 0:
                break
            time.sleep(0.5)
        dup = load(base, keys, prefix, REQUESTS, True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    rows = {"new": [], "duplicate": []}
    if name == "exactly" and not os.environ.get("BENCH_LOG_LEVEL"):
        for line in open(log_path, errors="replace"):
            m = re.search(r'\{.*"request":"webhook".*\}', line)
            if not m:
                continue
            entry = json.loads(m.group(0))
            kind = "new" if entry.get("outcome") == "accepted" else "duplicate" if entry.get("outcome") == "duplicate" else None
            if kind and "rows_written" in entry:
                rows[kind].append(entry["rows_written"])
    return {"new": new, "duplicate": dup, "rows_written": {k: (statistics.mean(v) if v else None) for k, v in rows.items()}}


def criterion():
    out = subprocess.run(["cargo", "bench", "-q", "-p", "exactly-bench", "--bench", "verify", "--", "--output-format", "bencher"],
                         cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
    results = {}
    for line in out.splitlines():
        m = re.match(r"test (\S+)\s+\.\.\. bench:\s+([\d,]+) ns/iter \(\+/- ([\d,]+)\)", line)
        if m:
            results[m.group(1)] = {"ns": int(m.group(2).replace(",", "")), "spread_ns": int(m.group(3).replace(",", ""))}
    return results


def main():
    os.makedirs(OUT, exist_ok=True)
    sh("sh", "scripts/setup.sh")
    sh("sh", "scripts/build-worker.sh")
    sh("cargo", "build", "--release", "-q", "-p", "sim")
    keygen = subprocess.run([SIM, "keygen"], check=True, capture_output=True, text=True).stdout
    keys = os.path.join(OUT, "keys")
    open(keys, "w").write(keygen)
    public_key = re.search(r"TELNYX_PUBLIC_KEY=(\S+)", keygen).group(1)

    only = os.environ.get("BENCH_ONLY")
    if only:
        # A quick look at one worker while tuning; the document is left alone.
        for round_no in range(ROUNDS):
            print(json.dumps(run_worker(only, public_key, keys, round_no)))
        return
    runs = {name: [] for name in WORKERS}
    for round_no in range(ROUNDS):
        for name in WORKERS:
            print(f"bench: {name}, round {round_no + 1} of {ROUNDS}", flush=True)
            runs[name].append(run_worker(name, public_key, keys, round_no))

    def mean(name, kind, field):
        return statistics.mean(r[kind][field] for r in runs[name])

    failed = [(name, kind) for name in WORKERS for kind in ("new", "duplicate") for r in runs[name] if r[kind]["errors"]]
    if failed:
        # A worker that answers errors measures nothing; keep the document as it was.
        raise SystemExit(f"bench: non-200 answers from {sorted(set(failed))}; see target/bench/*/wrangler-*.log")
    ingest = {name: {kind: {f: mean(name, kind, f) for f in ("p50_ms", "p99_ms", "throughput_rps", "errors")} for kind in ("new", "duplicate")} for name in WORKERS}
    rows = {k: statistics.mean(r["rows_written"][k] for r in runs["exactly"] if r["rows_written"][k] is not None) for k in ("new", "duplicate")}
    wasm = open(os.path.join(ROOT, "edge", "build", "index_bg.wasm"), "rb").read()
    sizes = {"raw_bytes": len(wasm), "gzip_bytes": len(gzip.compress(wasm, 9))}
    print("bench: core (criterion)", flush=True)
    core = criterion()
    results = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "requests": REQUESTS, "concurrency": CONCURRENCY, "rounds": ROUNDS,
               "ingest": ingest, "rows_written": rows, "wasm": sizes, "core": core}
    json.dump(results, open(os.path.join(OUT, "results.json"), "w"), indent=1)
    write_doc(results)
    print(open(os.path.join(OUT, "results.md")).read())


def write_doc(r):
    i = r["ingest"]
    def ratio(a, b):
        return a / b if b else float("nan")
    lines = [
        f"Measured {r['date']} with `make bench` ({r['rounds']} rounds per worker, {r['requests']} requests per load at concurrency {r['concurrency']}, "
        "local workerd via wrangler dev 4.86.0, 2 cores). Ratios are against baselines measured in the same run.",
        "",
        "| worker | load | p50 ms | p99 ms | req/s | non-200 |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("floor", "javascript", "exactly"):
        for kind in ("new", "duplicate"):
            m = i[name][kind]
            lines.append(f"| {name} | {kind} events | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['throughput_rps']:.0f} | {m['errors']:.0f} |")
    e, f, j = i["exactly"]["new"], i["floor"]["new"], i["javascript"]["new"]
    core = r["core"]
    bare, full = core.get("telnyx/bare_verify_strict", {}).get("ns"), core.get("telnyx/verify_and_parse", {}).get("ns")
    lines += [
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| ingest p50, exactly / floor (new events) | {ratio(e['p50_ms'], f['p50_ms']):.2f}x | <= 1.25x |",
        f"| throughput, exactly / floor (new events) | {ratio(e['throughput_rps'], f['throughput_rps']):.2f}x | >= 0.8x |",
        f"| throughput, exactly / JavaScript (new events) | {ratio(e['throughput_rps'], j['throughput_rps']):.2f}x | >= 1.0x |",
        f"| ingest p50, exactly / JavaScript (new events) | {ratio(e['p50_ms'], j['p50_ms']):.2f}x | |",
        f"| D1 rows written per new event (ingest) | {r['rows_written']['new']:.1f} | <= 3 |",
        f"| D1 rows written per duplicate delivery | {r['rows_written']['duplicate']:.1f} | 0 |",
        f"| wasm size, raw | {r['wasm']['raw_bytes'] / 1024:.0f} KiB | <= 1024 KiB |",
        f"| wasm size, gzip -9 | {r['wasm']['gzip_bytes'] / 1024:.0f} KiB | <= 400 KiB |",
        f"| core verify+parse / bare verify_strict | {ratio(full, bare):.3f}x ({full} ns vs {bare} ns) | <= 1.2x |",
    ]
    text = "\n".join(lines) + "\n"
    open(os.path.join(OUT, "results.md"), "w").write(text)
    doc_path = os.path.join(ROOT, "docs", "benchmarks.md")
    doc = open(doc_path).read()
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    if begin in doc and end in doc:
        doc = doc.split(begin)[0] + begin + "\n" + text + end + doc.split(end)[1]
        open(doc_path, "w").write(doc)


if __name__ == "__main__":
    main()
