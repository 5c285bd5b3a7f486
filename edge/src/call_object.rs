//! The per-call Durable Object: the home of one call's machine
//! ([`exactly_core::call_machine`]).
//!
//! One object per call (named by the call id, which the carrier session determines) serializes
//! every input of that call. For each input it loads the machine's state, runs
//! [`CallMachine::handle`], and in one synchronous step (no `.await` in between, so the object's
//! SQLite commits it atomically) stores the new state and appends the actions to its own queue.
//! Only then does it act: it executes the queued actions in order, each carrier command with its
//! idempotency key or `command_id`, each D1 write guarded, and removes an action in the same
//! step that feeds its result back to the machine. A crash at any point leaves either the action
//! still queued (it runs again, with the same key) or its result already applied; an alarm
//! resumes a queue that a failure or a crash interrupted (later and later while it keeps
//! failing, until it gives up and leaves the call to reconciliation), delivers the machine's
//! timer, and deletes everything the object stores once the call has been settled for its grace.

use std::cell::Cell;
use std::rc::Rc;

use exactly_core::call_machine::{Action, CallMachine, DialResult, Input};
use serde::{Deserialize, Serialize};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, SqlStorage, State};

use crate::carrier::telnyx::{self as carrier_api, Command};
use crate::carrier::CallResult;
use crate::config::Config;
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::call_storage as storage;
use crate::store::AccountDb;

/// How long a failed action waits before the alarm runs the queue again, at first.
const RETRY_MILLIS: i64 = 5_000;
/// Failed drains in a row that retry at [`RETRY_MILLIS`]; after them each wait doubles, up to
/// [`MAX_RETRY_MILLIS`].
const QUICK_RETRIES: i64 = 12;
/// The longest wait between two runs of a queue that keeps failing.
const MAX_RETRY_MILLIS: i64 = 3_600_000;
/// Failed drains in a row after which the object stops retrying (about a day of them): it logs
/// that it gave up, for the operator, and leaves the call to reconciliation, which asks the
/// carrier about a call that stays unfinished and feeds the answer back as a carrier fact.
const GIVE_UP_AFTER: i64 = 48;

/// When the alarm runs a queue again after `failures` failed drains in a row; none once it
/// gives up.
fn retry_delay(failures: i64) -> Option<i64> {
    if failures >= GIVE_UP_AFTER {
        return None;
    }
    let doublings = u32::try_from((failures - QUICK_RETRIES).clamp(0, 20)).unwrap_or(20);
    Some(RETRY_MILLIS.saturating_mul(1_i64 << doublings).min(MAX_RETRY_MILLIS))
}

/// How long a settled call (ended, nothing queued) keeps its storage
/// ([`crate::config::Tuning::call_grace_millis`]); then the object deletes all it stores.
fn grace_millis(config: &Config) -> i64 {
    config.tuning.call_grace_millis
}

/// The Durable Object class bound as `CALL_RING` in `wrangler.toml`.
#[durable_object]
pub struct CallRing {
    state: State,
    env: Env,
    /// A drain is running in this instance: another request's actions join its queue.
    draining: Cell<bool>,
}

/// The object's answer to an input.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answer {
    /// Actions still queued after this request's drain (0: everything is done). A non-zero
    /// count is retried by the object's alarm.
    pub pending: u32,
}

impl DurableObject for CallRing {
    fn new(state: State, env: Env) -> Self {
        // Synchronous, so it completes before the first request is delivered.
        storage::create(&state.storage().sql());
        Self { state, env, draining: Cell::new(false) }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        crate::quotas::invocation(|| "call object request".to_owned(), self.answer(req)).await
    }

    async fn alarm(&self) -> Result<Response> {
        crate::quotas::invocation(|| "call object alarm".to_owned(), self.wake()).await
    }
}

