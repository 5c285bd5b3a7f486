//! The run's account, and the messages and calls whose facts the stream carries.

use std::time::Duration;

use exactly_core::ring_plan::LegTag;
use exactly_core::webhook::EventType;
use exactly_core::{Provider, Timestamp};
use serde_json::{json, Value};

use super::{
    wait_for, Config, Mix, Run, Target, CANCELED_DUE_IN_SECS, COUNTED_TYPES, DUE_IN_SECS, INITIATED_AT,
    LEG_ANSWERED_AT, RECIPIENT, RING_TIMEOUT_SECS, TARGETS,
};
use crate::api::Client;
use crate::telnyx::envelope;

/// The marker that keeps a fake carrier's own receipts back ([`crate::carrier`]): the run sends
/// each message's receipts itself, in its own order.
const NO_RECEIPT: &str = "[no-receipt] ";

/// How many of each kind a run sends.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// Inbound messages (one fact each).
    pub(super) inbound: usize,
    /// Ringing calls (one fact each).
    pub(super) ring: usize,
    /// Messages sent through Telnyx (two receipts each).
    pub(super) messages: usize,
    /// Messages sent through Twilio and Plivo (two status callbacks each).
    pub(super) rest: usize,
    /// Scheduled messages, due or canceled (one fact each).
    pub(super) scheduled: usize,
    /// Answered calls whose hangup is lost (one fact each).
    pub(super) lost: usize,
}

impl Plan {
    /// The shares of [`Mix::All`], leaving out Twilio and Plivo without a carrier to send
    /// through and lost hangups without reconciliation; inbound messages take up the rest.
    pub(super) fn new(config: &Config, rest: bool, reconcile: bool) -> Self {
        let facts = config.facts;
        let (ring, messages, rest, scheduled, lost) = match config.mix {
            Mix::All => (
                (facts * 15 / 100).max(1),
                (facts * 25 / 100 / 2).max(1),
                if rest { facts * 4 / 100 / 2 } else { 0 },
                facts * 2 / 100,
                if reconcile { facts / 100 } else { 0 },
            ),
            Mix::Inbound => (0, 0, 0, 0, 0),
            Mix::Outbound => (0, facts.div_ceil(2), 0, 0, 0),
            Mix::Ring => (facts, 0, 0, 0, 0),
        };
        let inbound = facts.saturating_sub(ring + 2 * messages + 2 * rest + scheduled + lost);
        Self { inbound, ring, messages, rest, scheduled, lost }
    }

    /// Facts in all.
    #[cfg(test)]
    pub(super) fn facts(&self) -> usize {
        self.inbound + self.ring + 2 * self.messages + 2 * self.rest + self.scheduled + self.lost
    }
}

/// An outbound message of the run and how its carrier finishes it.
pub(super) struct Outbound {
    pub(super) id: String,
    pub(super) carrier: Provider,
    pub(super) from: String,
    pub(super) text: String,
    pub(super) delivered: bool,
    /// Its final callback is lost until reconciliation has asked the carrier.
    pub(super) reconciled: bool,
    pub(super) carrier_id: String,
}

/// A scheduled message of the run.
pub(super) struct Scheduled {
    pub(super) id: String,
    /// Its text, unique in the run.
    pub(super) text: String,
    pub(super) send_at: Timestamp,
    pub(super) canceled: bool,
}

/// An answered call whose caller's hangup is lost.
pub(super) struct LostHangup {
    pub(super) id: String,
    pub(super) caller: String,
    pub(super) duration_secs: i64,
    /// The late real hangup, when it comes.
    pub(super) late: Option<String>,
}

/// The run's numbers: an inbound (Telnyx) number, one that rings three targets, one whose dials
/// are all refused, and a Twilio and a Plivo number when the target can sign for them.
pub(super) struct Numbers {
    pub(super) inbound: String,
    pub(super) ring: String,
    pub(super) refused: String,
    pub(super) rest: Vec<(Provider, String)>,
}

