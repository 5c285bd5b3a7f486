//! The messaging pipeline (docs/contract.md §3-§5, §7 invariants 1, 3, 4, 5, 6, 7): one message, one
//! status change, one charge and one customer event per fact.

use std::thread;
use std::time::Duration;

use exactly_tests::{fresh_number, lit, Customer, Worker, OPERATOR_PATH, PLIVO_TOKEN, TWILIO_TOKEN};
use serde_json::{json, Value};
use sim::telnyx::receipt;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "messaging::inbound_sms_replayed_makes_one_message_and_one_event",
        inbound_sms_replayed_makes_one_message_and_one_event,
    ),
    (
        "messaging::outbound_receipts_duplicated_resigned_and_reversed",
        outbound_receipts_duplicated_resigned_and_reversed,
    ),
    (
        "messaging::failure_receipt_twice_and_resigned_then_late_delivered",
        failure_receipt_twice_and_resigned_then_late_delivered,
    ),
    (
        "messaging::receipt_before_the_send_result_is_applied_after_it",
        receipt_before_the_send_result_is_applied_after_it,
    ),
    (
        "messaging::duplicated_receipts_while_the_send_is_slow_apply_once",
        duplicated_receipts_while_the_send_is_slow_apply_once,
    ),
    ("messaging::crash_after_commit_rerun_changes_nothing", crash_after_commit_rerun_changes_nothing),
    (
        "messaging::a_known_numbers_next_message_is_processed_from_its_job",
        a_known_numbers_next_message_is_processed_from_its_job,
    ),
    (
        "messaging::crash_before_the_processed_mark_changes_nothing_twice",
        crash_before_the_processed_mark_changes_nothing_twice,
    ),
    ("messaging::parked_receipts_expire_or_are_recovered_once", parked_receipts_expire_or_are_recovered_once),
    (
        "messaging::a_woken_receipt_the_queue_gave_up_is_applied_by_the_sweeper",
        a_woken_receipt_the_queue_gave_up_is_applied_by_the_sweeper,
    ),
    ("messaging::idempotency_key_means_one_message_and_one_send", idempotency_key_means_one_message_and_one_send),
    ("messaging::accounts_see_only_their_own_messages", accounts_see_only_their_own_messages),
    ("messaging::carrier_refusal_fails_the_message_without_charge", carrier_refusal_fails_the_message_without_charge),
    (
        "messaging::carrier_5xx_is_retried_with_the_same_idempotency_key",
        carrier_5xx_is_retried_with_the_same_idempotency_key,
    ),
    ("messaging::twilio_and_plivo_inbound_messages", twilio_and_plivo_inbound_messages),
    ("messaging::validation_and_auth_errors", validation_and_auth_errors),
    ("messaging::list_filters_and_paginates", list_filters_and_paginates),
    ("messaging::unknown_number_is_a_visible_failed_event", unknown_number_is_a_visible_failed_event),
    ("messaging::scheduled_message_is_sent_at_its_time_once", scheduled_message_is_sent_at_its_time_once),
    (
        "messaging::scheduled_message_due_during_a_restart_is_sent_once",
        scheduled_message_due_during_a_restart_is_sent_once,
    ),
    ("messaging::cancel_before_and_after_the_send", cancel_before_and_after_the_send),
    ("messaging::send_at_is_validated", send_at_is_validated),
    ("messaging::a_client_reads_its_own_writes_with_the_bookmark", a_client_reads_its_own_writes_with_the_bookmark),
];

fn uid(tag: &str) -> String {
    format!("{tag}-{}", sim::random_hex())
}

fn inbound(event_id: &str, carrier_message_id: &str, to: &str) -> String {
    exactly_tests::telnyx_inbound(event_id, carrier_message_id, to, "hello there")
}

/// Sends a message as a client does: with an Idempotency-Key (a fresh one unless `key`), so a
/// 503 is tried again.
fn send(w: &Worker, c: &Customer, text: &str, key: Option<&str>) -> (u16, Value) {
    let fresh = uid("key");
    let headers = [("idempotency-key", key.unwrap_or(&fresh))];
    let a = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": text})),
        &headers,
    );
    (a.status, a.json())
}

fn message(w: &Worker, c: &Customer, id: &str) -> Value {
    w.message(c, id)
}

fn wait_status(w: &Worker, c: &Customer, id: &str, status: &str) -> Value {
    w.wait_status(c, id, status)
}

fn events(w: &Worker, resource: &str, event_type: &str) -> i64 {
    w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {} AND type = {}",
        lit(resource),
        lit(event_type)
    ))
}

fn wait_settled(w: &Worker, carrier_event_ids: &[String]) {
    let list = carrier_event_ids.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    let total = carrier_event_ids.len() as i64;
    let ok = w.eventually(Duration::from_secs(60), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list}) AND (processed_at IS NOT
                NULL OR error IS NOT NULL)"
        )) == total
    });
    assert!(ok, "carrier events {list} not all settled");
}

