//! Probes and metrics: `GET /healthz` (liveness), `GET /readyz` (every pair of this process
//! follows its events: 503 with each pair's state while one starts or has failed) and
//! `GET /metrics` (Prometheus text 0.0.4, encoded by prometheus-client from the process's one
//! [`Registry`]: per pair, events, keys by outcome, bytes copied, drift, replication lag,
//! backlog, dead letters, whether it is up and its restarts; for the process, deliveries,
//! failed and retried store requests, transfers in flight and their limits, jobs).
//!
//! The pairs' meters live in the engine's atomics (which `GET /pairs` reads too) and the
//! backlog, dead letters and jobs in the database: [`Scrape`], a collector of the registry,
//! reads them at every scrape. The copier's process-wide meters are `core::metrics`'.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, DescriptorEncoder, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{json, Server};
use crate::core::error::Result;
use crate::engine::running::{PairHandle, PairState, Running, CONSUMER_STUCK_MS};
use crate::events::push::Hub;
use crate::events::source::ConsumerStats;
use crate::state::inbox::{self, Inbox};
use crate::state::jobs::{JobCounts, JobState, JobStore};
use crate::state::manifest::Manifest;

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
    // an engaged delete brake keeps the pair ready (it follows its events: a Service keeps
    // routing webhooks to it) and is said here at once
    let (db, ids): (_, Vec<(i64, String, std::time::Duration)>) = (
        s.db.clone(),
        pairs
            .iter()
            .map(|p| (p.pair_id, p.label.clone(), p.brake().window))
            .collect(),
    );
    let brakes = crate::state::blocking(move || {
        let b = crate::state::brake::Brakes::new(&db);
        let mut out = Vec::new();
        for (id, label, window) in ids {
            let st = b.state(id, window)?;
            if st.engaged {
                out.push(
                    serde_json::json!({"pair": label, "held": st.held, "reason": st.reason,
                    "release": "slate pairs release-deletes SRC DST (or drop-deletes)"}),
                );
            }
        }
        Ok(out)
    })
    .await
    .unwrap_or_default();
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
            // a canary that did not make it through: the pair follows, but its events may
            // not arrive (said here; the answer stays ready, as for a delete brake)
            if let Some(why) = p.degraded() {
                v["degraded"] = serde_json::json!(why);
            }
            v
        })
        .collect();
    // a queue whose every receive fails (deleted, credentials expired) feeds nothing
    let now = crate::core::metrics::unix_ms();
    let consumers: Vec<serde_json::Value> = s
        .running
        .consumers()
        .iter()
        .map(|c| match c.stuck(now, CONSUMER_STUCK_MS) {
            Some(error) => {
                serde_json::json!({"source": c.spec, "state": "failing", "error": error})
            }
            None => serde_json::json!({"source": c.spec, "state": "receiving"}),
        })
        .collect();
    let all = all && consumers.iter().all(|c| c["state"] == "receiving");
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
            "consumers": consumers,
            "delete_brakes": brakes,
        }),
    )
}

/// The process's one registry: the copier's meters and [`Scrape`]. Built once, by
/// `server::start`.
pub(crate) fn registry(running: Arc<Running>, db: Arc<Manifest>, hub: Arc<Hub>) -> Registry {
    let mut registry = Registry::default();
    crate::core::metrics::register(&mut registry);
    // before Scrape: a scrape's own reads of the database count in the next one
    registry.register_collector(Box::new(StateOps));
    registry.register_collector(Box::new(Scrape { running, db, hub }));
    registry
}

/// `slate_state_statements_total{backend}` and `slate_state_transactions_total{backend,kind}`:
/// what this process ran on its state databases (`state::db`'s process-wide counts).
#[derive(Debug)]
struct StateOps;

impl Collector for StateOps {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let ops = crate::state::db::op_counts();
        family(
            &mut encoder,
            ("slate_state_statements", MetricType::Counter),
            "Statements run on the state database (manifest, inbox, claims, jobs), by backend; a batch counts once, BEGIN and COMMIT not at all.",
            ops.map(|(backend, c)| ([("backend", backend)], c.statements)),
        )?;
        let rows = ops.into_iter().flat_map(|(backend, c)| {
            [
                ([("backend", backend), ("kind", "write")], c.writes),
                ([("backend", backend), ("kind", "read")], c.reads),
            ]
        });
        family(
            &mut encoder,
            ("slate_state_transactions", MetricType::Counter),
            "State database calls, by backend and kind: write transactions begun (each attempt of one run again after a conflict) and reads (a connection taken for reads, no transaction).",
            rows,
        )
    }
}

