//! The end-to-end harness: the real worker in `wrangler dev` (workerd with local D1, Queues and
//! Durable Objects), started once per test binary on a free port with its own persistence
//! directory, and stopped at the end.
//!
//! Tests talk to it over HTTP with real signatures, and count rows through
//! `wrangler d1 execute` against the same local database.

use std::fs;
use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sim::telnyx::Signer;

/// The answer to one HTTP request.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (Null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
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
    agent: ureq::Agent,
}

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn npx(root: &Path) -> Command {
    let mut cmd = Command::new("npx");
    cmd.current_dir(root)
        .env("WRANGLER_SEND_METRICS", "false")
        .env("WRANGLER_SEND_ERROR_REPORTS", "false")
        .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
        .env("NO_COLOR", "1");
    cmd
}

impl Worker {
    /// Applies the migrations to a fresh local database and starts the worker on it.
    pub fn start() -> Self {
        let dir = root().join("target/e2e").join(format!("run-{}-{}", std::process::id(), sim::unix_now()));
        fs::create_dir_all(&dir).expect("create the run directory");
        let telnyx = Signer::generate();
        fs::write(
            dir.join("test.env"),
            format!("TELNYX_PUBLIC_KEY={}\n", telnyx.public_key_base64()),
        )
        .expect("write the env file");

        let status = npx(&root())
            .args(["wrangler", "d1", "migrations", "apply", "DB", "--local", "--persist-to"])
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .status()
            .expect("run wrangler d1 migrations apply");
        assert!(status.success(), "applying migrations failed");

        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
        let mut worker = Worker { child: None, base: String::new(), dir, telnyx, agent };
        worker.spawn();
        worker
    }

    fn spawn(&mut self) {
        let port = free_port();
        let log = fs::File::create(self.dir.join("wrangler.log")).expect("create the log");
        let child = npx(&root())
            .args(["wrangler", "dev", "--local", "--ip", "127.0.0.1", "--show-interactive-dev-session=false"])
            .args(["--port", &port.to_string(), "--inspector-port", &free_port().to_string()])
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
        self.base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if self.get("/").status != 0 {
                return;
            }
            thread::sleep(Duration::from_millis(250));
        }
        panic!("wrangler dev did not answer within 180 s; log:\n{}", self.log_tail());
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

    /// The last lines wrangler printed, for failure messages.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = fs::File::open(self.dir.join("wrangler.log")) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn answer(result: Result<ureq::Response, ureq::Error>) -> Answer {
        match result {
            Ok(r) | Err(ureq::Error::Status(_, r)) => {
                let status = r.status();
                Answer { status, body: r.into_string().unwrap_or_default() }
            }
            Err(e) => Answer { status: 0, body: e.to_string() },
        }
    }

    /// `GET path`. Status 0 means no HTTP answer at all.
    pub fn get(&self, path: &str) -> Answer {
        Self::answer(self.agent.get(&format!("{}{path}", self.base)).call())
    }

    /// `POST path` with raw bytes and the given headers.
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut req = self.agent.post(&format!("{}{path}", self.base));
        for (name, value) in headers {
            req = req.set(name, value);
        }
        Self::answer(req.send_bytes(body))
    }

    /// Delivers `body` to `/webhooks/telnyx`, signed now with the worker's key.
    pub fn deliver_telnyx(&self, body: &str) -> Answer {
        self.deliver_telnyx_at(body, sim::unix_now())
    }

    /// Delivers `body` to `/webhooks/telnyx`, signed as sent at `unix_seconds`.
    pub fn deliver_telnyx_at(&self, body: &str, unix_seconds: i64) -> Answer {
        let h = self.telnyx.sign(body.as_bytes(), unix_seconds);
        self.post(
            "/webhooks/telnyx",
            &[("telnyx-timestamp", &h.timestamp), ("telnyx-signature-ed25519", &h.signature)],
            body.as_bytes(),
        )
    }

    /// Fires the cron trigger once.
    pub fn cron(&self) -> Answer {
        self.get("/cdn-cgi/handler/scheduled?cron=*+*+*+*+*")
    }

    /// Runs SQL against the worker's local D1 database and returns the rows.
    pub fn sql(&self, sql: &str) -> Vec<Value> {
        let output = npx(&root())
            .args(["wrangler", "d1", "execute", "DB", "--local", "--json", "--persist-to"])
            .arg(self.dir.join("state"))
            .args(["--command", sql])
            .output()
            .expect("run wrangler d1 execute");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "d1 execute failed: {sql}\n{text}\n{}", String::from_utf8_lossy(&output.stderr));
        let parsed: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("d1 output is not JSON ({e}): {text}"));
        parsed[0]["results"].as_array().cloned().unwrap_or_default()
    }

    /// The single integer a `SELECT COUNT(*) AS n ...`-style query returns in column `n`.
    pub fn count(&self, sql: &str) -> i64 {
        let rows = self.sql(sql);
        rows.first().and_then(|r| r["n"].as_i64()).unwrap_or_else(|| panic!("no n in {rows:?} for {sql}"))
    }

    /// Polls `check` until it returns true or `timeout` passes; returns the last result.
    pub fn eventually(&self, timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
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

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Quotes a string as an SQL literal.
pub fn lit(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
