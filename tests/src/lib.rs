//! The end-to-end harness: the real worker in `wrangler dev` (workerd with local D1, Queues and
//! Durable Objects), started once per test binary on a free port with its own persistence
//! directory, and stopped at the end.
//!
//! Tests talk to it over HTTP with real signatures, and count rows through
//! `wrangler d1 execute` against the same local database.

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sim::api::{dropped_by_dev_proxy, keyed_again, sent_again, unanswered, writes};
use sim::carrier::{FakeCarrier, WebhookTarget};
use sim::customer::{CustomerEndpoint, Received};
use sim::telnyx::Signer;

/// The admin token the test worker is configured with.
pub const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789";
/// The Twilio auth token the test worker is configured with.
pub const TWILIO_TOKEN: &str = "e2e-twilio-token";
/// The Plivo auth token the test worker is configured with.
pub const PLIVO_TOKEN: &str = "e2e-plivo-token";
/// The key the test worker signs media links with (`MEDIA_SIGNING_SECRET`).
pub const MEDIA_SECRET: &str = "e2e-media-signing-secret-0123456789abcdef";

/// The answer to one HTTP request (status 0 when no HTTP answer came back).
pub use sim::api::Answer;

/// An account made through the admin API, with its API key and one number.
pub struct Customer {
    /// The account's id.
    pub account: String,
    /// Its API key.
    pub key: String,
    /// Its number.
    pub number: String,
}

/// A running worker.
pub struct Worker {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The run's own directory: persistence, env file and logs.
    pub dir: PathBuf,
    /// Signs Telnyx webhooks with the key the worker was configured with.
    pub telnyx: Signer,
    /// The fake carrier REST API the worker calls.
    pub carrier: FakeCarrier,
    /// A customer webhook endpoint.
    pub customer: CustomerEndpoint,
    /// Variables set for this worker beyond the defaults.
    overrides: Vec<(String, String)>,
    agent: ureq::Agent,
    /// Where in the log the running worker's lines start, and the cron ticks it answered, by the
    /// trigger each was fired with: [`Worker::cron`] waits for those ticks and their parts.
    ticks: std::sync::Mutex<(usize, Vec<String>)>,
}

/// Where the test worker's operational signals go, on the customer endpoint server.
pub const OPERATOR_PATH: &str = "/operator";
/// The secret that signs them.
pub const OPERATOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The customer-webhook retry schedule the test worker uses (seconds before attempts 1..8).
pub const TEST_WEBHOOK_SCHEDULE: &str = "0,1,1,1,1,1,1,1";

/// How long the test worker waits for a customer endpoint's answer (`E2E_ATTEMPT_TIMEOUT_SECS`;
/// a deployed worker waits 15 s): tests of a stalled endpoint read it rather than wait 15 s.
/// Long enough that the loaded machine of a whole `make test` seldom makes a healthy endpoint
/// miss it (seen at 5 s); a test that counts requests checks them against recorded attempts.
pub const TEST_ATTEMPT_TIMEOUT_SECS: u64 = 10;

/// How long the attempts beside one of the test worker's invocations may run from their start
/// (`E2E_BESIDE_SECS`; a deployed worker's run 25 s). Production's keeps 10 s above its attempt
/// timeout, and so does this, so a chain goes on for the same 7 s; the 10 s it leaves of the
/// runtime's 30 are for the records of attempts cut at its end, which a loaded machine's local D1
/// can take seconds to write (at 25 s, a clean clone's run saw them end 27 s after their ack).
pub const TEST_BESIDE_SECS: u64 = 20;

/// How long the test worker waits for a carrier's media body (`E2E_MEDIA_FETCH_TIMEOUT_SECS`;
/// a deployed worker waits 30 s): well past the fake carrier's slow item (3 s) on a loaded machine.
pub const TEST_MEDIA_FETCH_TIMEOUT_SECS: u64 = 10;

/// How long an endpoint's circuit stays open in the test worker before its first probe
/// (`E2E_BREAKER_OPEN_SECS`; 30 s deployed, doubling to 10 minutes; here at most four times this).
/// An endpoint whose URL has `no-breaker` never opens its circuit there.
pub const TEST_BREAKER_OPEN_SECS: u64 = 2;

/// How long after its wake the test worker's sweeper looks again at a woken receipt
/// (`E2E_WOKEN_RECHECK_SECS`; 2 minutes deployed).
pub const TEST_WOKEN_RECHECK_SECS: u64 = 20;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A loopback port nothing listens on now, and that no other worker of this test process was given.
///
/// The port is free only until someone binds it, so it is chosen below the kernel's ephemeral
/// range: every server that binds port 0 (another test's customer endpoint or fake carrier,
/// workerd's own sockets) is given a port from that range, never this one. A port from the
/// range itself was once handed to another test's customer endpoint between being chosen and
/// wrangler binding it, which then recorded this worker's readiness probe as a delivery (run 74).
/// [`Worker::spawn`] still checks that what answers is its own worker.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next().and_then(|low| low.parse::<u16>().ok()))
        .unwrap_or(32768);
    // The ports from half the range's start up to it (16384 to 32767 by default).
    let (low, span) = (ephemeral / 2, ephemeral - ephemeral / 2);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let pick = u16::from_str_radix(&sim::random_hex()[..4], 16).unwrap_or(0);
        let port = low + pick % span;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range ({ephemeral})");
}

/// The project's own wrangler (`node_modules/.bin/wrangler`, pinned in package-lock.json), run
/// directly: `npx` costs a second or more of resolving on every call.
fn wrangler(root: &Path) -> Command {
    let mut cmd = Command::new(root.join("node_modules/.bin/wrangler"));
    cmd.current_dir(root)
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_SEND_ERROR_REPORTS", "false")
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("NO_COLOR", "1");
    cmd
}

/// Whether this run's workers use the sharded layout (`E2E_SHARDED=1`).
pub fn sharded() -> bool {
    std::env::var("E2E_SHARDED").is_ok_and(|v| v == "1")
}

