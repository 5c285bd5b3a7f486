//! Past one database (docs/scaling.md): moving virtual shards of the dedupe log to another
//! database while duplicates of their events, and new events of them, keep arriving; and a
//! deployment that grows from one database to account databases while every account, old and
//! new, keeps receiving, sending and being billed once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use exactly_core::shard::virtual_shard;
use exactly_tests::{lit, Customer, Worker, ADMIN_TOKEN};
use serde_json::{json, Value};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("shards::moving_shards_while_duplicates_arrive_applies_nothing_twice", moving_shards_while_duplicates_arrive),
    ("shards::accounts_across_databases_apply_everything_once", accounts_across_databases_apply_everything_once),
    ("shards::one_move_at_a_time_copies_every_row_and_prunes_it_on_time", one_move_at_a_time),
];

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

/// `n` fresh event ids whose virtual shards are in `shards`.
fn ids_in(n: usize, shards: std::ops::RangeInclusive<u16>) -> Vec<String> {
    std::iter::repeat_with(|| format!("one-move-{}", sim::random_hex()))
        .filter(|id| shards.contains(&virtual_shard("telnyx", id)))
        .take(n)
        .collect()
}

/// One move of a shard at a time, copied whole, pruned like the rows around it:
/// - a move whose claim on the source comes after another call's claim of the same shards for
///   another database (`E2E_RIVAL_MOVE_TO`) is refused, and leaves nothing in its target;
/// - a first call that names a later `after` than the move reached still copies every row;
/// - rows copied in under ids below the target's payload watermark lose their payloads after
///   the payload retention, like the target's own.
///
/// Seen before: the second move overwrote the source's record and both copied; a first call
/// with `after` skipped rows and marked the move copied (so a duplicate of a skipped key was
/// new in the target); copied rows kept their payloads for the whole event retention.
fn one_move_at_a_time(_shared: &Worker) {
    let w =
        Worker::start_sharded(&[("E2E_RIVAL_MOVE_TO", "DB")], &["EVENTS_0", "EVENTS_1"], "DB=0-511 EVENTS_0=512-1023");
    // Inbound messages to a number no account owns: each event fails visibly, and is settled.
    let nobody = exactly_tests::fresh_number();
    let body = |id: &str| exactly_tests::telnyx_inbound(id, &format!("{id}-msg"), &nobody, "one move");
    let (native, moving, staying) = (ids_in(30, 0..=511), ids_in(20, 512..=767), ids_in(5, 768..=1023));
    let all: Vec<String> = [native.clone(), moving.clone(), staying.clone()].concat();
    for id in &all {
        assert_eq!(w.deliver_telnyx(&body(id)).status, 200);
    }
    let quoted = |ids: &[String]| ids.iter().map(|id| lit(id)).collect::<Vec<_>>().join(", ");
    let settled = w.eventually(Duration::from_secs(60), || {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({}) AND error IS NOT NULL",
            quoted(&all)
        )) == all.len() as i64
    });
    assert!(settled, "every event failed visibly");
    // DB's own rows are past the payload retention, and the retention's watermark past them.
    let month = 31 * 86_400_000_i64;
    w.sql_at("DB", &format!("UPDATE carrier_events SET created_at = created_at - {month}"));
    let payloads_in = |binding: &str, ids: &[String]| {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({}) AND payload IS NOT NULL",
            quoted(ids)
        );
        w.sql_at(binding, &sql)[0]["n"].as_i64().unwrap_or(-1)
    };
    let pruned = w.eventually(Duration::from_secs(30), || {
        w.cron();
        payloads_in("DB", &native) == 0
    });
    assert!(pruned, "DB's own payloads pruned");
    assert_eq!(payloads_in("EVENTS_0", &moving), moving.len() as i64, "EVENTS_0's are younger: kept");

    // A move to EVENTS_1 whose claim comes after a rival's for DB: refused, nothing left behind.
    let move_to = |to: &str, after: i64| {
        w.call(
            "POST",
            "/admin/event_shards/move",
            ADMIN_TOKEN,
            Some(&json!({"first": 512, "last": 767, "to": to, "after": after})),
            &[],
        )
    };
    let lost = move_to("EVENTS_1", 0);
    assert_eq!(lost.status, 409, "{}", lost.body);
    assert_eq!(lost.json()["error"]["code"], "shard_move_conflict", "{}", lost.body);
    let claims = w.sql_at("EVENTS_0", "SELECT moved_to, COUNT(*) AS n FROM shard_moves GROUP BY moved_to");
    assert_eq!(claims, vec![json!({"moved_to": "DB", "n": 256})], "the rival's claim stands, whole");
    let arriving = w.sql_at("EVENTS_1", "SELECT COUNT(*) AS n FROM shard_moves");
    assert_eq!(arriving[0]["n"], 0, "the refused move left no record in its target");
    assert!(stored_in(&w, "EVENTS_1", &all).is_empty(), "nothing copied to the refused target");

    // The rival's move, its first call naming a later `after` than any row: every row moves.
    let moved = move_to("DB", 1 << 60);
    assert_eq!(moved.status, 200, "{}", moved.body);
    let moved = moved.json();
    assert_eq!((moved["copied"].as_u64(), moved["done"].as_bool()), (Some(moving.len() as u64), Some(true)), "{moved}");
    assert_eq!(stored_in(&w, "DB", &moving).len(), moving.len(), "every moving row is in DB");
    assert!(stored_in(&w, "EVENTS_0", &moving).is_empty(), "none left in EVENTS_0");
    assert_eq!(stored_in(&w, "EVENTS_0", &staying).len(), staying.len(), "the others stay");
    for id in &moving {
        let again = w.deliver_telnyx(&body(id));
        assert_eq!((again.status, again.json()["outcome"].as_str()), (200, Some("duplicate")), "{}", again.body);
    }
    assert_eq!(
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id IN ({})",
            quoted(&all)
        )),
        all.len() as i64,
        "one row per event"
    );

    // The moved rows' ids are below DB's payload watermark; past the retention they are pruned.
    w.sql_at(
        "DB",
        &format!(
            "UPDATE carrier_events SET created_at = created_at - {month} WHERE carrier_event_id IN ({})",
            quoted(&moving)
        ),
    );
    let pruned = w.eventually(Duration::from_secs(30), || {
        w.cron();
        payloads_in("DB", &moving) == 0
    });
    assert!(pruned, "the moved rows' payloads are pruned like DB's own: {} kept", payloads_in("DB", &moving));
}

