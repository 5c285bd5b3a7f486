//! End-to-end tests against the real worker in `wrangler dev`.
//!
//! One worker serves every test of this binary that needs no worker of its own; tests use unique
//! event ids so they can run in parallel and still count exactly their own rows. The binary runs
//! in one layout of the databases: one database, or sharded with `E2E_SHARDED=1`; which tests run
//! in which layout, and why, is in docs/testing.md.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use exactly_tests::{sharded, Worker};
use libtest_mimic::{Arguments, Trial};

mod audit;
mod calls;
mod carriers;
mod chaos;
mod contract;
mod endpoint_options;
mod erasure;
mod fanout;
mod idempotency;
mod ingest;
mod isolation;
mod limits;
mod messaging;
mod mms;
mod operations;
mod ordering;
mod portal;
mod quickstart;
mod receivers;
mod scale;
mod security;
mod shards;
mod store;
mod webhooks;

/// A test body: it panics (through `assert!`) to fail.
pub type TestFn = fn(&Worker);

/// Tests of configuration, validation and policy: what they check happens before, or apart
/// from, any database the layout spreads, so they run in the one-database pass only.
const LAYOUT_FREE: &[&str] = &[
    "contract::schemathesis_finds_no_failure_in_the_api",
    "contract::schemathesis_finds_no_failure_in_the_admin_api",
    "quickstart::the_readmes_commands_end_in_a_verified_webhook",
    "quickstart::listen_hands_its_secret_to_a_verifying_receiver",
    "quickstart::the_typescript_client_installs_as_a_package",
    "quickstart::make_dev_on_other_ports_serves_the_quickstart_and_chaos",
    "quickstart::the_python_client_installs_as_a_package",
    "receivers::the_node_receiver_verifies_real_deliveries",
    "receivers::the_python_receiver_verifies_real_deliveries",
    "mms::private_media_links_are_refused_in_production",
    "security::every_json_body_is_capped",
    "ingest::rejected_deliveries_store_nothing",
    "ingest::chunked_bodies_are_capped",
    "messaging::validation_and_auth_errors",
    "messaging::send_at_is_validated",
    "mms::media_urls_are_validated",
    "mms::a_body_that_stops_coming_is_abandoned_in_time",
    "operations::a_misconfigured_worker_answers_503_naming_the_variable",
    "operations::healthz_reports_readiness_without_secrets",
    "operations::metrics_are_prometheus_text_and_move",
    "operations::rotated_endpoint_secret_signs_with_both_for_a_while",
    "security::plivo_requires_v3_unless_v2_is_accepted",
    "webhooks::private_endpoints_are_refused_in_production",
    "webhooks::redirects_are_not_followed",
    "webhooks::retry_after_as_an_http_date_is_honoured",
    "webhooks::endpoint_management",
    "webhooks::every_route_is_served",
    "webhooks::stalled_endpoint_times_out_and_is_retried",
    "webhooks::rate_limit_spreads_deliveries_and_drops_none",
    "webhooks::hundred_consecutive_failures_disable_the_endpoint",
    "webhooks::gone_disables_the_endpoint",
    "endpoint_options::bad_filters_and_headers_are_refused_naming_the_problem",
    "limits::a_burst_over_the_limit_is_answered_429_and_slows_no_one_else",
];

/// Tests of what only the one-database layout does (a job that carries its event,
/// docs/architecture.md): they run in the one-database pass only.
const ONE_DATABASE: &[&str] = &[
    "erasure::an_erasure_while_a_carried_job_waits_leaves_it_nothing_to_write",
    "erasure::a_group_message_waiting_while_one_recipient_is_erased_is_delivered_without_them",
    "webhooks::a_first_attempt_claimed_before_a_crash_is_swept_and_sent_once",
];

/// The scale suite (`make scale`): tests that start a worker of their own and load it with
/// thousands of requests or pages. They run only with `E2E_SCALE=1`, in the sharded pass (the
/// layout with the most round trips per fact).
const SCALE: &str = "scale::";

/// Tests that start workers of their own, in layouts they choose: they run once, in the sharded
/// pass.
const OWN_LAYOUT: &str = "shards::";

/// The API's contract tests (Schemathesis against workers of their own): they run only with
/// `E2E_CONTRACT=1`, alone, after both passes (`scripts/test.sh`): a property-based tester at full
/// speed would slow every test beside it.
const CONTRACT: &str = "contract::";

