//! The chaos scenario: a mixed stream of carrier facts (inbound messages, outbound receipts,
//! sequential-ring hangups), delivered the way a misbehaving carrier delivers them: duplicated,
//! re-signed under new event ids, reordered, in parallel bursts, some with stale timestamps.
//! Afterwards it reads back, through the API and a customer endpoint, what the platform made of
//! them, and counts duplicate effects and missing ones. Both must be 0.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use exactly_core::ring::LegTag;
use serde_json::{json, Value};

use crate::api::Client;
use crate::customer::CustomerEndpoint;
use crate::telnyx::{envelope, Signer};

/// What to send.
#[derive(Clone, Debug)]
pub struct Config {
    /// Facts in all (about 60% inbound messages, 25% outbound receipts, 15% ring hangups).
    pub facts: usize,
    /// Share of facts delivered again under the same event id (1 to 3 extra copies).
    pub duplicate_rate: f64,
    /// Share of facts delivered again re-signed under a new event id.
    pub resign_rate: f64,
    /// Deliveries are shuffled within windows of this many.
    pub reorder_window: usize,
    /// Deliveries sent at once.
    pub parallelism: usize,
    /// Share of facts that also get a copy signed 400 s in the past (must be refused).
    pub stale_rate: f64,
    /// Seed of the deterministic choices.
    pub seed: u64,
    /// Print progress to stderr.
    pub progress: bool,
    /// Which kinds of facts.
    pub mix: Mix,
}

/// The kinds of facts a run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// About 60% inbound messages, 25% outbound receipts, 15% ring hangups.
    All,
    /// Inbound messages only (`sim sms-inbound`).
    Inbound,
    /// Outbound messages' receipts only (`sim sms-outbound`).
    Outbound,
    /// Sequential-ring hangups only (`sim ring`).
    Ring,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            facts: 500,
            duplicate_rate: 0.35,
            resign_rate: 0.15,
            reorder_window: 32,
            parallelism: 16,
            stale_rate: 0.05,
            seed: 7,
            progress: false,
            mix: Mix::All,
        }
    }
}

/// Where to send it.
pub struct Target<'a> {
    /// The worker's API.
    pub api: Client,
    /// Signs like Telnyx with the key the worker trusts.
    pub signer: Signer,
    /// The worker's `ADMIN_TOKEN`.
    pub admin_token: String,
    /// A customer endpoint the worker can reach (development: `ALLOW_PRIVATE_ENDPOINTS=true`),
    /// or `None` to skip counting customer events.
    pub customer: Option<&'a CustomerEndpoint>,
    /// The fake carrier the worker calls, when it runs in this process: its requests are
    /// counted too (one dial per ring position, one answer per call), or `None` to skip that.
    pub carrier: Option<&'a crate::carrier::FakeCarrier>,
}

/// What happened.
#[derive(Debug, Default)]
pub struct Report {
    /// Facts sent, by kind.
    pub facts: BTreeMap<&'static str, usize>,
    /// Deliveries sent (facts and all their copies).
    pub deliveries: usize,
    /// Of which duplicates (same event id), re-signed (new id) and stale.
    pub copies: BTreeMap<&'static str, usize>,
    /// Answers by HTTP status (0: no answer).
    pub answers: BTreeMap<u16, usize>,
    /// Facts whose effect is visible exactly once.
    pub applied: usize,
    /// Customer events received at the endpoint, by type.
    pub events_received: BTreeMap<String, usize>,
    /// Effects seen more than once (messages, events, legs, webhook ids).
    pub duplicate_effects: usize,
    /// Facts whose effect never appeared.
    pub missing: usize,
    /// Ingest latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// Ingest latency percentiles, milliseconds.
    pub p99_ms: f64,
    /// What went wrong, one line each (at most 20).
    pub problems: Vec<String>,
    /// Identifiers of what this run created, for deeper checks by tests.
    pub created: Created,
}

/// What a run created.
#[derive(Debug, Default, Clone)]
pub struct Created {
    /// The account's id.
    pub account_id: String,
    /// The account's API key.
    pub api_key: String,
    /// Outbound message ids.
    pub messages: Vec<String>,
    /// Call ids.
    pub calls: Vec<String>,
    /// The webhook endpoint path on the customer server, if any.
    pub endpoint_path: Option<String>,
}