impl Worker {
    /// Applies the migrations to a fresh local database and starts the worker on it, with a
    /// fake carrier API and the test build of the worker (fault injection compiled in).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`Worker::start`], with some variables set differently.
    ///
    /// With `E2E_SHARDED=1` in the environment the worker runs sharded (docs/scaling.md): the
    /// dedupe log in two databases (`DB` holds virtual shards 0-511 and `EVENTS_0` holds
    /// 512-1023) and the accounts in two account databases (`ACCOUNTS_0`, `ACCOUNTS_1`) routed
    /// through `DB`, so every test runs in that layout too.
    pub fn start_with(overrides: &[(&str, &str)]) -> Self {
        if sharded() {
            let mut overrides = overrides.to_vec();
            if !overrides.iter().any(|(k, _)| *k == "ACCOUNT_SHARDS") {
                overrides.push(("ACCOUNT_SHARDS", "ACCOUNTS_0 ACCOUNTS_1"));
            }
            let databases = ["EVENTS_0", "ACCOUNTS_0", "ACCOUNTS_1"];
            Self::start_sharded(&overrides, &databases, "DB=0-511 EVENTS_0=512-1023")
        } else {
            Self::start_sharded(overrides, &[], "")
        }
    }

    /// Like [`Worker::start_with`], with extra dedupe databases (`EVENTS_<n>` bindings, each
    /// migrated like `DB`) and the shard map `EVENT_SHARDS` (empty: everything in `DB`).
    pub fn start_sharded(overrides: &[(&str, &str)], databases: &[&str], map: &str) -> Self {
        let dir = root().join("target/e2e").join(format!(
            "run-{}-{}-{}",
            std::process::id(),
            sim::unix_now(),
            &sim::random_hex()[..6]
        ));
        stage(&dir, databases);
        let mut overrides: Vec<(&str, &str)> = overrides.to_vec();
        if let Some((_, limit)) = overrides.iter().find(|(k, _)| *k == RATE_LIMIT_VAR) {
            write_config(&dir, databases, limit);
        }
        if !map.is_empty() && !overrides.iter().any(|(k, _)| *k == "EVENT_SHARDS") {
            overrides.push(("EVENT_SHARDS", map));
        }

        let agent = ureq::AgentBuilder::new().timeout(sim::api::TIMEOUT).build();
        let carrier = FakeCarrier::start().expect("start the fake carrier");
        let customer = CustomerEndpoint::start().expect("start the customer endpoint");
        let overrides = overrides.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut worker = Worker {
            child: None,
            base: String::new(),
            dir,
            telnyx: Signer::generate(),
            carrier,
            customer,
            overrides,
            agent,
            ticks: std::sync::Mutex::new((0, Vec::new())),
        };
        worker.spawn();
        worker
    }

    fn spawn(&mut self) {
        // The parts of ticks a stopped worker left queued are gone with it: only this run's count.
        *self.ticks.get_mut().unwrap_or_else(|e| e.into_inner()) = (self.log().len(), Vec::new());
        // A port taken between choosing it and wrangler binding it makes wrangler exit or
        // something else answer: start again on other ports.
        for _ in 0..3 {
            if self.spawn_once() {
                return;
            }
            self.stop();
        }
        panic!("wrangler dev did not start on three pairs of ports; log:\n{}", self.log_tail());
    }

