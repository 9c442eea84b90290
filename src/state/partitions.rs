//! Partitioned reconciles (schema 0010): a pair's backfill or drift check split into key
//! ranges that workers sharing the database take (each worker two at a time). See
//! `schema/sqlite/0010_partitions.sql` for the tables and [`crate::engine::partition`] for the
//! workers' side.
//!
//! A run is opened once per pair and purpose; its planner appends partitions as it lists the
//! source (`add_part`, guarded by the run's last cut so that two planners never both append);
//! a worker takes a pending partition together with the partition's lease (`take`, one
//! transaction) and records it done or failed (`finish`). The run is finished, and the pair
//! marked reconciled when nothing failed, in the transaction that records its last partition.

use super::db::{params, Conn, DbResult, OptionalExtension, Row};
use super::leases::{acquire_in, holders_under, holds};
use super::manifest::Manifest;
use crate::core::error::Result;

/// Takes of a partition that may end in an error (its run failed outright) before it is
/// failed for good; a worker killed with it does not count.
pub const MAX_ERRORS: i64 = 3;

/// After its n-th error a partition waits n × this before it is taken again.
const RETRY_AFTER_MS: i64 = 5_000;

/// One partitioned run of one pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRun {
    pub id: i64,
    pub pair_id: i64,
    pub purpose: String,
    /// The options every partition runs with (a worker with others does not join).
    pub spec: String,
    pub started_at: i64,
    /// The last partition's end (where a planner that takes over lists on from).
    pub cut_after: Option<String>,
    pub parts: i64,
    /// Every partition is recorded (the planner listed to the end).
    pub planned: bool,
    pub deletes: i64,
    pub finished_at: Option<i64>,
    /// Objects that failed (and partitions that failed outright), over all partitions.
    pub failed: i64,
}

const RUN_SQL: &str = "SELECT id, pair_id, purpose, spec, started_at, cut_after, parts, planned,
    deletes, finished_at, failed FROM part_runs";

fn run_row(r: &Row) -> DbResult<PartRun> {
    Ok(PartRun {
        id: r.get(0)?,
        pair_id: r.get(1)?,
        purpose: r.get(2)?,
        spec: r.get(3)?,
        started_at: r.get(4)?,
        cut_after: r.get(5)?,
        parts: r.get(6)?,
        planned: r.get::<_, i64>(7)? != 0,
        deletes: r.get(8)?,
        finished_at: r.get(9)?,
        failed: r.get(10)?,
    })
}

/// One partition: the keys after `after` through `through`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub run_id: i64,
    pub idx: i64,
    pub after: Option<String>,
    pub through: Option<String>,
    /// Source keys in it when it was planned.
    pub keys: i64,
    /// `pending`, `done` or `failed`.
    pub state: String,
    pub attempts: i64,
    pub taken_by: Option<String>,
    pub done_by: Option<String>,
    pub done_host: Option<String>,
    pub copied: i64,
    pub deleted: i64,
    pub failed: i64,
    pub error: Option<String>,
}

const PART_SQL: &str = "SELECT run_id, idx, after_key, through_key, keys, state, attempts,
    taken_by, done_by, done_host, copied, deleted, failed, error FROM parts";

fn part_row(r: &Row) -> DbResult<Part> {
    Ok(Part {
        run_id: r.get(0)?,
        idx: r.get(1)?,
        after: r.get(2)?,
        through: r.get(3)?,
        keys: r.get(4)?,
        state: r.get(5)?,
        attempts: r.get(6)?,
        taken_by: r.get(7)?,
        done_by: r.get(8)?,
        done_host: r.get(9)?,
        copied: r.get(10)?,
        deleted: r.get(11)?,
        failed: r.get(12)?,
        error: r.get(13)?,
    })
}

/// When [`Partitions::open_run`] starts a run if the pair has none under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The pair was never reconciled (a backfill).
    IfNeverSynced,
    /// No run of the pair started in the last `ms` milliseconds (a drift check, due on
    /// every worker's clock at about the same time, runs once).
    IfNoneSince(i64),
    /// Always (`sync --once`).
    Always,
    /// Only join a run under way.
    Never,
}

