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
    /// Source prefix or folder (omit both SRC and DST to run every pair of --config).
    pub src: Option<String>,
    /// Destination prefix or folder.
    pub dst: Option<String>,
    /// Reconcile once and exit (backfill / full reconcile). Without it: the daemon, following
    /// change events (local folders: inotify).
    #[arg(long)]
    pub once: bool,
    /// Daemon: where change events come from, for a cloud source: S3 `sqs://QUEUE_NAME` or
    /// `sqs://https://…`; Azure `azqueue://ACCOUNT/QUEUE` (Event Grid → Storage Queue) or
    /// `webhook`; GCS `webhook` (Pub/Sub push). Local folders need none (inotify).
    #[arg(long)]
    pub events: Option<String>,
    /// Daemon: serve webhook deliveries (`--events webhook`: Event Grid at
    /// /events/eventgrid, Pub/Sub push at /events/pubsub) on this address.
    /// [default: the config's daemon.listen, else 127.0.0.1:3030]
    #[arg(long)]
    pub listen: Option<String>,
    /// A file holding the bearer token the listener requires (else SLATE_API_TOKEN); needed
    /// for any non-loopback --listen address.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Daemon: run a full compare every N seconds and repair drift (0: never).
    /// [default: the config's daemon.drift_check_interval, else 86400]
    #[arg(long)]
    pub drift_check_secs: Option<u64>,
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

/// The listener's bearer token: the first line of `--token-file`, else `SLATE_API_TOKEN`.
pub(crate) fn api_token(file: &Option<PathBuf>) -> Result<Option<String>, SlateError> {
    let token = match file {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| SlateError::BadOption {
                option: "--token-file".into(),
                why: format!("{}: {e}", p.display()),
            })?;
            let t = text.lines().next().unwrap_or("").trim().to_string();
            if t.is_empty() {
                return Err(SlateError::BadOption {
                    option: "--token-file".into(),
                    why: format!("{}: the file holds no token", p.display()),
                });
            }
            Some(t)
        }
        None => std::env::var("SLATE_API_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty()),
    };
    Ok(token)
}

/// One pair to run, with its options.
struct Job {
    name: String,
    /// The config's own name for the pair.
    named: Option<String>,
    src: Location,
    dst: Location,
    opts: SyncOptions,
    events: Option<String>,
}

fn jobs(args: &SyncArgs, cfg: &Config) -> Result<Vec<Job>, SlateError> {
    let copy = options(&args.tuning, cfg);
    let filter = Filter {
        include: args.include.clone(),
        exclude: args.exclude.clone(),
        max_age: args.max_age,
    };
    let base = SyncOptions {
        dry_run: args.dry_run,
        no_delete: args.no_delete,
        max_delete: args.max_delete,
        filter,
        full: args.full,
        copy,
    };
    match (&args.src, &args.dst) {
        (Some(s), Some(d)) => Ok(vec![Job {
            name: format!("{s} -> {d}"),
            named: None,
            src: Location::parse(s)?,
            dst: Location::parse(d)?,
            opts: base,
            events: args.events.clone(),
        }]),
        (None, None) if !cfg.pairs.is_empty() => cfg
            .pairs
            .iter()
            .map(|p| {
                let mut opts = base.clone();
                opts.filter.include.extend(p.include.iter().cloned());
                opts.filter.exclude.extend(p.exclude.iter().cloned());
                opts.no_delete |= p.delete == Some(false);
                if let Some(m) = &p.max_delete {
                    opts.max_delete =
                        Some(MaxDelete::parse(m).map_err(|why| SlateError::BadOption {
                            option: "max_delete".into(),
                            why,
                        })?);
                }
                Ok(Job {
                    name: p
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("{} -> {}", p.src, p.dst)),
                    named: p.name.clone(),
                    src: Location::parse(&p.src)?,
                    dst: Location::parse(&p.dst)?,
                    opts,
                    events: p.events.clone(),
                })
            })
            .collect(),
        _ => Err(SlateError::BadOption {
            option: "SRC DST".into(),
            why: "give both SRC and DST, or --config FILE with [[pairs]]".into(),
        }),
    }
}

