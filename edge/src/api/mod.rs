//! The HTTP API: `/admin` (operator) and `/v1` (customer), one file per resource.

pub mod admin;
pub mod auth;
pub mod calls;
pub mod delivery_log;
pub mod erasures;
pub mod events;
pub mod health;
pub mod home;
pub mod http;
pub mod idempotency;
pub mod ingest;
pub mod keys;
pub mod limits;
pub mod media;
pub mod messages;
pub mod openapi;
pub mod portal;
pub mod usage;
pub mod webhook_endpoints;

use exactly_core::number::PhoneNumber;

use crate::error::EdgeError;

/// Parses an E.164 number from the request; 422 naming `field` when it is not one.
pub fn e164(field: &'static str, value: &str) -> Result<PhoneNumber, EdgeError> {
    PhoneNumber::parse(value).map_err(|e| EdgeError::invalid(field, e.to_string()))
}

/// A `{ "data": [...], "next_cursor": ... }` page.
pub fn page(data: Vec<serde_json::Value>, next: Option<crate::api::http::Cursor>) -> serde_json::Value {
    serde_json::json!({ "data": data, "next_cursor": next.map(|c| c.encode()) })
}

/// A resource as the API reads it one at a time: with what it was charged (`null` until it is).
pub fn with_charge(mut resource: serde_json::Value, charge: Option<serde_json::Value>) -> serde_json::Value {
    if let Some(fields) = resource.as_object_mut() {
        fields.insert("charge".into(), charge.unwrap_or(serde_json::Value::Null));
    }
    resource
}
