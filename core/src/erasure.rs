//! The phone numbers a stored carrier payload names, read by meaning (docs/contract.md §5,
//! "Erasure"): every value of the body, JSON (Telnyx) or a form (Twilio, Plivo), that is a whole
//! phone number. A number inside a longer one, an id or a text is not named.

use crate::number::PhoneNumber;

/// What an erased number reads as wherever it was stored.
pub const MARKER: &str = "[erased]";

/// The number `value` is, in E.164, if it is one: `+` and digits, or digits alone as Plivo
/// writes them.
pub fn as_number(value: &str) -> Option<PhoneNumber> {
    let value = value.trim();
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return PhoneNumber::parse(&format!("+{value}")).ok();
    }
    PhoneNumber::parse(value).ok()
}

/// Every whole phone number `payload` holds as a value, in E.164, each once. A body that parses as JSON is read as JSON (every string, at any depth);
/// anything else as a form.
pub fn numbers(payload: &str) -> Vec<PhoneNumber> {
    let mut found = Vec::new();
    let mut add = |value: &str| {
        if let Some(number) = as_number(value) {
            if !found.contains(&number) {
                found.push(number);
            }
        }
    };
    match as_json(payload) {
        Some(value) => strings(&value, &mut add),
        None => {
            for (_, value) in crate::form::parse(payload.as_bytes()) {
                add(&value);
            }
        }
    }
    found
}

/// `payload` read as JSON, when it starts as a JSON object or array and parses; a carrier's form
/// body is `None`.
fn as_json(payload: &str) -> Option<serde_json::Value> {
    let trimmed = payload.trim_start();
    (trimmed.starts_with('{') || trimmed.starts_with('[')).then(|| serde_json::from_str(payload).ok()).flatten()
}

/// Whether `payload` names `number` as a whole value.
pub fn names(payload: &str, number: &PhoneNumber) -> bool {
    numbers(payload).contains(number)
}

/// The digits of `number` without its `+`: a text every form of it in a stored payload
/// contains (`+`, `%2B` or none), so a database can narrow the rows to read with it.
pub fn digits(number: &PhoneNumber) -> &str {
    number.as_str().trim_start_matches('+')
}

/// `payload` with every whole value that is `number` (as [`names`] reads it) replaced by
/// `marker`, in the payload's own encoding: a JSON body re-serialized, a form re-encoded in its
/// order. `None` when it names the number nowhere. An event not processed yet keeps what it says
/// of everyone else (docs/contract.md §5, "Erasure").
pub fn redact(payload: &str, number: &PhoneNumber, marker: &str) -> Option<String> {
    if !names(payload, number) {
        return None;
    }
    match as_json(payload) {
        Some(mut value) => {
            replace_strings(&mut value, number, marker);
            serde_json::to_string(&value).ok()
        }
        None => {
            let mut out = form_urlencoded::Serializer::new(String::new());
            for (key, value) in crate::form::parse(payload.as_bytes()) {
                let value = if as_number(&value).as_ref() == Some(number) { marker.to_owned() } else { value };
                out.append_pair(&key, &value);
            }
            Some(out.finish())
        }
    }
}

fn replace_strings(value: &mut serde_json::Value, number: &PhoneNumber, marker: &str) {
    match value {
        serde_json::Value::String(s) if as_number(s).as_ref() == Some(number) => *s = marker.to_owned(),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, number, marker)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, number, marker)),
        _ => {}
    }
}

fn strings(value: &serde_json::Value, add: &mut impl FnMut(&str)) {
    match value {
        serde_json::Value::String(s) => add(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, add)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, add)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn n(s: &str) -> PhoneNumber {
        PhoneNumber::parse(s).unwrap()
    }

    #[test]
    fn a_number_inside_a_longer_one_is_not_named() {
        let json = r#"{"data":{"payload":{"from":{"phone_number":"+493012345678"},"text":"call +4930123456 now"}}}"#;
        assert!(!names(json, &n("+4930123456")), "a prefix of a number, or a number in a text");
        assert!(names(json, &n("+493012345678")));
        let form = "From=%2B493012345678&To=%2B15550001111&Body=call+%2B4930123456";
        assert!(!names(form, &n("+4930123456")), "a form value that is a longer number");
        assert!(names(form, &n("+15550001111")));
    }

    #[test]
    fn every_carriers_way_of_writing_a_number() {
        // Telnyx: JSON, `+`; nested in arrays (the `to` list).
        let telnyx = r#"{"data":{"payload":{"to":[{"phone_number":"+15550002222"}],"from":"+15550001111"}}}"#;
        let mut found = numbers(telnyx);
        found.sort();
        assert_eq!(found, vec![n("+15550001111"), n("+15550002222")]);
        // Twilio: a form, `+` encoded.
        assert_eq!(
            numbers("From=%2B15550001111&To=%2B15550002222&Body=hi"),
            vec![n("+15550001111"), n("+15550002222")]
        );
        // Plivo: a form, digits alone.
        assert_eq!(numbers("From=15550001111&To=15550002222&Text=hi"), vec![n("+15550001111"), n("+15550002222")]);
        assert!(names("From=15550001111", &n("+15550001111")));
    }

    #[test]
    fn a_redaction_replaces_the_number_alone_in_each_encoding() {
        let p = n("+15550002222");
        let telnyx = r#"{"data":{"payload":{"from":{"phone_number":"+15550001111"},"text":"hi +15550002222","to":[{"phone_number":"+15550003333"},{"phone_number":"+15550002222"}]}}}"#;
        let redacted = redact(telnyx, &p, "[erased]").expect("it names the number");
        assert!(!names(&redacted, &p), "{redacted}");
        let v: serde_json::Value = serde_json::from_str(&redacted).unwrap();
        assert_eq!(v["data"]["payload"]["to"][1]["phone_number"], "[erased]");
        assert_eq!(v["data"]["payload"]["to"][0]["phone_number"], "+15550003333", "the others stay");
        assert_eq!(v["data"]["payload"]["text"], "hi +15550002222", "a text that mentions it is not the number");
        // Twilio writes `+` encoded, Plivo digits alone; the other pairs stay, in order.
        assert_eq!(
            redact("From=%2B15550002222&To=%2B15550001111&Body=hi", &p, "[erased]").as_deref(),
            Some("From=%5Berased%5D&To=%2B15550001111&Body=hi")
        );
        assert_eq!(
            redact("To=15550002222&From=15550001111", &p, "[erased]").as_deref(),
            Some("To=%5Berased%5D&From=15550001111")
        );
        assert_eq!(redact(telnyx, &n("+15559999999"), "[erased]"), None, "a payload that does not name it");
    }

    #[test]
    fn what_is_not_a_number() {
        for payload in ["", "{", "{\"id\":\"abc\",\"n\":15550001111}", "a=&b=+&c=0123456789", "x=12345"] {
            assert!(numbers(payload).is_empty(), "{payload:?}: {:?}", numbers(payload));
        }
        assert_eq!(digits(&n("+15550001111")), "15550001111");
    }
}
