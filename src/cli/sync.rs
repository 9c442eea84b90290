//! `slate sync SRC DST --once`: the backfill and full reconcile, deletes included.

use std::path::PathBuf;

use clap::Args;

use super::copy::{options, TuningArgs};
use super::{open_db, shutdown_signal, start_server};
use crate::config::Config;
use crate::core::error::SlateError;
use crate::core::filter::parse_age;
use crate::core::location::{Location, Scheme};
use crate::core::meta::Placement;
use crate::engine::daemon::{run_all, DaemonOptions, PairRun};
use crate::engine::lease::Wait;
use crate::engine::once::{self, Gap, Hooks, Inventory, MaxDelete, SyncOptions};
use crate::engine::plan::Rule;
use crate::engine::running::Running;
use crate::events::push::Hub;

const AFTER_HELP: &str = "\
Examples:
  slate sync --once az://content-store s3://content-store       # backfill / reconcile
  slate sync --once SRC DST --dry-run                             # print the plan, change nothing
  slate sync --once SRC DST --max-delete 1000                     # refuse to delete more (also N%)
  slate sync --once SRC DST --include 'shards/**' --exclude '*.tmp' --max-age 7d

--once lists both sides, so the destination ends equal to the source whatever happened to it
(an object deleted or overwritten there by another client is repaired); the manifest spares a
HEAD per key, not the looking. --trust-manifest takes the destination from the manifest
instead of listing it, for a destination only slate writes. Keys equal by the manifest, by a
digest both sides expose, or by size and modification time are not copied. What the
source no longer has is deleted at the destination, only inside DST's prefix, and only after
the source is asked once more and says not found. An empty source never empties a destination
unless --max-delete says so.

One reconcile of a pair runs at a time: a second one stops with exit 2 naming the holder (PID,
host, since when), or waits for it with --wait. Symlinks in a local source are skipped; -L
follows those that stay inside the source folder.

Exit codes: 0 done, 1 some objects failed (each named), 2 bad input, setup, or a delete guard.
";

