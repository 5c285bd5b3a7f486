//! The cron's tick, fanned out (docs/architecture.md, "The cron").
//!
//! The scheduled handler registers the operator's endpoint and enqueues one `jobs` message per
//! database and part ([`Job::Tick`]): the dedupe log's sweep, each account database's sweep and
//! reconciliation, each account database's audit, and each retention step of each database.
//! Each part runs in an invocation of its own, so no invocation touches every database nor makes
//! more statements than one database's part needs; a database whose carrier hangs holds up only
//! its own reconciliation; and a retention step or an audit whose page was full goes on at once
//! with its next page, up to [`MAX_ROUNDS`] pages a tick, so a backlog drains as fast as pages
//! run.

use std::rc::Rc;

use worker::Env;

use crate::bindings::DB;
use crate::config::Config;
use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self, Job, Part, Step};
use crate::store::{carrier_events, routes};
use crate::work::outcome::{Done, Outcome};
use crate::work::{reconcile, retention, sweep};

/// The most pages one retention step, or the audit, runs in one database from one tick: 120
/// pages of `store::retention::BATCH` rows a minute is 2,000 rows a second per step and
/// database (the audit's pages are `store::audit::PAGE` rows per check). A part still behind
/// after them goes on from the next tick.
pub const MAX_ROUNDS: u32 = 120;

/// The tick: enqueues every part, each naming `trigger`, the cron expression that fired it.
/// Returns how many.
pub async fn tick(env: &Env, config: &Config, trigger: &str) -> Result<usize, EdgeError> {
    let part = |part: Part, database: &str| Job::tick(part, database, trigger);
    let mut parts = vec![part(Part::Log, DB), part(Part::Retain(Step::Sessions), DB)];
    for binding in carrier_events::Log::open(env, config).bindings() {
        parts.extend(Step::LOG.iter().map(|step| part(Part::Retain(*step), &binding)));
    }
    for binding in routes::databases(env, config) {
        parts.push(part(Part::Sweep, &binding));
        parts.push(part(Part::Audit, &binding));
        parts.extend(Step::ACCOUNTS.iter().map(|step| part(Part::Retain(*step), &binding)));
    }
    let count = parts.len();
    queues::enqueue_many(env, parts).await?;
    Ok(count)
}

/// Where one run of a part of a tick is.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// The binding of the database it works in.
    pub database: &'a str,
    /// The pages of its step that ran before it in the same tick.
    pub round: u32,
    /// The cron expression that fired its tick.
    pub trigger: &'a str,
}

/// Runs one part of a tick at `place`. A part that fails is logged and not retried: the next
/// tick runs it again.
///
/// Each run of a part ends with one log line that names it (`"tick_part"`) and its tick's
/// trigger, whatever it did, so what a tick set going can be seen to have ended: the tick's line
/// counts its parts, and a retention or audit page that enqueued the next says so
/// (`"next": true`).
pub async fn run(env: &Env, config: &Rc<Config>, part: Part, place: Place<'_>) -> Result<Outcome, EdgeError> {
    let Place { database, trigger, .. } = place;
    let done = match part {
        Part::Log => sweep::sweep_log(env, config).await.map(|report| {
            worker::console_log!(
                "{}",
                serde_json::json!({"cron": "sweep", "tick_part": part.as_str(), "database": database,
                    "trigger": trigger, "events": report.events, "backlog_signals": report.backlog_signals})
            );
            report.events + report.backlog_signals > 0
        }),
        Part::Sweep => sweep_and_reconcile(env, config, place).await,
        Part::Retain(step) => retain(env, config, step, place).await,
        Part::Audit => audit(env, config, place).await,
    };
    match done {
        Ok(changed) => Ok(Outcome::applied(changed)),
        Err(e) => {
            worker::console_error!(
                "{}",
                serde_json::json!({"cron": part.as_str(), "tick_part": part.as_str(), "database": database,
                    "trigger": trigger, "error": e.to_string()})
            );
            Ok(Outcome::Done(Done::Failed))
        }
    }
}

/// An account database's sweep, then its reconciliation; whether either did anything.
async fn sweep_and_reconcile(env: &Env, config: &Rc<Config>, place: Place<'_>) -> Result<bool, EdgeError> {
    let Place { database, trigger, .. } = place;
    let account = crate::store::AccountDb::new(env, config, database)?;
    let report = sweep::sweep_account(&account).await?;
    worker::console_log!(
        "{}",
        serde_json::json!({"cron": "sweep", "database": database, "events": report.events,
            "dispatches": report.dispatches, "deliveries": report.deliveries,
            "backlog_signals": report.backlog_signals, "media": report.media})
    );
    let reconciled = reconcile::run_database(&account).await?;
    worker::console_log!(
        "{}",
        serde_json::json!({"cron": "reconcile", "tick_part": Part::Sweep.as_str(), "database": database,
            "trigger": trigger, "asked": reconciled.asked, "learned": reconciled.learned})
    );
    let swept = report.events + report.dispatches + report.deliveries + report.media + report.backlog_signals;
    Ok(swept + reconciled.learned > 0)
}

/// Enqueues the next round of `part` at `place` when its page was full (`more`) and the tick
/// has rounds left ([`MAX_ROUNDS`]); whether it did.
async fn go_on(env: &Env, part: Part, place: Place<'_>, more: bool) -> Result<bool, EdgeError> {
    let Place { database, round, trigger } = place;
    let next = more && round + 1 < MAX_ROUNDS;
    if next {
        let job = Job::Tick { part, database: database.to_owned(), round: round + 1, trigger: trigger.to_owned() };
        queues::enqueue(env, job).await?;
    }
    Ok(next)
}

/// One page of each check of the audit; the next pages are enqueued at once when a page was full
/// and nothing was found (a page that found something is its tick's last: `work::audit`). The
/// line says when a check's rows wait for the next tick because of what it found (`"held_over"`).
async fn audit(env: &Env, config: &Rc<Config>, place: Place<'_>) -> Result<bool, EdgeError> {
    let Place { database, round, trigger } = place;
    let account = crate::store::AccountDb::new(env, config, database)?;
    let report = crate::work::audit::run(&account, database).await?;
    let next = go_on(env, Part::Audit, place, report.goes_on()).await?;
    worker::console_log!(
        "{}",
        serde_json::json!({"cron": "audit", "tick_part": Part::Audit.as_str(), "database": database,
            "trigger": trigger, "checked": report.checked, "found": report.found, "findings": report.findings,
            "held_over": report.more && !next, "round": round, "next": next})
    );
    Ok(report.found > 0)
}

/// One page of a retention step; its next page is enqueued at once when this one was full.
async fn retain(env: &Env, config: &Config, step: Step, place: Place<'_>) -> Result<bool, EdgeError> {
    let Place { database, round, trigger } = place;
    let retention = config.retention;
    let db = crate::store::d1(env, database)?;
    let page = retention::page(&db, step, retention, now()).await?;
    let next = go_on(env, Part::Retain(step), place, page.more).await?;
    worker::console_log!(
        "{}",
        serde_json::json!({"cron": "retention", "tick_part": step.as_str(), "database": database,
            "trigger": trigger, "step": step.as_str(), "pruned": page.pruned, "round": round, "next": next})
    );
    Ok(page.pruned > 0)
}