impl CallRing {
    /// Answers one request: an input, an erasure, or (in the test build) a look at its storage.
    async fn answer(&self, mut req: Request) -> Result<Response> {
        // The test build's look at what the object still stores.
        #[cfg(feature = "fault-injection")]
        if req.headers().get(crate::bindings::HELD_HEADER)?.is_some() {
            return match storage::held(&self.sql()) {
                Ok(rows) => Response::from_json(&serde_json::json!({ "rows": rows })),
                Err(e) => Ok(Response::from_json(&serde_json::json!({ "error": e.to_string() }))?.with_status(503)),
            };
        }
        // An erasure (docs/contract.md §5, "Erasure"): the number leaves the call's own storage.
        if let Some(number) = req.headers().get(crate::bindings::ERASE_HEADER)? {
            let erased = crate::store::messages::erase::ERASED;
            return match storage::erase(&self.sql(), &number, erased) {
                Ok(held) => Response::from_json(&serde_json::json!({ "erased": held })),
                Err(e) => Ok(Response::from_json(&serde_json::json!({ "error": e.to_string() }))?.with_status(503)),
            };
        }
        // Every JSON the edge reads goes through `serde_json::from_slice`: one reader in the bundle.
        let input = match req.bytes().await.and_then(|body| Ok(serde_json::from_slice::<Input>(&body)?)) {
            Ok(input) => input,
            Err(e) => return Response::error(format!("bad call input: {e}"), 400),
        };
        // The object's entry points read the configuration once, here and in the alarm.
        let result = match self.accept(input).and_then(|()| crate::config::get(&self.env)) {
            Ok(config) => self.drain(&config).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(pending) => Response::from_json(&Answer { pending }),
            Err(e) => Ok(Response::from_json(&serde_json::json!({ "error": e.to_string() }))?.with_status(503)),
        }
    }

    /// The alarm: a timer input, a retry of queued actions, or, once the call is settled and
    /// past its grace, the end of its storage.
    async fn wake(&self) -> Result<Response> {
        let failed = |e: EdgeError| worker::Error::RustError(e.to_string());
        let config = crate::config::get(&self.env).map_err(failed)?;
        let machine = self.load().map_err(failed)?;
        if self.past_grace(&machine, &config).map_err(failed)? {
            // Settled and past its grace: nothing of the call is kept. The tables come back empty,
            // so a request this instance still gets finds them.
            self.state.storage().delete_all().await?;
            storage::create(&self.sql());
            return Response::ok("");
        }
        if machine.deadline.is_some_and(|d| now() >= d) && !machine.timed_out {
            self.accept(Input::Timer).map_err(failed)?;
        }
        if let Err(e) = self.drain(&config).await {
            worker::console_error!("{}", serde_json::json!({"call_ring": "alarm", "error": e.to_string()}));
        }
        Response::ok("")
    }
}

/// Clears the drain flag however the drain ends.
struct Draining<'a>(&'a Cell<bool>);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl CallRing {
    fn sql(&self) -> SqlStorage {
        self.state.storage().sql()
    }

    fn load(&self) -> std::result::Result<CallMachine, EdgeError> {
        match storage::state(&self.sql())? {
            Some(state) => {
                serde_json::from_slice(state.as_bytes()).map_err(|e| EdgeError::platform("stored call state", e))
            }
            None => Ok(CallMachine::new()),
        }
    }

