//! Request pacing per key prefix, one [`Pacing`] per cloud side of a copy (inside its
//! [`super::limit::Limiter`]). S3 allows 3,500 writes and 5,500 reads a second *per prefix*,
//! and answers `SlowDown` (503) for the prefix that goes over; Azure (`ServerBusy`) and GCS
//! (429) throttle hot key ranges alike. So a throttle answered for key K slows down K's
//! prefix, not the whole copy:
//!
//! - **The prefix of a key is the key up to and including its last `/`** (`a/b/c.txt` →
//!   `a/b/`; `c.txt` → the empty prefix, the bucket's root). S3 partitions by leading key
//!   bytes, and the folder is the unit users spread load over, so it is the one we can name.
//! - A prefix gets a lane when it is first throttled: a pace starting at the rate the side
//!   sent requests at over its last busy whole second (all prefixes: an upper bound of this
//!   one's; before the first whole second, over the part of it so far once that is 100 ms
//!   long), at most the store's published rate (S3's 3,500 writes or 5,500 reads a second; the same for
//!   the other stores), halved on each throttle of that prefix (once per round of requests: not for a
//!   request that started before the last cut, nor within [`CUT_GAP`] of it), raised by one
//!   request a second per success. Requests to a paced prefix wait for their slot; other
//!   prefixes never wait.
//! - A copy that will send to a paced prefix first reserves a slot ([`Lanes::reserve`]) and
//!   waits for it before it takes an object slot; its first request to that key is sent in
//!   the reserved slot. Copies waiting on one prefix are thus released one slot apart, not
//!   all at once when the next slot comes (to sit on object slots while they wait again).
//! - A lane that is back at the full rate, or idle for a minute, is dropped; at most
//!   [`MAX_LANES`] lanes are kept (the least recently used goes first).
//! - The whole store is throttling, and the side's concurrency limit is cut as before, when the
//!   throttled key has no prefix, when [`MANY`] prefixes or more were throttled within
//!   [`RECENT`], or when no request to another prefix was sent within [`RECENT`] (all the
//!   side's traffic is this prefix, as in a copy into one folder: pacing it is pacing the
//!   store, and the copies waiting for it would hold their slots).
//!
//! [`Lanes`] is the arithmetic without a clock or locks (times are passed in), for tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// S3's published request rates per prefix (a second).
pub const S3_WRITES: f64 = 3_500.0;
pub const S3_READS: f64 = 5_500.0;

/// Lanes kept at most.
pub const MAX_LANES: usize = 1024;
/// A lane unused this long is dropped.
pub const IDLE: Duration = Duration::from_secs(60);
/// Distinct prefixes throttled within [`RECENT`] that mean the store as a whole throttles.
pub const MANY: usize = 4;
pub const RECENT: Duration = Duration::from_secs(5);
/// The slowest pace of a lane, requests a second.
const FLOOR: f64 = 1.0;
/// A lane is cut at most once in this long: throttles that arrive together are one signal.
pub const CUT_GAP: Duration = Duration::from_millis(200);

/// The prefix of `key`: up to and including its last `/`, or empty.
pub fn prefix_of(key: &str) -> &str {
    match key.rfind('/') {
        Some(i) => &key[..=i],
        None => "",
    }
}

#[derive(Debug, Clone)]
struct Lane {
    /// Requests a second.
    rate: f64,
    /// The first free slot.
    next: Instant,
    /// The last cut: requests that started before it were part of the round that was cut for.
    cut: Instant,
    used: Instant,
}

/// What a throttle of one key means.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The key's prefix was slowed to this many requests a second.
    Prefix { prefix: String, rate: f64 },
    /// The prefix was cut for a request of an earlier round already: nothing changes.
    Counted,
    /// The store as a whole throttles: cut the side's concurrency.
    Store,
}

/// The lanes of one side, clock-free.
#[derive(Debug)]
pub struct Lanes {
    start: f64,
    lanes: HashMap<String, Lane>,
    /// (prefix, when) of recent throttles, for telling one hot prefix from the whole store.
    recent: Vec<(String, Instant)>,
    /// The last two distinct prefixes requests were sent to, and when: whether the side sends
    /// to other prefixes than a throttled one.
    active: [Option<(String, Instant)>; 2],
    /// Distinct prefixes throttled within [`RECENT`] that mean the whole store ([`MANY`]).
    many: usize,
    /// Requests sent since the start of the current second, and when it started.
    sent: (Instant, u64),
    /// Requests a second the side sent over its last busy whole second (None: not a second
    /// yet); a second that idled into more is no measure and leaves it as it was.
    sent_rate: Option<f64>,
    /// Slots reserved by copies waiting to start ([`Lanes::reserve`]): key → the slot its
    /// first request is sent in.
    reserved: HashMap<String, Instant>,
    /// Throttles that slowed a prefix, ever (for `/metrics`).
    pub backoffs: u64,
}

