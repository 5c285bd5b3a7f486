//! The stream: every fact of the run with its copies (duplicates, re-signed, stale), and the
//! late webhooks of what reconciliation learns first.

use exactly_core::Provider;
use serde_json::{json, Value};

use super::plan::{final_word, mms_item, refused, Outbound, Story};
use super::{Run, RECIPIENT};
use crate::telnyx::envelope;

/// One request of the stream.
#[derive(Clone)]
pub(super) enum Delivery {
    /// A Telnyx webhook, signed when sent, `skew` seconds off (negative: stale, so refused).
    Telnyx { body: String, skew: i64, expect_refusal: bool },
    /// A Twilio or Plivo status callback, signed when sent (Plivo with a fresh nonce each time).
    Form { carrier: Provider, params: Vec<(String, String)> },
    /// The customer cancels a scheduled message.
    Cancel { message: String },
}

impl Run<'_, '_> {
    /// The stream, shuffled within windows, and the late webhooks. The cancels go first, so they
    /// come well before their messages are due.
    pub(super) fn facts(&mut self, story: &Story) -> (Vec<Delivery>, Vec<Delivery>) {
        let mut stream: Vec<Delivery> = Vec::new();
        let mut late: Vec<Delivery> = Vec::new();
        for s in story.scheduled.iter().filter(|s| s.canceled) {
            let copies = if self.rng.chance(self.config.duplicate_rate) { 2 } else { 1 };
            for _ in 0..copies {
                stream.push(Delivery::Cancel { message: s.id.clone() });
            }
            if copies > 1 {
                *self.report.copies.entry("duplicate").or_default() += 1;
            }
        }
        self.inbound_facts(story, &mut stream);
        self.receipts(story, &mut stream, &mut late);
        self.call_facts(story, &mut stream, &mut late);
        // Reorder within windows.
        for window in stream.chunks_mut(self.config.reorder_window.max(1)) {
            for i in (1..window.len()).rev() {
                let j = self.rng.below(i + 1);
                window.swap(i, j);
            }
        }
        (stream, late)
    }

    /// Inbound messages, every tenth an MMS when the fake carrier serves its media.
    fn inbound_facts(&mut self, story: &Story, stream: &mut Vec<Delivery>) {
        let (tag, n_inbound) = (self.tag.clone(), story.plan.inbound);
        for i in 0..n_inbound {
            let id = format!("chaos-{tag}-in-{i}");
            let mut payload = json!({
                "id": format!("chaos-{tag}-msg-{i}"), "direction": "inbound", "text": format!("inbound {i}"),
                "from": {"phone_number": RECIPIENT}, "to": [{"phone_number": story.numbers.inbound}],
            });
            if let Some((_, url)) = mms_item(self.target, &tag, i) {
                payload["type"] = json!("MMS");
                payload["media"] = json!([{"url": url, "content_type": "image/jpeg", "size": 1024}]);
            }
            let body = envelope(&id, "message.received", "2026-11-30T10:00:00Z", payload, 1);
            self.add_telnyx(stream, body, &id);
        }
        *self.report.facts.entry("inbound").or_default() = n_inbound;
        self.report.mms = (0..n_inbound).filter(|&i| mms_item(self.target, &tag, i).is_some()).count();
    }

    /// The receipts of the outbound messages: Telnyx's two webhooks, or Twilio's and Plivo's
    /// status callbacks (the final one late for a message reconciliation finishes).
    fn receipts(&mut self, story: &Story, stream: &mut Vec<Delivery>, late: &mut Vec<Delivery>) {
        let tag = self.tag.clone();
        for (i, o) in story.outbound.iter().enumerate() {
            match o.carrier {
                Provider::Telnyx => {
                    for status in ["sent", if o.delivered { "delivered" } else { "delivery_failed" }] {
                        let id = format!("chaos-{tag}-rcpt-{i}-{status}");
                        let errors = if status == "delivery_failed" {
                            json!([{"code": "40300", "title": "Blocked"}])
                        } else {
                            json!([])
                        };
                        let body = crate::telnyx::receipt(&id, &o.carrier_id, status, errors);
                        self.add_telnyx(stream, body, &id);
                    }
                    *self.report.facts.entry("receipt").or_default() += 2;
                }
                Provider::Twilio | Provider::Plivo => {
                    self.add_form(stream, o, "sent", None);
                    let word = final_word(o.carrier, o.delivered);
                    let twin = (!o.delivered).then(|| if word == "failed" { "undelivered" } else { "failed" });
                    if o.reconciled {
                        // Delivered only once reconciliation learned it from the carrier.
                        let before = late.len();
                        self.add_form(late, o, word, twin);
                        *self.report.copies.entry("late").or_default() += late.len() - before;
                    } else {
                        self.add_form(stream, o, word, twin);
                    }
                    let kind = if o.carrier == Provider::Twilio { "twilio_status" } else { "plivo_status" };
                    *self.report.facts.entry(kind).or_default() += 2;
                }
            }
        }
    }

