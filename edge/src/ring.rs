//! The per-call ring owner: a SQLite-backed Durable Object holding a call's ring plan and the
//! cursor of its sequential ring.
//!
//! One object per call (named by the call id) serializes every event of that call through one
//! owner. The cursor advances by compare-and-swap in the object's own storage *before* any dial
//! (`UPDATE ring SET position = next WHERE position = current AND state = 'ringing'`), and the
//! read and the swap are synchronous SQLite calls with no `.await` between them, so a duplicate
//! hangup, ten parallel copies of it, or a late hangup after an answer never dial twice. The
//! decision itself is `exactly_core::ring`.
//!
//! A dial is tracked apart from the claim: `dialed` is the last position whose dial the carrier
//! accepted, and `dial_started_at` leases the dial in flight, so a dial that failed is retried
//! (with the same idempotency key) by the next request after the lease lapses, never twice at
//! once.

use exactly_core::ring::{self, LegTag, RingCursor, RingDecision, RingPlan, RingState, RingUnchanged};
use serde::{Deserialize, Serialize};
use serde_json::json;
use worker::{durable_object, DurableObject, Env, Method, Request, RequestInit, Response, Result, SqlStorage, State};

use crate::carrier_api::{self, CallResult};
use crate::calls;
use crate::error::EdgeError;
use crate::platform::now;

/// How long a dial in flight holds its lease before another request may retry it.
const DIAL_LEASE_MILLIS: i64 = 30_000;

/// The Durable Object class bound as `CALL_RING` in `wrangler.toml`.
#[durable_object]
pub struct CallRing {
    state: State,
    env: Env,
}

/// The object's one row.
#[derive(Clone, Debug, Deserialize)]
struct Row {
    call_id: String,
    caller_number: String,
    targets: String,
    position: f64,
    state: String,
    dialed: f64,
    dial_started_at: f64,
}

/// A request to the object.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Store the plan and dial target 1 (once).
    Start { call_id: String, caller_number: String, targets: Vec<String> },
    /// The leg at `position` hung up unanswered.
    LegHungUp { position: u32 },
    /// The leg at `position` answered.
    LegAnswered { position: u32 },
    /// The caller hung up.
    CallerLeft,
    /// Report the cursor.
    Inspect,
}

/// The object's answer.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Answer {
    /// `dial`, `bridge`, `end_missed`, `stopped`, `pending` (a dial in flight elsewhere) or
    /// `unchanged`.
    pub decision: String,
    /// Why nothing changed, when it did not.
    pub reason: Option<String>,
    /// The cursor after the request.
    pub position: u32,
    /// `ringing`, `answered` or `over`.
    pub state: String,
    /// How many targets the plan has (0 when there is no plan).
    pub targets: u32,
    /// The position whose dial the carrier accepted last.
    pub dialed: u32,
}

impl DurableObject for CallRing {
    fn new(state: State, env: Env) -> Self {
        // Synchronous, so it completes before the first request is delivered.
        let _ = state.storage().sql().exec(
            "CREATE TABLE IF NOT EXISTS ring (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                call_id TEXT NOT NULL,
                caller_number TEXT NOT NULL,
                targets TEXT NOT NULL,
                position INTEGER NOT NULL,
                state TEXT NOT NULL,
                dialed INTEGER NOT NULL,
                dial_started_at INTEGER NOT NULL
            )",
            None,
        );
        Self { state, env }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let op: Op = match req.json().await {
            Ok(op) => op,
            Err(e) => return Response::error(format!("bad ring request: {e}"), 400),
        };
        match self.handle(op).await {
            Ok(answer) => Response::from_json(&answer),
            Err(e) => Ok(Response::from_json(&json!({ "error": e.to_string() }))?.with_status(503)),
        }
    }
}

impl CallRing {
    fn sql(&self) -> SqlStorage {
        self.state.storage().sql()
    }

    fn load(&self) -> std::result::Result<Option<Row>, EdgeError> {
        let rows: Vec<Row> = self
            .sql()
            .exec("SELECT call_id, caller_number, targets, position, state, dialed, dial_started_at FROM ring WHERE id = 1", None)
            .and_then(|c| c.to_array())
            .map_err(|e| EdgeError::platform("ring storage", e))?;
        Ok(rows.into_iter().next())
    }

    /// A guarded write; true when it changed the row.
    fn swap(&self, sql: &str, args: Vec<worker::SqlStorageValue>) -> std::result::Result<bool, EdgeError> {
        let rows: Vec<serde_json::Value> = self
            .sql()
            .exec(sql, args)
            .and_then(|c| c.to_array())
            .map_err(|e| EdgeError::platform("ring storage", e))?;
        Ok(!rows.is_empty())
    }

