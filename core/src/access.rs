//! Who may do what under `/v1` (docs/contract.md §5, "Keys, scopes and portal sessions"): an API
//! key's scope, or a portal session's limits, against the area a route belongs to.
//!
//! Sans-IO: the edge maps each route to a [`Route`] and asks [`Access::permits`] before the
//! handler runs, so a refusal never depends on what a page chose to show.

use std::fmt;

crate::text_enum! {
    /// What an API key may do.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Scope {
        /// Everything under `/v1`, keys and portal sessions included.
        Full = "full",
        /// Every read (`GET`) of messages, calls, usage, endpoints and events; no writes, no keys.
        Read = "read",
        /// Webhook endpoints, their deliveries and the events they carry, read and written; nothing
        /// of messages, calls, usage or keys.
        Endpoints = "endpoints",
    }
}

/// The part of the API a route belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    /// Messages, calls, media and usage.
    Messaging,
    /// Webhook endpoints, their attempts and retries, events and the event catalog.
    Webhooks,
    /// API keys, portal sessions and the account's own settings.
    Keys,
}

/// A `/v1` route as access control sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route<'a> {
    pub area: Area,
    /// The route changes something (every method but `GET`).
    pub write: bool,
    /// The webhook endpoint the route acts on (its `{id}`), for routes under one endpoint.
    pub endpoint: Option<&'a str>,
    /// The route reaches past single endpoints into the account's events (the event list, one
    /// event, a replay to every subscribed endpoint) or creates an endpoint.
    pub account_wide: bool,
}

/// What a request's credential allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// An API key of this scope.
    Key(Scope),
    /// A portal session: the webhook area only; no writes when `read_only`; only these
    /// endpoints when `endpoints` names some.
    Portal { read_only: bool, endpoints: Option<Vec<String>> },
}

/// Why [`Access::permits`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key's scope does not reach the route.
    Scope,
    /// The portal session is read-only.
    ReadOnly,
    /// The portal session does not reach this endpoint, or reaches only some endpoints.
    Endpoint,
    /// A portal session limited to some endpoints changes what they receive or where it goes.
    Reshape,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Scope => "the credential's scope does not allow this request",
            Refusal::ReadOnly => "the portal session is read-only",
            Refusal::Endpoint => "the portal session does not reach this endpoint",
            Refusal::Reshape => {
                "a portal session limited to some endpoints may pause, resume, enable and pace them, \
                 not change their URL, event types, filter, headers, ordering or on_exhausted"
            }
        })
    }
}

impl Access {
    /// Whether this credential may run `route`.
    pub fn permits(&self, route: &Route<'_>) -> Result<(), Refusal> {
        match self {
            Access::Key(Scope::Full) => Ok(()),
            Access::Key(Scope::Read) if !route.write && route.area != Area::Keys => Ok(()),
            Access::Key(Scope::Endpoints) if route.area == Area::Webhooks => Ok(()),
            Access::Key(_) => Err(Refusal::Scope),
            Access::Portal { read_only, endpoints } => {
                if route.area != Area::Webhooks {
                    return Err(Refusal::Scope);
                }
                if *read_only && route.write {
                    return Err(Refusal::ReadOnly);
                }
                match (endpoints, route.endpoint) {
                    (None, _) => Ok(()),
                    (Some(_), _) if route.account_wide => Err(Refusal::Endpoint),
                    (Some(allowed), Some(id)) if !allowed.iter().any(|a| a == id) => Err(Refusal::Endpoint),
                    (Some(_), _) => Ok(()),
                }
            }
        }
    }

    /// The endpoints a listing of endpoints may show: `None` for all of the account's.
    pub fn endpoints(&self) -> Option<&[String]> {
        match self {
            Access::Portal { endpoints: Some(e), .. } => Some(e),
            _ => None,
        }
    }
}

