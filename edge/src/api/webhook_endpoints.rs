//! `/v1/webhook_endpoints`: where an account's customer events are delivered.

use crate::api::auth::Ctx;
use exactly_core::filter::Filter;
use exactly_core::headers::CustomHeaders;
use exactly_core::webhook::{EventType, SigningSecret, EVENT_TYPES};
use serde::Deserialize;
use serde_json::json;
use worker::{D1Database, Request, Response};

use crate::api::http::{self as http, Cursor};
use crate::api::page;
use crate::config::Config;
use crate::error::{Conflict, EdgeError};
use crate::platform::{new_id, now};
use crate::store::deliveries;
use crate::store::deliveries::recoveries::{self, NewRecovery};
use crate::store::endpoints::{self, Endpoint, OnExhausted, Ordering};
use crate::store::AccountDb;
use exactly_core::Timestamp;

/// Checks `url` as `fetch` will parse it and returns the normalized form, which is what is
/// stored: the text checked here is the text every attempt sends to.
fn check_url(config: &Config, url: &str) -> Result<String, EdgeError> {
    let allow_private = config.allow_private_endpoints;
    crate::platform::endpoint_url(url, allow_private)
        .map(|parsed| parsed.as_str().to_owned())
        .map_err(|problem| EdgeError::invalid("url", problem.message()))
}

fn check_types(types: &[String]) -> Result<Vec<EventType>, EdgeError> {
    if types.is_empty() {
        return Err(EdgeError::invalid("event_types", "must list at least one event type"));
    }
    types
        .iter()
        .map(|name| {
            EventType::from_name(name).filter(|t| EVENT_TYPES.contains(&t.as_str())).ok_or_else(|| {
                EdgeError::invalid(
                    "event_types",
                    format!("unknown event type {name}; known: {}", EVENT_TYPES.join(", ")),
                )
            })
        })
        .collect()
}

/// The account's endpoint `id`; 404 for none (or another account's).
pub(crate) async fn find(db: &D1Database, account_id: &str, id: &str) -> Result<Endpoint, EdgeError> {
    endpoints::get(db, account_id, id).await?.ok_or(EdgeError::NotFound)
}

#[derive(Deserialize)]
struct NewEndpoint {
    url: Option<String>,
    event_types: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    rate_limit_per_second: Option<serde_json::Value>,
    max_in_flight: Option<serde_json::Value>,
    filter: Option<serde_json::Value>,
    headers: Option<serde_json::Value>,
    ordering: Option<serde_json::Value>,
    on_exhausted: Option<serde_json::Value>,
}

/// A field that is present, even as `null`, is `Some`: `null` clears, absent changes nothing.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// The most deliveries per second an endpoint may ask to be limited to.
const MAX_RATE_LIMIT: u64 = 1000;

/// Reads `rate_limit_per_second`: absent (`None`), `null` (`Some(None)`: no limit) or a whole
/// number from 1 to 1000.
fn rate_limit(value: Option<serde_json::Value>) -> Result<Option<Option<u32>>, EdgeError> {
    match value {
        None => Ok(None),
        Some(serde_json::Value::Null) => Ok(Some(None)),
        Some(v) => match v.as_u64().filter(|n| (1..=MAX_RATE_LIMIT).contains(n)) {
            Some(n) => Ok(Some(Some(n as u32))),
            None => Err(EdgeError::invalid("rate_limit_per_second", "must be a whole number from 1 to 1000, or null")),
        },
    }
}

/// Reads `filter`: absent (`None`), `null` or `""` (`Some(None)`: no filter) or a filter's text,
/// parsed here so a filter that does not parse is never stored (422 naming its position).
fn filter(value: Option<serde_json::Value>) -> Result<Option<Option<String>>, EdgeError> {
    match value {
        None => Ok(None),
        Some(serde_json::Value::Null) => Ok(Some(None)),
        Some(serde_json::Value::String(text)) if text.trim().is_empty() => Ok(Some(None)),
        Some(serde_json::Value::String(text)) => match Filter::parse(&text) {
            Ok(_) => Ok(Some(Some(text))),
            Err(e) => Err(EdgeError::invalid("filter", e.to_string())),
        },
        Some(_) => Err(EdgeError::invalid("filter", "must be a string (see docs/contract.md), or null")),
    }
}

