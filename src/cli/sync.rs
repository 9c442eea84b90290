//! `slate sync SRC DST --once`: the backfill and full reconcile, deletes included.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::copy::{options, TuningArgs};
use crate::config::Config;
use crate::error::SlateError;
use crate::location::Location;
use crate::manifest::{self, Manifest};
use crate::reconcile::filter::{parse_age, Filter};
use crate::reconcile::{self, MaxDelete, SyncOptions};

const AFTER_HELP: &str = "\
Examples:
  slate sync --once az://content-store s3://content-store       # backfill / reconcile
  slate sync --once SRC DST --dry-run                             # print the plan, change nothing
  slate sync --once SRC DST --max-delete 1000                     # refuse to delete more (also N%)
  slate sync --once SRC DST --include 'shards/**' --exclude '*.tmp' --max-age 7d

--once lists the source, and the destination too until a first full reconcile of the pair has
finished; after that the manifest vouches for the destination (--full lists it anyway). Keys
equal by the manifest, or by size and a digest both sides expose, are not copied. What the
source no longer has is deleted at the destination, only inside DST's prefix, and only after
the source is asked once more and says not found. An empty source never empties a destination
unless --max-delete says so.

Exit codes: 0 done, 1 some objects failed (each named), 2 bad input, setup, or a delete guard.
";

#[derive(Debug, Args)]
#[command(after_long_help = format!("{AFTER_HELP}\n{}", crate::store::ENV_HELP))]
pub struct SyncArgs {
    /// Source prefix or folder.
    pub src: String,
    /// Destination prefix or folder.
    pub dst: String,
    /// Reconcile once and exit (backfill / full reconcile). Without it: the daemon, following
    /// change events (local folders: inotify).
    #[arg(long)]
    pub once: bool,
    /// Daemon: where change events come from, for a cloud source: `sqs://QUEUE_NAME` or
    /// `sqs://https://…` (S3 bucket notifications). Local folders need none (inotify).
    #[arg(long)]
    pub events: Option<String>,
    /// Daemon: run a full compare every N seconds and repair drift (0: never).
    #[arg(long, default_value_t = 86_400)]
    pub drift_check_secs: u64,
    /// Print the plan (one line per copy or delete) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Abort before changing anything if more deletes than this are planned: a count or N%.
    #[arg(long, value_parser = MaxDelete::parse)]
    pub max_delete: Option<MaxDelete>,
    /// Keep objects that exist only at the destination.
    #[arg(long)]
    pub no_delete: bool,
    /// Only keys matching this glob (`*`, `**`, `?`); repeatable.
    #[arg(long)]
    pub include: Vec<String>,
    /// Leave out keys matching this glob; repeatable; wins over --include.
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Only objects modified within this age (e.g. 7d, 12h).
    #[arg(long, value_parser = parse_age)]
    pub max_age: Option<std::time::Duration>,
    /// List the destination even when the manifest can vouch for it.
    #[arg(long)]
    pub full: bool,
    /// The manifest database [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB")]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// Opens the manifest named by `--db`, or the default one.
pub fn open_db(db: &Option<PathBuf>) -> Result<Arc<Manifest>, SlateError> {
    let path = db.clone().unwrap_or_else(manifest::default_path);
    Manifest::open(&path).map(Arc::new)
}

async fn run_inner(args: SyncArgs) -> Result<i32, SlateError> {
    let cfg = Config::load(args.tuning.config.as_deref())?;
    let src = Location::parse(&args.src)?;
    let dst = Location::parse(&args.dst)?;
    let manifest = open_db(&args.db)?;
    let opts = SyncOptions {
        dry_run: args.dry_run,
        no_delete: args.no_delete,
        max_delete: args.max_delete,
        filter: Filter {
            include: args.include.clone(),
            exclude: args.exclude.clone(),
            max_age: args.max_age,
        },
        full: args.full,
        copy: options(&args.tuning, &cfg),
    };
    let quiet = args.tuning.quiet;
    if !args.once {
        let dopts = crate::reconcile::daemon::DaemonOptions {
            sync: opts,
            drift_interval: std::time::Duration::from_secs(args.drift_check_secs),
            batch: 1000,
            shutdown_grace: std::time::Duration::from_secs(30),
            events: args.events.clone(),
        };
        let stats =
            crate::reconcile::daemon::run(manifest, &src, &dst, dopts, shutdown_signal()).await?;
        use std::sync::atomic::Ordering::Relaxed;
        eprintln!(
            "slate: stopped; {} keys applied ({} copied, {} deleted, {} unchanged), {} failed",
            stats.applied.load(Relaxed),
            stats.copied.load(Relaxed),
            stats.deleted.load(Relaxed),
            stats.unchanged.load(Relaxed),
            stats.failed.load(Relaxed)
        );
        return Ok(0);
    }
    let finished = tokio::select! {
        r = reconcile::sync_once(manifest, &src, &dst, &opts) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let Some(report) = finished else {
        crate::copy::transfer::wait_for_aborts(std::time::Duration::from_secs(5)).await;
        return Err(SlateError::Interrupted);
    };
    let report = report?;
    if !quiet || report.failed > 0 {
        println!("{}", report.line());
    }
    if report.failed > 0 {
        return Err(SlateError::Partial {
            failed: report.failed,
            total: report.failed + report.copied + report.deleted,
            first: report.first_error.unwrap_or_default(),
        });
    }
    Ok(0)
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
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

pub async fn run(args: SyncArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
