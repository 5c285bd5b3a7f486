//! The chaos suite (docs/contract.md §7): no amount of carrier misbehaviour produces a second effect,
//! and no accepted event is lost, including under injected faults.

use std::time::Duration;

use exactly_tests::{fresh_number, lit, Worker, ADMIN_TOKEN, PLIVO_TOKEN, TWILIO_TOKEN};
use serde_json::{json, Value};
use sim::chaos::{Config, Mix, Target};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "chaos::five_hundred_facts_misdelivered_change_each_thing_once",
        five_hundred_facts_misdelivered_change_each_thing_once,
    ),
    (
        "chaos::d1_write_failure_answers_503_and_the_retry_stores_once",
        d1_write_failure_answers_503_and_the_retry_stores_once,
    ),
    ("chaos::queue_send_failure_loses_nothing", queue_send_failure_loses_nothing),
    ("chaos::lost_delivery_message_is_swept_and_delivered", lost_delivery_message_is_swept_and_delivered),
];

/// Its own worker, whose reconciliation asks about a call idle for 2 s (the default is two
/// hours), so the run can include answered calls whose hangup is lost.
fn five_hundred_facts_misdelivered_change_each_thing_once(_shared: &Worker) {
    let mut w = Worker::start_with(&[("RECONCILE_CALL_IDLE_SECS", "2"), ("RECONCILE_MESSAGE_SECS", "2")]);
    // The fake carrier as `make dev` runs it, delivering every unmarked message on its own: the
    // README runs chaos against that one.
    w.carrier.deliver_by_default();
    let config = Config {
        facts: 500,
        duplicate_rate: 0.35,
        resign_rate: 0.15,
        reorder_window: 32,
        parallelism: 16,
        stale_rate: 0.05,
        seed: 11,
        progress: false,
        mix: Mix::All,
        misbehaving_endpoints: true,
    };
    let target = Target {
        api: sim::api::Client::new(&w.base),
        signer: w.telnyx.clone(),
        admin_token: ADMIN_TOKEN.to_owned(),
        customer: Some(&w.customer),
        carrier: Some(&w.carrier),
        twilio_token: Some(TWILIO_TOKEN.to_owned()),
        plivo_token: Some(PLIVO_TOKEN.to_owned()),
        cron: true,
        reconcile: true,
    };
    let report = sim::chaos::run(&target, &config).unwrap_or_else(|e| panic!("chaos run: {e}"));
    let text = report.render();
    eprintln!("{text}");
    let facts: usize = report.facts.values().sum();
    assert_eq!(facts, 500, "{text}");
    let kinds = ["inbound", "receipt", "twilio_status", "plivo_status", "scheduled", "canceled", "ring_hangup"];
    for kind in kinds.into_iter().chain(["refused_call", "lost_hangup"]) {
        assert!(report.facts.get(kind).is_some_and(|n| *n > 0), "{kind} in the mix: {text}");
    }
    assert!(report.copies["duplicate"] * 100 >= facts * 30, "at least 30% duplicates: {text}");
    assert!(report.copies["resigned"] * 100 >= facts * 10, "at least 10% re-signed: {text}");
    assert!(report.copies.get("stale").copied().unwrap_or(0) > 0, "{text}");
    assert!(report.copies.get("late").copied().unwrap_or(0) > 0, "{text}");
    assert!(report.crons > 0, "{text}");
    assert!(report.mms > 0, "inbound MMS in the mix: {text}");
    assert_eq!(report.duplicate_effects, 0, "{text}\n{}", calls_out_that_went_again(&w));
    assert_eq!(report.missing, 0, "{text}");
    assert_eq!(report.applied, facts, "{text}");
    assert!(report.events_received.values().sum::<usize>() > 0, "{text}");
    // Beside an endpoint that hangs, one that resets every connection and one that flaps, the
    // counted endpoint got everything once (above) and each misbehaving one shows its state.
    assert_eq!(report.misbehaving.len(), 3, "{text}");
    assert!(report.ttw_p50_ms.is_some() && report.ttw_p99_ms.is_some(), "{text}");

    // The slow send's receipt met an outage of the dedupe database that outlasted its job's
    // every retry and its dead-letter write's every attempt, and was still applied (above).
    let given_up = w.log_lines(&["\"job\":\"dead_letter\"", "injected outage of the dedupe database"]);
    assert!(given_up >= 4, "every dead-letter attempt met the outage: {given_up} lines");

    // Beneath the API (this database holds only the run): every accepted event settled,
    // charges and dials exactly once.
    assert_eq!(
        w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE processed_at IS NULL OR error IS NOT NULL"),
        0,
        "every accepted event is processed, none failed"
    );
    assert_eq!(
        w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'reconciled:%:hangup'")
            as usize,
        report.created.reconciled_calls.len(),
        "each lost hangup was learned by reconciliation, once"
    );
    let usage = |id: &str| w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(id)));
    for message in &report.created.messages {
        assert_eq!(usage(message), 1, "{message} billed once");
    }
    for message in &report.created.canceled {
        assert_eq!(usage(message), 0, "{message} was canceled");
    }
    for call in &report.created.reconciled_calls {
        assert_eq!(usage(call), 1, "{call} billed once");
    }
    let account = lit(&report.created.account_id);
    let ledger = |kind: &str| {
        w.count(&format!(
            "SELECT COALESCE(SUM(quantity), 0) AS n FROM usage WHERE account_id = {account} AND kind = {}",
            lit(kind)
        ))
    };
    assert_eq!(ledger("sms_segments") as usize, report.created.messages.len(), "one segment per short message");
    let billed =
        w.count(&format!("SELECT COALESCE(SUM(billed_minutes), 0) AS n FROM calls WHERE account_id = {account}"));
    assert!(billed > 0);
    assert_eq!(ledger("call_minutes"), billed, "each completed call's minutes, once");
    let dialled = |call: &str, position: usize| {
        let key = format!("{call}:leg:{position}");
        w.carrier
            .requests("/v2/calls")
            .into_iter()
            .filter(|r| r.idempotency_key.as_deref() == Some(key.as_str()))
            .count()
    };
    for call in &report.created.calls {
        for (position, want) in [(1, 1), (2, 1), (3, 0)] {
            assert_eq!(dialled(call, position), want, "{call}: target {position} dialled");
        }
    }
    for call in &report.created.reconciled_calls {
        for (position, want) in [(1, 1), (2, 0)] {
            assert_eq!(dialled(call, position), want, "{call}: target {position} dialled");
        }
    }
    // Every delivery the customer received matches its schema and verifies.
    if let Err(problems) = w.audit_deliveries() {
        panic!("customer webhook deliveries that break the contract:\n{problems}");
    }
    // The running audit, over every row the run wrote, finds nothing.
    assert_eq!(w.cron().status, 200);
    let audit = w.call("GET", "/admin/audit", ADMIN_TOKEN, None, &[]);
    assert_eq!(audit.status, 200, "{}", audit.body);
    let audit = audit.json();
    assert_eq!(audit["found"], 0, "the audit found violations in the chaos run: {audit}");
    let checks: Vec<Value> = audit["databases"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["checks"].as_array().cloned().unwrap_or_default())
        .collect();
    for name in ["status_order", "charges", "one_success"] {
        let read: u64 = checks.iter().filter(|c| c["check"] == name).filter_map(|c| c["checked"].as_u64()).sum();
        assert!(read > 0, "{name} read the run's rows: {audit}");
    }
    w.stop();
}

