//! The count, kind by kind, of what the platform made of the stream: every accepted carrier
//! event settled, each customer event once, each message, media item, call leg, send, charge
//! and minute once, and every webhook id once at the counted endpoint.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use exactly_core::webhook::EventType;
use exactly_core::{Provider, Timestamp};
use serde_json::Value;

use super::deliver::Delivered;
use super::plan::{mms_item, refused, Story};
use super::{percentile, wait_for, Run, COUNTED_TYPES, RING_TIMEOUT_SECS};
use crate::api::Client;

/// The customer events of the facts, counted by (type, what they are about).
struct Effects(HashMap<(EventType, String), usize>);

impl Effects {
    fn has(&self, event_type: EventType, id: &str) -> usize {
        self.0.get(&(event_type, id.to_owned())).copied().unwrap_or(0)
    }
}

impl Run<'_, '_> {
    pub(super) fn verify(&mut self, story: &Story, delivered: Delivered) -> Result<(), String> {
        self.carrier_events_settled(story)?;
        let (events, effects) = self.customer_events()?;
        self.inbound(story, &effects)?;
        self.outbound(story, &effects);
        self.scheduled(story, &effects);
        self.calls(story)?;
        let call_minutes = self.hangups_lost(story, &effects);
        self.dials(story);
        // The ledger: one segment per message sent, the minutes of each completed call, nothing
        // for the rest.
        let usage = self.api.read("/v1/usage", &self.key).json();
        let segments = usage["sms_segments"].as_u64().unwrap_or(0) as usize;
        let sent = self.report.created.messages.len();
        self.report.expect(|| "the account's SMS segments".into(), segments, sent);
        let minutes = usage["call_minutes"].as_u64().unwrap_or(0) as usize;
        self.report.expect(|| "the account's call minutes".into(), minutes, call_minutes as usize);
        let plan = &story.plan;
        let due = story.scheduled.iter().filter(|s| !s.canceled).count();
        let expected_events = plan.inbound + 2 * story.outbound.len() + due + plan.ring + 3 * plan.lost;
        if effects.0.len() < expected_events {
            self.report
                .problem(format!("{} distinct customer events, expected at least {expected_events}", effects.0.len()));
        }
        self.counted_endpoint(events.len(), delivered);
        self.misbehaving();
        Ok(())
    }

    /// Every carrier event of the run is processed (docs/contract.md §7.8): none pending, none
    /// failed. A receipt the queue gave up on is the sweeper's: it looks again at a woken receipt
    /// a while after the wake (2 minutes deployed, 20 s in the test worker), so the cron keeps
    /// firing while this waits.
    fn carrier_events_settled(&mut self, story: &Story) -> Result<(), String> {
        let rest_ids: HashSet<&str> =
            story.outbound.iter().filter(|o| o.carrier != Provider::Telnyx).map(|o| o.carrier_id.as_str()).collect();
        // The receipts the fake carrier itself sends (`{carrier id}-delivered` and `-sent`).
        let telnyx_ids: HashSet<&str> =
            story.outbound.iter().filter(|o| o.carrier == Provider::Telnyx).map(|o| o.carrier_id.as_str()).collect();
        let lost_ids: HashSet<&str> = story.lost.iter().map(|l| l.id.as_str()).collect();
        let tag = self.tag.clone();
        let ours = |event: &Value| {
            let id = event["carrier_event_id"].as_str().unwrap_or_default();
            id.contains(&tag)
                || id.split(':').next().is_some_and(|carrier_id| rest_ids.contains(carrier_id))
                || id
                    .strip_prefix("reconciled:")
                    .and_then(|r| r.split(':').next())
                    .is_some_and(|c| lost_ids.contains(c))
                || id.rsplit_once('-').is_some_and(|(carrier_id, _)| telnyx_ids.contains(carrier_id))
        };
        let (api, admin) = (self.api, self.target.admin_token.clone());
        let events_in = |status: &str| {
            api.all(&format!("/admin/carrier_events?status={status}"), &admin)
                .map(|all| all.into_iter().filter(|e| ours(e)).collect::<Vec<_>>())
        };
        let pending = self
            .wait_with_cron(Duration::from_secs(180), |_| events_in("pending").ok().filter(Vec::is_empty))
            .map_or_else(|| events_in("pending").unwrap_or_default(), |_| Vec::new());
        for e in &pending {
            self.report.problem(format!("carrier event {} still pending", e["carrier_event_id"]));
        }
        let failed = events_in("failed")?;
        for e in &failed {
            self.report.problem(format!("carrier event {} failed: {}", e["carrier_event_id"], e["error"]));
        }
        self.report.missing += pending.len() + failed.len();
        Ok(())
    }

