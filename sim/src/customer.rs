//! A customer webhook endpoint on loopback: records every delivery, answers as scripted per
//! path (fail, answer 410, redirect elsewhere with a `Location`, stall before answering, hang,
//! close the connection unanswered, flap between failing and answering, ...), and otherwise
//! answers 200. Each connection is served on its own thread from the moment
//! it is accepted, so a stalled or hung path keeps no other waiting, and the time a request
//! arrives is the time it came (no pool of threads to wait for).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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
    /// When it arrived, to measure time to webhook.
    pub arrived: Instant,
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
    /// What a path answers as its body (none: an empty one).
    bodies: HashMap<String, String>,
    stalls: HashMap<String, VecDeque<Duration>>,
    /// Paths whose requests hang, unanswered, until the path is let go.
    hung: HashSet<String>,
    /// Paths whose connections are closed on each request, with no answer.
    resets: HashSet<String>,
    /// Paths that alternate, every period, between answering 500 and answering as scripted.
    flaps: HashMap<String, (Instant, Duration)>,
    /// Paths that answer 500 to every request whose body holds each of these texts.
    refusals: HashMap<String, Vec<String>>,
    /// Paths that refuse each event (by the body's `id`) at first: how many more times each
    /// event seen there is refused.
    first_refusals: HashMap<String, HashMap<String, u32>>,
}

/// One request as it came off a connection.
struct Request {
    path: String,
    headers: HashMap<String, String>,
    body: String,
}

