//! MMS media: the items a message carries, where the copy of each is kept, and the signed,
//! expiring links through which the API serves the copies (docs/contract.md §5).
//!
//! A carrier's media link expires, so the edge copies every inbound item once into object
//! storage under [`object_key`], a key derived from the message and the item's position: a
//! repeated delivery or a second copier can only write the same object again, never a second
//! one. The API hands the copy out through a [`LinkSigner`] link that names the message, the
//! position and an expiry, signed with HMAC-SHA256; the check is constant-time.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::Timestamp;

/// One media item of a message: a carrier's link (inbound) or a URL given to the API (outbound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaItem {
    /// Where the media is: the carrier's link (it expires) or the sender's URL.
    pub url: String,
    /// Its MIME type, when the carrier says (Telnyx and Twilio do, Plivo does not).
    pub content_type: Option<String>,
    /// Its size in bytes, when the carrier says (Telnyx does).
    pub size: Option<u64>,
}

/// The most media URLs one outbound message may carry (the carriers' MMS limit).
pub const MAX_OUTBOUND_ITEMS: usize = 10;

/// The longest media URL accepted from the API.
pub const MAX_URL_CHARS: usize = 2048;

/// How long a link minted by the API stays valid.
pub const LINK_LIFETIME_SECS: i64 = 3600;

/// The object-storage key of the copy of item `position` of message `message_id`. Derived from
/// nothing else, so every copier of one item writes the one object.
pub fn object_key(message_id: &str, position: u32) -> String {
    format!("media/{message_id}/{position}")
}

/// What a copier does with the answer to its fetch of a carrier's media link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchVerdict {
    /// 2xx: store the body.
    Store,
    /// The link is gone or refused (404, 410, 403, ...): asking again cannot help, the copy is
    /// given up visibly.
    GiveUp,
    /// 408, 425, 429 or 5xx: the carrier may answer later.
    TryAgain,
}

/// The verdict on the HTTP status of a media fetch (redirects already followed).
pub fn fetch_verdict(status: u16) -> FetchVerdict {
    match status {
        200..=299 => FetchVerdict::Store,
        408 | 425 | 429 | 500..=599 => FetchVerdict::TryAgain,
        _ => FetchVerdict::GiveUp,
    }
}

/// The largest media item copied, in bytes (carriers cap an MMS well below it).
pub const MAX_ITEM_BYTES: u64 = 20 * 1024 * 1024;

/// Why an outbound media URL was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MediaUrlError {
    /// Longer than [`MAX_URL_CHARS`].
    TooLong,
    /// Not an absolute URL.
    NotAUrl,
    /// Not `https`: the carrier fetches it from the public internet.
    NotHttps,
    /// It carries a user name or password, which would travel to the carrier in the clear.
    Credentials,
}

impl fmt::Display for MediaUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MediaUrlError::TooLong => "must be at most 2048 characters",
            MediaUrlError::NotAUrl => "must be an absolute URL",
            MediaUrlError::NotHttps => "must be an https URL",
            MediaUrlError::Credentials => "must not carry a user name or password",
        })
    }
}

impl std::error::Error for MediaUrlError {}

/// Checks one outbound media URL the way `fetch` (and the carrier) will read it, with the `url`
/// crate's WHATWG parser; see [`parse_outbound_url_with`].
#[cfg(feature = "url")]
pub fn parse_outbound_url(text: &str) -> Result<String, MediaUrlError> {
    parse_outbound_url_with(text, crate::endpoint::parse_whatwg)
}

/// Checks one outbound media URL with `parse`, a WHATWG URL parser (`None` when it refuses the
/// text): an absolute `https` URL with a host and no credentials. Returns it as that parser
/// writes it.
pub fn parse_outbound_url_with(
    text: &str,
    parse: impl FnOnce(&str) -> Option<crate::endpoint::Parsed>,
) -> Result<String, MediaUrlError> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(MediaUrlError::TooLong);
    }
    let url = parse(text.trim()).ok_or(MediaUrlError::NotAUrl)?;
    if url.scheme != "https" {
        return Err(MediaUrlError::NotHttps);
    }
    if url.hostname.is_empty() {
        return Err(MediaUrlError::NotAUrl);
    }
    if !url.username.is_empty() || !url.password.is_empty() {
        return Err(MediaUrlError::Credentials);
    }
    Ok(url.href)
}

