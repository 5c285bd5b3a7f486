//! `/admin`: accounts, numbers, the carrier-event and delivery dead letters, metrics. Bearer
//! `ADMIN_TOKEN`.

use exactly_core::event::Provider;
use exactly_core::ring::{RingPlan, DEFAULT_RING_TIMEOUT_SECS, RING_TIMEOUT_SECS};
use exactly_core::Timestamp;
use serde::Deserialize;
use serde_json::json;
use worker::{Env, Request, Response};

use crate::api::auth;
use crate::api::http::{self as http, Cursor};
use crate::api::{e164, page};
use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::carrier_events::EventState;
use crate::store::deliveries::{self, Redrive};
use crate::store::{access, accounts, carrier_events, numbers, routes};

#[derive(Deserialize)]
struct NewAccount {
    #[serde(default)]
    name: Option<String>,
}

/// `POST /admin/accounts` -> `{id, name, api_key}`; the key is shown here once, stored hashed.
pub async fn create_account(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let body: NewAccount = http::json_body(&mut req).await?;
    let name = body.name.unwrap_or_default();
    if name.len() > 200 {
        return Err(EdgeError::invalid("name", "must be at most 200 characters"));
    }
    let id = new_id("acct")?;
    let api_key = crate::api::keys::new_secret()?;
    let created = now();
    // The route and the first key first (docs/scaling.md, "Accounts across databases"): until
    // the account row is written, the key leads to no account.
    let key_hash = auth::key_hash(&api_key);
    let root = crate::store::d1(env, crate::bindings::DB)?;
    let key_id = new_id("key")?;
    let key = access::NewKey {
        id: &key_id,
        account_id: &id,
        name: "default",
        scope: exactly_core::access::Scope::Full,
        key_hash: &key_hash,
        prefix: crate::api::keys::prefix(&api_key),
        at: created,
    };
    let binding = routes::place_account(env, &id, &key_hash, created, access::insert(&root, &key)?).await?;
    let scoped = routes::scope(env, Some(binding))?;
    accounts::create(&crate::store::database(&scoped)?, &id, &name, &key_hash, created).await?;
    http::json(201, &json!({ "id": id, "name": name, "api_key": api_key, "created_at": created.to_rfc3339() }))
}

/// `POST /admin/accounts/{id}/rotate_key` -> `{id, api_key}`: a new full API key for the
/// account, shown once, and every other key of the account revoked in the same batch: from the
/// moment this answers only the new key works (docs/security.md, "Rotating each secret"). A
/// rotation without an outage is create-then-revoke (`/v1/api_keys`). 404 for no such customer
/// account.
pub async fn rotate_account_key(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let api_key = crate::api::keys::new_secret()?;
    let (key_id, hash) = (new_id("key")?, auth::key_hash(&api_key));
    let key = access::NewKey {
        id: &key_id,
        account_id: id,
        name: "rotated",
        scope: exactly_core::access::Scope::Full,
        key_hash: &hash,
        prefix: crate::api::keys::prefix(&api_key),
        at: now(),
    };
    if !access::replace_all(env, &key).await? {
        return Err(EdgeError::NotFound);
    }
    worker::console_log!("{}", json!({"admin": "rotate account key", "account": id}));
    http::json(200, &json!({ "id": id, "api_key": api_key }))
}

