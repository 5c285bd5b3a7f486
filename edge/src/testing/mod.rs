//! What only the end-to-end test build carries (`fault-injection`; `scripts/build-worker.sh`
//! never enables it for a deployable worker): the `/__e2e` routes the harness drives ([`e2e`])
//! and the store's guard checks against real D1 ([`checks`]). The fault switches themselves
//! are in `faults.rs`, compiled to constants in production builds.

pub mod checks;
pub mod circuit_checks;
pub mod e2e;