fn inbound(event_id: &str, number: &str) -> String {
    sim::telnyx::inbound(event_id, &format!("msg-{event_id}"), number, "fault")
}

fn settled(w: &Worker, event_id: &str) -> bool {
    w.eventually(Duration::from_secs(60), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND processed_at IS NOT NULL",
            lit(event_id)
        )) == 1
    })
}

fn customer_number(w: &Worker) -> String {
    let (account, _) = w.create_account("faults");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    number
}

fn d1_write_failure_answers_503_and_the_retry_stores_once(w: &Worker) {
    let number = customer_number(w);
    let event_id = format!("fault-d1-write-{}", sim::random_hex());
    let body = inbound(&event_id, &number);
    let first = w.deliver_telnyx(&body);
    assert_eq!(first.status, 503, "{}", first.body);
    assert_eq!(first.json()["error"]["code"], "unavailable");
    assert_eq!(
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {}",
            lit(&event_id)
        )),
        0,
        "nothing half-written"
    );
    // The carrier's retry.
    assert_eq!(w.deliver_telnyx_at(&body, sim::unix_now() + 4).status, 200);
    assert!(settled(w, &event_id));
    assert_eq!(
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {}",
            lit(&event_id)
        )),
        1
    );
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM messages WHERE carrier_message_id = {}",
            lit(&format!("msg-{event_id}"))
        )),
        1
    );
}

