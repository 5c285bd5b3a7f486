//! Thin helpers over D1: binding values the way D1 accepts them, and reading results.
//!
//! D1 rejects BigInt and `undefined`: integers are bound as f64 (exact to 2^53) and NULL as
//! `JsValue::NULL`. Duplicates are detected by `meta.changes`, never by error text.
//!
//! # Layout
//! One module (a file, or a folder for a table with several concepts) per table or concept, and
//! every SQL statement of the worker under `store/`. Each table is written from one module: a
//! batch that spans tables takes the other tables' statements from their modules (the outbox's
//! fan-out from `deliveries`, a move's watermark from `retention`), so every guard on a table is
//! in one place. `edge/tests/layout.rs` checks both rules.
//!
//! Rows are read into types at this boundary, once, column by column ([`row`]): times as
//! [`Timestamp`], counts as integers, flags as `bool`, carriers, statuses, encodings and event
//! types as their enums. A stored value that is none of them is an error where the row is read,
//! never a default.

use exactly_core::Timestamp;
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;

pub mod access;
mod account_db;
pub mod accounts;
pub mod audit;
pub mod calls;
pub mod carrier_events;
pub mod deliveries;
pub mod endpoints;
pub mod erasures;
pub mod idempotency;
mod page;
pub mod row;

pub use account_db::{AccountDb, Session};
pub use page::Cursor;
pub(crate) use row::row;
pub use row::FromRow;
pub mod call_storage;
pub mod media;
pub mod messages;
pub mod metrics;
pub mod numbers;
pub mod outbox;
pub mod reconcile;
pub mod retention;
pub mod routes;
pub mod signals;
pub mod transition;
pub mod usage;

/// The D1 database bound as `name` in the worker's bindings.
pub fn d1(env: &worker::Env, name: &str) -> Result<D1Database, EdgeError> {
    usable(binding(env, name)?, name)
}

fn usable(binding: JsValue, name: &str) -> Result<D1Database, EdgeError> {
    use wasm_bindgen::JsCast as _;
    let usable = js_sys::Reflect::get(&binding, &JsValue::from_str("prepare")).is_ok_and(|f| f.is_function());
    if !usable {
        return Err(EdgeError::platform("D1 binding", format!("the binding {name} is not a D1 database")));
    }
    Ok(binding.unchecked_into())
}

fn binding(env: &worker::Env, name: &str) -> Result<JsValue, EdgeError> {
    js_sys::Reflect::get(env.as_ref(), &JsValue::from_str(name))
        .ok()
        .filter(|b| !b.is_undefined() && !b.is_null())
        .ok_or_else(|| EdgeError::platform("D1 binding", format!("the binding {name} is missing")))
}

