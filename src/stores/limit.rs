//! The limit of objects in flight, one per cloud side of a copy, in one of two modes:
//!
//! - **Fixed** (`--transfers N` asked for): it starts at N, halves when the store throttles
//!   (503, 429, `SlowDown`) and grows by one after a window of successes, back up to N
//!   (AIMD, as TCP's congestion window) and never above it.
//! - **Adaptive** (no `--transfers`): it starts at [`START`] and a [`Gradient`] moves it once
//!   per measuring window (three round trips, 0.05–1 s): doubled while the completed objects
//!   or bytes a second grow with it (slow start), then probed upwards a little at a time and
//!   kept where a probe stops paying, lowered when the latency rises and the throughput does
//!   not (a gradient/Vegas-style controller). Throttles halve it as in the fixed mode.
//!   The ceiling is the caller's (see `CopyOptions::ceiling`).
//!
//! Either way a throttle of one key slows down that key's prefix first ([`super::pace`]);
//! only throttles of the store as a whole cut the limit. Every object copy takes a permit from
//! the limits of both its sides before it starts (in `transfer::copy_one`); the retry loops
//! ([`super::retry::Retry`]) report throttles, successes and latencies, the copier completed
//! objects and bytes. The limiter also keeps the side's round-trip estimate ([`MinFilter`] over
//! the time to the first byte of small requests) and the bytes a second of one chunk stream,
//! which the copier's chunk size follows. `buffer_unordered(ceiling)` of the callers stays the
//! upper bound.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::pace::{Pacing, Verdict};
use crate::core::metrics::LimitGauge;

/// Where an adaptive limit starts: today's default of `--transfers`.
pub const START: usize = 16;

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

impl Aimd {
    /// Sets the limit (the adaptive controller's decision), within 1..=max.
    pub fn set(&mut self, limit: usize) {
        self.limit = limit.clamp(1, self.max);
        self.successes = 0;
    }
}

/// What one measuring window saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Objects completed a second.
    pub objects: f64,
    /// Bytes moved a second.
    pub bytes: f64,
    /// Mean latency of the requests that succeeded and carried no large body (round trips),
    /// seconds (0: none finished). A part's or a large PUT's time is mostly its body's, which
    /// says nothing of queues: counted, it would hold the mean far above the lowest seen in a
    /// copy of large objects, and every probe would look congested.
    pub latency: f64,
    /// The limit during the window.
    pub limit: usize,
    /// Whether the copies used the limit (a copy waited, or as many were in flight): a window
    /// that did not says nothing about what more would bring.
    pub busy: bool,
}

/// The adaptive controller's arithmetic, without clocks: one call per window, each compared
/// with the window before it (a gradient: what the last change of the limit brought).
///
/// - **Slow start**: the limit doubles every window while each doubling brings at least half
///   of its share in objects or bytes a second (2× the limit, ≥ 1.5× the throughput). A raise
///   that did not pay and made the latency rise by a quarter or more only queued: back to the
///   limit before, and slow start ends. One that did not pay without a queue is measured again
///   (held a window, then doubled); the second such miss ends slow start there.
/// - **Then** a probe every other window: +max(1, limit/16). A probe that paid (half of its
///   share) is followed by another; one that did not is taken back when it made the latency
///   rise by half its share or more, or when the latency is far above the lowest seen
///   (requests queue: more in flight would only wait there, each holding its buffer), and
///   kept otherwise (a far link, where one window's throughput is too noisy to judge a
///   sixteenth by); a lowered limit is left to settle for a window.
/// - Latency above 1.5× the lowest seen, rising by a tenth, while the throughput does not grow
///   (under 5 %): ×0.9, but never below [`START`] for latency alone (it also rises for causes
///   of its own: a busy host, a slower path).
/// - A throttle ([`Gradient::cut`]) halves the limit elsewhere ([`Aimd`]), ends slow start
///   and starts the comparisons afresh.
/// - Windows that did not use the limit (not `busy`) change nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradient {
    max: usize,
    slow_start: bool,
    /// Raises in slow start that brought nothing (and no queue).
    misses: u32,
    prev: Option<Window>,
    /// The lowest mean latency seen (drifting up slowly so that a slower path is learnt).
    base: Option<f64>,
}

