//! Processing one stored carrier event: decode (core), decide (core), apply (one D1 batch).
//!
//! Any job may run twice; every effect below is guarded on its own. With the event's dedupe row
//! and the account in one database (the default layout) the processed mark is a statement of
//! the effects' batch: one commit per fact. Otherwise the mark is written after the effects
//! committed (docs/scaling.md point 4), and a run between the two commits changes nothing but
//! the mark. Either way the announcement (the queue sends of the event's deliveries, and the
//! start of the first attempts its batch claimed) follows the commit; a crash before it leaves
//! deliveries that the sweeper sends (a claimed one once its lease has run out and it is
//! overdue).

use exactly_core::event::EventKind;
use exactly_core::message::{transition, Transition};
use exactly_core::CarrierEvent;

use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::queues::Carried;
use crate::store::carrier_events::{Log, Row};
use crate::store::outbox::Change;
use crate::store::{messages, numbers, routes, AccountDb};
use crate::work::deliver::Beside;
use crate::work::outcome::{Done, Outcome, Wait};

/// Processes the stored carrier event `id`. `number` (an inbound message's, from its job) is
/// read ahead: with every account in `DB`, its owner comes back with the event. An event the
/// job carried (`carried`) goes without any read when this isolate knows the number's owner
/// ([`from_job`]). With `beside`, an inbound message's batch claims the first attempt of one of
/// its deliveries that can go at once, which is sent beside the jobs' batch ([`Beside`]). Also
/// says whether the event's row was read.
pub async fn process(
    account: &AccountDb,
    id: &str,
    number: Option<&str>,
    carried: Option<&Carried>,
    beside: Option<&Beside<'_>>,
) -> Result<(Outcome, bool), EdgeError> {
    let env = account.env();
    let log = Log::open(env, account.config());
    if let Some((outcome, carrier_event_id)) = from_job(account, &log, id, number, carried, beside).await? {
        return Ok((crashed_after(outcome, &carrier_event_id)?, false));
    }
    Ok((read_and_process(account, &log, id, number, beside).await?, true))
}

/// [`process`] after reading the event's row.
async fn read_and_process(
    account: &AccountDb,
    log: &Log,
    id: &str,
    number: Option<&str>,
    beside: Option<&Beside<'_>>,
) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let (row, ahead) = match number.filter(|_| !routes::sharded(env, account.config())) {
        Some(number) => {
            let (row, owner) = log.load_with(id, |db| crate::store::numbers::owner_query(db, number)).await?;
            (row, owner.map(|result| (number, result)))
        }
        None => (log.load(id).await?, None),
    };
    let Some(row) = row else {
        return Ok(Outcome::Done(Done::NoSuchEvent));
    };
    if row.settled() {
        return Ok(Outcome::Done(Done::NoOp));
    }
    // Retention clears only settled events' payloads: an unsettled one without its payload was
    // erased (docs/contract.md §5, "Erasure"). Nothing of it is written; it is settled as such.
    if row.payload.is_none() {
        log.mark_processed(&row, now()).await?;
        return Ok(Outcome::Done(Done::Erased));
    }
    let event = match parse(&row) {
        Ok(event) => event,
        Err(problem) => {
            let failed = log.mark_failed(db, &row, &problem.to_string()).await?;
            crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &failed.signals).await?)
                .await?;
            return Ok(Outcome::Done(Done::Failed));
        }
    };
    let outcome = match &event.kind {
        EventKind::MessageReceived(inbound) => received(account, log, &row, &event, inbound, ahead, beside).await?,
        EventKind::MessageStatus(report) => status_report(account, log, &row, &event, report).await?,
        EventKind::CallInitiated(_) | EventKind::CallAnswered(_) | EventKind::CallHangup(_) => {
            crate::work::calls::process(account, log, &row, &event).await?
        }
        // Bridge reports and events this product does not act on are acknowledged as processed.
        EventKind::CallBridged(_) | EventKind::Unrecognized => Outcome::applied(log.mark_processed(&row, now()).await?),
    };
    crashed_after(outcome, &row.carrier_event_id)
}

/// The outcome, unless a fault is injected after the commit of `carrier_event_id`'s effects.
fn crashed_after(outcome: Outcome, carrier_event_id: &str) -> Result<Outcome, EdgeError> {
    if outcome == Outcome::Done(Done::Applied) && crate::faults::crash_after_commit(carrier_event_id) {
        return Err(EdgeError::unavailable(
            "injected fault",
            format!("injected crash after commit of {carrier_event_id}"),
        ));
    }
    Ok(outcome)
}

