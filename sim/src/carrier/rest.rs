//! The fake's Twilio and Plivo sends, lists and status callbacks: neither carrier's send API takes
//! an idempotency key, so a send is told apart by its sender, recipient and text.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread;

use serde_json::{json, Value};

use super::state::{lock, receipts_due, Recorded, State, WebhookTarget};

/// The two carriers whose send API takes no idempotency key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Rest {
    Twilio,
    Plivo,
}

impl Rest {
    fn name(self) -> &'static str {
        match self {
            Rest::Twilio => "twilio",
            Rest::Plivo => "plivo",
        }
    }
}

/// A Twilio or Plivo send: from, to, text and the callback URL, as each names them.
fn rest_fields(req: &Recorded, carrier: Rest) -> (String, String, String, String) {
    let field = |name: &str| req.body[name].as_str().unwrap_or_default().to_owned();
    match carrier {
        Rest::Twilio => (field("From"), field("To"), field("Body"), field("StatusCallback")),
        Rest::Plivo => (field("src"), field("dst"), field("text"), field("url")),
    }
}

pub(super) fn rest_send(req: &Recorded, state: &Mutex<State>, carrier: Rest) -> (u16, Value) {
    let (from, to, text, callback) = rest_fields(req, carrier);
    let attempt = {
        let mut s = lock(state);
        let n = s.rest_attempts.entry(format!("{}|{from}|{to}|{text}", carrier.name())).or_insert(0);
        *n += 1;
        *n
    };
    if text.contains("[refuse]") {
        return match carrier {
            Rest::Twilio => {
                (400, json!({"code": 21211, "message": "The 'To' number is not a valid phone number.", "status": 400}))
            }
            Rest::Plivo => (400, json!({"api_id": crate::random_hex(), "error": "dst is not a valid number"})),
        };
    }
    if text.contains("[flaky]") && attempt == 1 {
        return (503, json!({"message": "Service unavailable", "status": 503}));
    }
    let id = match carrier {
        Rest::Twilio => format!("SM{}", crate::random_hex()),
        Rest::Plivo => crate::random_hex(),
    };
    let listed = match carrier {
        Rest::Twilio => json!({"sid": id, "from": from, "to": to, "body": text, "status": "queued",
            "direction": "outbound-api", "date_created": rfc2822_now()}),
        Rest::Plivo => json!({"message_uuid": id, "from_number": from, "to_number": to,
            "message_direction": "outbound", "message_state": "queued",
            "message_time": format!("{}", crate::unix_now())}),
    };
    lock(state).taken.push((carrier.name(), listed.clone(), text.clone()));
    let by_default = lock(state).deliver_by_default;
    if let Some(delivered) = receipts_due(&text, by_default) {
        let target = lock(state).target.clone();
        if let Some(target) = target {
            let (id, from, to) = (id.clone(), from.clone(), to.clone());
            let last = match (delivered, carrier) {
                (true, _) => "delivered",
                (false, Rest::Twilio) => "undelivered",
                (false, Rest::Plivo) => "failed",
            };
            thread::spawn(move || {
                thread::sleep(std::time::Duration::from_secs(1));
                for status in ["sent", last] {
                    rest_callback(&target, carrier, &callback, &id, &from, &to, status);
                }
            });
        }
    }
    if text.contains("[lost-answer]") && attempt == 1 {
        thread::sleep(std::time::Duration::from_secs(12));
    }
    match carrier {
        Rest::Twilio => (201, listed),
        Rest::Plivo => {
            (202, json!({"api_id": crate::random_hex(), "message": "message(s) queued", "message_uuid": [id]}))
        }
    }
}

/// Twilio's list (`To`, `From`; newest first, `messages`) or Plivo's (`objects`, newest first,
/// `limit` and `offset`; Plivo filters by time and direction, not by number).
pub(super) fn rest_list(query: &str, state: &Mutex<State>, carrier: Rest) -> (u16, Value) {
    let params: HashMap<String, String> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    let taken = lock(state).taken.clone();
    let mut listed: Vec<Value> = taken
        .into_iter()
        .filter(|(name, _, _)| *name == carrier.name())
        .map(|(_, m, _)| m)
        .filter(|m| match carrier {
            Rest::Twilio => {
                params.get("To").is_none_or(|to| m["to"] == to.as_str())
                    && params.get("From").is_none_or(|from| m["from"] == from.as_str())
            }
            Rest::Plivo => true,
        })
        .collect();
    listed.reverse();
    if carrier == Rest::Plivo {
        let number = |name: &str, default: usize| params.get(name).and_then(|v| v.parse().ok()).unwrap_or(default);
        listed = listed.into_iter().skip(number("offset", 0)).take(number("limit", 20)).collect();
    }
    match carrier {
        Rest::Twilio => (200, json!({"messages": listed})),
        Rest::Plivo => (200, json!({"api_id": crate::random_hex(), "objects": listed})),
    }
}

/// One status callback, signed as the carrier signs it; retried until the worker answers 2xx.
fn rest_callback(target: &WebhookTarget, carrier: Rest, url: &str, id: &str, from: &str, to: &str, status: &str) {
    let (body, headers) = match carrier {
        Rest::Twilio => {
            let Some(token) = &target.twilio_token else { return };
            let params =
                [("MessageSid", id), ("MessageStatus", status), ("From", from), ("To", to), ("AccountSid", "ACfake")];
            let (body, signature) = crate::twilio::sign(token, url, &params);
            (body, vec![("x-twilio-signature", signature)])
        }
        Rest::Plivo => {
            let Some(token) = &target.plivo_token else { return };
            let nonce = crate::random_hex();
            let params = [("MessageUUID", id), ("Status", status), ("From", from), ("To", to)];
            let (body, signature) = crate::plivo::sign_v3(token, url, &nonce, &params);
            (body, vec![("x-plivo-signature-v3", signature), ("x-plivo-signature-v3-nonce", nonce)])
        }
    };
    for _ in 0..10 {
        let mut request =
            ureq::post(url).timeout(crate::api::TIMEOUT).set("content-type", "application/x-www-form-urlencoded");
        for (name, value) in &headers {
            request = request.set(name, value);
        }
        let answer = crate::api::Answer::from_result(request.send_string(&body));
        if (200..300).contains(&answer.status) {
            break;
        }
        thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Now as Twilio writes `date_created` (`Wed, 18 Aug 2010 20:01:40 +0000`).
fn rfc2822_now() -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = crate::unix_now();
    let rfc3339 = exactly_core::Timestamp::from_unix_millis(secs * 1000).to_rfc3339();
    // `YYYY-MM-DDTHH:MM:SSZ`
    let (year, month, day, clock) = (&rfc3339[0..4], &rfc3339[5..7], &rfc3339[8..10], &rfc3339[11..19]);
    let month = month.parse::<usize>().ok().and_then(|m| MONTHS.get(m.wrapping_sub(1))).unwrap_or(&"Jan");
    let weekday = DAYS[usize::try_from(secs.div_euclid(86_400).rem_euclid(7)).unwrap_or(0)];
    format!("{weekday}, {day} {month} {year} {clock} +0000")
}

#[cfg(test)]
mod tests {
    #[test]
    fn twilio_dates_read_back_as_now() {
        let written = super::rfc2822_now();
        let read = exactly_core::Timestamp::parse_rfc2822(&written).map(|t| t.unix_millis() / 1000);
        assert!(read.is_some_and(|secs| (secs - crate::unix_now()).abs() <= 2), "{written}");
    }
}
