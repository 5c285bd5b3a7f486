//! Which customer endpoint URLs may receive webhooks.
//!
//! An endpoint URL is parsed with a WHATWG URL parser, the standard `fetch` applies when the
//! edge sends the attempt, and every rule runs on the *parsed* host. A rule that looked at the
//! text instead would be fooled by whatever the parser rewrites:
//! `https://169.254.169.254\latest` (a `\` ends the host), `https://127.0.0.%31/` (a
//! percent-encoded host), `https://0x7f.1/` or `https://2130706433/` (numeric forms of an
//! IPv4 address), full-width digits, tabs and newlines inside the host.
//!
//! The parser is a seam: the rules read a [`Parsed`], the standard's getters of the parsed URL.
//! [`EndpointUrl::parse`] fills it with the `url` crate (feature `url`, on by default); the
//! Worker fills it from the runtime's own `URL` class ([`EndpointUrl::parse_with`]), the same
//! standard, which keeps the `url` crate's Unicode tables out of its bundle. Either way the
//! rules below see the same strings.
//!
//! In production an endpoint must be `https`, must carry no credentials, and must not name an
//! address in any IANA special-purpose range (loopback, private, link-local, carrier-grade NAT,
//! documentation, benchmarking, multicast, reserved) nor an IPv6 address that embeds or
//! translates to one (IPv4-compatible, IPv4-mapped, NAT64, and 6to4 or Teredo whose IPv4 is
//! private), nor a name that is local by convention (`localhost`, `*.local`, `*.internal`,
//! `*.home.arpa`) or a cloud metadata name. Development (`ALLOW_PRIVATE_ENDPOINTS=true`) allows
//! `http` and private hosts.
//!
//! Names are not resolved here (a Worker cannot resolve DNS itself): a public name that resolves
//! to a private address is the platform's egress to refuse; docs/security.md says what this
//! check does and does not cover.
//!
//! The edge stores and sends [`EndpointUrl::as_str`], the parser's serialization, so the text
//! that was checked is the text `fetch` receives, and it checks a stored URL again before every
//! attempt.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The longest endpoint URL accepted, in bytes (before and after normalization).
pub const MAX_URL_BYTES: usize = 2048;

/// Why an endpoint URL was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlProblem {
    /// Not an absolute `http(s)://host/...` URL, or longer than [`MAX_URL_BYTES`].
    Malformed,
    /// `http` where `https` is required.
    NotHttps,
    /// A user name or password in the URL (`fetch` refuses those, and they would be a secret
    /// stored in plain sight).
    Credentials,
    /// A loopback, private, link-local, special-purpose or metadata address or name.
    PrivateAddress,
}

impl UrlProblem {
    /// A message for the API's 422.
    pub fn message(self) -> &'static str {
        match self {
            UrlProblem::Malformed => "must be an absolute http(s) URL of at most 2048 characters",
            UrlProblem::NotHttps => "must use https",
            UrlProblem::Credentials => "must not contain a user name or password",
            UrlProblem::PrivateAddress => {
                "must not be a loopback, private, link-local, special-purpose or metadata address"
            }
        }
    }
}

impl fmt::Display for UrlProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for UrlProblem {}

/// A URL as a WHATWG URL parser hands it back: the standard's getters that the rules read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// `href`: the whole URL, normalized.
    pub href: String,
    /// `protocol` without its `:` (`https`).
    pub scheme: String,
    /// `username`; empty when there is none.
    pub username: String,
    /// `password`; empty when there is none.
    pub password: String,
    /// `hostname`: a lowercase ASCII domain, a dotted-decimal IPv4 address, or an IPv6 address
    /// in brackets; empty when there is none.
    pub hostname: String,
}

/// Parses `text` with the `url` crate, the WHATWG parser of native builds and tests.
#[cfg(feature = "url")]
pub fn parse_whatwg(text: &str) -> Option<Parsed> {
    let url = url::Url::parse(text).ok()?;
    Some(Parsed {
        href: url.as_str().to_owned(),
        scheme: url.scheme().to_owned(),
        username: url.username().to_owned(),
        password: url.password().unwrap_or_default().to_owned(),
        hostname: url.host_str().unwrap_or_default().to_owned(),
    })
}