/// An inbound message whose job carried its event, to a number whose owner this isolate read
/// before ([`numbers::remembered`]), with every account in `DB`: its effects and the processed
/// mark in one batch and no read before it. The message is written only if the event is in
/// `DB`, neither processed nor failed, and still holds its payload (`messages::insert_inbound`),
/// which is what the read would have checked. `None` when this does not apply, or when the mark changed nothing (a job
/// run again, an event failed, erased or elsewhere): then the event is read and decided as any other.
/// Returns the outcome and the event's carrier id.
async fn from_job(
    account: &AccountDb,
    log: &Log,
    id: &str,
    number: Option<&str>,
    carried: Option<&Carried>,
    beside: Option<&Beside<'_>>,
) -> Result<Option<(Outcome, String)>, EdgeError> {
    let (env, db) = (account.env(), account.db());
    let (Some(number), Some(c)) = (number, carried) else { return Ok(None) };
    if routes::sharded(env, account.config()) {
        return Ok(None);
    }
    let Some(owner) = numbers::remembered(number) else { return Ok(None) };
    let created_at = exactly_core::Timestamp::from_unix_millis(c.created_at);
    let row = Log::carried(id, c.carrier, &c.carrier_event_id, &c.event_type, &c.payload, created_at);
    let Ok(event) = parse(&row) else { return Ok(None) };
    let EventKind::MessageReceived(inbound) = &event.kind else { return Ok(None) };
    if inbound.to != number {
        return Ok(None);
    }
    let key = Log::key_of(&row);
    if key.is_null() {
        return Ok(None);
    }
    if crate::faults::hold_until_erased(&row.carrier_event_id)
        && log.load(id).await?.is_some_and(|r| r.payload.as_deref() == Some(c.payload.as_str()))
    {
        return Err(EdgeError::unavailable("injected fault", "injected hold until the event's payload is erased"));
    }
    let mark = log.mark_carried(db, &row, now())?;
    let message_id = new_id("msg")?;
    let learn = !owner.carrier_known;
    let at = now();
    let lease = beside.and_then(|b| b.claiming(at));
    let (change, marked) = messages::insert_inbound(
        db,
        &message_id,
        &owner.account_id,
        event.provider,
        inbound,
        at,
        Some(mark),
        learn,
        Some((key, c.payload.as_str())),
        lease,
    )
    .await?;
    if !marked {
        // Nothing was written, so nothing claimed: the room goes back.
        if let Some(beside) = beside {
            beside.take(account, change.claimed).await;
        }
        return Ok(None);
    }
    if learn {
        numbers::learned(number);
    }
    if change.changed && !inbound.media.is_empty() {
        crate::queues::copy_media(account, &message_id, inbound.media.len()).await?;
    }
    let outcome = settled(account, log, &row, change, true, beside).await?;
    Ok(Some((outcome, row.carrier_event_id)))
}

/// Why a stored carrier event can never be processed: it is failed at once, never retried.
#[derive(Debug)]
enum Unusable {
    Pruned,
    Unparsable(String),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Pruned => f.write_str("the payload was pruned before processing"),
            Unusable::Unparsable(why) => write!(f, "stored payload does not parse: {why}"),
        }
    }
}

fn parse(row: &Row) -> Result<CarrierEvent, Unusable> {
    let payload = row.payload.as_deref().ok_or(Unusable::Pruned)?;
    exactly_core::parse_stored(row.carrier, payload.as_bytes()).map_err(|e| Unusable::Unparsable(e.to_string()))
}

/// After a change committed: hand the first attempt its batch claimed to `beside`, enqueue its
/// event's other deliveries, and say what happened.
pub async fn announced(
    account: &AccountDb,
    mut change: Change,
    beside: Option<&Beside<'_>>,
) -> Result<Outcome, EdgeError> {
    let db = account.db();
    let claimed = std::mem::take(&mut change.claimed);
    if let Some(beside) = beside {
        beside.take(account, claimed).await;
    }
    crate::queues::deliver_many(account, change.to_enqueue(db).await?).await?;
    Ok(Outcome::applied(change.changed))
}

/// After the effects of carrier event `row` committed: announce them, and mark the event
/// processed unless the mark committed with them (`marked`). Between the two commits a crash
/// reruns the job, which changes nothing but the mark; after the one, the sweeper sends what was
/// not announced.
async fn settled(
    account: &AccountDb,
    log: &Log,
    row: &Row,
    change: Change,
    marked: bool,
    beside: Option<&Beside<'_>>,
) -> Result<Outcome, EdgeError> {
    if marked && crate::faults::crash_before_mark(&row.carrier_event_id) {
        return Err(EdgeError::unavailable(
            "injected fault",
            format!(
                "injected crash between the effects (committed with the mark) and their announcement of {}",
                row.carrier_event_id
            ),
        ));
    }
    let outcome = announced(account, change, beside).await?;
    if !marked {
        log.mark_processed(row, now()).await?;
    }
    Ok(outcome)
}

