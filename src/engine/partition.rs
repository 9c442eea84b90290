//! Partitioned reconciles: workers sharing one PostgreSQL database split a pair's backfill or
//! drift check into key ranges (state in [`crate::state::partitions`]).
//!
//! Every worker that joins a run does two things at once:
//! - **plans**, while the run is not planned in full and nobody else does: it lists the
//!   source from the run's last cut and records a partition every [`PART_KEYS`] keys (or
//!   [`PART_BYTES`] bytes), so that partitions can be taken while the listing goes on (a
//!   listing is one request per 1,000 keys; the copies are the work). A planner that dies is
//!   followed by another from the last cut.
//! - **takes partitions** one at a time, with their lease, and reconciles each as `sync
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
use super::once::{self, Hooks, PartCtx, SyncOptions, SyncReport};
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
pub const PART_KEYS: u64 = 1_000;
/// ... or this many bytes of them, whichever comes first.
pub const PART_BYTES: u64 = 1 << 30;

/// How often a worker with nothing to take looks again.
const IDLE: Duration = Duration::from_millis(400);

/// Times a worker's own planner may fail before it ends the run's planning.
const PLAN_TRIES: u32 = 3;

/// Whether a reconcile with these options can run partitioned: the whole pair, for real (a
/// filter or a dry run is a whole-pair run of its own).
pub fn partitionable(opts: &SyncOptions) -> bool {
    opts.filter.is_empty() && !opts.dry_run
}

/// The options every partition of a run must share: a worker with other options does not
/// join (`full` is left out: listing the destination too is only more thorough).
pub fn spec(opts: &SyncOptions) -> String {
    format!(
        "deletes={} max-delete={:?} rule={:?} metadata={} placement={:?}",
        !opts.no_delete, opts.max_delete, opts.rule, opts.copy.metadata, opts.copy.placement
    )
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
    mut hooks: Hooks<'_>,
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
    let (run_id, pair_id) = (run.id, pair.id);
    // the planner stops with this worker's part of the run (a drop included: a daemon stopping)
    let mut planner: Option<Planner> = None;
    let mut plan_failures = 0u32;
    let mut report = SyncReport::default();
    let mut parts = 0u64;
    let result: Result<PartRun> = async {
        loop {
            let d = db.clone();
            let run = blocking(move || Partitions::new(&d).run(run_id))
                .await?
                .ok_or_else(|| SlateError::Manifest {
                    path: db.path().display().to_string(),
                    why: format!("partitioned run {run_id} is gone"),
                })?;
            if run.finished_at.is_some() {
                return Ok(run);
            }
            if !run.planned && planner.as_ref().is_none_or(|p| p.0.is_finished()) {
                if let Some(mut p) = planner.take() {
                    let outcome = (&mut p.0).await.unwrap_or_else(|e| {
                        Err(SlateError::List {
                            url: source.to_string(),
                            detail: format!("the planner stopped: {e}"),
                        })
                    });
                    if let Err(e) = outcome {
                        plan_failures += 1;
                        tracing::warn!(run = run_id, error = %e, "planning the partitions failed");
                        if plan_failures >= PLAN_TRIES {
                            let d = db.clone();
                            blocking(move || Partitions::new(&d).abandon_plan(run_id, now_ms()))
                                .await?;
                            continue;
                        }
                    }
                }
                let name = partitions::plan_lease(pair_id, run_id);
                match PairLease::take_named(&db, &name, &label, "planning", Wait::No).await {
                    Ok(lease) => {
                        let (d, side) = (db.clone(), plan.src.clone());
                        planner =
                            Some(Planner(tokio::spawn(plan_run(d, side, run.clone(), lease))));
                    }
                    Err(SlateError::Busy { .. }) => {} // another worker plans
                    Err(e) => return Err(e),
                }
            }
            let owner = PairLease::new_owner();
            let (d, o, h, p) = (
                db.clone(),
                owner.clone(),
                host.clone(),
                opts.purpose.clone(),
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
                &db,
                partitions::part_lease(pair_id, run_id, part.idx),
                owner.clone(),
            );
            tracing::info!(pair = %label, run = run_id, part = part.idx, range = %ctx.range.text(),
                attempt = part.attempts, "partition taken");
            let hooks = Hooks {
                planned: hooks.planned.as_deref_mut(),
                failed: hooks.failed,
            };
            let r = once::sync_part(db.clone(), src, dst, opts, &lease, &ctx, hooks).await;
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
            let (d, o, h, idx) = (db.clone(), owner, host.clone(), part.idx);
            blocking(move || Partitions::new(&d).finish(run_id, idx, &o, &h, &out, now_ms()))
                .await?;
            lease.release().await; // the finish gave it back already: nothing left to delete
            match r {
                Ok(rep) => {
                    parts += 1;
                    add(&mut report, &rep);
                    tracing::info!(run = run_id, part = idx, "partition done: {}", rep.line());
                }
                Err(e) => {
                    tracing::warn!(run = run_id, part = idx, error = %e, "partition failed");
                    report.first_error.get_or_insert(e.to_string());
                }
            }
        }
    }
    .await;
    drop(planner);
    let run = result?;
    report.elapsed = began.elapsed();
    let d = db.clone();
    let errors = blocking(move || Partitions::new(&d).errors(run_id)).await?;
    Ok(Some(Joined {
        run,
        report,
        parts,
        errors,
    }))
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

    #[test]
    fn the_spec_names_what_partitions_must_share_and_not_the_listing_depth() {
        let base = SyncOptions {
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
        };
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
        assert!(partitionable(&base));
        assert!(!partitionable(&SyncOptions {
            dry_run: true,
            ..base
        }));
    }
}
