//! Erasure (docs/contract.md §5, "Erasure"): one person's phone number leaves every table of
//! every database, and the dedupe keys stay, so a late retry of a carrier event is still a
//! duplicate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use exactly_tests::{fresh_number, lit, sharded, Worker, ADMIN_TOKEN};
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
    (
        "erasure::a_group_message_waiting_while_one_recipient_is_erased_is_delivered_without_them",
        a_group_message_waiting_while_one_recipient_is_erased_is_delivered_without_them,
    ),
    (
        "erasure::an_erasure_of_one_account_leaves_a_longer_number_and_another_accounts_pending_message",
        an_erasure_of_one_account_leaves_a_longer_number_and_another_accounts_pending_message,
    ),
    (
        "erasure::requests_at_once_are_one_erasure_and_one_in_its_tail_minute_waits_the_minute",
        requests_at_once_are_one_erasure_and_one_in_its_tail_minute_waits_the_minute,
    ),
    (
        "erasure::a_leg_and_an_event_written_for_an_old_call_after_pass_1_are_erased_by_the_tail",
        a_leg_and_an_event_written_for_an_old_call_after_pass_1_are_erased_by_the_tail,
    ),
    (
        "erasure::a_database_bound_while_an_erasure_runs_moves_none_of_its_steps",
        a_database_bound_while_an_erasure_runs_moves_none_of_its_steps,
    ),
];

/// Asks for an erasure and waits for it to finish: its record, as `GET /admin/erasures/{id}`
/// shows it once `state` is `finished`.
pub fn erased(w: &Worker, body: &Value) -> Value {
    let started = w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(body), &[]);
    assert_eq!(started.status, 202, "{}", started.body);
    let id = started.json()["id"].as_str().expect("an erasure id").to_owned();
    assert!(started.json()["counts"].is_object() && started.json()["state"].is_string(), "{}", started.body);
    let mut record = Value::Null;
    let done = w.eventually(Duration::from_secs(120), || {
        let shown = w.call("GET", &format!("/admin/erasures/{id}"), ADMIN_TOKEN, None, &[]);
        assert_eq!(shown.status, 200, "{}", shown.body);
        record = shown.json();
        record["state"] == "finished"
    });
    assert!(done, "the erasure finished: {record}");
    assert!(record["finished_at"].is_string(), "{record}");
    record
}

