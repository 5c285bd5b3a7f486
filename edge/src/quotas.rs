//! Cloudflare's documented limits that a single call to a binding can cross (docs/deploy.md,
//! "Limits", names each with its source): the constants the producers and the store bound their
//! calls by, and the guard around those calls.
//!
//! The local stack (workerd with miniflare's D1 and Queues) enforces only some of them, so in the
//! test build (`fault-injection`) the guard checks every queue send and every statement against
//! them and refuses the call that would cross one, with a `{"limit_crossed": ...}` log line that
//! fails the end-to-end run. In a deployed worker the guard costs nothing: Cloudflare refuses
//! such a call itself.
//!
//! The limits of a whole invocation (a request, a queue batch, a cron tick, a Durable Object's
//! request or alarm) are counted per invocation: each entry point runs inside [`invocation`],
//! and work it leaves running after its response or ack (`waitUntil`) inside [`beside`], which
//! counts toward the same invocation. Every binding call counts as a subrequest ([`subrequest`],
//! [`queue_send`]); every D1 statement as a query ([`statement`]). The linear memory's size is
//! checked each time an invocation's work yields.

use crate::error::EdgeError;

/// Messages in one queue `sendBatch`.
pub const QUEUE_BATCH_MESSAGES: usize = 100;
/// Bytes in one queue `sendBatch`, all messages together (Queues counts a KB as 1,000 bytes).
pub const QUEUE_BATCH_BYTES: usize = 256_000;
/// Bytes in one queue message.
pub const QUEUE_MESSAGE_BYTES: usize = 128_000;
/// The bytes of its own metadata Queues counts toward each message's size.
pub const QUEUE_MESSAGE_OVERHEAD: usize = 100;
/// Bound parameters in one D1 statement.
pub const D1_BOUND_PARAMETERS: usize = 100;
/// Bytes of SQL in one D1 statement.
pub const D1_STATEMENT_BYTES: usize = 100_000;
/// D1 queries per invocation (each statement of a batch counted as one).
pub const D1_QUERIES_PER_INVOCATION: usize = 1_000;
/// Milliseconds one D1 statement may run (D1 stops it then).
pub const D1_STATEMENT_MILLIS: usize = 30_000;
/// Subrequests per invocation: fetches and calls to D1, Queues, R2 and Durable Objects.
pub const SUBREQUESTS_PER_INVOCATION: usize = 10_000;
/// Milliseconds work started with `waitUntil` may run after the response or ack.
pub const WAIT_UNTIL_MILLIS: i64 = 30_000;
/// Bytes of memory per isolate (the linear memory is part of it).
pub const ISOLATE_MEMORY_BYTES: usize = 128 * 1024 * 1024;

/// The size of this instance's linear memory (it grows and never shrinks): the part of the
/// isolate's memory the worker's own code holds.
pub fn wasm_memory_bytes() -> usize {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size::<0>() * 65_536;
    #[cfg(not(target_arch = "wasm32"))]
    0
}

/// The runtime's clock, Unix milliseconds (the guard reads it itself: it sits under every other
/// module).
#[cfg(feature = "fault-injection")]
fn now_millis() -> i64 {
    worker::Date::now().as_millis() as i64
}

/// The limits the report names, with their values.
#[cfg(feature = "fault-injection")]
const LIMITS: [(&str, usize); 10] = [
    ("messages per sendBatch", QUEUE_BATCH_MESSAGES),
    ("bytes per sendBatch", QUEUE_BATCH_BYTES),
    ("bytes per message", QUEUE_MESSAGE_BYTES),
    ("bound parameters per statement", D1_BOUND_PARAMETERS),
    ("bytes per statement", D1_STATEMENT_BYTES),
    ("D1 queries per invocation", D1_QUERIES_PER_INVOCATION),
    ("milliseconds of one D1 statement", D1_STATEMENT_MILLIS),
    ("subrequests per invocation", SUBREQUESTS_PER_INVOCATION),
    ("milliseconds of waitUntil work after the response", WAIT_UNTIL_MILLIS as usize),
    ("bytes of wasm memory", ISOLATE_MEMORY_BYTES),
];

