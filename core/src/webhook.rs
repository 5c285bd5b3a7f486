//! Customer webhooks, signed per Standard Webhooks v1.
//!
//! Each attempt carries `webhook-id` (the event id, the same on every attempt),
//! `webhook-timestamp` (Unix seconds, fresh on every attempt) and
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, keyed by the
//! endpoint's secret `whsec_<base64 key>`.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::Timestamp;

crate::text_enum! {
    /// A customer event's type (docs/contract.md §6): the `type` of its webhook body, by its wire
    /// name. Declared in the order of [`EventType::ALL`]: the subscribable types, then the
    /// operator's own, then the test.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum EventType {
        MessageReceived = "message.received",
        MessageSent = "message.sent",
        MessageDelivered = "message.delivered",
        MessageFailed = "message.failed",
        CallInitiated = "call.initiated",
        CallAnswered = "call.answered",
        CallCompleted = "call.completed",
        CallMissed = "call.missed",
        EndpointDisabled = "endpoint.disabled",
        DeliveryExhausted = "delivery.exhausted",
        BacklogHigh = "backlog.high",
        EndpointCircuitOpened = "endpoint.circuit_opened",
        EndpointCircuitClosed = "endpoint.circuit_closed",
        /// A carrier event that failed for good: the operator's only.
        CarrierEventFailed = "carrier_event.failed",
        /// The running audit found a row that breaks one of the product's promises: the
        /// operator's only.
        AuditViolation = "audit.violation",
        /// The event `POST /v1/webhook_endpoints/{id}/test` sends, to that endpoint only.
        EndpointTest = "endpoint.test",
    }
}

impl EventType {
    /// The types about a message or a call: the effects of carrier facts.
    pub const OF_RESOURCES: [EventType; 8] = [
        EventType::MessageReceived,
        EventType::MessageSent,
        EventType::MessageDelivered,
        EventType::MessageFailed,
        EventType::CallInitiated,
        EventType::CallAnswered,
        EventType::CallCompleted,
        EventType::CallMissed,
    ];

    /// The types an endpoint may subscribe to: [`EventType::OF_RESOURCES`], then the five
    /// operational signals about the account's own endpoints and deliveries.
    pub const SUBSCRIBABLE: [EventType; 13] = {
        let signals = [
            EventType::EndpointDisabled,
            EventType::DeliveryExhausted,
            EventType::BacklogHigh,
            EventType::EndpointCircuitOpened,
            EventType::EndpointCircuitClosed,
        ];
        let mut all = [EventType::EndpointTest; 13];
        let mut i = 0;
        while i < all.len() {
            let resources = Self::OF_RESOURCES.len();
            all[i] = if i < resources { Self::OF_RESOURCES[i] } else { signals[i - resources] };
            i += 1;
        }
        all
    };
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The wire names of [`EventType::SUBSCRIBABLE`], in its order.
pub const EVENT_TYPES: [&str; 13] = {
    let mut names = [""; 13];
    let mut i = 0;
    while i < names.len() {
        names[i] = EventType::SUBSCRIBABLE[i].as_str();
        i += 1;
    }
    names
};

/// How far a receiver accepts a `webhook-timestamp` from its clock, per the specification.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// An endpoint's signing secret. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret {
    key: Vec<u8>,
}

/// Why a secret was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretError {
    /// Not `whsec_` followed by base64.
    Malformed,
    /// The key is empty.
    Empty,
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(redacted)")
    }
}

