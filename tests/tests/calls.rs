//! Calls and sequential ring (docs/contract.md §4, §7 invariant 2): one dial per position, one end and
//! one charge per call, whatever the carrier repeats.

use std::thread;
use std::time::Duration;

use exactly_tests::{fresh_number, lit, Answer, Worker};
use serde_json::{json, Value};
use sim::carrier::Recorded;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("calls::duplicate_leg_hangups_dial_the_next_target_once", duplicate_leg_hangups_dial_the_next_target_once),
    (
        "calls::answer_stops_the_ring_and_a_late_hangup_dials_nothing",
        answer_stops_the_ring_and_a_late_hangup_dials_nothing,
    ),
    ("calls::caller_hangup_three_times_completes_and_bills_once", caller_hangup_three_times_completes_and_bills_once),
    ("calls::all_targets_unanswered_ends_missed_without_charge", all_targets_unanswered_ends_missed_without_charge),
    ("calls::ring_cursor_survives_a_restart", ring_cursor_survives_a_restart),
    (
        "calls::a_settled_call_keeps_nothing_after_its_grace_and_a_late_copy_changes_nothing",
        a_settled_call_keeps_nothing_after_its_grace,
    ),
    (
        "calls::caller_hangup_before_a_retried_initiated_rings_nobody",
        caller_hangup_before_a_retried_initiated_rings_nobody,
    ),
    (
        "calls::every_dial_refused_ends_missed_and_hangs_up_the_caller_once",
        every_dial_refused_ends_missed_and_hangs_up_the_caller_once,
    ),
    ("calls::a_failed_leg_write_after_a_dial_is_retried_not_lost", a_failed_leg_write_after_a_dial_is_retried_not_lost),
    ("calls::leg_events_in_reverse_order_dial_each_target_once", leg_events_in_reverse_order_dial_each_target_once),
    ("calls::each_number_rings_its_targets_for_its_own_timeout", each_number_rings_its_targets_for_its_own_timeout),
];

pub(crate) const TARGETS: [&str; 3] = ["+15557770001", "+15557770002", "+15557770003"];

/// An inbound call ringing through a number's three targets.
pub(crate) struct Ring {
    account_key: String,
    pub(crate) call_id: String,
    session: String,
    caller_control: String,
}

fn uid(tag: &str) -> String {
    format!("{tag}-{}", sim::random_hex())
}

/// Delivers one carrier event; returns the answer, which says whether it enqueued a job.
fn deliver(w: &Worker, event_id: &str, event_type: &str, occurred_at: &str, payload: Value) -> Answer {
    let body = sim::telnyx::envelope(event_id, event_type, occurred_at, payload, 1);
    let a = w.deliver_telnyx(&body);
    assert_eq!(a.status, 200, "{event_type}: {}", a.body);
    a
}

fn start(w: &Worker) -> Ring {
    let (account, key) = w.create_account("ring");
    let number = fresh_number();
    w.create_number(&account, &number, &TARGETS);
    ring_on(w, key, &number)
}

/// An inbound call to `number`, an account's number that rings [`TARGETS`], once target 1 is
/// dialled.
pub(crate) fn ring_on(w: &Worker, key: String, number: &str) -> Ring {
    let session = uid("sess");
    let caller_control = format!("v3:{}", uid("caller"));
    deliver(
        w,
        &uid("init"),
        "call.initiated",
        "2026-11-30T10:01:00Z",
        json!({
            "call_control_id": caller_control, "call_leg_id": format!("leg-{caller_control}"),
                "call_session_id": session,
            "from": "+15551230000", "to": number, "direction": "incoming", "state": "parked",
        }),
    );
    let mut call_id = String::new();
    let found = w.eventually(Duration::from_secs(30), || {
        let dial = w.carrier.requests("/v2/calls").into_iter().find(|r| r.body["from"] == number);
        if let Some(tag) = dial.as_ref().and_then(sim::carrier::client_state) {
            let tag: Value = serde_json::from_str(&tag).unwrap_or_default();
            call_id = tag["call"].as_str().unwrap_or_default().to_owned();
        }
        !call_id.is_empty()
    });
    assert!(found, "target 1 was dialled for {number}");
    Ring { account_key: key, call_id, session, caller_control }
}

