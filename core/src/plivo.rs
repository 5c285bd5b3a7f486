//! Plivo webhooks: message status callbacks and inbound messages (form posts).
//!
//! **V3** (`X-Plivo-Signature-V3`, `X-Plivo-Signature-V3-Nonce`): HMAC-SHA256 keyed by the auth
//! token over `url + "." + nonce`, where for a POST the URL is `scheme://host/path`, then `?` and
//! the query's pairs sorted as `k=v` joined by `&` (the `?` is written whenever there are body
//! parameters), then `.` if there were both a query and body parameters, then every body
//! parameter as `key + value`, sorted. The header may hold several comma-separated signatures
//! (one per active token); any match is enough.
//!
//! **V2** (`X-Plivo-Signature-V2`, `X-Plivo-Signature-V2-Nonce`): HMAC-SHA256 over
//! `scheme://host/path` (no query) followed by the nonce. It signs neither the body nor the
//! query, so one captured request authenticates *any* body sent to that URL with that nonce,
//! forever. A [`Verifier`] therefore refuses a request signed with V2 only, unless it was built
//! with [`V2Policy::Accept`] (the edge's `PLIVO_ACCEPT_V2=true`, for accounts that cannot send
//! V3; docs/security.md describes the risk). A request carrying V3 is always checked by V3, and
//! a V3 that fails is never rescued by V2.
//!
//! Neither signs a time; repeated deliveries are absorbed by the dedupe key
//! (`MessageUUID:status`).

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::event::{
    CarrierError, CarrierEvent, Cost, EventKind, InboundMessage, Learned, Provider, StatusReport, VerifiedEvent,
};
use crate::form::{self, Url};
use crate::message::MessageStatus;
use crate::reject::{PayloadError, Rejection, SignatureError};
use crate::secret::{Secret, SecretError};
use crate::{Timestamp, MAX_BODY_BYTES};

/// V3 signature header.
pub const V3_SIGNATURE_HEADER: &str = "x-plivo-signature-v3";
/// V3 nonce header.
pub const V3_NONCE_HEADER: &str = "x-plivo-signature-v3-nonce";
/// V2 signature header.
pub const V2_SIGNATURE_HEADER: &str = "x-plivo-signature-v2";
/// V2 nonce header.
pub const V2_NONCE_HEADER: &str = "x-plivo-signature-v2-nonce";

/// One Plivo delivery (a POST), as the edge received it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// The full public URL Plivo requested.
    pub url: &'a str,
    /// `X-Plivo-Signature-V3`, if present.
    pub v3_signature: Option<&'a str>,
    /// `X-Plivo-Signature-V3-Nonce`, if present.
    pub v3_nonce: Option<&'a str>,
    /// `X-Plivo-Signature-V2`, if present.
    pub v2_signature: Option<&'a str>,
    /// `X-Plivo-Signature-V2-Nonce`, if present.
    pub v2_nonce: Option<&'a str>,
    /// The raw form body.
    pub body: &'a [u8],
}

/// Whether a request signed with V2 only (no V3 header) may be accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum V2Policy {
    /// V3 is required: a V2-only request is refused as missing its V3 signature. The default.
    #[default]
    Refuse,
    /// A V2-only request is accepted when its V2 signature matches. V2 does not sign the body:
    /// anyone holding one captured request can replay its headers with a forged body.
    Accept,
}

/// Verifies Plivo deliveries against one or more auth tokens.
#[derive(Clone)]
pub struct Verifier {
    tokens: Vec<Secret>,
    v2: V2Policy,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("plivo::Verifier").field("tokens", &self.tokens.len()).field("v2", &self.v2).finish()
    }
}

impl Verifier {
    /// Reads auth tokens separated by commas; V3 is required ([`V2Policy::Refuse`]).
    pub fn new(auth_tokens: &str) -> Result<Self, SecretError> {
        Ok(Self { tokens: Secret::parse_list(auth_tokens)?, v2: V2Policy::Refuse })
    }