/// Asks for an erasure and waits until its pass 1 has ended (the tail not yet begun); its id.
fn until_the_tail(w: &Worker, body: &Value) -> String {
    let started = w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(body), &[]);
    assert_eq!(started.status, 202, "{}", started.body);
    let erasure = started.json()["id"].as_str().expect("an erasure id").to_owned();
    let row = format!("SELECT pass FROM erasures WHERE id = {}", lit(&erasure));
    let waiting =
        w.eventually(Duration::from_secs(60), || w.sql_at("DB", &row).first().is_some_and(|r| r["pass"] == 2));
    assert!(waiting, "pass 1 ended: {:?}", w.sql_at("DB", &row));
    erasure
}

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
/// customer events of each: erased (in pages, its record showing the counts and never the
/// number), it is in no row of any database file of the worker, the messages and the call still
/// exist (text empty, the number `[erased]`), a second erasure finds nothing, and the inbound
/// SMS's carrier webhook sent again is a duplicate. The ring target, erased in turn, leaves the
/// ring plan, the leg, the call's object and every payload; so does a second target of the plan
/// that was never dialled, which only the call's object held.
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
    let (target, spare) = (fresh_number(), fresh_number());
    w.create_number(&c.account, &ringing, &[&target, &spare]);
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
    assert_eq!(w.call("GET", "/admin/erasures/era_none", ADMIN_TOKEN, None, &[]).status, 404);
    let a = erased(&w, &json!({ "phone_number": person }));
    let counts = a["counts"].clone();
    assert_eq!((counts["messages"].clone(), counts["calls"].clone()), (json!(2), json!(1)), "{counts}");
    assert_eq!(counts["call_states"], 1, "{counts}");
    assert!(counts["customer_events"].as_u64() >= Some(3), "{counts}");
    assert!(counts["carrier_events"].as_u64() >= Some(2), "{counts}");
    assert!(!a.to_string().contains(&person), "the record holds no number: {a}");
    let left = holding(&w, &[&person, &encoded, &secret_text]);
    assert!(left.is_empty(), "the number or its text is still stored:\n{}", left.join("\n"));
    let shown = w.message(&c, &outbound);
    assert_eq!((shown["to"].clone(), shown["text"].clone()), (json!("[erased]"), json!("")), "{shown}");
    // Nothing more to erase.
    let again = erased(&w, &json!({ "phone_number": person }));
    assert!(again["counts"].as_object().is_some_and(|m| m.values().all(|v| v == 0)), "{again}");
    assert_ne!(again["id"], a["id"], "a finished erasure is not run again: a new one is");
    // The ring target is a person too: erased, it leaves the number's ring plan, the call's leg,
    // the call's object and the carrier events of the dial.
    assert!(!holding(&w, &[&target]).is_empty(), "the target is stored before its erasure");
    let t = erased(&w, &json!({ "phone_number": target }));
    assert_eq!((t["counts"]["calls"].clone(), t["counts"]["ring_targets"].clone()), (json!(1), json!(1)), "{t}");
    assert_eq!(t["counts"]["call_states"], 1, "{t}");
    let left = holding(&w, &[&target, &target.replace('+', "%2B")]);
    assert!(left.is_empty(), "the ring target is still stored:\n{}", left.join("\n"));
    let plan = w.sql(&format!("SELECT ring_targets FROM phone_numbers WHERE phone_number = {}", lit(&ringing)));
    assert_eq!(plan[0]["ring_targets"], json!([spare]).to_string(), "the other target stays, in its place: {plan:?}");
    // The second target, never dialled (the first still rings), is in the call's ring plan, held
    // by the call's object: erased, it leaves that too. An earlier call to the same number, which
    // ended before it reached the second target, never held it: it is neither counted nor asked.
    let ended = format!("call_{}", sim::random_hex());
    w.sql_for(
        &c.account,
        &format!(
            "INSERT INTO calls (id, account_id, direction, from_number, to_number, status, carrier, call_session_id,
                                call_control_id, call_leg_id, created_at, updated_at)
             VALUES ({id}, {}, 'inbound', {}, {}, 'completed', 'telnyx', {id}, 'c', 'l', 0, 0)",
            lit(&c.account),
            lit(&fresh_number()),
            lit(&ringing),
            id = lit(&ended)
        ),
    );
    assert!(!holding(&w, &[&spare]).is_empty(), "the spare target is stored before its erasure");
    let s = erased(&w, &json!({ "phone_number": spare }));
    assert_eq!((s["counts"]["calls"].clone(), s["counts"]["call_states"].clone()), (json!(1), json!(1)), "{s}");
    let left = holding(&w, &[&spare, &spare.replace('+', "%2B")]);
    assert!(left.is_empty(), "the never-dialled target is still stored:\n{}", left.join("\n"));
    // The carrier retries the inbound SMS: a duplicate, no second message.
    let retry = w.deliver_telnyx(&inbound);
    assert_eq!((retry.status, retry.json()["outcome"].clone()), (200, json!("duplicate")), "{}", retry.body);
    let listed = w.call("GET", "/v1/messages?direction=inbound", &c.key, None, &[]).json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
    assert!(holding(&w, &[&person, &encoded]).is_empty(), "the retry stored nothing of the number");
}

/// An inbound message whose job carries its event (the number's owner already known, so it
/// would be processed with no read) is held by an injected fault until its sender is erased.
/// Delivers `body`, a carrier event whose carried job the test build holds until its stored
/// payload changes (`fault-hold-until-erased`), waits until the job ran and was held, then
/// erases `person`: the erasure finds the one stored event naming them. Returns the event's id.
fn erased_while_held(w: &Worker, body: &str, person: &str) -> String {
    let answer = w.deliver_telnyx(body);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let row_id = answer.json()["id"].as_str().expect("an id").to_owned();
    let holding_it = w.eventually(Duration::from_secs(60), || {
        w.log_lines(&[&format!("\"id\":\"{row_id}\""), "injected hold until the event's payload is erased"]) >= 1
    });
    assert!(holding_it, "the job ran and was held");
    let a = erased(w, &json!({ "phone_number": person }));
    assert_eq!(a["counts"]["carrier_events"], 1, "{a}");
    row_id
}