/// Latency above `CONGESTED` × the lowest seen means requests queue somewhere.
const CONGESTED: f64 = 1.5;

impl Gradient {
    pub fn new(max: usize) -> Gradient {
        Gradient {
            max: max.max(1),
            slow_start: true,
            misses: 0,
            prev: None,
            base: None,
        }
    }

    pub fn slow_start(&self) -> bool {
        self.slow_start
    }

    /// The store throttled and the limit was cut: slow start is over, and the window before
    /// the cut is no measure for the next one.
    pub fn cut(&mut self) {
        self.slow_start = false;
        self.prev = None;
    }

    /// A window closed; returns the new limit when it changes.
    pub fn window(&mut self, w: Window) -> Option<usize> {
        if w.latency > 0.0 {
            self.base = Some(match self.base {
                // slowly, so that a standing queue is not taken for the path's own latency
                Some(b) if w.latency >= b => b + (w.latency - b) / 256.0,
                _ => w.latency,
            });
        }
        let prev = self.prev.replace(w);
        if !w.busy {
            return None;
        }
        let congested = matches!(self.base, Some(b) if w.latency > b * CONGESTED);
        let step = w.limit + (w.limit / 16).max(1);
        let next = match prev.filter(|p| p.busy) {
            None if self.slow_start && !congested => w.limit * 2,
            None => w.limit,
            Some(p) => {
                let gain = ratio(w.objects, p.objects).max(ratio(w.bytes, p.bytes));
                let slower = ratio(w.latency, p.latency);
                let raised = w.limit as f64 / p.limit.max(1) as f64;
                // a raise pays when the throughput grew by half of it or more
                let pays = gain >= 1.0 + (raised - 1.0) / 2.0;
                if self.slow_start {
                    if raised > 1.0 && pays {
                        self.misses = 0;
                        w.limit * 2
                    } else if raised > 1.0 && slower > 1.25 {
                        // the raise only queued: back, and slow start is over
                        self.slow_start = false;
                        p.limit
                    } else if raised > 1.0 {
                        // no gain, and no queue either: one window's measure is noisy, so
                        // hold and measure again; the second miss ends slow start
                        self.misses += 1;
                        self.slow_start = self.misses < 2;
                        w.limit
                    } else if !congested {
                        w.limit * 2
                    } else {
                        self.slow_start = false;
                        w.limit
                    }
                } else if raised > 1.0 {
                    // the last window probed upwards
                    if pays {
                        step
                    } else if congested || slower > 1.0 + (raised - 1.0) / 2.0 {
                        // it only queued, or requests queue already (the latency is far
                        // above the lowest seen, where more in flight only waits, holding
                        // its buffers): back
                        p.limit
                    } else {
                        w.limit
                    }
                } else if raised < 1.0 {
                    // lowered: let it settle for a window
                    w.limit
                } else if congested && slower > 1.1 && gain < 1.05 {
                    // latency rising without throughput; never below START for latency alone
                    // (it may rise for causes of its own: a busy host, a slower path)
                    ((w.limit as f64 * 0.9) as usize).max(START.min(w.limit))
                } else {
                    step
                }
            }
        };
        let next = next.clamp(1, self.max);
        (next != w.limit).then_some(next)
    }
}

/// `now / before`, with nothing before meaning no change unless something came now.
fn ratio(now: f64, before: f64) -> f64 {
    if before > 0.0 {
        now / before
    } else if now > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

/// The lowest of the samples of the last [`MinFilter::SLOTS`] windows: a round-trip estimate
/// that ignores requests slowed by their bodies or by queues, and forgets a path that got
/// slower after a few windows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MinFilter {
    slots: std::collections::VecDeque<f64>,
    current: Option<f64>,
}

impl MinFilter {
    pub const SLOTS: usize = 16;

    pub fn sample(&mut self, secs: f64) {
        self.current = Some(self.current.map_or(secs, |c| c.min(secs)));
    }

    /// A window closed: its lowest sample is kept, the oldest dropped.
    pub fn roll(&mut self) {
        if let Some(c) = self.current.take() {
            self.slots.push_back(c);
            if self.slots.len() > Self::SLOTS {
                self.slots.pop_front();
            }
        }
    }