impl Lanes {
    /// Lanes that start at `rate` requests a second.
    pub fn new(rate: f64) -> Lanes {
        Lanes {
            start: rate.max(FLOOR),
            lanes: HashMap::new(),
            recent: Vec::new(),
            active: [None, None],
            many: MANY,
            backoffs: 0,
            sent: (Instant::now(), 0),
            sent_rate: None,
            reserved: HashMap::new(),
        }
    }

    /// A request is sent at `now`: the side's rate over whole seconds.
    fn count_sent(&mut self, now: Instant) {
        let (since, n) = self.sent;
        let took = now.saturating_duration_since(since);
        if took >= Duration::from_secs(1) {
            // a second that idled into many says nothing of the rate when busy: the last
            // busy second's rate stands
            if took < Duration::from_secs(2) {
                self.sent_rate = Some(n as f64 / took.as_secs_f64());
            }
            self.sent = (now, 1);
        } else {
            self.sent.1 = n + 1;
        }
    }

    /// Requests a second the side sends at, as far as measured at `now`: over its last busy
    /// whole second, else over the part of the current one (once 100 ms long).
    fn side_rate(&self, now: Instant) -> Option<f64> {
        let (since, n) = self.sent;
        let took = now.saturating_duration_since(since);
        self.sent_rate.or_else(|| {
            (took >= Duration::from_millis(100) && n > 0).then(|| n as f64 / took.as_secs_f64())
        })
    }

    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// The pace of `prefix` now (None: not paced).
    pub fn rate(&self, prefix: &str) -> Option<f64> {
        self.lanes.get(prefix).map(|l| l.rate)
    }

    /// A request to `key` at `now`: when it may be sent (None: at once). A slot reserved
    /// for `key` ([`Self::reserve`]) is used, not a new one taken.
    pub fn slot(&mut self, key: &str, now: Instant) -> Option<Instant> {
        self.count_sent(now);
        let prefix = prefix_of(key);
        match &mut self.active {
            [Some((p, t)), _] if p == prefix => *t = now,
            [first, second] => {
                *second = first.take();
                *first = Some((prefix.to_string(), now));
            }
        }
        let reserved = self.reserved.remove(key);
        let lane = self.lanes.get_mut(prefix)?;
        lane.used = now;
        let at = match reserved {
            Some(at) => at,
            None => {
                let at = lane.next.max(now);
                lane.next = at + Duration::from_secs_f64(1.0 / lane.rate);
                at
            }
        };
        (at > now).then_some(at)
    }

    /// A copy that will send a request to `key` is about to start at `now`: when its prefix
    /// is paced, takes the next slot for that request (its first [`Self::slot`] for `key`
    /// gets it) and returns it if later than `now`. Copies that wait here for one prefix
    /// are spaced one slot apart. Reservations never used (a copy that sent nothing to `key`)
    /// are forgotten after [`IDLE`].
    pub fn reserve(&mut self, key: &str, now: Instant) -> Option<Instant> {
        let lane = self.lanes.get_mut(prefix_of(key))?;
        lane.used = now;
        if let Some(at) = self.reserved.get(key) {
            return (*at > now).then_some(*at);
        }
        let at = lane.next.max(now);
        lane.next = at + Duration::from_secs_f64(1.0 / lane.rate);
        self.reserved
            .retain(|_, t| now.saturating_duration_since(*t) < IDLE);
        self.reserved.insert(key.to_string(), at);
        (at > now).then_some(at)
    }