/// The erasure clears the stored payload; the job's copy must not bring the text back: no
/// message, no `message.received`, and the event is settled as erased (not failed).
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
    let row_id = erased_while_held(w, &inbound(&held, &person, &secret_text), &person);

    assert!(settled(&held), "the held event was settled after the erasure");
    let rows = w
        .events_sql(&format!("SELECT processed_at, error FROM carrier_events WHERE carrier_event_id = {}", lit(&held)));
    let row = rows.iter().find(|r| !r["processed_at"].is_null() || !r["error"].is_null()).expect("the row");
    assert!(row["error"].is_null() && row["processed_at"].is_i64(), "settled as erased, not failed: {rows:?}");
    assert!(w.log_lines(&[&format!("\"id\":\"{row_id}\""), "\"outcome\":\"erased\""]) >= 1, "its log line says erased");
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

/// Another person's group message to the account's number and to the person, whose job waits
/// (it carries its event) while the person's number is erased: the erasure takes the number out
/// of the stored event rather than clearing it, and the job then writes the sender's message from
/// what is stored. The message is received and delivered once, with its text, and nothing of it
/// names the erased person.
fn a_group_message_waiting_while_one_recipient_is_erased_is_delivered_without_them(w: &Worker) {
    let c = w.new_customer("erased-recipient");
    let path = format!("/hook/{}", sim::random_hex());
    w.endpoint_at(&c, &path, &["message.received"]);
    let (sender, person) = (fresh_number(), fresh_number());
    let group = |event_id: &str, from: &str, text: &str, cc: Option<&str>| {
        let mut to = vec![json!({"phone_number": c.number})];
        to.extend(cc.map(|n| json!({"phone_number": n})));
        sim::telnyx::envelope(
            event_id,
            "message.received",
            "2026-12-03T10:00:00Z",
            json!({"id": format!("m-{}", sim::random_hex()), "from": {"phone_number": from}, "to": to, "text": text}),
            1,
        )
    };
    // One message first: the worker reads, and remembers, the number's owner.
    let first = format!("e-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&group(&first, &fresh_number(), "hello", None)).status, 200);
    let processed = |event_id: &str| {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND processed_at IS NOT NULL",
            lit(event_id)
        )) == 1
    };
    assert!(w.eventually(Duration::from_secs(60), || processed(&first)), "the first message was processed");

    let text = format!("see you all at six {}", sim::random_hex());
    let held = format!("fault-hold-until-erased-{}", sim::random_hex());
    erased_while_held(w, &group(&held, &sender, &text, Some(&person)), &person);

    assert!(w.eventually(Duration::from_secs(60), || processed(&held)), "the sender's message was processed");
    let digits = person.trim_start_matches('+');
    let stored = w.events_count(&format!(
        "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND error IS NULL
           AND instr(payload, {}) = 0 AND instr(payload, {}) > 0",
        lit(&held),
        lit(digits),
        lit(&text)
    ));
    assert_eq!(stored, 1, "the stored event keeps the sender's message, without the person");
    let written = w.count(&format!(
        "SELECT COUNT(*) AS n FROM messages WHERE from_number = {} AND text = {}",
        lit(&sender),
        lit(&text)
    ));
    assert_eq!(written, 1, "the sender's message is received once");
    let got = w.eventually(Duration::from_secs(60), || {
        w.customer.received(&path).iter().filter(|r| r.body.contains(&text)).count() == 1
    });
    assert!(got, "its message.received was delivered: {:?}", w.customer.received(&path).len());
    let named = w.count(&format!(
        "SELECT (SELECT COUNT(*) FROM messages WHERE instr(from_number || to_number || text, {d}) > 0)
              + (SELECT COUNT(*) FROM outbound_events WHERE instr(payload, {d}) > 0) AS n",
        d = lit(digits)
    ));
    assert_eq!(named, 0, "nothing names the erased person");
    assert!(w.customer.received(&path).iter().all(|r| !r.body.contains(digits)), "no webhook names them");
}

