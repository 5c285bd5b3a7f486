//! Binding and variable names, mirroring `wrangler.toml` one for one.

/// The D1 database holding every table (with no `EVENT_SHARDS`, the dedupe log too).
pub const DB: &str = "DB";
/// The prefix of the extra D1 databases of the dedupe log: `EVENTS_0`, `EVENTS_1`, ...
pub const EVENTS_PREFIX: &str = "EVENTS_";
/// The prefix of the account databases beside `DB` (docs/scaling.md, "Accounts across
/// databases"): `ACCOUNTS_0`, `ACCOUNTS_1`, ...
pub const ACCOUNTS_PREFIX: &str = exactly_core::shard::ACCOUNTS_PREFIX;
/// Producer binding of the `jobs` queue: one message per carrier event or dispatch to process.
pub const JOBS: &str = "JOBS";
/// Producer binding of the `deliveries` queue: one message per customer webhook attempt.
pub const DELIVERIES: &str = "DELIVERIES";
/// The Durable Object namespace of the per-call ring owner.
pub const CALL_RING: &str = "CALL_RING";
/// The request header that asks a call's object to erase a number from its storage instead of
/// taking an input (docs/contract.md §5, "Erasure").
pub const ERASE_HEADER: &str = "x-erase-number";
/// The test build's request to a call's Durable Object for how many rows it still stores.
#[cfg(feature = "fault-injection")]
pub const HELD_HEADER: &str = "x-e2e-held";
/// The R2 bucket holding the copy of every inbound media item.
pub const MEDIA: &str = "MEDIA";

/// Queue names as the consumer sees them in `MessageBatch::queue()`.
pub mod queues {
    /// Carrier events and dispatches to process.
    pub const JOBS: &str = "exactly-jobs";
    /// Jobs that failed on every retry.
    pub const JOBS_DEAD_LETTER: &str = "exactly-jobs-dlq";
    /// How many times the jobs dead-letter consumer is given a message: its `max_retries` in
    /// wrangler.toml, plus one.
    pub const JOBS_DEAD_LETTER_ATTEMPTS: u32 = 4;
    /// Customer webhook deliveries.
    pub const DELIVERIES: &str = "exactly-deliveries";
    /// Customer webhook deliveries that exhausted the queue's retries.
    pub const DELIVERIES_DEAD_LETTER: &str = "exactly-deliveries-dlq";
}

/// Variable and secret names (docs/contract.md §2).
pub mod vars {
    /// Base64 Ed25519 public key(s) that sign Telnyx webhooks.
    pub const TELNYX_PUBLIC_KEY: &str = "TELNYX_PUBLIC_KEY";
    /// Telnyx REST API key.
    pub const TELNYX_API_KEY: &str = "TELNYX_API_KEY";
    /// Telnyx REST API base URL.
    pub const TELNYX_API_BASE: &str = "TELNYX_API_BASE";
    /// Telnyx Call Control connection used to dial legs.
    pub const TELNYX_CONNECTION_ID: &str = "TELNYX_CONNECTION_ID";
    /// Telnyx messaging profile used to send messages.
    pub const TELNYX_MESSAGING_PROFILE_ID: &str = "TELNYX_MESSAGING_PROFILE_ID";
    /// Twilio auth token(s), comma-separated during a rotation.
    pub const TWILIO_AUTH_TOKEN: &str = "TWILIO_AUTH_TOKEN";
    /// Plivo auth token(s), comma-separated during a rotation.
    pub const PLIVO_AUTH_TOKEN: &str = "PLIVO_AUTH_TOKEN";
    /// Twilio account SID: with the (first) auth token, the credentials that send through
    /// Twilio's REST API.
    pub const TWILIO_ACCOUNT_SID: &str = "TWILIO_ACCOUNT_SID";
    /// Twilio REST API base URL (default `https://api.twilio.com`).
    pub const TWILIO_API_BASE: &str = "TWILIO_API_BASE";
    /// Plivo auth id: with the (first) auth token, the credentials that send through Plivo.
    pub const PLIVO_AUTH_ID: &str = "PLIVO_AUTH_ID";
    /// Plivo REST API base URL (default `https://api.plivo.com`).
    pub const PLIVO_API_BASE: &str = "PLIVO_API_BASE";
    /// The public origin carriers call.
    pub const PUBLIC_BASE_URL: &str = "PUBLIC_BASE_URL";
    /// Bearer token for `/admin/*`.
    pub const ADMIN_TOKEN: &str = "ADMIN_TOKEN";
    /// The key that signs media links (optional; derived from `ADMIN_TOKEN` when unset).
    pub const MEDIA_SIGNING_SECRET: &str = "MEDIA_SIGNING_SECRET";
    /// `true` accepts Plivo requests signed with V2 only, whose signature does not cover the
    /// body (docs/security.md); default `false`.
    pub const PLIVO_ACCEPT_V2: &str = "PLIVO_ACCEPT_V2";
    /// Where operational signals go (optional), checked like any endpoint URL.
    pub const OPERATOR_WEBHOOK_URL: &str = "OPERATOR_WEBHOOK_URL";
    /// The `whsec_` secret that signs them.
    pub const OPERATOR_WEBHOOK_SECRET: &str = "OPERATOR_WEBHOOK_SECRET";
    /// Seconds work may wait (a carrier event unprocessed, a delivery overdue) before the cron
    /// raises `backlog.high` (default 600).
    pub const BACKLOG_ALERT_SECS: &str = "BACKLOG_ALERT_SECS";
    /// Seconds an answered call may go without a change before the carrier is asked whether it
    /// is still up (default 7200).
    pub const RECONCILE_CALL_IDLE_SECS: &str = "RECONCILE_CALL_IDLE_SECS";
    /// Seconds a message may stay `sent` before the carrier is asked what became of it
    /// (default 21600).
    pub const RECONCILE_MESSAGE_SECS: &str = "RECONCILE_MESSAGE_SECS";
    /// `true` only in development: customer endpoints may be private addresses.
    pub const ALLOW_PRIVATE_ENDPOINTS: &str = "ALLOW_PRIVATE_ENDPOINTS";
    /// Days before the payload of a settled carrier event is cleared (default 30).
    pub const RETENTION_PAYLOAD_DAYS: &str = "RETENTION_PAYLOAD_DAYS";
    /// Days before a carrier event row, its dedupe key, is deleted (default 90, at least 3).
    pub const RETENTION_EVENT_DAYS: &str = "RETENTION_EVENT_DAYS";
    /// Days before the attempts of a delivered customer webhook are deleted (default 30).
    pub const RETENTION_ATTEMPT_DAYS: &str = "RETENTION_ATTEMPT_DAYS";
    /// Days before a customer event, with its deliveries and their attempts, is deleted once none
    /// of its deliveries is pending (default 90).
    pub const RETENTION_CUSTOMER_EVENT_DAYS: &str = "RETENTION_CUSTOMER_EVENT_DAYS";
    /// The dedupe log's shard map: `BINDING=first-last` entries naming the D1 binding (`DB` or
    /// `EVENTS_<n>`) of every virtual shard from 0 to 1023 (default: all in `DB`).
    pub const EVENT_SHARDS: &str = "EVENT_SHARDS";
    /// The account databases new accounts are placed in (`DB`, `ACCOUNTS_<n>`), separated by
    /// spaces; default: `DB`, whatever else is bound.
    pub const ACCOUNT_SHARDS: &str = "ACCOUNT_SHARDS";
}
