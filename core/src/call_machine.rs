//! The call machine: one inbound call, its sequential ring, and every order its events can
//! arrive in.
//!
//! Sans-IO in the manner of quinn-proto's `Connection`: [`CallMachine::handle`] takes the state,
//! one [`Input`] and `now`, and returns the new state with the [`Action`]s to carry out. The edge's
//! per-call Durable Object persists the state before it acts, executes the actions in order
//! (carrier commands with their idempotency keys, guarded D1 writes), and feeds command results
//! back in as inputs. Tests drive the same function with a simulated carrier.
//!
//! # How order stops mattering
//! The state is a set of *facts* (the caller's leg, each ring leg's dial result, answer and
//! hangup), each recorded whatever order it arrives in; duplicates add nothing. After every
//! input one deterministic step, [`CallMachine::advance`], derives what the facts call for and
//! emits each action at most once (every action has a flag in the state). Two rules keep the
//! outcome independent of arrival order:
//! - **Commands follow knowledge.** Nothing is answered, dialled or bridged once the caller is
//!   known to be gone: a caller's hangup that arrives first leaves a tombstone, and the
//!   `call.initiated` behind it records the call and ends it as missed, with no command.
//! - **The record follows the carrier's clock.** Whether the call was answered, when it ended
//!   and what a leg's outcome was are read from the events' own times, and the call ends only
//!   once every leg it dialled has settled (or a timer says a fact is not coming), so a late fact
//!   cannot contradict an end already written.
//!
//! ```text
//!   caller:  unknown --initiated--> parked --answer accepted--> answered --hangup--> gone
//!               \--------------------------hangup (tombstone)-------------------------^
//!   ring:    cursor 0 --dial 1--> k ringing --k ended unanswered--> dial k+1 ... --> exhausted
//!                                     \--k answered--> bridged
//!   call:    (not recorded) --> ringing --> in_progress --> completed
//!                                   \------------------------> missed
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::call::{billable_minutes, duration_secs, CallStatus};
use crate::ring_plan::{LegTag, MAX_TARGETS};
use crate::{Provider, Timestamp};

/// How long the machine waits for a fact that may never come (a leg's hangup after the caller
/// left, the caller's hangup after the platform hung it up) before deciding without it.
pub const SETTLE_WAIT_MILLIS: i64 = 60_000;

pub use crate::ring_plan::DEFAULT_RING_TIMEOUT_SECS;

/// The refusal a leg reads as when its target was erased from the plan while the call rang
/// ([`crate::erasure::MARKER`]): it is never dialled.
pub const ERASED_TARGET: &str = "erased";

fn default_ring_timeout() -> u32 {
    DEFAULT_RING_TIMEOUT_SECS
}

/// The hangup cause of a leg that was answered and then cleared.
const ANSWERED_CAUSE: &str = "normal_clearing";

/// Where a carrier's call event goes: which call's machine, and what it tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    /// A call to a platform number starts: the edge resolves the number's owner and ring plan
    /// and feeds [`Fact::Initiated`] to the machine of `call.id`.
    Inbound(InboundCall),
    /// A fact for the machine of `call_id`.
    Fact {
        /// The call.
        call_id: String,
        /// What the event tells.
        fact: Fact,
    },
    /// Nothing for any machine: a dialled leg's own `call.initiated`, a bridge report, the
    /// caller leg's `call.answered` (the answer command's result already told it).
    Ignore,
}

/// An inbound call before its owner is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundCall {
    /// The call's id and legs; `account_id` is empty until [`InboundCall::fact`].
    pub call: CallInfo,
}

impl InboundCall {
    /// The fact to feed once the edge knows the owner, the plan and how long each target rings.
    pub fn fact(mut self, account_id: &str, plan: Vec<String>, ring_timeout_secs: u32) -> Fact {
        self.call.account_id = account_id.to_owned();
        Fact::Initiated { call: Box::new(self.call), plan, ring_timeout_secs }
    }
}

/// Routes a call event. A dialled leg's events carry the platform's [`LegTag`] and go to the
/// call it names; the caller's leg events go to the call of their carrier session. Events
/// without a time take `now`.
pub fn route(event: &crate::CarrierEvent, now: Timestamp) -> Routed {
    use crate::event::{CallDirection, EventKind};
    let at = event.occurred_at.unwrap_or(now);
    let tag = |state: &Option<String>| state.as_deref().and_then(LegTag::parse);
    match &event.kind {
        EventKind::CallInitiated(leg) => {
            if leg.direction == CallDirection::Outgoing || tag(&leg.client_state).is_some() {
                return Routed::Ignore;
            }
            Routed::Inbound(InboundCall {
                call: CallInfo {
                    id: call_id(event.provider, &leg.leg.call_session_id),
                    account_id: String::new(),
                    carrier: event.provider,
                    from: leg.from.clone(),
                    to: leg.to.clone(),
                    call_session_id: leg.leg.call_session_id.clone(),
                    call_control_id: leg.leg.call_control_id.clone(),
                    call_leg_id: leg.leg.call_leg_id.clone(),
                    created_at: at,
                },
            })
        }
        EventKind::CallAnswered(leg) => match tag(&leg.client_state) {
            Some(t) => Routed::Fact {
                call_id: t.call,
                fact: Fact::LegAnswered { position: t.position, call_control_id: leg.leg.call_control_id.clone(), at },
            },
            None => Routed::Ignore,
        },
        EventKind::CallHangup(hangup) => match tag(&hangup.client_state) {
            Some(t) => Routed::Fact {
                call_id: t.call,
                fact: Fact::LegHungUp {
                    position: t.position,
                    call_control_id: hangup.leg.call_control_id.clone(),
                    at,
                    cause: hangup.cause.clone(),
                },
            },
            None => Routed::Fact {
                call_id: call_id(event.provider, &hangup.leg.call_session_id),
                fact: Fact::CallerHungUp { at },
            },
        },
        _ => Routed::Ignore,
    }
}