/// What the run made before the stream: its numbers, messages and calls, and the facts of its
/// calls, written before their dials happen.
pub(super) struct Story {
    pub(super) plan: Plan,
    pub(super) numbers: Numbers,
    pub(super) outbound: Vec<Outbound>,
    pub(super) scheduled: Vec<Scheduled>,
    pub(super) lost: Vec<LostHangup>,
    /// Per ringing call, its `call.initiated` and (unless its dials are all refused) its first
    /// leg's hangup.
    pub(super) calls: Vec<(String, Option<String>)>,
    /// The `call.initiated` and `call.answered` of each call whose hangup is lost.
    pub(super) lost_facts: Vec<String>,
}

/// The word a Twilio or Plivo status callback uses for a message's final status.
pub(super) fn final_word(carrier: Provider, delivered: bool) -> &'static str {
    match (carrier, delivered) {
        (_, true) => "delivered",
        (Provider::Twilio, false) => "undelivered",
        (Provider::Telnyx | Provider::Plivo, false) => "failed",
    }
}

/// Every fourth ringing call rings the number whose dials are all refused: its one fact is its
/// `call.initiated`, and it must end missed with the caller hung up once.
pub(super) fn refused(i: usize) -> bool {
    i % 4 == 3
}

impl Run<'_, '_> {
    /// The account, its numbers and its webhook endpoints: the counted one and, when asked, three
    /// that misbehave beside it.
    pub(super) fn set_up(&mut self) -> Result<Numbers, String> {
        let (api, tag) = (self.api, self.tag.clone());
        let admin = &self.target.admin_token;
        let account = api.call("POST", "/admin/accounts", admin, Some(&json!({"name": format!("chaos-{tag}")})));
        if account.status != 201 {
            return Err(format!("creating the account: {} {}", account.status, account.body));
        }
        let account = account.json();
        let account_id = account["id"].as_str().unwrap_or_default().to_owned();
        self.key = account["api_key"].as_str().unwrap_or_default().to_owned();
        self.report.created.account_id = account_id.clone();
        self.report.created.api_key = self.key.clone();
        let suffix = u32::from_str_radix(&tag[..4], 16).unwrap_or(0) % 10_000;
        let numbers = Numbers {
            inbound: format!("+1556{suffix:04}001"),
            ring: format!("+1556{suffix:04}002"),
            // Every dial to this number's targets is refused by the fake carrier (numbers ending 0000).
            refused: format!("+1556{suffix:04}003"),
            rest: [
                (Provider::Twilio, self.target.twilio_token.is_some(), format!("+1556{suffix:04}004")),
                (Provider::Plivo, self.target.plivo_token.is_some(), format!("+1556{suffix:04}005")),
            ]
            .into_iter()
            .filter(|(_, trusted, _)| *trusted)
            .map(|(carrier, _, number)| (carrier, number))
            .collect(),
        };
        let mut assigned = vec![
            json!({"phone_number": numbers.inbound, "ring_targets": []}),
            json!({"phone_number": numbers.ring, "ring_targets": TARGETS, "ring_timeout_secs": RING_TIMEOUT_SECS}),
            json!({"phone_number": numbers.refused, "ring_targets": ["+15557770000", "+15558880000"]}),
        ];
        for (carrier, number) in &numbers.rest {
            assigned.push(json!({"phone_number": number, "ring_targets": [], "carrier": carrier.as_str()}));
        }
        for mut number in assigned {
            number["account_id"] = json!(account_id);
            let a = api.call("POST", "/admin/numbers", admin, Some(&number));
            if a.status != 201 {
                return Err(format!("assigning {}: {} {}", number["phone_number"], a.status, a.body));
            }
        }
        self.endpoints();
        Ok(numbers)
    }