fn queue_send_failure_loses_nothing(w: &Worker) {
    let number = customer_number(w);
    // Recovered by the carrier's retry (which re-enqueues the unprocessed event) ...
    let retried = format!("fault-queue-send-{}", sim::random_hex());
    let body = inbound(&retried, &number);
    assert_eq!(w.deliver_telnyx(&body).status, 503);
    assert_eq!(
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND processed_at IS NULL",
            lit(&retried)
        )),
        1
    );
    assert_eq!(w.deliver_telnyx_at(&body, sim::unix_now() + 4).json()["outcome"], "duplicate-requeued");
    assert!(settled(w, &retried), "processed through the duplicate's re-enqueue");
    // ... or, when the carrier gives up, by the sweeper (its clock moved past the 2 min mark).
    let swept = format!("fault-queue-send-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&swept, &number)).status, 503);
    w.events_sql(&format!(
        "UPDATE carrier_events SET created_at = created_at - 180000 WHERE carrier_event_id = {}",
        lit(&swept)
    ));
    assert_eq!(w.cron().status, 200);
    assert!(settled(w, &swept), "processed through the sweeper");
    for id in [&retried, &swept] {
        assert_eq!(
            w.count(&format!(
                "SELECT COUNT(*) AS n FROM messages WHERE carrier_message_id = {}",
                lit(&format!("msg-{id}"))
            )),
            1
        );
    }
}

fn lost_delivery_message_is_swept_and_delivered(w: &Worker) {
    let (account, key) = w.create_account("lost-delivery");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let path = format!("/fault-lose-delivery/{}", sim::random_hex());
    let a = w.call(
        "POST",
        "/v1/webhook_endpoints",
        &key,
        Some(&json!({"url": format!("{}{path}", w.customer.base), "event_types": ["message.received"]})),
        &[],
    );
    assert_eq!(a.status, 201, "{}", a.body);
    let endpoint = a.json()["id"].as_str().unwrap().to_owned();
    let event_id = format!("lost-{}", sim::random_hex());
    let accepted = w.deliver_telnyx(&inbound(&event_id, &number));
    assert_eq!(accepted.status, 200);
    assert!(settled(w, &event_id));
    // The event's job has run: its delivery's first queue message was sent, or lost, by then.
    w.wait_jobs_of(&[&accepted]);
    // Bounds the check below: a lost message leaves nothing to wait for; 3 s is long enough for
    // one that was not lost to be attempted (the queue's batch timeout is 1 s).
    std::thread::sleep(Duration::from_secs(3));
    assert!(w.customer.received(&path).is_empty(), "the delivery's queue message was lost");
    let pending = format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'pending'",
        lit(&endpoint)
    );
    assert_eq!(w.count(&pending), 1, "but the delivery row waits");
    // A minute and more later, the sweeper finds it.
    w.sql(&format!(
        "UPDATE webhook_deliveries SET next_attempt_at = next_attempt_at - 120000 WHERE endpoint_id = {}",
        lit(&endpoint)
    ));
    assert_eq!(w.cron().status, 200);
    let delivered = w.eventually(Duration::from_secs(30), || w.customer.received(&path).len() == 1);
    assert!(delivered, "the swept delivery arrived");
    // The sweep's message for the delivery, and any attempt its job scheduled, have run.
    let delivery = w.sql(&format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {}", lit(&endpoint)));
    let delivery = delivery[0]["id"].as_str().unwrap_or_default().to_owned();
    w.wait_jobs(&[(delivery, 1)]);
    assert_eq!(w.sent_as_recorded(&endpoint, &path), 1, "exactly once");
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'succeeded'",
            lit(&endpoint)
        )),
        1
    );
}

/// The worker's lines about a call out (a carrier send, a media copy) that did not end at its
/// first try, and any restart of the worker: what explains a carrier asked twice.
fn calls_out_that_went_again(w: &Worker) -> String {
    let log = w.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            let call_out = l.contains("\"job\":\"copy_media\"") || l.contains("\"job\":\"dispatch\"");
            let again = ["retried", "error", "elsewhere", "claimed", "not recorded"].iter().any(|w| l.contains(w));
            (call_out && again) || l.contains("restarted")
        })
        .collect();
    format!(
        "worker lines about calls out tried again ({}):\n{}",
        lines.len(),
        lines[lines.len().saturating_sub(60)..].join("\n")
    )
}