/// The call as the platform records it: everything `call.initiated` tells, fixed at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallInfo {
    /// The platform's id (`call_...`), derived from the carrier's session.
    pub id: String,
    /// The account that owns the called number.
    pub account_id: String,
    /// The carrier the call came through.
    pub carrier: Provider,
    /// The caller.
    pub from: String,
    /// The platform number called; the ring legs are dialled from it.
    pub to: String,
    /// The carrier's session, shared by the caller's leg events.
    pub call_session_id: String,
    /// The caller's leg: where answer and hangup commands go.
    pub call_control_id: String,
    /// The caller leg's id.
    pub call_leg_id: String,
    /// When the call started (the carrier's `occurred_at` of `call.initiated`).
    pub created_at: Timestamp,
}

/// The platform's id for the call on a carrier session: stable, so a caller's hangup that
/// arrives before `call.initiated` reaches the same machine.
pub fn call_id(carrier: Provider, call_session_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{}\n{call_session_id}", carrier.as_str()).as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("call_{hex}")
}

/// What the platform knows of the caller's leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CallerLeg {
    /// No event of the caller's leg yet.
    Unknown,
    /// `call.initiated` arrived; the leg waits to be answered.
    Parked,
    /// The carrier accepted the answer command.
    Answered,
    /// The caller hung up at `at` (the carrier's time).
    Gone {
        /// When the caller hung up.
        at: Timestamp,
    },
}

/// A carrier command's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Not issued.
    NotSent,
    /// Issued, result not known.
    Sent,
    /// The carrier accepted it.
    Accepted,
    /// The carrier refused it (the leg is gone, or the command does not apply).
    Refused,
}

/// The result of a dial, as the carrier answered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Dial {
    /// The dial is issued; its result is not known.
    Sent,
    /// The carrier placed the leg.
    Placed {
        /// The leg's handle for commands.
        call_control_id: String,
    },
    /// The carrier refused to dial this target.
    Refused {
        /// The carrier's error code.
        code: String,
        /// When the refusal was learned.
        at: Timestamp,
    },
}

/// One ring leg's hangup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegEnd {
    /// When the leg ended (the carrier's time).
    pub at: Timestamp,
    /// `hangup_cause`.
    pub cause: String,
}

/// What the platform knows of one ring leg.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leg {
    /// The dial, once issued.
    pub dial: Option<Dial>,
    /// The leg's handle, from the dial result or any of its events.
    pub call_control_id: Option<String>,
    /// When the leg answered, if it did.
    pub answered_at: Option<Timestamp>,
    /// How it ended, if it did.
    pub ended: Option<LegEnd>,
    /// A hangup command was issued for it.
    pub hangup_sent: bool,
    /// The leg as last written to the record, and that write's version.
    pub written: Option<(LegView, u32)>,
}

crate::text_enum! {
    /// A leg's outcome as the record shows it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum LegOutcome {
        /// Ringing.
        Dialing = "dialing",
        /// Answered (and bridged, unless the caller had left).
        Answered = "answered",
        /// Ended unanswered, or the carrier refused to dial it.
        NoAnswer = "no_answer",
        /// Hung up by the platform because the caller left or the call ended.
        Canceled = "canceled",
    }
}

/// One leg as the record shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegView {
    /// 1-based position in the ring plan.
    pub position: u32,
    /// Who was dialled.
    pub target: String,
    /// Its outcome so far.
    pub outcome: LegOutcome,
    /// The carrier's hangup cause, or its error code for a refused dial.
    pub cause: Option<String>,
    /// The leg's handle at the carrier, when known.
    pub call_control_id: Option<String>,
    /// When the leg answered (the carrier's time), if it did.
    #[serde(default)]
    pub answered_at: Option<Timestamp>,
    /// When the leg's hangup says it ended (the carrier's time), once known.
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
}

/// How the call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEnd {
    /// `Completed` (answered) or `Missed`.
    pub status: CallStatus,
    /// When it ended.
    pub ended_at: Timestamp,
    /// Whole seconds from answer to end, rounded up (0 when missed).
    pub duration_secs: u64,
    /// Minutes billed (0 when missed).
    pub billable_minutes: u64,
}

/// The call as the record shows it after a change: what the D1 rows and the customer event
/// carry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallView {
    /// What `call.initiated` told.
    pub info: CallInfo,
    /// Its status.
    pub status: CallStatus,
    /// When a leg answered, if one did (while the caller was still there).
    pub answered_at: Option<Timestamp>,
    /// How it ended, if it did.
    pub end: Option<CallEnd>,
    /// Its legs, in ring order.
    pub legs: Vec<LegView>,
}