    /// The counted endpoint and the misbehaving ones, on the customer server when there is one.
    fn endpoints(&mut self) {
        let Some(customer) = self.target.customer else { return };
        let (api, key, tag) = (self.api, self.key.clone(), self.tag.clone());
        let path = format!("/chaos/{tag}");
        let a = api.call(
            "POST",
            "/v1/webhook_endpoints",
            &key,
            Some(&json!({"url": format!("{}{path}", customer.base), "event_types": COUNTED_TYPES.map(EventType::as_str)})),
        );
        if a.status == 201 {
            self.report.created.endpoint_path = Some(path);
            self.report.created.endpoint_id = a.json()["id"].as_str().map(str::to_owned);
        } else {
            self.report.problem(format!("customer events not counted: endpoint refused ({} {})", a.status, a.body));
        }
        if !self.config.misbehaving_endpoints {
            return;
        }
        for kind in ["hangs", "resets connections", "flaps"] {
            let path = format!("/chaos/{tag}/{}", kind.split(' ').next().unwrap_or(kind));
            match kind {
                "hangs" => customer.hang(&path),
                "resets connections" => customer.reset(&path),
                _ => customer.flap(&path, Duration::from_secs(1)),
            }
            let body = json!({"url": format!("{}{path}", customer.base), "event_types": ["message.received"]});
            let a = api.call("POST", "/v1/webhook_endpoints", &key, Some(&body));
            match a.json()["id"].as_str() {
                Some(id) if a.status == 201 => self.report.created.misbehaving.push((kind, id.to_owned(), path)),
                _ => self.report.problem(format!("the endpoint that {kind} was refused ({} {})", a.status, a.body)),
            }
        }
    }

    /// The messages (sent, scheduled and canceled) and calls of the run.
    pub(super) fn make_story(&mut self, numbers: Numbers) -> Result<Story, String> {
        let target = self.target;
        let reconcile = self.config.mix == Mix::All && target.carrier.is_some() && target.cron && target.reconcile;
        let plan = Plan::new(self.config, !numbers.rest.is_empty(), reconcile);
        let outbound = self.send_outbound(&plan, &numbers, reconcile)?;
        let scheduled = self.schedule(&plan, &numbers)?;
        let calls = self.ringing_calls(&plan, &numbers);
        let (lost, lost_facts) = self.lost_hangups(&plan, &numbers);
        Ok(Story { plan, numbers, outbound, scheduled, lost, calls, lost_facts })
    }

    /// Outbound messages, sent and handed to the carrier, whose receipts are facts; waits until
    /// each has its carrier id.
    fn send_outbound(&mut self, plan: &Plan, numbers: &Numbers, reconcile: bool) -> Result<Vec<Outbound>, String> {
        let (api, key, tag) = (self.api, self.key.clone(), self.tag.clone());
        self.progress(&format!("sending {} outbound messages", plan.messages + plan.rest));
        let mut outbound = Vec::new();
        for i in 0..plan.messages {
            // The first send is slow (7 s) while the carrier delivers its receipt 14 times. The
            // second's receipts come before the carrier's answer, which is lost (the send is tried
            // again): they wait for the send, which wakes them, and then the dedupe database is out
            // for them (`fault-dedupe-outage`, in the test build) until their jobs have spent every
            // retry and their dead-letter writes every attempt. Only the sweeper can still apply
            // them.
            // Every other one is `[no-receipt]`: a fake carrier that delivers unmarked messages on
            // its own (`make dev`'s) leaves their receipts to this run.
            let marker = match i {
                0 => "[slow-receipts] ",
                1 => "[receipt-first] fault-dedupe-outage ",
                _ => NO_RECEIPT,
            };
            let text = format!("{marker}chaos {tag} {i}");
            let id = create_message(api, &key, &json!({"from": numbers.inbound, "to": RECIPIENT, "text": text}))?;
            let delivered = i <= 1 || !self.rng.chance(0.2);
            outbound.push(Outbound {
                id,
                carrier: Provider::Telnyx,
                from: numbers.inbound.clone(),
                text,
                delivered,
                reconciled: false,
                carrier_id: String::new(),
            });
        }
        let rest = &numbers.rest;
        for i in 0..plan.rest {
            let (carrier, from) = &rest[i % rest.len()];
            let text = format!("{NO_RECEIPT}chaos {tag} {} {i}", carrier.as_str());
            let id = create_message(api, &key, &json!({"from": from, "to": RECIPIENT, "text": text}))?;
            // The last message of each carrier loses its final callback until reconciliation asked.
            let reconciled = reconcile && i + rest.len() >= plan.rest;
            let delivered = !self.rng.chance(0.3);
            outbound.push(Outbound {
                id,
                carrier: *carrier,
                from: from.clone(),
                text,
                delivered,
                reconciled,
                carrier_id: String::new(),
            });
        }
        if !outbound.is_empty() {
            let ids = wait_for(Duration::from_secs(120), || {
                let mut ids = Vec::new();
                for o in &outbound {
                    let m = api.call("GET", &format!("/v1/messages/{}", o.id), &key, None).json();
                    match m["carrier_message_id"].as_str() {
                        Some(c) if m["status"] == "sent" || m["status"] == "delivered" || m["status"] == "failed" => {
                            ids.push(c.to_owned());
                        }
                        _ => return None,
                    }
                }
                Some(ids)
            })
            .ok_or_else(|| {
                format!(
                    "outbound messages were not all sent within {:?}",
                    crate::api::patient(Duration::from_secs(120))
                )
            })?;
            for (o, carrier_id) in outbound.iter_mut().zip(ids) {
                o.carrier_id = carrier_id;
            }
        }
        self.report.created.messages = outbound.iter().map(|o| o.id.clone()).collect();
        if let Some(carrier) = self.target.carrier {
            // What the carrier will say when reconciliation asks about a message whose final
            // callback is lost.
            for o in outbound.iter().filter(|o| o.reconciled) {
                carrier.set_message_status(&o.carrier_id, final_word(o.carrier, o.delivered));
            }
        }
        Ok(outbound)
    }

