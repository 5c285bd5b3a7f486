//! Accounts across databases (docs/scaling.md, "Accounts across databases"): every account, with
//! its numbers, messages, calls, endpoints, deliveries and usage, lives in one account database
//! (`DB` or an `ACCOUNTS_<n>` binding), and the routing tables in `DB` say which: account ->
//! database, API key -> account, phone number -> account, and carrier message id -> account.
//!
//! With no `ACCOUNTS_<n>` binding everything is in `DB` and nothing here reads a route. Account
//! and number routes are written whatever the layout (so adding databases later needs no
//! backfill); a message route only for an account outside `DB`. A key with no route is in
//! `DB`: the accounts, numbers and messages from before routing are found where they always were.

use std::rc::Rc;

use exactly_core::{Provider, Timestamp};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement, Env};

use crate::bindings::{ACCOUNTS_PREFIX, DB};
use crate::config::Config;
use crate::error::EdgeError;
use crate::store::{self as db, text, time, AccountDb};

/// Every account database the worker has: `DB` first, then every `ACCOUNTS_<n>` binding and any
/// other `ACCOUNT_SHARDS` names (a missing one fails where it is used, and `/healthz` names it).
pub fn databases(env: &Env, config: &Config) -> Vec<String> {
    db::databases_of_kind(
        env,
        |k| k.starts_with(ACCOUNTS_PREFIX) && exactly_core::shard::is_account_binding(k),
        config.account_shards.as_deref().map_or(&[], Vec::as_slice),
        |b| b.strip_prefix(ACCOUNTS_PREFIX).and_then(|n| n.parse::<u8>().ok()),
    )
}

/// Whether accounts may live outside `DB`, so routes must be read.
pub fn sharded(env: &Env, config: &Config) -> bool {
    databases(env, config).len() > 1
}

/// The databases new accounts are placed in: `ACCOUNT_SHARDS`, or `DB` when it is unset. Binding
/// a database places nobody there until it is named, so the deploy that adds a binding (after
/// which every isolate reads routes) comes before any account lives outside `DB`.
pub fn placement(config: &Config) -> Vec<String> {
    match &config.account_shards {
        Some(named) => named.as_ref().clone(),
        None => vec![DB.to_owned()],
    }
}

/// Every account database, each as the handle its work runs with.
pub fn each(env: &Env, config: &Rc<Config>) -> Result<Vec<AccountDb>, EdgeError> {
    databases(env, config).iter().map(|binding| AccountDb::new(env, config, binding)).collect()
}

crate::store::row! {
    struct Binding {
        binding: String,
    }
}

crate::store::row! {
    struct Owner {
        account_id: String,
    }
}

async fn binding_of(root: &D1Database, sql: &str, args: &[JsValue]) -> Result<Option<String>, EdgeError> {
    let row: Option<Binding> = db::first(db::stmt(root, sql, args)?).await?;
    Ok(row.map(|r| r.binding))
}

/// Places a new account: the database it will live in, recorded in `DB` in one batch with its
/// first API key (`key`, from [`crate::store::access::insert`]) before the account row is
/// written there. An account whose row never got written is a route no key's request finds
/// anything behind (the key was never handed out).
pub async fn place_account(
    env: &Env,
    config: &Config,
    account_id: &str,
    api_key_hash: &str,
    now: Timestamp,
    key: D1PreparedStatement,
) -> Result<String, EdgeError> {
    let choices = placement(config);
    let binding = choices[exactly_core::shard::place(account_id, choices.len())].clone();
    let root = db::d1(env, DB)?;
    let route = db::stmt(
        &root,
        "INSERT INTO account_routes (account_id, binding, api_key_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
        &[text(account_id), text(&binding), text(api_key_hash), time(now)],
    )?;
    db::batch(&root, vec![route, key]).await?;
    Ok(binding)
}

/// Sets the origins that may embed account `account_id`'s portal (`origins`, a JSON array, or
/// `None` for none); false when there is no such account.
pub async fn set_portal_origins(env: &Env, account_id: &str, origins: Option<&str>) -> Result<bool, EdgeError> {
    let root = db::d1(env, DB)?;
    let sql = "UPDATE account_routes SET portal_origins = ?2 WHERE account_id = ?1 AND account_id != ?3";
    let args = [text(account_id), db::opt_text(origins), text(crate::store::signals::OPERATOR_ACCOUNT)];
    Ok(db::run(db::stmt(&root, sql, &args)?).await? == 1)
}

crate::store::row! {
    struct Origins {
        portal_origins: Option<String>,
    }
}

/// The origins that may embed account `account_id`'s portal, a JSON array (`None`: none), or
/// `None` inside when there is no such account.
pub async fn portal_origins(env: &Env, account_id: &str) -> Result<Option<Option<String>>, EdgeError> {
    let root = db::d1(env, DB)?;
    let sql = "SELECT portal_origins FROM account_routes WHERE account_id = ?1";
    let row: Option<Origins> = db::first(db::stmt(&root, sql, &[text(account_id)])?).await?;
    Ok(row.map(|r| r.portal_origins))
}