fn inbound_sms_replayed_makes_one_message_and_one_event(w: &Worker) {
    let c = w.new_customer("inbound");
    let carrier_id = uid("in-msg");
    let event_id = uid("in-evt");
    let body = inbound(&event_id, &carrier_id, &c.number);
    for _ in 0..10 {
        assert_eq!(w.deliver_telnyx(&body).status, 200);
    }
    let statuses: Vec<u16> = thread::scope(|s| {
        let handles: Vec<_> = (0..10).map(|_| s.spawn(|| w.deliver_telnyx(&body).status)).collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(statuses, vec![200; 10]);
    // The same fact re-signed under a new event id.
    let resigned = uid("in-evt-resigned");
    assert_eq!(w.deliver_telnyx(&inbound(&resigned, &carrier_id, &c.number)).status, 200);
    wait_settled(w, &[event_id, resigned]);

    let rows = w.sql(&format!(
        "SELECT id, account_id, direction, status FROM messages WHERE carrier_message_id = {}",
        lit(&carrier_id)
    ));
    assert_eq!(rows.len(), 1, "one message: {rows:?}");
    assert_eq!(rows[0]["account_id"], c.account.as_str());
    assert_eq!(rows[0]["direction"], "inbound");
    let id = rows[0]["id"].as_str().unwrap();
    assert_eq!(events(w, id, "message.received"), 1);
    let shown = message(w, &c, id);
    assert_eq!((shown["text"].as_str(), shown["status"].as_str()), (Some("hello there"), Some("received")));
}

fn outbound_receipts_duplicated_resigned_and_reversed(w: &Worker) {
    let c = w.new_customer("receipts");
    let text = "x".repeat(200); // two GSM-7 segments
    let (status, sent) = send(w, &c, &text, None);
    assert_eq!(status, 201, "{sent}");
    assert_eq!(sent["segments"], 2);
    let id = sent["id"].as_str().unwrap().to_owned();
    let carrier_id = wait_status(w, &c, &id, "sent")["carrier_message_id"].as_str().unwrap().to_owned();
    // Nothing is charged before the carrier accepts it: the charge is written with the send's
    // result, never earlier (the dispatch job may have run before any read here could look).
    let charged = w.sql_for(
        &c.account,
        &format!(
            "SELECT u.created_at AS charged_at, m.created_at, m.sent_at FROM usage u JOIN messages m ON m.id = u.resource_id
             WHERE m.id = {}",
            lit(&id)
        ),
    );
    assert_eq!(charged.len(), 1, "one charge: {charged:?}");
    let (charged_at, created_at, sent_at) =
        (charged[0]["charged_at"].as_i64(), charged[0]["created_at"].as_i64(), charged[0]["sent_at"].as_i64());
    assert!(
        charged_at >= sent_at && sent_at >= created_at,
        "nothing is charged before the carrier accepts it: {charged:?}"
    );

    // Finalized before sent, each duplicated, and both re-signed under new ids.
    let mut ids = Vec::new();
    let finalized = uid("fin");
    let sent_receipt = uid("sent");
    for (event_id, status) in [(&finalized, "delivered"), (&sent_receipt, "sent")] {
        let body = receipt(event_id, &carrier_id, status, json!([]));
        for _ in 0..3 {
            assert_eq!(w.deliver_telnyx(&body).status, 200);
        }
        let resigned = format!("{event_id}-resigned");
        assert_eq!(w.deliver_telnyx(&receipt(&resigned, &carrier_id, status, json!([]))).status, 200);
        ids.push(event_id.clone());
        ids.push(resigned);
    }
    wait_settled(w, &ids);

    let shown = wait_status(w, &c, &id, "delivered");
    assert_eq!(shown["carrier_message_id"], carrier_id.as_str());
    assert_eq!(
        (&shown["charge"]["kind"], &shown["charge"]["quantity"]),
        (&json!("sms_segments"), &json!(2)),
        "{shown}"
    );
    assert_eq!(events(w, &id, "message.sent"), 1);
    assert_eq!(events(w, &id, "message.delivered"), 1);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id))), 1, "billed once");
    assert_eq!(w.count(&format!("SELECT SUM(quantity) AS n FROM usage WHERE account_id = {}", lit(&c.account))), 2);
    let usage = w.call("GET", "/v1/usage", &c.key, None, &[]).json();
    assert_eq!(usage["sms_segments"], 2, "{usage}");
    assert_eq!(w.carrier.sends_for(&id), 1, "the carrier was asked to send once");
    let history = w.count(&format!("SELECT COUNT(*) AS n FROM message_status_history WHERE message_id = {}", lit(&id)));
    assert_eq!(history, 2, "sent, delivered");
}

fn failure_receipt_twice_and_resigned_then_late_delivered(w: &Worker) {
    let c = w.new_customer("failure");
    let (_, sent) = send(w, &c, "will fail", None);
    let id = sent["id"].as_str().unwrap().to_owned();
    let carrier_id = wait_status(w, &c, &id, "sent")["carrier_message_id"].as_str().unwrap().to_owned();

    let failed = uid("failed");
    let errors = json!([{"code": "40300", "title": "Blocked as spam"}]);
    let body = receipt(&failed, &carrier_id, "delivery_failed", errors.clone());
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    let resigned = uid("failed-resigned");
    assert_eq!(w.deliver_telnyx(&receipt(&resigned, &carrier_id, "delivery_failed", errors)).status, 200);
    wait_settled(w, &[failed.clone(), resigned.clone()]);
    // A late delivered after failed changes nothing.
    let late = uid("late-delivered");
    assert_eq!(w.deliver_telnyx(&receipt(&late, &carrier_id, "delivered", json!([]))).status, 200);
    wait_settled(w, &[late]);

    let shown = message(w, &c, &id);
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["error"]["code"], "40300");
    assert_eq!(events(w, &id, "message.failed"), 1);
    assert_eq!(events(w, &id, "message.delivered"), 0);
}

/// The carrier delivers the receipt, then stalls its answer to the send past the worker's
/// timeout: the receipt waits for the send's result and applies after it, once.
///
/// That the receipt's job runs before the send's retry is up to the queue: on a loaded machine
/// both can come in one batch, and then the receipt finds the result already there. Each
/// message must end right either way; up to three are sent until one's receipt has waited, so
/// the wait itself is exercised.
fn receipt_before_the_send_result_is_applied_after_it(w: &Worker) {
    let c = w.new_customer("early-receipt");
    let mut waited = false;
    for _ in 0..3 {
        let text = format!("[receipt-first] hi {}", sim::random_hex());
        let (_, sent) = send(w, &c, &text, None);
        let id = sent["id"].as_str().unwrap().to_owned();
        let shown = wait_status(w, &c, &id, "delivered");
        let carrier_id = shown["carrier_message_id"].as_str().unwrap();
        assert_eq!(shown["status"], "delivered");
        let rows = w.events_sql(&format!(
            "SELECT 'cev_' || printf('%016x', id) AS id, attempts, processed_at, waiting_for FROM carrier_events
                WHERE carrier_event_id = {}",
            lit(&format!("{carrier_id}-delivered"))
        ));
        assert_eq!(rows.len(), 1);
        let row_id = rows[0]["id"].as_str().unwrap();
        waited = w.log_lines(&[&format!("\"id\":\"{row_id}\""), "\"outcome\":\"parked\""]) >= 1;
        assert_eq!(rows[0]["attempts"], 1, "waiting spent no tries: {rows:?}");
        assert!(rows[0]["waiting_for"].is_null(), "the send woke it: {rows:?}");
        assert_eq!(events(w, &id, "message.sent"), 1);
        assert_eq!(events(w, &id, "message.delivered"), 1);
        // The stalled first request and its retry both carried the message id as the key: one
        // message at the carrier.
        let keys: Vec<_> = w
            .carrier
            .requests("/v2/messages")
            .into_iter()
            .filter(|r| r.body["text"] == text.as_str())
            .map(|r| r.idempotency_key)
            .collect();
        assert_eq!(keys, vec![Some(id.clone()), Some(id.clone())]);
        assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id))), 1);
        if waited {
            break;
        }
    }
    assert!(waited, "in three messages, a receipt arrived before the send result and waited for it");
}

/// The carrier takes 7 s to answer the send while it delivers the message's receipt 14 times
/// (one event id) and the sweeper runs: the receipt waits for the send, and applies once.
fn duplicated_receipts_while_the_send_is_slow_apply_once(w: &Worker) {
    let c = w.new_customer("slow-send");
    let (_, sent) = send(w, &c, "[slow-receipts] hello", None);
    let id = sent["id"].as_str().unwrap().to_owned();
    // Sweeps while the send is in flight spend nothing either: they run once the carrier holds
    // the send (it answers 7 s later) and the message is claimed.
    let in_flight = w.eventually(Duration::from_secs(60), || {
        w.carrier.sends_for(&id) == 1 && message(w, &c, &id)["status"] == "sending"
    });
    assert!(in_flight, "the send reached the carrier: {}", message(w, &c, &id));
    for _ in 0..3 {
        assert_eq!(w.cron().status, 200);
    }
    let shown = wait_status(w, &c, &id, "delivered");
    let carrier_id = shown["carrier_message_id"].as_str().unwrap().to_owned();
    assert_eq!(events(w, &id, "message.delivered"), 1);
    assert_eq!(events(w, &id, "message.sent"), 1);
    let rows = w.events_sql(&format!(
        "SELECT error, waiting_for FROM carrier_events WHERE carrier_event_id = {}",
        lit(&format!("{carrier_id}-delivered"))
    ));
    assert_eq!(rows.len(), 1, "one row however many deliveries");
    assert!(rows[0]["error"].is_null(), "{rows:?}");
    assert_eq!(w.carrier.sends_for(&id), 1, "one send");
}

