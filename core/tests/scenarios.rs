//! Scenario tests with a simulated clock: streams of carrier deliveries, clean and misbehaving
//! (duplicated, re-signed under new event ids, shuffled, stale), run through the verifiers and
//! the transition rules the way the edge runs them. The misbehaving streams must end in the
//! same state as the clean ones, with the same number of changes.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::{HashMap, HashSet};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use exactly_core::call::CallStatus;
use exactly_core::call_machine::{self, Action, CallMachine, DialResult, Input, Routed};
use exactly_core::event::{EventKind, Provider};
use exactly_core::message::{transition, MessageStatus, Transition};
use exactly_core::ring_plan::LegTag;
use exactly_core::rng::Deterministic as Rng;
use exactly_core::{telnyx, Rejection, Timestamp};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha1::Sha1;

const SEED: [u8; 32] = [42; 32];
const TWILIO_TOKEN: &str = "scenario-token";
const TWILIO_URL: &str = "https://hooks.example.com/webhooks/twilio";

/// One delivery as it goes over the wire.
#[derive(Clone, Debug)]
enum Delivery {
    Telnyx { body: String, signed_at: i64 },
    Twilio { body: String },
}

/// The simulator's fact builders, the ones every test sends with.
#[path = "../../sim/src/facts.rs"]
#[allow(dead_code)]
mod facts;

fn telnyx_event(id: &str, event_type: &str, occurred: &str, payload: serde_json::Value, signed_at: i64) -> Delivery {
    Delivery::Telnyx { body: facts::envelope(id, event_type, occurred, payload, 1), signed_at }
}

fn twilio_status(sid: &str, status: &str) -> Delivery {
    Delivery::Twilio { body: format!("MessageSid={sid}&MessageStatus={status}&To=%2B15550002222") }
}

/// The edge's effects, in memory: a unique index on (provider, event id) and guarded state.
#[derive(Default, PartialEq, Eq, Debug)]
struct World {
    seen: HashSet<(&'static str, String)>,
    messages: HashMap<String, MessageStatus>,
    call: CallMachine,
    billed_minutes: u64,
    dials: Vec<u32>,
    changes: u32,
    rejected: u32,
}

struct Carriers {
    telnyx: telnyx::Verifier,
    twilio: exactly_core::twilio::Verifier,
    plan: Vec<String>,
}

impl Carriers {
    fn new() -> Self {
        let public = STANDARD.encode(SigningKey::from_bytes(&SEED).verifying_key().as_bytes());
        Carriers {
            telnyx: telnyx::Verifier::from_base64_keys(&public).unwrap(),
            twilio: exactly_core::twilio::Verifier::new(TWILIO_TOKEN).unwrap(),
            plan: vec!["+15550000001".into(), "+15550000002".into(), "+15550000003".into()],
        }
    }

