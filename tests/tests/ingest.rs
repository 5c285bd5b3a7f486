//! `POST /webhooks/telnyx`: verify, store once, enqueue (docs/contract.md §3).

use std::thread;
use std::time::Duration;

use exactly_tests::{lit, Worker};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("ingest::parallel_duplicates_store_one_row_and_process_once", parallel_duplicates_store_one_row_and_process_once),
    ("ingest::duplicate_after_processing_changes_nothing", duplicate_after_processing_changes_nothing),
    ("ingest::rejected_deliveries_store_nothing", rejected_deliveries_store_nothing),
    ("ingest::sweeper_requeues_an_event_whose_job_was_lost", sweeper_requeues_an_event_whose_job_was_lost),
    ("ingest::chunked_bodies_are_capped", chunked_bodies_are_capped),
];

/// POSTs `body` with `Transfer-Encoding: chunked` (no Content-Length): ureq streams a reader of
/// unknown length that way.
fn post_chunked(w: &Worker, headers: &[(&str, &str)], body: Vec<u8>) -> exactly_tests::Answer {
    let mut req = ureq::post(&format!("{}/webhooks/telnyx", w.base)).timeout(sim::api::TIMEOUT);
    for (name, value) in headers {
        req = req.set(name, value);
    }
    exactly_tests::Answer::from_result(req.send(std::io::Cursor::new(body)))
}

/// A body without Content-Length is read with the same 256 KiB cap: one over the cap is a 413
/// and stores nothing; a small signed one is read and accepted.
fn chunked_bodies_are_capped(w: &Worker) {
    let id = event_id("chunked");
    let body = message_received(&id);
    let h = w.telnyx.sign(body.as_bytes(), sim::unix_now());
    let signed = [("telnyx-timestamp", h.timestamp.as_str()), ("telnyx-signature-ed25519", h.signature.as_str())];
    let a = post_chunked(w, &signed, body.into_bytes());
    assert_eq!(a.status, 200, "a small chunked delivery is read whole: {}", a.body);
    assert_eq!(rows_for(w, &id), 1);

    let big = event_id("chunked-big");
    let padding = "x".repeat(300 * 1024);
    let body = sim::telnyx::envelope(&big, "message.received", "2026-11-30T05:20:01Z", json!({"text": padding}), 1);
    let h = w.telnyx.sign(body.as_bytes(), sim::unix_now());
    let signed = [("telnyx-timestamp", h.timestamp.as_str()), ("telnyx-signature-ed25519", h.signature.as_str())];
    let a = post_chunked(w, &signed, body.into_bytes());
    assert_eq!(a.status, 413, "over 256 KiB without Content-Length: {}", a.body);
    assert_eq!(a.json()["error"]["code"], "body_too_large", "{}", a.body);
    assert_eq!(rows_for(w, &big), 0);
}

fn event_id(tag: &str) -> String {
    format!("{tag}-{}", sim::random_hex())
}

fn message_received(id: &str) -> String {
    sim::telnyx::envelope(
        id,
        "message.received",
        "2026-11-30T05:20:01.000Z",
        json!({"id": format!("msg-{id}"), "direction": "inbound", "text": "hello",
               "from": {"phone_number": "+15550001111"}, "to": [{"phone_number": "+15550002222"}]}),
        1,
    )
}

fn rows_for(w: &Worker, id: &str) -> i64 {
    w.events_count(&format!(
        "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier = 'telnyx' AND carrier_event_id = {}",
        lit(id)
    ))
}

/// Waits until the event is settled (processed, or visibly failed: no account owns the
/// number these tests write to) and returns its row.
fn wait_processed(w: &Worker, id: &str) -> serde_json::Value {
    let mut row = serde_json::Value::Null;
    let done = w.eventually(Duration::from_secs(30), || {
        let rows = w.events_sql(&format!(
            "SELECT processed_at, attempts, error FROM carrier_events WHERE carrier_event_id = {}",
            lit(id)
        ));
        row = rows.first().cloned().unwrap_or_default();
        !row["processed_at"].is_null() || !row["error"].is_null()
    });
    assert!(done, "event {id} was not settled within {:?}: {row}", sim::api::patient(Duration::from_secs(30)));
    row
}

