//! Shared secrets (carrier auth tokens), kept out of `Debug` output and logs.

use std::fmt;

/// One shared secret. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

/// Why a configured secret was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretError {
    /// No secret, or only blanks.
    Empty,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Empty => f.write_str("is empty"),
        }
    }
}

impl std::error::Error for SecretError {}

impl Secret {
    /// The secret's bytes, for keying a MAC.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Reads one or more secrets separated by commas (several during a rotation).
    pub fn parse_list(text: &str) -> Result<Vec<Secret>, SecretError> {
        let secrets: Vec<Secret> =
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| Secret(s.as_bytes().to_vec())).collect();
        if secrets.is_empty() {
            Err(SecretError::Empty)
        } else {
            Ok(secrets)
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn lists_and_redaction() {
        let list = Secret::parse_list(" old-token , new-token ").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1].expose(), b"new-token");
        assert_eq!(format!("{list:?}"), "[Secret(redacted), Secret(redacted)]");
        assert_eq!(Secret::parse_list(""), Err(SecretError::Empty));
        assert_eq!(Secret::parse_list(" , "), Err(SecretError::Empty));
    }
}
