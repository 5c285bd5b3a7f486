//! The call Durable Object's own SQLite storage (not D1): the machine's state (one row), its
//! queue of actions in order, and a few numbers about them. The object calls these with no `.await` between them where
//! they must commit together.

use worker::{SqlCursor, SqlStorage, SqlStorageValue};

use crate::error::EdgeError;
use crate::store::FromRow;

fn failed(e: worker::Error) -> EdgeError {
    EdgeError::platform("call storage", e)
}

/// Every row a query's cursor holds, each read as `T`.
fn rows<T: FromRow>(cursor: worker::Result<SqlCursor>) -> Result<Vec<T>, EdgeError> {
    let mut out = Vec::new();
    for row in cursor.map_err(failed)? {
        let row = row.map_err(failed)?;
        out.push(T::from_row(&row).map_err(|why| EdgeError::platform("call storage", why))?);
    }
    Ok(out)
}

/// Creates the tables if they are missing: the machine, its actions, and a few numbers about
/// them (`meta`: failed drains in a row, when the call was first seen settled).
pub fn create(sql: &SqlStorage) {
    // Synchronous; a failure here shows on the first read.
    let _ = sql
        .exec("CREATE TABLE IF NOT EXISTS machine (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL)", None);
    let _ = sql
        .exec("CREATE TABLE IF NOT EXISTS actions (seq INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT NOT NULL)", None);
    let _ = sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)", None);
}

/// A number kept about the call (`failures`, `settled_at`), if set.
pub fn meta(sql: &SqlStorage, name: &str) -> Result<Option<i64>, EdgeError> {
    crate::store::row! {
        struct Row {
            value: i64,
        }
    }
    let rows: Vec<Row> = rows(sql.exec("SELECT value FROM meta WHERE name = ?", vec![name.into()]))?;
    Ok(rows.first().map(|r| r.value))
}

/// Sets a number kept about the call.
pub fn set_meta(sql: &SqlStorage, name: &str, value: i64) -> Result<(), EdgeError> {
    sql.exec(
        "INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        vec![name.into(), (value as f64).into()],
    )
    .map(|_| ())
    .map_err(failed)
}

/// How many rows the call's storage holds, machine and actions (the test build's look).
#[cfg(feature = "fault-injection")]
pub fn held(sql: &SqlStorage) -> Result<i64, EdgeError> {
    crate::store::row! {
        struct Row {
            n: i64,
        }
    }
    let rows: Vec<Row> = rows(sql.exec(
        "SELECT (SELECT COUNT(*) FROM machine) + (SELECT COUNT(*) FROM actions) + (SELECT COUNT(*) FROM meta) AS n",
        None,
    ))?;
    Ok(rows.first().map_or(0, |r| r.n))
}

/// The stored state, as JSON, if any.
pub fn state(sql: &SqlStorage) -> Result<Option<String>, EdgeError> {
    crate::store::row! {
        struct Row {
            state: String,
        }
    }
    let rows: Vec<Row> = rows(sql.exec("SELECT state FROM machine WHERE id = 1", None))?;
    Ok(rows.into_iter().next().map(|r| r.state))
}

/// Stores the state and appends the actions, in order.
pub fn save(sql: &SqlStorage, state: &str, actions: &[String]) -> Result<(), EdgeError> {
    let state: SqlStorageValue = state.into();
    sql.exec(
        "INSERT INTO machine (id, state) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state",
        vec![state],
    )
    .map_err(failed)?;
    for action in actions {
        sql.exec("INSERT INTO actions (action) VALUES (?)", vec![action.as_str().into()]).map_err(failed)?;
    }
    Ok(())
}

/// The first queued action: its sequence number and JSON.
pub fn next_action(sql: &SqlStorage) -> Result<Option<(i64, String)>, EdgeError> {
    crate::store::row! {
        struct Row {
            seq: i64,
            action: String,
        }
    }
    let rows: Vec<Row> = rows(sql.exec("SELECT seq, action FROM actions ORDER BY seq LIMIT 1", None))?;
    Ok(rows.into_iter().next().map(|r| (r.seq, r.action)))
}

/// Removes a done action.
pub fn remove_action(sql: &SqlStorage, seq: i64) -> Result<(), EdgeError> {
    // Bound as a number, as the row handed it over (exact below 2^53).
    sql.exec("DELETE FROM actions WHERE seq = ?", vec![(seq as f64).into()]).map(|_| ()).map_err(failed)
}

/// How many actions are queued.
pub fn pending(sql: &SqlStorage) -> Result<u32, EdgeError> {
    crate::store::row! {
        struct Row {
            n: i64,
        }
    }
    let rows: Vec<Row> = rows(sql.exec("SELECT COUNT(*) AS n FROM actions", None))?;
    Ok(rows.first().map_or(0, |r| u32::try_from(r.n).unwrap_or(u32::MAX)))
}

/// Erasure: `number` reads as `erased` wherever it is a whole string of the stored state and the
/// queued actions (both JSON); a longer number that starts with it is left alone. Whether
/// anything held it.
pub fn erase(sql: &SqlStorage, number: &str, erased: &str) -> Result<bool, EdgeError> {
    crate::store::row! {
        struct Row {
            held: i64,
        }
    }
    let (quoted, replacement) = (format!("\"{number}\""), format!("\"{erased}\""));
    let rows: Vec<Row> = rows(sql.exec(
        "SELECT (SELECT COUNT(*) FROM machine WHERE instr(state, ?) > 0)
              + (SELECT COUNT(*) FROM actions WHERE instr(action, ?) > 0) AS held",
        vec![quoted.as_str().into(), quoted.as_str().into()],
    ))?;
    let held = rows.first().is_some_and(|r| r.held > 0);
    for statement in
        ["UPDATE machine SET state = replace(state, ?, ?)", "UPDATE actions SET action = replace(action, ?, ?)"]
    {
        sql.exec(statement, vec![quoted.as_str().into(), replacement.as_str().into()]).map_err(failed)?;
    }
    Ok(held)
}
