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
//! A first attempt takes whichever frees first: a fast place (once its endpoint's own is free)
//! or a slow place. So a healthy endpoint's attempt waits behind hung ones only while every
//! place it could take is held; a first attempt never waits for a slow place alone while the
//! fast lane has room, as one did for 15 s beside a dead endpoint (docs/benchmarks.md). An
//! attempt waiting for a place still holds one of its endpoint's in-flight places.
//!
//! A place given back goes to an attempt already waiting before one that asks after it: a
//! chain gives its place back and asks for one for its next attempt in the same turn of the
//! runtime, and would otherwise take it again before the waiting attempt is polled, round after
//! round (an attempt claimed early then went out behind twenty-five claimed after it).
//!
//! A wait for a place ends with the invocation's time ([`Lanes::place_within`]): places are held
//! by attempts that may hang until that time runs out, and an attempt that got its place after
//! it would give its claim back later still, past the end of what the runtime lets run beside
//! the invocation (seen: three round trips 2 to 10 s past it, the delivery then stranded claimed
//! until its lease ran out and the sweeper found it).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use async_lock::{Semaphore, SemaphoreGuard, SemaphoreGuardArc};
use futures_util::future::{select, Either};

const FAST_LANE: usize = 4;
const SLOW_LANE: usize = 2;

pub struct Lanes {
    fast: Semaphore,
    slow: Semaphore,
    /// Each endpoint's one fast place in this invocation.
    own: RefCell<HashMap<String, Arc<Semaphore>>>,
    /// Attempts waiting for a place.
    waiting: Cell<usize>,
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
        Lanes {
            fast: Semaphore::new(FAST_LANE),
            slow: Semaphore::new(SLOW_LANE),
            own: RefCell::default(),
            waiting: Cell::new(0),
        }
    }
}

impl Lanes {
    /// [`Lanes::place`], unless `ends` (the end of the time an attempt may still be sent in)
    /// comes first: then `None`, and the attempt waits no more.
    pub async fn place_within(&self, endpoint: &str, fast: bool, ends: impl Future<Output = ()>) -> Option<Place<'_>> {
        match select(pin!(self.place(endpoint, fast)), pin!(ends)).await {
            Either::Left((place, _)) => Some(place),
            Either::Right(((), _)) => None,
        }
    }

    /// A place for an attempt to `endpoint`; `fast` when it may take the fast lane.
    pub async fn place(&self, endpoint: &str, fast: bool) -> Place<'_> {
        // A place given back has woken the attempt waiting for it, which takes it when it runs:
        // this one runs after it, and then waits behind it if there is no other place.
        if self.waiting.get() > 0 {
            YieldNow(false).await;
        }
        self.waiting.set(self.waiting.get() + 1);
        let _waiting = Waiting(&self.waiting);
        if !fast {
            return Place::Slow { _place: self.slow.acquire().await };
        }
        let own =
            self.own.borrow_mut().entry(endpoint.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(1))).clone();
        let fast_place = async move {
            let own = own.acquire_arc().await;
            Place::Fast { _own: own, _place: self.fast.acquire().await }
        };
        // The fast way is polled first, so it is taken when both are free. The other way's wait
        // ends with this statement: a wait left registered would take a wake-up meant for
        // another attempt.
        match select(pin!(fast_place), pin!(self.slow.acquire())).await {
            Either::Left((place, _)) => place,
            Either::Right((place, _)) => Place::Slow { _place: place },
        }
    }
}

