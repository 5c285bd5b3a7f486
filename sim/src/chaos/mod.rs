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

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use exactly_core::rng::Deterministic as Rng;
use exactly_core::webhook::EventType;

use crate::api::Client;
use crate::customer::CustomerEndpoint;
use crate::telnyx::Signer;

mod deliver;
mod facts;
mod plan;
mod verify;

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
                "time to webhook:      p50 {p50:.0} ms, p99 {p99:.0} ms (an inbound message's first accepted \
                 carrier delivery to its webhook at the counted endpoint, while the whole run's copies are \
                 absorbed{}; not an idle worker's latency)\n",
                if self.misbehaving.is_empty() { "" } else { ", beside the misbehaving endpoints" }
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

/// The ring targets of the ringing number, dialled in order.
const TARGETS: [&str; 3] = ["+15557770001", "+15557770002", "+15557770003"];
/// The ringing number's ring timeout (the number whose dials are refused keeps the default).
const RING_TIMEOUT_SECS: u32 = 20;
/// Where outbound messages go.
const RECIPIENT: &str = crate::telnyx::CUSTOMER_PHONE;
/// When the calls of the run start and, for those answered, when their first leg answers.
const INITIATED_AT: &str = "2026-11-30T10:00:00Z";
const LEG_ANSWERED_AT: &str = "2026-11-30T10:00:20Z";
/// How far ahead scheduled messages are due, and those that are canceled: further than a loaded
/// host takes to answer the requests that schedule them, and, for the canceled, the cancels.
const DUE_IN_SECS: i64 = 20;
const CANCELED_DUE_IN_SECS: i64 = 60;
/// How often the run fires the cron while it waits.
const CRON_EVERY: Duration = Duration::from_secs(5);

/// The customer events of the facts, which the counted endpoint subscribes to.
const COUNTED_TYPES: [EventType; 8] = EventType::OF_RESOURCES;

/// One run: what it was asked, the account it made, and what it has seen so far.
struct Run<'a, 't> {
    target: &'a Target<'t>,
    config: &'a Config,
    api: &'a Client,
    /// Marks everything this run makes (event ids, texts, endpoint paths).
    tag: String,
    /// The run's account's API key.
    key: String,
    rng: Rng,
    report: Report,
}

/// Runs the scenario, in its phases: the account and its numbers and endpoints; the messages
/// and calls whose facts the stream carries; the stream, with its copies, shuffled and sent in
/// bursts; the wait for everything to settle (with the late webhooks of what reconciliation
/// learned first); and the count, kind by kind, of what the platform made of it.
pub fn run(target: &Target<'_>, config: &Config) -> Result<Report, String> {
    let mut run = Run {
        target,
        config,
        api: &target.api,
        tag: crate::random_hex()[..8].to_owned(),
        key: String::new(),
        rng: Rng::new(config.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        report: Report::default(),
    };
    let numbers = run.set_up()?;
    let story = run.make_story(numbers)?;
    let (stream, late) = run.facts(&story);
    let delivered = run.deliver_all(&story, &stream, &late);
    run.verify(&story, delivered)?;
    Ok(run.report)
}

impl Run<'_, '_> {
    fn progress(&self, text: &str) {
        if self.config.progress {
            eprintln!("sim: {text}");
        }
    }

    /// Fires the worker's cron once (`wrangler dev --test-scheduled`), counting it.
    fn fire_cron(&mut self) {
        let status = fire_cron_once(self.api);
        self.count_cron(status);
    }

    fn count_cron(&mut self, status: u16) {
        self.report.crons += 1;
        if status != 200 {
            self.report.problem(format!("the cron answered {status}"));
        }
    }

    /// Polls `check` like [`wait_for`], firing the cron every [`CRON_EVERY`] meanwhile when the
    /// run may, as the passing minutes would.
    fn wait_with_cron<T>(&mut self, timeout: Duration, mut check: impl FnMut(&Self) -> Option<T>) -> Option<T> {
        let mut last_cron: Option<Instant> = None;
        wait_for(timeout, || {
            if self.target.cron && last_cron.is_none_or(|t| t.elapsed() >= CRON_EVERY) {
                self.fire_cron();
                last_cron = Some(Instant::now());
            }
            check(self)
        })
    }
}

/// Fires the worker's cron once (`wrangler dev --test-scheduled`); the answer's status.
fn fire_cron_once(api: &Client) -> u16 {
    api.call("GET", "/__scheduled?cron=*+*+*+*+*", "", None).status
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Polls `check` every 500 ms until it returns `Some` or `timeout`, [`crate::api::patient`], passes.
pub fn wait_for<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + crate::api::patient(timeout);
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

#[cfg(test)]
mod tests {
    use exactly_core::Provider;

    use super::plan::final_word;
    use super::plan::Plan;
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
