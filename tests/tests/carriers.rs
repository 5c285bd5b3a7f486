//! Sending through each number's carrier (docs/contract.md §4): Twilio and Plivo numbers send
//! through their own REST APIs, their status callbacks for those sends move the same lattice,
//! and a send whose answer was lost is looked up at the carrier instead of sent twice.

use std::time::Duration;

use exactly_core::Timestamp;
use exactly_tests::{fresh_number, lit, Answer, Worker, ADMIN_TOKEN, PLIVO_TOKEN, TWILIO_TOKEN};
use serde_json::{json, Value};
use sim::carrier::Recorded;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "carriers::twilio_and_plivo_numbers_send_and_reordered_callbacks_deliver_once",
        twilio_and_plivo_numbers_send_and_reordered_callbacks_deliver_once,
    ),
    ("carriers::a_lost_answer_is_looked_up_not_sent_again", a_lost_answer_is_looked_up_not_sent_again),
    (
        "carriers::two_messages_of_one_pair_in_one_lookup_window_send_one_sms_each",
        two_messages_of_one_pair_in_one_lookup_window_send_one_sms_each,
    ),
    (
        "carriers::two_lost_answers_of_one_pair_are_left_to_the_operator_not_sent_again",
        two_lost_answers_of_one_pair_are_left_to_the_operator_not_sent_again,
    ),
    ("carriers::a_refused_send_fails_the_message_without_charge", a_refused_send_fails_the_message_without_charge),
    (
        "carriers::a_number_learns_its_carrier_from_its_first_message",
        a_number_learns_its_carrier_from_its_first_message,
    ),
    (
        "carriers::reconciliation_ends_a_call_whose_hangup_was_lost_and_settles_stale_messages",
        reconciliation_ends_a_call_whose_hangup_was_lost_and_settles_stale_messages,
    ),
];

#[derive(Clone, Copy, Debug)]
enum Carrier {
    Twilio,
    Plivo,
}

impl Carrier {
    fn name(self) -> &'static str {
        match self {
            Carrier::Twilio => "twilio",
            Carrier::Plivo => "plivo",
        }
    }

    fn send_path(self) -> &'static str {
        match self {
            Carrier::Twilio => "/2010-04-01/Accounts/ACe2e/Messages.json",
            Carrier::Plivo => "/v1/Account/MAe2e/Message/",
        }
    }

    /// The text of a send request, as the carrier names it.
    fn text(self, r: &Recorded) -> String {
        let field = match self {
            Carrier::Twilio => "Body",
            Carrier::Plivo => "text",
        };
        r.body[field].as_str().unwrap_or_default().to_owned()
    }
}

struct Sender {
    key: String,
    number: String,
}

fn sender(w: &Worker, carrier: Carrier) -> Sender {
    sender_through(w, carrier.name())
}

/// A new account with a number that sends through `carrier` (`telnyx`, `twilio` or `plivo`).
fn sender_through(w: &Worker, carrier: &str) -> Sender {
    let (account, key) = w.create_account(&format!("{carrier}-sender"));
    let number = fresh_number();
    let body = json!({"account_id": account, "phone_number": number, "carrier": carrier});
    let a = w.call("POST", "/admin/numbers", ADMIN_TOKEN, Some(&body), &[]);
    assert_eq!((a.status, &a.json()["carrier"]), (201, &json!(carrier)), "{}", a.body);
    Sender { key, number }
}

fn send(w: &Worker, s: &Sender, text: &str) -> String {
    let body = json!({"from": s.number, "to": "+15559990000", "text": text});
    let key = sim::random_hex();
    let a = w.call("POST", "/v1/messages", &s.key, Some(&body), &[("idempotency-key", &key)]);
    // 200: the same message, answered again after a 503 was tried again with its key.
    assert!(matches!(a.status, 200 | 201), "{}", a.body);
    if a.status == 201 {
        assert_eq!(a.json()["status"], "queued");
    }
    a.json()["id"].as_str().unwrap_or_default().to_owned()
}

fn message(w: &Worker, s: &Sender, id: &str) -> Value {
    w.call("GET", &format!("/v1/messages/{id}"), &s.key, None, &[]).json()
}

fn wait_status(w: &Worker, s: &Sender, id: &str, status: &str, secs: u64) -> Value {
    let mut last = Value::Null;
    let ok = w.eventually(Duration::from_secs(secs), || {
        last = message(w, s, id);
        last["status"] == status
    });
    assert!(ok, "{id} did not reach {status}: {last}");
    last
}

