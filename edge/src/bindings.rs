//! Binding and variable names, mirroring `wrangler.toml` one for one.

/// The D1 database holding every table.
pub const DB: &str = "DB";
/// Producer binding of the `jobs` queue: one message per carrier event to process.
pub const JOBS: &str = "JOBS";
/// Producer binding of the `deliveries` queue: one message per customer webhook attempt.
pub const DELIVERIES: &str = "DELIVERIES";
/// The Durable Object namespace of the per-call ring owner.
pub const CALL_RING: &str = "CALL_RING";

/// Queue names as the consumer sees them in `MessageBatch::queue()`.
pub mod queues {
    /// Carrier events to process.
    pub const JOBS: &str = "exactly-jobs";
    /// Carrier events whose processing failed on every retry.
    pub const JOBS_DEAD_LETTER: &str = "exactly-jobs-dlq";
    /// Customer webhook deliveries.
    pub const DELIVERIES: &str = "exactly-deliveries";
    /// Customer webhook deliveries that exhausted the queue's retries.
    pub const DELIVERIES_DEAD_LETTER: &str = "exactly-deliveries-dlq";
}

/// Variable and secret names of contract §2.
pub mod vars {
    /// Base64 Ed25519 public key(s) that sign Telnyx webhooks.
    pub const TELNYX_PUBLIC_KEY: &str = "TELNYX_PUBLIC_KEY";
}
