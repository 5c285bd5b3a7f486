//! The **exactly** Cloudflare Worker: the IO around `exactly-core`.
//!
//! This file holds the entry points (`fetch`, `queue`, `scheduled`) and the one route table
//! that drives dispatch. Everything else lives in a wing (docs/architecture.md draws the map):
//! - [`api`]: request handlers: parse, authorize, call the store or the work, answer. No SQL.
//! - [`work`]: queue consumers and the cron's sweep: process, calls, dispatch, deliver, sweep;
//!   `work::outcome`: how a job ended, and the one place that acks or retries its message.
//! - [`store`]: every SQL statement, one file per table or aggregate, the guard in the `WHERE`.
//! - [`carrier`]: one file per carrier REST API.
//! - [`call_object`]: the per-call Durable Object running the call machine.
//! - Plumbing every wing may use: [`error`] (the one error type, mapped to HTTP), [`queues`] (the producers), [`config`] (with the product's timings and policies), [`bindings`], [`platform`] (time and
//!   randomness), [`quotas`] (Cloudflare's per-call limits, guarded in the test build), [`faults`]
//!   (test-only fault switches).
//!
//! # Layout
//!
//! Where each concept lives: one room in each wing that has something to do with it, and its
//! rules in `exactly-core` (`-` where the wing has nothing to do with it).
//!
//! | concept | api | work | store | core |
//! |---|---|---|---|---|
//! | message | `api::messages` | `work::process` (in), `work::dispatch` (out), `work::media` | `store::messages` | `message`, `segments` |
//! | call | `api::calls` | `work::calls`, [`call_object`] | `store::calls`, `store::call_storage` | `call_machine`, `call` |
//! | delivery | `api::delivery_log`, `api::admin::deliveries` | `work::deliver` | `store::deliveries` | `webhook`, `backoff` |
//! | endpoint | `api::webhook_endpoints` | `work::deliver::gate` | `store::endpoints` | `endpoint` |
//! | account | `api::admin::accounts` | - | `store::accounts`, `store::routes`, `store::AccountDb` | `shard` |
//! | key | `api::keys`, `api::auth` | - | `store::access` | `access` |
//! | portal session | `api::portal` | - | `store::access` | `access` |
//! | filter | `api::webhook_endpoints` | `work::deliver::filtering` | `store::endpoints` | `filter` |
//! | idempotency | `api::idempotency` | - | `store::idempotency` | - |
//! | erasure | `api::erasures` | `work::erase` | `store::erasures` | `erasure` |
//! | limit | `api::limits` (rate limits) | - | - | - |
//! | breaker | - | `work::deliver::gate` | `store::endpoints::circuit` | `breaker` |
//! | audit | `api::admin::audit` | `work::audit` | `store::audit` | `message` (its lattice) |
//!
//! Cloudflare's per-call limits (queries, subrequests, batch sizes) are plumbing: [`quotas`].

use worker::{event, Context, Env, MessageBatch, Request, Response, ScheduleContext, ScheduledEvent};

pub mod api;
pub mod bindings;
pub mod call_object;
pub mod carrier;
pub mod config;
pub mod error;
pub mod faults;
pub mod platform;
pub mod queues;
pub mod quotas;
pub mod store;
#[cfg(feature = "fault-injection")]
pub mod testing;
pub mod work;

use error::EdgeError;
use exactly_core::Provider;

/// What a route runs. Each variant is one handler; [`dispatch`] matches them exhaustively, so a
/// route cannot exist without its handler, nor a handler without its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    Webhook(Provider),
    CreateAccount,
    ListAccounts,
    RotateAccountKey,
    CreateNumber,
    CreateErasure,
    GetErasure,
    ListCarrierEvents,
    RetryFailedCarrierEvents,
    RetryCarrierEvent,
    MoveEventShards,
    ListFailedDeliveries,
    Metrics,
    RetryDelivery,
    CreateMessage,
    ListMessages,
    GetMessage,
    MessageHistory,
    CancelMessage,
    MessageMedia,
    ServeMedia,
    ListCalls,
    GetCall,
    GetUsage,
    CreateEndpoint,
    ListEndpoints,
    GetEndpoint,
    UpdateEndpoint,
    DeleteEndpoint,
    RotateEndpointSecret,
    RecoverEndpoint,
    GetRecovery,
    TestEndpoint,
    EndpointAttempts,
    ListEvents,
    EventTypes,
    GetEvent,
    ReplayEvent,
    RetryFailedDeliveries,
    GetDeliveryRetry,
    ListKeys,
    CreateKey,
    RevokeKey,
    AdminListKeys,
    AdminCreateKey,
    AdminRevokeKey,
    AdminUpdateAccount,
    GetAccount,
    UpdateAccount,
    CreatePortalSession,
    ListPortalSessions,
    RevokePortalSession,
    Portal,
    MetricsSeries,
    Audit,
    OpenApi,
    Health,
    Home,
}