/// Reads `headers`: absent (`None`), `null` (`Some` of none) or an object of name to string
/// value, checked by `core::headers`.
fn custom_headers(value: Option<serde_json::Value>) -> Result<Option<CustomHeaders>, EdgeError> {
    let object = match value {
        None => return Ok(None),
        Some(serde_json::Value::Null) => return Ok(Some(CustomHeaders::default())),
        Some(serde_json::Value::Object(object)) => object,
        Some(_) => return Err(EdgeError::invalid("headers", "must be an object of header name to value, or null")),
    };
    let mut pairs = Vec::with_capacity(object.len());
    for (name, value) in &object {
        let value = value.as_str().ok_or_else(|| EdgeError::invalid("headers", "every value must be a string"))?;
        pairs.push((name.as_str(), value));
    }
    CustomHeaders::new(pairs).map(Some).map_err(|e| EdgeError::invalid("headers", e.to_string()))
}

/// The most attempts in flight an endpoint may ask for.
const MAX_IN_FLIGHT: u64 = 50;

/// Reads `max_in_flight`: absent (`None`) or a whole number from 1 to 50.
fn max_in_flight(value: Option<serde_json::Value>) -> Result<Option<u32>, EdgeError> {
    value
        .map(|v| {
            v.as_u64()
                .filter(|n| (1..=MAX_IN_FLIGHT).contains(n))
                .map(|n| n as u32)
                .ok_or_else(|| EdgeError::invalid("max_in_flight", "must be a whole number from 1 to 50"))
        })
        .transpose()
}

/// Reads `ordering`: absent (`None`), `"none"` or `"resource"`.
fn ordering(value: Option<serde_json::Value>) -> Result<Option<Ordering>, EdgeError> {
    named(value, "ordering", Ordering::from_name, "must be \"none\" or \"resource\"")
}

/// Reads `on_exhausted`: absent (`None`), `"skip"` or `"hold"`.
fn on_exhausted(value: Option<serde_json::Value>) -> Result<Option<OnExhausted>, EdgeError> {
    named(value, "on_exhausted", OnExhausted::from_name, "must be \"skip\" or \"hold\"")
}

/// Reads field `field`, absent or one of the names `from_name` knows.
fn named<T>(
    value: Option<serde_json::Value>,
    field: &'static str,
    from_name: fn(&str) -> Option<T>,
    rule: &'static str,
) -> Result<Option<T>, EdgeError> {
    value.map(|v| v.as_str().and_then(from_name).ok_or_else(|| EdgeError::invalid(field, rule))).transpose()
}

/// `POST /v1/webhook_endpoints` `{url, event_types, rate_limit_per_second?, max_in_flight?,
/// filter?, headers?, ordering?, on_exhausted?}` -> the endpoint and its `whsec_` secret
/// (32 random bytes), shown here once.
pub async fn create(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let body: NewEndpoint = http::json_body(&mut req).await?;
    let url = check_url(ctx.config, &body.url.ok_or_else(|| EdgeError::invalid("url", "is required"))?)?;
    let types = check_types(&body.event_types.ok_or_else(|| EdgeError::invalid("event_types", "is required"))?)?;
    let rate = rate_limit(body.rate_limit_per_second)?.flatten();
    let most = max_in_flight(body.max_in_flight)?;
    let filter = filter(body.filter)?.flatten();
    let headers = custom_headers(body.headers)?.unwrap_or_default();
    let ordering = ordering(body.ordering)?.unwrap_or(Ordering::None);
    let on_exhausted = on_exhausted(body.on_exhausted)?.unwrap_or(OnExhausted::Skip);
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let id = new_id("ep")?;
    let created = now();
    let new = endpoints::New {
        id: &id,
        account_id: &account.id,
        url: &url,
        event_types: &types,
        secret: &secret,
        rate_limit: rate,
        max_in_flight: most,
        filter: filter.as_deref(),
        headers: &headers,
        ordering,
        on_exhausted,
    };
    if !endpoints::create(db, &new, created).await? {
        return Err(EdgeError::Conflict {
            code: Conflict::EndpointLimit,
            message: format!("the account holds {} endpoints: delete one first", endpoints::MAX_ENDPOINTS),
        });
    }
    let mut shown = find(db, &account.id, &id).await?.to_json(created);
    shown["secret"] = json!(secret);
    http::json(201, &shown)
}

