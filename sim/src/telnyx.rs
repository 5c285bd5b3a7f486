//! Signs webhooks exactly as Telnyx does: Ed25519 over `timestamp|body`, base64 in
//! `telnyx-signature-ed25519`, Unix seconds in `telnyx-timestamp`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use serde_json::{json, Value};

/// The headers of one signed delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `telnyx-timestamp`.
    pub timestamp: String,
    /// `telnyx-signature-ed25519`.
    pub signature: String,
}

/// A Telnyx webhook signer holding one private key.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("telnyx::Signer").field("public_key", &self.public_key_base64()).finish()
    }
}

impl Signer {
    /// A signer from a 32-byte Ed25519 seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self { key: SigningKey::from_bytes(&seed) }
    }

    /// A signer from a base64 32-byte seed, as `.dev.keys` stores it.
    pub fn from_base64_seed(text: &str) -> Result<Self, String> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| "seed is not base64".to_owned())?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| "seed is not 32 bytes".to_owned())?;
        Ok(Self::from_seed(seed))
    }

    /// A signer with a fresh random key.
    pub fn generate() -> Self {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).expect("the OS random generator is available");
        Self::from_seed(seed)
    }

    /// The base64 private seed, as `.dev.keys` stores it.
    pub fn seed_base64(&self) -> String {
        STANDARD.encode(self.key.to_bytes())
    }

    /// The base64 public key, as the worker's `TELNYX_PUBLIC_KEY` expects it.
    pub fn public_key_base64(&self) -> String {
        STANDARD.encode(self.key.verifying_key().as_bytes())
    }

    /// Signs `body` as sent at `unix_seconds`.
    pub fn sign(&self, body: &[u8], unix_seconds: i64) -> SignedHeaders {
        let timestamp = unix_seconds.to_string();
        let mut message = timestamp.as_bytes().to_vec();
        message.push(b'|');
        message.extend_from_slice(body);
        SignedHeaders { timestamp, signature: STANDARD.encode(self.key.sign(&message).to_bytes()) }
    }
}

/// A Telnyx v2 webhook envelope.
pub fn envelope(id: &str, event_type: &str, occurred_at: &str, payload: Value, attempt: u32) -> String {
    json!({
        "data": {
            "record_type": "event",
            "id": id,
            "event_type": event_type,
            "occurred_at": occurred_at,
            "payload": payload,
        },
        "meta": { "attempt": attempt, "delivered_to": "https://example.invalid/webhooks/telnyx" }
    })
    .to_string()
}

/// Where the facts of the simulator and the tests come from, and where their sends go.
pub const CUSTOMER_PHONE: &str = "+15559990000";

/// A `message.received` webhook: an SMS of `text` from [`CUSTOMER_PHONE`] to `to`, carrier id
/// `carrier_message_id`. The one builder of inbound facts for the simulator and the tests.
pub fn inbound(event_id: &str, carrier_message_id: &str, to: &str, text: &str) -> String {
    envelope(
        event_id,
        "message.received",
        "2026-11-30T10:00:00Z",
        json!({"id": carrier_message_id, "direction": "inbound", "type": "SMS", "text": text,
               "from": {"phone_number": CUSTOMER_PHONE}, "to": [{"phone_number": to,
                   "status": "webhook_delivered"}], "media": []}),
        1,
    )
}

/// The receipt of an outbound message to [`CUSTOMER_PHONE`]: `message.sent` for `sent`, else
/// `message.finalized` with the carrier's `status` word (`delivered`, `delivery_failed`, ...) and
/// `errors`. The one builder of receipts for the simulator and the tests.
pub fn receipt(event_id: &str, carrier_message_id: &str, status: &str, errors: Value) -> String {
    let event_type = if status == "sent" { "message.sent" } else { "message.finalized" };
    envelope(
        event_id,
        event_type,
        "2026-11-30T10:00:05Z",
        json!({"id": carrier_message_id, "direction": "outbound",
               "to": [{"phone_number": CUSTOMER_PHONE, "status": status}], "errors": errors}),
        1,
    )
}

/// Posts a signed delivery to `{base}/webhooks/telnyx`; returns (status, body), status 0 when no
/// HTTP answer came back.
pub fn deliver(base: &str, signer: &Signer, body: &str, unix_seconds: i64) -> (u16, String) {
    let h = signer.sign(body.as_bytes(), unix_seconds);
    let result = ureq::post(&format!("{base}/webhooks/telnyx"))
        .set("content-type", "application/json")
        .set("telnyx-timestamp", &h.timestamp)
        .set("telnyx-signature-ed25519", &h.signature)
        .send_string(body);
    let answer = crate::api::Answer::from_result(result);
    (answer.status, answer.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_like_the_shared_vector() {
        let vectors: Value = serde_json::from_str(include_str!("../../core/tests/vectors/signatures.json")).unwrap();
        let v = &vectors["telnyx_ed25519"][0];
        let signer = Signer::from_base64_seed(v["private_seed_b64"].as_str().unwrap()).unwrap();
        assert_eq!(signer.public_key_base64(), v["public_key_b64"].as_str().unwrap());
        let ts: i64 = v["timestamp"].as_str().unwrap().parse().unwrap();
        let headers = signer.sign(v["body"].as_str().unwrap().as_bytes(), ts);
        assert_eq!(headers.signature, v["signature_b64"].as_str().unwrap());
        assert_eq!(headers.timestamp, "1700000000");
    }
}