    /// The customer events of the facts, each at most once. The operational signals about the
    /// account's own endpoints and deliveries (a misbehaving endpoint's circuit opening and
    /// closing, as often as it does, its deliveries running out of attempts) are not effects of a
    /// fact, and the counted endpoint does not subscribe to them.
    fn customer_events(&mut self) -> Result<(Vec<Value>, Effects), String> {
        let mut events = self.api.all("/v1/events", &self.key)?;
        events
            .retain(|e| e["type"].as_str().and_then(EventType::from_name).is_some_and(|t| COUNTED_TYPES.contains(&t)));
        let mut by_effect: HashMap<(EventType, String), usize> = HashMap::new();
        for e in &events {
            let Some(event_type) = e["type"].as_str().and_then(EventType::from_name) else { continue };
            let data_key = e["data"]["carrier_message_id"]
                .as_str()
                .filter(|_| event_type == EventType::MessageReceived)
                .or(e["data"]["id"].as_str())
                .unwrap_or_default();
            *by_effect.entry((event_type, data_key.to_owned())).or_default() += 1;
        }
        for (effect, count) in &by_effect {
            if *count > 1 {
                self.report.duplicate_effects += count - 1;
                self.report.problem(format!("{} events {} for {}", count, effect.0, effect.1));
            }
        }
        Ok((events, Effects(by_effect)))
    }

