//! The call machine under every order its events can arrive in.
//!
//! A story fixes what happens at the carrier: how each ring target behaves when dialled and when
//! the caller leaves. A simulated carrier plays it against the machine: it executes the
//! machine's commands, answers dials and the caller's answer, and makes each webhook available
//! once what causes it has happened (a leg's events after its dial, the hangup of a leg the
//! platform hung up after that command). The harness then delivers available webhooks in every
//! possible order (exhaustively), and in 10,000 random orders with duplicates and copies
//! re-signed under new event ids. Every run must end with the same record (call, legs, usage,
//! customer events) and the same carrier commands accepted as the causal order.
//!
//! Orders in which a webhook arrives before the command that caused it cannot happen; fed
//! anyway (every permutation of the causal run's webhooks), the machine must still keep its
//! promises: every effect at most once, the call ended exactly once, nothing dialled, answered
//! or bridged once the caller is known to be gone.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::BTreeMap;

use exactly_core::call::CallStatus;
use exactly_core::call_machine::{
    call_id, Action, CallEnd, CallInfo, CallMachine, DialResult, Fact, Input, LegOutcome, SETTLE_WAIT_MILLIS,
};
use exactly_core::rng::Deterministic as Rng;
use exactly_core::{Provider, Timestamp};

const BASE_MS: i64 = 1_796_032_800_000;

fn t(ms: i64) -> Timestamp {
    Timestamp::from_unix_millis(BASE_MS + ms)
}

/// How a ring target behaves when dialled.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// The carrier refuses the dial.
    Refused,
    /// Rings, then times out at this time.
    TimesOut(i64),
    /// Rings until the platform hangs it up.
    Rings,
    /// Answers at this time; the callee hangs up at the second time (available once bridged).
    Answers(i64, Option<i64>),
}

/// What triggers a carrier-side event.
#[derive(Clone, Copy, Debug, PartialEq)]
enum After {
    Start,
    Dial(u32),
    Bridge,
}

/// What the caller does.
#[derive(Clone, Copy, Debug)]
enum Caller {
    /// Stays until the platform hangs up.
    Stays,
    /// Hangs up at this time, the event available after the trigger; `early` means the
    /// caller left before the platform could act at all (its answer is refused).
    Leaves { at: i64, after: After, early: bool },
}

#[derive(Clone, Debug)]
struct Story {
    name: &'static str,
    legs: Vec<Fate>,
    caller: Caller,
}

fn stories() -> Vec<Story> {
    use Fate::*;
    vec![
        Story {
            name: "answered by target 2",
            legs: vec![TimesOut(30_000), Answers(40_000, None), Rings],
            caller: Caller::Leaves { at: 160_000, after: After::Bridge, early: false },
        },
        Story { name: "nobody answers", legs: vec![TimesOut(30_000), TimesOut(60_000)], caller: Caller::Stays },
        Story { name: "every dial refused", legs: vec![Refused, Refused], caller: Caller::Stays },
        Story {
            name: "caller leaves while ringing",
            legs: vec![Rings, Rings],
            caller: Caller::Leaves { at: 10_000, after: After::Dial(1), early: false },
        },
        Story {
            name: "caller leaves before call.initiated",
            legs: vec![Rings, Rings],
            caller: Caller::Leaves { at: 3_000, after: After::Start, early: true },
        },
        Story {
            name: "target answers as the caller hangs up",
            legs: vec![Answers(35_000, None), Rings],
            caller: Caller::Leaves { at: 35_100, after: After::Dial(1), early: false },
        },
        Story {
            name: "bridged, then the caller hangs up",
            legs: vec![TimesOut(20_000), Answers(25_000, None)],
            caller: Caller::Leaves { at: 200_000, after: After::Bridge, early: false },
        },
        Story {
            name: "bridged, then the callee hangs up",
            legs: vec![Answers(20_000, Some(200_000))],
            caller: Caller::Stays,
        },
    ]
}