/// An inbound message to `c`'s number, stored and processed: its carrier event's row id.
fn received_once(w: &Worker, c: &Customer) -> String {
    let carrier_id = uid("in-msg");
    let event_id = uid("in-evt");
    let answer = w.deliver_telnyx(&inbound(&event_id, &carrier_id, &c.number));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let row_id = answer.json()["id"].as_str().unwrap().to_owned();
    wait_settled(w, &[event_id]);
    let rows = w.sql(&format!("SELECT id, account_id FROM messages WHERE carrier_message_id = {}", lit(&carrier_id)));
    assert_eq!(rows.len(), 1, "one message: {rows:?}");
    assert_eq!(rows[0]["account_id"], c.account.as_str(), "in the number's account");
    assert_eq!(events(w, rows[0]["id"].as_str().unwrap(), "message.received"), 1);
    row_id
}

/// The job's log line of carrier event `row_id` with `outcome`, once it is written.
fn job_line(w: &Worker, row_id: &str, outcome: &str) -> String {
    let id = format!("\"id\":\"{row_id}\"");
    let outcome = format!("\"outcome\":\"{outcome}\"");
    let mut line = None;
    let found = w.eventually(Duration::from_secs(30), || {
        line = w.log().lines().find(|l| l.contains(&id) && l.contains(&outcome)).map(str::to_owned);
        line.is_some()
    });
    assert!(found, "a job line {id} {outcome}");
    line.unwrap_or_default()
}

/// With every account in `DB`, a new inbound message's job carries its event, and once the
/// worker has read a number's owner the next message to it is processed with no read before its
/// effects' batch (work::process). It lands as the first did: once, in the owner's account, with
/// one `message.received`. In the sharded layout every message is read.
fn a_known_numbers_next_message_is_processed_from_its_job(w: &Worker) {
    let c = w.new_customer("carried");
    // The first goes down the reading path (its owner is not known yet), unless an error had it
    // run again once it was: only the second is asked about.
    received_once(w, &c);
    let second = received_once(w, &c);
    let line = job_line(w, &second, "applied");
    assert_eq!(line.contains("\"event_read\":true"), exactly_tests::sharded(), "{line}");
    assert_eq!(line.contains("\"event_read\":false"), !exactly_tests::sharded(), "{line}");
}

fn crash_after_commit_rerun_changes_nothing(w: &Worker) {
    let c = w.new_customer("crash");
    // The number's owner known first, so that the crashing run goes from its job, and the rerun
    // finds the event processed.
    received_once(w, &c);
    let carrier_id = uid("crash-msg");
    let event_id = uid("fault-crash-after-commit");
    let answer = w.deliver_telnyx(&inbound(&event_id, &carrier_id, &c.number));
    assert_eq!(answer.status, 200);
    let row_id = answer.json()["id"].as_str().unwrap().to_owned();
    wait_settled(w, &[event_id]);
    // The first run committed and then failed before its ack; the queue ran it again.
    let rerun = w.eventually(Duration::from_secs(30), || {
        w.log_lines(&[&format!("\"id\":\"{row_id}\""), "\"outcome\":\"no-op\""]) >= 1
    });
    assert!(rerun, "the job ran again after the injected crash");
    assert!(w.log_lines(&["injected crash after commit"]) >= 1);
    // Its mark changed nothing, so it read the event and found it processed.
    assert!(job_line(w, &row_id, "no-op").contains("\"event_read\":true"));
    let rows = w.sql(&format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&carrier_id)));
    assert_eq!(rows.len(), 1);
    assert_eq!(events(w, rows[0]["id"].as_str().unwrap(), "message.received"), 1);
}

/// A crash right after the effects committed reruns the job. Where the mark is a commit of its
/// own (an account outside `DB`, as the sharded layout has), the crash falls between the two and
/// the rerun changes nothing but the mark; where it commits with the effects, the crash falls
/// before their announcement and the rerun changes nothing. For an inbound message and for a
/// receipt, each also delivered twice more while the first run is retried.
fn crash_before_the_processed_mark_changes_nothing_twice(w: &Worker) {
    let c = w.new_customer("crash-mark");
    let (_, sent) = send(w, &c, "crash before the mark", None);
    let out_id = sent["id"].as_str().unwrap().to_owned();
    let out_carrier_id = wait_status(w, &c, &out_id, "sent")["carrier_message_id"].as_str().unwrap().to_owned();
    let in_carrier_id = uid("crash-mark-in");
    let inbound_event = uid("fault-crash-before-mark-in");
    let receipt_event = uid("fault-crash-before-mark-rcpt");
    let bodies = [
        inbound(&inbound_event, &in_carrier_id, &c.number),
        receipt(&receipt_event, &out_carrier_id, "delivered", json!([])),
    ];
    let mut answers = Vec::new();
    for body in &bodies {
        answers.push(w.deliver_telnyx(body));
    }
    let ok = w.eventually(Duration::from_secs(30), || w.log_lines(&["injected crash between the effects"]) >= 2);
    assert!(ok, "both first runs crashed between their effects and their marks");
    for body in &bodies {
        answers.push(w.deliver_telnyx(body));
        answers.push(w.deliver_telnyx(body));
    }
    assert!(answers.iter().all(|a| a.status == 200), "{:?}", answers.iter().map(|a| &a.body).collect::<Vec<_>>());
    wait_settled(w, &[inbound_event.clone(), receipt_event.clone()]);
    // Where the mark commits with the effects, the event is settled after the first run: wait for
    // the crashed runs' reruns and the copies' jobs too, so the counts below see all they did.
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    let rows = w.events_sql(&format!(
        "SELECT carrier_event_id, processed_at IS NOT NULL AS processed, error, attempts FROM carrier_events
            WHERE carrier_event_id IN ({}, {}) ORDER BY carrier_event_id",
        lit(&inbound_event),
        lit(&receipt_event)
    ));
    assert_eq!(rows.len(), 2, "one row per event id: {rows:?}");
    for row in &rows {
        assert_eq!((row["processed"].as_i64(), &row["error"]), (Some(1), &Value::Null), "{rows:?}");
        // attempts counts the runs that wrote the mark: one.
        assert_eq!(row["attempts"], 1, "{rows:?}");
    }
    let messages = w.sql(&format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&in_carrier_id)));
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(events(w, messages[0]["id"].as_str().unwrap(), "message.received"), 1);
    assert_eq!(message(w, &c, &out_id)["status"], "delivered");
    assert_eq!(events(w, &out_id, "message.delivered"), 1);
    let history = w.count(&format!(
        "SELECT COUNT(*) AS n FROM message_status_history WHERE message_id = {} AND status = 'delivered'",
        lit(&out_id)
    ));
    assert_eq!(history, 1);
}

