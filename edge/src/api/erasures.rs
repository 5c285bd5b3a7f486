//! `POST /admin/erasures`: erase one person's phone number from everything the product keeps
//! (docs/contract.md §5, "Erasure").

use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;
use worker::{D1Database, Env, Request, Response};

use crate::api::{auth, e164, http};
use crate::error::{Conflict, EdgeError};
use crate::platform::{new_id, now};
use crate::store::messages::erase::ERASED;
use crate::store::{self, calls, carrier_events, deliveries, media, messages, numbers, outbox, routes};

#[derive(Deserialize)]
struct Erasure {
    phone_number: Option<String>,
    account_id: Option<String>,
}

/// What one erasure did, per kind.
#[derive(Default, serde::Serialize)]
struct Counts {
    messages: usize,
    media_copies: usize,
    calls: usize,
    call_states: usize,
    customer_events: usize,
    carrier_events: usize,
}

/// `POST /admin/erasures` `{phone_number, account_id?}` -> 200 `{id, counts}`: every message to or
/// from the number (of that account, or of every account) loses its text, its media (rows and
/// stored copies) and the number, which reads `[erased]`; so do its calls (and each call's own
/// storage), the bodies of their customer events and what endpoints answered to them; every
/// carrier event payload that names the number is cleared in every database of the dedupe log,
/// whose keys stay, so a late retry is still a duplicate. A number an account owns is refused
/// (409 `number_owned`). Running it again erases nothing more and answers zero counts.
pub async fn create(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    auth::admin(&req, env)?;
    let body: Erasure = http::json_body(&mut req).await?;
    let number =
        e164("phone_number", &body.phone_number.ok_or_else(|| EdgeError::invalid("phone_number", "is required"))?)?;
    let number = number.as_str();
    let account = body.account_id.as_deref();
    let mut databases = routes::databases(env);
    if let Some(account) = account {
        let binding = routes::of_account(env, account).await?;
        if !crate::store::accounts::exists(&routes::open(env, binding.clone())?.1, account).await? {
            return Err(EdgeError::invalid("account_id", "no such account"));
        }
        databases = vec![binding.unwrap_or_else(|| crate::bindings::DB.to_owned())];
    }
    for binding in routes::databases(env) {
        if numbers::owner(&routes::open(env, Some(binding))?.1, number).await?.is_some() {
            return Err(EdgeError::Conflict {
                code: Conflict::NumberOwned,
                message: "the number belongs to an account; erasure is for the people it talks to".into(),
            });
        }
    }
    let mut counts = Counts::default();
    for binding in databases {
        let (_, db) = routes::open(env, Some(binding))?;
        erase_in(env, &db, number, account, &mut counts).await?;
    }
    let log = carrier_events::Log::open(env)?;
    for binding in log.bindings() {
        counts.carrier_events += carrier_events::erase_payloads(&log.database(&binding)?, number).await?;
    }
    let id = new_id("era")?;
    let counts = serde_json::to_value(&counts).map_err(|e| EdgeError::platform("encode", e))?;
    store::erasures::record(&store::database(env)?, &id, &mac(env, number)?, account, &counts, now()).await?;
    http::json(200, &json!({ "id": id, "account_id": account, "counts": counts }))
}

/// The erasure in one account database.
async fn erase_in(
    env: &Env,
    db: &D1Database,
    number: &str,
    account: Option<&str>,
    counts: &mut Counts,
) -> Result<(), EdgeError> {
    let message_ids = messages::erase::of_number(db, number, account).await?;
    let call_ids = calls::of_number(db, number, account).await?;
    let encode = |ids: &[String]| serde_json::to_string(ids).map_err(|e| EdgeError::platform("encode", e));
    let (messages_json, calls_json) = (encode(&message_ids)?, encode(&call_ids)?);
    // The copies first: once the rows are gone nothing names them.
    let keys = media::keys_of(db, &messages_json).await?;
    for key in &keys {
        media::delete_copy(env, key).await?;
    }
    for call in &call_ids {
        counts.call_states += usize::from(erase_call_state(env, call, number).await?);
    }
    let resources = encode(&[message_ids.clone(), call_ids.clone()].concat())?;
    let [calls_stmt, legs_stmt] = calls::redact(db, number, &calls_json, ERASED)?;
    let results = store::batch(
        db,
        vec![
            deliveries::prune::erase_answers(db, &resources)?,
            outbox::erase(db, number, &resources, ERASED)?,
            media::erase(db, &messages_json)?,
            messages::erase::redact(db, number, &messages_json)?,
            calls_stmt,
            legs_stmt,
        ],
    )
    .await?;
    counts.messages += message_ids.len();
    counts.calls += call_ids.len();
    counts.media_copies += keys.len();
    counts.customer_events += results.get(1).map(store::changes).unwrap_or(0);
    Ok(())
}

/// Asks the call's own object to erase the number from its storage; whether it held it.
async fn erase_call_state(env: &Env, call_id: &str, number: &str) -> Result<bool, EdgeError> {
    let stub = crate::platform::call_stub(env, call_id)?;
    let headers = worker::Headers::new();
    headers.set(crate::bindings::ERASE_HEADER, number).map_err(|e| EdgeError::platform("header", e))?;
    let request = crate::platform::request("POST", "https://call.internal/erase", Some(&headers), None, true)
        .map_err(|e| EdgeError::platform("call request", e))?;
    let mut answer = stub.fetch_with_request(request).await.map_err(|e| EdgeError::platform("call fetch", e))?;
    let body = answer.bytes().await.map_err(|e| EdgeError::platform("call answer", e))?;
    if answer.status_code() != 200 {
        return Err(EdgeError::unavailable("call machine", String::from_utf8_lossy(&body)));
    }
    let said: serde_json::Value = serde_json::from_slice(&body).map_err(|e| EdgeError::platform("call answer", e))?;
    Ok(said["erased"].as_bool().unwrap_or(false))
}

/// HMAC-SHA256 of the number under `ADMIN_TOKEN`, hex: the erasure record never holds the number.
fn mac(env: &Env, number: &str) -> Result<String, EdgeError> {
    let config = crate::config::get(env)?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(config.admin_token.as_bytes())
        .map_err(|e| EdgeError::platform("mac", e))?;
    mac.update(b"exactly erasure v1\0");
    mac.update(number.as_bytes());
    Ok(mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect())
}