    /// A request to `key` that started at `started` was throttled at `now`.
    pub fn throttled(&mut self, key: &str, started: Instant, now: Instant) -> Verdict {
        let prefix = prefix_of(key);
        self.recent
            .retain(|(_, t)| now.saturating_duration_since(*t) < RECENT);
        if !self.recent.iter().any(|(p, _)| p == prefix) {
            self.recent.push((prefix.to_string(), now));
        }
        let others = self
            .active
            .iter()
            .flatten()
            .any(|(p, t)| p != prefix && now.saturating_duration_since(*t) < RECENT);
        if prefix.is_empty() || self.recent.len() >= self.many || !others {
            return Verdict::Store;
        }
        let fresh = !self.lanes.contains_key(prefix);
        if fresh {
            self.make_room(now);
            self.lanes.insert(
                prefix.to_string(),
                Lane {
                    // what the prefix got at most, not what the store allows: a lane halves
                    // from where the throttle found it
                    rate: self
                        .side_rate(now)
                        .map_or(self.start, |r| r.clamp(FLOOR, self.start)),
                    next: now,
                    // a new lane: any request of this round cuts it once
                    cut: started,
                    used: now,
                },
            );
        }
        let Some(lane) = self.lanes.get_mut(prefix) else {
            return Verdict::Counted;
        };
        lane.used = now;
        if !fresh && (started < lane.cut || now < lane.cut + CUT_GAP) {
            return Verdict::Counted;
        }
        lane.rate = (lane.rate / 2.0).max(FLOOR);
        lane.cut = now;
        self.backoffs += 1;
        Verdict::Prefix {
            prefix: prefix.to_string(),
            rate: lane.rate,
        }
    }

    /// A request to `key` succeeded: its prefix's pace recovers by one request a second, and
    /// a lane back at the full rate is dropped.
    pub fn succeeded(&mut self, key: &str) {
        let prefix = prefix_of(key);
        let Some(lane) = self.lanes.get_mut(prefix) else {
            return;
        };
        lane.rate += 1.0;
        if lane.rate >= self.start {
            self.lanes.remove(prefix);
        }
    }

    /// Drops idle lanes, and the least recently used one when the map is still full.
    fn make_room(&mut self, now: Instant) {
        self.lanes
            .retain(|_, l| now.saturating_duration_since(l.used) < IDLE);
        while self.lanes.len() >= MAX_LANES {
            let oldest = self
                .lanes
                .iter()
                .min_by_key(|(_, l)| l.used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.lanes.remove(&k),
                None => break,
            };
        }
    }
}

/// [`Lanes`] behind a lock, on the tokio clock's [`Instant`]s turned to std ones.
#[derive(Debug)]
pub struct Pacing {
    lanes: Mutex<Lanes>,
}

