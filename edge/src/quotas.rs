//! Cloudflare's documented limits that a single call to a binding can cross (docs/deploy.md,
//! "Limits", names each with its source): the constants the producers and the store bound their
//! calls by, and the guard around those calls.
//!
//! The local stack (workerd with miniflare's D1 and Queues) enforces only some of them, so in the
//! test build (`fault-injection`) the guard checks every queue send and every statement against
//! them and refuses the call that would cross one, with a `{"limit_crossed": ...}` log line that
//! fails the end-to-end run. In a deployed worker the guard costs nothing: Cloudflare refuses
//! such a call itself.

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

/// The largest value each guarded limit has seen in this isolate, with the limit (the test
/// build's report, `POST /__e2e/quotas`).
#[cfg(feature = "fault-injection")]
pub fn highest() -> serde_json::Value {
    HIGHEST.with(|seen| {
        let seen = seen.borrow();
        let limits = [
            ("messages per sendBatch", QUEUE_BATCH_MESSAGES),
            ("bytes per sendBatch", QUEUE_BATCH_BYTES),
            ("bytes per message", QUEUE_MESSAGE_BYTES),
            ("bound parameters per statement", D1_BOUND_PARAMETERS),
            ("bytes per statement", D1_STATEMENT_BYTES),
        ];
        let report: serde_json::Map<String, serde_json::Value> = limits
            .iter()
            .map(|(name, limit)| {
                let max = seen.get(name).copied().unwrap_or(0);
                ((*name).to_owned(), serde_json::json!({"max": max, "limit": limit}))
            })
            .collect();
        serde_json::Value::Object(report)
    })
}

#[cfg(feature = "fault-injection")]
thread_local! {
    static HIGHEST: std::cell::RefCell<std::collections::BTreeMap<&'static str, usize>> =
        std::cell::RefCell::default();
}

/// Keeps `value` as the highest `limit` has seen, if it is.
#[cfg(feature = "fault-injection")]
fn saw(limit: &'static str, value: usize) {
    HIGHEST.with(|seen| {
        let mut seen = seen.borrow_mut();
        let max = seen.entry(limit).or_default();
        *max = (*max).max(value);
    });
}

/// Checks one queue send of `messages` (their JSON, with the queue's metadata) against the
/// queue's limits: a `send` is a batch of one.
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
    Ok(())
}

/// In a deployed worker the queue itself refuses a send over its limits.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn queue_send<T>(_queue: &str, _messages: &[T]) -> Result<(), EdgeError> {
    Ok(())
}

/// Checks one D1 statement (its SQL and how many parameters it binds) against D1's limits.
#[cfg(feature = "fault-injection")]
pub fn statement(sql: &str, parameters: usize) -> Result<(), EdgeError> {
    saw("bound parameters per statement", parameters);
    saw("bytes per statement", sql.len());
    if parameters > D1_BOUND_PARAMETERS {
        return crossed("d1", "bound parameters per statement", parameters, D1_BOUND_PARAMETERS);
    }
    if sql.len() > D1_STATEMENT_BYTES {
        return crossed("d1", "bytes per statement", sql.len(), D1_STATEMENT_BYTES);
    }
    Ok(())
}

/// In a deployed worker D1 itself refuses a statement over its limits.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn statement(_sql: &str, _parameters: usize) -> Result<(), EdgeError> {
    Ok(())
}

/// Logs the crossing (the line the end-to-end run looks for) and refuses the call.
#[cfg(feature = "fault-injection")]
fn crossed(binding: &str, limit: &str, value: usize, max: usize) -> Result<(), EdgeError> {
    let line = serde_json::json!({"limit_crossed": limit, "binding": binding, "value": value, "limit": max});
    worker::console_error!("{line}");
    Err(EdgeError::platform("limit", format!("{binding}: {value} {limit}, over Cloudflare's {max}")))
}
