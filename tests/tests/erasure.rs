//! Erasure (docs/contract.md §5, "Erasure"): one person's phone number leaves every table of
//! every database, and the dedupe keys stay, so a late retry of a carrier event is still a
//! duplicate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use exactly_tests::{fresh_number, lit, Worker, ADMIN_TOKEN};
use serde_json::{json, Value};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "erasure::an_erased_number_is_in_no_database_and_a_late_retry_is_still_a_duplicate",
        an_erased_number_is_in_no_database_and_a_late_retry_is_still_a_duplicate,
    ),
    (
        "erasure::an_erasure_while_a_carried_job_waits_leaves_it_nothing_to_write",
        an_erasure_while_a_carried_job_waits_leaves_it_nothing_to_write,
    ),
];

/// Every SQLite file under `dir` (D1 databases, the calls' own storage, the bucket's index).
fn sqlite_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sqlite_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "sqlite") {
            out.push(path);
        }
    }
}

/// The files whose rows, dumped as SQL, hold any of `needles`.
fn holding(w: &Worker, needles: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    sqlite_files(&w.dir.join("state"), &mut files);
    assert!(files.len() >= 3, "the worker's databases: {files:?}");
    files
        .iter()
        .filter_map(|file| {
            let out = Command::new("sqlite3").arg(file).arg(".dump").output().expect("run sqlite3");
            let dump = String::from_utf8_lossy(&out.stdout);
            let found: Vec<&&str> = needles.iter().filter(|n| dump.contains(**n)).collect();
            (!found.is_empty()).then(|| format!("{} holds {found:?}", file.display()))
        })
        .collect()
}

/// A person's number in an inbound SMS, an outbound one, a call that rings a target, and the
/// customer events of each: erased, it is in no row of any database file of the worker, the
/// messages and the call still exist (text empty, the number `[erased]`), a second erasure finds
/// nothing, and the inbound SMS's carrier webhook sent again is a duplicate.
fn an_erased_number_is_in_no_database_and_a_late_retry_is_still_a_duplicate(_shared: &Worker) {
    // Its own worker: the dumps read every database, which other tests write to.
    let w = Worker::start();
    let c = w.new_customer("erasure");
    let person = fresh_number();
    let encoded = person.replace('+', "%2B");
    let path = format!("/hook/{}", sim::random_hex());
    w.endpoint_at(&c, &path, &["message.received", "message.sent", "call.initiated"]);
    let secret_text = format!("my address is 12 Elm St {}", sim::random_hex());
    let inbound = sim::telnyx::envelope(
        &format!("e-{}", sim::random_hex()),
        "message.received",
        "2026-12-02T10:00:00Z",
        json!({
            "id": format!("m-{}", sim::random_hex()), "from": {"phone_number": person},
            "to": [{"phone_number": c.number}], "text": secret_text,
        }),
        1,
    );
    assert_eq!(w.deliver_telnyx(&inbound).status, 200);
    let out = json!({"from": c.number, "to": person, "text": "we will call you back"});
    let sent = w.call("POST", "/v1/messages", &c.key, Some(&out), &[]);
    assert_eq!(sent.status, 201, "{}", sent.body);
    let outbound = sent.json()["id"].as_str().expect("an id").to_owned();
    w.wait_status(&c, &outbound, "sent");
    // A call from the person to a number that rings a target.
    let ringing = fresh_number();
    w.create_number(&c.account, &ringing, &["+15557770001"]);
    let session = format!("sess-{}", sim::random_hex());
    let control = format!("v3:{}", sim::random_hex());
    let call = sim::telnyx::envelope(
        &format!("init-{}", sim::random_hex()),
        "call.initiated",
        "2026-12-02T10:01:00Z",
        json!({
            "call_control_id": control, "call_leg_id": format!("leg-{control}"), "call_session_id": session,
            "from": person, "to": ringing, "direction": "incoming", "state": "parked",
        }),
        1,
    );
    assert_eq!(w.deliver_telnyx(&call).status, 200);
    let dialled = w.eventually(Duration::from_secs(30), || {
        w.carrier.requests("/v2/calls").iter().any(|r| r.body["from"] == ringing.as_str())
    });
    assert!(dialled, "the target was dialled");
    assert!(w.eventually(Duration::from_secs(60), || w.customer.received(&path).len() >= 3), "three events delivered");
    assert!(!holding(&w, &[&person]).is_empty(), "the number is stored before the erasure");

    let erase = |body: &Value| w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(body), &[]);
    assert_eq!(erase(&json!({"phone_number": c.number})).status, 409, "an account's own number is refused");
    assert_eq!(erase(&json!({"phone_number": "12345"})).status, 422);
    let a = erase(&json!({ "phone_number": person }));
    assert_eq!(a.status, 200, "{}", a.body);
    let counts = a.json()["counts"].clone();
    assert_eq!((counts["messages"].clone(), counts["calls"].clone()), (json!(2), json!(1)), "{counts}");
    assert_eq!(counts["call_states"], 1, "{counts}");
    assert!(counts["customer_events"].as_u64() >= Some(3), "{counts}");
    assert!(counts["carrier_events"].as_u64() >= Some(2), "{counts}");
    let left = holding(&w, &[&person, &encoded, &secret_text]);
    assert!(left.is_empty(), "the number or its text is still stored:\n{}", left.join("\n"));
    let shown = w.message(&c, &outbound);
    assert_eq!((shown["to"].clone(), shown["text"].clone()), (json!("[erased]"), json!("")), "{shown}");
    // Nothing more to erase, and the record keeps no number.
    let again = erase(&json!({ "phone_number": person }));
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.json()["counts"].as_object().is_some_and(|m| m.values().all(|v| v == 0)), "{}", again.body);
    // The carrier retries the inbound SMS: a duplicate, no second message.
    let retry = w.deliver_telnyx(&inbound);
    assert_eq!((retry.status, retry.json()["outcome"].clone()), (200, json!("duplicate")), "{}", retry.body);
    let listed = w.call("GET", "/v1/messages?direction=inbound", &c.key, None, &[]).json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
    assert!(holding(&w, &[&person, &encoded]).is_empty(), "the retry stored nothing of the number");
}

