//! Copying one inbound media item from the carrier's link into the R2 bucket, once.
//!
//! The carrier's link expires, so every inbound item is copied when its message is recorded.
//! The copier claims the item with a lease (a guarded UPDATE) *before* it fetches the link, so
//! duplicate deliveries, a second job and the sweeper's re-enqueue never copy an item twice at
//! once; the key is derived from the message and the position (`core::media::object_key`), so
//! even a copier whose record was lost after its put only writes the same object again.

use exactly_core::backoff;
use exactly_core::media::{fetch_verdict, FetchVerdict, MAX_ITEM_BYTES};
use exactly_core::Timestamp;
use worker::Env;

use crate::config::Config;
use crate::error::EdgeError;
use crate::platform::{endpoint_url, fetch, now, open, resolve_url, Cut, Longer};
use crate::store::media::{self, Claimed};
use crate::store::AccountDb;
use crate::work::outcome::{Done, Outcome, Wait};

/// How long a claim holds: longer than a fetch and a put may take.
const LEASE_MILLIS: i64 = 90_000;

/// How long the fetch of a carrier's link may take, body included
/// ([`crate::config::Tuning::media_fetch_timeout`]).
fn fetch_timeout(config: &Config) -> std::time::Duration {
    config.tuning.media_fetch_timeout
}

/// Copies item `position` of `message_id`.
pub async fn copy(account: &AccountDb, message_id: &str, position: u32) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let started = now();
    let lease_until = Timestamp::from_unix_millis(started.unix_millis() + LEASE_MILLIS);
    let Some(claimed) = media::claim(db, message_id, position, started, lease_until).await? else {
        return Ok(Outcome::Done(match media::copy_state(db, message_id, position).await? {
            None => Done::NoSuchMedia,
            // Stored, given up, or outbound (never copied): nothing to do.
            Some(s) if s.stored_at.is_some() || s.copy_error.is_some() || s.r2_key.is_none() => Done::NoOp,
            // Another copier holds the lease; if it dies, the sweeper enqueues the item again.
            Some(_) => Done::ClaimedElsewhere,
        }));
    };
    let log = |outcome: &str, reason: &str| {
        worker::console_warn!(
            "{}",
            serde_json::json!({"job": "copy_media", "message_id": message_id, "position": position,
                "outcome": outcome, "reason": reason})
        );
    };
    match fetch_and_put(account, &claimed).await {
        Ok(Fetched::Stored { size, content_type }) => {
            let recorded = media::record_stored(db, message_id, position, size, content_type.as_deref(), now()).await?;
            if !recorded && !media::exists(db, message_id, position).await? {
                // Erased while it was copied (docs/contract.md §5, "Erasure"): the copy goes too.
                media::delete_copy(env, &claimed.r2_key).await?;
                return Ok(Outcome::Done(Done::Erased));
            }
            Ok(Outcome::Done(if recorded { Done::Copied } else { Done::NoOp }))
        }
        Ok(Fetched::Refused(problem)) => {
            log("given up", &problem);
            let recorded =
                media::record_failed(db, message_id, position, Some(claimed.copy_attempts), &problem, now()).await?;
            Ok(Outcome::Done(if recorded { Done::Failed } else { Done::NoOp }))
        }
        Ok(Fetched::Unavailable(reason)) => match backoff::not_yet_delay(claimed.copy_attempts) {
            Some(delay) => {
                log("retried", &reason);
                media::release(db, message_id, position, claimed.copy_attempts).await?;
                Ok(Outcome::RetryIn(u32::try_from(delay).unwrap_or(u32::MAX), Wait::MediaUnavailable))
            }
            None => {
                let problem =
                    format!("the carrier's media link did not answer in {} tries: {reason}", claimed.copy_attempts);
                log("given up", &problem);
                let recorded =
                    media::record_failed(db, message_id, position, Some(claimed.copy_attempts), &problem, now())
                        .await?;
                Ok(Outcome::Done(if recorded { Done::Failed } else { Done::NoOp }))
            }
        },
        Err(e) => {
            // The bucket or the platform failed: free the claim so the queue's retry can copy.
            media::release(db, message_id, position, claimed.copy_attempts).await?;
            Err(e)
        }
    }
}

