//! The HTTP API and the dashboard, served by `slate serve` and by the daemon's listener
//! (`slate sync --listen`). Described in `schema/openapi.yaml`; [`ROUTES`] is the list the
//! router is built from, which a test compares with that document.
//!
//! - `POST /jobs`, `GET /jobs`, `GET /jobs/{id}`, `DELETE /jobs/{id}` (cancel),
//!   `POST /jobs/{id}/resume`, `GET /jobs/{id}/events` (Server-Sent Events).
//! - `GET /pairs`: the pairs the database knows, with what this process's daemon knows of them.
//! - `GET /`: the dashboard; `GET /openapi.yaml`: the API's description.
//! - `/metrics`, `/healthz`, `/readyz` ([`super::metrics`]) and the push deliveries
//!   ([`super::intake`]) complete [`ROUTES`].
//!
//! Errors are JSON: `{"error": "...", "field": "..."}`.

use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use super::Server;
use crate::core::units::rfc3339;
use crate::engine::running::PairState;
use crate::jobs::request::Refused;
use crate::state::inbox::Inbox;
use crate::state::jobs::{Job, JobState};

/// Every route the server answers: (method, path), as in `schema/openapi.yaml`.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/openapi.yaml"),
    ("GET", "/jobs"),
    ("POST", "/jobs"),
    ("GET", "/jobs/{id}"),
    ("DELETE", "/jobs/{id}"),
    ("GET", "/jobs/{id}/events"),
    ("POST", "/jobs/{id}/resume"),
    ("GET", "/pairs"),
    ("POST", "/pairs/{id}/release-deletes"),
    ("POST", "/pairs/{id}/drop-deletes"),
    ("GET", "/deadletters"),
    ("GET", "/deadletters/{id}"),
    ("POST", "/deadletters/retry"),
    ("POST", "/deadletters/purge"),
    ("GET", "/metrics"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("POST", "/events/eventgrid"),
    ("OPTIONS", "/events/eventgrid"),
    ("POST", "/events/pubsub"),
];

/// The OpenAPI document.
pub const OPENAPI: &str = include_str!("../../schema/openapi.yaml");
const DASHBOARD: &str = include_str!("dashboard.html");

/// How long `GET /pairs` reuses the manifest's object counts (backlog, lag and dead letters
/// are read fresh every time).
const PAIR_COUNTS_TTL: std::time::Duration = std::time::Duration::from_secs(15);

impl Server {
    /// The pairs and their counts, read again when older than [`PAIR_COUNTS_TTL`] or when a
    /// pair appeared since (a new pair must show at once).
    fn pairs_counted(&self) -> crate::core::error::Result<Vec<crate::state::manifest::PairInfo>> {
        let n = self.db.pair_count()?;
        if let Ok(g) = self.pair_counts.lock() {
            if let Some((at, rows)) = g.as_ref() {
                if at.elapsed() < PAIR_COUNTS_TTL && rows.len() == n {
                    return Ok(rows.clone());
                }
            }
        }
        let rows = self.db.pairs()?;
        if let Ok(mut g) = self.pair_counts.lock() {
            *g = Some((std::time::Instant::now(), rows.clone()));
        }
        Ok(rows)
    }
}

/// The routes anyone may read: the dashboard and the API's description.
pub(crate) fn open_routes() -> Router<Arc<Server>> {
    Router::new()
        .route("/", get(dashboard))
        .route("/openapi.yaml", get(openapi))
}

/// The API's routes (behind the token when one is set).
pub(crate) fn routes() -> Router<Arc<Server>> {
    Router::new()
        .route("/jobs", get(list_jobs).post(create_job))
        .route("/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/resume", axum::routing::post(resume_job))
        .route("/pairs", get(pairs))
        .route(
            "/pairs/{id}/release-deletes",
            axum::routing::post(release_deletes),
        )
        .route(
            "/pairs/{id}/drop-deletes",
            axum::routing::post(drop_deletes),
        )
}

