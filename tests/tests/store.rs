//! The store's guards against real D1 inside workerd: each check (`edge/src/testing/checks.rs`,
//! in the test build only) sets up fresh rows and runs one guarded statement twice. The first
//! run does what it should, the second changes nothing, and the rows after the second run are
//! the rows after the first.

use exactly_tests::Worker;
use serde_json::{json, Value};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[("store::every_guard_refuses_to_run_twice", every_guard_refuses_to_run_twice)];

/// (check, what the first run says, what the second says, whether the first changes the rows)
fn expectations() -> Vec<(&'static str, Value, Value, bool)> {
    vec![
        ("carrier_events.mark_processed", json!(true), json!(false), true),
        ("carrier_events.mark_failed", json!(true), json!(false), true),
        ("carrier_events.park_and_wake", Value::Null, json!([]), true),
        ("carrier_events.expire_park", json!(true), json!(false), true),
        // Woken between the cron's read and the expiry: neither run fails it.
        ("carrier_events.expire_after_wake", json!(false), json!(false), false),
        // Its event gone from where the expiry read it: nothing failed, the park kept.
        ("carrier_events.expire_moved_away", json!(false), json!(false), false),
        ("messages.claim", json!(true), json!(false), true),
        ("messages.record_sent", json!(true), json!(false), true),
        // Recorded after an erasure reached the row, by a dispatcher that read it before.
        ("messages.record_sent_after_erasure", json!(true), json!(false), true),
        ("messages.apply_report", json!(true), json!(false), true),
        ("messages.insert_inbound", json!(true), json!(false), true),
        ("messages.fail_undispatched", json!(true), json!(false), true),
        ("media.claim", json!(true), json!(false), true),
        ("media.record_stored", json!(true), json!(false), true),
        ("calls.record", json!(true), json!(false), true),
        ("calls.record_answered", json!(true), json!(false), true),
        ("calls.record_end", json!(true), json!(false), true),
        // An older write of a leg after a newer one: neither run changes it.
        ("calls.record_leg", json!(false), json!(false), false),
        ("deliveries.claim_attempt", json!(true), json!(false), true),
        ("deliveries.redrive", json!("Pending"), json!("NotFailed"), true),
        // Taken out of its endpoint's line with its first attempt claimed, once.
        ("deliveries.next_in_line", json!(1), json!("nothing taken"), true),
        // Its endpoint's filter decides at the gate: taken, nothing claimed.
        ("deliveries.next_in_line_filtered", json!("taken"), json!("nothing taken"), true),
        // Asked with no lease (a record whose success may move the circuit): taken, not claimed.
        ("deliveries.next_in_line_unleased", json!("taken"), json!("nothing taken"), true),
        // Its endpoint full: left in its line, since its gates and claim would put it back there.
        ("deliveries.next_in_line_full", json!("nothing taken"), json!("nothing taken"), false),
        // A queued delivery read with its first attempt claimed, once; then read in flight.
        ("deliveries.due_claiming", json!(1), json!("read"), true),
        // Its endpoint's filter decides at the gate: read, nothing claimed.
        ("deliveries.due_claiming_filtered", json!("read"), json!("read"), false),
        // Its endpoint full: into the line in the batch that read it, with no claim of its own.
        ("deliveries.due_claiming_full", json!("in line"), json!("in line"), true),
        // An older delivery in its endpoint's line, with room: behind it, in the same batch.
        ("deliveries.due_claiming_behind", json!("in line"), json!("in line"), true),
        // The batch that wrote the event writes its delivery with the first attempt claimed,
        // once; run again, it writes and claims nothing.
        ("deliveries.fan_out_claiming", json!({"claimed": 1, "queued": 0}), json!({"claimed": 0, "queued": 0}), true),
        // Three endpoints with room: one claimed, two written for queue messages; run again, it
        // writes and claims nothing.
        (
            "deliveries.fan_out_claiming_many",
            json!({"claimed": 1, "queued": 2}),
            json!({"claimed": 0, "queued": 2}),
            true,
        ),
        // Its endpoint's filter decides at the gate: written for a queue message, nothing claimed.
        (
            "deliveries.fan_out_claiming_filtered",
            json!({"claimed": 0, "queued": 1}),
            json!({"claimed": 0, "queued": 1}),
            true,
        ),
        // Its endpoint full, or an older delivery in its line: written into the line, nothing
        // claimed.
        (
            "deliveries.fan_out_claiming_full",
            json!({"claimed": 0, "queued": 0}),
            json!({"claimed": 0, "queued": 0}),
            true,
        ),
        (
            "deliveries.fan_out_claiming_behind",
            json!({"claimed": 0, "queued": 0}),
            json!({"claimed": 0, "queued": 0}),
            true,
        ),
        // A probe's attempt given back unsent: into its line, with its circuit's token, once.
        ("deliveries.unclaim_probe", json!(true), json!(false), true),
        // A later probe holds the circuit's token: the attempt goes back, the token stays.
        ("deliveries.unclaim_probe_token_taken", json!(true), json!(false), true),
        ("numbers.create", json!(true), json!(false), true),
    ]
}