#[derive(Debug, Args)]
#[command(after_long_help = format!("{AFTER_HELP}\n{}", crate::stores::ENV_HELP))]
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
    /// `sqs://https://…`; Azure `azqueue://ACCOUNT/QUEUE` (Event Grid → Storage Queue),
    /// `changefeed://ACCOUNT` (the account's change feed, read from a stored cursor) or
    /// `webhook`; GCS `pubsub://projects/P/subscriptions/S` (pull) or `webhook` (Pub/Sub
    /// push). Local folders need none (inotify). Pairs of one process that name the same
    /// queue share one consumer of it, which feeds each of them.
    #[arg(long)]
    pub events: Option<String>,
    /// Daemon: serve webhook deliveries (`--events webhook`: Event Grid at
    /// /events/eventgrid, Pub/Sub push at /events/pubsub) on this address.
    /// [default: the config's daemon.listen, else 127.0.0.1:3030]
    #[arg(long)]
    pub listen: Option<String>,
    #[command(flatten)]
    pub access: super::AccessArgs,
    /// Daemon: run a full compare every N seconds and repair drift (0: never).
    /// [default: the config's daemon.drift_check_interval, else 86400]
    #[arg(long)]
    pub drift_check_secs: Option<u64>,
    /// Daemon: prove every pair's events flow on this schedule (e.g. 5m) with a canary object
    /// under .slate-canary/ of its source (written, replicated, deleted); one that does not
    /// make it through marks the pair degraded. Needs write access to the source.
    /// [default: the config's daemon.canary_interval, else off]
    #[arg(long, value_parser = parse_age, value_name = "DURATION")]
    pub canary_interval: Option<std::time::Duration>,
    /// Daemon: the freshness objective, changes at the replica within this long of the
    /// source's write; the share that makes it is reported (/metrics, GET /pairs, the
    /// dashboard). [default: the config's daemon.freshness_target, else 15m]
    #[arg(long, value_parser = parse_age, value_name = "DURATION")]
    pub freshness_target: Option<std::time::Duration>,
    /// Daemon: how long a worker's claim on a pending key lasts without renewal (renewed every
    /// third of it while the worker lives): how soon the keys of a worker that died pass to
    /// the other workers sharing the database. Longer than the 60 s a worker waits out a
    /// PostgreSQL outage, so that a live worker's claims do not lapse during one
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub claim_secs: u64,
    /// Print the plan (one line per copy or delete) and change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// --once: what the reconcile would cost, and change nothing: the listings and compares
    /// are made (their requests counted), the copies and deletes of the plan counted and
    /// priced with the config's [pricing] (list prices by default).
    #[arg(long, requires = "once", conflicts_with = "dry_run")]
    pub estimate: bool,
    /// Accepted for rclone's command lines: slate deletes only after every copy of the run
    /// has landed, always.
    #[arg(long)]
    pub delete_after: bool,
    /// Abort before changing anything if more deletes than this are planned: a count or N%.
    #[arg(long, value_parser = MaxDelete::parse)]
    pub max_delete: Option<MaxDelete>,
    /// Keep objects that exist only at the destination.
    #[arg(long)]
    pub no_delete: bool,
    /// Daemon: the brake on mass deletes: when the deletes a pair applies within the window
    /// would pass this (a count, or a share of the source's objects like 50%), the rest are
    /// held until `slate pairs release-deletes` (copies go on); `off` for none
    /// [default: the pair's delete_brake, else 50%]
    #[arg(long)]
    pub delete_brake: Option<String>,
    /// Daemon: the delete brake's sliding window (e.g. 10m, 1h) [default: 10m]
    #[arg(long)]
    pub delete_brake_window: Option<String>,
    /// Keep what a delete or an overwrite would remove at the destination: it is moved to
    /// this location first (on the destination's store, outside the pair), as KEY.TIME
    /// [default: the pair's backup_dir]
    #[arg(long)]
    pub backup_dir: Option<String>,
    /// The first backfill reads the source's objects from an inventory report instead of
    /// listing it: an S3 Inventory manifest.json (CSV or Parquet), an Azure Blob Inventory
    /// *-manifest.json (CSV or Parquet), or a folder of reports (the newest is taken). It
    /// deletes nothing; what changed after the report is covered as --inventory-gap says.
    /// The daemon uses it for a pair never reconciled; drift checks list.
    #[arg(long, value_name = "URL")]
    pub inventory: Option<String>,
    /// How a backfill from --inventory covers what changed after the report was made:
    /// `list` (a listing pass follows: no HEAD and no byte for what is equal) or `events`
    /// (the pair's queue received events since before the report: no listing follows)
    #[arg(long, value_name = "list|events", default_value = "list", value_parser = Gap::parse, requires = "inventory")]
    pub inventory_gap: Gap,
    #[command(flatten)]
    pub filters: super::filters::FilterArgs,
    /// List the destination (the default of --once; kept for scripts written before).
    #[arg(long, hide = true)]
    pub full: bool,
    /// --once: take the destination's objects from the manifest instead of listing it, where
    /// a full reconcile of the pair has run before (the default until 2026-12): for a
    /// destination no one but slate writes. An object deleted or overwritten there by another
    /// client stays so until a run without it (or the daemon's drift check).
    #[arg(long, conflicts_with = "full", requires = "once")]
    pub trust_manifest: bool,
    /// When another reconcile of the same pair runs (one holds the pair's lease): wait for
    /// it to finish instead of stopping with exit 2.
    #[arg(long)]
    pub wait: bool,
    /// The manifest database: a SQLite file, or PostgreSQL as
    /// postgres://USER@HOST:PORT/DB (password from the URL, PGPASSWORD or ~/.pgpass)
    /// [default: ~/.local/share/slate/slate.db]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub compare: CompareArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// How keys the manifest cannot vouch for (a destination filled before slate knew it) are
/// compared. Default: size, then modification time, as rclone does (an MD5 both sides list
/// decides first; a cloud side's recorded time costs one HEAD per key of equal size).
#[derive(Debug, Args, Clone, Default)]
pub struct CompareArgs {
    /// Compare content instead of modification times, for keys the manifest does not vouch
    /// for: an MD5 both sides list, else both objects are read and hashed. A key whose both
    /// sides still have the size and ETag slate recorded when it copied it is equal by the
    /// manifest and is not read (the summary counts it "by the manifest").
    #[arg(long, short = 'c', conflicts_with = "size_only")]
    pub checksum: bool,
    /// Compare sizes only (what slate did before it compared modification times).
    #[arg(long)]
    pub size_only: bool,
}

