//! `POST /webhooks/{telnyx,twilio,plivo}`: verify, store once, enqueue. Nothing else happens
//! on the request path, so carriers get their answer in tens of milliseconds.

use exactly_core::form::Url;
use exactly_core::{plivo, telnyx, twilio};
use exactly_core::{PayloadError, Provider, Rejection, Timestamp, VerifiedEvent, MAX_BODY_BYTES};
use web_sys::{Headers, Request, Response};
use worker::Env;

use crate::bindings::vars;
use crate::config::{self, Config};
use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self as jobs, Carried, Job, CARRIED_PAYLOAD_MAX};
use crate::store::carrier_events::{Log, Stored};

/// Handles one delivery from `provider`, on the runtime's request as it arrived.
pub async fn webhook(provider: Provider, req: &Request, env: &Env, config: &Config) -> Result<Response, EdgeError> {
    // One `Headers` object for every header read here.
    let headers = req.headers();
    // Capped while reading: a chunked body has no Content-Length to refuse up front.
    let body = crate::api::http::read_capped(req, &headers, MAX_BODY_BYTES, || {
        Rejection::TooLarge { limit: MAX_BODY_BYTES }.into()
    })
    .await?;
    let started = now();
    let verified = verify(provider, req, &headers, config, &body, started)?;
    let payload = std::str::from_utf8(&body).map_err(|_| Rejection::Malformed(PayloadError::NotParseable))?;

    let log = Log::open(env, config);
    if crate::faults::d1_write_fails_once(&verified.event().event_id) {
        return Err(EdgeError::unavailable("injected fault", "injected D1 write failure"));
    }
    let (stored, rows_written) = log.store(&verified, payload, started).await?;
    let outcome = stored.outcome();
    // A new row, or one not settled yet (its job may have been lost), gets a job. If this send
    // fails the row stays unprocessed: the carrier's retry re-enqueues it and the sweeper finds
    // it, so answering 503 loses nothing.
    let new = matches!(stored, Stored::New { .. });
    let id = match stored {
        Stored::New { id } | Stored::PendingDuplicate { id } => {
            if crate::faults::queue_send_fails_once(&verified.event().event_id) {
                return Err(EdgeError::unavailable("injected fault", "injected queue send failure after the insert"));
            }
            let event = verified.event();
            let number = match &event.kind {
                exactly_core::event::EventKind::MessageReceived(inbound) => Some(inbound.to.clone()),
                _ => None,
            };
            // A new inbound message's job carries the row just written, when it is in `DB` with
            // every account: its processing then reads nothing first (work::process).
            let carried = (new
                && number.is_some()
                && payload.len() <= CARRIED_PAYLOAD_MAX
                && log.all_in_db()
                && !crate::store::routes::sharded(env, config))
            .then(|| {
                Box::new(Carried {
                    carrier: event.provider,
                    carrier_event_id: event.event_id.clone(),
                    event_type: event.event_type.clone(),
                    payload: payload.to_owned(),
                    created_at: started.unix_millis(),
                })
            });
            let job = Job::CarrierEvent { id: id.clone(), lane: Some(event.lane()), number, event: carried };
            jobs::enqueue(env, job).await?;
            id
        }
        Stored::SettledDuplicate { id } => id,
    };
    if config.log_webhook_requests && config.samples(&id) {
        // Keyed by the row's id, as its job's line is (Config::samples). Serialized from
        // borrowed fields into one string: no serde_json::Value tree per line.
        #[derive(serde::Serialize)]
        struct Line<'a> {
            request: &'static str,
            provider: &'static str,
            event_id: &'a str,
            event_type: &'a str,
            outcome: &'static str,
            rows_written: usize,
            latency_ms: i64,
        }
        let event = verified.event();
        let line = Line {
            request: "webhook",
            provider: provider.as_str(),
            event_id: &event.event_id,
            event_type: &event.event_type,
            outcome,
            rows_written,
            latency_ms: now().unix_millis() - started.unix_millis(),
        };
        worker::console_log!("{}", serde_json::to_string(&line).unwrap_or_default());
    }
    #[derive(serde::Serialize)]
    struct Answer<'a> {
        id: &'a str,
        outcome: &'a str,
    }
    let answer = serde_json::to_string(&Answer { id: &id, outcome }).map_err(|e| EdgeError::platform("respond", e))?;
    crate::platform::json_response(&answer).map_err(|e| EdgeError::platform("respond", format!("{e:?}")))
}

fn verify(
    provider: Provider,
    req: &Request,
    headers: &Headers,
    config: &config::Config,
    body: &[u8],
    now: Timestamp,
) -> Result<VerifiedEvent, EdgeError> {
    let header = |name: &str| headers.get(name).ok().flatten();
    let not_set = |variable| EdgeError::Config {
        variable,
        problem: "is not set: this carrier's webhooks cannot be verified".into(),
    };
    Ok(match provider {
        Provider::Twilio => {
            let verifier = config.twilio.as_ref().ok_or_else(|| not_set(vars::TWILIO_AUTH_TOKEN))?;
            let url = signed_url(req, config)?;
            let (signature, settings) = (header(twilio::SIGNATURE_HEADER), header(twilio::SIGNATURE_SETTINGS_HEADER));
            verifier.verify(
                twilio::Request {
                    url: &url,
                    signature: signature.as_deref(),
                    signature_settings: settings.as_deref(),
                    body,
                },
                now,
            )?
        }
        Provider::Plivo => {
            let verifier = config.plivo.as_ref().ok_or_else(|| not_set(vars::PLIVO_AUTH_TOKEN))?;
            let url = signed_url(req, config)?;
            let (v3, v3_nonce) = (header(plivo::V3_SIGNATURE_HEADER), header(plivo::V3_NONCE_HEADER));
            let (v2, v2_nonce) = (header(plivo::V2_SIGNATURE_HEADER), header(plivo::V2_NONCE_HEADER));
            verifier.verify(
                plivo::Request {
                    url: &url,
                    v3_signature: v3.as_deref(),
                    v3_nonce: v3_nonce.as_deref(),
                    v2_signature: v2.as_deref(),
                    v2_nonce: v2_nonce.as_deref(),
                    body,
                },
                now,
            )?
        }
        Provider::Telnyx => {
            let (signature, timestamp) = (header(telnyx::SIGNATURE_HEADER), header(telnyx::TIMESTAMP_HEADER));
            config.telnyx.verify(
                telnyx::Headers { signature: signature.as_deref(), timestamp: timestamp.as_deref() },
                body,
                now,
            )?
        }
    })
}

/// The URL the carrier signed: the public origin it was configured with, plus this request's
/// path and query (a proxy in front of the worker may change the host the worker sees).
fn signed_url(req: &Request, config: &config::Config) -> Result<String, EdgeError> {
    let base = &config.public_base_url;
    // The runtime hands the URL over serialized by the WHATWG parser: its path and query are
    // split off as they are, not parsed again.
    let url = req.url();
    let url = Url::parse(&url).ok_or_else(|| EdgeError::platform("request url", "not an absolute URL"))?;
    let path = if url.path.is_empty() { "/" } else { url.path };
    Ok(match url.query {
        Some(query) => format!("{base}{path}?{query}"),
        None => format!("{base}{path}"),
    })
}