    async fn handle(&self, op: Op) -> std::result::Result<Answer, EdgeError> {
        if let Op::Start { call_id, caller_number, targets } = &op {
            let plan_text = serde_json::to_string(targets).map_err(|e| EdgeError::platform("encode plan", e))?;
            RingPlan::new(targets.clone()).map_err(|e| EdgeError::Unavailable(format!("invalid ring plan: {e:?}")))?;
            // The claim of position 1, taken before the dial: a second start finds the row.
            let created = self.swap(
                "INSERT INTO ring (id, call_id, caller_number, targets, position, state, dialed, dial_started_at)
                 VALUES (1, ?, ?, ?, 1, 'ringing', 0, ?) ON CONFLICT (id) DO NOTHING RETURNING id",
                vec![call_id.as_str().into(), caller_number.as_str().into(), plan_text.as_str().into(), (now().unix_millis() as f64).into()],
            )?;
            if created {
                return self.dial_current("dial").await;
            }
        }
        let Some(row) = self.load()? else {
            return Ok(Answer { decision: "unchanged".into(), reason: Some("no ring plan".into()), ..Answer::default() });
        };
        let plan = plan_of(&row)?;
        let cursor = cursor_of(&row);
        match op {
            Op::Start { .. } | Op::Inspect => self.finish_dial_or(&row, "unchanged", Some("already started")).await,
            Op::LegHungUp { position } => match ring::leg_hung_up(&plan, cursor, position) {
                (_, RingDecision::Dial { position: next_position, .. }) => {
                    let claimed = self.swap(
                        "UPDATE ring SET position = ?, dial_started_at = ? WHERE position = ? AND state = 'ringing' RETURNING position",
                        vec![f64::from(next_position).into(), (now().unix_millis() as f64).into(), f64::from(cursor.position).into()],
                    )?;
                    if claimed {
                        self.dial_current("dial").await
                    } else {
                        self.answer("unchanged", Some("lost the race"))
                    }
                }
                (_, RingDecision::EndMissed) => {
                    let claimed = self.swap(
                        "UPDATE ring SET state = 'over' WHERE position = ? AND state = 'ringing' RETURNING position",
                        vec![f64::from(cursor.position).into()],
                    )?;
                    self.answer(if claimed { "end_missed" } else { "unchanged" }, None)
                }
                (_, RingDecision::Unchanged(reason)) => self.finish_dial_or(&row, "unchanged", Some(reason_name(reason))).await,
                (_, RingDecision::Bridge { .. }) => self.answer("unchanged", None),
            },
            Op::LegAnswered { position } => match ring::leg_answered(cursor, position) {
                (_, RingDecision::Bridge { position }) => {
                    let claimed = self.swap(
                        "UPDATE ring SET state = 'answered' WHERE position = ? AND state = 'ringing' RETURNING position",
                        vec![f64::from(position).into()],
                    )?;
                    self.answer(if claimed { "bridge" } else { "unchanged" }, None)
                }
                // The same answer again (a rerun whose bridge may not have happened): bridging is
                // idempotent at the carrier, so say bridge again.
                (_, RingDecision::Unchanged(RingUnchanged::AlreadyAnswered)) if cursor.position == position => self.answer("bridge", None),
                (_, decision) => self.answer("unchanged", Some(&format!("{decision:?}"))),
            },
            Op::CallerLeft => {
                let (_, stopped) = ring::caller_left(cursor);
                let claimed = stopped
                    && self.swap("UPDATE ring SET state = 'over' WHERE state = 'ringing' RETURNING position", vec![])?;
                self.answer(if claimed { "stopped" } else { "unchanged" }, None)
            }
        }
    }

    /// Completes a dial that an earlier request claimed but could not finish, once its lease
    /// lapsed; otherwise answers `decision`.
    async fn finish_dial_or(&self, row: &Row, decision: &str, reason: Option<&str>) -> std::result::Result<Answer, EdgeError> {
        if row.state == "ringing" && row.dialed < row.position {
            let lapsed = (row.dial_started_at as i64) < now().unix_millis() - DIAL_LEASE_MILLIS;
            if !lapsed {
                return self.answer("pending", Some("a dial is in flight"));
            }
            let retaken = self.swap(
                "UPDATE ring SET dial_started_at = ? WHERE position = ? AND dial_started_at = ? AND state = 'ringing' RETURNING position",
                vec![(now().unix_millis() as f64).into(), row.position.into(), row.dial_started_at.into()],
            )?;
            if retaken {
                return self.dial_current("dial").await;
            }
        }
        self.answer(decision, reason)
    }