    /// Starts wrangler on fresh ports; `false` when it exited, or something else answered there.
    fn spawn_once(&mut self) -> bool {
        let port = free_port();
        self.base = format!("http://127.0.0.1:{port}");
        let env = [
            ("TELNYX_PUBLIC_KEY", self.telnyx.public_key_base64()),
            ("TELNYX_API_KEY", "e2e-telnyx-api-key".to_owned()),
            ("TELNYX_API_BASE", self.carrier.base.clone()),
            ("TELNYX_MESSAGING_PROFILE_ID", "e2e-profile".to_owned()),
            ("TELNYX_CONNECTION_ID", "e2e-connection".to_owned()),
            ("TWILIO_AUTH_TOKEN", TWILIO_TOKEN.to_owned()),
            ("TWILIO_ACCOUNT_SID", "ACe2e".to_owned()),
            ("TWILIO_API_BASE", self.carrier.base.clone()),
            ("PLIVO_AUTH_TOKEN", PLIVO_TOKEN.to_owned()),
            ("PLIVO_AUTH_ID", "MAe2e".to_owned()),
            ("PLIVO_API_BASE", self.carrier.base.clone()),
            ("PUBLIC_BASE_URL", self.base.clone()),
            ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("MEDIA_SIGNING_SECRET", MEDIA_SECRET.to_owned()),
            ("ALLOW_PRIVATE_ENDPOINTS", "true".to_owned()),
            // Every routine line: tests wait for the lines of the jobs they watch.
            ("LOG_SAMPLE_EVERY", "1".to_owned()),
            ("E2E_WEBHOOK_SCHEDULE_SECS", TEST_WEBHOOK_SCHEDULE.to_owned()),
            ("E2E_ATTEMPT_TIMEOUT_SECS", TEST_ATTEMPT_TIMEOUT_SECS.to_string()),
            ("E2E_BESIDE_SECS", TEST_BESIDE_SECS.to_string()),
            ("E2E_MEDIA_FETCH_TIMEOUT_SECS", TEST_MEDIA_FETCH_TIMEOUT_SECS.to_string()),
            ("E2E_BREAKER_OPEN_SECS", TEST_BREAKER_OPEN_SECS.to_string()),
            ("E2E_WOKEN_RECHECK_SECS", TEST_WOKEN_RECHECK_SECS.to_string()),
            ("OPERATOR_WEBHOOK_URL", format!("{}{OPERATOR_PATH}", self.customer.base)),
            ("OPERATOR_WEBHOOK_SECRET", OPERATOR_SECRET.to_owned()),
        ];
        let mut text: String = env
            .iter()
            .filter(|(k, _)| !self.overrides.iter().any(|(o, _)| o == k))
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        for (k, v) in &self.overrides {
            text.push_str(&format!("{k}={v}\n"));
        }
        fs::write(self.dir.join("test.env"), text).expect("write the env file");
        self.carrier.set_webhook_target(WebhookTarget {
            base: self.base.clone(),
            signer: self.telnyx.clone(),
            twilio_token: Some(TWILIO_TOKEN.to_owned()),
            plivo_token: Some(PLIVO_TOKEN.to_owned()),
        });

        let log =
            fs::OpenOptions::new().create(true).append(true).open(self.dir.join("wrangler.log")).expect("open the log");
        let child = wrangler(&root())
            .args(["dev", "--local", "--ip", "127.0.0.1", "--show-interactive-dev-session=false", "--test-scheduled"])
            .args(["--port", &port.to_string(), "--inspector-port", &free_port().to_string()])
            .arg("--config")
            .arg(self.dir.join("wrangler.toml"))
            .arg("--persist-to")
            .arg(self.dir.join("state"))
            .arg("--env-file")
            .arg(self.dir.join("test.env"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            // Its own process group, so stopping it also stops workerd.
            .process_group(0)
            .spawn()
            .expect("spawn wrangler dev");
        self.child = Some(child);
        let deadline = Instant::now() + sim::api::patient(Duration::from_secs(180));
        while Instant::now() < deadline {
            let a = self.get("/healthz");
            if a.status != 0 {
                // Ours answers with its readiness checks, whether configured well or not.
                return serde_json::from_str::<Value>(&a.body).is_ok_and(|v| v["checks"].is_object());
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(Child::try_wait) {
                return false;
            }
            thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "wrangler dev did not answer within {:?}; log:\n{}",
            sim::api::patient(Duration::from_secs(180)),
            self.log_tail()
        );
    }

    /// Binds `databases` (beside `DB`, each migrated like it; the whole list, as
    /// [`Worker::start_sharded`] takes it) and restarts the worker on the same state: a
    /// deployment that grows.
    pub fn rebind(&mut self, databases: &[&str]) {
        self.stop();
        let limit = self.overrides.iter().find(|(k, _)| k == RATE_LIMIT_VAR).map(|(_, v)| v.clone());
        write_config(&self.dir, databases, limit.as_deref().unwrap_or(UNLIMITED));
        migrate(&self.dir, databases);
        self.spawn();
    }

    /// The account database of `account` when it is not `DB` (as `account_routes` in `DB`
    /// names it): what a queue message about its rows carries as `database`.
    pub fn database_of(&self, account: &str) -> Option<String> {
        let rows =
            self.sql_at("DB", &format!("SELECT binding FROM account_routes WHERE account_id = {}", lit(account)));
        rows.first().and_then(|r| r["binding"].as_str()).filter(|b| *b != "DB").map(str::to_owned)
    }

    /// Runs SQL in the account database of `account` only and returns the rows.
    pub fn sql_for(&self, account: &str, sql: &str) -> Vec<Value> {
        self.sql_at(self.database_of(account).as_deref().unwrap_or("DB"), sql)
    }

    /// Sets a variable for the next [`Worker::restart`].
    pub fn set_var(&mut self, name: &str, value: &str) {
        self.overrides.retain(|(k, _)| k != name);
        self.overrides.push((name.to_owned(), value.to_owned()));
    }

    /// Runs SQL in one D1 binding of the worker (`DB`, `EVENTS_<n>`) and returns the rows.
    pub fn sql_at(&self, binding: &str, sql: &str) -> Vec<Value> {
        self.sql_in(sql, json!({ "sql": sql, "binding": binding }))
    }

    /// Stops the worker and starts it again on the same persisted state.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Stops the worker (and workerd with it).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
        }
    }

    /// Everything wrangler printed so far. Read as bytes: one byte that is not UTF-8 anywhere in
    /// the log (a line cut short by a restart, a body echoed back) must not make every line vanish.
    pub fn log(&self) -> String {
        let bytes = fs::read(self.dir.join("wrangler.log")).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The last lines wrangler printed, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `GET path`. Status 0 means no HTTP answer at all.
    pub fn get(&self, path: &str) -> Answer {
        Answer::from_result(self.agent.get(&format!("{}{path}", self.base)).call())
    }

    /// `POST path` with raw bytes and the given headers.
    ///
    /// A request wrangler dev's proxy dropped ([`dropped_by_dev_proxy`]) is sent again, a few times,
    /// as the proxy's answer asks. A carrier's delivery (`/webhooks/...`) is also sent again when
    /// the proxy closed it unanswered ([`unanswered`]), as a carrier does: the worker stores an
    /// event once however often it comes, and refuses a bad one each time.
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let carrier = path.starts_with("/webhooks/");
        let again = |a: &Answer| dropped_by_dev_proxy(a) || (carrier && unanswered(a));
        sent_again(|| self.post_once(path, headers, body), 3, Duration::from_millis(200), again)
    }

    fn post_once(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut req = self.agent.post(&format!("{}{path}", self.base));
        for (name, value) in headers {
            req = req.set(name, value);
        }
        Answer::from_result(req.send_bytes(body))
    }

    /// Delivers `body` to `/webhooks/telnyx`, signed now with the worker's key.
    pub fn deliver_telnyx(&self, body: &str) -> Answer {
        self.deliver_telnyx_at(body, sim::unix_now())
    }

    /// Delivers `body` to `/webhooks/telnyx`, signed as sent at `unix_seconds`. One that wrangler's
    /// proxy dropped or closed unanswered ([`unanswered`]; run 80) is sent again, as a carrier
    /// sends again what got no answer: the worker stores an event once however often it comes.
    pub fn deliver_telnyx_at(&self, body: &str, unix_seconds: i64) -> Answer {
        let h = self.telnyx.sign(body.as_bytes(), unix_seconds);
        let headers = [("telnyx-timestamp", h.timestamp.as_str()), ("telnyx-signature-ed25519", h.signature.as_str())];
        let send = || self.post_once("/webhooks/telnyx", &headers, body.as_bytes());
        sent_again(send, 3, Duration::from_millis(200), |a| dropped_by_dev_proxy(a) || unanswered(a))
    }

    /// Fires the cron trigger once, and waits until every part of its tick (and of every tick
    /// before it) has run: the tick enqueues them as jobs (edge/src/work/cron.rs), and a test that
    /// fires it reads what they did.
    pub fn cron(&self) -> Answer {
        // `--test-scheduled`'s route: the assets in front of the worker do not pass
        // `/cdn-cgi/handler/scheduled` on. The route hands the worker only the cron expression,
        // which the tick's line names (`"trigger"`) and nothing else reads: each tick is fired
        // with one of its own. A tick whose connection wrangler's proxy dropped or closed
        // unanswered may have run all the same (a lost answer, not a lost request), so it is
        // fired again only when no line says it ran, and under a name of its own: one lost that
        // ran after all and logged late is a tick of its own, whose parts are counted apart. A
        // tick run twice is harmless (every step is guarded), but a test counting the parts of
        // its ticks counts it twice (`Worker::ticks_logged`).
        static FIRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tick = FIRED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let logged =
            |trigger: &String| self.log_lines(&["\"cron\":\"tick\"", &format!("\"trigger\":\"{trigger}\"")]) > 0;
        let mut fired: Vec<String> = Vec::new();
        let mut answered = None;
        let mut answer = Answer { status: 0, body: String::new(), bookmark: None, headers: Vec::new() };
        for attempt in 0..4 {
            let trigger = format!("e2e-tick-{tick}.{attempt}");
            answer = self.get(&format!("/__scheduled?cron={trigger}"));
            fired.push(trigger);
            if !(dropped_by_dev_proxy(&answer) || unanswered(&answer)) {
                answered = fired.last().cloned();
                break;
            }
            if self.eventually(Duration::from_secs(10), || fired.iter().any(logged)) {
                answered = fired.iter().find(|t| logged(t)).cloned();
                answer = Answer { status: 200, body: String::new(), bookmark: None, headers: Vec::new() };
                break;
            }
        }
        if let Some(trigger) = answered.filter(|_| answer.status == 200) {
            self.ticks.lock().unwrap_or_else(|e| e.into_inner()).1.push(trigger);
            self.wait_ticks();
        }
        answer
    }

    /// Waits until the running worker has logged each tick it answered, by its trigger, and every
    /// part of each of those ticks has logged its end (`"tick_part"`, naming the trigger too): one
    /// per part its tick counted, and one per retention or audit page that enqueued the next
    /// (`"next":true`). The parts of every other tick logged are counted together, so those of a
    /// tick fired otherwise (by `sim chaos`) are waited for too.
    fn wait_ticks(&self) {
        let (start, answered) = self.ticks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut left = (0, 0);
        let done = self.eventually(Duration::from_secs(60), || {
            let log = self.log();
            let lines = log.get(start..).unwrap_or_default().lines();
            let lines = lines.filter(|l| l.starts_with('{') && l.contains("\"tick"));
            // Per trigger (and "" for every line): tick lines, parts expected, parts ended.
            let mut counts: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
            for v in lines.filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
                let trigger = v["trigger"].as_str().unwrap_or_default().to_owned();
                let (ticks, expected, ended) = if v["cron"] == "tick" {
                    (1, v["parts"].as_u64().unwrap_or(0), 0)
                } else if v["tick_part"].is_string() {
                    (0, u64::from(v["next"] == true), 1)
                } else {
                    continue;
                };
                let keys = if trigger.is_empty() { vec![trigger] } else { vec![trigger, String::new()] };
                for key in keys {
                    let c = counts.entry(key).or_default();
                    *c = (c.0 + ticks, c.1 + expected, c.2 + ended);
                }
            }
            let unfinished = |key: &str| counts.get(key).is_none_or(|c| c.0 == 0 || c.2 < c.1);
            let mine = answered.iter().filter(|t| unfinished(t)).count();
            left = (mine, counts.get("").map_or(0, |c| c.1.saturating_sub(c.2)));
            mine == 0 && left.1 == 0
        });
        // Not an assertion: a test that needs a part's work asserts on it.
        if !done {
            eprintln!("e2e: {} of {} ticks not ended; {} parts of all ticks not ended", left.0, answered.len(), left.1);
        }
    }