/// How one fetch of a carrier's link ended.
enum Fetched {
    /// The object is in the bucket.
    Stored { size: u64, content_type: Option<String> },
    /// The link is gone, refused or too large: asking again cannot help.
    Refused(String),
    /// No answer, or one that may change: try again later.
    Unavailable(String),
}

/// The most redirects a carrier's media link may take.
const MAX_HOPS: usize = 5;

/// Fetches the item's link, following at most [`MAX_HOPS`] redirects by hand: the link and every
/// hop must pass the rule customer endpoints pass (`core::endpoint`: `https` to a public address
/// unless `ALLOW_PRIVATE_ENDPOINTS`), so a forged or leaked carrier body cannot make the worker
/// read a private address and serve what it answered through signed links.
///
/// A body of a declared length (not encoded) goes into the bucket as it comes, never whole in
/// the worker's memory (an isolate has 128 MB, and up to three copies run at once); one of
/// unknown length is read under the cap ([`MAX_ITEM_BYTES`]) and then stored.
async fn fetch_and_put(account: &AccountDb, item: &Claimed) -> Result<Fetched, EdgeError> {
    let (env, config) = (account.env(), account.config());
    let allow_private = config.allow_private_endpoints;
    // One deadline for the whole copy, redirects and body included, well inside the claim.
    let deadline = now().unix_millis() + i64::try_from(fetch_timeout(config).as_millis()).unwrap_or(i64::MAX);
    let mut url = item.url.clone();
    let mut hops = 0;
    let answer = loop {
        let checked = match endpoint_url(&url, allow_private) {
            Ok(checked) => checked,
            Err(problem) => {
                let what =
                    if hops == 0 { "the carrier's media link" } else { "a redirect of the carrier's media link" };
                return Ok(Fetched::Refused(format!("{what} is refused: {}", problem.message())));
            }
        };
        let Ok(request) = crate::platform::request("GET", checked.as_str(), None, None, false) else {
            return Ok(Fetched::Refused("the carrier's media link is not a URL fetch accepts".into()));
        };
        let answer = match open(request, left(deadline)).await {
            Ok(answer) => answer,
            Err(reason) => return Ok(Fetched::Unavailable(reason.to_string())),
        };
        if !(300..400).contains(&answer.status) {
            break answer;
        }
        let (status, location) = (answer.status, answer.headers.get("location").ok().flatten());
        answer.abort();
        hops += 1;
        if hops > MAX_HOPS {
            return Ok(Fetched::Refused(format!("the carrier's media link redirected more than {MAX_HOPS} times")));
        }
        let Some(next) = location.and_then(|l| resolve_url(checked.as_str(), &l)) else {
            return Ok(Fetched::Refused(format!("the carrier's media link answered {status} with no usable Location")));
        };
        url = next;
    };
    let refused = not_stored(answer.status);
    let headers = answer.headers.clone();
    let header = |name: &str| headers.get(name).ok().flatten().filter(|v| !v.trim().is_empty());
    let declared = header("content-length").and_then(|n| n.trim().parse::<u64>().ok());
    let encoded = crate::platform::is_encoded(header("content-encoding").as_deref());
    let refused = refused.or_else(|| {
        declared
            .filter(|n| *n > MAX_ITEM_BYTES)
            .map(|_| Fetched::Refused(format!("the media item is larger than {MAX_ITEM_BYTES} bytes")))
    });
    if let Some(refused) = refused {
        answer.abort();
        return Ok(refused);
    }
    // What the carrier said the item is, else what its link answered.
    let content_type = item.content_type.clone().or(header("content-type"));
    let (Some(length), false, Some(body)) = (declared, encoded, answer.body()) else {
        // Of unknown length (or decoded by the runtime, so its declared length is not what
        // comes): read again, under the cap.
        answer.abort();
        return fetch_whole(env, item, &url, content_type, deadline).await;
    };
    let stored = stream_into_bucket(account, item, &body, length, content_type.as_deref(), deadline).await;
    if !matches!(stored, Ok(Fetched::Stored { .. })) {
        answer.abort();
    }
    stored
}

