//! Push deliveries on slate's listener (`--events webhook`, `--listen ADDR`):
//!
//! - `POST /events/eventgrid`: Azure Event Grid webhook deliveries, Event Grid schema (an array
//!   of events, or the `SubscriptionValidationEvent` handshake, answered with
//!   `{"validationResponse": code}`) or CloudEvents 1.0 (one event, or a batch).
//!   `OPTIONS /events/eventgrid`: CloudEvents' abuse-protection handshake, answered with
//!   `WebHook-Allowed-Origin`.
//! - `POST /events/pubsub`: Pub/Sub push subscriptions (`{"message": {…}, "subscription": …}`)
//!   carrying GCS notifications.
//!
//! A delivery is answered 200 only after its events are in the inbox (ack after commit,
//! DESIGN.md rule 2); if they cannot be stored the answer is 503 and the sender retries.
//! Malformed deliveries and events of no pair become dead letters and are answered 200 (a
//! retry would not make them parse). Events go to every registered pair whose source they
//! name (Event Grid → `az://` pairs, Pub/Sub → `gs://` pairs).
//!
//! `GET /metrics` (Prometheus text; token required when set), `GET /healthz` (liveness) and
//! `GET /readyz` (every pair has finished its backfill and follows
//! events; 503 until then) answer without a token, for probes.
//!
//! Security: the listener binds loopback by default; any other address needs a bearer token
//! (`SLATE_API_TOKEN` or `--token-file`), accepted as `Authorization: Bearer TOKEN` or as a
//! `?token=TOKEN` query parameter (the form Event Grid and Pub/Sub push endpoint URLs can
//! carry), compared in constant time.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::route::{strangers, Routed, SourceStats, Target};
use super::Parsed;
use crate::error::{Result, SlateError};
use crate::inbox::Inbox;
use crate::location::Scheme;
use crate::manifest::Manifest;

/// Largest delivery accepted: Event Grid batches are at most 1 MB.
const MAX_DELIVERY: usize = 1024 * 1024;

