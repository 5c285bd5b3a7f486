#!/usr/bin/env python3
"""`make bench`: ingest latency and throughput of the product's worker against a floor worker
(the same D1 insert and queue send, no verification or parsing) and an idiomatic JavaScript
worker (WebCrypto Ed25519), all on local workerd in one run; D1 rows written per new event and
per duplicate; ingest with carrier_events pre-filled to 1k and 1M rows; end to end, inbound
messages from the carrier's POST to the customer's endpoint; wasm size; and the core's
verify+parse against bare verify_strict (criterion). Writes target/bench/results.json and the
results block of docs/benchmarks.md. BENCH_SKIP=growth,e2e leaves parts out while tuning."""

import base64, gzip, tomllib, glob, json, os, re, shutil, signal, socket, sqlite3, statistics, subprocess, sys, threading, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench")
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "2000"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SKIP = set(filter(None, os.environ.get("BENCH_SKIP", "").split(",")))
GROWTH = [int(n) for n in os.environ.get("BENCH_GROWTH", "1000,1000000").split(",")]
E2E_EVENTS = int(os.environ.get("BENCH_E2E_EVENTS", "600"))
# The bench endpoint's `max_in_flight` (unset: the product's default).
IN_FLIGHT = int(os.environ.get("BENCH_E2E_IN_FLIGHT", "0"))
# Deliveries pending for the dead neighbour's endpoint before the end-to-end burst starts.
DEAD_BACKLOG = int(os.environ.get("BENCH_DEAD_BACKLOG", "200"))
# How many times the end-to-end load sends an event that is answered 5xx, as a carrier would.
CARRIER_TRIES = 3
# Ingest with the dedupe log in 1, 2 and 4 D1 databases (docs/scaling.md).
SHARDS = [int(n) for n in os.environ.get("BENCH_SHARDS", "1,2,4").split(",")]
MIGRATIONS = os.path.join(ROOT, "migrations")
SIM = os.path.join(os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target"), "release", "sim")
ENV = dict(os.environ, WRANGLER_SEND_METRICS="false", WRANGLER_SEND_ERROR_REPORTS="false", CLOUDFLARE_CF_FETCH_ENABLED="false", NO_COLOR="1")

WORKERS = {
    "floor": os.path.join(ROOT, "bench", "floor", "worker.js"),
    # The same floor as a Rust worker built as the product is: what crossing into wasm costs.
    "wasm-floor": os.path.join(ROOT, "bench", "wasm-floor", "build", "worker", "shim.mjs"),
    # ... and with the product's core on each request (the signature check and the envelope).
    "wasm-floor+core": os.path.join(ROOT, "bench", "wasm-floor", "build-core", "worker", "shim.mjs"),
    "javascript": os.path.join(ROOT, "bench", "js", "worker.js"),
    "exactly": os.path.join(ROOT, "edge", "build", "worker", "shim.mjs"),
    "exactly+log": os.path.join(ROOT, "edge", "build", "worker", "shim.mjs"),
}
# The end-to-end floors by name: the I/O of an inbound message's path and nothing else, in
# JavaScript, and the same I/O from the Rust floor with and without the product's core (the
# signature checked at ingest, the delivery signed).
E2E_FLOORS = {"floor": os.path.join(ROOT, "bench", "floor", "e2e.js"), "wasm-floor": WORKERS["wasm-floor"], "wasm-floor+core": WORKERS["wasm-floor+core"]}
# `exactly` runs without its per-delivery log line, which the baselines do not write either;
# `exactly+log` is the default configuration with every line written, and reports D1's rows
# written through that line.
# `exactly+log` writes every line (the default samples one in ten, by event: a duplicate's
# lines would all be dropped or all kept), since D1's rows written are read from them.
VARS = {"exactly": {"LOG_WEBHOOK_REQUESTS": "false", "LOG_JOB_OUTCOMES": "false"}, "exactly+log": {"LOG_SAMPLE_EVERY": "1"}}
# The end-to-end runs write no log line per fact either (the floor writes none), unless
# BENCH_E2E_LOGS=1: then the product runs in its default configuration, three or four lines
# a fact (docs/benchmarks.md, "Reading the results").
E2E_VARS = {} if os.environ.get("BENCH_E2E_LOGS") == "1" else VARS["exactly"]
ADMIN_TOKEN = "bench-admin-token-0123456789"
# The compatibility date and flags of the project's own wrangler.toml, so every worker here runs
# as it is deployed (the flag that settles a delivery batch before its attempts end, above all).
WRANGLER = tomllib.load(open(os.path.join(ROOT, "wrangler.toml"), "rb"))
QUEUE_OVERRIDES = os.environ.get("BENCH_QUEUES", "")
COMPATIBILITY = "\n".join(line for line in open(os.path.join(ROOT, "wrangler.toml")).read().splitlines()
                           if line.startswith(("compatibility_date", "compatibility_flags")))


def sh(*args, **kw):
    return subprocess.run(args, cwd=ROOT, env=ENV, check=True, **kw)


def build_floors():
    """The Rust floor's two bundles (`bench/wasm-floor`), unless they are up to date."""
    for mode in ("wasm-floor", "wasm-floor-core"):
        sh("sh", "scripts/build-worker.sh", mode)


_GIVEN_PORTS = set()


def free_port():
    """A free loopback port for a worker or its inspector, chosen below the kernel's ephemeral
    range as the test harness does (tests/src/lib.rs): a server that binds port 0 (the customer
    endpoint, workerd's own sockets) is never given it between this choice and wrangler's bind."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    low, span = ephemeral // 2, ephemeral - ephemeral // 2
    for _ in range(1000):
        port = low + int.from_bytes(os.urandom(2), "big") % span
        if port in _GIVEN_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN_PORTS.add(port)
        return port
    raise SystemExit(f"bench: no free loopback port below the ephemeral range ({ephemeral})")


def queues():
    """The consumers of `jobs` and `deliveries` as `wrangler.toml` configures them (without their
    dead-letter queues), with `BENCH_QUEUES` overrides such as
    `exactly-jobs.max_batch_size=25,exactly-deliveries.max_batch_timeout=0` for a sweep."""
    consumers = {c["queue"]: {k: v for k, v in c.items() if k != "dead_letter_queue"}
                 for c in WRANGLER["queues"]["consumers"] if c["queue"] in ("exactly-jobs", "exactly-deliveries")}
    for item in filter(None, QUEUE_OVERRIDES.split(",")):
        key, value = item.split("=")
        queue, field = key.rsplit(".", 1)
        consumers[queue][field] = float(value) if "." in value else int(value)
    text = '\n[[queues.producers]]\nbinding = "DELIVERIES"\nqueue = "exactly-deliveries"\n'
    for consumer in consumers.values():
        text += "\n[[queues.consumers]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in consumer.items())
    return text


def config(name, public_key, consumers=False, extra_vars=None, main=None, databases=()):
    """A wrangler config per worker: one D1 database with the product's schema (and the extra
    `databases` of the dedupe log) and a jobs queue producer; no consumers unless `consumers`
    (the end-to-end run), so only ingest is measured."""
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "wrangler.toml")
    extra = ""
    if name.startswith("exactly"):
        extra = '\n[[durable_objects.bindings]]\nname = "CALL_RING"\nclass_name = "CallRing"\n\n[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["CallRing"]\n'
    if consumers:
        extra += queues()
    for n, binding in enumerate(databases):
        extra += (f'\n[[d1_databases]]\nbinding = "{binding}"\ndatabase_name = "exactly-{binding.lower()}"\n'
                  f'database_id = "00000000-0000-0000-0000-{n + 1:012}"\nmigrations_dir = "{MIGRATIONS}"\n')
    variables = "".join(f'{k} = "{v}"\n' for k, v in {**VARS.get(name, {}), **(extra_vars or {})}.items())
    with open(path, "w") as f:
        f.write(f'''name = "bench-{name.replace("+", "-")}"
main = "{main or WORKERS[name]}"
{COMPATIBILITY}

[vars]
TELNYX_PUBLIC_KEY = "{public_key}"
TELNYX_API_KEY = "bench"
TELNYX_CONNECTION_ID = "bench"
PUBLIC_BASE_URL = "http://127.0.0.1"
ADMIN_TOKEN = "{ADMIN_TOKEN}"
{variables}
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


def stock_config(name, main, extra_vars):
    """A wrangler config for `main` made from the project's own wrangler.toml, as `make dev`
    serves the product: its compatibility, assets, queues and their consumers, rate limits,
    cron and observability, with `main` in the product's place. Left out are the build command
    and the call ring's Durable Object, which a floor does not export. The console is built
    first: wrangler refuses a config whose assets directory does not exist (a fresh clone's)."""
    sh("sh", "scripts/build-console.sh")
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "wrangler.toml")
    sections, dropped = [], ("[build]", "[[durable_objects.bindings]]", "[[migrations]]")
    for block in re.split(r"\n(?=\[)", open(os.path.join(ROOT, "wrangler.toml")).read()):
        header = block.split("\n", 1)[0].strip()
        if header in dropped:
            continue
        if header == "[vars]":
            block += "".join(f'\n{k} = "{v}"' for k, v in extra_vars.items())
        sections.append(block)
    text = "\n".join(sections)
    text = re.sub(r'^main = ".*"$', f'main = "{main}"', text, count=1, flags=re.M)
    text = re.sub(r'^(directory|migrations_dir) = "(.*)"$', lambda m: f'{m.group(1)} = "{os.path.join(ROOT, m.group(2))}"', text, flags=re.M)
    open(path, "w").write(text)
    return directory, path