fn parallel_duplicates_store_one_row_and_process_once(w: &Worker) {
    let id = event_id("par");
    let body = message_received(&id);
    let answers: Vec<exactly_tests::Answer> = thread::scope(|s| {
        let handles: Vec<_> = (0..20).map(|_| s.spawn(|| w.deliver_telnyx(&body))).collect();
        handles.into_iter().map(|h| h.join().expect("delivery thread")).collect()
    });
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![200; 20], "every delivery of a valid event is answered 200");
    assert_eq!(rows_for(w, &id), 1, "20 deliveries of one event id store one row");

    let row = wait_processed(w, &id);
    assert_eq!(row["attempts"], 1, "processed once: {row}");
    // Duplicates that arrived before processing re-enqueued jobs (each answer says whether it
    // did); wait until every one of them has run, then recount.
    w.wait_jobs_of(&answers.iter().collect::<Vec<_>>());
    let row = wait_processed(w, &id);
    assert_eq!(row["attempts"], 1, "re-enqueued duplicate jobs must be no-ops: {row}");
}

fn duplicate_after_processing_changes_nothing(w: &Worker) {
    let id = event_id("dup");
    let body = message_received(&id);
    let first = w.deliver_telnyx(&body);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["outcome"], "accepted");
    wait_processed(w, &id);

    // A carrier retry: same event id, signed again later.
    let again = w.deliver_telnyx_at(&body, sim::unix_now() + 4);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["outcome"], "duplicate");
    assert_eq!(again.json()["id"], first.json()["id"], "the same stored event answers");
    // The retry enqueued nothing ("duplicate"): once the first delivery's job has run, the queue
    // holds nothing of this event.
    w.wait_jobs_of(&[&first, &again]);
    assert_eq!(rows_for(w, &id), 1);
    assert_eq!(wait_processed(w, &id)["attempts"], 1);
}