/// `GET /v1/webhook_endpoints?limit=&cursor=`.
pub async fn list(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    // A portal session limited to some endpoints lists only those: the page and its cursor are
    // read among them, so neither names an endpoint it may not see.
    let reached = ctx.endpoints();
    let rows = endpoints::list(db, &account.id, reached.as_deref(), Cursor::from_params(&params)?, limit).await?;
    let next = Cursor::after(&rows, limit, |r| (r.created_at, &r.id));
    let at = now();
    http::json(200, &page(rows.iter().map(|e| e.to_json(at)).collect(), next))
}

/// `GET /v1/webhook_endpoints/{id}` (without the secret).
pub async fn get(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let endpoint = find(db, &account.id, id).await?;
    http::json(200, &shown(db, &endpoint).await?)
}

#[derive(Deserialize)]
struct Patch {
    url: Option<String>,
    event_types: Option<Vec<String>>,
    enabled: Option<bool>,
    paused: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    rate_limit_per_second: Option<serde_json::Value>,
    max_in_flight: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "present")]
    filter: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "present")]
    headers: Option<serde_json::Value>,
    ordering: Option<serde_json::Value>,
    on_exhausted: Option<serde_json::Value>,
}

/// `PATCH /v1/webhook_endpoints/{id}` `{url?, event_types?, enabled?, paused?, rate_limit_per_second?,
/// max_in_flight?, filter?, headers?, ordering?, on_exhausted?}` (`null` clears the nullable ones
/// among `rate_limit_per_second`, `filter` and `headers`). Enabling again clears the failure count
/// and the reason it was disabled. A paused or disabled endpoint holds its deliveries; resuming
/// or enabling it delivers everything held, oldest first. A change of `ordering` or
/// `on_exhausted` puts what waited for an earlier event of its resource back into the line, to be
/// decided again under the new rule.
pub async fn update(mut req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let patch: Patch = http::json_body(&mut req).await?;
    // A portal session limited to some endpoints may pause, resume, enable and pace them; it
    // never points them elsewhere, widens what they receive or changes the order they keep
    // (docs/contract.md §5).
    let reshapes = patch.url.is_some()
        || patch.event_types.is_some()
        || patch.filter.is_some()
        || patch.headers.is_some()
        || patch.ordering.is_some()
        || patch.on_exhausted.is_some();
    if reshapes && ctx.endpoints().is_some() {
        return Err(EdgeError::NotPermitted(exactly_core::access::Refusal::Reshape));
    }
    let current = find(db, &account.id, id).await?;
    // An unchanged URL is checked again too: a row written before a rule cannot keep it.
    let url = check_url(ctx.config, &patch.url.unwrap_or(current.url))?;
    let types = match patch.event_types {
        Some(types) => check_types(&types)?,
        None => current.event_types,
    };
    let filter = filter(patch.filter)?;
    let headers = custom_headers(patch.headers)?;
    let change = endpoints::Update {
        url: &url,
        event_types: &types,
        enabled: patch.enabled,
        paused: patch.paused,
        rate_limit: rate_limit(patch.rate_limit_per_second)?,
        max_in_flight: max_in_flight(patch.max_in_flight)?,
        filter: filter.as_ref().map(Option::as_deref),
        headers: headers.as_ref(),
        ordering: ordering(patch.ordering)?,
        on_exhausted: on_exhausted(patch.on_exhausted)?,
    };
    endpoints::update(db, &account.id, id, &change, now()).await?;
    let after = find(db, &account.id, id).await?;
    // Whenever either is given, not only when it changed: a PATCH asked again after an answer
    // that was lost puts back what the first left waiting.
    let reordered = change.ordering.is_some() || change.on_exhausted.is_some();
    if reordered && deliveries::unblock(db, id, now()).await? > 0 {
        crate::queues::wake_later(ctx.account_db()?, id, 0).await?;
    }
    if after.enabled && !after.paused && (patch.enabled == Some(true) || patch.paused == Some(false)) {
        release(ctx.account_db()?, id).await?;
    }
    shown(db, &after).await.and_then(|v| http::json(200, &v))
}