/// Declares the route table once: [`ROUTES`] (method and path pattern, for docs and tests) and
/// the handlers in the same order.
macro_rules! routes {
    ($(($method:literal, $path:literal) => $handler:expr,)*) => {
        /// Every route: (method, path pattern). `{id}` matches one path segment.
        pub const ROUTES: &[(&str, &str)] = &[$(($method, $path)),*];
        const HANDLERS: &[Handler] = &[$($handler),*];
    };
}

routes! {
    ("POST", "/webhooks/telnyx") => Handler::Webhook(Provider::Telnyx),
    ("POST", "/webhooks/twilio") => Handler::Webhook(Provider::Twilio),
    ("POST", "/webhooks/plivo") => Handler::Webhook(Provider::Plivo),
    ("POST", "/admin/accounts") => Handler::CreateAccount,
    ("GET", "/admin/accounts") => Handler::ListAccounts,
    ("POST", "/admin/accounts/{id}/rotate_key") => Handler::RotateAccountKey,
    ("POST", "/admin/numbers") => Handler::CreateNumber,
    ("POST", "/admin/erasures") => Handler::CreateErasure,
    ("GET", "/admin/erasures/{id}") => Handler::GetErasure,
    ("GET", "/admin/carrier_events") => Handler::ListCarrierEvents,
    ("POST", "/admin/carrier_events/{id}/retry") => Handler::RetryCarrierEvent,
    ("POST", "/admin/carrier_events/retry") => Handler::RetryFailedCarrierEvents,
    ("POST", "/admin/event_shards/move") => Handler::MoveEventShards,
    ("GET", "/admin/webhook_deliveries") => Handler::ListFailedDeliveries,
    ("GET", "/admin/metrics") => Handler::Metrics,
    ("POST", "/admin/webhook_deliveries/{id}/retry") => Handler::RetryDelivery,
    ("POST", "/v1/messages") => Handler::CreateMessage,
    ("GET", "/v1/messages") => Handler::ListMessages,
    ("GET", "/v1/messages/{id}") => Handler::GetMessage,
    ("GET", "/v1/messages/{id}/history") => Handler::MessageHistory,
    ("POST", "/v1/messages/{id}/cancel") => Handler::CancelMessage,
    ("GET", "/v1/messages/{id}/media/{position}") => Handler::MessageMedia,
    ("GET", "/v1/media/{id}/{position}") => Handler::ServeMedia,
    ("GET", "/v1/calls") => Handler::ListCalls,
    ("GET", "/v1/calls/{id}") => Handler::GetCall,
    ("GET", "/v1/usage") => Handler::GetUsage,
    ("POST", "/v1/webhook_endpoints") => Handler::CreateEndpoint,
    ("GET", "/v1/webhook_endpoints") => Handler::ListEndpoints,
    ("GET", "/v1/webhook_endpoints/{id}") => Handler::GetEndpoint,
    ("PATCH", "/v1/webhook_endpoints/{id}") => Handler::UpdateEndpoint,
    ("DELETE", "/v1/webhook_endpoints/{id}") => Handler::DeleteEndpoint,
    ("POST", "/v1/webhook_endpoints/{id}/rotate_secret") => Handler::RotateEndpointSecret,
    ("POST", "/v1/webhook_endpoints/{id}/recover") => Handler::RecoverEndpoint,
    ("GET", "/v1/webhook_endpoints/{id}/recoveries/{recovery_id}") => Handler::GetRecovery,
    ("POST", "/v1/webhook_endpoints/{id}/test") => Handler::TestEndpoint,
    ("GET", "/v1/webhook_endpoints/{id}/attempts") => Handler::EndpointAttempts,
    ("GET", "/v1/events") => Handler::ListEvents,
    ("GET", "/v1/event_types") => Handler::EventTypes,
    ("GET", "/v1/events/{id}") => Handler::GetEvent,
    ("POST", "/v1/events/{id}/replay") => Handler::ReplayEvent,
    ("POST", "/v1/webhook_endpoints/{id}/retries") => Handler::RetryFailedDeliveries,
    ("GET", "/v1/webhook_endpoints/{id}/retries/{retry_id}") => Handler::GetDeliveryRetry,
    ("GET", "/v1/api_keys") => Handler::ListKeys,
    ("POST", "/v1/api_keys") => Handler::CreateKey,
    ("DELETE", "/v1/api_keys/{id}") => Handler::RevokeKey,
    ("GET", "/admin/accounts/{id}/keys") => Handler::AdminListKeys,
    ("POST", "/admin/accounts/{id}/keys") => Handler::AdminCreateKey,
    ("DELETE", "/admin/accounts/{id}/keys/{key_id}") => Handler::AdminRevokeKey,
    ("PATCH", "/admin/accounts/{id}") => Handler::AdminUpdateAccount,
    ("GET", "/admin/metrics/series") => Handler::MetricsSeries,
    ("GET", "/admin/audit") => Handler::Audit,
    ("GET", "/v1/account") => Handler::GetAccount,
    ("PATCH", "/v1/account") => Handler::UpdateAccount,
    ("POST", "/v1/portal_sessions") => Handler::CreatePortalSession,
    ("GET", "/v1/portal_sessions") => Handler::ListPortalSessions,
    ("DELETE", "/v1/portal_sessions/{id}") => Handler::RevokePortalSession,
    ("GET", "/portal/{id}") => Handler::Portal,
    ("GET", "/openapi.json") => Handler::OpenApi,
    ("GET", "/healthz") => Handler::Health,
    ("GET", "/") => Handler::Home,
}

