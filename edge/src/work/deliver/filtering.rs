//! An endpoint's filter at a delivery's gate (docs/contract.md §6, "Filters").

use exactly_core::filter::Filter;

use crate::store::deliveries::Due;

/// What an endpoint's filter says of a delivery.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Send it: no filter, the event passes, or it is a test send (which exists to reach the
    /// endpoint).
    Send,
    /// Hold it back: the event does not pass.
    HoldBack,
    /// The stored filter no longer parses (why): the delivery fails visibly rather than going
    /// out unfiltered.
    Broken(String),
}

/// The verdict of `due`'s endpoint's filter on its event.
pub(super) fn verdict(due: &Due) -> Verdict {
    let Some(text) = due.filter.as_deref().filter(|_| !due.test) else { return Verdict::Send };
    let body: serde_json::Value = serde_json::from_str(&due.payload).unwrap_or(serde_json::Value::Null);
    match Filter::parse(text) {
        Ok(filter) if filter.matches(&body) => Verdict::Send,
        Ok(_) => Verdict::HoldBack,
        Err(e) => Verdict::Broken(format!("the endpoint's filter does not parse: {e}")),
    }
}
