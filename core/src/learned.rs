//! Facts learned by asking a carrier's API instead of from its webhook (reconciliation of a
//! webhook that never came). Each is written as the carrier's own webhook would carry it, by a
//! builder that sits beside that carrier's parser (`telnyx::learned_*`, `twilio::learned_status`,
//! `plivo::learned_status`), so a learned fact takes the path every webhook takes and is parsed
//! by the same code. The tests here parse each one back.

use serde_json::Value;

pub use crate::event::Learned;
use crate::message::MessageStatus;
use crate::{plivo, telnyx, twilio, Provider, Timestamp};

/// A message's status as `provider`'s API reported it, as that carrier's status report, when it
/// is final (delivered or failed); `None` for a status that is not final or not known.
/// `errors` is what the API said of errors: Telnyx's `errors` array; for Twilio and Plivo an
/// object whose `code` is the error code (absent, empty or `0`: none).
pub fn final_status(
    provider: Provider,
    carrier_message_id: &str,
    status: &str,
    errors: &Value,
    now: Timestamp,
) -> Option<Learned> {
    let mapped = match provider {
        Provider::Telnyx => telnyx::message_status(status),
        Provider::Twilio => twilio::message_status(status),
        Provider::Plivo => plivo::message_status(status),
    };
    if !mapped.is_some_and(MessageStatus::is_terminal) {
        return None;
    }
    // Twilio's and Plivo's one error code; Telnyx's array is carried as it is.
    let code = || match &errors["code"] {
        Value::String(s) if !s.is_empty() && s != "0" => Some(s.clone()),
        Value::Number(n) if n.as_u64() != Some(0) => Some(n.to_string()),
        _ => None,
    };
    Some(match provider {
        Provider::Telnyx => telnyx::learned_status(carrier_message_id, status, errors, now),
        Provider::Twilio => twilio::learned_status(carrier_message_id, status, code().as_deref()),
        Provider::Plivo => plivo::learned_status(carrier_message_id, status, code().as_deref()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{CarrierError, CarrierEvent, EventKind, StatusReport};

    fn parse(provider: Provider, learned: &Learned) -> CarrierEvent {
        let body = learned.body.as_bytes();
        match provider {
            Provider::Telnyx => telnyx::parse_event(body),
            Provider::Twilio => twilio::parse_event(body),
            Provider::Plivo => plivo::parse_event(body),
        }
        .expect("a learned fact parses")
    }

    fn report(event: &CarrierEvent) -> &StatusReport {
        match &event.kind {
            EventKind::MessageStatus(report) => report,
            other => panic!("not a status report: {other:?}"),
        }
    }

    #[test]
    fn each_carriers_final_status_parses_back_as_its_own_report() {
        let now = Timestamp::from_unix_millis(1_780_000_000_000);
        let cases = [
            (Provider::Telnyx, "delivered", json!([]), None),
            (Provider::Telnyx, "delivery_failed", json!([{"code": "40300", "title": "Blocked"}]), Some("40300")),
            (Provider::Twilio, "delivered", json!({"code": null, "message": null}), None),
            (Provider::Twilio, "undelivered", json!({"code": 30003, "message": "Unreachable"}), Some("30003")),
            (Provider::Twilio, "failed", json!({"code": "0"}), None),
            (Provider::Plivo, "delivered", json!({"code": "0"}), None),
            (Provider::Plivo, "failed", json!({"code": "420"}), Some("420")),
        ];
        for (provider, status, errors, code) in cases {
            let learned = final_status(provider, "msg-1", status, &errors, now).expect("final");
            let event = parse(provider, &learned);
            assert_eq!(event.provider, provider);
            assert_eq!(event.event_id, learned.event_id, "{provider:?} {status}");
            assert_eq!(event.event_type, learned.event_type);
            let report = report(&event);
            assert_eq!(report.carrier_message_id, "msg-1");
            assert_eq!(report.carrier_status, status);
            assert!(report.status.is_some_and(MessageStatus::is_terminal), "{provider:?} {status}");
            let codes: Vec<&str> = report.errors.iter().map(|e: &CarrierError| e.code.as_str()).collect();
            assert_eq!(codes, code.into_iter().collect::<Vec<_>>(), "{provider:?} {status}");
        }
    }

    #[test]
    fn twilio_and_plivo_learn_under_their_own_callbacks_key() {
        let now = Timestamp::from_unix_millis(0);
        let learned = final_status(Provider::Twilio, "SM1", "delivered", &json!({}), now).expect("final");
        let callback = twilio::parse_event(b"MessageSid=SM1&MessageStatus=delivered").expect("parse");
        assert_eq!(learned.event_id, callback.event_id);
        let learned = final_status(Provider::Plivo, "u-1", "delivered", &json!({}), now).expect("final");
        let callback = plivo::parse_event(b"MessageUUID=u-1&Status=delivered").expect("parse");
        assert_eq!(learned.event_id, callback.event_id);
    }

    #[test]
    fn a_status_that_is_not_final_or_not_known_is_not_learned() {
        let now = Timestamp::from_unix_millis(0);
        for (provider, status) in [
            (Provider::Telnyx, "sent"),
            (Provider::Telnyx, "delivery_unconfirmed"),
            (Provider::Twilio, "sending"),
            (Provider::Plivo, "queued"),
            (Provider::Plivo, "no-such-status"),
        ] {
            assert_eq!(final_status(provider, "m", status, &json!({}), now), None, "{provider:?} {status}");
        }
    }

    #[test]
    fn a_learned_telnyx_hangup_parses_back_as_the_calls_hangup() {
        let call = telnyx::CallOf {
            call_control_id: "v3:cc",
            call_leg_id: "leg-1",
            call_session_id: "sess-1",
            from: "+15550001111",
            to: "+15550002222",
        };
        let ended_at = Timestamp::from_unix_millis(1_780_000_000_000);
        let learned = telnyx::learned_hangup("call_1", &call, ended_at);
        let event = parse(Provider::Telnyx, &learned);
        assert_eq!(event.event_id, "reconciled:call_1:hangup");
        assert_eq!(event.event_type, "call.hangup");
        assert_eq!(event.occurred_at, Some(ended_at));
        let EventKind::CallHangup(hangup) = &event.kind else { panic!("not a hangup: {:?}", event.kind) };
        assert_eq!(hangup.leg.call_control_id, "v3:cc");
        assert_eq!(hangup.leg.call_leg_id, "leg-1");
        assert_eq!(hangup.leg.call_session_id, "sess-1");
        assert_eq!(hangup.cause, "normal_clearing");
    }
}
