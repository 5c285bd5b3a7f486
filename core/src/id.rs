//! Resource ids: a short type prefix and 128 random bits, e.g. `cev_3f9a...`.
//!
//! The randomness comes from the caller (the edge draws it from the platform's CSPRNG), so the
//! core stays deterministic and tests can pass fixed bytes.

/// The random bytes behind one id.
pub type IdBytes = [u8; 16];

/// Builds `prefix_` followed by the lowercase hex of `bytes`.
pub fn prefixed(prefix: &str, bytes: &IdBytes) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(prefix.len() + 1 + 32);
    id.push_str(prefix);
    id.push('_');
    for byte in bytes {
        id.push(char::from(HEX[usize::from(byte >> 4)]));
        id.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    id
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn prefix_and_hex() {
        let mut bytes = [0u8; 16];
        bytes[0] = 0xab;
        bytes[15] = 0x01;
        assert_eq!(prefixed("cev", &bytes), "cev_ab000000000000000000000000000001");
    }
}
