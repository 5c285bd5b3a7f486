//! Form bodies and URL pieces, as the HMAC-signing carriers (Twilio, Plivo) see them.

/// The pairs of an `application/x-www-form-urlencoded` body, decoded, in order. Invalid UTF-8
/// is replaced, never a panic.
pub fn parse(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// The first value of `key`, if present and not blank.
pub fn get<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).filter(|v| !v.trim().is_empty())
}

/// Keys sorted, each key's values sorted: the order both carriers sign parameters in.
/// With `dedupe`, a value repeated under one key counts once (Twilio's rule).
pub fn sorted(pairs: &[(String, String)], dedupe: bool) -> Vec<(&str, &str)> {
    let mut sorted: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    sorted.sort_unstable();
    if dedupe {
        sorted.dedup();
    }
    sorted
}

/// A URL split into the parts signatures are computed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Url<'a> {
    /// `https` or `http`.
    pub scheme: &'a str,
    /// The host, without a port.
    pub host: &'a str,
    /// The port, if the URL names one.
    pub port: Option<&'a str>,
    /// The path, starting with `/` (or empty).
    pub path: &'a str,
    /// The query, without `?`, if any.
    pub query: Option<&'a str>,
}

impl<'a> Url<'a> {
    /// Splits an absolute `scheme://host[:port]/path[?query]` URL; the fragment is dropped.
    pub fn parse(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        if scheme.is_empty()
            || !scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
        {
            return None;
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        // An IPv6 literal keeps its brackets: `[::1]:8787`.
        let host_end = if authority.starts_with('[') {
            authority.find(']')? + 1
        } else {
            authority.find(':').unwrap_or(authority.len())
        };
        let (host, port) = authority.split_at(host_end);
        let port = match port.strip_prefix(':') {
            None if port.is_empty() => None,
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => Some(digits),
            _ => return None,
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        Some(Self { scheme, host, port, path, query })
    }

    /// The scheme's default port.
    pub fn default_port(&self) -> Option<&'static str> {
        match self.scheme.to_ascii_lowercase().as_str() {
            "https" => Some("443"),
            "http" => Some("80"),
            _ => None,
        }
    }

    /// `scheme://host[:port]path` with the given port and no query.
    pub fn base(&self, port: Option<&str>) -> String {
        match port {
            Some(port) => format!("{}://{}:{}{}", self.scheme, self.host, port, self.path),
            None => format!("{}://{}{}", self.scheme, self.host, self.path),
        }
    }

    /// The whole URL with the given port (query kept).
    pub fn with_port(&self, port: Option<&str>) -> String {
        let mut url = self.base(port);
        if let Some(query) = self.query {
            url.push('?');
            url.push_str(query);
        }
        url
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// A JSON object of strings as a form body (for the signature vectors).
    pub(crate) fn form_body(params: &serde_json::Value) -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in params.as_object().expect("an object of parameters") {
            s.append_pair(k, v.as_str().expect("string values"));
        }
        s.finish()
    }

    #[test]
    fn form_pairs_decode() {
        let pairs = parse(b"Body=Hello+there%21&To=%2B15550002222&Empty=&Body=again");
        assert_eq!(get(&pairs, "Body"), Some("Hello there!"));
        assert_eq!(get(&pairs, "To"), Some("+15550002222"));
        assert_eq!(get(&pairs, "Empty"), None);
        assert_eq!(get(&pairs, "Missing"), None);
        assert_eq!(pairs.len(), 4);
        assert_eq!(parse(b"%FF=%FE").len(), 1, "invalid UTF-8 is replaced, not a panic");
    }

    #[test]
    fn sorting_by_key_then_value() {
        let pairs = parse(b"b=2&a=9&a=1&a=1");
        assert_eq!(sorted(&pairs, false), vec![("a", "1"), ("a", "1"), ("a", "9"), ("b", "2")]);
        assert_eq!(sorted(&pairs, true), vec![("a", "1"), ("a", "9"), ("b", "2")]);
    }

    #[test]
    fn urls_split() {
        let u = Url::parse("https://example.com:8443/hooks/twilio?x=1&y=2#frag").unwrap();
        assert_eq!(
            u,
            Url {
                scheme: "https",
                host: "example.com",
                port: Some("8443"),
                path: "/hooks/twilio",
                query: Some("x=1&y=2")
            }
        );
        assert_eq!(u.base(None), "https://example.com/hooks/twilio");
        assert_eq!(u.with_port(Some("443")), "https://example.com:443/hooks/twilio?x=1&y=2");
        let u = Url::parse("http://h").unwrap();
        assert_eq!((u.host, u.port, u.path, u.query, u.default_port()), ("h", None, "", None, Some("80")));
        let u = Url::parse("https://[::1]:8787/p").unwrap();
        assert_eq!((u.host, u.port), ("[::1]", Some("8787")));
        for bad in ["", "example.com/x", "https://", "https://user@host/", "https://host:port/", "://x"] {
            assert_eq!(Url::parse(bad), None, "{bad}");
        }
    }
}