impl CompareArgs {
    pub fn rule(&self) -> Rule {
        match (self.checksum, self.size_only) {
            (true, _) => Rule::Checksum,
            (_, true) => Rule::SizeOnly,
            _ => Rule::ModTime,
        }
    }
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
    brake: crate::core::brake::BrakePolicy,
}

/// `--backup-dir` (or a pair's `backup_dir`) checked against the pair.
fn backup_of(
    dir: Option<&str>,
    src: &str,
    dst: &str,
) -> Result<Option<crate::engine::backup::Backup>, SlateError> {
    let Some(dir) = dir else { return Ok(None) };
    let loc = Location::parse(dir).map_err(|e| SlateError::BadOption {
        option: "--backup-dir".into(),
        why: e.to_string(),
    })?;
    crate::engine::backup::Backup::new(&loc, &Location::parse(src)?, &Location::parse(dst)?)
        .map(Some)
}

/// The delete brake of a pair: the flags first, then the pair's keys, then the default.
fn brake_policy(
    args: &SyncArgs,
    pair: Option<&crate::config::PairConfig>,
) -> Result<crate::core::brake::BrakePolicy, SlateError> {
    let limit = args
        .delete_brake
        .clone()
        .or_else(|| pair.and_then(|p| p.delete_brake.clone()));
    let window = args
        .delete_brake_window
        .clone()
        .or_else(|| pair.and_then(|p| p.delete_brake_window.clone()));
    match (limit, window) {
        (None, None) => Ok(crate::core::brake::BrakePolicy::default()),
        (limit, window) => crate::core::brake::BrakePolicy::parse(
            limit.as_deref().unwrap_or("50%"),
            window.as_deref(),
        )
        .map_err(|why| SlateError::BadOption {
            option: "--delete-brake".into(),
            why,
        }),
    }
}