/// An inbound message whose job carries its event (the number's owner already known, so it
/// would be processed with no read) is held by an injected fault until its sender is erased.
/// The erasure clears the stored payload; the job's copy must not bring the text back: no
/// message, no `message.received`, and the event fails as pruned.
fn an_erasure_while_a_carried_job_waits_leaves_it_nothing_to_write(w: &Worker) {
    let c = w.new_customer("erased-while-queued");
    let inbound = |event_id: &str, from: &str, text: &str| {
        sim::telnyx::envelope(
            event_id,
            "message.received",
            "2026-12-03T10:00:00Z",
            json!({
                "id": format!("m-{}", sim::random_hex()), "from": {"phone_number": from},
                "to": [{"phone_number": c.number}], "text": text,
            }),
            1,
        )
    };
    let settled = |event_id: &str| {
        w.eventually(Duration::from_secs(60), || {
            w.events_count(&format!(
                "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {}
                   AND (processed_at IS NOT NULL OR error IS NOT NULL)",
                lit(event_id)
            )) == 1
        })
    };
    // One message first: the worker reads, and remembers, the number's owner.
    let first = format!("e-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&first, &fresh_number(), "hello")).status, 200);
    assert!(settled(&first), "the first message was processed");

    let person = fresh_number();
    let secret_text = format!("my door code is {}", sim::random_hex());
    let held = format!("fault-hold-until-erased-{}", sim::random_hex());
    let answer = w.deliver_telnyx(&inbound(&held, &person, &secret_text));
    assert_eq!(answer.status, 200, "{}", answer.body);
    let row_id = answer.json()["id"].as_str().expect("an id").to_owned();
    let holding_it = w.eventually(Duration::from_secs(60), || {
        w.log_lines(&[&format!("\"id\":\"{row_id}\""), "injected hold until the event's payload is erased"]) >= 1
    });
    assert!(holding_it, "the job ran and was held");
    let a = w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(&json!({ "phone_number": person })), &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["counts"]["carrier_events"], 1, "{}", a.body);

    assert!(settled(&held), "the held event was settled after the erasure");
    let rows = w.events_sql(&format!("SELECT error FROM carrier_events WHERE carrier_event_id = {}", lit(&held)));
    assert!(rows[0]["error"].as_str().is_some_and(|e| e.contains("pruned")), "failed as pruned: {rows:?}");
    let written = w.count(&format!(
        "SELECT COUNT(*) AS n FROM messages WHERE from_number = {} OR text = {}",
        lit(&person),
        lit(&secret_text)
    ));
    assert_eq!(written, 0, "the erased message was written from the job's copy");
    let events = w.count(&format!(
        "SELECT COUNT(*) AS n FROM outbound_events WHERE payload LIKE {}",
        lit(&format!("%{secret_text}%"))
    ));
    assert_eq!(events, 0, "a customer event holds the erased text");
}