    /// Dials the position the cursor holds (already claimed by the caller of this function).
    async fn dial_current(&self, decision: &str) -> std::result::Result<Answer, EdgeError> {
        let row = self.load()?.ok_or_else(|| EdgeError::Unavailable("ring row vanished".into()))?;
        let plan = plan_of(&row)?;
        let position = row.position as u32;
        let target = plan.target(position).ok_or_else(|| EdgeError::Unavailable("cursor past the plan".into()))?.to_owned();
        let tag = LegTag { call: row.call_id.clone(), position };
        let key = format!("{}:leg:{position}", row.call_id);
        match carrier_api::dial(&self.env, &key, &row.caller_number, &target, &tag.encode()).await? {
            CallResult::Ok(leg) => {
                self.swap("UPDATE ring SET dialed = ? WHERE position = ? RETURNING dialed", vec![f64::from(position).into(), f64::from(position).into()])?;
                let db = crate::db::database(&self.env)?;
                calls::record_leg(&db, &row.call_id, position, &target, Some(&leg), "dialing", None, now()).await?;
                self.answer(decision, None)
            }
            CallResult::Refused(error) => {
                // The carrier will not dial this target: record it and treat it as unanswered.
                self.swap("UPDATE ring SET dialed = ? WHERE position = ? RETURNING dialed", vec![f64::from(position).into(), f64::from(position).into()])?;
                let db = crate::db::database(&self.env)?;
                calls::record_leg(&db, &row.call_id, position, &target, None, "no_answer", Some(&error.code), now()).await?;
                Box::pin(self.handle(Op::LegHungUp { position })).await
            }
            CallResult::Transient(reason) => {
                // Release the lease so the retry can dial at once.
                self.swap("UPDATE ring SET dial_started_at = 0 WHERE position = ? RETURNING position", vec![f64::from(position).into()])?;
                Err(EdgeError::Unavailable(format!("dial failed: {reason}")))
            }
        }
    }

    fn answer(&self, decision: &str, reason: Option<&str>) -> std::result::Result<Answer, EdgeError> {
        let row = self.load()?;
        Ok(Answer {
            decision: decision.to_owned(),
            reason: reason.map(str::to_owned),
            position: row.as_ref().map_or(0, |r| r.position as u32),
            state: row.as_ref().map_or_else(String::new, |r| r.state.clone()),
            targets: row.as_ref().and_then(|r| plan_of(r).ok()).map_or(0, |p| p.targets().len() as u32),
            dialed: row.as_ref().map_or(0, |r| r.dialed as u32),
        })
    }
}

fn plan_of(row: &Row) -> std::result::Result<RingPlan, EdgeError> {
    let targets: Vec<String> = serde_json::from_str(&row.targets).map_err(|e| EdgeError::platform("stored plan", e))?;
    RingPlan::new(targets).map_err(|e| EdgeError::Unavailable(format!("stored plan invalid: {e:?}")))
}

fn cursor_of(row: &Row) -> RingCursor {
    RingCursor { position: row.position as u32, state: RingState::from_name(&row.state).unwrap_or(RingState::Over) }
}

fn reason_name(reason: RingUnchanged) -> &'static str {
    match reason {
        RingUnchanged::StaleLeg => "stale leg",
        RingUnchanged::UnknownLeg => "unknown leg",
        RingUnchanged::AlreadyAnswered => "already answered",
        RingUnchanged::AlreadyOver => "already over",
    }
}

/// Sends `op` to the ring owner of `call_id`.
pub async fn send(env: &Env, call_id: &str, op: &Op) -> std::result::Result<Answer, EdgeError> {
    let namespace = env.durable_object(crate::bindings::CALL_RING).map_err(|e| EdgeError::platform("CALL_RING binding", e))?;
    let stub = namespace
        .id_from_name(call_id)
        .and_then(|id| id.get_stub())
        .map_err(|e| EdgeError::platform("ring stub", e))?;
    let body = serde_json::to_string(op).map_err(|e| EdgeError::platform("encode ring op", e))?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post).with_body(Some(body.into()));
    let request = Request::new_with_init("https://ring.internal/", &init).map_err(|e| EdgeError::platform("ring request", e))?;
    let mut response = stub.fetch_with_request(request).await.map_err(|e| EdgeError::platform("ring fetch", e))?;
    if response.status_code() != 200 {
        let text = response.text().await.unwrap_or_default();
        return Err(EdgeError::Unavailable(format!("ring owner answered {}: {text}", response.status_code())));
    }
    response.json::<Answer>().await.map_err(|e| EdgeError::platform("ring answer", e))
}
