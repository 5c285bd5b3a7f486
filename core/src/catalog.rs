//! The event catalog: every customer event type with a one-line summary, a description and an
//! example of its `data` (docs/contract.md §6, "Event catalog"). `GET /v1/event_types` serves it
//! beside each type's JSON Schema, and a test send of a type delivers its example.
//!
//! The summaries are those of docs/openapi.json's `webhooks`, and the set of types is the same:
//! the edge's build refuses a document that differs from this table, and the end-to-end suite
//! validates every example, and every real delivery, against the schemas served with it.

use crate::webhook::EventType;

/// One event type in the catalog.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub event_type: EventType,
    /// One line; the `summary` of the type's entry in docs/openapi.json's `webhooks`.
    pub summary: &'static str,
    /// When it is sent and what `data` holds.
    pub description: &'static str,
    /// An example of `data`, as JSON text.
    pub example: &'static str,
}

const MESSAGE_IN: &str = r#"{"id": "msg_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "direction": "inbound", "from": "+15559990000",
 "to": "+15550001111", "text": "Running late, there in 10", "segments": 1, "encoding": "GSM-7", "status": "received",
 "carrier": "telnyx", "carrier_message_id": "40385f64-5717-4562-b3fc-2c963f66afa6", "error": null,
 "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z", "sent_at": null, "send_at": null,
 "type": "sms", "media": []}"#;

const MESSAGE_SENT: &str = r#"{"id": "msg_1b2c3d4e5f60718293a4b5c6d7e8f90a", "direction": "outbound", "from": "+15550001111",
 "to": "+15559990000", "text": "Your code is 482913", "segments": 1, "encoding": "GSM-7", "status": "sent",
 "carrier": "twilio", "carrier_message_id": "SM2f1c0f8b7d1140385f6457174562b3fc", "error": null,
 "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:01Z", "sent_at": "2026-12-01T10:00:01Z",
 "send_at": null, "type": "sms", "media": []}"#;

const MESSAGE_DELIVERED: &str = r#"{"id": "msg_1b2c3d4e5f60718293a4b5c6d7e8f90a", "direction": "outbound",
 "from": "+15550001111", "to": "+15559990000", "text": "Your code is 482913", "segments": 1, "encoding": "GSM-7",
 "status": "delivered", "carrier": "twilio", "carrier_message_id": "SM2f1c0f8b7d1140385f6457174562b3fc",
 "error": null, "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:04Z",
 "sent_at": "2026-12-01T10:00:01Z", "send_at": null, "type": "sms", "media": []}"#;

const MESSAGE_FAILED: &str = r#"{"id": "msg_2c3d4e5f60718293a4b5c6d7e8f90a1b", "direction": "outbound", "from": "+15550001111",
 "to": "+15559990002", "text": "Your table is ready", "segments": 1, "encoding": "GSM-7", "status": "failed",
 "carrier": "plivo", "carrier_message_id": "6f2c1a8e-0d3b-11ef-9a55-0242ac130003",
 "error": {"code": "30003", "title": "Unreachable destination handset"}, "created_at": "2026-12-01T10:00:00Z",
 "updated_at": "2026-12-01T10:00:09Z", "sent_at": "2026-12-01T10:00:01Z", "send_at": null, "type": "sms",
 "media": []}"#;

const CALL_RINGING: &str = r#"{"id": "call_3d4e5f60718293a4b5c6d7e8f90a1b2c", "direction": "inbound", "from": "+15559990000",
 "to": "+15550001111", "status": "ringing", "answered_at": null, "ended_at": null, "duration_secs": null,
 "billed_minutes": null, "legs": [{"position": 1, "target": "+15557770001", "outcome": "dialing",
 "hangup_cause": null, "call_control_id": "v3:leg-1", "dialed_at": "2026-12-01T10:00:01Z", "answered_at": null,
 "ended_at": null}], "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:01Z"}"#;

const CALL_ANSWERED: &str = r#"{"id": "call_3d4e5f60718293a4b5c6d7e8f90a1b2c", "direction": "inbound", "from": "+15559990000",
 "to": "+15550001111", "status": "in_progress", "answered_at": "2026-12-01T10:00:07Z", "ended_at": null,
 "duration_secs": null, "billed_minutes": null, "legs": [{"position": 1, "target": "+15557770001",
 "outcome": "answered", "hangup_cause": null, "call_control_id": "v3:leg-1", "dialed_at": "2026-12-01T10:00:01Z",
 "answered_at": "2026-12-01T10:00:07Z", "ended_at": null}], "created_at": "2026-12-01T10:00:00Z",
 "updated_at": "2026-12-01T10:00:07Z"}"#;