/// Tests that take longest (most start workers of their own), started first so that the run
/// does not end waiting on one of them.
const LONGEST: &[&str] = &[
    "quickstart::make_dev_on_other_ports_serves_the_quickstart_and_chaos",
    "erasure::an_erased_number_is_in_no_database_and_a_late_retry_is_still_a_duplicate",
    "limits::a_burst_over_the_limit_is_answered_429_and_slows_no_one_else",
    "isolation::a_hung_endpoint_never_slows_another_accounts_webhooks",
    "shards::accounts_across_databases_apply_everything_once",
    "shards::moving_shards_while_duplicates_arrive_applies_nothing_twice",
    "chaos::five_hundred_facts_misdelivered_change_each_thing_once",
    "security::plivo_requires_v3_unless_v2_is_accepted",
    "carriers::reconciliation_ends_a_call_whose_hangup_was_lost_and_settles_stale_messages",
    "messaging::scheduled_message_due_during_a_restart_is_sent_once",
    "calls::ring_cursor_survives_a_restart",
    "operations::retention_prunes_payloads_and_keeps_dedupe_keys",
    "operations::retention_deletes_settled_customer_events_once_and_keeps_held_ones",
    "webhooks::backlog_high_fires_once_per_stuck_item",
    "webhooks::a_first_attempt_claimed_before_a_crash_is_swept_and_sent_once",
    "webhooks::private_endpoints_are_refused_in_production",
    "operations::a_misconfigured_worker_answers_503_naming_the_variable",
];

fn main() {
    let args = Arguments::from_args();
    let mut all: Vec<(&str, TestFn)> = [
        audit::TESTS,
        ingest::TESTS,
        messaging::TESTS,
        carriers::TESTS,
        mms::TESTS,
        calls::TESTS,
        webhooks::TESTS,
        endpoint_options::TESTS,
        ordering::TESTS,
        erasure::TESTS,
        fanout::TESTS,
        idempotency::TESTS,
        isolation::TESTS,
        limits::TESTS,
        chaos::TESTS,
        contract::TESTS,
        operations::TESTS,
        portal::TESTS,
        quickstart::TESTS,
        receivers::TESTS,
        scale::TESTS,
        security::TESTS,
        store::TESTS,
        shards::TESTS,
    ]
    .concat();
    for name in LAYOUT_FREE.iter().chain(ONE_DATABASE).chain(LONGEST) {
        assert!(all.iter().any(|(n, _)| n == name), "e2e.rs names a test that does not exist: {name}");
    }
    let contract = std::env::var("E2E_CONTRACT").is_ok_and(|v| v == "1");
    all.retain(|(name, _)| name.starts_with(CONTRACT) == contract);
    if sharded() {
        all.retain(|(name, _)| !LAYOUT_FREE.contains(name) && !ONE_DATABASE.contains(name));
        // The scale suite runs only when asked for (`make scale`).
        let scale = std::env::var("E2E_SCALE").is_ok_and(|v| v == "1");
        all.retain(|(name, _)| scale || !name.starts_with(SCALE));
    } else {
        all.retain(|(name, _)| !name.starts_with(OWN_LAYOUT) && !name.starts_with(SCALE));
    }
    // A stable sort: the longest first, the rest in the order of the list above.
    all.sort_by_key(|(name, _)| LONGEST.iter().position(|n| n == name).unwrap_or(LONGEST.len()));
    // `E2E_PREPARE=1`: make the migrated template every worker starts from, and stop, so that
    // passes started together after it share one instead of each making its own.
    if std::env::var("E2E_PREPARE").is_ok_and(|v| v == "1") {
        let template = exactly_tests::migrated_template();
        eprintln!("e2e: migrated template ready in {}", template.display());
        return;
    }
    if args.list {
        let trials = all.into_iter().map(|(name, _)| Trial::test(name, || Ok(()))).collect();
        libtest_mimic::run(&args, trials).exit();
    }
    // The shared worker starts when the first test that needs it runs.
    let shared: Arc<OnceLock<Worker>> = Arc::default();
    let layout = if sharded() { "sharded" } else { "one database" };
    let trials = all
        .into_iter()
        .map(|(name, test)| {
            let shared = Arc::clone(&shared);
            Trial::test(name, move || {
                let started = Instant::now();
                test(shared.get_or_init(Worker::start));
                eprintln!("e2e: {name} ({layout}) took {:.1} s", started.elapsed().as_secs_f64());
                Ok(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let Some(mut worker) = Arc::into_inner(shared).and_then(OnceLock::into_inner) else { conclusion.exit() };
    if conclusion.has_failed() {
        eprintln!("--- wrangler log (tail) ---\n{}", worker.log_tail());
    }
    // Whatever the tests asserted, every delivery the run received must match its documented
    // schema and verify with the official Standard Webhooks library.
    let audit = worker.audit_deliveries();
    match &audit {
        Ok(summary) => eprintln!("e2e: {summary}"),
        Err(problems) => eprintln!("e2e: FAILED: customer webhook deliveries that break the contract:\n{problems}"),
    }
    // Whatever the tests asserted, no call of the run's shared worker crossed a limit that
    // Cloudflare enforces and the local stack may not (docs/deploy.md, "Limits").
    let crossed = worker.limits_crossed();
    if crossed.is_empty() {
        eprintln!("e2e: no call crossed a Cloudflare limit ({layout}); the highest each limit saw:");
        worker.print_quotas("e2e");
    } else {
        eprintln!("e2e: FAILED: calls that crossed a Cloudflare limit ({layout}):\n{}", crossed.join("\n"));
    }
    worker.stop();
    if (audit.is_err() || !crossed.is_empty()) && !conclusion.has_failed() {
        std::process::exit(101);
    }
    conclusion.exit();
}