#[allow(clippy::too_many_arguments)]
async fn received(
    account: &AccountDb,
    log: &Log,
    row: &Row,
    event: &CarrierEvent,
    inbound: &exactly_core::event::InboundMessage,
    ahead: Option<(&str, crate::store::Reply)>,
    beside: Option<&Beside<'_>>,
) -> Result<Outcome, EdgeError> {
    let (env, db) = (account.env(), account.db());
    // The number's account database (docs/scaling.md, "Accounts across databases").
    let binding = routes::of_number(env, account.config(), &inbound.to).await?;
    let owners = account.other(binding.as_deref())?;
    let (account_binding, resources) = (binding, owners.db());
    let owner = match ahead {
        // Read with the event, in `DB`: the account database when no account is elsewhere.
        Some((number, result)) if number == inbound.to => numbers::owner_in(&result, number)?,
        _ => numbers::owner(resources, &inbound.to).await?,
    };
    if let (None, Some(owner)) = (&account_binding, &owner) {
        numbers::remember(&inbound.to, owner);
    }
    let Some(owner) = owner else {
        let problem = format!("no account owns the number {}", inbound.to);
        let failed = log.mark_failed(db, row, &problem).await?;
        crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &failed.signals).await?).await?;
        return Ok(Outcome::Done(Done::Failed));
    };
    let id = new_id("msg")?;
    let mark = log.mark_with_effects(resources, account_binding.as_deref(), row, now())?;
    let marked = mark.is_some();
    let at = now();
    let lease = beside.and_then(|b| b.claiming(at));
    let (change, _) = messages::insert_inbound(
        resources,
        &id,
        &owner.account_id,
        event.provider,
        inbound,
        at,
        mark,
        !owner.carrier_known,
        None,
        lease,
    )
    .await?;
    if !owner.carrier_known {
        numbers::learned(&inbound.to);
    }
    // Only the batch that recorded the message wrote its media rows. If this enqueue is lost,
    // the sweeper finds the items not copied.
    if change.changed && !inbound.media.is_empty() {
        crate::queues::copy_media(&owners, &id, inbound.media.len()).await?;
    }
    settled(&owners, log, row, change, marked, beside).await
}

async fn status_report(
    account: &AccountDb,
    log: &Log,
    row: &Row,
    event: &CarrierEvent,
    report: &exactly_core::event::StatusReport,
) -> Result<Outcome, EdgeError> {
    // The sender's account database: where the route of the carrier id points, or `DB`.
    let route = routes::of_message(account.env(), account.config(), event.provider, &report.carrier_message_id).await?;
    let account = &account.other(route.as_deref())?;
    let (account_binding, db) = (route, account.db());
    let Some(message) = messages::by_carrier_id(db, event.provider, &report.carrier_message_id).await? else {
        // The receipt beat the send result. It waits, parked on the carrier's message id, and
        // the batch that records the send (or, in `DB`, its route) wakes it; duplicates and
        // sweeps park it again and spend nothing. The park is refused if the message or its
        // route appeared meanwhile: decide again.
        return Ok(if log.park(db, row, event.provider, &report.carrier_message_id, now()).await? {
            Outcome::Done(Done::Parked { in_db: account_binding.is_none() })
        } else {
            Outcome::RetryIn(1, Wait::MessageAppeared)
        });
    };
    if crate::faults::dedupe_outage(&row.carrier_event_id, crate::bindings::queues::JOBS_DEAD_LETTER_ATTEMPTS) {
        return Err(EdgeError::unavailable(
            "injected fault",
            format!("injected outage of the dedupe database at {}", row.id),
        ));
    }
    let (current, Some(reported)) = (message.status, report.status) else {
        return Ok(Outcome::applied(log.mark_processed(row, now()).await?));
    };
    match transition(current, reported) {
        Transition::Move { to, .. } => {
            let mark = log.mark_with_effects(db, account_binding.as_deref(), row, now())?;
            let marked = mark.is_some();
            let change = messages::apply_report(db, &message, to, report, &row.id, now(), mark).await?;
            settled(account, log, row, change, marked, None).await
        }
        // Duplicate, late or after a terminal word: nothing moves, the event is done.
        Transition::Unchanged(_) => {
            log.mark_processed(row, now()).await?;
            Ok(Outcome::Done(Done::NoOp))
        }
    }
}
