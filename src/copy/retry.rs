//! Retries for whole chunks. object_store already retries each request (429, 5xx, timeouts)
//! with backoff and jitter (configured in `store.rs`); this layer retries what escapes it:
//! a body that breaks or is truncated half-way through a chunk, which only a fresh ranged GET
//! of the same chunk can repair.

use std::future::Future;
use std::time::Duration;

/// Exponential backoff with full jitter.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(20),
            attempts: 6,
        }
    }
}

impl Backoff {
    /// Upper bound of the wait before attempt `n` (1-based; attempt 1 does not wait).
    pub fn cap(&self, n: u32) -> Duration {
        if n <= 1 {
            return Duration::ZERO;
        }
        let exp = self.initial.saturating_mul(1u32 << (n - 2).min(20));
        exp.min(self.max)
    }

    /// The actual wait: uniformly random in [cap/2, cap] so that retries spread out.
    pub fn delay(&self, n: u32) -> Duration {
        let cap = self.cap(n);
        let half = cap / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` rejects, or attempts run out.
    pub async fn run<T, E, F, Fut>(
        &self,
        what: &str,
        retryable: impl Fn(&E) -> bool,
        mut op: F,
    ) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: std::fmt::Display,
    {
        let mut n = 1;
        loop {
            match op(n).await {
                Ok(v) => return Ok(v),
                Err(e) if n < self.attempts && retryable(&e) => {
                    let d = self.delay(n + 1);
                    tracing::warn!(what, attempt = n, delay_ms = d.as_millis() as u64, error = %e, "retrying");
                    tokio::time::sleep(d).await;
                    n += 1;
                }
                Err(e) => return Err(e),
            }
        }
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
        };
        let caps: Vec<u128> = (1..=7).map(|n| b.cap(n).as_millis()).collect();
        assert_eq!(caps, vec![0, 100, 200, 400, 800, 1000, 1000]);
        for n in 2..8 {
            let d = b.delay(n);
            assert!(d <= b.cap(n) && d >= b.cap(n) / 2, "{n}: {d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_or_fatal() {
        let b = Backoff {
            attempts: 4,
            ..Default::default()
        };
        let mut calls = 0;
        let r: Result<u32, String> = b
            .run(
                "t",
                |_| true,
                |n| {
                    calls += 1;
                    async move {
                        if n < 3 {
                            Err(format!("fail {n}"))
                        } else {
                            Ok(n)
                        }
                    }
                },
            )
            .await;
        assert_eq!((r, calls), (Ok(3), 3));

        let mut calls = 0;
        let r: Result<u32, String> = b
            .run(
                "t",
                |e: &String| !e.contains("fatal"),
                |_| {
                    calls += 1;
                    async { Err("fatal".to_string()) }
                },
            )
            .await;
        assert_eq!((r.is_err(), calls), (true, 1));

        let mut calls = 0;
        let r: Result<u32, String> = b
            .run(
                "t",
                |_| true,
                |_| {
                    calls += 1;
                    async { Err("x".into()) }
                },
            )
            .await;
        assert_eq!((r.is_err(), calls), (true, 4));
    }
}
