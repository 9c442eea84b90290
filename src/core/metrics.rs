//! Meters that `GET /metrics` (events/webhook.rs) renders, beside each pair's `DaemonStats`:
//! the lock-free [`Histogram`] a pair keeps of its replication lag, and the process-wide
//! meters of the copier: failed and retried store requests by store and status, the
//! transfers in flight, and the adaptive transfer limits (`copy::limit`) by store and side.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the unit of the `*_ms` timestamps of `DaemonStats`.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Upper bounds of the replication-lag buckets in milliseconds (0.05 s … 300 s); `+Inf` follows.
pub const LAG_BUCKETS_MS: [u64; 11] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
];

/// A histogram of millisecond values over [`LAG_BUCKETS_MS`], updated without locks.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket, not cumulative; the last slot holds those above every bound.
    slots: [AtomicU64; LAG_BUCKETS_MS.len() + 1],
    sum_ms: AtomicU64,
}

/// A histogram read at one moment, buckets cumulative as Prometheus wants them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// `(upper bound in ms, observations <= it)`, then `(None, all)` for `+Inf`.
    pub buckets: Vec<(Option<u64>, u64)>,
    pub sum_ms: u64,
    pub count: u64,
}

impl Histogram {
    /// Counts one value (a bucket's bound is inclusive: 50 ms falls in `le="0.05"`).
    pub fn observe_ms(&self, ms: u64) {
        let i = LAG_BUCKETS_MS.partition_point(|&le| le < ms);
        self.slots[i].fetch_add(1, Relaxed);
        self.sum_ms.fetch_add(ms, Relaxed);
    }

    /// The cumulative buckets; the count is the `+Inf` bucket, so the two always agree.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.slots.len());
        for (i, slot) in self.slots.iter().enumerate() {
            total += slot.load(Relaxed);
            buckets.push((LAG_BUCKETS_MS.get(i).copied(), total));
        }
        HistogramSnapshot {
            buckets,
            sum_ms: self.sum_ms.load(Relaxed),
            count: total,
        }
    }

    /// Writes the `NAME_bucket`, `NAME_sum` (seconds) and `NAME_count` samples with `labels`
    /// (already escaped, without braces) in front of `le`.
    pub fn write_samples(&self, out: &mut String, name: &str, labels: &str) {
        let s = self.snapshot();
        let sep = if labels.is_empty() { "" } else { "," };
        for (le, n) in &s.buckets {
            let le = le.map_or_else(|| "+Inf".to_string(), seconds);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {n}");
        }
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), seconds(s.sum_ms));
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), s.count);
    }
}

/// Milliseconds as exact decimal seconds: 50 → `0.05`, 2500 → `2.5`, 60000 → `60`.
pub fn seconds(ms: u64) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return s.to_string();
    }
    let text = format!("{s}.{frac:03}");
    text.trim_end_matches('0').to_string()
}

/// Failed and retried store requests, by (store, status).
struct Requests {
    errors: BTreeMap<(&'static str, String), u64>,
    retries: BTreeMap<(&'static str, String), u64>,
}

static REQUESTS: Mutex<Requests> = Mutex::new(Requests {
    errors: BTreeMap::new(),
    retries: BTreeMap::new(),
});

fn requests() -> std::sync::MutexGuard<'static, Requests> {
    // a counter is still right after a panic elsewhere held the lock
    REQUESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a failed request to `store` (a scheme: `s3`, `az`, `gs`, `local`); `status` from
/// [`status_of`] or [`status_of_text`].
pub fn request_error(store: &'static str, status: &str) {
    *requests()
        .errors
        .entry((store, status.to_string()))
        .or_default() += 1;
}

/// Counts a failed request that is tried again.
pub fn request_retry(store: &'static str, status: &str) {
    *requests()
        .retries
        .entry((store, status.to_string()))
        .or_default() += 1;
}

/// `(store, status, count)` of every failed request so far, sorted.
pub fn request_errors() -> Vec<(&'static str, String, u64)> {
    let r = requests();
    r.errors
        .iter()
        .map(|((s, st), n)| (*s, st.clone(), *n))
        .collect()
}

/// `(store, status, count)` of every retried request so far, sorted.
pub fn request_retries() -> Vec<(&'static str, String, u64)> {
    let r = requests();
    r.retries
        .iter()
        .map(|((s, st), n)| (*s, st.clone(), *n))
        .collect()
}

/// The status label of a failed store request: the HTTP status code (`"503"`) when the store
/// answered, else the kind of failure: `timeout`, `connection` or `other`.
pub fn status_of(e: &object_store::Error) -> String {
    use object_store::Error as E;
    let code = match e {
        E::NotFound { .. } => Some(404),
        E::Precondition { .. } => Some(412),
        E::NotModified { .. } => Some(304),
        E::AlreadyExists { .. } => Some(409),
        E::PermissionDenied { .. } => Some(403),
        E::Unauthenticated { .. } => Some(401),
        _ => None,
    };
    if let Some(code) = code {
        return code.to_string();
    }
    // no response: object_store's HttpError says why (its RetryError is not public, but its
    // text carries the status when there was one)
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<object_store::client::HttpError>() {
            return transport_class(h.kind()).to_string();
        }
        cur = err.source();
    }
    status_of_text(&e.to_string())
}

fn transport_class(kind: object_store::client::HttpErrorKind) -> &'static str {
    use object_store::client::HttpErrorKind as K;
    match kind {
        K::Timeout => "timeout",
        K::Connect | K::Request | K::Interrupted => "connection",
        _ => "other",
    }
}

