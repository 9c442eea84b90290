//! `slate copy SRC DST`: the one-shot fast copy, and `--estimate`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::Config;
use crate::copy::bwlimit::{BwLimit, Schedule};
use crate::copy::{self, CopyOptions, ProgressMode};
use crate::core::error::SlateError;
use crate::core::location::Location;
use crate::core::meta::Placement;
use crate::core::units::parse_size;

const AFTER_HELP: &str = "\
Examples:
  slate copy s3://bucket/datasets/imagenet gs://other/datasets/imagenet
  slate copy az://container/weights /mnt/nvme/weights/
  slate copy ./local/dir s3://bucket/prefix --transfers 32 --streams 4 --chunk-size 64MiB
  slate copy s3://bucket/weights gs://other/weights --estimate

Locations: s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX, file:///PATH or a
plain path. A source that names one object copies that object (into DST/ when DST ends with
'/' or is a folder); otherwise everything under the prefix is copied, recursively.

Tuning: with no --transfers, --streams or --chunk-size, slate tunes objects in flight,
streams per object and chunk size while it copies (progress shows them and the round-trip
estimate); each of them given is fixed at that value. A store that throttles one key prefix
(503 SlowDown, 429) slows down requests to that prefix only.

Memory: chunk buffers are bounded by --memory-limit (1 GiB by default), whatever the
transfers, streams and chunk size. Local destinations stream chunks to disk and hold no chunk
buffers. Listings stream, so memory does not grow with the number of objects.

