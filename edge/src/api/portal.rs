//! The customer's webhook portal (docs/console.md, "Portal"): short-lived portal sessions
//! minted with a full key, the account's settings (which origins may embed the portal), and the
//! portal's page, the console served with the account's `frame-ancestors`.

use crate::api::auth::Ctx;
use serde::Deserialize;
use serde_json::json;
use worker::{Request, Response};

use crate::api::{auth, http};
use crate::error::EdgeError;
use crate::platform::{new_id, now, random_hex};
use crate::store::access::{self as sessions, NewSession};
use crate::store::{endpoints, routes};

/// The console's page, the same file the static assets serve under `/console/`.
const PAGE: &str = include_str!("../../../console/index.html");

/// The console's policy (console/_headers) but for the origins that may frame it.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self' data:; base-uri 'none'; form-action 'self'";

/// A session lasts an hour unless asked otherwise, and at most a day.
const DEFAULT_TTL_SECS: i64 = 3600;
const MAX_TTL_SECS: i64 = 86_400;
const MIN_TTL_SECS: i64 = 60;
/// At most this many endpoints in one session, and this many origins per account.
const MAX_ENDPOINTS: usize = 50;
const MAX_ORIGINS: usize = 10;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NewSessionBody {
    #[serde(default)]
    endpoint_ids: Option<Vec<String>>,
    #[serde(default, deserialize_with = "crate::api::http::null_as_default")]
    read_only: bool,
    #[serde(default)]
    expires_in: Option<i64>,
}

/// The origin (`scheme://host[:port]`) of the URL the runtime serialized.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// `POST /v1/portal_sessions` -> 201 `{id, url, token, expires_at, read_only, endpoint_ids}`:
/// a link to the account's portal, its secret in the fragment (no server ever receives it).
pub async fn create_session(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    // Only a key mints a session (the router refuses a portal session here).
    let key_id = ctx.key_id().ok_or(EdgeError::Unauthorized(crate::error::Refused::NotThisCredential))?;
    let body: NewSessionBody = http::optional_json_body(&mut req).await?;
    let ttl = body.expires_in.unwrap_or(DEFAULT_TTL_SECS);
    if !(MIN_TTL_SECS..=MAX_TTL_SECS).contains(&ttl) {
        return Err(EdgeError::invalid("expires_in", format!("must be {MIN_TTL_SECS} to {MAX_TTL_SECS} seconds")));
    }
    if let Some(ids) = &body.endpoint_ids {
        if ids.is_empty() || ids.len() > MAX_ENDPOINTS {
            return Err(EdgeError::invalid("endpoint_ids", format!("must name 1 to {MAX_ENDPOINTS} endpoints")));
        }
        let db = ctx.db()?;
        for id in ids {
            if endpoints::get(db, &account.id, id).await?.is_none() {
                return Err(EdgeError::invalid("endpoint_ids", format!("{id} is not an endpoint of this account")));
            }
        }
    }
    let (id, secret, at) = (new_id("ps")?, random_hex(32)?, now());
    let expires_at = exactly_core::Timestamp::from_unix_millis(at.unix_millis() + ttl * 1000);
    let endpoint_ids = body.endpoint_ids.as_ref().map(|ids| serde_json::Value::from(ids.clone()).to_string());
    let hash = auth::key_hash(&secret);
    let session = NewSession {
        id: &id,
        account_id: &account.id,
        key_id: &key_id,
        secret_hash: &hash,
        read_only: body.read_only,
        endpoint_ids: endpoint_ids.as_deref(),
        at,
        expires_at,
    };
    if !sessions::create_session(env, &session).await? {
        return Err(EdgeError::Conflict {
            code: crate::error::Conflict::SessionLimit,
            message: format!(
                "the account holds {} live portal sessions: revoke some (DELETE /v1/portal_sessions/{{id}}) or let them expire",
                sessions::MAX_LIVE_SESSIONS
            ),
        });
    }
    let url = format!("{}/portal/{id}#{secret}", origin_of(&req.inner().url()));
    http::json(
        201,
        &json!({
            "id": id, "url": url, "token": format!("{id}.{secret}"), "read_only": body.read_only,
            "endpoint_ids": body.endpoint_ids, "expires_at": expires_at.to_rfc3339(),
        }),
    )
}

/// A live portal session as its account lists it: never its secret, which only its link holds.
fn shown(s: &sessions::ListedSession) -> serde_json::Value {
    let endpoint_ids = s.endpoint_ids.as_deref().and_then(|ids| serde_json::from_str::<serde_json::Value>(ids).ok());
    json!({
        "id": s.id, "key_id": s.key_id, "read_only": s.read_only, "endpoint_ids": endpoint_ids,
        "created_at": s.created_at.to_rfc3339(), "expires_at": s.expires_at.to_rfc3339(),
    })
}

