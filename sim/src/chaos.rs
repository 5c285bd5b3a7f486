//! The chaos scenario: a mixed stream of carrier facts, delivered the way misbehaving carriers
//! deliver them: duplicated, re-signed under new event ids, reordered, in parallel bursts, some
//! with stale timestamps. Afterwards it reads back, through the API, a customer endpoint and
//! (when it runs in this process) the fake carrier's record of requests, what the platform made
//! of them, and counts duplicate effects and missing ones. Both must be 0.
//!
//! # What the stream mixes (docs/contract.md §4)
//! - Inbound messages (Telnyx `message.received`); with the fake carrier in this process, every
//!   tenth is an MMS whose one media item must be stored once and fetched from the carrier once.
//! - The receipts of messages sent from a Telnyx number, and the status callbacks of messages
//!   sent from a Twilio and a Plivo number, signed as each carrier signs (a failure may come as
//!   both of its words, `undelivered` and `failed`: the same fact under a second event id).
//! - Calls to a number with three ring targets (and its own ring timeout) whose first leg's
//!   hangup says nobody answered; every fourth call rings a number whose dials are all refused.
//! - Scheduled messages due a few seconds into the run, and the customer's cancels of others.
//! - Answered calls whose caller's hangup is lost: the fake carrier says the call ended, the
//!   cron's reconciliation must learn it, and for half of them the real hangup comes late. Likewise
//!   one Twilio and one Plivo message whose final callback comes only after reconciliation asked.
//! - With the fake carrier in this process, one Telnyx message whose receipts come before the
//!   send's answer, which is lost: they wait for the send, and once it wakes them the dedupe
//!   database is out for them (the test build's `fault-dedupe-outage`) until their jobs spent
//!   every retry and their dead-letter writes every attempt. The sweeper must still apply them.
//!
//! # What it counts
//! Per inbound message one message and one `message.received`; per outbound message its final
//! status, one `message.sent` and one final event, one charge and one idempotency key at the
//! carrier (a send whose answer was lost is asked again under the same key); per scheduled message one send at its time, or none once canceled; per ringing call
//! positions 1 and 2 dialled once each with the number's ring timeout and the caller answered
//! once; per call whose hangup was lost one `call.completed` with its duration, billed once; the
//! account's usage totals; every accepted carrier event processed; every customer event received
//! once.
//!
//! Twilio and Plivo need their auth tokens in the [`Target`]; the calls whose hangup is lost need
//! the fake carrier in this process, a cron the run may fire and a short reconciliation interval.
//! What a target cannot support is left out, and its share of the facts goes to inbound messages.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use exactly_core::ring::LegTag;
use exactly_core::rng::Deterministic as Rng;
use exactly_core::{Provider, Timestamp};
use serde_json::{json, Value};

use crate::api::{Answer, Client};
use crate::customer::CustomerEndpoint;
use crate::telnyx::{envelope, Signer};

/// What to send.
#[derive(Clone, Debug)]
pub struct Config {
    /// Facts in all (shares in [`Mix::All`]).
    pub facts: usize,
    /// Share of facts delivered again under the same event id (1 to 3 extra copies).
    pub duplicate_rate: f64,
    /// Share of facts delivered again re-signed under a new event id.
    pub resign_rate: f64,
    /// Deliveries are shuffled within windows of this many.
    pub reorder_window: usize,
    /// Deliveries sent at once.
    pub parallelism: usize,
    /// Share of Telnyx facts that also get a copy signed 400 s in the past (must be refused).
    pub stale_rate: f64,
    /// Seed of the deterministic choices.
    pub seed: u64,
    /// Print progress to stderr.
    pub progress: bool,
    /// Which kinds of facts.
    pub mix: Mix,
    /// With a customer endpoint: three more endpoints of the account, subscribed to inbound
    /// messages, misbehave beside the one that counts: one hangs, one closes every connection
    /// unanswered, one flaps between failing and answering. The counted endpoint's webhooks
    /// must come as fast as without them.
    pub misbehaving_endpoints: bool,
}

/// The kinds of facts a run sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// About 53% inbound messages, 25% Telnyx receipts, 15% ringing calls, 4% Twilio and Plivo
    /// status callbacks, 2% scheduled messages (a third of them canceled) and 1% calls whose
    /// hangup is lost.
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
            misbehaving_endpoints: true,
        }
    }
}

/// Where to send it.
pub struct Target<'a> {
    /// The worker's API. Twilio and Plivo callbacks are signed for this base URL, so it must be
    /// the worker's `PUBLIC_BASE_URL`.
    pub api: Client,
    /// Signs like Telnyx with the key the worker trusts.
    pub signer: Signer,
    /// The worker's `ADMIN_TOKEN`.
    pub admin_token: String,
    /// A customer endpoint the worker can reach (development: `ALLOW_PRIVATE_ENDPOINTS=true`),
    /// or `None` to skip counting customer events.
    pub customer: Option<&'a CustomerEndpoint>,
    /// The fake carrier the worker calls, when it runs in this process: its requests are
    /// counted too (one dial per ring position, one answer per call, one send per message), or
    /// `None` to skip that.
    pub carrier: Option<&'a crate::carrier::FakeCarrier>,
    /// The worker's `TWILIO_AUTH_TOKEN`: with it the run also sends from a Twilio number and
    /// delivers that carrier's signed status callbacks. `None` leaves Twilio out.
    pub twilio_token: Option<String>,
    /// The worker's `PLIVO_AUTH_TOKEN`, likewise for a Plivo number (V3 signatures).
    pub plivo_token: Option<String>,
    /// Whether the run may fire the worker's cron itself (`GET /__scheduled`, which
    /// `wrangler dev --test-scheduled` serves) while it waits, as the passing minutes would.
    pub cron: bool,
    /// Whether the worker reconciles within a few seconds (`RECONCILE_CALL_IDLE_SECS` and
    /// `RECONCILE_MESSAGE_SECS` of 2 or so). With `carrier` and `cron`, the run then includes
    /// answered calls whose hangup is lost and messages whose final callback comes late.
    pub reconcile: bool,
}