/// A route matched: its handler and the segments its wildcards took (`{id}`, then
/// `{position}`), empty where the pattern has none.
struct Matched<'a> {
    handler: Handler,
    area: Area,
    id: &'a str,
    position: &'a str,
}

/// One route of the table with its pattern split into segments: [`ROUTES`] is read once per
/// isolate, not on every request.
struct Pattern {
    method: &'static str,
    parts: Vec<&'static str>,
    wildcards: usize,
    handler: Handler,
    area: Area,
}

/// Which part of the API a route belongs to, read from its pattern once per isolate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Area {
    /// `/admin/...`: the operator's, with the admin token.
    Admin,
    /// `/v1/...`: an account's, with its key or a portal session.
    V1,
    /// Pages, the document, health and the carriers' webhooks.
    Other,
}

impl Area {
    fn from_pattern(pattern: &str) -> Self {
        match pattern.split('/').nth(1) {
            Some("admin") => Area::Admin,
            Some("v1") => Area::V1,
            _ => Area::Other,
        }
    }
}

thread_local! {
    static PATTERNS: Vec<Pattern> = ROUTES
        .iter()
        .zip(HANDLERS)
        .map(|(&(method, pattern), &handler)| {
            let parts: Vec<&'static str> = pattern.trim_matches('/').split('/').collect();
            let wildcards = parts.iter().filter(|p| p.starts_with('{')).count();
            Pattern { method, parts, wildcards, handler, area: Area::from_pattern(pattern) }
        })
        .collect();
}

/// Finds the route for `method` and the path's segments. `Err(Some(allow))`: the path exists
/// for other methods only, `allow` (405, whose `Allow` header names them); `Err(None)`: no such
/// path (404). A literal segment beats `{id}`, so `/admin/carrier_events/retry` is not read as a
/// retry of the event `retry`.
fn find<'a>(method: &str, segments: &[&'a str]) -> Result<Matched<'a>, Option<String>> {
    PATTERNS.with(|patterns| {
        let fits = |pattern: &&Pattern| {
            let parts = &pattern.parts;
            parts.len() == segments.len() && parts.iter().zip(segments).all(|(p, s)| p.starts_with('{') || p == s)
        };
        let mut best: Option<(usize, Matched<'a>)> = None;
        for pattern in patterns.iter().filter(fits).filter(|p| p.method == method) {
            let parts = &pattern.parts;
            let mut taken = parts.iter().zip(segments).filter(|(p, _)| p.starts_with('{')).map(|(_, s)| *s);
            let (id, position) = (taken.next().unwrap_or(""), taken.next().unwrap_or(""));
            if best.as_ref().is_none_or(|(w, _)| pattern.wildcards < *w) {
                let (handler, area) = (pattern.handler, pattern.area);
                best = Some((pattern.wildcards, Matched { handler, area, id, position }));
            }
        }
        // The path's methods are gathered only for a 405, never on a route's way in.
        best.map(|(_, m)| m).ok_or_else(|| {
            let allow: std::collections::BTreeSet<&str> = patterns.iter().filter(fits).map(|p| p.method).collect();
            (!allow.is_empty()).then(|| allow.into_iter().collect::<Vec<_>>().join(", "))
        })
    })
}