    /// Inbound: one message and one `message.received` each; an MMS's media item stored once.
    fn inbound(&mut self, story: &Story, effects: &Effects) -> Result<(), String> {
        let tag = self.tag.clone();
        let inbound = self.api.all("/v1/messages?direction=inbound", &self.key)?;
        let mut per_carrier_id: HashMap<String, usize> = HashMap::new();
        for m in &inbound {
            *per_carrier_id.entry(m["carrier_message_id"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
        }
        let report = &mut self.report;
        for i in 0..story.plan.inbound {
            let carrier_id = format!("chaos-{tag}-msg-{i}");
            match per_carrier_id.get(&carrier_id).copied().unwrap_or(0) {
                0 => {
                    report.missing += 1;
                    report.problem(format!("no message for {carrier_id}"));
                }
                1 if effects.has(EventType::MessageReceived, &carrier_id) == 1 => report.applied += 1,
                1 => {
                    report.missing += 1;
                    report.problem(format!("no message.received event for {carrier_id}"));
                }
                n => {
                    report.duplicate_effects += n - 1;
                    report.problem(format!("{n} messages for {carrier_id}"));
                }
            }
        }
        self.media(story, &inbound);
        Ok(())
    }

    /// Inbound MMS: one media row per item, copied into storage once (one fetch of the carrier's
    /// link), however often the message was delivered.
    fn media(&mut self, story: &Story, inbound: &[Value]) {
        let Some(carrier) = self.target.carrier else { return };
        let (api, key, tag) = (self.api, self.key.clone(), self.tag.clone());
        for i in 0..story.plan.inbound {
            let Some((name, _)) = mms_item(self.target, &tag, i) else { continue };
            let carrier_id = format!("chaos-{tag}-msg-{i}");
            let Some(id) =
                inbound.iter().find(|m| m["carrier_message_id"] == carrier_id.as_str()).map(|m| m["id"].clone())
            else {
                continue; // counted missing above
            };
            let id = id.as_str().unwrap_or_default().to_owned();
            let media = wait_for(Duration::from_secs(60), || {
                let m = api.read(&format!("/v1/messages/{id}"), &key).json();
                let media = m["media"].as_array().cloned().unwrap_or_default();
                media.iter().all(|item| item["stored"] == true).then_some(media)
            });
            let stored = media.map_or(0, |m| m.len());
            self.report.expect(|| format!("media of {carrier_id} stored"), stored, 1);
            self.report.expect(|| format!("media of {carrier_id} fetched"), carrier.media_fetches(&name), 1);
        }
    }

    /// Outbound, through each carrier: the final status, one sent and one final event, one
    /// charge, one send request.
    fn outbound(&mut self, story: &Story, effects: &Effects) {
        let (api, key) = (self.api, self.key.clone());
        let report = &mut self.report;
        for o in &story.outbound {
            let m = api.read(&format!("/v1/messages/{}", o.id), &key).json();
            let want = if o.delivered { "delivered" } else { "failed" };
            let final_event = if o.delivered { EventType::MessageDelivered } else { EventType::MessageFailed };
            let (sent, finals) = (effects.has(EventType::MessageSent, &o.id), effects.has(final_event, &o.id));
            if m["status"] == want && sent == 1 && finals == 1 {
                report.applied += 2;
            } else {
                report.missing += 1;
                report.problem(format!(
                    "{} message {}: status {} (want {want}), {sent} sent / {finals} {final_event} events",
                    o.carrier.as_str(),
                    o.id,
                    m["status"],
                ));
            }
            let charged = usize::from(m["charge"]["quantity"] == 1);
            report.expect(|| format!("message {} charged", o.id), charged, 1);
            if let Some(carrier) = self.target.carrier {
                // Telnyx: every request of the message under its id as the idempotency key (a send
                // whose answer was lost is tried again under the same key: one message at the
                // carrier); Twilio and Plivo, which take no key: one request with its text.
                let sends = match o.carrier {
                    Provider::Telnyx => {
                        let keys = carrier.keys_with_text(&o.text);
                        if keys.iter().any(|k| k.as_deref() != Some(o.id.as_str())) {
                            report.duplicate_effects += 1;
                            report.problem(format!("telnyx message {} sent under keys {keys:?}", o.id));
                        }
                        keys.len()
                    }
                    Provider::Twilio | Provider::Plivo => carrier.sends_with_text(&o.text),
                };
                report.expect(|| format!("{} message {} sent", o.carrier.as_str(), o.id), sends, 1);
            }
        }
    }

    /// Scheduled: sent once, at its time, and charged; or canceled: never sent, never charged.
    fn scheduled(&mut self, story: &Story, effects: &Effects) {
        let (api, key) = (self.api, self.key.clone());
        let report = &mut self.report;
        for s in &story.scheduled {
            let m = api.read(&format!("/v1/messages/{}", s.id), &key).json();
            let sent_at = m["sent_at"].as_str().and_then(Timestamp::parse_rfc3339);
            // Every send request with the message's text, whatever key it carried.
            let sends = self.target.carrier.map(|c| c.keys_with_text(&s.text));
            let events = effects.has(EventType::MessageSent, &s.id);
            if s.canceled {
                if m["status"] == "canceled" && m["charge"].is_null() {
                    report.applied += 1;
                } else {
                    report.duplicate_effects += 1;
                    report
                        .problem(format!("canceled message {}: status {}, charge {}", s.id, m["status"], m["charge"]));
                }
                report.expect(|| format!("canceled message {}: message.sent events", s.id), events, 0);
                if let Some(keys) = sends {
                    report.expect(|| format!("canceled message {} sent (keys {keys:?})", s.id), keys.len(), 0);
                }
                continue;
            }
            if m["status"] == "sent" && sent_at.is_some_and(|at| at >= s.send_at) && m["charge"]["quantity"] == 1 {
                report.applied += 1;
            } else {
                report.missing += 1;
                report.problem(format!(
                    "scheduled message {}: status {}, sent at {} for {}, charge {}",
                    s.id,
                    m["status"],
                    m["sent_at"],
                    s.send_at.to_rfc3339(),
                    m["charge"]
                ));
            }
            report.expect(|| format!("scheduled message {}: message.sent events", s.id), events, 1);
            if let Some(keys) = sends {
                // Sent through Telnyx, as every outbound message above: every request under its
                // id as the idempotency key (a send whose answer or record was lost is tried
                // again under the same key: one message at the carrier).
                if keys.iter().any(|k| k.as_deref() != Some(s.id.as_str())) {
                    report.duplicate_effects += 1;
                    report.problem(format!("scheduled message {} sent under keys {keys:?}", s.id));
                }
                report.expect(|| format!("scheduled message {} sent", s.id), keys.len(), 1);
            }
        }
    }

    /// Ringing calls: exactly legs 1 and 2 (refused calls: both refused, and the call missed).
    fn calls(&mut self, story: &Story) -> Result<(), String> {
        let lost_ids: HashSet<&str> = story.lost.iter().map(|l| l.id.as_str()).collect();
        for call in self.api.all("/v1/calls", &self.key)? {
            if call["id"].as_str().is_some_and(|id| lost_ids.contains(id)) {
                continue;
            }
            let legs = call["legs"].as_array().map(Vec::len).unwrap_or(0);
            let all_refused = call["to"] == story.numbers.refused.as_str();
            let report = &mut self.report;
            match legs {
                2 if all_refused && call["status"] != "missed" => {
                    report.missing += 1;
                    report.problem(format!("call {} with every dial refused is {}", call["id"], call["status"]));
                }
                2 => report.applied += 1,
                n if n > 2 => {
                    report.duplicate_effects += n - 2;
                    report.problem(format!("call {} dialled {n} legs", call["id"]));
                }
                _ => {
                    report.missing += 1;
                    report.problem(format!("call {} has {legs} legs", call["id"]));
                }
            }
        }
        Ok(())
    }

    /// Calls whose hangup was lost: completed once, with the duration by the carrier's clock,
    /// billed once, announced once, whether or not the real hangup came late. Returns the minutes
    /// they owe.
    fn hangups_lost(&mut self, story: &Story, effects: &Effects) -> i64 {
        let (api, key) = (self.api, self.key.clone());
        let mut call_minutes = 0;
        for l in &story.lost {
            let call = api.read(&format!("/v1/calls/{}", l.id), &key).json();
            let billed = (l.duration_secs + 59) / 60;
            call_minutes += billed;
            let (answered, completed) =
                (effects.has(EventType::CallAnswered, &l.id), effects.has(EventType::CallCompleted, &l.id));
            if call["status"] == "completed"
                && call["duration_secs"] == l.duration_secs
                && call["billed_minutes"] == billed
                && call["charge"]["quantity"] == billed
                && answered == 1
                && completed == 1
            {
                self.report.applied += 1;
            } else {
                self.report.missing += 1;
                self.report.problem(format!(
                    "call {} (hangup lost): status {}, {} s, {} min (want {} s, {billed} min), charge {}, {answered} \
                     answered / {completed} completed events",
                    l.id,
                    call["status"],
                    call["duration_secs"],
                    call["billed_minutes"],
                    l.duration_secs,
                    call["charge"],
                ));
            }
        }
        call_minutes
    }

    /// The carrier's side: each call dialled each position it reached once, with its number's
    /// ring timeout, and answered once, whatever the order and copies of its events. Counted
    /// from the requests themselves, which no UNIQUE constraint caps.
    fn dials(&mut self, story: &Story) {
        let Some(carrier) = self.target.carrier else { return };
        let tag = self.tag.clone();
        let report = &mut self.report;
        let dials = carrier.requests("/v2/calls");
        let path = |control: &str, action: &str| {
            let id: String = form_urlencoded::byte_serialize(control.as_bytes()).collect();
            format!("/v2/calls/{id}/actions/{action}")
        };
        let ringing = report.created.calls.iter().enumerate().map(|(i, id)| {
            let timeout =
                if refused(i) { exactly_core::call_machine::DEFAULT_RING_TIMEOUT_SECS } else { RING_TIMEOUT_SECS };
            (id.clone(), format!("v3:chaos-{tag}-caller-{i}"), 2, timeout, usize::from(refused(i)))
        });
        let answered = story.lost.iter().map(|l| (l.id.clone(), l.caller.clone(), 1, RING_TIMEOUT_SECS, 0));
        for (call_id, caller, positions, timeout, caller_hangups) in ringing.chain(answered).collect::<Vec<_>>() {
            for position in 1..=positions + 1 {
                let key = format!("{call_id}:leg:{position}");
                let of_leg: Vec<_> =
                    dials.iter().filter(|r| r.idempotency_key.as_deref() == Some(key.as_str())).collect();
                let want = usize::from(position <= positions);
                report.expect(|| format!("call {call_id}: position {position} dialled"), of_leg.len(), want);
                let off = of_leg.iter().filter(|r| r.body["timeout_secs"] != timeout).count();
                report.expect(|| format!("call {call_id}: dials not ringing for {timeout} s"), off, 0);
            }
            let answers = carrier.requests(&path(&caller, "answer")).len();
            report.expect(|| format!("call {call_id}: caller answered"), answers, 1);
            // Only a call whose every dial was refused hangs the caller up, once; a caller who
            // hung up is not hung up again.
            let hangups = carrier.requests(&path(&caller, "hangup")).len();
            report.expect(|| format!("call {call_id}: caller hung up"), hangups, caller_hangups);
        }
        for l in &story.lost {
            let bridges = carrier.requests(&path(&l.caller, "bridge")).len();
            report.expect(|| format!("call {}: bridged", l.id), bridges, 1);
            // The answered leg, still up when the caller left, is hung up once.
            let leg = format!("v3:cc-{}:leg:1", l.id);
            let leg_hangups = carrier.requests(&path(&leg, "hangup")).len();
            report.expect(|| format!("call {}: answered leg hung up", l.id), leg_hangups, 1);
        }
    }

    /// The counted endpoint: every webhook id once (`want` of them), and the time to webhook.
    fn counted_endpoint(&mut self, want: usize, delivered: Delivered) {
        let (Some(customer), Some(path)) = (self.target.customer, self.report.created.endpoint_path.clone()) else {
            return;
        };
        let received = wait_for(Duration::from_secs(60), || {
            let got = customer.received(&path);
            (got.len() >= want).then_some(got)
        })
        .unwrap_or_else(|| customer.received(&path));
        let mut ids: HashMap<String, usize> = HashMap::new();
        for r in &received {
            *ids.entry(r.header("webhook-id").unwrap_or_default().to_owned()).or_default() += 1;
            let t = serde_json::from_str::<Value>(&r.body)
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_owned))
                .unwrap_or_default();
            *self.report.events_received.entry(t).or_default() += 1;
        }
        // A webhook id received twice is a duplicate unless the worker recorded the attempt that
        // brought the first copy as failed (its answer came after the 15 s): then the second is the
        // retry the contract promises. Never two recorded successes, never more copies than attempts.
        let repeated: Vec<(&String, &usize)> = ids.iter().filter(|(_, n)| **n > 1).collect();
        let attempts = match (&self.report.created.endpoint_id, repeated.is_empty()) {
            (Some(endpoint), false) => endpoint_attempts(self.api, &self.key, endpoint),
            _ => HashMap::new(),
        };
        for (id, n) in repeated {
            let (made, succeeded) = attempts.get(id.as_str()).copied().unwrap_or((0, 0));
            if succeeded <= 1 && *n <= made {
                self.report.retried_after_failure += n - 1;
            } else {
                self.report.duplicate_effects += n - 1;
                self.report.problem(format!(
                    "webhook {id} received {n} times ({made} attempts recorded, {succeeded} of them successful)"
                ));
            }
        }
        if received.len() < want {
            self.report.missing += want - received.len();
            self.report.problem(format!("{} of {want} customer events received", received.len()));
        }
        let mut seen = HashSet::new();
        let mut waits: Vec<f64> = received
            .iter()
            .filter_map(|r| {
                let body: Value = serde_json::from_str(&r.body).ok()?;
                let sent = delivered.first_accepted.get(body["data"]["carrier_message_id"].as_str()?)?;
                let first = body["type"] == "message.received" && seen.insert(body["id"].as_str()?.to_owned());
                first.then(|| r.arrived.saturating_duration_since(*sent).as_secs_f64() * 1000.0)
            })
            .collect();
        waits.sort_by(|a, b| a.total_cmp(b));
        if !waits.is_empty() {
            self.report.ttw_p50_ms = Some(percentile(&waits, 0.50));
            self.report.ttw_p99_ms = Some(percentile(&waits, 0.99));
        }
    }