/// The registry in Prometheus text format (0.0.4), encoded on the blocking pool: [`Scrape`]
/// reads the database.
async fn metrics(State(s): State<Arc<Server>>) -> Response {
    let text = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &s.registry).map(|()| text)
    })
    .await;
    match text {
        Ok(Ok(text)) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                prometheus_text::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        _ => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"error": "the metrics could not be encoded"}),
        ),
    }
}

/// What a scrape reads from the server: the meters of every pair this process runs, their
/// inbox (backlog, dead letters), the webhook deliveries, the jobs in the database.
struct Scrape {
    running: Arc<Running>,
    db: Arc<Manifest>,
    hub: Arc<Hub>,
}

impl fmt::Debug for Scrape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let pairs = self.running.pairs();
        encode_pairs(&mut encoder, &pairs)?;
        let inbox = Inbox::new(&self.db);
        match pairs
            .iter()
            .map(|p| inbox.stats(p.pair_id))
            .collect::<Result<Vec<_>>>()
        {
            Ok(stats) => encode_inbox(&mut encoder, &pairs, &stats)?,
            Err(e) => tracing::warn!(error = %e, "metrics: the inbox could not be read"),
        }
        match crate::state::deadletters::DeadLetters::new(&self.db).unowned_by_queue() {
            Ok(by_queue) => family(
                &mut encoder,
                ("slate_dead_letters_unowned", MetricType::Gauge),
                "Dead letters of no pair (malformed messages, buckets no pair follows), by the queue or webhook they came from.",
                by_queue
                    .iter()
                    .map(|(q, n)| -> ([(&str, &str); 1], u64) { ([("queue", q.as_str())], *n) }),
            )?,
            Err(e) => tracing::warn!(error = %e, "metrics: the dead letters could not be read"),
        }
        let brakes = crate::state::brake::Brakes::new(&self.db);
        match pairs
            .iter()
            .map(|p| brakes.state(p.pair_id, p.brake().window))
            .collect::<Result<Vec<_>>>()
        {
            Ok(states) => {
                let rows = |f: fn(&crate::state::brake::BrakeState) -> u64| {
                    pairs
                        .iter()
                        .zip(states.iter())
                        .map(move |(p, s)| -> (PairLabel, u64) {
                            ([("pair", p.label.as_str())], f(s))
                        })
                        .collect::<Vec<_>>()
                };
                family(
                    &mut encoder,
                    ("slate_deletes_held", MetricType::Gauge),
                    "Deletes the pair's delete brake holds in its inbox for an operator.",
                    rows(|s| s.held),
                )?;
                family(
                    &mut encoder,
                    ("slate_delete_brake_engaged", MetricType::Gauge),
                    "1 while the pair's delete brake is engaged (its deletes held).",
                    rows(|s| u64::from(s.engaged)),
                )?;
            }
            Err(e) => tracing::warn!(error = %e, "metrics: the delete brakes could not be read"),
        }
        encode_consumers(&mut encoder, &self.running.consumers())?;
        let deliveries = self.hub.deliveries.load(Relaxed);
        family(
            &mut encoder,
            ("slate_webhook_deliveries", MetricType::Counter),
            "Deliveries received on the listener.",
            [(NoLabels, deliveries)],
        )?;
        match JobStore::new(&self.db).count_by_state() {
            Ok(counts) => encode_jobs(&mut encoder, &counts),
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the jobs could not be read");
                Ok(())
            }
        }
    }
}

/// No labels: a family of one sample.
#[derive(Debug, Clone, Copy)]
struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut prometheus_client::encoding::LabelSetEncoder) -> fmt::Result {
        Ok(())
    }
}

/// One family: its HELP and TYPE, then a sample per (labels, value). `name` is without the
/// `_total` the encoder adds to counters.
fn family<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    (name, kind): (&str, MetricType),
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, v) in rows {
        let sample = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(v).encode(sample)?,
            _ => ConstGauge::new(v).encode(sample)?,
        }
    }
    Ok(())
}