/// The status label of an error known only by its text (the copier's chunk errors): a status
/// code written with its reason phrase (`503 Service Unavailable`), else `timeout`,
/// `connection` or `other` from the words of the message.
pub fn status_of_text(text: &str) -> String {
    let b = text.as_bytes();
    for i in 0..b.len().saturating_sub(3) {
        let digits = b[i..i + 3].iter().all(u8::is_ascii_digit);
        let starts_word = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if !(digits && starts_word && b[i + 3] == b' ') {
            continue;
        }
        let Ok(status) = text[i..i + 3].parse::<u16>() else {
            continue;
        };
        let reason = http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason());
        if reason.is_some_and(|r| text[i + 4..].starts_with(r)) {
            return status.to_string();
        }
    }
    // object_store says `retry_timeout: 180s` in every message that was retried
    let lower = text.to_ascii_lowercase().replace("retry_timeout", "");
    let any = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if any(&["timed out", "timeout"]) {
        "timeout"
    } else if any(&[
        "connect",
        "error sending request",
        "body error",
        "broken pipe",
        "reset by peer",
        "body ended after",
    ]) {
        "connection"
    } else {
        "other"
    }
    .to_string()
}

static TRANSFERS_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Object copies running now, in the whole process.
pub fn transfers_in_flight() -> u64 {
    TRANSFERS_IN_FLIGHT.load(Relaxed)
}

