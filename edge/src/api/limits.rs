//! API rate limits (docs/contract.md §5, "Rate limits"): every `/v1` request counts against its
//! bearer token and, once the token is known, against its account's keys or its portal sessions
//! (so a second key or session adds no requests, and a session never takes its keys' share), and
//! every `/admin` request against the admin token, with the Workers rate limiting binding
//! (`API_RATE_LIMIT`, `ADMIN_RATE_LIMIT` in wrangler.toml, which set the limits); a request
//! without a token counts against its client's address. Beyond the limit the answer is
//! 429 `rate_limited` with `Retry-After`. Carrier webhooks never count: the route table sends them
//! to ingest before this is asked.
//!
//! The limiter counts per key in windows of [`WINDOW_SECS`]; `wrangler dev` runs the same binding
//! in memory. A deployment without the binding has no limit; a limiter that fails lets the request
//! through (and logs it): a limit protects the API, it never takes it down.

use exactly_core::Timestamp;
use worker::Env;

use crate::api::auth::key_hash;
use crate::error::EdgeError;

/// The binding that limits `/v1` requests, per API key.
pub const API: &str = "API_RATE_LIMIT";
/// The binding that limits `/admin` requests, per admin token.
pub const ADMIN: &str = "ADMIN_RATE_LIMIT";
/// The limiter's window: wrangler.toml sets `period = 60` on both bindings.
pub const WINDOW_SECS: i64 = 60;

/// Counts one request to an `/admin` route (`admin`) or a `/v1` one; `Err(RateLimited)` beyond the
/// limit.
pub async fn count(req: &web_sys::Request, env: &Env, admin: bool, now: Timestamp) -> Result<(), EdgeError> {
    let Ok(limiter) = env.rate_limiter(if admin { ADMIN } else { API }) else { return Ok(()) };
    let header = |name: &str| req.headers().get(name).ok().flatten();
    // The token's hash, never the token itself, names its counter.
    let key = match header("authorization").as_deref().and_then(crate::api::http::bearer_of) {
        Some(token) => format!("token:{}", key_hash(&token)),
        None => format!("address:{}", header("cf-connecting-ip").unwrap_or_default()),
    };
    limit(&limiter, key, now).await
}

/// Counts one `/v1` request against its account, once its credential is known: an account's
/// keys share one limit, however many it makes, and its portal sessions another (`portal`), so
/// a session in an end user's hands can use up only the sessions' share, never its keys'.
pub async fn count_account(env: &Env, account_id: &str, portal: bool, now: Timestamp) -> Result<(), EdgeError> {
    let Ok(limiter) = env.rate_limiter(API) else { return Ok(()) };
    let share = if portal { "portal" } else { "keys" };
    limit(&limiter, format!("account:{account_id}:{share}"), now).await
}

async fn limit(limiter: &worker::RateLimiter, key: String, now: Timestamp) -> Result<(), EdgeError> {
    match limiter.limit(key).await {
        Ok(outcome) if !outcome.success => Err(EdgeError::RateLimited { retry_after: retry_after(now) }),
        Ok(_) => Ok(()),
        Err(e) => {
            worker::console_error!("{}", serde_json::json!({"rate_limit": "not counted", "error": e.to_string()}));
            Ok(())
        }
    }
}

/// Seconds until the next window begins (1 to [`WINDOW_SECS`]).
fn retry_after(now: Timestamp) -> u32 {
    let into = now.unix_millis().rem_euclid(WINDOW_SECS * 1000);
    let left = (WINDOW_SECS * 1000 - into + 999) / 1000;
    u32::try_from(left.clamp(1, WINDOW_SECS)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::{retry_after, WINDOW_SECS};
    use exactly_core::Timestamp;

    #[test]
    fn retry_after_is_the_rest_of_the_window() {
        let at = |millis: i64| retry_after(Timestamp::from_unix_millis(millis));
        assert_eq!(at(0), 60);
        assert_eq!(at(1), 60);
        assert_eq!(at(59_001), 1);
        assert_eq!(at(59_999), 1);
        assert_eq!(at(30_000), 30);
        for millis in (0..120_000).step_by(997) {
            assert!((1..=WINDOW_SECS as u32).contains(&at(millis)));
        }
    }
}
