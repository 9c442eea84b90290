//! Partitioned reconciles: workers sharing one PostgreSQL database split a pair's backfill or
//! drift check into key ranges (state in [`crate::state::partitions`]).
//!
//! Every worker that joins a run does two things at once:
//! - **plans**, while the run is not planned in full and nobody else does: it lists the
//!   source from the run's last cut and records a partition every [`PART_KEYS`] keys (or
//!   [`PART_BYTES`] bytes), so that partitions can be taken while the listing goes on (a
//!   listing is one request per 1,000 keys; the copies are the work). A planner that dies is
//!   followed by another from the last cut.
//! - **takes partitions**, [`SLOTS`] at a time, each with its lease, and reconciles each as `sync
//!   --once` of its range ([`super::once::sync_part`]): its own listings (a flat listing
//!   starts after the range's first key), compare with the manifest, copies, deletes,
//!   manifest prunes within the range. What a killed worker copied of its partition is in the
//!   manifest: the next taker finds it equal and copies only the rest.
//!
//! The run ends with its last partition; the pair is marked reconciled then, when no partition
//! failed. `--max-delete N` bounds the whole run (partitions reserve their deletes); a
//! percentage, and the refusal to empty a destination from an empty source, hold per
//! partition. The pair's own lease and the partitions' exclude each other
//! ([`crate::state::leases`]): a `sync --once` or a job of the pair waits for the run.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::lease::{PairLease, Wait, TTL};
use super::merge::KeyRange;
use super::once::{self, FailedHook, Hooks, PartCtx, SyncOptions, SyncReport};
use crate::copy;
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::state::blocking;
use crate::state::manifest::Manifest;
use crate::state::owner;
use crate::state::partitions::{self, Outcome, PartRun, Partitions, Start};
use crate::stores::list;
use crate::stores::side::Side;

/// A partition ends after this many source keys...
pub const PART_KEYS: u64 = 500;
/// ... or this many bytes of them, whichever comes first.
pub const PART_BYTES: u64 = 1 << 30;

/// How often a worker with nothing to take looks again.
const IDLE: Duration = Duration::from_millis(400);

/// Times a worker's own planner may fail before it ends the run's planning.
const PLAN_TRIES: u32 = 3;

/// Whether a reconcile with these options can run partitioned: the whole pair, for real (a
/// filter, a dry run or a run from an inventory report is a whole-pair run of its own).
pub fn partitionable(opts: &SyncOptions) -> bool {
    opts.filter.is_empty() && !opts.dry_run && opts.inventory.is_none()
}

/// The options every partition of a run must share: a worker with other options does not
/// join (`full` is left out: listing the destination too is only more thorough).
pub fn spec(opts: &SyncOptions) -> String {
    let mut spec = format!(
        "deletes={} max-delete={:?} rule={:?} metadata={} placement={:?}",
        !opts.no_delete, opts.max_delete, opts.rule, opts.copy.metadata, opts.copy.placement
    );
    // only when asked for: runs under way keep the spec they were started with
    if !opts.copy.server_side_copy {
        spec.push_str(" no-server-side-copy");
    }
    spec
}

use crate::state::clock::now_ms;

/// What one worker did of a partitioned run, and the run as it ended.
#[derive(Debug, Clone)]
pub struct Joined {
    pub run: PartRun,
    /// This worker's partitions, added up.
    pub report: SyncReport,
    /// Partitions this worker finished.
    pub parts: u64,
    /// Partitions of the run that failed outright (after their retries): (index, error).
    pub errors: Vec<(i64, String)>,
}

impl Joined {
    /// What failed outright, in a line (None when no partition did).
    pub fn failure(&self) -> Option<String> {
        self.errors.first().map(|(idx, e)| {
            format!(
                "{} of {} partitions of partitioned run {} failed; partition {idx}: {e}",
                self.errors.len(),
                self.run.parts,
                self.run.id
            )
        })
    }

