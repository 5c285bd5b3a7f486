//! The `idempotency_keys` table: the first answer to each `Idempotency-Key` of a scope (an
//! account, or the operator), kept 24 hours (docs/contract.md §5, "Idempotency").
//!
//! A key is taken by an INSERT that does nothing when the key exists, so of two requests with one
//! key, however close, exactly one runs; the row then holds the request's fingerprint, whether
//! it is still running (`status` NULL; `locked_until` says how long it may take) and, once it
//! answered, the answer. Only an expired key is ever taken again: a request that stopped
//! without an answer may have done its work, so nothing runs it a second time.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

/// How long a key is kept, in milliseconds.
pub const KEEP_MILLIS: i64 = 24 * 3600 * 1000;
/// How long the first request may take: past it, a key with no answer belongs to a request that
/// stopped without one (its isolate was stopped), whose outcome is unknown.
pub const LOCK_MILLIS: i64 = 60_000;

/// What taking a key found.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// The key is this request's: run it, then [`finish`] or [`release`].
    Run,
    /// The key answered before, to the same request: the status and the sealed answer.
    Answered { status: u16, sealed: String },
    /// The key was used for a different request.
    Reused,
    /// The same request holds the key and is still running.
    Running,
    /// The same request took the key and stopped without an answer: its outcome is unknown.
    Unknown,
}

/// Takes `key` of `scope` for a request of `fingerprint`: a key unused or expired (older than
/// [`KEEP_MILLIS`]) is this one's.
pub async fn take(
    db: &D1Database,
    scope: &str,
    key: &str,
    fingerprint: &str,
    now: Timestamp,
) -> Result<Taken, EdgeError> {
    crate::store::row! {
        struct Row {
            fingerprint: String,
            status: Option<i64>,
            answer: Option<String>,
            locked_until: i64,
        }
    }
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "INSERT INTO idempotency_keys (scope, key, fingerprint, created_at, locked_until)
                 VALUES (?1, ?2, ?3, ?4, ?4 + ?6)
                 ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = NULL,
                     answer = NULL, created_at = excluded.created_at, locked_until = excluded.locked_until
                   WHERE idempotency_keys.created_at <= ?4 - ?5",
                &[text(scope), text(key), text(fingerprint), time(now), int(KEEP_MILLIS), int(LOCK_MILLIS)],
            )?,
            db::stmt(
                db,
                "SELECT fingerprint, status, answer, locked_until FROM idempotency_keys
                 WHERE scope = ?1 AND key = ?2 AND changes() = 0",
                &[text(scope), text(key)],
            )?,
        ],
    )
    .await?;
    if results.first().map(db::changes) == Some(1) {
        return Ok(Taken::Run);
    }
    let row: Option<Row> = results.get(1).map(db::rows).transpose()?.and_then(|rows| rows.into_iter().next());
    let Some(row) = row else {
        // Deleted between the two statements of one batch cannot happen; a retention run that
        // removed it since is read as a key in use, and the client asks again.
        return Ok(Taken::Running);
    };
    if row.fingerprint != fingerprint {
        return Ok(Taken::Reused);
    }
    match (row.status.and_then(|s| u16::try_from(s).ok()), row.answer) {
        (Some(status), Some(sealed)) => Ok(Taken::Answered { status, sealed }),
        _ if row.locked_until > now.unix_millis() => Ok(Taken::Running),
        _ => Ok(Taken::Unknown),
    }
}

/// Records the answer of the request that holds `key`.
pub async fn finish(db: &D1Database, scope: &str, key: &str, status: u16, sealed: &str) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE idempotency_keys SET status = ?3, answer = ?4 WHERE scope = ?1 AND key = ?2 AND status IS NULL",
        &[text(scope), text(key), int(i64::from(status)), text(sealed)],
    )?)
    .await?;
    Ok(())
}

/// Gives `key` back: the request was refused (4xx) before it did anything, which is not kept,
/// so the same request may run again.
pub async fn release(db: &D1Database, scope: &str, key: &str) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "DELETE FROM idempotency_keys WHERE scope = ?1 AND key = ?2 AND status IS NULL",
        &[text(scope), text(key)],
    )?)
    .await?;
    Ok(())
}

/// Deletes up to `limit` keys older than [`KEEP_MILLIS`]; how many.
pub async fn prune(db: &D1Database, now: Timestamp, limit: i64) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        "DELETE FROM idempotency_keys WHERE rowid IN
             (SELECT rowid FROM idempotency_keys WHERE created_at <= ?1 - ?2 ORDER BY created_at LIMIT ?3)",
        &[time(now), int(KEEP_MILLIS), int(limit)],
    )?)
    .await
}