async fn run_inner(args: SyncArgs) -> Result<i32, SlateError> {
    let cfg = Config::load(args.tuning.config.as_deref())?;
    let jobs = jobs(&args, &cfg)?;
    let db = args
        .db
        .clone()
        .or_else(|| cfg.daemon.db.clone().map(PathBuf::from));
    let manifest = open_db(&db)?;
    let quiet = args.tuning.quiet;
    if !args.once {
        let drift = match (
            args.drift_check_secs,
            cfg.daemon.drift_check_interval.as_deref(),
        ) {
            (Some(s), _) => std::time::Duration::from_secs(s),
            (None, Some(d)) if d.trim() == "0" => std::time::Duration::ZERO,
            (None, Some(d)) => parse_age(d).map_err(|why| SlateError::BadOption {
                option: "daemon.drift_check_interval".into(),
                why,
            })?,
            (None, None) => std::time::Duration::from_secs(86_400),
        };
        // one shutdown for every pair
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        let listen = args.listen.clone().or_else(|| cfg.daemon.listen.clone());
        let wants_hub = jobs.iter().any(|j| j.events.as_deref() == Some("webhook"));
        let listener = if wants_hub || listen.is_some() {
            let token = api_token(&args.token_file)?;
            let hub = crate::events::webhook::Hub::new(manifest.clone(), token.clone());
            hub.pairs
                .store(jobs.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let addr = listen.unwrap_or_else(|| "127.0.0.1:3030".to_string());
            // the same API as `slate serve`: jobs, pairs, the dashboard, next to the deliveries
            let served = super::serve::start(
                manifest.clone(),
                hub.clone(),
                token.is_some(),
                &addr,
                options(&args.tuning, &cfg),
                2,
            )
            .await?;
            Some((hub, served.jobs))
        } else {
            None
        };
        let (hub, api_jobs) = match listener {
            Some((h, j)) => (Some(h), Some(j)),
            None => (None, None),
        };
        let mut tasks = Vec::new();
        for job in jobs {
            let dopts = crate::reconcile::daemon::DaemonOptions {
                sync: job.opts,
                drift_interval: drift,
                batch: 1000,
                shutdown_grace: std::time::Duration::from_secs(30),
                events: job.events,
                hub: hub.clone(),
                name: job.named.clone(),
            };
            let (m, mut rx) = (manifest.clone(), stop_rx.clone());
            tasks.push(tokio::spawn(async move {
                let stop = async move {
                    let _ = rx.wait_for(|v| *v).await;
                };
                let r = crate::reconcile::daemon::run(m, &job.src, &job.dst, dopts, stop).await;
                (job.name, r)
            }));
        }
        let mut code = 0;
        for t in tasks {
            match t.await {
                Ok((name, Ok(stats))) => {
                    use std::sync::atomic::Ordering::Relaxed;
                    eprintln!(
                        "slate: {name}: stopped; {} keys applied ({} copied, {} deleted, {} unchanged, {} stale events skipped), {} failed",
                        stats.applied.load(Relaxed),
                        stats.copied.load(Relaxed),
                        stats.deleted.load(Relaxed),
                        stats.unchanged.load(Relaxed),
                        stats.stale.load(Relaxed),
                        stats.failed.load(Relaxed)
                    );
                }
                Ok((name, Err(e))) => {
                    eprintln!("slate: {name}: {e}");
                    code = code.max(e.exit_code());
                }
                Err(e) => {
                    eprintln!("slate: {e}");
                    code = code.max(1);
                }
            }
        }
        if let Some(jobs) = &api_jobs {
            // the API's jobs stop with the pairs: interrupted, to be resumed
            jobs.interrupt_all().await;
            crate::copy::transfer::wait_for_aborts(std::time::Duration::from_secs(5)).await;
        }
        return Ok(code);
    }
    let mut code = 0;
    for job in jobs {
        let finished = tokio::select! {
            r = reconcile::sync_once(manifest.clone(), &job.src, &job.dst, &job.opts) => Some(r),
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
            let e = SlateError::Partial {
                failed: report.failed,
                total: report.failed + report.copied + report.deleted,
                first: report.first_error.unwrap_or_default(),
            };
            eprintln!("slate: {}: {e}", job.name);
            code = code.max(e.exit_code());
        }
    }
    Ok(code)
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

pub async fn run(args: SyncArgs) -> i32 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