/// Why a media link was refused (403 either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The signature is missing, malformed, or not this key's for this message, position and
    /// expiry.
    BadSignature,
    /// The link was genuine but its time is up.
    Expired,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkError::BadSignature => "the media link's signature is not valid",
            LinkError::Expired => "the media link has expired",
        })
    }
}

impl std::error::Error for LinkError {}

/// Why a link signing key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkKeyError {
    /// Shorter than [`LinkSigner::MIN_SECRET_CHARS`].
    TooShort,
}

impl fmt::Display for LinkKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkKeyError::TooShort => write!(f, "must be at least {} characters", LinkSigner::MIN_SECRET_CHARS),
        }
    }
}

impl std::error::Error for LinkKeyError {}

/// The query of a signed link: `?expires=<unix seconds>&signature=<base64url>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedLink {
    /// When it stops working.
    pub expires: Timestamp,
    /// HMAC-SHA256 of the message id, position and expiry, base64url without padding.
    pub signature: String,
}

impl SignedLink {
    /// The link's query string, without `?`.
    pub fn query(&self) -> String {
        format!("expires={}&signature={}", self.expires.unix_seconds(), self.signature)
    }
}

/// Signs and checks media links. Its key never appears in `Debug`.
#[derive(Clone)]
pub struct LinkSigner {
    key: Vec<u8>,
}

impl fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LinkSigner(redacted)")
    }
}

/// What a key derived from another secret is bound to, so it signs nothing else.
const DERIVATION_LABEL: &[u8] = b"exactly media links v1";

impl LinkSigner {
    /// The shortest secret accepted (`MEDIA_SIGNING_SECRET`).
    pub const MIN_SECRET_CHARS: usize = 32;

    /// A signer keyed with a dedicated secret.
    pub fn new(secret: &str) -> Result<Self, LinkKeyError> {
        let secret = secret.trim();
        if secret.chars().count() < Self::MIN_SECRET_CHARS {
            return Err(LinkKeyError::TooShort);
        }
        Ok(Self { key: secret.as_bytes().to_vec() })
    }

    /// A signer whose key is derived from another secret (HMAC-SHA256 of a fixed label under
    /// it), for a deployment that sets no dedicated one: the derived key reveals nothing of
    /// the secret and signs nothing but media links.
    pub fn derived_from(secret: &str) -> Self {
        Self { key: mac(secret.as_bytes(), &[DERIVATION_LABEL]) }
    }

    /// A link to item `position` of `message_id` valid until `now` plus [`LINK_LIFETIME_SECS`]
    /// (whole seconds).
    pub fn sign(&self, message_id: &str, position: u32, now: Timestamp) -> SignedLink {
        let expires = Timestamp::from_unix_seconds(now.unix_seconds() + LINK_LIFETIME_SECS);
        let tag = self.tag(message_id, position, expires.unix_seconds());
        SignedLink { expires, signature: URL_SAFE_NO_PAD.encode(tag) }
    }

    /// Checks a link's `expires` (Unix seconds, as the query carried it) and `signature`
    /// against `now`, the signature first and in constant time.
    pub fn verify(
        &self,
        message_id: &str,
        position: u32,
        expires: &str,
        signature: &str,
        now: Timestamp,
    ) -> Result<(), LinkError> {
        let expires: i64 = match expires.parse() {
            Ok(seconds) if expires.bytes().all(|b| b.is_ascii_digit()) => seconds,
            _ => return Err(LinkError::BadSignature),
        };
        let given = URL_SAFE_NO_PAD.decode(signature.trim_end_matches('=')).map_err(|_| LinkError::BadSignature)?;
        let expected = self.tag(message_id, position, expires);
        if !bool::from(given.as_slice().ct_eq(expected.as_slice())) {
            return Err(LinkError::BadSignature);
        }
        if now.unix_seconds() >= expires {
            return Err(LinkError::Expired);
        }
        Ok(())
    }

