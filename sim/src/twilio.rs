//! Signs form posts exactly as Twilio does: HMAC-SHA1 of the URL followed by the sorted
//! parameters, base64 in `X-Twilio-Signature`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha1::Sha1;

/// A form body and its `X-Twilio-Signature` for `url`.
pub fn sign(auth_token: &str, url: &str, params: &[(&str, &str)]) -> (String, String) {
    let mut sorted: Vec<(&str, &str)> = params.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut data = url.to_owned();
    for (k, v) in &sorted {
        data.push_str(k);
        data.push_str(v);
    }
    let mut mac = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()).expect("HMAC takes any key length");
    mac.update(data.as_bytes());
    let body = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
    (body, STANDARD.encode(mac.finalize().into_bytes()))
}