    /// Scheduled messages, due a few seconds into the stream; a third of them are canceled by
    /// the customer at the start of the stream, well before their time.
    fn schedule(&mut self, plan: &Plan, numbers: &Numbers) -> Result<Vec<Scheduled>, String> {
        let mut scheduled = Vec::new();
        for i in 0..plan.scheduled {
            let canceled = i % 3 == 2;
            let ahead = if canceled { CANCELED_DUE_IN_SECS } else { DUE_IN_SECS };
            // From the moment of each request: `send_at` must be in the future when it arrives.
            let send_at = Timestamp::from_unix_seconds(crate::unix_now() + ahead);
            let body = json!({"from": numbers.inbound, "to": RECIPIENT, "text": format!("{NO_RECEIPT}chaos {} later {i}", self.tag),
                "send_at": send_at.to_rfc3339()});
            let text = body["text"].as_str().unwrap_or_default().to_owned();
            scheduled.push(Scheduled { id: create_message(self.api, &self.key, &body)?, text, send_at, canceled });
        }
        let created = &mut self.report.created;
        created.messages.extend(scheduled.iter().filter(|s| !s.canceled).map(|s| s.id.clone()));
        created.canceled = scheduled.iter().filter(|s| s.canceled).map(|s| s.id.clone()).collect();
        Ok(scheduled)
    }

    /// Calls: each call's `call.initiated` and its first leg's hangup go into the same shuffled
    /// stream, without waiting for the dial: the call id follows from the carrier session, and
    /// the fake carrier derives a leg's ids from its dial's idempotency key, so the hangup can
    /// be written before the dial happens. Either order must dial target 1, then target 2.
    fn ringing_calls(&mut self, plan: &Plan, numbers: &Numbers) -> Vec<(String, Option<String>)> {
        self.progress(&format!("preparing {} calls", plan.ring + plan.lost));
        let tag = &self.tag;
        let mut calls = Vec::new();
        for i in 0..plan.ring {
            let session = format!("chaos-{tag}-sess-{i}");
            let control = format!("v3:chaos-{tag}-caller-{i}");
            let call_id = exactly_core::call_machine::call_id(Provider::Telnyx, &session);
            let to = if refused(i) { &numbers.refused } else { &numbers.ring };
            let init = initiated(&format!("chaos-{tag}-init-{i}"), &control, &session, to);
            self.report.created.calls.push(call_id.clone());
            if refused(i) {
                calls.push((init, None));
                continue;
            }
            let hangup = leg_event(
                &format!("chaos-{tag}-hangup-{i}"),
                "call.hangup",
                "2026-11-30T10:01:30Z",
                &call_id,
                json!({"hangup_cause": "timeout", "hangup_source": "callee"}),
            );
            calls.push((init, Some(hangup)));
        }
        calls
    }