type PairLabel<'a> = [(&'static str, &'a str); 1];

/// A counter family with one sample per pair.
fn per_pair(
    encoder: &mut DescriptorEncoder,
    pairs: &[Arc<PairHandle>],
    (name, help): (&str, &str),
    value: impl Fn(&PairHandle) -> u64,
) -> fmt::Result {
    let rows = pairs
        .iter()
        .map(|p| -> (PairLabel, u64) { ([("pair", p.label.as_str())], value(p)) });
    family(encoder, (name, MetricType::Counter), help, rows)
}

/// A per-pair counter family: name (without `_total`), help, how to read it.
type PairCounter = (&'static str, &'static str, fn(&PairHandle) -> u64);

/// The pairs' counters with one sample per pair.
const PAIR_COUNTERS: [PairCounter; 7] = [
    (
        "slate_events_received",
        "Change events stored in the inbox.",
        |p| p.intake.events.load(Relaxed),
    ),
    (
        "slate_events_outside",
        "Events on the pair's queue or webhook for keys of a followed bucket outside every pair's prefix (ignored).",
        |p| p.intake.outside.load(Relaxed),
    ),
    (
        "slate_messages_received",
        "Cloud messages received by the pair's event source.",
        |p| p.intake.messages.load(Relaxed),
    ),
    (
        "slate_events_applied",
        "Keys reconciled without error (every outcome of slate_keys_total but failed).",
        |p| p.stats.applied.load(Relaxed),
    ),
    (
        "slate_bytes_copied",
        "Bytes written to the destination (applied keys, backfill and drift checks).",
        |p| p.stats.bytes_copied.load(Relaxed),
    ),
    (
        "slate_drift_found",
        "Differences drift checks found (new, changed and extra keys), repaired or not.",
        |p| p.stats.drift_found.load(Relaxed),
    ),
    (
        "slate_drift_repaired",
        "Objects copied or deleted by drift checks (changes the events missed).",
        |p| p.stats.drift_repaired.load(Relaxed),
    ),
];

/// The families of the pairs' own meters.
fn encode_pairs(encoder: &mut DescriptorEncoder, pairs: &[Arc<PairHandle>]) -> fmt::Result {
    for (name, help, value) in PAIR_COUNTERS {
        per_pair(encoder, pairs, (name, help), value)?;
    }
    encode_keys(encoder, pairs)?;
    encode_lag(encoder, pairs)?;
    encode_freshness(encoder, pairs)?;
    encode_supervision(encoder, pairs)
}

/// A gauge family of seconds, one sample per row; none at all when there is no row (a family
/// without samples is noise to a scraper).
fn seconds<'a>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    rows: impl IntoIterator<Item = (PairLabel<'a>, f64)>,
) -> fmt::Result {
    let rows: Vec<_> = rows.into_iter().collect();
    if rows.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        family.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

/// The freshness objective of each pair: the histogram of source write → replica, the target,
/// the share within it (as S3 Replication Time Control reports), and the time since the
/// pair's last event.
fn encode_freshness(encoder: &mut DescriptorEncoder, pairs: &[Arc<PairHandle>]) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "slate_source_to_replica_seconds",
        "Time from a change at the source (the provider's event time; the event's arrival when it carries none) to the replica, per change applied.",
        None,
        MetricType::Histogram,
    )?;
    for p in pairs {
        let labels: PairLabel = [("pair", p.label.as_str())];
        p.stats
            .freshness
            .histogram
            .encode(family.encode_family(&labels)?)?;
    }
    seconds(
        encoder,
        (
            "slate_freshness_target_seconds",
            "The pair's freshness objective (freshness_target).",
        ),
        pairs.iter().map(|p| {
            (
                [("pair", p.label.as_str())],
                p.stats.freshness.target_ms.load(Relaxed) as f64 / 1000.0,
            )
        }),
    )?;
    seconds(
        encoder,
        (
            "slate_freshness_within_target_ratio",
            "The share of the changes applied since start that reached the replica within the target (pairs that applied one).",
        ),
        pairs.iter().filter_map(|p| {
            p.stats
                .freshness
                .ratio()
                .map(|r| ([("pair", p.label.as_str())], r))
        }),
    )?;
    // the counts behind the ratio, so that PromQL can take it over any window:
    // rate(…within_target_total[1h]) / rate(…changes_total[1h])
    per_pair(
        encoder,
        pairs,
        (
            "slate_freshness_changes",
            "Changes that reached the replica (the freshness objective's count; canaries left out).",
        ),
        |p| p.stats.freshness.applied.load(Relaxed),
    )?;
    per_pair(
        encoder,
        pairs,
        (
            "slate_freshness_changes_within_target",
            "Changes that reached the replica within the freshness target.",
        ),
        |p| p.stats.freshness.within.load(Relaxed),
    )?;
    let now = crate::core::metrics::unix_ms();
    seconds(
        encoder,
        (
            "slate_last_event_age_seconds",
            "Time since the pair's last change event (pairs that received one).",
        ),
        pairs.iter().filter_map(|p| {
            let at = p.intake.last_event_ms.load(Relaxed);
            (at > 0).then(|| {
                (
                    [("pair", p.label.as_str())],
                    now.saturating_sub(at) as f64 / 1000.0,
                )
            })
        }),
    )
}