/// A receipt whose message never appears fails visibly after 24 hours, once however many sweeps
/// run; a receipt woken by its send whose job was lost (a crash after the send was recorded) is
/// enqueued again by the sweeper and applied once.
fn parked_receipts_expire_or_are_recovered_once(w: &Worker) {
    let c = w.new_customer("parked");
    // Never: parked, then 25 hours old.
    let never = uid("never-msg");
    let never_event = uid("never-rcpt");
    let stored = w.deliver_telnyx(&receipt(&never_event, &never, "delivered", json!([])));
    assert_eq!(stored.status, 200, "{}", stored.body);
    let stored = stored.json()["id"].as_str().unwrap().to_owned();
    let parked = w.eventually(Duration::from_secs(30), || {
        w.count(&format!("SELECT COUNT(*) AS n FROM parked_receipts WHERE carrier_message_id = {}", lit(&never))) == 1
    });
    assert!(parked, "the receipt parked");
    let day = 25 * 3600 * 1000;
    w.sql(&format!(
        "UPDATE parked_receipts SET parked_at = parked_at - {day} WHERE carrier_message_id = {}",
        lit(&never)
    ));
    w.events_sql(&format!(
        "UPDATE carrier_events SET created_at = created_at - {day} WHERE carrier_event_id = {}",
        lit(&never_event)
    ));
    for _ in 0..3 {
        assert_eq!(w.cron().status, 200);
    }
    let rows = w.events_sql(&format!(
        "SELECT error, processed_at, waiting_for FROM carrier_events WHERE carrier_event_id = {}",
        lit(&never_event)
    ));
    assert_eq!(rows.len(), 1);
    assert!(rows[0]["error"].as_str().unwrap_or("").contains("appeared within 24 hours"), "{rows:?}");
    assert!(rows[0]["processed_at"].is_null() && rows[0]["waiting_for"].is_null(), "{rows:?}");
    assert_eq!(
        w.count(&format!("SELECT COUNT(*) AS n FROM parked_receipts WHERE carrier_message_id = {}", lit(&never))),
        0
    );
    // The operator is told, once however many sweeps ran (seen: a receipt given up after 24 hours
    // raised no signal at all).
    let failed_signals = || {
        w.customer
            .received(OPERATOR_PATH)
            .iter()
            .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
            .filter(|v| v["type"] == "carrier_event.failed" && v["data"]["carrier_event_id"] == stored.as_str())
            .map(|v| v["id"].as_str().unwrap_or_default().to_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert!(
        w.eventually(Duration::from_secs(30), || failed_signals() == 1),
        "carrier_event.failed reached the operator"
    );
    assert_eq!(w.cron().status, 200);
    let written = w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE type = 'carrier_event.failed' AND resource_id = {}",
        lit(&format!("op:{stored}"))
    ));
    assert_eq!(written, 1, "one signal, however many sweeps");

    // Woken, job lost: the send is recorded (here: the message takes the carrier id the receipt
    // waits on) and the receipt marked woken, but nothing was enqueued.
    let (_, sent) = send(w, &c, "woken then lost", None);
    let id = sent["id"].as_str().unwrap().to_owned();
    wait_status(w, &c, &id, "sent");
    let lost = uid("lost-msg");
    let lost_event = uid("lost-rcpt");
    assert_eq!(w.deliver_telnyx(&receipt(&lost_event, &lost, "delivered", json!([]))).status, 200);
    let parked = w.eventually(Duration::from_secs(30), || {
        w.count(&format!("SELECT COUNT(*) AS n FROM parked_receipts WHERE carrier_message_id = {}", lit(&lost))) == 1
    });
    assert!(parked, "the second receipt parked");
    w.sql(&format!("UPDATE messages SET carrier_message_id = {} WHERE id = {}", lit(&lost), lit(&id)));
    // With the accounts sharded, recording a send writes its route in `DB` first.
    w.sql_at(
        "DB",
        &format!(
            "INSERT INTO message_routes (carrier, carrier_message_id, account_id) VALUES ('telnyx', {}, {})",
            lit(&lost),
            lit(&c.account)
        ),
    );
    w.sql(&format!(
        "UPDATE parked_receipts SET woken_at = {} WHERE carrier_message_id = {}",
        sim::unix_now() * 1000 - 180_000,
        lit(&lost)
    ));
    let applied = w.eventually(Duration::from_secs(60), || {
        w.cron();
        message(w, &c, &id)["status"] == "delivered"
    });
    assert!(applied, "the sweeper enqueued the woken receipt again");
    wait_settled(w, std::slice::from_ref(&lost_event));
    assert_eq!(events(w, &id, "message.delivered"), 1);
    // The next sweep that looks at it finds it settled and forgets it.
    w.sql(&format!(
        "UPDATE parked_receipts SET woken_at = woken_at - 180000 WHERE carrier_message_id = {} AND woken_at > 0",
        lit(&lost)
    ));
    assert_eq!(w.cron().status, 200);
    assert_eq!(
        w.count(&format!("SELECT COUNT(*) AS n FROM parked_receipts WHERE carrier_message_id = {}", lit(&lost))),
        0
    );
}

/// A receipt waits for its send (the carrier delivers it, once, before it answers the send);
/// the send wakes it, and then the dedupe database is out for
/// longer than the woken job's every retry and the dead-letter consumer's every attempt
/// (`fault-dedupe-outage` in the text: the carrier's id, and so the receipt's event id, carry
/// it; its dead-letter writes keep failing after). The queue has given the receipt up, and
/// nothing recorded it as failed: the sweeper must still apply it, once, and then forget it.
///
/// Seen before: the woken record was removed as soon as the job was enqueued, and the receipt
/// stayed pending for good, skipped by every sweep.
fn a_woken_receipt_the_queue_gave_up_is_applied_by_the_sweeper(w: &Worker) {
    let c = w.new_customer("outage");
    // The receipt must have waited for the send for its wake to be what is tested: up to three
    // messages, as whether the receipt's first job runs before the send is recorded is the
    // local queue's choice under load.
    for _ in 0..3 {
        let (_, sent) = send(w, &c, &format!("[receipt-first] fault-dedupe-outage {}", sim::random_hex()), None);
        let id = sent["id"].as_str().unwrap().to_owned();
        let carrier_id = wait_status(w, &c, &id, "sent")["carrier_message_id"].as_str().unwrap().to_owned();
        let event = format!("{carrier_id}-delivered");
        let rows = w.events_sql(&format!(
            "SELECT 'cev_' || printf('%016x', id) AS id FROM carrier_events WHERE carrier_event_id = {}",
            lit(&event)
        ));
        assert_eq!(rows.len(), 1, "one row for the receipt: {rows:?}");
        let row = rows[0]["id"].as_str().unwrap().to_owned();
        let waited = w.log_lines(&[&format!("\"id\":\"{row}\""), "\"outcome\":\"parked\""]) >= 1;
        // Every dead-letter attempt failed: the queue holds nothing of the receipt any more.
        let given_up = w.eventually(Duration::from_secs(240), || {
            w.log_lines(&[&row, "\"job\":\"dead_letter\"", "injected outage"]) >= 4
        });
        assert!(given_up, "the woken job and its dead letter failed on every attempt");
        if !waited {
            // Not woken (its job ran after the send): the sweeper finds it as any pending event.
            continue;
        }
        // Its dead letters are never recorded: only the sweeper's next look can apply it (here
        // soon: the clock of its wake moved back; the other tests' sweeps may look first).
        let earlier = |minutes: i64| {
            w.sql(&format!(
                "UPDATE parked_receipts SET woken_at = woken_at - {} WHERE carrier_event = {} AND woken_at > 0",
                minutes * 60_000,
                lit(&row)
            ));
        };
        earlier(3);
        let applied = w.eventually(Duration::from_secs(60), || {
            w.cron();
            message(w, &c, &id)["status"] == "delivered"
        });
        assert!(applied, "the sweeper enqueued the woken receipt again and it applied");
        wait_settled(w, std::slice::from_ref(&event));
        assert_eq!(events(w, &id, "message.delivered"), 1);
        // Applied: the next sweep that looks forgets it.
        let parked =
            || w.count(&format!("SELECT COUNT(*) AS n FROM parked_receipts WHERE carrier_event = {}", lit(&row)));
        earlier(3);
        assert_eq!(w.cron().status, 200);
        assert_eq!(parked(), 0, "forgotten once settled");
        assert_eq!(events(w, &id, "message.delivered"), 1);
        return;
    }
    panic!("in three messages, no receipt arrived before the send result");
}