/// Stores `body`, `length` bytes as the answer declared, under the item's key as it comes, within
/// the fetch's deadline.
async fn stream_into_bucket(
    account: &AccountDb,
    item: &Claimed,
    body: &wasm_bindgen::JsValue,
    length: u64,
    content_type: Option<&str>,
    deadline: i64,
) -> Result<Fetched, EdgeError> {
    use futures_util::future::{select, Either};
    let fixed = crate::platform::fixed_length(body, length as f64)
        .map_err(|e| EdgeError::platform("media stream", worker::Error::from(e)))?;
    let put = media::put_copy(account.env(), &item.r2_key, fixed, content_type);
    futures_util::pin_mut!(put);
    let timeout = fetch_timeout(account.config());
    match select(put, worker::Delay::from(left(deadline))).await {
        Either::Left((Ok(()), _)) => {
            let line = serde_json::json!({"media": "stored", "key": item.r2_key, "bytes": length, "streamed": true});
            worker::console_log!("{line}");
            Ok(Fetched::Stored { size: length, content_type: content_type.map(str::to_owned) })
        }
        // The body broke off, or was not the length it said: as a body cut short.
        Either::Left((Err(e), _)) => Ok(Fetched::Unavailable(format!("the media body: {e}"))),
        Either::Right(_) => Ok(Fetched::Unavailable(format!("the body did not end within {}s", timeout.as_secs()))),
    }
}

/// Fetches `url` (the item's link, or where it redirected) again and reads its body whole,
/// under the cap, within what is left of the copy's deadline, then stores it.
async fn fetch_whole(
    env: &Env,
    item: &Claimed,
    url: &str,
    content_type: Option<String>,
    deadline: i64,
) -> Result<Fetched, EdgeError> {
    let max_body = usize::try_from(MAX_ITEM_BYTES).unwrap_or(usize::MAX);
    let Ok(request) = crate::platform::request("GET", url, None, None, false) else {
        return Ok(Fetched::Refused("the carrier's media link is not a URL fetch accepts".into()));
    };
    let answer = match fetch(request, left(deadline), max_body, Longer::Unread).await {
        Ok(answer) => answer,
        Err(reason) => return Ok(Fetched::Unavailable(reason.to_string())),
    };
    if let Some(not_stored) = not_stored(answer.status) {
        return Ok(not_stored);
    }
    match answer.cut {
        None => {}
        Some(Cut::OverLimit) => {
            return Ok(Fetched::Refused(format!("the media item is larger than {MAX_ITEM_BYTES} bytes")))
        }
        Some(Cut::Broken(reason)) => return Ok(Fetched::Unavailable(format!("the media body: {reason}"))),
    }
    let bytes = answer.body;
    let size = bytes.len() as u64;
    media::put_copy(env, &item.r2_key, bytes, content_type.as_deref()).await?;
    let line = serde_json::json!({"media": "stored", "key": item.r2_key, "bytes": size, "streamed": false});
    worker::console_log!("{line}");
    Ok(Fetched::Stored { size, content_type })
}

/// What is left until `deadline` (Unix ms): none once it has passed, so a call given it times
/// out at once.
fn left(deadline: i64) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(deadline - now().unix_millis()).unwrap_or(0))
}

/// What an answer of `status` from the carrier's link comes to when it is not a body to store:
/// given up, or to try again (`core::media::fetch_verdict`).
fn not_stored(status: u16) -> Option<Fetched> {
    let answered = || format!("the carrier's media link answered {status}");
    match fetch_verdict(status) {
        FetchVerdict::Store => None,
        FetchVerdict::GiveUp => Some(Fetched::Refused(answered())),
        FetchVerdict::TryAgain => Some(Fetched::Unavailable(answered())),
    }
}