/// `slate_keys_total{pair,result}`.
fn encode_keys(encoder: &mut DescriptorEncoder, pairs: &[Arc<PairHandle>]) -> fmt::Result {
    let mut rows = Vec::new();
    for p in pairs {
        let d = &p.stats;
        for (result, v) in [
            ("copied", &d.copied),
            ("deleted", &d.deleted),
            ("unchanged", &d.unchanged),
            ("stale", &d.stale),
            ("failed", &d.failed),
        ] {
            rows.push((
                [("pair", p.label.as_str()), ("result", result)],
                v.load(Relaxed),
            ));
        }
    }
    family(
        encoder,
        ("slate_keys", MetricType::Counter),
        "Keys reconciled, by outcome (stale: skipped by their ordering token).",
        rows,
    )
}

/// `slate_replication_lag_seconds{pair}`: each pair's histogram.
fn encode_lag(encoder: &mut DescriptorEncoder, pairs: &[Arc<PairHandle>]) -> fmt::Result {
    let mut family = encoder.encode_descriptor(
        "slate_replication_lag_seconds",
        "Time from a key's first pending event to its reconcile, per key applied.",
        None,
        MetricType::Histogram,
    )?;
    for p in pairs {
        let labels: PairLabel = [("pair", p.label.as_str())];
        p.stats.lag.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// Per queue consumer: messages, failed receives, stores and acks, and whether it receives.
fn encode_consumers(
    encoder: &mut DescriptorEncoder,
    consumers: &[Arc<ConsumerStats>],
) -> fmt::Result {
    let rows = |f: &dyn Fn(&ConsumerStats) -> u64| -> Vec<([(&'static str, String); 1], u64)> {
        consumers
            .iter()
            .map(|c| ([("source", c.spec.clone())], f(c)))
            .collect()
    };
    for (name, help, read) in [
        (
            "slate_consumer_messages",
            "Messages a queue consumer received (each routed to every pair it names).",
            &(|c: &ConsumerStats| c.messages.load(Relaxed)) as &dyn Fn(&ConsumerStats) -> u64,
        ),
        (
            "slate_consumer_receive_errors",
            "Receives from the queue that failed (retried with a backoff).",
            &|c: &ConsumerStats| c.receive_errors.load(Relaxed),
        ),
        (
            "slate_consumer_store_errors",
            "Batches that could not be stored in the inbox (given back, not acknowledged).",
            &|c: &ConsumerStats| c.store_errors.load(Relaxed),
        ),
        (
            "slate_consumer_ack_errors",
            "Stored messages the queue would not acknowledge (they come back; harmless).",
            &|c: &ConsumerStats| c.ack_errors.load(Relaxed),
        ),
    ] {
        family(encoder, (name, MetricType::Counter), help, rows(read))?;
    }
    let now = crate::core::metrics::unix_ms();
    family(
        encoder,
        ("slate_consumer_up", MetricType::Gauge),
        "1 while the consumer receives; 0 once every receive failed for a minute.",
        rows(&|c| c.stuck(now, CONSUMER_STUCK_MS).is_none() as u64),
    )
}

/// `slate_pair_up` and `slate_pair_restarts_total`: what the supervisor says of each pair.
fn encode_supervision(encoder: &mut DescriptorEncoder, pairs: &[Arc<PairHandle>]) -> fmt::Result {
    let up = pairs.iter().map(|p| -> (PairLabel, u64) {
        let following = p.state() == PairState::Following;
        ([("pair", p.label.as_str())], following as u64)
    });
    family(
        encoder,
        ("slate_pair_up", MetricType::Gauge),
        "1 while the pair follows its events; 0 while it starts, after it failed (until it restarts) and once it stopped.",
        up,
    )?;
    // canaries: only pairs that ran one
    let ran: Vec<_> = pairs
        .iter()
        .filter_map(|p| p.canary().map(|c| (p, c)))
        .collect();
    if !ran.is_empty() {
        family(
            encoder,
            ("slate_canary_ok", MetricType::Gauge),
            "1 when the pair's newest canary made it through (written, replicated, deleted), else 0: its events may not arrive.",
            ran.iter()
                .map(|(p, c)| -> (PairLabel, u64) { ([("pair", p.label.as_str())], c.ok as u64) }),
        )?;
        let steps: Vec<_> = ran
            .iter()
            .flat_map(|(p, c)| {
                [("replica", c.replica_ms), ("gone", c.gone_ms)]
                    .into_iter()
                    .filter_map(move |(step, v)| v.map(|ms| (p.label.as_str(), step, ms)))
            })
            .collect();
        if !steps.is_empty() {
            let mut enc = encoder.encode_descriptor(
                "slate_canary_seconds",
                "The newest canary run's latencies that it reached: write to replica (step=\"replica\"), delete to replica gone (step=\"gone\").",
                None,
                MetricType::Gauge,
            )?;
            for (pair, step, ms) in steps {
                enc.encode_family(&[("pair", pair), ("step", step)])?
                    .encode_gauge(&(ms as f64 / 1000.0))?;
            }
        }
    }
    per_pair(
        encoder,
        pairs,
        (
            "slate_pair_restarts",
            "Times the pair's loop failed and was restarted.",
        ),
        |p| p.stats.restarts.load(Relaxed),
    )
}

/// `slate_backlog` and `slate_dead_letters`, `stats` in the order of `pairs`.
fn encode_inbox(
    encoder: &mut DescriptorEncoder,
    pairs: &[Arc<PairHandle>],
    stats: &[inbox::Stats],
) -> fmt::Result {
    let gauge = |f: fn(&inbox::Stats) -> u64| {
        pairs
            .iter()
            .zip(stats)
            .map(move |(p, s)| -> (PairLabel, u64) { ([("pair", p.label.as_str())], f(s)) })
    };
    family(
        encoder,
        ("slate_backlog", MetricType::Gauge),
        "Keys waiting in the inbox.",
        gauge(|s| s.pending),
    )?;
    family(
        encoder,
        ("slate_dead_letters", MetricType::Gauge),
        "Messages kept as dead letters that belong to the pair (slate_dead_letters_unowned counts those of no pair).",
        gauge(|s| s.dead_letters),
    )?;
    let now = crate::core::metrics::unix_ms() as i64;
    seconds(
        encoder,
        (
            "slate_oldest_pending_seconds",
            "Age of the oldest key not yet applied (its first event's arrival; held deletes left out); 0 when none waits.",
        ),
        pairs.iter().zip(stats).map(|(p, s)| {
            (
                [("pair", p.label.as_str())],
                s.oldest_ms.map_or(0.0, |t| (now - t).max(0) as f64 / 1000.0),
            )
        }),
    )
}

/// `slate_jobs{state}` and `slate_job_bytes_total`.
fn encode_jobs(encoder: &mut DescriptorEncoder, c: &JobCounts) -> fmt::Result {
    let by_state = JobState::ALL
        .into_iter()
        .map(|s| ([("state", s.name())], c.by_state[s as usize]));
    family(
        encoder,
        ("slate_jobs", MetricType::Gauge),
        "Jobs in the database, by state.",
        by_state,
    )?;
    family(
        encoder,
        ("slate_job_bytes", MetricType::Counter),
        "Bytes copied by the jobs in the database.",
        [(NoLabels, c.bytes_done)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::inbox::{Intake, Kind};

    /// Two pairs (one following with meters set, one starting), their inbox, two jobs.
    fn server(dir: &std::path::Path) -> (Arc<Running>, Arc<Manifest>, Arc<Hub>) {
        let db = Arc::new(Manifest::open(&dir.join("s.db")).unwrap());
        let (a, b) = (db.pair("/a", "/x").unwrap(), db.pair("/b", "/y").unwrap());
        let p = PairHandle::new(a.id, "az://c/p \"x\" -> s3://b/q".into(), None);
        let d = p.stats.clone();
        d.copied.store(3, Relaxed);
        d.stale.store(2, Relaxed);
        d.applied.store(5, Relaxed);
        d.bytes_copied.store(4096, Relaxed);
        d.drift_found.store(6, Relaxed);
        d.drift_repaired.store(4, Relaxed);
        d.restarts.store(2, Relaxed);
        for ms in [40, 700, 400_000] {
            d.lag.observe_ms(ms);
        }
        p.intake.events.store(7, Relaxed);
        p.set_state(PairState::Following);
        let running = Running::new();
        running.add(p);
        running.add(PairHandle::new(b.id, "/b -> /y".into(), None));
        let keys: Vec<_> = (0..4)
            .map(|i| (format!("k{i}"), Kind::Upsert, None))
            .collect();
        Inbox::new(&db).push(a.id, &keys).unwrap();
        let dead = |pair_id| crate::state::inbox::DeadLetter {
            pair_id,
            source: "azqueue".into(),
            queue: "azqueue://acct/q".into(),
            raw: b"{".to_vec(),
            decoded: None,
            reason: "not JSON".into(),
        };
        let intake = Intake {
            dead: vec![dead(Some(a.id)), dead(None)],
            ..Default::default()
        };
        Inbox::new(&db).store(&intake).unwrap();
        let jobs = JobStore::new(&db);
        let done = jobs
            .insert("copy", "/a", "/b", &serde_json::json!({}))
            .unwrap();
        jobs.insert("copy", "/a", "/b", &serde_json::json!({}))
            .unwrap();
        let me = crate::state::owner::owner_tag(std::process::id()).unwrap();
        jobs.transition(done, &[JobState::Queued], JobState::Running, Some(&me))
            .unwrap();
        let progress = crate::state::jobs::Progress {
            bytes_done: 30,
            ..Default::default()
        };
        jobs.finish(done, JobState::Succeeded, &progress, None, None)
            .unwrap();
        let hub = Hub::new(db.clone());
        (running, db, hub)
    }

    fn scrape(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn metrics_text_has_one_sample_per_pair_and_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let (running, db, hub) = server(dir.path());
        // process-wide: labels no other test uses (the meters are shared by the test binary)
        crate::core::metrics::request_error("s3", "418");
        crate::core::metrics::request_retry("s3", "418");
        let text = scrape(&registry(running, db, hub));
        let pair = r#"pair="az://c/p \"x\" -> s3://b/q""#;
        let other = r#"pair="/b -> /y""#;
        let mut want: Vec<String> = [
            "# TYPE slate_events_received_total counter",
            "# TYPE slate_messages_received_total counter",
            "# TYPE slate_keys_total counter",
            "# TYPE slate_events_applied_total counter",
            "# TYPE slate_bytes_copied_total counter",
            "# TYPE slate_drift_found_total counter",
            "# TYPE slate_drift_repaired_total counter",
            "# TYPE slate_replication_lag_seconds histogram",
            "# TYPE slate_pair_up gauge",
            "# TYPE slate_pair_restarts_total counter",
            "# TYPE slate_backlog gauge",
            "# TYPE slate_dead_letters gauge",
            "# TYPE slate_webhook_deliveries_total counter",
            "# TYPE slate_request_errors_total counter",
            "# TYPE slate_request_retries_total counter",
            "# TYPE slate_transfers_in_flight gauge",
            "# TYPE slate_transfer_limit gauge",
            "# TYPE slate_jobs gauge",
            "# TYPE slate_job_bytes_total counter",
            "# TYPE slate_state_statements_total counter",
            "# TYPE slate_state_transactions_total counter",
            "# HELP slate_keys_total Keys reconciled, by outcome (stale: skipped by their ordering token).",
            "slate_webhook_deliveries_total 0",
            r#"slate_jobs{state="succeeded"} 1"#,
            r#"slate_jobs{state="queued"} 1"#,
            r#"slate_jobs{state="running"} 0"#,
            "slate_job_bytes_total 30",
        ]
        .map(String::from)
        .to_vec();
        want.extend([
            format!("slate_events_received_total{{{pair}}} 7"),
            format!("slate_keys_total{{{pair},result=\"copied\"}} 3"),
            format!("slate_keys_total{{{pair},result=\"stale\"}} 2"),
            format!("slate_keys_total{{{pair},result=\"failed\"}} 0"),
            format!("slate_keys_total{{{other},result=\"copied\"}} 0"),
            format!("slate_events_applied_total{{{pair}}} 5"),
            format!("slate_bytes_copied_total{{{pair}}} 4096"),
            format!("slate_drift_found_total{{{pair}}} 6"),
            format!("slate_drift_repaired_total{{{pair}}} 4"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"0.05\"}} 1"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"0.5\"}} 1"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"1\"}} 2"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"300\"}} 2"),
            format!("slate_replication_lag_seconds_bucket{{{pair},le=\"+Inf\"}} 3"),
            format!("slate_replication_lag_seconds_count{{{pair}}} 3"),
            format!("slate_replication_lag_seconds_count{{{other}}} 0"),
            format!("slate_pair_up{{{pair}}} 1"),
            format!("slate_pair_up{{{other}}} 0"),
            format!("slate_pair_restarts_total{{{pair}}} 2"),
            format!("slate_pair_restarts_total{{{other}}} 0"),
            format!("slate_backlog{{{pair}}} 4"),
            format!("slate_backlog{{{other}}} 0"),
            format!("slate_dead_letters{{{pair}}} 1"),
            // a letter of no pair is counted under its queue, not under every pair
            format!("slate_dead_letters{{{other}}} 0"),
            r#"slate_dead_letters_unowned{queue="azqueue://acct/q"} 1"#.to_string(),
            format!("slate_events_outside_total{{{pair}}} 0"),
        ]);
        for want in &want {
            assert!(
                text.lines().any(|l| l == want),
                "missing {want:?} in\n{text}"
            );
        }
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {prefix:?} in\n{text}"))
        };
        let sum = value(&format!("slate_replication_lag_seconds_sum{{{pair}}}"));
        assert!((sum - 400.74).abs() < 1e-9, "{sum}");
        // counters only grow, and other tests may add to the same labels: at least ours
        let labels = r#"{store="s3",status="418"}"#;
        assert!(value(&format!("slate_request_errors_total{labels}")) >= 1.0);
        assert!(value(&format!("slate_request_retries_total{labels}")) >= 1.0);
        value("slate_transfers_in_flight ");
        // server() wrote and read a SQLite state: counted (at least that: other tests add)
        assert!(value(r#"slate_state_statements_total{backend="sqlite"} "#) >= 10.0);
        value(r#"slate_state_statements_total{backend="postgres"} "#);
        assert!(value(r#"slate_state_transactions_total{backend="sqlite",kind="write"} "#) >= 1.0);
        for (backend, kind) in [
            ("sqlite", "read"),
            ("postgres", "write"),
            ("postgres", "read"),
        ] {
            value(&format!(
                r#"slate_state_transactions_total{{backend="{backend}",kind="{kind}"}} "#
            ));
        }
        every_family_has_help_and_type(&text);
    }

    /// Every family has one HELP and one TYPE line, and no sample is without its family.
    fn every_family_has_help_and_type(text: &str) {
        let mut families = std::collections::HashSet::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or_default();
                assert!(families.insert(name.to_string()), "{name} twice");
                let help = format!("# HELP {name} ");
                let helps = text.lines().filter(|h| h.starts_with(&help)).count();
                assert_eq!(helps, 1, "{name} has {helps} HELP lines");
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
        assert!(
            !text.contains(".."),
            "a HELP ends with two full stops:\n{text}"
        );
    }
}
