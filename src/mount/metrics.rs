//! `slate mount --listen ADDR`: `GET /metrics` (Prometheus text) and `GET /healthz` of the
//! mount, on a loopback address only (a mount has no API token), behind the same Host and
//! Origin checks as the daemon's listener: a web page cannot read it through DNS rebinding.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::fs::Fs;
use crate::core::error::Result;

struct Listener {
    fs: Arc<Fs>,
    bound: SocketAddr,
}

/// The mount's meters, in Prometheus' text format.
pub fn render(fs: &Fs) -> String {
    let c = &fs.fetcher.cache;
    let rows: [(&str, &str, &str, u64); 12] = [
        (
            "slate_mount_cache_hits_total",
            "counter",
            "reads answered from the block cache",
            c.hits.load(Relaxed),
        ),
        (
            "slate_mount_cache_bytes",
            "gauge",
            "bytes the block cache holds",
            c.held(),
        ),
        (
            "slate_mount_cache_limit_bytes",
            "gauge",
            "the block cache's limit (--cache-max-size)",
            c.max(),
        ),
        (
            "slate_mount_cache_evicted_bytes_total",
            "counter",
            "bytes evicted from the block cache",
            c.evicted.load(Relaxed),
        ),
        (
            "slate_mount_fetched_bytes_total",
            "counter",
            "bytes fetched from the store",
            fs.fetched.load(Relaxed),
        ),
        (
            "slate_mount_uploaded_bytes_total",
            "counter",
            "bytes uploaded to the store",
            fs.uploaded.load(Relaxed),
        ),
        (
            "slate_mount_pending_uploads",
            "gauge",
            "files closed with --write-back and not uploaded yet",
            fs.waiting_count() as u64,
        ),
        (
            "slate_mount_open_files",
            "gauge",
            "files open through the mount",
            fs.open_files() as u64,
        ),
        (
            "slate_mount_invalidations_total",
            "counter",
            "keys invalidated by change events",
            fs.invalidations.load(Relaxed),
        ),
        (
            "slate_mount_dropped_messages_total",
            "counter",
            "event messages dropped as unreadable (slate mount-status lists them)",
            fs.dropped.load(Relaxed),
        ),
        (
            "slate_mount_memory_limit_bytes",
            "gauge",
            "the budget of data in memory, fetched or being uploaded (--memory-limit)",
            fs.opts.memory_limit,
        ),
        (
            "slate_mount_memory_used_bytes",
            "gauge",
            "the part of the budget held now",
            fs.fetcher.budget.used(),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, v) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    out
}

async fn metrics(State(l): State<Arc<Listener>>) -> Response {
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&l.fs),
    )
        .into_response()
}

async fn healthz() -> Response {
    crate::server::json(StatusCode::OK, serde_json::json!({"status": "ok"}))
}

async fn guard(State(l): State<Arc<Listener>>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let text = |name: axum::http::header::HeaderName| h.get(name).and_then(|v| v.to_str().ok());
    match crate::server::guard::check(
        req.method(),
        req.uri().path(),
        text(axum::http::header::HOST),
        text(axum::http::header::ORIGIN),
        text(axum::http::header::CONTENT_TYPE),
        l.bound,
        &[],
    ) {
        Ok(()) => next.run(req).await,
        Err((status, why)) => crate::server::json(status, serde_json::json!({ "error": why })),
    }
}

/// Serves the mount's meters on `addr` (loopback only); the bound address.
pub async fn serve(addr: &str, fs: Arc<Fs>) -> Result<SocketAddr> {
    let (listener, bound) = crate::server::bind(addr, false).await?;
    let l = Arc::new(Listener { fs, bound });
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .layer(axum::middleware::from_fn_with_state(l.clone(), guard))
        .with_state(l);
    crate::server::serve(listener, router);
    Ok(bound)
}