/// The path of a URL the runtime serialized: from the first `/` after the host to the query.
fn path_of(url: &str) -> &str {
    match exactly_core::form::Url::parse(url) {
        Some(url) if !url.path.is_empty() => url.path,
        _ => "/",
    }
}

async fn route(req: web_sys::Request, method: &str, path: &str, env: &Env) -> Result<web_sys::Response, EdgeError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    #[cfg(feature = "fault-injection")]
    if method == "POST" && segments.first() == Some(&"__e2e") {
        return raw(testing::e2e::route(req.into(), env, &segments[1..]).await?);
    }
    let matched = match find(method, &segments) {
        Ok(m) => m,
        Err(Some(allow)) => return Err(EdgeError::MethodNotAllowed { allow }),
        Err(None) => return Err(EdgeError::NoRoute),
    };
    if matched.handler == Handler::Health {
        return raw(api::health::check(env).await?);
    }
    // Where things are, whatever the configuration says.
    if matched.handler == Handler::Home {
        return raw(api::home::page()?);
    }
    // Validated once per isolate; until it is valid, every route answers 503 naming the
    // variable. Read here once, and handed down.
    let config = &config::get(env)?;
    if let Handler::Webhook(provider) = matched.handler {
        // The carriers' route reads the runtime's request as it is: no conversion into the worker
        // crate's type, which would also read `request.cf` and copy the URL, method and headers.
        return api::ingest::webhook(provider, &req, env, config).await;
    }
    let bindings = Bindings { env, config };
    if matched.handler == Handler::OpenApi {
        return served(req, method, matched, bindings).await;
    }
    // Every `/admin` and `/v1` request counts against its caller's rate limit, before it reads
    // anything (the carriers' webhooks above never do); one whose credential fails counts
    // against its address too (docs/contract.md §5, "Rate limits").
    let (address, at) = (api::limits::address(&req), platform::now());
    api::limits::admit(&req, &address, at)?;
    api::limits::count(&req, env, matched.area == Area::Admin, at).await?;
    match served(req, method, matched, bindings).await {
        Err(refused @ EdgeError::Unauthorized(_)) => {
            Err(api::limits::failed(env, &address, platform::now(), refused).await)
        }
        other => other,
    }
}

/// The worker's bindings and its configuration, as a request is served with them.
#[derive(Clone, Copy)]
struct Bindings<'a> {
    env: &'a Env,
    config: &'a std::rc::Rc<config::Config>,
}

/// Serves a matched `/admin`, `/v1` or page route past its rate limit.
async fn served(
    req: web_sys::Request,
    method: &str,
    matched: Matched<'_>,
    Bindings { env, config }: Bindings<'_>,
) -> Result<web_sys::Response, EdgeError> {
    if matched.area != Area::V1 {
        let req: Request = req.into();
        let ctx = api::auth::Ctx { env, config, caller: None, database: None };
        if matched.area == Area::Admin && api::idempotency::requested(method, &req) {
            api::auth::admin(&req, config)?;
            let db = store::d1(env, bindings::DB)?;
            return raw(api::idempotency::once(req, config, &db, "admin", |req| dispatch(matched, req, &ctx)).await?);
        }
        return raw(dispatch(matched, req, &ctx).await?);
    }
    // A signed media link is its own credential: no key, no account.
    if matched.handler == Handler::ServeMedia {
        return raw(dispatch(matched, req.into(), &api::auth::Ctx { env, config, caller: None, database: None }).await?);
    }
    // The customer API runs in a D1 session started from the bookmark the client sent back,
    // and answers with the session's latest, so the client reads its own writes.
    // Both in the database of the caller's account (docs/scaling.md, "Accounts across
    // databases"), once the caller's key or portal session allows the route (docs/contract.md
    // §5, "Keys, scopes and portal sessions").
    let bookmark = api::http::bookmark(&req)?;
    let caller = api::auth::caller(&req, env, config).await?;
    api::limits::count_account(env, &caller.account_id, caller.key_id.is_none(), platform::now()).await?;
    caller.access.permits(&access_route(&matched, method)).map_err(EdgeError::NotPermitted)?;
    let writes = worker::Method::from(method.to_owned()) != worker::Method::Get;
    let (account, session) =
        store::AccountDb::named(env, config, caller.binding.as_deref())?.in_session(bookmark.as_deref(), writes)?;
    let req: Request = req.into();
    let ctx = api::auth::Ctx { env, config, caller: Some(&caller), database: Some(&account) };
    let mut response = if api::idempotency::requested(method, &req) {
        api::idempotency::once(req, config, account.db(), &caller.account_id, |req| dispatch(matched, req, &ctx))
            .await?
    } else {
        dispatch(matched, req, &ctx).await?
    };
    if let Some(latest) = session.and_then(|s| s.bookmark()) {
        response.headers_mut().set(api::http::BOOKMARK, &latest).map_err(|e| EdgeError::platform("header", e))?;
    }
    raw(response)
}

