//! `slate serve`: the API and the dashboard, running the jobs started through them.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::copy::{options, TuningArgs};
use super::sync::{api_token, open_db, shutdown_signal};
use crate::api::Api;
use crate::config::Config;
use crate::error::SlateError;
use crate::events::webhook::Hub;
use crate::jobs::Jobs;
use crate::manifest::Manifest;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to serve on; any non-loopback address needs a token.
    /// [default: the config's daemon.listen, else 127.0.0.1:3030]
    #[arg(long)]
    pub listen: Option<String>,
    /// A file holding the bearer token the API requires (else SLATE_API_TOKEN).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Jobs running at once; the others wait queued.
    #[arg(long, default_value_t = 2)]
    pub max_jobs: usize,
    /// The database (manifest and jobs) [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB")]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// A running API server.
pub struct Served {
    pub jobs: Arc<Jobs>,
    pub addr: std::net::SocketAddr,
}

/// Starts the API on `addr` with `hub`'s routes (metrics, probes, push deliveries) merged in;
/// jobs left by a process that died are marked interrupted, queued ones are started.
pub async fn start(
    manifest: Arc<Manifest>,
    hub: Arc<Hub>,
    has_token: bool,
    addr: &str,
    copy: crate::copy::CopyOptions,
    max_jobs: usize,
) -> Result<Served, SlateError> {
    let jobs = Jobs::new(manifest.clone(), copy, max_jobs);
    let (interrupted, queued) = jobs.recover().await?;
    if interrupted > 0 {
        eprintln!(
            "slate: {interrupted} job(s) were running when their process stopped: now interrupted \
             (resume with POST /jobs/ID/resume)"
        );
    }
    if queued > 0 {
        eprintln!("slate: starting {queued} queued job(s)");
    }
    let api = Arc::new(Api::new(manifest, jobs.clone(), hub));
    let (bound, _task) =
        crate::events::webhook::serve(addr, has_token, crate::api::router(api)).await?;
    eprintln!("slate: listening on http://{bound}");
    Ok(Served { jobs, addr: bound })
}

async fn run_inner(args: ServeArgs) -> Result<i32, SlateError> {
    let cfg = Config::load(args.tuning.config.as_deref())?;
    let db = args
        .db
        .clone()
        .or_else(|| cfg.daemon.db.clone().map(PathBuf::from));
    let manifest = open_db(&db)?;
    let token = api_token(&args.token_file)?;
    let hub = Hub::new(manifest.clone(), token.clone());
    let addr = args
        .listen
        .clone()
        .or_else(|| cfg.daemon.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:3030".into());
    let served = start(
        manifest,
        hub,
        token.is_some(),
        &addr,
        options(&args.tuning, &cfg),
        args.max_jobs,
    )
    .await?;
    eprintln!("slate: dashboard at http://{}/", served.addr);
    shutdown_signal().await;
    eprintln!("slate: stopping; running jobs are marked interrupted and can be resumed");
    served.jobs.interrupt_all().await;
    crate::copy::transfer::wait_for_aborts(std::time::Duration::from_secs(5)).await;
    Ok(0)
}

pub async fn run(args: ServeArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
