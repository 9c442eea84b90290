//! The process's meters, exposed by `GET /metrics` (server/metrics.rs) through
//! prometheus-client: the replication-lag histogram each pair keeps ([`LagHistogram`], in its
//! `DaemonStats`), and the process-wide meters of the copier, registered once by
//! [`register`]: failed and retried store requests by store and status, the transfers in
//! flight, and the adaptive transfer limits (`stores::limit`) by store and side.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

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

/// A histogram of replication lags in seconds over [`LAG_BUCKETS_MS`] (a bucket's bound is
/// inclusive: 50 ms falls in `le="0.05"`).
#[derive(Debug, Clone)]
pub struct LagHistogram(Histogram);

impl Default for LagHistogram {
    fn default() -> Self {
        LagHistogram(Histogram::new(
            LAG_BUCKETS_MS.iter().map(|&ms| ms as f64 / 1000.0),
        ))
    }
}

/// Upper bounds of the freshness buckets in milliseconds: the lag buckets, then up to an hour,
/// so that a target of 15 minutes (the default) or 30 is a bucket's bound.
pub const FRESHNESS_BUCKETS_MS: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 900_000,
    1_800_000, 3_600_000, 7_200_000,
];

impl LagHistogram {
    /// A histogram over [`FRESHNESS_BUCKETS_MS`].
    pub fn freshness() -> LagHistogram {
        LagHistogram(Histogram::new(
            FRESHNESS_BUCKETS_MS.iter().map(|&ms| ms as f64 / 1000.0),
        ))
    }

    /// Counts one lag of `ms` milliseconds.
    pub fn observe_ms(&self, ms: u64) {
        self.0.observe(ms as f64 / 1000.0);
    }
}

impl TypedMetric for LagHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LagHistogram {
    fn encode(&self, encoder: MetricEncoder) -> std::fmt::Result {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The labels of the request meters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreStatus {
    /// The store's scheme: `s3`, `az`, `gs`, `local`.
    store: &'static str,
    /// An HTTP status code, or `timeout`, `connection`, `other`.
    status: String,
}

/// The process-wide meters (every copy of the process adds to them).
struct Meters {
    request_errors: Family<StoreStatus, Counter>,
    request_retries: Family<StoreStatus, Counter>,
    transfers_in_flight: Gauge,
    prefix_backoffs: Family<StoreSide, Counter>,
}

/// The labels of the per-side meters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreSide {
    store: &'static str,
    /// `src` or `dst`.
    side: &'static str,
}

static METERS: LazyLock<Meters> = LazyLock::new(|| Meters {
    request_errors: Family::default(),
    request_retries: Family::default(),
    transfers_in_flight: Gauge::default(),
    prefix_backoffs: Family::default(),
});

/// Registers the process-wide meters in `registry` (the process's one registry, which the
/// server builds at start). Counter names get their `_total` from the encoder.
pub fn register(registry: &mut Registry) {
    let m = &*METERS;
    registry.register(
        "slate_request_errors",
        "Failed store requests seen by the copier, every attempt, by store scheme and HTTP status (or timeout, connection, other)",
        m.request_errors.clone(),
    );
    registry.register(
        "slate_request_retries",
        "Failed store requests the copier tried again, by store scheme and HTTP status (or timeout, connection, other)",
        m.request_retries.clone(),
    );
    registry.register(
        "slate_transfers_in_flight",
        "Object copies running now",
        m.transfers_in_flight.clone(),
    );
    registry.register(
        "slate_prefix_backoffs",
        "Throttles (503 SlowDown, 429) that slowed down one key prefix instead of the whole copy, by store and side",
        m.prefix_backoffs.clone(),
    );
    registry.register_collector(Box::new(TransferLimits));
    registry.register_collector(Box::new(RequestCounts));
}

/// `slate_store_requests_total{store,class}` and `slate_queue_receives_total`, from
/// `stores::requests`' counters.
#[derive(Debug)]
struct RequestCounts;

impl Collector for RequestCounts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        use crate::stores::requests::{Class, Counts, STORES};
        use prometheus_client::metrics::counter::ConstCounter;
        let c = Counts::now();
        {
            let mut family = encoder.encode_descriptor(
                "slate_store_requests",
                "Requests made to object stores, by store and class (LIST, HEAD, GET, PUT, DELETE)",
                None,
                MetricType::Counter,
            )?;
            for store in STORES {
                for class in Class::ALL {
                    let labels = [("store", store.short()), ("class", class.name())];
                    ConstCounter::new(c.of_store(store, class))
                        .encode(family.encode_family(&labels)?)?;
                }
            }
        }
        let family = encoder.encode_descriptor(
            "slate_queue_receives",
            "Receive calls to event queues (SQS, Azure Storage Queue, Pub/Sub pull)",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(c.receives).encode(family)?;
        Ok(())
    }
}