impl Pacing {
    pub fn new(rate: f64) -> Pacing {
        Pacing {
            lanes: Mutex::new(Lanes::new(rate)),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When `key`'s prefix is paced, reserves the slot of the copy's first request to `key`
    /// and waits for it ([`Lanes::reserve`]): a copy waits here before it takes one of the
    /// objects in flight, so that copies of a paced prefix do not hold the slots others
    /// could use, and copies waiting on one prefix start one slot apart.
    pub async fn ready(&self, key: &str) {
        let now = tokio::time::Instant::now();
        let at = self.lock().reserve(key, now.into_std());
        if let Some(at) = at {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
    }

    /// Waits for `key`'s slot when its prefix is paced.
    pub async fn wait(&self, key: &str) {
        let now = tokio::time::Instant::now();
        let at = self.lock().slot(key, now.into_std());
        if let Some(at) = at {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_the_key_up_to_its_last_slash() {
        for (key, want) in [
            ("a/b/c.txt", "a/b/"),
            ("a/", "a/"),
            ("c.txt", ""),
            ("", ""),
            ("/x", "/"),
        ] {
            assert_eq!(prefix_of(key), want, "{key}");
        }
    }

    #[test]
    fn a_throttled_prefix_halves_once_per_round_and_recovers_by_one_a_second() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Lanes::new(3500.0);
        // another prefix is busy too: a/ alone is hot
        l.slot("b/0", at(0));
        // (key, started ms, throttled at ms; None: a success) → the rate of a/ after it
        let steps: &[(&str, u64, Option<u64>, Option<f64>)] = &[
            ("a/1", 0, Some(10), Some(1750.0)),
            // same round (started before the cut at 10): counted, not cut again
            ("a/2", 5, Some(12), Some(1750.0)),
            // started after it, but within CUT_GAP of it: the same signal
            ("a/3", 20, Some(30), Some(1750.0)),
            // a later round cuts again
            ("a/4", 220, Some(230), Some(875.0)),
            // successes of a/ recover one a second; b/ successes change nothing
            ("a/5", 240, None, Some(876.0)),
            ("b/1", 240, None, Some(876.0)),
        ];
        for (key, started, throttled, want) in steps {
            match throttled {
                Some(t) => {
                    l.throttled(key, at(*started), at(*t));
                }
                None => l.succeeded(key),
            }
            assert_eq!(l.rate("a/"), *want, "after {key}");
            assert_eq!(l.rate("b/"), None, "b/ is never paced");
        }
        assert_eq!(l.backoffs, 2);
        // slots: b/ goes at once; a/ at 876/s gets spaced slots
        assert_eq!(l.slot("b/x", at(300)), None);
        let first = l.slot("a/x", at(300));
        assert_eq!(l.reserve("b/z", at(300)), None, "b/ is free");
        let second = l.slot("a/y", at(300)).expect("a/ waits");
        assert!(first.is_none(), "the first slot is free");
        let gap = second - at(300);
        assert!(
            (gap.as_secs_f64() - 1.0 / 876.0).abs() < 1e-6,
            "spaced by 1/rate: {gap:?}"
        );
    }

    #[test]
    fn copies_waiting_on_one_prefix_are_released_one_slot_apart() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Lanes::new(100.0);
        l.slot("b/0", t0);
        l.throttled("a/0", t0, t0);
        assert_eq!(l.rate("a/"), Some(50.0));
        // ten copies of a/ want to start at once: each reserves the next slot, 20 ms apart
        let slots: Vec<Option<Instant>> =
            (0..10).map(|i| l.reserve(&format!("a/{i}"), t0)).collect();
        assert_eq!(slots[0], None, "the first slot is free");
        for (i, s) in slots.iter().enumerate().skip(1) {
            let s = s.expect("later slots wait");
            let want = t0 + Duration::from_secs_f64(i as f64 / 50.0);
            assert!(
                s.max(want) - s.min(want) < Duration::from_micros(10),
                "{i}: {s:?}"
            );
        }
        // asking again keeps the reservation; b/ is not paced
        assert_eq!(l.reserve("a/3", t0), slots[3]);
        assert_eq!(l.reserve("b/1", t0), None);
        // each copy's first request goes in its reserved slot, taking no other; a second
        // request to the same key, and a request of a copy that reserved nothing, queue
        // behind all the reservations
        let woke = |i: usize| slots[i].unwrap_or(t0);
        assert_eq!(l.slot("a/5", woke(5)), None);
        assert_eq!(l.slot("a/0", at(1)), None);
        let after = t0 + Duration::from_secs_f64(10.0 / 50.0);
        let again = l.slot("a/5", woke(5)).expect("paced");
        assert!(again >= after - Duration::from_micros(10), "{again:?}");
        let other = l.slot("a/x", woke(5)).expect("paced");
        assert!(other > again, "{other:?}");
        // a reservation never used is forgotten
        let late = t0 + IDLE + Duration::from_secs(1);
        l.reserve("a/new", late);
        assert_eq!(l.reserved.len(), 1, "{:?}", l.reserved.keys());
    }

    #[tokio::test(start_paused = true)]
    async fn the_waiters_of_a_paced_prefix_wake_spread_over_time() {
        let p = std::sync::Arc::new(Pacing::new(100.0));
        let t0 = tokio::time::Instant::now();
        {
            let mut l = p.lock();
            l.slot("b/0", t0.into_std());
            l.throttled("a/0", t0.into_std(), t0.into_std());
        }
        // 20 copies of a/ wait at once; a/ is paced at 50 a second
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let p = p.clone();
                tokio::spawn(async move {
                    p.ready(&format!("a/{i}")).await;
                    tokio::time::Instant::now() - t0
                })
            })
            .collect();
        let mut woke = Vec::new();
        for t in tasks {
            woke.push(t.await.expect("task"));
        }
        woke.sort();
        // one at a time, 20 ms apart: not all at the next slot
        for pair in woke.windows(2) {
            assert!(
                pair[1] - pair[0] >= Duration::from_millis(19),
                "released together: {woke:?}"
            );
        }
        assert!(woke[19] >= Duration::from_millis(370), "{woke:?}");
    }

    #[test]
    fn a_new_lane_halves_from_the_rate_the_side_sent_at() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Lanes::new(3500.0);
        l.sent = (t0, 0);
        // 200 requests a second for a second and a bit, to a/ and b/
        for i in 0..=220u64 {
            let key = if i % 2 == 0 { "a/k" } else { "b/k" };
            l.slot(key, at(i * 5));
        }
        assert!(matches!(
            l.throttled("a/k", at(1100), at(1105)),
            Verdict::Prefix { rate, .. } if (rate - 100.0).abs() < 1.0
        ));
        // a side faster than the published rate starts a lane at the published rate
        let mut fast = Lanes::new(3500.0);
        fast.sent = (t0, 0);
        for i in 0..=11_000u64 {
            fast.slot(
                if i % 2 == 0 { "a/k" } else { "b/k" },
                t0 + Duration::from_micros(i * 100),
            );
        }
        assert_eq!(
            fast.throttled("a/k", at(1100), at(1101)),
            Verdict::Prefix {
                prefix: "a/".into(),
                rate: 1750.0
            }
        );
    }