    /// Runs the machine on `input` and stores the new state with its actions, in one
    /// synchronous step.
    fn accept(&self, input: Input) -> std::result::Result<(), EdgeError> {
        let (machine, actions) = self.load()?.handle(input, now());
        let state = serde_json::to_string(&machine).map_err(|e| EdgeError::platform("encode call state", e))?;
        let actions = actions
            .iter()
            .map(serde_json::to_string)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| EdgeError::platform("encode call action", e))?;
        storage::save(&self.sql(), &state, &actions)
    }

    fn next_action(&self) -> std::result::Result<Option<(i64, Action)>, EdgeError> {
        let Some((seq, text)) = storage::next_action(&self.sql())? else { return Ok(None) };
        let action =
            serde_json::from_slice(text.as_bytes()).map_err(|e| EdgeError::platform("stored call action", e))?;
        Ok(Some((seq, action)))
    }

    /// Whether the call is settled (ended, nothing queued) and has been for its grace.
    fn past_grace(&self, machine: &CallMachine, config: &Config) -> std::result::Result<bool, EdgeError> {
        if machine.ended.is_none() || storage::pending(&self.sql())? > 0 {
            return Ok(false);
        }
        let settled_at = storage::meta(&self.sql(), "settled_at")?;
        Ok(settled_at.is_some_and(|at| now().unix_millis() >= at.saturating_add(grace_millis(config))))
    }

    /// Executes queued actions in order until the queue is empty or one fails; then arms the
    /// alarm for a retry or the machine's timer. Returns how many actions are still queued.
    async fn drain(&self, config: &Rc<Config>) -> std::result::Result<u32, EdgeError> {
        if !self.draining.get() {
            self.draining.set(true);
            let _guard = Draining(&self.draining);
            let mut failed = false;
            while let Some((seq, action)) = self.next_action()? {
                match self.execute(config, &action).await {
                    Ok(result) => {
                        // The action leaves the queue in the same step its result is applied.
                        storage::remove_action(&self.sql(), seq)?;
                        if let Some(input) = result {
                            self.accept(input)?;
                        }
                    }
                    Err(e) => {
                        worker::console_warn!(
                            "{}",
                            serde_json::json!({"call_ring": "action", "outcome": "retried", "error": e.to_string()})
                        );
                        failed = true;
                        break;
                    }
                }
            }
            let failures = if failed { storage::meta(&self.sql(), "failures")?.unwrap_or(0) + 1 } else { 0 };
            storage::set_meta(&self.sql(), "failures", failures)?;
        }
        let pending = storage::pending(&self.sql())?;
        self.rearm(config, pending).await?;
        Ok(pending)
    }

    /// The alarm runs at the earliest of a retry of queued actions (later and later while they
    /// keep failing, none once the object gives up), the machine's timer, and the end of a
    /// settled call's grace.
    async fn rearm(&self, config: &Config, pending: u32) -> std::result::Result<(), EdgeError> {
        let machine = self.load()?;
        let at = now().unix_millis();
        let timer =
            machine.deadline.filter(|_| !machine.timed_out && machine.ended.is_none()).map(|d| d.unix_millis() - at);
        let failures = storage::meta(&self.sql(), "failures")?.unwrap_or(0);
        let retry = if pending > 0 { retry_delay(failures) } else { None };
        if pending > 0 && retry.is_none() {
            worker::console_error!(
                "{}",
                serde_json::json!({"call_ring": "gave up", "pending": pending, "failures": failures,
                    "left_to": "reconciliation"})
            );
        }
        let purge = if machine.ended.is_some() && pending == 0 {
            let settled_at = match storage::meta(&self.sql(), "settled_at")? {
                Some(settled_at) => settled_at,
                None => {
                    storage::set_meta(&self.sql(), "settled_at", at)?;
                    at
                }
            };
            Some(settled_at.saturating_add(grace_millis(config)) - at)
        } else {
            None
        };
        let delay = [timer, retry, purge].into_iter().flatten().min();
        if let Some(delay) = delay {
            self.state.storage().set_alarm(delay.max(1)).await.map_err(|e| EdgeError::platform("call alarm", e))?;
        }
        Ok(())
    }

    /// The database of the call's account (`DB` before `call.initiated` named it, or with no
    /// route).
    async fn account_db(&self, config: &Rc<Config>) -> std::result::Result<AccountDb, EdgeError> {
        let account = self.load()?.call.map(|c| c.account_id).filter(|a| !a.is_empty());
        let binding = match account {
            Some(account) => crate::store::routes::of_account(&self.env, config, &account).await?,
            None => None,
        };
        AccountDb::named(&self.env, config, binding.as_deref())
    }

    /// Carries out one action; the input that reports its result, if it has one. An error
    /// leaves the action queued.
    async fn execute(&self, config: &Rc<Config>, action: &Action) -> std::result::Result<Option<Input>, EdgeError> {
        // The call's rows are in its account's database (docs/scaling.md, "Accounts across
        // databases"); the carrier commands need none.
        let writes = matches!(
            action,
            Action::RecordCall { .. }
                | Action::RecordLeg { .. }
                | Action::RecordAnswered { .. }
                | Action::RecordEnd { .. }
        );
        let account = if writes {
            self.account_db(config).await?
        } else {
            AccountDb::new(&self.env, config, crate::bindings::DB)?
        };
        let (env, db) = (account.env(), account.db());
        Ok(match action {
            Action::AnswerCaller { call_control_id, command_id } => {
                let accepted = commanded(
                    carrier_api::command(config, call_control_id, Command::Answer, command_id).await?,
                    "answer",
                )?;
                Some(Input::AnswerResult { accepted })
            }
            Action::Dial { position, target, from, tag, idempotency_key, timeout_secs } => {
                let result =
                    match carrier_api::dial(config, idempotency_key, from, target, &tag.encode(), *timeout_secs).await?
                    {
                        CallResult::Ok(leg) => DialResult::Placed { call_control_id: leg.call_control_id },
                        CallResult::Refused(e) => DialResult::Refused { code: e.code },
                        CallResult::Transient(reason) | CallResult::Lost(reason) => {
                            return Err(EdgeError::unavailable("carrier", format!("dial: {reason}")))
                        }
                    };
                Some(Input::DialResult { position: *position, result })
            }
            Action::Bridge { caller_control_id, leg_control_id, command_id, .. } => {
                let bridge = Command::Bridge { other_call_control_id: leg_control_id };
                commanded(carrier_api::command(config, caller_control_id, bridge, command_id).await?, "bridge")?;
                None
            }
            Action::HangupLeg { call_control_id, command_id, .. }
            | Action::HangupCaller { call_control_id, command_id } => {
                commanded(carrier_api::command(config, call_control_id, Command::Hangup, command_id).await?, "hangup")?;
                None
            }
            Action::RecordCall { view } => {
                let change = crate::store::calls::record(db, view, now()).await?;
                crate::queues::deliver_many(&account, change.to_enqueue(db).await?).await?;
                None
            }
            Action::RecordLeg { call_id, leg, version } => {
                if crate::faults::d1_write_after_dial_fails(&leg.target, call_id) {
                    return Err(EdgeError::unavailable(
                        "injected fault",
                        format!("injected D1 failure writing leg {} of {call_id}", leg.position),
                    ));
                }
                crate::store::calls::record_leg(db, call_id, leg, *version, now()).await?;
                None
            }
            Action::RecordAnswered { at, view, .. } => {
                let change = crate::store::calls::record_answered(db, view, *at, now()).await?;
                crate::queues::deliver_many(&account, change.to_enqueue(db).await?).await?;
                None
            }
            Action::RecordEnd { end, view } => {
                let change = crate::store::calls::record_end(db, view, *end, now()).await?;
                crate::queues::deliver_many(&account, change.to_enqueue(db).await?).await?;
                None
            }
            Action::MarkProcessed { event } => {
                crate::store::carrier_events::Log::open(env, config).mark_processed_id(event, now()).await?;
                None
            }
            // The alarm is armed from the stored state after every drain.
            Action::SetTimer { .. } => None,
        })
    }
}