/// Counts a throttle that slowed down one prefix of `store`'s `side` (`stores::pace`).
pub fn prefix_backoff(store: &'static str, side: &'static str) {
    METERS
        .prefix_backoffs
        .get_or_create(&StoreSide { store, side })
        .inc();
}

/// Throttles that slowed down a prefix of `store`'s `side` so far.
pub fn prefix_backoffs(store: &'static str, side: &'static str) -> u64 {
    let m = METERS.prefix_backoffs.get(&StoreSide { store, side });
    m.map_or(0, |c| c.get())
}

fn labels(store: &'static str, status: &str) -> StoreStatus {
    StoreStatus {
        store,
        status: status.to_string(),
    }
}

/// Counts a failed request to `store` (a scheme: `s3`, `az`, `gs`, `local`); `status` from
/// [`status_of`] or [`status_of_text`].
pub fn request_error(store: &'static str, status: &str) {
    METERS
        .request_errors
        .get_or_create(&labels(store, status))
        .inc();
}

/// Counts a failed request that is tried again.
pub fn request_retry(store: &'static str, status: &str) {
    METERS
        .request_retries
        .get_or_create(&labels(store, status))
        .inc();
}

/// Failed requests to `store` with `status` so far.
pub fn request_errors(store: &'static str, status: &str) -> u64 {
    let m = METERS.request_errors.get(&labels(store, status));
    m.map_or(0, |c| c.get())
}