/// What happened.
#[derive(Debug, Default)]
pub struct Report {
    /// Facts sent, by kind.
    pub facts: BTreeMap<&'static str, usize>,
    /// Deliveries sent (facts and all their copies, and the customer's cancels).
    pub deliveries: usize,
    /// Of which duplicates (same event id), re-signed (new id), stale, and late (the real
    /// webhook of a fact reconciliation learned first).
    pub copies: BTreeMap<&'static str, usize>,
    /// Answers by HTTP status (0: no answer).
    pub answers: BTreeMap<u16, usize>,
    /// Cron runs the scenario fired.
    pub crons: usize,
    /// Of the inbound messages, how many were MMS (one media item each).
    pub mms: usize,
    /// Facts whose effect is visible exactly once.
    pub applied: usize,
    /// Customer events received at the endpoint, by type.
    pub events_received: BTreeMap<String, usize>,
    /// Webhooks the endpoint received again because the worker recorded the earlier attempt as
    /// failed (no 2xx within 15 s): the same webhook id, as Standard Webhooks retries are.
    pub retried_after_failure: usize,
    /// Effects seen more than once (messages, events, legs, sends, charges, webhook ids), or
    /// that should never have happened (a canceled message sent).
    pub duplicate_effects: usize,
    /// Facts whose effect never appeared (or appeared wrong).
    pub missing: usize,
    /// Time to webhook at the counted endpoint (from the first accepted delivery of an inbound
    /// message to its `message.received` arriving), percentiles in milliseconds, when counted.
    pub ttw_p50_ms: Option<f64>,
    /// See [`Report::ttw_p50_ms`].
    pub ttw_p99_ms: Option<f64>,
    /// The misbehaving endpoints at the end of the run: what each did, and its circuit and held
    /// count as the API shows them.
    pub misbehaving: Vec<String>,
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
    /// Messages sent and charged once each (one segment): outbound through every carrier, and
    /// the scheduled ones that came due.
    pub messages: Vec<String>,
    /// Scheduled messages canceled before their time: never sent, never charged.
    pub canceled: Vec<String>,
    /// Ringing calls (positions 1 and 2 dialled).
    pub calls: Vec<String>,
    /// Answered calls whose caller's hangup was lost and that reconciliation ended (position 1
    /// dialled).
    pub reconciled_calls: Vec<String>,
    /// The webhook endpoint path on the customer server, if any.
    pub endpoint_path: Option<String>,
    /// The webhook endpoint's id.
    pub endpoint_id: Option<String>,
    /// The misbehaving endpoints: (what it does, id, path).
    pub misbehaving: Vec<(&'static str, String, String)>,
}

impl Report {
    fn problem(&mut self, text: String) {
        if self.problems.len() < 20 {
            self.problems.push(text);
        }
    }

    /// Counts `got` effects where `want` were due: the excess as duplicates, the shortfall as
    /// missing, and a problem line naming `what`.
    fn expect(&mut self, what: impl FnOnce() -> String, got: usize, want: usize) {
        if got == want {
            return;
        }
        if got > want {
            self.duplicate_effects += got - want;
        } else {
            self.missing += want - got;
        }
        self.problem(format!("{}: {got}, want {want}", what()));
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
        out.push_str(&format!("cron runs fired:      {}\n", self.crons));
        out.push_str(&format!("inbound mms:          {}\n", self.mms));
        out.push_str(&format!("facts applied:        {}\n", self.applied));
        out.push_str(&format!(
            "customer events:      {}\n",
            if self.events_received.is_empty() { "(not counted)".into() } else { map(&self.events_received) }
        ));
        if self.retried_after_failure > 0 {
            out.push_str(&format!(
                "retried after failure: {} (an attempt recorded as failed, sent again)\n",
                self.retried_after_failure
            ));
        }
        out.push_str(&format!("duplicate effects:    {}\n", self.duplicate_effects));
        out.push_str(&format!("events missing:       {}\n", self.missing));
        out.push_str(&format!("ingest latency:       p50 {:.1} ms, p99 {:.1} ms\n", self.p50_ms, self.p99_ms));
        if let (Some(p50), Some(p99)) = (self.ttw_p50_ms, self.ttw_p99_ms) {
            out.push_str(&format!(
                "time to webhook:      p50 {p50:.0} ms, p99 {p99:.0} ms (the counted endpoint{})\n",
                if self.misbehaving.is_empty() { "" } else { ", beside the misbehaving ones" }
            ));
        }
        for m in &self.misbehaving {
            out.push_str(&format!("misbehaving endpoint: {m}\n"));
        }
        for p in &self.problems {
            out.push_str(&format!("problem: {p}\n"));
        }
        out
    }
}

/// One request of the stream.
#[derive(Clone)]
enum Delivery {
    /// A Telnyx webhook, signed when sent, `skew` seconds off (negative: stale, so refused).
    Telnyx { body: String, skew: i64, expect_refusal: bool },
    /// A Twilio or Plivo status callback, signed when sent (Plivo with a fresh nonce each time).
    Form { carrier: Provider, params: Vec<(String, String)> },
    /// The customer cancels a scheduled message.
    Cancel { message: String },
}

/// How many of each kind a run sends.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    /// Inbound messages (one fact each).
    inbound: usize,
    /// Ringing calls (one fact each).
    ring: usize,
    /// Messages sent through Telnyx (two receipts each).
    messages: usize,
    /// Messages sent through Twilio and Plivo (two status callbacks each).
    rest: usize,
    /// Scheduled messages, due or canceled (one fact each).
    scheduled: usize,
    /// Answered calls whose hangup is lost (one fact each).
    lost: usize,
}

