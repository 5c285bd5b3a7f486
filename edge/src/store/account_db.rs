//! The account database one piece of work serves (docs/scaling.md, "Accounts across
//! databases"), as a value: built once where a request, a job or a part of the cron learns which
//! database that is, and handed down. Nothing reads it back out of the bindings.

use std::rc::Rc;

use wasm_bindgen::{JsCast as _, JsValue};
use worker::D1Database;

use super::{d1, js_error};
use crate::bindings::DB;
use crate::config::Config;
use crate::error::EdgeError;

/// An account database, the worker's bindings and its configuration: [`AccountDb::db`] is where
/// the account's rows are (an API request's D1 session over it), [`AccountDb::env`] the bindings
/// as the worker has them, for the routing database (`DB`), the dedupe log, queues and Durable
/// Objects, and [`AccountDb::config`] the configuration the request, batch or tick read once.
#[derive(Clone)]
pub struct AccountDb {
    env: worker::Env,
    config: Rc<Config>,
    binding: String,
    db: Rc<D1Database>,
}

impl AccountDb {
    /// The account database bound as `binding`.
    pub fn new(env: &worker::Env, config: &Rc<Config>, binding: &str) -> Result<Self, EdgeError> {
        let db = Rc::new(d1(env, binding)?);
        Ok(AccountDb { env: env.clone(), config: Rc::clone(config), binding: binding.to_owned(), db })
    }

    /// The account database a route names, `DB` when none does.
    pub fn named(env: &worker::Env, config: &Rc<Config>, binding: Option<&str>) -> Result<Self, EdgeError> {
        Self::new(env, config, binding.unwrap_or(DB))
    }

    /// Another account database, with the same bindings and configuration.
    pub fn other(&self, binding: Option<&str>) -> Result<Self, EdgeError> {
        Self::named(&self.env, &self.config, binding)
    }

    /// The worker's bindings.
    pub fn env(&self) -> &worker::Env {
        &self.env
    }

    /// The worker's configuration, as the work that built this read it.
    pub fn config(&self) -> &Rc<Config> {
        &self.config
    }

    /// The account database (or the request's session over it).
    pub fn db(&self) -> &D1Database {
        &self.db
    }

    /// The account database's binding, as a queue message names it: `None` for `DB`, so the
    /// messages of a worker with one database look as they always did.
    pub fn binding(&self) -> Option<String> {
        Some(self.binding.clone()).filter(|b| b != DB)
    }

    /// This database read and written through one D1 session (docs/contract.md §5, "Reading your
    /// own writes"): with read replication, its reads may be served by a replica, but never one
    /// older than the bookmark it started from, nor than its own writes. A request with no
    /// bookmark starts anywhere when it only reads, and at the primary when it may write. The
    /// same, and no session, where the runtime has none.
    pub fn in_session(self, bookmark: Option<&str>, writes: bool) -> Result<(Self, Option<Session>), EdgeError> {
        let db: &JsValue = self.db.as_ref().as_ref();
        let Some(with_session) = js_sys::Reflect::get(db, &JsValue::from_str("withSession"))
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        else {
            return Ok((self, None));
        };
        let start = bookmark.unwrap_or(if writes { "first-primary" } else { "first-unconstrained" });
        let session = with_session
            .call1(db, &JsValue::from_str(start))
            .map_err(|e| EdgeError::platform("d1 session", js_error(&e)))?;
        // A session answers the same `prepare` and `batch` as its database.
        let db = Rc::new(session.clone().unchecked_into());
        let scoped = AccountDb { env: self.env, config: self.config, binding: self.binding, db };
        Ok((scoped, Some(Session(session))))
    }
}

/// One API request's D1 session, for the bookmark it ends with.
pub struct Session(JsValue);

impl Session {
    /// The latest bookmark the session saw, for the client to send back.
    pub fn bookmark(&self) -> Option<String> {
        let get: js_sys::Function =
            js_sys::Reflect::get(&self.0, &JsValue::from_str("getBookmark")).ok()?.dyn_into().ok()?;
        get.call0(&self.0).ok()?.as_string()
    }
}