    /// The calls' facts, and the late real hangups of half the calls whose hangup was lost.
    fn call_facts(&mut self, story: &Story, stream: &mut Vec<Delivery>, late: &mut Vec<Delivery>) {
        let tag = self.tag.clone();
        for (i, (init, hangup)) in story.calls.iter().enumerate() {
            self.add_telnyx(stream, init.clone(), &format!("chaos-{tag}-init-{i}"));
            if let Some(hangup) = hangup {
                self.add_telnyx(stream, hangup.clone(), &format!("chaos-{tag}-hangup-{i}"));
            }
        }
        for (i, body) in story.lost_facts.iter().enumerate() {
            self.add_telnyx(stream, body.clone(), &format!("chaos-{tag}-lost-{i}"));
        }
        for (i, l) in story.lost.iter().enumerate() {
            if let Some(body) = &l.late {
                let before = late.len();
                self.add_telnyx(late, body.clone(), &format!("chaos-{tag}-lost-late-{i}"));
                *self.report.copies.entry("late").or_default() += late.len() - before;
            }
        }
        let n_ring = story.plan.ring;
        let n_refused = (0..n_ring).filter(|i| refused(*i)).count();
        let facts = &mut self.report.facts;
        *facts.entry("ring_hangup").or_default() = n_ring - n_refused;
        let scheduled = &story.scheduled;
        for (kind, n) in [
            ("refused_call", n_refused),
            ("scheduled", scheduled.iter().filter(|s| !s.canceled).count()),
            ("canceled", scheduled.iter().filter(|s| s.canceled).count()),
            ("lost_hangup", story.plan.lost),
        ] {
            if n > 0 {
                *facts.entry(kind).or_default() = n;
            }
        }
    }

    /// Adds a Telnyx fact and its copies: duplicates, one re-signed under a new event id, one
    /// stale.
    fn add_telnyx(&mut self, deliveries: &mut Vec<Delivery>, body: String, id_field: &str) {
        let (config, rng) = (self.config, &mut self.rng);
        let copies = &mut self.report.copies;
        deliveries.push(Delivery::Telnyx { body: body.clone(), skew: 0, expect_refusal: false });
        if rng.chance(config.duplicate_rate) {
            for _ in 0..1 + rng.below(3) {
                deliveries.push(Delivery::Telnyx {
                    body: body.clone(),
                    skew: rng.below(5) as i64,
                    expect_refusal: false,
                });
                *copies.entry("duplicate").or_default() += 1;
            }
        }
        if rng.chance(config.resign_rate) {
            let mut v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            v["data"]["id"] = json!(format!("{id_field}-resigned-{}", rng.below(1_000_000)));
            v["meta"]["attempt"] = json!(2);
            deliveries.push(Delivery::Telnyx { body: v.to_string(), skew: 4, expect_refusal: false });
            *copies.entry("resigned").or_default() += 1;
        }
        if rng.chance(config.stale_rate) {
            deliveries.push(Delivery::Telnyx { body, skew: -400, expect_refusal: true });
            *copies.entry("stale").or_default() += 1;
        }
    }

    /// Adds a Twilio or Plivo status callback for `o` and its copies: duplicates (each signed
    /// anew), and for a failure the other word for it (`twin`), which is a new event id for the
    /// same fact. These carriers sign no time, so there is no stale copy.
    fn add_form(&mut self, deliveries: &mut Vec<Delivery>, o: &Outbound, status: &str, twin: Option<&str>) {
        let (config, rng) = (self.config, &mut self.rng);
        let copies = &mut self.report.copies;
        let params = |status: &str| {
            let failed = matches!(status, "undelivered" | "failed");
            let mut params: Vec<(&str, String)> = match o.carrier {
                Provider::Twilio => vec![
                    ("MessageSid", o.carrier_id.clone()),
                    ("MessageStatus", status.to_owned()),
                    ("From", o.from.clone()),
                    ("To", RECIPIENT.to_owned()),
                ],
                // Plivo writes numbers without the `+`.
                Provider::Telnyx | Provider::Plivo => vec![
                    ("MessageUUID", o.carrier_id.clone()),
                    ("Status", status.to_owned()),
                    ("From", o.from.trim_start_matches('+').to_owned()),
                    ("To", RECIPIENT.trim_start_matches('+').to_owned()),
                ],
            };
            if failed {
                params.push(("ErrorCode", if o.carrier == Provider::Twilio { "30003" } else { "450" }.to_owned()));
            }
            params.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Vec<_>>()
        };
        deliveries.push(Delivery::Form { carrier: o.carrier, params: params(status) });
        if rng.chance(config.duplicate_rate) {
            for _ in 0..1 + rng.below(3) {
                deliveries.push(Delivery::Form { carrier: o.carrier, params: params(status) });
                *copies.entry("duplicate").or_default() += 1;
            }
        }
        if let Some(twin) = twin.filter(|_| rng.chance(config.resign_rate)) {
            deliveries.push(Delivery::Form { carrier: o.carrier, params: params(twin) });
            *copies.entry("resigned").or_default() += 1;
        }
    }
}
