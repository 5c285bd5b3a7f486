//! The carrier event: what every provider's webhook is turned into.
//!
//! The edge handles a [`CarrierEvent`] without knowing which carrier sent it: the provider
//! modules map their own vocabularies (Telnyx JSON, Twilio and Plivo forms) onto [`EventKind`].

use crate::media::MediaItem;
use crate::message::MessageStatus;
use crate::Timestamp;

crate::text_enum! {
    /// The carrier that sent an event.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Provider {
        /// Telnyx (Ed25519-signed JSON, API v2).
        Telnyx = "telnyx",
        /// Twilio (HMAC-SHA1-signed form posts).
        Twilio = "twilio",
        /// Plivo (HMAC-SHA256 V2/V3 signatures over form posts).
        Plivo = "plivo",
    }
}

/// One carrier event, parsed from a body that was verified at ingest (or re-read from storage).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarrierEvent {
    /// The carrier that sent it.
    pub provider: Provider,
    /// The dedupe key, unique per provider: Telnyx's `data.id`; for Twilio and Plivo, which
    /// have no event id, the message id and the reported status (`SM123:delivered`).
    pub event_id: String,
    /// The provider's event type, e.g. `message.received` (Twilio/Plivo: a name this crate
    /// gives their callbacks, `message.status` or `message.received`).
    pub event_type: String,
    /// When the provider says the event happened, if it says.
    pub occurred_at: Option<Timestamp>,
    /// The provider's delivery attempt number, if it sends one.
    pub attempt: Option<u32>,
    /// What happened.
    pub kind: EventKind,
}

/// What a carrier event reports, in the product's own terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// An inbound message arrived at one of the platform's numbers.
    MessageReceived(InboundMessage),
    /// The carrier reports a new status for an outbound message.
    MessageStatus(StatusReport),
    /// A call leg started ringing (inbound call, or an outbound leg the platform dialled).
    CallInitiated(CallLegEvent),
    /// A call leg was answered.
    CallAnswered(CallLegEvent),
    /// Two legs were bridged.
    CallBridged(CallLegEvent),
    /// A call leg ended.
    CallHangup(Hangup),
    /// A well-formed, verified event this product does not act on. It is stored and
    /// acknowledged so the carrier stops retrying it.
    Unrecognized,
}

/// An inbound message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundMessage {
    /// The carrier's id for the message (unique per carrier).
    pub carrier_message_id: String,
    /// Sender, E.164.
    pub from: String,
    /// The platform number it was sent to, E.164.
    pub to: String,
    /// The text (empty for media-only messages).
    pub text: String,
    /// Its media (MMS), in the carrier's order; empty for an SMS.
    pub media: Vec<MediaItem>,
}

/// A carrier's status report for an outbound message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusReport {
    /// The carrier's id for the message, as returned when it was sent.
    pub carrier_message_id: String,
    /// The status in the product's lattice, or `None` for a carrier status that moves nothing
    /// (Telnyx `delivery_unconfirmed`).
    pub status: Option<MessageStatus>,
    /// The carrier's own word for it, kept for history.
    pub carrier_status: String,
    /// Errors the carrier reported (code and title), first one first.
    pub errors: Vec<CarrierError>,
    /// What the carrier charged, when it says.
    pub cost: Option<Cost>,
}

/// One carrier error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarrierError {
    /// The carrier's code, e.g. `40300` or `30003`.
    pub code: String,
    /// Its short description, when given.
    pub title: Option<String>,
}

/// An amount charged by the carrier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cost {
    /// The amount in millionths of the currency unit (exact, no floating point).
    pub micros: i64,
    /// ISO 4217 currency code.
    pub currency: String,
}

/// The ids of one call leg (Telnyx Call Control).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLeg {
    /// The handle commands are sent to.
    pub call_control_id: String,
    /// The leg's id, stable across the leg's events.
    pub call_leg_id: String,
    /// The session all legs of one call share.
    pub call_session_id: String,
}

/// A call leg event other than hangup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLegEvent {
    /// Which leg.
    pub leg: CallLeg,
    /// Caller, E.164 (or SIP URI).
    pub from: String,
    /// Callee, E.164 (or SIP URI).
    pub to: String,
    /// `incoming` for calls to the platform, `outgoing` for legs it dialled.
    pub direction: CallDirection,
    /// The opaque state the platform attached when it dialled (decoded from base64).
    pub client_state: Option<String>,
}

/// Which way a call leg goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallDirection {
    /// A call to one of the platform's numbers.
    Incoming,
    /// A leg the platform dialled.
    Outgoing,
}

/// A call leg's hangup. Telnyx sends no end time: the end is the event's `occurred_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hangup {
    /// Which leg.
    pub leg: CallLeg,
    /// `hangup_cause`, e.g. `normal_clearing`, `timeout`, `originator_cancel`.
    pub cause: String,
    /// `hangup_source`: `caller`, `callee` or `unknown`.
    pub source: String,
    /// The opaque state the platform attached when it dialled (decoded from base64).
    pub client_state: Option<String>,
}

/// A [`CarrierEvent`] whose signature was checked against a configured key or token (and, for
/// Telnyx, within the timestamp tolerance).
///
/// Only the provider verifiers in this crate construct it: holding one is the proof that the
/// body came from the carrier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedEvent {
    event: CarrierEvent,
}

