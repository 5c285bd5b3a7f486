//! The carrier facts the simulator and every test send, built in one place: this file is also
//! compiled into the core's scenario tests (`core/tests/scenarios.rs`, by path), which cannot
//! depend on the simulator. It uses nothing but `serde_json`.

use serde_json::{json, Value};

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

/// A Telnyx `call.initiated` at `occurred_at`: a call from `from` to `to`, parked for the worker
/// to ring.
pub fn call_initiated(event_id: &str, occurred_at: &str, control: &str, session: &str, from: &str, to: &str) -> String {
    envelope(
        event_id,
        "call.initiated",
        occurred_at,
        json!({
            "call_control_id": control, "call_leg_id": format!("leg-{control}"), "call_session_id": session,
            "from": from, "to": to, "direction": "incoming", "state": "parked",
        }),
        1,
    )
}