    /// The same verifier with `policy` for V2-only requests.
    pub fn with_v2_policy(self, policy: V2Policy) -> Self {
        Self { v2: policy, ..self }
    }

    /// Checks one delivery (V3 when its headers are present, else V2 if the policy allows it)
    /// and parses it. `_now` is accepted for symmetry; Plivo signs no time.
    pub fn verify(&self, request: Request<'_>, _now: Timestamp) -> Result<VerifiedEvent, Rejection> {
        if request.body.len() > MAX_BODY_BYTES {
            return Err(Rejection::TooLarge { limit: MAX_BODY_BYTES });
        }
        let url = Url::parse(request.url).ok_or(SignatureError::Mismatch)?;
        let pairs = form::parse(request.body);
        self.check_signature(&request, &url, &pairs)?;
        Ok(VerifiedEvent::new(parse_pairs(&pairs)?))
    }

    fn check_signature(
        &self,
        request: &Request<'_>,
        url: &Url<'_>,
        pairs: &[(String, String)],
    ) -> Result<(), SignatureError> {
        let (message, header, signatures) = match (request.v3_signature, request.v2_signature) {
            (Some(signatures), _) => {
                let nonce = request.v3_nonce.ok_or(SignatureError::MissingHeader(V3_NONCE_HEADER))?;
                (format!("{}.{nonce}", v3_base(url, pairs)), V3_SIGNATURE_HEADER, signatures)
            }
            // V2 alone proves only that Plivo once called this URL with this nonce.
            (None, Some(_)) if self.v2 == V2Policy::Refuse => {
                return Err(SignatureError::MissingHeader(V3_SIGNATURE_HEADER))
            }
            (None, Some(signature)) => {
                let nonce = request.v2_nonce.ok_or(SignatureError::MissingHeader(V2_NONCE_HEADER))?;
                (format!("{}{nonce}", url.base(url.port)), V2_SIGNATURE_HEADER, signature)
            }
            (None, None) => return Err(SignatureError::MissingHeader(V3_SIGNATURE_HEADER)),
        };
        let macs: Vec<Vec<u8>> =
            signatures.split(',').filter_map(|s| STANDARD.decode(s.trim()).ok()).filter(|m| m.len() == 32).collect();
        if macs.is_empty() {
            return Err(SignatureError::MalformedHeader(header));
        }
        let matches = self.tokens.iter().any(|token| {
            macs.iter().any(|expected| {
                let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.expose()) else { return false };
                mac.update(message.as_bytes());
                mac.verify_slice(expected).is_ok()
            })
        });
        if matches {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

/// The V3 string for a POST, before `.nonce`.
fn v3_base(url: &Url<'_>, body_pairs: &[(String, String)]) -> String {
    let mut base = url.base(url.port);
    let query_pairs = url.query.map(|q| form::parse(q.as_bytes())).unwrap_or_default();
    let query =
        form::sorted(&query_pairs, false).into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let has_params = !body_pairs.is_empty();
    if !query.is_empty() || has_params {
        base.push('?');
        base.push_str(&query);
    }
    if !query.is_empty() && has_params {
        base.push('.');
    }
    for (k, v) in form::sorted(body_pairs, false) {
        base.push_str(k);
        base.push_str(v);
    }
    base
}

/// Parses a Plivo form body that was verified at ingest (e.g. re-read from storage).
pub fn parse_event(body: &[u8]) -> Result<CarrierEvent, PayloadError> {
    parse_pairs(&form::parse(body))
}

fn parse_pairs(pairs: &[(String, String)]) -> Result<CarrierEvent, PayloadError> {
    if pairs.is_empty() {
        return Err(PayloadError::NotParseable);
    }
    let get = |k| form::get(pairs, k);
    let uuid = get("MessageUUID").ok_or(PayloadError::MissingField("MessageUUID"))?;
    let (status, event_type, kind) = match get("Status") {
        Some(status) => {
            let errors = match get("ErrorCode").filter(|c| c.bytes().any(|b| b != b'0')) {
                Some(code) => vec![CarrierError { code: code.to_owned(), title: None }],
                None => Vec::new(),
            };
            let cost = get("TotalAmount")
                .and_then(Cost::parse_amount)
                .map(|micros| Cost { micros, currency: "USD".to_owned() });
            let kind = EventKind::MessageStatus(StatusReport {
                carrier_message_id: uuid.to_owned(),
                status: message_status(status),
                carrier_status: status.to_owned(),
                errors,
                cost,
            });
            (status, "message.status", kind)
        }
        None => {
            let kind = EventKind::MessageReceived(InboundMessage {
                carrier_message_id: uuid.to_owned(),
                from: e164(get("From").ok_or(PayloadError::MissingField("From"))?),
                to: e164(get("To").ok_or(PayloadError::MissingField("To"))?),
                // An SMS carries `Text`; an MMS (`Type=mms`) its text in `Body` and its media
                // links in `Media1`, `Media2`, ... (`MediaCount` of them, no content types).
                text: get("Text").or_else(|| get("Body")).unwrap_or_default().to_owned(),
                media: crate::media::numbered(pairs, "Media", None),
            });
            ("received", "message.received", kind)
        }
    };
    Ok(CarrierEvent {
        provider: Provider::Plivo,
        event_id: format!("{uuid}:{status}"),
        event_type: event_type.to_owned(),
        occurred_at: None,
        attempt: None,
        kind,
    })
}

/// Plivo writes numbers without the `+`.
fn e164(number: &str) -> String {
    if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
        format!("+{number}")
    } else {
        number.to_owned()
    }
}

/// Maps a Plivo message status onto the lattice; statuses that move nothing give `None`.
pub fn message_status(status: &str) -> Option<MessageStatus> {
    Some(match status {
        "queued" => MessageStatus::Queued,
        "sent" => MessageStatus::Sent,
        "delivered" | "read" => MessageStatus::Delivered,
        "undelivered" | "failed" | "rejected" => MessageStatus::Failed,
        _ => return None,
    })
}

/// A message's final status, learned from the Message API, as the status callback Plivo would
/// have posted for it (and under its key, `{uuid}:{status}`).
pub fn learned_status(uuid: &str, status: &str, error_code: Option<&str>) -> Learned {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("MessageUUID", uuid).append_pair("Status", status);
    if let Some(code) = error_code {
        form.append_pair("ErrorCode", code);
    }
    Learned { event_id: format!("{uuid}:{status}"), event_type: "message.status", body: form.finish() }
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

    fn check(token: &str, request: Request<'_>) -> Result<(), SignatureError> {
        check_with(V2Policy::Accept, token, request)
    }

    fn check_with(policy: V2Policy, token: &str, request: Request<'_>) -> Result<(), SignatureError> {
        let verifier = Verifier::new(token).unwrap().with_v2_policy(policy);
        let pairs = form::parse(request.body);
        verifier.check_signature(&request, &Url::parse(request.url).unwrap(), &pairs)
    }

    #[test]
    fn sdk_vector_v2() {
        let all: Value = serde_json::from_str(VECTORS).unwrap();
        let v = &all["plivo_v2"][0];
        let (token, url, nonce, sig) = (
            v["auth_token"].as_str().unwrap(),
            v["url"].as_str().unwrap(),
            v["nonce"].as_str().unwrap(),
            v["signature"].as_str().unwrap(),
        );
        assert_eq!(
            check(token, Request { url, v2_signature: Some(sig), v2_nonce: Some(nonce), ..Default::default() }),
            Ok(())
        );
        assert_eq!(
            check(token, Request { url, v2_signature: Some(sig), v2_nonce: Some("12346"), ..Default::default() }),
            Err(SignatureError::Mismatch)
        );

        let all: Value = serde_json::from_str(SDK_VECTORS).unwrap();
        let v = &all["plivo_v2"];
        let (token, url, nonce, sig) = (
            v["auth_token"].as_str().unwrap(),
            v["url"].as_str().unwrap(),
            v["nonce"].as_str().unwrap(),
            v["signature"].as_str().unwrap(),
        );
        assert_eq!(
            check(token, Request { url, v2_signature: Some(sig), v2_nonce: Some(nonce), ..Default::default() }),
            Ok(()),
            "the query is not signed in V2"
        );
    }

    #[test]
    fn sdk_vectors_v3() {
        let all: Value = serde_json::from_str(SDK_VECTORS).unwrap();
        for name in ["plivo_v3_post", "plivo_v3_post_query", "plivo_v3_post_query_no_params"] {
            let v = &all[name];
            let body = form_body(&v["params"]);
            let (token, url, nonce, sig) = (
                v["auth_token"].as_str().unwrap(),
                v["url"].as_str().unwrap(),
                v["nonce"].as_str().unwrap(),
                v["signature"].as_str().unwrap(),
            );
            let request = Request {
                url,
                v3_signature: Some(sig),
                v3_nonce: Some(nonce),
                body: body.as_bytes(),
                ..Default::default()
            };
            assert_eq!(check(token, request), Ok(()), "{name}");
            let other = Request {
                url,
                v3_signature: Some(sig),
                v3_nonce: Some("1"),
                body: body.as_bytes(),
                ..Default::default()
            };
            assert_eq!(check(token, other), Err(SignatureError::Mismatch), "{name}: nonce is signed");
        }
        let v = &all["plivo_v3_post"];
        let body = form_body(&v["params"]);
        let token = v["auth_token"].as_str().unwrap();
        let sig = v["signature"].as_str().unwrap();
        let request = |body: &'static str, signature| Request {
            url: "https://example.com/webhooks/plivo",
            v3_signature: Some(signature),
            v3_nonce: Some("05429567804466091622"),
            body: body.as_bytes(),
            ..Default::default()
        };
        let body: &'static str = Box::leak(body.into_boxed_str());
        let event = Verifier::new(token).unwrap().verify(request(body, sig), NOW).unwrap().into_event();
        assert_eq!(event.event_id, "2d55a2a8-0c5c-11f0-b1e3-0242ac110002:delivered");
        // Several signatures (token rotation): any one may match.
        let several: &'static str =
            Box::leak(format!("c29tZXRoaW5nIGVsc2UgZW50aXJlbHkgMzIgYnl0ZXM=, {sig}").into_boxed_str());
        assert_eq!(check(token, request(body, several)), Ok(()));
        let changed: &'static str = Box::leak(body.replace("delivered", "deliverEd").into_boxed_str());
        assert_eq!(check(token, request(changed, sig)), Err(SignatureError::Mismatch), "changed byte");
        assert_eq!(check("wrong", request(body, sig)), Err(SignatureError::Mismatch), "wrong token");
    }

