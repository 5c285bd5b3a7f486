//! At scale, with Cloudflare's limits enforced (docs/deploy.md, "Limits"): work that grows with
//! the data runs in pages, each a job of its own, and finishes however much there is.
//!
//! `E2E_SCALE_ROWS` sets how many rows a test writes (default 100,000; `make scale` runs them at
//! 1,000,000).

use std::time::{Duration, Instant};

use exactly_tests::Worker;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] =
    &[("scale::retention_catches_up_through_pages_from_a_large_backlog", retention_catches_up_from_a_backlog)];

/// How many rows a scale test writes.
fn rows() -> u64 {
    std::env::var("E2E_SCALE_ROWS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000)
}

/// A dedupe log holding a large backlog of settled carrier events past every retention (written
/// straight into each of its databases, as a busy deployment would have them after retention
/// fell behind) is pruned to nothing by the tick's retention pages: no page over its 1,000 rows,
/// no call over a limit, and the rate it reached printed for docs/scaling.md.
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

    let started = Instant::now();
    let mut ticks = 0;
    let drained = w.eventually(Duration::from_secs(600), || {
        // Each tick runs up to 120 pages a step and database, and `cron` waits for them.
        assert_eq!(w.cron().status, 200);
        ticks += 1;
        w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'scale-%'") == 0
    });
    let elapsed = started.elapsed().as_secs_f64();
    let left = w.events_count("SELECT COUNT(*) AS n FROM carrier_events WHERE carrier_event_id LIKE 'scale-%'");
    assert!(drained, "{left} of {backlog} rows left after {ticks} ticks");
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
        "e2e: retention pruned {backlog} carrier events in {elapsed:.1} s over {ticks} ticks and {} pages: {:.0} rows/s",
        pages.iter().filter(|p| **p > 0).count(),
        backlog as f64 / elapsed
    );
}
