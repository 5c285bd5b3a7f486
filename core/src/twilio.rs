//! Twilio webhooks: message status callbacks and inbound messages.
//!
//! Twilio signs with HMAC-SHA1 keyed by the account's auth token, over the full URL it requested
//! followed by every form parameter as `key + value`, keys sorted (a repeated key's distinct
//! values sorted). The base64 MAC is in `X-Twilio-Signature`. Because Twilio is inconsistent
//! about default ports, the URL is tried both with and without its port. A JSON body is signed
//! through the URL instead: the URL carries `bodySHA256=<hex sha256 of the body>` and the MAC
//! covers the URL alone. When `X-Twilio-Webhooks-Signature-Settings` names
//! `algorithm=HMAC_SHA256`, the MAC is HMAC-SHA256 over the same string.
//!
//! Twilio signs no timestamp, so there is no tolerance window; repeated deliveries are
//! absorbed by the dedupe key (`MessageSid:status`) like any other duplicate.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::event::{
    CarrierError, CarrierEvent, EventKind, InboundMessage, Learned, Provider, StatusReport, VerifiedEvent,
};
use crate::form::{self, Url};
use crate::message::MessageStatus;
use crate::reject::{PayloadError, Rejection, SignatureError};
use crate::secret::{Secret, SecretError};
use crate::{Timestamp, MAX_BODY_BYTES};

/// The header carrying the base64 MAC.
pub const SIGNATURE_HEADER: &str = "x-twilio-signature";
/// The header naming a non-default signature algorithm.
pub const SIGNATURE_SETTINGS_HEADER: &str = "x-twilio-webhooks-signature-settings";

/// One Twilio delivery, as the edge received it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The full public URL Twilio requested (the configured base URL + path + query).
    pub url: &'a str,
    /// `X-Twilio-Signature`, if present.
    pub signature: Option<&'a str>,
    /// `X-Twilio-Webhooks-Signature-Settings`, if present.
    pub signature_settings: Option<&'a str>,
    /// The raw body (form-encoded, or JSON when the URL carries `bodySHA256`).
    pub body: &'a [u8],
}

/// Verifies Twilio deliveries against one or more auth tokens (two during a rotation).
#[derive(Clone)]
pub struct Verifier {
    tokens: Vec<Secret>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("twilio::Verifier").field("tokens", &self.tokens.len()).finish()
    }
}

#[derive(Clone, Copy)]
enum Algorithm {
    Sha1,
    Sha256,
}

impl Verifier {
    /// Reads auth tokens separated by commas.
    pub fn new(auth_tokens: &str) -> Result<Self, SecretError> {
        Ok(Self { tokens: Secret::parse_list(auth_tokens)? })
    }

    /// Checks one delivery and parses it. `_now` is accepted for symmetry with the other
    /// carriers; Twilio signs no time.
    pub fn verify(&self, request: Request<'_>, _now: Timestamp) -> Result<VerifiedEvent, Rejection> {
        if request.body.len() > MAX_BODY_BYTES {
            return Err(Rejection::TooLarge { limit: MAX_BODY_BYTES });
        }
        let url = Url::parse(request.url).ok_or(SignatureError::Mismatch)?;
        let signed_pairs = self.check_signature(&request, &url)?;
        let pairs = match signed_pairs {
            Some(pairs) => pairs,
            None => json_pairs(request.body)?,
        };
        Ok(VerifiedEvent::new(parse_pairs(&pairs)?))
    }