/// `POST /pairs/{id}/release-deletes` (`drop`: `/drop-deletes`): what an operator does with an
/// engaged delete brake, as `slate pairs release-deletes` does it.
async fn brake_action(api: Arc<Server>, id: i64, drop: bool) -> Response {
    let db = api.db.clone();
    let r = crate::state::blocking(move || {
        let known = db.pairs_ids()?.contains(&id);
        if !known {
            return Ok(None);
        }
        let b = crate::state::brake::Brakes::new(&db);
        Ok(Some(if drop {
            b.drop_held(id)?
        } else {
            b.release(id)?
        }))
    })
    .await;
    match r {
        Ok(Some(n)) => {
            tracing::warn!(
                pair = id,
                held = n,
                drop,
                "delete brake released over the API"
            );
            let key = if drop { "dropped" } else { "released" };
            json_response(StatusCode::OK, json!({ "pair": id, key: n }))
        }
        Ok(None) => json_response(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no pair {id}"), "field": "id"}),
        ),
        Err(e) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": e.to_string()}),
        ),
    }
}

async fn release_deletes(State(api): State<Arc<Server>>, Path(id): Path<i64>) -> Response {
    brake_action(api, id, false).await
}

async fn drop_deletes(State(api): State<Arc<Server>>, Path(id): Path<i64>) -> Response {
    brake_action(api, id, true).await
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn refused(r: Refused) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = json!({ "error": r.message });
    if let Some(f) = r.field {
        body["field"] = json!(f);
    }
    json_response(status, body)
}

fn bad(field: &str, message: String) -> Response {
    refused(Refused {
        status: 400,
        field: Some(field.into()),
        message,
    })
}

pub(crate) async fn no_route(method: Method, uri: Uri) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"error": format!("no route {method} {}", uri.path())}),
    )
}

async fn dashboard() -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        DASHBOARD,
    )
        .into_response()
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/yaml")],
        OPENAPI,
    )
        .into_response()
}

fn job_json(j: &Job) -> Value {
    serde_json::to_value(j).unwrap_or_else(|_| json!({"id": j.id}))
}

/// 404 for a job id that names no job (or is no number at all).
fn no_job(raw: &str) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"error": format!("no job {raw}")}),
    )
}

async fn create_job(State(api): State<Arc<Server>>, body: Bytes) -> Response {
    match api.jobs.create(&body).await {
        Ok(j) => json_response(StatusCode::CREATED, job_json(&j)),
        Err(r) => refused(r),
    }
}

async fn list_jobs(State(api): State<Arc<Server>>, uri: Uri) -> Response {
    let (mut state, mut limit, mut before) = (None, 50usize, None);
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "state" => match JobState::parse(&v) {
                Some(s) => state = Some(s),
                None => {
                    return bad(
                        "state",
                        format!(
                            "unknown state '{v}' (known: queued, running, succeeded, failed, cancelled, interrupted)"
                        ),
                    )
                }
            },
            "limit" => match v.parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => limit = n,
                _ => return bad("limit", format!("limit must be 1 to 1000, got '{v}'")),
            },
            "before" => match v.parse::<i64>() {
                Ok(n) => before = Some(n),
                _ => return bad("before", format!("before must be a job id, got '{v}'")),
            },
            "token" => {}
            other => {
                return bad(
                    other,
                    format!("unknown parameter '{other}' (known: state, limit, before)"),
                )
            }
        }
    }
    // one more than asked tells whether there is a next page
    match api.jobs.list(state, limit + 1, before).await {
        Ok(mut jobs) => {
            let next = if jobs.len() > limit {
                jobs.truncate(limit);
                jobs.last().map(|j| j.id)
            } else {
                None
            };
            json_response(
                StatusCode::OK,
                json!({"jobs": jobs.iter().map(job_json).collect::<Vec<_>>(), "next": next}),
            )
        }
        Err(r) => refused(r),
    }
}

/// What a request on `/jobs/{id}` does.
#[derive(Clone, Copy)]
enum JobAction {
    Get,
    Cancel,
    Resume,
}

async fn job_action(api: Arc<Server>, id: String, action: JobAction) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return no_job(&id);
    };
    let r = match action {
        JobAction::Get => api.jobs.get(id).await,
        JobAction::Cancel => api.jobs.cancel(id).await.map(Some),
        JobAction::Resume => api.jobs.resume(id).await.map(Some),
    };
    match r {
        Ok(Some(j)) => json_response(StatusCode::OK, job_json(&j)),
        Ok(None) => no_job(&id.to_string()),
        Err(r) => refused(r),
    }
}