    fn deliver(&self, world: &mut World, delivery: &Delivery, now: Timestamp) {
        let verified = match delivery {
            Delivery::Telnyx { body, signed_at } => {
                let timestamp = signed_at.to_string();
                let mut message = timestamp.clone().into_bytes();
                message.push(b'|');
                message.extend_from_slice(body.as_bytes());
                let signature = STANDARD.encode(SigningKey::from_bytes(&SEED).sign(&message).to_bytes());
                let headers = telnyx::Headers { signature: Some(&signature), timestamp: Some(&timestamp) };
                self.telnyx.verify(headers, body.as_bytes(), now)
            }
            Delivery::Twilio { body } => {
                let pairs: Vec<(String, String)> = exactly_core::form::parse(body.as_bytes());
                let mut data = TWILIO_URL.to_owned();
                for (k, v) in exactly_core::form::sorted(&pairs, true) {
                    data.push_str(k);
                    data.push_str(v);
                }
                let mut mac = Hmac::<Sha1>::new_from_slice(TWILIO_TOKEN.as_bytes()).unwrap();
                mac.update(data.as_bytes());
                let signature = STANDARD.encode(mac.finalize().into_bytes());
                let request = exactly_core::twilio::Request {
                    url: TWILIO_URL,
                    signature: Some(&signature),
                    signature_settings: None,
                    body: body.as_bytes(),
                };
                self.twilio.verify(request, now)
            }
        };
        let event = match verified {
            Ok(v) => v.into_event(),
            Err(Rejection::Unauthenticated(_)) => {
                world.rejected += 1;
                return;
            }
            Err(other) => panic!("unexpected rejection {other:?}"),
        };
        // The unique index: a repeated event id inserts nothing.
        if !world.seen.insert((event.provider.as_str(), event.event_id.clone())) {
            return;
        }
        match event.kind {
            EventKind::MessageStatus(report) => {
                let key = format!("{}:{}", event.provider.as_str(), report.carrier_message_id);
                let current = world.messages.get(&key).copied().unwrap_or(MessageStatus::Sending);
                if let (Some(reported), true) = (report.status, event.provider != Provider::Plivo) {
                    if let Transition::Move { to, .. } = transition(current, reported) {
                        world.messages.insert(key, to);
                        world.changes += 1;
                    }
                }
            }
            EventKind::CallInitiated(_) | EventKind::CallAnswered(_) | EventKind::CallHangup(_) => {
                // The same routing and machine the edge's Durable Object runs, with a carrier that
                // answers and places every leg at once.
                let fact = match call_machine::route(&event, now) {
                    Routed::Inbound(inbound) => inbound.fact("acct_1", self.plan.clone(), 30),
                    Routed::Fact { fact, .. } => fact,
                    Routed::Ignore => return,
                };
                let mut inputs = vec![Input::Carrier { event: event.event_id.clone(), fact }];
                while let Some(input) = inputs.pop() {
                    let (machine, actions) = std::mem::take(&mut world.call).handle(input, now);
                    world.call = machine;
                    for action in actions {
                        match action {
                            Action::AnswerCaller { .. } => inputs.push(Input::AnswerResult { accepted: true }),
                            Action::Dial { position, .. } => {
                                world.dials.push(position);
                                world.changes += 1;
                                let call_control_id = format!("cc-{position}");
                                inputs.push(Input::DialResult {
                                    position,
                                    result: DialResult::Placed { call_control_id },
                                });
                            }
                            Action::RecordCall { .. } | Action::RecordAnswered { .. } => world.changes += 1,
                            Action::RecordEnd { end, .. } => {
                                world.billed_minutes += end.billable_minutes;
                                world.changes += 1;
                            }
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// The clean stream: each fact once, in causal order, grouped by entity so entities can be
/// interleaved without breaking any entity's own order.
fn facts(base: i64) -> Vec<Vec<Delivery>> {
    let leg = |id: &str, position: Option<u32>| {
        let mut p = json!({"call_control_id": format!("cc-{id}"), "call_leg_id": format!("leg-{id}"),
            "call_session_id": "sess-1",
                           "from": "+15550009999", "to": "+15550001000",
                               "direction": if position.is_some() { "outgoing" } else { "incoming" },
                           "hangup_cause": "timeout", "hangup_source": "callee"});
        if let Some(position) = position {
            let tag = LegTag { call: call_machine::call_id(Provider::Telnyx, "sess-1"), position };
            p["client_state"] = json!(telnyx::encode_client_state(&tag.encode()));
            p["call_session_id"] = json!(format!("sess-leg-{position}"));
        }
        p
    };
    let receipt = |msg: &str, status: &str| {
        json!({"id": msg, "to": [{"phone_number": "+15550002222",
        "status": status}], "errors": []})
    };
    vec![
        vec![
            telnyx_event("m1-sent", "message.sent", "2026-11-30T10:00:01Z", receipt("m1", "sent"), base),
            telnyx_event("m1-final", "message.finalized", "2026-11-30T10:00:05Z", receipt("m1", "delivered"), base + 4),
        ],
        vec![
            telnyx_event("m2-sent", "message.sent", "2026-11-30T10:00:02Z", receipt("m2", "sent"), base),
            telnyx_event(
                "m2-final",
                "message.finalized",
                "2026-11-30T10:00:09Z",
                receipt("m2", "delivery_failed"),
                base + 8,
            ),
        ],
        vec![twilio_status("SM1", "queued"), twilio_status("SM1", "sent"), twilio_status("SM1", "delivered")],
        vec![
            telnyx_event("c-init", "call.initiated", "2026-11-30T10:01:00Z", leg("in", None), base + 60),
            telnyx_event("c-leg1-hangup", "call.hangup", "2026-11-30T10:01:30Z", leg("1", Some(1)), base + 90),
            telnyx_event("c-leg2-answer", "call.answered", "2026-11-30T10:01:40Z", leg("2", Some(2)), base + 100),
            telnyx_event("c-hangup", "call.hangup", "2026-11-30T10:03:41Z", leg("in", None), base + 221),
        ],
    ]
}

/// The same delivery re-signed later, or the same fact under a new event id.
fn resign(delivery: &Delivery, rng: &mut Rng, new_id: bool) -> Delivery {
    match delivery {
        Delivery::Telnyx { body, signed_at } => {
            let mut value: serde_json::Value = serde_json::from_str(body).unwrap();
            if new_id {
                let id = format!("{}-resigned-{}", value["data"]["id"].as_str().unwrap(), rng.next_u64() % 1000);
                value["data"]["id"] = json!(id);
            }
            value["meta"]["attempt"] = json!(2);
            Delivery::Telnyx { body: value.to_string(), signed_at: signed_at + 4 }
        }
        twilio => twilio.clone(),
    }
}

fn run(stream: &[Delivery], base: i64) -> World {
    let carriers = Carriers::new();
    let mut world = World::default();
    for (i, delivery) in stream.iter().enumerate() {
        // The simulated clock runs a little ahead of the signing times.
        let now = Timestamp::from_unix_seconds(base + 230 + i as i64);
        carriers.deliver(&mut world, delivery, now);
    }
    world
}

fn misbehave(groups: &[Vec<Delivery>], rng: &mut Rng) -> Vec<Delivery> {
    // Interleave entities at random, keeping each entity's causal order.
    let mut cursors = vec![0; groups.len()];
    let mut stream: Vec<Delivery> = Vec::new();
    while cursors.iter().zip(groups).any(|(c, g)| *c < g.len()) {
        let g = rng.below(groups.len());
        if cursors[g] < groups[g].len() {
            stream.push(groups[g][cursors[g]].clone());
            cursors[g] += 1;
        }
    }
    // Duplicates and re-signed retries, each somewhere after its original: every delivery
    // gets a sort key, a copy's key lies after its original's.
    let span = stream.len() as u64 * 1000;
    let mut keyed: Vec<(u64, Delivery)> = Vec::new();
    for (i, original) in stream.iter().enumerate() {
        let key = i as u64 * 1000;
        for _ in 0..rng.below(4) {
            let copy = match rng.below(3) {
                0 => original.clone(),
                1 => resign(original, rng, false),
                _ => resign(original, rng, true),
            };
            keyed.push((key + 1 + rng.next_u64() % (span - key), copy));
        }
        keyed.push((key, original.clone()));
    }
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, d)| d).collect()
}

const BASE: i64 = 1_796_032_800; // 2026-11-30T10:00:00Z

#[test]
fn clean_stream_final_state() {
    let stream: Vec<Delivery> = facts(BASE).concat();
    let world = run(&stream, BASE);
    assert_eq!(world.messages["telnyx:m1"], MessageStatus::Delivered);
    assert_eq!(world.messages["telnyx:m2"], MessageStatus::Failed);
    assert_eq!(world.messages["twilio:SM1"], MessageStatus::Delivered);
    assert_eq!(world.dials, vec![1, 2], "target 1, then target 2 after leg 1's hangup");
    let ended = world.call.ended.expect("the call ended");
    assert_eq!(ended.status, CallStatus::Completed);
    assert_eq!(world.billed_minutes, 3, "answered 10:01:40, ended 10:03:41: 121 s -> 3 minutes");
    // m1: sent, delivered; m2: sent, failed; SM1: sent, delivered (queued is behind sending);
    // call: recorded, dial 1, dial 2, answered, ended.
    assert_eq!(world.changes, 11);
    assert_eq!(world.rejected, 0);
}

#[test]
fn duplicated_resigned_and_interleaved_streams_change_the_same() {
    let clean = run(&facts(BASE).concat(), BASE);
    for seed in 1..=200u64 {
        let mut rng = Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let stream = misbehave(&facts(BASE), &mut rng);
        assert!(stream.len() > clean.seen.len(), "seed {seed}: the stream has copies");
        let world = run(&stream, BASE);
        assert_eq!(world.messages, clean.messages, "seed {seed}");
        assert_eq!(world.call.ended, clean.call.ended, "seed {seed}");
        assert_eq!(world.call.answered, clean.call.answered, "seed {seed}");
        assert_eq!(world.dials, clean.dials, "seed {seed}: no position dialled twice");
        assert_eq!(world.billed_minutes, clean.billed_minutes, "seed {seed}");
        assert_eq!(world.changes, clean.changes, "seed {seed}");
    }
}

#[test]
fn fully_shuffled_receipts_end_in_the_same_final_state() {
    // Within one message any order is possible; the first terminal word wins and nothing
    // moves backward, so the final state is the same and at most one terminal change happens.
    let clean = run(&facts(BASE)[0], BASE);
    for seed in 1..=50u64 {
        let mut rng = Rng::new(seed);
        let mut stream = facts(BASE)[0].clone();
        stream.push(resign(&stream[1], &mut rng, true));
        stream.push(stream[0].clone());
        for i in (1..stream.len()).rev() {
            let j = rng.below(i + 1);
            stream.swap(i, j);
        }
        let world = run(&stream, BASE);
        assert_eq!(world.messages, clean.messages, "seed {seed}");
        assert!(world.changes >= 1 && world.changes <= clean.changes, "seed {seed}: {} changes", world.changes);
    }
}

#[test]
fn stale_deliveries_are_rejected_and_change_nothing() {
    let mut stream = facts(BASE).concat();
    let Delivery::Telnyx { body, .. } = &stream[0] else { unreachable!() };
    let stale = Delivery::Telnyx { body: body.replace("m1-sent", "m1-stale"), signed_at: BASE - 400 };
    stream.insert(0, stale);
    let world = run(&stream, BASE);
    assert_eq!(world.rejected, 1);
    assert_eq!(world.changes, run(&facts(BASE).concat(), BASE).changes);
}