/// The account databases of the grown deployment.
const ACCOUNT_DATABASES: [&str; 2] = ["ACCOUNTS_0", "ACCOUNTS_1"];

fn receipt(event_id: &str, carrier_message_id: &str, status: &str) -> String {
    sim::telnyx::receipt(event_id, carrier_message_id, status, json!([]))
}

/// Sends `text` from the customer's number; returns the message id.
fn send(w: &Worker, c: &Customer, text: &str) -> String {
    let key = sim::random_hex();
    let a = w.call(
        "POST",
        "/v1/messages",
        &c.key,
        Some(&json!({"from": c.number, "to": "+15559990000", "text": text})),
        &[("idempotency-key", &key)],
    );
    // 200: the same message, answered again after a 503 was tried again with its key.
    assert!(matches!(a.status, 200 | 201), "{}", a.body);
    a.json()["id"].as_str().unwrap().to_owned()
}

/// The rows a `COUNT(*) AS n` query counts in one database.
fn count_at(w: &Worker, binding: &str, sql: &str) -> i64 {
    w.sql_at(binding, sql)[0]["n"].as_i64().unwrap_or_else(|| panic!("no n for {sql}"))
}

/// The database `account_routes` in `DB` names for an account.
fn routed(w: &Worker, account: &str) -> String {
    let rows = w.sql_at("DB", &format!("SELECT binding FROM account_routes WHERE account_id = {}", lit(account)));
    assert_eq!(rows.len(), 1, "one route for {account}: {rows:?}");
    rows[0]["binding"].as_str().unwrap().to_owned()
}