const CALL_COMPLETED: &str = r#"{"id": "call_3d4e5f60718293a4b5c6d7e8f90a1b2c", "direction": "inbound",
 "from": "+15559990000", "to": "+15550001111", "status": "completed", "answered_at": "2026-12-01T10:00:07Z",
 "ended_at": "2026-12-01T10:01:42Z", "duration_secs": 95, "billed_minutes": 2, "legs": [{"position": 1,
 "target": "+15557770001", "outcome": "answered", "hangup_cause": "normal_clearing", "call_control_id": "v3:leg-1",
 "dialed_at": "2026-12-01T10:00:01Z", "answered_at": "2026-12-01T10:00:07Z", "ended_at": "2026-12-01T10:01:42Z"}],
 "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:01:42Z",
 "charge": {"kind": "call_minutes", "quantity": 2, "charged_at": "2026-12-01T10:01:42Z"}}"#;

const CALL_MISSED: &str = r#"{"id": "call_4e5f60718293a4b5c6d7e8f90a1b2c3d", "direction": "inbound", "from": "+15559990000",
 "to": "+15550001111", "status": "missed", "answered_at": null, "ended_at": "2026-12-01T10:00:41Z",
 "duration_secs": 0, "billed_minutes": 0, "legs": [{"position": 1, "target": "+15557770001",
 "outcome": "no_answer", "hangup_cause": "timeout", "call_control_id": "v3:leg-1",
 "dialed_at": "2026-12-01T10:00:01Z", "answered_at": null, "ended_at": "2026-12-01T10:00:21Z"}, {"position": 2,
 "target": "+15557770002", "outcome": "no_answer", "hangup_cause": "timeout", "call_control_id": "v3:leg-2",
 "dialed_at": "2026-12-01T10:00:21Z", "answered_at": null, "ended_at": "2026-12-01T10:00:41Z"}],
 "created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:41Z"}"#;

/// The catalog, in [`EventType::ALL`]'s order.
pub const CATALOG: [Entry; 16] = [
    Entry {
        event_type: EventType::MessageReceived,
        summary: "An inbound message arrived",
        description: "A message reached one of the account's numbers. `data` is the message as the API shows it.",
        example: MESSAGE_IN,
    },
    Entry {
        event_type: EventType::MessageSent,
        summary: "The carrier accepted an outbound message",
        description: "The carrier took an outbound message for delivery. `data` is the message after the change.",
        example: MESSAGE_SENT,
    },
    Entry {
        event_type: EventType::MessageDelivered,
        summary: "A message reached the handset",
        description:
            "The carrier's receipt says the message was delivered. Sent once, whatever order receipts come in.",
        example: MESSAGE_DELIVERED,
    },
    Entry {
        event_type: EventType::MessageFailed,
        summary: "A message will never be delivered",
        description:
            "The carrier refused or failed the message, or its send stayed unknown too long; `data.error` says why.",
        example: MESSAGE_FAILED,
    },
    Entry {
        event_type: EventType::CallInitiated,
        summary: "An inbound call started ringing",
        description: "A call reached one of the account's numbers and the first ring target is being dialled.",
        example: CALL_RINGING,
    },
    Entry {
        event_type: EventType::CallAnswered,
        summary: "A ring target answered",
        description: "A ring target picked up; the call is in progress. Sent once per call.",
        example: CALL_ANSWERED,
    },
    Entry {
        event_type: EventType::CallCompleted,
        summary: "An answered call ended",
        description: "An answered call hung up; `data` carries its duration, billed minutes and charge.",
        example: CALL_COMPLETED,
    },
    Entry {
        event_type: EventType::CallMissed,
        summary: "A call ended unanswered",
        description: "Every ring target was tried and none answered, or the caller hung up first.",
        example: CALL_MISSED,
    },
    Entry {
        event_type: EventType::EndpointDisabled,
        summary: "Signal: an endpoint was disabled",
        description: "An endpoint answered 410 or failed 100 attempts in a row and takes no attempts until enabled; \
                      its deliveries are held.",
        example: r#"{"endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e", "url": "https://hooks.example.com/sms",
 "reason": "the endpoint answered 410 Gone", "last_attempt": {"delivery_id": "dlv_60718293a4b5c6d7e8f90a1b2c3d4e5f",
 "event_id": "evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "attempt": 1, "status_code": 410, "error": "410 Gone",
 "attempted_at": "2026-12-01T10:00:02Z"}, "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60"}"#,
    },
    Entry {
        event_type: EventType::DeliveryExhausted,
        summary: "Signal: a delivery failed its last attempt",
        description: "A delivery failed every attempt of its schedule; it can be replayed or recovered.",
        example: r#"{"delivery_id": "dlv_60718293a4b5c6d7e8f90a1b2c3d4e5f", "event_id": "evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9",
 "endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e", "url": "https://hooks.example.com/sms", "attempts": 8,
 "last_error": "answered 503", "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60"}"#,
    },
    Entry {
        event_type: EventType::BacklogHigh,
        summary: "Signal: work has waited past BACKLOG_ALERT_SECS",
        description: "The oldest overdue delivery to an active endpoint (or, for the operator, the oldest carrier \
                      event not processed) has waited past the threshold. Once per stuck item.",
        example: r#"{"kind": "delivery", "delivery_id": "dlv_60718293a4b5c6d7e8f90a1b2c3d4e5f",
 "event_id": "evt_0a1b2c3d4e5f60718293a4b5c6d7e8f9", "endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e",
 "waiting_since": "2026-12-01T10:00:00Z", "age_seconds": 930, "threshold_seconds": 900,
 "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60"}"#,
    },
    Entry {
        event_type: EventType::EndpointCircuitOpened,
        summary: "Signal: an endpoint's circuit opened",
        description: "An endpoint kept failing; no attempt goes to it until `next_probe_at`, and its deliveries wait \
                      in its line.",
        example: r#"{"endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e", "url": "https://hooks.example.com/sms",
 "opened_at": "2026-12-01T10:00:30Z", "next_probe_at": "2026-12-01T10:01:00Z",
 "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60"}"#,
    },
    Entry {
        event_type: EventType::EndpointCircuitClosed,
        summary: "Signal: an endpoint's circuit closed",
        description: "Two probes in a row succeeded; the endpoint's line is delivered oldest first.",
        example: r#"{"endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e", "url": "https://hooks.example.com/sms",
 "closed_at": "2026-12-01T10:02:01Z", "account_id": "acct_718293a4b5c6d7e8f90a1b2c3d4e5f60"}"#,
    },
    Entry {
        event_type: EventType::CarrierEventFailed,
        summary: "Signal (operator only): a carrier event failed",
        description: "A carrier event could not be applied and was recorded as failed; only the operator's endpoint \
                      receives it.",
        example: r#"{"carrier_event_id": "cev_8293a4b5c6d7e8f90a1b2c3d4e5f6071",
 "error": "a receipt for a message that was never sent (parked 24 h)", "account_id": null}"#,
    },
    Entry {
        event_type: EventType::AuditViolation,
        summary: "Signal (operator only): the audit found a broken promise",
        description: "The running audit found rows that break a promise of the product (a status that went back or \
                      was applied twice, a charge that does not match what it bills, a delivery that succeeded \
                      twice, an event without its delivery to a subscribed endpoint); `rows` names them. Once per finding; only the operator's endpoint receives it.",
        example: r#"{"check": "status_order", "database": "DB", "rows": ["message_status_history:4182"],
 "detail": "message msg_60718293a4b5c6d7e8f90a1b2c3d4e5f went from delivered to sent", "account_id": null}"#,
    },
    Entry {
        event_type: EventType::EndpointTest,
        summary: "A test event, on request",
        description: "Sent by `POST /v1/webhook_endpoints/{id}/test` to that endpoint only.",
        example: r#"{"endpoint_id": "ep_5f60718293a4b5c6d7e8f90a1b2c3d4e"}"#,
    },
];

