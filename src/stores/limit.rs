//! The adaptive limit of objects in flight, one per cloud side of a copy: it starts at
//! `--transfers`, halves when the store throttles (503, 429, `SlowDown`) and grows by one after
//! a window of successes, back up to `--transfers` (AIMD, as TCP's congestion window). Every
//! object copy takes a permit from the limits of both its sides before it starts (in
//! `transfer::copy_one`); the retry loops ([`super::retry::Retry`]) report throttles and
//! successes. `buffer_unordered(transfers)` of the callers stays the upper bound.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::core::metrics::LimitGauge;

/// The arithmetic of the limit, without clocks or locks.
///
/// - A throttled request halves the limit (at least 1) unless the limit was already cut since
///   that request started: the requests in flight when the store begins to throttle all see
///   it, and they count as one signal, not one halving each. Each cut starts a new epoch.
/// - A success counts towards the next step; `limit` successes since the last change raise
///   the limit by one (+1 per window of `limit` requests), up to `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aimd {
    limit: usize,
    max: usize,
    successes: usize,
    epoch: u64,
}

impl Aimd {
    /// A limit at `max` (at least 1).
    pub fn new(max: usize) -> Aimd {
        let max = max.max(1);
        Aimd {
            limit: max,
            max,
            successes: 0,
            epoch: 0,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The epoch a request starting now belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A request that started in `epoch` was throttled. Returns the new limit if it changed.
    pub fn throttled(&mut self, epoch: u64) -> Option<usize> {
        if epoch != self.epoch {
            return None;
        }
        self.epoch += 1;
        self.successes = 0;
        let next = (self.limit / 2).max(1);
        (next != self.limit).then(|| {
            self.limit = next;
            next
        })
    }

    /// A request succeeded. Returns the new limit if it changed.
    pub fn succeeded(&mut self) -> Option<usize> {
        if self.limit >= self.max {
            return None;
        }
        self.successes += 1;
        (self.successes >= self.limit).then(|| {
            self.successes = 0;
            self.limit += 1;
            self.limit
        })
    }
}

#[derive(Debug)]
struct State {
    aimd: Aimd,
    in_flight: usize,
}

/// An adaptive semaphore: [`Aimd`] decides how many permits there are.
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
    freed: Notify,
    gauge: Arc<LimitGauge>,
}

/// One object in flight; the slot is freed when dropped (done, failed or cancelled).
#[derive(Debug)]
pub struct Permit {
    limiter: Arc<Limiter>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut st = self.limiter.lock();
        st.in_flight -= 1;
        self.limiter
            .gauge
            .in_flight
            .store(st.in_flight as u64, Relaxed);
        drop(st);
        self.limiter.freed.notify_waiters();
    }
}