fn idempotency_key_means_one_message_and_one_send(w: &Worker) {
    let c = w.new_customer("idem");
    let key = uid("key");
    let (first_status, first) = send(w, &c, "only once", Some(&key));
    let (second_status, second) = send(w, &c, "only once", Some(&key));
    // The first answer again, status and body (docs/contract.md §5, "Idempotency").
    assert_eq!((first_status, second_status), (201, 201));
    assert_eq!(first, second);
    let id = first["id"].as_str().unwrap().to_owned();
    wait_status(w, &c, &id, "sent");
    let (_, third) = send(w, &c, "only once", Some(&key));
    assert_eq!(third, first, "the kept answer, though the message has moved on since");
    // Only the first request ran (the others were answered from what it kept): its dispatch job,
    // if its answer showed the message queued, is the only one; wait until it has run.
    w.wait_jobs(&[(id.clone(), usize::from(first["status"] == "queued"))]);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM messages WHERE account_id = {}", lit(&c.account))), 1);
    assert_eq!(w.carrier.sends_for(&id), 1);
    let sent = &w
        .carrier
        .requests("/v2/messages")
        .into_iter()
        .find(|r| r.idempotency_key.as_deref() == Some(id.as_str()))
        .unwrap();
    assert_eq!(sent.body["from"], c.number.as_str());
    assert_eq!(sent.body["text"], "only once");
    assert_eq!(sent.authorization.as_deref(), Some("Bearer e2e-telnyx-api-key"));
    let (status, body) = send(w, &c, "something else", Some(&key));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
}

fn accounts_see_only_their_own_messages(w: &Worker) {
    let a = w.new_customer("alice");
    let b = w.new_customer("bob");
    let (_, sent) = send(w, &a, "private", None);
    let id = sent["id"].as_str().unwrap();
    let other = w.call("GET", &format!("/v1/messages/{id}"), &b.key, None, &[]);
    assert_eq!(other.status, 404, "{}", other.body);
    assert_eq!(other.json()["error"]["code"], "not_found");
    let list = w.call("GET", "/v1/messages", &b.key, None, &[]).json();
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "{list}");
    // Sending from another account's number is refused.
    let a2 = w.call(
        "POST",
        "/v1/messages",
        &b.key,
        Some(&json!({"from": a.number, "to": "+15559990000", "text": "x"})),
        &[],
    );
    assert_eq!(a2.status, 422);
    assert_eq!(a2.json()["error"]["field"], "from");
}

fn carrier_refusal_fails_the_message_without_charge(w: &Worker) {
    let c = w.new_customer("refused");
    let (_, sent) = send(w, &c, "[refuse] nope", None);
    let id = sent["id"].as_str().unwrap().to_owned();
    let shown = wait_status(w, &c, &id, "failed");
    assert_eq!(shown["error"]["code"], "40310");
    assert_eq!(events(w, &id, "message.failed"), 1);
    assert_eq!(events(w, &id, "message.sent"), 0);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id))), 0);
}

fn carrier_5xx_is_retried_with_the_same_idempotency_key(w: &Worker) {
    let c = w.new_customer("flaky");
    let (_, sent) = send(w, &c, "[flaky] try again", None);
    let id = sent["id"].as_str().unwrap().to_owned();
    wait_status(w, &c, &id, "sent");
    assert_eq!(w.carrier.sends_for(&id), 2, "one 503, then one success, both with the message id as key");
    assert_eq!(events(w, &id, "message.sent"), 1);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id))), 1);
}

