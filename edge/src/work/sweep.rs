//! The cron sweeper: re-enqueues anything persisted but not yet done, and raises `backlog.high`
//! when the oldest of it has waited longer than `BACKLOG_ALERT_SECS`. Each database is swept in
//! a part of the tick of its own (`work::cron`): the dedupe log's in [`sweep_log`], each
//! account database's in [`sweep_account`].

use std::rc::Rc;

use exactly_core::Timestamp;
use worker::Env;

use crate::config::Config;

use crate::error::EdgeError;
use crate::platform::now;
use crate::queues::{self as jobs, Job};
use crate::store::signals::{self, Stuck};
use crate::store::{carrier_events, deliveries, messages, routes, AccountDb};

/// Work unfinished for this long has lost its job (or is stuck behind retries).
const STALE_AFTER_MILLIS: i64 = 2 * 60 * 1000;
/// At most this many items of each kind are re-enqueued per run, so one run stays well inside
/// its limits.
const BATCH: u32 = 100;

/// What one part of a sweep re-enqueued.
pub struct Report {
    /// Carrier events neither processed nor failed.
    pub events: usize,
    /// Outbound messages not handed to the carrier, and scheduled ones now due.
    pub dispatches: usize,
    /// Customer webhook deliveries whose attempt is overdue, and endpoint lines woken.
    pub deliveries: usize,
    /// `backlog.high` signals this run wrote (at most one per kind of work).
    pub backlog_signals: usize,
    /// Inbound media items whose copy job was lost.
    pub media: usize,
}

/// A delivery attempt overdue by this long has lost its queue message.
const DELIVERY_GRACE_MILLIS: i64 = 60 * 1000;

/// The dedupe log's part of a sweep (`DB`'s tick): carrier events neither processed nor failed
/// for a while are enqueued again (re-enqueueing work that is in fact still queued is harmless:
/// the guards make the second run a no-op), and the oldest of them raises `backlog.high`.
pub async fn sweep_log(env: &Env, config: &Rc<Config>) -> Result<Report, EdgeError> {
    let log = carrier_events::Log::open(env, config);
    let cutoff = Timestamp::from_unix_millis(now().unix_millis() - STALE_AFTER_MILLIS);
    let events: Vec<String> = log.unprocessed(cutoff, BATCH).await?.into_iter().map(|(id, _)| id).collect();
    jobs::enqueue_many(env, events.iter().map(|id| Job::carrier_event(id)).collect()).await?;
    let backlog_signals = log_backlog(env, config, &log).await?;
    Ok(Report { events: events.len(), dispatches: 0, deliveries: 0, backlog_signals, media: 0 })
}

/// One account database's part of a sweep (its tick): receipts, dispatches, deliveries and
/// media copies whose job was lost are enqueued again, and its oldest overdue delivery, and the
/// one due longest ago of those it finds stranded waiting for a hand-on, raise `backlog.high`.
pub async fn sweep_account(account: &AccountDb) -> Result<Report, EdgeError> {
    let log = carrier_events::Log::open(account.env(), account.config());
    let cutoff = Timestamp::from_unix_millis(now().unix_millis() - STALE_AFTER_MILLIS);
    let found = sweep_database(account, &log, cutoff).await?;
    let mut backlog_signals = 0;
    for id in found.oldest_deliveries.iter().flatten() {
        backlog_signals += delivery_backlog(account, id).await?;
    }
    Ok(Report {
        events: found.woken,
        dispatches: found.dispatches,
        deliveries: found.deliveries,
        backlog_signals,
        media: found.media,
    })
}

/// Logs that one part of a cron step (an account database's, or one item's) failed and was
/// skipped.
pub fn skipped(step: &str, what: &str, error: &EdgeError) {
    worker::console_error!("{}", serde_json::json!({"cron": step, "skipped": what, "error": error.to_string()}));
}

/// What one account database's sweep found.
struct Found {
    woken: usize,
    dispatches: usize,
    deliveries: usize,
    media: usize,
    /// Past the backlog threshold: its oldest delivery overdue, and the one due longest ago of
    /// those found stranded waiting for a hand-on (an earlier event of its resource settled and
    /// the delivery never put into its line).
    oldest_deliveries: [Option<String>; 2],
}

