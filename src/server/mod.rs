//! HTTP: the API and its Server-Sent Events ([`api`]), push deliveries ([`intake`]), probes
//! and metrics ([`metrics`]), and the dashboard. Served by `slate serve` and by the daemon's
//! listener (`slate sync --listen`); the routes are [`api::ROUTES`], described in
//! `schema/openapi.yaml`.
//!
//! Security ([`guard`]): every request's `Host` (and `Origin`, when a browser sends one) must
//! be the listener's own or listed, and a state-changing API request must be JSON, so that no
//! web page can drive slate through a user's browser. The listener binds loopback by default;
//! any other address needs a bearer token (`SLATE_API_TOKEN` or `--token-file`, at least 128
//! bits). On loopback without one, a token is made at start and printed with the dashboard's
//! URL (`--no-token` says not to). The token is accepted as `Authorization: Bearer TOKEN` or
//! as a `?token=TOKEN` query parameter (the form Event Grid and Pub/Sub push endpoint URLs and
//! the browser's EventSource can carry), compared in constant time. The API's routes need it;
//! `/`, `/openapi.yaml`, `/healthz` and `/readyz` never do, `/metrics` not on loopback (local
//! scrapers). The webhook intake takes its own token (`--webhook-token-file`,
//! `SLATE_WEBHOOK_TOKEN`), or the API's when it has none (a configured API token is still
//! accepted beside a webhook token, with a warning, so that existing subscription URLs keep
//! delivering); without either, on loopback, it is open (events are hints: the source is asked
//! before anything is done).

pub mod api;
pub mod deadletters;
pub mod guard;
pub mod intake;
pub mod jwt;
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
    access: guard::Access,
    /// The address the listener is bound to (what `Host` must name).
    bound: SocketAddr,
    /// Pub/Sub push deliveries must carry a Google-signed OIDC token for this audience.
    pub(crate) pubsub_jwt: Option<(jwt::JwtPolicy, jwt::Keys)>,
    /// Event Grid deliveries must carry an Entra ID token for this audience.
    pub(crate) eventgrid_jwt: Option<(jwt::JwtPolicy, jwt::Keys)>,
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
            .field("access", &self.access)
            .field("bound", &self.bound)
            .finish()
    }
}

/// The tokens a request carries: its bearer token and its `?token=`.
fn presented(headers: &HeaderMap, uri: &Uri) -> [Option<String>; 2] {
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
}

/// Whether a request carrying `got` presents `want`.
fn presents(got: &[Option<String>; 2], want: &str) -> bool {
    got.iter()
        .flatten()
        .any(|g| constant_time_eq(g.as_bytes(), want.as_bytes()))
}

impl Server {
    /// Whether the request carries the API token (always, when none is set).
    pub fn authorized(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        match &self.access.token {
            None => true,
            Some(want) => presents(&presented(headers, uri), want),
        }
    }