/// The pairs that push deliveries feed, shared by every pair's daemon in the process.
pub struct Hub {
    manifest: Arc<Manifest>,
    targets: RwLock<Vec<(Scheme, Target)>>,
    token: Option<String>,
    pub stats: SourceStats,
    /// Every running pair's counters, for `/metrics`.
    meters: RwLock<Vec<PairMeters>>,
    /// Pairs this process runs, and how many have finished starting (backfill done).
    pub pairs: std::sync::atomic::AtomicU64,
    pub ready: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the token
        f.debug_struct("Hub")
            .field("pairs", &self.targets.read().map(|t| t.len()).unwrap_or(0))
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl Hub {
    /// A hub storing into `manifest` (dead letters of no pair too), with an optional token.
    pub fn new(manifest: Arc<Manifest>, token: Option<String>) -> Arc<Hub> {
        Arc::new(Hub {
            manifest,
            targets: RwLock::new(Vec::new()),
            meters: RwLock::new(Vec::new()),
            token,
            stats: SourceStats::default(),
            pairs: Default::default(),
            ready: Default::default(),
        })
    }

    /// Makes a running pair's counters visible on `/metrics`.
    pub fn meter(&self, m: PairMeters) {
        if let Ok(mut v) = self.meters.write() {
            v.push(m);
        }
    }

    /// Adds a pair (its source's scheme decides which deliveries reach it).
    pub fn register(&self, scheme: Scheme, target: Target) {
        if let Ok(mut t) = self.targets.write() {
            t.push((scheme, target));
        }
    }

    fn targets(&self, scheme: Scheme) -> Vec<Target> {
        self.targets
            .read()
            .map(|t| {
                t.iter()
                    .filter(|(s, _)| *s == scheme)
                    .map(|(_, t)| t.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every running pair's counters.
    pub fn meters(&self) -> Vec<PairMeters> {
        self.meters.read().map(|m| m.clone()).unwrap_or_default()
    }

    /// Whether the request carries the token (always, when none is set).
    pub fn authorized(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        let query = uri.query().and_then(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "token")
                .map(|(_, v)| v.into_owned())
        });
        [bearer, query]
            .into_iter()
            .flatten()
            .any(|got| constant_time_eq(got.as_bytes(), want.as_bytes()))
    }

    /// Routes the [`Hub`] under `/events/`, for a server that serves more than deliveries.
    pub fn router(self: &Arc<Hub>) -> Router {
        Router::new()
            .route(
                "/events/eventgrid",
                post(eventgrid_post).options(eventgrid_options),
            )
            .route("/events/pubsub", post(pubsub_post))
            .route("/healthz", axum::routing::get(healthz))
            .route("/readyz", axum::routing::get(readyz))
            .route("/metrics", axum::routing::get(metrics))
            .layer(axum::extract::DefaultBodyLimit::max(MAX_DELIVERY))
            .with_state(self.clone())
    }
}

/// Compares without an early exit, so the time taken says nothing about the token.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0);
    }
    diff == 0
}

/// Binds `addr` (refusing a non-loopback address without a token) and serves `router` in the
/// background; returns the bound address (port 0 picks one).
pub async fn serve(
    addr: &str,
    has_token: bool,
    router: Router,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let bad = |why: String| SlateError::BadOption {
        option: "--listen".into(),
        why,
    };
    let sa: SocketAddr = addr
        .parse()
        .map_err(|_| bad(format!("'{addr}' is not an address like 127.0.0.1:3030")))?;
    if !sa.ip().is_loopback() && !has_token {
        return Err(bad(format!(
            "{sa} is not a loopback address: set SLATE_API_TOKEN or --token-file to serve on it"
        )));
    }
    let listener = tokio::net::TcpListener::bind(sa)
        .await
        .map_err(|e| bad(format!("cannot listen on {sa}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| bad(e.to_string()))?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the listener stopped");
        }
    });
    Ok((bound, task))
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Liveness: the process serves requests. No token needed (probes carry none) and nothing
/// secret in the answer.
async fn healthz() -> Response {
    json(StatusCode::OK, serde_json::json!({"status": "ok"}))
}

/// Readiness: every pair has finished starting (its backfill is done and it follows events).
async fn readyz(State(hub): State<Arc<Hub>>) -> Response {
    let (pairs, ready) = (hub.pairs.load(Relaxed), hub.ready.load(Relaxed));
    let status = if ready >= pairs {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(
        status,
        serde_json::json!({"status": if ready >= pairs { "ready" } else { "starting" }, "pairs": pairs, "ready": ready}),
    )
}

/// One running pair's counters.
#[derive(Clone)]
pub struct PairMeters {
    /// `SRC -> DST`, the pair's label.
    pub pair: String,
    pub pair_id: i64,
    /// The config's name for the pair, if it has one.
    pub name: Option<String>,
    pub daemon: Arc<crate::reconcile::daemon::DaemonStats>,
    pub source: Arc<SourceStats>,
}

/// Prometheus text format (0.0.4): per pair, events, keys by outcome, bytes copied, drift,
/// replication lag (a histogram), backlog and dead letters; for the process, the listener's
/// deliveries, failed and retried store requests, and transfers in flight. Needs the token
/// when one is set.
async fn metrics(State(hub): State<Arc<Hub>>, headers: HeaderMap, uri: Uri) -> Response {
    if !hub.authorized(&headers, &uri) {
        return unauthorized();
    }
    let meters = hub.meters.read().map(|m| m.clone()).unwrap_or_default();
    let m = hub.manifest.clone();
    let ids: Vec<i64> = meters.iter().map(|p| p.pair_id).collect();
    let inbox = crate::reconcile::blocking(move || {
        ids.iter()
            .map(|id| Inbox::new(&m).stats(*id))
            .collect::<Result<Vec<_>>>()
    })
    .await
    .unwrap_or_default();
    let mut text = render_metrics(&meters, &inbox, &hub.stats);
    let m = hub.manifest.clone();
    if let Ok(counts) =
        crate::reconcile::blocking(move || crate::jobs::JobStore::new(&m).count_by_state()).await
    {
        text.push_str(&crate::jobs::render_metrics(&counts));
    }
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// A label value with `\`, `"` and newlines escaped, as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_metrics(
    meters: &[PairMeters],
    inbox: &[crate::inbox::Stats],
    hooks: &SourceStats,
) -> String {
    use std::fmt::Write;
    fn header(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn family(out: &mut String, name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>) {
        header(out, name, kind, help);
        for (labels, v) in rows {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    }
    let mut text = String::new();
    let out = &mut text;
    let per_pair = |f: &dyn Fn(&PairMeters) -> u64| -> Vec<(String, u64)> {
        meters
            .iter()
            .map(|p| (format!("pair=\"{}\"", label(&p.pair)), f(p)))
            .collect()
    };
    family(
        out,
        "slate_events_received_total",
        "counter",
        "Change events stored in the inbox.",
        per_pair(&|p| p.daemon.received.load(Relaxed) + p.source.events.load(Relaxed)),
    );
    family(
        out,
        "slate_messages_received_total",
        "counter",
        "Cloud messages received by the pair's event source.",
        per_pair(&|p| p.source.messages.load(Relaxed)),
    );
    let mut keys = Vec::new();
    for p in meters {
        let d = &p.daemon;
        for (result, v) in [
            ("copied", d.copied.load(Relaxed)),
            ("deleted", d.deleted.load(Relaxed)),
            ("unchanged", d.unchanged.load(Relaxed)),
            ("stale", d.stale.load(Relaxed)),
            ("failed", d.failed.load(Relaxed)),
        ] {
            keys.push((
                format!("pair=\"{}\",result=\"{result}\"", label(&p.pair)),
                v,
            ));
        }
    }
    family(
        out,
        "slate_keys_total",
        "counter",
        "Keys reconciled, by outcome (stale: skipped by their ordering token).",
        keys,
    );
    family(
        out,
        "slate_events_applied_total",
        "counter",
        "Keys reconciled without error (every outcome of slate_keys_total but failed).",
        per_pair(&|p| p.daemon.applied.load(Relaxed)),
    );
    family(
        out,
        "slate_bytes_copied_total",
        "counter",
        "Bytes written to the destination (applied keys, backfill and drift checks).",
        per_pair(&|p| p.daemon.bytes_copied.load(Relaxed)),
    );
    family(
        out,
        "slate_drift_found_total",
        "counter",
        "Differences drift checks found (new, changed and extra keys), repaired or not.",
        per_pair(&|p| p.daemon.drift_found.load(Relaxed)),
    );
    family(
        out,
        "slate_drift_repaired_total",
        "counter",
        "Objects copied or deleted by drift checks (changes the events missed).",
        per_pair(&|p| p.daemon.drift_repaired.load(Relaxed)),
    );
    let lag = "slate_replication_lag_seconds";
    header(
        out,
        lag,
        "histogram",
        "Time from a key's first pending event to its reconcile, per key applied.",
    );
    for p in meters {
        let pair = format!("pair=\"{}\"", label(&p.pair));
        p.daemon.lag.write_samples(out, lag, &pair);
    }
    let gauge = |f: fn(&crate::inbox::Stats) -> u64| -> Vec<(String, u64)> {
        meters
            .iter()
            .zip(inbox)
            .map(|(p, s)| (format!("pair=\"{}\"", label(&p.pair)), f(s)))
            .collect()
    };
    family(
        out,
        "slate_backlog",
        "gauge",
        "Keys waiting in the inbox.",
        gauge(|s| s.pending),
    );
    family(
        out,
        "slate_dead_letters",
        "gauge",
        "Messages kept as dead letters (the pair's and those of no pair).",
        gauge(|s| s.dead_letters),
    );
    family(
        out,
        "slate_webhook_deliveries_total",
        "counter",
        "Deliveries received on the listener.",
        vec![(String::new(), hooks.messages.load(Relaxed))],
    );
    let by_store = |rows: Vec<(&'static str, String, u64)>| -> Vec<(String, u64)> {
        rows.into_iter()
            .map(|(store, status, n)| {
                let labels = format!("store=\"{}\",status=\"{}\"", label(store), label(&status));
                (labels, n)
            })
            .collect()
    };
    family(
        out,
        "slate_request_errors_total",
        "counter",
        "Failed store requests seen by the copier, every attempt, by store scheme and HTTP status (or timeout, connection, other).",
        by_store(crate::metrics::request_errors()),
    );
    family(
        out,
        "slate_request_retries_total",
        "counter",
        "Failed store requests the copier tried again, by store scheme and HTTP status (or timeout, connection, other).",
        by_store(crate::metrics::request_retries()),
    );
    family(
        out,
        "slate_transfers_in_flight",
        "gauge",
        "Object copies running now.",
        vec![(String::new(), crate::metrics::transfers_in_flight())],
    );
    family(
        out,
        "slate_transfer_limit",
        "gauge",
        "Objects the copies may have in flight now (halved when a store throttles, +1 per window of successes), by store and side.",
        crate::metrics::transfer_limit_samples(),
    );
    text
}

fn unauthorized() -> Response {
    json(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": "missing or wrong bearer token"}),
    )
}

/// CloudEvents 1.0 webhook validation (HTTP OPTIONS): allow the asking origin.
async fn eventgrid_options(State(hub): State<Arc<Hub>>, headers: HeaderMap, uri: Uri) -> Response {
    if !hub.authorized(&headers, &uri) {
        return unauthorized();
    }
    let origin = headers
        .get("webhook-request-origin")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("*")
        .to_string();
    (
        StatusCode::OK,
        [
            ("webhook-allowed-origin", origin),
            ("webhook-allowed-rate", "*".to_string()),
        ],
    )
        .into_response()
}

/// A delivery's body through `parser`; the error is the dead letter's reason.
fn parse_body(
    body: &[u8],
    parser: fn(&str) -> std::result::Result<Parsed, super::ParseError>,
) -> std::result::Result<Parsed, String> {
    let text = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    parser(text).map_err(|e| e.to_string())
}

async fn eventgrid_post(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if !hub.authorized(&headers, &uri) {
        return unauthorized();
    }
    let parsed = parse_body(&body, super::parse_eventgrid);
    if let Ok(Parsed::Handshake { validation_code }) = &parsed {
        hub.stats.ignored.fetch_add(1, Relaxed);
        return json(
            StatusCode::OK,
            serde_json::json!({ "validationResponse": validation_code }),
        );
    }
    deliver(
        &hub,
        Scheme::Azure,
        "webhook-eventgrid",
        "az",
        &body,
        parsed,
    )
    .await
}

async fn pubsub_post(
    State(hub): State<Arc<Hub>>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if !hub.authorized(&headers, &uri) {
        return unauthorized();
    }
    let parsed = parse_body(&body, super::parse_gcs_push);
    deliver(&hub, Scheme::Gcs, "webhook-pubsub", "gs", &body, parsed).await
}

/// Stores one delivery for every pair it concerns; 200 when stored, 503 when not.
async fn deliver(
    hub: &Hub,
    scheme: Scheme,
    source: &'static str,
    what: &str,
    body: &[u8],
    parsed: std::result::Result<Parsed, String>,
) -> Response {
    hub.stats.messages.fetch_add(1, Relaxed);
    let parsed = match parsed {
        Ok(Parsed::Ignore(_)) => {
            hub.stats.ignored.fetch_add(1, Relaxed);
            return json(StatusCode::OK, serde_json::json!({"stored": 0}));
        }
        Ok(p) => p,
        Err(why) => return dead_letters(hub, source, body, vec![why]).await,
    };
    let targets = hub.targets(scheme);
    if targets.is_empty() {
        let why = format!("no {what}:// pair follows webhook deliveries");
        return dead_letters(hub, source, body, vec![why]).await;
    }
    let scopes: Vec<_> = targets.iter().map(Target::scope).collect();
    let dead = strangers(&parsed, &scopes, what);
    for t in &targets {
        let mut routed = Routed::default();
        routed.add(parsed.clone(), &t.scope(), what);
        routed.dead.clear(); // an event outside this pair may be another's: see `strangers`
        if routed.rows.is_empty() && routed.prefixes.is_empty() {
            continue;
        }
        if let Err(e) = t.store(source, body, routed, &hub.stats).await {
            tracing::error!(error = %e, "could not store a delivery; the sender will retry");
            return retry_later();
        }
    }
    dead_letters(hub, source, body, dead).await
}

fn retry_later() -> Response {
    json(
        StatusCode::SERVICE_UNAVAILABLE,
        serde_json::json!({"error": "could not store the delivery; retry"}),
    )
}

/// Stores the delivery as a dead letter once per reason; 200, or 503 when that failed.
async fn dead_letters(
    hub: &Hub,
    source: &'static str,
    body: &[u8],
    reasons: Vec<String>,
) -> Response {
    if reasons.is_empty() {
        return json(StatusCode::OK, serde_json::json!({"stored": true}));
    }
    hub.stats
        .dead_lettered
        .fetch_add(reasons.len() as u64, Relaxed);
    let (m, raw) = (hub.manifest.clone(), body.to_vec());
    let r = crate::reconcile::blocking(move || {
        let ib = Inbox::new(&m);
        for why in reasons {
            ib.dead_letter(None, source, &raw, &why)?;
        }
        Ok(())
    })
    .await;
    match r {
        Ok(()) => json(StatusCode::OK, serde_json::json!({"stored": false})),
        Err(e) => {
            tracing::error!(error = %e, "could not store a dead letter");
            retry_later()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_has_one_sample_per_pair_and_outcome() {
        let d = Arc::new(crate::reconcile::daemon::DaemonStats::default());
        d.copied.store(3, Relaxed);
        d.stale.store(2, Relaxed);
        d.applied.store(5, Relaxed);
        d.bytes_copied.store(4096, Relaxed);
        d.drift_found.store(6, Relaxed);
        d.drift_repaired.store(4, Relaxed);
        for ms in [40, 700, 400_000] {
            d.lag.observe_ms(ms);
        }
        // process-wide: labels no other test uses (the registry is shared by the test binary)
        crate::metrics::request_error("s3", "418");
        crate::metrics::request_retry("s3", "418");
        let src = Arc::new(SourceStats::default());
        src.events.store(7, Relaxed);
        let meters = vec![PairMeters {
            pair: "az://c/p \"x\" -> s3://b/q".into(),
            pair_id: 1,
            name: None,
            daemon: d,
            source: src,
        }];
        let inbox = vec![crate::inbox::Stats {
            pending: 4,
            dead_letters: 1,
        }];
        let text = render_metrics(&meters, &inbox, &SourceStats::default());
        let pair = r#"pair="az://c/p \"x\" -> s3://b/q""#;
        for want in [
            format!("slate_events_received_total{{{pair}}} 7"),
            format!("slate_keys_total{{{pair},result=\"copied\"}} 3"),
            format!("slate_keys_total{{{pair},result=\"stale\"}} 2"),
            format!("slate_backlog{{{pair}}} 4"),
            format!("slate_dead_letters{{{pair}}} 1"),
            "slate_webhook_deliveries_total 0".to_string(),
            "# TYPE slate_keys_total counter".to_string(),
            "# TYPE slate_backlog gauge".to_string(),
            format!("slate_events_applied_total{{{pair}}} 5"),
            format!("slate_bytes_copied_total{{{pair}}} 4096"),
            format!("slate_drift_found_total{{{pair}}} 6"),
            format!("slate_drift_repaired_total{{{pair}}} 4"),
            "# TYPE slate_replication_lag_seconds histogram".to_string(),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"0.05\"}} 1"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"0.5\"}} 1"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"1\"}} 2"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"300\"}} 2"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"+Inf\"}} 3"),
            format!("slate_replication_lag_seconds_sum{{{pair}}} 400.74"),
            format!("slate_replication_lag_seconds_count{{{pair}}} 3"),
            "# TYPE slate_request_errors_total counter".to_string(),
            "# TYPE slate_request_retries_total counter".to_string(),
            "# TYPE slate_transfers_in_flight gauge".to_string(),
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "missing {want:?} in\n{text}"
            );
        }
        // counters only grow, and other tests may add to the same labels: at least ours
        let value = |prefix: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {prefix:?} in\n{text}"))
        };
        let labels = r#"{store="s3",status="418"}"#;
        assert!(value(&format!("slate_request_errors_total{labels}")) >= 1);
        assert!(value(&format!("slate_request_retries_total{labels}")) >= 1);
        value("slate_transfers_in_flight ");
        // every family has one HELP and one TYPE line, and no sample without a family
        let mut families = std::collections::HashSet::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or_default();
                assert!(families.insert(name.to_string()), "{name} twice");
                let help = format!("# HELP {name} ");
                assert!(
                    text.lines().any(|h| h.starts_with(&help)),
                    "{name} has no HELP"
                );
            } else if !l.starts_with('#') {
                let name = l.split(['{', ' ']).next().unwrap_or_default();
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .filter(|b| families.contains(*b))
                    .unwrap_or(name);
                assert!(families.contains(base), "sample {l:?} before its TYPE");
            }
        }
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"secret2", b"secret"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"x", b""));
        assert!(constant_time_eq(b"", b""));
    }
}
