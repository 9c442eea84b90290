//! The one retry budget of a store request, and of a chunk read. object_store's own retries
//! are off (`max_retries: 0` in `stores/mod.rs`): each request slate sends is tried by
//! [`Retry`] alone, on the one [`Backoff`] schedule: at most 8 attempts, 0.2 s to 12.8 s
//! apart with jitter, none started more than 60 s after the first. Sent again: errors that
//! are [`transient`] (throttled, 5xx, timeout, a broken connection); and for a chunk, a body
//! that breaks or is truncated half-way, which only a fresh ranged GET of the same chunk can
//! repair. Never sent again: missing objects, failed preconditions, denied access. Every
//! failed attempt, and every retry, is counted on `/metrics` by store and status (see
//! [`crate::core::metrics`]) when the store is named, and throttles and successes are reported
//! to the side's adaptive limit ([`super::limit`]) with the key they were for, whose prefix is
//! paced after a throttle ([`super::pace`]).
//!
//! (With object_store's retries stacked inside slate's, one HEAD could take 8 × 180 s to
//! fail; now it takes at most about a minute.)

use std::future::Future;
use std::sync::Arc;

use super::limit::Limiter;
use crate::core::backoff::Backoff;

/// Failure of one chunk: worth another attempt, or final.
#[derive(Debug)]
pub enum ChunkError {
    Retry(String),
    Fatal(String),
}

impl ChunkError {
    /// The error of a request that answered `status` (not a success): worth another attempt
    /// for a 5xx or a 429, final otherwise; `what` names the request.
    pub fn of_status(status: http::StatusCode, what: &str) -> ChunkError {
        let msg = format!("{what} answered {status}");
        if status.is_server_error() || status.as_u16() == 429 {
            ChunkError::Retry(msg)
        } else {
            ChunkError::Fatal(msg)
        }
    }
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkError::Retry(s) | ChunkError::Fatal(s) => f.write_str(s),
        }
    }
}

/// Retries of one request (or chunk): the schedule, and who hears of its failures.
#[derive(Debug, Clone, Default)]
pub struct Retry {
    pub schedule: Backoff,
    /// The store's scheme (`s3`, `az`, `gs`, `local`) that failed attempts are counted under;
    /// None: not counted.
    pub store: Option<&'static str>,
    /// The adaptive limit told about throttles and successes; None: none.
    pub limit: Option<Arc<Limiter>>,
    /// The requests carry large bodies (part uploads, large PUTs, large ranges read): their
    /// time is no round-trip sample, nor counted in the limit's latency.
    pub bulk: bool,
    /// The request runs outside the limit (a daemon's probe of a key, which takes no slot):
    /// its throttles are told (they pace its prefix and cut the limit), its successes and
    /// times are not, so that the limit measures only the copies it governs.
    pub outside: bool,
}

/// The status label of a failed attempt (`503`, `timeout`, …; see
/// [`crate::core::metrics::status_of`]).
pub trait Status {
    fn status(&self) -> String;
}

impl Status for String {
    fn status(&self) -> String {
        crate::core::metrics::status_of_text(self)
    }
}

impl Status for ChunkError {
    fn status(&self) -> String {
        crate::core::metrics::status_of_text(&self.to_string())
    }
}

impl Status for object_store::Error {
    fn status(&self) -> String {
        crate::core::metrics::status_of(self)
    }
}

/// Whether a failed request's status says that the store throttles (429, 503 — S3's
/// `SlowDown`, Azure's `ServerBusy`, GCS's rate limits all come as one of them).
pub fn throttle(status: &str) -> bool {
    matches!(status, "429" | "503")
}

/// Whether a failed store request may succeed when sent again: the store throttled, failed
/// inside (5xx), timed out (408 or no answer) or the connection broke. Not: missing objects,
/// failed preconditions, denied access, and errors of any other kind.
pub fn transient(e: &object_store::Error) -> bool {
    if !matches!(e, object_store::Error::Generic { .. }) {
        return false;
    }
    let status = crate::core::metrics::status_of(e);
    match status.as_str() {
        "timeout" | "connection" | "408" | "429" => true,
        s => s.len() == 3 && s.starts_with('5'),
    }
}

/// `attempt`, a signed call slate makes itself (not through object_store), on the one retry
/// budget of `store`: sent again while it answers [`ChunkError::Retry`]; its error as text.
pub async fn signed_call<T, F, Fut>(
    store: &'static str,
    key: &str,
    attempt: F,
) -> std::result::Result<T, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = std::result::Result<T, ChunkError>>,
{
    Retry::default()
        .for_store(store)
        .run(key, |e| matches!(e, ChunkError::Retry(_)), |_| attempt())
        .await
        .map_err(|e| e.to_string())
}

