//! An endpoint's filter at a delivery's gate (docs/contract.md §6, "Filters").

use exactly_core::filter::Filter;

use crate::store::deliveries::Due;

/// Whether the endpoint's filter holds the delivery back: `None` to send it (no filter, the event
/// passes, or it is a test send, which exists to reach the endpoint), `Some(Ok(()))` to hold it
/// back, `Some(Err(why))` when the stored filter no longer parses (the delivery fails visibly
/// rather than going out unfiltered).
pub(super) fn filtered(due: &Due) -> Option<Result<(), String>> {
    let text = due.filter.as_deref()?;
    let body: serde_json::Value = serde_json::from_str(&due.payload).unwrap_or(serde_json::Value::Null);
    if body.get("test") == Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    match Filter::parse(text) {
        Ok(filter) if filter.matches(&body) => None,
        Ok(_) => Some(Ok(())),
        Err(e) => Some(Err(format!("the endpoint's filter does not parse: {e}"))),
    }
}
