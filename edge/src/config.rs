//! Configuration from wrangler vars and secrets (contract §2). A missing or malformed value is
//! an error naming the variable, never its value, and never a panic.

use worker::Env;

use crate::bindings::vars;
use crate::error::EdgeError;

/// A required variable or secret, trimmed; an error naming it when missing or blank.
pub fn required(env: &Env, name: &'static str) -> Result<String, EdgeError> {
    optional(env, name).ok_or(EdgeError::Config { variable: name, problem: "is not set".into() })
}

/// An optional variable or secret, trimmed; `None` when missing or blank.
pub fn optional(env: &Env, name: &str) -> Option<String> {
    let value = env
        .secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// `PUBLIC_BASE_URL` without a trailing slash: the origin carriers call (and Twilio and Plivo
/// sign).
pub fn public_base_url(env: &Env) -> Result<String, EdgeError> {
    let url = required(env, vars::PUBLIC_BASE_URL)?;
    if exactly_core::form::Url::parse(&url).is_none() {
        return Err(EdgeError::Config { variable: vars::PUBLIC_BASE_URL, problem: "is not an absolute URL".into() });
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// `TELNYX_API_BASE` without a trailing slash (default `https://api.telnyx.com`).
pub fn telnyx_api_base(env: &Env) -> String {
    optional(env, vars::TELNYX_API_BASE)
        .unwrap_or_else(|| "https://api.telnyx.com".to_owned())
        .trim_end_matches('/')
        .to_owned()
}