impl Report {
    fn problem(&mut self, text: String) {
        if self.problems.len() < 20 {
            self.problems.push(text);
        }
    }

    /// The report as text, as the CLI prints it.
    pub fn render(&self) -> String {
        fn map<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
        }
        let mut out = String::new();
        out.push_str(&format!("facts sent:           {} ({})\n", self.facts.values().sum::<usize>(), map(&self.facts)));
        out.push_str(&format!("deliveries sent:      {} (copies: {})\n", self.deliveries, map(&self.copies)));
        out.push_str(&format!("answers by status:    {}\n", map(&self.answers)));
        out.push_str(&format!("facts applied:        {}\n", self.applied));
        out.push_str(&format!(
            "customer events:      {}\n",
            if self.events_received.is_empty() { "(not counted)".into() } else { map(&self.events_received) }
        ));
        out.push_str(&format!("duplicate effects:    {}\n", self.duplicate_effects));
        out.push_str(&format!("events missing:       {}\n", self.missing));
        out.push_str(&format!("ingest latency:       p50 {:.1} ms, p99 {:.1} ms\n", self.p50_ms, self.p99_ms));
        for p in &self.problems {
            out.push_str(&format!("problem: {p}\n"));
        }
        out
    }
}

/// Deterministic choices (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[derive(Clone)]
struct Delivery {
    body: String,
    /// Seconds to shift the signing time by (negative: stale).
    skew: i64,
    expect_refusal: bool,
}

const TARGETS: [&str; 3] = ["+15557770001", "+15557770002", "+15557770003"];

fn progress(config: &Config, text: &str) {
    if config.progress {
        eprintln!("sim: {text}");
    }
}