/// The catalog's entry for `event_type` (every type has one: the test below checks the table
/// against [`EventType::ALL`]).
pub fn entry(event_type: EventType) -> Option<&'static Entry> {
    CATALOG.iter().find(|e| e.event_type == event_type)
}

#[cfg(test)]
mod tests {
    use super::{entry, CATALOG};
    use crate::webhook::EventType;

    #[test]
    fn every_type_once_in_order_with_an_example_that_is_an_object() {
        let types: Vec<EventType> = CATALOG.iter().map(|e| e.event_type).collect();
        assert_eq!(types, EventType::ALL);
        for e in CATALOG {
            let example: serde_json::Value =
                serde_json::from_str(e.example).unwrap_or_else(|err| panic!("{}: {err}", e.event_type));
            assert!(example.is_object(), "{}", e.event_type);
            assert!(!e.summary.is_empty() && !e.description.is_empty());
            assert_eq!(entry(e.event_type).map(|found| found.event_type), Some(e.event_type));
        }
    }

    /// docs/openapi.json's `Event`, what `/v1/events` lists and every webhook's body, is one of
    /// its schemas, each for some types: together, every type the product sends, once.
    #[test]
    fn the_documents_event_schema_covers_every_type_once() {
        let document: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/openapi.json")).expect("docs/openapi.json is JSON");
        let schemas = &document["components"]["schemas"];
        let mut covered = Vec::new();
        for choice in schemas["Event"]["oneOf"].as_array().expect("Event is a oneOf") {
            let name = choice["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")).expect("a ref");
            let kind = &schemas[name]["properties"]["type"];
            let names: Vec<&str> = match kind["const"].as_str() {
                Some(one) => vec![one],
                None => kind["enum"]
                    .as_array()
                    .expect("type is a const or an enum")
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect(),
            };
            for n in names {
                covered.push(EventType::from_name(n).unwrap_or_else(|| panic!("{name}: {n} is no event type")));
            }
        }
        covered.sort();
        let mut all = EventType::ALL.to_vec();
        all.sort();
        assert_eq!(covered, all, "docs/openapi.json's Event against EventType::ALL");
    }
}