/// `reference` (a redirect's `Location`) resolved against `base` with the `url` crate, as the
/// runtime's `new URL(reference, base)` does.
#[cfg(feature = "url")]
pub fn resolve_whatwg(base: &str, reference: &str) -> Option<String> {
    Some(url::Url::parse(base).ok()?.join(reference).ok()?.as_str().to_owned())
}

/// An endpoint URL that passed the check: only [`EndpointUrl::parse_with`] builds one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointUrl(String);

impl EndpointUrl {
    /// Parses `text` as `fetch` will, with the `url` crate, and checks it; `allow_private` is
    /// the development switch.
    #[cfg(feature = "url")]
    pub fn parse(text: &str, allow_private: bool) -> Result<Self, UrlProblem> {
        Self::parse_with(text, allow_private, parse_whatwg)
    }

    /// Parses `text` with `parse`, a WHATWG URL parser (`None` when it refuses the text), and
    /// checks it; `allow_private` is the development switch.
    pub fn parse_with(
        text: &str,
        allow_private: bool,
        parse: impl FnOnce(&str) -> Option<Parsed>,
    ) -> Result<Self, UrlProblem> {
        if text.len() > MAX_URL_BYTES {
            return Err(UrlProblem::Malformed);
        }
        let url = parse(text).ok_or(UrlProblem::Malformed)?;
        // Normalization may lengthen the text (percent-encoding a path, say).
        if url.href.len() > MAX_URL_BYTES {
            return Err(UrlProblem::Malformed);
        }
        let https = match url.scheme.as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(UrlProblem::Malformed),
        };
        let host = Host::read(&url.hostname).ok_or(UrlProblem::Malformed)?;
        if !url.username.is_empty() || !url.password.is_empty() {
            return Err(UrlProblem::Credentials);
        }
        if !allow_private {
            if !https {
                return Err(UrlProblem::NotHttps);
            }
            if host.is_private() {
                return Err(UrlProblem::PrivateAddress);
            }
        }
        Ok(Self(url.href))
    }

    /// The normalized URL: what is stored and what `fetch` is given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host of a parsed `http(s)` URL.
enum Host<'a> {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    Domain(&'a str),
}

impl<'a> Host<'a> {
    /// Reads the parser's serialization of a host. The standard parses a host that ends in a
    /// number as an IPv4 address (or refuses it), and serializes one in dotted decimal, so a
    /// domain never reads as an address here.
    fn read(hostname: &'a str) -> Option<Self> {
        if hostname.is_empty() {
            return None;
        }
        if let Some(inner) = hostname.strip_prefix('[') {
            return inner.strip_suffix(']')?.parse().ok().map(Host::Ipv6);
        }
        Some(match hostname.parse() {
            Ok(ip) => Host::Ipv4(ip),
            Err(_) => Host::Domain(hostname),
        })
    }

    fn is_private(&self) -> bool {
        match self {
            Host::Ipv4(ip) => private_v4(*ip),
            Host::Ipv6(ip) => private_v6(*ip),
            Host::Domain(name) => private_name(name),
        }
    }
}

/// Checks an endpoint URL with the `url` crate; `allow_private` is the development switch.
#[cfg(feature = "url")]
pub fn check_url(url: &str, allow_private: bool) -> Result<(), UrlProblem> {
    EndpointUrl::parse(url, allow_private).map(|_| ())
}