/// A webhook as the carrier sends it: the fact, and its event id.
#[derive(Clone, Debug, PartialEq)]
struct Webhook {
    id: String,
    fact: Fact,
}

fn info() -> CallInfo {
    CallInfo {
        id: call_id(Provider::Telnyx, "sess-story"),
        account_id: "acct_1".into(),
        carrier: Provider::Telnyx,
        from: "+15551230000".into(),
        to: "+15550001000".into(),
        call_session_id: "sess-story".into(),
        call_control_id: "cc-caller".into(),
        call_leg_id: "leg-caller".into(),
        created_at: t(0),
    }
}

fn control(position: u32) -> String {
    format!("cc-leg-{position}")
}

/// The carrier: the story's reality, changed by the commands the platform sends.
struct Carrier<'a> {
    story: &'a Story,
    /// Webhooks the carrier has sent or will send, with what makes each available.
    pending: Vec<(After, Webhook)>,
    /// When each leg ends (once known), and whether it was dialled.
    leg_end: BTreeMap<u32, i64>,
    dialled: Vec<u32>,
    caller_end: Option<i64>,
    bridged: bool,
    /// Commands the carrier accepted.
    accepted: Vec<String>,
    next_id: u32,
}

impl<'a> Carrier<'a> {
    fn new(story: &'a Story) -> Self {
        let mut c = Carrier {
            story,
            pending: Vec::new(),
            leg_end: BTreeMap::new(),
            dialled: Vec::new(),
            caller_end: None,
            bridged: false,
            accepted: Vec::new(),
            next_id: 0,
        };
        let plan = (1..=story.legs.len()).map(|i| format!("+1555000000{i}")).collect();
        c.send(After::Start, Fact::Initiated { call: Box::new(info()), plan, ring_timeout_secs: 30 });
        if let Caller::Leaves { at, after, .. } = story.caller {
            c.caller_end = Some(at);
            c.send(after, Fact::CallerHungUp { at: t(at) });
        }
        c
    }

    fn send(&mut self, after: After, fact: Fact) {
        self.next_id += 1;
        self.pending.push((after, Webhook { id: format!("evt-{}", self.next_id), fact }));
    }

    fn alive(end: Option<i64>, clock: i64) -> bool {
        end.is_none_or(|e| e > clock)
    }