    /// Whether a webhook delivery may be stored: the webhook token; else the API token when
    /// the operator configured one (not one made at start); else open on loopback.
    fn intake_authorized(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        // a route whose sender proves itself with a signed token (checked by the route)
        match uri.path() {
            "/events/pubsub" if self.pubsub_jwt.is_some() => return true,
            "/events/eventgrid" if self.eventgrid_jwt.is_some() => return true,
            _ => {}
        }
        let got = presented(headers, uri);
        let api = self.access.token.as_deref().filter(|_| !self.access.made);
        match (&self.access.webhook_token, api) {
            (Some(hook), api) => {
                if presents(&got, hook) {
                    return true;
                }
                // the API token keeps existing subscription URLs delivering, for a release
                if api.is_some_and(|a| presents(&got, a)) {
                    crate::events::route::warn_once_a_minute(
                        "a webhook delivery carried the API token: give the subscription the webhook token (SLATE_WEBHOOK_TOKEN); the API token stops being accepted there in a later release",
                    );
                    return true;
                }
                false
            }
            (None, Some(api)) => presents(&got, api),
            (None, None) => self.bound.ip().is_loopback(),
        }
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

/// The token check in front of the API's routes.
async fn require_token(State(s): State<Arc<Server>>, req: Request, next: Next) -> Response {
    if s.authorized(req.headers(), req.uri()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

/// The token check in front of the webhook intake.
async fn require_intake_token(State(s): State<Arc<Server>>, req: Request, next: Next) -> Response {
    if s.intake_authorized(req.headers(), req.uri()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

/// `/metrics`: open on loopback (local scrapers), the API token elsewhere.
async fn require_token_off_loopback(
    State(s): State<Arc<Server>>,
    req: Request,
    next: Next,
) -> Response {
    if s.bound.ip().is_loopback() || s.authorized(req.headers(), req.uri()) {
        next.run(req).await
    } else {
        unauthorized()
    }
}

/// Host, Origin and content type ([`guard::check`]) in front of every route.
async fn guard_request(State(s): State<Arc<Server>>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let text = |name: axum::http::header::HeaderName| h.get(name).and_then(|v| v.to_str().ok());
    match guard::check(
        req.method(),
        req.uri().path(),
        text(axum::http::header::HOST),
        text(axum::http::header::ORIGIN),
        text(axum::http::header::CONTENT_TYPE),
        s.bound,
        &s.access.allowed_hosts,
    ) {
        Ok(()) => next.run(req).await,
        Err((status, why)) => json(status, serde_json::json!({ "error": why })),
    }
}

/// Every route: the open ones, the API behind its token, the intake behind its own, all
/// behind the guard.
pub fn router(s: Arc<Server>) -> Router {
    let api = api::routes().merge(deadletters::routes()).route_layer(
        axum::middleware::from_fn_with_state(s.clone(), require_token),
    );
    let intake = intake::routes().route_layer(axum::middleware::from_fn_with_state(
        s.clone(),
        require_intake_token,
    ));
    let metrics = metrics::routes().route_layer(axum::middleware::from_fn_with_state(
        s.clone(),
        require_token_off_loopback,
    ));
    api::open_routes()
        .merge(metrics::probe_routes())
        .merge(api)
        .merge(intake)
        .merge(metrics)
        .fallback(api::no_route)
        .layer(axum::middleware::from_fn_with_state(
            s.clone(),
            guard_request,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(
            crate::events::push::MAX_DELIVERY,
        ))
        .with_state(s)
}

/// Binds `addr` (refusing a non-loopback address without a token); returns the listener and
/// the bound address (port 0 picks one).
pub async fn bind(addr: &str, has_token: bool) -> Result<(tokio::net::TcpListener, SocketAddr)> {
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
    Ok((listener, bound))
}

/// Serves `router` on `listener` in the background.
pub fn serve(listener: tokio::net::TcpListener, router: Router) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "the listener stopped");
        }
    })
}

/// A running server.
pub struct Served {
    pub jobs: Arc<Jobs>,
    pub addr: SocketAddr,
    /// Jobs found running by a process that died (now interrupted), and queued jobs started.
    pub interrupted: usize,
    pub queued: usize,
    /// The token made at start (loopback, none configured, no `--no-token`): shown once with
    /// the dashboard's URL.
    pub made_token: Option<String>,
}

/// What [`start`] needs.
pub struct Setup {
    pub db: Arc<Manifest>,
    pub hub: Arc<Hub>,
    pub running: Arc<Running>,
    pub token: Option<String>,
    /// `--no-token`: on loopback, make no token (the API open to anything on this host).
    pub no_token: bool,
    pub webhook_token: Option<String>,
    pub allowed_hosts: Vec<String>,
    /// Signed tokens the push routes require: (Pub/Sub, Event Grid).
    pub jwt: (Option<jwt::JwtPolicy>, Option<jwt::JwtPolicy>),
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
    let bad = |option: &str, why: String| SlateError::BadOption {
        option: option.into(),
        why,
    };
    for (option, t) in [
        ("SLATE_API_TOKEN / --token-file", &setup.token),
        (
            "SLATE_WEBHOOK_TOKEN / --webhook-token-file",
            &setup.webhook_token,
        ),
    ] {
        if let Some(t) = t {
            guard::check_token(t).map_err(|why| bad(option, why))?;
        }
    }
    let (listener, addr) = bind(&setup.addr, setup.token.is_some()).await?;
    let mut access = guard::Access {
        token: setup.token,
        made: false,
        webhook_token: setup.webhook_token,
        allowed_hosts: setup
            .allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .collect(),
    };
    if access.token.is_none() && !setup.no_token {
        access.token =
            Some(guard::make_token().map_err(|e| bad("--listen", format!("making a token: {e}")))?);
        access.made = true;
    }
    let made_token = access.token.clone().filter(|_| access.made);
    let registry = metrics::registry(setup.running.clone(), setup.db.clone(), setup.hub.clone());
    let server = Arc::new(Server {
        db: setup.db,
        jobs: jobs.clone(),
        hub: setup.hub,
        running: setup.running,
        access,
        bound: addr,
        pubsub_jwt: setup.jwt.0.map(|p| (p, jwt::Keys::default())),
        eventgrid_jwt: setup.jwt.1.map(|p| (p, jwt::Keys::default())),
        pair_counts: std::sync::Mutex::new(None),
        registry,
    });
    serve(listener, router(server));
    Ok(Served {
        jobs,
        addr,
        interrupted,
        queued,
        made_token,
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
