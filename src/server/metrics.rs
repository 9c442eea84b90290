//! Probes and metrics: `GET /healthz` (liveness), `GET /readyz` (every pair of this process
//! follows its events: 503 with each pair's state while one starts or has failed) and
//! `GET /metrics` (Prometheus text: per pair, events, keys by outcome, bytes copied, drift,
//! replication lag, backlog, dead letters, the pair's state and restarts; for the process,
//! deliveries, failed and retried store requests, transfers in flight and their limits, jobs).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::{json, Server};
use crate::core::error::Result;
use crate::engine::running::{PairHandle, PairState};
use crate::state::inbox::Inbox;
use crate::state::jobs::{JobCounts, JobState, JobStore};

pub(crate) fn probe_routes() -> Router<Arc<Server>> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

pub(crate) fn routes() -> Router<Arc<Server>> {
    Router::new().route("/metrics", get(metrics))
}

/// Liveness: the process serves requests. Nothing secret in the answer.
async fn healthz() -> Response {
    json(StatusCode::OK, serde_json::json!({"status": "ok"}))
}

/// Readiness: every pair follows its events. A pair starting (backfill) or failed (waiting
/// to restart) makes the process not ready, and the answer says which and why.
async fn readyz(State(s): State<Arc<Server>>) -> Response {
    let pairs = s.running.pairs();
    let ready = pairs
        .iter()
        .filter(|p| p.state() == PairState::Following)
        .count();
    let all = ready == pairs.len();
    let detail: Vec<serde_json::Value> = pairs
        .iter()
        .map(|p| {
            let st = p.state();
            let mut v = serde_json::json!({"pair": p.label, "state": st.name()});
            if let PairState::Failed { error, .. } = st {
                v["error"] = serde_json::json!(error);
            }
            v
        })
        .collect();
    json(
        if all {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        serde_json::json!({
            "status": if all { "ready" } else { "not ready" },
            "pairs": pairs.len(),
            "ready": ready,
            "states": detail,
        }),
    )
}

/// Prometheus text format (0.0.4).
async fn metrics(State(s): State<Arc<Server>>) -> Response {
    let pairs = s.running.pairs();
    let db = s.db.clone();
    let ids: Vec<i64> = pairs.iter().map(|p| p.pair_id).collect();
    let inbox = crate::state::blocking(move || {
        ids.iter()
            .map(|id| Inbox::new(&db).stats(*id))
            .collect::<Result<Vec<_>>>()
    })
    .await
    .unwrap_or_default();
    let mut text = render_metrics(&pairs, &inbox, s.hub.deliveries.load(Relaxed));
    let db = s.db.clone();
    if let Ok(counts) = crate::state::blocking(move || JobStore::new(&db).count_by_state()).await {
        text.push_str(&render_job_metrics(&counts));
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

/// `slate_jobs{state}` and `slate_job_bytes_total` in Prometheus text.
fn render_job_metrics(c: &JobCounts) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "# HELP slate_jobs Jobs in the database, by state.\n# TYPE slate_jobs gauge\n",
    );
    for s in JobState::ALL {
        let _ = writeln!(
            out,
            "slate_jobs{{state=\"{}\"}} {}",
            s.name(),
            c.by_state[s as usize]
        );
    }
    let _ = writeln!(
        out,
        "# HELP slate_job_bytes_total Bytes copied by the jobs in the database.\n\
         # TYPE slate_job_bytes_total counter\nslate_job_bytes_total {}",
        c.bytes_done
    );
    out
}

/// A label value with `\`, `"` and newlines escaped, as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_metrics(
    pairs: &[Arc<PairHandle>],
    inbox: &[crate::state::inbox::Stats],
    deliveries: u64,
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
    let per_pair = |f: &dyn Fn(&PairHandle) -> u64| -> Vec<(String, u64)> {
        pairs
            .iter()
            .map(|p| (format!("pair=\"{}\"", label(&p.label)), f(p)))
            .collect()
    };
    family(
        out,
        "slate_events_received_total",
        "counter",
        "Change events stored in the inbox.",
        per_pair(&|p| p.intake.events.load(Relaxed)),
    );
    family(
        out,
        "slate_messages_received_total",
        "counter",
        "Cloud messages received by the pair's event source.",
        per_pair(&|p| p.intake.messages.load(Relaxed)),
    );
    let mut keys = Vec::new();
    for p in pairs {
        let d = &p.stats;
        for (result, v) in [
            ("copied", d.copied.load(Relaxed)),
            ("deleted", d.deleted.load(Relaxed)),
            ("unchanged", d.unchanged.load(Relaxed)),
            ("stale", d.stale.load(Relaxed)),
            ("failed", d.failed.load(Relaxed)),
        ] {
            keys.push((
                format!("pair=\"{}\",result=\"{result}\"", label(&p.label)),
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
        per_pair(&|p| p.stats.applied.load(Relaxed)),
    );
    family(
        out,
        "slate_bytes_copied_total",
        "counter",
        "Bytes written to the destination (applied keys, backfill and drift checks).",
        per_pair(&|p| p.stats.bytes_copied.load(Relaxed)),
    );
    family(
        out,
        "slate_drift_found_total",
        "counter",
        "Differences drift checks found (new, changed and extra keys), repaired or not.",
        per_pair(&|p| p.stats.drift_found.load(Relaxed)),
    );
    family(
        out,
        "slate_drift_repaired_total",
        "counter",
        "Objects copied or deleted by drift checks (changes the events missed).",
        per_pair(&|p| p.stats.drift_repaired.load(Relaxed)),
    );
    let lag = "slate_replication_lag_seconds";
    header(
        out,
        lag,
        "histogram",
        "Time from a key's first pending event to its reconcile, per key applied.",
    );
    for p in pairs {
        let pair = format!("pair=\"{}\"", label(&p.label));
        p.stats.lag.write_samples(out, lag, &pair);
    }
    let gauge = |f: fn(&crate::state::inbox::Stats) -> u64| -> Vec<(String, u64)> {
        pairs
            .iter()
            .zip(inbox)
            .map(|(p, s)| (format!("pair=\"{}\"", label(&p.label)), f(s)))
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
        vec![(String::new(), deliveries)],
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
        by_store(crate::core::metrics::request_errors()),
    );
    family(
        out,
        "slate_request_retries_total",
        "counter",
        "Failed store requests the copier tried again, by store scheme and HTTP status (or timeout, connection, other).",
        by_store(crate::core::metrics::request_retries()),
    );
    family(
        out,
        "slate_transfers_in_flight",
        "gauge",
        "Object copies running now.",
        vec![(String::new(), crate::core::metrics::transfers_in_flight())],
    );
    family(
        out,
        "slate_transfer_limit",
        "gauge",
        "Objects the copies may have in flight now (halved when a store throttles, +1 per window of successes), by store and side.",
        crate::core::metrics::transfer_limit_samples(),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_has_one_sample_per_pair_and_outcome() {
        let p = PairHandle::new(1, "az://c/p \"x\" -> s3://b/q".into(), None);
        let d = p.stats.clone();
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
        crate::core::metrics::request_error("s3", "418");
        crate::core::metrics::request_retry("s3", "418");
        p.intake.events.store(7, Relaxed);
        let meters = vec![p];
        let inbox = vec![crate::state::inbox::Stats {
            pending: 4,
            dead_letters: 1,
        }];
        let text = render_metrics(&meters, &inbox, 0);
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
}
