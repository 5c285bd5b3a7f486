//! Sending the stream as carriers do (parallel bursts, retried on a 5xx or no answer), and
//! waiting for what it caused to settle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use exactly_core::Provider;
use serde_json::Value;

use super::facts::Delivery;
use super::plan::Story;
use super::{fire_cron_once, percentile, Run, Target};
use crate::api::Answer;

/// What sending saw: per inbound message (its carrier id), when a delivery of it was first
/// accepted, for the time to webhook.
pub(super) struct Delivered {
    pub(super) first_accepted: HashMap<String, Instant>,
}

impl Run<'_, '_> {
    /// Sends the stream, waits for its effects to settle (firing the cron, which sweeps and
    /// reconciles, as the minutes would), then sends the late webhooks while the cron runs again.
    pub(super) fn deliver_all(&mut self, story: &Story, stream: &[Delivery], late: &[Delivery]) -> Delivered {
        self.progress(&format!("delivering {} copies of {} facts", stream.len(), self.config.facts));
        let mut latencies = Vec::with_capacity(stream.len() + late.len());
        let first_accepted = Mutex::new(HashMap::new());
        self.deliver(stream, &mut latencies, &first_accepted);
        self.settle(story);
        if !late.is_empty() {
            self.progress(&format!("delivering {} late webhooks", late.len()));
            let api = self.api;
            let cron = self.target.cron;
            let status = thread::scope(|s| {
                let cron = cron.then(|| s.spawn(|| fire_cron_once(api)));
                self.deliver(late, &mut latencies, &first_accepted);
                cron.and_then(|c| c.join().ok())
            });
            if let Some(status) = status {
                self.count_cron(status);
            }
        }
        self.report.deliveries = stream.len() + late.len();
        latencies.sort_by(|a, b| a.total_cmp(b));
        self.report.p50_ms = percentile(&latencies, 0.50);
        self.report.p99_ms = percentile(&latencies, 0.99);
        Delivered { first_accepted: first_accepted.into_inner().unwrap_or_default() }
    }

    /// Waits until the events and calls of the stream are all there, then until every canceled
    /// message's time has passed and the cron ran once more.
    fn settle(&mut self, story: &Story) {
        self.progress("waiting for every fact to settle");
        let (api, key) = (self.api, self.key.clone());
        let due = story.scheduled.iter().filter(|s| !s.canceled).count();
        let (outbound, plan) = (story.outbound.len(), &story.plan);
        let settled = self.wait_with_cron(Duration::from_secs(180), |_| {
            let events = api.all("/v1/events", &key).ok()?;
            let of = |types: &[&str]| events.iter().filter(|e| types.iter().any(|t| e["type"] == *t)).count();
            let terminal = of(&["message.received", "message.delivered", "message.failed"]);
            let calls = api.all("/v1/calls", &key).ok()?;
            let rung = calls.iter().filter(|c| c["legs"].as_array().is_some_and(|l| l.len() >= 2)).count();
            (terminal >= plan.inbound + outbound
                && of(&["message.sent"]) >= outbound + due
                && of(&["call.completed"]) >= plan.lost
                && rung >= plan.ring)
                .then_some(())
        });
        if settled.is_none() {
            self.report
                .problem(format!("not everything settled within {:?}", crate::api::patient(Duration::from_secs(180))));
        }
        // A canceled message must still be unsent after its time has passed and the cron ran.
        if let Some(latest) = story.scheduled.iter().filter(|s| s.canceled).map(|s| s.send_at.unix_seconds()).max() {
            let wait = latest + 2 - crate::unix_now();
            if wait > 0 {
                thread::sleep(Duration::from_secs(wait as u64));
            }
            if self.target.cron {
                self.fire_cron();
            }
        }
    }

