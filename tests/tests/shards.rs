//! The dedupe log across databases (docs/scaling.md): moving virtual shards to another database
//! while duplicates of their events, and new events of them, keep arriving.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use exactly_core::shard::virtual_shard;
use exactly_tests::{lit, Worker, ADMIN_TOKEN};
use serde_json::{json, Value};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] =
    &[("shards::moving_shards_while_duplicates_arrive_applies_nothing_twice", moving_shards_while_duplicates_arrive)];

/// The shards that move: the upper half of `EVENTS_0`'s.
const FIRST: u16 = 768;
const LAST: u16 = 1023;

/// `n` fresh event ids whose virtual shards are in `FIRST..=LAST` (`moving`) or not.
fn event_ids(n: usize, moving: bool) -> Vec<String> {
    std::iter::repeat_with(|| format!("shard-evt-{}", sim::random_hex()))
        .filter(|id| (FIRST..=LAST).contains(&virtual_shard("telnyx", id)) == moving)
        .take(n)
        .collect()
}

/// The carrier event ids stored in one database.
fn stored_in(w: &Worker, binding: &str, ids: &[String]) -> Vec<String> {
    let list = ids.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    w.sql_at(binding, &format!("SELECT carrier_event_id FROM carrier_events WHERE carrier_event_id IN ({list})"))
        .iter()
        .filter_map(|r| r["carrier_event_id"].as_str().map(str::to_owned))
        .collect()
}

