//! The portable core of **exactly**: everything that decides, nothing that does IO.
//!
//! Carriers deliver webhooks at least once. This crate turns a raw delivery (headers as plain
//! strings, the body as bytes) into a verified, normalized event, and decides what that event
//! changes. The `edge` crate owns every effect: HTTP, D1, Queues, Durable Objects.
//!
//! The contract of this crate, in the manner of a sans-IO protocol core:
//! - **No IO.** Nothing here opens a socket, a file or a database.
//! - **No clock.** Every time-dependent function takes `now` as a [`Timestamp`].
//! - **No randomness.** Ids, secrets and jitter are drawn by the caller and passed in.
//! - **No panics on input.** Anything that came off the network is answered with an error value.
//! - **Duplicates are ordinary.** Every rule answers a duplicate or stale input with an
//!   "unchanged" outcome, never an error.
//!
//! # Layout
//! Carriers, one file each (signature verification and parsing into [`CarrierEvent`]):
//! - [`telnyx`]: Ed25519 over `timestamp|body`; messaging (`message.received`, `message.sent`,
//!   `message.finalized`) and Call Control (`call.initiated`, `call.answered`, `call.bridged`,
//!   `call.hangup`).
//! - [`twilio`]: `X-Twilio-Signature` (HMAC-SHA1 over URL + sorted form parameters, or
//!   `bodySHA256` for JSON); message status callbacks and inbound messages.
//! - [`plivo`]: `X-Plivo-Signature-V2` and `-V3` (HMAC-SHA256); message callbacks and inbound
//!   messages.
//!
//! The product's own model and rules, one file per domain:
//! - [`event`]: [`CarrierEvent`] and its [`EventKind`]s, [`Provider`], and [`VerifiedEvent`],
//!   the proof that a signature was checked (only a verifier can build one).
//! - [`media`]: MMS media items, the storage key of each copy, and the signed, expiring links
//!   that serve the copies.
//! - [`message`]: the message status lattice (`queued -> sending -> sent -> delivered|failed`).
//! - [`number`]: E.164 phone numbers, parsed once.
//! - [`segments`]: SMS segment counting (GSM-7 160/153, UCS-2 70/67).
//! - [`call`]: call statuses, duration and billable minutes.
//! - [`call_machine`]: one inbound call and its sequential ring as a sans-IO machine: facts in,
//!   actions out, the same result whatever order and however often the facts arrive.
//! - [`ring_plan`]: the sequential-ring decision (dial target k / bridge / end as missed).
//! - [`backoff`]: retry schedules (customer webhooks, receipts that arrive too early).
//! - [`breaker`]: the per-endpoint circuit breaker (closed, open, half-open with one probe).
//! - [`webhook`]: customer webhook signatures (Standard Webhooks v1) and the event types.
//! - [`catalog`]: every event type with its summary, description and an example body.
//! - [`endpoint`]: which customer endpoint URLs may receive webhooks.
//! - [`erasure`]: the phone numbers a stored carrier payload names, read by meaning.
//! - [`filter`]: endpoint filters, a small predicate language over an event's body.
//! - [`headers`]: the custom headers an endpoint sends with every attempt.
//!
//! Plumbing:
//! - [`reject`]: why a delivery was refused: unauthenticated, malformed or too large.
//! - [`text_enum!`]: every enum's name and its parsing, written once.
//! - [`timestamp`]: the one time type, milliseconds since the Unix epoch, and RFC 3339.
//! - [`secret`]: carrier auth tokens, redacted in `Debug`.
//! - [`id`]: prefixed resource ids (`cev_...`) built from caller-supplied random bytes.
//! - [`form`]: `application/x-www-form-urlencoded` bodies and URL pieces, as the HMAC
//!   carriers sign them.

pub mod access;
pub mod backoff;
pub mod breaker;
pub mod call;
pub mod call_machine;
pub mod catalog;
pub mod endpoint;
pub mod erasure;
pub mod event;
pub mod filter;
pub mod form;
pub mod headers;
pub mod id;
pub mod learned;
pub mod media;
pub mod message;
pub mod number;
pub mod plivo;
pub mod reject;
pub mod ring_plan;
pub mod rng;
pub mod secret;
pub mod segments;
pub mod shard;
pub mod telnyx;
pub mod text_enum;
pub mod timestamp;
pub mod twilio;
pub mod webhook;

pub use event::{CarrierEvent, EventKind, Provider, VerifiedEvent};
pub use reject::{PayloadError, Rejection, SignatureError};
pub use timestamp::Timestamp;

/// Parses a body stored at ingest (already verified then) into its carrier event.
pub fn parse_stored(provider: Provider, body: &[u8]) -> Result<CarrierEvent, PayloadError> {
    match provider {
        Provider::Telnyx => telnyx::parse_event(body),
        Provider::Twilio => twilio::parse_event(body),
        Provider::Plivo => plivo::parse_event(body),
    }
}

/// The largest webhook body accepted from a carrier, in bytes (256 KiB).
///
/// Real carrier events are a few KiB; anything near this size is not a carrier talking.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// How far a signed timestamp may be from `now`, in either direction, in seconds.
pub const SIGNATURE_TOLERANCE_SECS: i64 = 300;