    /// One line for the log.
    pub fn line(&self) -> String {
        format!(
            "partitioned run {} of {} partitions{}: this worker took {}: {}",
            self.run.id,
            self.run.parts,
            if self.run.failed > 0 {
                format!(", {} failed", self.run.failed)
            } else {
                String::new()
            },
            self.parts,
            self.report.line()
        )
    }
}

/// Joins the pair's partitioned run under way, or starts one as `start` says, and works on it
/// until it is finished (by this worker and others). None when there was none to join or
/// start.
pub async fn reconcile(
    db: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
    start: Start,
    failed: Option<&FailedHook>,
) -> Result<Option<Joined>> {
    opts.copy.validate()?;
    if !partitionable(opts) {
        return Err(SlateError::BadOption {
            option: "--filter/--dry-run".into(),
            why: "a partitioned reconcile covers the whole pair: no filter, no dry run".into(),
        });
    }
    let began = std::time::Instant::now();
    let source = copy::source(src, &opts.copy);
    let (plan, pair) = once::open_pair(&db, &source, dst).await?;
    let label = format!("{source} -> {dst}");
    let spec = spec(opts);
    let host = owner::host_id();
    let (d, p, s, h) = (db.clone(), opts.purpose.clone(), spec.clone(), host.clone());
    let Some(run) =
        blocking(move || Partitions::new(&d).open_run(pair.id, &p, &s, start, &h, now_ms()))
            .await?
    else {
        return Ok(None);
    };
    if run.spec != spec {
        return Err(SlateError::Busy {
            pair: label,
            holder: format!(
                "partitioned run {} ({}) runs with other options: {}",
                run.id, run.purpose, run.spec
            ),
        });
    }
    tracing::info!(pair = %label, run = run.id, purpose = %run.purpose, "joining a partitioned run");
    let (slot_opts, slots) = slot_options(opts);
    let worker = Worker {
        db: &db,
        src,
        dst,
        opts: &slot_opts,
        failed,
        label: &label,
        host: &host,
        run_id: run.id,
        pair_id: pair.id,
        plan_side: plan.src.clone(),
        source: source.to_string(),
        // the planner stops with this worker's part of the run (a drop included: a daemon
        // stopping)
        shared: tokio::sync::Mutex::new(Shared::default()),
        stop: std::sync::atomic::AtomicBool::new(false),
    };
    // every slot ends at a partition's end: a slot dropped while its take commits would leave
    // a partition lease nobody renews or gives back (this process lives on)
    let runs = futures::future::join_all((0..slots).map(|_| worker.slot())).await;
    let Shared { report, parts, .. } = worker.shared.into_inner();
    let mut finished = None;
    for r in runs {
        if let Some(run) = r? {
            finished = Some(run); // each slot read the run once it was finished: one row
        }
    }
    let run = finished.ok_or_else(|| SlateError::Manifest {
        path: db.path().display().to_string(),
        why: format!("partitioned run {} had no slot", run.id),
    })?;
    let mut report = report;
    report.elapsed = began.elapsed();
    let d = db.clone();
    let run_id = run.id;
    let errors = blocking(move || Partitions::new(&d).errors(run_id)).await?;
    Ok(Some(Joined {
        run,
        report,
        parts,
        errors,
    }))
}

/// Partitions a worker reconciles at once: while one lists its range, compares and drains its
/// last copies, the other keeps the link busy (a partition's fixed costs, two listings and a
/// few transactions, would otherwise be a pause of the copies every few hundred keys).
pub const SLOTS: usize = 2;

/// The options of each of a worker's slots: the memory budget and an explicit `--transfers`
/// shared between them (`--bwlimit` is one limiter already); one slot when the budget or the
/// transfers do not hold two.
fn slot_options(opts: &SyncOptions) -> (SyncOptions, usize) {
    let mut o = opts.clone();
    o.copy.memory_limit = opts.copy.memory_limit / SLOTS as u64;
    o.copy.transfers = opts.copy.transfers.map(|t| t / SLOTS);
    if o.copy.transfers == Some(0) || o.copy.validate().is_err() {
        return (opts.clone(), 1);
    }
    (o, SLOTS)
}