/// `DB` first, then every D1 database of the worker's bindings whose name `kind` accepts and
/// every name in `named` (bound or not: a missing one fails where it is used), in the order of
/// `number`, each once. The dedupe log's databases and the account databases are both listed so.
pub fn databases_of_kind(
    env: &worker::Env,
    kind: impl Fn(&str) -> bool,
    named: &[String],
    number: impl Fn(&str) -> Option<u8>,
) -> Vec<String> {
    let keys = js_sys::Reflect::own_keys(env.as_ref()).map(|k| k.to_vec()).unwrap_or_default();
    let mut found: Vec<String> =
        keys.iter().filter_map(JsValue::as_string).filter(|k| kind(k) && d1(env, k).is_ok()).collect();
    found.extend(named.iter().cloned());
    found.sort_by_key(|b| number(b));
    let mut out = vec![crate::bindings::DB.to_owned()];
    for binding in found {
        if !out.contains(&binding) {
            out.push(binding);
        }
    }
    out
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

/// An optional time argument (NULL when absent).
pub fn opt_time(value: Option<Timestamp>) -> JsValue {
    value.map_or(JsValue::NULL, time)
}

/// A prepared statement with its arguments bound.
pub fn stmt(db: &D1Database, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, EdgeError> {
    crate::quotas::statement(sql, args.len())?;
    db.prepare(sql).bind(args).map_err(|e| EdgeError::platform("bind", e))
}

/// What D1 answered for one statement: its rows and its `meta`, as D1's own object.
#[derive(Debug, Clone)]
pub struct Reply(JsValue);

impl Reply {
    /// D1's result object.
    pub fn raw(&self) -> &JsValue {
        &self.0
    }
}

/// Awaits a promise a D1 statement returned.
async fn settled(promise: Result<js_sys::Promise, JsValue>, what: &'static str) -> Result<Reply, EdgeError> {
    crate::quotas::d1_call()?;
    let failed = |e: JsValue| EdgeError::platform(what, js_error(&e));
    let value = worker::wasm_bindgen_futures::JsFuture::from(promise.map_err(failed)?).await.map_err(failed)?;
    crate::quotas::statement_took(|| meta_number(&value, "duration"));
    Ok(Reply(value))
}

/// Runs a statement; returns the rows it changed.
pub async fn run(statement: D1PreparedStatement) -> Result<usize, EdgeError> {
    Ok(changes(&settled(statement.inner().run(), "d1 run").await?))
}

/// Runs a query and returns its result, for a reader of its own (as a batch's results are read).
pub async fn query(statement: D1PreparedStatement) -> Result<Reply, EdgeError> {
    settled(statement.inner().all(), "d1 query").await
}

/// Runs a query and reads every row.
pub async fn all<T: FromRow>(statement: D1PreparedStatement) -> Result<Vec<T>, EdgeError> {
    rows(&query(statement).await?)
}

/// The `id` column of every row a result holds (queries and `RETURNING id` statements).
pub fn ids(result: &Reply) -> Result<Vec<String>, EdgeError> {
    read_rows(result, |row| row::column(row, "id"))
}

/// Runs a statement whose rows carry an `id` column and returns the ids.
pub async fn all_ids(statement: D1PreparedStatement) -> Result<Vec<String>, EdgeError> {
    ids(&query(statement).await?)
}

/// Runs a query and reads the first row, if any.
pub async fn first<T: FromRow>(statement: D1PreparedStatement) -> Result<Option<T>, EdgeError> {
    Ok(all(statement).await?.into_iter().next())
}

/// Runs statements as one transaction (a D1 batch). `db` may be a database or an API request's
/// [`Session`], whose `batch` is its own: it is looked up on `db` each time.
pub async fn batch(db: &D1Database, statements: Vec<D1PreparedStatement>) -> Result<Vec<Reply>, EdgeError> {
    use wasm_bindgen::JsCast as _;
    let batch: js_sys::Function = js_sys::Reflect::get(db.as_ref(), &JsValue::from_str("batch"))
        .ok()
        .and_then(|f| f.dyn_into().ok())
        .ok_or_else(|| EdgeError::platform("d1 batch", "the binding has no batch()"))?;
    Ok(call_batch(db, &batch, &statements).await?.into_iter().map(Reply).collect())
}

/// Runs statements as one transaction (a D1 batch) on a database binding (never a [`Session`])
/// and returns D1's result objects as they are.
///
/// For the ingest path: `D1Database.prototype.batch` is looked up once per isolate, and the
/// caller reads the two or three fields it needs with [`meta_count`], [`first_row`] and
/// [`field`].
pub async fn batch_raw(db: &D1Database, statements: &[D1PreparedStatement]) -> Result<Vec<JsValue>, EdgeError> {
    use wasm_bindgen::JsCast as _;
    thread_local! {
        // `D1Database.prototype.batch`, looked up once per isolate and called with the binding
        // of each request as `this`.
        static BATCH: std::cell::OnceCell<Option<js_sys::Function>> = const { std::cell::OnceCell::new() };
    }
    let batch = BATCH
        .with(|f| {
            f.get_or_init(|| js_sys::Reflect::get(db.as_ref(), &JsValue::from_str("batch")).ok()?.dyn_into().ok())
                .clone()
        })
        .ok_or_else(|| EdgeError::platform("d1 batch", "the binding has no batch()"))?;
    call_batch(db, &batch, statements).await
}

/// Calls a `batch` function with `db` as `this`, and awaits D1's results.
async fn call_batch(
    db: &D1Database,
    batch: &js_sys::Function,
    statements: &[D1PreparedStatement],
) -> Result<Vec<JsValue>, EdgeError> {
    use wasm_bindgen::JsCast as _;
    crate::quotas::d1_call()?;
    let failed = |e: JsValue| EdgeError::platform("d1 batch", js_error(&e));
    let statements: js_sys::Array = statements.iter().map(|s| -> &JsValue { s.inner().as_ref() }).collect();
    let promise: js_sys::Promise = batch.call1(db.as_ref(), &statements).map_err(failed)?.unchecked_into();
    let results = js_sys::Array::from(&worker::wasm_bindgen_futures::JsFuture::from(promise).await.map_err(failed)?);
    let results = results.to_vec();
    // Only the test build's guard reads the times: a deployed worker's ingest path walks nothing.
    if cfg!(feature = "fault-injection") {
        for result in &results {
            crate::quotas::statement_took(|| meta_number(result, "duration"));
        }
    }
    Ok(results)
}

/// A count of a raw result's `meta` (`changes`, `rows_written`, ...); 0 when absent.
pub fn meta_count(result: &JsValue, name: &str) -> usize {
    meta_number(result, name) as usize
}

/// A number of a raw result's `meta` (`duration` in milliseconds, `changes`, ...); 0 when absent.
fn meta_number(result: &JsValue, name: &str) -> f64 {
    js_sys::Reflect::get(result, &JsValue::from_str("meta"))
        .and_then(|meta| js_sys::Reflect::get(&meta, &JsValue::from_str(name)))
        .ok()
        .and_then(|n| n.as_f64())
        .unwrap_or(0.0)
}

/// The first row of a raw result, if any.
pub fn first_row(result: &JsValue) -> Option<JsValue> {
    let rows = js_sys::Reflect::get(result, &JsValue::from_str("results")).ok()?;
    let row = js_sys::Reflect::get_u32(&rows, 0).ok()?;
    (!row.is_undefined() && !row.is_null()).then_some(row)
}

/// A column of a raw row (`undefined` when absent, `null` for SQL NULL).
pub fn field(row: &JsValue, name: &str) -> JsValue {
    js_sys::Reflect::get(row, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// What a JavaScript exception says (D1 puts the reason in `cause`).
pub(crate) fn js_error(error: &JsValue) -> String {
    use wasm_bindgen::JsCast as _;
    match error.dyn_ref::<js_sys::Error>() {
        Some(e) => match e.cause().dyn_ref::<js_sys::Error>() {
            Some(cause) => format!("{}: {}", String::from(e.message()), String::from(cause.message())),
            None => String::from(e.message()),
        },
        None => format!("{error:?}"),
    }
}

/// The rows a statement changed.
pub fn changes(result: &Reply) -> usize {
    meta_count(&result.0, "changes")
}

/// The rows a query returned, each read as `T`.
pub fn rows<T: FromRow>(result: &Reply) -> Result<Vec<T>, EdgeError> {
    read_rows(result, |row| T::from_row(row))
}

/// Reads each row of a result with `read`; the first row that fails is the error.
pub fn read_rows<T>(result: &Reply, read: impl Fn(&dyn row::Source) -> Result<T, String>) -> Result<Vec<T>, EdgeError> {
    let rows = js_sys::Reflect::get(&result.0, &JsValue::from_str("results")).unwrap_or(JsValue::UNDEFINED);
    if rows.is_undefined() || rows.is_null() {
        return Ok(Vec::new());
    }
    let rows = js_sys::Array::from(&rows);
    let mut out = Vec::with_capacity(rows.length() as usize);
    for row in rows.iter() {
        out.push(read(&row).map_err(|why| EdgeError::platform("d1 rows", why))?);
    }
    Ok(out)
}
