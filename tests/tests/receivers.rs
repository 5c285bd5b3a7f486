//! The receiver snippets of docs/receivers, run as documented (the endpoint's secret in
//! `WEBHOOK_SECRET`, a port in `PORT`) against real deliveries of the worker: each verifies them
//! with its language's official Standard Webhooks library, and refuses a forged one.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exactly_tests::{lit, root, telnyx_inbound, Worker};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("receivers::the_node_receiver_verifies_real_deliveries", the_node_receiver_verifies_real_deliveries),
    ("receivers::the_python_receiver_verifies_real_deliveries", the_python_receiver_verifies_real_deliveries),
];

fn the_node_receiver_verifies_real_deliveries(w: &Worker) {
    receives(w, "node", Command::new("node").arg("docs/receivers/receiver.mjs"));
}

fn the_python_receiver_verifies_real_deliveries(w: &Worker) {
    let mut python = Command::new("python3");
    // Where `make test` installs the library (scripts/setup.sh): what `pip install` does elsewhere.
    python.arg("docs/receivers/receiver.py").env("PYTHONPATH", root().join(".tools/python"));
    receives(w, "python", &mut python);
}

/// Kills the receiver when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An endpoint of a new account served by `receiver`: a test event and an inbound message reach
/// it, each printed as verified and recorded by the worker as delivered; a delivery signed with
/// another secret is answered 400 and printed as refused.
fn receives(w: &Worker, name: &str, receiver: &mut Command) {
    let c = w.new_customer(&format!("receiver-{name}"));
    // The secret comes when the endpoint is made; the receiver's port once it listens.
    let body = json!({"url": "http://127.0.0.1:9/not-yet", "event_types": ["message.received"]});
    let made = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[]);
    assert_eq!(made.status, 201, "{}", made.body);
    let (id, secret) =
        (made.json()["id"].as_str().unwrap().to_owned(), made.json()["secret"].as_str().unwrap().to_owned());
    let child = receiver
        .current_dir(root())
        .env("WEBHOOK_SECRET", &secret)
        .env("PORT", "0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} receiver: {e}"));
    let mut running = Running(child);
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let stdout = running.0.stdout.take().expect("the receiver's stdout");
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
        }
    });
    let printed = || lines.lock().unwrap().clone();
    let mut port = None;
    let listening = w.eventually(Duration::from_secs(30), || {
        port = printed().iter().find_map(|l| l.strip_prefix("listening on ").map(str::to_owned));
        // A receiver that ended (a missing library, say) is not waited for.
        let ended = matches!(running.0.try_wait(), Ok(Some(_)));
        port.is_some() || ended
    });
    let listening = listening && port.is_some();
    assert!(listening, "the {name} receiver listens: {:?}", printed());
    let url = format!("http://127.0.0.1:{}/hooks", port.unwrap_or_default());
    let moved = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&json!({ "url": url })), &[]);
    assert_eq!(moved.status, 200, "{}", moved.body);

    let test = w.call("POST", &format!("/v1/webhook_endpoints/{id}/test"), &c.key, None, &[]);
    assert_eq!(test.status, 202, "{}", test.body);
    let inbound =
        telnyx_inbound(&format!("e-{}", sim::random_hex()), &format!("m-{}", sim::random_hex()), &c.number, "hi");
    assert_eq!(w.deliver_telnyx(&inbound).status, 200);
    let both = w.eventually(Duration::from_secs(60), || {
        let lines = printed();
        ["verified endpoint.test evt_", "verified message.received evt_"]
            .iter()
            .all(|start| lines.iter().any(|l| l.starts_with(start)))
    });
    assert!(both, "the {name} receiver verified both deliveries: {:?}", printed());
    let delivered = w.eventually(Duration::from_secs(30), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = {} AND status = 'succeeded'",
            lit(&id)
        )) == 2
    });
    assert!(delivered, "the worker recorded both as delivered to the {name} receiver");

    // Signed with another secret: refused.
    let forged = exactly_core::webhook::SigningSecret::from_bytes(&[9u8; 24]);
    let now = exactly_core::Timestamp::from_unix_seconds(sim::unix_now());
    let body = r#"{"id":"evt_forged","type":"message.received","data":{"id":"msg_forged"}}"#;
    let answer = ureq::post(&url)
        .timeout(sim::api::TIMEOUT)
        .set("webhook-id", "evt_forged")
        .set("webhook-timestamp", &now.unix_seconds().to_string())
        .set("webhook-signature", &forged.sign("evt_forged", now, body.as_bytes()))
        .set("content-type", "application/json")
        .send_string(body);
    let status = match answer {
        Ok(a) => a.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(e) => panic!("post to the {name} receiver: {e}"),
    };
    assert_eq!(status, 400, "the {name} receiver refuses a forged delivery");
    // A signature header that is not `v1,<base64>` at all: refused too, not a dropped connection.
    let garbled = ureq::post(&url)
        .timeout(sim::api::TIMEOUT)
        .set("webhook-id", "evt_forged")
        .set("webhook-timestamp", &now.unix_seconds().to_string())
        .set("webhook-signature", "garbled")
        .send_string(body);
    assert!(matches!(garbled, Err(ureq::Error::Status(400, _))), "the {name} receiver answers 400: {garbled:?}");
    let refused = w.eventually(Duration::from_secs(10), || printed().iter().any(|l| l.starts_with("refused: ")));
    assert!(refused, "the {name} receiver said it refused: {:?}", printed());
    assert!(!printed().iter().any(|l| l.contains("evt_forged") && l.starts_with("verified")), "{:?}", printed());
}