/// The largest value each guarded limit has seen in this isolate, with the limit and the kind of
/// invocation that saw it, and each kind of invocation's most queries and subrequests (the test
/// build's report, `POST /__e2e/quotas`).
#[cfg(feature = "fault-injection")]
pub fn highest() -> serde_json::Value {
    HIGHEST.with(|seen| {
        let seen = seen.borrow();
        let report: serde_json::Map<String, serde_json::Value> = LIMITS
            .iter()
            .map(|(name, limit)| {
                let (max, at) = seen.get(name).cloned().unwrap_or_default();
                ((*name).to_owned(), serde_json::json!({"max": max, "limit": limit, "at": &*at}))
            })
            .collect();
        let paths: serde_json::Map<String, serde_json::Value> = PATHS.with(|paths| {
            paths.borrow().iter().map(|(kind, most)| (kind.to_string(), serde_json::json!(most))).collect()
        });
        serde_json::json!({"limits": report, "paths": paths})
    })
}

#[cfg(feature = "fault-injection")]
thread_local! {
    static HIGHEST: std::cell::RefCell<std::collections::BTreeMap<&'static str, (usize, std::rc::Rc<str>)>> =
        std::cell::RefCell::default();
    /// The most D1 queries and subrequests each kind of invocation made.
    static PATHS: std::cell::RefCell<std::collections::BTreeMap<std::rc::Rc<str>, [usize; 2]>> =
        std::cell::RefCell::default();
    /// Whether the linear memory's crossing has been logged.
    static MEMORY_CROSSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The head of the last D1 statement prepared (its buffer reused), named with a late D1 call.
    static LAST_STATEMENT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    /// The invocation whose work is running now (set while its future is polled).
    static CURRENT: std::cell::RefCell<Option<std::rc::Rc<Invocation>>> = const { std::cell::RefCell::new(None) };
}

/// Keeps what `invocation` has made so far as its kind's most, where it is.
#[cfg(feature = "fault-injection")]
fn path_saw(invocation: &Invocation) {
    if invocation.scaffolding.get() {
        return;
    }
    PATHS.with(|paths| {
        let mut paths = paths.borrow_mut();
        let most = paths.entry(std::rc::Rc::clone(&invocation.kind)).or_default();
        most[0] = most[0].max(invocation.queries.get());
        most[1] = most[1].max(invocation.subrequests.get());
    });
}

/// Keeps `value` as the highest `limit` has seen, if it is, with where it was seen: the highest
/// let through (a crossing is logged on its own line).
#[cfg(feature = "fault-injection")]
fn saw(limit: &'static str, value: usize) {
    saw_at(limit, value, || current(|inv| std::rc::Rc::clone(&inv.kind)).unwrap_or_else(|| OUTSIDE.into()));
}

/// [`saw`], with where it was seen told by `at` (called only for a new highest).
#[cfg(feature = "fault-injection")]
fn saw_at(limit: &'static str, value: usize, at: impl FnOnce() -> std::rc::Rc<str>) {
    if current(|inv| inv.scaffolding.get()).unwrap_or(false) {
        return;
    }
    HIGHEST.with(|seen| {
        let mut seen = seen.borrow_mut();
        let max = seen.entry(limit).or_default();
        if value > max.0 {
            *max = (value, at());
        }
    });
}

/// How much of a D1 statement's text names it in the report.
#[cfg(feature = "fault-injection")]
const STATEMENT_HEAD_CHARS: usize = 60;

/// The kind named for binding calls made outside any invocation's work.
#[cfg(feature = "fault-injection")]
const OUTSIDE: &str = "outside any invocation";

