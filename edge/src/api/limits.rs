//! API rate limits (docs/contract.md §5, "Rate limits"): every `/v1` request counts against its
//! bearer token and, once the token is known, against its account's keys or its portal sessions
//! (so a second key or session adds no requests, and a session never takes its keys' share), and
//! every `/admin` request against the admin token, with the Workers rate limiting binding
//! (`API_RATE_LIMIT`, `ADMIN_RATE_LIMIT` in wrangler.toml, which set the limits); a request
//! without a token counts against its client's address. Beyond the limit the answer is
//! 429 `rate_limited` with `Retry-After`. Carrier webhooks never count: the route table sends them
//! to ingest before this is asked.
//!
//! A request whose credential fails (none, malformed, unknown, revoked, expired, a wrong admin
//! token) counts against its client's address (`AUTH_FAILURE_RATE_LIMIT`). Past that limit the
//! isolate remembers the address until the window ends, and answers its requests 429 before
//! reading anything, unless they carry a token that authenticated in this isolate within the
//! window: guessing tokens costs no database read, and a customer sharing the address keeps its
//! key's service.
//!
//! The limiter counts per key in windows of [`WINDOW_SECS`]; `wrangler dev` runs the same binding
//! in memory. A deployment without the binding has no limit; a limiter that fails lets the request
//! through (and logs it): a limit protects the API, it never takes it down.

use std::cell::RefCell;
use std::collections::HashMap;

use exactly_core::Timestamp;
use worker::Env;

use crate::error::EdgeError;
use exactly_core::access::secret_hash as key_hash;

/// The binding that limits `/v1` requests, per API key.
pub const API: &str = "API_RATE_LIMIT";
/// The binding that limits `/admin` requests, per admin token.
pub const ADMIN: &str = "ADMIN_RATE_LIMIT";
/// The binding that limits failed authentication, per client address.
pub const AUTH_FAILURES: &str = "AUTH_FAILURE_RATE_LIMIT";
/// The limiter's window: wrangler.toml sets `period = 60` on every binding.
pub const WINDOW_SECS: i64 = 60;

/// How many addresses, and how many tokens, an isolate remembers at most: past it the expired
/// are forgotten, and if none has expired, all.
const REMEMBERED: usize = 4096;

thread_local! {
    /// Addresses past their failed-authentication limit, until when (Unix ms).
    static BLOCKED: RefCell<HashMap<String, i64>> = RefCell::new(HashMap::new());
    /// Hashes of tokens that authenticated in this isolate, until when they are trusted past a
    /// block (Unix ms).
    static PASSED: RefCell<HashMap<String, i64>> = RefCell::new(HashMap::new());
}

/// Remembers `key` until `until`, within [`REMEMBERED`].
fn remember(map: &RefCell<HashMap<String, i64>>, key: String, until: i64, now: i64) {
    let mut map = map.borrow_mut();
    if map.len() >= REMEMBERED && !map.contains_key(&key) {
        map.retain(|_, at| *at > now);
        if map.len() >= REMEMBERED {
            map.clear();
        }
    }
    map.insert(key, until);
}

/// The client's address, as Cloudflare names it (empty where nothing does, as in some local
/// runs: then every such client shares one).
pub fn address(req: &web_sys::Request) -> String {
    req.headers().get("cf-connecting-ip").ok().flatten().unwrap_or_default()
}

/// Lets a request go on to be authenticated, or answers 429 at once: its address is past its
/// failed-authentication limit and its token (if any) has not authenticated here lately.
pub fn admit(req: &web_sys::Request, address: &str, now: Timestamp) -> Result<(), EdgeError> {
    let blocked = BLOCKED.with(|b| b.borrow().get(address).copied()).filter(|until| *until > now.unix_millis());
    let Some(until) = blocked else { return Ok(()) };
    let token = req.headers().get("authorization").ok().flatten();
    let hash = token.as_deref().and_then(crate::api::http::bearer_of).map(|t| key_hash(&t));
    let trusted = hash.is_some_and(|h| {
        PASSED.with(|p| p.borrow().get(&h).is_some_and(|trusted_until| *trusted_until > now.unix_millis()))
    });
    if trusted {
        return Ok(());
    }
    let left = ((until - now.unix_millis() + 999) / 1000).clamp(1, WINDOW_SECS);
    Err(EdgeError::RateLimited { retry_after: u32::try_from(left).unwrap_or(1) })
}

/// Notes that the token whose hash ([`key_hash`]) is `token_hash` authenticated: past a block
/// on its address it is let through for a window.
pub fn passed(token_hash: String, now: Timestamp) {
    let at = now.unix_millis();
    PASSED.with(|p| remember(p, token_hash, at + WINDOW_SECS * 1000, at));
}

/// Counts a failed authentication against `address`; what to answer: `refused` (the 401), or 429 once the
/// address is past its limit (remembered until the window ends, so its next guesses read
/// nothing).
pub async fn failed(env: &Env, address: &str, now: Timestamp, refused: EdgeError) -> EdgeError {
    let Ok(limiter) = env.rate_limiter(AUTH_FAILURES) else { return refused };
    match limit(&limiter, format!("address:{address}"), now).await {
        Ok(()) => refused,
        Err(limited) => {
            let at = now.unix_millis();
            let until = at + i64::from(retry_after(now)) * 1000;
            BLOCKED.with(|b| remember(b, address.to_owned(), until, at));
            limited
        }
    }
}

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
    use super::{remember, retry_after, REMEMBERED, WINDOW_SECS};
    use exactly_core::Timestamp;

    #[test]
    fn what_an_isolate_remembers_stays_bounded() {
        let map = std::cell::RefCell::new(std::collections::HashMap::new());
        for i in 0..REMEMBERED {
            remember(&map, format!("a{i}"), if i % 2 == 0 { 10 } else { 1_000 }, 0);
        }
        assert_eq!(map.borrow().len(), REMEMBERED);
        // Full: the expired half goes, the live half stays.
        remember(&map, "new".into(), 1_000, 100);
        assert_eq!(map.borrow().len(), REMEMBERED / 2 + 1);
        assert!(map.borrow().contains_key("a1") && !map.borrow().contains_key("a0"));
        // Full of live entries: all go but the new one.
        for i in 0..REMEMBERED {
            remember(&map, format!("b{i}"), 1_000, 100);
        }
        assert!(map.borrow().len() <= REMEMBERED);
    }

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
