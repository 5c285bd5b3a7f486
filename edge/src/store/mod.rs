//! Thin helpers over D1: binding values the way D1 accepts them, and reading results.
//!
//! D1 rejects BigInt and `undefined`: integers are bound as f64 (exact to 2^53) and NULL as
//! `JsValue::NULL`. Duplicates are detected by `meta.changes`, never by error text.

use exactly_core::Timestamp;
use serde::de::DeserializeOwned;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, D1Result};

use crate::error::EdgeError;

pub mod accounts;
pub mod calls;
pub mod carrier_events;
#[cfg(feature = "fault-injection")]
pub mod checks;
pub mod deliveries;
pub mod endpoints;
mod page;

pub use page::Cursor;
pub mod messages;
pub mod numbers;
pub mod outbox;
pub mod retention;
pub mod ring;
pub mod usage;

/// The D1 binding.
pub fn database(env: &worker::Env) -> Result<D1Database, EdgeError> {
    env.d1(crate::bindings::DB).map_err(|e| EdgeError::platform("DB binding", e))
}

/// Whether D1 answers a query at all (for `/healthz`).
pub async fn ping(db: &D1Database) -> Result<(), EdgeError> {
    run(stmt(db, "SELECT 1", &[])?).await.map(|_| ())
}

/// A text argument.
pub fn text(value: &str) -> JsValue {
    JsValue::from_str(value)
}

/// An optional text argument (NULL when absent).
pub fn opt_text(value: Option<&str>) -> JsValue {
    value.map_or(JsValue::NULL, JsValue::from_str)
}

/// An integer argument.
pub fn int(value: i64) -> JsValue {
    JsValue::from_f64(value as f64)
}

/// A time argument (Unix milliseconds).
pub fn time(value: Timestamp) -> JsValue {
    int(value.unix_millis())
}

/// A prepared statement with its arguments bound.
pub fn stmt(db: &D1Database, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, EdgeError> {
    db.prepare(sql).bind(args).map_err(|e| EdgeError::platform("bind", e))
}

/// Runs a statement; returns the rows it changed.
pub async fn run(statement: D1PreparedStatement) -> Result<usize, EdgeError> {
    let result = statement.run().await.map_err(|e| EdgeError::platform("d1 run", e))?;
    Ok(changes(&result))
}

/// Runs a query and reads every row.
pub async fn all<T: DeserializeOwned>(statement: D1PreparedStatement) -> Result<Vec<T>, EdgeError> {
    let result = statement.all().await.map_err(|e| EdgeError::platform("d1 query", e))?;
    rows(&result)
}

/// Runs a query and reads the first row, if any.
pub async fn first<T: DeserializeOwned>(statement: D1PreparedStatement) -> Result<Option<T>, EdgeError> {
    Ok(all(statement).await?.into_iter().next())
}

/// Runs statements as one transaction (a D1 batch).
pub async fn batch(db: &D1Database, statements: Vec<D1PreparedStatement>) -> Result<Vec<D1Result>, EdgeError> {
    db.batch(statements).await.map_err(|e| EdgeError::platform("d1 batch", e))
}

/// The rows a statement changed.
pub fn changes(result: &D1Result) -> usize {
    result.meta().ok().flatten().and_then(|m| m.changes).unwrap_or(0)
}

/// The rows a query returned.
pub fn rows<T: DeserializeOwned>(result: &D1Result) -> Result<Vec<T>, EdgeError> {
    result.results::<T>().map_err(|e| EdgeError::platform("d1 rows", e))
}

/// A time column (D1 returns numbers as f64).
pub fn millis(value: f64) -> Timestamp {
    Timestamp::from_unix_millis(value as i64)
}