    /// The estimate, seconds.
    pub fn get(&self) -> Option<f64> {
        self.slots
            .iter()
            .copied()
            .chain(self.current)
            .reduce(f64::min)
    }
}

/// What the current window has counted.
#[derive(Debug)]
struct Meter {
    /// When the window starts: up to a second ahead while a new limit settles (see
    /// [`Limiter::tick`]), so always measured from with `saturating_duration_since`.
    start: Instant,
    objects: u64,
    bytes: u64,
    /// Summed latency of the round trips (requests without a large body) and their count.
    latency: f64,
    round_trips: u64,
    /// Requests that succeeded, round trips or not.
    requests: u64,
    busy: bool,
}

impl Meter {
    fn new(now: Instant) -> Meter {
        Meter {
            start: now,
            objects: 0,
            bytes: 0,
            latency: 0.0,
            round_trips: 0,
            requests: 0,
            busy: false,
        }
    }

    /// A request succeeded after `latency`; `round_trip`: it carried no large body.
    fn request(&mut self, latency: Duration, round_trip: bool) {
        self.requests += 1;
        if round_trip {
            self.latency += latency.as_secs_f64();
            self.round_trips += 1;
        }
    }

    /// The window, `secs` long, under `limit`.
    fn window(&self, secs: f64, limit: usize, busy: bool) -> Window {
        Window {
            objects: self.objects as f64 / secs,
            bytes: self.bytes as f64 / secs,
            latency: if self.round_trips > 0 {
                self.latency / self.round_trips as f64
            } else {
                0.0
            },
            limit,
            busy: self.busy || busy,
        }
    }
}

#[derive(Debug)]
struct State {
    aimd: Aimd,
    in_flight: usize,
    /// None: a fixed limit.
    gradient: Option<Gradient>,
    meter: Meter,
    rtt: MinFilter,
    /// Bytes a second of one chunk stream (EWMA over chunks of 1 MiB and more).
    stream_rate: Option<f64>,
}

/// An adaptive semaphore: [`Aimd`] (and in the adaptive mode [`Gradient`]) decides how many
/// permits there are; [`Pacing`] spaces the requests to throttled prefixes.
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
    freed: Notify,
    gauge: Arc<LimitGauge>,
    pacing: Pacing,
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
        // one slot freed: one waiter (a woken waiter that is cancelled passes it on); with
        // up to a thousand copies waiting, waking them all per finished object costs a core
        self.limiter.freed.notify_one();
    }
}

impl Limiter {
    /// A fixed limit of `max` objects for `side` (`src`, `dst`) of a `store` (`s3`, `az`,
    /// `gs`): lowered when the store throttles, recovered up to `max`.
    pub fn new(max: usize, store: &'static str, side: &'static str) -> Arc<Limiter> {
        Limiter::build(Aimd::new(max), None, store, side)
    }

    /// An adaptive limit: starts at [`START`] (or `max` when lower), moves within 1..=max.
    pub fn adaptive(max: usize, store: &'static str, side: &'static str) -> Arc<Limiter> {
        let mut aimd = Aimd::new(max);
        aimd.set(START);
        Limiter::build(aimd, Some(Gradient::new(max)), store, side)
    }

    fn build(
        aimd: Aimd,
        gradient: Option<Gradient>,
        store: &'static str,
        side: &'static str,
    ) -> Arc<Limiter> {
        let gauge = crate::core::metrics::limit_gauge(store, side, aimd.limit() as u64);
        // a source is read, a destination written: S3's published rates per prefix
        let rate = if side == "src" {
            super::pace::S3_READS
        } else {
            super::pace::S3_WRITES
        };
        Arc::new(Limiter {
            state: Mutex::new(State {
                aimd,
                in_flight: 0,
                gradient,
                meter: Meter::new(Instant::now()),
                rtt: MinFilter::default(),
                stream_rate: None,
            }),
            freed: Notify::new(),
            gauge,
            pacing: Pacing::new(rate),
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
                    if st.in_flight >= st.aimd.limit() {
                        st.meter.busy = true;
                    }
                    self.gauge.in_flight.store(st.in_flight as u64, Relaxed);
                    return Permit {
                        limiter: self.clone(),
                    };
                }
                st.meter.busy = true;
            }
            freed.await;
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.lock().aimd.limit()
    }