/// What one invocation has used so far.
#[cfg(feature = "fault-injection")]
#[derive(Debug)]
struct Invocation {
    /// What started it (`request /v1`, `queue exactly-jobs`, `cron`, ...).
    kind: std::rc::Rc<str>,
    queries: std::cell::Cell<usize>,
    subrequests: std::cell::Cell<usize>,
    /// Its longest D1 statement, by D1's measure (milliseconds).
    longest_statement: std::cell::Cell<f64>,
    /// When it answered or acked (Unix milliseconds), once it has.
    ended: std::cell::Cell<Option<i64>>,
    /// A test-only route's: guarded, but left out of the report of what the product used.
    scaffolding: std::cell::Cell<bool>,
}

#[cfg(feature = "fault-injection")]
impl Invocation {
    fn new(kind: &str) -> std::rc::Rc<Self> {
        let zero = std::cell::Cell::new(0);
        std::rc::Rc::new(Self {
            kind: kind.into(),
            queries: zero.clone(),
            subrequests: zero,
            longest_statement: std::cell::Cell::new(0.0),
            ended: std::cell::Cell::new(None),
            scaffolding: std::cell::Cell::new(false),
        })
    }
}

/// Runs `f` on the invocation whose work is running now, if any.
#[cfg(feature = "fault-injection")]
fn current<T>(f: impl FnOnce(&Invocation) -> T) -> Option<T> {
    CURRENT.with(|c| c.borrow().as_deref().map(f))
}

/// Marks the invocation running now as a test-only route's (`/__e2e/...`): its calls are
/// guarded as any, but the report of the highest values ([`highest`]) is of the product's own.
#[cfg(feature = "fault-injection")]
pub fn scaffolding() {
    let _ = current(|inv| inv.scaffolding.set(true));
}

/// A future whose every poll counts toward one invocation.
#[cfg(feature = "fault-injection")]
pub struct Within<F> {
    invocation: std::rc::Rc<Invocation>,
    inner: std::pin::Pin<Box<F>>,
    /// The invocation's own handler (its end is the response or ack), not work beside it.
    main: bool,
}

#[cfg(feature = "fault-injection")]
impl<F: std::future::Future> std::future::Future for Within<F> {
    type Output = F::Output;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let previous = CURRENT.with(|c| c.replace(Some(std::rc::Rc::clone(&this.invocation))));
        let polled = this.inner.as_mut().poll(cx);
        path_saw(&this.invocation);
        let memory = wasm_memory_bytes();
        saw("bytes of wasm memory", memory);
        // The linear memory never shrinks: its crossing is logged once per isolate.
        let mut over = (memory > ISOLATE_MEMORY_BYTES && !MEMORY_CROSSED.replace(true)).then_some((
            "wasm",
            "bytes of wasm memory",
            memory,
            ISOLATE_MEMORY_BYTES,
        ));
        if polled.is_ready() {
            if this.main {
                this.invocation.ended.set(Some(now_millis()));
            } else {
                over = over.or_else(|| after_end(&this.invocation, || "waitUntil".to_owned()));
            }
        }
        if let Some((binding, limit, value, max)) = over {
            let _ = crossed(binding, limit, value, max);
        }
        CURRENT.with(|c| *c.borrow_mut() = previous);
        polled
    }
}

/// Runs `f` as one invocation of the kind `kind` names: every binding call made while it runs,
/// and by the work it starts [`beside`] itself, counts toward it.
#[cfg(feature = "fault-injection")]
pub fn invocation<F: std::future::Future>(kind: impl FnOnce() -> String, f: F) -> Within<F> {
    Within { invocation: Invocation::new(&kind()), inner: Box::pin(f), main: true }
}

/// A deployed worker counts nothing (and never names the kind).
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn invocation<F: std::future::Future>(_kind: impl FnOnce() -> String, f: F) -> F {
    f
}

