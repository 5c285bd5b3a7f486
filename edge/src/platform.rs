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

/// A timestamp as the number D1 binds exactly (f64 holds integers up to 2^53).
pub fn millis_arg(t: Timestamp) -> wasm_bindgen::JsValue {
    wasm_bindgen::JsValue::from_f64(t.unix_millis() as f64)
}

/// `len` random bytes from the platform's CSPRNG, as lowercase hex.
pub fn random_hex(len: usize) -> Result<String, EdgeError> {
    let mut bytes = vec![0u8; len];
    getrandom::getrandom(&mut bytes).map_err(|e| EdgeError::platform("random", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
