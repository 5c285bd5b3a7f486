//! Signs webhooks exactly as Telnyx does: Ed25519 over `timestamp|body`, base64 in
//! `telnyx-signature-ed25519`, Unix seconds in `telnyx-timestamp`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};

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

pub use crate::facts::{envelope, inbound, receipt, CUSTOMER_PHONE};

/// Posts a signed delivery to `{base}/webhooks/telnyx`; returns (status, body), status 0 when no
/// HTTP answer came back.
pub fn deliver(base: &str, signer: &Signer, body: &str, unix_seconds: i64) -> (u16, String) {
    let h = signer.sign(body.as_bytes(), unix_seconds);
    let result = ureq::post(&format!("{base}/webhooks/telnyx"))
        .timeout(crate::api::TIMEOUT)
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
    use serde_json::Value;

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
