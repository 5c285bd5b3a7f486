//! Why a carrier delivery was refused.
//!
//! The edge maps these to HTTP once: [`Rejection::Unauthenticated`] to 401,
//! [`Rejection::Malformed`] to 400 and [`Rejection::TooLarge`] to 413. Messages name what was
//! wrong and never contain a secret, a signature or the body.

use std::fmt;

/// A carrier delivery that must not be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The signature or its timestamp did not check out.
    Unauthenticated(SignatureError),
    /// The signature was valid but the body is not an event of this provider.
    Malformed(PayloadError),
    /// The body is larger than [`crate::MAX_BODY_BYTES`].
    TooLarge {
        /// The limit that was exceeded, in bytes.
        limit: usize,
    },
}

/// What was wrong with a signature.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureError {
    /// A header the provider always sends is absent.
    MissingHeader(&'static str),
    /// A header is present but cannot be decoded (not base64, wrong length, not a number).
    MalformedHeader(&'static str),
    /// The signed timestamp is further in the past than the tolerance allows.
    Stale,
    /// The signed timestamp is further in the future than the tolerance allows.
    FromTheFuture,
    /// The signature is well-formed but does not verify under any configured key.
    Mismatch,
}

/// What was wrong with a signed body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadError {
    /// The body is not JSON (or not the provider's form encoding).
    NotParseable,
    /// A field every event carries is absent or empty.
    MissingField(&'static str),
    /// A field is present but has the wrong shape.
    InvalidField(&'static str),
}

impl Rejection {
    /// A stable, machine-readable code for error bodies and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::Unauthenticated(_) => "invalid_signature",
            Rejection::Malformed(_) => "malformed_event",
            Rejection::TooLarge { .. } => "body_too_large",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Unauthenticated(e) => write!(f, "signature rejected: {e}"),
            Rejection::Malformed(e) => write!(f, "not a valid event: {e}"),
            Rejection::TooLarge { limit } => write!(f, "body larger than {limit} bytes"),
        }
    }
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::MissingHeader(h) => write!(f, "missing header {h}"),
            SignatureError::MalformedHeader(h) => write!(f, "malformed header {h}"),
            SignatureError::Stale => f.write_str("timestamp outside the tolerance (too old)"),
            SignatureError::FromTheFuture => f.write_str("timestamp outside the tolerance (in the future)"),
            SignatureError::Mismatch => f.write_str("signature does not match"),
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadError::NotParseable => f.write_str("body is not in the provider's format"),
            PayloadError::MissingField(name) => write!(f, "missing field {name}"),
            PayloadError::InvalidField(name) => write!(f, "invalid field {name}"),
        }
    }
}

impl std::error::Error for Rejection {}
impl std::error::Error for SignatureError {}
impl std::error::Error for PayloadError {}

impl From<SignatureError> for Rejection {
    fn from(e: SignatureError) -> Self {
        Rejection::Unauthenticated(e)
    }
}

impl From<PayloadError> for Rejection {
    fn from(e: PayloadError) -> Self {
        Rejection::Malformed(e)
    }
}

/// Checks a signed timestamp (whole seconds) against `now`, both ways.
pub(crate) fn check_tolerance(signed_at_secs: i64, now: crate::Timestamp) -> Result<(), SignatureError> {
    let skew = now.unix_seconds().saturating_sub(signed_at_secs);
    if skew > crate::SIGNATURE_TOLERANCE_SECS {
        Err(SignatureError::Stale)
    } else if skew < -crate::SIGNATURE_TOLERANCE_SECS {
        Err(SignatureError::FromTheFuture)
    } else {
        Ok(())
    }
}