/// The name of a partition's lease.
pub fn part_lease(pair_id: i64, run_id: i64, idx: i64) -> String {
    format!("pair:{pair_id}/run:{run_id}/part:{idx}")
}

/// The name of a run's planner's lease.
pub fn plan_lease(pair_id: i64, run_id: i64) -> String {
    format!("pair:{pair_id}/run:{run_id}/plan")
}

/// How one take of a partition ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub copied: i64,
    pub deleted: i64,
    /// Objects that failed.
    pub failed: i64,
    /// The partition's run ended early (a listing failed, too many deletes): taken again up
    /// to [`MAX_ATTEMPTS`] times.
    pub error: Option<String>,
}

/// The partitions of one database.
pub struct Partitions<'a> {
    m: &'a Manifest,
}

/// Pending partitions a take looks at (in key order): more than workers ever hold at once.
const TAKE_WINDOW: usize = 256;

/// Runs finished more than this long ago are forgotten when a new one starts.
const KEEP_FINISHED_MS: i64 = 7 * 24 * 3600 * 1000;

impl<'a> Partitions<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        Partitions { m }
    }

    /// The pair's run under way, or a new one when `start` says so (None: neither). A run
    /// under way with other options (`spec`) whose workers are all gone (a rolling restart
    /// that changed the options) is ended as failed first, so that it cannot block the pair;
    /// one that someone still works on is returned (the caller does not join it).
    #[allow(clippy::too_many_arguments)]
    pub fn open_run(
        &self,
        pair_id: i64,
        purpose: &str,
        spec: &str,
        start: Start,
        host: &str,
        now_ms: i64,
    ) -> Result<Option<PartRun>> {
        self.m.with(|c| {
            let open = c
                .query_row(
                    &format!(
                        "{RUN_SQL} WHERE pair_id = ?1 AND finished_at IS NULL ORDER BY id LIMIT 1"
                    ),
                    params![pair_id],
                    run_row,
                )
                .optional()?;
            if let Some(run) = open {
                if run.spec == spec || run_busy(c, &run, host, now_ms)? {
                    return Ok(Some(run));
                }
                c.execute(
                    "UPDATE parts SET state = 'failed', error = ?2
                     WHERE run_id = ?1 AND state = 'pending'",
                    params![
                        run.id,
                        "abandoned: its workers left it, and the next started with other options"
                    ],
                )?;
                c.execute(
                    "UPDATE part_runs SET finished_at = ?2, failed = failed + 1 WHERE id = ?1",
                    params![run.id, now_ms],
                )?;
            }
            let go = match start {
                Start::Never => false,
                Start::Always => true,
                Start::IfNeverSynced => c.exists(
                    "SELECT 1 FROM pairs WHERE id = ?1 AND last_sync_at IS NULL",
                    params![pair_id],
                )?,
                Start::IfNoneSince(ms) => !c.exists(
                    "SELECT 1 FROM part_runs WHERE pair_id = ?1 AND started_at > ?2",
                    params![pair_id, now_ms - ms],
                )?,
            };
            if !go {
                return Ok(None);
            }
            let old = now_ms - KEEP_FINISHED_MS;
            c.execute(
                "DELETE FROM parts WHERE run_id IN
                   (SELECT id FROM part_runs WHERE finished_at IS NOT NULL AND finished_at < ?1)",
                params![old],
            )?;
            c.execute(
                "DELETE FROM part_runs WHERE finished_at IS NOT NULL AND finished_at < ?1",
                params![old],
            )?;
            let id: i64 = c.query_row(
                "INSERT INTO part_runs (pair_id, purpose, spec, started_at) VALUES (?1, ?2, ?3, ?4)
                 RETURNING id",
                params![pair_id, purpose, spec, now_ms],
                |r| r.get(0),
            )?;
            c.query_row(&format!("{RUN_SQL} WHERE id = ?1"), params![id], run_row)
                .map(Some)
        })
    }

    /// A run as it stands.
    pub fn run(&self, run_id: i64) -> Result<Option<PartRun>> {
        self.m.read(|c| {
            c.query_row(
                &format!("{RUN_SQL} WHERE id = ?1"),
                params![run_id],
                run_row,
            )
            .optional()
        })
    }

    /// The pair's newest run, finished or not.
    pub fn latest(&self, pair_id: i64) -> Result<Option<PartRun>> {
        self.m.read(|c| {
            c.query_row(
                &format!("{RUN_SQL} WHERE pair_id = ?1 ORDER BY id DESC LIMIT 1"),
                params![pair_id],
                run_row,
            )
            .optional()
        })
    }

    /// Partitions of a run by state: (done, failed, pending).
    pub fn tally(&self, run_id: i64) -> Result<(i64, i64, i64)> {
        self.m.read(|c| {
            let n = |state: &str| -> DbResult<i64> {
                c.query_row(
                    "SELECT COUNT(*) FROM parts WHERE run_id = ?1 AND state = ?2",
                    params![run_id, state],
                    |r| r.get(0),
                )
            };
            Ok((n("done")?, n("failed")?, n("pending")?))
        })
    }

    /// A run's partitions in key order.
    pub fn parts(&self, run_id: i64) -> Result<Vec<Part>> {
        self.m.read(|c| {
            c.query_map(
                &format!("{PART_SQL} WHERE run_id = ?1 ORDER BY idx"),
                params![run_id],
                part_row,
            )
        })
    }

    /// Appends the partition after the run's last cut through `through` (None: to the end,
    /// and the run is then planned in full). False when the run's last cut is not `after` (a
    /// planner that lost its lease and was followed by another: it stops) or it is planned.
    pub fn add_part(
        &self,
        run_id: i64,
        after: Option<&str>,
        through: Option<&str>,
        keys: i64,
    ) -> Result<bool> {
        self.m.with(|c| {
            let Some(run) = run_in(c, run_id)? else {
                return Ok(false);
            };
            if run.planned || run.cut_after.as_deref() != after {
                return Ok(false);
            }
            c.execute(
                "INSERT INTO parts (run_id, idx, after_key, through_key, keys)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run_id, run.parts, after, through, keys],
            )?;
            c.execute(
                "UPDATE part_runs SET cut_after = ?2, parts = parts + 1, planned = ?3
                 WHERE id = ?1",
                params![run_id, through, through.is_none() as i64],
            )?;
            Ok(true)
        })
    }

    /// Ends a run's planning early (its listing failed for good): the run finishes when the
    /// partitions it has are done, counted as failed.
    pub fn abandon_plan(&self, run_id: i64, now_ms: i64) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "UPDATE part_runs SET planned = 1, failed = failed + 1 WHERE id = ?1",
                params![run_id],
            )?;
            finish_if_done(c, run_id, now_ms).map(|_| ())
        })
    }

    /// Partitions of a run that failed outright: (index, error).
    pub fn errors(&self, run_id: i64) -> Result<Vec<(i64, String)>> {
        self.m.read(|c| {
            c.query_map(
                "SELECT idx, error FROM parts
                 WHERE run_id = ?1 AND state = 'failed' AND error IS NOT NULL ORDER BY idx",
                params![run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }

    /// Takes the first pending partition of the run whose lease is free, with its lease (for
    /// `owner` until `now + ttl_ms`), in one transaction; None when no partition is free now.
    pub fn take(
        &self,
        run_id: i64,
        owner: &str,
        host: &str,
        purpose: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Option<Part>> {
        self.m.with(|c| {
            let Some(run) = run_in(c, run_id)? else {
                return Ok(None);
            };
            let pending = c.query_map(
                // the first few: at most two partitions per live worker are held
                &format!(
                    "{PART_SQL} WHERE run_id = ?1 AND state = 'pending' AND retry_at <= ?2
                     ORDER BY idx LIMIT {TAKE_WINDOW}"
                ),
                params![run_id, now_ms],
                part_row,
            )?;
            for mut p in pending {
                let lease = part_lease(run.pair_id, run_id, p.idx);
                if acquire_in(c, &lease, owner, host, purpose, now_ms, ttl_ms)?.is_some() {
                    continue;
                }
                c.execute(
                    "UPDATE parts SET attempts = attempts + 1, taken_by = ?3, taken_host = ?4,
                        taken_at = ?5 WHERE run_id = ?1 AND idx = ?2",
                    params![run_id, p.idx, owner, host, now_ms],
                )?;
                p.attempts += 1;
                p.taken_by = Some(owner.to_string());
                return Ok(Some(p));
            }
            Ok(None)
        })
    }

    /// Records how `owner`'s take of a partition ended and gives its lease back: done (its
    /// objects that failed counted), pending again after an error while attempts remain, or
    /// failed. Returns the run as it stands after (finished when this was its last partition;
    /// then the pair is marked reconciled in the same transaction if nothing failed). Nothing
    /// changes when `owner` no longer holds the partition's lease (it was too slow to renew
    /// and another took it).
    pub fn finish(
        &self,
        run_id: i64,
        idx: i64,
        owner: &str,
        host: &str,
        out: &Outcome,
        now_ms: i64,
    ) -> Result<Option<PartRun>> {
        self.m.with(|c| {
            let Some(run) = run_in(c, run_id)? else {
                return Ok(None);
            };
            let lease = part_lease(run.pair_id, run_id, idx);
            let held = c.exists(
                "SELECT 1 FROM leases WHERE name = ?1 AND owner = ?2",
                params![lease.as_str(), owner],
            )?;
            if !held {
                return Ok(Some(run));
            }
            c.execute(
                "DELETE FROM leases WHERE name = ?1 AND owner = ?2",
                params![lease.as_str(), owner],
            )?;
            let before: i64 = c.query_row(
                "SELECT errors FROM parts WHERE run_id = ?1 AND idx = ?2",
                params![run_id, idx],
                |r| r.get(0),
            )?;
            let errors = before + out.error.is_some() as i64;
            let state = match (&out.error, out.failed) {
                (Some(_), _) if errors < MAX_ERRORS => "pending",
                (Some(_), _) => "failed",
                (None, 0) => "done",
                (None, _) => "failed",
            };
            let failed = if state == "pending" {
                0
            } else {
                out.failed + out.error.is_some() as i64
            };
            c.execute(
                "UPDATE parts SET state = ?3, done_by = ?4, done_host = ?5, done_at = ?6,
                    copied = copied + ?7, deleted = deleted + ?8, failed = ?9, error = ?10,
                    errors = ?11, retry_at = ?12
                 WHERE run_id = ?1 AND idx = ?2",
                params![
                    run_id,
                    idx,
                    state,
                    owner,
                    host,
                    now_ms,
                    out.copied,
                    out.deleted,
                    failed,
                    out.error.as_deref(),
                    errors,
                    now_ms + errors * RETRY_AFTER_MS
                ],
            )?;
            if failed > 0 {
                c.execute(
                    "UPDATE part_runs SET failed = failed + ?2 WHERE id = ?1",
                    params![run_id, failed],
                )?;
            }
            finish_if_done(c, run_id, now_ms)
        })
    }

    /// Reserves `n` deletes for partition `idx` from its run's `--max-delete` count `limit`,
    /// in place of what an earlier take of the partition reserved; false (nothing changed)
    /// when they do not fit.
    pub fn reserve_deletes(&self, run_id: i64, idx: i64, n: u64, limit: u64) -> Result<bool> {
        self.m.with(|c| {
            let used: i64 = c.query_row(
                "SELECT deletes FROM part_runs WHERE id = ?1",
                params![run_id],
                |r| r.get(0),
            )?;
            let mine: i64 = c.query_row(
                "SELECT reserved FROM parts WHERE run_id = ?1 AND idx = ?2",
                params![run_id, idx],
                |r| r.get(0),
            )?;
            let total = (used - mine).max(0) as u64 + n;
            if total > limit {
                return Ok(false);
            }
            c.execute(
                "UPDATE part_runs SET deletes = ?2 WHERE id = ?1",
                params![run_id, total as i64],
            )?;
            c.execute(
                "UPDATE parts SET reserved = ?3 WHERE run_id = ?1 AND idx = ?2",
                params![run_id, idx, n as i64],
            )?;
            Ok(true)
        })
    }
}

/// A run as this transaction sees it.
fn run_in(c: &Conn, run_id: i64) -> DbResult<Option<PartRun>> {
    c.query_row(
        &format!("{RUN_SQL} WHERE id = ?1"),
        params![run_id],
        run_row,
    )
    .optional()
}

/// Whether a worker still holds a lease of `run` (a partition or its planner).
fn run_busy(c: &Conn, run: &PartRun, host: &str, now_ms: i64) -> DbResult<bool> {
    let under = format!("pair:{}/run:{}/", run.pair_id, run.id);
    Ok(holders_under(c, &under)?
        .iter()
        .any(|h| holds(h, host, now_ms)))
}

/// Finishes a planned run none of whose partitions is pending, marking its pair reconciled
/// when nothing failed; the run as it stands.
fn finish_if_done(c: &Conn, run_id: i64, now_ms: i64) -> DbResult<Option<PartRun>> {
    let run = c.query_row(
        &format!("{RUN_SQL} WHERE id = ?1"),
        params![run_id],
        run_row,
    )?;
    if run.finished_at.is_some() || !run.planned {
        return Ok(Some(run));
    }
    let pending = c.exists(
        "SELECT 1 FROM parts WHERE run_id = ?1 AND state = 'pending'",
        params![run_id],
    )?;
    if pending {
        return Ok(Some(run));
    }
    c.execute(
        "UPDATE part_runs SET finished_at = ?2 WHERE id = ?1",
        params![run_id, now_ms],
    )?;
    if run.failed == 0 {
        c.execute(
            "UPDATE pairs SET last_sync_at = ?1, last_sync_note = ?2 WHERE id = ?3",
            params![now_ms / 1000, run.purpose.as_str(), run.pair_id],
        )?;
    }
    c.query_row(
        &format!("{RUN_SQL} WHERE id = ?1"),
        params![run_id],
        run_row,
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;
    use crate::state::leases::Leases;

    conformance!(
        a_run_is_planned_taken_and_finished_once,
        a_dead_takers_partition_is_taken_again_and_errors_retry,
        the_pair_lease_and_its_partitions_exclude_each_other,
        deletes_are_reserved_from_the_runs_count,
        a_run_with_other_options_is_ended_once_its_workers_are_gone,
    );

    fn me(tag: &str) -> String {
        let t = crate::state::owner::owner_tag(std::process::id()).unwrap();
        format!("{t}:{tag}")
    }

    fn ok() -> Outcome {
        Outcome::default()
    }

    fn a_run_is_planned_taken_and_finished_once(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let pair = m.pair("s3://a/p", "s3://b/q").unwrap();
        let p = Partitions::new(&m);
        // a backfill starts only for a pair never reconciled; a second open joins it
        let run = p
            .open_run(
                pair.id,
                "daemon backfill",
                "spec1",
                Start::IfNeverSynced,
                "h",
                1_000,
            )
            .unwrap()
            .unwrap();
        let again = p
            .open_run(pair.id, "drift check", "spec1", Start::Always, "h", 1_001)
            .unwrap()
            .unwrap();
        assert_eq!(
            again.id, run.id,
            "the run under way is joined, not a second one"
        );
        assert_eq!(again.spec, "spec1");
        // the planner appends behind its last cut only
        assert!(p.add_part(run.id, None, Some("k0999"), 1000).unwrap());
        assert!(
            !p.add_part(run.id, None, Some("k0500"), 500).unwrap(),
            "a planner behind the cut stops"
        );
        assert!(p
            .add_part(run.id, Some("k0999"), Some("k1999"), 1000)
            .unwrap());
        let (a, b) = (me("a"), me("b"));
        let first = p
            .take(run.id, &a, "h", "backfill", 2_000, 30_000)
            .unwrap()
            .unwrap();
        assert_eq!(
            (first.idx, first.after.as_deref(), first.through.as_deref()),
            (0, None, Some("k0999"))
        );
        let second = p
            .take(run.id, &b, "h", "backfill", 2_000, 30_000)
            .unwrap()
            .unwrap();
        assert_eq!(second.idx, 1, "a partition held is not taken twice");
        assert_eq!(
            p.take(run.id, &me("c"), "h", "backfill", 2_000, 30_000)
                .unwrap(),
            None
        );
        let after = p
            .finish(run.id, 0, &a, "h", &Outcome { copied: 10, ..ok() }, 3_000)
            .unwrap()
            .unwrap();
        assert_eq!(after.finished_at, None);
        let after = p.finish(run.id, 1, &b, "h", &ok(), 3_001).unwrap().unwrap();
        assert_eq!(after.finished_at, None, "not planned to the end yet");
        assert!(p.add_part(run.id, Some("k1999"), None, 3).unwrap());
        assert!(
            !p.add_part(run.id, Some("k1999"), None, 3).unwrap(),
            "planned"
        );
        let last = p
            .take(run.id, &a, "h", "backfill", 4_000, 30_000)
            .unwrap()
            .unwrap();
        assert_eq!(
            (last.after.as_deref(), last.through.as_deref()),
            (Some("k1999"), None)
        );
        let done = p.finish(run.id, 2, &a, "h", &ok(), 5_000).unwrap().unwrap();
        assert_eq!(done.finished_at, Some(5_000));
        assert!(m
            .find_pair("s3://a/p", "s3://b/q")
            .unwrap()
            .unwrap()
            .last_sync_at
            .is_some());
        let parts = p.parts(run.id).unwrap();
        assert_eq!(
            parts.iter().map(|p| p.state.as_str()).collect::<Vec<_>>(),
            ["done"; 3]
        );
        assert_eq!(parts[0].done_by.as_deref(), Some(a.as_str()));
        assert_eq!(parts[0].copied, 10);
        // the pair is reconciled now: no new backfill; a drift check once per interval
        assert_eq!(
            p.open_run(
                pair.id,
                "daemon backfill",
                "s",
                Start::IfNeverSynced,
                "h",
                6_000
            )
            .unwrap(),
            None
        );
        assert_eq!(
            p.open_run(
                pair.id,
                "drift check",
                "s",
                Start::IfNoneSince(10_000),
                "h",
                6_000
            )
            .unwrap(),
            None
        );
        assert_eq!(
            p.open_run(pair.id, "drift check", "s", Start::Never, "h", 20_000)
                .unwrap(),
            None
        );
        let drift = p
            .open_run(
                pair.id,
                "drift check",
                "s",
                Start::IfNoneSince(10_000),
                "h",
                20_000,
            )
            .unwrap()
            .unwrap();
        assert_ne!(drift.id, run.id);
        assert_eq!(p.latest(pair.id).unwrap().unwrap().id, drift.id);
    }

    fn a_dead_takers_partition_is_taken_again_and_errors_retry(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let pair = m.pair("s3://a/p", "s3://b/q").unwrap();
        let p = Partitions::new(&m);
        let run = p
            .open_run(pair.id, "backfill", "s", Start::Always, "h", 1_000)
            .unwrap()
            .unwrap();
        assert!(p.add_part(run.id, None, None, 5).unwrap());
        // a taker on this host whose process is gone (killed with -9) holds nothing
        let dead = "4194304:1:dead";
        assert!(p
            .take(run.id, dead, "h", "b", 1_000, 60_000)
            .unwrap()
            .is_some());
        let a = me("a");
        let again = p
            .take(run.id, &a, "h", "b", 1_001, 60_000)
            .unwrap()
            .unwrap();
        assert_eq!(again.attempts, 2);
        // the dead taker's late finish changes nothing
        p.finish(run.id, 0, dead, "h", &ok(), 1_002).unwrap();
        assert_eq!(p.parts(run.id).unwrap()[0].state, "pending");
        // one on another host holds it until its lease expires
        let far = "9:9:far";
        let err = Outcome {
            error: Some("listing failed".into()),
            ..ok()
        };
        let r = p.finish(run.id, 0, &a, "h", &err, 1_003).unwrap().unwrap();
        assert_eq!(r.finished_at, None, "an error is retried");
        assert_eq!(
            p.take(run.id, far, "h2", "b", 1_004, 100).unwrap(),
            None,
            "not at once: it waits 5 s after its first error"
        );
        assert!(p
            .take(run.id, far, "h2", "b", 6_003, 100)
            .unwrap()
            .is_some());
        assert_eq!(p.take(run.id, &a, "h", "b", 6_050, 60_000).unwrap(), None);
        let third = p
            .take(run.id, &a, "h", "b", 6_200, 60_000)
            .unwrap()
            .unwrap();
        assert_eq!(third.attempts, 4, "every take counts as an attempt");
        let r = p.finish(run.id, 0, &a, "h", &err, 6_300).unwrap().unwrap();
        assert_eq!(
            r.finished_at, None,
            "two errors: a kill and a lost lease are not errors"
        );
        assert_eq!(p.take(run.id, &a, "h", "b", 16_299, 60_000).unwrap(), None);
        assert!(p
            .take(run.id, &a, "h", "b", 16_300, 60_000)
            .unwrap()
            .is_some());
        let r = p.finish(run.id, 0, &a, "h", &err, 16_400).unwrap().unwrap();
        assert_eq!(
            r.finished_at,
            Some(16_400),
            "three errors: failed, and the run ends"
        );
        assert_eq!(
            p.errors(run.id).unwrap(),
            [(0, "listing failed".to_string())]
        );
        assert_eq!(r.failed, 1);
        assert_eq!(p.parts(run.id).unwrap()[0].state, "failed");
        assert!(
            m.find_pair("s3://a/p", "s3://b/q")
                .unwrap()
                .unwrap()
                .last_sync_at
                .is_none(),
            "a run with a failed partition does not vouch for the pair"
        );
    }

    fn the_pair_lease_and_its_partitions_exclude_each_other(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let pair = m.pair("s3://a/p", "s3://b/q").unwrap();
        let p = Partitions::new(&m);
        let l = Leases::new(&m);
        let run = p
            .open_run(pair.id, "backfill", "s", Start::Always, "h", 1_000)
            .unwrap()
            .unwrap();
        assert!(p.add_part(run.id, None, None, 5).unwrap());
        let (a, b) = (me("a"), me("b"));
        let whole = format!("pair:{}", pair.id);
        assert_eq!(
            l.acquire(&whole, &a, "h", "sync --once", 1_000, 30_000)
                .unwrap(),
            None
        );
        assert_eq!(
            p.take(run.id, &b, "h", "backfill", 1_001, 30_000).unwrap(),
            None,
            "no partition while the whole pair is held"
        );
        l.release(&whole, &a).unwrap();
        assert!(p
            .take(run.id, &b, "h", "backfill", 1_002, 30_000)
            .unwrap()
            .is_some());
        let held = l
            .acquire(&whole, &a, "h", "sync --once", 1_003, 30_000)
            .unwrap();
        assert_eq!(
            held.map(|h| h.owner),
            Some(b.clone()),
            "the partition's holder is named"
        );
        let plan = plan_lease(pair.id, run.id);
        assert_eq!(
            l.acquire(&plan, &a, "h", "planning", 1_004, 30_000)
                .unwrap(),
            None,
            "partitions and the planner are siblings"
        );
        // another pair whose id starts alike is not under this one
        let other = format!("pair:{}0/run:1/part:0", pair.id);
        assert_eq!(
            l.acquire(&other, &a, "h", "x", 1_005, 30_000).unwrap(),
            None
        );
        // nor over it: `pair:7` is not held up by `pair:70`'s partitions
        assert_eq!(
            l.acquire("pair:70/run:1/part:0", &a, "h", "x", 1_006, 30_000)
                .unwrap(),
            None
        );
        assert_eq!(
            l.acquire("pair:7", &b, "h", "x", 1_007, 30_000).unwrap(),
            None
        );
        assert_eq!(
            l.acquire("pair:70/run:1/plan", &a, "h", "x", 1_008, 30_000)
                .unwrap(),
            None
        );
        assert!(
            l.acquire("pair:70", &b, "h", "x", 1_009, 30_000)
                .unwrap()
                .is_some(),
            "but pair:70 itself is"
        );
    }

    fn deletes_are_reserved_from_the_runs_count(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let pair = m.pair("s3://a/p", "s3://b/q").unwrap();
        let p = Partitions::new(&m);
        let run = p
            .open_run(pair.id, "backfill", "s", Start::Always, "h", 1_000)
            .unwrap()
            .unwrap();
        assert!(p.add_part(run.id, None, Some("m"), 5).unwrap());
        assert!(p.add_part(run.id, Some("m"), None, 5).unwrap());
        assert!(p.reserve_deletes(run.id, 0, 6, 10).unwrap());
        assert!(!p.reserve_deletes(run.id, 1, 5, 10).unwrap(), "6 + 5 > 10");
        assert!(p.reserve_deletes(run.id, 1, 4, 10).unwrap());
        assert_eq!(p.run(run.id).unwrap().unwrap().deletes, 10);
        // partition 0 taken again (its first take failed): its new reservation replaces the old
        assert!(
            p.reserve_deletes(run.id, 0, 6, 10).unwrap(),
            "not counted twice"
        );
        assert!(p.reserve_deletes(run.id, 0, 2, 10).unwrap());
        assert_eq!(p.run(run.id).unwrap().unwrap().deletes, 6);
    }

    fn a_run_with_other_options_is_ended_once_its_workers_are_gone(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let pair = m.pair("s3://a/p", "s3://b/q").unwrap();
        let p = Partitions::new(&m);
        let old = p
            .open_run(
                pair.id,
                "backfill",
                "deletes=true",
                Start::Always,
                "h",
                1_000,
            )
            .unwrap()
            .unwrap();
        assert!(p.add_part(old.id, None, Some("m"), 5).unwrap());
        assert!(p.add_part(old.id, Some("m"), None, 5).unwrap());
        // a worker of another host still works on it: the run is returned, not joined
        assert!(p
            .take(old.id, "9:9:far", "h2", "b", 1_000, 30_000)
            .unwrap()
            .is_some());
        let busy = p
            .open_run(
                pair.id,
                "backfill",
                "deletes=false",
                Start::IfNeverSynced,
                "h",
                2_000,
            )
            .unwrap()
            .unwrap();
        assert_eq!((busy.id, busy.spec.as_str()), (old.id, "deletes=true"));
        // its lease expired (the worker is gone): ended as failed, and a new run starts
        let new = p
            .open_run(
                pair.id,
                "backfill",
                "deletes=false",
                Start::IfNeverSynced,
                "h",
                31_001,
            )
            .unwrap()
            .unwrap();
        assert_ne!(new.id, old.id);
        assert_eq!(new.spec, "deletes=false");
        let ended = p.run(old.id).unwrap().unwrap();
        assert_eq!(ended.finished_at, Some(31_001));
        assert!(ended.failed > 0);
        assert!(p.parts(old.id).unwrap().iter().all(|x| x.state == "failed"));
        assert!(
            m.find_pair("s3://a/p", "s3://b/q")
                .unwrap()
                .unwrap()
                .last_sync_at
                .is_none(),
            "an abandoned run vouches for nothing"
        );
    }
}
