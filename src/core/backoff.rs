//! The one backoff schedule of every loop in slate: store requests, chunk re-reads, queue
//! receives, keys waiting in the inbox and pairs restarted by the supervisor. Exponential from
//! `initial`, capped at `max`, each wait drawn uniformly from [cap/2, cap] ("equal jitter"),
//! so that retries of many clients spread out while a wait never collapses to zero.

use std::time::Duration;

/// Exponential backoff with jitter, bounded by attempts and by a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the second attempt (at most; see [`Backoff::delay`]).
    pub initial: Duration,
    /// No wait is longer.
    pub max: Duration,
    /// Attempts in all, the first included; `u32::MAX` for loops that never give up.
    pub attempts: u32,
    /// No new attempt starts later than this after the first (None: no deadline).
    pub deadline: Option<Duration>,
}

impl Default for Backoff {
    /// Store requests: eight attempts, 0.2 s to 12.8 s apart, none started more than 60 s
    /// after the first. A request failing one time in five still gets through 999,997 times in
    /// a million, and a dead endpoint fails a request within about a minute.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(20),
            attempts: 8,
            deadline: Some(Duration::from_secs(60)),
        }
    }
}

impl Backoff {
    /// For loops that go on until they are stopped (queue receives, restarts): 0.2 s up to
    /// 30 s between attempts, no end.
    pub fn forever() -> Backoff {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            attempts: u32::MAX,
            deadline: None,
        }
    }

    /// Upper bound of the wait before attempt `n` (1-based; attempt 1 does not wait).
    pub fn cap(&self, n: u32) -> Duration {
        if n <= 1 {
            return Duration::ZERO;
        }
        let exp = self.initial.saturating_mul(1u32 << (n - 2).min(20));
        exp.min(self.max)
    }

    /// The wait before attempt `n`: uniformly random in [cap/2, cap].
    pub fn delay(&self, n: u32) -> Duration {
        let cap = self.cap(n);
        let half = cap / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Whether attempt `n + 1` may start, `elapsed` after the first one started and with a
    /// wait of `next_delay` before it.
    pub fn allows(&self, n: u32, elapsed: Duration, next_delay: Duration) -> bool {
        n < self.attempts
            && self
                .deadline
                .is_none_or(|d| elapsed.saturating_add(next_delay) <= d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_grow_exponentially_and_stop_at_max() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            attempts: 10,
            deadline: None,
        };
        let caps: Vec<u128> = (1..=7).map(|n| b.cap(n).as_millis()).collect();
        assert_eq!(caps, vec![0, 100, 200, 400, 800, 1000, 1000]);
        for n in 2..8 {
            let d = b.delay(n);
            assert!(d <= b.cap(n) && d >= b.cap(n) / 2, "{n}: {d:?}");
        }
        // attempt 40 does not overflow
        assert_eq!(b.cap(40), Duration::from_secs(1));
    }

    #[test]
    fn attempts_and_deadline_both_bound_a_budget() {
        let b = Backoff::default();
        let s = Duration::from_secs;
        // (attempts made, elapsed, next wait) → may another start?
        let table = [
            (1, s(0), s(0), true),
            (7, s(30), s(10), true),
            (8, s(30), s(1), false),  // attempts used up
            (3, s(55), s(10), false), // would start after the 60 s deadline
            (3, s(50), s(10), true),  // starts exactly at it
        ];
        for (n, elapsed, next, want) in table {
            assert_eq!(b.allows(n, elapsed, next), want, "{n} {elapsed:?} {next:?}");
        }
        let f = Backoff::forever();
        assert!(f.allows(1_000_000, s(86_400 * 365), s(30)));
    }
}
