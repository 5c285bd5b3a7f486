//! Custom headers: static headers an endpoint sends with every attempt, for a receiver behind an
//! API gateway that wants a key of its own (docs/contract.md §6, "Custom headers").
//!
//! A name is an HTTP token of at most [`MAX_NAME_LEN`] characters and never one the delivery
//! owns: the Standard Webhooks headers (`webhook-*`), an ordered endpoint's `exactly-skipped`,
//! `content-type`, `content-length`, `host`, `user-agent`, or a hop-by-hop header. A value is visible ASCII and spaces, at most
//! [`MAX_VALUE_LEN`] characters. Names are compared without case, so no name is given twice.

use std::collections::BTreeMap;

/// The most custom headers an endpoint carries.
pub const MAX_HEADERS: usize = 10;
/// The longest header name.
pub const MAX_NAME_LEN: usize = 64;
/// The longest header value.
pub const MAX_VALUE_LEN: usize = 1024;
/// What a value shows as when an endpoint is read back; never taken as a value, so a client that
/// sends back what it read does not store it.
pub const REDACTED: &str = "[redacted]";

/// Headers the delivery sets itself, or that describe one connection rather than the request.
const RESERVED: [&str; 15] = [
    "exactly-skipped",
    "host",
    "content-length",
    "content-type",
    "user-agent",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// Why a set of headers was refused: the header it is about (when one) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderError {
    pub name: Option<String>,
    pub message: String,
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            // The name is shown only when it is printable and short: it came off the network.
            Some(name) => write!(f, "header {name:?}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// An endpoint's custom headers, checked. Its `Debug` shows the names only: the values are
/// often keys.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CustomHeaders(BTreeMap<String, String>);

impl std::fmt::Debug for CustomHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check(name: &str, value: &str) -> Result<(), HeaderError> {
    let refuse = |message: &str| {
        let shown = if name.len() <= MAX_NAME_LEN && is_token(name) { Some(name.to_owned()) } else { None };
        Err(HeaderError { name: shown, message: message.to_owned() })
    };
    if name.len() > MAX_NAME_LEN {
        return refuse(&format!("a header name is at most {MAX_NAME_LEN} characters"));
    }
    if !is_token(name) {
        return refuse("a header name is letters, digits and !#$%&'*+-.^_`|~ only");
    }
    let lower = name.to_ascii_lowercase();
    // `cf-` headers are Cloudflare's own, which a fetch from a Worker may not set.
    if lower.starts_with("webhook-") || lower.starts_with("cf-") || RESERVED.contains(&lower.as_str()) {
        return refuse("is set by the delivery itself and cannot be given");
    }
    if value.len() > MAX_VALUE_LEN {
        return refuse(&format!("a header value is at most {MAX_VALUE_LEN} characters"));
    }
    if !value.bytes().all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b)) {
        return refuse("a header value is visible ASCII characters and spaces only");
    }
    if value.trim() == REDACTED {
        return refuse("is the redacted placeholder an endpoint is read back with; send the value itself");
    }
    Ok(())
}

impl CustomHeaders {
    /// Checks `pairs` (name, value) as a whole: at most [`MAX_HEADERS`], each name once.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, HeaderError> {
        let mut headers = BTreeMap::new();
        for (name, value) in pairs {
            check(name, value)?;
            let value = value.trim_matches(|c| c == ' ' || c == '\t').to_owned();
            if headers.insert(name.to_ascii_lowercase(), value).is_some() {
                return Err(HeaderError { name: Some(name.to_owned()), message: "is given twice".into() });
            }
            if headers.len() > MAX_HEADERS {
                return Err(HeaderError { name: None, message: format!("at most {MAX_HEADERS} custom headers") });
            }
        }
        Ok(CustomHeaders(headers))
    }

    /// Each header (lower-case name, value), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{CustomHeaders, MAX_HEADERS};

    #[test]
    fn names_the_delivery_owns_are_refused_in_any_case() {
        for name in [
            "Webhook-Signature",
            "webhook-id",
            "Exactly-Skipped",
            "HOST",
            "Content-Length",
            "content-type",
            "Transfer-Encoding",
            "Upgrade",
        ] {
            let error = CustomHeaders::new([(name, "x")]).expect_err(name);
            assert!(error.message.contains("set by the delivery"), "{name}: {error}");
        }
        assert!(CustomHeaders::new([("X-Webhook-Key", "k"), ("Authorization", "Bearer t")]).is_ok());
    }

    #[test]
    fn bad_names_values_counts_and_repeats_are_refused() {
        let long = "a".repeat(65);
        let huge = "v".repeat(1025);
        let refused: [Vec<(&str, &str)>; 9] = [
            vec![("", "x")],
            vec![("x y", "x")],
            vec![(long.as_str(), "x")],
            vec![("x-a", "line\r\nx-b: smuggled")],
            vec![("x-a", huge.as_str())],
            vec![("X-A", "1"), ("x-a", "2")],
            vec![("x-a", "caf\u{e9}")],
            vec![("x-a", "[redacted]")],
            vec![("CF-Connecting-IP", "1.2.3.4")],
        ];
        for pairs in refused {
            assert!(CustomHeaders::new(pairs.clone()).is_err(), "{pairs:?}");
        }
        let names: Vec<String> = (0..=MAX_HEADERS).map(|i| format!("x-{i}")).collect();
        let eleven = CustomHeaders::new(names.iter().map(|n| (n.as_str(), "v")));
        assert!(eleven.expect_err("eleven").message.contains("at most 10"));
        assert!(CustomHeaders::new(names.iter().take(MAX_HEADERS).map(|n| (n.as_str(), "v"))).is_ok());
    }

    #[test]
    fn debug_never_shows_a_value() {
        let headers = CustomHeaders::new([("X-Api-Key", " sk_live_secret ")]).expect("valid");
        assert_eq!(format!("{headers:?}"), "{\"x-api-key\"}");
        assert_eq!(headers.iter().collect::<Vec<_>>(), [("x-api-key", "sk_live_secret")]);
    }
}