/// The database of account `account_id`; `None` when no route names it (`DB`).
pub async fn of_account(env: &Env, config: &Config, account_id: &str) -> Result<Option<String>, EdgeError> {
    if !sharded(env, config) {
        return Ok(None);
    }
    let sql = "SELECT binding FROM account_routes WHERE account_id = ?1";
    binding_of(&db::d1(env, DB)?, sql, &[text(account_id)]).await
}

/// What [`claim_number`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// The number is another account's.
    Taken,
    /// The number is this account's in `DB` (claimed now, or by an earlier try of the same
    /// assignment): its row is to be written in the account's database.
    Claimed,
    /// Claimed and its row written in the same batch (an account in `DB`).
    Assigned,
    /// The claim is this account's and its row was there before: assigned already.
    Already,
}

/// Claims `number` for `account_id` in `DB`, where a number is unique across every database. A
/// number `DB` holds for another account with no route (assigned by a version before routes,
/// during a rollout) is not claimed either.
///
/// `row`, for an account in `DB`: the insert of its `phone_numbers` row, guarded by the claim
/// ([`crate::store::numbers::create_stmt`]), run in the same batch so a failed assignment leaves
/// neither behind. An account in another database claims first and writes its row there after;
/// an assignment that failed between is finished by trying it again for the same account.
pub async fn claim_number(
    env: &Env,
    number: &str,
    account_id: &str,
    row: Option<D1PreparedStatement>,
) -> Result<Claim, EdgeError> {
    let root = db::d1(env, DB)?;
    let with_row = row.is_some();
    let mut statements = vec![db::stmt(
        &root,
        "INSERT INTO number_routes (phone_number, account_id) SELECT ?1, ?2
         WHERE NOT EXISTS (SELECT 1 FROM phone_numbers WHERE phone_number = ?1 AND account_id != ?2)
         ON CONFLICT DO NOTHING",
        &[text(number), text(account_id)],
    )?];
    statements.extend(row);
    statements.push(db::stmt(&root, "SELECT account_id FROM number_routes WHERE phone_number = ?1", &[text(number)])?);
    let results = db::batch(&root, statements).await?;
    let owner: Option<Owner> = results.last().map(db::rows).transpose()?.and_then(|mut r| r.pop());
    if owner.is_none_or(|o| o.account_id != account_id) {
        return Ok(Claim::Taken);
    }
    Ok(match results.get(1).filter(|_| with_row).map(db::changes) {
        None => Claim::Claimed,
        Some(1) => Claim::Assigned,
        Some(_) => Claim::Already,
    })
}

/// The database of the account that owns `number`; `None` when no route names it (`DB`).
pub async fn of_number(env: &Env, config: &Config, number: &str) -> Result<Option<String>, EdgeError> {
    if !sharded(env, config) {
        return Ok(None);
    }
    let sql = "SELECT a.binding FROM number_routes n JOIN account_routes a ON a.account_id = n.account_id
               WHERE n.phone_number = ?1";
    binding_of(&db::d1(env, DB)?, sql, &[text(number)]).await
}

/// The database of the account that sent the message with this carrier id; `None` when no
/// route names it (a message of an account in `DB`, or none recorded yet).
pub async fn of_message(
    env: &Env,
    config: &Config,
    carrier: Provider,
    carrier_message_id: &str,
) -> Result<Option<String>, EdgeError> {
    if !sharded(env, config) {
        return Ok(None);
    }
    let sql = "SELECT a.binding FROM message_routes m JOIN account_routes a ON a.account_id = m.account_id
               WHERE m.carrier = ?1 AND m.carrier_message_id = ?2";
    binding_of(&db::d1(env, DB)?, sql, &[text(carrier.as_str()), text(carrier_message_id)]).await
}

/// Before a send of an account outside `DB` is recorded in its database: the route of its
/// carrier id, written in `DB` in one batch with the wake of the receipts parked there on that
/// id for want of a route. Returns their event ids, to enqueue; they stay recorded as woken, in
/// `DB`, until the sweeper finds them settled. A no-op for an account in `DB`, whose receipts park and wake beside its
/// messages.
pub async fn record_message(
    account: &AccountDb,
    carrier: Provider,
    carrier_message_id: &str,
    account_id: &str,
    now: Timestamp,
) -> Result<Vec<String>, EdgeError> {
    if account.binding().is_none() {
        return Ok(Vec::new());
    }
    let root = db::d1(account.env(), DB)?;
    let results = db::batch(
        &root,
        vec![
            db::stmt(
                &root,
                "INSERT INTO message_routes (carrier, carrier_message_id, account_id) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
                &[text(carrier.as_str()), text(carrier_message_id), text(account_id)],
            )?,
            crate::store::carrier_events::wake_routed_stmt(&root, carrier, carrier_message_id, now)?,
        ],
    )
    .await?;
    Ok(results.get(1).map(crate::store::carrier_events::woken).transpose()?.unwrap_or_default())
}