fn rejected_deliveries_store_nothing(w: &Worker) {
    let path = "/webhooks/telnyx";
    let mut cases: Vec<(&str, String, u16, String)> = Vec::new();
    // Clearly outside the window, timed at the moment of sending: the worker's clock moves on while
    // earlier cases run on a loaded machine. The exact edges are unit tests in core.
    let outside = exactly_core::SIGNATURE_TOLERANCE_SECS + 60;

    let stale = event_id("stale");
    let r = w.deliver_telnyx_at(&message_received(&stale), sim::unix_now() - outside);
    cases.push(("stale timestamp", stale, 401, r.body.clone()));
    assert_eq!(r.status, 401, "stale: {}", r.body);

    let future = event_id("future");
    let r = w.deliver_telnyx_at(&message_received(&future), sim::unix_now() + outside);
    assert_eq!(r.status, 401, "future: {}", r.body);
    cases.push(("future timestamp", future, 401, r.body));

    let unsigned = event_id("unsigned");
    let r = w.post(path, &[], message_received(&unsigned).as_bytes());
    assert_eq!(r.status, 401, "unsigned: {}", r.body);
    cases.push(("unsigned", unsigned, 401, r.body));

    let wrong = event_id("wrongkey");
    let body = message_received(&wrong);
    let h = sim::telnyx::Signer::generate().sign(body.as_bytes(), sim::unix_now());
    let r = w.post(
        path,
        &[("telnyx-timestamp", &h.timestamp), ("telnyx-signature-ed25519", &h.signature)],
        body.as_bytes(),
    );
    assert_eq!(r.status, 401, "wrong key: {}", r.body);
    cases.push(("wrong key", wrong, 401, r.body));

    // A small-order signature (R = identity, S = 0): accepted by lax verifiers for weak keys.
    let weak = event_id("weak");
    let body = message_received(&weak);
    let mut sig = [0u8; 64];
    sig[0] = 1;
    let sig = base64_std(&sig);
    let r = w.post(
        path,
        &[("telnyx-timestamp", &sim::unix_now().to_string()), ("telnyx-signature-ed25519", &sig)],
        body.as_bytes(),
    );
    assert_eq!(r.status, 401, "small order: {}", r.body);
    cases.push(("small-order signature", weak, 401, r.body));

    let tampered = event_id("tampered");
    let body = message_received(&tampered);
    let h = w.telnyx.sign(body.as_bytes(), sim::unix_now());
    let changed = body.replace("hello", "hellO");
    let r = w.post(
        path,
        &[("telnyx-timestamp", &h.timestamp), ("telnyx-signature-ed25519", &h.signature)],
        changed.as_bytes(),
    );
    assert_eq!(r.status, 401, "tampered: {}", r.body);
    cases.push(("body changed", tampered, 401, r.body));

    // Correctly signed, but not a Telnyx event.
    let malformed = event_id("malformed");
    let r = w.deliver_telnyx(&format!("id={malformed}&type=message.received"));
    assert_eq!(r.status, 400, "not JSON: {}", r.body);
    assert_eq!(r.json()["error"]["code"], "malformed_event");
    cases.push(("not JSON", malformed, 400, r.body));

    let no_id = event_id("noid");
    let r = w.deliver_telnyx(&json!({"data": {"event_type": "message.received", "note": no_id}}).to_string());
    assert_eq!(r.status, 400, "no data.id: {}", r.body);
    assert!(r.json()["error"]["message"].as_str().unwrap_or("").contains("data.id"), "{}", r.body);

    let big = event_id("big");
    let padding = "x".repeat(256 * 1024);
    let body = sim::telnyx::envelope(&big, "message.received", "2026-11-30T05:20:01Z", json!({"text": padding}), 1);
    let r = w.deliver_telnyx(&body);
    assert_eq!(r.status, 413, "oversized: {}", r.body);
    cases.push(("oversized", big, 413, r.body));

    for (what, id, status, body) in &cases {
        let error = serde_json::from_str::<serde_json::Value>(body).unwrap_or_default();
        assert!(error["error"]["code"].is_string(), "{what}: JSON error body expected, got {body}");
        assert_eq!(rows_for(w, id), 0, "{what} ({status}) must store nothing");
    }
    assert_eq!(
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE payload LIKE {}",
            lit(&format!("%{no_id}%"))
        )),
        0,
        "an event without data.id stores nothing"
    );
}

fn sweeper_requeues_an_event_whose_job_was_lost(w: &Worker) {
    // A row whose queue message never arrived, stored just now: too young for any sweep (other
    // tests fire the cron on this worker too), so only a job could process it.
    let id = event_id("lost");
    w.sql_at(
        "DB",
        &format!(
            "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at)
         VALUES ('telnyx', {}, 'message.received', {}, 0, {})",
            lit(&id),
            lit(&message_received(&id)),
            sim::unix_now() * 1000,
        ),
    );
    // Bounds the check below: no job names this row, so nothing can be waited for; 2 s is long
    // enough for any job that did to run (the queue's batch timeout is 1 s).
    thread::sleep(Duration::from_secs(2));
    let processed_at = || {
        w.events_sql(&format!("SELECT processed_at FROM carrier_events WHERE carrier_event_id = {}", lit(&id)))[0]
            ["processed_at"]
            .clone()
    };
    assert!(processed_at().is_null(), "nothing processes a row without a job until the sweeper runs");
    // Three minutes old now: past the sweeper's two.
    w.events_sql(&format!(
        "UPDATE carrier_events SET created_at = {} WHERE carrier_event_id = {}",
        (sim::unix_now() - 180) * 1000,
        lit(&id)
    ));
    let fired = w.cron();
    assert_eq!(fired.status, 200, "cron trigger: {}", fired.body);
    let row = wait_processed(w, &id);
    assert_eq!(row["attempts"], 1, "{row}");
}

fn base64_std(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