fn twilio_and_plivo_inbound_messages(w: &Worker) {
    let c = w.new_customer("hmac-carriers");
    let sid = uid("SM");
    let url = format!("{}/webhooks/twilio", w.base);
    let params = [
        ("MessageSid", sid.as_str()),
        ("SmsStatus", "received"),
        ("From", "+15559990000"),
        ("To", c.number.as_str()),
        ("Body", "via twilio"),
    ];
    let (body, signature) = sim::twilio::sign(TWILIO_TOKEN, &url, &params);
    for _ in 0..3 {
        let a = w.post(
            "/webhooks/twilio",
            &[("x-twilio-signature", &signature), ("content-type", "application/x-www-form-urlencoded")],
            body.as_bytes(),
        );
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let bad = w.post("/webhooks/twilio", &[("x-twilio-signature", "AAAAAAAAAAAAAAAAAAAAAAAAAAA=")], body.as_bytes());
    assert_eq!(bad.status, 401);

    let uuid = uid("plivo");
    let plivo_url = format!("{}/webhooks/plivo", w.base);
    let to = c.number.trim_start_matches('+');
    let params =
        [("MessageUUID", uuid.as_str()), ("From", "15559990000"), ("To", to), ("Text", "via plivo"), ("Type", "sms")];
    let (body, signature) = sim::plivo::sign_v3(PLIVO_TOKEN, &plivo_url, "nonce-1", &params);
    for _ in 0..3 {
        let a = w.post(
            "/webhooks/plivo",
            &[("x-plivo-signature-v3", &signature), ("x-plivo-signature-v3-nonce", "nonce-1")],
            body.as_bytes(),
        );
        assert_eq!(a.status, 200, "{}", a.body);
    }
    wait_settled(w, &[format!("{sid}:received"), format!("{uuid}:received")]);
    for (carrier, id, text) in [("twilio", &sid, "via twilio"), ("plivo", &uuid, "via plivo")] {
        let rows = w.sql(&format!(
            "SELECT id, text, account_id FROM messages WHERE carrier = '{carrier}' AND carrier_message_id = {}",
            lit(id)
        ));
        assert_eq!(rows.len(), 1, "{carrier}: {rows:?}");
        assert_eq!(rows[0]["text"], text);
        assert_eq!(rows[0]["account_id"], c.account.as_str());
        assert_eq!(events(w, rows[0]["id"].as_str().unwrap(), "message.received"), 1);
    }
}

fn validation_and_auth_errors(w: &Worker) {
    let c = w.new_customer("validation");
    let post = |body: Value| w.call("POST", "/v1/messages", &c.key, Some(&body), &[]);
    for (body, field) in [
        (json!({"to": "+15559990000", "text": "x"}), "from"),
        (json!({"from": c.number, "text": "x"}), "to"),
        (json!({"from": c.number, "to": "5559990000", "text": "x"}), "to"),
        (json!({"from": c.number, "to": "+15559990000"}), "text"),
        (json!({"from": c.number, "to": "+15559990000", "text": "   "}), "text"),
        (json!({"from": "+15550000000", "to": "+15559990000", "text": "x"}), "from"),
    ] {
        let a = post(body.clone());
        assert_eq!(a.status, 422, "{body}: {}", a.body);
        assert_eq!(a.json()["error"]["field"], field, "{body}");
    }
    let a = w.post("/v1/messages", &[("authorization", &format!("Bearer {}", c.key))], b"not json");
    assert_eq!(a.status, 400);
    // Every 401 says which case it is (never whether a key exists), and it is the same code.
    let basic = w.post("/v1/messages", &[("authorization", "Basic dXNlcjpwYXNz")], b"{}");
    for (answer, says) in [
        (w.call("GET", "/v1/messages", "sk_wrong", None, &[]), "not a valid API key"),
        (w.call("GET", "/v1/messages", &format!("sk_{}", "0".repeat(64)), None, &[]), "not a valid API key"),
        (w.get("/v1/messages"), "no Authorization header"),
        (basic, "Authorization: Bearer"),
        (w.call("GET", "/v1/messages", exactly_tests::ADMIN_TOKEN, None, &[]), "the admin token"),
        (w.call("GET", "/admin/accounts", &c.key, None, &[]), "an account's key"),
        (w.call("POST", "/admin/accounts", "wrong-admin", Some(&json!({})), &[]), "does not match"),
    ] {
        let error = &answer.json()["error"];
        assert_eq!((answer.status, error["code"].as_str()), (401, Some("unauthorized")), "{}", answer.body);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{says:?} in {message:?}");
    }
    let taken = w.call(
        "POST",
        "/admin/numbers",
        exactly_tests::ADMIN_TOKEN,
        Some(&json!({"account_id": c.account, "phone_number": c.number})),
        &[],
    );
    assert_eq!(taken.status, 409, "{}", taken.body);
    // One number, assigned in parallel to two accounts, many times: one assignment wins, and the
    // number's route and row both name its account.
    let rival = w.new_customer("rival");
    let number = fresh_number();
    let answers: Vec<(u16, String)> = thread::scope(|s| {
        let tries: Vec<_> = (0..8)
            .map(|i| {
                let account = if i % 2 == 0 { &c.account } else { &rival.account };
                let number = &number;
                s.spawn(move || {
                    let body = json!({"account_id": account, "phone_number": number, "ring_targets": []});
                    let a = w.call("POST", "/admin/numbers", exactly_tests::ADMIN_TOKEN, Some(&body), &[]);
                    (a.status, account.clone())
                })
            })
            .collect();
        tries.into_iter().map(|t| t.join().expect("assignment thread")).collect()
    });
    let won: Vec<&(u16, String)> = answers.iter().filter(|(status, _)| *status == 201).collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    assert!(answers.iter().all(|(status, _)| [201, 409].contains(status)), "{answers:?}");
    let owner = &won[0].1;
    let rows = w.sql(&format!("SELECT account_id FROM phone_numbers WHERE phone_number = {}", lit(&number)));
    assert_eq!(rows, vec![json!({"account_id": owner})], "one row, the winner's");
    let route = w.sql_at("DB", &format!("SELECT account_id FROM number_routes WHERE phone_number = {}", lit(&number)));
    assert_eq!(route, vec![json!({"account_id": owner})], "one route, the winner's");
    let bad = w.call(
        "POST",
        "/admin/numbers",
        exactly_tests::ADMIN_TOKEN,
        Some(&json!({"account_id": "acct_nope", "phone_number": fresh_number()})),
        &[],
    );
    assert_eq!((bad.status, bad.json()["error"]["field"].as_str()), (422, Some("account_id")));
    // A shard move to a database the worker does not have names the field, and moves nothing.
    let unbound = w.call(
        "POST",
        "/admin/event_shards/move",
        exactly_tests::ADMIN_TOKEN,
        Some(&json!({"first": 0, "last": 0, "to": "EVENTS_62"})),
        &[],
    );
    assert_eq!((unbound.status, unbound.json()["error"]["field"].as_str()), (422, Some("to")), "{}", unbound.body);
    assert_eq!(w.call("GET", "/v1/messages?limit=0", &c.key, None, &[]).json()["error"]["field"], "limit");
    assert_eq!(w.call("GET", "/v1/messages?cursor=zzz", &c.key, None, &[]).json()["error"]["field"], "cursor");
    // An empty cursor is no cursor: the first page, as the document allows; so is an empty
    // time.
    for path in ["/v1/messages", "/v1/api_keys", "/v1/events"] {
        let first = w.call("GET", path, &c.key, None, &[]);
        let empty = w.call("GET", &format!("{path}?cursor="), &c.key, None, &[]);
        assert_eq!((empty.status, empty.json()["data"].clone()), (200, first.json()["data"].clone()), "{path}");
    }
    for (path, empty) in [("/v1/events", "until"), ("/v1/events", "since"), ("/v1/usage", "from")] {
        let answer = w.call("GET", &format!("{path}?{empty}="), &c.key, None, &[]);
        assert_eq!(answer.status, 200, "{path}?{empty}=: {}", answer.body);
    }
    assert_eq!(w.call("DELETE", "/v1/messages", &c.key, None, &[]).status, 405);
    // A browser pointed at the worker finds where things are.
    let home = w.get("/");
    let html = home.headers.iter().any(|(name, v)| name == "content-type" && v.starts_with("text/html"));
    assert_eq!((home.status, html), (200, true), "{}", home.body);
    for link in ["href=\"/console/\"", "href=\"/openapi.json\"", "href=\"/healthz\""] {
        assert!(home.body.contains(link), "{link} in {}", home.body);
    }
    // A method no route takes is not read as another: 405, naming the path's methods in `Allow`.
    for (method, path, allow) in [
        ("QUERY", "/v1/account", "GET, PATCH"),
        ("QUERY", "/v1/api_keys", "GET, POST"),
        ("PUT", "/v1/messages", "GET, POST"),
        ("DELETE", "/v1/messages", "GET, POST"),
        ("PATCH", "/admin/accounts", "GET, POST"),
    ] {
        let token = if path.starts_with("/admin") { exactly_tests::ADMIN_TOKEN } else { &c.key };
        let answer = w.call(method, path, token, None, &[]);
        let allowed = answer.headers.iter().find(|(name, _)| name == "allow").map(|(_, v)| v.as_str());
        assert_eq!((answer.status, allowed), (405, Some(allow)), "{method} {path}: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], "method_not_allowed", "{method} {path}");
    }
}

fn list_filters_and_paginates(w: &Worker) {
    let c = w.new_customer("lists");
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, m) = send(w, &c, &format!("page {i}"), None);
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    let first = w.call("GET", "/v1/messages?limit=2&direction=outbound", &c.key, None, &[]).json();
    let page1: Vec<&str> = first["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(page1.len(), 2);
    let cursor = first["next_cursor"].as_str().expect("a next cursor");
    let second =
        w.call("GET", &format!("/v1/messages?limit=2&direction=outbound&cursor={cursor}"), &c.key, None, &[]).json();
    let page2: Vec<&str> = second["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(page2.len(), 1);
    let mut all: Vec<&str> = page1.iter().chain(page2.iter()).copied().collect();
    all.sort_unstable();
    let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(all, expected, "the pages cover every message once");
    let inbound_only = w.call("GET", "/v1/messages?direction=inbound", &c.key, None, &[]).json();
    assert_eq!(inbound_only["data"].as_array().map(Vec::len), Some(0));
    assert_eq!(w.call("GET", "/v1/messages?status=bogus", &c.key, None, &[]).status, 422);
}

fn unknown_number_is_a_visible_failed_event(w: &Worker) {
    let event_id = uid("nobody");
    assert_eq!(w.deliver_telnyx(&inbound(&event_id, &uid("m"), "+15550001234")).status, 200);
    wait_settled(w, std::slice::from_ref(&event_id));
    let failed =
        w.call("GET", "/admin/carrier_events?status=failed&limit=100", exactly_tests::ADMIN_TOKEN, None, &[]).json();
    let entry = failed["data"].as_array().unwrap().iter().find(|e| e["carrier_event_id"] == event_id.as_str()).cloned();
    let entry = entry.unwrap_or_else(|| panic!("{event_id} listed as failed: {failed}"));
    assert!(entry["error"].as_str().unwrap().contains("+15550001234"), "{entry}");
}

/// An RFC 3339 time `secs` from now.
fn in_secs(secs: i64) -> String {
    exactly_core::Timestamp::from_unix_millis((sim::unix_now() + secs) * 1000).to_rfc3339()
}

fn schedule(w: &Worker, c: &Customer, text: &str, send_at: &str, key: Option<&str>) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = key.map(|k| vec![("idempotency-key", k)]).unwrap_or_default();
    let body = json!({"from": c.number, "to": "+15559990000", "text": text, "send_at": send_at});
    let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &headers);
    (a.status, a.json())
}

/// Schedules a message `lead` seconds ahead; returns it and the `send_at` asked for. A loaded
/// machine can answer only after that time has passed, and the worker then refuses it (`send_at`
/// must be in the future): asked again twice as far ahead, a few times.
fn schedule_ahead(w: &Worker, c: &Customer, text: &str, lead: i64) -> (Value, String) {
    let mut lead = lead;
    loop {
        let send_at = in_secs(lead);
        let (status, answer) = schedule(w, c, text, &send_at, None);
        if status == 201 {
            return (answer, send_at);
        }
        let late = sim::unix_millis() >= millis(&json!(send_at));
        assert!(late && answer["error"]["field"] == "send_at" && lead < 240, "refused in time: {status} {answer}");
        lead *= 2;
    }
}

/// How many dispatch jobs the sweeps of `w` enqueued, as their log lines count them.
fn swept_dispatches(w: &Worker) -> usize {
    w.log()
        .lines()
        .filter(|line| line.starts_with('{') && line.contains("\"cron\":\"sweep\""))
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|v| v["dispatches"].as_u64())
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .sum()
}