    /// Returns the form pairs it verified, or `None` for a JSON body (checked by its hash).
    fn check_signature(
        &self,
        request: &Request<'_>,
        url: &Url<'_>,
    ) -> Result<Option<Vec<(String, String)>>, SignatureError> {
        let header = request.signature.ok_or(SignatureError::MissingHeader(SIGNATURE_HEADER))?;
        let mac = STANDARD.decode(header.trim()).map_err(|_| SignatureError::MalformedHeader(SIGNATURE_HEADER))?;
        let algorithm = algorithm(request.signature_settings)?;
        let expected_len = match algorithm {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        };
        if mac.len() != expected_len {
            return Err(SignatureError::MalformedHeader(SIGNATURE_HEADER));
        }

        let body_hash = url
            .query
            .and_then(|q| form::parse(q.as_bytes()).into_iter().find(|(k, _)| k == "bodySHA256").map(|(_, v)| v));
        let (pairs, params) = match body_hash {
            Some(expected) => {
                let actual = hex(&Sha256::digest(request.body));
                if !bool::from(actual.as_bytes().ct_eq(expected.to_ascii_lowercase().as_bytes())) {
                    return Err(SignatureError::Mismatch);
                }
                (None, String::new())
            }
            None => {
                let pairs = form::parse(request.body);
                let mut params = String::new();
                for (k, v) in form::sorted(&pairs, true) {
                    params.push_str(k);
                    params.push_str(v);
                }
                (Some(pairs), params)
            }
        };

        // Twilio may have signed the URL with or without the (default) port.
        let with_port = url.port.or(url.default_port());
        let candidates = [url.with_port(None), url.with_port(with_port)];
        let matches = self.tokens.iter().any(|token| {
            candidates
                .iter()
                .any(|candidate| verify_mac(algorithm, token, &[candidate.as_bytes(), params.as_bytes()], &mac))
        });
        if matches {
            Ok(pairs)
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

fn algorithm(settings: Option<&str>) -> Result<Algorithm, SignatureError> {
    let named = settings.into_iter().flat_map(|s| s.split(',')).find_map(|part| {
        let (name, value) = part.split_once('=')?;
        (name.trim() == "algorithm" && !value.trim().is_empty()).then(|| value.trim().to_ascii_uppercase())
    });
    match named.as_deref() {
        None | Some("HMAC_SHA1") => Ok(Algorithm::Sha1),
        Some("HMAC_SHA256") => Ok(Algorithm::Sha256),
        Some(_) => Err(SignatureError::MalformedHeader(SIGNATURE_SETTINGS_HEADER)),
    }
}

/// Constant-time MAC check over the concatenation of `parts`.
fn verify_mac(algorithm: Algorithm, key: &Secret, parts: &[&[u8]], expected: &[u8]) -> bool {
    match algorithm {
        Algorithm::Sha1 => {
            let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(key.expose()) else { return false };
            parts.iter().for_each(|p| mac.update(p));
            mac.verify_slice(expected).is_ok()
        }
        Algorithm::Sha256 => {
            let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.expose()) else { return false };
            parts.iter().for_each(|p| mac.update(p));
            mac.verify_slice(expected).is_ok()
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn json_pairs(body: &[u8]) -> Result<Vec<(String, String)>, PayloadError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| PayloadError::NotParseable)?;
    let object = value.as_object().ok_or(PayloadError::NotParseable)?;
    Ok(object
        .iter()
        .filter_map(|(k, v)| match v {
            Value::String(s) => Some((k.clone(), s.clone())),
            Value::Number(n) => Some((k.clone(), n.to_string())),
            _ => None,
        })
        .collect())
}

/// Parses a Twilio form body that was verified at ingest (e.g. re-read from storage).
pub fn parse_event(body: &[u8]) -> Result<CarrierEvent, PayloadError> {
    let trimmed = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    let pairs = if trimmed == Some(b'{') { json_pairs(body)? } else { form::parse(body) };
    parse_pairs(&pairs)
}

fn parse_pairs(pairs: &[(String, String)]) -> Result<CarrierEvent, PayloadError> {
    if pairs.is_empty() {
        return Err(PayloadError::NotParseable);
    }
    let get = |k| form::get(pairs, k);
    let sid = get("MessageSid")
        .or_else(|| get("SmsMessageSid"))
        .or_else(|| get("SmsSid"))
        .ok_or(PayloadError::MissingField("MessageSid"))?;
    let status =
        get("MessageStatus").or_else(|| get("SmsStatus")).ok_or(PayloadError::MissingField("MessageStatus"))?;
    let (event_type, kind) = if status == "received" {
        let kind = EventKind::MessageReceived(InboundMessage {
            carrier_message_id: sid.to_owned(),
            from: get("From").ok_or(PayloadError::MissingField("From"))?.to_owned(),
            to: get("To").ok_or(PayloadError::MissingField("To"))?.to_owned(),
            text: get("Body").unwrap_or_default().to_owned(),
            // `MediaUrl{N}` and `MediaContentType{N}`, N from 0; read by their numbers rather than
            // trusting `NumMedia`.
            media: crate::media::numbered(pairs, "MediaUrl", Some("MediaContentType")),
        });
        ("message.received", kind)
    } else {
        let errors = match get("ErrorCode").filter(|c| *c != "0") {
            Some(code) => vec![CarrierError { code: code.to_owned(), title: get("ErrorMessage").map(str::to_owned) }],
            None => Vec::new(),
        };
        let kind = EventKind::MessageStatus(StatusReport {
            carrier_message_id: sid.to_owned(),
            status: message_status(status),
            carrier_status: status.to_owned(),
            errors,
            cost: None,
        });
        ("message.status", kind)
    };
    Ok(CarrierEvent {
        provider: Provider::Twilio,
        event_id: format!("{sid}:{status}"),
        event_type: event_type.to_owned(),
        occurred_at: None,
        attempt: None,
        kind,
    })
}

/// Maps a Twilio message status onto the lattice; statuses that move nothing give `None`.
pub fn message_status(status: &str) -> Option<MessageStatus> {
    Some(match status {
        "accepted" | "queued" => MessageStatus::Queued,
        "scheduled" => MessageStatus::Scheduled,
        "sending" => MessageStatus::Sending,
        "sent" => MessageStatus::Sent,
        "delivered" | "read" => MessageStatus::Delivered,
        "undelivered" | "failed" | "canceled" => MessageStatus::Failed,
        _ => return None,
    })
}

/// A message's final status, learned from the Messages API, as the status callback Twilio would
/// have posted for it (and under its key, `{sid}:{status}`).
pub fn learned_status(sid: &str, status: &str, error_code: Option<&str>) -> Learned {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("MessageSid", sid).append_pair("MessageStatus", status);
    if let Some(code) = error_code {
        form.append_pair("ErrorCode", code);
    }
    Learned { event_id: format!("{sid}:{status}"), event_type: "message.status", body: form.finish() }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::Value;

    use super::*;
    use crate::media::MediaItem;

    const VECTORS: &str = include_str!("../tests/vectors/signatures.json");
    const SDK_VECTORS: &str = include_str!("../tests/vectors/sdk_vectors.json");
    const NOW: Timestamp = Timestamp::from_unix_seconds(1_700_000_000);

    use crate::form::tests::form_body;

    fn sign(token: &str, url: &str, body: &str) -> String {
        let pairs = form::parse(body.as_bytes());
        let mut data = url.to_owned();
        for (k, v) in form::sorted(&pairs, true) {
            data.push_str(k);
            data.push_str(v);
        }
        let mut mac = Hmac::<Sha1>::new_from_slice(token.as_bytes()).unwrap();
        mac.update(data.as_bytes());
        STANDARD.encode(mac.finalize().into_bytes())
    }

    fn check(
        token: &str,
        url: &str,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<Option<Vec<(String, String)>>, SignatureError> {
        let verifier = Verifier::new(token).unwrap();
        let request = Request { url, signature, signature_settings: None, body };
        verifier.check_signature(&request, &Url::parse(url).unwrap())
    }

    #[test]
    fn sdk_vector_form_parameters() {
        let all: Value = serde_json::from_str(VECTORS).unwrap();
        let v = &all["twilio_hmac_sha1"][0];
        let body = form_body(&v["params"]);
        let (token, url, sig) =
            (v["auth_token"].as_str().unwrap(), v["url"].as_str().unwrap(), v["signature"].as_str().unwrap());
        assert!(check(token, url, Some(sig), body.as_bytes()).is_ok());
        assert_eq!(sign(token, url, &body), sig);
        // The vector is a voice callback: verified, but not a message.
        let verifier = Verifier::new(token).unwrap();
        let request = Request { url, signature: Some(sig), signature_settings: None, body: body.as_bytes() };
        assert_eq!(verifier.verify(request, NOW), Err(Rejection::Malformed(PayloadError::MissingField("MessageSid"))));
    }

    #[test]
    fn sdk_vector_port_variants() {
        let all: Value = serde_json::from_str(SDK_VECTORS).unwrap();
        let v = &all["twilio_port"];
        let body = form_body(&v["params"]);
        let sig = v["signature"].as_str().unwrap();
        for url in [v["url_signed"].as_str().unwrap(), v["url_received"].as_str().unwrap()] {
            let verifier = Verifier::new("12345").unwrap();
            let event = verifier
                .verify(Request { url, signature: Some(sig), signature_settings: None, body: body.as_bytes() }, NOW)
                .unwrap()
                .into_event();
            assert_eq!(event.event_id, "SM1:delivered", "{url}");
        }
        let other_scheme = "http://example.com/webhooks/twilio";
        assert_eq!(check("12345", other_scheme, Some(sig), body.as_bytes()), Err(SignatureError::Mismatch));
    }

    #[test]
    fn sdk_vector_json_body() {
        let all: Value = serde_json::from_str(SDK_VECTORS).unwrap();
        let v = &all["twilio_json"];
        let (url, body, sig) =
            (v["url"].as_str().unwrap(), v["body"].as_str().unwrap(), v["signature"].as_str().unwrap());
        assert_eq!(check("12345", url, Some(sig), body.as_bytes()), Ok(None));
        let changed = body.replace("value", "valuE");
        assert_eq!(
            check("12345", url, Some(sig), changed.as_bytes()),
            Err(SignatureError::Mismatch),
            "the body hash binds the body"
        );
        let other_hash = url.replace("bodySHA256=0a", "bodySHA256=0b");
        assert_eq!(check("12345", &other_hash, Some(sig), body.as_bytes()), Err(SignatureError::Mismatch));
    }

    #[test]
    fn negative_list() {
        let url = "https://example.com/webhooks/twilio";
        let body = "MessageSid=SM1&MessageStatus=delivered&To=%2B15550002222";
        let sig = sign("token", url, body);
        assert!(check("token", url, Some(&sig), body.as_bytes()).is_ok());
        assert_eq!(check("token", url, None, body.as_bytes()), Err(SignatureError::MissingHeader(SIGNATURE_HEADER)));
        assert_eq!(
            check("token", url, Some(&sig[..sig.len() - 4]), body.as_bytes()),
            Err(SignatureError::MalformedHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            check("token", url, Some("!!"), body.as_bytes()),
            Err(SignatureError::MalformedHeader(SIGNATURE_HEADER))
        );
        assert_eq!(check("other", url, Some(&sig), body.as_bytes()), Err(SignatureError::Mismatch), "wrong token");
        let changed = body.replace("delivered", "deliverEd");
        assert_eq!(check("token", url, Some(&sig), changed.as_bytes()), Err(SignatureError::Mismatch), "changed byte");
        let extra = format!("{body}&Extra=1");
        assert_eq!(check("token", url, Some(&sig), extra.as_bytes()), Err(SignatureError::Mismatch), "added parameter");
        assert_eq!(
            check("token", "https://example.com/webhooks/other", Some(&sig), body.as_bytes()),
            Err(SignatureError::Mismatch),
            "other URL"
        );
        assert_eq!(Verifier::new("").unwrap_err(), SecretError::Empty, "empty secret");
        let verifier = Verifier::new("token").unwrap();
        let req = Request {
            url,
            signature: Some(&sig),
            signature_settings: Some("algorithm=HMAC_MD5"),
            body: body.as_bytes(),
        };
        assert_eq!(
            verifier.verify(req, NOW),
            Err(Rejection::Unauthenticated(SignatureError::MalformedHeader(SIGNATURE_SETTINGS_HEADER))),
            "wrong version"
        );
        let req = Request {
            url,
            signature: Some(&sig),
            signature_settings: Some("key=k,algorithm=HMAC_SHA256"),
            body: body.as_bytes(),
        };
        assert!(
            matches!(verifier.verify(req, NOW), Err(Rejection::Unauthenticated(_))),
            "a SHA-1 MAC is not a SHA-256 one"
        );
        let req =
            Request { url, signature: Some(&sig), signature_settings: None, body: &vec![b'a'; MAX_BODY_BYTES + 1] };
        assert_eq!(verifier.verify(req, NOW), Err(Rejection::TooLarge { limit: MAX_BODY_BYTES }));
    }

    #[test]
    fn repeated_keys_sort_their_values_and_rotation_accepts_either_token() {
        let url = "https://example.com/webhooks/twilio";
        let body = "MessageSid=SM2&MessageStatus=sent&MediaUrl=b&MediaUrl=a";
        let sig = sign("new", url, body);
        let mut data = url.to_owned();
        data.push_str("MediaUrlaMediaUrlbMessageSidSM2MessageStatussent");
        let mut mac = Hmac::<Sha1>::new_from_slice(b"new").unwrap();
        mac.update(data.as_bytes());
        assert_eq!(sig, STANDARD.encode(mac.finalize().into_bytes()));
        assert!(check("old,new", url, Some(&sig), body.as_bytes()).is_ok());
        assert_eq!(format!("{:?}", Verifier::new("old,new").unwrap()), "twilio::Verifier { tokens: 2 }");
    }

    #[test]
    fn sha256_when_the_settings_header_says_so() {
        let url = "https://example.com/webhooks/twilio";
        let body = "MessageSid=SM3&MessageStatus=queued";
        let mut mac = Hmac::<Sha256>::new_from_slice(b"shared").unwrap();
        mac.update(format!("{url}MessageSidSM3MessageStatusqueued").as_bytes());
        let sig = STANDARD.encode(mac.finalize().into_bytes());
        let verifier = Verifier::new("shared").unwrap();
        let req = Request {
            url,
            signature: Some(&sig),
            signature_settings: Some("key=webhooks_sharedkey_1, algorithm=HMAC_SHA256"),
            body: body.as_bytes(),
        };
        assert_eq!(verifier.verify(req, NOW).unwrap().event().event_id, "SM3:queued");
    }

    #[test]
    fn status_callbacks_and_inbound_messages() {
        let event = parse_event(
            concat!(
                "MessageSid=SM9&MessageStatus=undelivered&ErrorCode=30003&ErrorMessage=Unreachable",
                "&To=%2B1555&From=%2B1666&AccountSid=AC1"
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(event.event_id, "SM9:undelivered");
        assert_eq!(event.event_type, "message.status");
        assert_eq!(
            event.kind,
            EventKind::MessageStatus(StatusReport {
                carrier_message_id: "SM9".into(),
                status: Some(MessageStatus::Failed),
                carrier_status: "undelivered".into(),
                errors: vec![CarrierError { code: "30003".into(), title: Some("Unreachable".into()) }],
                cost: None,
            })
        );
        let event = parse_event(b"SmsMessageSid=SM8&SmsStatus=delivered&ErrorCode=0").unwrap();
        assert_eq!(
            (event.event_id.as_str(), &event.kind),
            (
                "SM8:delivered",
                &EventKind::MessageStatus(StatusReport {
                    carrier_message_id: "SM8".into(),
                    status: Some(MessageStatus::Delivered),
                    carrier_status: "delivered".into(),
                    errors: vec![],
                    cost: None,
                })
            )
        );
        let event = parse_event(
            b"MessageSid=SM7&SmsStatus=received&From=%2B15550001111&To=%2B15550002222&Body=Hi+there&NumMedia=2",
        )
        .unwrap();
        assert_eq!(event.event_id, "SM7:received");
        assert_eq!(event.event_type, "message.received");
        assert_eq!(
            event.kind,
            EventKind::MessageReceived(InboundMessage {
                carrier_message_id: "SM7".into(),
                from: "+15550001111".into(),
                to: "+15550002222".into(),
                text: "Hi there".into(),
                media: vec![],
            })
        );
        let json = parse_event(br#"{"MessageSid":"SM6","MessageStatus":"sent"}"#).unwrap();
        assert_eq!(json.event_id, "SM6:sent");
    }

    /// An inbound MMS as Twilio posts it: `NumMedia`, then `MediaUrl{N}` and
    /// `MediaContentType{N}` counted from 0.
    #[test]
    fn inbound_mms_keeps_its_media() {
        let event = parse_event(
            b"MessageSid=MM7&SmsStatus=received&From=%2B15550001111&To=%2B15550002222&Body=&NumMedia=2\
              &MediaContentType0=image%2Fjpeg&MediaUrl0=https%3A%2F%2Fapi.twilio.com%2F2010-04-01%2FAccounts%2FAC1\
              %2FMessages%2FMM7%2FMedia%2FME0&MediaContentType1=video%2Fmp4\
              &MediaUrl1=https%3A%2F%2Fapi.twilio.com%2F2010-04-01%2FAccounts%2FAC1%2FMessages%2FMM7%2FMedia%2FME1",
        )
        .unwrap();
        let EventKind::MessageReceived(inbound) = event.kind else { panic!("not a received message") };
        assert_eq!(inbound.text, "");
        assert_eq!(
            inbound.media,
            vec![
                MediaItem {
                    url: "https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM7/Media/ME0".into(),
                    content_type: Some("image/jpeg".into()),
                    size: None,
                },
                MediaItem {
                    url: "https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM7/Media/ME1".into(),
                    content_type: Some("video/mp4".into()),
                    size: None,
                },
            ]
        );
        // `NumMedia` alone makes no item: only links are kept.
        let counted = parse_event(b"MessageSid=MM8&SmsStatus=received&From=%2B1&To=%2B2&NumMedia=3").unwrap();
        let EventKind::MessageReceived(inbound) = counted.kind else { panic!("not a received message") };
        assert!(inbound.media.is_empty());
    }

    #[test]
    fn malformed_bodies() {
        assert_eq!(parse_event(b""), Err(PayloadError::NotParseable));
        assert_eq!(parse_event(b"MessageStatus=sent"), Err(PayloadError::MissingField("MessageSid")));
        assert_eq!(parse_event(b"MessageSid=SM1"), Err(PayloadError::MissingField("MessageStatus")));
        assert_eq!(parse_event(b"MessageSid=SM1&SmsStatus=received&To=%2B1"), Err(PayloadError::MissingField("From")));
        assert_eq!(parse_event(b"{not json"), Err(PayloadError::NotParseable));
    }

    #[test]
    fn every_status_word() {
        use MessageStatus::*;
        for (word, status) in [
            ("accepted", Some(Queued)),
            ("queued", Some(Queued)),
            ("scheduled", Some(Scheduled)),
            ("sending", Some(Sending)),
            ("sent", Some(Sent)),
            ("delivered", Some(Delivered)),
            ("read", Some(Delivered)),
            ("undelivered", Some(Failed)),
            ("failed", Some(Failed)),
            ("canceled", Some(Failed)),
            ("partially_delivered", None),
        ] {
            assert_eq!(message_status(word), status, "{word}");
        }
    }
}
