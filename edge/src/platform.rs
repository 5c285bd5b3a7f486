//! The few platform facts the core needs passed in: the time and random bytes.

use exactly_core::id::{prefixed, IdBytes};
use exactly_core::Timestamp;

use crate::error::EdgeError;

/// The current time from the Workers runtime.
pub fn now() -> Timestamp {
    // `Date.now()` is whole milliseconds, well inside i64.
    Timestamp::from_unix_millis(worker::Date::now().as_millis() as i64)
}

/// A new resource id with `prefix`, from the platform's CSPRNG.
pub fn new_id(prefix: &str) -> Result<String, EdgeError> {
    let mut bytes: IdBytes = [0; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| EdgeError::platform("random", e))?;
    Ok(prefixed(prefix, &bytes))
}

/// `len` random bytes from the platform's CSPRNG, as lowercase hex.
pub fn random_hex(len: usize) -> Result<String, EdgeError> {
    let mut bytes = vec![0u8; len];
    getrandom::getrandom(&mut bytes).map_err(|e| EdgeError::platform("random", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Sends `request`, giving up after `timeout`: `Err` carries why (network error or timeout).
pub async fn fetch_with_timeout(
    request: worker::Request,
    timeout: std::time::Duration,
) -> Result<worker::Response, String> {
    use futures_util::future::{select, Either};
    let fetch = worker::Fetch::Request(request);
    let sent = fetch.send();
    let timer = worker::Delay::from(timeout);
    futures_util::pin_mut!(sent);
    match select(sent, timer).await {
        Either::Left((Ok(response), _)) => Ok(response),
        Either::Left((Err(e), _)) => Err(format!("network: {e}")),
        Either::Right(_) => Err(format!("no answer within {}s", timeout.as_secs())),
    }
}

/// A random `u32` (for jitter).
pub fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    // Without randomness the jitter is merely absent; nothing else depends on it.
    let _ = getrandom::getrandom(&mut bytes);
    u32::from_le_bytes(bytes)
}