/// Counts one object copy as in flight until dropped (finished, failed or cancelled).
#[derive(Debug)]
pub struct InFlight(&'static AtomicU64);

impl InFlight {
    pub fn start() -> InFlight {
        InFlight::on(&TRANSFERS_IN_FLIGHT)
    }

    fn on(gauge: &'static AtomicU64) -> InFlight {
        gauge.fetch_add(1, Relaxed);
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The adaptive limit of one side of one copy (`copy::limit`): its value now and the permits
/// taken from it, for `slate_transfer_limit`.
#[derive(Debug)]
pub struct LimitGauge {
    /// The store's scheme (`s3`, `az`, `gs`).
    pub store: &'static str,
    /// `src` or `dst`.
    pub side: &'static str,
    pub limit: AtomicU64,
    pub in_flight: AtomicU64,
}

static LIMITS: Mutex<Vec<Weak<LimitGauge>>> = Mutex::new(Vec::new());

fn limits() -> std::sync::MutexGuard<'static, Vec<Weak<LimitGauge>>> {
    LIMITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A gauge for a new adaptive limit, shown while the returned `Arc` lives.
pub fn limit_gauge(store: &'static str, side: &'static str, limit: u64) -> Arc<LimitGauge> {
    let g = Arc::new(LimitGauge {
        store,
        side,
        limit: AtomicU64::new(limit),
        in_flight: AtomicU64::new(0),
    });
    let mut all = limits();
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(&g));
    g
}

/// `(store, side, limit, in flight)` of the adaptive limits alive now, summed over the copies
/// that share a store and side, sorted.
pub fn transfer_limits() -> Vec<(&'static str, &'static str, u64, u64)> {
    let mut sums: BTreeMap<(&'static str, &'static str), (u64, u64)> = BTreeMap::new();
    for g in limits().iter().filter_map(Weak::upgrade) {
        let e = sums.entry((g.store, g.side)).or_default();
        e.0 += g.limit.load(Relaxed);
        e.1 += g.in_flight.load(Relaxed);
    }
    sums.into_iter()
        .map(|((store, side), (l, f))| (store, side, l, f))
        .collect()
}

/// The samples of `slate_transfer_limit` (a gauge: objects the copies may have in flight now,
/// by store and side), labels rendered: `store="s3",side="dst"`.
pub fn transfer_limit_samples() -> Vec<(String, u64)> {
    transfer_limits()
        .into_iter()
        .map(|(store, side, limit, _)| (format!("store=\"{store}\",side=\"{side}\""), limit))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_inclusive_bounds() {
        let h = Histogram::default();
        for ms in [0, 50, 51, 1_000, 4_000, 300_000, 300_001, 9_999_999] {
            h.observe_ms(ms);
        }
        let s = h.snapshot();
        let le = |bound: Option<u64>| s.buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(le(Some(50)), 2, "{s:?}");
        assert_eq!(le(Some(100)), 3);
        assert_eq!(le(Some(1_000)), 4);
        assert_eq!(le(Some(2_500)), 4);
        assert_eq!(le(Some(5_000)), 5);
        assert_eq!(le(Some(300_000)), 6);
        assert_eq!(le(None), 8);
        assert_eq!(s.count, 8);
        assert_eq!(
            s.sum_ms,
            50 + 51 + 1_000 + 4_000 + 300_000 + 300_001 + 9_999_999
        );
        assert!(s.buckets.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(s.buckets.len(), 12);
    }

    #[test]
    fn histogram_renders_prometheus_samples() {
        let h = Histogram::default();
        h.observe_ms(70);
        h.observe_ms(1_250);
        let mut out = String::new();
        h.write_samples(&mut out, "lag_seconds", "pair=\"a\"");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            vec![
                "lag_seconds_bucket{pair=\"a\",le=\"0.05\"} 0",
                "lag_seconds_bucket{pair=\"a\",le=\"0.1\"} 1",
                "lag_seconds_bucket{pair=\"a\",le=\"0.25\"} 1",
                "lag_seconds_bucket{pair=\"a\",le=\"0.5\"} 1",
                "lag_seconds_bucket{pair=\"a\",le=\"1\"} 1",
                "lag_seconds_bucket{pair=\"a\",le=\"2.5\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"5\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"10\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"30\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"60\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"300\"} 2",
                "lag_seconds_bucket{pair=\"a\",le=\"+Inf\"} 2",
                "lag_seconds_sum{pair=\"a\"} 1.32",
                "lag_seconds_count{pair=\"a\"} 2",
            ]
        );
        let mut bare = String::new();
        Histogram::default().write_samples(&mut bare, "x", "");
        assert!(bare.contains("x_bucket{le=\"+Inf\"} 0\n"), "{bare}");
        assert!(bare.contains("x_sum 0\nx_count 0\n"), "{bare}");
    }

    #[test]
    fn seconds_are_exact_decimals() {
        let got: Vec<String> = [0, 5, 50, 250, 1_000, 1_001, 2_500, 300_000]
            .into_iter()
            .map(seconds)
            .collect();
        assert_eq!(
            got,
            ["0", "0.005", "0.05", "0.25", "1", "1.001", "2.5", "300"]
        );
    }

    #[test]
    fn registry_counts_errors_and_retries_apart_by_store_and_status() {
        // labels no other test uses: the registry is shared by the whole test binary
        let count = |rows: Vec<(&'static str, String, u64)>, store: &str, status: &str| {
            rows.into_iter()
                .find(|(s, st, _)| *s == store && st == status)
                .map_or(0, |r| r.2)
        };
        request_error("gs", "597");
        request_error("gs", "597");
        request_error("az", "597");
        request_retry("gs", "597");
        assert_eq!(count(request_errors(), "gs", "597"), 2);
        assert_eq!(count(request_errors(), "az", "597"), 1);
        assert_eq!(count(request_retries(), "gs", "597"), 1);
        assert_eq!(count(request_retries(), "az", "597"), 0);
        let errors = request_errors();
        assert!(errors
            .windows(2)
            .all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)));
    }

    #[test]
    fn statuses_come_from_codes_or_the_kind_of_failure() {
        for (text, want) in [
            (
                "Generic S3 error: Error performing GET http://127.0.0.1:9000/b/k in 3s, after 10 retries, max_retries: 10, retry_timeout: 180s - Server returned non-2xx status code: 503 Service Unavailable: <Error>",
                "503",
            ),
            ("server-side copy answered 429 Too Many Requests SlowDown", "429"),
            (
                "Generic S3 error: Error performing GET http://h/b/k in 3s, after 10 retries, max_retries: 10, retry_timeout: 180s - HTTP error: error sending request",
                "connection",
            ),
            ("operation timed out", "timeout"),
            ("body ended after 10 of 20 bytes", "connection"),
            // a number is no status without its reason phrase
            ("body ended after 404 of 500 bytes", "connection"),
            ("key a/404 Gone/x: no such thing", "other"),
            ("source file shrank during the copy", "other"),
        ] {
            assert_eq!(status_of_text(text), want, "{text}");
        }
    }

    #[test]
    fn statuses_of_object_store_errors() {
        let not_found = object_store::Error::NotFound {
            path: "k".into(),
            source: "gone".into(),
        };
        assert_eq!(status_of(&not_found), "404");
        let timeout = object_store::Error::Generic {
            store: "S3",
            source: Box::new(object_store::client::HttpError::new(
                object_store::client::HttpErrorKind::Timeout,
                std::io::Error::other("slow"),
            )),
        };
        assert_eq!(status_of(&timeout), "timeout");
        let refused = object_store::Error::Generic {
            store: "S3",
            source: Box::new(object_store::client::HttpError::new(
                object_store::client::HttpErrorKind::Connect,
                std::io::Error::other("refused"),
            )),
        };
        assert_eq!(status_of(&refused), "connection");
        let text = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 500 Internal Server Error: x".into(),
        };
        assert_eq!(status_of(&text), "500");
    }

    #[test]
    fn transfer_limits_sum_the_live_copies_by_store_and_side() {
        // a store label no other test uses: the registry is shared by the whole test binary
        let find = |side: &str| {
            transfer_limits()
                .into_iter()
                .find(|(st, si, _, _)| *st == "t1" && *si == side)
                .map(|(_, _, l, f)| (l, f))
        };
        let a = limit_gauge("t1", "dst", 16);
        let b = limit_gauge("t1", "dst", 4);
        let c = limit_gauge("t1", "src", 8);
        b.in_flight.store(3, Relaxed);
        assert_eq!(find("dst"), Some((20, 3)));
        assert_eq!(find("src"), Some((8, 0)));
        a.limit.store(2, Relaxed);
        drop(b);
        assert_eq!(find("dst"), Some((2, 0)));
        assert!(transfer_limit_samples().contains(&("store=\"t1\",side=\"src\"".into(), 8)));
        drop((a, c));
        assert_eq!(find("dst"), None);
    }

    #[test]
    fn in_flight_guard_counts_until_dropped_even_when_cancelled() {
        use std::future::Future;
        // a gauge of its own: copies in other tests move the process-wide one
        static GAUGE: AtomicU64 = AtomicU64::new(0);
        let a = InFlight::on(&GAUGE);
        let b = InFlight::on(&GAUGE);
        assert_eq!(GAUGE.load(Relaxed), 2);
        drop(a);
        assert_eq!(GAUGE.load(Relaxed), 1);
        let copy = async {
            let _g = InFlight::on(&GAUGE);
            std::future::pending::<()>().await;
        };
        let mut copy = Box::pin(copy);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(copy.as_mut().poll(&mut cx).is_pending());
        assert_eq!(GAUGE.load(Relaxed), 2);
        drop(copy); // cancelled mid-copy
        drop(b);
        assert_eq!(GAUGE.load(Relaxed), 0);
        let g = InFlight::start();
        assert!(transfers_in_flight() >= 1);
        drop(g);
    }
}