    /// Whether the limit adapts (no `--transfers` asked for).
    pub fn is_adaptive(&self) -> bool {
        self.lock().gradient.is_some()
    }

    /// Permits taken now.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// The epoch of a request starting now (see [`Aimd::throttled`]).
    pub fn epoch(&self) -> u64 {
        self.lock().aimd.epoch()
    }

    /// The round-trip estimate of this side.
    pub fn rtt(&self) -> Option<Duration> {
        self.lock().rtt.get().map(Duration::from_secs_f64)
    }

    /// Bytes a second one chunk stream moves, as measured.
    pub fn stream_rate(&self) -> Option<f64> {
        self.lock().stream_rate
    }

    /// Prefixes paced now, and throttles that slowed one since the start.
    pub fn paced(&self) -> (usize, u64) {
        let l = self.pacing.lock();
        (l.len(), l.backoffs)
    }

    /// Waits until `key`'s prefix, when paced, has a free slot (see [`Pacing::ready`]).
    pub async fn ready(&self, key: &str) {
        self.pacing.ready(key).await
    }

    /// Waits for `key`'s turn when its prefix is paced (throttled before).
    pub async fn pace(&self, key: &str) {
        self.pacing.wait(key).await
    }

    /// A request to the store as a whole, started in `epoch`, was throttled: halves the limit.
    pub fn throttled(&self, epoch: u64) {
        let mut st = self.lock();
        if let Some(limit) = st.aimd.throttled(epoch) {
            if let Some(g) = &mut st.gradient {
                g.cut();
            }
            self.changed(limit, st.in_flight, "lowered: the store throttles");
        }
    }

    /// A request to `key`, started in `epoch` at `started`, was throttled: its prefix is
    /// paced; the limit is halved only when the store as a whole throttles (see
    /// [`super::pace`]).
    pub fn throttled_key(&self, key: &str, epoch: u64, started: Instant) {
        let now = Instant::now();
        let verdict = self
            .pacing
            .lock()
            .throttled(key, started.into_std(), now.into_std());
        match verdict {
            Verdict::Store => self.throttled(epoch),
            Verdict::Prefix { prefix, rate } => {
                crate::core::metrics::prefix_backoff(self.gauge.store, self.gauge.side);
                tracing::info!(
                    store = self.gauge.store,
                    side = self.gauge.side,
                    %prefix,
                    rate = rate as u64,
                    "prefix backed off: the store throttles it (requests a second now)"
                );
            }
            Verdict::Counted => {}
        }
    }

    /// A request succeeded.
    pub fn succeeded(&self) {
        let mut st = self.lock();
        if st.gradient.is_some() {
            // the adaptive limit grows by windows, not by successes
            return;
        }
        if let Some(limit) = st.aimd.succeeded() {
            self.changed(limit, st.in_flight, "raised");
            drop(st);
            self.freed.notify_waiters();
        }
    }

    /// A request outside the limit succeeded: its prefix's pacing hears of it, the limit's
    /// measure does not.
    pub fn succeeded_outside(&self, key: &str) {
        self.pacing.lock().succeeded(key);
    }

    /// A request to `key` succeeded after `latency`: its prefix's pace recovers. `round_trip`:
    /// the request carried no large body, so its latency is a round-trip sample and counts in
    /// the window's latency (a part upload's is mostly its body's time, so neither).
    pub fn succeeded_key(&self, key: &str, latency: Duration, round_trip: bool) {
        self.pacing.lock().succeeded(key);
        self.succeeded();
        let mut st = self.lock();
        if round_trip {
            // the lowest of the window wins, and small requests (HEAD, small PUTs, multipart
            // steps, first bytes) come near the RTT
            st.rtt.sample(latency.as_secs_f64());
            let rtt = st.rtt.get().unwrap_or(0.0);
            self.gauge.rtt_micros.store((rtt * 1e6) as u64, Relaxed);
        }
        if Instant::now() >= st.meter.start {
            // the congestion rules and the settle time judge by round trips only
            st.meter.request(latency, round_trip);
        }
        self.tick(st);
    }