/// One thing that happened to the call, as a carrier event told it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Fact {
    /// The caller's `call.initiated`, with the owner and ring plan the edge resolved.
    Initiated {
        /// The call (boxed: it is most of a fact's size).
        call: Box<CallInfo>,
        /// The targets of the called number, in order (may be empty: nobody is rung).
        plan: Vec<String>,
        /// How long each target rings before the carrier gives up on it.
        #[serde(default = "default_ring_timeout")]
        ring_timeout_secs: u32,
    },
    /// The caller's leg hung up.
    CallerHungUp {
        /// When.
        at: Timestamp,
    },
    /// A ring leg answered.
    LegAnswered {
        /// Its position.
        position: u32,
        /// Its handle.
        call_control_id: String,
        /// When.
        at: Timestamp,
    },
    /// A ring leg hung up.
    LegHungUp {
        /// Its position.
        position: u32,
        /// Its handle.
        call_control_id: String,
        /// When.
        at: Timestamp,
        /// `hangup_cause`.
        cause: String,
    },
}

/// What the carrier answered to a dial.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum DialResult {
    /// The leg was placed.
    Placed {
        /// Its handle.
        call_control_id: String,
    },
    /// The carrier will not dial this target.
    Refused {
        /// The carrier's error code.
        code: String,
    },
}

/// One input to the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    /// A carrier event: the fact it tells, and the stored event to mark processed.
    Carrier {
        /// The stored carrier event's id.
        event: String,
        /// What it tells.
        fact: Fact,
    },
    /// The carrier's answer to [`Action::AnswerCaller`]: accepted or not.
    AnswerResult {
        /// True when the carrier answered the leg.
        accepted: bool,
    },
    /// The carrier's answer to [`Action::Dial`].
    DialResult {
        /// The position dialled.
        position: u32,
        /// What the carrier said.
        result: DialResult,
    },
    /// The timer set by [`Action::SetTimer`] fired.
    Timer,
}

/// What the machine asks the edge to do, in order. Carrier commands carry the id that makes a
/// repeat a no-op at the carrier; record writes are guarded so a repeat changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Answer the caller's leg; report the result as [`Input::AnswerResult`].
    AnswerCaller {
        /// The caller's leg.
        call_control_id: String,
        /// Makes a repeat a no-op at the carrier.
        command_id: String,
    },
    /// Dial the target at `position`; report the result as [`Input::DialResult`].
    Dial {
        /// 1-based position in the plan.
        position: u32,
        /// Who to dial.
        target: String,
        /// The number the leg comes from (the number the caller called).
        from: String,
        /// What the leg carries as `client_state`, so its events name the call and position.
        tag: LegTag,
        /// One leg at the carrier however often the dial is repeated.
        idempotency_key: String,
        /// How long the target rings before the carrier ends the leg unanswered.
        #[serde(default = "default_ring_timeout")]
        timeout_secs: u32,
    },
    /// Bridge the answered leg to the caller.
    Bridge {
        /// The position bridged.
        position: u32,
        /// The caller's leg.
        caller_control_id: String,
        /// The answered leg.
        leg_control_id: String,
        /// Makes a repeat a no-op at the carrier.
        command_id: String,
    },
    /// Hang up a ring leg.
    HangupLeg {
        /// Its position.
        position: u32,
        /// Its handle.
        call_control_id: String,
        /// Makes a repeat a no-op at the carrier.
        command_id: String,
    },
    /// Hang up the caller.
    HangupCaller {
        /// The caller's leg.
        call_control_id: String,
        /// Makes a repeat a no-op at the carrier.
        command_id: String,
    },
    /// Record the call (`ringing`) with its `call.initiated` event.
    RecordCall {
        /// The call as recorded.
        view: CallView,
    },
    /// Record a leg's current outcome; a write of an older version changes nothing.
    RecordLeg {
        /// The call.
        call_id: String,
        /// The leg.
        leg: LegView,
        /// Increases with every write of this leg.
        version: u32,
    },
    /// `ringing -> in_progress`, with the `call.answered` event.
    RecordAnswered {
        /// The position that answered.
        position: u32,
        /// When.
        at: Timestamp,
        /// The call after the change.
        view: CallView,
    },
    /// End the call once: status, duration, billed minutes, usage and its customer event.
    RecordEnd {
        /// How it ended.
        end: CallEnd,
        /// The call after the change.
        view: CallView,
    },
    /// Mark the stored carrier event processed (after the effects before it are written).
    MarkProcessed {
        /// The stored carrier event's id.
        event: String,
    },
    /// Deliver [`Input::Timer`] at `at`.
    SetTimer {
        /// When.
        at: Timestamp,
    },
}

/// The state of one call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallMachine {
    /// What `call.initiated` told, once it arrived.
    pub call: Option<CallInfo>,
    /// The ring plan (from `call.initiated`).
    pub plan: Vec<String>,
    /// How long each target rings (from `call.initiated`).
    #[serde(default = "default_ring_timeout")]
    pub ring_timeout_secs: u32,
    /// The caller's leg.
    pub caller: CallerLeg,
    /// The answer command for the caller's leg.
    pub answer: Command,
    /// A hangup command for the caller's leg was issued.
    pub caller_hangup_sent: bool,
    /// The highest position dialled (0: none).
    pub cursor: u32,
    /// What is known of each leg, by position (including legs whose events came before their
    /// dial).
    pub legs: BTreeMap<u32, Leg>,
    /// The position bridged to the caller.
    pub bridged: Option<u32>,
    /// The call row and its `call.initiated` are written.
    pub recorded: bool,
    /// The answer written: position and time.
    pub answered: Option<(u32, Timestamp)>,
    /// The end written.
    pub ended: Option<CallEnd>,
    /// When the machine stops waiting for facts that may not come.
    pub deadline: Option<Timestamp>,
    /// The deadline passed: decide with what is known.
    pub timed_out: bool,
}

