//! The outbound message status lattice.
//!
//! ```text
//! queued | scheduled  ->  sending  ->  sent  ->  delivered | failed
//! scheduled            ->  canceled
//! ```
//!
//! A status only ever moves forward. `delivered` and `failed` are terminal: the first terminal
//! word wins, so a late `sent` after `delivered`, or `delivered` after `failed`, changes nothing.
//! Skipping ahead is allowed (a `delivered` receipt may be the first word after `sending`).
//!
//! The edge turns [`MessageStatus::predecessors`] into the guard of its `UPDATE ... WHERE status
//! IN (...)`, so the database enforces exactly this lattice even under races.

use crate::webhook::EventType;

crate::text_enum! {
    /// Where an outbound (or inbound) message stands.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum MessageStatus {
        /// Accepted, waiting to be sent.
        Queued = "queued",
        /// Accepted for sending at a later time.
        Scheduled = "scheduled",
        /// Claimed by a dispatcher; the carrier is being asked to send it.
        Sending = "sending",
        /// The carrier accepted it.
        Sent = "sent",
        /// The handset received it (terminal).
        Delivered = "delivered",
        /// It will never be delivered (terminal).
        Failed = "failed",
        /// An inbound message that arrived (terminal; inbound messages have no lattice).
        Received = "received",
        /// A scheduled message canceled through the API before its time (terminal; never sent).
        Canceled = "canceled",
    }
}

/// The answer of [`transition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The status moves; the edge writes it, with its history, ledger and outbox rows.
    Move {
        /// The current status.
        from: MessageStatus,
        /// The new status.
        to: MessageStatus,
    },
    /// Nothing changes; an ordinary outcome, not an error.
    Unchanged(Unchanged),
}

/// Why a reported status changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unchanged {
    /// The message already has this status (a duplicate).
    Same,
    /// The message is already further along (a late, out-of-order report).
    Behind,
    /// The message is final; the first terminal word won.
    Terminal,
}

impl MessageStatus {
    /// Whether nothing may follow this status.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            MessageStatus::Delivered | MessageStatus::Failed | MessageStatus::Received | MessageStatus::Canceled
        )
    }

    fn rank(self) -> u8 {
        match self {
            MessageStatus::Queued | MessageStatus::Scheduled => 0,
            MessageStatus::Sending => 1,
            MessageStatus::Sent => 2,
            MessageStatus::Delivered | MessageStatus::Failed | MessageStatus::Received | MessageStatus::Canceled => 3,
        }
    }

    /// The statuses a message may be in for a move to `self` to apply: the guard of the
    /// edge's `UPDATE messages SET status = self WHERE status IN (predecessors)`.
    pub fn predecessors(self) -> Vec<MessageStatus> {
        Self::ALL.into_iter().filter(|&from| matches!(transition(from, self), Transition::Move { .. })).collect()
    }

    /// The customer event type announcing a move to this status, if the product announces it.
    pub fn event_type(self) -> Option<EventType> {
        match self {
            MessageStatus::Sent => Some(EventType::MessageSent),
            MessageStatus::Delivered => Some(EventType::MessageDelivered),
            MessageStatus::Failed => Some(EventType::MessageFailed),
            MessageStatus::Received => Some(EventType::MessageReceived),
            MessageStatus::Queued | MessageStatus::Scheduled | MessageStatus::Sending | MessageStatus::Canceled => None,
        }
    }
}

/// Decides what a reported status does to a message in status `current`.
pub fn transition(current: MessageStatus, reported: MessageStatus) -> Transition {
    if current == reported {
        Transition::Unchanged(Unchanged::Same)
    } else if current.is_terminal() {
        Transition::Unchanged(Unchanged::Terminal)
    } else if reported == MessageStatus::Received
        || (reported == MessageStatus::Canceled && current != MessageStatus::Scheduled)
        || reported.rank() <= current.rank()
    {
        Transition::Unchanged(Unchanged::Behind)
    } else {
        Transition::Move { from: current, to: reported }
    }
}

/// Stored and shown by name (`"delivered"`).
impl serde::Serialize for MessageStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for MessageStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        MessageStatus::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown message status {name}")))
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::MessageStatus::*;
    use super::*;

    #[test]
    fn only_a_scheduled_message_is_canceled() {
        assert_eq!(transition(Scheduled, Canceled), Transition::Move { from: Scheduled, to: Canceled });
        assert_eq!(Canceled.predecessors(), vec![Scheduled]);
        for from in [Queued, Sending, Sent] {
            assert_eq!(transition(from, Canceled), Transition::Unchanged(Unchanged::Behind), "{from:?}");
        }
        for to in [Sending, Sent, Delivered, Failed] {
            assert_eq!(transition(Canceled, to), Transition::Unchanged(Unchanged::Terminal), "{to:?}");
        }
        assert_eq!(Canceled.event_type(), None);
    }

    #[test]
    fn forward_moves() {
        for (from, to) in [
            (Queued, Sending),
            (Scheduled, Sending),
            (Sending, Sent),
            (Sent, Delivered),
            (Sent, Failed),
            (Sending, Delivered),
            (Queued, Failed),
            (Sending, Failed),
        ] {
            assert_eq!(transition(from, to), Transition::Move { from, to }, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn duplicates_late_reports_and_terminal_words() {
        assert_eq!(transition(Sent, Sent), Transition::Unchanged(Unchanged::Same));
        assert_eq!(transition(Sent, Sending), Transition::Unchanged(Unchanged::Behind));
        assert_eq!(transition(Sending, Queued), Transition::Unchanged(Unchanged::Behind));
        assert_eq!(transition(Queued, Scheduled), Transition::Unchanged(Unchanged::Behind));
        assert_eq!(transition(Delivered, Sent), Transition::Unchanged(Unchanged::Terminal));
        assert_eq!(transition(Failed, Delivered), Transition::Unchanged(Unchanged::Terminal));
        assert_eq!(transition(Delivered, Failed), Transition::Unchanged(Unchanged::Terminal));
        assert_eq!(transition(Received, Delivered), Transition::Unchanged(Unchanged::Terminal));
        assert_eq!(transition(Queued, Received), Transition::Unchanged(Unchanged::Behind));
    }

    #[test]
    fn predecessors_are_the_sql_guard() {
        assert_eq!(Sending.predecessors(), vec![Queued, Scheduled]);
        assert_eq!(Sent.predecessors(), vec![Queued, Scheduled, Sending]);
        assert_eq!(Delivered.predecessors(), vec![Queued, Scheduled, Sending, Sent]);
        assert_eq!(Failed.predecessors(), vec![Queued, Scheduled, Sending, Sent]);
        assert!(Received.predecessors().is_empty());
        assert!(Queued.predecessors().is_empty());
    }

    #[test]
    fn names_round_trip() {
        for s in MessageStatus::ALL {
            assert_eq!(MessageStatus::from_name(s.as_str()), Some(s));
        }
        assert_eq!(MessageStatus::from_name("undelivered"), None);
    }

    #[test]
    fn no_cycle_is_possible() {
        // Any sequence of reports moves a message at most three times.
        for a in MessageStatus::ALL {
            let mut current = Queued;
            let mut moves = 0;
            for reported in [a, Sending, Sent, Delivered, a, Failed, Sent, a] {
                if let Transition::Move { to, .. } = transition(current, reported) {
                    current = to;
                    moves += 1;
                }
            }
            assert!(moves <= 3, "{moves} moves");
            assert!(current.is_terminal());
        }
    }
}