    /// Calls whose first target answers, and whose caller's hangup never reaches the worker: the
    /// fake carrier says the caller's leg ended, which only reconciliation asks. Half of them get
    /// their real hangup late.
    fn lost_hangups(&mut self, plan: &Plan, numbers: &Numbers) -> (Vec<LostHangup>, Vec<String>) {
        let tag = &self.tag;
        let mut lost = Vec::new();
        let mut facts = Vec::new();
        let answered_at = Timestamp::parse_rfc3339(LEG_ANSWERED_AT).unwrap_or(Timestamp::from_unix_seconds(0));
        for i in 0..plan.lost {
            let session = format!("chaos-{tag}-lost-sess-{i}");
            let caller = format!("v3:chaos-{tag}-lost-caller-{i}");
            let call_id = exactly_core::call_machine::call_id(Provider::Telnyx, &session);
            facts.push(initiated(&format!("chaos-{tag}-lost-init-{i}"), &caller, &session, &numbers.ring));
            facts.push(leg_event(
                &format!("chaos-{tag}-lost-answered-{i}"),
                "call.answered",
                LEG_ANSWERED_AT,
                &call_id,
                json!({"from": numbers.ring, "to": TARGETS[0], "direction": "outgoing", "state": "answered"}),
            ));
            let duration_secs = 61 + 30 * i as i64;
            let ended_at = Timestamp::from_unix_millis(answered_at.unix_millis() + duration_secs * 1000).to_rfc3339();
            if let Some(carrier) = self.target.carrier {
                carrier.end_call(&caller, &ended_at);
            }
            let late = (i % 2 == 0).then(|| {
                envelope(
                    &format!("chaos-{tag}-lost-hangup-{i}"),
                    "call.hangup",
                    &ended_at,
                    json!({"call_control_id": caller, "call_leg_id": format!("leg-{caller}"), "call_session_id": session,
                        "hangup_cause": "normal_clearing", "hangup_source": "caller"}),
                    1,
                )
            });
            lost.push(LostHangup { id: call_id, caller, duration_secs, late });
        }
        self.report.created.reconciled_calls = lost.iter().map(|l| l.id.clone()).collect();
        (lost, facts)
    }
}

/// `POST /v1/messages` with an Idempotency-Key; the new message's id.
fn create_message(api: &Client, key: &str, body: &Value) -> Result<String, String> {
    // Keyed, so a request whose answer wrangler's proxy dropped is asked again safely.
    let a = api.call_keyed("POST", "/v1/messages", key, body, &crate::random_hex());
    if a.status != 201 {
        return Err(format!("POST /v1/messages: {} {}", a.status, a.body));
    }
    Ok(a.json()["id"].as_str().unwrap_or_default().to_owned())
}

/// A `call.initiated` for a caller's leg parked at `to`.
fn initiated(event_id: &str, control: &str, session: &str, to: &str) -> String {
    crate::facts::call_initiated(event_id, INITIATED_AT, control, session, "+15551230000", to)
}

/// An event of a call's first ring leg, with the ids the fake carrier gives the leg it dials
/// (derived from the dial's idempotency key) and the leg's tag, so it can be written before the
/// dial happens.
fn leg_event(event_id: &str, event_type: &str, occurred_at: &str, call_id: &str, fields: Value) -> String {
    let key = format!("{call_id}:leg:1");
    let state = exactly_core::telnyx::encode_client_state(&LegTag { call: call_id.to_owned(), position: 1 }.encode());
    let mut payload = json!({
        "call_control_id": format!("v3:cc-{key}"), "call_leg_id": format!("leg-{key}"),
        "call_session_id": format!("sess-{key}"), "client_state": state,
    });
    if let (Some(payload), Some(fields)) = (payload.as_object_mut(), fields.as_object()) {
        payload.extend(fields.clone());
    }
    envelope(event_id, event_type, occurred_at, payload, 1)
}

/// Every tenth inbound message carries one media item the in-process fake carrier serves (its
/// name and link); none without the fake, whose fetches are what is counted.
pub(super) fn mms_item(target: &Target<'_>, tag: &str, i: usize) -> Option<(String, String)> {
    let carrier = target.carrier?;
    (i % 10 == 3).then(|| {
        let name = format!("chaos-{tag}-{i}.jpg");
        let url = format!("{}/media/{name}", carrier.base);
        (name, url)
    })
}
