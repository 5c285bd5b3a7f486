//! Telnyx webhooks (API v2).
//!
//! Telnyx signs `timestamp + "|" + raw body` with Ed25519 and sends the base64 signature in
//! `telnyx-signature-ed25519` and the Unix timestamp (seconds) in `telnyx-timestamp`. The body
//! is a JSON envelope:
//!
//! ```json
//! {"data": {"id": "...", "event_type": "message.received", "occurred_at": "...",
//!           "payload": {...}, "record_type": "event"},
//!  "meta": {"attempt": 1, "delivered_to": "https://..."}}
//! ```
//!
//! `data.id` is the dedupe key: Telnyx keeps it across its own retries.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signature, VerifyingKey};
use serde::Deserialize;

use std::borrow::Cow;

use serde_json::Value;

use crate::event::{
    CallDirection, CallLeg, CallLegEvent, CarrierError, CarrierEvent, Cost, EventKind, Hangup, InboundMessage, Learned,
    Provider, StatusReport, VerifiedEvent,
};
use crate::media::MediaItem;
use crate::message::MessageStatus;
use crate::reject::{check_tolerance, PayloadError, Rejection, SignatureError};
use crate::{Timestamp, MAX_BODY_BYTES};

/// The header carrying the base64 Ed25519 signature.
pub const SIGNATURE_HEADER: &str = "telnyx-signature-ed25519";
/// The header carrying the signed Unix timestamp, in seconds.
pub const TIMESTAMP_HEADER: &str = "telnyx-timestamp";

/// The two Telnyx signature headers, as the request carried them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Headers<'a> {
    /// `telnyx-signature-ed25519`, if present.
    pub signature: Option<&'a str>,
    /// `telnyx-timestamp`, if present.
    pub timestamp: Option<&'a str>,
}

/// Why a configured Telnyx public key was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// No key was given.
    Empty,
    /// A key is not standard base64.
    NotBase64,
    /// A key does not decode to 32 bytes.
    WrongLength(usize),
    /// A key is not a valid curve point, or is of small order (it would accept forgeries).
    Weak,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("no public key given"),
            KeyError::NotBase64 => f.write_str("a public key is not valid base64"),
            KeyError::WrongLength(n) => write!(f, "a public key is {n} bytes, expected 32"),
            KeyError::Weak => f.write_str("a public key is not a safe Ed25519 point"),
        }
    }
}

impl std::error::Error for KeyError {}

/// Verifies Telnyx deliveries against one or more public keys.
///
/// Several keys are accepted so a key can be rotated without downtime: configure the old and
/// the new key together, then drop the old one.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<VerifyingKey>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("telnyx::Verifier").field("keys", &self.keys.len()).finish()
    }
}