/// Work started with `waitUntil` by the invocation running now: it counts toward it, and must
/// finish within [`WAIT_UNTIL_MILLIS`] of its response or ack.
#[cfg(feature = "fault-injection")]
pub fn beside<F: std::future::Future>(f: F) -> Within<F> {
    let invocation = CURRENT.with(|c| c.borrow().clone()).unwrap_or_else(|| Invocation::new(OUTSIDE));
    Within { invocation, inner: Box::pin(f), main: false }
}

/// A deployed worker counts nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn beside<F: std::future::Future>(f: F) -> F {
    f
}

/// How long after its invocation's response work beside it runs, when that is past the limit.
/// `call` names the call made then (`waitUntil`: the work's end), read only for a new highest.
#[cfg(feature = "fault-injection")]
fn after_end(invocation: &Invocation, call: impl Fn() -> String) -> Option<(&'static str, &'static str, usize, usize)> {
    let ended = invocation.ended.get()?;
    let after = usize::try_from(now_millis() - ended).unwrap_or(0);
    saw_at("milliseconds of waitUntil work after the response", after, || {
        format!("{}: {}", invocation.kind, call()).into()
    });
    let limit = WAIT_UNTIL_MILLIS as usize;
    (after > limit).then_some(("waitUntil", "milliseconds of waitUntil work after the response", after, limit))
}

/// Counts one call to a binding or one fetch (`binding` names it) toward the invocation running
/// now, and refuses it past the limit on subrequests, or when it comes from work beside an
/// invocation that answered more than [`WAIT_UNTIL_MILLIS`] ago (the runtime would have cancelled
/// that work).
#[cfg(feature = "fault-injection")]
pub fn subrequest(binding: &str) -> Result<(), EdgeError> {
    subrequest_called(binding, || binding.to_owned())
}

/// [`subrequest`] for a call to D1, named by the head of the last statement prepared.
#[cfg(feature = "fault-injection")]
pub fn d1_call() -> Result<(), EdgeError> {
    subrequest_called("d1", || {
        LAST_STATEMENT.with(|last| format!("d1 {}", last.borrow().split_whitespace().collect::<Vec<_>>().join(" ")))
    })
}

/// [`subrequest`], with `call` naming the call in a report or a crossing's line (made only for
/// those).
#[cfg(feature = "fault-injection")]
fn subrequest_called(binding: &str, call: impl Fn() -> String) -> Result<(), EdgeError> {
    let Some((count, late)) = current(|inv| {
        inv.subrequests.set(inv.subrequests.get() + 1);
        (inv.subrequests.get(), after_end(inv, &call))
    }) else {
        return Ok(());
    };
    if count > SUBREQUESTS_PER_INVOCATION {
        return crossed(binding, "subrequests per invocation", count, SUBREQUESTS_PER_INVOCATION);
    }
    saw("subrequests per invocation", count);
    match late {
        Some((_, limit, value, max)) => crossed(&call(), limit, value, max),
        None => Ok(()),
    }
}

/// A deployed worker counts nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn subrequest(_binding: &str) -> Result<(), EdgeError> {
    Ok(())
}

/// A deployed worker counts nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn d1_call() -> Result<(), EdgeError> {
    Ok(())
}

/// Checks one queue send of `messages` (their JSON, with the queue's metadata) against the
/// queue's limits (a `send` is a batch of one), and counts it as a subrequest.
#[cfg(feature = "fault-injection")]
pub fn queue_send<T: serde::Serialize>(queue: &str, messages: &[T]) -> Result<(), EdgeError> {
    let sizes: Vec<usize> = messages
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |bytes| bytes.len()) + QUEUE_MESSAGE_OVERHEAD)
        .collect();
    let total: usize = sizes.iter().sum();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    saw("messages per sendBatch", messages.len());
    saw("bytes per sendBatch", total);
    saw("bytes per message", largest);
    if messages.len() > QUEUE_BATCH_MESSAGES {
        return crossed(queue, "messages per sendBatch", messages.len(), QUEUE_BATCH_MESSAGES);
    }
    if total > QUEUE_BATCH_BYTES {
        return crossed(queue, "bytes per sendBatch", total, QUEUE_BATCH_BYTES);
    }
    if largest > QUEUE_MESSAGE_BYTES {
        return crossed(queue, "bytes per message", largest, QUEUE_MESSAGE_BYTES);
    }
    subrequest(queue)
}

