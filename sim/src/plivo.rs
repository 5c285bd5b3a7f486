//! Signs form posts exactly as Plivo does with its V3 signature: HMAC-SHA256 over the URL, the
//! sorted body parameters and the nonce.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A form body and its `X-Plivo-Signature-V3` for a POST to `url` (without a query) with
/// `nonce`.
pub fn sign_v3(auth_token: &str, url: &str, nonce: &str, params: &[(&str, &str)]) -> (String, String) {
    let mut sorted: Vec<(&str, &str)> = params.to_vec();
    sorted.sort_unstable();
    let mut data = url.to_owned();
    if !params.is_empty() {
        data.push('?');
    }
    for (k, v) in &sorted {
        data.push_str(k);
        data.push_str(v);
    }
    data.push('.');
    data.push_str(nonce);
    let mut mac = Hmac::<Sha256>::new_from_slice(auth_token.as_bytes()).expect("HMAC takes any key length");
    mac.update(data.as_bytes());
    let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
    (body, STANDARD.encode(mac.finalize().into_bytes()))
}