impl Default for CallMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl CallMachine {
    /// A machine that knows nothing yet.
    pub fn new() -> Self {
        CallMachine {
            call: None,
            plan: Vec::new(),
            ring_timeout_secs: DEFAULT_RING_TIMEOUT_SECS,
            caller: CallerLeg::Unknown,
            answer: Command::NotSent,
            caller_hangup_sent: false,
            cursor: 0,
            legs: BTreeMap::new(),
            bridged: None,
            recorded: false,
            answered: None,
            ended: None,
            deadline: None,
            timed_out: false,
        }
    }

    /// Applies one input at `now`: the new state and the actions to carry out, in order.
    pub fn handle(mut self, input: Input, now: Timestamp) -> (CallMachine, Vec<Action>) {
        let mut actions = Vec::new();
        let processed = match input {
            Input::Carrier { event, fact } => {
                self.learn(fact);
                Some(event)
            }
            Input::AnswerResult { accepted } => {
                if self.answer == Command::Sent {
                    self.answer = if accepted { Command::Accepted } else { Command::Refused };
                    if accepted && self.caller == CallerLeg::Parked {
                        self.caller = CallerLeg::Answered;
                    }
                }
                None
            }
            Input::DialResult { position, result } => {
                if let Some(leg) = self.legs.get_mut(&position) {
                    if leg.dial == Some(Dial::Sent) {
                        leg.dial = Some(match result {
                            DialResult::Placed { call_control_id } => {
                                leg.call_control_id.get_or_insert_with(|| call_control_id.clone());
                                Dial::Placed { call_control_id }
                            }
                            DialResult::Refused { code } => Dial::Refused { code, at: now },
                        });
                    }
                }
                None
            }
            Input::Timer => {
                if self.deadline.is_some_and(|d| now >= d) {
                    self.timed_out = true;
                }
                None
            }
        };
        self.advance(now, &mut actions);
        if let Some(event) = processed {
            actions.push(Action::MarkProcessed { event });
        }
        (self, actions)
    }

    /// Records a fact; a repeated fact changes nothing, and the earliest time wins.
    fn learn(&mut self, fact: Fact) {
        match fact {
            Fact::Initiated { call, plan, ring_timeout_secs } => {
                if self.call.is_none() {
                    self.call = Some(*call);
                    self.plan = plan.into_iter().take(MAX_TARGETS).collect();
                    self.ring_timeout_secs = ring_timeout_secs;
                    if self.caller == CallerLeg::Unknown {
                        self.caller = CallerLeg::Parked;
                    }
                }
            }
            Fact::CallerHungUp { at } => {
                self.caller = match self.caller {
                    CallerLeg::Gone { at: earlier } => CallerLeg::Gone { at: earlier.min(at) },
                    _ => CallerLeg::Gone { at },
                };
            }
            Fact::LegAnswered { position, call_control_id, at } => {
                if let Some(leg) = self.leg_mut(position) {
                    leg.call_control_id.get_or_insert(call_control_id);
                    leg.answered_at = Some(leg.answered_at.map_or(at, |earlier| earlier.min(at)));
                }
            }
            Fact::LegHungUp { position, call_control_id, at, cause } => {
                if let Some(leg) = self.leg_mut(position) {
                    leg.call_control_id.get_or_insert(call_control_id);
                    if leg.ended.as_ref().is_none_or(|e| at < e.at) {
                        leg.ended = Some(LegEnd { at, cause });
                    }
                }
            }
        }
    }

    fn leg_mut(&mut self, position: u32) -> Option<&mut Leg> {
        // Positions past any plan are not legs this platform dialled.
        if position == 0 || position as usize > MAX_TARGETS {
            return None;
        }
        Some(self.legs.entry(position).or_default())
    }

    /// When the caller hung up, if known.
    pub fn caller_gone_at(&self) -> Option<Timestamp> {
        match self.caller {
            CallerLeg::Gone { at } => Some(at),
            _ => None,
        }
    }

