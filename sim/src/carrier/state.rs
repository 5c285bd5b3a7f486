//! The fake carrier's state: what it received, what it answered, and what it was told to do,
//! shared by its handlers ([`super`]'s and [`super::rest`]'s).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::telnyx::Signer;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `POST`, ...
    pub method: String,
    /// `/v2/messages`, ...
    pub path: String,
    /// The `Idempotency-Key` header, if any.
    pub idempotency_key: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body (Null when not JSON).
    pub body: Value,
    /// When it arrived, in Unix milliseconds by this machine's clock (the worker's too, locally).
    pub at_millis: i64,
}

/// Where the fake sends webhooks when a scenario asks it to.
#[derive(Clone)]
pub struct WebhookTarget {
    /// The worker's origin, e.g. `http://127.0.0.1:8787`.
    pub base: String,
    /// Signs like Telnyx, with the key the worker trusts.
    pub signer: Signer,
    /// Signs Twilio status callbacks.
    pub twilio_token: Option<String>,
    /// Signs Plivo status callbacks (V3).
    pub plivo_token: Option<String>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) requests: Vec<Recorded>,
    /// Idempotency key -> the answer given, replayed for a repeated key.
    pub(super) answers: HashMap<String, (u16, Value)>,
    pub(super) attempts: HashMap<String, u32>,
    /// Idempotency key -> the carrier message id, fixed on first sight.
    pub(super) carrier_ids: HashMap<String, String>,
    pub(super) target: Option<WebhookTarget>,
    /// Messages Twilio and Plivo took, in order: (carrier, listed as the carrier lists it, text).
    pub(super) taken: Vec<(&'static str, Value, String)>,
    /// Twilio and Plivo send attempts by (carrier, from, to, text).
    pub(super) rest_attempts: HashMap<String, u32>,
    /// Call legs that ended (call control id -> end time), as `GET /v2/calls/{id}` reports.
    pub(super) ended_calls: HashMap<String, String>,
    /// What `GET` of a message reports as its status, by carrier message id.
    pub(super) message_statuses: HashMap<String, String>,
    /// Messages without a marker get their receipts too.
    pub(super) deliver_by_default: bool,
    /// Texts whose sends after the first answer 503 until released.
    pub(super) held: std::collections::HashSet<String>,
}

pub(super) fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panicked handler thread leaves the data usable; keep serving.
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether a message with `text` gets its receipts on its own, and if so whether they say
/// delivered (`Some(true)`) or failed.
pub(super) fn receipts_due(text: &str, by_default: bool) -> Option<bool> {
    let timed = ["[receipt-first]", "[slow-receipts]", "[no-receipt]", "[refuse]", "[lost-answer]"];
    if text.contains("[fail]") {
        Some(false)
    } else if text.contains("[deliver]") || (by_default && !timed.iter().any(|m| text.contains(m))) {
        Some(true)
    } else {
        None
    }
}