/// Counts an attempt as waiting for a place until it has one (or its wait is dropped).
struct Waiting<'a>(&'a Cell<usize>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// Lets every task already woken run before this one goes on.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    /// Polls `f` once: its output if it is ready.
    fn now<F: Future + Unpin>(f: &mut F) -> Option<F::Output> {
        polled(f, Waker::noop())
    }

    fn polled<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Option<F::Output> {
        match std::pin::Pin::new(f).poll(&mut Context::from_waker(waker)) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        }
    }

    /// A waker that counts its wake-ups: a future is polled again only once it was woken.
    #[derive(Default)]
    struct Woken(AtomicUsize);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_healthy_endpoints_second_attempt_takes_its_own_fast_place_when_the_slow_lane_hangs() {
        let lanes = Lanes::default();
        // The other endpoint's retries hang in both slow places.
        let hung: Vec<_> =
            (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("hung", false))).expect("slow")).collect();
        assert!(hung.iter().all(|p| !p.is_fast()));
        let first = now(&mut Box::pin(lanes.place("healthy", true))).expect("a fast place at once");
        assert!(first.is_fast());
        let mut second = Box::pin(lanes.place("healthy", true));
        assert!(now(&mut second).is_none(), "waits for its own endpoint's place");
        drop(first);
        let second = now(&mut second).expect("its endpoint's attempt ended: the place is its");
        assert!(second.is_fast());
    }

    #[test]
    fn a_first_attempt_takes_a_slow_place_when_the_fast_lane_is_full_of_endpoints_beginning_to_hang() {
        let lanes = Lanes::default();
        let hanging: Vec<_> = (0..FAST_LANE)
            .map(|n| now(&mut Box::pin(lanes.place(&format!("hanging-{n}"), true))).expect("a fast place"))
            .collect();
        assert!(hanging.iter().all(Place::is_fast));
        let healthy = now(&mut Box::pin(lanes.place("healthy", true))).expect("a slow place at once");
        assert!(!healthy.is_fast());
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
    fn a_freed_slow_place_wakes_an_attempt_that_takes_it() {
        let lanes = Lanes::default();
        let ahead = now(&mut Box::pin(lanes.place("healthy", true))).expect("fast");
        let busy: Vec<_> = (1..FAST_LANE)
            .map(|n| now(&mut Box::pin(lanes.place(&format!("busy-{n}"), true))).expect("fast"))
            .collect();
        let mut hung: Vec<_> =
            (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("dead", false))).expect("slow")).collect();
        let woken: [Arc<Woken>; 3] = Default::default();
        let wakers: Vec<Waker> = woken.iter().map(|w| Waker::from(Arc::clone(w))).collect();
        // The healthy endpoint's second attempt waits for its own fast place or a slow one;
        // another endpoint's first attempt waits for a fast place.
        let mut second = Box::pin(lanes.place("healthy", true));
        let mut other = Box::pin(lanes.place("other", true));
        assert!(polled(&mut second, &wakers[0]).is_none() && polled(&mut other, &wakers[1]).is_none());
        // The attempt ahead ends and the other endpoint's attempt takes the fast place it freed:
        // the second attempt has its endpoint's place now and waits for a fast one.
        drop(ahead);
        let other = polled(&mut other, &wakers[1]).expect("the freed fast place");
        assert!(other.is_fast());
        assert!(polled(&mut second, &wakers[0]).is_none());
        // A retry waits behind them for the slow lane, and one hung retry ends.
        let mut retry = Box::pin(lanes.place("dead", false));
        assert!(polled(&mut retry, &wakers[2]).is_none());
        for w in &woken {
            w.0.store(0, Ordering::SeqCst);
        }
        hung.pop();
        // Whoever was woken is polled, as the runtime would: one of them takes the freed place.
        let second_now = (woken[0].0.load(Ordering::SeqCst) > 0).then(|| polled(&mut second, &wakers[0])).flatten();
        let retry_now = (woken[2].0.load(Ordering::SeqCst) > 0).then(|| polled(&mut retry, &wakers[2])).flatten();
        let taken = usize::from(second_now.is_some()) + usize::from(retry_now.is_some());
        assert_eq!(
            taken,
            1,
            "the freed slow place was taken: second {}, retry {}",
            second_now.is_some(),
            retry_now.is_some()
        );
        drop(busy);
    }

    #[test]
    fn a_wait_for_a_place_ends_with_the_invocations_time_and_leaves_the_place_to_the_next() {
        let lanes = Lanes::default();
        let holders: Vec<_> = std::iter::once(now(&mut Box::pin(lanes.place("busy", true))).expect("fast"))
            .chain((0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("busy", true))).expect("slow")))
            .collect();
        // A free place is taken even as the time ends.
        let other = now(&mut Box::pin(lanes.place_within("other", true, std::future::ready(()))));
        assert!(matches!(other, Some(Some(ref p)) if p.is_fast()), "a free place is taken");
        // While time is left, the attempt waits; once it has ended, an attempt waits no more.
        let mut waiting = Box::pin(lanes.place_within("busy", true, std::future::pending()));
        assert!(now(&mut waiting).is_none(), "every place it could take is held");
        let ended = now(&mut Box::pin(lanes.place_within("busy", true, std::future::ready(()))));
        assert!(matches!(ended, Some(None)), "the time ended before a place freed: no place");
        // The attempt that gave up holds nothing and counts as waiting no more: the place freed
        // next goes to the attempt still waiting.
        assert_eq!(lanes.waiting.get(), 1);
        drop(holders);
        assert!(matches!(now(&mut waiting), Some(Some(_))), "the waiting attempt takes a freed place");
        assert_eq!(lanes.waiting.get(), 0);
    }

    #[test]
    fn a_freed_place_goes_to_the_attempt_already_waiting_not_to_one_that_asks_after() {
        let lanes = Lanes::default();
        // Hung retries hold the slow lane: the endpoint's attempts can only take its fast place.
        let hung: Vec<_> =
            (0..SLOW_LANE).map(|_| now(&mut Box::pin(lanes.place("dead", false))).expect("slow")).collect();
        let chain = now(&mut Box::pin(lanes.place("healthy", true))).expect("fast");
        let woken: [Arc<Woken>; 2] = Default::default();
        let wakers: Vec<Waker> = woken.iter().map(|w| Waker::from(Arc::clone(w))).collect();
        let mut waiting = Box::pin(lanes.place("healthy", true));
        assert!(polled(&mut waiting, &wakers[0]).is_none());
        // The chain's attempt ends and its next attempt asks for a place at once, before the
        // waiting attempt (woken by the place given back) runs again.
        drop(chain);
        let mut next = Box::pin(lanes.place("healthy", true));
        assert!(polled(&mut next, &wakers[1]).is_none(), "the place is the waiting attempt's");
        let first = polled(&mut waiting, &wakers[0]).expect("the attempt that waited takes it");
        assert!(first.is_fast());
        assert!(polled(&mut next, &wakers[1]).is_none());
        drop(first);
        assert!(polled(&mut next, &wakers[1]).is_some(), "then the next attempt's turn");
        drop(hung);
    }
}