impl Limiter {
    /// A limit of `max` objects for `side` (`src`, `dst`) of a `store` (`s3`, `az`, `gs`).
    pub fn new(max: usize, store: &'static str, side: &'static str) -> Arc<Limiter> {
        let aimd = Aimd::new(max);
        let gauge = crate::core::metrics::limit_gauge(store, side, aimd.limit() as u64);
        Arc::new(Limiter {
            state: Mutex::new(State { aimd, in_flight: 0 }),
            freed: Notify::new(),
            gauge,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // the state stays consistent even if a panic elsewhere held the lock
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a free slot under the current limit.
    pub async fn acquire(self: &Arc<Self>) -> Permit {
        loop {
            // registered before looking, so that a slot freed in between is not missed
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut st = self.lock();
                if st.in_flight < st.aimd.limit() {
                    st.in_flight += 1;
                    self.gauge.in_flight.store(st.in_flight as u64, Relaxed);
                    return Permit {
                        limiter: self.clone(),
                    };
                }
            }
            freed.await;
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.lock().aimd.limit()
    }

    /// Permits taken now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// The epoch of a request starting now (see [`Aimd::throttled`]).
    pub fn epoch(&self) -> u64 {
        self.lock().aimd.epoch()
    }

    /// A request that started in `epoch` was throttled.
    pub fn throttled(&self, epoch: u64) {
        let mut st = self.lock();
        if let Some(limit) = st.aimd.throttled(epoch) {
            self.changed(limit, st.in_flight, "lowered: the store throttles");
        }
    }

    /// A request succeeded.
    pub fn succeeded(&self) {
        let mut st = self.lock();
        if let Some(limit) = st.aimd.succeeded() {
            self.changed(limit, st.in_flight, "raised");
            drop(st);
            self.freed.notify_waiters();
        }
    }

    fn changed(&self, limit: usize, in_flight: usize, how: &str) {
        self.gauge.limit.store(limit as u64, Relaxed);
        tracing::debug!(
            store = self.gauge.store,
            side = self.gauge.side,
            limit,
            in_flight,
            "transfer limit {how}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Throttled in the current epoch, throttled by a request of an older epoch, success.
    #[derive(Clone, Copy, Debug)]
    enum Ev {
        T,
        Old,
        S,
    }

    #[test]
    fn halves_on_throttles_and_climbs_back_one_window_at_a_time() {
        use Ev::*;
        // (max, events, the limit after each event)
        let table: &[(usize, &[Ev], &[usize])] = &[
            // halving stops at 1
            (16, &[T, T, T, T, T, T], &[8, 4, 2, 1, 1, 1]),
            (5, &[T, T, T], &[2, 1, 1]),
            // requests that started before a cut do not cut again
            (16, &[T, Old, Old, T], &[8, 8, 8, 4]),
            // +1 after `limit` successes: 1 → 2 after 1, 2 → 3 after 2 more, 3 → 4 after 3
            (
                4,
                &[T, T, T, S, S, S, S, S, S],
                &[2, 1, 1, 2, 2, 3, 3, 3, 4],
            ),
            // never above max
            (2, &[S, S, S, T, S, S, S], &[2, 2, 2, 1, 2, 2, 2]),
            // a throttle starts the window again
            (
                8,
                &[T, S, S, S, T, S, S, S, S],
                &[4, 4, 4, 4, 2, 2, 3, 3, 3],
            ),
            // at 1 a throttle changes nothing but the window
            (1, &[T, S, T], &[1, 1, 1]),
        ];
        for (max, events, want) in table {
            let mut a = Aimd::new(*max);
            let mut got = Vec::new();
            for e in events.iter() {
                match e {
                    T => {
                        let epoch = a.epoch();
                        a.throttled(epoch);
                    }
                    Old => {
                        let epoch = a.epoch().wrapping_sub(1);
                        a.throttled(epoch);
                    }
                    S => {
                        a.succeeded();
                    }
                }
                got.push(a.limit());
            }
            assert_eq!(&got, want, "max {max}, events {events:?}");
        }
    }

    #[test]
    fn a_change_is_reported_only_when_the_limit_moves() {
        let mut a = Aimd::new(4);
        assert_eq!(a.succeeded(), None);
        assert_eq!(a.throttled(0), Some(2));
        assert_eq!(a.throttled(0), None, "an older epoch");
        assert_eq!(a.succeeded(), None);
        assert_eq!(a.succeeded(), Some(3));
        assert_eq!(Aimd::new(0).limit(), 1);
    }

    #[tokio::test]
    async fn permits_follow_the_limit_as_it_moves() {
        let l = Limiter::new(4, "t2", "dst");
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(l.acquire().await);
        }
        assert_eq!((l.limit(), l.in_flight()), (4, 4));
        l.throttled(l.epoch());
        assert_eq!(l.limit(), 2);
        // 4 in flight over a limit of 2: a fifth waits until two have finished and one more
        let l2 = l.clone();
        let waiter = tokio::spawn(async move { l2.acquire().await });
        tokio::task::yield_now().await;
        held.truncate(2);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        held.truncate(1);
        let p = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets a permit")
            .expect("task");
        assert_eq!(l.in_flight(), 2);
        // raising the limit lets a waiter in at once
        let l3 = l.clone();
        let third = tokio::spawn(async move { l3.acquire().await });
        tokio::task::yield_now().await;
        assert!(!third.is_finished());
        l.succeeded();
        l.succeeded();
        assert_eq!(l.limit(), 3);
        let q = tokio::time::timeout(std::time::Duration::from_secs(5), third)
            .await
            .expect("raised")
            .expect("task");
        assert_eq!(l.in_flight(), 3);
        drop((p, q, held));
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.gauge.in_flight.load(Relaxed), 0);
        assert_eq!(l.gauge.limit.load(Relaxed), 3);
    }
}