    /// How many ticks the running worker has logged (each counts its parts): those of
    /// [`Worker::cron`], and of any fired twice because its answer was lost.
    pub fn ticks_logged(&self) -> usize {
        let start = self.ticks.lock().unwrap_or_else(|e| e.into_inner()).0;
        let log = self.log();
        let lines = log.get(start..).unwrap_or_default().lines();
        lines.filter(|l| l.starts_with('{') && l.contains("\"cron\":\"tick\"") && l.contains("\"parts\"")).count()
    }

    /// Runs SQL in every account database of the worker (`DB`, and in the sharded layout each
    /// `ACCOUNTS_<n>`; through the test build's SQL route, on the worker's own D1 bindings) and
    /// returns the rows of all of them.
    pub fn sql(&self, sql: &str) -> Vec<Value> {
        self.sql_in(sql, json!({ "sql": sql }))
    }

    /// Runs SQL in every database of the dedupe log (`carrier_events`; with one database, `DB`)
    /// and returns the rows of all of them.
    pub fn events_sql(&self, sql: &str) -> Vec<Value> {
        self.sql_in(sql, json!({ "sql": sql, "events": true }))
    }

    /// The sum, over every database of the dedupe log, of the integer a `SELECT COUNT(*) AS n`
    /// query returns in column `n`.
    pub fn events_count(&self, sql: &str) -> i64 {
        let rows = self.events_sql(sql);
        assert!(!rows.is_empty(), "no rows for {sql}");
        rows.iter().map(|r| r["n"].as_i64().unwrap_or_else(|| panic!("no n in {rows:?} for {sql}"))).sum()
    }

    /// Posts `query` (`{"sql", ...}`) to the test build's SQL route and returns the rows.
    fn sql_in(&self, sql: &str, query: Value) -> Vec<Value> {
        let ask = || self.post("/__e2e/sql", &[("content-type", "application/json")], query.to_string().as_bytes());
        // `post` sends a request the proxy dropped again. The proxy also closes a connection
        // unanswered now and then (seen: "Unexpected EOF"); a read is safe to ask again then too.
        let read = sql.trim_start().get(..6).is_some_and(|w| w.eq_ignore_ascii_case("select"));
        let answer = sent_again(ask, if read { 3 } else { 0 }, Duration::from_millis(200), unanswered);
        assert_eq!(answer.status, 200, "sql failed: {sql}\n{}", answer.body);
        answer.json()["results"].as_array().cloned().unwrap_or_default()
    }

    /// The integer a `SELECT COUNT(*) AS n ...`-style query returns in column `n`, summed over
    /// the account databases (one row each; a NULL, as `SUM` gives over no rows, counts 0).
    pub fn count(&self, sql: &str) -> i64 {
        let rows = self.sql(sql);
        assert!(!rows.is_empty(), "no rows for {sql}");
        rows.iter()
            .map(|r| match &r["n"] {
                Value::Null => 0,
                n => n.as_i64().unwrap_or_else(|| panic!("no integer n in {rows:?} for {sql}")),
            })
            .sum()
    }

