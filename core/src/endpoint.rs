//! Which customer endpoint URLs may receive webhooks.
//!
//! In production an endpoint must be `https` and must not name a loopback, private,
//! link-local, carrier-grade NAT, unspecified or cloud-metadata address (or a name that is one
//! by convention, like `localhost` or `metadata.google.internal`). Development
//! (`ALLOW_PRIVATE_ENDPOINTS=true`) allows both. Names are not resolved here (a Worker cannot
//! resolve DNS itself); the platform's own egress rules guard what a public name resolves to.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::form::Url;

/// Why an endpoint URL was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlProblem {
    /// Not an absolute `http(s)://host/...` URL, or longer than 2048 bytes.
    Malformed,
    /// `http` where `https` is required.
    NotHttps,
    /// A loopback, private, link-local or metadata address.
    PrivateAddress,
}

impl UrlProblem {
    /// A message for the API's 422.
    pub fn message(self) -> &'static str {
        match self {
            UrlProblem::Malformed => "must be an absolute http(s) URL of at most 2048 characters",
            UrlProblem::NotHttps => "must use https",
            UrlProblem::PrivateAddress => "must not be a loopback, private, link-local or metadata address",
        }
    }
}

/// Checks an endpoint URL; `allow_private` is the development switch.
pub fn check_url(url: &str, allow_private: bool) -> Result<(), UrlProblem> {
    if url.len() > 2048 {
        return Err(UrlProblem::Malformed);
    }
    let parsed = Url::parse(url).ok_or(UrlProblem::Malformed)?;
    let scheme = parsed.scheme.to_ascii_lowercase();
    if scheme != "https" && scheme != "http" {
        return Err(UrlProblem::Malformed);
    }
    if parsed.host.is_empty() {
        return Err(UrlProblem::Malformed);
    }
    if allow_private {
        return Ok(());
    }
    if scheme != "https" {
        return Err(UrlProblem::NotHttps);
    }
    if is_private_host(&parsed.host.to_ascii_lowercase()) {
        return Err(UrlProblem::PrivateAddress);
    }
    Ok(())
}

fn is_private_host(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host == "localhost" || host.ends_with(".localhost") || host == "metadata" || host == "metadata.google.internal" || host.ends_with(".internal") {
        return true;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().map_or(true, private_v6);
    }
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return private_v4(v4);
    }
    // Numeric forms a resolver would still read as an address (e.g. `2130706433`, `0x7f.1`).
    host.split('.').all(|part| !part.is_empty() && (part.bytes().all(|b| b.is_ascii_digit()) || part.starts_with("0x")))
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0)
        || a >= 224
}

fn private_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return private_v4(v4);
    }
    let first = ip.segments()[0];
    ip.is_loopback() || ip.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80 || ip.is_multicast()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn public_https_is_allowed() {
        for url in ["https://example.com/hooks", "https://hooks.example.com:8443/a?b=c", "https://8.8.8.8/x", "https://[2606:4700::1111]/x"] {
            assert_eq!(check_url(url, false), Ok(()), "{url}");
        }
    }

    #[test]
    fn private_and_metadata_addresses_are_refused() {
        for url in [
            "https://localhost/x", "https://api.localhost/x", "https://127.0.0.1/x", "https://127.1.2.3:8443/x",
            "https://10.0.0.5/x", "https://172.16.0.1/x", "https://172.31.255.255/x", "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data", "https://metadata.google.internal/x", "https://0.0.0.0/x",
            "https://100.64.0.1/x", "https://[::1]/x", "https://[fd00::1]/x", "https://[fe80::1]/x",
            "https://[::ffff:127.0.0.1]/x", "https://2130706433/x", "https://0x7f.0.0.1/x", "https://224.0.0.1/x",
        ] {
            assert_eq!(check_url(url, false), Err(UrlProblem::PrivateAddress), "{url}");
        }
        assert_eq!(check_url("https://172.32.0.1/x", false), Ok(()), "just outside 172.16/12");
    }

    #[test]
    fn scheme_and_shape() {
        assert_eq!(check_url("http://example.com/x", false), Err(UrlProblem::NotHttps));
        assert_eq!(check_url("ftp://example.com/x", false), Err(UrlProblem::Malformed));
        assert_eq!(check_url("example.com/x", false), Err(UrlProblem::Malformed));
        assert_eq!(check_url(&format!("https://example.com/{}", "a".repeat(2100)), false), Err(UrlProblem::Malformed));
    }

    #[test]
    fn development_allows_loopback_and_http() {
        assert_eq!(check_url("http://127.0.0.1:9000/hook", true), Ok(()));
        assert_eq!(check_url("http://localhost/hook", true), Ok(()));
        assert_eq!(check_url("ftp://localhost/hook", true), Err(UrlProblem::Malformed));
    }
}
