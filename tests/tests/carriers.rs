//! Sending through each number's carrier (docs/contract.md §4): Twilio and Plivo numbers send
//! through their own REST APIs, their status callbacks for those sends move the same lattice,
//! and a send whose answer was lost is looked up at the carrier instead of sent twice.

use std::time::Duration;

use exactly_tests::{fresh_number, lit, Worker, ADMIN_TOKEN, PLIVO_TOKEN, TWILIO_TOKEN};
use serde_json::{json, Value};
use sim::carrier::Recorded;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "carriers::twilio_and_plivo_numbers_send_and_reordered_callbacks_deliver_once",
        twilio_and_plivo_numbers_send_and_reordered_callbacks_deliver_once,
    ),
    ("carriers::a_lost_answer_is_looked_up_not_sent_again", a_lost_answer_is_looked_up_not_sent_again),
    ("carriers::a_refused_send_fails_the_message_without_charge", a_refused_send_fails_the_message_without_charge),
    (
        "carriers::a_number_learns_its_carrier_from_its_first_message",
        a_number_learns_its_carrier_from_its_first_message,
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
    let (account, key) = w.create_account(&format!("{}-sender", carrier.name()));
    let number = fresh_number();
    let body = json!({"account_id": account, "phone_number": number, "carrier": carrier.name()});
    let a = w.call("POST", "/admin/numbers", ADMIN_TOKEN, Some(&body), &[]);
    assert_eq!((a.status, &a.json()["carrier"]), (201, &json!(carrier.name())), "{}", a.body);
    Sender { key, number }
}

fn send(w: &Worker, s: &Sender, text: &str) -> String {
    let body = json!({"from": s.number, "to": "+15559990000", "text": text});
    let a = w.call("POST", "/v1/messages", &s.key, Some(&body), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(a.json()["status"], "queued");
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

/// A status callback for one of our sends, signed as the carrier signs it.
fn callback(w: &Worker, carrier: Carrier, carrier_id: &str, status: &str) {
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
        for status in ["delivered", "sent", "queued"] {
            for _ in 0..3 {
                callback(w, carrier, &carrier_id, status);
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        let shown = message(w, &s, &id);
        assert_eq!(shown["status"], "delivered", "{carrier:?}: {shown}");
        assert_eq!((events(w, &id, "message.sent"), events(w, &id, "message.delivered")), (1, 1), "{carrier:?}");
        let usage = w.count(&format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(&id)));
        assert_eq!(usage, 1, "{carrier:?}: charged once");
        assert_eq!(sends(w, carrier, &text).len(), 1, "{carrier:?}: still one send");
    }
}

/// The carrier took the message but its answer never came (`[lost-answer]`), or it answered
/// 503 without taking it (`[flaky]`): the retry asks the carrier first, so the first case is
/// recorded without a second send and the second is sent again, once.
fn a_lost_answer_is_looked_up_not_sent_again(w: &Worker) {
    for carrier in [Carrier::Twilio, Carrier::Plivo] {
        let s = sender(w, carrier);
        let lost = format!("answer lost [lost-answer] {}", sim::random_hex());
        let flaky = format!("first try refused [flaky] {}", sim::random_hex());
        let (lost_id, flaky_id) = (send(w, &s, &lost), send(w, &s, &flaky));
        let recorded = wait_status(w, &s, &lost_id, "sent", 90);
        assert_eq!(sends(w, carrier, &lost).len(), 1, "{carrier:?}: the lost answer was looked up, not sent again");
        let listed = w.carrier.requests(carrier.send_path()).into_iter().filter(|r| r.method == "GET").count();
        assert!(listed >= 1, "{carrier:?}: the carrier's list was read");
        assert!(recorded["carrier_message_id"].as_str().is_some_and(|c| !c.is_empty()));
        wait_status(w, &s, &flaky_id, "sent", 90);
        assert_eq!(sends(w, carrier, &flaky).len(), 2, "{carrier:?}: a 503 took nothing, so it was sent again");
        assert_eq!((events(w, &lost_id, "message.sent"), events(w, &flaky_id, "message.sent")), (1, 1));
        let ids = w.sql(&format!(
            "SELECT COUNT(DISTINCT carrier_message_id) AS n FROM messages WHERE id IN ({}, {})",
            lit(&lost_id),
            lit(&flaky_id)
        ));
        assert_eq!(ids[0]["n"], 2, "{carrier:?}: each message has its own carrier id");
    }
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