/// In a deployed worker the queue itself refuses a send over its limits.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn queue_send<T>(_queue: &str, _messages: &[T]) -> Result<(), EdgeError> {
    Ok(())
}

/// Checks one D1 statement (its SQL and how many parameters it binds) against D1's limits, and
/// counts it as a query of the invocation running now.
#[cfg(feature = "fault-injection")]
pub fn statement(sql: &str, parameters: usize) -> Result<(), EdgeError> {
    saw("bound parameters per statement", parameters);
    saw("bytes per statement", sql.len());
    LAST_STATEMENT.with(|last| {
        let mut last = last.borrow_mut();
        last.clear();
        let sql = sql.trim_start();
        last.push_str(
            sql.get(..sql.char_indices().nth(STATEMENT_HEAD_CHARS).map_or(sql.len(), |(i, _)| i)).unwrap_or(sql),
        );
    });
    if parameters > D1_BOUND_PARAMETERS {
        return crossed("d1", "bound parameters per statement", parameters, D1_BOUND_PARAMETERS);
    }
    if sql.len() > D1_STATEMENT_BYTES {
        return crossed("d1", "bytes per statement", sql.len(), D1_STATEMENT_BYTES);
    }
    let queries = current(|inv| {
        inv.queries.set(inv.queries.get() + 1);
        inv.queries.get()
    });
    if let Some(queries) = queries {
        if queries > D1_QUERIES_PER_INVOCATION {
            return crossed("d1", "D1 queries per invocation", queries, D1_QUERIES_PER_INVOCATION);
        }
        saw("D1 queries per invocation", queries);
    }
    Ok(())
}

/// In a deployed worker D1 itself refuses a statement over its limits.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn statement(_sql: &str, _parameters: usize) -> Result<(), EdgeError> {
    Ok(())
}

/// Checks how long one D1 statement ran by D1's own measure (`duration` reads its result's
/// `meta.duration`, in milliseconds): a statement past [`D1_STATEMENT_MILLIS`] is logged as a
/// crossing (D1 has already run or stopped it).
#[cfg(feature = "fault-injection")]
pub fn statement_took(duration: impl FnOnce() -> f64) {
    let duration = duration();
    let _ = current(|inv| inv.longest_statement.set(inv.longest_statement.get().max(duration)));
    let millis = duration.ceil().max(0.0) as usize;
    saw("milliseconds of one D1 statement", millis);
    if millis > D1_STATEMENT_MILLIS {
        let _ = crossed("d1", "milliseconds of one D1 statement", millis, D1_STATEMENT_MILLIS);
    }
}

/// The longest D1 statement of the invocation running now, in milliseconds by D1's measure.
#[cfg(feature = "fault-injection")]
pub fn longest_statement() -> f64 {
    current(|inv| inv.longest_statement.get()).unwrap_or(0.0)
}

/// A deployed worker reads nothing.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn statement_took(_duration: impl FnOnce() -> f64) {}

/// Logs the crossing (the line the end-to-end run looks for, with the invocation's kind) and
/// refuses the call.
#[cfg(feature = "fault-injection")]
fn crossed(binding: &str, limit: &str, value: usize, max: usize) -> Result<(), EdgeError> {
    let at = current(|inv| inv.kind.to_string());
    let line = serde_json::json!({"limit_crossed": limit, "binding": binding, "value": value, "limit": max, "at": at});
    worker::console_error!("{line}");
    Err(EdgeError::platform("limit", format!("{binding}: {value} {limit}, over Cloudflare's {max}")))
}