/// Runs the scenario.
pub fn run(target: &Target<'_>, config: &Config) -> Result<Report, String> {
    let mut report = Report::default();
    let mut rng = Rng(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let tag = crate::random_hex()[..8].to_owned();
    let api = &target.api;

    // Setup: an account, an inbound number, a number that rings three targets, an endpoint.
    let account =
        api.call("POST", "/admin/accounts", &target.admin_token, Some(&json!({"name": format!("chaos-{tag}")})));
    if account.status != 201 {
        return Err(format!("creating the account: {} {}", account.status, account.body));
    }
    let account = account.json();
    let (account_id, key) = (
        account["id"].as_str().unwrap_or_default().to_owned(),
        account["api_key"].as_str().unwrap_or_default().to_owned(),
    );
    report.created.account_id = account_id.clone();
    report.created.api_key = key.clone();
    let suffix = u32::from_str_radix(&tag[..4], 16).unwrap_or(0) % 10_000;
    let inbound_number = format!("+1556{suffix:04}001");
    let ring_number = format!("+1556{suffix:04}002");
    // Every dial to this number's targets is refused by the fake carrier (numbers ending 0000).
    let refused_number = format!("+1556{suffix:04}003");
    for (number, targets) in [
        (&inbound_number, json!([])),
        (&ring_number, json!(TARGETS)),
        (&refused_number, json!(["+15557770000", "+15558880000"])),
    ] {
        let a = api.call(
            "POST",
            "/admin/numbers",
            &target.admin_token,
            Some(&json!({"account_id": account_id, "phone_number": number, "ring_targets": targets})),
        );
        if a.status != 201 {
            return Err(format!("assigning {number}: {} {}", a.status, a.body));
        }
    }
    if let Some(customer) = target.customer {
        let path = format!("/chaos/{tag}");
        let all = [
            "message.received",
            "message.sent",
            "message.delivered",
            "message.failed",
            "call.initiated",
            "call.answered",
            "call.completed",
            "call.missed",
        ];
        let a = api.call(
            "POST",
            "/v1/webhook_endpoints",
            &key,
            Some(&json!({"url": format!("{}{path}", customer.base), "event_types": all})),
        );
        if a.status == 201 {
            report.created.endpoint_path = Some(path);
        } else {
            report.problem(format!("customer events not counted: endpoint refused ({} {})", a.status, a.body));
        }
    }

    let (n_ring, n_messages) = match config.mix {
        Mix::All => ((config.facts * 15 / 100).max(1), (config.facts * 25 / 100 / 2).max(1)),
        Mix::Inbound => (0, 0),
        Mix::Outbound => (0, config.facts.div_ceil(2)),
        Mix::Ring => (config.facts, 0),
    };
    let n_inbound = config.facts.saturating_sub(n_ring + 2 * n_messages);

    // Outbound messages, sent and handed to the carrier, whose receipts are facts.
    progress(config, &format!("sending {n_messages} outbound messages"));
    let mut outbound = Vec::new();
    for i in 0..n_messages {
        // The first send is slow (7 s) while the carrier delivers its receipt 14 times.
        let marker = if i == 0 { "[slow-receipts] " } else { "" };
        let a = api.call(
            "POST",
            "/v1/messages",
            &key,
            Some(&json!({"from": inbound_number, "to": "+15559990000", "text": format!("{marker}chaos {tag} {i}")})),
        );
        if a.status != 201 {
            return Err(format!("POST /v1/messages: {} {}", a.status, a.body));
        }
        let delivered = i == 0 || !rng.chance(0.2);
        outbound.push((a.json()["id"].as_str().unwrap_or_default().to_owned(), delivered));
    }
    let carrier_ids = if outbound.is_empty() {
        HashMap::new()
    } else {
        wait_for(Duration::from_secs(120), || {
            let mut ids = HashMap::new();
            for (id, _) in &outbound {
                let m = api.call("GET", &format!("/v1/messages/{id}"), &key, None).json();
                match m["carrier_message_id"].as_str() {
                    Some(c) if m["status"] == "sent" || m["status"] == "delivered" || m["status"] == "failed" => {
                        ids.insert(id.clone(), c.to_owned());
                    }
                    _ => return None,
                }
            }
            Some(ids)
        })
        .ok_or("outbound messages were not all sent within 120 s")?
    };
    report.created.messages = outbound.iter().map(|(id, _)| id.clone()).collect();

    // Calls: each call's `call.initiated` and its first leg's hangup go into the same shuffled
    // stream, without waiting for the dial: the call id follows from the carrier session, and
    // the fake carrier derives a leg's ids from its dial's idempotency key, so the hangup can
    // be written before the dial happens. Either order must dial target 1, then target 2.
    progress(config, &format!("preparing {n_ring} calls"));
    // Every fourth call rings a number whose dials are all refused: its one fact is its
    // `call.initiated`, and it must end missed with the caller hung up once.
    let refused = |i: usize| i % 4 == 3;
    let mut call_facts: Vec<(String, Option<String>)> = Vec::new();
    for i in 0..n_ring {
        let session = format!("chaos-{tag}-sess-{i}");
        let control = format!("v3:chaos-{tag}-caller-{i}");
        let call_id = exactly_core::call_machine::call_id(exactly_core::Provider::Telnyx, &session);
        let init = envelope(
            &format!("chaos-{tag}-init-{i}"),
            "call.initiated",
            "2026-11-30T10:00:00Z",
            json!({
                "call_control_id": control, "call_leg_id": format!("leg-{control}"), "call_session_id": session,
                "from": "+15551230000", "to": if refused(i) { &refused_number } else { &ring_number },
                    "direction": "incoming", "state": "parked",
            }),
            1,
        );
        report.created.calls.push(call_id.clone());
        if refused(i) {
            call_facts.push((init, None));
            continue;
        }
        let key = format!("{call_id}:leg:1");
        let state = exactly_core::telnyx::encode_client_state(&LegTag { call: call_id.clone(), position: 1 }.encode());
        let hangup = envelope(
            &format!("chaos-{tag}-hangup-{i}"),
            "call.hangup",
            "2026-11-30T10:01:30Z",
            json!({
                "call_control_id": format!("v3:cc-{key}"), "call_leg_id": format!("leg-{key}"),
                    "call_session_id": format!("sess-{key}"),
                "hangup_cause": "timeout", "hangup_source": "callee", "client_state": state,
            }),
            1,
        );
        call_facts.push((init, Some(hangup)));
    }

    // The facts, each with its copies.
    let mut deliveries: Vec<Delivery> = Vec::new();
    let mut add = |body: String, id_field: &str, report: &mut Report, rng: &mut Rng| {
        deliveries.push(Delivery { body: body.clone(), skew: 0, expect_refusal: false });
        if rng.chance(config.duplicate_rate) {
            for _ in 0..1 + rng.below(3) {
                deliveries.push(Delivery { body: body.clone(), skew: rng.below(5) as i64, expect_refusal: false });
                *report.copies.entry("duplicate").or_default() += 1;
            }
        }
        if rng.chance(config.resign_rate) {
            let mut v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            v["data"]["id"] = json!(format!("{id_field}-resigned-{}", rng.below(1_000_000)));
            v["meta"]["attempt"] = json!(2);
            deliveries.push(Delivery { body: v.to_string(), skew: 4, expect_refusal: false });
            *report.copies.entry("resigned").or_default() += 1;
        }
        if rng.chance(config.stale_rate) {
            deliveries.push(Delivery { body, skew: -400, expect_refusal: true });
            *report.copies.entry("stale").or_default() += 1;
        }
    };
    for i in 0..n_inbound {
        let id = format!("chaos-{tag}-in-{i}");
        let body = envelope(
            &id,
            "message.received",
            "2026-11-30T10:00:00Z",
            json!({
                "id": format!("chaos-{tag}-msg-{i}"), "direction": "inbound", "text": format!("inbound {i}"),
                "from": {"phone_number": "+15559990000"}, "to": [{"phone_number": inbound_number}],
            }),
            1,
        );
        add(body, &id, &mut report, &mut rng);
    }
    *report.facts.entry("inbound").or_default() = n_inbound;
    for (i, (message, delivered)) in outbound.iter().enumerate() {
        let carrier_id = &carrier_ids[message];
        for (kind, status) in
            [("message.sent", "sent"), ("message.finalized", if *delivered { "delivered" } else { "delivery_failed" })]
        {
            let id = format!("chaos-{tag}-rcpt-{i}-{status}");
            let errors =
                if status == "delivery_failed" { json!([{"code": "40300", "title": "Blocked"}]) } else { json!([]) };
            let body = envelope(
                &id,
                kind,
                "2026-11-30T10:00:05Z",
                json!({"id": carrier_id, "direction": "outbound", "to": [{"phone_number": "+15559990000",
                    "status": status}], "errors": errors}),
                1,
            );
            add(body, &id, &mut report, &mut rng);
        }
    }
    *report.facts.entry("receipt").or_default() = 2 * outbound.len();
    for (i, (init, hangup)) in call_facts.into_iter().enumerate() {
        add(init, &format!("chaos-{tag}-init-{i}"), &mut report, &mut rng);
        if let Some(hangup) = hangup {
            add(hangup, &format!("chaos-{tag}-hangup-{i}"), &mut report, &mut rng);
        }
    }
    let n_refused = (0..n_ring).filter(|i| refused(*i)).count();
    *report.facts.entry("ring_hangup").or_default() = n_ring - n_refused;
    if n_refused > 0 {
        *report.facts.entry("refused_call").or_default() = n_refused;
    }

    // Reorder within windows, then send in parallel bursts.
    for window in deliveries.chunks_mut(config.reorder_window.max(1)) {
        for i in (1..window.len()).rev() {
            let j = rng.below(i + 1);
            window.swap(i, j);
        }
    }
    report.deliveries = deliveries.len();
    progress(config, &format!("delivering {} copies of {} facts", deliveries.len(), config.facts));
    let latencies = Mutex::new(Vec::with_capacity(deliveries.len()));
    let answers = Mutex::new(BTreeMap::<u16, usize>::new());
    let unexpected = Mutex::new(Vec::<String>::new());
    let done = AtomicUsize::new(0);
    for burst in deliveries.chunks(config.parallelism.max(1)) {
        thread::scope(|s| {
            for d in burst {
                let (latencies, answers, unexpected, done) = (&latencies, &answers, &unexpected, &done);
                let (api, signer) = (&target.api, &target.signer);
                s.spawn(move || {
                    // Like a carrier: retry a 5xx or no answer a few times.
                    for attempt in 0..5 {
                        let headers = signer.sign(d.body.as_bytes(), crate::unix_now() + d.skew);
                        let started = Instant::now();
                        let a = api.post(
                            "/webhooks/telnyx",
                            &[
                                ("content-type", "application/json"),
                                ("telnyx-timestamp", &headers.timestamp),
                                ("telnyx-signature-ed25519", &headers.signature),
                            ],
                            d.body.as_bytes(),
                        );
                        let ms = started.elapsed().as_secs_f64() * 1000.0;
                        if let Ok(mut l) = latencies.lock() {
                            l.push(ms)
                        }
                        if let Ok(mut a2) = answers.lock() {
                            *a2.entry(a.status).or_default() += 1
                        }
                        let ok = if d.expect_refusal { a.status == 401 } else { a.status == 200 };
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
    report.answers = answers.into_inner().unwrap_or_default();
    for u in unexpected.into_inner().unwrap_or_default() {
        report.problem(u);
    }
    let mut lat = latencies.into_inner().unwrap_or_default();
    lat.sort_by(|a, b| a.total_cmp(b));
    report.p50_ms = percentile(&lat, 0.50);
    report.p99_ms = percentile(&lat, 0.99);

    // Read back the effects, waiting for processing to settle.
    progress(config, "waiting for every fact to settle");
    let expected_events = n_inbound + 2 * outbound.len() + n_ring;
    let settled = wait_for(Duration::from_secs(180), || {
        let events = api.all("/v1/events", &key).ok()?;
        let terminal = events
            .iter()
            .filter(|e| matches!(e["type"].as_str(), Some("message.received" | "message.delivered" | "message.failed")))
            .count();
        let calls = api.all("/v1/calls", &key).ok()?;
        let rung = calls.iter().filter(|c| c["legs"].as_array().is_some_and(|l| l.len() >= 2)).count();
        (terminal >= n_inbound + outbound.len() && rung >= n_ring).then_some(())
    });
    if settled.is_none() {
        report.problem("not everything settled within 180 s".into());
    }
    let events = api.all("/v1/events", &key)?;
    let mut by_effect: HashMap<(String, String), usize> = HashMap::new();
    for e in &events {
        let data_key = e["data"]["carrier_message_id"]
            .as_str()
            .filter(|_| e["type"] == "message.received")
            .or(e["data"]["id"].as_str())
            .unwrap_or_default();
        *by_effect.entry((e["type"].as_str().unwrap_or_default().to_owned(), data_key.to_owned())).or_default() += 1;
    }
    for (effect, count) in &by_effect {
        if *count > 1 {
            report.duplicate_effects += count - 1;
            report.problem(format!("{} events {} for {}", count, effect.0, effect.1));
        }
    }
    let mut applied = 0;
    // Inbound: one message, one message.received event each.
    let inbound = api.all("/v1/messages?direction=inbound", &key)?;
    let mut per_carrier_id: HashMap<String, usize> = HashMap::new();
    for m in &inbound {
        *per_carrier_id.entry(m["carrier_message_id"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
    }
    for i in 0..n_inbound {
        let carrier_id = format!("chaos-{tag}-msg-{i}");
        match per_carrier_id.get(&carrier_id).copied().unwrap_or(0) {
            0 => {
                report.missing += 1;
                report.problem(format!("no message for {carrier_id}"));
            }
            1 if by_effect.contains_key(&("message.received".to_owned(), carrier_id.clone())) => applied += 1,
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
    // Receipts: the final status, one sent and one terminal event each.
    for (message, delivered) in &outbound {
        let m = api.call("GET", &format!("/v1/messages/{message}"), &key, None).json();
        let want = if *delivered { "delivered" } else { "failed" };
        let final_event = if *delivered { "message.delivered" } else { "message.failed" };
        let has = |t: &str| by_effect.get(&(t.to_owned(), message.clone())).copied().unwrap_or(0);
        if m["status"] == want && has("message.sent") == 1 && has(final_event) == 1 {
            applied += 2;
        } else {
            report.missing += 1;
            report.problem(format!(
                "message {message}: status {} (want {want}), {} sent / {} {final_event} events",
                m["status"],
                has("message.sent"),
                has(final_event)
            ));
        }
    }
    // Ring hangups: exactly legs 1 and 2 (refused calls: both refused, and the call missed).
    for call in api.all("/v1/calls", &key)? {
        let legs = call["legs"].as_array().map(Vec::len).unwrap_or(0);
        let all_refused = call["to"] == refused_number.as_str();
        match legs {
            2 if all_refused && call["status"] != "missed" => {
                report.missing += 1;
                report.problem(format!("call {} with every dial refused is {}", call["id"], call["status"]));
            }
            2 => applied += 1,
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
    // The carrier's side: each call dialled position 1 and 2 once each and answered once,
    // whatever the order and copies of its events. Counted from the requests themselves, which
    // no UNIQUE constraint caps.
    if let Some(carrier) = target.carrier {
        let dials = carrier.requests("/v2/calls");
        for (i, call_id) in report.created.calls.clone().iter().enumerate() {
            for position in 1..=2 {
                let key = format!("{call_id}:leg:{position}");
                let n = dials.iter().filter(|r| r.idempotency_key.as_deref() == Some(key.as_str())).count();
                if n != 1 {
                    if n > 1 {
                        report.duplicate_effects += n - 1
                    } else {
                        report.missing += 1
                    }
                    report.problem(format!("call {call_id}: position {position} dialled {n} times"));
                }
            }
            let control = format!("v3:chaos-{tag}-caller-{i}").replace(':', "%3A");
            let answers = carrier.requests(&format!("/v2/calls/{control}/actions/answer")).len();
            if answers != 1 {
                if answers > 1 {
                    report.duplicate_effects += answers - 1
                } else {
                    report.missing += 1
                }
                report.problem(format!("call {call_id}: caller answered {answers} times"));
            }
            // Only a call whose every dial was refused hangs the caller up, once.
            let want = usize::from(refused(i));
            let hangups = carrier.requests(&format!("/v2/calls/{control}/actions/hangup")).len();
            if hangups != want {
                if hangups > want {
                    report.duplicate_effects += hangups - want
                } else {
                    report.missing += 1
                }
                report.problem(format!("call {call_id}: caller hung up {hangups} times, want {want}"));
            }
        }
        // Every send went out once per message (one idempotency key, one request: no faults
        // here make the carrier fail a send).
        for message in &report.created.messages.clone() {
            let n = carrier.sends_for(message);
            if n != 1 {
                if n > 1 {
                    report.duplicate_effects += n - 1
                } else {
                    report.missing += 1
                }
                report.problem(format!("message {message} sent {n} times"));
            }
        }
    }
    report.applied = applied;
    if by_effect.len() < expected_events {
        report.problem(format!("{} distinct customer events, expected at least {expected_events}", by_effect.len()));
    }

    // The customer endpoint: every webhook id once.
    if let (Some(customer), Some(path)) = (target.customer, &report.created.endpoint_path) {
        let want = events.len();
        let received = wait_for(Duration::from_secs(60), || {
            let got = customer.received(path);
            (got.len() >= want).then_some(got)
        })
        .unwrap_or_else(|| customer.received(path));
        let mut ids: HashMap<String, usize> = HashMap::new();
        for r in &received {
            *ids.entry(r.header("webhook-id").unwrap_or_default().to_owned()).or_default() += 1;
            let t = serde_json::from_str::<Value>(&r.body)
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_owned))
                .unwrap_or_default();
            *report.events_received.entry(t).or_default() += 1;
        }
        for (id, n) in ids.iter().filter(|(_, n)| **n > 1) {
            report.duplicate_effects += n - 1;
            report.problem(format!("webhook {id} received {n} times"));
        }
        if received.len() < want {
            report.missing += want - received.len();
            report.problem(format!("{} of {want} customer events received", received.len()));
        }
    }
    Ok(report)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Polls `check` every 500 ms until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(500));
    }
}