/// Two accounts hear from one person, and a third number that starts with the person's
/// (`+1555...12` and `+1555...123` are different people). The first account's messages are
/// erased with `account_id`: the person's message to the second account, whose event is still
/// unprocessed (its job was never sent), keeps its payload and is delivered with its text when
/// the carrier retries; the longer number's message and payload are untouched.
fn an_erasure_of_one_account_leaves_a_longer_number_and_another_accounts_pending_message(w: &Worker) {
    let a = w.new_customer("erasure-scoped-a");
    let b = w.new_customer("erasure-scoped-b");
    let b_path = format!("/hook/{}", sim::random_hex());
    w.endpoint_at(&b, &b_path, &["message.received"]);
    let person = fresh_number();
    let longer = format!("{person}3");
    let inbound = |event_id: &str, from: &str, to: &str, text: &str| {
        sim::telnyx::envelope(
            event_id,
            "message.received",
            "2026-12-05T10:00:00Z",
            json!({
                "id": format!("m-{event_id}"), "from": {"phone_number": from},
                "to": [{"phone_number": to}], "text": text,
            }),
            1,
        )
    };
    let to_a = format!("e-{}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&to_a, &person, &a.number, "to a")).status, 200);
    let from_longer = format!("e-{}", sim::random_hex());
    let longer_text = format!("another person {}", sim::random_hex());
    assert_eq!(w.deliver_telnyx(&inbound(&from_longer, &longer, &a.number, &longer_text)).status, 200);
    // The job of the person's message to b is never sent: its event waits, unprocessed.
    let to_b = format!("fault-queue-send-{}", sim::random_hex());
    let b_text = format!("for b only {}", sim::random_hex());
    let to_b_body = inbound(&to_b, &person, &b.number, &b_text);
    assert_eq!(w.deliver_telnyx(&to_b_body).status, 503);
    let messages_of = |number: &str| {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM messages WHERE from_number = {} AND account_id = {}",
            lit(number),
            lit(&a.account)
        ))
    };
    assert!(w.eventually(Duration::from_secs(60), || messages_of(&person) == 1 && messages_of(&longer) == 1));

    let record = erased(w, &json!({ "phone_number": person, "account_id": a.account }));
    assert_eq!(record["account_id"], json!(a.account), "{record}");
    assert_eq!(
        (record["counts"]["messages"].clone(), record["counts"]["carrier_events"].clone()),
        (json!(1), json!(1)),
        "{record}"
    );
    assert_eq!(messages_of(&person), 0, "a's message from the person is erased");
    let kept = w.count(&format!(
        "SELECT COUNT(*) AS n FROM messages WHERE from_number = {} AND text = {}",
        lit(&longer),
        lit(&longer_text)
    ));
    assert_eq!(kept, 1, "the longer number's message is untouched");
    let payloads = |event_id: &str| {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id = {} AND payload IS NOT NULL",
            lit(event_id)
        ))
    };
    assert_eq!((payloads(&to_a), payloads(&from_longer), payloads(&to_b)), (0, 1, 1), "only a's payload is cleared");

    // The carrier retries the message to b: it is processed, and delivered with its text.
    assert_eq!(w.deliver_telnyx_at(&to_b_body, sim::unix_now() + 4).json()["outcome"], "duplicate-requeued");
    let delivered =
        w.eventually(Duration::from_secs(60), || w.customer.received(&b_path).iter().any(|r| r.body.contains(&b_text)));
    assert!(delivered, "b's pending message from the person was delivered with its text");
}

