//! End-to-end tests against the real worker in `wrangler dev`.
//!
//! One worker serves every test of this binary; tests use unique event ids so they can run in
//! parallel and still count exactly their own rows.

use std::sync::Arc;

use exactly_tests::Worker;
use libtest_mimic::{Arguments, Trial};

mod calls;
mod carriers;
mod chaos;
mod ingest;
mod messaging;
mod mms;
mod operations;
mod security;
mod shards;
mod store;
mod webhooks;

/// A test body: it panics (through `assert!`) to fail.
pub type TestFn = fn(&Worker);

fn main() {
    let args = Arguments::from_args();
    let all: Vec<(&str, TestFn)> = [
        ingest::TESTS,
        messaging::TESTS,
        carriers::TESTS,
        mms::TESTS,
        calls::TESTS,
        webhooks::TESTS,
        chaos::TESTS,
        operations::TESTS,
        security::TESTS,
        store::TESTS,
        shards::TESTS,
    ]
    .concat();
    if args.list {
        let trials = all.into_iter().map(|(name, _)| Trial::test(name, || Ok(()))).collect();
        libtest_mimic::run(&args, trials).exit();
    }
    let worker = Arc::new(Worker::start());
    let trials = all
        .into_iter()
        .map(|(name, test)| {
            let worker = Arc::clone(&worker);
            Trial::test(name, move || {
                test(&worker);
                Ok(())
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
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
    match Arc::try_unwrap(worker) {
        Ok(mut worker) => worker.stop(),
        Err(_) => eprintln!("worker still shared at exit; it is stopped by its process group"),
    }
    if audit.is_err() && !conclusion.has_failed() {
        std::process::exit(101);
    }
    conclusion.exit();
}
