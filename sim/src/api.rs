//! A small client of the worker's HTTP API, for scenarios.

use std::time::Duration;

use serde_json::Value;

/// One answer: status (0 when no HTTP answer came back) and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status, or 0.
    pub status: u16,
    /// The body as text.
    pub body: String,
    /// The D1 session bookmark the answer carried (`x-d1-bookmark`), if any.
    pub bookmark: Option<String>,
    /// Every header, names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Answer {
    /// The answer of a ureq call: any HTTP status is an answer; no answer at all is status 0.
    pub fn from_result(result: Result<ureq::Response, ureq::Error>) -> Self {
        match result {
            Ok(r) | Err(ureq::Error::Status(_, r)) => {
                let status = r.status();
                let bookmark = r.header("x-d1-bookmark").map(str::to_owned);
                let headers = r
                    .headers_names()
                    .into_iter()
                    .filter_map(|name| r.header(&name).map(|v| (name.to_ascii_lowercase(), v.to_owned())))
                    .collect();
                Answer { status, body: r.into_string().unwrap_or_default(), bookmark, headers }
            }
            Err(e) => Answer { status: 0, body: e.to_string(), bookmark: None, headers: Vec::new() },
        }
    }

    /// The body as JSON (Null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The worker's API at `base`.
#[derive(Clone)]
pub struct Client {
    /// `http://127.0.0.1:8787` or a deployment's origin.
    pub base: String,
    agent: ureq::Agent,
}

/// How long a request to the worker waits for its answer (each of a test's and a simulator's):
/// one that the local dev proxy never answers fails instead of holding its caller forever. An
/// idle machine answers in milliseconds; `make test` runs its four suites at once on two cores,
/// and on a loaded host one request has taken more than 30 s, so this is [`patient`] too.
pub const TIMEOUT: Duration = Duration::from_secs(30 * PATIENCE as u64);

/// How many times its written bound a wait for a condition allows, in the tests and the
/// simulator ([`patient`]). Bounds are written as an idle machine needs them; a loaded two-core
/// host running all of `make test` at once has been measured an order of magnitude slower. A
/// bound is a guard against a hang, never a claim about speed: speed is measured by `make bench`.
pub const PATIENCE: u32 = 4;

/// The time a wait written with `bound` allows: [`PATIENCE`] times it.
pub fn patient(bound: Duration) -> Duration {
    bound * PATIENCE
}

impl Client {
    /// A client with keep-alive connections and a [`TIMEOUT`].
    pub fn new(base: &str) -> Self {
        Self::with_timeout(base, TIMEOUT)
    }