/// What a worker's slots share.
#[derive(Default)]
struct Shared {
    planner: Option<Planner>,
    plan_failures: u32,
    /// The worker's partitions, added up.
    report: SyncReport,
    parts: u64,
}

/// One worker's part of a run: what its slots need.
struct Worker<'a> {
    db: &'a Arc<Manifest>,
    src: &'a Location,
    dst: &'a Location,
    opts: &'a SyncOptions,
    failed: Option<&'a FailedHook>,
    label: &'a str,
    host: &'a str,
    run_id: i64,
    pair_id: i64,
    plan_side: Side,
    source: String,
    shared: tokio::sync::Mutex<Shared>,
    /// Set by a slot that failed: the others stop before their next partition.
    stop: std::sync::atomic::AtomicBool,
}

impl Worker<'_> {
    /// Takes partitions one after another until the run is finished: the run as it ended;
    /// None when another slot failed. A failure stops the other slots at their partition's end.
    async fn slot(&self) -> Result<Option<PartRun>> {
        let r = self.slot_loop().await;
        if r.is_err() {
            self.stop.store(true, Relaxed);
        }
        r
    }

    async fn slot_loop(&self) -> Result<Option<PartRun>> {
        let (db, run_id) = (self.db, self.run_id);
        loop {
            if self.stop.load(Relaxed) {
                return Ok(None);
            }
            let d = db.clone();
            let run = blocking(move || Partitions::new(&d).run(run_id))
                .await?
                .ok_or_else(|| SlateError::Manifest {
                    path: db.path().display().to_string(),
                    why: format!("partitioned run {run_id} is gone"),
                })?;
            if run.finished_at.is_some() {
                return Ok(Some(run));
            }
            if !run.planned {
                self.plan(&run).await?;
            }
            let owner = PairLease::new_owner();
            let (d, o, h, p) = (
                db.clone(),
                owner.clone(),
                self.host.to_string(),
                self.opts.purpose.clone(),
            );
            let taken = blocking(move || {
                Partitions::new(&d).take(run_id, &o, &h, &p, now_ms(), TTL.as_millis() as i64)
            })
            .await?;
            let Some(part) = taken else {
                tokio::time::sleep(IDLE).await;
                continue;
            };
            let ctx = PartCtx {
                run_id,
                idx: part.idx,
                range: KeyRange {
                    after: part.after.clone(),
                    through: part.through.clone(),
                },
            };
            let lease = PairLease::held(
                db,
                partitions::part_lease(self.pair_id, run_id, part.idx),
                owner.clone(),
            );
            tracing::info!(pair = %self.label, run = run_id, part = part.idx,
                range = %ctx.range.text(), attempt = part.attempts, "partition taken");
            let hooks = Hooks {
                planned: None,
                failed: self.failed,
            };
            let r = once::sync_part(
                db.clone(),
                self.src,
                self.dst,
                self.opts,
                &lease,
                &ctx,
                hooks,
            )
            .await;
            let out = match &r {
                Ok(rep) => Outcome {
                    copied: rep.copied as i64,
                    deleted: rep.deleted as i64,
                    failed: rep.failed as i64,
                    error: None,
                },
                Err(e) => Outcome {
                    error: Some(e.to_string()),
                    ..Default::default()
                },
            };
            let (d, o, h, idx) = (db.clone(), owner, self.host.to_string(), part.idx);
            blocking(move || Partitions::new(&d).finish(run_id, idx, &o, &h, &out, now_ms()))
                .await?;
            lease.release().await; // the finish gave it back already: nothing left to delete
            let mut shared = self.shared.lock().await;
            match r {
                Ok(rep) => {
                    shared.parts += 1;
                    add(&mut shared.report, &rep);
                    tracing::info!(run = run_id, part = idx, "partition done: {}", rep.line());
                }
                Err(e) => {
                    tracing::warn!(run = run_id, part = idx, error = %e, "partition failed");
                    shared.report.first_error.get_or_insert(e.to_string());
                }
            }
        }
    }

    /// Plans the run from its last cut when nobody does: this worker's planner (one for its
    /// slots) is started, or looked at when it ended.
    async fn plan(&self, run: &PartRun) -> Result<()> {
        let (db, run_id) = (self.db, self.run_id);
        let mut shared = self.shared.lock().await;
        if shared.planner.as_ref().is_some_and(|p| !p.0.is_finished()) {
            return Ok(());
        }
        if let Some(mut p) = shared.planner.take() {
            let outcome = (&mut p.0).await.unwrap_or_else(|e| {
                Err(SlateError::List {
                    url: self.source.clone(),
                    detail: format!("the planner stopped: {e}"),
                })
            });
            if let Err(e) = outcome {
                shared.plan_failures += 1;
                tracing::warn!(run = run_id, error = %e, "planning the partitions failed");
                if shared.plan_failures >= PLAN_TRIES {
                    let d = db.clone();
                    blocking(move || Partitions::new(&d).abandon_plan(run_id, now_ms())).await?;
                    return Ok(());
                }
            }
        }
        let name = partitions::plan_lease(self.pair_id, run_id);
        match PairLease::take_named(db, &name, self.label, "planning", Wait::No).await {
            Ok(lease) => {
                let (d, side) = (db.clone(), self.plan_side.clone());
                shared.planner = Some(Planner(tokio::spawn(plan_run(d, side, run.clone(), lease))));
                Ok(())
            }
            Err(SlateError::Busy { .. }) => Ok(()), // another worker plans
            Err(e) => Err(e),
        }
    }
}