impl Retry {
    /// The same backoff, counting failed attempts under `store` (a scheme's short name).
    pub fn for_store(self, store: &'static str) -> Retry {
        Retry {
            store: Some(store),
            ..self
        }
    }

    /// The same, for requests that carry large bodies (see [`Retry::bulk`]).
    pub fn bulk(self) -> Retry {
        Retry { bulk: true, ..self }
    }

    /// The same, for a request that takes no slot under the limit (see [`Retry::outside`]).
    pub fn outside(self) -> Retry {
        Retry {
            outside: true,
            ..self
        }
    }

    /// The same backoff, telling `limit` about throttles and successes.
    pub fn limited(self, limit: Option<Arc<Limiter>>) -> Retry {
        Retry { limit, ..self }
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` rejects, or the budget
    /// (attempts, deadline) runs out. `what` is the key the request is for (a limit paces
    /// and backs off its prefix, see [`super::pace`]).
    pub async fn run<T, E, F, Fut>(
        &self,
        what: &str,
        retryable: impl Fn(&E) -> bool,
        mut op: F,
    ) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: std::fmt::Display + Status,
    {
        let mut n = 1;
        let started = tokio::time::Instant::now();
        // time spent waiting for a paced prefix's turn: not the request's failing, so not
        // counted against the retry deadline
        let mut paced = std::time::Duration::ZERO;
        loop {
            if let Some(l) = &self.limit {
                // a prefix the store throttled before waits for its turn; others go at once
                let t = tokio::time::Instant::now();
                l.pace(what).await;
                paced += t.elapsed();
            }
            let epoch = self.limit.as_ref().map(|l| l.epoch());
            let sent = tokio::time::Instant::now();
            let e = match op(n).await {
                Ok(v) => {
                    match &self.limit {
                        Some(l) if self.outside => l.succeeded_outside(what),
                        Some(l) => l.succeeded_key(what, sent.elapsed(), !self.bulk),
                        None => {}
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            let status = (self.store.is_some() || self.limit.is_some()).then(|| e.status());
            if let (Some(store), Some(status)) = (self.store, &status) {
                crate::core::metrics::request_error(store, status);
            }
            if let (Some(l), Some(epoch), Some(status)) = (&self.limit, epoch, &status) {
                if throttle(status) {
                    // `what` is the key: its prefix is slowed down, the store's limit only
                    // when the store as a whole throttles
                    l.throttled_key(what, epoch, sent);
                }
            }
            let d = self.schedule.delay(n + 1);
            if !retryable(&e)
                || !self
                    .schedule
                    .allows(n, started.elapsed().saturating_sub(paced), d)
            {
                return Err(e);
            }
            if let (Some(store), Some(status)) = (self.store, &status) {
                crate::core::metrics::request_retry(store, status);
            }
            tracing::warn!(what, attempt = n, delay_ms = d.as_millis() as u64, error = %e, "retrying");
            tokio::time::sleep(d).await;
            n += 1;
        }
    }

    /// Runs one store request until it succeeds, fails for good, or attempts run out: what
    /// `retryable` accepts among the [`transient`] errors is sent again.
    pub async fn request<T, F, Fut>(
        &self,
        what: &str,
        retryable: impl Fn(&object_store::Error) -> bool,
        op: F,
    ) -> Result<T, object_store::Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, object_store::Error>>,
    {
        self.run(what, |e| transient(e) && retryable(e), op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_or_fatal() {
        let b = Retry {
            schedule: Backoff {
                attempts: 4,
                ..Default::default()
            },
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
        // a label no other test uses: the meters are shared by the whole test binary
        let errors = || crate::core::metrics::request_errors("az", "418");
        let retries = || crate::core::metrics::request_retries("az", "418");
        let teapot = || async { Err::<(), _>("status code: 418 I'm a teapot: no".to_string()) };
        let b = Retry {
            schedule: Backoff {
                attempts: 3,
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(b
            .clone()
            .for_store("az")
            .run("t", |_| true, |_| teapot())
            .await
            .is_err());
        assert_eq!(errors(), 3);
        assert_eq!(retries(), 2);
        // a fatal error is counted, not retried; without a store nothing is counted
        let fatal = b
            .clone()
            .for_store("az")
            .run("t", |_| false, |_| teapot())
            .await;
        assert!(fatal.is_err());
        assert!(b.run("t", |_| true, |_| teapot()).await.is_err());
        assert_eq!(errors(), 4);
        assert_eq!(retries(), 2);
    }

    #[test]
    fn transient_errors_are_the_ones_worth_sending_again() {
        let generic = |text: &str| object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        };
        let status = |code: &str| {
            generic(&format!(
                "Error performing PUT b/k in 3s - Server returned non-2xx status code: {code}: x"
            ))
        };
        for (e, want) in [
            (status("503 Service Unavailable"), true),
            (status("500 Internal Server Error"), true),
            (status("502 Bad Gateway"), true),
            (status("429 Too Many Requests"), true),
            (status("408 Request Timeout"), true),
            (status("400 Bad Request"), false),
            (status("416 Range Not Satisfiable"), false),
            (generic("HTTP error: error sending request"), true),
            (generic("operation timed out"), true),
            (generic("something else entirely"), false),
            (
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: "gone".into(),
                },
                false,
            ),
            (
                object_store::Error::Precondition {
                    path: "k".into(),
                    source: "changed".into(),
                },
                false,
            ),
        ] {
            assert_eq!(transient(&e), want, "{e}");
        }
        assert!(throttle("503") && throttle("429") && !throttle("500"));
    }

    #[tokio::test(start_paused = true)]
    async fn throttles_and_successes_reach_the_limit() {
        let limit = Limiter::new(8, "t3", "dst");
        let b = Retry::default().limited(Some(limit.clone()));
        let slow = "Server returned non-2xx status code: 503 Service Unavailable: SlowDown";
        // throttled twice, then through: each attempt started after the cut before it, so both
        // cut (8 → 4 → 2), then one success
        let r: Result<u32, String> = b
            .run(
                "t",
                |_| true,
                |n| async move {
                    if n < 3 {
                        Err(slow.to_string())
                    } else {
                        Ok(n)
                    }
                },
            )
            .await;
        assert_eq!(r, Ok(3));
        assert_eq!(limit.limit(), 2, "8 → 4 → 2");
        // a 500 is no throttle
        let r: Result<(), String> = b
            .run(
                "t",
                |_| false,
                |_| async { Err("500 Internal Server Error".to_string()) },
            )
            .await;
        assert!(r.is_err());
        assert_eq!(limit.limit(), 2);
        // successes raise it again: 1 success was counted above, one more makes 3
        let ok: Result<(), String> = b.run("t", |_| true, |_| async { Ok(()) }).await;
        assert!(ok.is_ok());
        assert_eq!(limit.limit(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_outside_the_limit_tells_its_throttles_not_its_successes() {
        let limit = Limiter::new(8, "t5", "src");
        let probe = Retry::default().limited(Some(limit.clone())).outside();
        let slow = "Server returned non-2xx status code: 503 Service Unavailable: SlowDown";
        // a throttle of a probe cuts the limit as any request's does
        let r: Result<u32, String> = probe
            .run(
                "p",
                |_| true,
                |n| async move {
                    if n < 2 {
                        Err(slow.to_string())
                    } else {
                        Ok(n)
                    }
                },
            )
            .await;
        assert_eq!(r, Ok(2));
        assert_eq!(limit.limit(), 4, "8 → 4");
        // its successes raise nothing: the limit measures the copies it governs
        for _ in 0..20 {
            let ok: Result<(), String> = probe.run("p", |_| true, |_| async { Ok(()) }).await;
            assert!(ok.is_ok());
        }
        assert_eq!(limit.limit(), 4, "probes' successes are not the limit's");
        let governed = Retry::default().limited(Some(limit.clone()));
        for _ in 0..4 {
            let ok: Result<(), String> = governed.run("c", |_| true, |_| async { Ok(()) }).await;
            assert!(ok.is_ok());
        }
        assert_eq!(
            limit.limit(),
            5,
            "a window of 4 governed successes raises it by one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_prefix_is_paced_and_the_limit_kept() {
        let limit = Limiter::new(8, "t4", "dst");
        let b = Retry::default().limited(Some(limit.clone()));
        let slow = "Server returned non-2xx status code: 503 Service Unavailable: SlowDown";
        // the side sends to b/ as well: a/ alone is hot
        let ok: Result<(), String> = b.run("b/other", |_| true, |_| async { Ok(()) }).await;
        assert!(ok.is_ok());
        let r: Result<u32, String> = b
            .run(
                "a/one",
                |_| true,
                |n| async move {
                    if n < 3 {
                        Err(slow.to_string())
                    } else {
                        Ok(n)
                    }
                },
            )
            .await;
        assert_eq!(r, Ok(3));
        assert_eq!(
            limit.limit(),
            8,
            "one prefix throttled: the side's limit is kept"
        );
        let (lanes, backoffs) = limit.paced();
        assert_eq!(lanes, 1, "a/ paced");
        assert!((1..=2).contains(&backoffs), "{backoffs} backoffs");
        assert_eq!(crate::core::metrics::prefix_backoffs("t4", "dst"), backoffs);
        // with nothing else sent for a while, a/'s throttle is the store's: the limit is cut
        tokio::time::sleep(crate::stores::pace::RECENT).await;
        let r: Result<(), String> = b
            .run("a/two", |_| false, |_| async { Err(slow.to_string()) })
            .await;
        assert!(r.is_err());
        assert_eq!(limit.limit(), 4);
    }
}