    /// The misbehaving endpoints: none ever got one event twice with a 2xx, and each shows where
    /// its circuit stands.
    fn misbehaving(&mut self) {
        for (kind, id, _) in self.report.created.misbehaving.clone() {
            for (event, (_, succeeded)) in endpoint_attempts(self.api, &self.key, &id) {
                if succeeded > 1 {
                    self.report.duplicate_effects += succeeded - 1;
                    self.report.problem(format!("the endpoint that {kind} got {event} {succeeded} times with a 2xx"));
                }
            }
            let shown = self.api.read(&format!("/v1/webhook_endpoints/{id}"), &self.key).json();
            self.report.misbehaving.push(format!(
                "{kind}: circuit {}, {} held, {} attempts in flight",
                shown["circuit"].as_str().unwrap_or("?"),
                shown["held_count"],
                shown["in_flight"]
            ));
        }
    }
}

/// Every attempt recorded for an endpoint, by event id: (attempts, of which 2xx). Empty when
/// the API does not answer, so every repeat then counts as a duplicate.
fn endpoint_attempts(api: &Client, key: &str, endpoint: &str) -> HashMap<String, (usize, usize)> {
    let mut by_event: HashMap<String, (usize, usize)> = HashMap::new();
    let attempts = api.all(&format!("/v1/webhook_endpoints/{endpoint}/attempts"), key).unwrap_or_default();
    for a in &attempts {
        let entry = by_event.entry(a["event_id"].as_str().unwrap_or_default().to_owned()).or_default();
        entry.0 += 1;
        if a["status_code"].as_u64().is_some_and(|s| (200..300).contains(&s)) {
            entry.1 += 1;
        }
    }
    by_event
}