    /// Derives what the facts call for, emitting each action once.
    fn advance(&mut self, now: Timestamp, out: &mut Vec<Action>) {
        let Some(call) = self.call.clone() else { return };
        if !self.recorded {
            self.recorded = true;
            out.push(Action::RecordCall { view: self.view(&call) });
        }
        let gone = self.caller_gone_at();
        let live = gone.is_none() && self.ended.is_none();

        // The caller is answered before anyone is rung: a caller who already left is never
        // answered, and a refused answer means the caller's leg is gone.
        if live && self.answer == Command::NotSent && !self.plan.is_empty() {
            self.answer = Command::Sent;
            out.push(Action::AnswerCaller {
                call_control_id: call.call_control_id.clone(),
                command_id: format!("{}:answer", call.id),
            });
        }
        if live && self.answer == Command::Accepted && self.bridged.is_none() {
            self.ring(&call, now, out);
        }

        // The answer, by the carrier's clock: a leg that answered while the caller was there.
        if self.answered.is_none() && self.ended.is_none() {
            let first = self
                .legs
                .iter()
                .filter_map(|(p, l)| l.answered_at.map(|at| (*p, at)))
                .filter(|(_, at)| gone.is_none_or(|g| *at < g))
                .min_by_key(|(_, at)| *at);
            if let Some((position, at)) = first {
                self.answered = Some((position, at));
                self.emit_legs(&call, out);
                out.push(Action::RecordAnswered { position, at, view: self.view(&call) });
            }
        }

        // The conversation is over when the answered leg hangs up; the ring is over when every
        // target was tried: either way the caller is hung up, once.
        let answered_leg_ended = self.bridged.is_some_and(|p| self.legs.get(&p).is_some_and(|l| l.ended.is_some()));
        if gone.is_none()
            && self.answer == Command::Accepted
            && !self.caller_hangup_sent
            && (answered_leg_ended || self.exhausted_at().is_some())
        {
            self.caller_hangup_sent = true;
            out.push(Action::HangupCaller {
                call_control_id: call.call_control_id.clone(),
                command_id: format!("{}:hangup", call.id),
            });
        }

        // Legs still up when the caller left (or the call ended) are hung up, once each.
        if gone.is_some() || self.ended.is_some() {
            for (position, leg) in self.legs.iter_mut() {
                let placed = matches!(leg.dial, Some(Dial::Placed { .. })) || leg.answered_at.is_some();
                if let (true, None, false, Some(control)) = (placed, &leg.ended, leg.hangup_sent, &leg.call_control_id)
                {
                    leg.hangup_sent = true;
                    out.push(Action::HangupLeg {
                        position: *position,
                        call_control_id: control.clone(),
                        command_id: format!("{}:leg:{position}:hangup", call.id),
                    });
                }
            }
        }

        if self.ended.is_none() {
            if let Some(end) = self.end_decision(now) {
                self.ended = Some(end);
                self.emit_legs(&call, out);
                out.push(Action::RecordEnd { end, view: self.view(&call) });
            }
        }
        self.emit_legs(&call, out);

        if self.ended.is_none() && self.deadline.is_none() && self.waiting() {
            let at = Timestamp::from_unix_millis(now.unix_millis().saturating_add(SETTLE_WAIT_MILLIS));
            self.deadline = Some(at);
            out.push(Action::SetTimer { at });
        }
    }

    /// Dials, moves on or bridges, as far as the facts allow.
    fn ring(&mut self, call: &CallInfo, now: Timestamp, out: &mut Vec<Action>) {
        let plan_len = self.plan.len() as u32;
        loop {
            if self.cursor == 0 {
                self.dial(call, 1, now, out);
                continue;
            }
            let position = self.cursor;
            let leg = self.legs.entry(position).or_default();
            if leg.answered_at.is_some() {
                if let Some(control) = leg.call_control_id.clone() {
                    self.bridged = Some(position);
                    out.push(Action::Bridge {
                        position,
                        caller_control_id: call.call_control_id.clone(),
                        leg_control_id: control,
                        command_id: format!("{}:bridge:{position}", call.id),
                    });
                }
                return;
            }
            let refused = matches!(leg.dial, Some(Dial::Refused { .. }));
            let unanswered_end = leg.ended.as_ref().is_some_and(|e| e.cause != ANSWERED_CAUSE || self.timed_out);
            if !(refused || unanswered_end) {
                // Ringing, a dial in flight, or a leg that was answered whose answer is still on
                // its way: wait.
                return;
            }
            if position >= plan_len {
                return;
            }
            self.dial(call, position + 1, now, out);
        }
    }

    /// Dials the target at `position` of the plan, once. A target an erasure replaced by its
    /// marker while the call rang (docs/contract.md, "Erasure") is never dialled: its leg
    /// reads as refused at once (`ERASED_TARGET`), and the next target goes.
    fn dial(&mut self, call: &CallInfo, position: u32, now: Timestamp, out: &mut Vec<Action>) {
        self.cursor = position;
        let Some(target) = self.plan.get(position as usize - 1).cloned() else { return };
        let leg = self.legs.entry(position).or_default();
        if leg.dial.is_some() {
            return;
        }
        if target == crate::erasure::MARKER {
            leg.dial = Some(Dial::Refused { code: ERASED_TARGET.to_owned(), at: now });
            return;
        }
        leg.dial = Some(Dial::Sent);
        out.push(Action::Dial {
            position,
            target,
            from: call.to.clone(),
            tag: LegTag { call: call.id.clone(), position },
            idempotency_key: format!("{}:leg:{position}", call.id),
            timeout_secs: self.ring_timeout_secs,
        });
    }

    /// When every target was tried and none answered: the time the last one ended.
    fn exhausted_at(&self) -> Option<Timestamp> {
        let plan_len = self.plan.len() as u32;
        if plan_len == 0 || self.cursor < plan_len || self.answered.is_some() {
            return None;
        }
        let mut last = None;
        for position in 1..=plan_len {
            let leg = self.legs.get(&position)?;
            let at = match (&leg.dial, &leg.ended) {
                _ if leg.answered_at.is_some() => return None,
                (_, Some(end)) if end.cause != ANSWERED_CAUSE || self.timed_out => end.at,
                (Some(Dial::Refused { at, .. }), _) => *at,
                _ => return None,
            };
            last = Some(last.map_or(at, |l: Timestamp| l.max(at)));
        }
        last
    }

