//! An erasure's pages (docs/contract.md §5, "Erasure"). `POST /admin/erasures` records one and
//! enqueues its first page; each page reads one window of one table of one database
//! (`store::erasures::window`), erases what names the number there, moves the record past it
//! and enqueues the next page. The steps, in order: in each account database (only the named
//! account's, when one is named) its messages, its calls and its numbers' ring plans; then each
//! dedupe database's carrier events. Pass 1 reads every row; pass 2, a minute later, reads the
//! account databases' rows written since pass 1 read each table, so a message whose processing
//! had read its event just before the erasure is erased too, and every call again, since a call
//! pass 1 read can name the number afterwards (a leg its object was dialling, an event built
//! from its state before the erasure).
//!
//! The steps are fixed by name in the record (its plan) by its first page, and a database bound
//! since is added at the end, so a deploy that binds another database moves no step under a
//! running erasure; a step whose database is no longer bound is skipped.
//!
//! A page that runs twice erases nothing twice (it finds only rows that still hold the number)
//! and counts nothing twice: only the run that moves the record writes its counts and enqueues
//! the next page.

use std::rc::Rc;

use exactly_core::erasure;
use exactly_core::number::PhoneNumber;
use serde_json::{json, Value};
use worker::Env;

use crate::config::Config;

use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self, Job, Personal};
use crate::store::erasures::{self, no_counts, Erasure, Found, Next, State};
use crate::store::messages::erase::ERASED;
use crate::store::AccountDb;
use crate::store::{self, calls, carrier_events, deliveries, media, messages, numbers, outbox, routes};
use crate::work::outcome::{Done, Outcome};

/// One step: a table of one database.
#[derive(Debug, Clone)]
enum Step {
    Messages(String),
    Calls(String),
    RingTargets(String),
    CarrierEvents(String),
}

impl Step {
    /// Its name in the erasure's plan: the table's and the database's (`calls:ACCOUNTS_1`).
    fn name(&self) -> String {
        let (table, binding) = match self {
            Step::Messages(b) => ("messages", b),
            Step::Calls(b) => ("calls", b),
            Step::RingTargets(b) => ("ring_targets", b),
            Step::CarrierEvents(b) => ("carrier_events", b),
        };
        format!("{table}:{binding}")
    }
}