A prefix or folder skips what is equal, as `rclone copy` does: both sides are listed and
walked in key order;
a key the destination holds is left when the manifest vouches for it, when an MD5 both sides
list matches, or by size and modification time (rclone's rule; --checksum: by content;
--size-only; --ignore-existing: not compared; --ignore-times: copied again). A re-run of an
interrupted copy costs two listings, not the bytes. Nothing at the destination is deleted.
The manifest records what was copied or found equal (in --db, under the pair's lease), so a
`slate sync` of the pair afterwards needs no HEAD for those keys; --no-manifest for a
throwaway copy.

Resume: a copy cut short (killed, interrupted) keeps what it wrote of objects of two chunks
or more, recorded in --db; the same command run again sends only the missing chunks (a source
that changed since starts afresh). `slate cleanup DST` aborts what is kept instead.

Exit codes: 0 all copied, 1 some objects failed (each named on stderr), 2 bad input or setup
(location, option, credentials, missing bucket), 130 interrupted.
";

#[derive(Debug, Args)]
#[command(after_long_help = format!("{AFTER_HELP}\n{}", crate::stores::ENV_HELP))]
pub struct CopyArgs {
    /// Source: an object or a prefix.
    pub src: String,
    /// Destination prefix (or object name, when the source is one object).
    pub dst: String,
    #[command(flatten)]
    pub tuning: TuningArgs,
    /// List the source and print objects, bytes, requests and cost; copy nothing.
    #[arg(long)]
    pub estimate: bool,
    /// The database where uploads under way are recorded, so that a copy cut short (killed,
    /// interrupted) continues from its last chunk when run again [default: the one `sync`
    /// uses, ~/.local/share/slate/slate.db; or postgres://USER@HOST:PORT/DB]
    #[arg(long, env = "SLATE_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,
    /// Print what would be copied (one line per key) and copy nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    #[command(flatten)]
    pub compare: super::sync::CompareArgs,
    /// Leave every key the destination holds as it is, without comparing (rclone's
    /// --ignore-existing).
    #[arg(long, conflicts_with_all = ["checksum", "size_only", "ignore_times"])]
    pub ignore_existing: bool,
    /// Copy every key of the source, also those equal at the destination (rclone's
    /// --ignore-times).
    #[arg(long, short = 'I', conflicts_with_all = ["checksum", "size_only"])]
    pub ignore_times: bool,
    #[command(flatten)]
    pub filters: super::filters::FilterArgs,
    /// Record nothing in the manifest (a throwaway copy): a later sync of the pair compares
    /// every key again (by size and modification time: a HEAD per key on a cloud side).
    #[arg(long)]
    pub no_manifest: bool,
    /// When a reconcile of the same pair runs (a sync holds the pair's lease): wait for it
    /// instead of stopping with exit 2.
    #[arg(long)]
    pub wait: bool,
    /// Accepted for rclone's command lines: a copy deletes nothing, so no limit applies.
    #[arg(long, value_name = "N", hide = true)]
    pub max_delete: Option<String>,
}

/// How the copier runs: shared by `copy` and `sync`.
#[derive(Debug, Args)]
pub struct TuningArgs {
    /// Objects in flight: fixed at N (lowered while a store throttles, then recovered up to
    /// N). Without it (or `transfers` in the config's [copy]) slate adapts: from 16, more while
    /// the throughput grows with them, fewer when latency rises without it or a store
    /// throttles, up to min(1024, one per MiB of --memory-limit, a quarter of the open-file limit).
    #[arg(long)]
    pub transfers: Option<usize>,
    /// Chunks in flight per large object: fixed at N. Without it slate adapts: from 4, more
    /// while the throughput grows with them, fewer when they add nothing or a store
    /// throttles; at most 32, the memory budget's share of each large object in flight, and
    /// half of an object's chunks when it has more than four.
    #[arg(long)]
    pub streams: Option<usize>,
    /// Chunk and multipart part size, a multiple of 1 MiB from 5 MiB: fixed. Without it
    /// slate picks it per object from the measured round trip and throughput, 8 to 256 MiB
    /// (64 MiB until measured); an object up to one chunk goes in one PUT.
    #[arg(long, value_parser = size_arg)]
    pub chunk_size: Option<u64>,
    /// Budget for in-memory chunk buffers [default: 1GiB]
    #[arg(long, value_parser = size_arg)]
    pub memory_limit: Option<u64>,
    /// Re-read every destination object and compare its content hash with the bytes sent.
    #[arg(long)]
    pub verify: bool,
    /// fsync local destination files before they become visible.
    #[arg(long)]
    pub fsync: bool,
    /// No progress and no summary; errors only.
    #[arg(short, long)]
    pub quiet: bool,
    /// Show progress (rclone's -P): slate does by default, a bar on a terminal, else lines
    /// every 10 s.
    #[arg(short = 'P', long, conflicts_with = "quiet")]
    pub progress: bool,
    /// Accepted for rclone's command lines, no effect: slate lists in parallel spans and holds
    /// no listing in memory, with or without it.
    #[arg(long)]
    pub fast_list: bool,
    /// Progress as plain lines every N seconds (default: a bar on a terminal, lines every 10 s otherwise).
    #[arg(long, value_name = "SECONDS")]
    pub progress_lines: Option<u64>,
    /// Local sources: follow symlinks instead of skipping them, as long as what they point
    /// to is inside the source folder (checked after resolving; a link leading out of it is
    /// skipped with a warning).
    #[arg(long, short = 'L')]
    pub copy_links: bool,
    /// Storage class of what is written: an S3 class (STANDARD, STANDARD_IA, GLACIER_IR, …),
    /// an Azure access tier (Hot, Cool, Cold, Archive) or a GCS class (NEARLINE, …).
    #[arg(long, value_name = "CLASS")]
    pub storage_class: Option<String>,
    /// Canned ACL of what is written: S3 (private, public-read, bucket-owner-full-control, …)
    /// or GCS predefined ACLs (public-read, project-private, …). Azure has none per blob.
    #[arg(long, value_name = "CANNED")]
    pub acl: Option<String>,
    /// Write the bytes alone: no Content-Type or other Content-* headers, no user metadata,
    /// no recorded modification time (the store's defaults apply; a local file gets the
    /// source's listed time).
    #[arg(long)]
    pub no_metadata: bool,
    /// Read at most RATE a second from the source, all transfers together (`8M`, `512k`,
    /// `off`), or a timetable as rclone's: `"08:00,10M 19:00,off"` (local time; `HH:MM:SS`
    /// and `Mon-08:00,…` too).
    #[arg(long, value_name = "RATE|TIMETABLE", value_parser = Schedule::parse)]
    pub bwlimit: Option<Schedule>,
    /// Move every byte through slate, even where the store could copy by itself (one bucket,
    /// or two buckets of one S3 endpoint): for an S3-compatible whose CopyObject is missing
    /// or slow, or to hold the copies to this host's --bwlimit.
    #[arg(long)]
    pub no_server_side_copy: bool,
    /// Config file (default: ~/.config/slate/slate.toml when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// Copier options from flags, then the config file, then the defaults.
pub fn options(args: &TuningArgs, cfg: &Config) -> CopyOptions {
    let d = CopyOptions::default();
    if args.fast_list {
        tracing::info!("--fast-list has no effect: slate lists in parallel spans, holding no listing in memory");
    }
    CopyOptions {
        // given (flag or config): fixed; not given: adaptive
        transfers: args.transfers.or(cfg.copy.transfers),
        streams: args.streams.or(cfg.copy.streams),
        chunk_size: args.chunk_size.or(cfg.copy.chunk_size),
        memory_limit: args
            .memory_limit
            .or(cfg.copy.memory_limit)
            .unwrap_or(d.memory_limit),
        verify: args.verify,
        fsync: args.fsync,
        progress: match (args.quiet, args.progress_lines) {
            (true, _) => ProgressMode::Quiet,
            (false, Some(s)) => ProgressMode::Lines(Duration::from_secs(s.max(1))),
            (false, None) => ProgressMode::Auto,
        },
        counters: None,
        copy_links: args.copy_links,
        placement: Placement {
            storage_class: args
                .storage_class
                .clone()
                .or_else(|| cfg.copy.storage_class.clone()),
            acl: args.acl.clone().or_else(|| cfg.copy.acl.clone()),
        },
        metadata: !args.no_metadata,
        bwlimit: args
            .bwlimit
            .clone()
            .or_else(|| {
                // checked when the config was loaded
                cfg.copy
                    .bwlimit
                    .as_deref()
                    .and_then(|s| Schedule::parse(s).ok())
            })
            .map(|s| std::sync::Arc::new(BwLimit::new(s))),
        resume: None,
        record_uploads: true,
        server_side_copy: !args.no_server_side_copy && cfg.copy.server_side_copy.unwrap_or(true),
    }
}

async fn run_inner(args: CopyArgs) -> Result<(), SlateError> {
    let cfg = Config::load(args.tuning.config.as_deref())?;
    let src = Location::parse(&args.src)?;
    let dst = Location::parse(&args.dst)?;
    let opts = options(&args.tuning, &cfg);
    // a storage class or ACL the destination's store lacks stops here, before any work
    opts.placement_for(&dst)?;
    if args.estimate {
        let est = copy::estimate(&src, &dst, &opts).await?;
        let server_side = opts.server_side_copy && src.same_store(&dst);
        let (egress, requests) = est.cost(&cfg.pricing, src.scheme, dst.scheme, server_side);
        println!("estimate for {src} -> {dst} (nothing copied)");
        println!("  objects:   {}", est.objects);
        println!(
            "  bytes:     {} ({})",
            est.bytes,
            copy::progress::human_bytes(est.bytes)
        );
        println!(
            "  requests:  {} ({} list, {} read, {} write){}",
            est.list_requests + est.read_requests + est.write_requests,
            est.list_requests,
            est.read_requests,
            est.write_requests,
            if server_side {
                ", server-side copies"
            } else {
                ""
            }
        );
        println!(
            "  cost:      ${:.4} egress ({}->{} at ${}/GiB) + ${:.4} requests = ${:.4}",
            egress,
            src.scheme.short(),
            dst.scheme.short(),
            if server_side {
                0.0
            } else {
                cfg.pricing.egress(src.scheme, dst.scheme)
            },
            requests,
            egress + requests
        );
        return Ok(());
    }
    let quiet = args.tuning.quiet;
    let filter = args.filters.build()?;
    // what the source names: one object goes straight to the copier; a prefix or folder is
    // compared with the destination first, by the engine `sync` uses (and a source that does
    // not exist stops here)
    let single = copy::plan(&copy::source(&src, &opts), &dst)
        .await?
        .single
        .is_some();
    if !single {
        return copy_prefix(&args, &src, &dst, opts, filter).await;
    }
    // what compares keys or filters them has nothing to do with one object named: refused,
    // not ignored
    let prefix_only = [
        ("--ignore-existing", args.ignore_existing),
        ("--ignore-times", args.ignore_times),
        ("--checksum", args.compare.checksum),
        ("--size-only", args.compare.size_only),
        ("--no-manifest", args.no_manifest),
        ("--wait", args.wait),
        ("a filter (--include, --min-size, …)", !filter.is_empty()),
    ];
    if let Some((flag, _)) = prefix_only.iter().find(|(_, set)| *set) {
        return Err(SlateError::BadOption {
            option: flag.to_string(),
            why: format!("{src} names one object, which is copied as it is: {flag} applies to a prefix or folder"),
        });
    }
    if args.dry_run {
        println!("copy (one object): {src}");
        return Ok(());
    }
    let mut opts = opts;
    // a copy without its database still copies; it only cannot resume
    opts.resume = match super::open_db(&args.db) {
        Ok(db) => Some(copy::resume::UploadsDb(db)),
        Err(e) => {
            tracing::warn!("copies cut short will start again from the beginning: {e}");
            None
        }
    };
    let finished = tokio::select! {
        r = copy::run(&src, &dst, opts, &|msg| eprintln!("error: {msg}")) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let Some(summary) = finished else {
        return Err(interrupted(&args.dst).await);
    };
    let summary = summary?;
    if !quiet || summary.failed > 0 {
        println!("{}", summary.line());
    }
    if summary.failed > 0 {
        return Err(SlateError::Partial {
            failed: summary.failed,
            total: summary.failed + summary.objects,
            first: summary.first_error.unwrap_or_default(),
        });
    }
    Ok(())
}

/// A copy interrupted (Ctrl-C): its future was dropped, so its temp files are gone; the
/// uploads it cut short get a moment to abort (no orphaned parts stay billed at the store), and
/// what is kept to be continued is said.
async fn interrupted(dst: &str) -> SlateError {
    copy::transfer::wait_for_aborts(Duration::from_secs(5)).await;
    let kept = copy::resume::KEPT.load(std::sync::atomic::Ordering::Relaxed);
    if kept > 0 {
        eprintln!(
            "slate: {kept} object(s) cut short keep what they wrote: the same command \
             continues them, `slate cleanup {dst}` removes them"
        );
    }
    SlateError::Interrupted
}

/// Removes the temporary manifests of copies whose process is gone (killed before theirs
/// was removed).
fn sweep_scratch() {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("slate-copy-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // signal 0 asks only whether the process exists
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A temporary manifest for a copy that records nothing, removed with it.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A copy of a prefix or folder: what the destination lacks or holds otherwise is copied,
/// what is equal is skipped, by the reconcile engine with deletes off (one rule of equality
/// for `copy`, `sync` and `diff`), its rows seeded into the manifest.
async fn copy_prefix(
    args: &CopyArgs,
    src: &Location,
    dst: &Location,
    opts: CopyOptions,
    filter: crate::core::filter::Filter,
) -> Result<(), SlateError> {
    use crate::engine::lease::Wait;
    use crate::engine::once::{self, Hooks, SyncOptions};
    use crate::engine::plan::{Action, Row, Rule};
    let mut scratch = None;
    let mut opts = opts;
    let opened = super::open_db(&args.db);
    let db = match (args.no_manifest, opened) {
        (false, Ok(db)) => db,
        (no_manifest, opened) => {
            match opened {
                // uploads cut short are recorded in the real database all the same, so that
                // the same command continues them and `slate cleanup` finds them
                Ok(db) => opts.resume = Some(copy::resume::UploadsDb(db)),
                Err(e) => {
                    if !no_manifest {
                        tracing::warn!("the manifest cannot be opened ({e}): this copy records nothing and cannot resume");
                    }
                    // nowhere to record them: uploads cut short are aborted
                    opts.record_uploads = false;
                }
            }
            sweep_scratch();
            let dir = std::env::temp_dir().join(format!(
                "slate-copy-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&dir).map_err(|e| SlateError::BadOption {
                option: "--no-manifest".into(),
                why: format!("{}: {e}", dir.display()),
            })?;
            let s = Scratch(dir);
            let db = super::open_db(&Some(s.0.join("copy.db")))?;
            scratch = Some(s);
            db
        }
    };
    let rule = if args.ignore_existing {
        Rule::IgnoreExisting
    } else if args.ignore_times {
        Rule::IgnoreTimes
    } else {
        args.compare.rule()
    };
    let sync = SyncOptions {
        dry_run: args.dry_run,
        no_delete: true,
        max_delete: None,
        filter,
        full: true,
        copy: opts,
        wait: if args.wait { Wait::Yes } else { Wait::No },
        purpose: "copy".into(),
        unless_synced: false,
        rule,
        enqueue: false,
        enqueue_deletes: false,
        backup: None,
        inventory: None,
        copy_only: true,
    };
    let mut print_plan = |row: &Row, a: Action| {
        let what = match a {
            Action::CopyMissing => "copy (new)",
            Action::CopyChanged => "copy (changed)",
            Action::MetaChanged => "update metadata",
            _ => return,
        };
        println!("{what}: {}", row.key);
    };
    let print_failed = |_key: &str, msg: &str| eprintln!("error: {msg}");
    let finished = tokio::select! {
        r = once::sync_once(db, src, dst, &sync, Hooks {
            planned: if args.dry_run { Some(&mut print_plan) } else { None },
            failed: Some(&print_failed),
        }) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let Some(report) = finished else {
        return Err(interrupted(&args.dst).await);
    };
    let report = report?;
    drop(scratch);
    if !args.tuning.quiet || report.failed > 0 {
        println!("{}", report.copy_line());
    }
    if report.failed > 0 {
        return Err(SlateError::Partial {
            failed: report.failed,
            total: report.failed + report.copied,
            first: report.first_error.unwrap_or_default(),
        });
    }
    Ok(())
}

/// Runs `slate copy`; prints one error line and returns the exit code.
pub async fn run(args: CopyArgs) -> i32 {
    match run_inner(args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}