/// Target 2 answers and the caller hangs up: the call completes.
pub(crate) fn answered_then_hung_up(w: &Worker, ring: &Ring) {
    answer_leg2(w, ring);
    let hangup = uid("caller-hangup");
    let payload = json!({
        "call_control_id": ring.caller_control, "call_leg_id": format!("leg-{}", ring.caller_control),
            "call_session_id": ring.session,
        "hangup_cause": "normal_clearing", "hangup_source": "caller",
    });
    deliver(w, &hangup, "call.hangup", "2026-11-30T10:02:41Z", payload);
    wait_settled(w, &[hangup]);
}

/// No target answers: the call is missed.
pub(crate) fn nobody_answers(w: &Worker, ring: &Ring) {
    let mut ids = Vec::new();
    for position in 1..=3 {
        let leg = wait_dials(w, ring, position);
        let id = uid(&format!("leg{position}-hangup"));
        hangup_leg(w, &leg, &id);
        ids.push(id);
    }
    wait_settled(w, &ids);
}

fn dials(w: &Worker, ring: &Ring, position: u32) -> Vec<Recorded> {
    let key = format!("{}:leg:{position}", ring.call_id);
    w.carrier.requests("/v2/calls").into_iter().filter(|r| r.idempotency_key.as_deref() == Some(key.as_str())).collect()
}

fn wait_dials(w: &Worker, ring: &Ring, position: u32) -> Recorded {
    let mut found = Vec::new();
    let ok = w.eventually(Duration::from_secs(30), || {
        found = dials(w, ring, position);
        !found.is_empty()
    });
    assert!(ok, "position {position} was dialled");
    found.remove(0)
}

/// The payload of an event on the leg the fake dialled.
fn leg_payload(dial: &Recorded, extra: Value) -> Value {
    let key = dial.idempotency_key.clone().unwrap_or_default();
    let mut payload = json!({
        "call_control_id": format!("v3:cc-{key}"), "call_leg_id": format!("leg-{key}"),
            "call_session_id": format!("sess-{key}"),
        "from": dial.body["from"], "to": dial.body["to"], "direction": "outgoing",
            "client_state": dial.body["client_state"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        payload[k] = v.clone();
    }
    payload
}

fn hangup_leg(w: &Worker, dial: &Recorded, event_id: &str) -> Answer {
    deliver(
        w,
        event_id,
        "call.hangup",
        "2026-11-30T10:01:30Z",
        leg_payload(dial, json!({"hangup_cause": "timeout", "hangup_source": "callee"})),
    )
}

fn wait_settled(w: &Worker, ids: &[String]) {
    let list = ids.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    let ok = w.eventually(Duration::from_secs(60), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list}) AND
            (processed_at IS NOT NULL OR error IS NOT NULL)"
        )) == ids.len() as i64
    });
    assert!(ok, "events {list} settled");
}

fn call(w: &Worker, ring: &Ring) -> Value {
    let a = w.call("GET", &format!("/v1/calls/{}", ring.call_id), &ring.account_key, None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn events(w: &Worker, ring: &Ring, event_type: &str) -> i64 {
    w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {} AND type = {}",
        lit(&ring.call_id),
        lit(event_type)
    ))
}

