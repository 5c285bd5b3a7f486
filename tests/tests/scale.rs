//! At scale, with Cloudflare's limits enforced (docs/deploy.md, "Limits"): work that grows with
//! the data runs in pages, each a job of its own, and finishes however much there is.
//!
//! They run in the scale suite only (`make scale`, `E2E_SCALE=1`, which `.ci/run` runs after
//! `make test`), in the sharded layout. `E2E_SCALE_ROWS` sets how many rows a test writes
//! (default 100,000; `make scale` runs them at 1,000,000).

use std::time::{Duration, Instant};

use exactly_tests::{lit, Worker};
use serde_json::json;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "scale::one_message_reaches_1000_endpoints_once_and_a_replay_each_once_more",
        crate::fanout::reaches_1000_endpoints,
    ),
    ("scale::retention_catches_up_through_pages_from_a_large_backlog", retention_catches_up_from_a_backlog),
    ("scale::a_recovery_of_a_large_window_runs_in_pages_and_queues_each_event_once", recovery_in_pages),
    ("scale::the_cron_with_eight_databases_runs_each_part_in_a_job_of_its_own", cron_with_eight_databases),
    ("scale::an_erasure_across_a_large_log_runs_in_pages_and_clears_only_its_number", erasure_across_a_large_log),
];