    #[test]
    fn a_new_lane_before_the_first_second_or_after_a_gap_uses_what_was_measured() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // requests 5 ms apart (200 a second) to a/ and b/ from t0, for `busy` ms; then one
        // more at `last` ms (None: none); a/ throttled at `at` ms → the new lane's rate
        let table: &[(u64, Option<u64>, u64, f64)] = &[
            // 150 ms into the first second: 30 requests in 0.15 s, 200/s, halved
            (150, None, 150, 100.0),
            // under 100 ms: too short to tell, the published rate halved
            (50, None, 50, 1750.0),
            // a busy second and a bit, then 5 s idle: the gap leaves the last busy second's
            // rate, not the published one
            (1_100, Some(6_100), 6_100, 100.0),
        ];
        for &(busy, last, throttled, want) in table {
            let mut l = Lanes::new(3500.0);
            l.sent = (t0, 0);
            for i in 0..busy / 5 {
                l.slot(if i % 2 == 0 { "a/k" } else { "b/k" }, at(i * 5));
            }
            if let Some(t) = last {
                l.slot("b/k", at(t));
            }
            let v = l.throttled("a/k", at(throttled), at(throttled));
            let Verdict::Prefix { rate, .. } = v else {
                panic!("{busy} {last:?}: {v:?}");
            };
            assert!((rate - want).abs() < 1.0, "{busy} {last:?}: {rate}");
        }
    }

    #[test]
    fn the_root_or_many_prefixes_mean_the_whole_store() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut l = Lanes::new(100.0);
        // (key, at ms, throttled (else: a request sent), store-wide?)
        let table: &[(&str, u64, bool, bool)] = &[
            // nothing else was sent: all the traffic is a/'s
            ("a/1", 0, true, true),
            ("z/1", 1, false, false),
            ("root.txt", 2, true, true),
            ("a/1", 10, true, false), // 2 distinct prefixes within 5 s, z/ busy
            ("b/1", 20, true, false),
            ("c/1", 30, true, true), // 4 distinct within 5 s
            // 6 s later the old ones are forgotten: one prefix again, but z/ is quiet
            ("d/1", 6_100, true, true),
            ("z/2", 6_150, false, false),
            ("d/2", 6_200, true, false),
            ("e/1", 6_300, true, false),
        ];
        for (key, t, throttled, store) in table {
            if !throttled {
                l.slot(key, at(*t));
                continue;
            }
            let v = l.throttled(key, at(*t), at(*t));
            assert_eq!(v == Verdict::Store, *store, "{key} at {t}: {v:?}");
        }
    }

    #[test]
    fn lanes_are_dropped_when_recovered_or_idle_and_bounded() {
        let t0 = Instant::now();
        let mut l = Lanes::new(4.0);
        l.slot("busy/0", t0);
        l.throttled("a/1", t0, t0);
        assert_eq!(l.rate("a/"), Some(2.0));
        l.succeeded("a/2");
        assert_eq!(l.rate("a/"), Some(3.0));
        l.succeeded("a/3");
        assert_eq!(l.rate("a/"), None, "back at the full rate: no lane");
        assert!(l.is_empty());
        // an idle lane goes when a new one is made a minute later
        l.throttled("x/1", t0, t0);
        let later = t0 + IDLE + Duration::from_secs(1);
        l.slot("busy/1", later);
        l.throttled("y/1", later, later);
        assert_eq!((l.rate("x/"), l.rate("y/")), (None, Some(2.0)));
        // never more than MAX_LANES, however many prefixes are hot at once
        let mut l = Lanes::new(4.0);
        l.many = usize::MAX;
        l.slot("busy/2", t0);
        for i in 0..MAX_LANES + 10 {
            let t = t0 + Duration::from_millis(i as u64);
            l.throttled(&format!("p{i}/k"), t, t);
        }
        assert_eq!(l.len(), MAX_LANES);
        assert_eq!(l.rate("p0/"), None, "the least recently used went first");
    }
}