/// Sweeps one account database.
async fn sweep_database(account: &AccountDb, log: &carrier_events::Log, cutoff: Timestamp) -> Result<Found, EdgeError> {
    let (env, db) = (account.env(), account.db());
    // Receipts woken by a recorded send a while ago: removed once applied or failed, enqueued
    // again otherwise (their job may have been lost, whatever became of its retries).
    let mut woken = Vec::new();
    let again_after = account.config().tuning.woken_recheck;
    let recheck =
        Timestamp::from_unix_millis(now().unix_millis() - i64::try_from(again_after.as_millis()).unwrap_or(0));
    for park in carrier_events::still_woken(db, recheck, BATCH).await? {
        match log.recheck_woken(db, &park, now()).await {
            Ok(true) => woken.push(park),
            Ok(false) => {}
            Err(e) => skipped("woken receipt", &park.id, &e),
        }
    }
    let parked_horizon = Timestamp::from_unix_millis(now().unix_millis() - carrier_events::PARK_HORIZON_MILLIS);
    let mut expired = 0;
    // The operator's signals are written, and their deliveries enqueued, where the operator's
    // account is.
    let root = account.other(Some(crate::bindings::DB))?;
    // One park whose expiry fails (its event's database unreachable) is logged and retried next
    // run; it holds up neither the other parks nor the rest of this sweep.
    for park in carrier_events::expired_parks(db, parked_horizon, BATCH).await? {
        match log.expire_park(db, root.db(), &park, parked_horizon).await {
            Ok(failed) => {
                expired += usize::from(failed.changed);
                let signals = &failed.signals;
                let announced = async {
                    crate::queues::deliver_many(&root, crate::store::outbox::to_enqueue_for(root.db(), signals).await?)
                        .await
                };
                if let Err(e) = announced.await {
                    skipped("park expiry signal", &park.id, &e);
                }
            }
            Err(e) => skipped("park expiry", &park.id, &e),
        }
    }
    if expired > 0 {
        worker::console_error!(
            "{}",
            serde_json::json!({"cron": "sweep", "outcome": "receipts failed",
                "reason": "no message within 24 hours", "count": expired})
        );
    }
    let mut dispatches = messages::undispatched(db, cutoff, BATCH).await?;
    dispatches.extend(messages::due(db, now(), BATCH).await?);
    let overdue =
        deliveries::overdue(db, Timestamp::from_unix_millis(now().unix_millis() - DELIVERY_GRACE_MILLIS), BATCH)
            .await?;
    let uncopied = crate::store::media::uncopied(db, cutoff, BATCH).await?;
    // A delivery that waited long for an earlier event of its resource goes back into its line,
    // where its claim decides again: a hand-on that never came (the earlier one pruned, say)
    // strands nothing. One still behind waits again, from now.
    let stale = Timestamp::from_unix_millis(now().unix_millis() - STALE_AFTER_MILLIS);
    let threshold_secs = account.config().backlog_alert_secs;
    let backlog_cutoff = Timestamp::from_unix_millis(now().unix_millis() - threshold_secs.saturating_mul(1000));
    let stranded = deliveries::requeue_waiting(db, stale, deliveries::UNBLOCK_MAX, now(), backlog_cutoff).await?;
    // A line whose wake was lost (an attempt's chain cut short, a wake message dropped) is woken
    // here; one that is still being drained, or whose circuit holds, is left as it is by its wake.
    let lines = crate::store::endpoints::circuit::with_line(db, BATCH).await?;
    for endpoint in &lines {
        crate::queues::wake_later(account, endpoint, 0).await?;
    }
    let found_counts = (woken.len(), dispatches.len(), overdue.len() + lines.len(), uncopied.len());
    crate::queues::deliver_many(account, overdue).await?;
    let mut work: Vec<Job> = woken.iter().map(|w| Job::carrier_event(&w.id)).collect();
    work.extend(dispatches.iter().map(|message_id| Job::dispatch(account, message_id)));
    work.extend(uncopied.iter().map(|m| Job::copy_media(account, &m.message_id, m.position)));
    jobs::enqueue_many(env, work).await?;
    let oldest_deliveries = [deliveries::overdue(db, backlog_cutoff, 1).await?.pop(), stranded];
    let (woken, dispatches, deliveries, media) = found_counts;
    Ok(Found { woken, dispatches, deliveries, media, oldest_deliveries })
}