    /// Every leg the platform dialled has an outcome that cannot change: ended, answered or
    /// refused.
    fn legs_settled(&self) -> bool {
        self.legs.values().all(|leg| match &leg.dial {
            Some(Dial::Sent) => leg.ended.is_some() || leg.answered_at.is_some(),
            Some(Dial::Refused { .. }) => true,
            Some(Dial::Placed { .. }) | None => {
                leg.answered_at.is_some()
                    || leg.ended.as_ref().is_some_and(|e| e.cause != ANSWERED_CAUSE || self.timed_out)
                    || (leg.dial.is_none() && leg.ended.is_none() && leg.answered_at.is_none())
            }
        })
    }

    fn end_decision(&self, now: Timestamp) -> Option<CallEnd> {
        let exhausted = self.exhausted_at();
        let ended_at = match (self.caller_gone_at(), exhausted) {
            (Some(gone), _) if self.legs_settled() || self.timed_out => Some(exhausted.map_or(gone, |e| e.min(gone))),
            (Some(_), _) => None,
            (None, Some(at)) => Some(at),
            (None, None) if self.timed_out => {
                // The caller's hangup never came: after a refused answer, or after the platform
                // hung the caller up when the conversation ended.
                let bridged_end =
                    self.bridged.and_then(|p| self.legs.get(&p)).and_then(|l| l.ended.as_ref()).map(|e| e.at);
                match (self.answer, bridged_end) {
                    (_, Some(at)) => Some(at),
                    (Command::Refused, None) => Some(now),
                    _ => None,
                }
            }
            (None, None) => None,
        }?;
        Some(match self.answered {
            Some((_, answered_at)) => {
                let duration = duration_secs(answered_at, ended_at);
                CallEnd {
                    status: CallStatus::Completed,
                    ended_at,
                    duration_secs: duration,
                    billable_minutes: billable_minutes(duration),
                }
            }
            None => CallEnd { status: CallStatus::Missed, ended_at, duration_secs: 0, billable_minutes: 0 },
        })
    }

    /// Facts the machine is waiting for that may never come: the hangups of legs still up after
    /// the caller left; the caller's hangup after a refused answer or after the platform hung
    /// the caller up; the answer of a leg whose hangup says it was answered.
    fn waiting(&self) -> bool {
        let answer_pending = self
            .legs
            .values()
            .any(|l| l.answered_at.is_none() && l.ended.as_ref().is_some_and(|e| e.cause == ANSWERED_CAUSE));
        let others = if self.caller_gone_at().is_some() {
            !self.legs_settled()
        } else {
            self.answer == Command::Refused || self.caller_hangup_sent
        };
        answer_pending || others
    }

    fn leg_view(&self, position: u32, leg: &Leg) -> Option<LegView> {
        let target = self.plan.get(position.checked_sub(1)? as usize)?.clone();
        let gone = self.caller_gone_at();
        let (outcome, cause) = if leg.answered_at.is_some() && self.answered.is_some_and(|(p, _)| p == position) {
            (LegOutcome::Answered, leg.ended.as_ref().map(|e| e.cause.clone()))
        } else if let Some(Dial::Refused { code, .. }) = &leg.dial {
            (LegOutcome::NoAnswer, Some(code.clone()))
        } else if let Some(end) = &leg.ended {
            let outcome = if gone.is_some_and(|g| g <= end.at) || leg.answered_at.is_some() {
                LegOutcome::Canceled
            } else if end.cause == ANSWERED_CAUSE && !self.timed_out && self.ended.is_none() {
                LegOutcome::Dialing
            } else {
                LegOutcome::NoAnswer
            };
            (outcome, Some(end.cause.clone()))
        } else if leg.dial.is_none() && leg.answered_at.is_none() {
            return None;
        } else if self.ended.is_some() || gone.is_some() {
            (LegOutcome::Canceled, None)
        } else {
            (LegOutcome::Dialing, None)
        };
        let call_control_id = match &leg.dial {
            Some(Dial::Placed { call_control_id }) => Some(call_control_id.clone()),
            _ => leg.call_control_id.clone(),
        };
        Some(LegView {
            position,
            target,
            outcome,
            cause,
            call_control_id,
            answered_at: leg.answered_at,
            ended_at: leg.ended.as_ref().map(|e| e.at),
        })
    }

    /// Emits a write for every leg whose record changed.
    fn emit_legs(&mut self, call: &CallInfo, out: &mut Vec<Action>) {
        let positions: Vec<u32> = self.legs.keys().copied().collect();
        for position in positions {
            let Some(view) = self.legs.get(&position).and_then(|leg| self.leg_view(position, leg)) else { continue };
            let Some(leg) = self.legs.get_mut(&position) else { continue };
            let version = match &leg.written {
                Some((written, _)) if *written == view => continue,
                Some((_, version)) => version + 1,
                None => 1,
            };
            leg.written = Some((view.clone(), version));
            out.push(Action::RecordLeg { call_id: call.id.clone(), leg: view, version });
        }
    }

