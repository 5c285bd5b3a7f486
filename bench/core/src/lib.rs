//! Benchmarks only; see `benches/verify.rs`.