/// Raises `backlog.high` about the oldest carrier event neither processed nor failed and the
/// oldest receipt parked for its message (its send is recorded within seconds as a rule), each if
/// it has waited longer than `BACKLOG_ALERT_SECS`. Each stuck item raises it once however many
/// sweeps find it, so a backlog that drains raises one more signal for each new oldest item
/// still past the threshold. Returns how many signals this run wrote. A carrier event's signal is
/// the operator's, in `DB`.
async fn log_backlog(env: &Env, config: &Rc<Config>, log: &carrier_events::Log) -> Result<usize, EdgeError> {
    let threshold_secs = config.backlog_alert_secs;
    let root = AccountDb::new(env, config, crate::bindings::DB)?;
    let at = now();
    let cutoff = Timestamp::from_unix_millis(at.unix_millis() - threshold_secs.saturating_mul(1000));
    let mut stuck = Vec::new();
    // The oldest event whose job is lost or stuck, and the oldest receipt parked for its
    // message: each is raised, so a receipt that waits its 24 hours hides no stuck job.
    let oldest = [log.unprocessed(cutoff, 1).await?.pop(), log.oldest_parked(cutoff).await?];
    for (id, _) in oldest.into_iter().flatten() {
        // Settled between the two reads: nothing is waiting any more.
        if let Some(row) = log.load(&id).await?.filter(|r| !r.settled()) {
            let since = row.created_at;
            stuck.push(
                signals::backlog_high(root.db(), &Stuck::CarrierEvent { id: &row.id, since }, threshold_secs, at)
                    .await?,
            );
        }
    }
    // Each signal written is a list of its copies' event ids; one already written is empty.
    let raised = stuck.iter().filter(|ids| !ids.is_empty()).count();
    crate::queues::deliver_many(&root, crate::store::outbox::to_enqueue_for(root.db(), &stuck.concat()).await?).await?;
    Ok(raised)
}

/// Raises `backlog.high` about delivery `id` of the account database `account`: the oldest
/// overdue delivery of an endpoint neither paused nor disabled (what such an endpoint holds
/// waits for its owner), or one found stranded waiting for a hand-on, if it is still pending.
/// It is written in its account's database, for the account and the operator both. Returns how
/// many signals this wrote (0 or 1).
async fn delivery_backlog(account: &AccountDb, id: &str) -> Result<usize, EdgeError> {
    let threshold_secs = account.config().backlog_alert_secs;
    let at = now();
    let db = account.db();
    let Some(due) = deliveries::due(db, id).await?.filter(|d| d.status == deliveries::DeliveryStatus::Pending) else {
        return Ok(0);
    };
    let delivery = Stuck::Delivery {
        id: &due.id,
        event_id: &due.event_id,
        endpoint_id: &due.endpoint_id,
        account_id: &due.account_id,
        since: due.next_attempt_at,
    };
    let written = signals::backlog_high(db, &delivery, threshold_secs, at).await?;
    crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &written).await?).await?;
    Ok(usize::from(!written.is_empty()))
}

/// Registers the operator's endpoint from `OPERATOR_WEBHOOK_URL` and `OPERATOR_WEBHOOK_SECRET`
/// (both optional; unset, signals are recorded and listed but delivered to no operator). The URL
/// is checked like any endpoint's, and the secret must be a `whsec_` secret.
pub async fn register_operator(env: &Env, config: &Rc<Config>) -> Result<bool, EdgeError> {
    use crate::bindings::vars;
    let Some(operator) = &config.operator_webhook else { return Ok(false) };
    let secret = &operator.secret;
    let allow_private = config.allow_private_endpoints;
    let url = crate::platform::endpoint_url(&operator.url, allow_private).map_err(|problem| EdgeError::Config {
        variable: vars::OPERATOR_WEBHOOK_URL,
        problem: problem.message().to_owned(),
    })?;
    exactly_core::webhook::SigningSecret::parse(secret).map_err(|_| EdgeError::Config {
        variable: vars::OPERATOR_WEBHOOK_SECRET,
        problem: "must be a whsec_ secret".into(),
    })?;
    // In every account database: an account's signals (a disabled endpoint, an exhausted
    // delivery) are written beside its deliveries, the operator's copy with them.
    for binding in routes::databases(env, config) {
        let registered = match AccountDb::new(env, config, &binding) {
            Ok(account) => crate::store::signals::register_operator(account.db(), url.as_str(), secret, now()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = registered {
            skipped("operator endpoint", &binding, &e);
        }
    }
    Ok(true)
}