impl CarrierEvent {
    /// The lane of the jobs consumer this event is processed in: events with the same lane are
    /// processed one after another in the order the queue gave them, events in different lanes
    /// at once. An outbound message's receipts share a lane (its carrier id), an inbound message
    /// its own, and every call event of a batch one lane: a ring's legs and its caller's leg
    /// carry different ids, so a finer key could put two events of one call side by side.
    pub fn lane(&self) -> String {
        match &self.kind {
            EventKind::MessageReceived(m) => format!("message:{}:{}", self.provider.as_str(), m.carrier_message_id),
            EventKind::MessageStatus(r) => format!("message:{}:{}", self.provider.as_str(), r.carrier_message_id),
            EventKind::CallInitiated(_)
            | EventKind::CallAnswered(_)
            | EventKind::CallBridged(_)
            | EventKind::CallHangup(_) => "calls".to_owned(),
            EventKind::Unrecognized => format!("event:{}:{}", self.provider.as_str(), self.event_id),
        }
    }
}

impl VerifiedEvent {
    pub(crate) fn new(event: CarrierEvent) -> Self {
        Self { event }
    }

    /// The verified event.
    pub fn event(&self) -> &CarrierEvent {
        &self.event
    }

    /// The verified event, by value.
    pub fn into_event(self) -> CarrierEvent {
        self.event
    }
}

impl Cost {
    /// Parses a decimal amount such as `"0.0051"` or `0.0051` into micros, exactly.
    ///
    /// Returns `None` for anything that is not a plain non-negative or negative decimal with
    /// at most six fractional digits that matter (further digits are truncated).
    pub fn parse_amount(text: &str) -> Option<i64> {
        let text = text.trim();
        let (negative, digits) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        if !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let whole: i64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let mut micros = whole.checked_mul(1_000_000)?;
        let mut scale = 100_000;
        for digit in fraction.bytes().take(6) {
            micros = micros.checked_add(i64::from(digit - b'0') * scale)?;
            scale /= 10;
        }
        Some(if negative { -micros } else { micros })
    }
}

/// Stored and sent by name (`"telnyx"`), as in `carrier_events.carrier`.
impl serde::Serialize for Provider {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Provider {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Provider::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown carrier {name}")))
    }
}

/// A fact learned from a carrier's API (`learned`), in that carrier's webhook format: its
/// dedupe key, its type and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The carrier event id it is stored under. For Twilio and Plivo it is the key their own
    /// callback for the same status has, so whichever comes first is the fact and the other its
    /// duplicate.
    pub event_id: String,
    pub event_type: &'static str,
    pub body: String,
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn provider_names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(Provider::from_name(p.as_str()), Some(p));
        }
        assert_eq!(Provider::from_name("vonage"), None);
    }

    #[test]
    fn amounts_are_exact() {
        assert_eq!(Cost::parse_amount("0.0051"), Some(5_100));
        assert_eq!(Cost::parse_amount("1"), Some(1_000_000));
        assert_eq!(Cost::parse_amount("12.5"), Some(12_500_000));
        assert_eq!(Cost::parse_amount(".25"), Some(250_000));
        assert_eq!(Cost::parse_amount("-0.0075"), Some(-7_500));
        assert_eq!(Cost::parse_amount("0.12345678"), Some(123_456));
        for bad in ["", ".", "abc", "1e3", "1.2.3", "--1", "99999999999999999999"] {
            assert_eq!(Cost::parse_amount(bad), None, "{bad}");
        }
    }

    fn event(kind: EventKind, id: &str) -> CarrierEvent {
        CarrierEvent {
            provider: Provider::Telnyx,
            event_id: id.to_owned(),
            event_type: String::new(),
            occurred_at: None,
            attempt: None,
            kind,
        }
    }

    fn status(carrier_message_id: &str) -> EventKind {
        EventKind::MessageStatus(StatusReport {
            carrier_message_id: carrier_message_id.to_owned(),
            status: None,
            carrier_status: String::new(),
            errors: Vec::new(),
            cost: None,
        })
    }

    #[test]
    fn one_messages_receipts_share_a_lane_and_calls_share_one() {
        // A message's receipts, however re-signed, in one lane; another message's in another.
        assert_eq!(event(status("m1"), "e1").lane(), event(status("m1"), "e2").lane());
        assert_ne!(event(status("m1"), "e1").lane(), event(status("m2"), "e1").lane());
        let leg = |control: &str| CallLeg {
            call_control_id: control.to_owned(),
            call_leg_id: format!("leg-{control}"),
            call_session_id: format!("sess-{control}"),
        };
        let hangup = EventKind::CallHangup(Hangup {
            leg: leg("a"),
            cause: String::new(),
            source: String::new(),
            client_state: None,
        });
        let initiated = EventKind::CallInitiated(CallLegEvent {
            leg: leg("b"),
            from: String::new(),
            to: String::new(),
            direction: CallDirection::Outgoing,
            client_state: None,
        });
        assert_eq!(event(hangup, "e3").lane(), event(initiated, "e4").lane(), "every call event in one lane");
        assert_ne!(event(EventKind::Unrecognized, "e5").lane(), event(EventKind::Unrecognized, "e6").lane());
    }
}