    /// V2 signs the URL and the nonce, not the body: with V3 required (the default) a V2-only
    /// request is refused, even one whose V2 signature is genuine, and so is the same request
    /// with a forged body. With V2 accepted, the forged body passes: that is the risk the
    /// setting takes.
    #[test]
    fn v2_only_is_refused_unless_accepted() {
        let all: Value = serde_json::from_str(SDK_VECTORS).unwrap();
        let v = &all["plivo_v2"];
        let (token, url, nonce, sig) = (
            v["auth_token"].as_str().unwrap(),
            v["url"].as_str().unwrap(),
            v["nonce"].as_str().unwrap(),
            v["signature"].as_str().unwrap(),
        );
        let genuine = Request {
            url,
            v2_signature: Some(sig),
            v2_nonce: Some(nonce),
            body: b"MessageUUID=u1&Status=sent",
            ..Default::default()
        };
        let forged = Request { body: b"MessageUUID=u1&Status=delivered&TotalAmount=0", ..genuine };
        let missing_v3 = Err(SignatureError::MissingHeader(V3_SIGNATURE_HEADER));
        assert_eq!(check_with(V2Policy::Refuse, token, genuine), missing_v3);
        assert_eq!(check_with(V2Policy::Refuse, token, forged), missing_v3);
        assert_eq!(check_with(V2Policy::Accept, token, genuine), Ok(()));
        assert_eq!(check_with(V2Policy::Accept, token, forged), Ok(()), "the known weakness of V2");
        let verifier = Verifier::new(token).unwrap();
        assert_eq!(
            verifier.verify(genuine, NOW).map(|_| ()),
            Err(Rejection::Unauthenticated(SignatureError::MissingHeader(V3_SIGNATURE_HEADER))),
            "refused by default"
        );

        // A V3 that fails is not rescued by a valid V2 in the same request, whatever the policy.
        let v3 = &all["plivo_v3_post"];
        let body = form_body(&v3["params"]);
        let v3_token = v3["auth_token"].as_str().unwrap();
        let both = Request {
            url: v3["url"].as_str().unwrap(),
            v3_signature: Some(v3["signature"].as_str().unwrap()),
            v3_nonce: Some("tampered"),
            v2_signature: Some(sig),
            v2_nonce: Some(nonce),
            body: body.as_bytes(),
        };
        for policy in [V2Policy::Refuse, V2Policy::Accept] {
            assert_eq!(check_with(policy, v3_token, both), Err(SignatureError::Mismatch), "{policy:?}");
        }
        let v3_ok =
            Request { v3_nonce: Some(v3["nonce"].as_str().unwrap()), v2_signature: None, v2_nonce: None, ..both };
        assert_eq!(check_with(V2Policy::Refuse, v3_token, v3_ok), Ok(()), "V3 is accepted under the default policy");
        assert_eq!(format!("{:?}", Verifier::new("a").unwrap()), "plivo::Verifier { tokens: 1, v2: Refuse }");
    }