/// Sends `input` to the machine of `call_id` and waits for its drain.
pub async fn send(env: &Env, call_id: &str, input: &Input) -> std::result::Result<Answer, EdgeError> {
    let stub = crate::platform::call_stub(env, call_id)?;
    let body = serde_json::to_string(input).map_err(|e| EdgeError::platform("encode call input", e))?;
    let request = crate::platform::request("POST", "https://call.internal/", None, Some(&body), true)
        .map_err(|e| EdgeError::platform("call request", e))?;
    let mut response = stub.fetch_with_request(request).await.map_err(|e| EdgeError::platform("call fetch", e))?;
    if response.status_code() != 200 {
        let text = response.text().await.unwrap_or_default();
        return Err(EdgeError::unavailable(
            "call machine",
            format!("call machine answered {}: {text}", response.status_code()),
        ));
    }
    let body = response.bytes().await.map_err(|e| EdgeError::platform("call answer", e))?;
    serde_json::from_slice::<Answer>(&body).map_err(|e| EdgeError::platform("call answer", e))
}

/// Whether the carrier took a call command: `false` when it refused it (the leg is gone or the
/// command no longer applies), an error to retry when it did not answer.
fn commanded(result: CallResult<()>, what: &str) -> Result<bool, EdgeError> {
    match result {
        CallResult::Ok(()) => Ok(true),
        CallResult::Refused(e) => {
            worker::console_log!("{}", serde_json::json!({"call_ring": what, "outcome": "refused", "code": e.code}));
            Ok(false)
        }
        CallResult::Transient(reason) | CallResult::Lost(reason) => {
            Err(EdgeError::unavailable("carrier", format!("{what}: {reason}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_queue_is_retried_later_and_later_then_left() {
        assert_eq!(retry_delay(0), Some(RETRY_MILLIS));
        assert_eq!(retry_delay(QUICK_RETRIES), Some(RETRY_MILLIS));
        assert_eq!(retry_delay(QUICK_RETRIES + 1), Some(2 * RETRY_MILLIS));
        assert_eq!(retry_delay(QUICK_RETRIES + 3), Some(8 * RETRY_MILLIS));
        assert_eq!(retry_delay(GIVE_UP_AFTER - 1), Some(MAX_RETRY_MILLIS));
        assert_eq!(retry_delay(GIVE_UP_AFTER), None);
        // The waits of all the tries before it gives up: about a day.
        let total: i64 = (0..GIVE_UP_AFTER).filter_map(retry_delay).sum();
        assert!((20 * 3_600_000..=48 * 3_600_000).contains(&total), "{total}");
    }
}