fn every_guard_refuses_to_run_twice(w: &Worker) {
    for (check, first, second, changes) in expectations() {
        let a = w.post(&format!("/__e2e/store/{check}"), &[("content-type", "application/json")], b"{}");
        assert_eq!(a.status, 200, "{check}: {}", a.body);
        let r = a.json();
        if !first.is_null() {
            assert_eq!(r["first"], first, "{check}: the first run: {r}");
        }
        assert_eq!(r["second"], second, "{check}: the second run: {r}");
        assert_eq!(r["after_second"], r["after_first"], "{check}: the second run changed the rows: {r}");
        assert_eq!(r["after_first"] != r["before"], changes, "{check}: whether the first run changed the rows: {r}");
        match check {
            "carrier_events.expire_park" => {
                assert_eq!(r["before"], json!([{"failed": 0, "parked": 1, "woken": 0}]), "{check}: {r}");
                assert_eq!(r["after_first"], json!([{"failed": 1, "parked": 0, "woken": 0}]), "{check}: {r}");
            }
            "carrier_events.expire_moved_away" => {
                assert_eq!(r["after_second"], json!([{"parked": 1}]), "{check}: {r}");
            }
            "carrier_events.expire_after_wake" => {
                assert_eq!(r["after_second"], json!([{"failed": 0, "parked": 1, "woken": 1}]), "{check}: {r}");
            }
            "carrier_events.park_and_wake" => {
                assert_eq!(
                    r["first"].as_array().map(Vec::len),
                    Some(1),
                    "{check}: the parked receipt is woken once: {r}"
                );
                assert_eq!(r["before"], json!([{"woken": 0}]), "{check}: parked: {r}");
                assert_eq!(r["after_first"], json!([{"woken": 1}]), "{check}: woken: {r}");
            }
            "messages.record_sent" => {
                assert_eq!(
                    r["after_first"][0],
                    json!({"status": "sent", "events": 1, "charges": 1, "history": 1}),
                    "{r}"
                );
            }
            "messages.record_sent_after_erasure" => {
                assert_eq!(
                    r["after_first"][0],
                    json!({"status": "sent", "events": 1, "naming": 0}),
                    "the event names neither the erased number nor the text: {r}"
                );
            }
            "messages.insert_inbound" => {
                assert_eq!(r["after_first"][0], json!({"messages": 1, "events": 1, "media": 2}), "{r}");
            }
            "media.claim" => assert_eq!(r["after_first"][0], json!({"claimed": 1, "copy_attempts": 1}), "{r}"),
            "deliveries.unclaim_probe" | "deliveries.unclaim_probe_token_taken" => {
                let claimed = json!({"attempts": 1, "waiting": 0, "in_flight": 1, "circuit": "half_open",
                    "token": 1, "circuit_version": 3});
                assert_eq!(r["before"][0], claimed, "{check}: claimed as the probe: {r}");
                // The token is given back (the version moves on, for every compare-and-swap that
                // read it) only by the probe that holds it.
                let (token, version) = if check == "deliveries.unclaim_probe" { (0, 4) } else { (1, 3) };
                let after = json!({"attempts": 0, "waiting": 1, "in_flight": 0, "circuit": "half_open",
                    "token": token, "circuit_version": version});
                assert_eq!(r["after_first"][0], after, "{check}: given back: {r}");
            }
            "media.record_stored" => {
                assert_eq!(r["after_second"][0], json!({"stored": 1, "stored_size": 10, "copying_until": 0}), "{r}")
            }
            "calls.record_end" => {
                assert_eq!(r["after_first"][0]["status"], "completed", "{r}");
                assert_eq!(r["after_first"][0]["charges"], 1, "{r}");
                assert_eq!(r["after_first"][0]["billed"], 2, "{r}");
            }
            "calls.record_leg" => assert_eq!(r["after_first"][0]["legs"], "no_answer@2", "{r}"),
            "numbers.create" => assert_eq!(r["after_second"][0]["account_id"], r["first_account"], "{r}"),
            "deliveries.next_in_line" | "deliveries.due_claiming" => assert_eq!(
                r["after_first"][0],
                json!({"status": "pending", "attempts": 1, "waiting": 0, "in_flight": 1}),
                "{r}"
            ),
            "deliveries.fan_out_claiming" => assert_eq!(
                r["after_first"][0],
                json!({"status": "pending", "attempts": 1, "waiting": 0, "in_flight": 1}),
                "{r}"
            ),
            "deliveries.fan_out_claiming_many" => assert_eq!(
                r["after_first"],
                json!([
                    {"status": "pending", "attempts": 1, "waiting": 0, "in_flight": 1},
                    {"status": "pending", "attempts": 0, "waiting": 0, "in_flight": 0},
                    {"status": "pending", "attempts": 0, "waiting": 0, "in_flight": 0},
                ]),
                "{r}"
            ),
            "deliveries.due_claiming_full"
            | "deliveries.due_claiming_behind"
            | "deliveries.fan_out_claiming_full"
            | "deliveries.fan_out_claiming_behind" => assert_eq!(
                r["after_first"][0],
                json!({"status": "pending", "attempts": 0, "waiting": 1, "in_flight": 0}),
                "{r}"
            ),
            "deliveries.next_in_line_filtered"
            | "deliveries.next_in_line_unleased"
            | "deliveries.fan_out_claiming_filtered" => assert_eq!(
                r["after_first"][0],
                json!({"status": "pending", "attempts": 0, "waiting": 0, "in_flight": 0}),
                "{r}"
            ),
            _ => {}
        }
    }
    let unknown = w.post("/__e2e/store/no.such.check", &[("content-type", "application/json")], b"{}");
    assert_eq!(unknown.status, 404);
}