/// The send requests the carrier received with exactly this text.
fn sends(w: &Worker, carrier: Carrier, text: &str) -> Vec<Recorded> {
    w.carrier
        .requests(carrier.send_path())
        .into_iter()
        .filter(|r| r.method == "POST" && carrier.text(r) == text)
        .collect()
}

fn events(w: &Worker, id: &str, event_type: &str) -> i64 {
    w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {} AND type = {}",
        lit(id),
        lit(event_type)
    ))
}

/// A status callback for one of our sends, signed as the carrier signs it; returns the answer,
/// which says whether it enqueued a job.
fn callback(w: &Worker, carrier: Carrier, carrier_id: &str, status: &str) -> Answer {
    let (path, headers, body) = match carrier {
        Carrier::Twilio => {
            let url = format!("{}/webhooks/twilio", w.base);
            let params = [("MessageSid", carrier_id), ("MessageStatus", status), ("AccountSid", "ACe2e")];
            let (body, signature) = sim::twilio::sign(TWILIO_TOKEN, &url, &params);
            ("/webhooks/twilio", vec![("x-twilio-signature", signature)], body)
        }
        Carrier::Plivo => {
            let url = format!("{}/webhooks/plivo", w.base);
            let nonce = sim::random_hex();
            let params = [("MessageUUID", carrier_id), ("Status", status)];
            let (body, signature) = sim::plivo::sign_v3(PLIVO_TOKEN, &url, &nonce, &params);
            ("/webhooks/plivo", vec![("x-plivo-signature-v3", signature), ("x-plivo-signature-v3-nonce", nonce)], body)
        }
    };
    let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("content-type", "application/x-www-form-urlencoded"));
    let a = w.post(path, &all, body.as_bytes());
    assert_eq!(a.status, 200, "{carrier:?} {status}: {}", a.body);
    a
}

fn twilio_and_plivo_numbers_send_and_reordered_callbacks_deliver_once(w: &Worker) {
    for carrier in [Carrier::Twilio, Carrier::Plivo] {
        let s = sender(w, carrier);
        let text = format!("hello through {} [deliver] {}", carrier.name(), sim::random_hex());
        let id = send(w, &s, &text);
        let delivered = wait_status(w, &s, &id, "delivered", 60);
        assert_eq!(delivered["carrier"], carrier.name());
        let carrier_id = delivered["carrier_message_id"].as_str().unwrap_or_default().to_owned();
        let requests = sends(w, carrier, &text);
        assert_eq!(requests.len(), 1, "{carrier:?}: one send");
        let request = &requests[0];
        assert!(request.authorization.as_deref().is_some_and(|a| a.starts_with("Basic ")), "{carrier:?} basic auth");
        let callback_url = match carrier {
            Carrier::Twilio => &request.body["StatusCallback"],
            Carrier::Plivo => &request.body["url"],
        };
        assert_eq!(callback_url, &json!(format!("{}/webhooks/{}", w.base, carrier.name())));
        // The carrier repeats itself, out of order: delivered before sent, each three times.
        let mut answers = Vec::new();
        for status in ["delivered", "sent", "queued"] {
            for _ in 0..3 {
                answers.push(callback(w, carrier, &carrier_id, status));
            }
        }
        // Every job the callbacks enqueued (each answer says whether it did) has run.
        w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
        let shown = message(w, &s, &id);
        assert_eq!(shown["status"], "delivered", "{carrier:?}: {shown}");
        assert_eq!((events(w, &id, "message.sent"), events(w, &id, "message.delivered")), (1, 1), "{carrier:?}");
        let usage = w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id)));
        assert_eq!(usage, 1, "{carrier:?}: charged once");
        assert_eq!(sends(w, carrier, &text).len(), 1, "{carrier:?}: still one send");
    }
}