/// Requests for one number's erasure at once make one record: every answer names it, and one row
/// runs. Asked again while it waits for its tail pass, it still waits the whole tail (here 20 s,
/// `E2E_ERASURE_TAIL_SECS`) from the end of pass 1 before reading what was written since, so a
/// message whose processing was under way is still found.
fn requests_at_once_are_one_erasure_and_one_in_its_tail_minute_waits_the_minute(_shared: &Worker) {
    const TAIL_SECS: i64 = 20;
    // Its own worker: the tail is longer than the shared one's.
    let w = Worker::start_with(&[("E2E_ERASURE_TAIL_SECS", &TAIL_SECS.to_string())]);
    let body = json!({"phone_number": fresh_number()});
    let ids: Vec<String> = std::thread::scope(|s| {
        let asks: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let a = w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(&body), &[]);
                    assert_eq!(a.status, 202, "{}", a.body);
                    a.json()["id"].as_str().expect("an erasure id").to_owned()
                })
            })
            .collect();
        asks.into_iter().map(|a| a.join().expect("an answer")).collect()
    });
    assert!(ids.iter().all(|id| *id == ids[0]), "one erasure for requests at once: {ids:?}");
    assert_eq!(w.count("SELECT COUNT(*) AS n FROM erasures"), 1, "one row");
    let id = ids[0].clone();
    // Pass 1 ends (nothing to find), and the record waits for its tail.
    let row = format!("SELECT pass, updated_at FROM erasures WHERE id = {}", lit(&id));
    let mut ended = 0;
    let waiting = w.eventually(Duration::from_secs(60), || {
        let rows = w.sql_at("DB", &row);
        ended = rows.first().and_then(|r| r["updated_at"].as_i64()).unwrap_or(0);
        rows.first().is_some_and(|r| r["pass"] == 2)
    });
    assert!(waiting, "pass 1 ended: {:?}", w.sql_at("DB", &row));
    let again = w.call("POST", "/admin/erasures", ADMIN_TOKEN, Some(&body), &[]);
    assert_eq!((again.status, again.json()["id"].as_str()), (202, Some(id.as_str())), "{}", again.body);
    let record = erased(&w, &body);
    assert_eq!(record["id"], id.as_str());
    let finished = w.sql_at("DB", &format!("SELECT finished_at FROM erasures WHERE id = {}", lit(&id)));
    let finished = finished.first().and_then(|r| r["finished_at"].as_i64()).expect("finished_at");
    assert!(
        finished >= ended + TAIL_SECS * 1000,
        "the tail began {} ms after pass 1 ended, not the {TAIL_SECS} s it waits",
        finished - ended
    );
}

/// A call that pass 1 read before it named the number (here a call stored before the erasure)
/// can still name it afterwards: a leg its object dialled, or an event built from its state, can
/// land between pass 1's read and the tail. Those rows are written straight into the account's
/// database once pass 1 has ended (the tail waits `E2E_ERASURE_TAIL_SECS`); the tail reads every
/// call again, matching its legs and its events' bodies, and erases both.
fn a_leg_and_an_event_written_for_an_old_call_after_pass_1_are_erased_by_the_tail(_shared: &Worker) {
    const TAIL_SECS: i64 = 20;
    // Its own worker: the tail is longer than the shared one's.
    let w = Worker::start_with(&[("E2E_ERASURE_TAIL_SECS", &TAIL_SECS.to_string())]);
    let c = w.new_customer("erasure-tail");
    let (person, caller) = (fresh_number(), fresh_number());
    let call = format!("call_{}", sim::random_hex());
    let (account, number) = (lit(&c.account), lit(&c.number));
    let id = lit(&call);
    w.sql_for(
        &c.account,
        &format!(
            "INSERT INTO calls (id, account_id, direction, from_number, to_number, status, carrier, call_session_id,
                                call_control_id, call_leg_id, created_at, updated_at)
             VALUES ({id}, {account}, 'inbound', {}, {number}, 'ringing', 'telnyx', {id}, 'c', 'l', 0, 0)",
            lit(&caller)
        ),
    );
    let body = json!({"phone_number": person});
    let erasure = until_the_tail(&w, &body);
    // Pass 1 has read the call; now its object dials the person and an event names the leg.
    let payload = json!({"data": {"id": call, "legs": [{"target": person, "outcome": "answered"}]}}).to_string();
    w.sql_for(
        &c.account,
        &format!(
            "INSERT INTO call_legs (id, call_id, position, target, outcome, created_at, updated_at)
             VALUES ({}, {id}, 0, {}, 'answered', 0, 0)",
            lit(&format!("leg_{}", sim::random_hex())),
            lit(&person)
        ),
    );
    w.sql_for(
        &c.account,
        &format!(
            "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at)
             VALUES ({}, {account}, 'call.answered', {id}, {}, 0)",
            lit(&format!("evt_{}", sim::random_hex())),
            lit(&payload)
        ),
    );
    let record = erased(&w, &body);
    assert_eq!(record["id"], erasure.as_str());
    assert_eq!(record["counts"]["calls"], 1, "{record}");
    let held = w.sql_for(
        &c.account,
        &format!(
            "SELECT (SELECT group_concat(target) FROM call_legs WHERE call_id = {id}) AS legs,
                    (SELECT group_concat(payload) FROM outbound_events WHERE resource_id = {id}) AS events,
                    (SELECT from_number FROM calls WHERE id = {id}) AS caller"
        ),
    );
    let held = held.first().cloned().unwrap_or_default();
    assert_eq!(held["legs"], "[erased]", "{held}");
    let events = held["events"].as_str().unwrap_or_default();
    assert!(!events.contains(&person) && events.contains("[erased]"), "{events}");
    assert_eq!(held["caller"], caller.as_str(), "the caller is another person: {held}");
}