fn duplicate_leg_hangups_dial_the_next_target_once(w: &Worker) {
    for copies in [1usize, 2, 10] {
        let ring = start(w);
        let leg1 = wait_dials(w, &ring, 1);
        let event_id = uid("leg1-hangup");
        // Half the copies repeat the event id, half are the same fact re-signed under new ids,
        // so the ring owner (not only the dedupe index) is what refuses to dial twice.
        let ids: Vec<String> =
            (0..copies).map(|i| if i % 2 == 0 { event_id.clone() } else { format!("{event_id}-{i}") }).collect();
        let answers: Vec<Answer> = thread::scope(|s| {
            let handles: Vec<_> = ids.iter().map(|id| s.spawn(|| hangup_leg(w, &leg1, id))).collect();
            handles.into_iter().map(|h| h.join().expect("delivery thread")).collect()
        });
        let mut unique = ids.clone();
        unique.dedup();
        unique.sort();
        unique.dedup();
        wait_settled(w, &unique);
        wait_dials(w, &ring, 2);
        // Every copy's job (a repeated id re-enqueues one while the first is pending) has run,
        // and with it the ring owner's answer to that copy.
        w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
        assert_eq!(dials(w, &ring, 2).len(), 1, "{copies} copies of leg 1's hangup: target 2 dialled once");
        assert_eq!(dials(w, &ring, 2)[0].body["to"], TARGETS[1]);
        assert_eq!(dials(w, &ring, 3).len(), 0, "{copies} copies: target 3 not dialled");
        assert_eq!(dials(w, &ring, 1).len(), 1);
        let shown = call(w, &ring);
        assert_eq!(shown["status"], "ringing");
        assert_eq!(shown["legs"][0]["outcome"], "no_answer", "{shown}");
        assert_eq!(shown["legs"][1]["outcome"], "dialing", "{shown}");
    }
}

fn answer_leg2(w: &Worker, ring: &Ring) -> Recorded {
    let leg1 = wait_dials(w, ring, 1);
    let h = uid("leg1-hangup");
    hangup_leg(w, &leg1, &h);
    let leg2 = wait_dials(w, ring, 2);
    let answered = uid("leg2-answered");
    deliver(w, &answered, "call.answered", "2026-11-30T10:01:40Z", leg_payload(&leg2, json!({"state": "answered"})));
    wait_settled(w, &[h, answered]);
    leg2
}

fn answer_stops_the_ring_and_a_late_hangup_dials_nothing(w: &Worker) {
    let ring = start(w);
    let leg2 = answer_leg2(w, &ring);
    let bridge = format!("/v2/calls/{}/actions/bridge", ring.caller_control.replace(':', "%3A"));
    let bridges = w.carrier.requests(&bridge);
    assert_eq!(bridges.len(), 1, "the caller was bridged once");
    assert_eq!(bridges[0].body["call_control_id"], leg_payload(&leg2, json!({}))["call_control_id"]);
    // A late duplicate of leg 1's hangup, re-signed under a new id.
    let leg1 = dials(w, &ring, 1).remove(0);
    let late = uid("late-leg1-hangup");
    let answer = hangup_leg(w, &leg1, &late);
    wait_settled(w, &[late]);
    // Its job, and with it the ring owner's answer to it, has run.
    w.wait_jobs_of(&[&answer]);
    assert_eq!(dials(w, &ring, 2).len(), 1);
    assert_eq!(dials(w, &ring, 3).len(), 0, "no dial after the answer");
    let shown = call(w, &ring);
    assert_eq!(shown["status"], "in_progress");
    assert_eq!(shown["legs"][1]["outcome"], "answered");
    assert_eq!(events(w, &ring, "call.answered"), 1);
}