/// A `/v1` route as access control sees it (docs/contract.md §5, "Keys, scopes and portal
/// sessions"): its area, whether it writes, and the endpoint it acts on.
fn access_route<'a>(matched: &Matched<'a>, method: &str) -> exactly_core::access::Route<'a> {
    use exactly_core::access::{Area, Route};
    let write = worker::Method::from(method.to_owned()) != worker::Method::Get;
    let route = |area, endpoint, account_wide| Route { area, write, endpoint, account_wide };
    match matched.handler {
        Handler::CreateMessage
        | Handler::ListMessages
        | Handler::GetMessage
        | Handler::MessageHistory
        | Handler::CancelMessage
        | Handler::MessageMedia
        | Handler::ServeMedia
        | Handler::ListCalls
        | Handler::GetCall
        | Handler::GetUsage => route(Area::Messaging, None, false),
        Handler::GetEndpoint
        | Handler::UpdateEndpoint
        | Handler::DeleteEndpoint
        | Handler::RotateEndpointSecret
        | Handler::RecoverEndpoint
        | Handler::GetRecovery
        | Handler::TestEndpoint
        | Handler::EndpointAttempts
        | Handler::RetryFailedDeliveries
        | Handler::GetDeliveryRetry => route(Area::Webhooks, Some(matched.id), false),
        // A listing of endpoints shows only those the caller reaches; every caller may ask who
        // it is.
        Handler::ListEndpoints | Handler::EventTypes | Handler::GetAccount => route(Area::Webhooks, None, false),
        Handler::CreateEndpoint | Handler::ListEvents | Handler::GetEvent | Handler::ReplayEvent => {
            route(Area::Webhooks, None, true)
        }
        Handler::ListKeys
        | Handler::CreateKey
        | Handler::RevokeKey
        | Handler::UpdateAccount
        | Handler::CreatePortalSession
        | Handler::ListPortalSessions
        | Handler::RevokePortalSession => route(Area::Keys, None, true),
        // Not `/v1`: the operator's token, a carrier's signature or nothing is their credential.
        Handler::Webhook(_)
        | Handler::CreateAccount
        | Handler::ListAccounts
        | Handler::RotateAccountKey
        | Handler::CreateNumber
        | Handler::CreateErasure
        | Handler::GetErasure
        | Handler::ListCarrierEvents
        | Handler::RetryFailedCarrierEvents
        | Handler::RetryCarrierEvent
        | Handler::MoveEventShards
        | Handler::ListFailedDeliveries
        | Handler::Metrics
        | Handler::MetricsSeries
        | Handler::Audit
        | Handler::RetryDelivery
        | Handler::AdminListKeys
        | Handler::AdminCreateKey
        | Handler::AdminRevokeKey
        | Handler::AdminUpdateAccount
        | Handler::Portal
        | Handler::OpenApi
        | Handler::Health
        | Handler::Home => route(Area::Keys, None, true),
    }
}

/// The runtime's response for one of the worker crate's.
fn raw(response: Response) -> Result<web_sys::Response, EdgeError> {
    worker::IntoResponse::into_raw(response).map_err(|e| {
        let e: Box<dyn std::error::Error> = e.into();
        EdgeError::platform("respond", e)
    })
}