/// How many rows a scale test writes.
fn rows() -> u64 {
    std::env::var("E2E_SCALE_ROWS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000)
}

/// A dedupe log holding a large backlog of settled carrier events past every retention, and
/// account databases as many expired Idempotency-Keys (written straight into each database, as
/// a busy deployment would have them after retention fell behind), are pruned to nothing by the
/// tick's retention pages: no page over its 1,000 rows, no call over a limit, and the rate it
/// reached printed for docs/scaling.md.
fn retention_catches_up_from_a_backlog(_shared: &Worker) {
    // Its own worker: a backlog of this size would slow every other test's retention.
    let w = Worker::start();
    let n = rows();
    let old = sim::unix_millis() - 100 * 86_400_000;
    w.events_sql(&format!(
        "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, processed_at, created_at)
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
         SELECT 'telnyx', 'scale-' || x, 'message.received', '{{\"data\":{{\"id\":\"scale\"}}}}', {old}, {old} FROM c"
    ));
    let databases = w.events_sql("SELECT COUNT(*) AS n FROM carrier_events").len() as u64;
    let backlog = w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'scale-%'");
    assert_eq!(backlog as u64, n * databases, "the backlog is written");
    // And as many expired Idempotency-Keys in each account database.
    w.sql(&format!(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, status, answer, created_at, locked_until)
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
         SELECT 'acct_scale', 'scale-' || x, 'f', 201, 'sealed', {old}, 0 FROM c"
    ));
    let keys = || w.count("SELECT COUNT(*) AS n FROM idempotency_keys WHERE key LIKE 'scale-%'");
    let key_backlog = keys();
    assert!(key_backlog as u64 >= n, "the keys are written");

    let started = Instant::now();
    let mut ticks = 0;
    let drained = w.eventually(Duration::from_secs(600), || {
        // Each tick runs up to 120 pages a step and database, and `cron` waits for them.
        assert_eq!(w.cron().status, 200);
        ticks += 1;
        w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'scale-%'") == 0
            && keys() == 0
    });
    let elapsed = started.elapsed().as_secs_f64();
    let left = w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'scale-%'");
    assert!(drained, "{left} of {backlog} rows and {} of {key_backlog} keys left after {ticks} ticks", keys());
    let pages: Vec<u64> = w
        .log()
        .lines()
        .filter(|l| l.contains("\"step\":\"carrier_events\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["pruned"].as_u64())
        .collect();
    assert!(pages.iter().all(|p| *p <= 1000), "a page prunes at most 1,000 rows: {:?}", pages.iter().max());
    assert!(pages.iter().sum::<u64>() >= backlog as u64, "the pages account for every row");
    eprintln!(
        "e2e: retention pruned {backlog} carrier events and {key_backlog} idempotency keys in {elapsed:.1} s over \
         {ticks} ticks and {} carrier event pages: {:.0} rows/s",
        pages.iter().filter(|p| **p > 0).count(),
        (backlog + key_backlog) as f64 / elapsed
    );
}

/// An endpoint that missed a large window (its account wrote the events straight into its
/// database, as months of traffic would) is recovered in pages: the recovery finishes, writes one
/// delivery per event, pages at most 1,000 events at a time, crosses no limit, and a second
/// recovery of the window writes nothing. The endpoint is paused, so the deliveries wait rather
/// than flood the test's receiver.
fn recovery_in_pages(_shared: &Worker) {
    let w = Worker::start();
    let n = rows();
    let c = w.new_customer("recover-at-scale");
    let (endpoint, _) = w.endpoint_at(&c, &format!("/recover-{}", sim::random_hex()), &["message.received"]);
    let paused =
        w.call("PATCH", &format!("/v1/webhook_endpoints/{endpoint}"), &c.key, Some(&json!({"paused": true})), &[]);
    assert_eq!(paused.status, 200, "{}", paused.body);
    let at = sim::unix_millis() - 3_600_000;
    w.sql_for(
        &c.account,
        &format!(
            "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at, sequence)
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
             SELECT 'evt_scale_' || x, {account}, 'message.received', 'msg_scale_' || x,
                    '{{\"type\":\"message.received\",\"data\":{{}}}}', {at} + x, 1 FROM c",
            account = lit(&c.account)
        ),
    );
    let since = exactly_core::Timestamp::from_unix_millis(at - 1000).to_rfc3339();
    let started = Instant::now();
    let recovery = w.recover(&c.key, &endpoint, &since);
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(recovery["queued"], json!(n), "one delivery per event: {recovery}");
    let count = |sql: &str| w.sql_for(&c.account, sql).first().and_then(|r| r["n"].as_u64()).unwrap_or(u64::MAX);
    let per_event = format!(
        "SELECT COUNT(*) AS n FROM (SELECT event_id FROM webhook_deliveries WHERE endpoint_id = {}
         GROUP BY event_id HAVING COUNT(*) = 1)",
        lit(&endpoint)
    );
    assert_eq!(count(&per_event), n, "each event has exactly one delivery to the endpoint");
    let pages = w.log_lines(&["\"job\":\"recover\"", recovery["id"].as_str().unwrap_or("-")]) as u64;
    assert!(pages >= n / 1000, "{pages} pages for {n} events: at most 1,000 a page");
    eprintln!("e2e: a recovery of {n} events ran in {pages} pages in {elapsed:.1} s");
    assert_eq!(w.recover(&c.key, &endpoint, &since)["queued"], json!(0), "a second recovery writes nothing");
}

/// The cron of a worker bound to eight databases (`DB`, three more dedupe databases, four account
/// databases) works in no invocation across all of them: its tick enqueues one part per database
/// and part, every part runs and logs its end, none fails, and no call crosses a limit.
fn cron_with_eight_databases(_shared: &Worker) {
    let log = ["DB", "EVENTS_0", "EVENTS_1", "EVENTS_2"];
    let accounts = ["ACCOUNTS_0", "ACCOUNTS_1", "ACCOUNTS_2", "ACCOUNTS_3"];
    let bound: Vec<&str> = log[1..].iter().chain(&accounts).copied().collect();
    let w = Worker::start_sharded(
        &[("ACCOUNT_SHARDS", &accounts.join(" "))],
        &bound,
        "DB=0-255 EVENTS_0=256-511 EVENTS_1=512-767 EVENTS_2=768-1023",
    );
    // An account in each account database, each with an inbound message, so every part has rows.
    for _ in 0..8 {
        let c = w.new_customer("eight");
        let body = sim::telnyx::envelope(
            &format!("e-{}", sim::random_hex()),
            "message.received",
            "2026-11-30T10:00:00Z",
            json!({"id": format!("m-{}", sim::random_hex()), "from": {"phone_number": "+15559990000"},
                   "to": [{"phone_number": c.number}], "text": "eight"}),
            1,
        );
        assert_eq!(w.deliver_telnyx(&body).status, 200);
    }
    assert_eq!(w.cron().status, 200);
    let lines: Vec<serde_json::Value> = w
        .log()
        .lines()
        .filter(|l| l.starts_with('{') && l.contains("\"tick"))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // One tick was fired; one whose answer was lost may have run twice (`Worker::cron`).
    let ticks: Vec<u64> = lines.iter().filter(|v| v["cron"] == "tick").filter_map(|v| v["parts"].as_u64()).collect();
    // Per tick: the log's sweep and the sessions' retention in DB, two retention steps in each of
    // the four dedupe databases, and in each of the five account databases (DB among them) its
    // sweep, its audit and three retention steps.
    assert!(!ticks.is_empty() && ticks.iter().all(|parts| *parts == 2 + 2 * 4 + 5 * 5), "{lines:?}");
    let ended = |database: &str, part: &str| {
        lines.iter().filter(|v| v["database"] == database && v["tick_part"] == part && v["error"].is_null()).count()
    };
    for database in log {
        for step in ["payloads", "carrier_events"] {
            assert_eq!(ended(database, step), ticks.len(), "{database} {step}: {lines:?}");
        }
    }
    for database in std::iter::once("DB").chain(accounts) {
        for part in ["sweep", "audit", "attempts", "customer_events", "idempotency_keys"] {
            assert_eq!(ended(database, part), ticks.len(), "{database} {part}: {lines:?}");
        }
    }
    let failed: Vec<&serde_json::Value> = lines.iter().filter(|v| !v["error"].is_null()).collect();
    assert!(failed.is_empty(), "parts that failed: {failed:?}");
}

/// A dedupe log holding a large number of stored payloads in each of its databases (written
/// straight into them, as months of traffic would leave them): one in a thousand names the
/// person, one in a thousand a longer number that starts with the person's. The erasure runs
/// through pages of at most 10,000 rows, finishes, clears exactly the person's payloads and
/// no other, and crosses no limit.
fn erasure_across_a_large_log(_shared: &Worker) {
    let w = Worker::start();
    let n = rows();
    let person = exactly_tests::fresh_number();
    let longer = format!("{person}1");
    let at = sim::unix_millis() - 3_600_000;
    w.events_sql(&format!(
        "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, processed_at, created_at)
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
         SELECT 'telnyx', 'erase-scale-' || x, 'message.received',
                '{{\"data\":{{\"payload\":{{\"from\":{{\"phone_number\":\"' ||
                CASE x % 1000 WHEN 0 THEN {person} WHEN 1 THEN {longer} ELSE '+1444' || (1000000 + x) END ||
                '\"}},\"text\":\"hello\"}}}}}}', {at}, {at} FROM c",
        person = lit(&person),
        longer = lit(&longer),
    ));
    let kept = |like: &str| {
        w.events_count(&format!(
            "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'erase-scale-%'
               AND payload IS NOT NULL AND payload LIKE {}",
            lit(&format!("%\"{like}\"%"))
        ))
    };
    let databases = w.events_sql("SELECT COUNT(*) AS n FROM carrier_events").len() as i64;
    let naming = kept(&person);
    assert_eq!(naming, (n / 1000) as i64 * databases, "the person's payloads are written");
    let others = kept(&longer);

    let started = Instant::now();
    let record = crate::erasure::erased(&w, &json!({ "phone_number": person }));
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(record["counts"]["carrier_events"], json!(naming), "{record}");
    assert_eq!(kept(&person), 0, "no payload names the person");
    assert_eq!(kept(&longer), others, "the longer number's payloads are untouched");
    let all = w.events_count(
        "SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'erase-scale-%' AND payload IS NOT NULL",
    );
    assert_eq!(all, n as i64 * databases - naming, "every other payload is kept");
    let pages = record["pages"].as_u64().unwrap_or(0);
    assert!(pages >= n / 10_000, "{pages} pages for {n} rows a database: at most 10,000 rows a page");
    eprintln!(
        "e2e: an erasure read {} stored payloads in {pages} pages in {elapsed:.1} s: {:.0} rows/s",
        n as i64 * databases,
        (n as i64 * databases) as f64 / elapsed
    );
}