impl Plan {
    /// The shares of [`Mix::All`], leaving out Twilio and Plivo without a carrier to send
    /// through and lost hangups without reconciliation; inbound messages take up the rest.
    fn new(config: &Config, rest: bool, reconcile: bool) -> Self {
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
    fn facts(&self) -> usize {
        self.inbound + self.ring + 2 * self.messages + 2 * self.rest + self.scheduled + self.lost
    }
}

/// An outbound message of the run and how its carrier finishes it.
struct Outbound {
    id: String,
    carrier: Provider,
    from: String,
    text: String,
    delivered: bool,
    /// Its final callback is lost until reconciliation has asked the carrier.
    reconciled: bool,
    carrier_id: String,
}

/// A scheduled message of the run.
struct Scheduled {
    id: String,
    send_at: Timestamp,
    canceled: bool,
}

/// An answered call whose caller's hangup is lost.
struct LostHangup {
    id: String,
    caller: String,
    duration_secs: i64,
    /// The late real hangup, when it comes.
    late: Option<String>,
}

const TARGETS: [&str; 3] = ["+15557770001", "+15557770002", "+15557770003"];
/// The ringing number's ring timeout (the number whose dials are refused keeps the default).
const RING_TIMEOUT_SECS: u32 = 20;
/// Where outbound messages go.
const RECIPIENT: &str = "+15559990000";
/// When the calls of the run start and, for those answered, when their first leg answers.
const INITIATED_AT: &str = "2026-11-30T10:00:00Z";
const LEG_ANSWERED_AT: &str = "2026-11-30T10:00:20Z";
/// How far ahead scheduled messages are due, and those that are canceled.
const DUE_IN_SECS: i64 = 5;
const CANCELED_DUE_IN_SECS: i64 = 30;
/// How often the run fires the cron while it waits.
const CRON_EVERY: Duration = Duration::from_secs(5);

fn progress(config: &Config, text: &str) {
    if config.progress {
        eprintln!("sim: {text}");
    }
}

/// The customer events of the facts, which the counted endpoint subscribes to.
const COUNTED_TYPES: [&str; 8] = [
    "message.received",
    "message.sent",
    "message.delivered",
    "message.failed",
    "call.initiated",
    "call.answered",
    "call.completed",
    "call.missed",
];

/// Runs the scenario.
pub fn run(target: &Target<'_>, config: &Config) -> Result<Report, String> {
    let mut report = Report::default();
    let mut rng = Rng::new(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let tag = crate::random_hex()[..8].to_owned();
    let api = &target.api;

    // Setup: an account; an inbound (Telnyx) number, a number that rings three targets, one
    // whose dials are all refused, a Twilio and a Plivo number; an endpoint.
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
    let rest_numbers: Vec<(Provider, String)> = [
        (Provider::Twilio, target.twilio_token.is_some(), format!("+1556{suffix:04}004")),
        (Provider::Plivo, target.plivo_token.is_some(), format!("+1556{suffix:04}005")),
    ]
    .into_iter()
    .filter(|(_, trusted, _)| *trusted)
    .map(|(carrier, _, number)| (carrier, number))
    .collect();
    let mut numbers = vec![
        json!({"phone_number": inbound_number, "ring_targets": []}),
        json!({"phone_number": ring_number, "ring_targets": TARGETS, "ring_timeout_secs": RING_TIMEOUT_SECS}),
        json!({"phone_number": refused_number, "ring_targets": ["+15557770000", "+15558880000"]}),
    ];
    for (carrier, number) in &rest_numbers {
        numbers.push(json!({"phone_number": number, "ring_targets": [], "carrier": carrier.as_str()}));
    }
    for mut number in numbers {
        number["account_id"] = json!(account_id);
        let a = api.call("POST", "/admin/numbers", &target.admin_token, Some(&number));
        if a.status != 201 {
            return Err(format!("assigning {}: {} {}", number["phone_number"], a.status, a.body));
        }
    }
    if let Some(customer) = target.customer {
        let path = format!("/chaos/{tag}");
        let a = api.call(
            "POST",
            "/v1/webhook_endpoints",
            &key,
            Some(&json!({"url": format!("{}{path}", customer.base), "event_types": COUNTED_TYPES})),
        );
        if a.status == 201 {
            report.created.endpoint_path = Some(path);
            report.created.endpoint_id = a.json()["id"].as_str().map(str::to_owned);
        } else {
            report.problem(format!("customer events not counted: endpoint refused ({} {})", a.status, a.body));
        }
        if config.misbehaving_endpoints {
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
                    Some(id) if a.status == 201 => report.created.misbehaving.push((kind, id.to_owned(), path)),
                    _ => report.problem(format!("the endpoint that {kind} was refused ({} {})", a.status, a.body)),
                }
            }
        }
    }

    let reconcile = config.mix == Mix::All && target.carrier.is_some() && target.cron && target.reconcile;
    let Plan {
        inbound: n_inbound,
        ring: n_ring,
        messages: n_messages,
        rest: n_rest,
        scheduled: n_scheduled,
        lost: n_lost,
    } = Plan::new(config, !rest_numbers.is_empty(), reconcile);

    // Outbound messages, sent and handed to the carrier, whose receipts are facts.
    progress(config, &format!("sending {} outbound messages", n_messages + n_rest));
    let mut outbound = Vec::new();
    for i in 0..n_messages {
        // The first send is slow (7 s) while the carrier delivers its receipt 14 times. The
        // second's receipts come before the carrier's answer, which is lost (the send is tried
        // again): they wait for the send, which wakes them, and then the dedupe database is out
        // for them (`fault-dedupe-outage`, in the test build) until their jobs have spent every
        // retry and their dead-letter writes every attempt. Only the sweeper can still apply
        // them.
        let marker = match i {
            0 => "[slow-receipts] ",
            1 => "[receipt-first] fault-dedupe-outage ",
            _ => "",
        };
        let text = format!("{marker}chaos {tag} {i}");
        let id = create_message(api, &key, &json!({"from": inbound_number, "to": RECIPIENT, "text": text}))?;
        let delivered = i <= 1 || !rng.chance(0.2);
        outbound.push(Outbound {
            id,
            carrier: Provider::Telnyx,
            from: inbound_number.clone(),
            text,
            delivered,
            reconciled: false,
            carrier_id: String::new(),
        });
    }
    for i in 0..n_rest {
        let (carrier, from) = &rest_numbers[i % rest_numbers.len()];
        let text = format!("chaos {tag} {} {i}", carrier.as_str());
        let id = create_message(api, &key, &json!({"from": from, "to": RECIPIENT, "text": text}))?;
        // The last message of each carrier loses its final callback until reconciliation asked.
        let reconciled = reconcile && i + rest_numbers.len() >= n_rest;
        let delivered = !rng.chance(0.3);
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
        .ok_or("outbound messages were not all sent within 120 s")?;
        for (o, carrier_id) in outbound.iter_mut().zip(ids) {
            o.carrier_id = carrier_id;
        }
    }
    report.created.messages = outbound.iter().map(|o| o.id.clone()).collect();
    if let Some(carrier) = target.carrier {
        // What the carrier will say when reconciliation asks about a message whose final
        // callback is lost.
        for o in outbound.iter().filter(|o| o.reconciled) {
            carrier.set_message_status(&o.carrier_id, final_word(o.carrier, o.delivered));
        }
    }