/// A customer's endpoint for the message events, at a fresh path of the test customer server.
fn endpoint(w: &Worker, c: &Customer) -> String {
    let path = format!("/hook/accounts-{}", sim::random_hex());
    w.endpoint_at(c, &path, &["message.received", "message.sent", "message.delivered"]);
    path
}

/// The customer webhooks received on `path`, as (type, resource id) with how many times each
/// event id arrived.
fn received(w: &Worker, path: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for r in w.customer.received(path) {
        let body: Value = serde_json::from_str(&r.body).expect("a JSON body");
        let key =
            (body["type"].as_str().unwrap_or("").to_owned(), body["data"]["id"].as_str().unwrap_or("").to_owned());
        out.entry(key).or_default().push(r.header("webhook-id").unwrap_or("").to_owned());
    }
    out
}

/// A deployment grows from `DB` alone to two account databases. The account from before stays
/// in `DB`; new accounts go to the account databases. For every account, inbound messages (each
/// delivered twice and re-signed), receipts that arrive before the send's result (so before its
/// route), receipts that arrive between the route and the send's record (a crash between the two
/// commits), receipts woken by a route whose send then crashed, and duplicated receipts of a
/// message sent before the growth all apply once, in the
/// account's own database, with one charge and one customer webhook per event.
fn accounts_across_databases_apply_everything_once(_shared: &Worker) {
    let mut w = Worker::start_sharded(&[], &[], "");
    let old = w.new_customer("before growth");
    let old_message = send(&w, &old, "sent before the growth");
    let old_carrier_id = w.wait_status(&old, &old_message, "sent")["carrier_message_id"].as_str().unwrap().to_owned();
    assert_eq!(routed(&w, &old.account), "DB");

    // The documented growth: the bindings first, which place nobody outside DB...
    w.rebind(&ACCOUNT_DATABASES);
    let health = w.get("/healthz");
    assert_eq!(health.json()["checks"], json!({"config": "ok", "d1": "ok"}), "{}", health.body);
    for n in 0..4 {
        let c = w.new_customer(&format!("bound, not named {n}"));
        assert_eq!(routed(&w, &c.account), "DB", "a database ACCOUNT_SHARDS does not name gets no account");
    }
    // ...then ACCOUNT_SHARDS. New accounts are placed by their id: one in each account
    // database, none in DB.
    w.set_var("ACCOUNT_SHARDS", &ACCOUNT_DATABASES.join(" "));
    w.restart();
    let mut customers: BTreeMap<String, Customer> = BTreeMap::new();
    for n in 0..24 {
        let c = w.new_customer(&format!("grown {n}"));
        let binding = routed(&w, &c.account);
        assert!(ACCOUNT_DATABASES.contains(&binding.as_str()), "{} placed in {binding}", c.account);
        customers.entry(binding).or_insert(c);
        if customers.len() == ACCOUNT_DATABASES.len() {
            break;
        }
    }
    assert_eq!(customers.len(), 2, "24 accounts all went to one database");
    for (binding, c) in &customers {
        for (database, expected) in [("DB", 0), (ACCOUNT_DATABASES[0], 0), (ACCOUNT_DATABASES[1], 0)] {
            let expected = if database == binding { 1 } else { expected };
            let account = format!("SELECT COUNT(*) AS n FROM accounts WHERE id = {}", lit(&c.account));
            assert_eq!(count_at(&w, database, &account), expected, "{} in {database}", c.account);
            let number = format!("SELECT COUNT(*) AS n FROM phone_numbers WHERE phone_number = {}", lit(&c.number));
            assert_eq!(count_at(&w, database, &number), expected, "{} in {database}", c.number);
        }
        let route = format!("SELECT account_id FROM number_routes WHERE phone_number = {}", lit(&c.number));
        assert_eq!(w.sql_at("DB", &route)[0]["account_id"], json!(c.account));
    }
    // A number is one account's across the databases: the old account's, and one the previous
    // version assigned in DB without a route, are refused to an account elsewhere.
    let legacy = exactly_tests::fresh_number();
    w.sql_at(
        "DB",
        &format!(
            "INSERT INTO phone_numbers (id, account_id, phone_number, ring_targets, created_at)
             VALUES ({}, {}, {}, '[]', 1)",
            lit(&format!("num_{}", sim::random_hex())),
            lit(&old.account),
            lit(&legacy)
        ),
    );
    for taken in [&old.number, &legacy] {
        let c = &customers[ACCOUNT_DATABASES[0]];
        let body = json!({"account_id": c.account, "phone_number": taken, "ring_targets": []});
        let a = w.call("POST", "/admin/numbers", ADMIN_TOKEN, Some(&body), &[]);
        assert_eq!(a.status, 409, "{taken}: {}", a.body);
        let other = format!("SELECT COUNT(*) AS n FROM phone_numbers WHERE phone_number = {}", lit(taken));
        assert_eq!(count_at(&w, ACCOUNT_DATABASES[0], &other), 0, "{taken} not assigned twice");
    }
    customers.insert("DB".to_owned(), old);
    let mut hooks = BTreeMap::new();
    for (binding, c) in &customers {
        hooks.insert(binding.clone(), endpoint(&w, c));
    }
    let mut expected: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    // One key cannot reach another database's account: an id of another account is not found.
    let (a, b) = (&customers[ACCOUNT_DATABASES[0]], &customers[ACCOUNT_DATABASES[1]]);
    let other = send(&w, b, "not for a");
    assert_eq!(w.call("GET", &format!("/v1/messages/{other}"), &a.key, None, &[]).status, 404);
    w.wait_status(b, &other, "sent");
    expected.entry(ACCOUNT_DATABASES[1].to_owned()).or_default().push(("message.sent".to_owned(), other));
    let mut inbound = Vec::new();
    let mut inbound_answers = Vec::new();
    for (binding, c) in &customers {
        // Inbound, twice and re-signed later.
        let event = format!("acct-in-{}", sim::random_hex());
        let body = exactly_tests::telnyx_inbound(&event, &format!("{event}-msg"), &c.number, "to a grown account");
        let copies =
            [w.deliver_telnyx(&body), w.deliver_telnyx(&body), w.deliver_telnyx_at(&body, sim::unix_now() + 5)];
        assert!(copies.iter().all(|a| a.status == 200), "{:?}", copies.iter().map(|a| &a.body).collect::<Vec<_>>());
        inbound_answers.extend(copies);
        inbound.push(event);
        // The receipt first: it comes before the send's result, so before the carrier id's route.
        // The carrier holds the result back (503 to each retry) until the receipt's job has
        // recorded, in its log line, that it waits in DB: how soon that job runs is up to the
        // machine's load, and the route must not come first.
        let early = format!("[receipt-first] early receipt {}", sim::random_hex());
        w.carrier.hold(&early);
        let first = send(&w, c, &early);
        // A crash after the route, before the send's record: the receipts that come between wait
        // beside the message.
        let crash = send(&w, c, "[deliver] fault-crash-after-route");
        // Both: the receipt waits in DB, its route's batch wakes it, and the send crashes before
        // the wake is enqueued; the send's rerun enqueues it, with no sweep (none runs here).
        let both = send(&w, c, "[receipt-first] fault-crash-after-route");
        let waited_in_db = w.eventually(Duration::from_secs(60), || {
            let Some(carrier_id) = w.carrier.carrier_id(&first) else { return false };
            let receipt = w.events_sql(&format!(
                "SELECT 'cev_' || printf('%016x', id) AS id FROM carrier_events WHERE carrier_event_id = {}",
                lit(&format!("{carrier_id}-delivered"))
            ));
            receipt.first().and_then(|r| r["id"].as_str()).is_some_and(|id| {
                w.log_lines(&[&format!("\"id\":\"{id}\""), "\"outcome\":\"parked\"", "\"waits_in\":\"DB\""]) >= 1
            })
        });
        w.carrier.release(&early);
        // An account in DB has no route: its receipt waits in DB too, beside the message.
        assert!(waited_in_db, "the early receipt of {binding} waited in DB for its route:\n{}", w.log_tail());
        let delivered = w.eventually(Duration::from_secs(150), || {
            w.message(c, &first)["status"] == "delivered"
                && w.message(c, &crash)["status"] == "delivered"
                && w.message(c, &both)["status"] == "delivered"
        });
        assert!(delivered, "the three messages of {binding} delivered");
        expected.entry(binding.clone()).or_default().extend([
            ("message.sent".to_owned(), first.clone()),
            ("message.delivered".to_owned(), first.clone()),
            ("message.sent".to_owned(), crash.clone()),
            ("message.delivered".to_owned(), crash.clone()),
            ("message.sent".to_owned(), both.clone()),
            ("message.delivered".to_owned(), both.clone()),
        ]);
        for id in [&first, &crash, &both] {
            let charged = format!("SELECT COUNT(*) AS n FROM usage WHERE resource_id = {}", lit(id));
            assert_eq!(count_at(&w, binding, &charged), 1, "{id} charged once in {binding}");
            assert_eq!(w.count(&charged), 1, "{id} charged once in all");
            let history = format!(
                "SELECT status FROM message_status_history WHERE message_id = {} ORDER BY created_at, status DESC",
                lit(id)
            );
            assert_eq!(
                w.sql(&history),
                vec![json!({"status": "sent"}), json!({"status": "delivered"})],
                "{id}: one history row per move"
            );
        }
        assert_eq!(w.carrier.sends_for(&crash), 2, "the crash's rerun asked the carrier again, with the same key");
    }
    // The message sent before the growth: its receipt, twice and re-signed, finds it in DB.
    let old = &customers["DB"];
    let event = format!("acct-old-{}", sim::random_hex());
    let body = receipt(&event, &old_carrier_id, "delivered");
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    assert_eq!(w.deliver_telnyx_at(&body, sim::unix_now() + 5).status, 200);
    w.wait_status(old, &old_message, "delivered");
    expected.entry("DB".to_owned()).or_default().push(("message.delivered".to_owned(), old_message.clone()));

    // Each inbound message once, in its account's database only, once every copy's job ran.
    w.wait_jobs_of(&inbound_answers.iter().collect::<Vec<_>>());
    for (binding, event) in customers.keys().zip(&inbound) {
        let sql = format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&format!("{event}-msg")));
        let rows = w.sql_at(binding, &sql);
        assert_eq!(rows.len(), 1, "one inbound message in {binding}");
        assert_eq!(w.sql(&sql).len(), 1, "and none in another database");
        expected
            .entry(binding.clone())
            .or_default()
            .push(("message.received".to_owned(), rows[0]["id"].as_str().unwrap().to_owned()));
    }
    // One customer webhook per event, from every account database.
    for (binding, hook) in &hooks {
        let want = &expected[binding];
        let arrived = w.eventually(Duration::from_secs(60), || want.iter().all(|k| received(&w, hook).contains_key(k)));
        assert!(arrived, "{binding}: {want:?} arrived: {:?}", received(&w, hook).keys().collect::<Vec<_>>());
        for (key, ids) in received(&w, hook) {
            assert!(ids.windows(2).all(|p| p[0] == p[1]), "{binding} {key:?}: one event, one webhook-id: {ids:?}");
            assert!(want.contains(&key), "{binding}: unexpected {key:?}");
        }
    }
    // The operator sees every account, each once, across the databases and pages.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/admin/accounts?limit=1&cursor={c}"),
            None => "/admin/accounts?limit=1".to_owned(),
        };
        let page = w.call("GET", &path, ADMIN_TOKEN, None, &[]);
        assert_eq!(page.status, 200, "{}", page.body);
        let page = page.json();
        listed.extend(page["data"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(listed.len() < 100, "paging never ends: {listed:?}");
    }
    let mut unique = listed.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), listed.len(), "each account listed once: {listed:?}");
    for c in customers.values() {
        assert!(listed.contains(&c.account), "{} listed", c.account);
    }

    // New accounts are never placed in a database the worker does not have.
    w.set_var("ACCOUNT_SHARDS", "ACCOUNTS_1 ACCOUNTS_7");
    w.restart();
    let health = w.get("/healthz");
    assert_eq!(health.status, 503, "{}", health.body);
    assert!(health.json()["checks"]["config"].as_str().unwrap_or("").contains("ACCOUNT_SHARDS"), "{}", health.body);
}