/// The carrier took the message but its answer never came (`[lost-answer]`), or it answered
/// 503 without taking it (`[flaky]`): the first is looked up at the carrier and recorded without
/// a second send; the second, a definite answer, is sent again, once, without a lookup.
fn a_lost_answer_is_looked_up_not_sent_again(w: &Worker) {
    for carrier in [Carrier::Twilio, Carrier::Plivo] {
        let s = sender(w, carrier);
        // From another number: Plivo's list shows no text, so a lookup tells two messages of one
        // sender to one recipient apart only by time, and this test is about each lookup alone.
        let other = sender(w, carrier);
        let lost = format!("answer lost [lost-answer] {}", sim::random_hex());
        let flaky = format!("first try refused [flaky] {}", sim::random_hex());
        let (lost_id, flaky_id) = (send(w, &s, &lost), send(w, &other, &flaky));
        let recorded = wait_status(w, &s, &lost_id, "sent", 90);
        assert_eq!(sends(w, carrier, &lost).len(), 1, "{carrier:?}: the lost answer was looked up, not sent again");
        let listed = w.carrier.requests(carrier.send_path()).into_iter().filter(|r| r.method == "GET").count();
        assert!(listed >= 1, "{carrier:?}: the carrier's list was read");
        assert!(recorded["carrier_message_id"].as_str().is_some_and(|c| !c.is_empty()));
        wait_status(w, &other, &flaky_id, "sent", 90);
        assert_eq!(sends(w, carrier, &flaky).len(), 2, "{carrier:?}: a 503 took nothing, so it was sent again");
        assert_eq!((events(w, &lost_id, "message.sent"), events(w, &flaky_id, "message.sent")), (1, 1));
        let ids = w.count(&format!(
            "SELECT COUNT(DISTINCT carrier_message_id) AS n FROM messages WHERE id IN ({}, {})",
            lit(&lost_id),
            lit(&flaky_id)
        ));
        assert_eq!(ids, 2, "{carrier:?}: each message has its own carrier id");
    }
}

/// The carrier ids of the messages with exactly this text that the carrier took: one per SMS,
/// however often it was requested (Telnyx: one per idempotency key).
fn taken(w: &Worker, carrier: &str, text: &str) -> Vec<String> {
    if carrier == "telnyx" {
        return w.carrier.keys_with_text(text).into_iter().flatten().filter_map(|k| w.carrier.carrier_id(&k)).collect();
    }
    w.carrier.taken_with_text(carrier, text)
}

/// Two messages of one sender to one recipient, both in one lookup window: one is taken but its
/// answer is lost (`[lost-answer]`), the other's first try is answered 503 (`[flaky]`), a
/// definite answer that took nothing. That one is not looked up (a lookup could find the first's
/// carrier id, not yet recorded, and take it, so the first would be sent again): it is sent
/// again. The lost one's lookup finds its own id. One SMS each, each message with the id its
/// own send made, through every carrier.
fn two_messages_of_one_pair_in_one_lookup_window_send_one_sms_each(w: &Worker) {
    for carrier in ["plivo", "twilio", "telnyx"] {
        let s = sender_through(w, carrier);
        let lost = format!("first, answer lost [lost-answer] {}", sim::random_hex());
        let flaky = format!("second, 503 first [flaky] {}", sim::random_hex());
        // The 503 first: its retry comes while, or right after, the other's send waits for the
        // answer that never comes, before that one is looked up and recorded.
        let flaky_id = send(w, &s, &flaky);
        assert!(
            w.eventually(Duration::from_secs(60), || w.carrier.sends_with_text(&flaky) > 0),
            "{carrier}: the first try of the second reached the carrier"
        );
        let lost_id = send(w, &s, &lost);
        let (first, second) = (wait_status(w, &s, &lost_id, "sent", 120), wait_status(w, &s, &flaky_id, "sent", 120));
        let (lost_taken, flaky_taken) = (taken(w, carrier, &lost), taken(w, carrier, &flaky));
        assert_eq!(lost_taken.len(), 1, "{carrier}: the first message is one SMS: {lost_taken:?}");
        assert_eq!(flaky_taken.len(), 1, "{carrier}: the second message is one SMS: {flaky_taken:?}");
        assert_eq!(first["carrier_message_id"], lost_taken[0].as_str(), "{carrier}: the first has its own id");
        assert_eq!(second["carrier_message_id"], flaky_taken[0].as_str(), "{carrier}: the second has its own id");
        assert_eq!((events(w, &lost_id, "message.sent"), events(w, &flaky_id, "message.sent")), (1, 1), "{carrier}");
    }
}

/// Two messages of one sender to one recipient whose answers were both lost: Plivo's list does
/// not show the text, so either carrier id may be either message's. Neither is adopted by a
/// guess and neither is sent again: both fail visibly as `send_unconfirmed`, uncharged, and
/// the carrier took each once.
fn two_lost_answers_of_one_pair_are_left_to_the_operator_not_sent_again(w: &Worker) {
    let carrier = Carrier::Plivo;
    let s = sender(w, carrier);
    let one = format!("one, answer lost [lost-answer] {}", sim::random_hex());
    let two = format!("two, answer lost [lost-answer] {}", sim::random_hex());
    let ids = [send(w, &s, &one), send(w, &s, &two)];
    for id in &ids {
        let failed = wait_status(w, &s, id, "failed", 120);
        assert_eq!(failed["error"]["code"], "send_unconfirmed", "{failed}");
        assert_eq!(failed["carrier_message_id"], Value::Null, "{failed}");
        assert_eq!(events(w, id, "message.failed"), 1);
        assert_eq!(events(w, id, "message.sent"), 0);
        assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(id))), 0);
    }
    assert_eq!((sends(w, carrier, &one).len(), sends(w, carrier, &two).len()), (1, 1), "neither was sent again");
}