    /// A client whose requests each wait at most `timeout`.
    pub fn with_timeout(base: &str, timeout: Duration) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(timeout).max_idle_connections_per_host(64).build();
        Self { base: base.trim_end_matches('/').to_owned(), agent }
    }

    /// A request with a bearer token and an optional JSON body; sent again when `wrangler dev`'s
    /// proxy dropped it ([`dropped_by_dev_proxy`]). A POST or PATCH goes with an `Idempotency-Key`
    /// of its own (every one of the API's takes one), so it is sent again as [`Client::call_keyed`]
    /// sends: a write closed unanswered is then safe to repeat.
    pub fn call(&self, method: &str, path: &str, token: &str, body: Option<&Value>) -> Answer {
        if writes(method) {
            return self.keyed(method, path, token, body, &crate::random_hex());
        }
        let send = || {
            let req = self
                .agent
                .request(method, &format!("{}{path}", self.base))
                .set("authorization", &format!("Bearer {token}"));
            Answer::from_result(match body {
                Some(json) => req.send_json(json.clone()),
                None => req.call(),
            })
        };
        again_if_dropped(send)
    }

    /// A GET, asked again (at most five more times, 500 ms apart) while it got no answer or a
    /// 5xx: a read changes nothing, so a loaded machine's dropped or timed-out request says
    /// nothing about what the worker stored.
    pub fn read(&self, path: &str, token: &str) -> Answer {
        let lost = |a: &Answer| unanswered(a) || a.status >= 500;
        sent_again(|| self.call("GET", path, token, None), 5, Duration::from_millis(500), lost)
    }

    /// [`Client::call`] with an `Idempotency-Key`, asked again (at most three more times, half a
    /// second apart) while [`keyed_again`] says so: what a client does with a keyed request, which
    /// the worker then runs at most once (a 503 it kept is answered again as it was).
    pub fn call_keyed(&self, method: &str, path: &str, token: &str, body: &Value, key: &str) -> Answer {
        self.keyed(method, path, token, Some(body), key)
    }

    fn keyed(&self, method: &str, path: &str, token: &str, body: Option<&Value>, key: &str) -> Answer {
        let send = || {
            let req = self
                .agent
                .request(method, &format!("{}{path}", self.base))
                .set("authorization", &format!("Bearer {token}"))
                .set("idempotency-key", key);
            Answer::from_result(match body {
                Some(json) => req.send_json(json.clone()),
                None => req.call(),
            })
        };
        sent_again(send, 3, Duration::from_millis(500), keyed_again)
    }

    /// A POST of raw bytes with headers; sent again when `wrangler dev`'s proxy dropped it.
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let send = || {
            let mut req = self.agent.post(&format!("{}{path}", self.base));
            for (name, value) in headers {
                req = req.set(name, value);
            }
            Answer::from_result(req.send_bytes(body))
        };
        again_if_dropped(send)
    }

    /// Every item of a paginated list (`{data, next_cursor}`), following cursors.
    pub fn all(&self, path: &str, token: &str) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let joiner = if path.contains('?') { '&' } else { '?' };
        loop {
            let page_path = match &cursor {
                Some(c) => format!("{path}{joiner}limit=100&cursor={c}"),
                None => format!("{path}{joiner}limit=100"),
            };
            let answer = self.call("GET", &page_path, token, None);
            if answer.status != 200 {
                return Err(format!("GET {page_path}: {} {}", answer.status, answer.body));
            }
            let page = answer.json();
            items.extend(page["data"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(items),
            }
        }
    }
}

/// Whether `wrangler dev`'s proxy could not reach the worker: its own fetch to workerd failed
/// (under load, now and then, several requests at once), and it answered 503 "restarted
/// mid-request" (its words whatever the cause), asking the client to send the request again; it
/// does so itself only for GET and HEAD. No deployed worker answers this.
pub fn dropped_by_dev_proxy(answer: &Answer) -> bool {
    answer.status == 503 && answer.body.contains("restarted mid-request")
}

/// Whether no HTTP answer came back at all (status 0): the connection was closed unanswered
/// (wrangler's proxy does so now and then under load: "Unexpected EOF", a reset) or timed out.
/// The request may have run, so only a request that is safe to repeat is sent again after it:
/// a read, a carrier's delivery (stored once however often it comes), a keyed write.
pub fn unanswered(answer: &Answer) -> bool {
    answer.status == 0
}

/// Whether a request with an `Idempotency-Key` is to be sent again with the same key: it got no
/// answer, or a 503 (the worker keeps a 5xx under the key, so a repeat answers it again), or its
/// first sending still runs (409 `idempotency_key_in_use`).
pub fn keyed_again(answer: &Answer) -> bool {
    let in_use = answer.status == 409 && answer.body.contains("idempotency_key_in_use");
    unanswered(answer) || answer.status == 503 || in_use
}

/// Whether `method` writes: the API's POST and PATCH each take an `Idempotency-Key`.
pub fn writes(method: &str) -> bool {
    method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH")
}

/// Sends with `send`, and again (at most three more times, 200 ms apart) while the dev proxy
/// dropped it. The worker logged none of the requests seen dropped; were one to have reached it
/// after all, its effect would show twice, which every count of this crate and the tests flags.
fn again_if_dropped(send: impl Fn() -> Answer) -> Answer {
    sent_again(send, 3, Duration::from_millis(200), dropped_by_dev_proxy)
}

/// Sends a request, and again (at most `tries` more times, `pause` apart) while `again` says its
/// answer is one to ask again: a client's retry of a request that is safe to repeat.
pub fn sent_again(send: impl Fn() -> Answer, tries: usize, pause: Duration, again: impl Fn(&Answer) -> bool) -> Answer {
    let mut answer = send();
    for _ in 0..tries {
        if !again(&answer) {
            break;
        }
        std::thread::sleep(pause);
        answer = send();
    }
    answer
}