    /// Polls `check` until it returns true or `timeout`, [`sim::api::patient`], passes; returns
    /// the last result.
    pub fn eventually(&self, timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + sim::api::patient(timeout);
        loop {
            if check() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Worker {
    /// A request with a bearer token and optional JSON body and extra headers.
    ///
    /// A POST or PATCH without an `Idempotency-Key` among `headers` goes with one of its own
    /// (every one of the API's takes one), so any write can be sent again safely.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let has_key = headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("idempotency-key"));
        let own_key = (writes(method) && !has_key).then(sim::random_hex);
        let send = || {
            let mut req = self
                .agent
                .request(method, &format!("{}{path}", self.base))
                .set("authorization", &format!("Bearer {token}"));
            for (name, value) in headers {
                req = req.set(name, value);
            }
            if let Some(key) = &own_key {
                req = req.set("idempotency-key", key);
            }
            Answer::from_result(match body {
                Some(json) => req.send_json(json.clone()),
                None => req.call(),
            })
        };
        // A 503 asks the client to try again. A request the proxy dropped is sent again whatever
        // it is ([`dropped_by_dev_proxy`]); a keyed one also after any 503 or no answer at all
        // (local D1 and Queues now and then fail a request under load, and the proxy now and then
        // closes one unanswered: it may have run, and its key answers as it did), or while its
        // first sending still runs ([`keyed_again`]); a read after no answer.
        let keyed = has_key || own_key.is_some();
        let read = method.eq_ignore_ascii_case("GET");
        let again = |a: &Answer| dropped_by_dev_proxy(a) || (keyed && keyed_again(a)) || (read && unanswered(a));
        sent_again(send, 3, Duration::from_millis(500), again)
    }

    /// Creates an account through the admin API; returns (id, api key).
    pub fn create_account(&self, name: &str) -> (String, String) {
        let a = self.call("POST", "/admin/accounts", ADMIN_TOKEN, Some(&json!({"name": name})), &[]);
        assert_eq!(a.status, 201, "create account: {}", a.body);
        let v = a.json();
        (v["id"].as_str().expect("id").to_owned(), v["api_key"].as_str().expect("api_key").to_owned())
    }

    /// Assigns `number` (with optional ring targets) to an account through the admin API.
    pub fn create_number(&self, account_id: &str, number: &str, ring_targets: &[&str]) {
        let body = json!({"account_id": account_id, "phone_number": number, "ring_targets": ring_targets});
        let a = self.call("POST", "/admin/numbers", ADMIN_TOKEN, Some(&body), &[]);
        assert_eq!(a.status, 201, "create number: {}", a.body);
    }

    /// Creates a webhook endpoint of the customer at `path` of the test customer server,
    /// subscribed to `types`; returns its id and its `whsec_` secret.
    pub fn endpoint_at(&self, c: &Customer, path: &str, types: &[&str]) -> (String, String) {
        let a = self.try_endpoint(&c.key, &format!("{}{path}", self.customer.base), types);
        assert_eq!(a.status, 201, "{}", a.body);
        let v = a.json();
        let secret = v["secret"].as_str().expect("secret").to_owned();
        assert!(secret.starts_with("whsec_"));
        (v["id"].as_str().expect("id").to_owned(), secret)
    }

    /// Asks, with API key `key`, for an endpoint at `url` subscribed to `types`; the answer as it
    /// is.
    pub fn try_endpoint(&self, key: &str, url: &str, types: &[&str]) -> Answer {
        self.call("POST", "/v1/webhook_endpoints", key, Some(&json!({"url": url, "event_types": types})), &[])
    }

    /// Recovers endpoint `endpoint` of the customer with key `key` from `since` (RFC 3339), and
    /// waits until every page of the recovery has run; returns the recovery as its last page
    /// left it (`queued`: the deliveries it wrote).
    pub fn recover(&self, key: &str, endpoint: &str, since: &str) -> Value {
        let body = json!({ "since": since });
        let a = self.call("POST", &format!("/v1/webhook_endpoints/{endpoint}/recover"), key, Some(&body), &[]);
        assert_eq!(a.status, 202, "{}", a.body);
        let id = a.json()["id"].as_str().expect("a recovery id").to_owned();
        let mut last = Value::Null;
        let done = self.eventually(Duration::from_secs(60), || {
            last =
                self.call("GET", &format!("/v1/webhook_endpoints/{endpoint}/recoveries/{id}"), key, None, &[]).json();
            last["status"] == "done"
        });
        assert!(done, "recovery {id} did not finish: {last}");
        last
    }

    /// The customer's message `id`, as `GET /v1/messages/{id}` shows it.
    pub fn message(&self, c: &Customer, id: &str) -> Value {
        let a = self.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[]);
        assert_eq!(a.status, 200, "{}", a.body);
        a.json()
    }

    /// Waits (up to a minute) for the customer's message `id` to show `status`; returns it.
    pub fn wait_status(&self, c: &Customer, id: &str, status: &str) -> Value {
        let mut last = Value::Null;
        let reached = self.eventually(Duration::from_secs(60), || {
            last = self.message(c, id);
            last["status"] == status
        });
        assert!(reached, "message {id} did not reach {status}: {last}");
        last
    }

    /// A new account named `name` with one fresh number.
    pub fn new_customer(&self, name: &str) -> Customer {
        let (account, key) = self.create_account(name);
        let number = fresh_number();
        self.create_number(&account, &number, &[]);
        Customer { account, key, number }
    }

    /// Checks what reached `path` (endpoint `endpoint`'s URL) against the worker's record, once
    /// every job of its deliveries has run: no request that is not a recorded attempt (an attempt
    /// that got no 2xx in time is sent again under the same webhook-id, as the contract allows, and a
    /// loaded machine can make that happen to any endpoint) and at most one success per delivery.
    /// Returns how many deliveries succeeded.
    pub fn sent_as_recorded(&self, endpoint: &str, path: &str) -> usize {
        let attempts = self.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
             WHERE d.endpoint_id = {}",
            lit(endpoint)
        ));
        // An attempt whose request never reached the endpoint (no answer in time) is recorded too.
        let received = self.customer.received(path).len();
        assert!(received as i64 <= attempts, "{received} requests to {path}, each a recorded attempt ({attempts})");
        let successes = self.sql(&format!(
            "SELECT d.id, SUM(a.status_code BETWEEN 200 AND 299) AS ok FROM webhook_deliveries d
             JOIN webhook_attempts a ON a.delivery_id = d.id WHERE d.endpoint_id = {} GROUP BY d.id",
            lit(endpoint)
        ));
        assert!(
            successes.iter().all(|r| r["ok"].as_i64().unwrap_or(0) <= 1),
            "one success per delivery: {successes:?}"
        );
        successes.iter().filter(|r| r["ok"] == 1).count()
    }

    /// The worker log's lines where the test build's guard refused a call that would cross one
    /// of Cloudflare's documented limits (edge/src/quotas.rs, docs/deploy.md "Limits").
    /// The guard's own test (`POST /__e2e/quotas/probe`) crosses a limit on purpose: its lines
    /// are not among them.
    pub fn limits_crossed(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| line.contains("\"limit_crossed\"") && !line.contains(QUOTAS_PROBE))
            .map(str::to_owned)
            .collect()
    }

    /// Prints the test build's report of the highest value each guarded limit saw, and the most
    /// D1 queries and subrequests of one invocation by what started it (edge/src/quotas.rs).
    pub fn print_quotas(&self, label: &str) {
        let highest = self.post("/__e2e/quotas", &[], b"").json();
        for (limit, seen) in highest["limits"].as_object().into_iter().flatten() {
            eprintln!(
                "{label}:   {limit}: {} of {} ({})",
                seen["max"],
                seen["limit"],
                seen["at"].as_str().unwrap_or("-")
            );
        }
        eprintln!("{label}: the most D1 queries and subrequests of one invocation, by what started it:");
        for (path, most) in highest["paths"].as_object().into_iter().flatten() {
            eprintln!("{label}:   {path}: {} queries, {} subrequests", most[0], most[1]);
        }
    }

    /// Counts the worker log lines that contain every one of `needles`.
    pub fn log_lines(&self, needles: &[&str]) -> usize {
        self.log().lines().filter(|line| needles.iter().all(|n| line.contains(n))).count()
    }
}