    /// A request that carried no large body answered after `d`: a round-trip sample.
    pub fn rtt_sample(&self, d: Duration) {
        let mut st = self.lock();
        st.rtt.sample(d.as_secs_f64());
        let rtt = st.rtt.get().unwrap_or(0.0);
        self.gauge.rtt_micros.store((rtt * 1e6) as u64, Relaxed);
    }

    /// A chunk of `bytes` took `d` to arrive after its headers.
    pub fn chunk_sample(&self, bytes: u64, d: Duration) {
        self.add_bytes(bytes);
        self.stream_sample(bytes, d);
    }

    /// One stream moved `bytes` in `d` (a part uploaded, its round trip taken off): the
    /// stream throughput the chunk size follows; the bytes are counted elsewhere.
    pub fn stream_sample(&self, bytes: u64, d: Duration) {
        if bytes < 1 << 20 || d.is_zero() {
            return;
        }
        let rate = bytes as f64 / d.as_secs_f64();
        let mut st = self.lock();
        st.stream_rate = Some(match st.stream_rate {
            Some(r) => r + (rate - r) / 8.0,
            None => rate,
        });
    }

    /// Bytes moved (a chunk read or written).
    pub fn add_bytes(&self, bytes: u64) {
        let mut st = self.lock();
        if Instant::now() >= st.meter.start {
            st.meter.bytes += bytes;
        }
        self.tick(st);
    }

    /// An object was copied.
    pub fn object_done(&self) {
        let mut st = self.lock();
        if Instant::now() >= st.meter.start {
            st.meter.objects += 1;
        }
        self.tick(st);
    }

