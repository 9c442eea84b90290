//! The command line: one file per subcommand. `main.rs` parses, starts logging and calls
//! [`run`]; the exit code comes from the result.

pub mod check;
pub mod cleanup;
pub mod copy;
pub mod db;
pub mod deadletters;
pub mod diff;
pub mod events;
pub mod events_azure;
pub mod events_gcs;
pub mod filters;
pub mod jobs;
pub mod mount;
pub mod pairs;
pub mod rclone;
pub mod serve;
pub mod sync;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::core::error::SlateError;
use crate::state::db::Location;
use crate::state::manifest::{self, Manifest};

/// Keeps object stores consistent by replicating only what changed.
#[derive(Debug, Parser)]
#[command(name = "slate", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// rclone's config file, whose remotes name locations as `REMOTE:path` (default:
    /// RCLONE_CONFIG, else ~/.config/rclone/rclone.conf).
    #[arg(long, value_name = "FILE", global = true)]
    pub rclone_config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Copy objects from SRC to DST (one object or a whole prefix, any store to any store).
    Copy(copy::CopyArgs),
    /// Make DST equal to SRC, deletes included (`--once`: backfill / full reconcile).
    Sync(Box<sync::SyncArgs>),
    /// Report what differs between SRC and DST (exit 0 equal, 1 different, 2 error).
    Diff(diff::DiffArgs),
    /// The pairs the manifest knows, with object counts and last sync time.
    Pairs(pairs::PairsArgs),
    /// Serve the API and the dashboard (127.0.0.1:3030 by default) and run the jobs started
    /// through them.
    Serve(serve::ServeArgs),
    /// Abort the unfinished uploads that stopped slate processes left (multipart uploads,
    /// temporary files), as recorded in the database; never another tool's.
    Cleanup(cleanup::CleanupArgs),
    /// The jobs in the database: id, kind, state, progress, rate, age.
    Jobs(jobs::JobsArgs),
    /// One job in detail; exit 0 succeeded, 1 failed, 3 cancelled or interrupted, 4 not finished.
    Status(jobs::StatusArgs),
    /// Messages no pair could use (malformed, of a bucket no pair follows): list, show,
    /// retry through the inbox, purge.
    Deadletters(deadletters::DeadLettersArgs),
    /// Prove that a followed pair's events flow: a canary written at SRC, its event and its
    /// replica at DST waited for, then its delete; each step's latency (exit 1 names the break).
    Check(check::CheckArgs),
    /// Event wiring: `setup` makes what delivers a source's change events to the daemon's
    /// queue, `check` reads it back and says what is missing.
    Events(events::EventsArgs),
    /// The state database: `backup` (a consistent copy, SQLite or PostgreSQL) and `migrate`
    /// (schema changes a worker does not run on its own).
    Db(db::DbArgs),
    /// Mount a location as a folder over FUSE, kept current by its change events (`--events`)
    /// or a folder cache time; until Ctrl-C, SIGTERM or `fusermount3 -u`.
    Mount(mount::MountArgs),
    /// What mounts left in their state: files closed with --write-back and not uploaded yet,
    /// and event messages a mount dropped (with why).
    MountStatus(mount::StatusArgs),
}

/// Runs the parsed command; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    // the library prints nothing itself: the command line shows its progress on stderr
    crate::copy::progress::set_printer(|line| eprintln!("{line}"));
    if let Some(p) = cli.rclone_config.clone() {
        crate::core::remote::set_config_path(p);
    }
    if matches!(
        cli.command,
        Command::Diff(_) | Command::Cleanup(_) | Command::Pairs(_) | Command::Deadletters(_)
    ) {
        crate::config::load_default_remotes();
    }
    match cli.command {
        Command::Copy(args) => copy::run(args).await,
        Command::Sync(args) => sync::run(*args).await,
        Command::Diff(args) => diff::run(args).await,
        Command::Pairs(args) => pairs::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Cleanup(args) => cleanup::run(args).await,
        Command::Jobs(args) => jobs::run_jobs(args).await,
        Command::Status(args) => jobs::run_status(args).await,
        Command::Deadletters(args) => deadletters::run(args).await,
        Command::Db(args) => db::run(args).await,
        Command::Events(args) => events::run(args).await,
        Command::Check(args) => check::run(args).await,
        Command::Mount(args) => mount::run(args).await,
        Command::MountStatus(args) => mount::run_status(args),
    }
}

/// Opens the database named by `--db`, or the default one.
/// `--db` (and `SLATE_DB`, `daemon.db`) is a SQLite file's path or a PostgreSQL URL
/// (`postgres://USER@HOST:PORT/DB`); a value with any other scheme is refused, naming it.
pub fn open_db(db: &Option<PathBuf>) -> Result<Arc<Manifest>, SlateError> {
    Manifest::open_at(&db_location(db)?).map(Arc::new)
}

/// Where `--db` points: a SQLite file (the default path when none is given) or PostgreSQL.
pub fn db_location(db: &Option<PathBuf>) -> Result<Location, SlateError> {
    Ok(match db {
        None => Location::Sqlite(manifest::default_path()),
        Some(p) => match p.to_str() {
            Some(s) => Location::parse(s).map_err(|why| SlateError::BadOption {
                option: "--db".into(),
                why,
            })?,
            None => Location::Sqlite(p.clone()),
        },
    })
}

/// The listener's bearer token: the first line of `--token-file`, else `SLATE_API_TOKEN`.
pub(crate) fn api_token(file: &Option<PathBuf>) -> Result<Option<String>, SlateError> {
    token_from("--token-file", file, "SLATE_API_TOKEN")
}