fn caller_hangup_three_times_completes_and_bills_once(w: &Worker) {
    let ring = start(w);
    answer_leg2(w, &ring);
    let payload = json!({
        "call_control_id": ring.caller_control, "call_leg_id": format!("leg-{}", ring.caller_control),
            "call_session_id": ring.session,
        "hangup_cause": "normal_clearing", "hangup_source": "caller",
    });
    let hangup = uid("caller-hangup");
    deliver(w, &hangup, "call.hangup", "2026-11-30T10:02:41Z", payload.clone());
    deliver(w, &hangup, "call.hangup", "2026-11-30T10:02:41Z", payload.clone());
    let resigned = format!("{hangup}-resigned");
    deliver(w, &resigned, "call.hangup", "2026-11-30T10:02:41Z", payload);
    wait_settled(w, &[hangup, resigned]);
    let shown = call(w, &ring);
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["duration_secs"], 61, "answered 10:01:40, ended 10:02:41");
    assert_eq!(shown["billed_minutes"], 2, "61 s rounds up to 2 minutes");
    assert_eq!(shown["charge"]["kind"], "call_minutes", "{shown}");
    assert_eq!(shown["charge"]["quantity"], 2, "{shown}");
    // Each leg's times are the carrier's: leg 1 rang out at 10:01:30, leg 2 answered at 10:01:40.
    let (leg1, leg2) = (&shown["legs"][0], &shown["legs"][1]);
    assert!(leg1["dialed_at"].is_string() && leg2["dialed_at"].is_string(), "{shown}");
    assert_eq!((&leg1["answered_at"], &leg1["ended_at"]), (&Value::Null, &json!("2026-11-30T10:01:30Z")), "{shown}");
    assert_eq!(leg2["answered_at"], "2026-11-30T10:01:40Z", "{shown}");
    let completed = w.sql(&format!(
        "SELECT payload FROM outbound_events WHERE resource_id = {} AND type = 'call.completed'",
        lit(&ring.call_id)
    ));
    let announced: Value =
        serde_json::from_str(completed[0]["payload"].as_str().unwrap_or_default()).unwrap_or_default();
    assert_eq!(announced["data"]["legs"][1]["answered_at"], "2026-11-30T10:01:40Z", "{announced}");
    assert_eq!(events(w, &ring, "call.completed"), 1);
    let usage = w.sql(&format!("SELECT kind, quantity FROM usage WHERE resource_id = {}", lit(&ring.call_id)));
    assert_eq!(usage, vec![json!({"kind": "call_minutes", "quantity": 2})]);
    let totals = w.call("GET", "/v1/usage", &ring.account_key, None, &[]).json();
    assert_eq!(totals["call_minutes"], 2, "{totals}");
}

fn all_targets_unanswered_ends_missed_without_charge(w: &Worker) {
    let ring = start(w);
    let mut ids = Vec::new();
    for position in 1..=3 {
        let leg = wait_dials(w, &ring, position);
        let id = uid(&format!("leg{position}-hangup"));
        hangup_leg(w, &leg, &id);
        ids.push(id);
    }
    wait_settled(w, &ids);
    let total: usize = (1..=3).map(|p| dials(w, &ring, p).len()).sum();
    assert_eq!(total, 3, "three dials, one per target");
    let shown = call(w, &ring);
    assert_eq!(shown["status"], "missed", "{shown}");
    assert_eq!(shown["billed_minutes"], 0);
    assert_eq!(events(w, &ring, "call.missed"), 1);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&ring.call_id))), 0);
    let hangups = w.carrier.requests(&format!("/v2/calls/{}/actions/hangup", ring.caller_control.replace(':', "%3A")));
    assert_eq!(hangups.len(), 1, "the caller was hung up once");
    // The caller's own hangup that follows changes nothing.
    let after = uid("caller-hangup-after-missed");
    deliver(
        w,
        &after,
        "call.hangup",
        "2026-11-30T10:03:00Z",
        json!({
            "call_control_id": ring.caller_control, "call_leg_id": "x", "call_session_id": ring.session,
                "hangup_cause": "normal_clearing",
        }),
    );
    wait_settled(w, &[after]);
    assert_eq!(events(w, &ring, "call.missed"), 1);
    assert_eq!(events(w, &ring, "call.completed"), 0);
}