/// Delivers what the endpoint held: everything goes into its line, due now, and the line is
/// woken: oldest first, as many at once as the endpoint's in-flight limit allows (the sweeper
/// wakes it again if this wake is lost).
async fn release(account: &AccountDb, id: &str) -> Result<(), EdgeError> {
    let db = account.db();
    if deliveries::release(db, id, now()).await? > 0 {
        crate::queues::wake_later(account, id, 0).await?;
    }
    Ok(())
}

/// The endpoint as the API shows it, with `held_count` (the deliveries it holds: every pending
/// one while it is paused or disabled, else those waiting in its line for its circuit or an
/// in-flight place) and `in_flight` (its attempts in flight).
async fn shown(db: &D1Database, endpoint: &Endpoint) -> Result<serde_json::Value, EdgeError> {
    let at = now();
    let mut v = endpoint.to_json(at);
    let active = endpoint.enabled && !endpoint.paused;
    let load = deliveries::load(db, &endpoint.id, at).await?;
    let held = if active {
        u64::try_from(load.waiting).unwrap_or(0)
    } else {
        deliveries::pending_count(db, &endpoint.id).await?
    };
    v["held_count"] = json!(held);
    v["in_flight"] = json!(load.in_flight);
    Ok(v)
}

/// `DELETE /v1/webhook_endpoints/{id}`: 204. Its pending deliveries fail at their next attempt.
pub async fn delete(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    if !endpoints::delete(db, &account.id, id).await? {
        return Err(EdgeError::NotFound);
    }
    Ok(Response::empty().map_err(|e| EdgeError::platform("respond", e))?.with_status(204))
}

/// How long the previous secret keeps signing after a rotation.
const ROTATION_WINDOW_MILLIS: i64 = 24 * 3600 * 1000;

/// `POST /v1/webhook_endpoints/{id}/rotate_secret` -> `{secret}`: a new `whsec_` secret. For 24
/// hours every delivery carries a signature under each of the two secrets (space-separated in
/// `webhook-signature`, as Standard Webhooks allows), so receivers switch without downtime.
pub async fn rotate_secret(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    find(db, &account.id, id).await?;
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key).map_err(|e| EdgeError::platform("random", e))?;
    let secret = SigningSecret::from_bytes(&key).to_whsec();
    let at = now();
    let previous_until = exactly_core::Timestamp::from_unix_millis(at.unix_millis() + ROTATION_WINDOW_MILLIS);
    endpoints::rotate_secret(db, &account.id, id, &secret, previous_until, at).await?;
    let mut shown = find(db, &account.id, id).await?.to_json(at);
    shown["secret"] = json!(secret);
    http::json(200, &shown)
}

#[derive(Deserialize)]
struct Recover {
    since: Option<String>,
    until: Option<String>,
}