/// Retried requests to `store` with `status` so far.
pub fn request_retries(store: &'static str, status: &str) -> u64 {
    let m = METERS.request_retries.get(&labels(store, status));
    m.map_or(0, |c| c.get())
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

/// Object copies running now, in the whole process.
pub fn transfers_in_flight() -> i64 {
    METERS.transfers_in_flight.get()
}

/// Counts one object copy as in flight until dropped (finished, failed or cancelled).
#[derive(Debug)]
pub struct InFlight(Gauge);

impl InFlight {
    pub fn start() -> InFlight {
        InFlight::on(&METERS.transfers_in_flight)
    }

    fn on(gauge: &Gauge) -> InFlight {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The adaptive limit of one side of one copy (`stores::limit`): its value now and the
/// permits taken from it, for `slate_transfer_limit`.
#[derive(Debug)]
pub struct LimitGauge {
    /// The store's scheme (`s3`, `az`, `gs`).
    pub store: &'static str,
    /// `src` or `dst`.
    pub side: &'static str,
    pub limit: AtomicU64,
    pub in_flight: AtomicU64,
    /// The side's round-trip estimate in microseconds (0: none yet).
    pub rtt_micros: AtomicU64,
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
        rtt_micros: AtomicU64::new(0),
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

/// `(store, side, round-trip estimate in seconds)` of the live limits that have one: the
/// lowest of the copies that share a store and side, sorted.
pub fn transfer_rtts() -> Vec<(&'static str, &'static str, f64)> {
    let mut low: BTreeMap<(&'static str, &'static str), u64> = BTreeMap::new();
    for g in limits().iter().filter_map(Weak::upgrade) {
        let us = g.rtt_micros.load(Relaxed);
        if us > 0 {
            let e = low.entry((g.store, g.side)).or_insert(us);
            *e = (*e).min(us);
        }
    }
    low.into_iter()
        .map(|((store, side), us)| (store, side, us as f64 / 1e6))
        .collect()
}

/// `slate_transfer_limit`, `slate_transfer_in_flight` and `slate_transfer_rtt_seconds`, read
/// from the live limits at every scrape.
#[derive(Debug)]
struct TransferLimits;

impl Collector for TransferLimits {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let all = transfer_limits();
        {
            let mut family = encoder.encode_descriptor(
            "slate_transfer_limit",
            "Objects the copies may have in flight now (adaptive without --transfers; halved when a store throttles), by store and side.",
            None,
            MetricType::Gauge,
        )?;
            for (store, side, limit, _) in &all {
                let labels = [("store", *store), ("side", *side)];
                ConstGauge::new(*limit as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "slate_transfer_in_flight",
                "Objects the copies have in flight now under their limits, by store and side.",
                None,
                MetricType::Gauge,
            )?;
            for (store, side, _, in_flight) in &all {
                let labels = [("store", *store), ("side", *side)];
                ConstGauge::new(*in_flight as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "slate_transfer_rtt_seconds",
            "Round-trip estimate of each store side (the lowest time to the first byte of recent requests), by store and side.",
            None,
            MetricType::Gauge,
        )?;
        for (store, side, rtt) in transfer_rtts() {
            let labels = [("store", store), ("side", side)];
            ConstGauge::new(rtt).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's text, as `GET /metrics` encodes it.
    fn scrape() -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn lag_buckets_are_cumulative_with_inclusive_bounds() {
        let h = LagHistogram::default();
        for ms in [0, 50, 51, 1_000, 4_000, 300_000, 300_001, 9_999_999] {
            h.observe_ms(ms);
        }
        let mut registry = Registry::default();
        registry.register("lag_seconds", "Lag", h);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        let bucket = |le: &str| -> u64 {
            let want = format!("lag_seconds_bucket{{le=\"{le}\"}} ");
            let line = text.lines().find_map(|l| l.strip_prefix(&want));
            line.and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {want} in\n{text}"))
        };
        let got: Vec<u64> = [
            "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "300", "+Inf",
        ]
        .into_iter()
        .map(bucket)
        .collect();
        assert_eq!(got, [2, 3, 3, 3, 4, 4, 5, 5, 5, 5, 6, 8], "{text}");
        assert!(text.contains("# TYPE lag_seconds histogram\n"), "{text}");
        assert!(text.contains("lag_seconds_count 8\n"), "{text}");
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("lag_seconds_sum "))
            .and_then(|v| v.parse().ok())
            .unwrap();
        let want = (50 + 51 + 1_000 + 4_000 + 300_000 + 300_001 + 9_999_999) as f64 / 1000.0;
        assert!((sum - want).abs() < 1e-6, "{sum} != {want}");
    }

    #[test]
    fn registry_counts_errors_and_retries_apart_by_store_and_status() {
        // labels no other test uses: the meters are shared by the whole test binary
        request_error("gs", "597");
        request_error("gs", "597");
        request_error("az", "597");
        request_retry("gs", "597");
        assert_eq!(request_errors("gs", "597"), 2);
        assert_eq!(request_errors("az", "597"), 1);
        assert_eq!(request_retries("gs", "597"), 1);
        assert_eq!(request_retries("az", "597"), 0);
        let text = scrape();
        for want in [
            "# HELP slate_request_errors_total Failed store requests seen by the copier, every attempt, by store scheme and HTTP status (or timeout, connection, other).",
            "# TYPE slate_request_errors_total counter",
            r#"slate_request_errors_total{store="gs",status="597"} 2"#,
            r#"slate_request_errors_total{store="az",status="597"} 1"#,
            "# TYPE slate_request_retries_total counter",
            r#"slate_request_retries_total{store="gs",status="597"} 1"#,
            "# TYPE slate_transfers_in_flight gauge",
        ] {
            assert!(text.lines().any(|l| l == want), "no {want:?} in\n{text}");
        }
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
        let text = scrape();
        assert!(
            text.contains("# TYPE slate_transfer_limit gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("slate_transfer_limit{store=\"t1\",side=\"src\"} 8\n"),
            "{text}"
        );
        // the round-trip estimate: only sides that have one, in seconds
        c.rtt_micros.store(41_500, Relaxed);
        let text = scrape();
        assert!(
            text.contains("# TYPE slate_transfer_rtt_seconds gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("slate_transfer_rtt_seconds{store=\"t1\",side=\"src\"} 0.0415\n"),
            "{text}"
        );
        assert!(
            !text.contains("slate_transfer_rtt_seconds{store=\"t1\",side=\"dst\"}"),
            "{text}"
        );
        assert!(
            text.contains("slate_transfer_in_flight{store=\"t1\",side=\"dst\"} 0\n"),
            "{text}"
        );
        prefix_backoff("t1", "dst");
        assert!(
            scrape().contains("slate_prefix_backoffs_total{store=\"t1\",side=\"dst\"} 1\n"),
            "{}",
            scrape()
        );
        drop((a, c));
        assert_eq!(find("dst"), None);
    }

    #[test]
    fn in_flight_guard_counts_until_dropped_even_when_cancelled() {
        use std::future::Future;
        // a gauge of its own: copies in other tests move the process-wide one
        let gauge = Gauge::default();
        let a = InFlight::on(&gauge);
        let b = InFlight::on(&gauge);
        assert_eq!(gauge.get(), 2);
        drop(a);
        assert_eq!(gauge.get(), 1);
        let copy = async {
            let _g = InFlight::on(&gauge);
            std::future::pending::<()>().await;
        };
        let mut copy = Box::pin(copy);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(copy.as_mut().poll(&mut cx).is_pending());
        assert_eq!(gauge.get(), 2);
        drop(copy); // cancelled mid-copy
        drop(b);
        assert_eq!(gauge.get(), 0);
        let g = InFlight::start();
        assert!(transfers_in_flight() >= 1);
        drop(g);
    }
}