/// The steps of an erasure whose plan (the names of its steps so far, a JSON array) is `plan`:
/// that plan, then each step of the bindings as they are now that it lacks; each named step that
/// is still bound, or `None` where its database no longer is (a page skips it). The plan only
/// grows at its end, so the erasure's step index and marks keep pointing at the same tables
/// whatever a deploy binds in the meantime.
fn planned(plan: &str, now: Vec<Step>) -> (Vec<String>, Vec<Option<Step>>) {
    let mut names: Vec<String> = serde_json::from_str(plan).unwrap_or_default();
    for step in &now {
        let name = step.name();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let steps = names.iter().map(|name| now.iter().find(|s| s.name() == *name).cloned()).collect();
    (names, steps)
}

/// The steps of an erasure for `account` (or every account), in order.
async fn steps(env: &Env, config: &Rc<Config>, account: Option<&str>) -> Result<Vec<Step>, EdgeError> {
    let accounts = match account {
        Some(account) => {
            vec![routes::of_account(env, config, account).await?.unwrap_or_else(|| crate::bindings::DB.to_owned())]
        }
        None => routes::databases(env, config),
    };
    let mut steps = Vec::new();
    for binding in accounts {
        steps.push(Step::Messages(binding.clone()));
        steps.push(Step::Calls(binding.clone()));
        steps.push(Step::RingTargets(binding));
    }
    steps.extend(carrier_events::Log::open(env, config).bindings().into_iter().map(Step::CarrierEvents));
    Ok(steps)
}

/// Runs the next page of erasure `id`, whose number is `number`.
pub async fn next_page(env: &Env, config: &Rc<Config>, id: &str, number: &str) -> Result<Outcome, EdgeError> {
    let root = store::d1(env, crate::bindings::DB)?;
    let Some(erasure) = erasures::find(&root, id).await?.filter(|e| e.state == State::Running) else {
        return Ok(Outcome::Done(Done::NoOp));
    };
    let number = PhoneNumber::parse(number).map_err(|e| EdgeError::invalid("number", e.to_string()))?;
    let tail = config.tuning.erasure_tail_secs;
    let marks: Vec<i64> = serde_json::from_str(&erasure.marks).unwrap_or_default();
    // The tail waits its minute from when pass 1 ended (the record's last move), however its
    // page was asked for: a request for the same erasure enqueues one at once.
    let job = Job::Erase { id: erasure.id.clone(), number: Personal(number.as_str().to_owned()) };
    let tail_unbegun =
        erasure.pass == 2 && erasure.step == 0 && erasure.after_row == marks.first().copied().unwrap_or(0);
    if let (true, Some(ended)) = (tail_unbegun, erasure.updated_at) {
        let left_ms = ended.unix_millis() + tail * 1000 - now().unix_millis();
        if left_ms > 0 {
            queues::enqueue_later(env, job, u32::try_from((left_ms + 999) / 1000).unwrap_or(1)).await?;
            return Ok(Outcome::Done(Done::NotDue));
        }
    }
    let (names, steps) = planned(&erasure.plan, steps(env, config, erasure.account_id.as_deref()).await?);
    let plan = serde_json::to_string(&names).map_err(|e| EdgeError::platform("encode", e))?;
    let mut counts: Value = serde_json::from_str(&erasure.counts).unwrap_or_else(|_| no_counts());
    let index = usize::try_from(erasure.step).unwrap_or(usize::MAX);
    let found = match steps.get(index) {
        // The tail reads the tables of what processing writes; the dedupe log's ids are spread
        // over the shards, so "written since" has no row id there, and a carrier event stored
        // after the erasure began is a new fact.
        Some(Some(Step::CarrierEvents(_))) if erasure.pass == 2 => None,
        Some(Some(step)) => Some(page(env, config, &erasure, step, &number, &mut counts).await?),
        Some(None) => {
            let line = json!({"erasure": erasure.id, "step": names.get(index), "skipped": "no longer bound"});
            worker::console_warn!("{line}");
            None
        }
        None => None,
    };
    let next = next_of(&erasure, found, &steps, plan, counts)?;
    let at = now();
    if !erasures::advance(&root, &erasure, &next, at).await? {
        // Another run of this page moved it first, and enqueued what comes next.
        return Ok(Outcome::Done(Done::NoOp));
    }
    if next.finished {
        worker::console_log!("{}", json!({"erasure": erasure.id, "state": "finished", "counts": next.counts}));
        return Ok(Outcome::applied(true));
    }
    if next.pass == 2 && erasure.pass == 1 {
        queues::enqueue_later(env, job, u32::try_from(tail).unwrap_or(60)).await?;
    } else {
        queues::enqueue(env, job).await?;
    }
    Ok(Outcome::applied(true))
}

/// Where a page leaves `erasure`, after it `found` rows of its step (none when the step had
/// nothing to read): further along the same step, or at the start of the next one (pass 2 starts
/// each where pass 1 ended it).
fn next_of(
    erasure: &Erasure,
    found: Option<Found>,
    steps: &[Option<Step>],
    plan: String,
    counts: Value,
) -> Result<Next, EdgeError> {
    let index = usize::try_from(erasure.step).unwrap_or(usize::MAX);
    let mut marks: Vec<i64> = serde_json::from_str(&erasure.marks).unwrap_or_default();
    Ok(match found {
        Some(found) if !found.done => Next {
            pass: erasure.pass,
            step: erasure.step,
            after_row: found.upto,
            marks: erasure.marks.clone(),
            plan,
            counts,
            finished: false,
        },
        // The step is done (or the steps changed under it): on to the next, which pass 2 starts
        // where pass 1 ended it.
        found => {
            if let (1, Some(found)) = (erasure.pass, &found) {
                if marks.len() <= index {
                    marks.resize(index + 1, 0);
                }
                if let Some(mark) = marks.get_mut(index) {
                    *mark = found.last;
                }
            }
            let step = erasure.step + 1;
            let (pass, step) = if index + 1 < steps.len() { (erasure.pass, step) } else { (erasure.pass + 1, 0) };
            // A call pass 1 read can name the number later (a leg its object dialled, an event
            // built from its state), so the tail reads every call again; other tables only the
            // rows written since.
            let rereads = |s: i64| matches!(steps.get(s as usize), Some(Some(Step::Calls(_))));
            let start = |s: i64| if pass == 1 || rereads(s) { 0 } else { marks.get(s as usize).copied().unwrap_or(0) };
            Next {
                pass,
                step,
                after_row: start(step),
                marks: serde_json::to_string(&marks).map_err(|e| EdgeError::platform("encode", e))?,
                plan,
                counts,
                finished: pass > 2,
            }
        }
    })
}

/// Adds `n` to count `name`.
fn add(counts: &mut Value, name: &str, n: usize) {
    let was = counts[name].as_u64().unwrap_or(0);
    counts[name] = json!(was + n as u64);
}

/// Runs one page of `step`: erases what names `number` in its window, and says where it ended.
async fn page(
    env: &Env,
    config: &Rc<Config>,
    erasure: &Erasure,
    step: &Step,
    number: &PhoneNumber,
    counts: &mut Value,
) -> Result<Found, EdgeError> {
    let account = erasure.account_id.as_deref();
    let after = erasure.after_row;
    let n = number.as_str();
    match step {
        Step::Messages(binding) => {
            let shard = AccountDb::new(env, config, binding)?;
            let found = messages::erase::page(shard.db(), n, account, after).await?;
            if !found.hits.is_empty() {
                erase_messages(&shard, n, &erasures::ids(&found.hits)?, counts).await?;
                add(counts, "messages", found.hits.len());
            }
            Ok(found)
        }
        Step::Calls(binding) => {
            let shard = AccountDb::new(env, config, binding)?;
            let db = shard.db();
            let found = calls::erasure_page(db, n, account, after).await?;
            if !found.hits.is_empty() {
                let ids = erasures::ids(&found.hits)?;
                for hit in &found.hits {
                    add(counts, "call_states", usize::from(erase_call_state(env, &hit.id, n).await?));
                }
                let [calls_stmt, legs_stmt] = calls::redact(db, n, &ids, ERASED)?;
                let results = store::batch(
                    db,
                    vec![
                        deliveries::prune::erase_answers(db, &ids)?,
                        outbox::erase(db, n, &ids, ERASED)?,
                        calls_stmt,
                        legs_stmt,
                    ],
                )
                .await?;
                add(counts, "customer_events", results.get(1).map(store::changes).unwrap_or(0));
                // A call counts once, whether its caller, its callee or a leg named the number.
                add(counts, "calls", found.hits.len());
            }
            Ok(found)
        }
        Step::RingTargets(binding) => {
            let shard = AccountDb::new(env, config, binding)?;
            let db = shard.db();
            let found = numbers::erasure_page(db, n, account, after).await?;
            if !found.hits.is_empty() {
                add(counts, "ring_targets", numbers::drop_target(db, n, &erasures::ids(&found.hits)?).await?);
            }
            Ok(found)
        }
        Step::CarrierEvents(binding) => {
            let log = carrier_events::Log::open(env, config);
            let db = log.database(binding)?;
            let found = carrier_events::erasure_page(&db, erasure::digits(number), after).await?;
            let named: Vec<&erasures::Hit> =
                found.hits.iter().filter(|h| h.body.as_deref().is_some_and(|b| erasure::names(b, number))).collect();
            let named = match account {
                Some(account) => of_account(env, config, account, named, number).await?,
                None => named,
            };
            erase_events(&db, &named, number, counts).await?;
            Ok(found)
        }
    }
}

/// Erases `number` from the carrier events `named` (of the dedupe database `db`). An event not
/// processed yet whose job can go on without the number (another person's group message to it,
/// a leg that rang it) keeps the rest of what it says ([`without`]); any other loses its payload.
async fn erase_events(
    db: &worker::D1Database,
    named: &[&erasures::Hit],
    number: &PhoneNumber,
    counts: &mut Value,
) -> Result<(), EdgeError> {
    if named.is_empty() {
        return Ok(());
    }
    let open = carrier_events::unsettled_of(db, &erasures::ids(named.iter().copied())?).await?;
    let mut cleared = Vec::new();
    for hit in named {
        let carrier = open.iter().find(|(id, _)| *id == hit.id).map(|(_, carrier)| *carrier);
        let body = hit.body.as_deref().unwrap_or_default();
        match carrier.and_then(|carrier| without(carrier, body, number)) {
            Some(redacted) if carrier_events::redact_payload(db, &hit.id, body, &redacted).await? => {
                add(counts, "carrier_events", 1);
            }
            _ => cleared.push(*hit),
        }
    }
    if !cleared.is_empty() {
        add(counts, "carrier_events", carrier_events::erase_payloads(db, &erasures::ids(cleared)?).await?);
    }
    Ok(())
}

/// The payload `body` of a `carrier` event not processed yet with `number` taken out of it, when
/// it still reads as an event that is not the erased person's own: `None` for one that no longer
/// parses, or a message the person sent (or was sent to the account as), whose every word is
/// theirs. So another person's group message to the number is still received, and a call leg
/// that rang it still ends and is billed, without it.
fn without(carrier: exactly_core::Provider, body: &str, number: &PhoneNumber) -> Option<String> {
    let redacted = erasure::redact(body, number, ERASED)?;
    let event = exactly_core::parse_stored(carrier, redacted.as_bytes()).ok()?;
    match &event.kind {
        exactly_core::event::EventKind::MessageReceived(m) if m.from == ERASED || m.to == ERASED => None,
        _ => Some(redacted),
    }
}

/// Erases the messages `ids` (a JSON array) of a page: their media copies, what endpoints
/// answered to their events, the events, the media rows and the messages' number and text.
async fn erase_messages(account: &AccountDb, n: &str, ids: &str, counts: &mut Value) -> Result<(), EdgeError> {
    let (env, db) = (account.env(), account.db());
    // The copies first: once the rows are gone nothing names them.
    let keys = media::keys_of(db, ids).await?;
    for key in &keys {
        media::delete_copy(env, key).await?;
    }
    let results = store::batch(
        db,
        vec![
            deliveries::prune::erase_answers(db, ids)?,
            outbox::erase(db, n, ids, ERASED)?,
            media::erase(db, ids)?,
            messages::erase::redact(db, n, ids)?,
        ],
    )
    .await?;
    // A copy its job recorded between the read of the keys and the batch: deleted now, or
    // nothing would name it again.
    let late: Vec<String> = match results.get(2) {
        Some(deleted) => media::erased_keys(deleted)?.into_iter().filter(|k| !keys.contains(k)).collect(),
        None => Vec::new(),
    };
    for key in &late {
        media::delete_copy(env, key).await?;
    }
    add(counts, "media_copies", keys.len() + late.len());
    add(counts, "customer_events", results.get(1).map(store::changes).unwrap_or(0));
    Ok(())
}

/// The carrier events of `hits` that are `account`'s: those whose payload names, besides the
/// erased number, a number the account owns.
async fn of_account<'a>(
    env: &Env,
    config: &Rc<Config>,
    account: &str,
    hits: Vec<&'a erasures::Hit>,
    number: &PhoneNumber,
) -> Result<Vec<&'a erasures::Hit>, EdgeError> {
    if hits.is_empty() {
        return Ok(hits);
    }
    let others = |hit: &erasures::Hit| -> Vec<String> {
        erasure::numbers(hit.body.as_deref().unwrap_or_default())
            .into_iter()
            .filter(|n| n != number)
            .map(|n| n.as_str().to_owned())
            .collect()
    };
    let mut all: Vec<String> = hits.iter().flat_map(|h| others(h)).collect();
    all.sort_unstable();
    all.dedup();
    let binding = routes::of_account(env, config, account).await?;
    let shard = AccountDb::named(env, config, binding.as_deref())?;
    let db = shard.db();
    let list = serde_json::to_string(&all).map_err(|e| EdgeError::platform("encode", e))?;
    let owned = numbers::owned_of(db, account, &list).await?;
    Ok(hits.into_iter().filter(|h| others(h).iter().any(|n| owned.contains(n))).collect())
}

/// Asks the call's own object to erase the number from its storage; whether it held it.
async fn erase_call_state(env: &Env, call_id: &str, number: &str) -> Result<bool, EdgeError> {
    let stub = crate::platform::call_stub(env, call_id)?;
    let headers = worker::Headers::new();
    headers.set(crate::bindings::ERASE_HEADER, number).map_err(|e| EdgeError::platform("header", e))?;
    let request = crate::platform::request("POST", "https://call.internal/erase", Some(&headers), None, true)
        .map_err(|e| EdgeError::platform("call request", e))?;
    let mut answer = stub.fetch_with_request(request).await.map_err(|e| EdgeError::platform("call fetch", e))?;
    let body = answer.bytes().await.map_err(|e| EdgeError::platform("call answer", e))?;
    if answer.status_code() != 200 {
        return Err(EdgeError::unavailable("call machine", String::from_utf8_lossy(&body)));
    }
    let said: Value = serde_json::from_slice(&body).map_err(|e| EdgeError::platform("call answer", e))?;
    Ok(said["erased"].as_bool().unwrap_or(false))
}