fn millis(rfc3339: &Value) -> i64 {
    rfc3339.as_str().and_then(exactly_core::Timestamp::parse_rfc3339).map(|t| t.unix_millis()).unwrap_or_default()
}

/// Sent by its delayed job, not before its time, once, however often the sweeper runs after.
fn scheduled_message_is_sent_at_its_time_once(w: &Worker) {
    let c = w.new_customer("scheduled");
    let (created, send_at) = schedule_ahead(w, &c, "later", 15);
    assert_eq!(created["status"], "scheduled");
    assert_eq!(millis(&created["send_at"]), millis(&json!(send_at)));
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    // A sweep before its time sends nothing. Whether this one ran before send_at is up to the
    // machine's load, so the check is the carrier's record of when each send arrived, below, not
    // a count taken now: a send by any job or sweep before send_at would show there.
    w.cron();
    let sent = wait_status(w, &c, &id, "sent");
    assert!(millis(&sent["sent_at"]) >= millis(&created["send_at"]), "sent at its time: {sent}");
    for _ in 0..3 {
        w.cron();
    }
    // The delayed dispatch job, and each one an early run of it enqueued again, has run; the
    // sweeps after the send enqueue nothing for it (they take only unsent messages).
    w.wait_jobs(&[(id.clone(), 1)]);
    let arrived = w.carrier.send_times(&id);
    let due = millis(&created["send_at"]);
    assert!(arrived.iter().all(|at| *at >= due), "nothing is sent before send_at ({due}): {arrived:?}");
    assert_eq!(arrived.len(), 1, "sent once");
    assert_eq!(events(w, &id, "message.sent"), 1);
    let history = w.sql(&format!("SELECT status FROM message_status_history WHERE message_id = {}", lit(&id)));
    assert_eq!(history, vec![json!({"status": "sent"})]);
}

/// Due while the worker is down: after the restart the sweeper finds it, and it is sent once
/// whichever of the delayed job and the sweeps comes first.
fn scheduled_message_due_during_a_restart_is_sent_once(_shared: &Worker) {
    // Its own worker: restarting the shared one would disturb the other tests.
    let mut w = Worker::start();
    let c = w.new_customer("scheduled-restart");
    let (created, _) = schedule_ahead(&w, &c, "through a restart", 10);
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    w.stop();
    // A condition of time itself: the message falls due while the worker is down.
    let due = millis(&created["send_at"]);
    while sim::unix_millis() <= due {
        thread::sleep(Duration::from_millis(100));
    }
    w.restart();
    for _ in 0..3 {
        w.cron();
    }
    wait_status(&w, &c, &id, "sent");
    w.cron();
    // The delayed job was lost with the stopped worker's queue; every dispatch job a sweep
    // enqueued (each sweep logs how many, and this worker has no other message) has run.
    // The cron waits for its tick's parts: each tick's sweep of the message's database has logged
    // what it enqueued. Four ticks were fired; one whose answer was lost and which was fired
    // again after all may have run twice (`Worker::cron`), and each run sweeps.
    let ticks = w.ticks_logged();
    assert!(ticks >= 4, "each of the four ticks logged: {ticks}");
    let database = format!("\"database\":\"{}\"", w.database_of(&c.account).as_deref().unwrap_or("DB"));
    assert_eq!(
        w.log_lines(&["\"cron\":\"sweep\"", "\"dispatches\"", &database]),
        ticks,
        "each tick's sweep logs what it enqueued"
    );
    w.wait_jobs(&[(id.clone(), swept_dispatches(&w))]);
    assert_eq!(w.carrier.sends_for(&id), 1, "sent once");
    assert_eq!(events(&w, &id, "message.sent"), 1);
    w.stop();
}