/// The SHA-256 (hex) under which an API key or a portal session's secret is stored, and which
/// names a token's rate limit counter: never the secret itself.
pub fn secret_hash(secret: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a bearer token has the shape of an API key (`sk_` and up to 128 letters and digits;
/// new keys have 64 hex): anything else is refused without a lookup.
pub fn key_shaped(token: &str) -> bool {
    token
        .strip_prefix("sk_")
        .is_some_and(|rest| (1..=128).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// A portal session's bearer token, `<session id>.<secret>`, split; `None` when it is not one.
pub fn portal_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let well_formed = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (id.starts_with("ps_") && well_formed(id) && well_formed(secret)).then_some((id, secret))
}

/// How an origin that may embed the portal is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginScheme {
    /// `https://`.
    Https,
    /// `http://` on `localhost` or `127.0.0.1`: local development only.
    LocalHttp,
}

/// Checks an origin that may embed the portal: `https://host[:port]` (or `http://` for
/// `localhost` and `127.0.0.1`), lowercase, nothing after the host; the form a browser compares
/// against `frame-ancestors`. Its scheme, when it is one.
pub fn frame_origin(origin: &str) -> Result<OriginScheme, &'static str> {
    let (rest, scheme) = if let Some(rest) = origin.strip_prefix("https://") {
        (rest, OriginScheme::Https)
    } else if let Some(rest) = origin.strip_prefix("http://") {
        let host = rest.split(':').next().unwrap_or_default();
        if host != "localhost" && host != "127.0.0.1" {
            return Err("must be https:// (http:// only for localhost)");
        }
        (rest, OriginScheme::LocalHttp)
    } else {
        return Err("must start with https://");
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err("must name a lowercase host and nothing after it (no path, query or wildcard)");
    }
    if let Some(port) = port {
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err("has a port that is not a number");
        }
    }
    Ok(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(area: Area, write: bool, endpoint: Option<&str>, account_wide: bool) -> Route<'_> {
        Route { area, write, endpoint, account_wide }
    }

    #[test]
    fn scopes_reach_their_areas() {
        let areas = [Area::Messaging, Area::Webhooks, Area::Keys];
        for area in areas {
            for write in [false, true] {
                let r = route(area, write, None, false);
                assert_eq!(Access::Key(Scope::Full).permits(&r), Ok(()));
                let read = Access::Key(Scope::Read).permits(&r).is_ok();
                assert_eq!(read, !write && area != Area::Keys, "{area:?} write={write}");
                let endpoints = Access::Key(Scope::Endpoints).permits(&r).is_ok();
                assert_eq!(endpoints, area == Area::Webhooks, "{area:?} write={write}");
            }
        }
    }

    #[test]
    fn portal_sessions_are_limited_to_their_endpoints_and_to_reads() {
        let limited = Access::Portal { read_only: true, endpoints: Some(vec!["ep_a".into()]) };
        assert_eq!(limited.permits(&route(Area::Webhooks, false, Some("ep_a"), false)), Ok(()));
        assert_eq!(limited.permits(&route(Area::Webhooks, false, Some("ep_b"), false)), Err(Refusal::Endpoint));
        assert_eq!(limited.permits(&route(Area::Webhooks, true, Some("ep_a"), false)), Err(Refusal::ReadOnly));
        assert_eq!(limited.permits(&route(Area::Webhooks, false, None, true)), Err(Refusal::Endpoint));
        assert_eq!(limited.permits(&route(Area::Webhooks, false, None, false)), Ok(()), "the filtered list");
        assert_eq!(limited.permits(&route(Area::Messaging, false, None, false)), Err(Refusal::Scope));
        assert_eq!(limited.permits(&route(Area::Keys, false, None, false)), Err(Refusal::Scope));
        let open = Access::Portal { read_only: false, endpoints: None };
        assert_eq!(open.permits(&route(Area::Webhooks, true, Some("ep_b"), true)), Ok(()));
        assert_eq!(open.permits(&route(Area::Keys, true, None, false)), Err(Refusal::Scope));
        assert_eq!(open.endpoints(), None);
        assert_eq!(limited.endpoints(), Some(&["ep_a".to_owned()][..]));
    }

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(Scope::from_name(scope.as_str()), Some(scope));
        }
        assert_eq!(Scope::from_name("admin"), None);
        assert_eq!(Scope::from_name("Full"), None);
    }

    #[test]
    fn portal_tokens_split_only_when_well_formed() {
        assert_eq!(portal_token("ps_abc.s3cr-et_"), Some(("ps_abc", "s3cr-et_")));
        for bad in ["sk_abc", "ps_abc", "ps_abc.", ".x", "ps_a b.x", "ps_a.x.y", "ps_a.x=", "xps_a.x"] {
            assert_eq!(portal_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_key_shaped_tokens_are_looked_up() {
        let minted = format!("sk_{}", "0a".repeat(32));
        assert!(key_shaped(&minted));
        let too_long = format!("sk_{}", "a".repeat(129));
        for bad in ["sk_", "sk_a b", "sk_ab.c", "sk_abc\u{e9}", "SK_abc", "ps_abc.def", "abc", &too_long] {
            assert!(!key_shaped(bad), "{bad}");
        }
    }

    #[test]
    fn frame_origins_are_bare_origins() {
        for good in ["https://app.example.com", "https://example.com:8443", "http://localhost:3000", "http://127.0.0.1"]
        {
            assert!(frame_origin(good).is_ok(), "{good}");
        }
        assert_eq!(frame_origin("https://example.com:8443"), Ok(OriginScheme::Https));
        for local in ["http://localhost:3000", "http://127.0.0.1"] {
            assert_eq!(frame_origin(local), Ok(OriginScheme::LocalHttp), "{local}");
        }
        for bad in [
            "https://app.example.com/",
            "https://*.example.com",
            "http://example.com",
            "https://Example.com",
            "https://example.com:x",
            "javascript:alert(1)",
            "https://exa mple.com",
            "https://a.com; script-src *",
            "'self'",
            "",
        ] {
            assert!(frame_origin(bad).is_err(), "{bad}");
        }
    }
}