    /// The call as the record shows it now.
    pub fn view(&self, call: &CallInfo) -> CallView {
        let status = match (self.ended, self.answered) {
            (Some(end), _) => end.status,
            (None, Some(_)) => CallStatus::InProgress,
            (None, None) => CallStatus::Ringing,
        };
        let legs = self
            .legs
            .iter()
            .filter_map(|(p, l)| l.written.as_ref().map(|(v, _)| v.clone()).or_else(|| self.leg_view(*p, l)))
            .collect();
        CallView { info: call.clone(), status, answered_at: self.answered.map(|(_, at)| at), end: self.ended, legs }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_unix_seconds(1_796_032_800 + secs)
    }

    fn info() -> CallInfo {
        CallInfo {
            id: call_id(Provider::Telnyx, "sess"),
            account_id: "acct_1".into(),
            carrier: Provider::Telnyx,
            from: "+15551230000".into(),
            to: "+15550001000".into(),
            call_session_id: "sess".into(),
            call_control_id: "cc-caller".into(),
            call_leg_id: "leg-caller".into(),
            created_at: t(0),
        }
    }

    fn carrier(event: &str, fact: Fact) -> Input {
        Input::Carrier { event: event.into(), fact }
    }

    fn initiated(targets: usize) -> Input {
        carrier(
            "e-init",
            Fact::Initiated {
                call: Box::new(info()),
                plan: (1..=targets).map(|i| format!("+1555000000{i}")).collect(),
                ring_timeout_secs: 17,
            },
        )
    }

    fn commands(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::AnswerCaller { .. } => Some("answer".to_owned()),
                Action::Dial { position, .. } => Some(format!("dial {position}")),
                Action::Bridge { position, .. } => Some(format!("bridge {position}")),
                Action::HangupLeg { position, .. } => Some(format!("hangup leg {position}")),
                Action::HangupCaller { .. } => Some("hangup caller".to_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn initiated_records_answers_then_dials_one() {
        let (m, actions) = CallMachine::new().handle(initiated(2), t(0));
        assert!(matches!(actions[0], Action::RecordCall { .. }));
        assert_eq!(commands(&actions), ["answer"], "nobody is rung before the caller is answered");
        assert_eq!(actions.last(), Some(&Action::MarkProcessed { event: "e-init".into() }));
        let (m, actions) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        assert_eq!(commands(&actions), ["dial 1"]);
        let timeouts: Vec<u32> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Dial { timeout_secs, .. } => Some(*timeout_secs),
                _ => None,
            })
            .collect();
        assert_eq!(timeouts, [17], "each target rings as long as its number says");
        let (_, again) = m.handle(initiated(2), t(2));
        assert_eq!(commands(&again), Vec::<String>::new(), "a repeated initiated does nothing");
    }

    #[test]
    fn a_stored_machine_and_fact_without_a_ring_timeout_read_as_the_default() {
        let mut stored = serde_json::to_value(CallMachine::new()).unwrap_or_default();
        stored.as_object_mut().map(|m| m.remove("ring_timeout_secs"));
        let machine: Result<CallMachine, _> = serde_json::from_value(stored);
        assert_eq!(machine.map(|m| m.ring_timeout_secs).ok(), Some(DEFAULT_RING_TIMEOUT_SECS));
        let mut fact =
            serde_json::to_value(Fact::Initiated { call: Box::new(info()), plan: vec![], ring_timeout_secs: 9 })
                .unwrap_or_default();
        fact.as_object_mut().map(|f| f.remove("ring_timeout_secs"));
        let fact: Result<Fact, _> = serde_json::from_value(fact);
        assert!(matches!(fact, Ok(Fact::Initiated { ring_timeout_secs: DEFAULT_RING_TIMEOUT_SECS, .. })));
    }

    #[test]
    fn hangup_first_leaves_a_tombstone() {
        let (m, actions) = CallMachine::new().handle(carrier("e-hup", Fact::CallerHungUp { at: t(3) }), t(4));
        assert_eq!(
            actions,
            vec![Action::MarkProcessed { event: "e-hup".into() }],
            "nothing to record before the call is known"
        );
        let (m, actions) = m.handle(initiated(2), t(5));
        assert_eq!(commands(&actions), Vec::<String>::new(), "no answer, no dial for a caller who left");
        let end = actions
            .iter()
            .find_map(|a| if let Action::RecordEnd { end, .. } = a { Some(*end) } else { None })
            .expect("ended");
        assert_eq!(end, CallEnd { status: CallStatus::Missed, ended_at: t(3), duration_secs: 0, billable_minutes: 0 });
        assert_eq!(m.ended, Some(end));
    }

    #[test]
    fn refused_answer_rings_nobody() {
        let (m, _) = CallMachine::new().handle(initiated(2), t(0));
        let (m, actions) = m.handle(Input::AnswerResult { accepted: false }, t(1));
        assert_eq!(commands(&actions), Vec::<String>::new());
        assert!(actions.iter().any(|a| matches!(a, Action::SetTimer { .. })), "waits for the caller's hangup");
        let (_, actions) = m.handle(carrier("e-hup", Fact::CallerHungUp { at: t(1) }), t(2));
        assert!(actions
            .iter()
            .any(|a| matches!(a, Action::RecordEnd { end: CallEnd { status: CallStatus::Missed, .. }, .. })));
    }