    /// Closes the window when it is due: three round trips long (0.05 to 1 s), with at least
    /// 8 requests or objects in it (or 1 s long), and feeds it to the controller.
    fn tick(&self, mut st: std::sync::MutexGuard<'_, State>) {
        let now = Instant::now();
        // the start is ahead while a new limit settles
        let elapsed = now.saturating_duration_since(st.meter.start);
        let rtt = st.rtt.get().unwrap_or(0.0);
        let due = Duration::from_secs_f64((3.0 * rtt).clamp(0.05, 1.0));
        let enough = st.meter.requests + st.meter.objects >= 8;
        if elapsed < due || !(enough || elapsed >= Duration::from_secs(1)) {
            return;
        }
        let secs = elapsed.as_secs_f64();
        let m = std::mem::replace(&mut st.meter, Meter::new(now));
        st.rtt.roll();
        let limit = st.aimd.limit();
        let w = m.window(secs, limit, st.in_flight >= limit);
        tracing::trace!(
            store = self.gauge.store,
            side = self.gauge.side,
            objects = w.objects as u64,
            bytes = w.bytes as u64,
            latency_ms = w.latency * 1e3,
            requests = m.requests,
            limit,
            busy = w.busy,
            "window"
        );
        let Some(next) = st.gradient.as_mut().and_then(|g| g.window(w)) else {
            return;
        };
        st.aimd.set(next);
        // the next window starts once the copies started for the new limit can have
        // completed: a round trip later, and at least two requests' mean time (a copy makes
        // two or more); a window that began at once would credit the new limit with the old
        // one's completions, and slow start would double past the knee before it showed
        let settle = rtt.max(2.0 * w.latency).min(1.0);
        st.meter = Meter::new(now + Duration::from_secs_f64(settle));
        let (next, in_flight) = (st.aimd.limit(), st.in_flight);
        let how = if next > limit { "raised" } else { "lowered" };
        self.changed(next, in_flight, how);
        drop(st);
        if next > limit {
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

    /// Feeds `windows` of (objects a second, latency s, busy) to a controller starting at
    /// [`START`]; the limit after each.
    fn drive(g: &mut Gradient, windows: &[(f64, f64, bool)]) -> Vec<usize> {
        let mut limit = START;
        windows
            .iter()
            .map(|&(objects, latency, busy)| {
                let w = Window {
                    objects,
                    bytes: 0.0,
                    latency,
                    limit,
                    busy,
                };
                if let Some(n) = g.window(w) {
                    limit = n;
                }
                limit
            })
            .collect()
    }

    #[test]
    fn the_gradient_doubles_while_throughput_follows_then_backs_off_on_latency() {
        // (max, windows, the limit after each)
        type Case = (usize, &'static [(f64, f64, bool)], &'static [usize]);
        let table: &[Case] = &[
            // a long link with room: throughput doubles with the limit, latency flat
            (
                1024,
                &[
                    (320.0, 0.05, true),
                    (640.0, 0.05, true),
                    (1280.0, 0.05, true),
                    (2560.0, 0.05, true),
                    (5120.0, 0.05, true),
                    (10240.0, 0.05, true),
                    (20480.0, 0.05, true),
                ],
                &[32, 64, 128, 256, 512, 1024, 1024],
            ),
            // a store that serves 1000 a second: 64 still pays half (1.56×), 128 brings
            // nothing and doubles the latency: back to 64; settle; probe 68, which only adds
            // latency: back to 64
            (
                1024,
                &[
                    (320.0, 0.05, true),
                    (640.0, 0.05, true),
                    (1000.0, 0.064, true),
                    (1000.0, 0.128, true),
                    (1000.0, 0.064, true),
                    (1000.0, 0.064, true),
                    (1000.0, 0.068, true),
                ],
                &[32, 64, 128, 64, 64, 68, 64],
            ),
            // a raise that brings less than half its share, without a queue, is measured
            // again (held, then doubled); the second miss ends slow start where it is; then
            // probes, and a probe that pays is followed by another
            (
                1024,
                &[
                    (320.0, 0.05, true),
                    (400.0, 0.05, true),
                    (400.0, 0.05, true),
                    (400.0, 0.05, true),
                    (400.0, 0.05, true),
                    (425.0, 0.05, true),
                ],
                &[32, 32, 64, 64, 68, 72],
            ),
            // windows that did not use the limit change nothing
            (
                1024,
                &[(100.0, 0.05, false), (100.0, 0.05, false)],
                &[16, 16],
            ),
            // never above max
            (20, &[(320.0, 0.05, true), (640.0, 0.05, true)], &[20, 20]),
            // latency rising far above the lowest (slow start ends), throughput flat → ×0.9,
            // a window to settle, ×0.9
            (
                1024,
                &[
                    (320.0, 0.05, true),
                    (330.0, 0.05, true),
                    (330.0, 0.2, true),
                    (330.0, 0.25, true),
                    (330.0, 0.25, true),
                    (330.0, 0.3, true),
                ],
                &[32, 32, 32, 28, 28, 25],
            ),
        ];
        for (max, windows, want) in table {
            let got = drive(&mut Gradient::new(*max), windows);
            assert_eq!(&got, want, "max {max}, windows {windows:?}");
        }
    }

    #[test]
    fn probes_that_do_not_pay_are_taken_back_while_requests_queue() {
        // slow start ended at 64 against a store that serves 1000 a second; the latency stays
        // far above the lowest seen (a standing queue) and does not move with the probes:
        // probes that bring nothing are taken back, so the limit does not creep up
        let mut windows = vec![
            (320.0, 0.05, true),
            (640.0, 0.05, true),
            (1000.0, 0.064, true),
            (1000.0, 0.128, true),
        ];
        windows.extend(std::iter::repeat_n((1000.0, 0.12, true), 40));
        let got = drive(&mut Gradient::new(1024), &windows);
        assert!(got[4..].iter().all(|l| (64..=68).contains(l)), "{got:?}");
        // the same without a queue (latency at the lowest seen): a probe that brings nothing
        // measurable is kept, as on a far link where a sixteenth is lost in the noise
        let mut calm = vec![(320.0, 0.05, true), (400.0, 0.05, true)];
        calm.extend(std::iter::repeat_n((400.0, 0.05, true), 12));
        let got = drive(&mut Gradient::new(1024), &calm);
        assert!(got.last().copied().unwrap_or(0) > 64, "{got:?}");
    }

    #[test]
    fn latency_alone_never_takes_the_limit_below_the_start() {
        // after slow start the latency climbs by a fifth every window, for ever, with the
        // throughput flat: the limit comes down, and stops at START
        let mut g = Gradient::new(1024);
        let mut windows = vec![(320.0, 0.05, true), (330.0, 0.05, true)];
        let mut latency = 0.05;
        for _ in 0..40 {
            latency *= 1.2;
            windows.push((330.0, latency, true));
        }
        let got = drive(&mut g, &windows);
        assert!(got.iter().any(|l| *l < 32), "it came down: {got:?}");
        assert!(got.iter().all(|l| *l >= START), "{got:?}");
        assert_eq!(got.last(), Some(&START));
    }

    #[test]
    fn after_a_throttle_the_gradient_grows_additively_only() {
        let mut g = Gradient::new(1024);
        assert!(g.slow_start());
        g.cut();
        assert!(!g.slow_start());
        // no doubling any more: the first window after the cut is only a reference, then +1/16
        let got = drive(&mut g, &[(320.0, 0.05, true), (320.0, 0.05, true)]);
        assert_eq!(got, vec![16, 17]);
    }

    #[test]
    fn the_gradient_settles_near_the_knee_of_a_saturating_store() {
        // a store that serves 1000 objects a second with 50 ms of latency when idle: the
        // knee is at 50 in flight (Little's law); more only queues
        let mut g = Gradient::new(1024);
        let mut limit = START;
        let mut seen = Vec::new();
        for _ in 0..60 {
            let objects = (limit as f64 / 0.05).min(1000.0);
            let w = Window {
                objects,
                bytes: 0.0,
                latency: limit as f64 / objects,
                limit,
                busy: true,
            };
            if let Some(n) = g.window(w) {
                limit = n;
            }
            seen.push(limit);
        }
        assert!(seen[..4].iter().any(|l| *l >= 64), "slow start: {seen:?}");
        assert!(
            seen[30..].iter().all(|l| (40..=100).contains(l)),
            "settles near 50: {seen:?}"
        );
    }

    #[test]
    fn large_bodies_with_long_latency_do_not_count_as_congestion() {
        // a mixed copy after slow start: each window 8 small requests of 50 ms (the round
        // trip) and 8 part uploads of 3 s (their bodies' time), the throughput flat (more in
        // flight brings nothing measurable, as on a far link): not a queue, so probes that
        // bring nothing are kept and the limit still grows
        let run = |parts_as_round_trips: bool| {
            let mut g = Gradient::new(1024);
            g.cut();
            let mut limit = START;
            let mut seen = Vec::new();
            for i in 0..20 {
                let mut m = Meter::new(Instant::now());
                m.objects = 100;
                for _ in 0..8 {
                    m.request(Duration::from_millis(50), true);
                    // the first window has small requests only: the lowest latency seen
                    if i > 0 {
                        m.request(Duration::from_secs(3), parts_as_round_trips);
                    }
                }
                let w = m.window(1.0, limit, true);
                if !parts_as_round_trips {
                    assert!((w.latency - 0.05).abs() < 1e-9, "{w:?}");
                }
                if let Some(n) = g.window(w) {
                    limit = n;
                }
                seen.push(limit);
            }
            seen
        };
        let mixed = run(false);
        assert!(*mixed.last().unwrap_or(&0) >= START + 5, "{mixed:?}");
        // counted as round trips, the parts would hold the mean at 30× the lowest: every
        // probe taken back, the limit stuck
        let counted = run(true);
        assert!(counted.iter().all(|l| *l <= START + 1), "{counted:?}");
    }

    #[test]
    fn the_rtt_is_the_lowest_sample_of_the_last_windows() {
        let mut f = MinFilter::default();
        assert_eq!(f.get(), None);
        f.sample(0.3);
        f.sample(0.04);
        assert_eq!(f.get(), Some(0.04), "the current window counts at once");
        f.roll();
        f.sample(0.5);
        assert_eq!(f.get(), Some(0.04));
        // a path that got slower is learnt once the old windows have rolled out
        for _ in 0..MinFilter::SLOTS {
            f.roll();
            f.sample(0.08);
        }
        f.roll();
        assert_eq!(f.get(), Some(0.08));
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
