//! Retries for whole chunks. object_store already retries each request (429, 5xx, timeouts)
//! with backoff and jitter (configured in `store.rs`); this layer retries what escapes it:
//! a body that breaks or is truncated half-way through a chunk, which only a fresh ranged GET
//! of the same chunk can repair. Every failed attempt, and every retry, is counted on
//! `/metrics` by store and status (see [`crate::metrics`]) when the store is named.

use std::future::Future;
use std::time::Duration;

/// Exponential backoff with full jitter.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub attempts: u32,
    /// The store's scheme (`s3`, `az`, `gs`, `local`) that failed attempts are counted under;
    /// None: not counted.
    pub store: Option<&'static str>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(20),
            attempts: 6,
            store: None,
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

    /// The same backoff, counting failed attempts under `store` (a scheme's short name).
    pub fn for_store(self, store: &'static str) -> Backoff {
        Backoff {
            store: Some(store),
            ..self
        }
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
            let e = match op(n).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let status = self.store.map(|store| {
                let status = crate::metrics::status_of_text(&e.to_string());
                crate::metrics::request_error(store, &status);
                (store, status)
            });
            if n >= self.attempts || !retryable(&e) {
                return Err(e);
            }
            if let Some((store, status)) = &status {
                crate::metrics::request_retry(store, status);
            }
            let d = self.delay(n + 1);
            tracing::warn!(what, attempt = n, delay_ms = d.as_millis() as u64, error = %e, "retrying");
            tokio::time::sleep(d).await;
            n += 1;
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
            store: None,
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

    #[tokio::test(start_paused = true)]
    async fn counts_failed_attempts_and_retries_by_store_and_status() {
        // a label no other test uses: the registry is shared by the whole test binary
        let count = |rows: Vec<(&'static str, String, u64)>| {
            rows.into_iter()
                .find(|(s, st, _)| *s == "az" && st == "418")
                .map_or(0, |r| r.2)
        };
        let teapot = || async { Err::<(), _>("status code: 418 I'm a teapot: no".to_string()) };
        let b = Backoff {
            attempts: 3,
            ..Default::default()
        };
        assert!(b
            .for_store("az")
            .run("t", |_| true, |_| teapot())
            .await
            .is_err());
        assert_eq!(count(crate::metrics::request_errors()), 3);
        assert_eq!(count(crate::metrics::request_retries()), 2);
        // a fatal error is counted, not retried; without a store nothing is counted
        let fatal = b.for_store("az").run("t", |_| false, |_| teapot()).await;
        assert!(fatal.is_err());
        assert!(b.run("t", |_| true, |_| teapot()).await.is_err());
        assert_eq!(count(crate::metrics::request_errors()), 4);
        assert_eq!(count(crate::metrics::request_retries()), 2);
    }
}