    /// The MAC of `message_id`, `position` and `expires`. The two numbers are digits only, so
    /// reading the fields from the right is unambiguous whatever the id holds.
    fn tag(&self, message_id: &str, position: u32, expires: i64) -> Vec<u8> {
        let tail = format!("\n{position}\n{expires}");
        mac(&self.key, &[message_id.as_bytes(), tail.as_bytes()])
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { return Vec::new() };
    parts.iter().for_each(|p| mac.update(p));
    mac.finalize().into_bytes().to_vec()
}

/// Reads items `Prefix<n>` of a carrier's form (Twilio `MediaUrl0`, Plivo `Media1`) in the order
/// of their numbers, each with the value of `type_prefix<n>` when given. Keys whose suffix is
/// not a number (`MediaCount`) and blank values are not items.
pub(crate) fn numbered(pairs: &[(String, String)], prefix: &str, type_prefix: Option<&str>) -> Vec<MediaItem> {
    let mut found: Vec<(u32, &str)> = pairs
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix(prefix)?;
            let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
            let n: u32 = if digits { n.parse().ok()? } else { return None };
            (!v.trim().is_empty()).then_some((n, v.as_str()))
        })
        .collect();
    found.sort_by_key(|(n, _)| *n);
    found.dedup_by_key(|(n, _)| *n);
    found
        .into_iter()
        .map(|(n, url)| MediaItem {
            url: url.to_owned(),
            content_type: type_prefix.and_then(|p| crate::form::get(pairs, &format!("{p}{n}"))).map(str::to_owned),
            size: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    const NOW: Timestamp = Timestamp::from_unix_seconds(1_800_000_000);
    const SECRET: &str = "media-signing-secret-0123456789abcdef";

    fn signer() -> LinkSigner {
        LinkSigner::new(SECRET).unwrap()
    }

    #[test]
    fn keys_name_the_message_and_the_position() {
        assert_eq!(object_key("msg_0a1b", 0), "media/msg_0a1b/0");
        assert_eq!(object_key("msg_0a1b", 9), "media/msg_0a1b/9");
        assert_ne!(object_key("msg_0a1b", 1), object_key("msg_0a1c", 1));
    }

    /// A golden vector: HMAC-SHA256 over "msg_1\n0\n1800003600" under SECRET, computed
    /// outside this crate with Python's `hmac` module:
    /// `urlsafe_b64encode(hmac.new(SECRET, b"msg_1\n0\n1800003600", sha256).digest())`.
    #[test]
    fn signs_the_documented_string() {
        let link = signer().sign("msg_1", 0, NOW);
        assert_eq!(link.expires, Timestamp::from_unix_seconds(1_800_003_600));
        assert_eq!(link.signature, "u0qvL1ezmvfqDwf4JRCH27PSexxe7qSDcEHZsMsrNgI");
        assert_eq!(link.query(), format!("expires=1800003600&signature={}", link.signature));
        assert_eq!(link.signature.len(), 43, "32 bytes, base64url without padding");
    }

    #[test]
    fn a_fresh_link_verifies_until_it_expires() {
        let s = signer();
        let link = s.sign("msg_1", 2, NOW);
        let expires = link.expires.unix_seconds().to_string();
        assert_eq!(s.verify("msg_1", 2, &expires, &link.signature, NOW), Ok(()));
        let last_second = Timestamp::from_unix_seconds(link.expires.unix_seconds() - 1);
        assert_eq!(s.verify("msg_1", 2, &expires, &link.signature, last_second), Ok(()));
        assert_eq!(s.verify("msg_1", 2, &expires, &link.signature, link.expires), Err(LinkError::Expired));
    }

    #[test]
    fn every_way_to_be_wrong() {
        let s = signer();
        let link = s.sign("msg_1", 2, NOW);
        let expires = link.expires.unix_seconds().to_string();
        let sig = link.signature.as_str();
        let bad = |id: &str, position: u32, expires: &str, sig: &str| s.verify(id, position, expires, sig, NOW);
        assert_eq!(bad("msg_2", 2, &expires, sig), Err(LinkError::BadSignature), "another message");
        assert_eq!(bad("msg_1", 3, &expires, sig), Err(LinkError::BadSignature), "another position");
        let later = (link.expires.unix_seconds() + 3600).to_string();
        assert_eq!(bad("msg_1", 2, &later, sig), Err(LinkError::BadSignature), "an extended expiry");
        assert_eq!(bad("msg_1", 2, &format!("+{expires}"), sig), Err(LinkError::BadSignature), "a sign");
        assert_eq!(bad("msg_1", 2, "", sig), Err(LinkError::BadSignature), "no expiry");
        assert_eq!(bad("msg_1", 2, &expires, ""), Err(LinkError::BadSignature), "no signature");
        assert_eq!(bad("msg_1", 2, &expires, &sig[..sig.len() - 1]), Err(LinkError::BadSignature), "truncated");
        assert_eq!(bad("msg_1", 2, &expires, "!!!!"), Err(LinkError::BadSignature), "not base64url");
        let mut flipped = sig.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert_eq!(bad("msg_1", 2, &expires, &flipped), Err(LinkError::BadSignature), "one character changed");
        let other = LinkSigner::new("another-secret-0123456789abcdef0123").unwrap();
        let foreign = other.sign("msg_1", 2, NOW);
        assert_eq!(bad("msg_1", 2, &expires, &foreign.signature), Err(LinkError::BadSignature), "another key");
        // An expired link is refused even with its genuine signature.
        let old = s.sign("msg_1", 2, Timestamp::from_unix_seconds(NOW.unix_seconds() - LINK_LIFETIME_SECS));
        let old_expires = old.expires.unix_seconds().to_string();
        assert_eq!(s.verify("msg_1", 2, &old_expires, &old.signature, NOW), Err(LinkError::Expired));
    }

    #[test]
    fn keys_and_redaction() {
        assert_eq!(LinkSigner::new("short").unwrap_err(), LinkKeyError::TooShort);
        assert_eq!(LinkSigner::new(&" ".repeat(40)).unwrap_err(), LinkKeyError::TooShort);
        assert_eq!(format!("{:?}", signer()), "LinkSigner(redacted)");
        let derived = LinkSigner::derived_from("an-admin-token-0123456789");
        assert_ne!(derived.key, b"an-admin-token-0123456789".to_vec(), "the derived key is not the secret");
        assert_eq!(derived.key.len(), 32);
        let link = derived.sign("msg_1", 0, NOW);
        let expires = link.expires.unix_seconds().to_string();
        assert_eq!(derived.verify("msg_1", 0, &expires, &link.signature, NOW), Ok(()));
        let other = LinkSigner::derived_from("another-admin-token-012345");
        assert_eq!(other.verify("msg_1", 0, &expires, &link.signature, NOW), Err(LinkError::BadSignature));
    }

    #[test]
    fn outbound_urls() {
        assert_eq!(parse_outbound_url("https://cdn.example.com/a.jpg"), Ok("https://cdn.example.com/a.jpg".into()));
        assert_eq!(
            parse_outbound_url("  https://CDN.example.com/a b.png "),
            Ok("https://cdn.example.com/a%20b.png".into())
        );
        assert_eq!(parse_outbound_url("http://cdn.example.com/a.jpg"), Err(MediaUrlError::NotHttps));
        assert_eq!(parse_outbound_url("ftp://cdn.example.com/a.jpg"), Err(MediaUrlError::NotHttps));
        assert_eq!(parse_outbound_url("/a.jpg"), Err(MediaUrlError::NotAUrl));
        assert_eq!(parse_outbound_url(""), Err(MediaUrlError::NotAUrl));
        assert_eq!(parse_outbound_url("https://"), Err(MediaUrlError::NotAUrl));
        assert_eq!(parse_outbound_url("https://user:pw@cdn.example.com/a.jpg"), Err(MediaUrlError::Credentials));
        let long = format!("https://cdn.example.com/{}", "a".repeat(MAX_URL_CHARS));
        assert_eq!(parse_outbound_url(&long), Err(MediaUrlError::TooLong));
    }

    #[test]
    fn fetch_verdicts() {
        for status in [200, 203, 206] {
            assert_eq!(fetch_verdict(status), FetchVerdict::Store, "{status}");
        }
        for status in [400, 401, 403, 404, 410, 451, 302] {
            assert_eq!(fetch_verdict(status), FetchVerdict::GiveUp, "{status}");
        }
        for status in [408, 425, 429, 500, 502, 503, 504] {
            assert_eq!(fetch_verdict(status), FetchVerdict::TryAgain, "{status}");
        }
    }

    #[test]
    fn numbered_form_items() {
        let pairs: Vec<(String, String)> = [
            ("MediaUrl1", "https://m/1"),
            ("MediaContentType1", "image/png"),
            ("MediaUrl0", "https://m/0"),
            ("MediaContentType0", "image/jpeg"),
            ("MediaUrl10", "https://m/10"),
            ("MediaUrl", "not numbered"),
            ("MediaUrlX", "not numbered"),
            ("MediaUrl2", " "),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let items = numbered(&pairs, "MediaUrl", Some("MediaContentType"));
        let urls: Vec<&str> = items.iter().map(|m| m.url.as_str()).collect();
        assert_eq!(urls, ["https://m/0", "https://m/1", "https://m/10"]);
        assert_eq!(items[0].content_type.as_deref(), Some("image/jpeg"));
        assert_eq!(items[1].content_type.as_deref(), Some("image/png"));
        assert_eq!(items[2].content_type, None);
    }
}
