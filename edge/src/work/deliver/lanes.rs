//! The places an invocation's attempts take before they are sent.
//!
//! An invocation keeps at most six connections open, and a fetch beyond them would wait inside
//! the runtime while its timeout already runs (an attempt never sent recorded as timed out). So
//! an attempt takes a place before its clock starts. The fast lane is for first attempts through
//! a circuit that counts no failure; the slow lane for retries, probes and attempts to endpoints
//! that failed lately, which may hang for a whole attempt timeout.
//!
//! One endpoint holds at most one fast place at a time, so an endpoint that has just begun to
//! hang (its circuit counts no failure until its first timeout) holds one fast place, not all.
//! Its other first attempts take whichever comes first: its own fast place, freed when the
//! attempt ahead of them ends, or a slow place. So a healthy endpoint's attempts never wait
//! only behind another endpoint's hung ones: each waits at most for its own endpoint's attempt,
//! and an attempt waiting for a place still holds one of its endpoint's in-flight places.

use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::pin;
use std::sync::Arc;

use async_lock::{Semaphore, SemaphoreGuard, SemaphoreGuardArc};
use futures_util::future::{select, Either};

const FAST_LANE: usize = 4;
const SLOW_LANE: usize = 2;

pub struct Lanes {
    fast: Semaphore,
    slow: Semaphore,
    /// Each endpoint's one fast place in this invocation.
    own: RefCell<HashMap<String, Arc<Semaphore>>>,
}

/// A place taken: held while the attempt is sent and recorded, given back when dropped.
pub enum Place<'a> {
    Fast { _own: SemaphoreGuardArc, _place: SemaphoreGuard<'a> },
    Slow { _place: SemaphoreGuard<'a> },
}

#[cfg(test)]
impl Place<'_> {
    pub fn is_fast(&self) -> bool {
        matches!(self, Place::Fast { .. })
    }
}

impl Default for Lanes {
    fn default() -> Self {
        Lanes { fast: Semaphore::new(FAST_LANE), slow: Semaphore::new(SLOW_LANE), own: RefCell::default() }
    }
}

impl Lanes {
    /// A place for an attempt to `endpoint`; `fast` when it may take the fast lane.
    pub async fn place(&self, endpoint: &str, fast: bool) -> Place<'_> {
        if !fast {
            return Place::Slow { _place: self.slow.acquire().await };
        }
        let own =
            self.own.borrow_mut().entry(endpoint.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(1))).clone();
        // Its own fast place first when it is free (`select` polls it first).
        match select(pin!(own.acquire_arc()), pin!(self.slow.acquire())).await {
            Either::Left((own, _)) => Place::Fast { _own: own, _place: self.fast.acquire().await },
            Either::Right((place, _)) => Place::Slow { _place: place },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    /// Polls `f` once: its output if it is ready.
    fn now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        match std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_healthy_endpoints_attempts_never_wait_behind_another_endpoints_hung_ones() {
        let lanes = Lanes::default();
        // The other endpoint's retries hang in both slow places.
        let hung: Vec<_> =
            (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("hung", false))).expect("a slow place")).collect();
        assert!(hung.iter().all(|p| !p.is_fast()));
        let first = now(&mut Box::pin(lanes.place("healthy", true))).expect("a fast place at once");
        assert!(first.is_fast());
        let mut second = Box::pin(lanes.place("healthy", true));
        assert!(now(&mut second).is_none(), "waits for its own endpoint's place");
        drop(first);
        let second = now(&mut second).expect("its endpoint's attempt ended: the place is its");
        assert!(second.is_fast());
        drop(hung);
    }

    #[test]
    fn one_endpoint_holds_one_fast_place_and_its_other_attempts_take_slow_ones() {
        let lanes = Lanes::default();
        let first = now(&mut Box::pin(lanes.place("hanging", true))).expect("a fast place");
        let others: Vec<_> =
            (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("hanging", true))).expect("a slow place")).collect();
        assert!(first.is_fast() && others.iter().all(|p| !p.is_fast()));
        assert!(now(&mut Box::pin(lanes.place("hanging", true))).is_none(), "no second fast place");
        // Every other endpoint still has the rest of the fast lane.
        let rest: Vec<_> = (1..FAST_LANE)
            .map(|n| now(&mut Box::pin(lanes.place(&format!("other-{n}"), true))).expect("a fast place"))
            .collect();
        assert!(rest.iter().all(Place::is_fast));
    }

    #[test]
    fn a_waiting_attempt_takes_a_slow_place_that_frees_first() {
        let lanes = Lanes::default();
        let first = now(&mut Box::pin(lanes.place("a", true))).expect("a fast place");
        let slow: Vec<_> = (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("b", false))).expect("slow")).collect();
        let mut waiting = Box::pin(lanes.place("a", true));
        assert!(now(&mut waiting).is_none());
        drop(slow);
        let taken = now(&mut waiting).expect("a slow place freed");
        assert!(!taken.is_fast());
        // Its own fast place, still held by `first`, was not taken by the attempt that lost.
        drop(first);
        assert!(now(&mut Box::pin(lanes.place("a", true))).expect("free again").is_fast());
    }
}
