//! HTTP: the API and its Server-Sent Events ([`api`]), push deliveries ([`intake`]), probes
//! and metrics ([`metrics`]), and the dashboard. Served by `slate serve` and by the daemon's
//! listener (`slate sync --listen`); the routes are [`api::ROUTES`], described in
//! `schema/openapi.yaml`.
//!
//! Security: the listener binds loopback by default; any other address needs a bearer token
//! (`SLATE_API_TOKEN` or `--token-file`), accepted as `Authorization: Bearer TOKEN` or as a
//! `?token=TOKEN` query parameter (the form Event Grid and Pub/Sub push endpoint URLs and the
//! browser's EventSource can carry), compared in constant time. Every route needs it when one
//! is set, but `/`, `/openapi.yaml`, `/healthz` and `/readyz` (probes carry no token, and
//! they answer nothing secret).

pub mod api;
pub mod deadletters;
pub mod intake;
pub mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::copy::CopyOptions;
use crate::core::error::{Result, SlateError};
use crate::engine::running::Running;
use crate::events::push::Hub;
use crate::jobs::Jobs;
use crate::state::manifest::Manifest;

/// Everything the server answers from.
pub struct Server {
    pub db: Arc<Manifest>,
    pub jobs: Arc<Jobs>,
    /// Push deliveries' fan-outs.
    pub hub: Arc<Hub>,
    /// The pairs this process's daemon runs (none for `slate serve`).
    pub running: Arc<Running>,
    token: Option<String>,
    /// The pairs with their manifest counts, as `GET /pairs` last read them.
    pub(crate) pair_counts:
        std::sync::Mutex<Option<(std::time::Instant, Vec<crate::state::manifest::PairInfo>)>>,
    /// The process's one metrics registry (`GET /metrics`).
    pub(crate) registry: prometheus_client::registry::Registry,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // never the token
        f.debug_struct("Server")
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .finish()
    }
}

impl Server {
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
}

/// Compares without an early exit, so the time taken says nothing about the token.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0);
    }
    diff == 0
}

pub(crate) fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) fn unauthorized() -> Response {
    json(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": "a bearer token is required (Authorization: Bearer TOKEN, or ?token=TOKEN)"}),
    )
}

/// The token check in front of every route that needs it.
async fn require_token(State(s): State<Arc<Server>>, req: Request, next: Next) -> Response {
    if s.authorized(req.headers(), req.uri()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

/// Every route: the open ones, then the ones behind the token.
pub fn router(s: Arc<Server>) -> Router {
    let guarded = api::routes()
        .merge(deadletters::routes())
        .merge(intake::routes())
        .merge(metrics::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            s.clone(),
            require_token,
        ));
    api::open_routes()
        .merge(metrics::probe_routes())
        .merge(guarded)
        .fallback(api::no_route)
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::events::push::MAX_DELIVERY,
        ))
        .with_state(s)
}

/// Binds `addr` (refusing a non-loopback address without a token) and serves `router` in the
/// background; returns the bound address (port 0 picks one).
pub async fn bind(
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

/// A running server.
pub struct Served {
    pub jobs: Arc<Jobs>,
    pub addr: SocketAddr,
    /// Jobs found running by a process that died (now interrupted), and queued jobs started.
    pub interrupted: usize,
    pub queued: usize,
}

/// What [`start`] needs.
pub struct Setup {
    pub db: Arc<Manifest>,
    pub hub: Arc<Hub>,
    pub running: Arc<Running>,
    pub token: Option<String>,
    pub addr: String,
    /// The copier's defaults for jobs.
    pub copy: CopyOptions,
    pub max_jobs: usize,
}

/// Starts the server: jobs left by a process that died are marked interrupted, queued ones
/// are started, then the routes are served on `addr`.
pub async fn start(setup: Setup) -> Result<Served> {
    let jobs = Jobs::new(setup.db.clone(), setup.copy, setup.max_jobs);
    let (interrupted, queued) = jobs.recover().await?;
    // workers sharing a database take each other's queued jobs when they have a free slot
    tokio::spawn(jobs.clone().follow_queue());
    let has_token = setup.token.is_some();
    let registry = metrics::registry(setup.running.clone(), setup.db.clone(), setup.hub.clone());
    let server = Arc::new(Server {
        db: setup.db,
        jobs: jobs.clone(),
        hub: setup.hub,
        running: setup.running,
        token: setup.token,
        pair_counts: std::sync::Mutex::new(None),
        registry,
    });
    let (addr, _task) = bind(&setup.addr, has_token, router(server)).await?;
    Ok(Served {
        jobs,
        addr,
        interrupted,
        queued,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
