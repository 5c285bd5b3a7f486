//! The HTTP API: `/admin` (operator) and `/v1` (customer), one file per resource.

pub mod admin;
pub mod auth;
pub mod calls;
#[cfg(feature = "fault-injection")]
pub mod e2e;
pub mod events;
pub mod health;
pub mod http;
pub mod ingest;
pub mod messages;
pub mod usage;
pub mod webhook_endpoints;

use crate::error::EdgeError;

/// Checks an E.164 number: `+`, then 7 to 15 digits, the first not 0.
pub fn e164(field: &'static str, value: &str) -> Result<(), EdgeError> {
    let digits = value.strip_prefix('+').unwrap_or("");
    let valid =
        (7..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    if valid {
        Ok(())
    } else {
        Err(EdgeError::invalid(field, "must be an E.164 number such as +15550001111"))
    }
}

/// A `{ "data": [...], "next_cursor": ... }` page.
pub fn page(data: Vec<serde_json::Value>, next: Option<crate::api::http::Cursor>) -> serde_json::Value {
    serde_json::json!({ "data": data, "next_cursor": next.map(|c| c.encode()) })
}