async fn get_job(State(api): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    job_action(api, id, JobAction::Get).await
}

async fn cancel_job(State(api): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    job_action(api, id, JobAction::Cancel).await
}

async fn resume_job(State(api): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    job_action(api, id, JobAction::Resume).await
}

/// Server-Sent Events: `progress` with the job whenever it changed (looked at four times a
/// second), then `end` with the final job, and the stream closes. Event ids are the job's
/// version: a client reconnecting with `Last-Event-ID` gets only what is newer, and 204 (stop
/// reconnecting) once it has seen the end.
async fn job_events(
    State(api): State<Arc<Server>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return no_job(&id);
    };
    let last: u64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let job = match api.jobs.get(id).await {
        Ok(Some(j)) => j,
        Ok(None) => return no_job(&id.to_string()),
        Err(r) => return refused(r),
    };
    if job.state().is_final() && job.version <= last {
        return StatusCode::NO_CONTENT.into_response();
    }
    struct Follow {
        api: Arc<Server>,
        id: i64,
        sent: u64,
        ended: bool,
        first: bool,
    }
    let start = Follow {
        api,
        id,
        sent: last,
        ended: false,
        first: true,
    };
    let stream = futures::stream::unfold(start, |mut f| async move {
        if f.ended {
            return None;
        }
        loop {
            if !f.first {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            f.first = false;
            let job = match f.api.jobs.get(f.id).await {
                Ok(Some(j)) => j,
                // gone or unreadable: end the stream; the client may reconnect
                _ => return None,
            };
            if job.version <= f.sent && !job.state().is_final() {
                continue;
            }
            f.sent = f.sent.max(job.version);
            let name = if job.state().is_final() {
                f.ended = true;
                "end"
            } else {
                "progress"
            };
            let ev = Event::default()
                .event(name)
                .id(job.version.to_string())
                .data(job_json(&job).to_string());
            return Some((Ok::<_, Infallible>(ev), f));
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// How a followed pair is doing: `stalled` when keys wait and nothing was applied for a
/// minute, `lagging` when the last applied key waited more than 30 s, else `ok`; `idle`
/// for a pair no daemon of this process follows.
fn health(
    following: bool,
    backlog: u64,
    lag_ms: u64,
    last_applied_ms: u64,
    now_ms: u64,
) -> &'static str {
    if !following {
        "idle"
    } else if backlog > 0 && now_ms.saturating_sub(last_applied_ms) > 60_000 {
        "stalled"
    } else if lag_ms > 30_000 {
        "lagging"
    } else {
        "ok"
    }
}

async fn pairs(State(api): State<Arc<Server>>) -> Response {
    let running = api.running.pairs();
    let windows: Vec<(i64, std::time::Duration)> = running
        .iter()
        .map(|x| (x.pair_id, x.brake().window))
        .collect();
    let a = api.clone();
    let rows = crate::state::blocking(move || {
        let pairs = a.pairs_counted()?;
        let mut out = Vec::with_capacity(pairs.len());
        for p in pairs {
            let st = Inbox::new(&a.db).stats(p.id)?;
            let window = windows
                .iter()
                .find(|(id, _)| *id == p.id)
                .map(|(_, w)| *w)
                .unwrap_or(std::time::Duration::from_secs(600));
            let brake = crate::state::brake::Brakes::new(&a.db).state(p.id, window)?;
            let parts = crate::state::partitions::Partitions::new(&a.db);
            let run = match parts.latest(p.id)? {
                Some(r) => {
                    let tally = parts.tally(r.id)?;
                    Some((r, tally))
                }
                None => None,
            };
            out.push((p, st, run, brake));
        }
        Ok(out)
    })
    .await;
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            return json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": e.to_string()}),
            )
        }
    };
    // the same clock as the pairs' own timestamps (this process's, not the database
    // server's corrected one: health compares the two)
    let now = crate::core::metrics::unix_ms();
    let ms = |v: u64| {
        if v == 0 {
            None
        } else {
            Some(rfc3339(v as i64))
        }
    };
    let out: Vec<Value> = rows
        .into_iter()
        .map(|(p, st, run, brake)| {
            let live = running.iter().find(|x| x.pair_id == p.id);
            let d = live.map(|x| x.stats.clone());
            let intake = live.map(|x| x.intake.clone());
            let state = live.map(|x| x.state());
            let lag = d.as_ref().map(|d| d.lag_ms_last.load(Relaxed));
            let last_applied = d.as_ref().map(|d| d.last_applied_ms.load(Relaxed)).unwrap_or(0);
            json!({
                "id": p.id,
                "name": live.and_then(|x| x.name.clone()),
                "src": p.src,
                "dst": p.dst,
                "objects": p.src_objects,
                "bytes": p.src_bytes,
                "backlog": st.pending,
                "lag_ms": lag,
                "last_event_at": intake.as_ref().and_then(|i| ms(i.last_event_ms.load(Relaxed))),
                "last_sync_at": p.last_sync_at.map(|s| rfc3339(s * 1000)),
                "last_drift_check_at": d.as_ref().and_then(|d| ms(d.last_drift_check_ms.load(Relaxed))),
                // the newest partitioned backfill or drift check (workers on PostgreSQL)
                "partitioned_run": run.map(|(r, (done, failed, pending))| json!({
                    "id": r.id,
                    "purpose": r.purpose,
                    "started_at": rfc3339(r.started_at),
                    "finished_at": r.finished_at.map(rfc3339),
                    "planned": r.planned,
                    "partitions": r.parts,
                    "done": done,
                    "failed": failed,
                    "pending": pending,
                    "objects_failed": r.failed,
                })),
                "dead_letters": st.dead_letters,
                "delete_brake": {
                    "engaged": brake.engaged,
                    "since": brake.since.map(rfc3339),
                    "reason": brake.reason,
                    "held": brake.held,
                    "deletes_in_window": brake.in_window,
                    "limit": live.map(|x| x.brake().text()),
                    "window_secs": live.map(|x| x.brake().window.as_secs()),
                },
                "following": live.is_some(),
                "state": state.as_ref().map(PairState::name),
                "error": match &state { Some(PairState::Failed { error, .. }) => Some(error.clone()), _ => None },
                "restarts": d.as_ref().map(|d| d.restarts.load(Relaxed)),
                // the freshness objective: source write → replica against the target
                "freshness": d.as_ref().map(|d| {
                    let f = &d.freshness;
                    json!({
                        "target_secs": f.target_ms.load(Relaxed) / 1000,
                        "applied": f.applied.load(Relaxed),
                        "within_target": f.within.load(Relaxed),
                        "within_target_ratio": f.ratio(),
                        "oldest_pending_secs": st.oldest_ms.map(|t| ((now as i64 - t).max(0)) / 1000),
                        "last_hour": f.last_hour(now).iter().map(|m| json!({
                            "at": rfc3339((m.minute * 60_000) as i64),
                            "applied": m.applied,
                            "within_target": m.within,
                            "max_ms": m.max_ms,
                        })).collect::<Vec<_>>(),
                    })
                }),
                // the newest canary of the daemon's (`canary_interval`), when it runs them
                "canary": live.and_then(|x| x.canary()).map(|c| json!({
                    "ok": c.ok,
                    "at": ms(c.at_ms),
                    "line": c.line,
                    "replica_ms": c.replica_ms,
                    "gone_ms": c.gone_ms,
                    "last_ok_at": ms(c.last_ok_ms),
                })),
                "health": match &state {
                    Some(PairState::Failed { .. }) => "failed",
                    _ if live.is_some_and(|x| x.degraded().is_some()) => "degraded",
                    _ => health(live.is_some(), st.pending, lag.unwrap_or(0), last_applied, now),
                },
            })
        })
        .collect();
    json_response(StatusCode::OK, json!({ "pairs": out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_reads_backlog_lag_and_progress() {
        let now = 1_000_000;
        assert_eq!(health(false, 5, 0, 0, now), "idle");
        assert_eq!(health(true, 0, 10, now - 5, now), "ok");
        assert_eq!(health(true, 0, 0, 0, now), "ok", "nothing to do is fine");
        assert_eq!(health(true, 3, 45_000, now - 1_000, now), "lagging");
        assert_eq!(health(true, 3, 0, now - 61_000, now), "stalled");
    }
}