impl Verifier {
    /// Reads base64 public keys separated by commas or whitespace (normally just one).
    pub fn from_base64_keys(text: &str) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for part in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|p| !p.is_empty()) {
            let bytes = STANDARD.decode(part).map_err(|_| KeyError::NotBase64)?;
            let bytes: [u8; 32] = bytes.as_slice().try_into().map_err(|_| KeyError::WrongLength(bytes.len()))?;
            let key = VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::Weak)?;
            if key.is_weak() {
                return Err(KeyError::Weak);
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self { keys })
    }

    /// Checks one delivery and parses it.
    ///
    /// In order: size (413), headers and signature within ±300 s of `now` (401), then the
    /// envelope (400). Nothing is parsed before the signature holds.
    pub fn verify(&self, headers: Headers<'_>, body: &[u8], now: Timestamp) -> Result<VerifiedEvent, Rejection> {
        if body.len() > MAX_BODY_BYTES {
            return Err(Rejection::TooLarge { limit: MAX_BODY_BYTES });
        }
        self.check_signature(headers, body, now)?;
        Ok(VerifiedEvent::new(parse_event(body)?))
    }

    fn check_signature(&self, headers: Headers<'_>, body: &[u8], now: Timestamp) -> Result<(), SignatureError> {
        let signature = headers.signature.ok_or(SignatureError::MissingHeader(SIGNATURE_HEADER))?;
        let timestamp = headers.timestamp.ok_or(SignatureError::MissingHeader(TIMESTAMP_HEADER))?;
        let signed_at = parse_unix_seconds(timestamp).ok_or(SignatureError::MalformedHeader(TIMESTAMP_HEADER))?;
        let signature = decode_signature(signature)?;
        check_tolerance(signed_at, now)?;

        let mut message = Vec::with_capacity(timestamp.len() + 1 + body.len());
        message.extend_from_slice(timestamp.as_bytes());
        message.push(b'|');
        message.extend_from_slice(body);
        // verify_strict refuses small-order keys and signatures, which plain verify accepts.
        if self.keys.iter().any(|key| key.verify_strict(&message, &signature).is_ok()) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

fn parse_unix_seconds(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn decode_signature(text: &str) -> Result<Signature, SignatureError> {
    let malformed = SignatureError::MalformedHeader(SIGNATURE_HEADER);
    let bytes = STANDARD.decode(text.trim()).map_err(|_| malformed.clone())?;
    let bytes: [u8; 64] = bytes.as_slice().try_into().map_err(|_| malformed)?;
    Ok(Signature::from_bytes(&bytes))
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    data: Option<Data<'a>>,
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    event_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    occurred_at: Option<Cow<'a, str>>,
    payload: Option<Value>,
}

#[derive(Deserialize)]
struct Meta {
    attempt: Option<u32>,
}

/// Parses a Telnyx v2 envelope that was verified at ingest, e.g. when re-reading it from
/// storage. It checks nothing about who sent it; use [`Verifier::verify`] on the way in.
pub fn parse_event(body: &[u8]) -> Result<CarrierEvent, PayloadError> {
    let envelope: Envelope<'_> = serde_json::from_slice(body).map_err(|_| PayloadError::NotParseable)?;
    let data = envelope.data.ok_or(PayloadError::MissingField("data"))?;
    let event_id = non_empty(data.id).ok_or(PayloadError::MissingField("data.id"))?;
    let event_type = non_empty(data.event_type).ok_or(PayloadError::MissingField("data.event_type"))?;
    let occurred_at = match data.occurred_at {
        None => None,
        Some(text) => Some(Timestamp::parse_rfc3339(&text).ok_or(PayloadError::InvalidField("data.occurred_at"))?),
    };
    let payload = data.payload.unwrap_or(Value::Null);
    let kind = parse_kind(&event_type, &payload)?;
    Ok(CarrierEvent {
        provider: Provider::Telnyx,
        event_id,
        event_type,
        occurred_at,
        attempt: envelope.meta.and_then(|m| m.attempt),
        kind,
    })
}

fn parse_kind(event_type: &str, payload: &Value) -> Result<EventKind, PayloadError> {
    Ok(match event_type {
        "message.received" => EventKind::MessageReceived(InboundMessage {
            carrier_message_id: required(payload, "id", "data.payload.id")?,
            from: required(&payload["from"], "phone_number", "data.payload.from.phone_number")?,
            to: required(&payload["to"][0], "phone_number", "data.payload.to[0].phone_number")?,
            text: payload["text"].as_str().unwrap_or_default().to_owned(),
            media: media(&payload["media"]),
        }),
        "message.sent" | "message.finalized" => {
            let carrier_status = required(&payload["to"][0], "status", "data.payload.to[0].status")?;
            EventKind::MessageStatus(StatusReport {
                carrier_message_id: required(payload, "id", "data.payload.id")?,
                status: message_status(&carrier_status),
                carrier_status,
                errors: errors(&payload["errors"]),
                cost: cost(&payload["cost"]),
            })
        }
        "call.initiated" => EventKind::CallInitiated(leg_event(payload)?),
        "call.answered" => EventKind::CallAnswered(leg_event(payload)?),
        "call.bridged" => EventKind::CallBridged(leg_event(payload)?),
        "call.hangup" => EventKind::CallHangup(Hangup {
            leg: leg(payload)?,
            cause: text(payload, "hangup_cause").unwrap_or_else(|| "unspecified".to_owned()),
            source: text(payload, "hangup_source").unwrap_or_else(|| "unknown".to_owned()),
            client_state: client_state(payload),
        }),
        _ => EventKind::Unrecognized,
    })
}

/// The items of an inbound message's `media` array (`url`, `content_type`, `size`), in order.
/// An item without a `url` has nothing to copy or show and is not kept.
fn media(value: &Value) -> Vec<MediaItem> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    Some(MediaItem {
                        url: text(item, "url")?,
                        content_type: text(item, "content_type"),
                        size: item["size"].as_u64(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Maps a Telnyx per-recipient status onto the message lattice. `delivery_unconfirmed` (the
/// carrier never learned the outcome) and unknown words move nothing.
pub fn message_status(carrier_status: &str) -> Option<MessageStatus> {
    Some(match carrier_status {
        "queued" => MessageStatus::Queued,
        "sending" => MessageStatus::Sending,
        "sent" => MessageStatus::Sent,
        "delivered" => MessageStatus::Delivered,
        "expired" | "sending_failed" | "delivery_failed" => MessageStatus::Failed,
        _ => return None,
    })
}

fn text(value: &Value, key: &str) -> Option<String> {
    match &value[key] {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn required(value: &Value, key: &str, path: &'static str) -> Result<String, PayloadError> {
    text(value, key).ok_or(PayloadError::MissingField(path))
}

fn errors(value: &Value) -> Vec<CarrierError> {
    value
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|e| {
                    Some(CarrierError { code: text(e, "code")?, title: text(e, "title").or_else(|| text(e, "detail")) })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn cost(value: &Value) -> Option<Cost> {
    let micros = Cost::parse_amount(&text(value, "amount")?)?;
    Some(Cost { micros, currency: text(value, "currency").unwrap_or_else(|| "USD".to_owned()) })
}

fn leg(payload: &Value) -> Result<CallLeg, PayloadError> {
    Ok(CallLeg {
        call_control_id: required(payload, "call_control_id", "data.payload.call_control_id")?,
        call_leg_id: required(payload, "call_leg_id", "data.payload.call_leg_id")?,
        call_session_id: required(payload, "call_session_id", "data.payload.call_session_id")?,
    })
}

fn leg_event(payload: &Value) -> Result<CallLegEvent, PayloadError> {
    Ok(CallLegEvent {
        leg: leg(payload)?,
        from: text(payload, "from").unwrap_or_default(),
        to: text(payload, "to").unwrap_or_default(),
        direction: match payload["direction"].as_str() {
            Some("outgoing") => CallDirection::Outgoing,
            _ => CallDirection::Incoming,
        },
        client_state: client_state(payload),
    })
}

/// `client_state` is base64 of what the platform attached when it dialled; anything that does
/// not decode to UTF-8 was not ours and is ignored.
fn client_state(payload: &Value) -> Option<String> {
    let encoded = payload["client_state"].as_str()?;
    let bytes = STANDARD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok()
}

/// Encodes `state` as Telnyx expects `client_state`: base64.
pub fn encode_client_state(state: &str) -> String {
    STANDARD.encode(state.as_bytes())
}

fn non_empty(text: Option<Cow<'_, str>>) -> Option<String> {
    text.filter(|t| !t.trim().is_empty()).map(|t| t.into_owned())
}

/// A Telnyx v2 webhook envelope, as the carrier would have sent it, for a fact learned from its
/// API ([`crate::learned`]).
fn learned_envelope(id: &str, event_type: &'static str, occurred_at: Timestamp, payload: Value) -> Learned {
    let body = serde_json::json!({
        "data": {"record_type": "event", "id": id, "event_type": event_type,
            "occurred_at": occurred_at.to_rfc3339(), "payload": payload},
        "meta": {"attempt": 1, "delivered_to": "reconciliation"},
    })
    .to_string();
    Learned { event_id: id.to_owned(), event_type, body }
}

/// A message's final status, learned from `GET /v2/messages/{id}`, as `message.finalized` under
/// the key `reconciled:{id}:{status}`; `errors` is the API's `errors` array, carried as it is.
pub fn learned_status(carrier_message_id: &str, status: &str, errors: &Value, now: Timestamp) -> Learned {
    let id = format!("reconciled:{carrier_message_id}:{status}");
    let payload = serde_json::json!({
        "id": carrier_message_id, "direction": "outbound", "to": [{"status": status}], "errors": errors,
    });
    learned_envelope(&id, "message.finalized", now, payload)
}

/// What a learned hangup names of its call.
pub struct CallOf<'a> {
    pub call_control_id: &'a str,
    pub call_leg_id: &'a str,
    pub call_session_id: &'a str,
    pub from: &'a str,
    pub to: &'a str,
}

/// The caller's leg ended at `ended_at`, learned from `GET /v2/calls/{id}`, as `call.hangup` of
/// the call `call_id` under the key `reconciled:{call_id}:hangup`.
pub fn learned_hangup(call_id: &str, call: &CallOf<'_>, ended_at: Timestamp) -> Learned {
    let payload = serde_json::json!({
        "call_control_id": call.call_control_id, "call_leg_id": call.call_leg_id,
        "call_session_id": call.call_session_id, "from": call.from, "to": call.to,
        "direction": "incoming", "hangup_cause": "normal_clearing", "hangup_source": "unknown",
    });
    learned_envelope(&format!("reconciled:{call_id}:hangup"), "call.hangup", ended_at, payload)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use ed25519_dalek::{Signer, SigningKey};

    use super::*;

    const VECTORS: &str = include_str!("../tests/vectors/signatures.json");

    struct Vector {
        public_key: String,
        seed: [u8; 32],
        timestamp: String,
        body: String,
        signature: String,
    }

    fn vector() -> Vector {
        let all: Value = serde_json::from_str(VECTORS).unwrap();
        let v = &all["telnyx_ed25519"][0];
        let text = |k: &str| v[k].as_str().unwrap().to_owned();
        Vector {
            public_key: text("public_key_b64"),
            seed: STANDARD.decode(text("private_seed_b64")).unwrap().try_into().unwrap(),
            timestamp: text("timestamp"),
            body: text("body"),
            signature: text("signature_b64"),
        }
    }

    fn at(v: &Vector, offset_secs: i64) -> Timestamp {
        Timestamp::from_unix_seconds(v.timestamp.parse::<i64>().unwrap() + offset_secs)
    }

    fn sign(seed: &[u8; 32], timestamp: &str, body: &[u8]) -> String {
        let mut message = timestamp.as_bytes().to_vec();
        message.push(b'|');
        message.extend_from_slice(body);
        STANDARD.encode(SigningKey::from_bytes(seed).sign(&message).to_bytes())
    }

    fn verify_with(
        v: &Vector,
        signature: Option<&str>,
        timestamp: Option<&str>,
        body: &[u8],
        now: Timestamp,
    ) -> Result<VerifiedEvent, Rejection> {
        let verifier = Verifier::from_base64_keys(&v.public_key).unwrap();
        verifier.verify(Headers { signature, timestamp }, body, now)
    }

    /// The signature held: the vector's bare body then fails only on its missing payload.
    fn signature_held(result: Result<VerifiedEvent, Rejection>) -> bool {
        matches!(result, Ok(_) | Err(Rejection::Malformed(_)))
    }

    fn unauthenticated(e: SignatureError) -> Result<VerifiedEvent, Rejection> {
        Err(Rejection::Unauthenticated(e))
    }

    #[test]
    fn golden_vector_verifies() {
        let v = vector();
        assert_eq!(sign(&v.seed, &v.timestamp, v.body.as_bytes()), v.signature);
        let verifier = Verifier::from_base64_keys(&v.public_key).unwrap();
        let headers = Headers { signature: Some(&v.signature), timestamp: Some(&v.timestamp) };
        assert_eq!(verifier.check_signature(headers, v.body.as_bytes(), at(&v, 0)), Ok(()));
        // The vector's body is a bare envelope: signed correctly, but a message.received
        // without its payload is not a Telnyx event.
        assert_eq!(
            verifier.verify(headers, v.body.as_bytes(), at(&v, 0)),
            Err(Rejection::Malformed(PayloadError::MissingField("data.payload.id")))
        );
    }

    #[test]
    fn verified_event_carries_the_envelope() {
        let v = vector();
        let body = br#"{"data":{"event_type":"message.received","id":"bf6307bd-884d-4c1f-b6ea-c62b8c495d3c",
            "payload":{"id":"m1","from":{"phone_number":"+15550001111"},"to":[{"phone_number":"+15550002222"}],
            "text":"hi"}}}"#;
        let event = signed(&v, body).unwrap().into_event();
        assert_eq!(event.provider, Provider::Telnyx);
        assert_eq!(event.event_id, "bf6307bd-884d-4c1f-b6ea-c62b8c495d3c");
        assert_eq!(event.event_type, "message.received");
        assert_eq!(event.occurred_at, None);
        assert_eq!(event.attempt, None);
    }

    #[test]
    fn tolerance_is_300_seconds_both_ways() {
        let v = vector();
        let ok = |off| verify_with(&v, Some(&v.signature), Some(&v.timestamp), v.body.as_bytes(), at(&v, off));
        assert!(signature_held(ok(300)));
        assert!(signature_held(ok(-300)));
        assert_eq!(ok(301), unauthenticated(SignatureError::Stale));
        assert_eq!(ok(-301), unauthenticated(SignatureError::FromTheFuture));
    }

    #[test]
    fn each_header_missing() {
        let v = vector();
        let now = at(&v, 0);
        assert_eq!(
            verify_with(&v, None, Some(&v.timestamp), v.body.as_bytes(), now),
            unauthenticated(SignatureError::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            verify_with(&v, Some(&v.signature), None, v.body.as_bytes(), now),
            unauthenticated(SignatureError::MissingHeader(TIMESTAMP_HEADER))
        );
    }

    #[test]
    fn truncated_or_non_base64_signature() {
        let v = vector();
        let now = at(&v, 0);
        let malformed = unauthenticated(SignatureError::MalformedHeader(SIGNATURE_HEADER));
        let truncated = &v.signature[..v.signature.len() - 4];
        let body = v.body.as_bytes();
        assert_eq!(verify_with(&v, Some(truncated), Some(&v.timestamp), body, now), malformed);
        assert_eq!(verify_with(&v, Some("not base64!"), Some(&v.timestamp), body, now), malformed);
        assert_eq!(verify_with(&v, Some(""), Some(&v.timestamp), body, now), malformed);
        // 64 bytes but a different signature.
        let mut raw = STANDARD.decode(&v.signature).unwrap();
        raw[10] ^= 1;
        let flipped = STANDARD.encode(raw);
        assert_eq!(
            verify_with(&v, Some(&flipped), Some(&v.timestamp), body, now),
            unauthenticated(SignatureError::Mismatch)
        );
    }

    #[test]
    fn malformed_timestamp() {
        let v = vector();
        let now = at(&v, 0);
        for ts in ["", "abc", "-1700000000", "1700000000.5", " 1700000000", "99999999999999"] {
            assert_eq!(
                verify_with(&v, Some(&v.signature), Some(ts), v.body.as_bytes(), now),
                unauthenticated(SignatureError::MalformedHeader(TIMESTAMP_HEADER)),
                "{ts:?}"
            );
        }
    }

    #[test]
    fn timestamp_is_part_of_the_signed_message() {
        let v = vector();
        let other = (v.timestamp.parse::<i64>().unwrap() + 1).to_string();
        assert_eq!(
            verify_with(&v, Some(&v.signature), Some(&other), v.body.as_bytes(), at(&v, 0)),
            unauthenticated(SignatureError::Mismatch)
        );
    }

    #[test]
    fn body_changed_by_one_byte() {
        let v = vector();
        let mut body = v.body.clone().into_bytes();
        let last = body.len() - 2;
        body[last] ^= 0x01;
        assert_eq!(
            verify_with(&v, Some(&v.signature), Some(&v.timestamp), &body, at(&v, 0)),
            unauthenticated(SignatureError::Mismatch)
        );
    }

    #[test]
    fn wrong_key() {
        let v = vector();
        let other = SigningKey::from_bytes(&[7u8; 32]);
        let verifier = Verifier::from_base64_keys(&STANDARD.encode(other.verifying_key().as_bytes())).unwrap();
        let headers = Headers { signature: Some(&v.signature), timestamp: Some(&v.timestamp) };
        assert_eq!(verifier.verify(headers, v.body.as_bytes(), at(&v, 0)), unauthenticated(SignatureError::Mismatch));
    }

    #[test]
    fn rotation_accepts_either_key() {
        let v = vector();
        let other = STANDARD.encode(SigningKey::from_bytes(&[7u8; 32]).verifying_key().as_bytes());
        let verifier = Verifier::from_base64_keys(&format!("{other}, {}", v.public_key)).unwrap();
        let headers = Headers { signature: Some(&v.signature), timestamp: Some(&v.timestamp) };
        assert!(signature_held(verifier.verify(headers, v.body.as_bytes(), at(&v, 0))));
    }

    #[test]
    fn small_order_key_and_signature() {
        let zero_key = STANDARD.encode([0u8; 32]);
        assert_eq!(Verifier::from_base64_keys(&zero_key).unwrap_err(), KeyError::Weak);
        // Even if such a key were configured, verify_strict refuses the all-zero signature
        // that plain `verify` accepts for it.
        let weak = Verifier { keys: vec![VerifyingKey::from_bytes(&[0u8; 32]).unwrap()] };
        let zero_sig = STANDARD.encode([0u8; 64]);
        let body = br#"{"data":{"id":"x","event_type":"message.received"}}"#;
        let headers = Headers { signature: Some(&zero_sig), timestamp: Some("1700000000") };
        assert_eq!(
            weak.verify(headers, body, Timestamp::from_unix_seconds(1_700_000_000)),
            unauthenticated(SignatureError::Mismatch)
        );
        // A small-order R with S = 0 under the real key is refused too.
        let v = vector();
        let mut identity_sig = [0u8; 64];
        identity_sig[0] = 1;
        let sig = STANDARD.encode(identity_sig);
        assert_eq!(
            verify_with(&v, Some(&sig), Some(&v.timestamp), v.body.as_bytes(), at(&v, 0)),
            unauthenticated(SignatureError::Mismatch)
        );
    }

    #[test]
    fn key_errors() {
        assert_eq!(Verifier::from_base64_keys("").unwrap_err(), KeyError::Empty);
        assert_eq!(Verifier::from_base64_keys(" , ").unwrap_err(), KeyError::Empty);
        assert_eq!(Verifier::from_base64_keys("***").unwrap_err(), KeyError::NotBase64);
        assert_eq!(Verifier::from_base64_keys(&STANDARD.encode([1u8; 31])).unwrap_err(), KeyError::WrongLength(31));
    }

    #[test]
    fn debug_shows_no_key_material() {
        let v = vector();
        let verifier = Verifier::from_base64_keys(&v.public_key).unwrap();
        let shown = format!("{verifier:?}");
        assert!(!shown.contains(&v.public_key[..8]), "{shown}");
        assert_eq!(shown, "telnyx::Verifier { keys: 1 }");
    }

    fn signed(v: &Vector, body: &[u8]) -> Result<VerifiedEvent, Rejection> {
        let signature = sign(&v.seed, &v.timestamp, body);
        verify_with(v, Some(&signature), Some(&v.timestamp), body, at(v, 0))
    }

    #[test]
    fn non_json_body_is_malformed() {
        let v = vector();
        assert_eq!(signed(&v, b"id=1&event=x"), Err(Rejection::Malformed(PayloadError::NotParseable)));
        assert_eq!(signed(&v, b""), Err(Rejection::Malformed(PayloadError::NotParseable)));
        assert_eq!(signed(&v, b"[1,2]"), Err(Rejection::Malformed(PayloadError::NotParseable)));
    }

    #[test]
    fn missing_or_empty_ids_are_malformed() {
        let v = vector();
        let missing = |f| Err(Rejection::Malformed(PayloadError::MissingField(f)));
        assert_eq!(signed(&v, br#"{"meta":{}}"#), missing("data"));
        assert_eq!(signed(&v, br#"{"data":{"event_type":"message.received"}}"#), missing("data.id"));
        assert_eq!(signed(&v, br#"{"data":{"id":"","event_type":"x"}}"#), missing("data.id"));
        assert_eq!(signed(&v, br#"{"data":{"id":"a"}}"#), missing("data.event_type"));
        assert_eq!(
            signed(&v, br#"{"data":{"id":5,"event_type":"x"}}"#),
            Err(Rejection::Malformed(PayloadError::NotParseable))
        );
        assert_eq!(
            signed(&v, br#"{"data":{"id":"a","event_type":"x","occurred_at":"soon"}}"#),
            Err(Rejection::Malformed(PayloadError::InvalidField("data.occurred_at")))
        );
    }

    #[test]
    fn full_envelope_fields() {
        let v = vector();
        let body = br#"{"data":{"id":"e1","event_type":"call.hangup","occurred_at":"2026-11-30T05:20:01.250Z",
            "record_type":"event","payload":{"call_control_id":"c","call_leg_id":"l","call_session_id":"s"}},
            "meta":{"attempt":3,"delivered_to":"https://x"}}"#;
        let event = signed(&v, body).unwrap().into_event();
        assert_eq!(event.event_id, "e1");
        assert_eq!(event.event_type, "call.hangup");
        assert_eq!(event.occurred_at, Some(Timestamp::from_unix_millis(1_796_016_001_250)));
        assert_eq!(event.attempt, Some(3));
        assert_eq!(parse_event(body).unwrap(), event);
    }

    #[test]
    fn oversized_body_is_refused_before_anything_else() {
        let v = vector();
        let body = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(verify_with(&v, None, None, &body, at(&v, 0)), Err(Rejection::TooLarge { limit: MAX_BODY_BYTES }));
    }

    fn kind(body: &str) -> EventKind {
        parse_event(body.as_bytes()).unwrap().kind
    }

    fn envelope(event_type: &str, payload: &str) -> String {
        format!(
            r#"{{"data":{{"id":"e","event_type":"{event_type}","occurred_at":"2026-11-30T05:20:01Z",
                "payload":{payload}}},"meta":{{"attempt":1}}}}"#
        )
    }

    #[test]
    fn message_received() {
        let body = envelope(
            "message.received",
            r#"{"id":"b301","record_type":"message","direction":"inbound","type":"MMS",
            "from":{"phone_number":"+15550001111","carrier":"T-Mobile"},"to":[{"phone_number":"+15550002222",
                "status":"webhook_delivered"}],
            "text":"Hello","media":[{"url":"https://x/1.jpg"}],"encoding":"GSM-7","parts":1,"cost":null,"errors":[]}"#,
        );
        assert_eq!(
            kind(&body),
            EventKind::MessageReceived(InboundMessage {
                carrier_message_id: "b301".into(),
                from: "+15550001111".into(),
                to: "+15550002222".into(),
                text: "Hello".into(),
                media: vec![MediaItem { url: "https://x/1.jpg".into(), content_type: None, size: None }],
            })
        );
        let missing = envelope("message.received", r#"{"id":"b301","to":[{"phone_number":"+1"}]}"#);
        assert_eq!(parse_event(missing.as_bytes()), Err(PayloadError::MissingField("data.payload.from.phone_number")));
    }

    /// An inbound MMS as Telnyx documents it: each `media` item with its link, MIME type, size
    /// and hash, in order; an item without a link is not kept.
    #[test]
    fn inbound_mms_keeps_its_media() {
        let body = envelope(
            "message.received",
            r#"{"id":"b302","direction":"inbound","type":"MMS","from":{"phone_number":"+15550001111"},
            "to":[{"phone_number":"+15550002222","status":"webhook_delivered"}],"text":"",
            "media":[{"url":"https://media.telnyx.example/a.jpg","content_type":"image/jpeg","size":45012,
                      "hash_sha256":"7d3c"},
                     {"url":"https://media.telnyx.example/b.gif","content_type":"image/gif","size":null},
                     {"content_type":"image/png","size":1}]}"#,
        );
        let EventKind::MessageReceived(inbound) = kind(&body) else { panic!("not a received message") };
        assert_eq!(inbound.text, "");
        assert_eq!(
            inbound.media,
            vec![
                MediaItem {
                    url: "https://media.telnyx.example/a.jpg".into(),
                    content_type: Some("image/jpeg".into()),
                    size: Some(45_012),
                },
                MediaItem {
                    url: "https://media.telnyx.example/b.gif".into(),
                    content_type: Some("image/gif".into()),
                    size: None,
                },
            ]
        );
        let sms = envelope(
            "message.received",
            r#"{"id":"b303","from":{"phone_number":"+1555"},"to":[{"phone_number":"+1666"}],"text":"hi"}"#,
        );
        let EventKind::MessageReceived(inbound) = kind(&sms) else { panic!("not a received message") };
        assert!(inbound.media.is_empty(), "no media array: an SMS");
        let odd = envelope(
            "message.received",
            r#"{"id":"b304","from":{"phone_number":"+1555"},"to":[{"phone_number":"+1666"}],"media":"x"}"#,
        );
        let EventKind::MessageReceived(inbound) = kind(&odd) else { panic!("not a received message") };
        assert!(inbound.media.is_empty(), "media that is not an array: nothing kept");
    }

    #[test]
    fn message_status_reports() {
        let body = envelope(
            "message.finalized",
            r#"{"id":"40385f64","direction":"outbound","to":[{"phone_number":"+15550002222",
                "status":"delivery_failed"}],
            "errors":[{"code":"40300","title":"Blocked as spam","detail":"..."}],"cost":{"amount":"0.0051",
                "currency":"USD"}}"#,
        );
        assert_eq!(
            kind(&body),
            EventKind::MessageStatus(StatusReport {
                carrier_message_id: "40385f64".into(),
                status: Some(MessageStatus::Failed),
                carrier_status: "delivery_failed".into(),
                errors: vec![CarrierError { code: "40300".into(), title: Some("Blocked as spam".into()) }],
                cost: Some(Cost { micros: 5_100, currency: "USD".into() }),
            })
        );
        let numeric = envelope(
            "message.sent",
            r#"{"id":"m","to":[{"status":"sent"}],"errors":[{"code":40001}],"cost":{"amount":0.0075,
                "currency":"EUR"}}"#,
        );
        let EventKind::MessageStatus(report) = kind(&numeric) else { panic!() };
        assert_eq!(report.status, Some(MessageStatus::Sent));
        assert_eq!(report.errors, vec![CarrierError { code: "40001".into(), title: None }]);
        assert_eq!(report.cost, Some(Cost { micros: 7_500, currency: "EUR".into() }));
        let no_cost = envelope("message.sent", r#"{"id":"m","to":[{"status":"queued"}],"cost":null}"#);
        let EventKind::MessageStatus(report) = kind(&no_cost) else { panic!() };
        assert_eq!((report.status, report.cost), (Some(MessageStatus::Queued), None));
        let no_status = envelope("message.finalized", r#"{"id":"m","to":[{"phone_number":"+1"}]}"#);
        assert_eq!(parse_event(no_status.as_bytes()), Err(PayloadError::MissingField("data.payload.to[0].status")));
    }

    #[test]
    fn every_telnyx_status_word() {
        use MessageStatus::*;
        for (word, status) in [
            ("queued", Some(Queued)),
            ("sending", Some(Sending)),
            ("sent", Some(Sent)),
            ("expired", Some(Failed)),
            ("sending_failed", Some(Failed)),
            ("delivery_unconfirmed", None),
            ("delivered", Some(Delivered)),
            ("delivery_failed", Some(Failed)),
            ("gibberish", None),
        ] {
            assert_eq!(message_status(word), status, "{word}");
        }
    }

    #[test]
    fn call_control_events() {
        let state = encode_client_state(r#"{"call":"call_1","position":2}"#);
        let payload = format!(
            r#"{{"call_control_id":"v3:abc","call_leg_id":"leg-1","call_session_id":"sess-1","connection_id":"1",
            "from":"+15550001111","to":"+15550002222","direction":"outgoing","state":"bridging",
                "client_state":"{state}"}}"#
        );
        let leg =
            CallLeg { call_control_id: "v3:abc".into(), call_leg_id: "leg-1".into(), call_session_id: "sess-1".into() };
        let expected = CallLegEvent {
            leg: leg.clone(),
            from: "+15550001111".into(),
            to: "+15550002222".into(),
            direction: CallDirection::Outgoing,
            client_state: Some(r#"{"call":"call_1","position":2}"#.into()),
        };
        assert_eq!(kind(&envelope("call.initiated", &payload)), EventKind::CallInitiated(expected.clone()));
        assert_eq!(kind(&envelope("call.answered", &payload)), EventKind::CallAnswered(expected.clone()));
        assert_eq!(kind(&envelope("call.bridged", &payload)), EventKind::CallBridged(expected));

        let hangup = r#"{"call_control_id":"v3:abc","call_leg_id":"leg-1","call_session_id":"sess-1",
            "hangup_cause":"timeout","hangup_source":"callee","sip_hangup_cause":"480"}"#;
        assert_eq!(
            kind(&envelope("call.hangup", hangup)),
            EventKind::CallHangup(Hangup { leg, cause: "timeout".into(), source: "callee".into(), client_state: None })
        );
        let event = parse_event(envelope("call.hangup", hangup).as_bytes()).unwrap();
        assert_eq!(
            event.occurred_at,
            Timestamp::parse_rfc3339("2026-11-30T05:20:01Z"),
            "the end of a call is occurred_at"
        );

        let incoming = r#"{"call_control_id":"c","call_leg_id":"l","call_session_id":"s","direction":"incoming",
            "client_state":"%%%"}"#;
        let EventKind::CallInitiated(e) = kind(&envelope("call.initiated", incoming)) else { panic!() };
        assert_eq!((e.direction, e.client_state), (CallDirection::Incoming, None));
        let no_leg = envelope("call.hangup", r#"{"call_control_id":"c","call_session_id":"s"}"#);
        assert_eq!(parse_event(no_leg.as_bytes()), Err(PayloadError::MissingField("data.payload.call_leg_id")));
    }

    #[test]
    fn other_event_types_are_kept_as_unrecognized() {
        assert_eq!(kind(&envelope("call.dtmf.received", r#"{"digit":"1"}"#)), EventKind::Unrecognized);
        assert_eq!(kind(r#"{"data":{"id":"e","event_type":"number_order.complete"}}"#), EventKind::Unrecognized);
    }
}