async fn dispatch(matched: Matched<'_>, req: Request, ctx: &api::auth::Ctx<'_>) -> Result<Response, EdgeError> {
    use api::{admin, calls, events, keys, media, messages, usage, webhook_endpoints as endpoints};
    let Matched { handler, id, position, .. } = matched;
    match handler {
        // `route` serves the carriers on the runtime's request before converting it, and never
        // reaches here with them: a second call of the ingest handler would be a second copy of
        // it in the bundle.
        Handler::Webhook(_) => Err(EdgeError::NoRoute),
        Handler::CreateAccount => admin::accounts::create_account(req, ctx).await,
        Handler::ListAccounts => admin::accounts::list_accounts(req, ctx).await,
        Handler::RotateAccountKey => admin::accounts::rotate_account_key(req, ctx, id).await,
        Handler::CreateNumber => admin::numbers::create_number(req, ctx).await,
        Handler::CreateErasure => api::erasures::create(req, ctx).await,
        Handler::GetErasure => api::erasures::get(req, ctx, id).await,
        Handler::ListCarrierEvents => admin::carrier_events::list_carrier_events(req, ctx).await,
        Handler::RetryFailedCarrierEvents => admin::carrier_events::retry_failed_carrier_events(req, ctx).await,
        Handler::MoveEventShards => admin::shards::move_event_shards(req, ctx).await,
        Handler::RetryCarrierEvent => admin::carrier_events::retry_carrier_event(req, ctx, id).await,
        Handler::ListFailedDeliveries => admin::deliveries::list_failed_deliveries(req, ctx).await,
        Handler::Metrics => admin::metrics::metrics(req, ctx).await,
        Handler::RetryDelivery => admin::deliveries::retry_delivery(req, ctx, id).await,
        Handler::CreateMessage => messages::create(req, ctx).await,
        Handler::ListMessages => messages::list(req, ctx).await,
        Handler::GetMessage => messages::get(req, ctx, id).await,
        Handler::MessageHistory => messages::history(req, ctx, id).await,
        Handler::CancelMessage => messages::cancel(req, ctx, id).await,
        Handler::MessageMedia => media::redirect(req, ctx, id, position).await,
        Handler::ServeMedia => media::serve(req, ctx, id, position).await,
        Handler::ListCalls => calls::list(req, ctx).await,
        Handler::GetCall => calls::get(req, ctx, id).await,
        Handler::GetUsage => usage::get(req, ctx).await,
        Handler::CreateEndpoint => endpoints::create(req, ctx).await,
        Handler::ListEndpoints => endpoints::list(req, ctx).await,
        Handler::GetEndpoint => endpoints::get(req, ctx, id).await,
        Handler::UpdateEndpoint => endpoints::update(req, ctx, id).await,
        Handler::DeleteEndpoint => endpoints::delete(req, ctx, id).await,
        Handler::RotateEndpointSecret => endpoints::rotate_secret(req, ctx, id).await,
        Handler::RecoverEndpoint => endpoints::recover(req, ctx, id).await,
        Handler::GetRecovery => endpoints::recovery(req, ctx, id, position).await,
        Handler::TestEndpoint => endpoints::test(req, ctx, id).await,
        Handler::EndpointAttempts => api::delivery_log::attempts(req, ctx, id).await,
        Handler::ListEvents => events::list(req, ctx).await,
        Handler::EventTypes => events::types(req, ctx).await,
        Handler::GetEvent => events::get(req, ctx, id).await,
        Handler::ReplayEvent => events::replay(req, ctx, id).await,
        Handler::RetryFailedDeliveries => api::delivery_log::create(req, ctx, id).await,
        Handler::GetDeliveryRetry => api::delivery_log::get(req, ctx, id, position).await,
        Handler::ListKeys => keys::list(req, ctx).await,
        Handler::CreateKey => keys::create(req, ctx).await,
        Handler::RevokeKey => keys::revoke(req, ctx, id).await,
        Handler::AdminListKeys => keys::admin_list(req, ctx, id).await,
        Handler::AdminCreateKey => keys::admin_create(req, ctx, id).await,
        Handler::AdminRevokeKey => keys::admin_revoke(req, ctx, id, position).await,
        Handler::AdminUpdateAccount => api::portal::admin_update_account(req, ctx, id).await,
        Handler::GetAccount => api::portal::account(req, ctx).await,
        Handler::UpdateAccount => api::portal::update_account(req, ctx).await,
        Handler::CreatePortalSession => api::portal::create_session(req, ctx).await,
        Handler::ListPortalSessions => api::portal::list_sessions(req, ctx).await,
        Handler::RevokePortalSession => api::portal::revoke_session(req, ctx, id).await,
        Handler::Portal => api::portal::page(req, ctx, id).await,
        Handler::MetricsSeries => admin::metrics::metrics_series(req, ctx).await,
        Handler::Audit => admin::audit::get(req, ctx).await,
        Handler::OpenApi => api::openapi::document(),
        Handler::Health => api::health::check(ctx.env).await,
        Handler::Home => api::home::page(),
    }
}

#[event(fetch)]
async fn fetch(req: web_sys::Request, env: Env, _ctx: Context) -> worker::Result<web_sys::Response> {
    let url = req.url();
    // Named by the path's first two segments (`/v1/messages`, `/webhooks/telnyx`), without ids
    // (a segment with many digits).
    let kind = || {
        let named = path_of(&url).split('/').take(3).take_while(|s| s.bytes().filter(u8::is_ascii_digit).count() < 3);
        format!("request {}", named.collect::<Vec<_>>().join("/"))
    };
    quotas::invocation(kind, answer(req, path_of(&url), env)).await
}

