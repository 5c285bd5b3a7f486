//! First attempts sent beside a `jobs` batch: the batch that writes an inbound message claims the
//! first attempt of one of its deliveries (one whose gates could only let it through, to an
//! endpoint with room and an empty line: `store::deliveries::fanout::fan_out`), and the
//! invocation sends it as a `deliveries` invocation sends what its messages claimed, with no
//! queue message and no read in between.
//!
//! Only an invocation none of whose jobs calls out has them, and their attempts start once every
//! job of the batch has ended, so they never hold a connection a job needs, nor wait for one a
//! job holds. An invocation claims at most [`CLAIMS_MAX`], as many as a `deliveries` batch holds,
//! so its attempts wait for a place in its lanes no longer than those of such a batch, well
//! inside their leases.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use exactly_core::breaker;
use exactly_core::Timestamp;
use worker::Context;

use super::gate::{lease_from, Claimed};
use super::{start, Invocation, Shared};
use crate::store::deliveries;
use crate::store::{outbox, AccountDb};

/// The most first attempts one invocation claims with its jobs' batches (the `deliveries`
/// queue's batch size).
const CLAIMS_MAX: usize = 10;

/// The attempts a `jobs` invocation sends beside its batch.
pub struct Beside<'a> {
    ctx: &'a Context,
    shared: Shared,
    /// Claims it may still make.
    room: Cell<usize>,
    /// Claimed attempts, started when the batch's jobs have ended ([`Beside::go`]).
    ready: RefCell<Vec<(AccountDb, Claimed)>>,
}

impl<'a> Beside<'a> {
    pub fn new(ctx: &'a Context) -> Self {
        Beside { ctx, shared: Rc::new(Invocation::new()), room: Cell::new(CLAIMS_MAX), ready: RefCell::new(Vec::new()) }
    }

    /// The lease under which one batch made at `at` may claim a first attempt, while the
    /// invocation has room for one: the batch then ends with [`Beside::take`] of what it claimed.
    pub fn claiming(&self, at: Timestamp) -> Option<Timestamp> {
        let room = self.room.get();
        (room > 0).then(|| {
            self.room.set(room - 1);
            lease_from(at)
        })
    }

    /// Takes what a batch made under [`Beside::claiming`] claimed, to start with the others once
    /// the batch's jobs have ended; a batch that claimed nothing gives its room back.
    pub async fn take(&self, account: &AccountDb, claimed: outbox::Claimed) {
        if let Some(problem) = &claimed.unread {
            worker::console_error!(
                "{}",
                serde_json::json!({"deliveries": "claimed with their event", "outcome": "not read", "error": problem})
            );
        }
        let Some(at) = claimed.at.filter(|_| !claimed.dues.is_empty()) else {
            self.room.set(self.room.get() + 1);
            return;
        };
        for due in claimed.dues {
            if crate::faults::delivery_message_lost(due.url.as_deref().unwrap_or_default()) {
                // As a lost queue message would leave it: unclaimed, for the sweeper. A give-back
                // that fails leaves it to its lease.
                if let Err(e) = deliveries::give_back(account.db(), &due.id, due.attempts, at, false).await {
                    super::log(account.config(), &due.id, &Err(e));
                }
                continue;
            }
            let number = due.attempts;
            let claimed = Claimed { due, number, admission: breaker::Admission::Send, at };
            self.ready.borrow_mut().push((account.clone(), claimed));
        }
    }

    /// Starts every attempt taken, beside the batch: called once its jobs have ended.
    pub fn go(&self) {
        // Their time runs from now, when they start, not from the batch's start.
        self.shared.began.set(crate::platform::now());
        for (account, claimed) in self.ready.take() {
            start(self.ctx, &account, claimed, &self.shared);
        }
    }
}