impl Worker {
    /// Checks every customer webhook delivery this worker's customer endpoint received, whichever
    /// test caused it: each body matches the schema of its type in docs/openapi.json's
    /// `webhooks`, and each delivery verifies with the official Standard Webhooks library under
    /// its endpoint's secret (or the one it rotated from), as of when it arrived. Deliveries to an
    /// endpoint deleted since have no secret left to verify with; they are counted. Returns a
    /// summary, or every problem found.
    pub fn audit_deliveries(&self) -> Result<String, String> {
        let all = self.customer.all();
        if all.is_empty() {
            return Ok("no customer webhook deliveries to audit".into());
        }
        let mut problems = Vec::new();
        let bodies: Vec<&str> = all.iter().map(|r| r.body.as_str()).collect();
        // Each body against docs/openapi.json and against the schema the worker serves for its
        // type in its event catalog.
        let reader = self.new_customer("audit");
        let catalog = self.call("GET", "/v1/event_types", &reader.key, None, &[]);
        if catalog.status != 200 {
            return Err(format!("GET /v1/event_types answered {}: {}", catalog.status, catalog.body));
        }
        let catalog = catalog.json();
        for (r, problem) in all.iter().zip(webhook_schema_problems_with(&bodies, Some(&catalog))) {
            if let Some(problem) = problem {
                problems.push(format!("{} {}: schema: {problem}", r.path, r.header("webhook-id").unwrap_or("-")));
            }
        }
        let mut secrets: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in self.sql("SELECT url, secret, previous_secret FROM webhook_endpoints") {
            let Some(path) = row["url"].as_str().and_then(|u| u.strip_prefix(&self.customer.base)) else { continue };
            let known = secrets.entry(path.to_owned()).or_default();
            known.extend(["secret", "previous_secret"].iter().filter_map(|k| row[*k].as_str().map(str::to_owned)));
        }
        let mut by_path: BTreeMap<&str, Vec<Received>> = BTreeMap::new();
        for r in &all {
            by_path.entry(r.path.as_str()).or_default().push(r.clone());
        }
        let (mut verified, mut unverifiable) = (0, 0);
        for (path, deliveries) in &by_path {
            match secrets.get(*path) {
                Some(keys) => {
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    match verify_standard_webhooks(&keys, deliveries) {
                        Ok(n) => verified += n,
                        Err(report) => problems.push(format!("{path}: signatures:\n{report}")),
                    }
                }
                None => unverifiable += deliveries.len(),
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        Ok(format!(
            "{} customer webhook bodies match docs/openapi.json and GET /v1/event_types; {verified} deliveries verify with the Standard \
             Webhooks library ({unverifiable} went to endpoints deleted since)",
            all.len()
        ))
    }
}

/// Runs `node tests/<script> FILE` with `input` in FILE; returns whether it succeeded and what
/// it printed.
fn node(script: &str, input: &Value) -> (bool, String) {
    let dir = root().join("target/e2e");
    fs::create_dir_all(&dir).expect("create target/e2e");
    let file = dir.join(format!("{}-{}.json", script.trim_end_matches(".mjs"), sim::random_hex()));
    fs::write(&file, input.to_string()).expect("write the script's input");
    let out =
        Command::new("node").current_dir(root()).arg(format!("tests/{script}")).arg(&file).output().expect("run node");
    let _ = fs::remove_file(&file);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Verifies deliveries with the official Standard Webhooks library (`standardwebhooks` on npm,
/// through tests/verify_standard_webhooks.mjs), each under any of `secrets` and as of when it
/// arrived. Returns how many verified, or the library's report when any did not.
pub fn verify_standard_webhooks(secrets: &[&str], deliveries: &[Received]) -> Result<usize, String> {
    let list: Vec<Value> =
        deliveries.iter().map(|d| json!({"headers": d.headers, "body": d.body, "at": d.received_at})).collect();
    let (ok, text) = node("verify_standard_webhooks.mjs", &json!({"secrets": secrets, "deliveries": list}));
    let verified = text.lines().filter(|l| l.starts_with("ok ")).count();
    if ok && verified == deliveries.len() {
        Ok(verified)
    } else {
        Err(text)
    }
}

/// Checks each webhook body against the schema of its type in docs/openapi.json's `webhooks`
/// (Ajv, JSON Schema 2020-12, through tests/validate_webhook_bodies.mjs): `None` for a body that
/// matches, else what is wrong with it.
pub fn webhook_schema_problems(bodies: &[&str]) -> Vec<Option<String>> {
    webhook_schema_problems_with(bodies, None)
}

/// Like [`webhook_schema_problems`], each body also checked against the schema that `catalog`
/// (the answer of `GET /v1/event_types`) serves for its type.
pub fn webhook_schema_problems_with(bodies: &[&str], catalog: Option<&Value>) -> Vec<Option<String>> {
    let (_, text) = node("validate_webhook_bodies.mjs", &json!({ "bodies": bodies, "catalog": catalog }));
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("ok ") || l.starts_with("FAILED ")).collect();
    assert_eq!(lines.len(), bodies.len(), "the validator reports on every body:\n{text}");
    lines.iter().map(|l| l.strip_prefix("FAILED ").map(str::to_owned)).collect()
}

/// A Telnyx `message.received` webhook body: an SMS with `text` to `to` ([`sim::telnyx::inbound`]).
pub fn telnyx_inbound(event_id: &str, carrier_message_id: &str, to: &str, text: &str) -> String {
    sim::telnyx::inbound(event_id, carrier_message_id, to, text)
}

/// A fresh E.164 number for one test: unique within a run.
pub fn fresh_number() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("+1555{:03}{:04}", std::process::id() % 1000, n)
}

/// The databases the migrated template holds beside `DB`: every binding a test worker is given.
const TEMPLATE_DATABASES: [&str; 4] = ["EVENTS_0", "EVENTS_1", "ACCOUNTS_0", "ACCOUNTS_1"];

/// A directory whose `state` holds `DB` and every [`TEMPLATE_DATABASES`] with every migration
/// applied, made once for a given set of migrations, wrangler config and wrangler, and copied for
/// each worker: applying them costs seconds a database, copying costs milliseconds. A local
/// database's state is found by its id, so a copied database that a worker does not bind is
/// never opened. It is kept in `~/.cache/exactly/e2e` (beside `make`'s Cargo cache), so another
/// clone on the machine starts from it too.
pub fn migrated_template() -> PathBuf {
    static TEMPLATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let root = root();
            let mut inputs: Vec<PathBuf> = fs::read_dir(root.join("migrations"))
                .expect("read migrations/")
                .map(|e| e.expect("a migrations/ entry").path())
                .collect();
            inputs.sort();
            inputs.extend([root.join("package-lock.json"), root.join("wrangler.toml")]);
            // FNV-1a over the databases, the names and the contents: a changed migration makes a
            // new template.
            let fnv =
                |h: u64, bytes: &[u8]| bytes.iter().fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
            let key =
                inputs.iter().fold(fnv(0xcbf2_9ce4_8422_2325, TEMPLATE_DATABASES.join(" ").as_bytes()), |h, path| {
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    fnv(fnv(h, name.as_bytes()), &fs::read(path).expect("read a template input"))
                });
            let cache = std::env::var_os("HOME")
                .map_or_else(|| root.join("target/e2e"), |home| PathBuf::from(home).join(".cache/exactly/e2e"));
            fs::create_dir_all(&cache).expect("create the template cache");
            let dir = cache.join(format!("template-{key:016x}"));
            if dir.join("state").is_dir() {
                return dir;
            }
            // Made aside and renamed into place, so a concurrent test process never sees half of it.
            let work = cache.join(format!("template-{key:016x}.{}", sim::random_hex()));
            fs::create_dir_all(&work).expect("create the template directory");
            write_config(&work, &TEMPLATE_DATABASES, UNLIMITED);
            migrate(&work, &TEMPLATE_DATABASES);
            if fs::rename(&work, &dir).is_err() {
                // Another process made it first: use theirs.
                let _ = fs::remove_dir_all(&work);
            }
            assert!(dir.join("state").is_dir(), "the migrated template at {}", dir.display());
            dir
        })
        .clone()
}