/// Answers one request for `path` (as [`fetch`]'s one invocation).
async fn answer(req: web_sys::Request, path: &str, env: Env) -> worker::Result<web_sys::Response> {
    // Uppercased, as the runtime does for the standard methods; a method no route takes (an
    // unknown one included) is answered 405 by the router, never read as another.
    let method = req.method().to_ascii_uppercase();
    let webhook = path.starts_with("/webhooks/");
    let started = (!webhook).then(platform::now);
    match route(req, &method, path, &env).await {
        Ok(response) => {
            // Webhook ingest logs its own, richer line.
            if let Some(started) = started {
                worker::console_log!(
                    "{}",
                    serde_json::json!({
                        "request": path, "method": method, "status": response.status(), "outcome": "ok",
                        "latency_ms": platform::now().unix_millis() - started.unix_millis(),
                    })
                );
            }
            Ok(response)
        }
        Err(error) => {
            let status = error.status();
            let line = serde_json::json!({
                "request": path, "method": method, "status": status, "outcome": "rejected", "error": error.to_string(),
            });
            if status >= 500 {
                worker::console_error!("{line}");
            } else {
                worker::console_log!("{line}");
            }
            raw(error.to_response()?).map_err(|e| worker::Error::RustError(e.to_string()))
        }
    }
}

#[event(queue)]
async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, ctx: Context) -> worker::Result<()> {
    let queue = batch.queue();
    quotas::invocation(|| format!("queue {queue}"), consume(batch, queue.as_str(), env, ctx)).await
}

/// Consumes one queue batch (as [`queue`]'s one invocation).
async fn consume(batch: MessageBatch<serde_json::Value>, queue: &str, env: Env, ctx: Context) -> worker::Result<()> {
    // Returning Err would abort the isolate and retry the whole batch, so every consumer acks or
    // retries each message itself. Each reads the configuration once, before any of its jobs
    // (`work::outcome::configured`), so its log switches hold for every job.
    match queue {
        bindings::queues::JOBS => work::jobs::consume(batch, &env, &ctx).await,
        bindings::queues::JOBS_DEAD_LETTER => work::jobs::consume_dead_letters(batch, &env).await,
        bindings::queues::DELIVERIES => work::deliver::consume(batch, &env, &ctx).await,
        bindings::queues::DELIVERIES_DEAD_LETTER => work::deliver::consume_dead_letters(batch, &env).await,
        other => {
            worker::console_error!("{}", serde_json::json!({"queue": other, "outcome": "unknown queue"}));
            batch.retry_all();
            Ok(())
        }
    }
}

#[event(scheduled)]
async fn scheduled(event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    // The cron expression that fired the tick: the tick's line names it, so a tick can be told
    // from another fired by hand (`wrangler dev --test-scheduled`'s `/__scheduled?cron=`).
    let trigger = event.cron();
    quotas::invocation(|| "cron".to_owned(), tick(env, trigger)).await;
}

