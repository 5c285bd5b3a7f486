//! The carrier wing: one file per carrier REST API.
pub mod telnyx;