/// `GET /v1/portal_sessions`: the account's live sessions (unexpired, minted by a live key),
/// those that end last first, paged.
pub async fn list_sessions(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    let params = http::query(&req);
    let limit = http::limit(&params)?;
    let rows = sessions::list_sessions(env, &account.id, http::Cursor::from_params(&params)?, limit, now()).await?;
    let next = http::Cursor::after(&rows, limit, |s| (s.expires_at, &s.id));
    http::json(200, &crate::api::page(rows.iter().map(shown).collect(), next))
}

/// `DELETE /v1/portal_sessions/{id}`: 204, the session ends now (its link and token are refused
/// from this moment); 404 for no live session of the account by that id.
pub async fn revoke_session(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    if !sessions::revoke_session(env, &account.id, id, now()).await? {
        return Err(EdgeError::NotFound);
    }
    Ok(Response::empty().map_err(|e| EdgeError::platform("respond", e))?.with_status(204))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountPatch {
    portal_origins: Vec<String>,
}

fn origins_json(origins: Option<&str>) -> serde_json::Value {
    origins.and_then(|o| serde_json::from_str(o).ok()).unwrap_or_else(|| json!([]))
}

/// Checks and stores which origins may embed the account's portal; 404 for no such account.
async fn set_origins(mut req: Request, ctx: &Ctx<'_>, account_id: &str) -> Result<serde_json::Value, EdgeError> {
    let env = ctx.env;
    let patch: AccountPatch = http::json_body(&mut req).await?;
    if patch.portal_origins.len() > MAX_ORIGINS {
        return Err(EdgeError::invalid("portal_origins", format!("at most {MAX_ORIGINS} origins")));
    }
    // Plain http (localhost only) is for local development, as private endpoints are.
    let local_allowed = ctx.config.allow_private_endpoints;
    for origin in &patch.portal_origins {
        let scheme = exactly_core::access::frame_origin(origin)
            .map_err(|problem| EdgeError::invalid("portal_origins", format!("{origin:?} {problem}")))?;
        if !local_allowed && scheme == exactly_core::access::OriginScheme::LocalHttp {
            let problem = "must be https:// (http://localhost only where ALLOW_PRIVATE_ENDPOINTS is set)";
            return Err(EdgeError::invalid("portal_origins", format!("{origin:?} {problem}")));
        }
    }
    let mut origins = patch.portal_origins;
    origins.sort();
    origins.dedup();
    let stored = (!origins.is_empty()).then(|| serde_json::Value::from(origins.clone()).to_string());
    if !routes::set_portal_origins(env, account_id, stored.as_deref()).await? {
        return Err(EdgeError::NotFound);
    }
    Ok(json!(origins))
}

/// `GET /v1/account`: the account, its portal settings and what the caller may do in it.
pub async fn account(_req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let account = ctx.account()?;
    let origins = routes::portal_origins(env, &account.id).await?.ok_or(EdgeError::NotFound)?;
    http::json(
        200,
        &json!({ "id": account.id, "portal_origins": origins_json(origins.as_deref()), "access": ctx.access() }),
    )
}

/// `PATCH /v1/account` `{portal_origins}`.
pub async fn update_account(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let account = ctx.account()?;
    let origins = set_origins(req, ctx, &account.id).await?;
    http::json(200, &json!({ "id": account.id, "portal_origins": origins, "access": ctx.access() }))
}

/// `PATCH /admin/accounts/{id}` `{portal_origins}`.
pub async fn admin_update_account(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    auth::admin(&req, ctx.config)?;
    let origins = set_origins(req, ctx, id).await?;
    http::json(200, &json!({ "id": id, "portal_origins": origins }))
}

/// `GET /portal/{id}`: the console, in portal mode (it reads the secret from the fragment),
/// framable by the origins the session's account allows and by no other. An unknown or expired
/// session gets the same page framable by none, and the console says the link is no longer
/// valid when its first request is refused.
pub async fn page(_req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    let root = crate::store::d1(env, crate::bindings::DB)?;
    let session = sessions::session(&root, id).await?.filter(|s| s.expires_at > now());
    let origins: Vec<String> = session
        .and_then(|s| s.portal_origins)
        .and_then(|o| serde_json::from_str::<Vec<String>>(&o).ok())
        .unwrap_or_default()
        .into_iter()
        // Stored only after the same check; checked again, as it goes into a header.
        .filter(|o| exactly_core::access::frame_origin(o).is_ok())
        .collect();
    let ancestors = if origins.is_empty() { "'none'".to_owned() } else { origins.join(" ") };
    let mut response = Response::from_html(PAGE).map_err(|e| EdgeError::platform("respond", e))?;
    let headers = response.headers_mut();
    let policy = format!("{POLICY}; frame-ancestors {ancestors}");
    for (name, value) in [
        ("content-security-policy", policy.as_str()),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        headers.set(name, value).map_err(|e| EdgeError::platform("header", e))?;
    }
    if origins.is_empty() {
        headers.set("x-frame-options", "DENY").map_err(|e| EdgeError::platform("header", e))?;
    }
    Ok(response)
}