fn ring_cursor_survives_a_restart(_shared: &Worker) {
    // Its own worker: restarting the shared one would disturb the other tests.
    let mut w = Worker::start();
    let ring = start(&w);
    let leg1 = wait_dials(&w, &ring, 1);
    let first = uid("leg1-hangup");
    hangup_leg(&w, &leg1, &first);
    let leg2 = wait_dials(&w, &ring, 2);
    wait_settled(&w, std::slice::from_ref(&first));
    w.restart();
    // After the restart: a duplicate of leg 1's hangup dials nothing, leg 2's dials target 3.
    let duplicate = uid("leg1-hangup-again");
    let again = hangup_leg(&w, &leg1, &duplicate);
    let second = uid("leg2-hangup");
    let next = hangup_leg(&w, &leg2, &second);
    wait_settled(&w, &[duplicate, second]);
    wait_dials(&w, &ring, 3);
    // Both hangups' jobs, and with them the ring owner's answers, have run.
    w.wait_jobs_of(&[&again, &next]);
    assert_eq!((dials(&w, &ring, 1).len(), dials(&w, &ring, 2).len(), dials(&w, &ring, 3).len()), (1, 1, 1));
    w.stop();
}

/// An inbound call's ids, before any of its events is delivered.
pub(crate) struct Inbound {
    account_key: String,
    number: String,
    session: String,
    caller_control: String,
    pub(crate) call_id: String,
}

fn inbound(w: &Worker, targets: &[&str]) -> Inbound {
    let (account, key) = w.create_account("ring");
    let number = fresh_number();
    w.create_number(&account, &number, targets);
    inbound_to(&key, &number)
}

/// A new inbound call to `number`, a number of the account whose key is `key`.
pub(crate) fn inbound_to(key: &str, number: &str) -> Inbound {
    let session = uid("sess");
    let call_id = exactly_core::call_machine::call_id(exactly_core::Provider::Telnyx, &session);
    let caller_control = format!("v3:{}", uid("caller"));
    Inbound { account_key: key.to_owned(), number: number.to_owned(), caller_control, session, call_id }
}

fn initiated_payload(c: &Inbound) -> Value {
    json!({
        "call_control_id": c.caller_control, "call_leg_id": format!("leg-{}", c.caller_control),
            "call_session_id": c.session,
        "from": "+15551230000", "to": c.number, "direction": "incoming", "state": "parked",
    })
}

fn caller_hangup_payload(c: &Inbound) -> Value {
    json!({
        "call_control_id": c.caller_control, "call_leg_id": format!("leg-{}", c.caller_control),
            "call_session_id": c.session,
        "from": "+15551230000", "to": c.number, "hangup_cause": "originator_cancel", "hangup_source": "caller",
    })
}

fn caller_commands(w: &Worker, c: &Inbound, action: &str) -> usize {
    w.carrier.requests(&format!("/v2/calls/{}/actions/{action}", c.caller_control.replace(':', "%3A"))).len()
}

fn dials_of(w: &Worker, c: &Inbound) -> Vec<Recorded> {
    let prefix = format!("{}:leg:", c.call_id);
    w.carrier
        .requests("/v2/calls")
        .into_iter()
        .filter(|r| r.idempotency_key.as_deref().is_some_and(|k| k.starts_with(&prefix)))
        .collect()
}

fn shown(w: &Worker, c: &Inbound) -> Value {
    let a = w.call("GET", &format!("/v1/calls/{}", c.call_id), &c.account_key, None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn call_events(w: &Worker, c: &Inbound, event_type: &str) -> i64 {
    w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {} AND type = {}",
        lit(&c.call_id),
        lit(event_type)
    ))
}