impl SigningSecret {
    /// A secret from raw key bytes (the caller draws them from a CSPRNG).
    pub fn from_bytes(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    /// Parses `whsec_<base64>`.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.strip_prefix("whsec_").ok_or(SecretError::Malformed)?;
        let key = STANDARD.decode(encoded).map_err(|_| SecretError::Malformed)?;
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Self { key })
    }

    /// The `whsec_...` form shown to the customer once and stored for signing.
    pub fn to_whsec(&self) -> String {
        format!("whsec_{}", STANDARD.encode(&self.key))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC-SHA256 accepts keys of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` value for one attempt.
    pub fn sign(&self, id: &str, timestamp: Timestamp, body: &[u8]) -> String {
        let tag = self.mac(id, timestamp.unix_seconds(), body).finalize().into_bytes();
        format!("v1,{}", STANDARD.encode(tag))
    }

    /// Checks a `webhook-signature` header (several space-separated signatures allowed) the way a
    /// receiver does, within [`TOLERANCE_SECS`] of `now`.
    pub fn verify(&self, id: &str, timestamp: &str, signatures: &str, body: &[u8], now: Timestamp) -> bool {
        let Ok(ts) = timestamp.parse::<i64>() else { return false };
        // The timestamp is the sender's to choose: `-9223372036854775808` must be a refusal,
        // not an overflow, so the distance is computed without wrapping.
        let within =
            now.unix_seconds().checked_sub(ts).is_some_and(|skew| skew.unsigned_abs() <= TOLERANCE_SECS.unsigned_abs());
        if !within {
            return false;
        }
        signatures.split(' ').filter_map(|s| s.strip_prefix("v1,")).any(|sig| {
            STANDARD.decode(sig).is_ok_and(|expected| self.mac(id, ts, body).verify_slice(&expected).is_ok())
        })
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::Value;

    use super::*;

    const VECTORS: &str = include_str!("../tests/vectors/signatures.json");

    #[test]
    fn every_event_type_reads_back_from_its_wire_name() {
        for t in EventType::ALL {
            assert_eq!(EventType::from_name(t.as_str()), Some(t));
        }
        assert_eq!(EventType::from_name("message.deliverd"), None);
        assert!(EventType::SUBSCRIBABLE.iter().all(|t| EventType::ALL.contains(t)));
        assert_eq!(EVENT_TYPES[2], "message.delivered");
    }

    #[test]
    fn standard_webhooks_vector() {
        let all: Value = serde_json::from_str(VECTORS).unwrap();
        let v = &all["standard_webhooks_v1"][0];
        let secret = SigningSecret::parse(v["secret"].as_str().unwrap()).unwrap();
        let ts = v["timestamp"].as_i64().unwrap();
        let (id, body) = (v["id"].as_str().unwrap(), v["payload"].as_str().unwrap().as_bytes());
        assert_eq!(secret.sign(id, Timestamp::from_unix_seconds(ts), body), v["signature"].as_str().unwrap());
        let now = Timestamp::from_unix_seconds(ts + 10);
        assert!(secret.verify(id, &ts.to_string(), v["signature"].as_str().unwrap(), body, now));
        assert_eq!(secret.to_whsec(), v["secret"].as_str().unwrap());
    }

    #[test]
    fn every_way_to_be_wrong() {
        let secret = SigningSecret::from_bytes(&[9; 32]);
        let now = Timestamp::from_unix_seconds(1_700_000_000);
        let sig = secret.sign("evt_1", now, b"{}");
        let ts = "1700000000";
        assert!(secret.verify("evt_1", ts, &sig, b"{}", now));
        assert!(secret.verify("evt_1", ts, &format!("v1,AAAA {sig}"), b"{}", now), "rotation: any listed signature");
        assert!(!secret.verify("evt_2", ts, &sig, b"{}", now), "other id");
        assert!(!secret.verify("evt_1", ts, &sig, b"{ }", now), "changed body");
        assert!(!secret.verify("evt_1", "1700000001", &sig, b"{}", now), "other timestamp");
        assert!(!secret.verify("evt_1", ts, &sig.replace("v1,", "v2,"), b"{}", now), "wrong version");
        assert!(!secret.verify("evt_1", ts, &sig[..sig.len() - 4], b"{}", now), "truncated");
        assert!(!secret.verify("evt_1", ts, "", b"{}", now), "missing");
        assert!(!secret.verify("evt_1", ts, &sig, b"{}", Timestamp::from_unix_seconds(1_700_000_301)), "too old");
        assert!(
            !secret.verify("evt_1", ts, &sig, b"{}", Timestamp::from_unix_seconds(1_699_999_699)),
            "from the future"
        );
        assert!(!SigningSecret::from_bytes(&[8; 32]).verify("evt_1", ts, &sig, b"{}", now), "wrong secret");
        assert_eq!(SigningSecret::parse("whsec_"), Err(SecretError::Empty));
        assert_eq!(SigningSecret::parse("sk_abc"), Err(SecretError::Malformed));
        assert_eq!(SigningSecret::parse("whsec_***"), Err(SecretError::Malformed));
        assert_eq!(format!("{secret:?}"), "SigningSecret(redacted)");
    }

    /// Timestamps at the edges of i64 (and beyond) are refusals, never an overflow.
    #[test]
    fn extreme_timestamps_are_refused_without_overflow() {
        let secret = SigningSecret::from_bytes(&[9; 32]);
        let sig = secret.sign("evt_1", Timestamp::from_unix_seconds(0), b"{}");
        for now in [
            Timestamp::from_unix_seconds(1_700_000_000),
            Timestamp::from_unix_millis(i64::MIN),
            Timestamp::from_unix_millis(i64::MAX),
        ] {
            for ts in [
                "-9223372036854775808",
                "9223372036854775807",
                "-9223372036854775809",
                "99999999999999999999",
                "-1",
                "+1700000000",
                " 1700000000",
                "1e9",
                "",
            ] {
                assert!(!secret.verify("evt_1", ts, &sig, b"{}", now), "{ts} at {now:?}");
            }
        }
        let at_min = Timestamp::from_unix_millis(i64::MIN);
        let signed = secret.sign("evt_1", at_min, b"{}");
        assert!(
            secret.verify("evt_1", &at_min.unix_seconds().to_string(), &signed, b"{}", at_min),
            "the far past still verifies against itself"
        );
    }
}