/// Who may call the listener: the options `slate serve` and `slate sync` share.
#[derive(Debug, Clone, clap::Args)]
pub struct AccessArgs {
    /// A file holding the bearer token the API requires (else SLATE_API_TOKEN; at least 22
    /// characters). On loopback without one, a token is made at start and printed with the
    /// dashboard's URL
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// On loopback, make no token: the API is open to every process and user of this host
    /// (the Host/Origin/JSON checks still keep web pages out)
    #[arg(long, conflicts_with = "token_file")]
    pub no_token: bool,
    /// A file holding the webhook intake's own token (else SLATE_WEBHOOK_TOKEN): what the
    /// Event Grid and Pub/Sub push subscription URLs carry (`?token=`)
    #[arg(long)]
    pub webhook_token_file: Option<PathBuf>,
    /// A host name requests may address the listener by (its Host header), besides its own
    /// address and localhost; repeatable (config: daemon.allowed_hosts)
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// A local folder jobs may read and write (none unless listed; repeatable; config:
    /// daemon.allow_roots)
    #[arg(long = "allow-root", value_name = "DIR")]
    pub allow_roots: Vec<PathBuf>,
}

/// The first line of `file` as a token, else the environment variable `var`.
fn token_from(
    option: &str,
    file: &Option<PathBuf>,
    var: &str,
) -> Result<Option<String>, SlateError> {
    match file {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| SlateError::BadOption {
                option: option.into(),
                why: format!("{}: {e}", p.display()),
            })?;
            let t = text.lines().next().unwrap_or("").trim().to_string();
            if t.is_empty() {
                return Err(SlateError::BadOption {
                    option: option.into(),
                    why: format!("{}: the file holds no token", p.display()),
                });
            }
            Ok(Some(t))
        }
        None => Ok(std::env::var(var)
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())),
    }
}

/// What [`AccessArgs::resolve`] found: the API's token, the webhook's, the listed hosts.
pub(crate) type Resolved = (Option<String>, Option<String>, Vec<String>);

impl AccessArgs {
    /// The listener's part of a server's setup: tokens, hosts; the job roots are set for the
    /// process. Options win over the config's `[daemon]` keys.
    pub(crate) fn resolve(
        &self,
        cfg: &crate::config::DaemonConfig,
    ) -> Result<Resolved, SlateError> {
        let token = api_token(&self.token_file)?;
        let hook_file = self
            .webhook_token_file
            .clone()
            .or_else(|| cfg.webhook_token_file.clone().map(PathBuf::from));
        let webhook = token_from("--webhook-token-file", &hook_file, "SLATE_WEBHOOK_TOKEN")?;
        let mut hosts = self.allowed_hosts.clone();
        hosts.extend(cfg.allowed_hosts.iter().cloned());
        let mut roots = self.allow_roots.clone();
        roots.extend(cfg.allow_roots.iter().map(PathBuf::from));
        crate::jobs::roots::set(&roots).map_err(|why| SlateError::BadOption {
            option: "--allow-root".into(),
            why,
        })?;
        Ok((token, webhook, hosts))
    }
}

/// The signed tokens the push routes require, from the config's `[daemon]` keys:
/// (Pub/Sub push, Event Grid).
pub(crate) fn push_tokens(
    cfg: &crate::config::DaemonConfig,
) -> Result<
    (
        Option<crate::server::jwt::JwtPolicy>,
        Option<crate::server::jwt::JwtPolicy>,
    ),
    SlateError,
> {
    use crate::server::jwt::JwtPolicy;
    let pubsub = cfg.pubsub_push_audience.clone().map(|aud| {
        JwtPolicy::pubsub(
            aud,
            cfg.pubsub_push_service_account.clone(),
            cfg.pubsub_push_jwks_url.clone(),
        )
    });
    let eventgrid =
        match (&cfg.eventgrid_audience, &cfg.eventgrid_tenant) {
            (Some(aud), Some(tenant)) => Some(JwtPolicy::eventgrid(
                aud.clone(),
                tenant,
                cfg.eventgrid_client_id.clone(),
                cfg.eventgrid_jwks_url.clone(),
            )),
            (None, None) => None,
            _ => return Err(SlateError::BadOption {
                option: "daemon.eventgrid_audience".into(),
                why:
                    "Event Grid's Entra ID tokens need both eventgrid_audience and eventgrid_tenant"
                        .into(),
            }),
        };
    if pubsub.is_some() && cfg.pubsub_push_service_account.is_none() {
        tracing::warn!("daemon.pubsub_push_service_account is not set: any Google-signed token for the audience is accepted");
    }
    Ok((pubsub, eventgrid))
}

/// Resolves on SIGTERM or SIGINT.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Starts the API server, saying where on stderr (and what it found of jobs left behind).
pub(crate) async fn start_server(
    setup: crate::server::Setup,
) -> Result<crate::server::Served, SlateError> {
    let served = crate::server::start(setup).await?;
    if served.interrupted > 0 {
        eprintln!(
            "slate: {} job(s) were running when their process stopped: now interrupted \
             (resume with POST /jobs/ID/resume)",
            served.interrupted
        );
    }
    if served.queued > 0 {
        eprintln!("slate: starting {} queued job(s)", served.queued);
    }
    eprintln!("slate: listening on http://{}", served.addr);
    if let Some(t) = &served.made_token {
        // as Jupyter does: the one place the made token is shown
        eprintln!("slate: dashboard at http://{}/?token={t}", served.addr);
    }
    Ok(served)
}