/// The caller hangs up, and the carrier's retry of `call.initiated` is processed after the
/// hangup: nobody is rung, the caller is not answered, the call ends missed once.
fn caller_hangup_before_a_retried_initiated_rings_nobody(w: &Worker) {
    let c = inbound(w, &TARGETS);
    let answers = caller_hangup_before_a_retried_initiated(w, &c);
    let ok = w.eventually(Duration::from_secs(20), || call_events(w, &c, "call.missed") == 1);
    assert!(ok, "one call.missed");
    // Every retry's job (the repeated id may have re-enqueued one), and with it the ring
    // owner's answer to it, has run.
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    assert_eq!(dials_of(w, &c).len(), 0, "nobody is rung for a caller who left");
    assert_eq!(caller_commands(w, &c, "answer"), 0, "the caller's leg is not answered");
    let call = shown(w, &c);
    assert_eq!(call["status"], "missed", "{call}");
    assert_eq!(call["ended_at"], "2026-11-30T10:01:03Z", "{call}");
    assert_eq!(call_events(w, &c, "call.missed"), 1);
    assert_eq!(call_events(w, &c, "call.initiated"), 1);
}

/// The caller hangs up, then the carrier's retries of the lost `call.initiated` come (twice,
/// once re-signed under a new event id); returns the retries' answers once every event settled.
pub(crate) fn caller_hangup_before_a_retried_initiated(w: &Worker, c: &Inbound) -> [Answer; 3] {
    let hangup = uid("caller-hangup");
    deliver(w, &hangup, "call.hangup", "2026-11-30T10:01:03Z", caller_hangup_payload(c));
    wait_settled(w, std::slice::from_ref(&hangup));
    let init = uid("init-retried");
    let first = deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(c));
    let again = deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(c));
    let resigned = format!("{init}-resigned");
    let third = deliver(w, &resigned, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(c));
    wait_settled(w, &[init, resigned]);
    [first, again, third]
}

/// The carrier refuses every dial: the call ends missed, the caller's leg is hung up once, and
/// one call.missed is sent.
fn every_dial_refused_ends_missed_and_hangs_up_the_caller_once(w: &Worker) {
    // The fake carrier refuses (422) every number ending in 0000.
    let c = inbound(w, &["+15557770000", "+15558880000"]);
    let init = uid("init");
    let first = deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(&c));
    let again = deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(&c));
    wait_settled(w, std::slice::from_ref(&init));
    let ok = w.eventually(Duration::from_secs(20), || call_events(w, &c, "call.missed") == 1);
    assert!(ok, "one call.missed");
    let call = shown(w, &c);
    assert_eq!(call["status"], "missed", "{call}");
    assert_eq!(call["legs"].as_array().map(Vec::len), Some(2), "{call}");
    for leg in call["legs"].as_array().into_iter().flatten() {
        assert_eq!(leg["outcome"], "no_answer", "{call}");
        assert_eq!(leg["hangup_cause"], "90018", "{call}");
    }
    assert_eq!(dials_of(w, &c).len(), 2, "each target tried once");
    assert_eq!(caller_commands(w, &c, "hangup"), 1, "the caller's leg is hung up once");
    // The caller's hangup that follows changes nothing.
    let after = uid("caller-hangup");
    let hangup = deliver(w, &after, "call.hangup", "2026-11-30T10:01:02Z", caller_hangup_payload(&c));
    wait_settled(w, std::slice::from_ref(&after));
    // The hangup's job and the repeated call.initiated's (if it re-enqueued one), and with them
    // the ring owner's answers, have run.
    w.wait_jobs_of(&[&first, &again, &hangup]);
    assert_eq!(caller_commands(w, &c, "hangup"), 1);
    assert_eq!(call_events(w, &c, "call.missed"), 1);
}