/// Runs one cron tick (as [`scheduled`]'s one invocation), fired by `trigger`.
async fn tick(env: Env, trigger: String) {
    // Read once for the tick; while it is invalid the tick does nothing (every request answers
    // 503 naming the variable meanwhile).
    let config = match config::get(&env) {
        Ok(config) => config,
        Err(e) => {
            return worker::console_error!(
                "{}",
                serde_json::json!({"cron": "tick", "trigger": trigger, "error": e.to_string()})
            );
        }
    };
    if let Err(e) = work::sweep::register_operator(&env, &config).await {
        worker::console_error!("{}", serde_json::json!({"cron": "operator endpoint", "error": e.to_string()}));
    }
    // Every other part of the tick runs in a job of its own, per database (work::cron).
    match work::cron::tick(&env, &config, &trigger).await {
        Ok(parts) => {
            worker::console_log!("{}", serde_json::json!({"cron": "tick", "trigger": trigger, "parts": parts}))
        }
        Err(e) => {
            worker::console_error!(
                "{}",
                serde_json::json!({"cron": "tick", "trigger": trigger, "error": e.to_string()})
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{find, Handler, HANDLERS, ROUTES};

    /// The OpenAPI 3.1 description of `/v1` and `/admin`, served at `/openapi.json`.
    const OPENAPI: &str = include_str!("../../docs/openapi.json");

    #[test]
    fn every_route_finds_its_own_handler() {
        assert_eq!(ROUTES.len(), HANDLERS.len());
        for ((method, pattern), handler) in ROUTES.iter().zip(HANDLERS) {
            let path = pattern.replace("{id}", "x1");
            let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
            let matched = find(method, &segments).unwrap_or_else(|_| panic!("{method} {pattern}"));
            assert_eq!(matched.handler, *handler, "{method} {pattern}");
        }
        let retry_all: Vec<&str> = vec!["admin", "carrier_events", "retry"];
        assert_eq!(find("POST", &retry_all).map(|m| m.handler).ok(), Some(Handler::RetryFailedCarrierEvents));
        let allow = find("DELETE", &["v1", "messages"]).map(|m| m.handler).err();
        assert_eq!(allow, Some(Some("GET, POST".to_owned())), "405");
        assert_eq!(find("QUERY", &["v1", "account"]).map(|m| m.handler).err(), Some(Some("GET, PATCH".to_owned())));
        assert_eq!(find("GET", &["v1", "nothing"]).map(|m| m.handler).err(), Some(None), "404");
    }

    /// Every route the router serves is in the OpenAPI document (the carriers' webhooks and
    /// `/healthz` included), and every operation the document describes is served.
    #[test]
    fn openapi_matches_the_router() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("docs/openapi.json is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, ops)| {
                ops.as_object().expect("operations").keys().map(move |m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let served: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
        let missing: Vec<_> = served.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&served).collect();
        assert!(missing.is_empty(), "served but not documented: {missing:?}");
        assert!(extra.is_empty(), "documented but not served: {extra:?}");
    }

    /// Every customer event type the worker sends (the subscribable ones, the operator's signals
    /// and `endpoint.test`) has its entry in the document's `webhooks`, whose body schema names
    /// that type (the end-to-end tests validate every body received against it), and no entry
    /// names a type never sent. The API's `EventType` is the list endpoints may subscribe to.
    /// Every operation has an `operationId`, unique in the document, and tags the document lists:
    /// what client generators name methods and group them by.
    #[test]
    fn openapi_names_and_tags_every_operation() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("docs/openapi.json is JSON");
        let tags: BTreeSet<&str> =
            doc["tags"].as_array().expect("a tags list").iter().filter_map(|t| t["name"].as_str()).collect();
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                assert!(ids.insert(id), "operationId {id} is used twice");
                let op_tags = op["tags"].as_array().unwrap_or_else(|| panic!("{method} {path} has no tags"));
                assert!(!op_tags.is_empty(), "{method} {path} has no tags");
                for t in op_tags {
                    assert!(t.as_str().is_some_and(|t| tags.contains(t)), "{method} {path}: tag {t} is not listed");
                }
            }
        }
    }

    #[test]
    fn openapi_documents_every_webhook() {
        use exactly_core::webhook::EVENT_TYPES;

        use crate::store::signals::OPERATOR_TYPES;

        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("docs/openapi.json is JSON");
        let sent: BTreeSet<&str> = exactly_core::webhook::EventType::ALL.map(|t| t.as_str()).into_iter().collect();
        let subscribed_or_operator: BTreeSet<&str> =
            EVENT_TYPES.into_iter().chain(OPERATOR_TYPES.map(|t| t.as_str())).chain(["endpoint.test"]).collect();
        assert_eq!(sent, subscribed_or_operator, "every type sent is subscribable, an operator signal or the test");
        let webhooks = doc["webhooks"].as_object().expect("a webhooks section");
        let documented: BTreeSet<&str> = webhooks.keys().map(String::as_str).collect();
        assert_eq!(documented, sent);
        for (event_type, item) in webhooks {
            let schema = &item["post"]["requestBody"]["content"]["application/json"]["schema"];
            assert_eq!(named_type(&doc, schema).as_deref(), Some(event_type.as_str()), "{event_type}: {schema}");
        }
        let subscribable: Vec<&str> = doc["components"]["schemas"]["EventType"]["enum"]
            .as_array()
            .expect("EventType's enum")
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        assert_eq!(subscribable, EVENT_TYPES);
    }

    /// The `type` a body schema allows when it allows exactly one: its own `const`, or that of the
    /// schema it refers to.
    fn named_type(doc: &serde_json::Value, schema: &serde_json::Value) -> Option<String> {
        if let Some(name) = schema["properties"]["type"]["const"].as_str() {
            return Some(name.to_owned());
        }
        let target = schema["$ref"].as_str()?.strip_prefix("#/")?;
        named_type(doc, doc.pointer(&format!("/{target}"))?)
    }
}