fn cancel_before_and_after_the_send(w: &Worker) {
    let c = w.new_customer("cancel");
    let other = w.new_customer("cancel-other");
    let cancel = |id: &str, key: &str| w.call("POST", &format!("/v1/messages/{id}/cancel"), key, None, &[]);
    // The cancel is the request that follows the schedule. A loaded machine can answer it only
    // after the message's time (seen: a request over 60 s), when it was rightly sent: then the
    // test starts again with a message due twice as far ahead. A refusal answered before the
    // message's time is a failure.
    let mut lead = 45;
    let (id, a) = loop {
        let (created, _) = schedule_ahead(w, &c, "never sent", lead);
        let id = created["id"].as_str().unwrap_or_default().to_owned();
        let a = cancel(&id, &c.key);
        if a.status == 200 {
            break (id, a);
        }
        let late = sim::unix_millis() >= millis(&created["send_at"]);
        assert!(late && lead < 180, "refused before its time: {}", a.body);
        lead *= 2;
    };
    assert_eq!(a.json()["status"], "canceled");
    assert_eq!(cancel(&id, &other.key).status, 404, "another account's message");
    assert_eq!(cancel(&id, &c.key).status, 200, "canceling again answers the same");
    // The delayed dispatch job has run at its time (one that came early enqueued itself again),
    // and a sweep after it finds nothing due.
    w.wait_jobs(&[(id.clone(), 1)]);
    w.cron();
    assert_eq!(message(w, &c, &id)["status"], "canceled");
    assert_eq!(w.carrier.sends_for(&id), 0, "a canceled message is never sent");
    let history = w.sql(&format!("SELECT status FROM message_status_history WHERE message_id = {}", lit(&id)));
    assert_eq!(history, vec![json!({"status": "canceled"})], "one history row");
    let listed = w.call("GET", "/v1/messages?status=canceled", &c.key, None, &[]).json();
    assert_eq!(listed["data"][0]["id"], id.as_str(), "{listed}");

    // Too late: once sent (and for a message never scheduled) the answer is 409.
    let (_, now) = send(w, &c, "sent at once", None);
    let now_id = now["id"].as_str().unwrap_or_default().to_owned();
    wait_status(w, &c, &now_id, "sent");
    let late = cancel(&now_id, &c.key);
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.json()["error"]["code"], "not_scheduled");
    assert_eq!(message(w, &c, &now_id)["status"], "sent");
    assert_eq!(w.carrier.sends_for(&now_id), 1);
}

fn send_at_is_validated(w: &Worker) {
    let c = w.new_customer("send-at");
    for send_at in [in_secs(-60), in_secs(8 * 24 * 3600), "tomorrow".to_owned()] {
        let (status, answer) = schedule(w, &c, "x", &send_at, None);
        assert_eq!(status, 422, "{send_at}: {answer}");
        assert_eq!(answer["error"]["field"], "send_at", "{answer}");
    }
    // The same Idempotency-Key for another time is a different message.
    let key = uid("send-at-key");
    let at = in_secs(3600);
    let (first, created) = schedule(w, &c, "x", &at, Some(&key));
    assert_eq!(first, 201, "{created}");
    let (again, same) = schedule(w, &c, "x", &at, Some(&key));
    assert_eq!((again, &same), (201, &created));
    let (other, answer) = schedule(w, &c, "x", &in_secs(7200), Some(&key));
    assert_eq!((other, &answer["error"]["code"]), (422, &json!("idempotency_key_reused")), "{answer}");
    let id = created["id"].as_str().unwrap_or_default();
    assert_eq!(w.call("POST", &format!("/v1/messages/{id}/cancel"), &c.key, None, &[]).status, 200);
    // A replay whose answer was lost may come after the time it asked for: the same message.
    let key = uid("send-at-replay");
    let soon = in_secs(20);
    let (first, created) = schedule(w, &c, "soon", &soon, Some(&key));
    assert_eq!(first, 201, "{created}");
    // Its time has passed once the worker has sent it.
    wait_status(w, &c, created["id"].as_str().unwrap_or_default(), "sent");
    let (again, same) = schedule(w, &c, "soon", &soon, Some(&key));
    assert_eq!((again, &same["id"]), (201, &created["id"]), "{same}");
}

/// `/v1` runs each request in a D1 session: every answer carries the session's bookmark, a
/// request that sends one back reads at least what it saw, and writes move it forward.
fn a_client_reads_its_own_writes_with_the_bookmark(w: &Worker) {
    let c = w.new_customer("bookmarks");
    let body = json!({"from": c.number, "to": "+15559990000", "text": "read me back"});
    let sent = w.call("POST", "/v1/messages", &c.key, Some(&body), &[]);
    assert_eq!(sent.status, 201, "{}", sent.body);
    let after_write = sent.bookmark.clone().expect("a write answers with a bookmark");
    let id = sent.json()["id"].as_str().unwrap().to_owned();

    let read = w.call("GET", &format!("/v1/messages/{id}"), &c.key, None, &[("x-d1-bookmark", &after_write)]);
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.json()["id"], id.as_str());
    let after_read = read.bookmark.clone().expect("a read answers with a bookmark");
    // D1's bookmarks order as text: a session never goes back.
    assert!(after_read >= after_write, "{after_read} < {after_write}");
    let listed = w.call("GET", "/v1/messages", &c.key, None, &[("x-d1-bookmark", &after_read)]);
    assert!(
        listed.json()["data"].as_array().is_some_and(|d| d.iter().any(|m| m["id"] == id.as_str())),
        "{}",
        listed.body
    );
    assert!(w.call("GET", "/v1/messages", &c.key, None, &[]).bookmark.is_some(), "no bookmark sent: one answered");

    let again = json!({"from": c.number, "to": "+15559990000", "text": "and again"});
    let second = w.call("POST", "/v1/messages", &c.key, Some(&again), &[("x-d1-bookmark", &after_read)]);
    assert_eq!(second.status, 201, "{}", second.body);
    let after_second = second.bookmark.clone().expect("a write answers with a bookmark");
    assert!(after_second > after_write, "a write moves the bookmark: {after_second} <= {after_write}");

    for bad in ["not a bookmark", "x'; --"] {
        let a = w.call("GET", "/v1/messages", &c.key, None, &[("x-d1-bookmark", bad)]);
        assert_eq!(a.status, 400, "{bad:?}: {}", a.body);
        assert!(a.body.contains("x-d1-bookmark"), "names the header: {}", a.body);
    }
    // The admin API is not a client's session.
    assert_eq!(w.call("GET", "/admin/accounts", exactly_tests::ADMIN_TOKEN, None, &[]).bookmark, None);
}
