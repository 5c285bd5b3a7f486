//! `POST /admin/erasures` and `GET /admin/erasures/{id}`: erase one person's phone number from
//! everything the product keeps (docs/contract.md §5, "Erasure"), in pages (work::erase).

use crate::api::auth::Ctx;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use worker::{Request, Response};

use crate::api::{auth, e164, http};
use crate::error::{Conflict, EdgeError};
use crate::platform::{new_id, now};
use crate::queues::{self, Job, Personal};
use crate::store::{self, erasures, numbers, routes};

#[derive(Deserialize)]
struct Erasure {
    phone_number: Option<String>,
    account_id: Option<String>,
}

/// `POST /admin/erasures` `{phone_number, account_id?}` -> 202 the erasure's record, whose
/// pages then erase (`Job::Erase`), every message to or from the number (of that account,
/// or of every account), its calls and the calls that rang it, the number in ring plans, the
/// customer events about them and what endpoints answered to those, and the carrier events whose
/// payload names it; the dedupe keys stay, so a late retry is still a duplicate. A number an
/// account owns is refused (409 `number_owned`). Asked again while that erasure of the number
/// (and account) runs, it answers the same record and goes on from where its pages got; asked
/// once it finished, it is a new erasure, which finds nothing more.
pub async fn create(mut req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let body: Erasure = http::json_body(&mut req).await?;
    let number =
        e164("phone_number", &body.phone_number.ok_or_else(|| EdgeError::invalid("phone_number", "is required"))?)?;
    let number = number.as_str();
    let account = body.account_id.as_deref();
    if let Some(account) = account {
        let binding = routes::of_account(env, ctx.config, account).await?;
        if !crate::store::accounts::exists(
            crate::store::AccountDb::named(env, ctx.config, binding.as_deref())?.db(),
            account,
        )
        .await?
        {
            return Err(EdgeError::invalid("account_id", "no such account"));
        }
    }
    for binding in routes::databases(env, ctx.config) {
        if numbers::owner(crate::store::AccountDb::new(env, ctx.config, &binding)?.db(), number).await?.is_some() {
            return Err(EdgeError::Conflict {
                code: Conflict::NumberOwned,
                message: "the number belongs to an account; erasure is for the people it talks to".into(),
            });
        }
    }
    let root = store::d1(env, crate::bindings::DB)?;
    let mac = mac(ctx.config, number)?;
    let record = match erasures::running(&root, &mac, account).await? {
        Some(running) => running,
        None => {
            // Two requests at once both find none: the index lets one insert, and the other
            // finds that one.
            let id = new_id("era")?;
            let started = erasures::start(&root, &id, &mac, account, &erasures::no_counts(), now()).await?;
            let found = if started {
                erasures::find(&root, &id).await?
            } else {
                erasures::running(&root, &mac, account).await?
            };
            found.ok_or_else(|| EdgeError::unavailable("erasure", "neither started nor running"))?
        }
    };
    // A second job of a page that already has one finds the record moved, and stops.
    queues::enqueue(env, Job::Erase { id: record.id.clone(), number: Personal(number.to_owned()) }).await?;
    http::json(202, &record.to_json())
}

/// `GET /admin/erasures/{id}` -> 200 the erasure's record: `state` (`running`, `finished`), what
/// it erased so far per kind, the pages it ran, and when it finished. Never the number.
pub async fn get(req: Request, ctx: &Ctx<'_>, id: &str) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let root = store::d1(env, crate::bindings::DB)?;
    let record = erasures::find(&root, id).await?.ok_or(EdgeError::NotFound)?;
    http::json(200, &record.to_json())
}

/// HMAC-SHA256 of the number under `ADMIN_TOKEN`, hex: the erasure record never holds the number.
fn mac(config: &crate::config::Config, number: &str) -> Result<String, EdgeError> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(config.admin_token.as_bytes())
        .map_err(|e| EdgeError::platform("mac", e))?;
    mac.update(b"exactly erasure v1\0");
    mac.update(number.as_bytes());
    Ok(mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect())
}