/// The widest window a recovery covers.
const MAX_RECOVER_MILLIS: i64 = 30 * 24 * 3600 * 1000;

/// `POST /v1/webhook_endpoints/{id}/recover` `{since, until?}` -> 202, the recovery: delivers
/// again every event of the window this endpoint is subscribed to and has not received
/// successfully (nor has pending), oldest first, in pages that run as jobs
/// (`work::recover`); `GET .../recoveries/{recovery_id}` shows how far it got. Running it twice
/// queues nothing twice.
pub async fn recover(mut req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let db = ctx.db()?;
    let account = ctx.account()?;
    let body: Recover = http::json_body(&mut req).await?;
    // Another account's endpoint is 404 whatever the body says.
    let endpoint = find(db, &account.id, id).await?;
    let time = |field: &'static str, text: Option<String>| {
        text.map(|t| Timestamp::parse_rfc3339(&t).ok_or_else(|| EdgeError::invalid(field, "must be an RFC 3339 time")))
            .transpose()
    };
    let since = time("since", body.since)?.ok_or_else(|| EdgeError::invalid("since", "is required"))?;
    let at = now();
    let until = time("until", body.until)?.unwrap_or(at);
    if until <= since {
        return Err(EdgeError::invalid("until", "must be after since"));
    }
    if until.unix_millis() - since.unix_millis() > MAX_RECOVER_MILLIS {
        return Err(EdgeError::invalid("since", "the window is at most 30 days"));
    }
    let recovery_id = new_id("rcv")?;
    let new = NewRecovery { id: &recovery_id, account_id: &account.id, endpoint_id: &endpoint.id, since, until, at };
    recoveries::start(db, &new).await?;
    crate::queues::enqueue(env, crate::queues::Job::recover(ctx.account_db()?, &recovery_id)).await?;
    let recovery = recoveries::find(db, &endpoint.id, &recovery_id).await?.ok_or(EdgeError::NotFound)?;
    http::json(202, &recovery.to_json())
}

/// `GET /v1/webhook_endpoints/{id}/recoveries/{recovery_id}`: a recovery and how far it got.
pub async fn recovery(_req: Request, ctx: &Ctx<'_>, id: &str, recovery_id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let endpoint = find(db, &account.id, id).await?;
    let recovery = recoveries::find(db, &endpoint.id, recovery_id).await?.ok_or(EdgeError::NotFound)?;
    http::json(200, &recovery.to_json())
}

#[derive(Deserialize, Default)]
struct TestSend {
    event_type: Option<String>,
}

/// `POST /v1/webhook_endpoints/{id}/test` `{event_type?}` -> 202: a test event to this endpoint
/// only, signed like any delivery and marked `"test": true`: `endpoint.test`, or the catalog's
/// example of `event_type` (any type an endpoint may subscribe to, subscribed or not).
pub async fn test(mut req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let db = ctx.db()?;
    let account = ctx.account()?;
    let body: TestSend = http::optional_json_body(&mut req).await?;
    let event_type = match body.event_type {
        None => EventType::EndpointTest,
        Some(name) => EventType::from_name(&name)
            .filter(|t| EventType::SUBSCRIBABLE.contains(t) || *t == EventType::EndpointTest)
            .ok_or_else(|| {
                EdgeError::invalid("event_type", format!("unknown event type {name}; see GET /v1/event_types"))
            })?,
    };
    let endpoint = find(db, &account.id, id).await?;
    let test = crate::store::outbox::TestSend { account_id: &account.id, endpoint_id: &endpoint.id, event_type };
    let (event, delivery) = crate::store::outbox::test_event(db, &test, now()).await?;
    if endpoint.enabled && !endpoint.paused {
        crate::queues::deliver_written(ctx.account_db()?, vec![delivery.clone()]).await;
    }
    http::json(202, &json!({ "event_id": event.id, "delivery_id": delivery }))
}