    /// Carries out a command sent when the latest carrier time the platform had seen was
    /// `seen`; it lands a second later. Returns the input it answers with, if any.
    fn execute(&mut self, action: &Action, seen: i64) -> Option<Input> {
        let clock = seen + 1_000;
        let caller_early = matches!(self.story.caller, Caller::Leaves { early: true, .. });
        match action {
            Action::AnswerCaller { .. } => {
                let accepted = !caller_early && Self::alive(self.caller_end, clock);
                if accepted {
                    self.accepted.push("answer".into());
                }
                Some(Input::AnswerResult { accepted })
            }
            Action::Dial { position, .. } => {
                let fate = self.story.legs[*position as usize - 1];
                if let Fate::Refused = fate {
                    return Some(Input::DialResult {
                        position: *position,
                        result: DialResult::Refused { code: "90018".into() },
                    });
                }
                self.accepted.push(format!("dial {position}"));
                self.dialled.push(*position);
                let trigger = After::Dial(*position);
                match fate {
                    Fate::TimesOut(at) => {
                        self.leg_end.insert(*position, at);
                        self.send(
                            trigger,
                            Fact::LegHungUp {
                                position: *position,
                                call_control_id: control(*position),
                                at: t(at),
                                cause: "timeout".into(),
                            },
                        );
                    }
                    Fate::Answers(at, callee_end) => {
                        self.send(
                            trigger,
                            Fact::LegAnswered { position: *position, call_control_id: control(*position), at: t(at) },
                        );
                        if let Some(end) = callee_end {
                            self.leg_end.insert(*position, end);
                            self.send(
                                After::Bridge,
                                Fact::LegHungUp {
                                    position: *position,
                                    call_control_id: control(*position),
                                    at: t(end),
                                    cause: "normal_clearing".into(),
                                },
                            );
                        }
                    }
                    Fate::Rings | Fate::Refused => {}
                }
                // Release the webhooks this dial makes available.
                Some(Input::DialResult {
                    position: *position,
                    result: DialResult::Placed { call_control_id: control(*position) },
                })
            }
            Action::Bridge { position, .. } => {
                if !caller_early
                    && Self::alive(self.caller_end, clock)
                    && Self::alive(self.leg_end.get(position).copied(), clock)
                {
                    self.accepted.push(format!("bridge {position}"));
                    self.bridged = true;
                }
                None
            }
            Action::HangupLeg { position, .. } => {
                if self.dialled.contains(position) && Self::alive(self.leg_end.get(position).copied(), clock) {
                    self.accepted.push(format!("hangup leg {position}"));
                    let at = clock;
                    self.leg_end.insert(*position, at);
                    let answered = matches!(self.story.legs[*position as usize - 1], Fate::Answers(a, _) if a < clock);
                    let cause = if answered { "normal_clearing" } else { "originator_cancel" };
                    self.send(
                        After::Start,
                        Fact::LegHungUp {
                            position: *position,
                            call_control_id: control(*position),
                            at: t(at),
                            cause: cause.into(),
                        },
                    );
                }
                None
            }
            Action::HangupCaller { .. } => {
                if !caller_early && Self::alive(self.caller_end, clock) {
                    self.accepted.push("hangup caller".into());
                    let at = clock;
                    self.caller_end = Some(at);
                    self.send(After::Start, Fact::CallerHungUp { at: t(at) });
                }
                None
            }
            _ => None,
        }
    }

    fn available(&self, after: After) -> bool {
        match after {
            After::Start => true,
            After::Dial(k) => self.dialled.contains(&k),
            After::Bridge => self.bridged,
        }
    }
}

/// What a run leaves behind.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Record {
    status: Option<CallStatus>,
    answered_at: Option<Timestamp>,
    end: Option<CallEnd>,
    legs: BTreeMap<u32, (LegOutcome, Option<String>)>,
    events: Vec<&'static str>,
    usage_minutes: u64,
    accepted: Vec<String>,
}

/// The edge's record, in memory, written only from the machine's actions with the same guards
/// as the D1 statements.
#[derive(Default)]
struct Store {
    status: Option<CallStatus>,
    answered_at: Option<Timestamp>,
    end: Option<CallEnd>,
    legs: BTreeMap<u32, (LegOutcome, Option<String>, u32)>,
    events: Vec<&'static str>,
    usage_minutes: u64,
    processed: BTreeMap<String, u32>,
}

impl Store {
    fn apply(&mut self, action: &Action) {
        match action {
            Action::RecordCall { .. } if self.status.is_none() => {
                self.status = Some(CallStatus::Ringing);
                self.events.push("call.initiated");
            }
            Action::RecordAnswered { at, .. } if self.status == Some(CallStatus::Ringing) => {
                self.status = Some(CallStatus::InProgress);
                self.answered_at = Some(*at);
                self.events.push("call.answered");
            }
            Action::RecordEnd { end, .. } if self.end.is_none() => {
                self.end = Some(*end);
                self.status = Some(end.status);
                self.usage_minutes += end.billable_minutes;
                self.events.push(if end.status == CallStatus::Completed { "call.completed" } else { "call.missed" });
            }
            Action::RecordLeg { leg, version, .. }
                if self.legs.get(&leg.position).is_none_or(|(_, _, v)| v < version) =>
            {
                self.legs.insert(leg.position, (leg.outcome, leg.cause.clone(), *version));
            }
            Action::MarkProcessed { event } => *self.processed.entry(event.clone()).or_default() += 1,
            _ => {}
        }
    }
}