    // Scheduled messages, due a few seconds into the stream; a third of them are canceled by
    // the customer at the start of the stream, well before their time.
    let mut scheduled = Vec::new();
    for i in 0..n_scheduled {
        let canceled = i % 3 == 2;
        let ahead = if canceled { CANCELED_DUE_IN_SECS } else { DUE_IN_SECS };
        // From the moment of each request: `send_at` must be in the future when it arrives.
        let send_at = Timestamp::from_unix_seconds(crate::unix_now() + ahead);
        let body = json!({"from": inbound_number, "to": RECIPIENT, "text": format!("chaos {tag} later {i}"),
            "send_at": send_at.to_rfc3339()});
        scheduled.push(Scheduled { id: create_message(api, &key, &body)?, send_at, canceled });
    }
    report.created.messages.extend(scheduled.iter().filter(|s| !s.canceled).map(|s| s.id.clone()));
    report.created.canceled = scheduled.iter().filter(|s| s.canceled).map(|s| s.id.clone()).collect();

    // Calls: each call's `call.initiated` and its first leg's hangup go into the same shuffled
    // stream, without waiting for the dial: the call id follows from the carrier session, and
    // the fake carrier derives a leg's ids from its dial's idempotency key, so the hangup can
    // be written before the dial happens. Either order must dial target 1, then target 2.
    progress(config, &format!("preparing {} calls", n_ring + n_lost));
    // Every fourth call rings a number whose dials are all refused: its one fact is its
    // `call.initiated`, and it must end missed with the caller hung up once.
    let refused = |i: usize| i % 4 == 3;
    let mut call_facts: Vec<(String, Option<String>)> = Vec::new();
    for i in 0..n_ring {
        let session = format!("chaos-{tag}-sess-{i}");
        let control = format!("v3:chaos-{tag}-caller-{i}");
        let call_id = exactly_core::call_machine::call_id(Provider::Telnyx, &session);
        let to = if refused(i) { &refused_number } else { &ring_number };
        let init = initiated(&format!("chaos-{tag}-init-{i}"), &control, &session, to);
        report.created.calls.push(call_id.clone());
        if refused(i) {
            call_facts.push((init, None));
            continue;
        }
        let hangup = leg_event(
            &format!("chaos-{tag}-hangup-{i}"),
            "call.hangup",
            "2026-11-30T10:01:30Z",
            &call_id,
            json!({"hangup_cause": "timeout", "hangup_source": "callee"}),
        );
        call_facts.push((init, Some(hangup)));
    }
    // Calls whose first target answers, and whose caller's hangup never reaches the worker: the
    // fake carrier says the caller's leg ended, which only reconciliation asks.
    let mut lost = Vec::new();
    let mut lost_facts = Vec::new();
    let answered_at = Timestamp::parse_rfc3339(LEG_ANSWERED_AT).unwrap_or(Timestamp::from_unix_seconds(0));
    for i in 0..n_lost {
        let session = format!("chaos-{tag}-lost-sess-{i}");
        let caller = format!("v3:chaos-{tag}-lost-caller-{i}");
        let call_id = exactly_core::call_machine::call_id(Provider::Telnyx, &session);
        lost_facts.push(initiated(&format!("chaos-{tag}-lost-init-{i}"), &caller, &session, &ring_number));
        lost_facts.push(leg_event(
            &format!("chaos-{tag}-lost-answered-{i}"),
            "call.answered",
            LEG_ANSWERED_AT,
            &call_id,
            json!({"from": ring_number, "to": TARGETS[0], "direction": "outgoing", "state": "answered"}),
        ));
        let duration_secs = 61 + 30 * i as i64;
        let ended_at = Timestamp::from_unix_millis(answered_at.unix_millis() + duration_secs * 1000).to_rfc3339();
        if let Some(carrier) = target.carrier {
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
    report.created.reconciled_calls = lost.iter().map(|l| l.id.clone()).collect();

    // The facts, each with its copies. The cancels go first, so they come well before their
    // messages are due.
    let mut deliveries: Vec<Delivery> = Vec::new();
    for s in scheduled.iter().filter(|s| s.canceled) {
        let copies = if rng.chance(config.duplicate_rate) { 2 } else { 1 };
        for _ in 0..copies {
            deliveries.push(Delivery::Cancel { message: s.id.clone() });
        }
        if copies > 1 {
            *report.copies.entry("duplicate").or_default() += 1;
        }
    }
    for i in 0..n_inbound {
        let id = format!("chaos-{tag}-in-{i}");
        let mut payload = json!({
            "id": format!("chaos-{tag}-msg-{i}"), "direction": "inbound", "text": format!("inbound {i}"),
            "from": {"phone_number": RECIPIENT}, "to": [{"phone_number": inbound_number}],
        });
        if let Some((_, url)) = mms_item(target, &tag, i) {
            payload["type"] = json!("MMS");
            payload["media"] = json!([{"url": url, "content_type": "image/jpeg", "size": 1024}]);
        }
        let body = envelope(&id, "message.received", "2026-11-30T10:00:00Z", payload, 1);
        add_telnyx(&mut deliveries, body, &id, config, &mut report, &mut rng);
    }
    *report.facts.entry("inbound").or_default() = n_inbound;
    report.mms = (0..n_inbound).filter(|&i| mms_item(target, &tag, i).is_some()).count();
    let mut late: Vec<Delivery> = Vec::new();
    for (i, o) in outbound.iter().enumerate() {
        match o.carrier {
            Provider::Telnyx => {
                for (kind, status) in [
                    ("message.sent", "sent"),
                    ("message.finalized", if o.delivered { "delivered" } else { "delivery_failed" }),
                ] {
                    let id = format!("chaos-{tag}-rcpt-{i}-{status}");
                    let errors = if status == "delivery_failed" {
                        json!([{"code": "40300", "title": "Blocked"}])
                    } else {
                        json!([])
                    };
                    let body = envelope(
                        &id,
                        kind,
                        "2026-11-30T10:00:05Z",
                        json!({"id": o.carrier_id, "direction": "outbound", "to": [{"phone_number": RECIPIENT,
                            "status": status}], "errors": errors}),
                        1,
                    );
                    add_telnyx(&mut deliveries, body, &id, config, &mut report, &mut rng);
                }
                *report.facts.entry("receipt").or_default() += 2;
            }
            Provider::Twilio | Provider::Plivo => {
                add_form(&mut deliveries, o, "sent", None, config, &mut report, &mut rng);
                let word = final_word(o.carrier, o.delivered);
                let twin = (!o.delivered).then(|| if word == "failed" { "undelivered" } else { "failed" });
                if o.reconciled {
                    // Delivered only once reconciliation learned it from the carrier.
                    let before = late.len();
                    add_form(&mut late, o, word, twin, config, &mut report, &mut rng);
                    *report.copies.entry("late").or_default() += late.len() - before;
                } else {
                    add_form(&mut deliveries, o, word, twin, config, &mut report, &mut rng);
                }
                let kind = if o.carrier == Provider::Twilio { "twilio_status" } else { "plivo_status" };
                *report.facts.entry(kind).or_default() += 2;
            }
        }
    }
    for (i, (init, hangup)) in call_facts.into_iter().enumerate() {
        add_telnyx(&mut deliveries, init, &format!("chaos-{tag}-init-{i}"), config, &mut report, &mut rng);
        if let Some(hangup) = hangup {
            add_telnyx(&mut deliveries, hangup, &format!("chaos-{tag}-hangup-{i}"), config, &mut report, &mut rng);
        }
    }
    for (i, body) in lost_facts.into_iter().enumerate() {
        add_telnyx(&mut deliveries, body, &format!("chaos-{tag}-lost-{i}"), config, &mut report, &mut rng);
    }
    for (i, l) in lost.iter().enumerate() {
        if let Some(body) = &l.late {
            let before = late.len();
            add_telnyx(&mut late, body.clone(), &format!("chaos-{tag}-lost-late-{i}"), config, &mut report, &mut rng);
            *report.copies.entry("late").or_default() += late.len() - before;
        }
    }
    let n_refused = (0..n_ring).filter(|i| refused(*i)).count();
    *report.facts.entry("ring_hangup").or_default() = n_ring - n_refused;
    let mut count = |kind: &'static str, n: usize| {
        if n > 0 {
            *report.facts.entry(kind).or_default() = n;
        }
    };
    count("refused_call", n_refused);
    count("scheduled", scheduled.iter().filter(|s| !s.canceled).count());
    count("canceled", scheduled.iter().filter(|s| s.canceled).count());
    count("lost_hangup", n_lost);

    // Reorder within windows, then send in parallel bursts.
    for window in deliveries.chunks_mut(config.reorder_window.max(1)) {
        for i in (1..window.len()).rev() {
            let j = rng.below(i + 1);
            window.swap(i, j);
        }
    }
    progress(config, &format!("delivering {} copies of {} facts", deliveries.len(), config.facts));
    let mut latencies = Vec::with_capacity(deliveries.len());
    let first_accepted = Mutex::new(HashMap::new());
    deliver(target, &key, config, &deliveries, &mut report, &mut latencies, &first_accepted);

    // Read back the effects, waiting for processing to settle (and firing the cron, which
    // sweeps and reconciles, as the minutes would).
    progress(config, "waiting for every fact to settle");
    let due = scheduled.iter().filter(|s| !s.canceled).count();
    let mut last_cron: Option<Instant> = None;
    let settled = wait_for(Duration::from_secs(180), || {
        if target.cron && last_cron.is_none_or(|t| t.elapsed() >= CRON_EVERY) {
            fire_cron(api, &mut report);
            last_cron = Some(Instant::now());
        }
        let events = api.all("/v1/events", &key).ok()?;
        let of = |types: &[&str]| events.iter().filter(|e| types.iter().any(|t| e["type"] == *t)).count();
        let terminal = of(&["message.received", "message.delivered", "message.failed"]);
        let calls = api.all("/v1/calls", &key).ok()?;
        let rung = calls.iter().filter(|c| c["legs"].as_array().is_some_and(|l| l.len() >= 2)).count();
        (terminal >= n_inbound + outbound.len()
            && of(&["message.sent"]) >= outbound.len() + due
            && of(&["call.completed"]) >= n_lost
            && rung >= n_ring)
            .then_some(())
    });
    if settled.is_none() {
        report.problem("not everything settled within 180 s".into());
    }
    // A canceled message must still be unsent after its time has passed and the cron ran.
    if let Some(latest) = scheduled.iter().filter(|s| s.canceled).map(|s| s.send_at.unix_seconds()).max() {
        let wait = latest + 2 - crate::unix_now();
        if wait > 0 {
            thread::sleep(Duration::from_secs(wait as u64));
        }
        if target.cron {
            fire_cron(api, &mut report);
        }
    }

    // The real webhooks of what reconciliation learned, late, while the cron runs again.
    if !late.is_empty() {
        progress(config, &format!("delivering {} late webhooks", late.len()));
        thread::scope(|s| {
            let cron = target.cron.then(|| s.spawn(|| fire_cron_once(api)));
            deliver(target, &key, config, &late, &mut report, &mut latencies, &first_accepted);
            if let Some(status) = cron.and_then(|c| c.join().ok()) {
                report.crons += 1;
                if status != 200 {
                    report.problem(format!("the cron answered {status}"));
                }
            }
        });
    }
    report.deliveries = deliveries.len() + late.len();
    latencies.sort_by(|a, b| a.total_cmp(b));
    report.p50_ms = percentile(&latencies, 0.50);
    report.p99_ms = percentile(&latencies, 0.99);

    // Every carrier event of the run is processed (docs/contract.md §7.8): none pending, none
    // failed.
    let rest_ids: HashSet<&str> =
        outbound.iter().filter(|o| o.carrier != Provider::Telnyx).map(|o| o.carrier_id.as_str()).collect();
    // The receipts the fake carrier itself sends (`{carrier id}-delivered` and `-sent`).
    let telnyx_ids: HashSet<&str> =
        outbound.iter().filter(|o| o.carrier == Provider::Telnyx).map(|o| o.carrier_id.as_str()).collect();
    let lost_ids: HashSet<&str> = lost.iter().map(|l| l.id.as_str()).collect();
    let ours = |event: &Value| {
        let id = event["carrier_event_id"].as_str().unwrap_or_default();
        id.contains(&tag)
            || id.split(':').next().is_some_and(|carrier_id| rest_ids.contains(carrier_id))
            || id.strip_prefix("reconciled:").and_then(|r| r.split(':').next()).is_some_and(|c| lost_ids.contains(c))
            || id.rsplit_once('-').is_some_and(|(carrier_id, _)| telnyx_ids.contains(carrier_id))
    };
    let events_in = |status: &str| {
        api.all(&format!("/admin/carrier_events?status={status}"), &target.admin_token)
            .map(|all| all.into_iter().filter(|e| ours(e)).collect::<Vec<_>>())
    };
    // A receipt the queue gave up on is the sweeper's: it looks again at a woken receipt a while
    // after the wake (2 minutes deployed, 20 s in the test worker), so the cron keeps firing
    // while this waits.
    let mut last_cron: Option<Instant> = None;
    let pending = wait_for(Duration::from_secs(180), || {
        if target.cron && last_cron.is_none_or(|t| t.elapsed() >= CRON_EVERY) {
            fire_cron(api, &mut report);
            last_cron = Some(Instant::now());
        }
        events_in("pending").ok().filter(Vec::is_empty)
    })
    .map_or_else(|| events_in("pending").unwrap_or_default(), |_| Vec::new());
    for e in &pending {
        report.problem(format!("carrier event {} still pending", e["carrier_event_id"]));
    }
    let failed = events_in("failed")?;
    for e in &failed {
        report.problem(format!("carrier event {} failed: {}", e["carrier_event_id"], e["error"]));
    }
    report.missing += pending.len() + failed.len();

    // The customer events of the facts: the operational signals about the account's own
    // endpoints and deliveries (a misbehaving endpoint's circuit opening and closing, as often as
    // it does, its deliveries running out of attempts) are not effects of a fact, and the counted
    // endpoint does not subscribe to them.
    let mut events = api.all("/v1/events", &key)?;
    events.retain(|e| e["type"].as_str().is_some_and(|t| COUNTED_TYPES.contains(&t)));
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
    let has = |t: &str, id: &str| by_effect.get(&(t.to_owned(), id.to_owned())).copied().unwrap_or(0);
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
            1 if has("message.received", &carrier_id) == 1 => applied += 1,
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
    // Inbound MMS: one media row per item, copied into storage once (one fetch of the carrier's
    // link), however often the message was delivered.
    for i in 0..n_inbound {
        let (Some((name, _)), Some(carrier)) = (mms_item(target, &tag, i), target.carrier) else { continue };
        let carrier_id = format!("chaos-{tag}-msg-{i}");
        let Some(id) = inbound.iter().find(|m| m["carrier_message_id"] == carrier_id.as_str()).map(|m| m["id"].clone())
        else {
            continue; // counted missing above
        };
        let id = id.as_str().unwrap_or_default().to_owned();
        let media = wait_for(Duration::from_secs(60), || {
            let m = api.call("GET", &format!("/v1/messages/{id}"), &key, None).json();
            let media = m["media"].as_array().cloned().unwrap_or_default();
            media.iter().all(|item| item["stored"] == true).then_some(media)
        });
        match media.map(|m| m.len()) {
            Some(1) => {}
            Some(0) | None => {
                report.missing += 1;
                report.problem(format!("media of {carrier_id} not stored"));
            }
            Some(n) => {
                report.duplicate_effects += n - 1;
                report.problem(format!("{n} media items for {carrier_id}"));
            }
        }
        match carrier.media_fetches(&name) {
            1 => {}
            0 => {
                report.missing += 1;
                report.problem(format!("media of {carrier_id} never fetched"));
            }
            n => {
                report.duplicate_effects += n - 1;
                report.problem(format!("media of {carrier_id} fetched {n} times"));
            }
        }
    }
    // Outbound, through each carrier: the final status, one sent and one final event, one
    // charge, one send request.
    for o in &outbound {
        let m = api.call("GET", &format!("/v1/messages/{}", o.id), &key, None).json();
        let want = if o.delivered { "delivered" } else { "failed" };
        let final_event = if o.delivered { "message.delivered" } else { "message.failed" };
        if m["status"] == want && has("message.sent", &o.id) == 1 && has(final_event, &o.id) == 1 {
            applied += 2;
        } else {
            report.missing += 1;
            report.problem(format!(
                "{} message {}: status {} (want {want}), {} sent / {} {final_event} events",
                o.carrier.as_str(),
                o.id,
                m["status"],
                has("message.sent", &o.id),
                has(final_event, &o.id)
            ));
        }
        let charged = usize::from(m["charge"]["quantity"] == 1);
        report.expect(|| format!("message {} charged", o.id), charged, 1);
        if let Some(carrier) = target.carrier {
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
    // Scheduled: sent once, at its time, and charged; or canceled: never sent, never charged.
    for s in &scheduled {
        let m = api.call("GET", &format!("/v1/messages/{}", s.id), &key, None).json();
        let sent_at = m["sent_at"].as_str().and_then(Timestamp::parse_rfc3339);
        let sends = target.carrier.map(|c| c.sends_for(&s.id));
        if s.canceled {
            if m["status"] == "canceled" && m["charge"].is_null() {
                applied += 1;
            } else {
                report.duplicate_effects += 1;
                report.problem(format!("canceled message {}: status {}, charge {}", s.id, m["status"], m["charge"]));
            }
            report.expect(|| format!("canceled message {}: message.sent events", s.id), has("message.sent", &s.id), 0);
            if let Some(sends) = sends {
                report.expect(|| format!("canceled message {} sent", s.id), sends, 0);
            }
        } else {
            if m["status"] == "sent" && sent_at.is_some_and(|at| at >= s.send_at) && m["charge"]["quantity"] == 1 {
                applied += 1;
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
            report.expect(|| format!("scheduled message {}: message.sent events", s.id), has("message.sent", &s.id), 1);
            if let Some(sends) = sends {
                report.expect(|| format!("scheduled message {} sent", s.id), sends, 1);
            }
        }
    }
    // Ringing calls: exactly legs 1 and 2 (refused calls: both refused, and the call missed).
    for call in api.all("/v1/calls", &key)? {
        if call["id"].as_str().is_some_and(|id| lost_ids.contains(id)) {
            continue;
        }
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
    // Calls whose hangup was lost: completed once, with the duration by the carrier's clock,
    // billed once, announced once, whether or not the real hangup came late.
    let mut call_minutes = 0;
    for l in &lost {
        let call = api.call("GET", &format!("/v1/calls/{}", l.id), &key, None).json();
        let billed = (l.duration_secs + 59) / 60;
        call_minutes += billed;
        if call["status"] == "completed"
            && call["duration_secs"] == l.duration_secs
            && call["billed_minutes"] == billed
            && call["charge"]["quantity"] == billed
            && has("call.answered", &l.id) == 1
            && has("call.completed", &l.id) == 1
        {
            applied += 1;
        } else {
            report.missing += 1;
            report.problem(format!(
                "call {} (hangup lost): status {}, {} s, {} min (want {} s, {billed} min), charge {}, {} answered / {} \
                 completed events",
                l.id,
                call["status"],
                call["duration_secs"],
                call["billed_minutes"],
                l.duration_secs,
                call["charge"],
                has("call.answered", &l.id),
                has("call.completed", &l.id)
            ));
        }
    }
    // The carrier's side: each call dialled each position it reached once, with its number's
    // ring timeout, and answered once, whatever the order and copies of its events. Counted
    // from the requests themselves, which no UNIQUE constraint caps.
    if let Some(carrier) = target.carrier {
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
        let answered = lost.iter().map(|l| (l.id.clone(), l.caller.clone(), 1, RING_TIMEOUT_SECS, 0));
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
        for l in &lost {
            let bridges = carrier.requests(&path(&l.caller, "bridge")).len();
            report.expect(|| format!("call {}: bridged", l.id), bridges, 1);
            // The answered leg, still up when the caller left, is hung up once.
            let leg = format!("v3:cc-{}:leg:1", l.id);
            let leg_hangups = carrier.requests(&path(&leg, "hangup")).len();
            report.expect(|| format!("call {}: answered leg hung up", l.id), leg_hangups, 1);
        }
    }
    // The ledger: one segment per message sent, the minutes of each completed call, nothing
    // for the rest.
    let usage = api.call("GET", "/v1/usage", &key, None).json();
    let segments = usage["sms_segments"].as_u64().unwrap_or(0) as usize;
    report.expect(|| "the account's SMS segments".into(), segments, report.created.messages.len());
    let minutes = usage["call_minutes"].as_u64().unwrap_or(0) as usize;
    report.expect(|| "the account's call minutes".into(), minutes, call_minutes as usize);

    report.applied = applied;
    let expected_events = n_inbound + 2 * outbound.len() + due + n_ring + 3 * n_lost;
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
        // A webhook id received twice is a duplicate unless the worker recorded the attempt that
        // brought the first copy as failed (its answer came after the 15 s): then the second is the
        // retry the contract promises. Never two recorded successes, never more copies than attempts.
        let repeated: Vec<(&String, &usize)> = ids.iter().filter(|(_, n)| **n > 1).collect();
        let attempts = match (&report.created.endpoint_id, repeated.is_empty()) {
            (Some(endpoint), false) => endpoint_attempts(api, &key, endpoint),
            _ => HashMap::new(),
        };
        for (id, n) in repeated {
            let (made, succeeded) = attempts.get(id.as_str()).copied().unwrap_or((0, 0));
            if succeeded <= 1 && *n <= made {
                report.retried_after_failure += n - 1;
            } else {
                report.duplicate_effects += n - 1;
                report.problem(format!(
                    "webhook {id} received {n} times ({made} attempts recorded, {succeeded} of them successful)"
                ));
            }
        }
        if received.len() < want {
            report.missing += want - received.len();
            report.problem(format!("{} of {want} customer events received", received.len()));
        }
        let first_accepted = first_accepted.into_inner().unwrap_or_default();
        let mut seen = HashSet::new();
        let mut waits: Vec<f64> = received
            .iter()
            .filter_map(|r| {
                let body: Value = serde_json::from_str(&r.body).ok()?;
                let sent = first_accepted.get(body["data"]["carrier_message_id"].as_str()?)?;
                let first = body["type"] == "message.received" && seen.insert(body["id"].as_str()?.to_owned());
                first.then(|| r.arrived.saturating_duration_since(*sent).as_secs_f64() * 1000.0)
            })
            .collect();
        waits.sort_by(|a, b| a.total_cmp(b));
        if !waits.is_empty() {
            report.ttw_p50_ms = Some(percentile(&waits, 0.50));
            report.ttw_p99_ms = Some(percentile(&waits, 0.99));
        }
    }
    // The misbehaving endpoints: none ever got one event twice with a 2xx, and each shows where
    // its circuit stands.
    for (kind, id, _) in report.created.misbehaving.clone() {
        for (event, (_, succeeded)) in endpoint_attempts(api, &key, &id) {
            if succeeded > 1 {
                report.duplicate_effects += succeeded - 1;
                report.problem(format!("the endpoint that {kind} got {event} {succeeded} times with a 2xx"));
            }
        }
        let shown = api.call("GET", &format!("/v1/webhook_endpoints/{id}"), &key, None).json();
        report.misbehaving.push(format!(
            "{kind}: circuit {}, {} held, {} attempts in flight",
            shown["circuit"].as_str().unwrap_or("?"),
            shown["held_count"],
            shown["in_flight"]
        ));
    }
    Ok(report)
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
    envelope(
        event_id,
        "call.initiated",
        INITIATED_AT,
        json!({
            "call_control_id": control, "call_leg_id": format!("leg-{control}"), "call_session_id": session,
            "from": "+15551230000", "to": to, "direction": "incoming", "state": "parked",
        }),
        1,
    )
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

/// The word a Twilio or Plivo status callback uses for a message's final status.
fn final_word(carrier: Provider, delivered: bool) -> &'static str {
    match (carrier, delivered) {
        (_, true) => "delivered",
        (Provider::Twilio, false) => "undelivered",
        (Provider::Telnyx | Provider::Plivo, false) => "failed",
    }
}

/// Adds a Telnyx fact and its copies: duplicates, one re-signed under a new event id, one
/// stale.
fn add_telnyx(
    deliveries: &mut Vec<Delivery>,
    body: String,
    id_field: &str,
    config: &Config,
    report: &mut Report,
    rng: &mut Rng,
) {
    deliveries.push(Delivery::Telnyx { body: body.clone(), skew: 0, expect_refusal: false });
    if rng.chance(config.duplicate_rate) {
        for _ in 0..1 + rng.below(3) {
            deliveries.push(Delivery::Telnyx { body: body.clone(), skew: rng.below(5) as i64, expect_refusal: false });
            *report.copies.entry("duplicate").or_default() += 1;
        }
    }
    if rng.chance(config.resign_rate) {
        let mut v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["id"] = json!(format!("{id_field}-resigned-{}", rng.below(1_000_000)));
        v["meta"]["attempt"] = json!(2);
        deliveries.push(Delivery::Telnyx { body: v.to_string(), skew: 4, expect_refusal: false });
        *report.copies.entry("resigned").or_default() += 1;
    }
    if rng.chance(config.stale_rate) {
        deliveries.push(Delivery::Telnyx { body, skew: -400, expect_refusal: true });
        *report.copies.entry("stale").or_default() += 1;
    }
}

/// Adds a Twilio or Plivo status callback for `o` and its copies: duplicates (each signed
/// anew), and for a failure the other word for it (`twin`), which is a new event id for the
/// same fact. These carriers sign no time, so there is no stale copy.
fn add_form(
    deliveries: &mut Vec<Delivery>,
    o: &Outbound,
    status: &str,
    twin: Option<&str>,
    config: &Config,
    report: &mut Report,
    rng: &mut Rng,
) {
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
            *report.copies.entry("duplicate").or_default() += 1;
        }
    }
    if let Some(twin) = twin.filter(|_| rng.chance(config.resign_rate)) {
        deliveries.push(Delivery::Form { carrier: o.carrier, params: params(twin) });
        *report.copies.entry("resigned").or_default() += 1;
    }
}

/// Sends `deliveries` in parallel bursts, retrying a 5xx or no answer as a carrier does, and
/// records the answers, the webhooks' ingest latencies and, per inbound message (its carrier
/// id), when a delivery of it was first accepted.
fn deliver(
    target: &Target<'_>,
    key: &str,
    config: &Config,
    deliveries: &[Delivery],
    report: &mut Report,
    latencies: &mut Vec<f64>,
    first_accepted: &Mutex<HashMap<String, Instant>>,
) {
    let measured = Mutex::new(Vec::with_capacity(deliveries.len()));
    let answers = Mutex::new(std::mem::take(&mut report.answers));
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
    report.answers = answers.into_inner().unwrap_or_default();
    for u in unexpected.into_inner().unwrap_or_default() {
        report.problem(u);
    }
    latencies.extend(measured.into_inner().unwrap_or_default());
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
                    Answer { status: 0, body: format!("no {} token to sign with", carrier.as_str()), bookmark: None },
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

/// Fires the worker's cron once (`wrangler dev --test-scheduled`); the answer's status.
fn fire_cron_once(api: &Client) -> u16 {
    api.call("GET", "/__scheduled?cron=*+*+*+*+*", "", None).status
}

fn fire_cron(api: &Client, report: &mut Report) {
    let status = fire_cron_once(api);
    report.crons += 1;
    if status != 200 {
        report.problem(format!("the cron answered {status}"));
    }
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

/// Every tenth inbound message carries one media item the in-process fake carrier serves (its
/// name and link); none without the fake, whose fetches are what is counted.
fn mms_item(target: &Target<'_>, tag: &str, i: usize) -> Option<(String, String)> {
    let carrier = target.carrier?;
    (i % 10 == 3).then(|| {
        let name = format!("chaos-{tag}-{i}.jpg");
        let url = format!("{}/media/{name}", carrier.base);
        (name, url)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(facts: usize, mix: Mix, rest: bool, reconcile: bool) -> Plan {
        Plan::new(&Config { facts, mix, ..Config::default() }, rest, reconcile)
    }

    #[test]
    fn the_default_run_mixes_every_kind() {
        let all = plan(500, Mix::All, true, true);
        assert_eq!(all, Plan { inbound: 266, ring: 75, messages: 62, rest: 10, scheduled: 10, lost: 5 });
        assert_eq!(all.facts(), 500);
    }

    #[test]
    fn what_a_target_cannot_support_goes_to_inbound_messages() {
        let bare = plan(500, Mix::All, false, false);
        assert_eq!((bare.rest, bare.lost, bare.inbound), (0, 0, 291));
        assert_eq!(bare.facts(), 500);
    }

    #[test]
    fn the_shares_add_up_to_the_facts_asked_for() {
        for facts in [50, 99, 100, 200, 333, 500, 1000] {
            for mix in [Mix::All, Mix::Inbound, Mix::Ring] {
                for (rest, reconcile) in [(true, true), (true, false), (false, false)] {
                    assert_eq!(plan(facts, mix, rest, reconcile).facts(), facts, "{facts} {mix:?}");
                }
            }
            // Two receipts per message: an odd count rounds up.
            assert_eq!(plan(facts, Mix::Outbound, true, true).facts(), facts.div_ceil(2) * 2);
        }
    }

    #[test]
    fn a_failure_has_two_words_at_twilio_and_plivo() {
        assert_eq!(final_word(Provider::Twilio, false), "undelivered");
        assert_eq!(final_word(Provider::Plivo, false), "failed");
        assert_eq!(final_word(Provider::Plivo, true), "delivered");
        for word in ["undelivered", "failed"] {
            let twilio = exactly_core::twilio::message_status(word);
            let plivo = exactly_core::plivo::message_status(word);
            assert_eq!((twilio, plivo), (Some(exactly_core::message::MessageStatus::Failed), twilio), "{word}");
        }
    }
}