fn a_refused_send_fails_the_message_without_charge(w: &Worker) {
    for carrier in [Carrier::Twilio, Carrier::Plivo] {
        let s = sender(w, carrier);
        let text = format!("nobody there [refuse] {}", sim::random_hex());
        let id = send(w, &s, &text);
        let failed = wait_status(w, &s, &id, "failed", 60);
        assert!(failed["error"]["code"].as_str().is_some_and(|c| !c.is_empty()), "{failed}");
        assert_eq!(sends(w, carrier, &text).len(), 1, "{carrier:?}: a refusal is not retried");
        assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id))), 0);
        assert_eq!(events(w, &id, "message.failed"), 1);
    }
}

/// A number assigned without a carrier sends through the one its first message came from.
fn a_number_learns_its_carrier_from_its_first_message(w: &Worker) {
    let (account, key) = w.create_account("learns-carrier");
    let number = fresh_number();
    w.create_number(&account, &number, &[]);
    let bad = json!({"account_id": account, "phone_number": fresh_number(), "carrier": "sprint"});
    let a = w.call("POST", "/admin/numbers", ADMIN_TOKEN, Some(&bad), &[]);
    assert_eq!((a.status, &a.json()["error"]["field"]), (422, &json!("carrier")), "{}", a.body);

    let sid = format!("SM{}", sim::random_hex());
    let url = format!("{}/webhooks/twilio", w.base);
    let params = [
        ("MessageSid", sid.as_str()),
        ("SmsStatus", "received"),
        ("From", "+15559990000"),
        ("To", &number),
        ("Body", "first word"),
    ];
    let (body, signature) = sim::twilio::sign(TWILIO_TOKEN, &url, &params);
    let a = w.post(
        "/webhooks/twilio",
        &[("x-twilio-signature", &signature), ("content-type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let learned =
        format!("SELECT COUNT(*) AS n FROM phone_numbers WHERE phone_number = {} AND carrier = 'twilio'", lit(&number));
    assert!(w.eventually(Duration::from_secs(30), || w.count(&learned) == 1), "the number learned twilio");
    let s = Sender { key, number };
    let text = format!("reply [deliver] {}", sim::random_hex());
    let id = send(w, &s, &text);
    let delivered = wait_status(w, &s, &id, "delivered", 60);
    assert_eq!(delivered["carrier"], "twilio");
    assert_eq!(sends(w, Carrier::Twilio, &text).len(), 1);
}

fn at(unix_seconds: i64) -> String {
    Timestamp::from_unix_millis(unix_seconds * 1000).to_rfc3339()
}

fn telnyx(w: &Worker, event_id: &str, event_type: &str, occurred_at: &str, payload: Value) -> Answer {
    let body = sim::telnyx::envelope(event_id, event_type, occurred_at, payload, 1);
    let a = w.deliver_telnyx(&body);
    assert_eq!(a.status, 200, "{event_type}: {}", a.body);
    a
}

/// The carrier's webhooks never come: a call's hangup and messages' final receipts are lost.
/// The cron asks the carrier, learns each ending once however often it runs, and the late real
/// webhooks afterwards change nothing.
fn reconciliation_ends_a_call_whose_hangup_was_lost_and_settles_stale_messages(_shared: &Worker) {
    let mut w = Worker::start_with(&[("RECONCILE_CALL_IDLE_SECS", "2"), ("RECONCILE_MESSAGE_SECS", "2")]);
    let t0 = sim::unix_now() - 120;

    // A call answered by its only target, whose caller then hangs up unheard.
    let (account, key) = w.create_account("reconcile");
    let number = fresh_number();
    w.create_number(&account, &number, &["+15557770001"]);
    let caller = format!("v3:caller-{}", sim::random_hex());
    let session = format!("sess-{}", sim::random_hex());
    let caller_payload = json!({"call_control_id": caller, "call_leg_id": format!("leg-{caller}"),
        "call_session_id": session, "from": "+15551230000", "to": number, "direction": "incoming"});
    let mut initiated = caller_payload.clone();
    initiated["state"] = json!("parked");
    telnyx(&w, &format!("init-{}", sim::random_hex()), "call.initiated", &at(t0), initiated);
    let mut dial = None;
    assert!(
        w.eventually(Duration::from_secs(30), || {
            dial = w.carrier.requests("/v2/calls").into_iter().find(|r| r.body["from"] == number.as_str());
            dial.is_some()
        }),
        "the target was dialled"
    );
    let dial = dial.unwrap_or_else(|| unreachable!());
    let leg_key = dial.idempotency_key.clone().unwrap_or_default();
    let leg = json!({"call_control_id": format!("v3:cc-{leg_key}"), "call_leg_id": format!("leg-{leg_key}"),
        "call_session_id": format!("sess-{leg_key}"), "from": dial.body["from"], "to": dial.body["to"],
        "direction": "outgoing", "client_state": dial.body["client_state"], "state": "answered"});
    telnyx(&w, &format!("answered-{}", sim::random_hex()), "call.answered", &at(t0 + 20), leg);
    let call_id = serde_json::from_str::<Value>(&sim::carrier::client_state(&dial).unwrap_or_default())
        .map(|tag| tag["call"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let status = || w.call("GET", &format!("/v1/calls/{call_id}"), &key, None, &[]).json();
    assert!(w.eventually(Duration::from_secs(30), || status()["status"] == "in_progress"), "answered");
    w.carrier.end_call(&caller, &at(t0 + 81));

    // Messages the carriers finished without a receipt reaching the worker.
    let telnyx_sender = Sender { key: key.clone(), number: number.clone() };
    let telnyx_id = send(&w, &telnyx_sender, &format!("no receipt {}", sim::random_hex()));
    let telnyx_carrier_id = wait_status(&w, &telnyx_sender, &telnyx_id, "sent", 30)["carrier_message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    w.carrier.set_message_status(&telnyx_carrier_id, "delivered");
    let twilio_sender = sender(&w, Carrier::Twilio);
    let twilio_id = send(&w, &twilio_sender, &format!("no callback {}", sim::random_hex()));
    let sid = wait_status(&w, &twilio_sender, &twilio_id, "sent", 30)["carrier_message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    w.carrier.set_message_status(&sid, "undelivered");

    // A condition of time itself: the 2 s RECONCILE_CALL_IDLE_SECS and RECONCILE_MESSAGE_SECS
    // this worker was given must pass before the cron asks the carrier.
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..4 {
        assert_eq!(w.cron().status, 200);
    }
    assert!(w.eventually(Duration::from_secs(30), || status()["status"] == "completed"), "ended: {}", status());
    let shown = status();
    assert_eq!((&shown["duration_secs"], &shown["billed_minutes"]), (&json!(61), &json!(2)), "{shown}");
    wait_status(&w, &telnyx_sender, &telnyx_id, "delivered", 30);
    wait_status(&w, &twilio_sender, &twilio_id, "failed", 30);

    // The late real webhooks: the caller's hangup and both final receipts.
    let hangup = telnyx(
        &w,
        &format!("hangup-{}", sim::random_hex()),
        "call.hangup",
        &at(t0 + 81),
        json!({
        "call_control_id": caller, "call_leg_id": format!("leg-{caller}"), "call_session_id": session,
        "hangup_cause": "normal_clearing", "hangup_source": "caller"}),
    );
    let receipt = telnyx(
        &w,
        &format!("fin-{}", sim::random_hex()),
        "message.finalized",
        &at(t0 + 90),
        json!({
        "id": telnyx_carrier_id, "direction": "outbound", "to": [{"status": "delivered"}], "errors": []}),
    );
    let undelivered = callback(&w, Carrier::Twilio, &sid, "undelivered");
    for _ in 0..2 {
        w.cron();
    }
    // The late webhooks' jobs (each answer says whether it enqueued one) have run.
    w.wait_jobs_of(&[&hangup, &receipt, &undelivered]);
    let shown = status();
    assert_eq!((&shown["status"], &shown["billed_minutes"]), (&json!("completed"), &json!(2)), "{shown}");
    assert_eq!(events(&w, &call_id, "call.completed"), 1);
    assert_eq!(w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&call_id))), 1);
    assert_eq!((events(&w, &telnyx_id, "message.delivered"), events(&w, &twilio_id, "message.failed")), (1, 1));
    let learned = w.events_count(
        "SELECT COUNT(*) AS n FROM carrier_events WHERE payload LIKE '%reconciliation%'
        OR carrier_event_id LIKE 'reconciled:%'",
    );
    assert_eq!(
        learned, 2,
        "the call's end and the Telnyx receipt were each learned once (Twilio's is keyed as the carrier keys it)"
    );
    let twilio_facts = w.events_count(&format!(
        "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier = 'twilio' AND carrier_event_id = {}",
        lit(&format!("{sid}:undelivered"))
    ));
    assert_eq!(twilio_facts, 1, "the learned status and the late callback are one fact");
    w.stop();
}