fn jobs(args: &SyncArgs, cfg: &Config) -> Result<Vec<Job>, SlateError> {
    let copy = options(&args.tuning, cfg);
    let filter = args.filters.build()?;
    if filter.min_age.is_some() && !args.once {
        // an event's object is new by nature: the daemon would leave out every change until
        // a drift check
        return Err(SlateError::BadOption {
            option: "--min-age".into(),
            why: "applies to --once (the daemon follows changes as they happen: every new object is younger than any minimum age)".into(),
        });
    }
    let base = SyncOptions {
        dry_run: args.dry_run || args.estimate,
        no_delete: args.no_delete,
        max_delete: args.max_delete,
        filter,
        // the daemon's start-up reconcile trusts the manifest as before (its drift checks list)
        full: args.full || (args.once && !args.trust_manifest),
        copy,
        wait: if args.wait { Wait::Yes } else { Wait::No },
        unless_synced: false,
        rule: args.compare.rule(),
        enqueue: false,
        enqueue_deletes: false,
        backup: None,
        inventory: match &args.inventory {
            None => None,
            Some(u) => Some(Inventory {
                url: Location::parse(u).map_err(|e| SlateError::BadOption {
                    option: "--inventory".into(),
                    why: e.to_string(),
                })?,
                gap: args.inventory_gap,
            }),
        },
        purpose: if args.once {
            "sync --once".into()
        } else {
            "daemon".into()
        },
        copy_only: false,
    };
    match (&args.src, &args.dst) {
        (Some(s), _) if base.inventory.is_some() && Location::parse(s)?.scheme == Scheme::Local => {
            Err(SlateError::BadOption {
                option: "--inventory".into(),
                why: format!("{s} is a local folder: listing it is what a report would save"),
            })
        }
        (Some(s), Some(d)) => Ok(vec![Job {
            name: format!("{s} -> {d}"),
            named: None,
            src: crate::copy::source(&Location::parse(s)?, &base.copy),
            dst: Location::parse(d)?,
            opts: SyncOptions {
                backup: backup_of(args.backup_dir.as_deref(), s, d)?,
                ..base
            },
            events: args.events.clone(),
            brake: brake_policy(args, None)?,
        }]),
        (None, None) if base.inventory.is_some() => Err(SlateError::BadOption {
            option: "--inventory".into(),
            why: "a report is of one source: give SRC and DST with it".into(),
        }),
        (None, None) if !cfg.pairs.is_empty() => cfg
            .pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut opts = base.clone();
                if !p.include.is_empty() || !p.exclude.is_empty() {
                    opts.filter = args.filters.build_with(
                        &p.include,
                        &p.exclude,
                        &format!(" with pairs[{i}]"),
                    )?;
                }
                opts.no_delete |= p.delete == Some(false);
                opts.copy.copy_links |= p.copy_links == Some(true);
                // flags first, then the pair's own, then the [copy] section
                let pair = p.placement(&cfg.copy);
                opts.copy.placement = Placement {
                    storage_class: args.tuning.storage_class.clone().or(pair.storage_class),
                    acl: args.tuning.acl.clone().or(pair.acl),
                };
                if let Some(m) = &p.max_delete {
                    opts.max_delete =
                        Some(MaxDelete::parse(m).map_err(|why| SlateError::BadOption {
                            option: "max_delete".into(),
                            why,
                        })?);
                }
                opts.backup = backup_of(
                    args.backup_dir.as_deref().or(p.backup_dir.as_deref()),
                    &p.src,
                    &p.dst,
                )?;
                Ok(Job {
                    name: p
                        .name
                        .clone()
                        .unwrap_or_else(|| format!("{} -> {}", p.src, p.dst)),
                    named: p.name.clone(),
                    src: crate::copy::source(&Location::parse(&p.src)?, &opts.copy),
                    dst: Location::parse(&p.dst)?,
                    opts,
                    events: p.events.clone(),
                    brake: brake_policy(args, Some(p))?,
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
    for j in &jobs {
        // a storage class or ACL the destination's store lacks stops here, before any work
        j.opts.copy.placement_for(&j.dst)?;
    }
    let db = args
        .db
        .clone()
        .or_else(|| cfg.daemon.db.clone().map(PathBuf::from));
    let manifest = open_db(&db)?;
    let quiet = args.tuning.quiet;
    if !args.once {
        crate::state::inbox::set_claim_ttl(std::time::Duration::from_secs(args.claim_secs));
        if let Some(r) = cfg.daemon.dead_letter_retention.as_deref() {
            let keep = parse_age(r).map_err(|why| SlateError::BadOption {
                option: "daemon.dead_letter_retention".into(),
                why,
            })?;
            crate::state::deadletters::set_retention(keep);
        }
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
        let freshness_target = match (
            args.freshness_target,
            cfg.daemon.freshness_target.as_deref(),
        ) {
            (Some(d), _) => d,
            (None, Some(d)) => parse_age(d).map_err(|why| SlateError::BadOption {
                option: "daemon.freshness_target".into(),
                why,
            })?,
            (None, None) => std::time::Duration::from_secs(15 * 60),
        };
        let canary_interval = match (args.canary_interval, cfg.daemon.canary_interval.as_deref()) {
            (Some(d), _) => d,
            (None, Some(d)) if d.trim() == "0" || d.trim() == "off" => std::time::Duration::ZERO,
            (None, Some(d)) => parse_age(d).map_err(|why| SlateError::BadOption {
                option: "daemon.canary_interval".into(),
                why,
            })?,
            (None, None) => std::time::Duration::ZERO,
        };
        // one shutdown for every pair
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        let listen = args.listen.clone().or_else(|| cfg.daemon.listen.clone());
        let wants_hub = jobs.iter().any(|j| j.events.as_deref() == Some("webhook"));
        let running = Running::new();
        let hub = Hub::new(manifest.clone());
        if listen.is_some() {
            // the pairs are resolved; the API's jobs name only the remotes the operator gave
            crate::core::remote::explicit_only();
        }
        let api_jobs = if wants_hub || listen.is_some() {
            // the same API as `slate serve`: jobs, pairs, the dashboard, next to the deliveries
            let (token, webhook_token, allowed_hosts) = args.access.resolve(&cfg.daemon)?;
            let open_intake = wants_hub && token.is_none() && webhook_token.is_none();
            let served = start_server(crate::server::Setup {
                db: manifest.clone(),
                hub: hub.clone(),
                running: running.clone(),
                token,
                no_token: args.access.no_token,
                webhook_token,
                allowed_hosts,
                jwt: super::push_tokens(&cfg.daemon)?,
                addr: listen.unwrap_or_else(|| "127.0.0.1:3030".to_string()),
                // the pairs' options, and so their bandwidth bucket: one per process
                copy: jobs
                    .first()
                    .map(|j| j.opts.copy.clone())
                    .unwrap_or_else(|| options(&args.tuning, &cfg)),
                max_jobs: 2,
            })
            .await?;
            if open_intake {
                eprintln!(
                    "slate: warning: the webhook intake takes deliveries without a token (any \
                     process of this host may post events; they are hints, checked against the \
                     source): set SLATE_WEBHOOK_TOKEN and put ?token=… in the subscriptions' URLs"
                );
            }
            Some(served.jobs)
        } else {
            None
        };
        let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
        let pairs = jobs
            .into_iter()
            .map(|job| PairRun {
                src: job.src,
                dst: job.dst,
                opts: DaemonOptions {
                    sync: job.opts,
                    drift_interval: drift,
                    batch: 1000,
                    shutdown_grace: std::time::Duration::from_secs(30),
                    events: job.events,
                    name: job.named,
                    delete_brake: job.brake,
                    canary_interval,
                    freshness_target,
                },
            })
            .collect();
        let hub = (wants_hub || api_jobs.is_some()).then_some(hub);
        let printer = tokio::spawn(print_states(running.clone()));
        let result = run_all(manifest.clone(), pairs, hub, running, stop_rx).await;
        printer.abort();
        if let Some(jobs) = &api_jobs {
            // the API's jobs stop with the pairs: interrupted, to be resumed
            jobs.interrupt_all().await;
            crate::copy::transfer::wait_for_aborts(std::time::Duration::from_secs(5)).await;
        }
        let handles = result?;
        for (name, h) in names.iter().zip(handles) {
            use std::sync::atomic::Ordering::Relaxed;
            let stats = &h.stats;
            let (bc, bd, dr) = (
                stats.backfill_copied.load(Relaxed),
                stats.backfill_deleted.load(Relaxed),
                stats.drift_repaired.load(Relaxed),
            );
            let mut before = String::new();
            if bc + bd > 0 {
                before.push_str(&format!("backfill copied {bc}, deleted {bd}; "));
            }
            if dr > 0 {
                before.push_str(&format!("drift checks repaired {dr} (applied below); "));
            }
            eprintln!(
                "slate: {name}: stopped; {before}{} keys applied ({} copied, {} deleted, {} unchanged, {} stale events skipped), {} failed",
                stats.applied.load(Relaxed),
                stats.copied.load(Relaxed),
                stats.deleted.load(Relaxed),
                stats.unchanged.load(Relaxed),
                stats.stale.load(Relaxed),
                stats.failed.load(Relaxed)
            );
        }
        return Ok(0);
    }
    let mut print_plan = |row: &crate::engine::plan::Row, a: crate::engine::plan::Action| {
        use crate::engine::plan::Action;
        let what = match a {
            Action::CopyMissing => "copy (new)",
            Action::CopyChanged => "copy (changed)",
            Action::Delete => "delete",
            Action::KeepExtra => "keep (--no-delete)",
            Action::MetaChanged => "update metadata",
            _ => return,
        };
        println!("{what}: {}", row.key);
    };
    let print_failed = |_key: &str, msg: &str| eprintln!("error: {msg}");
    let mut code = 0;
    if args.estimate {
        for job in &jobs {
            estimate(&manifest, job, &cfg.pricing, &print_failed).await?;
        }
        return Ok(0);
    }
    for job in jobs {
        let finished = tokio::select! {
            r = once::sync_once(manifest.clone(), &job.src, &job.dst, &job.opts, Hooks {
                planned: if job.opts.dry_run { Some(&mut print_plan) } else { None },
                failed: Some(&print_failed),
            }) => Some(r),
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

/// `sync --once --estimate`: the dry run's listings and compares, made and counted, and the
/// plan's copies and deletes counted as the copier would make them, priced.
async fn estimate(
    manifest: &std::sync::Arc<crate::state::manifest::Manifest>,
    job: &Job,
    prices: &crate::copy::estimate::Prices,
    print_failed: &crate::engine::once::FailedHook,
) -> Result<(), SlateError> {
    use crate::copy::estimate::Estimate;
    use crate::engine::plan::Action;
    use crate::stores::requests::{Class, Counts};
    let (src, dst) = (job.src.scheme, job.dst.scheme);
    let server_side = job.opts.copy.server_side_copy && job.src.same_store(&job.dst);
    let chunk = job
        .opts
        .copy
        .chunk_size
        .unwrap_or(crate::copy::tune::DEFAULT_CHUNK);
    // (the plan, deletes, metadata updates): the hook outlives this frame's borrows
    let tally_state = std::sync::Arc::new(std::sync::Mutex::new((Estimate::default(), 0u64, 0u64)));
    let t = tally_state.clone();
    let mut tally = move |row: &crate::engine::plan::Row, a: Action| {
        let Ok(mut t) = t.lock() else { return };
        match a {
            Action::CopyMissing | Action::CopyChanged => {
                let size = row.src.as_ref().map_or(0, |s| s.size);
                t.0.add(size, chunk, server_side, src, dst);
            }
            Action::Delete => t.1 += 1,
            Action::MetaChanged => t.2 += 1,
            _ => {}
        }
    };
    let before = Counts::now();
    let report = once::sync_once(
        manifest.clone(),
        &job.src,
        &job.dst,
        &job.opts,
        Hooks {
            planned: Some(&mut tally),
            failed: Some(print_failed),
        },
    )
    .await?;
    let made = Counts::now().since(&before);
    let (plan, deletes, meta) = tally_state.lock().map(|t| t.clone()).unwrap_or_default();
    let price = |m: &std::collections::BTreeMap<String, f64>, s: crate::core::location::Scheme| {
        m.get(s.short()).copied().unwrap_or(0.0) / 1000.0
    };
    // what the listings and compares cost: lists are write-class, HEADs and GETs read-class
    let stores: Vec<crate::core::location::Scheme> = if src == dst {
        vec![src]
    } else {
        vec![src, dst]
    };
    let look_cost: f64 = stores
        .iter()
        .map(|s| {
            made.of_store(*s, Class::List) as f64 * price(&prices.write_per_1000, *s)
                + (made.of_store(*s, Class::Head) + made.of_store(*s, Class::Get)) as f64
                    * price(&prices.read_per_1000, *s)
        })
        .sum();
    let (egress, copy_requests) = plan.cost(prices, src, dst, server_side);
    let meta_requests = meta
        * if dst == crate::core::location::Scheme::Azure {
            3
        } else {
            1
        };
    let meta_cost = meta_requests as f64 * price(&prices.write_per_1000, dst);
    println!("estimate for {} -> {} (nothing changed)", job.src, job.dst);
    println!(
        "  compare:   source {} listed, destination {}; requests made: {}",
        report.listed_src,
        report
            .listed_dst
            .map_or("from the manifest".to_string(), |n| format!("{n} listed")),
        made.line()
    );
    println!(
        "  copy:      {} objects, {} ({} read, {} write requests){}",
        plan.objects,
        crate::copy::progress::human_bytes(plan.bytes),
        plan.read_requests,
        plan.write_requests,
        if server_side { ", server-side" } else { "" }
    );
    if meta > 0 {
        println!("  metadata:  {meta} objects updated in place ({meta_requests} requests)");
    }
    println!(
        "  delete:    {deletes} objects ({deletes} requests{})",
        if job.opts.no_delete {
            "; --no-delete keeps them"
        } else {
            ""
        }
    );
    println!(
        "  cost:      ${:.4} compare + ${:.4} egress ({}->{}) + ${:.4} copy requests + ${:.4} metadata = ${:.4}",
        look_cost,
        egress,
        src.short(),
        dst.short(),
        copy_requests,
        meta_cost,
        look_cost + egress + copy_requests + meta_cost
    );
    println!(
        "  (deletes are free on S3, Azure and GCS; a second run lists again and makes these compare requests again)"
    );
    Ok(())
}

/// Prints on stderr when a pair starts to follow its events, and at once when one fails
/// (the supervisor restarts it): what a user watching the terminal must see, whatever the
/// log level.
async fn print_states(running: std::sync::Arc<Running>) {
    use crate::engine::running::PairState;
    let mut seen = std::collections::HashSet::new();
    loop {
        for p in running.pairs() {
            if !seen.insert(p.pair_id) {
                continue;
            }
            let mut rx = p.subscribe();
            tokio::spawn(async move {
                loop {
                    let st = rx.borrow_and_update().clone();
                    match st {
                        PairState::Following => {
                            eprintln!("slate: following changes of {}", p.label)
                        }
                        PairState::Failed { error, .. } => {
                            eprintln!(
                                "slate: {}: failed: {error}; restarting after a pause",
                                p.label
                            )
                        }
                        _ => {}
                    }
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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
