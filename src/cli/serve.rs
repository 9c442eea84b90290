//! `slate serve`: the API and the dashboard, running the jobs started through them.

use std::path::PathBuf;

use clap::Args;

use super::copy::{options, TuningArgs};
use super::{open_db, shutdown_signal, start_server};
use crate::config::Config;
use crate::core::error::SlateError;
use crate::engine::running::Running;
use crate::events::push::Hub;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to serve on; any non-loopback address needs a token.
    /// [default: the config's daemon.listen, else 127.0.0.1:3030]
    #[arg(long)]
    pub listen: Option<String>,
    #[command(flatten)]
    pub access: super::AccessArgs,
    /// Jobs running at once; the others wait queued.
    #[arg(long, default_value_t = 2)]
    pub max_jobs: usize,
    /// The database (manifest and jobs): a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

async fn run_inner(args: ServeArgs) -> Result<i32, SlateError> {
    let cfg = Config::load(args.tuning.config.as_deref())?;
    // jobs name only the remotes the operator gave: --rclone-config, [remotes]
    crate::core::remote::explicit_only();
    let db = args
        .db
        .clone()
        .or_else(|| cfg.daemon.db.clone().map(PathBuf::from));
    let manifest = open_db(&db)?;
    let (token, webhook_token, allowed_hosts) = args.access.resolve(&cfg.daemon)?;
    let addr = args
        .listen
        .clone()
        .or_else(|| cfg.daemon.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:3030".into());
    // no pair follows deliveries in `slate serve`: they are dead-lettered as such at once
    let hub = Hub::new(manifest.clone());
    hub.set_ready();
    let served = start_server(crate::server::Setup {
        hub,
        db: manifest,
        running: Running::new(),
        token,
        no_token: args.access.no_token,
        webhook_token,
        allowed_hosts,
        jwt: super::push_tokens(&cfg.daemon)?,
        addr,
        copy: options(&args.tuning, &cfg),
        max_jobs: args.max_jobs,
    })
    .await?;
    if served.made_token.is_none() {
        eprintln!("slate: dashboard at http://{}/", served.addr);
    }
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