/// D1 fails right after the carrier placed a dial: the leg row is written on the retry, shows
/// in the API, and is hung up when the caller leaves.
fn a_failed_leg_write_after_a_dial_is_retried_not_lost(w: &Worker) {
    let target = format!("sip:fault-d1-after-dial-{}@example.com", sim::random_hex());
    let c = inbound(w, &[&target]);
    let init = uid("init");
    deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(&c));
    let written = w.eventually(Duration::from_secs(30), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM call_legs WHERE call_id = {} AND outcome = 'dialing'",
            lit(&c.call_id)
        )) == 1
    });
    assert!(written, "the leg row was written after the injected failure");
    assert!(w.log_lines(&["injected D1 failure writing leg", &c.call_id]) >= 1, "the first write failed");
    assert_eq!(dials_of(w, &c).len(), 1, "the retry wrote the leg without dialling again");
    let call = shown(w, &c);
    assert_eq!(call["legs"][0]["target"], target.as_str(), "{call}");
    assert_eq!(call["legs"][0]["outcome"], "dialing", "{call}");
    let hangup = uid("caller-hangup");
    deliver(w, &hangup, "call.hangup", "2026-11-30T10:01:20Z", caller_hangup_payload(&c));
    let leg_control = format!("v3:cc-{}:leg:1", c.call_id).replace(':', "%3A");
    let hung = w.eventually(Duration::from_secs(20), || {
        !w.carrier.requests(&format!("/v2/calls/{leg_control}/actions/hangup")).is_empty()
    });
    assert!(hung, "the ringing leg was hung up when the caller left");
}

/// Every ring leg's hangup delivered before the one that dials it (the carrier's retries came
/// back in reverse), with duplicates: each target is dialled once, the call ends missed once.
fn leg_events_in_reverse_order_dial_each_target_once(w: &Worker) {
    let c = inbound(w, &TARGETS);
    legs_hung_up_in_reverse_before_initiated(w, &c);
    let ok = w.eventually(Duration::from_secs(30), || call_events(w, &c, "call.missed") == 1);
    assert!(ok, "one call.missed");
    let mut keys: Vec<String> = dials_of(w, &c).into_iter().filter_map(|r| r.idempotency_key).collect();
    keys.sort();
    assert_eq!(keys, (1..=3).map(|p| format!("{}:leg:{p}", c.call_id)).collect::<Vec<_>>(), "each target dialled once");
    let call = shown(w, &c);
    assert_eq!(call["status"], "missed", "{call}");
    assert_eq!(call["ended_at"], "2026-11-30T10:01:30Z", "the last target timed out at 10:01:30: {call}");
    assert_eq!(caller_commands(w, &c, "hangup"), 1, "the caller was hung up once");
}

/// Every ring leg's hangup (to [`TARGETS`], each timed out, each delivered twice), last leg
/// first, then the call's `call.initiated`; returns once every event settled.
pub(crate) fn legs_hung_up_in_reverse_before_initiated(w: &Worker, c: &Inbound) {
    let mut ids = Vec::new();
    for position in (1..=3u32).rev() {
        let key = format!("{}:leg:{position}", c.call_id);
        let tag = exactly_core::ring_plan::LegTag { call: c.call_id.clone(), position };
        let payload = json!({
            "call_control_id": format!("v3:cc-{key}"), "call_leg_id": format!("leg-{key}"),
                "call_session_id": format!("sess-{key}"),
            "from": c.number, "to": TARGETS[position as usize - 1], "direction": "outgoing",
            "client_state": exactly_core::telnyx::encode_client_state(&tag.encode()),
            "hangup_cause": "timeout", "hangup_source": "callee",
        });
        let id = uid(&format!("leg{position}-hangup"));
        deliver(w, &id, "call.hangup", &format!("2026-11-30T10:01:{:02}Z", 10 * position), payload.clone());
        deliver(w, &id, "call.hangup", &format!("2026-11-30T10:01:{:02}Z", 10 * position), payload);
        ids.push(id);
    }
    let init = uid("init");
    deliver(w, &init, "call.initiated", "2026-11-30T10:01:00Z", initiated_payload(c));
    ids.push(init);
    wait_settled(w, &ids);
}