    /// Sends `deliveries` in parallel bursts, retrying a 5xx or no answer as a carrier does, and
    /// records the answers, the webhooks' ingest latencies and, per inbound message (its carrier
    /// id), when a delivery of it was first accepted.
    fn deliver(
        &mut self,
        deliveries: &[Delivery],
        latencies: &mut Vec<f64>,
        first_accepted: &Mutex<HashMap<String, Instant>>,
    ) {
        let (target, config, key) = (self.target, self.config, self.key.clone());
        let key = key.as_str();
        let measured = Mutex::new(Vec::with_capacity(deliveries.len()));
        let answers = Mutex::new(std::mem::take(&mut self.report.answers));
        let unexpected = Mutex::new(Vec::<String>::new());
        let done = AtomicUsize::new(0);
        for burst in deliveries.chunks(config.parallelism.max(1)) {
            thread::scope(|s| {
                for d in burst {
                    let (measured, answers, unexpected, done) = (&measured, &answers, &unexpected, &done);
                    s.spawn(move || {
                        for attempt in 0..5 {
                            let started = Instant::now();
                            let (a, ok) = send(target, key, d);
                            if let (200, Some(message)) = (a.status, inbound_id(d)) {
                                if let Ok(mut first) = first_accepted.lock() {
                                    first.entry(message).or_insert(started);
                                }
                            }
                            if !matches!(d, Delivery::Cancel { .. }) {
                                if let Ok(mut l) = measured.lock() {
                                    l.push(started.elapsed().as_secs_f64() * 1000.0)
                                }
                            }
                            if let Ok(mut a2) = answers.lock() {
                                *a2.entry(a.status).or_default() += 1
                            }
                            if ok {
                                break;
                            }
                            if (a.status != 0 && a.status < 500) || attempt == 4 {
                                if let Ok(mut u) = unexpected.lock() {
                                    u.push(format!("delivery answered {}: {}", a.status, a.body))
                                }
                                break;
                            }
                            thread::sleep(Duration::from_millis(500));
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            let sent = done.load(Ordering::Relaxed);
            if config.progress && (sent % 160 < config.parallelism || sent == deliveries.len()) {
                let width = 40;
                let filled = sent * width / deliveries.len().max(1);
                eprint!("\rsim: [{}{}] {sent}/{}", "#".repeat(filled), ".".repeat(width - filled), deliveries.len());
                if sent == deliveries.len() {
                    eprintln!();
                }
            }
        }
        self.report.answers = answers.into_inner().unwrap_or_default();
        for u in unexpected.into_inner().unwrap_or_default() {
            self.report.problem(u);
        }
        latencies.extend(measured.into_inner().unwrap_or_default());
    }
}

/// The carrier id of the inbound message a delivery carries, if it is one.
fn inbound_id(d: &Delivery) -> Option<String> {
    let Delivery::Telnyx { body, .. } = d else { return None };
    let v: Value = serde_json::from_str(body).ok()?;
    (v["data"]["event_type"] == "message.received").then(|| v["data"]["payload"]["id"].as_str().map(str::to_owned))?
}

/// Sends one delivery, signed now; its answer and whether it is the one expected.
fn send(target: &Target<'_>, key: &str, d: &Delivery) -> (Answer, bool) {
    let api = &target.api;
    match d {
        Delivery::Telnyx { body, skew, expect_refusal } => {
            let headers = target.signer.sign(body.as_bytes(), crate::unix_now() + skew);
            let a = api.post(
                "/webhooks/telnyx",
                &[
                    ("content-type", "application/json"),
                    ("telnyx-timestamp", &headers.timestamp),
                    ("telnyx-signature-ed25519", &headers.signature),
                ],
                body.as_bytes(),
            );
            let ok = if *expect_refusal { a.status == 401 } else { a.status == 200 };
            (a, ok)
        }
        Delivery::Form { carrier, params } => {
            let path = format!("/webhooks/{}", carrier.as_str());
            let url = format!("{}{path}", api.base);
            let pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let nonce = crate::random_hex();
            let signed = match carrier {
                Provider::Twilio => target.twilio_token.as_deref().map(|token| {
                    let (body, signature) = crate::twilio::sign(token, &url, &pairs);
                    (body, vec![("x-twilio-signature", signature)])
                }),
                Provider::Plivo => target.plivo_token.as_deref().map(|token| {
                    let (body, signature) = crate::plivo::sign_v3(token, &url, &nonce, &pairs);
                    (body, vec![("x-plivo-signature-v3", signature), ("x-plivo-signature-v3-nonce", nonce.clone())])
                }),
                Provider::Telnyx => None,
            };
            let Some((body, signature)) = signed else {
                return (
                    Answer {
                        status: 0,
                        body: format!("no {} token to sign with", carrier.as_str()),
                        bookmark: None,
                        headers: Vec::new(),
                    },
                    false,
                );
            };
            let mut headers: Vec<(&str, &str)> = signature.iter().map(|(k, v)| (*k, v.as_str())).collect();
            headers.push(("content-type", "application/x-www-form-urlencoded"));
            let a = api.post(&path, &headers, body.as_bytes());
            let ok = a.status == 200;
            (a, ok)
        }
        Delivery::Cancel { message } => {
            let a = api.call("POST", &format!("/v1/messages/{message}/cancel"), key, None);
            let ok = a.status == 200 && a.json()["status"] == "canceled";
            (a, ok)
        }
    }
}
