//! The one write recipe of a guarded change of a message or a call (docs/architecture.md,
//! "A carrier fact's path"): one batch of
//!
//! 1. the guard: the statement that changes the resource's row at most once (an `UPDATE ...
//!    WHERE` that refuses to run twice, an `INSERT ... ON CONFLICT DO NOTHING`);
//! 2. the customer event, written only if the guard changed a row ([`Event::insert_if_changed`]);
//! 3. what rides on the same change, in order, each written only if the statement before it
//!    changed a row (`WHERE changes() = 1`): a history row, a usage charge;
//! 4. the event's fan-out ([`Event::fan_out`]), which needs no `changes()`;
//! 5. statements apart from the change (a processed mark, a wake of parked receipts, media
//!    items), whose results the caller reads back by position;
//! 6. when the batch announces its deliveries, the read of them
//!    ([`Event::pending_deliveries`]), last.
//!
//! The batch commits all or nothing; [`Change`] says whether the guard changed a row and which
//! event it wrote.

use exactly_core::Timestamp;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::outbox::{Change, Event};
use crate::store::{self as db, Reply};

/// A guarded change being built; [`Transition::commit`] writes it.
pub struct Transition {
    guard: D1PreparedStatement,
    event: Option<Event>,
    chained: Vec<D1PreparedStatement>,
    apart: Vec<D1PreparedStatement>,
    /// `Some(lease)`: the batch ends with the read of the event's deliveries, and the fan-out
    /// claims one first attempt under `lease` when that is `Some`.
    announce: Option<Option<Timestamp>>,
}

/// What a committed [`Transition`] returned.
pub struct Committed {
    pub change: Change,
    results: Vec<Reply>,
    apart_at: usize,
}

impl Committed {
    /// The result of the `n`th statement added with [`Transition::apart`].
    pub fn apart(&self, n: usize) -> Option<&Reply> {
        self.results.get(self.apart_at + n)
    }
}

impl Transition {
    /// A change guarded by `guard`, announced by `event` when it has one.
    pub fn new(guard: D1PreparedStatement, event: Option<Event>) -> Self {
        Transition { guard, event, chained: Vec::new(), apart: Vec::new(), announce: None }
    }

    /// Adds a statement that rides on the change: it stands after the event (or the guard) and
    /// the statements chained before it, and is written only if the one before it changed a row.
    pub fn then(mut self, statement: D1PreparedStatement) -> Self {
        self.chained.push(statement);
        self
    }

    /// How many statements apart from the change were added so far: the position
    /// ([`Committed::apart`]) of the next one.
    pub fn aparts(&self) -> usize {
        self.apart.len()
    }

    /// Adds a statement apart from the change, after the fan-out.
    pub fn apart(mut self, statement: D1PreparedStatement) -> Self {
        self.apart.push(statement);
        self
    }

    /// Ends the batch with the read of the event's deliveries, so that announcing them needs no
    /// read ([`Change::announced`]); with a `lease`, the fan-out also claims one first attempt
    /// for the caller to send.
    pub fn announced(mut self, lease: Option<Timestamp>) -> Self {
        self.announce = Some(lease);
        self
    }

    /// Writes the change in one batch at `now`.
    pub async fn commit(self, db: &D1Database, now: Timestamp) -> Result<Committed, EdgeError> {
        let Transition { guard, event, chained, apart, announce } = self;
        let mut statements = Vec::with_capacity(4 + chained.len() + apart.len());
        statements.push(guard);
        if let Some(e) = &event {
            statements.push(e.insert_if_changed(db, now)?);
        }
        statements.extend(chained);
        if let Some(e) = &event {
            statements.push(e.fan_out_claiming(db, now, announce.flatten())?);
        }
        let apart_at = statements.len();
        statements.extend(apart);
        let announcing = match (&event, announce) {
            (Some(e), Some(lease)) => {
                statements.push(e.pending_deliveries(db, now, lease)?);
                Some((e, lease))
            }
            _ => None,
        };
        let results = db::batch(db, statements).await?;
        let change = match announcing {
            Some((e, lease)) => Change::announced(&results, e, lease.map(|_| now))?,
            None => Change::of(&results, event.as_ref()),
        };
        Ok(Committed { change, results, apart_at })
    }
}