class Served:
    """`wrangler dev` of one config and state directory, stopped on exit."""

    def __init__(self, path, state, log_path):
        self.path, self.state, self.log_path = path, state, log_path

    def __enter__(self):
        port, self.inspector = free_port(), free_port()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(["npx", "wrangler", "dev", "--local", "--ip", "127.0.0.1", "--port", str(port), "--inspector-port", str(self.inspector),
                                      "--config", self.path, "--persist-to", self.state, "--show-interactive-dev-session=false"]
                                     + (["--log-level", os.environ["BENCH_LOG_LEVEL"]] if os.environ.get("BENCH_LOG_LEVEL") else []),
                                     cwd=ROOT, env=ENV, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"
        wait_ready(self.base)
        return self

    def __exit__(self, *_):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


class DevServed:
    """The product as `make dev` serves it (`scripts/dev.sh`: wrangler.toml, variables made from
    .dev.vars.example, the fake carrier, the cron loop, wrangler's output through its filter),
    on free ports with its own variables and state under `directory`, stopped on exit. Its
    ADMIN_TOKEN and Telnyx signing seed are read from the files `make dev` writes."""

    def __init__(self, directory, log_path):
        self.directory, self.log_path = directory, log_path

    def __enter__(self):
        port, carrier, self.inspector = free_port(), free_port(), free_port()
        state, variables = os.path.join(self.directory, "state"), os.path.join(self.directory, ".dev.vars")
        for path in (state, variables, os.path.join(self.directory, ".dev.keys")):
            subprocess.run(["rm", "-rf", path], check=True)
        self.log = open(self.log_path, "w")
        env = dict(ENV, PORT=str(port), CARRIER_PORT=str(carrier), INSPECTOR_PORT=str(self.inspector), DEV_STATE=state, DEV_VARS=variables)
        subprocess.run(["sh", "scripts/dev-vars.sh"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        if os.environ.get("BENCH_STOCK_VARS"):
            with open(variables, "a") as f:
                f.write("".join(f"{item}\n" for item in os.environ["BENCH_STOCK_VARS"].split(",")))
        self.proc = subprocess.Popen(["sh", "scripts/dev.sh"], cwd=ROOT, env=env, stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"
        wait_ready(self.base)
        self.admin_token = re.search(r"^ADMIN_TOKEN=(\S+)", open(variables).read(), re.M).group(1)
        self.seed = re.search(r"^TELNYX_PRIVATE_SEED=(\S+)", open(os.path.join(self.directory, ".dev.keys")).read(), re.M).group(1)
        return self

    __exit__ = Served.__exit__


def migrated(path, state, databases=()):
    subprocess.run(["rm", "-rf", state], check=True)
    for binding in ["DB", *databases]:
        sh("npx", "wrangler", "d1", "migrations", "apply", binding, "--local", "--config", path, "--persist-to", state, stdout=subprocess.DEVNULL)


def sharded(public_key, keys, shards, round_no):
    """Ingest of new events with the dedupe log spread evenly over `shards` D1 databases."""
    databases = [f"EVENTS_{k}" for k in range(shards - 1)]
    bindings = ["DB", *databases]
    step = 1024 // shards
    ranges = [(k * step, 1023 if k == shards - 1 else (k + 1) * step - 1) for k in range(shards)]
    shard_map = " ".join(f"{b}={lo}-{hi}" for b, (lo, hi) in zip(bindings, ranges))
    directory, path = config(f"exactly-shards-{shards}", public_key, main=WORKERS["exactly"], databases=databases,
                             extra_vars={"LOG_WEBHOOK_REQUESTS": "false", "EVENT_SHARDS": shard_map})
    state = os.path.join(directory, f"state-{round_no}")
    migrated(path, state, databases)
    with Served(path, state, os.path.join(directory, f"wrangler-{round_no}.log")) as served:
        load(served.base, keys, f"swarm-{shards}-{round_no}", 300, False)
        new = load(served.base, keys, f"shard-{shards}-{round_no}", REQUESTS, False)
    shutil.rmtree(state, ignore_errors=True)
    return {"new": new}


def rows_written(log_path):
    """D1's rows written per ingest batch, from the product's log lines, by outcome."""
    rows = {"new": [], "duplicate": []}
    for line in open(log_path, errors="replace"):
        m = re.search(r'\{.*"request":"webhook".*\}', line)
        if not m:
            continue
        entry = json.loads(m.group(0))
        kind = "new" if entry.get("outcome") == "accepted" else "duplicate" if entry.get("outcome") == "duplicate" else None
        if kind and "rows_written" in entry:
            rows[kind].append(entry["rows_written"])
    return {k: (statistics.mean(v) if v else None) for k, v in rows.items()}


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
    out = subprocess.run([SIM, "load", "--url", base, "--keys", keys, "--prefix", prefix, "--requests", str(requests),
                          "--concurrency", str(CONCURRENCY)] + (["--duplicate"] if duplicate else []),
                         cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def processed_duplicate(base, keys, path, state, prefix):
    """The event the duplicate load repeats, stored once and marked processed: a carrier's
    retries usually repeat an event that was processed already."""
    load(base, keys, prefix, 1, True)
    for _ in range(20):
        done = subprocess.run(["npx", "wrangler", "d1", "execute", "DB", "--local", "--config", path, "--persist-to", state, "--command",
                               f"UPDATE carrier_events SET processed_at = 1 WHERE carrier_event_id = '{prefix}-dup'"],
                              cwd=ROOT, env=ENV, capture_output=True)
        if done.returncode == 0:
            return
        time.sleep(0.5)
    raise SystemExit(f"bench: could not mark {prefix}-dup processed")


def run_worker(name, public_key, keys, round_no):
    directory, path = config(name, public_key)
    state = os.path.join(directory, f"state-{round_no}")
    migrated(path, state)
    log_path = os.path.join(directory, f"wrangler-{round_no}.log")
    with Served(path, state, log_path) as served:
        base = served.base
        load(base, keys, f"warm-{name}-{round_no}", 300, False)
        before = cpu_seconds(served.proc.pid).get("workerd", 0)
        new = load(base, keys, f"new-{name}-{round_no}", REQUESTS, False)
        # The runtime's CPU time per new event: ingest alone, no consumer runs here.
        new["workerd_cpu_ms"] = 1000 * (cpu_seconds(served.proc.pid).get("workerd", 0) - before) / REQUESTS
        prefix = f"dup-{name}-{round_no}"
        processed_duplicate(base, keys, path, state, prefix)
        dup = load(base, keys, prefix, REQUESTS, True)
    rows = rows_written(log_path) if name == "exactly+log" and not os.environ.get("BENCH_LOG_LEVEL") else {"new": None, "duplicate": None}
    shutil.rmtree(state, ignore_errors=True)
    return {"new": new, "duplicate": dup, "rows_written": rows}


def d1_file(state):
    files = [f for f in glob.glob(os.path.join(state, "v3", "d1", "*", "*.sqlite")) if not f.endswith("metadata.sqlite")]
    if len(files) != 1:
        raise SystemExit(f"bench: expected one D1 file under {state}, found {files}")
    return files[0]


def growth(public_key, keys, stored, round_no):
    """Ingest of new events with carrier_events holding `stored` settled rows already, written
    straight into the local D1 file: a month of one event per second, payloads of the older
    ones cleared as retention does."""
    name = "exactly+log"
    directory, path = config(name, public_key)
    template = os.path.join(directory, f"filled-{stored}")
    if not os.path.exists(template):
        migrated(path, template)
        now_ms = int(time.time() * 1000)
        db = sqlite3.connect(d1_file(template))
        db.execute("""WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                      INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, processed_at, attempts, created_at)
                      SELECT 'telnyx', 'fill-' || i, 'message.received',
                             CASE WHEN i > ?1 - 10000 THEN '{"data":{"id":"fill","event_type":"message.received"}}' END,
                             ?2 - (?1 - i) * 1000 + 500, 1, ?2 - (?1 - i) * 1000 FROM n""", (stored, now_ms))
        db.commit()
        db.close()
    state = os.path.join(directory, f"growth-{stored}-{round_no}")
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(template, state)
    log_path = os.path.join(directory, f"growth-{stored}-{round_no}.log")
    with Served(path, state, log_path) as served:
        load(served.base, keys, f"gwarm-{stored}-{round_no}", 300, False)
        new = load(served.base, keys, f"grow-{stored}-{round_no}", REQUESTS, False)
    shutil.rmtree(state, ignore_errors=True)
    return {"new": new, "rows_written": rows_written(log_path)["new"]}


class Customer(BaseHTTPRequestHandler):
    """The customer's endpoint: records when each message's webhook first arrived."""
    protocol_version = "HTTP/1.1"  # keep-alive, as the worker's fetch expects
    arrived = {}
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        at = time.time()
        m = re.search(rb'"carrier_message_id":"msg-([^"]+)"', body)
        if m:
            with Customer.lock:
                Customer.arrived.setdefault(m.group(1).decode(), at)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


class Hung:
    """An endpoint that accepts connections and never answers, as a black-holed customer URL."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(256)
        self.port = self.listener.getsockname()[1]
        self.held = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.listener.close()
        for conn in self.held:
            conn.close()


def cpu_seconds(group):
    """CPU time (user + system) spent so far by the processes of session `group`, by command
    name: `workerd` is the runtime running the worker, `node` is wrangler and its proxy."""
    tick = os.sysconf("SC_CLK_TCK")
    spent = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = open(stat).read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[3]) == group:
            spent[name] = spent.get(name, 0) + (int(fields[11]) + int(fields[12])) / tick
    return spent


def end_to_end(public_key, seed, round_no, dead=False, floor=None, profile=None, stock=False):
    """Inbound messages from the carrier's POST to the customer's endpoint, with one endpoint
    subscribed and every queue consumer running: the rate at which a burst is delivered, then
    time-to-webhook of a paced load at half that rate. With `dead`, another account's endpoint
    beside it accepts connections and never answers, with DEAD_BACKLOG deliveries pending
    before the burst starts. With `floor` (a name of E2E_FLOORS), the same load against that
    end-to-end floor, which delivers every message to the customer's endpoint. With
    `profile` (a path), the worker's isolate is CPU-profiled over the burst (scripts/profile.mjs).
    With `stock`, the product is served by `make dev`'s own script in its stock configuration
    (DevServed), its log lines on."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(seed))
    ThreadingHTTPServer.request_queue_size = 256  # bursts of deliveries; the default backlog is 5
    ThreadingHTTPServer.daemon_threads = True
    customer = ThreadingHTTPServer(("127.0.0.1", 0), Customer)
    threading.Thread(target=customer.serve_forever, daemon=True).start()
    Customer.arrived = {}
    hook = f"http://127.0.0.1:{customer.server_address[1]}/hook"
    if stock and floor:
        directory, path = stock_config(f"{floor}-stock", E2E_FLOORS[floor], {"ENDPOINT_URL": hook})
    elif stock:
        directory = os.path.join(OUT, "exactly-stock")
        os.makedirs(directory, exist_ok=True)
    elif floor:
        directory, path = config(f"{floor}-e2e", public_key, consumers=True, extra_vars={"ENDPOINT_URL": hook}, main=E2E_FLOORS[floor])
    else:
        directory, path = config("exactly-e2e", public_key, consumers=True, extra_vars={"ALLOW_PRIVATE_ENDPOINTS": "true", **E2E_VARS}, main=WORKERS["exactly"])
    state = os.path.join(directory, f"state-{round_no}{'-dead' if dead else ''}")
    if floor or not stock:
        migrated(path, state)
    if floor:
        sh("npx", "wrangler", "d1", "execute", "DB", "--local", "--config", path, "--persist-to", state, "--command",
           "INSERT INTO accounts (id, name, api_key_hash, created_at) VALUES ('acct_floor', 'floor', 'none', 0)", stdout=subprocess.DEVNULL)
    number = "+1555000" + f"{round_no:04d}"
    hung = Hung() if dead else None

    def call(base, method, route, token, body):
        req = urllib.request.Request(base + route, method=method, data=json.dumps(body).encode(),
                                     headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=30).read())

    def send(base, event_id):
        body = json.dumps({"data": {"record_type": "event", "id": event_id, "event_type": "message.received", "occurred_at": "2026-11-30T10:00:00Z",
                                    "payload": {"id": f"msg-{event_id}", "direction": "inbound", "type": "SMS", "text": "benchmark",
                                                "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": number}], "media": []}},
                           "meta": {"attempt": 1, "delivered_to": "https://example.invalid/webhooks/telnyx"}}).encode()
        # As a carrier does, a 5xx answer is sent again, signed anew (wrangler dev's proxy
        # answers one now and then by itself); the time is the first send's.
        sent = time.time()
        for tries in range(1, CARRIER_TRIES + 1):
            stamp = str(int(time.time()))
            signature = base64.b64encode(key.sign(stamp.encode() + b"|" + body)).decode()
            req = urllib.request.Request(base + "/webhooks/telnyx", data=body, headers={
                "content-type": "application/json", "telnyx-timestamp": stamp, "telnyx-signature-ed25519": signature,
                "x-event-id": event_id})
            try:
                status = urllib.request.urlopen(req, timeout=30).status
            except urllib.error.HTTPError as e:
                status = e.code
                if status < 500:
                    break
                continue
            break
        return sent, status, tries

    def wait_for(ids, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with Customer.lock:
                if all(i in Customer.arrived for i in ids):
                    return True
            time.sleep(0.05)
        return False

    log_path = os.path.join(directory, f"wrangler-{round_no}{'-dead' if dead else ''}.log")
    neighbour = None
    admin = ADMIN_TOKEN
    with (DevServed(directory, log_path) if stock and not floor else Served(path, state, log_path)) as served:
        base = served.base
        if stock and not floor:
            admin, key = served.admin_token, Ed25519PrivateKey.from_private_bytes(base64.b64decode(served.seed))
        if hung:
            other = call(base, "POST", "/admin/accounts", admin, {"name": "dead neighbour"})
            endpoint = call(base, "POST", "/v1/webhook_endpoints", other["api_key"],
                            {"url": f"http://127.0.0.1:{hung.port}/hook", "event_types": ["message.received"]})
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                list(pool.map(lambda _: call(base, "POST", f"/v1/webhook_endpoints/{endpoint['id']}/test", other["api_key"], {}),
                              range(DEAD_BACKLOG)))
            neighbour = (other["api_key"], endpoint["id"])
        if not floor:
            account = call(base, "POST", "/admin/accounts", admin, {"name": "bench"})
            call(base, "POST", "/admin/numbers", admin, {"account_id": account["id"], "phone_number": number, "ring_targets": []})
            settings = {"max_in_flight": IN_FLIGHT} if IN_FLIGHT else {}
            call(base, "POST", "/v1/webhook_endpoints", account["api_key"], {"url": hook, "event_types": ["message.received"], **settings})
        warm = [f"e2e-warm-{round_no}-{i}" for i in range(50)]
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(lambda i: send(base, i), warm))
        wait_for(warm, 120)
        # The burst: as fast as the carrier side can send; the rate is what reaches the customer.
        burst = [f"e2e-burst-{round_no}-{i}" for i in range(E2E_EVENTS)]
        started = time.time()
        recorder = None
        if profile:
            recorder = subprocess.Popen(["node", "scripts/profile.mjs", "record", str(served.inspector), profile, os.environ.get("PROFILE_INTERVAL_US", "200")],
                                        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if recorder.stdout.readline().strip() != "profiling":
                raise SystemExit("bench: the inspector did not start profiling")
        cpu_before = cpu_seconds(served.proc.pid)
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            sent = dict(zip(burst, pool.map(lambda i: send(base, i), burst)))
        complete = wait_for(burst, 300)
        cpu_after = cpu_seconds(served.proc.pid)
        if recorder:
            recorder.stdin.close()
            recorder.wait(timeout=120)
        # The runtime's CPU time per delivered fact over the burst (its queue consumers' work on
        # warm-up messages is done by then).
        workerd_ms = 1000 * (cpu_after.get("workerd", 0) - cpu_before.get("workerd", 0)) / len(burst)
        with Customer.lock:
            last = max(Customer.arrived.get(i, time.time()) for i in burst)
            delivered = sum(1 for i in burst if i in Customer.arrived)
        rate = delivered / (last - started)
        # Paced at half that rate: time from the carrier's POST to the customer's delivery.
        paced = [f"e2e-paced-{round_no}-{i}" for i in range(max(100, E2E_EVENTS // 2))]
        interval = 2.0 / rate
        sent_at = {}
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            futures = []
            t0 = time.time()
            for n, event_id in enumerate(paced):
                delay = t0 + n * interval - time.time()
                if delay > 0:
                    time.sleep(delay)
                futures.append((event_id, pool.submit(send, base, event_id)))
            for event_id, future in futures:
                sent_at[event_id] = future.result()[0]
        paced_complete = wait_for(paced, 300)
        with Customer.lock:
            latencies = sorted(Customer.arrived[i] - sent_at[i] for i in paced if i in Customer.arrived)
        if neighbour:
            req = urllib.request.Request(f"{base}/v1/webhook_endpoints/{neighbour[1]}", headers={"authorization": f"Bearer {neighbour[0]}"})
            shown = json.loads(urllib.request.urlopen(req, timeout=30).read())
            neighbour = {"circuit": shown.get("circuit"), "held_count": shown.get("held_count"), "connections_held": len(hung.held)}
    customer.shutdown()
    if hung:
        hung.close()
    shutil.rmtree(state, ignore_errors=True)
    errors = sum(1 for s in sent.values() if s[1] != 200)
    resent = sum(s[2] - 1 for s in sent.values())
    return {"facts_per_s": rate, "delivered": delivered, "sent": len(burst), "complete": complete and paced_complete, "errors": errors, "resent": resent,
            "paced_rate": 1 / interval, "ttw_p50_s": statistics.median(latencies) if latencies else None,
            "ttw_p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else None,
            "neighbour": neighbour, "workerd_cpu_ms_per_fact": workerd_ms}


CORE_RUNS = int(os.environ.get("BENCH_CORE_RUNS", "5"))
CORE_BARE, CORE_FULL = "telnyx/bare_verify_strict", "telnyx/verify_and_parse"


def criterion():
    """The core's verify+parse against a bare verify_strict (criterion), `CORE_RUNS` times back
    to back: the two benchmarks run one after the other within a run, and this machine's speed
    moves between runs (one run alone gave anything from 0.78x to 1.26x), so each run's ratio is
    taken within it, then the median of the runs with their range."""
    runs = []
    for _ in range(CORE_RUNS):
        out = subprocess.run(["cargo", "bench", "-q", "-p", "exactly-bench", "--bench", "verify", "--", "--output-format", "bencher"],
                             cwd=ROOT, env=ENV, check=True, capture_output=True, text=True).stdout
        results = {}
        for line in out.splitlines():
            m = re.match(r"test (\S+)\s+\.\.\. bench:\s+([\d,]+) ns/iter \(\+/- ([\d,]+)\)", line)
            if m:
                results[m.group(1)] = {"ns": int(m.group(2).replace(",", "")), "spread_ns": int(m.group(3).replace(",", ""))}
        runs.append(results)
    both = [r for r in runs if CORE_BARE in r and CORE_FULL in r]
    return {"runs": runs,
            "ratio": spread([r[CORE_FULL]["ns"] / r[CORE_BARE]["ns"] for r in both]),
            "bare_ns": spread([r[CORE_BARE]["ns"] for r in both]),
            "full_ns": spread([r[CORE_FULL]["ns"] for r in both])}


def spread(values):
    """The median of the rounds, with their range."""
    values = [v for v in values if v is not None]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def main():
    os.makedirs(OUT, exist_ok=True)
    sh("sh", "scripts/setup.sh")
    sh("sh", "scripts/build-worker.sh")
    build_floors()
    sh("cargo", "build", "--release", "-q", "-p", "sim")
    keygen = subprocess.run([SIM, "keygen"], check=True, capture_output=True, text=True).stdout
    keys = os.path.join(OUT, "keys")
    open(keys, "w").write(keygen)
    public_key = re.search(r"TELNYX_PUBLIC_KEY=(\S+)", keygen).group(1)
    seed = re.search(r"TELNYX_PRIVATE_SEED=(\S+)", keygen).group(1)

    # Pre-filled databases are made once per run, from this run's migrations.
    for template in glob.glob(os.path.join(OUT, "*", "filled-*")):
        shutil.rmtree(template, ignore_errors=True)
    only = os.environ.get("BENCH_ONLY")
    if only:
        # A quick look at one part while tuning; the document is left alone.
        for round_no in range(ROUNDS):
            if only == "stock":
                if "floor" not in SKIP:
                    print(json.dumps({"floor": end_to_end(public_key, seed, round_no, floor="floor", stock=True)}), flush=True)
                print(json.dumps({"stock": end_to_end(public_key, seed, round_no, stock=True)}), flush=True)
            elif only == "e2e":
                for name in E2E_FLOORS:
                    if name not in SKIP:
                        print(json.dumps({name: end_to_end(public_key, seed, round_no, floor=name)}), flush=True)
                print(json.dumps({"exactly": end_to_end(public_key, seed, round_no)}), flush=True)
                if "dead" not in SKIP:
                    print(json.dumps({"dead": end_to_end(public_key, seed, round_no, dead=True)}), flush=True)
            elif only == "sweep":
                # Queue settings: the same end-to-end run per `BENCH_SWEEP` entry (`;`-separated
                # `BENCH_QUEUES` values; an empty entry is wrangler.toml's own settings).
                global QUEUE_OVERRIDES
                for setting in os.environ.get("BENCH_SWEEP", "").split(";"):
                    QUEUE_OVERRIDES = setting
                    r = end_to_end(public_key, seed, round_no)
                    print(json.dumps({"queues": setting or "wrangler.toml", **{k: r[k] for k in ("facts_per_s", "ttw_p50_s", "ttw_p99_s", "workerd_cpu_ms_per_fact", "complete")}}), flush=True)
            elif only == "shards":
                print(json.dumps({n: sharded(public_key, keys, n, round_no) for n in SHARDS}), flush=True)
            elif only == "growth":
                print(json.dumps({n: growth(public_key, keys, n, round_no) for n in GROWTH}), flush=True)
            elif only == "core":
                print(json.dumps(criterion()), flush=True)
            else:
                print(json.dumps(run_worker(only, public_key, keys, round_no)), flush=True)
        return
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()[0]
    runs = {name: [] for name in WORKERS}
    grown = {n: [] for n in GROWTH}
    e2e, e2e_dead = [], []
    # The product as `make dev` serves it, and the end-to-end floor served the same way.
    e2e_stock, e2e_floor_stock = [], []
    e2e_floors = {name: [] for name in E2E_FLOORS}
    spread_over = {n: [] for n in SHARDS}
    for round_no in range(ROUNDS):
        for name in WORKERS:
            print(f"bench: {name}, round {round_no + 1} of {ROUNDS}", flush=True)
            runs[name].append(run_worker(name, public_key, keys, round_no))
        if "growth" not in SKIP:
            for n in GROWTH:
                print(f"bench: growth, {n} stored events, round {round_no + 1} of {ROUNDS}", flush=True)
                grown[n].append(growth(public_key, keys, n, round_no))
        if "shards" not in SKIP:
            for n in SHARDS:
                print(f"bench: dedupe log in {n} databases, round {round_no + 1} of {ROUNDS}", flush=True)
                spread_over[n].append(sharded(public_key, keys, n, round_no))
        if "e2e" not in SKIP:
            for name, runs_of in e2e_floors.items():
                print(f"bench: end-to-end {name}, round {round_no + 1} of {ROUNDS}", flush=True)
                runs_of.append(end_to_end(public_key, seed, round_no, floor=name))
                print(json.dumps(runs_of[-1]), flush=True)
            print(f"bench: end to end, round {round_no + 1} of {ROUNDS}", flush=True)
            e2e.append(end_to_end(public_key, seed, round_no))
            print(json.dumps(e2e[-1]), flush=True)
            print(f"bench: end to end beside a dead endpoint, round {round_no + 1} of {ROUNDS}", flush=True)
            e2e_dead.append(end_to_end(public_key, seed, round_no, dead=True))
            print(json.dumps(e2e_dead[-1]), flush=True)
        if "stock" not in SKIP:
            print(f"bench: end-to-end floor as make dev serves, round {round_no + 1} of {ROUNDS}", flush=True)
            e2e_floor_stock.append(end_to_end(public_key, seed, round_no, floor="floor", stock=True))
            print(json.dumps(e2e_floor_stock[-1]), flush=True)
            print(f"bench: end to end through make dev, round {round_no + 1} of {ROUNDS}", flush=True)
            e2e_stock.append(end_to_end(public_key, seed, round_no, stock=True))
            print(json.dumps(e2e_stock[-1]), flush=True)

    failed = [(name, kind) for name in WORKERS for kind in ("new", "duplicate") for r in runs[name] if r[kind]["errors"]]
    failed += [("growth", n) for n in GROWTH for r in grown[n] if r["new"]["errors"]]
    e2e_floor = e2e_floors["floor"]
    failed += [("e2e", r["errors"]) for r in e2e + e2e_dead + e2e_stock + e2e_floor_stock + sum(e2e_floors.values(), [])
               if r["errors"] or not r["complete"]]
    failed += [("shards", n) for n in SHARDS for r in spread_over[n] if r["new"]["errors"]]
    if failed:
        # A worker that answers errors measures nothing; keep the document as it was.
        raise SystemExit(f"bench: non-200 answers or lost deliveries from {sorted(set(map(str, failed)))}; see target/bench/*/wrangler-*.log")
    ingest = {name: {kind: {f: spread([r[kind].get(f) for r in runs[name]]) for f in ("p50_ms", "p99_ms", "throughput_rps", "errors", "workerd_cpu_ms")}
                     for kind in ("new", "duplicate")} for name in WORKERS}
    ratios = {}
    for key, (a, b, kind, field) in {
        "throughput_vs_js_new": ("exactly", "javascript", "new", "throughput_rps"),
        "throughput_vs_js_dup": ("exactly", "javascript", "duplicate", "throughput_rps"),
        "throughput_vs_floor_new": ("exactly", "floor", "new", "throughput_rps"),
        "p50_vs_floor_new": ("exactly", "floor", "new", "p50_ms"),
        "p50_vs_js_new": ("exactly", "javascript", "new", "p50_ms"),
        "log_throughput_vs_js_new": ("exactly+log", "javascript", "new", "throughput_rps"),
        "log_throughput_vs_js_dup": ("exactly+log", "javascript", "duplicate", "throughput_rps"),
        "wasm_floor_vs_floor_new": ("wasm-floor", "floor", "new", "throughput_rps"),
        "wasm_floor_vs_floor_dup": ("wasm-floor", "floor", "duplicate", "throughput_rps"),
        "wasm_floor_vs_js_new": ("wasm-floor", "javascript", "new", "throughput_rps"),
        "wasm_floor_vs_js_dup": ("wasm-floor", "javascript", "duplicate", "throughput_rps"),
        "throughput_vs_wasm_floor_new": ("exactly", "wasm-floor", "new", "throughput_rps"),
        "throughput_vs_wasm_floor_dup": ("exactly", "wasm-floor", "duplicate", "throughput_rps"),
        "p50_vs_wasm_floor_new": ("exactly", "wasm-floor", "new", "p50_ms"),
        "core_floor_vs_floor_new": ("wasm-floor+core", "floor", "new", "throughput_rps"),
        "core_floor_vs_floor_dup": ("wasm-floor+core", "floor", "duplicate", "throughput_rps"),
        "core_floor_vs_wasm_floor_new": ("wasm-floor+core", "wasm-floor", "new", "throughput_rps"),
        "core_floor_vs_wasm_floor_dup": ("wasm-floor+core", "wasm-floor", "duplicate", "throughput_rps"),
        "core_floor_vs_js_new": ("wasm-floor+core", "javascript", "new", "throughput_rps"),
        "core_floor_vs_js_dup": ("wasm-floor+core", "javascript", "duplicate", "throughput_rps"),
        "throughput_vs_core_floor_new": ("exactly", "wasm-floor+core", "new", "throughput_rps"),
        "throughput_vs_core_floor_dup": ("exactly", "wasm-floor+core", "duplicate", "throughput_rps"),
    }.items():
        # Per round (the workers of one round ran back to back), then the median of the rounds.
        ratios[key] = spread([x[kind][field] / y[kind][field] for x, y in zip(runs[a], runs[b])])
    rows = {k: statistics.mean(r["rows_written"][k] for r in runs["exactly+log"] if r["rows_written"][k] is not None) for k in ("new", "duplicate")}
    growth_result = {str(n): {"p50_ms": spread([r["new"]["p50_ms"] for r in grown[n]]), "throughput_rps": spread([r["new"]["throughput_rps"] for r in grown[n]]),
                              "rows_written": spread([r["rows_written"] for r in grown[n]])} for n in GROWTH if grown[n]}
    if len(GROWTH) == 2 and all(grown[n] for n in GROWTH):
        ratios["p50_growth"] = spread([b["new"]["p50_ms"] / a["new"]["p50_ms"] for a, b in zip(grown[GROWTH[0]], grown[GROWTH[1]])])
    shards_result = {str(n): {"p50_ms": spread([r["new"]["p50_ms"] for r in spread_over[n]]),
                              "throughput_rps": spread([r["new"]["throughput_rps"] for r in spread_over[n]])} for n in SHARDS if spread_over[n]}
    for n in SHARDS[1:]:
        if spread_over[n] and spread_over[SHARDS[0]]:
            ratios[f"shards_{n}_vs_{SHARDS[0]}"] = spread([b["new"]["throughput_rps"] / a["new"]["throughput_rps"]
                                                          for a, b in zip(spread_over[SHARDS[0]], spread_over[n])])
    e2e_result = None
    if e2e:
        e2e_result = {f: spread([r[f] for r in e2e]) for f in ("facts_per_s", "paced_rate", "ttw_p50_s", "ttw_p99_s", "workerd_cpu_ms_per_fact")}
        ratios["e2e_vs_floor"] = spread([r["facts_per_s"] / f["new"]["throughput_rps"] for r, f in zip(e2e, runs["floor"])])
    e2e_floor_result = None
    if e2e_floor:
        e2e_floor_result = {f: spread([r[f] for r in e2e_floor]) for f in ("facts_per_s", "paced_rate", "ttw_p50_s", "ttw_p99_s", "workerd_cpu_ms_per_fact")}
        ratios["e2e_vs_e2e_floor"] = spread([r["facts_per_s"] / f["facts_per_s"] for r, f in zip(e2e, e2e_floor)])
        ratios["e2e_floor_vs_floor"] = spread([r["facts_per_s"] / f["new"]["throughput_rps"] for r, f in zip(e2e_floor, runs["floor"])])
    # The Rust end-to-end floors against the JavaScript one, and the product against them.
    e2e_wasm_result = {}
    for name in ("wasm-floor", "wasm-floor+core"):
        if e2e_floors[name] and e2e_floor:
            e2e_wasm_result[name] = {f: spread([r[f] for r in e2e_floors[name]]) for f in ("facts_per_s", "workerd_cpu_ms_per_fact")}
            ratios[f"e2e_{name}_vs_e2e_floor"] = spread([r["facts_per_s"] / f["facts_per_s"] for r, f in zip(e2e_floors[name], e2e_floor)])
            if e2e:
                ratios[f"e2e_vs_e2e_{name}"] = spread([r["facts_per_s"] / f["facts_per_s"] for r, f in zip(e2e, e2e_floors[name])])
    e2e_dead_result = None
    if e2e_dead:
        e2e_dead_result = {f: spread([r[f] for r in e2e_dead]) for f in ("facts_per_s", "paced_rate", "ttw_p50_s", "ttw_p99_s", "workerd_cpu_ms_per_fact")}
        e2e_dead_result["neighbour"] = [r["neighbour"] for r in e2e_dead]
        ratios["e2e_dead_vs_clean"] = spread([d["facts_per_s"] / c["facts_per_s"] for c, d in zip(e2e, e2e_dead)])
    e2e_stock_result = e2e_floor_stock_result = None
    if e2e_stock and e2e_floor_stock:
        e2e_stock_result, e2e_floor_stock_result = ({f: spread([r[f] for r in runs_of]) for f in ("facts_per_s", "paced_rate", "ttw_p50_s", "ttw_p99_s", "workerd_cpu_ms_per_fact")}
                                                    for runs_of in (e2e_stock, e2e_floor_stock))
        ratios["e2e_stock_vs_floor_stock"] = spread([r["facts_per_s"] / f["facts_per_s"] for r, f in zip(e2e_stock, e2e_floor_stock)])
        ratios["e2e_stock_cpu_vs_floor_stock"] = spread([r["workerd_cpu_ms_per_fact"] / f["workerd_cpu_ms_per_fact"] for r, f in zip(e2e_stock, e2e_floor_stock)])
        if e2e:
            ratios["e2e_stock_vs_tuned"] = spread([r["facts_per_s"] / t["facts_per_s"] for r, t in zip(e2e_stock, e2e)])
    wasm = open(os.path.join(ROOT, "edge", "build", "index_bg.wasm"), "rb").read()
    sizes = {"raw_bytes": len(wasm), "gzip_bytes": len(gzip.compress(wasm, 9))}
    for key, directory in (("floor", "build"), ("floor_core", "build-core")):
        wasm = open(os.path.join(ROOT, "bench", "wasm-floor", directory, "index_bg.wasm"), "rb").read()
        sizes[f"{key}_raw_bytes"], sizes[f"{key}_gzip_bytes"] = len(wasm), len(gzip.compress(wasm, 9))
    print("bench: core (criterion)", flush=True)
    core = criterion()
    results = {"date": started.strftime("%Y-%m-%d"), "requests": REQUESTS, "concurrency": CONCURRENCY, "rounds": ROUNDS,
               "minutes": (datetime.now(timezone.utc) - started).total_seconds() / 60, "load_average": [load_before, os.getloadavg()[0]],
               "ingest": ingest, "ratios": ratios, "rows_written": rows, "growth": growth_result, "shards": shards_result, "e2e": e2e_result, "e2e_dead": e2e_dead_result, "e2e_floor": e2e_floor_result, "e2e_stock": e2e_stock_result, "e2e_floor_stock": e2e_floor_stock_result, "e2e_wasm_floors": e2e_wasm_result, "queues": queues(), "wasm": sizes, "core": core}
    json.dump(results, open(os.path.join(OUT, "results.json"), "w"), indent=1)
    write_doc(results)
    print(open(os.path.join(OUT, "results.md")).read())


def write_doc(r):
    i = r["ingest"]

    def fmt(m, digits=2, unit=""):
        if m is None:
            return "n/a"
        return f"{m['median']:.{digits}f}{unit} ({m['min']:.{digits}f}{unit} to {m['max']:.{digits}f}{unit})"

    lines = [
        f"Measured {r['date']} with `make bench` ({r['rounds']} rounds, {r['requests']} requests per load at concurrency {r['concurrency']}, "
        f"local workerd via wrangler dev 4.86.0, 2 cores; {r['minutes']:.0f} minutes, load average {r['load_average'][0]:.1f} before and "
        f"{r['load_average'][1]:.1f} after). Each figure is the median of the rounds with their range; each ratio is taken within a round "
        "(workers measured back to back), then the median.",
        "",
        "| worker | load | p50 ms | p99 ms | req/s |",
        "|---|---|---|---|---|",
    ]
    for name in WORKERS:
        for kind in ("new", "duplicate"):
            m = i[name][kind]
            lines.append(f"| {name} | {kind} events | {fmt(m['p50_ms'])} | {fmt(m['p99_ms'])} | {fmt(m['throughput_rps'], 0)} |")
    g, e, x = r["growth"] or {}, r["e2e"], r["ratios"]
    if g:
        lines += ["", "| carrier_events stored | ingest p50 ms (new) | req/s | D1 rows written per new event |", "|---|---|---|---|"]
        for n, m in g.items():
            lines.append(f"| {int(n):,} | {fmt(m['p50_ms'])} | {fmt(m['throughput_rps'], 0)} | {fmt(m['rows_written'], 1)} |")
    sh_ = r.get("shards") or {}
    if sh_:
        lines += ["", "| dedupe log databases | ingest p50 ms (new) | req/s | req/s / one database |", "|---|---|---|---|"]
        for n, m in sh_.items():
            ratio = x.get(f"shards_{n}_vs_{SHARDS[0]}")
            lines.append(f"| {n} | {fmt(m['p50_ms'])} | {fmt(m['throughput_rps'], 0)} | {fmt(ratio, 2, 'x') if ratio else '1x'} |")
    if e:
        lines += ["", f"End to end (inbound message, one subscribed endpoint, every consumer running): a burst delivered at {fmt(e['facts_per_s'], 1)} facts/s; "
                  f"paced at {fmt(e['paced_rate'], 1)}/s, time-to-webhook p50 {fmt(e['ttw_p50_s'], 2, ' s')}, p99 {fmt(e['ttw_p99_s'], 2, ' s')}; "
                  f"workerd's CPU time per fact over the burst {fmt(e['workerd_cpu_ms_per_fact'], 1, ' ms')}."]
    f_ = r.get("e2e_floor")
    if f_:
        lines += ["", f"The end-to-end floor (`bench/floor/e2e.js`: the same I/O per message with no verification, parsing, rules or signing), "
                  f"the same load in the same round: a burst delivered at {fmt(f_['facts_per_s'], 1)} facts/s; paced at {fmt(f_['paced_rate'], 1)}/s, "
                  f"time-to-webhook p50 {fmt(f_['ttw_p50_s'], 2, ' s')}, p99 {fmt(f_['ttw_p99_s'], 2, ' s')}; "
                  f"workerd's CPU time per fact over the burst {fmt(f_['workerd_cpu_ms_per_fact'], 1, ' ms')}."]
    if e and f_:
        cpu = {name: (i[name]["new"].get("workerd_cpu_ms") or {}).get("median") for name in ("floor", "exactly")}
        whole = {"floor": f_["workerd_cpu_ms_per_fact"]["median"], "exactly": e["workerd_cpu_ms_per_fact"]["median"]}
        rest = {k: f"{whole[k] - cpu[k]:.1f} ms" if cpu[k] is not None else "n/a" for k in whole}
        lines += ["", "| workerd's CPU time per fact (median of the rounds) | floor | exactly |", "|---|---|---|",
                  f"| ingest alone (new events, no consumers) | {fmt(i['floor']['new'].get('workerd_cpu_ms'), 1, ' ms')} | "
                  f"{fmt(i['exactly']['new'].get('workerd_cpu_ms'), 1, ' ms')} |",
                  f"| end to end (the burst) | {fmt(f_['workerd_cpu_ms_per_fact'], 1, ' ms')} | {fmt(e['workerd_cpu_ms_per_fact'], 1, ' ms')} |",
                  f"| processing and delivery (end to end less ingest) | {rest['floor']} | {rest['exactly']} |"]
    w_ = r.get("e2e_wasm_floors") or {}
    if w_:
        lines += ["", "The same load in the same round against the Rust floor's end to end (`bench/wasm-floor`: the end-to-end floor's I/O from wasm), "
                  + "; ".join(f"{name}: a burst delivered at {fmt(m['facts_per_s'], 1)} facts/s, workerd's CPU time per fact {fmt(m['workerd_cpu_ms_per_fact'], 1, ' ms')}"
                              for name, m in w_.items()) + "."]
    cpu_of = {name: i[name]["new"].get("workerd_cpu_ms") for name in ("floor", "wasm-floor", "wasm-floor+core", "javascript", "exactly")}
    if all(cpu_of.values()):
        lines += ["", "Ingest alone, workerd's CPU time per new event: " + ", ".join(f"{name} {fmt(m, 2, ' ms')}" for name, m in cpu_of.items()) + "."]
    d = r.get("e2e_dead")
    if d:
        states = ", ".join(f"circuit {n['circuit']}, {n['held_count']} held" for n in d["neighbour"] if n)
        lines += ["", f"The same beside a dead endpoint (another account's, which accepts connections and never answers, with {DEAD_BACKLOG} "
                  f"deliveries pending before the burst): a burst delivered at {fmt(d['facts_per_s'], 1)} facts/s; paced at "
                  f"{fmt(d['paced_rate'], 1)}/s, time-to-webhook p50 {fmt(d['ttw_p50_s'], 2, ' s')}, p99 {fmt(d['ttw_p99_s'], 2, ' s')}. "
                  f"The dead endpoint at the end of each round: {states}."]
    st, fs = r.get("e2e_stock"), r.get("e2e_floor_stock")
    if st and fs:
        lines += ["", "As a user runs it: the same load against the product served by `make dev`'s own script in its stock configuration "
                  "(wrangler.toml, variables from .dev.vars.example: log lines sampled one in ten, the console's assets, the fake carrier and the cron), "
                  f"a burst delivered at {fmt(st['facts_per_s'], 1)} facts/s; paced at {fmt(st['paced_rate'], 1)}/s, time-to-webhook p50 "
                  f"{fmt(st['ttw_p50_s'], 2, ' s')}, p99 {fmt(st['ttw_p99_s'], 2, ' s')}; workerd's CPU time per fact {fmt(st['workerd_cpu_ms_per_fact'], 1, ' ms')}. "
                  "The end-to-end floor served the same way (wrangler.toml with the floor as `main`): "
                  f"a burst delivered at {fmt(fs['facts_per_s'], 1)} facts/s; time-to-webhook p99 {fmt(fs['ttw_p99_s'], 2, ' s')}; "
                  f"workerd's CPU time per fact {fmt(fs['workerd_cpu_ms_per_fact'], 1, ' ms')}."]
    core = r["core"]
    core_ns = f"{core['full_ns']['median']:.0f} ns vs {core['bare_ns']['median']:.0f} ns" if core["ratio"] else "n/a"
    lines += [
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| ingest throughput, exactly / JavaScript, new events | {fmt(x['throughput_vs_js_new'], 2, 'x')} | >= 1.00x |",
        f"| ingest throughput, exactly / JavaScript, duplicates | {fmt(x['throughput_vs_js_dup'], 2, 'x')} | >= 1.00x |",
        f"| ingest throughput, exactly / floor, new events | {fmt(x['throughput_vs_floor_new'], 2, 'x')} | >= 0.95x |",
        f"| ingest p50, exactly / floor, new events | {fmt(x['p50_vs_floor_new'], 2, 'x')} | <= 1.10x |",
        f"| (the wasm floor: a Rust worker doing the floor's I/O) ingest throughput, wasm floor / floor, new / duplicates | {fmt(x['wasm_floor_vs_floor_new'], 2, 'x')} / {fmt(x['wasm_floor_vs_floor_dup'], 2, 'x')} | |",
        f"| (the wasm floor) ingest throughput, wasm floor / JavaScript, new / duplicates | {fmt(x['wasm_floor_vs_js_new'], 2, 'x')} / {fmt(x['wasm_floor_vs_js_dup'], 2, 'x')} | |",
        f"| (the wasm floor with the product's core) ingest throughput, wasm floor+core / floor, new / duplicates | {fmt(x.get('core_floor_vs_floor_new'), 2, 'x')} / {fmt(x.get('core_floor_vs_floor_dup'), 2, 'x')} | |",
        f"| (the wasm floor with the product's core) ingest throughput, wasm floor+core / wasm floor, new / duplicates | {fmt(x['core_floor_vs_wasm_floor_new'], 2, 'x')} / {fmt(x['core_floor_vs_wasm_floor_dup'], 2, 'x')} | |",
        f"| (the wasm floor with the product's core) ingest throughput, wasm floor+core / JavaScript, new / duplicates | {fmt(x['core_floor_vs_js_new'], 2, 'x')} / {fmt(x['core_floor_vs_js_dup'], 2, 'x')} | |",
        f"| ingest throughput, exactly / wasm floor+core, new / duplicates | {fmt(x['throughput_vs_core_floor_new'], 2, 'x')} / {fmt(x['throughput_vs_core_floor_dup'], 2, 'x')} | |",
        f"| ingest throughput, exactly / wasm floor, new / duplicates; p50 new | {fmt(x['throughput_vs_wasm_floor_new'], 2, 'x')} / {fmt(x['throughput_vs_wasm_floor_dup'], 2, 'x')}; {fmt(x['p50_vs_wasm_floor_new'], 2, 'x')} | |",
        f"| (with the log line) ingest throughput, exactly+log / JavaScript, new / duplicates | {fmt(x['log_throughput_vs_js_new'], 2, 'x')} / {fmt(x['log_throughput_vs_js_dup'], 2, 'x')} | |",
        f"| end-to-end facts/s / floor's ingest rate | {fmt(x.get('e2e_vs_floor'), 2, 'x')} | >= 0.50x |",
        f"| end-to-end facts/s / end-to-end floor | {fmt(x.get('e2e_vs_e2e_floor'), 2, 'x')} | >= 0.80x |",
        f"| (end-to-end floor / floor's ingest rate) | {fmt(x.get('e2e_floor_vs_floor'), 2, 'x')} | |",
        f"| (the Rust floor's end to end / the end-to-end floor: without / with the product's core) | {fmt(x.get('e2e_wasm-floor_vs_e2e_floor'), 2, 'x')} / {fmt(x.get('e2e_wasm-floor+core_vs_e2e_floor'), 2, 'x')} | |",
        f"| end-to-end facts/s / the Rust floor's end to end: without / with the product's core | {fmt(x.get('e2e_vs_e2e_wasm-floor'), 2, 'x')} / {fmt(x.get('e2e_vs_e2e_wasm-floor+core'), 2, 'x')} | |",
        f"| as make dev serves it: end-to-end facts/s / end-to-end floor served the same way | {fmt(x.get('e2e_stock_vs_floor_stock'), 2, 'x')} | >= 1.00x |",
        f"| as make dev serves it: workerd's CPU per fact / the floor's served the same way | {fmt(x.get('e2e_stock_cpu_vs_floor_stock'), 2, 'x')} | <= 1.20x |",
        f"| as make dev serves it: time-to-webhook p99 at half its sustained rate | {fmt(st['ttw_p99_s'] if st else None, 2, ' s')} | <= 0.1 s |",
        f"| (as make dev serves it / tuned: logs off, no assets or cron) end-to-end facts/s | {fmt(x.get('e2e_stock_vs_tuned'), 2, 'x')} | |",
        f"| time-to-webhook p99 at half the sustained end-to-end rate | {fmt(e['ttw_p99_s'] if e else None, 2, ' s')} | <= 0.6 s |",
        f"| end-to-end facts/s beside a dead endpoint / without it | {fmt(x.get('e2e_dead_vs_clean'), 2, 'x')} | >= 0.80x |",
        f"| time-to-webhook p99 beside a dead endpoint | {fmt(d['ttw_p99_s'] if d else None, 2, ' s')} | <= 2 s |",
        f"| ingest p50 at {GROWTH[-1]:,} stored events / at {GROWTH[0]:,} | {fmt(x.get('p50_growth'), 2, 'x')} | <= 1.10x |",
        f"| D1 rows written: new event / duplicate | {r['rows_written']['new']:.1f} / {r['rows_written']['duplicate']:.1f} | <= 3 / 0 |",
        f"| wasm bundle raw / gzip -9 | {r['wasm']['raw_bytes'] / 1024:.0f} KiB / {r['wasm']['gzip_bytes'] / 1024:.0f} KiB | <= 1024 KiB / <= 400 KiB |",
        f"| (the wasm floor's bundle raw / gzip -9; with the product's core) | {r['wasm']['floor_raw_bytes'] / 1024:.0f} KiB / {r['wasm']['floor_gzip_bytes'] / 1024:.0f} KiB; "
        f"{r['wasm']['floor_core_raw_bytes'] / 1024:.0f} KiB / {r['wasm']['floor_core_gzip_bytes'] / 1024:.0f} KiB | |",
        f"| core verify+parse / bare verify_strict (native, the median of {len(core['runs'])} runs' ratios) | {fmt(core['ratio'], 3, 'x')}; {core_ns} | <= 1.2x |",
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