/// Counts that must never exceed one, whatever the order.
#[derive(Default, Debug)]
struct Once {
    seen: BTreeMap<String, u32>,
    after_gone: Vec<String>,
}

impl Once {
    fn note(&mut self, action: &Action, gone_known: bool) {
        let key = match action {
            Action::AnswerCaller { .. } => "answer".to_owned(),
            Action::Dial { position, .. } => format!("dial {position}"),
            Action::Bridge { .. } => "bridge".to_owned(),
            Action::HangupLeg { position, .. } => format!("hangup leg {position}"),
            Action::HangupCaller { .. } => "hangup caller".to_owned(),
            Action::RecordCall { .. } => "record call".to_owned(),
            Action::RecordAnswered { .. } => "record answered".to_owned(),
            Action::RecordEnd { .. } => "record end".to_owned(),
            _ => return,
        };
        if gone_known && matches!(action, Action::AnswerCaller { .. } | Action::Dial { .. } | Action::Bridge { .. }) {
            self.after_gone.push(key.clone());
        }
        *self.seen.entry(key).or_default() += 1;
    }

    fn check(&self, label: &str) {
        for (key, n) in &self.seen {
            assert_eq!(*n, 1, "{label}: {key} emitted {n} times");
        }
        assert!(self.after_gone.is_empty(), "{label}: {:?} after the caller was known gone", self.after_gone);
    }
}

/// One run: the machine, the store, the carrier, and the clock (the latest carrier time seen).
struct Run<'a> {
    machine: CallMachine,
    store: Store,
    carrier: Carrier<'a>,
    once: Once,
    clock: i64,
    delivered: Vec<Webhook>,
}

impl<'a> Run<'a> {
    fn new(story: &'a Story) -> Self {
        Run {
            machine: CallMachine::new(),
            store: Store::default(),
            carrier: Carrier::new(story),
            once: Once::default(),
            clock: 0,
            delivered: Vec::new(),
        }
    }

    fn feed(&mut self, input: Input) {
        let mut queue = vec![input];
        while let Some(input) = queue.pop() {
            let now = t(self.clock + 1);
            let machine = std::mem::take(&mut self.machine);
            let (machine, actions) = machine.handle(input, now);
            self.machine = machine;
            let gone = self.machine.caller_gone_at().is_some();
            let mut results = Vec::new();
            for action in &actions {
                self.once.note(action, gone);
                self.store.apply(action);
                if let Some(result) = self.carrier.execute(action, self.clock) {
                    results.push(result);
                }
            }
            // Results come back in the order the commands went out.
            queue.extend(results.into_iter().rev());
        }
    }

    fn deliver(&mut self, webhook: Webhook) {
        if let Some(at) = fact_time(&webhook.fact) {
            self.clock = self.clock.max(at);
        }
        self.delivered.push(webhook.clone());
        self.feed(Input::Carrier { event: webhook.id, fact: webhook.fact });
    }

    /// Time passes with nothing more to come.
    fn finish(mut self) -> (Record, Once, Store) {
        self.clock += SETTLE_WAIT_MILLIS + 1_000;
        self.feed(Input::Timer);
        let record = Record {
            status: self.store.status,
            answered_at: self.store.answered_at,
            end: self.store.end,
            legs: self.store.legs.iter().map(|(p, (o, c, _))| (*p, (*o, c.clone()))).collect(),
            events: {
                let mut e = self.store.events.clone();
                e.sort();
                e
            },
            usage_minutes: self.store.usage_minutes,
            accepted: {
                let mut a = self.carrier.accepted.clone();
                a.sort();
                a
            },
        };
        (record, self.once, self.store)
    }
}

fn fact_time(fact: &Fact) -> Option<i64> {
    let at = match fact {
        Fact::Initiated { call, .. } => call.created_at,
        Fact::CallerHungUp { at } | Fact::LegAnswered { at, .. } | Fact::LegHungUp { at, .. } => *at,
    };
    Some(at.unix_millis() - BASE_MS)
}