/// The most a request head may take.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Reads the next request of a connection; `None` at its end (or on anything unreadable).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if reader.read_until(b'\n', &mut head).ok()? == 0 || head.len() > MAX_HEAD_BYTES {
            return None;
        }
    }
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut fields);
    if !parsed.parse(&head).ok()?.is_complete() {
        return None;
    }
    let path = parsed.path?.to_owned();
    let headers: HashMap<String, String> = parsed
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Serves one connection: each request recorded and answered as scripted, in turn, until the
/// sender closes it (or gave up on a stalled answer).
fn serve(stream: TcpStream, shared: &Shared) {
    let Ok(writer) = stream.try_clone() else { return };
    let mut writer = writer;
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader) {
        let close = request.headers.get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let Some((status, extra, body)) = answer(request, shared) else {
            // Dropped: the connection closes with no answer.
            let _ = writer.shutdown(std::net::Shutdown::Both);
            return;
        };
        let mut response = format!("HTTP/1.1 {status} {}\r\ncontent-length: {}\r\n", reason(status), body.len());
        for (name, value) in extra {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(&body);
        if writer.write_all(response.as_bytes()).is_err() || close {
            return;
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200..=299 => "OK",
        300..=399 => "Redirect",
        410 => "Gone",
        400..=499 => "Client Error",
        _ => "Server Error",
    }
}

/// An answer: its status, extra headers and body.
type Reply = (u16, Vec<(String, String)>, String);

/// Records one request and decides its answer as scripted for its path: the status and extra
/// headers and body, after any stall or hang; `None` to close the connection without one.
fn answer(request: Request, shared: &Shared) -> Option<Reply> {
    let (state, let_go) = (&shared.0, &shared.1);
    let Request { path, headers, body } = request;
    let (status, extra, reply, stall) = {
        let mut s = lock(state);
        let arrived = Instant::now();
        let scripted = s.scripts.get_mut(&path).and_then(VecDeque::pop_front);
        let mut status = scripted.or_else(|| s.always.get(&path).copied()).unwrap_or(200);
        if s.refusals.get(&path).is_some_and(|texts| texts.iter().all(|t| body.contains(t.as_str()))) {
            status = 500;
        }
        if let Some(events) = s.first_refusals.get_mut(&path) {
            let id = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|b| b["id"].as_str().map(str::to_owned))
                .unwrap_or_default();
            let seen = u32::try_from(events.len()).unwrap_or(0);
            let left = events.entry(id).or_insert(1 + seen % 2);
            if *left > 0 {
                *left -= 1;
                status = 500;
            }
        }
        if let Some((since, period)) = s.flaps.get(&path) {
            let periods = arrived.duration_since(*since).as_millis() / period.as_millis().max(1);
            if periods % 2 == 0 {
                status = 500;
            }
        }
        let extra = s.headers.get(&path).cloned().unwrap_or_default();
        let reply = s.bodies.get(&path).cloned().unwrap_or_default();
        let stall = s.stalls.get_mut(&path).and_then(VecDeque::pop_front);
        let received_at = crate::unix_now();
        let reset = s.resets.contains(&path);
        s.received.push(Received {
            path: path.clone(),
            headers,
            body,
            answered: status,
            stalled: stall,
            received_at,
            arrived,
        });
        if reset {
            return None;
        }
        (status, extra, reply, stall)
    };
    if let Some(stall) = stall {
        thread::sleep(stall);
    }
    let mut s = lock(state);
    while s.hung.contains(&path) {
        s = let_go.wait(s).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    Some((status, extra, reply))
}

/// The state, and the signal that a hung path was let go.
type Shared = (Mutex<State>, Condvar);

/// A running customer endpoint.
pub struct CustomerEndpoint {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    state: Arc<Shared>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CustomerEndpoint {
    /// Starts the endpoint on a free loopback port; it serves until the process exits.
    pub fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = Arc::clone(&shared);
                thread::spawn(move || serve(stream, &shared));
            }
        });
        Ok(Self { base: format!("http://127.0.0.1:{port}"), state })
    }

    /// Answers `statuses` in order to the next requests on `path`, then 200.
    pub fn script(&self, path: &str, statuses: &[u16]) {
        lock(&self.state.0).scripts.insert(path.to_owned(), statuses.iter().copied().collect());
    }

    /// Answers `status` to every request on `path`.
    pub fn always(&self, path: &str, status: u16) {
        lock(&self.state.0).always.insert(path.to_owned(), status);
    }

    /// Answers `status` with these extra headers to every request on `path` (a redirect with
    /// its `Location`, a `Retry-After`, ...).
    pub fn always_with(&self, path: &str, status: u16, headers: &[(&str, &str)]) {
        let mut state = lock(&self.state.0);
        state.always.insert(path.to_owned(), status);
        state.headers.insert(path.to_owned(), headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    }

    /// Answers `status` with `body` to every request on `path`.
    pub fn always_with_body(&self, path: &str, status: u16, body: &str) {
        let mut state = lock(&self.state.0);
        state.always.insert(path.to_owned(), status);
        state.bodies.insert(path.to_owned(), body.to_owned());
    }

    /// The next `times` requests on `path` wait `stall` before they are answered (with whatever
    /// status is scripted for them), as an endpoint that hangs does.
    pub fn stall(&self, path: &str, stall: Duration, times: usize) {
        lock(&self.state.0).stalls.insert(path.to_owned(), std::iter::repeat_n(stall, times).collect());
    }

    /// Every request on `path` from now on hangs, unanswered, until [`Self::let_go`] (the sender
    /// gives up first, as on an endpoint that accepts connections and never answers).
    pub fn hang(&self, path: &str) {
        lock(&self.state.0).hung.insert(path.to_owned());
    }

    /// Requests on `path` are answered again, those hanging now too.
    pub fn let_go(&self, path: &str) {
        lock(&self.state.0).hung.remove(path);
        self.state.1.notify_all();
    }

    /// Every request on `path` has its connection closed with no answer (recorded all the same).
    pub fn reset(&self, path: &str) {
        lock(&self.state.0).resets.insert(path.to_owned());
    }

    /// `path` flaps from now on: it answers 500 for `period`, then as scripted (200 unless told
    /// otherwise) for `period`, and so on.
    pub fn flap(&self, path: &str, period: Duration) {
        lock(&self.state.0).flaps.insert(path.to_owned(), (Instant::now(), period));
    }

    /// `path` flaps with each event from now on: every event it receives (told apart by the
    /// body's `id`) is answered 500 at first, once or twice (the first event once, the second
    /// twice, and so on), then as scripted. Every event's retries come, and none is exhausted,
    /// whenever its attempts happen to come.
    pub fn refuse_each_event_at_first(&self, path: &str) {
        lock(&self.state.0).first_refusals.insert(path.to_owned(), HashMap::new());
    }

    /// Every request on `path` whose body holds each of `texts` is answered 500 from now on
    /// (one event of one resource, say), until [`Self::accept_all`].
    pub fn refuse_bodies_with(&self, path: &str, texts: &[&str]) {
        lock(&self.state.0).refusals.insert(path.to_owned(), texts.iter().map(|t| t.to_string()).collect());
    }

    /// Ends [`Self::refuse_bodies_with`] on `path`.
    pub fn accept_all(&self, path: &str) {
        lock(&self.state.0).refusals.remove(path);
    }

    /// Everything received, on every path, in order.
    pub fn all(&self) -> Vec<Received> {
        lock(&self.state.0).received.clone()
    }

    /// Everything received on `path`, in order.
    pub fn received(&self, path: &str) -> Vec<Received> {
        lock(&self.state.0).received.iter().filter(|r| r.path == path).cloned().collect()
    }
}