/// Prepares `dir` for a worker as every test run starts one (the Rust harness, and the console's
/// browser test through the `stage` binary): its `wrangler.toml` (the test bundle, absolute
/// paths, the console as static assets, `DB` and each of `databases`) and its local state, copied
/// from the migrated template.
pub fn stage(dir: &Path, databases: &[&str]) {
    fs::create_dir_all(dir).expect("create the run directory");
    write_config(dir, databases, UNLIMITED);
    copy_dir(&migrated_template().join("state"), &dir.join("state"));
    migrate(dir, databases);
}

/// Copies the directory tree `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create a state directory");
    for entry in fs::read_dir(from).expect("read the template state") {
        let entry = entry.expect("a template state entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy the template state");
        }
    }
}

/// Applies the migrations to `DB` and each of `databases` that the migrated template does not
/// already hold (what a database has already is skipped).
fn migrate(dir: &Path, databases: &[&str]) {
    let fresh = !dir.join("state").is_dir();
    for binding in std::iter::once(&"DB").chain(databases) {
        if !fresh && (*binding == "DB" || TEMPLATE_DATABASES.contains(binding)) {
            continue;
        }
        let status = wrangler(&root())
            .args(["d1", "migrations", "apply", binding, "--local", "--config"])
            .arg(dir.join("wrangler.toml"))
            .arg("--persist-to")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .status()
            .expect("run wrangler d1 migrations apply");
        assert!(status.success(), "applying migrations to {binding} failed");
    }
}

/// An override that sets both API rate limits of a worker of its own to this many requests a
/// minute (the harness writes it into the run's wrangler config; the worker ignores the variable).
pub const RATE_LIMIT_VAR: &str = "E2E_RATE_LIMIT";
/// The API rate limits of every other test worker: a run makes hundreds of admin calls a minute.
const UNLIMITED: &str = "1000000";

/// Writes the run's wrangler config: the project's `wrangler.toml` with the test bundle as
/// `main`, no build step, absolute paths (the file lives in the run directory) and API rate
/// limits of `rate_limit` requests a minute.
fn write_config(dir: &Path, databases: &[&str], rate_limit: &str) {
    let root = root();
    let source = fs::read_to_string(root.join("wrangler.toml")).expect("read wrangler.toml");
    let mut out = String::new();
    let mut in_build = false;
    for line in source.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_build = trimmed == "[build]";
        }
        if in_build {
            continue;
        }
        if trimmed.starts_with("main =") {
            out.push_str(&format!("main = \"{}\"\n", root.join("edge/build-e2e/worker/shim.mjs").display()));
        } else if trimmed.starts_with("migrations_dir =") {
            out.push_str(&format!("migrations_dir = \"{}\"\n", root.join("migrations").display()));
        } else if trimmed.starts_with("simple = { limit =") {
            out.push_str(&format!("simple = {{ limit = {rate_limit}, period = 60 }}\n"));
        } else if trimmed.starts_with("directory =") {
            out.push_str(&format!("directory = \"{}\"\n", root.join("console/dist").display()));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    for binding in databases {
        // The local state of a database is found by its id: derived from the binding's name, so
        // a binding keeps its database whatever list it comes in (FNV-1a, 48 bits).
        let id =
            binding.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        out.push_str(&format!(
            "\n[[d1_databases]]\nbinding = \"{binding}\"\ndatabase_name = \"exactly-{}\"\n\
             database_id = \"00000000-0000-0000-0000-{:012x}\"\nmigrations_dir = \"{}\"\n",
            binding.to_lowercase().replace('_', "-"),
            id & 0xffff_ffff_ffff,
            root.join("migrations").display()
        ));
    }
    fs::write(dir.join("wrangler.toml"), out).expect("write the run's wrangler.toml");
}

