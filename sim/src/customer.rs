//! A customer webhook endpoint on loopback: records every delivery, answers as scripted per
//! path (fail, answer 410, redirect elsewhere with a `Location`, stall before answering, ...),
//! and otherwise answers 200. Each request is served on its own thread, so a stalled path keeps
//! no other waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One delivery the endpoint received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The request path.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: HashMap<String, String>,
    /// The raw body.
    pub body: String,
    /// The status the endpoint answered (or would have: a stalled answer may come after the
    /// sender gave up).
    pub answered: u16,
    /// How long the endpoint waited before answering, if it was told to stall.
    pub stalled: Option<Duration>,
    /// When it arrived (Unix seconds), to verify its timestamp as the receiver did then.
    pub received_at: i64,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    scripts: HashMap<String, VecDeque<u16>>,
    always: HashMap<String, u16>,
    headers: HashMap<String, Vec<(String, String)>>,
    stalls: HashMap<String, VecDeque<Duration>>,
}

/// Records one request and answers it as scripted for its path.
fn answer(mut request: tiny_http::Request, state: &Mutex<State>) {
    let mut body = String::new();
    let _ = request.as_reader().read_to_string(&mut body);
    let path = request.url().to_owned();
    let headers = request
        .headers()
        .iter()
        .map(|h| (h.field.as_str().as_str().to_ascii_lowercase(), h.value.as_str().to_owned()))
        .collect();
    let (status, extra, stall) = {
        let mut s = lock(state);
        let scripted = s.scripts.get_mut(&path).and_then(VecDeque::pop_front);
        let status = scripted.or_else(|| s.always.get(&path).copied()).unwrap_or(200);
        let extra = s.headers.get(&path).cloned().unwrap_or_default();
        let stall = s.stalls.get_mut(&path).and_then(VecDeque::pop_front);
        let received_at = crate::unix_now();
        s.received.push(Received { path, headers, body, answered: status, stalled: stall, received_at });
        (status, extra, stall)
    };
    if let Some(stall) = stall {
        thread::sleep(stall);
    }
    let mut response = tiny_http::Response::from_string("").with_status_code(status);
    for (name, value) in extra {
        if let Ok(header) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response = response.with_header(header);
        }
    }
    // A sender that gave up on a stalled answer has closed the connection: nothing to do.
    let _ = request.respond(response);
}

/// A running customer endpoint.
pub struct CustomerEndpoint {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CustomerEndpoint {
    /// Starts the endpoint on a free loopback port; it serves until the process exits.
    pub fn start() -> std::io::Result<Self> {
        let server = tiny_http::Server::http("127.0.0.1:0").map_err(std::io::Error::other)?;
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or_default();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        thread::spawn(move || {
            for request in server.incoming_requests() {
                let shared = Arc::clone(&shared);
                thread::spawn(move || answer(request, &shared));
            }
        });
        Ok(Self { base: format!("http://127.0.0.1:{port}"), state })
    }

    /// Answers `statuses` in order to the next requests on `path`, then 200.
    pub fn script(&self, path: &str, statuses: &[u16]) {
        lock(&self.state).scripts.insert(path.to_owned(), statuses.iter().copied().collect());
    }

    /// Answers `status` to every request on `path`.
    pub fn always(&self, path: &str, status: u16) {
        lock(&self.state).always.insert(path.to_owned(), status);
    }

    /// Answers `status` with these extra headers to every request on `path` (a redirect with
    /// its `Location`, a `Retry-After`, ...).
    pub fn always_with(&self, path: &str, status: u16, headers: &[(&str, &str)]) {
        let mut state = lock(&self.state);
        state.always.insert(path.to_owned(), status);
        state.headers.insert(path.to_owned(), headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    }

    /// The next `times` requests on `path` wait `stall` before they are answered (with whatever
    /// status is scripted for them), as an endpoint that hangs does.
    pub fn stall(&self, path: &str, stall: Duration, times: usize) {
        lock(&self.state).stalls.insert(path.to_owned(), std::iter::repeat_n(stall, times).collect());
    }

    /// Everything received, on every path, in order.
    pub fn all(&self) -> Vec<Received> {
        lock(&self.state).received.clone()
    }

    /// Everything received on `path`, in order.
    pub fn received(&self, path: &str) -> Vec<Received> {
        lock(&self.state).received.iter().filter(|r| r.path == path).cloned().collect()
    }
}