fn moving_shards_while_duplicates_arrive(_shared: &Worker) {
    let w = Worker::start_sharded(&[], &["EVENTS_0", "EVENTS_1"], "DB=0-511 EVENTS_0=512-1023");
    let health = w.get("/healthz");
    assert_eq!(health.json()["checks"], json!({"config": "ok", "d1": "ok"}), "{}", health.body);
    let c = w.new_customer("shards");
    // Stored before the move: some that move, some that stay in EVENTS_0 and some in DB.
    let before: Vec<String> = [event_ids(250, true), event_ids(20, false)].concat();
    let body = |id: &str| exactly_tests::telnyx_inbound(id, &format!("{id}-msg"), &c.number, "moving");
    for id in &before {
        assert_eq!(w.deliver_telnyx(&body(id)).status, 200);
    }
    let moving_before: Vec<String> =
        before.iter().filter(|id| (FIRST..=LAST).contains(&virtual_shard("telnyx", id))).cloned().collect();
    assert_eq!(stored_in(&w, "EVENTS_0", &moving_before).len(), moving_before.len(), "the map put them in EVENTS_0");
    let during = event_ids(40, true);

    // While the move runs: every stored event again, and new ones of the moving shards, each
    // twice.
    let stop = AtomicBool::new(false);
    let statuses = thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
            let mut fresh = during.iter();
            while !stop.load(Ordering::Relaxed) {
                for id in before.iter().step_by(7) {
                    *statuses.entry(w.deliver_telnyx(&body(id)).status).or_default() += 1;
                }
                if let Some(id) = fresh.next() {
                    for _ in 0..2 {
                        *statuses.entry(w.deliver_telnyx(&body(id)).status).or_default() += 1;
                    }
                }
            }
            for id in fresh {
                for _ in 0..2 {
                    *statuses.entry(w.deliver_telnyx(&body(id)).status).or_default() += 1;
                }
            }
            statuses
        });
        // One page of 100 rows per call, so the copying interleaves with the deliveries.
        let mut after = 0;
        let mut calls = 0;
        loop {
            let answer = w.call(
                "POST",
                "/admin/event_shards/move",
                ADMIN_TOKEN,
                Some(&json!({"first": FIRST, "last": LAST, "to": "EVENTS_1", "after": after, "pages": 1})),
                &[],
            );
            assert_eq!(answer.status, 200, "{}", answer.body);
            let moved = answer.json();
            assert_eq!((moved["from"].as_str(), moved["to"].as_str()), (Some("EVENTS_0"), Some("EVENTS_1")), "{moved}");
            after = moved["after"].as_i64().expect("after");
            calls += 1;
            if moved["done"] == true {
                break;
            }
            assert!(calls < 100, "the move never finished: {moved}");
            thread::sleep(Duration::from_millis(300));
        }
        thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        sender.join().expect("sender")
    });
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), vec![200], "every delivery answered 200: {statuses:?}");

    // A later delivery of every event, then sweeps: a copy taken before its event's mark looks
    // unprocessed, and its rerun must change nothing.
    let all: Vec<String> = [before.clone(), during.clone()].concat();
    for id in &all {
        assert_eq!(w.deliver_telnyx(&body(id)).status, 200);
    }
    let list = all.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    let settled = w.eventually(Duration::from_secs(120), || {
        w.cron();
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list}) AND processed_at IS NOT NULL"
        )) == all.len() as i64
    });
    assert!(settled, "every event processed");

    // One row per event id, in the database its shard now lives in.
    let rows = w.events_sql(&format!(
        "SELECT carrier_event_id, COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list})
         GROUP BY carrier_event_id"
    ));
    let mut per_key: BTreeMap<String, i64> = BTreeMap::new();
    for r in &rows {
        *per_key.entry(r["carrier_event_id"].as_str().unwrap().to_owned()).or_default() += r["n"].as_i64().unwrap();
    }
    assert_eq!(per_key.len(), all.len(), "every event stored");
    assert!(per_key.values().all(|n| *n == 1), "one row per event id across the databases: {per_key:?}");
    let moved: Vec<String> =
        all.iter().filter(|id| (FIRST..=LAST).contains(&virtual_shard("telnyx", id))).cloned().collect();
    assert_eq!(stored_in(&w, "EVENTS_1", &all).len(), moved.len(), "the moved shards' rows are in EVENTS_1");
    assert!(stored_in(&w, "EVENTS_0", &moved).is_empty(), "none of them is left in EVENTS_0");

    // One message and one message.received event per inbound message: nothing applied twice.
    let messages = w.sql(&format!(
        "SELECT m.carrier_message_id, (SELECT COUNT(*) FROM outbound_events e WHERE e.resource_id = m.id AND e.type =
             'message.received') AS events FROM messages m WHERE m.account_id = {}",
        lit(&c.account)
    ));
    assert_eq!(messages.len(), all.len(), "one message per event");
    assert!(messages.iter().all(|m| m["events"] == 1), "one message.received each: {messages:?}");

    // An isolate still on the old map that is asked to move the same shards elsewhere: EVENTS_0
    // no longer holds them, and nothing is written.
    let stale = w.call(
        "POST",
        "/admin/event_shards/move",
        ADMIN_TOKEN,
        Some(&json!({"first": FIRST, "last": LAST, "to": "DB"})),
        &[],
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert_eq!(stale.json()["error"]["code"], "shard_move_conflict", "{}", stale.body);

    // Then the map names the new database; duplicates still find their rows.
    let mut w = w;
    w.set_var("EVENT_SHARDS", "DB=0-511 EVENTS_0=512-767 EVENTS_1=768-1023");
    w.restart();
    for id in all.iter().step_by(5) {
        let answer = w.deliver_telnyx(&body(id));
        assert_eq!(answer.status, 200);
    }
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        w.events_count(&format!("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({list})")),
        all.len() as i64
    );
    let after = w.count(&format!("SELECT COUNT(*) AS n FROM messages WHERE account_id = {}", lit(&c.account)));
    assert_eq!(after, all.len() as i64);
    let refused = w.call(
        "POST",
        "/admin/event_shards/move",
        ADMIN_TOKEN,
        Some(&json!({"first": 0, "last": 600, "to": "EVENTS_1"})),
        &[],
    );
    assert_eq!(refused.status, 422, "shards of two databases in one move: {}", refused.body);
    let _: Value = refused.json();

    // A map naming a database the worker does not have is a failed readiness check.
    w.set_var("EVENT_SHARDS", "DB=0-511 EVENTS_0=512-767 EVENTS_7=768-1023");
    w.restart();
    let health = w.get("/healthz");
    assert_eq!(health.status, 503, "{}", health.body);
    assert_eq!(health.json()["checks"]["d1"], "EVENTS_7: binding missing", "{}", health.body);
}