/// The indexes of the carrier's webhooks available and not yet delivered.
fn choices(run: &Run) -> Vec<usize> {
    run.carrier
        .pending
        .iter()
        .enumerate()
        .filter(|(_, (after, w))| run.carrier.available(*after) && !run.delivered.iter().any(|d| d.id == w.id))
        .map(|(i, _)| i)
        .collect()
}

/// The causal order: each webhook delivered as soon as it is available, oldest first.
fn causal(story: &Story) -> (Record, Vec<Webhook>) {
    let mut run = Run::new(story);
    loop {
        let mut open = choices(&run);
        open.sort_by_key(|i| fact_time(&run.carrier.pending[*i].1.fact));
        let Some(&first) = open.first() else { break };
        let webhook = run.carrier.pending[first].1.clone();
        run.deliver(webhook);
    }
    let webhooks = run.delivered.clone();
    let (record, once, store) = run.finish();
    once.check(&format!("{}: causal", story.name));
    for w in &webhooks {
        assert_eq!(store.processed.get(&w.id), Some(&1), "{}: {} marked processed once", story.name, w.id);
    }
    (record, webhooks)
}

/// Every order the carrier could deliver in, depth first.
fn every_order(story: &Story, prefix: &mut Vec<usize>, expected: &Record, runs: &mut u32) {
    let mut run = Run::new(story);
    for &choice in prefix.iter() {
        let webhook = run.carrier.pending[choice].1.clone();
        run.deliver(webhook);
    }
    let open = choices(&run);
    if open.is_empty() {
        let label = format!("{}: order {prefix:?}", story.name);
        let (record, once, _) = run.finish();
        once.check(&label);
        assert_eq!(&record, expected, "{label}");
        *runs += 1;
        return;
    }
    for choice in open {
        prefix.push(choice);
        every_order(story, prefix, expected, runs);
        prefix.pop();
    }
}

#[test]
fn the_causal_records_are_what_the_stories_mean() {
    let by_name: BTreeMap<&str, Record> = stories().iter().map(|s| (s.name, causal(s).0)).collect();
    let s = |n: &str| by_name[n].clone();
    let r = s("answered by target 2");
    assert_eq!(r.status, Some(CallStatus::Completed));
    assert_eq!(r.answered_at, Some(t(40_000)));
    assert_eq!(r.end.map(|e| (e.ended_at, e.duration_secs, e.billable_minutes)), Some((t(160_000), 120, 2)));
    assert_eq!(r.legs[&1].0, LegOutcome::NoAnswer);
    assert_eq!(r.legs[&2].0, LegOutcome::Answered);
    assert!(!r.legs.contains_key(&3), "target 3 is never rung");
    assert_eq!(r.accepted, ["answer", "bridge 2", "dial 1", "dial 2", "hangup leg 2"]);
    assert_eq!(r.events, ["call.answered", "call.completed", "call.initiated"]);

    let r = s("nobody answers");
    assert_eq!((r.status, r.end.map(|e| e.ended_at), r.usage_minutes), (Some(CallStatus::Missed), Some(t(60_000)), 0));
    assert_eq!(r.accepted, ["answer", "dial 1", "dial 2", "hangup caller"]);
    assert_eq!(r.events, ["call.initiated", "call.missed"]);

    let r = s("every dial refused");
    assert_eq!(r.status, Some(CallStatus::Missed));
    assert_eq!(r.accepted, ["answer", "hangup caller"], "the caller is hung up once");
    assert_eq!(r.legs.values().map(|l| l.0).collect::<Vec<_>>(), [LegOutcome::NoAnswer, LegOutcome::NoAnswer]);
    assert_eq!(r.events, ["call.initiated", "call.missed"]);

    let r = s("caller leaves while ringing");
    assert_eq!((r.status, r.end.map(|e| e.ended_at)), (Some(CallStatus::Missed), Some(t(10_000))));
    assert_eq!(r.legs[&1].0, LegOutcome::Canceled);
    assert_eq!(r.accepted, ["answer", "dial 1", "hangup leg 1"]);

    let r = s("caller leaves before call.initiated");
    assert_eq!((r.status, r.end.map(|e| e.ended_at)), (Some(CallStatus::Missed), Some(t(3_000))));
    assert!(r.accepted.is_empty(), "nobody is rung and the caller is not answered: {:?}", r.accepted);
    assert!(r.legs.is_empty());
    assert_eq!(r.events, ["call.initiated", "call.missed"]);

    let r = s("target answers as the caller hangs up");
    assert_eq!((r.status, r.usage_minutes), (Some(CallStatus::Completed), 1));

    let r = s("bridged, then the caller hangs up");
    assert_eq!(r.end.map(|e| (e.ended_at, e.duration_secs)), Some((t(200_000), 175)));
    let r = s("bridged, then the callee hangs up");
    assert_eq!(r.status, Some(CallStatus::Completed));
    assert_eq!(r.accepted, ["answer", "bridge 1", "dial 1", "hangup caller"]);
    assert_eq!(r.end.map(|e| e.ended_at), Some(t(201_000)), "ended by the caller's hangup, which the platform caused");
}