    #[test]
    fn every_dial_refused_ends_missed_and_hangs_up_the_caller_once() {
        let (m, _) = CallMachine::new().handle(initiated(2), t(0));
        let (m, _) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        let (m, a1) =
            m.handle(Input::DialResult { position: 1, result: DialResult::Refused { code: "90018".into() } }, t(2));
        assert_eq!(commands(&a1), ["dial 2"]);
        let (m, a2) =
            m.handle(Input::DialResult { position: 2, result: DialResult::Refused { code: "90018".into() } }, t(3));
        assert_eq!(commands(&a2), ["hangup caller"]);
        let end = a2
            .iter()
            .find_map(|a| if let Action::RecordEnd { end, .. } = a { Some(*end) } else { None })
            .expect("ended");
        assert_eq!((end.status, end.ended_at), (CallStatus::Missed, t(3)));
        let (_, a3) = m.handle(carrier("e-hup", Fact::CallerHungUp { at: t(4) }), t(5));
        assert_eq!(commands(&a3), Vec::<String>::new());
        assert!(!a3.iter().any(|a| matches!(a, Action::RecordEnd { .. })), "ends once");
    }

    #[test]
    fn a_target_erased_while_the_call_rings_is_never_dialled() {
        let (m, _) = CallMachine::new().handle(initiated(3), t(0));
        let (m, _) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        // The erasure of the second target, as the call's object applies it to the stored state.
        let stored = serde_json::to_string(&m).expect("the state serializes");
        let erased = stored.replace("\"+15550000002\"", "\"[erased]\"");
        assert_ne!(stored, erased, "the plan held the target");
        let m: CallMachine = serde_json::from_str(&erased).expect("the erased state reads");
        let (m, actions) =
            m.handle(Input::DialResult { position: 1, result: DialResult::Refused { code: "90018".into() } }, t(2));
        assert_eq!(commands(&actions), ["dial 3"], "the erased target is passed over");
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Dial { target, .. } if target == "[erased]")),
            "{actions:?}"
        );
        let (_, actions) =
            m.handle(Input::DialResult { position: 3, result: DialResult::Refused { code: "90018".into() } }, t(3));
        assert_eq!(commands(&actions), ["hangup caller"], "every target tried: the call ends missed");
        assert!(actions
            .iter()
            .any(|a| matches!(a, Action::RecordEnd { end: CallEnd { status: CallStatus::Missed, .. }, .. })));
    }

    #[test]
    fn a_leg_hangup_before_its_answer_does_not_dial_the_next() {
        let (m, _) = CallMachine::new().handle(initiated(3), t(0));
        let (m, _) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        let (m, _) = m.handle(
            Input::DialResult { position: 1, result: DialResult::Placed { call_control_id: "cc-1".into() } },
            t(1),
        );
        let hangup =
            Fact::LegHungUp { position: 1, call_control_id: "cc-1".into(), at: t(60), cause: "normal_clearing".into() };
        let (m, actions) = m.handle(carrier("e-l1-hup", hangup), t(61));
        assert_eq!(commands(&actions), Vec::<String>::new(), "an answered leg's hangup is not a reason to ring on");
        let (_, actions) = m.handle(
            carrier("e-l1-ans", Fact::LegAnswered { position: 1, call_control_id: "cc-1".into(), at: t(10) }),
            t(62),
        );
        assert_eq!(commands(&actions), ["bridge 1", "hangup caller"]);
    }

    #[test]
    fn dial_results_and_duplicates_are_idempotent() {
        let (m, _) = CallMachine::new().handle(initiated(2), t(0));
        let (m, _) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        let placed = Input::DialResult { position: 1, result: DialResult::Placed { call_control_id: "cc-1".into() } };
        let (m, first) = m.handle(placed.clone(), t(1));
        let (m2, second) = m.clone().handle(placed, t(2));
        assert_eq!(m, m2);
        assert!(second.is_empty(), "{second:?}");
        assert!(first
            .iter()
            .any(|a| matches!(a, Action::RecordLeg { leg: LegView { outcome: LegOutcome::Dialing, .. }, .. })));
        let (_, unknown) =
            m.handle(Input::DialResult { position: 7, result: DialResult::Refused { code: "x".into() } }, t(3));
        assert!(unknown.is_empty());
    }

    #[test]
    fn call_ids_are_stable_and_opaque() {
        assert_eq!(call_id(Provider::Telnyx, "s1"), call_id(Provider::Telnyx, "s1"));
        assert_ne!(call_id(Provider::Telnyx, "s1"), call_id(Provider::Telnyx, "s2"));
        assert_ne!(call_id(Provider::Telnyx, "s1"), call_id(Provider::Twilio, "s1"));
        assert!(call_id(Provider::Telnyx, "s1").starts_with("call_"));
        assert_eq!(call_id(Provider::Telnyx, "s1").len(), 5 + 32);
    }

    #[test]
    fn state_round_trips_through_json() {
        let (m, _) = CallMachine::new().handle(initiated(2), t(0));
        let (m, _) = m.handle(Input::AnswerResult { accepted: true }, t(1));
        let text = serde_json::to_string(&m).unwrap();
        let back: CallMachine = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
    }
}
