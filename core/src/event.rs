//! The carrier event: what every provider's webhook is turned into.

use crate::Timestamp;

/// The carrier that sent an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// Telnyx (Ed25519-signed JSON, API v2).
    Telnyx,
}

impl Provider {
    /// The name stored in `carrier_events.carrier` and used in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Telnyx => "telnyx",
        }
    }

    /// The provider named `name`, as stored in `carrier_events.carrier`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "telnyx" => Some(Provider::Telnyx),
            _ => None,
        }
    }
}

/// One carrier event, parsed from a body that was verified at ingest (or re-read from storage).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarrierEvent {
    /// The carrier that sent it.
    pub provider: Provider,
    /// The provider's own id for this event: the dedupe key, unique per provider.
    pub event_id: String,
    /// The provider's event type, e.g. `message.received`.
    pub event_type: String,
    /// When the provider says the event happened, if it says.
    pub occurred_at: Option<Timestamp>,
    /// The provider's delivery attempt number, if it sends one.
    pub attempt: Option<u32>,
}

/// A [`CarrierEvent`] whose signature was checked against a configured key within the
/// timestamp tolerance.
///
/// Only the provider verifiers in this crate construct it: holding one is the proof that the
/// body came from the carrier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedEvent {
    event: CarrierEvent,
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
