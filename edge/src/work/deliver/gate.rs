//! A delivery's gates, in order, and the claim of its attempt by compare-and-swap: settled or
//! deleted; paused or disabled; early; its endpoint's filter; the circuit; then the claim, which
//! also checks the resource's order (an ordered endpoint), the in-flight limit, the endpoint's
//! line and that the circuit has not changed.

use exactly_core::breaker;
use exactly_core::Timestamp;
use worker::D1Database;

use super::filtering::{verdict, Verdict};
use crate::error::EdgeError;
use crate::platform::now;
use crate::store::deliveries::{self, Claim, Due, Queued, Taken};
use crate::store::endpoints::circuit;
use crate::store::AccountDb;
use crate::work::outcome::Done;

/// What a delivery's gates decided.
pub(super) enum Gate {
    /// Its attempt is claimed: send it.
    Claimed(Box<Claimed>),
    /// Nothing to send now.
    Done(Done),
    /// The endpoint's circuit kept changing while the delivery tried to get into line: a job
    /// looks again shortly (one taken from a line is found by the sweeper).
    LookAgain,
}

/// An attempt this job claimed.
pub(super) struct Claimed {
    pub(super) due: Due,
    pub(super) number: i64,
    pub(super) admission: breaker::Admission,
    /// When its claim was taken (with its lease and the circuit at `due.circuit`).
    pub(super) at: Timestamp,
}

impl Claimed {
    /// Whether it may take the fast lane ([`super::lanes`]): a first attempt, through a closed circuit
    /// that counts no failure.
    pub(super) fn fast(&self) -> bool {
        self.number == 1
            && self.admission == breaker::Admission::Send
            && matches!(self.due.circuit.state(), breaker::State::Closed { failed: 0, .. })
    }
}

/// Takes delivery `id` through its endpoint's gates, in order: settled or deleted; paused or
/// disabled (held untouched); early; the circuit (open: into the line); then the claim, which
/// also checks the in-flight limit (under a rate limit, at most the rate), the line (older
/// deliveries go first) and that the circuit has not changed (else into the line). A probe's
/// turn is taken after its claim, so a turn is never taken for an attempt that does not go.
pub(super) async fn gate(account: &AccountDb, id: &str, mut ahead: Option<Box<Due>>) -> Result<Gate, EdgeError> {
    let db = account.db();
    for _ in 0..3 {
        // Read with its take from the line the first time, when it was.
        let due = match ahead.take() {
            Some(due) => Some(*due),
            None => deliveries::due(db, id).await?,
        };
        let Some(mut due) = due else { return Ok(Gate::Done(Done::NoSuchDelivery)) };
        if due.status != deliveries::DeliveryStatus::Pending {
            return Ok(Gate::Done(Done::AlreadySettled));
        }
        let started = now();
        if due.url.is_none() || due.secret.is_none() {
            fail(account, &due.id, "the endpoint was deleted", started).await?;
            return Ok(Gate::Done(Done::EndpointDisabled));
        }
        // A paused or disabled endpoint holds its deliveries, untouched, until it is resumed or
        // enabled (which puts them in its line); the sweeper does not pick them up meanwhile.
        if due.enabled != Some(true) || due.paused != Some(false) {
            return Ok(Gate::Done(Done::Held));
        }
        // An early or duplicate job: the scheduled one (or the sweeper) will come.
        if due.next_attempt_at.unix_millis() > started.unix_millis() + 1000 {
            return Ok(Gate::Done(Done::NotDue));
        }
        // The endpoint's filter as it is now decides, before any gate that would spend a place.
        match verdict(&due) {
            Verdict::Send => {}
            Verdict::HoldBack => {
                let settled = deliveries::filter_out(db, &due.id, due.attempts, started).await?;
                let done = if settled.is_some() { Done::Filtered } else { Done::ClaimedElsewhere };
                hand_on(account, settled).await;
                return Ok(Gate::Done(done));
            }
            Verdict::Broken(problem) => {
                fail(account, &due.id, &problem, started).await?;
                return Ok(Gate::Done(Done::Failed));
            }
        }
        let attempts = due.attempts;
        let version = due.circuit.version();
        let policy =
            crate::faults::breaker_for(due.url.as_deref().unwrap_or_default(), account.config().tuning.breaker);
        let (admission, probe) = breaker::admit(&policy, due.circuit.state(), started.unix_millis());
        if let breaker::Admission::Hold(_) = admission {
            if deliveries::wait_for_circuit(db, &due.id, &due.endpoint_id, attempts, version, started).await? {
                return Ok(Gate::Done(Done::WaitingForCircuit));
            }
            continue;
        }
        let number = attempts + 1;
        let lease = lease_from(started);
        // The endpoint's in-flight limit is the claim's to read ([`attempt`] takes the turns of
        // a rate-limited one).
        let claim = deliveries::claim_attempt(db, &due.id, &due.endpoint_id, number, lease, started, version).await?;
        match claim {
            Claim::Claimed(skipped) => due.skipped = skipped,
            Claim::Full => return Ok(Gate::Done(Done::WaitingForEndpoint)),
            Claim::Behind => return Ok(Gate::Done(Done::WaitingForPrevious)),
            Claim::Elsewhere => return Ok(Gate::Done(Done::ClaimedElsewhere)),
        }
        if let Some(probe) = probe {
            let about = circuit::About {
                endpoint_id: &due.endpoint_id,
                account_id: &due.account_id,
                url: due.url.as_deref().unwrap_or_default(),
            };
            // Whoever swaps first sends the probe; the other gives its claim back and waits.
            if circuit::swap(db, &about, version, probe, None, started).await?.is_none() {
                deliveries::unclaim(db, &due.id, number, started).await?;
                return Ok(Gate::Done(Done::WaitingForCircuit));
            }
        }
        return Ok(Gate::Claimed(Box::new(Claimed { due, number, admission, at: started })));
    }
    Ok(Gate::LookAgain)
}

