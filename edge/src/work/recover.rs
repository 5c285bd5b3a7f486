//! A recovery's pages (docs/contract.md §6, "Recovery"): `POST .../recover` records one and
//! enqueues its first page; each page writes the deliveries of at most
//! `store::deliveries::recoveries::PAGE` of the account's events, enqueues their attempts, and
//! enqueues the next page, until the window is done. A page that runs twice writes nothing
//! twice, and a recovery cut off by a crash goes on from where its row says.

use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self, Job};
use crate::store::deliveries::recoveries;
use crate::store::endpoints;
use crate::store::AccountDb;
use crate::work::outcome::{Done, Outcome};

/// Runs the next page of recovery `id`, in the account database `db` (`env` scoped to it).
pub async fn next_page(account: &AccountDb, id: &str) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let Some(recovery) = recoveries::find_any(db, id).await? else { return Ok(Outcome::Done(Done::NoOp)) };
    let page = recoveries::page(db, &recovery, now()).await?;
    // Held by a paused or disabled endpoint until it is resumed or enabled; a deleted endpoint's
    // deliveries are failed by their attempt.
    let endpoint = endpoints::get(db, &recovery.account_id, &recovery.endpoint_id).await?;
    if endpoint.is_none_or(|e| e.enabled && !e.paused) {
        queues::deliver_written(account, page.queued.clone()).await;
    }
    if page.more {
        queues::enqueue(env, Job::recover(account, id)).await?;
    }
    Ok(Outcome::applied(!page.queued.is_empty()))
}