impl Drop for Worker {
    /// Stops the worker, and fails the test that started it if any of its calls crossed one of
    /// Cloudflare's limits (unless the test already failed).
    fn drop(&mut self) {
        // The scale suite shows how near its workers came to each limit.
        if self.child.is_some() && std::env::var_os("E2E_SCALE").is_some() && !thread::panicking() {
            eprintln!("scale: the highest each limit saw in this worker:");
            self.print_quotas("scale");
        }
        self.stop();
        let crossed = self.limits_crossed();
        if !crossed.is_empty() && !thread::panicking() {
            panic!("calls that crossed a Cloudflare limit (docs/deploy.md, \"Limits\"):\n{}", crossed.join("\n"));
        }
    }
}

/// How the guard names an invocation of its own test's route (`POST /__e2e/quotas/probe`).
pub const QUOTAS_PROBE: &str = "\"at\":\"request /__e2e/quotas\"";

/// Quotes a string as an SQL literal.
pub fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Waiting for the worker's queue jobs rather than for wall time: every queue message the worker
/// runs logs one JSON line naming what it is about and how it ended (`edge/src/work/jobs.rs`,
/// `edge/src/work/deliver/`), so a test that knows how many messages it caused can wait until
/// that many have run, and then the queues hold nothing more of them.
impl Worker {
    /// The parsed job lines about any of `ids`: a carrier event's stored id (`cev_…`), a message's
    /// (`msg_…`) or a media item's (`msg_…/N`) on the jobs queue, or a delivery's (`dlv_…`) on
    /// the deliveries queue.
    fn job_lines_about(&self, ids: &[&str]) -> Vec<Value> {
        self.log()
            .lines()
            .filter(|line| line.starts_with('{') && ids.iter().any(|id| line.contains(id)))
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|v| ids.iter().any(|id| (v["job"].is_string() && v["id"] == *id) || v["delivery"] == *id))
            .collect()
    }

    /// How many job lines there are about `id`: one per queue message that carried it, and one
    /// per delivery attempt taken from its endpoint's line.
    pub fn job_lines(&self, id: &str) -> usize {
        self.job_lines_about(&[id]).len()
    }

    /// How many job lines about `id` ended with `outcome` (`"applied"`, `"delivered"`, ...).
    pub fn job_outcomes(&self, id: &str, outcome: &str) -> usize {
        self.job_lines_about(&[id]).iter().filter(|v| v["outcome"] == outcome).count()
    }

    /// How many queue messages about `id` ran to an end: its job lines with an outcome other
    /// than `retried` (a message that is retried runs, and logs, again).
    pub fn jobs_finished(&self, id: &str) -> usize {
        Self::jobs_finished_in(&self.job_lines_about(&[id]), id)
    }

    /// Waits (up to a minute) until every queue message about each id has run to an end: the
    /// `n` the test caused from outside (a carrier delivery, an API call, a resume, ...), plus
    /// each that those jobs enqueued again themselves (a delivery attempt that scheduled the next,
    /// a delivery that went into its endpoint's line and is taken from it later, a dispatch that
    /// came early), less each such
    /// enqueue that failed (logged with its error). Then the queues hold nothing more about
    /// them, except what a sweep may have added.
    pub fn wait_jobs(&self, caused: &[(String, usize)]) {
        let ids: Vec<&str> = caused.iter().map(|(id, _)| id.as_str()).collect();
        let mut short = Vec::new();
        let done = self.eventually(Duration::from_secs(60), || {
            let lines = self.job_lines_about(&ids);
            short = caused
                .iter()
                .filter_map(|(id, n)| {
                    let expected = n + Self::jobs_requeued_in(&lines, id);
                    let finished = Self::jobs_finished_in(&lines, id);
                    (finished < expected).then(|| format!("{id}: {finished} of {expected}"))
                })
                .collect();
            short.is_empty()
        });
        assert!(
            done,
            "queue jobs did not all run within {:?}: {short:?}\nlog:\n{}",
            sim::api::patient(Duration::from_secs(60)),
            self.log_tail()
        );
    }

    /// Waits until every job that these carrier webhook deliveries enqueued has run to an end
    /// ([`Worker::wait_jobs`]); each answer says whether it enqueued one
    /// ([`Worker::jobs_enqueued`]).
    pub fn wait_jobs_of(&self, answers: &[&Answer]) {
        let mut caused: Vec<(String, usize)> = Vec::new();
        for (id, n) in answers.iter().filter_map(|a| Self::jobs_enqueued(a)) {
            match caused.iter_mut().find(|(known, _)| *known == id) {
                Some((_, total)) => *total += n,
                None => caused.push((id, n)),
            }
        }
        self.wait_jobs(&caused);
    }

    /// The jobs a carrier webhook delivery enqueued, as its answer says
    /// (`edge/src/api/ingest.rs`): the stored event's id with 1 for `accepted` or
    /// `duplicate-requeued`, 0 for `duplicate`; `None` for an answer that stored nothing.
    pub fn jobs_enqueued(answer: &Answer) -> Option<(String, usize)> {
        if answer.status != 200 {
            return None;
        }
        let v = answer.json();
        let id = v["id"].as_str()?.to_owned();
        match v["outcome"].as_str()? {
            "accepted" | "duplicate-requeued" => Some((id, 1)),
            "duplicate" => Some((id, 0)),
            other => panic!("a carrier delivery answered an unknown outcome {other:?}: {}", answer.body),
        }
    }

    /// Of `lines`, how many about `id` ran to an end (an outcome other than `retried`).
    fn jobs_finished_in(lines: &[Value], id: &str) -> usize {
        lines
            .iter()
            .filter(|v| (v["id"] == id || v["delivery"] == id) && v["outcome"].is_string())
            .filter(|v| v["outcome"] != "retried")
            .count()
    }

    /// Of `lines`, how many messages about `id` its own jobs enqueued again: a delivery attempt
    /// that scheduled the next one, a delivery that went into its endpoint's line (an attempt that
    /// ends, or a wake, takes it out and logs its outcome), a dispatch that came early; less each
    /// such enqueue that failed.
    fn jobs_requeued_in(lines: &[Value], id: &str) -> usize {
        let again = lines
            .iter()
            .filter(|v| {
                let outcome = v["outcome"].as_str().unwrap_or_default();
                let delivery = v["delivery"] == id;
                (delivery
                    && matches!(
                        outcome,
                        "failed: retry scheduled" | "waiting: endpoint busy" | "waiting: circuit open"
                    ))
                    || (v["job"] == "dispatch" && v["id"] == id && outcome == "not due")
            })
            .count();
        let lost =
            lines.iter().filter(|v| v["delivery"] == id && v["outcome"].is_null() && v["error"].is_string()).count();
        again.saturating_sub(lost)
    }
}