/// `GET /admin/accounts?limit=&cursor=`: the accounts with their numbers, newest first.
pub async fn list_accounts(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let cursor = Cursor::from_params(&params)?;
    let mut rows = Vec::new();
    for scoped in routes::each(env)? {
        rows.extend(accounts::list(&crate::store::database(&scoped)?, cursor.clone(), limit).await?);
    }
    let rows = newest_first(rows, limit, |a| (a.created_at, &a.id));
    let next = Cursor::after(&rows, limit, |a| (a.created_at, &a.id));
    let data = rows
        .iter()
        .map(|a| {
            let numbers: serde_json::Value = serde_json::from_slice(a.numbers.as_bytes()).unwrap_or_else(|_| json!([]));
            json!({
                "id": a.id, "name": a.name, "numbers": numbers,
                "created_at": a.created_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

#[derive(Deserialize)]
struct NewNumber {
    account_id: Option<String>,
    phone_number: Option<String>,
    #[serde(default)]
    ring_targets: Vec<String>,
    ring_timeout_secs: Option<serde_json::Value>,
    carrier: Option<String>,
}

/// `POST /admin/numbers` `{account_id, phone_number, ring_targets, ring_timeout_secs?, carrier?}`.
/// Without `carrier`, the number's carrier is the one its first message comes from.
pub async fn create_number(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let body: NewNumber = http::json_body(&mut req).await?;
    let account_id = body.account_id.ok_or_else(|| EdgeError::invalid("account_id", "is required"))?;
    let phone_number =
        e164("phone_number", &body.phone_number.ok_or_else(|| EdgeError::invalid("phone_number", "is required"))?)?;
    for target in &body.ring_targets {
        if !target.starts_with("sip:") {
            e164("ring_targets", target)?;
        }
    }
    if !body.ring_targets.is_empty() {
        RingPlan::new(body.ring_targets.clone())
            .map_err(|e| EdgeError::invalid("ring_targets", format!("is not a valid ring plan ({e:?})")))?;
    }
    let ring_timeout_secs = match body.ring_timeout_secs {
        None | Some(serde_json::Value::Null) => DEFAULT_RING_TIMEOUT_SECS,
        Some(value) => value
            .as_u64()
            .and_then(|secs| u32::try_from(secs).ok())
            .filter(|secs| RING_TIMEOUT_SECS.contains(secs))
            .ok_or_else(|| {
                EdgeError::invalid(
                    "ring_timeout_secs",
                    format!("must be a whole number from {} to {}", RING_TIMEOUT_SECS.start(), RING_TIMEOUT_SECS.end()),
                )
            })?,
    };
    let carrier = body
        .carrier
        .map(|name| {
            Provider::from_name(&name).ok_or_else(|| EdgeError::invalid("carrier", "must be telnyx, twilio or plivo"))
        })
        .transpose()?;
    let binding = routes::of_account(env, &account_id).await?;
    let in_db = binding.as_deref().is_none_or(|b| b == crate::bindings::DB);
    let scoped = routes::scope(env, binding)?;
    let db = crate::store::database(&scoped)?;
    if !accounts::exists(&db, &account_id).await? {
        return Err(EdgeError::invalid("account_id", "no such account"));
    }
    let id = new_id("num")?;
    let created = now();
    let new = || numbers::NewNumber {
        id: &id,
        account_id: &account_id,
        number: &phone_number,
        targets: &body.ring_targets,
        ring_timeout_secs,
        carrier: carrier.map(Provider::as_str),
    };
    // Numbers are unique across every account database: claimed in `DB` first, and for an
    // account in `DB` assigned in the same batch.
    let row = if in_db { Some(numbers::create_stmt(&db, new(), created, true)?) } else { None };
    let assigned = match routes::claim_number(env, phone_number.as_str(), &account_id, row).await? {
        routes::Claim::Assigned => true,
        routes::Claim::Claimed => numbers::create(&db, new(), created).await?,
        routes::Claim::Taken | routes::Claim::Already => false,
    };
    if !assigned {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::NumberTaken,
            message: format!("{phone_number} is already assigned"),
        });
    }
    http::json(
        201,
        &json!({
            "id": id, "account_id": account_id, "phone_number": phone_number.as_str(),
                "ring_targets": body.ring_targets, "ring_timeout_secs": ring_timeout_secs,
                "carrier": carrier.map(Provider::as_str),
            "created_at": created.to_rfc3339(),
        }),
    )
}

/// `GET /admin/carrier_events?status=failed|pending|processed&limit=&cursor=`.
pub async fn list_carrier_events(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let state = EventState::from_name(http::param(&params, "status").unwrap_or("failed"))
        .ok_or_else(|| EdgeError::invalid("status", "must be failed, pending or processed"))?;
    let limit = http::limit(&params)?;
    let rows = carrier_events::Log::open(env)?.list(state, Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    let data = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "carrier": r.carrier.as_str(), "carrier_event_id": r.carrier_event_id, "event_type": r.event_type,
                "status": match (&r.error, r.processed_at) {
                    (Some(_), _) => "failed",
                    (None, Some(_)) => "processed",
                    (None, None) => "pending",
                },
                "error": r.error, "attempts": r.attempts,
                "processed_at": r.processed_at.map(|t| t.to_rfc3339()),
                "created_at": r.created_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

/// `POST /admin/carrier_events/{id}/retry`: re-drives a failed (or stuck) event. As idempotent
/// as the first run: a processed event is left alone, and a second re-drive of a pending one
/// only enqueues a job the guards make a no-op.
pub async fn retry_carrier_event(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let log = carrier_events::Log::open(env)?;
    let row = log.load(id).await?.ok_or(EdgeError::NotFound)?;
    if row.processed_at.is_some() {
        return http::json(200, &json!({ "id": row.id, "status": "processed", "requeued": false }));
    }
    log.clear_failure(std::slice::from_ref(&row)).await?;
    crate::queues::enqueue(env, crate::queues::Job::carrier_event(&row.id)).await?;
    http::json(202, &json!({ "id": row.id, "status": "pending", "requeued": true }))
}

/// `POST /admin/carrier_events/retry?status=failed`: re-drives up to 100 failed events at once.
pub async fn retry_failed_carrier_events(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let state = EventState::from_name(http::param(&params, "status").unwrap_or("failed"));
    if state != Some(EventState::Failed) {
        return Err(EdgeError::invalid("status", "only failed events are re-driven in bulk"));
    }
    let log = carrier_events::Log::open(env)?;
    let mut rows = Vec::new();
    for listed in log.list(EventState::Failed, None, 100).await? {
        rows.extend(log.load(&listed.id).await?);
    }
    log.clear_failure(&rows).await?;
    let ids: Vec<String> = rows.into_iter().map(|r| r.id).collect();
    let jobs = ids.iter().map(|id| crate::queues::Job::carrier_event(id)).collect();
    crate::queues::enqueue_many(env, jobs).await?;
    http::json(202, &json!({ "requeued": ids.len(), "ids": ids }))
}

/// `POST /admin/event_shards/move` `{first, last, to, after?, pages?}`: moves virtual shards of
/// the dedupe log to another database, up to `pages` (default and most 20) pages of 100 rows per
/// call; call again with the answer's
/// `after` until it says `done` (docs/scaling.md, "Moving virtual shards").
pub async fn move_event_shards(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        first: u16,
        last: u16,
        to: String,
        #[serde(default)]
        after: i64,
        #[serde(default)]
        pages: Option<usize>,
    }
    auth::admin(&req, env)?;
    let body: Body = http::json_body(&mut req).await?;
    let pages = body.pages.unwrap_or(20);
    if !(1..=20).contains(&pages) {
        return Err(EdgeError::invalid("pages", "must be from 1 to 20"));
    }
    let log = carrier_events::Log::open(env)?;
    let rival = crate::faults::rival_move(env);
    let moved = log.move_shards(body.first, body.last, &body.to, body.after, pages, rival.as_deref()).await?;
    worker::console_log!("{}", json!({"admin": "move event shards", "move": &moved}));
    http::json(200, &moved)
}

/// `GET /admin/webhook_deliveries?status=failed|pending|succeeded&limit=&cursor=`: exhausted
/// (or refused) customer deliveries by default, newest first.
///
/// Paged by (`created_at`, `id`), which never change: `updated_at` moves on every attempt, so a
/// cursor on it would skip or repeat rows that were retried between two pages.
pub async fn list_failed_deliveries(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let status = match http::param(&params, "status") {
        None => deliveries::DeliveryStatus::Failed,
        Some(name) => deliveries::DeliveryStatus::from_name(name)
            .ok_or_else(|| EdgeError::invalid("status", "must be failed, pending or succeeded"))?,
    };
    let limit = http::limit(&params)?;
    let cursor = Cursor::from_params(&params)?;
    let mut rows = Vec::new();
    for scoped in routes::each(env)? {
        rows.extend(deliveries::list(&crate::store::database(&scoped)?, status, cursor.clone(), limit).await?);
    }
    let rows = newest_first(rows, limit, |d| (d.created_at, &d.id));
    let next = Cursor::after(&rows, limit, |d| (d.created_at, &d.id));
    let data = rows
        .iter()
        .map(|d| {
            json!({
                "id": d.id, "event_id": d.event_id, "endpoint_id": d.endpoint_id, "account_id": d.account_id,
                "attempts": d.attempts, "last_error": d.last_error,
                "created_at": d.created_at.to_rfc3339(), "updated_at": d.updated_at.to_rfc3339(),
            })
        })
        .collect();
    http::json(200, &page(data, next))
}

/// `POST /admin/webhook_deliveries/{id}/retry`: one more attempt of a failed delivery, now.
pub async fn retry_delivery(req: Request, env: &Env, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    // The delivery's id names no account: it is looked for in each account database.
    for scoped in routes::each(env)? {
        match deliveries::redrive(&crate::store::database(&scoped)?, id, now()).await? {
            Redrive::Pending => {
                crate::queues::deliver_written(&scoped, vec![id.to_owned()]).await;
                return http::json(202, &json!({ "id": id, "status": "pending" }));
            }
            Redrive::Missing => {}
            Redrive::NotFailed => {
                return Err(EdgeError::Conflict {
                    code: crate::error::Conflict::NotFailed,
                    message: "only a failed delivery is re-driven".into(),
                })
            }
        }
    }
    Err(EdgeError::NotFound)
}

/// `GET /admin/metrics`: the Prometheus text format (version 0.0.4) of what operators watch:
/// carrier events ingested, pending, parked and failed; customer deliveries created, pending
/// and failed; and the age of the oldest pending event and delivery.
pub async fn metrics(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let f = crate::store::metrics::figures(env).await?;
    let at = now().unix_millis();
    let age = |oldest: Option<Timestamp>| seconds(oldest.map_or(0, |t| at - t.unix_millis()));
    let ingested = f.events_ingested.unwrap_or(0);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, String)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{labels} {value}\n"));
        }
    };
    metric(
        "exactly_carrier_events_ingested_total",
        "counter",
        "Carrier events stored (first deliveries).",
        &[("", count(ingested))],
    );
    metric(
        "exactly_carrier_events",
        "gauge",
        "Carrier events by state (processed: stored and neither pending nor failed).",
        &[
            ("{state=\"pending\"}", count(f.events_pending)),
            ("{state=\"parked\"}", count(f.events_parked)),
            ("{state=\"failed\"}", count(f.events_failed)),
            ("{state=\"processed\"}", count(ingested - f.events_pending - f.events_failed)),
        ],
    );
    metric(
        "exactly_webhook_deliveries",
        "gauge",
        "Customer webhook deliveries by outcome (succeeded: created and neither pending nor failed).",
        &[
            ("{outcome=\"pending\"}", count(f.deliveries_pending)),
            ("{outcome=\"failed\"}", count(f.deliveries_failed)),
            (
                "{outcome=\"succeeded\"}",
                count(f.deliveries_created.unwrap_or(0) - f.deliveries_pending - f.deliveries_failed),
            ),
        ],
    );
    metric(
        "exactly_oldest_pending_event_age_seconds",
        "gauge",
        "Age of the oldest carrier event neither processed nor failed.",
        &[("", age(f.oldest_pending_event))],
    );
    metric(
        "exactly_oldest_pending_delivery_age_seconds",
        "gauge",
        "How long the most overdue pending delivery has been due (0 when none is due).",
        &[("", age(f.oldest_pending_delivery))],
    );
    metric(
        "exactly_isolate_wasm_memory_bytes",
        "gauge",
        "Linear memory of the wasm instance of the isolate that answered; it never shrinks, so steady growth under steady load is a leak.",
        &[("", crate::quotas::wasm_memory_bytes().to_string())],
    );
    let mut response = Response::ok(out).map_err(|e| EdgeError::platform("respond", e))?;
    response
        .headers_mut()
        .set("content-type", "text/plain; version=0.0.4")
        .map_err(|e| EdgeError::platform("header", e))?;
    Ok(response)
}

/// A count as the text format writes it: never below zero.
fn count(value: i64) -> String {
    value.max(0).to_string()
}

/// An age in milliseconds as seconds, to the millisecond and without trailing zeros (`12`,
/// `1.5`, `0.001`): the shortest text of the number, written without a float formatter.
fn seconds(millis: i64) -> String {
    let millis = millis.max(0);
    let text = format!("{}.{:03}", millis / 1000, millis % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// One page, newest first, from the pages each account database answered for the same cursor:
/// the `limit` newest of them by (`created_at`, `id`).
fn newest_first<T>(mut rows: Vec<T>, limit: u32, key: impl Fn(&T) -> (Timestamp, &String)) -> Vec<T> {
    rows.sort_by(|a, b| key(b).cmp(&key(a)));
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    rows
}

/// `GET /admin/metrics/series?hours=&bucket_minutes=`: what the operator's charts draw, as JSON
/// (the Prometheus text at `/admin/metrics` stays for scrapers): per bucket, attempts by outcome,
/// the success rate, time-to-webhook of first attempts, and the backlog at the bucket's end.
pub async fn metrics_series(req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let params = http::query(&req);
    let number = |name: &'static str, default: i64, max: i64| -> Result<i64, EdgeError> {
        match http::param(&params, name) {
            None => Ok(default),
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| EdgeError::invalid(name, format!("must be an integer from 1 to {max}"))),
        }
    };
    let hours = number("hours", 24, 168)?;
    let minutes = number("bucket_minutes", 60, 1440)?;
    let buckets = hours * 60 / minutes;
    if !(1..=288).contains(&buckets) {
        return Err(EdgeError::invalid("bucket_minutes", "must make 1 to 288 buckets of the hours asked"));
    }
    let width = minutes * 60_000;
    // Buckets end at the next whole bucket, so a chart asked twice draws the same edges.
    let to = (now().unix_millis() / width + 1) * width;
    let series = crate::store::metrics::series(env, to, width, buckets).await?;
    let at = |ms: i64| Timestamp::from_unix_millis(ms).to_rfc3339();
    let data: Vec<serde_json::Value> = series
        .iter()
        .map(|b| {
            let answered = b.attempts;
            json!({
                "start": at(b.start), "attempts": b.attempts, "succeeded": b.succeeded, "refused": b.refused,
                "no_answer": b.no_answer,
                "success_rate": (answered > 0).then(|| b.succeeded as f64 / answered as f64),
                "time_to_webhook_ms_avg": (b.first_attempts > 0).then(|| b.time_to_webhook_ms_sum / b.first_attempts),
                "time_to_webhook_ms_max": (b.first_attempts > 0).then_some(b.time_to_webhook_ms_max),
                "backlog": b.backlog,
            })
        })
        .collect();
    http::json(
        200,
        &json!({ "from": at(to - width * buckets), "to": at(to), "bucket_seconds": width / 1000, "data": data }),
    )
}

#[cfg(test)]
mod tests {
    use super::{count, seconds};

    /// The samples read exactly as the float's own shortest text would.
    #[test]
    fn samples_read_as_their_numbers() {
        let mut millis: Vec<i64> = (0..5_000).collect();
        millis.extend([9_999, 10_000, 10_010, 59_999, 86_400_000, 1_790_000_000_123, 4_102_444_800_000]);
        for ms in millis {
            assert_eq!(seconds(ms), format!("{}", ms as f64 / 1000.0), "{ms} ms");
        }
        assert_eq!(seconds(-5), "0");
        for n in [0_i64, 1, 42, 1_000_000, 9_007_199_254_740_991] {
            assert_eq!(count(n), format!("{}", n as f64));
        }
        assert_eq!(count(-3), "0");
    }
}