#[test]
fn every_possible_order_ends_the_same() {
    for story in stories() {
        let (expected, webhooks) = causal(&story);
        assert!(webhooks.len() <= 7, "{}: exhaustive up to 7 events", story.name);
        let mut runs = 0;
        every_order(&story, &mut Vec::new(), &expected, &mut runs);
        assert!(runs >= 1, "{}", story.name);
    }
}

#[test]
fn ten_thousand_random_orders_with_duplicates_and_resigned_copies_end_the_same() {
    let stories = stories();
    let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15);
    for round in 0..10_000u32 {
        let story = &stories[round as usize % stories.len()];
        let (expected, _) = causal(story);
        let mut run = Run::new(story);
        let mut copies: Vec<Webhook> = Vec::new();
        let mut extra = 0u32;
        loop {
            let open = choices(&run);
            if open.is_empty() && copies.is_empty() {
                break;
            }
            // Deliver a copy (the same event id again, or the fact re-signed under a new id), or
            // something new.
            if !copies.is_empty() && (open.is_empty() || rng.below(3) == 0) {
                let copy = copies.swap_remove(rng.below(copies.len()));
                run.deliver(copy);
                continue;
            }
            let pick = open[rng.below(open.len())];
            let webhook = run.carrier.pending[pick].1.clone();
            for _ in 0..rng.below(3) {
                extra += 1;
                let id =
                    if rng.below(2) == 0 { webhook.id.clone() } else { format!("{}-resigned-{extra}", webhook.id) };
                copies.push(Webhook { id, fact: webhook.fact.clone() });
            }
            run.deliver(webhook);
        }
        let label = format!("{}: round {round}", story.name);
        let (record, once, store) = run.finish();
        once.check(&label);
        assert_eq!(record, expected, "{label}");
        assert!(store.processed.values().all(|n| *n >= 1), "{label}");
    }
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn impossible_orders_still_keep_every_promise() {
    for story in stories() {
        let (expected, webhooks) = causal(&story);
        for order in permutations(webhooks.len()) {
            let label = format!("{}: permutation {order:?}", story.name);
            let mut run = Run::new(&story);
            for &i in &order {
                run.deliver(webhooks[i].clone());
            }
            let (record, once, store) = run.finish();
            once.check(&label);
            assert!(record.end.is_some(), "{label}: the call ends");
            assert_eq!(record.events.iter().filter(|e| **e == "call.initiated").count(), 1, "{label}");
            assert!(
                record.usage_minutes <= expected.usage_minutes,
                "{label}: billed {} minutes, more than happened",
                record.usage_minutes
            );
            for w in &webhooks {
                assert_eq!(store.processed.get(&w.id), Some(&1), "{label}: {} processed once", w.id);
            }
        }
    }
}