/// A deploy that binds another account database while an erasure waits for its tail (here
/// 45 s, `E2E_ERASURE_TAIL_SECS`) moves none of its steps: the erasure keeps its steps by name,
/// so the tail still starts each table where pass 1 ended it, and reads the new database, which
/// holds a message of the person (as a move of shards there would bring), from its first row.
fn a_database_bound_while_an_erasure_runs_moves_none_of_its_steps(_shared: &Worker) {
    const TAIL_SECS: i64 = 45;
    // Its own worker: it is restarted with another database bound.
    let mut w = Worker::start_with(&[("E2E_ERASURE_TAIL_SECS", &TAIL_SECS.to_string())]);
    let c = w.new_customer("erasure-plan");
    let person = fresh_number();
    // The person's messages leave carrier events in the dedupe log, whose rows pass 1 marks.
    for _ in 0..8 {
        let event = format!("e-{}", sim::random_hex());
        let body = sim::telnyx::envelope(
            &event,
            "message.received",
            "2026-12-05T10:00:00Z",
            json!({"id": format!("m-{event}"), "from": {"phone_number": person}, "to": [{"phone_number": c.number}],
                   "text": "hello"}),
            1,
        );
        assert_eq!(w.deliver_telnyx(&body).status, 200);
    }
    let stored = w.eventually(Duration::from_secs(60), || {
        let rows =
            w.sql_for(&c.account, &format!("SELECT COUNT(*) AS n FROM messages WHERE from_number = {}", lit(&person)));
        rows.first().is_some_and(|r| r["n"] == 8)
    });
    assert!(stored, "the person's eight messages are stored");
    let body = json!({"phone_number": person});
    let erasure = until_the_tail(&w, &body);
    let (bound, added): (&[&str], &str) = if sharded() {
        (&["EVENTS_0", "ACCOUNTS_0", "ACCOUNTS_1", "ACCOUNTS_2"], "ACCOUNTS_2")
    } else {
        (&["ACCOUNTS_0"], "ACCOUNTS_0")
    };
    w.rebind(bound);
    let (account, id) = (lit(&c.account), lit(&format!("msg_{}", sim::random_hex())));
    w.sql_at(
        added,
        &format!("INSERT INTO accounts (id, name, api_key_hash, created_at) VALUES ({account}, 'moved', {account}, 0)"),
    );
    w.sql_at(
        added,
        &format!(
            "INSERT INTO messages (id, account_id, direction, from_number, to_number, text, segments, encoding, status,
                                   carrier, created_at, updated_at)
             VALUES ({id}, {account}, 'inbound', {}, {}, 'moved here', 1, 'GSM-7', 'received', 'telnyx', 0, 0)",
            lit(&person),
            lit(&c.number)
        ),
    );
    // Asked again (the restart may have lost the tail's queued page): the same erasure goes on.
    let record = erased(&w, &body);
    assert_eq!(record["id"], erasure.as_str());
    assert_eq!(record["counts"]["messages"], 9, "the eight, then the one in the new database: {record}");
    let moved = w.sql_at(added, &format!("SELECT from_number, text FROM messages WHERE id = {id}"));
    assert_eq!(
        moved.first().map(|r| (r["from_number"].clone(), r["text"].clone())),
        Some((json!("[erased]"), json!("")))
    );
}