    #[test]
    fn negative_list() {
        let url = "https://example.com/webhooks/plivo";
        let body = b"MessageUUID=u1&Status=sent";
        let base = Request { url, body, ..Default::default() };
        assert_eq!(check("t", base), Err(SignatureError::MissingHeader(V3_SIGNATURE_HEADER)));
        assert_eq!(
            check("t", Request { v3_signature: Some("AAAA"), ..base }),
            Err(SignatureError::MissingHeader(V3_NONCE_HEADER))
        );
        assert_eq!(
            check("t", Request { v2_signature: Some("AAAA"), ..base }),
            Err(SignatureError::MissingHeader(V2_NONCE_HEADER))
        );
        assert_eq!(
            check("t", Request { v3_signature: Some("not base64"), v3_nonce: Some("1"), ..base }),
            Err(SignatureError::MalformedHeader(V3_SIGNATURE_HEADER))
        );
        let truncated = &STANDARD.encode([7u8; 32])[..40];
        assert_eq!(
            check("t", Request { v3_signature: Some(truncated), v3_nonce: Some("1"), ..base }),
            Err(SignatureError::MalformedHeader(V3_SIGNATURE_HEADER))
        );
        assert_eq!(
            check("t", Request { v2_signature: Some(&STANDARD.encode([7u8; 32])), v2_nonce: Some("1"), ..base }),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(Verifier::new(" ").unwrap_err(), SecretError::Empty, "empty secret");
        assert_eq!(format!("{:?}", Verifier::new("a,b").unwrap()), "plivo::Verifier { tokens: 2, v2: Refuse }");
        let big = vec![b'a'; MAX_BODY_BYTES + 1];
        assert_eq!(
            Verifier::new("t").unwrap().verify(Request { url, body: &big, ..Default::default() }, NOW),
            Err(Rejection::TooLarge { limit: MAX_BODY_BYTES })
        );
    }

    #[test]
    fn callbacks_and_inbound_messages() {
        let event = parse_event(
            concat!(
                "MessageUUID=u1&Status=undelivered&ErrorCode=200&From=15550001111",
                "&To=15550002222&TotalAmount=0.00650&Units=1"
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(event.event_id, "u1:undelivered");
        assert_eq!(
            event.kind,
            EventKind::MessageStatus(StatusReport {
                carrier_message_id: "u1".into(),
                status: Some(MessageStatus::Failed),
                carrier_status: "undelivered".into(),
                errors: vec![CarrierError { code: "200".into(), title: None }],
                cost: Some(Cost { micros: 6_500, currency: "USD".into() }),
            })
        );
        let ok = parse_event(b"MessageUUID=u2&Status=delivered&ErrorCode=000").unwrap();
        let EventKind::MessageStatus(report) = ok.kind else { panic!() };
        assert!(report.errors.is_empty(), "000 is no error");
        let inbound = parse_event(b"MessageUUID=u3&From=15550001111&To=15550002222&Text=Hello&Type=sms").unwrap();
        assert_eq!((inbound.event_id.as_str(), inbound.event_type.as_str()), ("u3:received", "message.received"));
        assert_eq!(
            inbound.kind,
            EventKind::MessageReceived(InboundMessage {
                carrier_message_id: "u3".into(),
                from: "+15550001111".into(),
                to: "+15550002222".into(),
                text: "Hello".into(),
                media: vec![],
            })
        );
        assert_eq!(parse_event(b""), Err(PayloadError::NotParseable));
        assert_eq!(parse_event(b"Status=sent"), Err(PayloadError::MissingField("MessageUUID")));
        assert_eq!(parse_event(b"MessageUUID=u4&To=1"), Err(PayloadError::MissingField("From")));
    }

    /// An inbound MMS as Plivo posts it to the message URL: `Type=mms`, the text in `Body`,
    /// `MediaCount` and the links in `Media1`, `Media2`, ... (no content types).
    #[test]
    fn inbound_mms_keeps_its_media() {
        let event = parse_event(
            b"MessageUUID=u5&From=15550001111&To=15550002222&Type=mms&Body=Look&MediaCount=2\
              &Media2=https%3A%2F%2Fmedia.plivo.example%2Fb.png&Media1=https%3A%2F%2Fmedia.plivo.example%2Fa.jpg\
              &Units=1&TotalRate=0&TotalAmount=0",
        )
        .unwrap();
        let EventKind::MessageReceived(inbound) = event.kind else { panic!("not a received message") };
        assert_eq!(inbound.text, "Look");
        assert_eq!(
            inbound.media,
            vec![
                MediaItem { url: "https://media.plivo.example/a.jpg".into(), content_type: None, size: None },
                MediaItem { url: "https://media.plivo.example/b.png".into(), content_type: None, size: None },
            ]
        );
        // An older support article numbers them from `Media0`: read by number either way.
        let zero = parse_event(b"MessageUUID=u6&From=1&To=2&Type=mms&Media0=https%3A%2F%2Fm%2F0").unwrap();
        let EventKind::MessageReceived(inbound) = zero.kind else { panic!("not a received message") };
        assert_eq!(inbound.media.len(), 1);
        assert_eq!(inbound.text, "");
    }

    #[test]
    fn every_status_word() {
        use MessageStatus::*;
        for (word, status) in [
            ("queued", Some(Queued)),
            ("sent", Some(Sent)),
            ("delivered", Some(Delivered)),
            ("read", Some(Delivered)),
            ("undelivered", Some(Failed)),
            ("failed", Some(Failed)),
            ("rejected", Some(Failed)),
            ("unknown", None),
        ] {
            assert_eq!(message_status(word), status, "{word}");
        }
    }
}