/// Names that are local by convention, or that cloud providers answer with instance metadata
/// (and credentials) from inside a VM. The parser has already lowercased the name and mapped
/// it to ASCII (IDNA), so `ＬＯＣＡＬＨＯＳＴ` arrives here as `localhost`.
fn private_name(name: &str) -> bool {
    const LOCAL_SUFFIXES: [&str; 4] = ["localhost", "local", "internal", "home.arpa"];
    // Google (`metadata.google.internal` is covered by `.internal`), AWS, Alibaba, Oracle.
    const METADATA_NAMES: [&str; 4] = ["metadata", "metadata.goog", "instance-data", "metadata.oraclecloud.com"];
    let name = name.trim_end_matches('.');
    if name.is_empty() || METADATA_NAMES.contains(&name) {
        return true;
    }
    LOCAL_SUFFIXES
        .iter()
        .any(|suffix| name == *suffix || name.strip_suffix(suffix).is_some_and(|rest| rest.ends_with('.')))
}

/// Every IPv4 range of the IANA special-purpose registry that is not globally reachable.
fn private_v4(ip: Ipv4Addr) -> bool {
    const RANGES: [(u32, u8); 15] = [
        (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
        (0x0a00_0000, 8),  // 10.0.0.0/8 private
        (0x6440_0000, 10), // 100.64.0.0/10 carrier-grade NAT
        (0x7f00_0000, 8),  // 127.0.0.0/8 loopback
        (0xa9fe_0000, 16), // 169.254.0.0/16 link-local, cloud metadata
        (0xac10_0000, 12), // 172.16.0.0/12 private
        (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
        (0xc000_0200, 24), // 192.0.2.0/24 TEST-NET-1
        (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay anycast (deprecated)
        (0xc0a8_0000, 16), // 192.168.0.0/16 private
        (0xc612_0000, 15), // 198.18.0.0/15 benchmarking
        (0xc633_6400, 24), // 198.51.100.0/24 TEST-NET-2
        (0xcb00_7100, 24), // 203.0.113.0/24 TEST-NET-3
        (0xe000_0000, 4),  // 224.0.0.0/4 multicast
        (0xf000_0000, 4),  // 240.0.0.0/4 reserved, and 255.255.255.255 broadcast
    ];
    let address = u32::from(ip);
    RANGES.iter().any(|&(network, bits)| address >> (32 - bits) == network >> (32 - bits))
}

/// IPv6 ranges that are not globally reachable, or that reach an IPv4 address by another way.
fn private_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let v4 = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    match s {
        // ::/96: `::`, `::1` and the deprecated IPv4-compatible `::a.b.c.d`, whatever it embeds.
        [0, 0, 0, 0, 0, 0, _, _] => true,
        // ::ffff:0:0/96 IPv4-mapped: the socket talks IPv4 to the embedded address.
        [0, 0, 0, 0, 0, 0xffff, _, _] => true,
        // 64:ff9b::/96 well-known NAT64 prefix and 64:ff9b:1::/48 local-use NAT64: a
        // translator on the path forwards to the embedded IPv4 address, possibly a private one.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] | [0x64, 0xff9b, 1, ..] => true,
        // 2002::/16 6to4: the next 32 bits are the IPv4 address of the relay-side host.
        [0x2002, high, low, ..] => private_v4(v4(high, low)),
        // 2001::/32 Teredo: the server's IPv4 address, then the client's, bits inverted.
        [0x2001, 0, server_high, server_low, _, _, client_high, client_low] => {
            private_v4(v4(server_high, server_low)) || private_v4(v4(!client_high, !client_low))
        }
        // 2001:db8::/32 documentation.
        [0x2001, 0x0db8, ..] => true,
        // 100::/64 discard-only.
        [0x0100, 0, 0, 0, ..] => true,
        [first, ..] => {
            (first & 0xfe00) == 0xfc00      // fc00::/7 unique local
                || (first & 0xffc0) == 0xfe80 // fe80::/10 link-local
                || (first & 0xffc0) == 0xfec0 // fec0::/10 site-local (deprecated)
                || (first & 0xff00) == 0xff00 // ff00::/8 multicast
        }
    }
}

#[cfg(all(test, feature = "url"))]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn refused(url: &str) -> Option<UrlProblem> {
        check_url(url, false).err()
    }

    /// The URLs of the report that started this check, each refused, each beside a public
    /// neighbour that the same parsing accepts.
    #[test]
    fn the_reported_bypasses_are_refused_and_their_neighbours_accepted() {
        for (bad, good) in [
            // The WHATWG parser reads `\` as `/` in special schemes: the host ends before it.
            ("https://169.254.169.254\\latest/meta-data", "https://hooks.example.com\\latest/meta-data"),
            // A percent-encoded host is decoded before it is read as an address.
            ("https://127.0.0.%31/", "https://h%6Foks.example.com/"),
            // IPv4-compatible IPv6.
            ("https://[::127.0.0.1]/", "https://[2606:4700:4700::1111]/"),
            // NAT64 of 10.0.0.1.
            ("https://[64:ff9b::a00:1]/", "https://[2001:4860:4860::8888]/"),
        ] {
            assert_eq!(refused(bad), Some(UrlProblem::PrivateAddress), "{bad}");
            assert_eq!(refused(good), None, "{good}");
        }
    }

    #[test]
    fn the_checked_url_is_the_one_fetch_gets() {
        let parsed = |text| EndpointUrl::parse(text, false).map(|u| u.as_str().to_owned());
        assert_eq!(parsed("https://hooks.example.com\\in\\x"), Ok("https://hooks.example.com/in/x".into()));
        assert_eq!(parsed("https://h%6Foks.example.com/"), Ok("https://hooks.example.com/".into()));
        assert_eq!(parsed("HTTPS://Hooks.EXAMPLE.com:443/a b"), Ok("https://hooks.example.com/a%20b".into()));
        assert_eq!(
            parsed("  https://hooks.example.com/\n "),
            Ok("https://hooks.example.com/".into()),
            "C0 space and newlines are stripped"
        );
        assert_eq!(
            parsed("https://[2606:4700:4700:0::1111]:8443/x"),
            Ok("https://[2606:4700:4700::1111]:8443/x".into())
        );
        assert_eq!(
            EndpointUrl::parse("http://127.0.0.1:9000/hook", true).map(|u| u.to_string()),
            Ok("http://127.0.0.1:9000/hook".into())
        );
    }

    /// Each IANA special-purpose IPv4 range: its first and last address refused, the addresses
    /// just outside it accepted.
    #[test]
    fn every_special_purpose_ipv4_range_and_its_edges() {
        for (first, last, before, after) in [
            ("0.0.0.0", "0.255.255.255", None, Some("1.0.0.0")),
            ("10.0.0.0", "10.255.255.255", Some("9.255.255.255"), Some("11.0.0.0")),
            ("100.64.0.0", "100.127.255.255", Some("100.63.255.255"), Some("100.128.0.0")),
            ("127.0.0.0", "127.255.255.255", Some("126.255.255.255"), Some("128.0.0.0")),
            ("169.254.0.0", "169.254.255.255", Some("169.253.255.255"), Some("169.255.0.0")),
            ("172.16.0.0", "172.31.255.255", Some("172.15.255.255"), Some("172.32.0.0")),
            ("192.0.0.0", "192.0.0.255", Some("191.255.255.255"), Some("192.0.1.0")),
            ("192.0.2.0", "192.0.2.255", Some("192.0.1.255"), Some("192.0.3.0")),
            ("192.88.99.0", "192.88.99.255", Some("192.88.98.255"), Some("192.88.100.0")),
            ("192.168.0.0", "192.168.255.255", Some("192.167.255.255"), Some("192.169.0.0")),
            ("198.18.0.0", "198.19.255.255", Some("198.17.255.255"), Some("198.20.0.0")),
            ("198.51.100.0", "198.51.100.255", Some("198.51.99.255"), Some("198.51.101.0")),
            ("203.0.113.0", "203.0.113.255", Some("203.0.112.255"), Some("203.0.114.0")),
            ("224.0.0.0", "239.255.255.255", Some("223.255.255.255"), None),
            ("240.0.0.0", "255.255.255.255", None, None),
        ] {
            for ip in [first, last] {
                assert_eq!(refused(&format!("https://{ip}/x")), Some(UrlProblem::PrivateAddress), "{ip}");
            }
            for ip in [before, after].into_iter().flatten() {
                assert_eq!(refused(&format!("https://{ip}/x")), None, "{ip} is public");
            }
        }
    }

    #[test]
    fn ipv4_in_any_notation_the_parser_reads() {
        for url in [
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0x7f.1/",
            "https://0177.0.0.1/",
            "https://127.1/",
            "https://127.0.0.1./",
            "https://12\n7.0.0.1/",
            "https://１２７.０.０.１/",
            "https://%31%32%37.0.0.1/",
            "https://169.254.169.254:443/",
            "https://0/",
            "https://10.0.0.1:8443/",
        ] {
            assert_eq!(refused(url), Some(UrlProblem::PrivateAddress), "{url:?}");
        }
        for url in ["https://134744072/", "https://0x8.0x8.0x8.0x8/", "https://8.8.8.8:8443/x", "https://8.8.8.8./"] {
            assert_eq!(refused(url), None, "{url} is 8.8.8.8");
        }
        // Not an address and not a name either: the parser refuses it, and so does the check.
        assert_eq!(refused("https://1.2.3.4.5/"), Some(UrlProblem::Malformed));
        assert_eq!(refused("https://256.0.0.1/"), Some(UrlProblem::Malformed));
    }

    #[test]
    fn ipv6_ranges_that_are_local_or_lead_to_ipv4() {
        for ip in [
            "::",
            "::1",
            "::7f00:1",
            "::8.8.8.8",
            "::ffff:127.0.0.1",
            "::ffff:7f00:1",
            "0:0:0:0:0:ffff:8.8.8.8",
            "64:ff9b::a00:1",
            "64:ff9b::8.8.8.8",
            "64:ff9b:1::1",
            "64:ff9b:1:ffff::1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            // Teredo: client 10.0.0.1 (inverted f5ff:fffe), then a private server.
            "2001:0:4136:e378:8000:63bf:f5ff:fffe",
            "2001:0:a00:1:8000:63bf:f7f7:f7f7",
            // The RFC 4380 example's client is in TEST-NET-1.
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
            "100::1",
            "fc00::1",
            "fdff:ffff::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "ffff::1",
        ] {
            assert_eq!(refused(&format!("https://[{ip}]/x")), Some(UrlProblem::PrivateAddress), "{ip}");
        }
        for ip in [
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2002:808:808::1",
            "2003::1",
            // Teredo with a public server and client 8.8.8.8 (inverted f7f7:f7f7).
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
            "64:ff9a::a00:1",
            "64:ff9b:2::a00:1",
            "::1:0:0:1",
            "fbff::1",
            "fe7f::1",
        ] {
            assert_eq!(refused(&format!("https://[{ip}]/x")), None, "{ip} is public");
        }
    }

    #[test]
    fn local_and_metadata_names() {
        for host in [
            "localhost",
            "LOCALHOST",
            "localhost.",
            "api.localhost",
            "ＬＯＣＡＬＨＯＳＴ",
            "printer.local",
            "db.internal",
            "internal",
            "metadata.google.internal",
            "metadata",
            "metadata.goog",
            "instance-data",
            "instance-data.ec2.internal",
            "nas.home.arpa",
            "home.arpa",
            "metadata.oraclecloud.com",
        ] {
            assert_eq!(refused(&format!("https://{host}/x")), Some(UrlProblem::PrivateAddress), "{host}");
        }
        for host in [
            "localhost.example.com",
            "notlocalhost",
            "local.example.com",
            "internal.example.com",
            "example.local.com",
            "home.arpa.example.com",
            "metadata.example.com",
        ] {
            assert_eq!(refused(&format!("https://{host}/x")), None, "{host} is public");
        }
    }

    #[test]
    fn scheme_credentials_and_shape() {
        assert_eq!(refused("http://example.com/x"), Some(UrlProblem::NotHttps));
        assert_eq!(refused("http://127.0.0.1/x"), Some(UrlProblem::NotHttps), "the scheme is reported first");
        for url in [
            "ftp://example.com/x",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/plain,x",
            "example.com/x",
            "https://",
            "https://exa mple.com/",
            "https://[::1/",
            "wss://example.com/",
        ] {
            assert_eq!(refused(url), Some(UrlProblem::Malformed), "{url}");
        }
        assert_eq!(refused(&format!("https://example.com/{}", "a".repeat(2100))), Some(UrlProblem::Malformed));
        // 700 inner spaces become 2100 bytes of `%20`: too long once normalized.
        assert_eq!(refused(&format!("https://example.com/{}x", " ".repeat(700))), Some(UrlProblem::Malformed));
        for url in [
            "https://user:pass@example.com/",
            "https://user@example.com/",
            "https://:pass@example.com/",
            "https://example.com@127.0.0.1/",
        ] {
            assert_eq!(refused(url), Some(UrlProblem::Credentials), "{url}");
        }
        assert_eq!(
            check_url("https://user@localhost/", true),
            Err(UrlProblem::Credentials),
            "credentials even in development"
        );
    }

    #[test]
    fn development_allows_loopback_and_http() {
        assert_eq!(check_url("http://127.0.0.1:9000/hook", true), Ok(()));
        assert_eq!(check_url("http://localhost/hook", true), Ok(()));
        assert_eq!(check_url("https://[::1]:8443/hook", true), Ok(()));
        assert_eq!(check_url("ftp://localhost/hook", true), Err(UrlProblem::Malformed));
    }

    /// The getters as the runtime's `URL` returns them (the Worker's parser) read like the `url`
    /// crate's: brackets around an IPv6 host, dotted decimal for IPv4, nothing for a refusal.
    #[test]
    fn another_parsers_getters_are_read_the_same() {
        let getters = |href: &str, hostname: &str| Parsed {
            href: href.into(),
            scheme: href.split(':').next().unwrap_or_default().into(),
            hostname: hostname.into(),
            ..Parsed::default()
        };
        let check = |parsed: Parsed| EndpointUrl::parse_with("text", false, |_| Some(parsed)).map(|u| u.to_string());
        assert_eq!(check(getters("https://[::1]/x", "[::1]")), Err(UrlProblem::PrivateAddress));
        assert_eq!(check(getters("https://10.0.0.1/x", "10.0.0.1")), Err(UrlProblem::PrivateAddress));
        assert_eq!(check(getters("https://localhost/x", "localhost")), Err(UrlProblem::PrivateAddress));
        assert_eq!(check(getters("https://8.8.8.8/x", "8.8.8.8")), Ok("https://8.8.8.8/x".into()));
        assert!(check(getters("https://[2001:4860:4860::8888]/", "[2001:4860:4860::8888]")).is_ok());
        for hostname in ["", "[::1", "[not-an-address]"] {
            assert_eq!(check(getters("https://x/", hostname)), Err(UrlProblem::Malformed), "{hostname:?}");
        }
        assert_eq!(EndpointUrl::parse_with("https://example.com/", false, |_| None), Err(UrlProblem::Malformed));
        let credentials = Parsed { password: "p".into(), ..getters("https://:p@example.com/", "example.com") };
        assert_eq!(check(credentials), Err(UrlProblem::Credentials));
        // Every URL of these tests reads the same through the getters as through the crate.
        for text in
            ["https://hooks.example.com\\in\\x", "https://１２７.０.０.１/", "https://[::ffff:7f00:1]/", "http://a/"]
        {
            let parsed = parse_whatwg(text).expect("parses");
            assert_eq!(
                EndpointUrl::parse_with(text, false, |_| Some(parsed)),
                EndpointUrl::parse(text, false),
                "{text}"
            );
        }
    }

    #[test]
    fn problems_read_as_messages() {
        assert_eq!(UrlProblem::Credentials.to_string(), "must not contain a user name or password");
        assert!(UrlProblem::PrivateAddress.message().contains("private"));
    }
}
