//! The carrier wing: one file per carrier REST API, and sending a message through whichever
//! carrier a number belongs to.
//!
//! Telnyx takes an idempotency key on every request, so a send repeated after a lost answer is
//! one message at the carrier. Twilio and Plivo take none: a send whose answer was lost is
//! looked up at the carrier before it is sent again (docs/contract.md §4 says exactly what that
//! guarantees).
pub mod plivo;
mod request;
pub mod telnyx;
pub mod twilio;

use exactly_core::event::Provider;
use exactly_core::Timestamp;
use serde_json::Value;

use crate::config::Config;
use crate::error::EdgeError;
pub use request::{CallResult, Outgoing};

/// Sends `message` through `carrier`; on success, the carrier's message id.
pub async fn send_message(
    config: &Config,
    carrier: Provider,
    message: &Outgoing<'_>,
) -> Result<CallResult<String>, EdgeError> {
    match carrier {
        Provider::Telnyx => telnyx::send_message(config, message).await,
        Provider::Twilio => twilio::send_message(config, message).await,
        Provider::Plivo => plivo::send_message(config, message).await,
    }
}

/// The carrier's ids of messages it took from `from` to `to` (with `text`, where the carrier's
/// list shows the text) since `since`, oldest first: what a send whose answer was lost may have
/// become. Telnyx needs no lookup (its idempotency key answers a repeat with the first send).
pub async fn sent_since(
    config: &Config,
    carrier: Provider,
    message: &Outgoing<'_>,
    since: Timestamp,
) -> Result<CallResult<Vec<String>>, EdgeError> {
    match carrier {
        Provider::Telnyx => Ok(CallResult::Ok(Vec::new())),
        Provider::Twilio => twilio::sent_since(config, message, since).await,
        Provider::Plivo => plivo::sent_since(config, message, since).await,
    }
}

/// A message's status as `carrier`'s API reports it now: the status word and what it says of
/// errors (reconciliation of a receipt that never came).
pub async fn message_status(
    config: &Config,
    carrier: Provider,
    carrier_message_id: &str,
) -> Result<CallResult<(String, Value)>, EdgeError> {
    match carrier {
        Provider::Telnyx => telnyx::message_status(config, carrier_message_id).await,
        Provider::Twilio => twilio::message_status(config, carrier_message_id).await,
        Provider::Plivo => plivo::message_status(config, carrier_message_id).await,
    }
}