/// `ring_timeout_secs` of the called number is what each dial asks the carrier for; 30 s when the
/// number does not say.
fn each_number_rings_its_targets_for_its_own_timeout(w: &Worker) {
    let (account, _) = w.create_account("ring-timeout");
    let admin = |body: Value| w.call("POST", "/admin/numbers", exactly_tests::ADMIN_TOKEN, Some(&body), &[]);
    for bad in [json!(4), json!(121), json!("twelve")] {
        let body = json!({"account_id": account, "phone_number": fresh_number(), "ring_targets": TARGETS,
            "ring_timeout_secs": bad});
        let a = admin(body);
        assert_eq!(a.status, 422, "{bad}: {}", a.body);
    }
    let (short, default) = (fresh_number(), fresh_number());
    let a =
        admin(json!({"account_id": account, "phone_number": short, "ring_targets": TARGETS, "ring_timeout_secs": 12}));
    assert_eq!((a.status, &a.json()["ring_timeout_secs"]), (201, &json!(12)), "{}", a.body);
    w.create_number(&account, &default, &TARGETS);
    for (number, expected) in [(&short, 12), (&default, 30)] {
        let caller = format!("v3:{}", uid("timeout-caller"));
        deliver(
            w,
            &uid("timeout-init"),
            "call.initiated",
            "2026-11-30T11:00:00Z",
            json!({
                "call_control_id": caller, "call_leg_id": format!("leg-{caller}"), "call_session_id": uid("sess"),
                "from": "+15551230000", "to": number, "direction": "incoming", "state": "parked",
            }),
        );
        let mut dialled = Vec::new();
        let found = w.eventually(Duration::from_secs(30), || {
            dialled =
                w.carrier.requests("/v2/calls").into_iter().filter(|r| r.body["from"] == number.as_str()).collect();
            !dialled.is_empty()
        });
        assert!(found, "{number} rang its first target");
        assert_eq!(dialled[0].body["timeout_secs"], expected, "{number}: {}", dialled[0].body);
    }
}

/// How many rows the Durable Object of `call_id` still stores.
fn held_rows(w: &Worker, call_id: &str) -> i64 {
    let a = w.post(&format!("/__e2e/calls/{call_id}"), &[], b"");
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["rows"].as_i64().unwrap_or(-1)
}

/// A completed call's Durable Object deletes all it stores once the call has been settled for
/// its grace (`E2E_CALL_GRACE_SECS` here; the dedupe log's shortest retention deployed), and a
/// late re-signed copy of its hangup after that changes nothing: one call, completed, billed once.
fn a_settled_call_keeps_nothing_after_its_grace(_shared: &Worker) {
    // Its own worker, with a grace of 2 s.
    let w = Worker::start_with(&[("E2E_CALL_GRACE_SECS", "2")]);
    let ring = start(&w);
    assert!(held_rows(&w, &ring.call_id) > 0, "a ringing call is stored");
    answered_then_hung_up(&w, &ring);
    assert!(w.eventually(Duration::from_secs(30), || call(&w, &ring)["status"] == "completed"), "completed");
    // The object's own alarm deletes it once the grace has passed.
    let emptied = w.eventually(Duration::from_secs(30), || held_rows(&w, &ring.call_id) == 0);
    assert!(emptied, "the settled call's object still stores {} rows", held_rows(&w, &ring.call_id));
    let late = uid("late-caller-hangup");
    let payload = json!({
        "call_control_id": ring.caller_control, "call_leg_id": format!("leg-{}", ring.caller_control),
            "call_session_id": ring.session,
        "hangup_cause": "normal_clearing", "hangup_source": "caller",
    });
    deliver(&w, &late, "call.hangup", "2026-11-30T10:02:41Z", payload);
    wait_settled(&w, &[late]);
    let shown = call(&w, &ring);
    assert_eq!((&shown["status"], &shown["billed_minutes"]), (&json!("completed"), &json!(2)), "{shown}");
    assert_eq!(events(&w, &ring, "call.completed"), 1);
    let usage = w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&ring.call_id)));
    assert_eq!(usage, 1, "billed once");
}
