//! The API against its own document: Schemathesis, a property-based tester nobody here wrote
//! (pinned in tests/schemathesis/requirements.txt), generates requests from docs/openapi.json as
//! the worker serves it at `/openapi.json` and checks every answer against the document, in each
//! of its phases: the document's examples, the coverage of each parameter's edges, fuzzing, and
//! the stateful phase that follows the document's links from one answer to the next request.
//! Its configuration and hooks are in tests/schemathesis/ (docs/testing.md, "The API against
//! its document").

use std::process::Command;
use std::time::Duration;

use exactly_tests::{fresh_number, root, telnyx_inbound, Worker, ADMIN_TOKEN};

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    ("contract::schemathesis_finds_no_failure_in_the_api", schemathesis_finds_no_failure_in_the_api),
    ("contract::schemathesis_finds_no_failure_in_the_admin_api", schemathesis_finds_no_failure_in_the_admin_api),
];

/// The seed of every run: the same cases each time.
const SEED: &str = "20261206";

/// Runs Schemathesis against `worker` on the operations whose paths match `paths`, with
/// `token` and the hooks' `data` (tests/schemathesis/hooks.py); panics with its report when it
/// finds a failure.
fn run(worker: &Worker, paths: &str, token: &str, label: &str, data: &[(&str, &str)]) {
    let root = root();
    let dir = root.join("tests/schemathesis");
    let bin = root.join(".tools/schemathesis/bin/schemathesis");
    assert!(bin.exists(), "{} is missing: run scripts/setup.sh", bin.display());
    // Nothing is written where it runs (its example database is off), but it runs apart anyway.
    let cwd =
        std::env::temp_dir().join(format!("exactly-schemathesis-{}-{}", std::process::id(), label.trim_matches('/')));
    std::fs::create_dir_all(&cwd).expect("a directory to run in");
    let output = Command::new(&bin)
        .current_dir(&cwd)
        .env("SCHEMATHESIS_HOOKS", "hooks")
        .env("PYTHONPATH", &dir)
        .envs(data.iter().copied())
        .arg("--no-color")
        .arg("--config-file")
        .arg(dir.join("schemathesis.toml"))
        .args(["run", &format!("{}/openapi.json", worker.base), "--seed", SEED])
        .args(["--include-path-regex", paths])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .output()
        .expect("run schemathesis");
    let _ = std::fs::remove_dir_all(&cwd);
    let report = String::from_utf8_lossy(&output.stdout);
    let summary = report.lines().rev().find(|l| l.contains(" in ") && l.starts_with('=')).unwrap_or("");
    eprintln!("contract: {label}: {}", summary.trim_matches(['=', ' ']));
    // What it could not reach (operations it found no data for) is worth reading even in a pass.
    if let Some(warnings) = report.split("WARNINGS").nth(1).and_then(|w| w.split("SUMMARY").next()) {
        eprintln!("contract: {label}: warnings:{}", warnings.trim_end_matches(['=', '\n']));
    }
    assert!(
        output.status.success(),
        "schemathesis found failures in {label}:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("Stateful (in "), "the stateful phase did not run:\n{report}");
}

/// Every `/v1` operation, with the key of an account that has something to read (a number, an
/// endpoint, an inbound message with its event and delivery, a ringing call), on a worker of its
/// own (whose rate limits, like every test worker's, do not hide the API behind 429s).
fn schemathesis_finds_no_failure_in_the_api(_: &Worker) {
    let worker = Worker::start_with(&[]);
    let c = worker.new_customer("schemathesis");
    let ringing = fresh_number();
    worker.create_number(&c.account, &ringing, &crate::calls::TARGETS);
    crate::calls::ring_on(&worker, c.key.clone(), &ringing);
    let (endpoint, _) = worker.endpoint_at(&c, "/schemathesis", &["message.received"]);
    let stored = worker.deliver_telnyx(&telnyx_inbound("evt-schemathesis-1", "msg-schemathesis-1", &c.number, "hi"));
    assert_eq!(stored.status, 200, "{}", stored.body);
    let delivered = worker.eventually(Duration::from_secs(60), || {
        worker.count(&format!("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = '{endpoint}'")) == 1
    });
    assert!(delivered, "the inbound message's event has its delivery");
    let receiver = format!("{}/schemathesis", worker.customer.base);
    run(&worker, "^/v1/", &c.key, "/v1", &[("EXACTLY_NUMBER", &c.number), ("EXACTLY_RECEIVER", &receiver)]);
    // No endpoint it made was sent to anywhere but the test's receiver. (The deliveries that came
    // there are not audited as the passes audit theirs: Schemathesis rotates a secret again and
    // again, and a delivery signed two rotations back has no secret left to verify with.)
    let elsewhere = worker.count(&format!(
        "SELECT COUNT(*) AS n FROM webhook_endpoints WHERE account_id = '{}' AND url != '{receiver}'",
        c.account
    ));
    assert_eq!(elsewhere, 0, "endpoints pointed past the test's receiver");
    no_limit_crossed(&worker);
}

/// Whatever Schemathesis sent, no call of the worker crossed a limit Cloudflare enforces.
fn no_limit_crossed(worker: &Worker) {
    let crossed = worker.limits_crossed();
    assert!(crossed.is_empty(), "calls that crossed a Cloudflare limit:\n{}", crossed.join("\n"));
}

/// Every `/admin` operation, with the admin token, on a worker of its own: what it creates,
/// moves and deletes touches no other test.
fn schemathesis_finds_no_failure_in_the_admin_api(_: &Worker) {
    let worker = Worker::start_with(&[]);
    run(&worker, "^/admin/", ADMIN_TOKEN, "/admin", &[]);
    no_limit_crossed(&worker);
}