/// A worker's planner task, stopped when dropped.
struct Planner(tokio::task::JoinHandle<Result<()>>);

impl Drop for Planner {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Adds one partition's report to a worker's.
fn add(to: &mut SyncReport, r: &SyncReport) {
    let (c, t) = (&r.counts, &mut to.counts);
    t.only_in_source += c.only_in_source;
    t.only_in_destination += c.only_in_destination;
    t.changed += c.changed;
    t.metadata_changed += c.metadata_changed;
    t.equal += c.equal;
    t.equal_recorded += c.equal_recorded;
    t.equal_digest += c.equal_digest;
    t.equal_mtime += c.equal_mtime;
    t.equal_content += c.equal_content;
    t.equal_size_only += c.equal_size_only;
    t.bytes_to_copy += c.bytes_to_copy;
    t.kept += c.kept;
    t.bytes_only_in_source += c.bytes_only_in_source;
    t.bytes_only_in_destination += c.bytes_only_in_destination;
    t.bytes_changed += c.bytes_changed;
    t.bytes_equal += c.bytes_equal;
    to.listed_src += r.listed_src;
    to.listed_dst = match (to.listed_dst, r.listed_dst) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    to.copied += r.copied;
    to.copied_bytes += r.copied_bytes;
    to.deleted += r.deleted;
    to.meta_updated += r.meta_updated;
    to.delete_skipped += r.delete_skipped;
    to.failed += r.failed;
    if to.first_error.is_none() {
        to.first_error = r.first_error.clone();
    }
}

/// The planner: lists the source from the run's last cut and records a partition every
/// [`PART_KEYS`] keys or [`PART_BYTES`] bytes, the last one open-ended. Stops when its lease
/// is lost or another planner moved the cut.
async fn plan_run(db: Arc<Manifest>, side: Side, run: PartRun, lease: PairLease) -> Result<()> {
    let lost = lease.lost_flag();
    let range = KeyRange {
        after: run.cut_after.clone(),
        through: None,
    };
    let url = side.location().to_string();
    let (tx, mut rx) = mpsc::channel(10_000);
    let lister = tokio::spawn(async move {
        list::list_range(&side, tx, copy::classify_store_error, &range).await
    });
    let mut after = run.cut_after.clone();
    let (mut keys, mut bytes) = (0u64, 0u64);
    let mut last: Option<String> = None;
    let add_part = |after: Option<String>, through: Option<String>, keys: u64| {
        let d = db.clone();
        blocking(move || {
            Partitions::new(&d).add_part(run.id, after.as_deref(), through.as_deref(), keys as i64)
        })
    };
    while let Some(e) = rx.recv().await {
        let e = match e {
            Ok(e) => e,
            // a file that cannot be read is the partition's business (it reports it)
            Err(SlateError::Object { .. }) => continue,
            Err(e) => {
                lister.abort();
                return Err(e);
            }
        };
        if lost.load(Relaxed) {
            lister.abort();
            return Ok(());
        }
        if keys >= PART_KEYS || bytes >= PART_BYTES {
            if let Some(cut) = last.take() {
                // the partition ends at the key before this one: every partition holds keys
                if !add_part(after.clone(), Some(cut.clone()), keys).await? {
                    lister.abort();
                    return Ok(()); // another planner took over
                }
                after = Some(cut);
                (keys, bytes) = (0, 0);
            }
        }
        keys += 1;
        bytes += e.size;
        last = Some(e.rel);
    }
    lister.await.map_err(|e| SlateError::List {
        url,
        detail: format!("the planner's listing stopped: {e}"),
    })??;
    add_part(after, None, keys).await?;
    lease.release().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> SyncOptions {
        SyncOptions {
            dry_run: false,
            no_delete: false,
            max_delete: None,
            filter: Default::default(),
            full: false,
            copy: Default::default(),
            wait: Wait::No,
            purpose: "daemon backfill".into(),
            unless_synced: false,
            rule: Default::default(),
            enqueue: false,
            enqueue_deletes: false,
            backup: None,
            inventory: None,
            copy_only: false,
        }
    }

    #[test]
    fn slots_share_the_memory_budget_and_the_transfers_asked_for() {
        // (memory limit, --transfers) → (slots, each slot's memory limit, each one's transfers)
        let gib = 1u64 << 30;
        let min = crate::copy::tune::MIN_PART;
        let cases = [
            ((gib, None), (2, gib / 2, None)),
            ((gib, Some(32)), (2, gib / 2, Some(16))),
            ((gib, Some(33)), (2, gib / 2, Some(16))),
            ((gib, Some(1)), (1, gib, Some(1))),
            ((2 * min, None), (2, min, None)),
            ((2 * min - 1, None), (1, 2 * min - 1, None)),
        ];
        for ((memory, transfers), want) in cases {
            let mut o = options();
            o.copy.memory_limit = memory;
            o.copy.transfers = transfers;
            let (each, slots) = slot_options(&o);
            let got = (slots, each.copy.memory_limit, each.copy.transfers);
            assert_eq!(got, want, "memory {memory}, transfers {transfers:?}");
        }
    }

    #[test]
    fn the_spec_names_what_partitions_must_share_and_not_the_listing_depth() {
        let base = options();
        let full = SyncOptions {
            full: true,
            purpose: "drift check".into(),
            ..base.clone()
        };
        assert_eq!(spec(&base), spec(&full));
        let keep = SyncOptions {
            no_delete: true,
            ..base.clone()
        };
        assert_ne!(spec(&base), spec(&keep));
        let capped = SyncOptions {
            max_delete: Some(once::MaxDelete::Count(5)),
            ..base.clone()
        };
        assert_ne!(spec(&base), spec(&capped));
        let mut by_slate = base.clone();
        by_slate.copy.server_side_copy = false;
        assert_ne!(spec(&base), spec(&by_slate));
        assert!(
            !spec(&base).contains("server-side"),
            "runs under way keep their spec"
        );
        assert!(partitionable(&base));
        assert!(!partitionable(&SyncOptions {
            dry_run: true,
            ..base
        }));
    }
}