/// Takes delivery `id`, as a queue message names it, through its gates: read and claimed in one
/// batch when its gates could only let it through ([`deliveries::due_claiming`]: a closed
/// circuit, which admits every attempt, and room at its endpoint), or put into its endpoint's
/// line in that batch when only the room was missing; else through [`gate`] with what that
/// batch read.
pub(super) async fn gate_queued(account: &AccountDb, id: &str) -> Result<Gate, EdgeError> {
    let db = account.db();
    let at = now();
    match deliveries::due_claiming(db, id, at, lease_from(at)).await? {
        Queued::Claimed(due, number) => {
            Ok(Gate::Claimed(Box::new(Claimed { due, number, admission: breaker::Admission::Send, at })))
        }
        Queued::InLine => Ok(Gate::Done(Done::WaitingForEndpoint)),
        Queued::Read(due) => gate(account, id, due.map(Box::new)).await,
    }
}

/// Fails pending delivery `id` with `reason` outside an attempt, once, and hands its resource on
/// ([`hand_on`]).
pub(super) async fn fail(account: &AccountDb, id: &str, reason: &str, at: Timestamp) -> Result<(), EdgeError> {
    let settled = deliveries::fail(account.db(), id, reason, at).await?;
    hand_on(account, settled).await;
    Ok(())
}

/// Wakes the line of the ordered endpoint that a delivery settled outside an attempt handed its
/// resource on to ([`deliveries::Settled`]), so the resource's next event goes now. A wake that
/// cannot be sent is logged: the cron's sweep wakes every line left with deliveries in it.
async fn hand_on(account: &AccountDb, settled: Option<deliveries::Settled>) {
    let Some(endpoint) = settled.and_then(|s| s.hands_on) else { return };
    if let Err(e) = crate::queues::wake_later(account, &endpoint, 0).await {
        worker::console_error!(
            "{}",
            serde_json::json!({"wake": endpoint, "outcome": "not sent", "error": e.to_string()})
        );
    }
}

/// While an attempt is in flight, other jobs for the delivery stand back this long, and it
/// holds one of its endpoint's in-flight places. Renewed right before the attempt is sent,
/// unless it is sent within [`super::RENEW_AFTER_MILLIS`] of its claim.
const ATTEMPT_LEASE_MILLIS: i64 = 60_000;

/// The lease of an attempt claimed at `at`.
pub(super) fn lease_from(at: Timestamp) -> Timestamp {
    Timestamp::from_unix_millis(at.unix_millis() + ATTEMPT_LEASE_MILLIS)
}

/// Takes the oldest delivery out of `endpoint`'s line, claiming its attempt in the same batch
/// when its gates could only let it through ([`deliveries::next_in_line`]).
pub(super) async fn take(db: &D1Database, endpoint: &str) -> Result<Option<Taken>, EdgeError> {
    let at = now();
    deliveries::next_in_line(db, endpoint, at, Some(lease_from(at))).await
}

/// A delivery taken out of its endpoint's line through its gates: one whose attempt the take
/// claimed goes as claimed (through the closed circuit the take found, read in its batch), the
/// others through [`gate`].
pub(super) async fn gate_taken(account: &AccountDb, taken: Taken) -> Result<Gate, EdgeError> {
    let db = account.db();
    let Taken { id, due, claimed, at } = taken;
    let Some(number) = claimed else { return gate(account, &id, due).await };
    let (due, at) = match due {
        Some(due) => (*due, at),
        // Not read with the take: read now, and renewed before it is sent (a claim time long
        // past), so that it goes under the circuit as it is then, not as it was read.
        None => match deliveries::due(db, &id).await? {
            Some(due) => (due, Timestamp::from_unix_millis(0)),
            // The lease runs out and the sweeper finds what is left of it.
            None => return Ok(Gate::Done(Done::NoSuchDelivery)),
        },
    };
    Ok(Gate::Claimed(Box::new(Claimed { due, number, admission: breaker::Admission::Send, at })))
}
