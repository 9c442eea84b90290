//! The jobs table (schema/sqlite/0004_jobs.sql): one row per job started through the API, from the
//! moment it is accepted, so that it outlives the process running it. A row marked running by
//! a process that is gone reads as interrupted, whoever reads it.

use super::db::{params, DbResult, OptionalExtension, Row};
use serde::Serialize;
use serde_json::{json, Value};

use crate::core::error::Result;
use crate::core::units::rfc3339;
use crate::state::inbox::now as now_ms;
use crate::state::manifest::Manifest;
use crate::state::owner::{host_id, owner_alive};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Its process died while it ran; can be resumed.
    Interrupted,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Interrupted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Finished: nothing will change it but a resume.
    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }

    /// `slate status`'s exit code: 0 succeeded, 1 failed, 3 cancelled or interrupted,
    /// 4 not finished.
    pub fn exit_code(self) -> i32 {
        match self {
            JobState::Succeeded => 0,
            JobState::Failed => 1,
            JobState::Cancelled | JobState::Interrupted => 3,
            JobState::Queued | JobState::Running => 4,
        }
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Job {
    pub id: i64,
    pub kind: String,
    pub src: String,
    pub dst: String,
    pub options: Value,
    pub state: String,
    pub objects_done: u64,
    pub objects_total: u64,
    pub objects_failed: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// The totals are final (the listing is complete).
    pub total_known: bool,
    /// Bytes per second over the last seconds.
    pub rate: f64,
    pub created_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub error: Option<String>,
    pub result: Option<Value>,
    /// How the copy of a running job is tuned now (null otherwise: not kept in the row).
    pub tuning: Option<Tuning>,
    /// Grows with every change: the id of the job's SSE events.
    #[serde(skip)]
    pub version: u64,
}

impl Job {
    pub fn state(&self) -> JobState {
        JobState::parse(&self.state).unwrap_or(JobState::Failed)
    }
}

/// The concurrency of a running job's copy now (the copier's `progress::Tuning`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Tuning {
    /// Objects being copied now.
    pub in_flight: u64,
    /// Objects that may be in flight now (adaptive unless the job asked for `transfers`).
    pub limit: u64,
    /// Chunks in flight of the last large object (0: none yet).
    pub streams: u64,
    /// The chunk size last chosen, bytes (0: none yet).
    pub chunk_size: u64,
    /// The round-trip estimate, milliseconds (null: none yet).
    pub rtt_ms: Option<f64>,
}

/// A point in a job's progress, as its row keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub objects_done: u64,
    pub objects_total: u64,
    pub objects_failed: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub total_known: bool,
    pub rate: f64,
    /// Live only: not kept in the row.
    pub tuning: Option<Tuning>,
    pub version: u64,
}

impl Progress {
    /// The same counts and rate, whatever the versions.
    pub fn same_progress(&self, o: &Progress) -> bool {
        Progress {
            version: 0,
            ..self.clone()
        } == Progress {
            version: 0,
            ..o.clone()
        }
    }

    /// Shows this progress in `j` (a newer version than the row's wins).
    pub fn apply(&self, j: &mut Job) {
        j.objects_done = self.objects_done;
        j.objects_total = self.objects_total;
        j.objects_failed = self.objects_failed;
        j.bytes_done = self.bytes_done;
        j.bytes_total = self.bytes_total;
        j.total_known = self.total_known;
        j.rate = self.rate;
        j.tuning = self.tuning.clone();
        j.version = j.version.max(self.version);
    }
}

/// Jobs per state, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Indexed by `JobState as usize`.
    pub by_state: [u64; 6],
    /// Bytes copied by all jobs in the database.
    pub bytes_done: u64,
}

const COLUMNS: &str = "id, kind, src, dst, options, state, objects_done, objects_total, \
     objects_failed, bytes_done, bytes_total, total_known, rate, created_at, started_at, \
     finished_at, error, result, owner, version, host, heartbeat_at";

/// How long a running job of another host may go without writing its progress (its worker
/// writes it every second) before it reads as interrupted.
/// Longer than a worker waits for PostgreSQL to come back (a restart stops every heartbeat).
pub const JOB_STALE_MS: i64 = 90_000;

/// The state a row reads as: a running job whose process is gone was interrupted.
fn read_state(
    state: &str,
    owner: Option<&str>,
    host: Option<&str>,
    heartbeat_at: Option<i64>,
) -> Option<JobState> {
    match JobState::parse(state)? {
        JobState::Running => {
            let alive = match host {
                // on this host (or recorded before hosts were): the process can be asked
                Some(h) if !crate::state::owner::same_host(h, &host_id()) => {
                    heartbeat_at.is_some_and(|t| now_ms() - t < JOB_STALE_MS)
                }
                _ => owner.is_some_and(owner_alive),
            };
            Some(if alive {
                JobState::Running
            } else {
                JobState::Interrupted
            })
        }
        s => Some(s),
    }
}

fn row_to_job(r: &Row) -> DbResult<Job> {
    let ts =
        |i: usize| -> DbResult<Option<String>> { Ok(r.get::<_, Option<i64>>(i)?.map(rfc3339)) };
    let json_col = |i: usize| -> DbResult<Option<Value>> {
        Ok(r.get::<_, Option<String>>(i)?
            .and_then(|s| serde_json::from_str(&s).ok()))
    };
    let count = |i: usize| -> DbResult<u64> { Ok(r.get::<_, i64>(i)? as u64) };
    let mut state: String = r.get(5)?;
    let owner: Option<String> = r.get(18)?;
    let host: Option<String> = r.get(20)?;
    let heartbeat: Option<i64> = r.get(21)?;
    if read_state(&state, owner.as_deref(), host.as_deref(), heartbeat)
        == Some(JobState::Interrupted)
    {
        state = JobState::Interrupted.name().into();
    }
    Ok(Job {
        id: r.get(0)?,
        kind: r.get(1)?,
        src: r.get(2)?,
        dst: r.get(3)?,
        options: json_col(4)?.unwrap_or_else(|| json!({})),
        state,
        objects_done: count(6)?,
        objects_total: count(7)?,
        objects_failed: count(8)?,
        bytes_done: count(9)?,
        bytes_total: count(10)?,
        total_known: r.get::<_, i64>(11)? != 0,
        rate: r.get(12)?,
        created_at: ts(13)?,
        started_at: ts(14)?,
        finished_at: ts(15)?,
        error: r.get(16)?,
        result: json_col(17)?,
        tuning: None,
        version: count(19)?,
    })
}

/// `UPDATE` that moves a job from the states in `list` (quoted, comma-separated) to `to`.
fn transition_sql(to: JobState, list: &str) -> String {
    let set = match to {
        JobState::Running => {
            "state = 'running', owner = ?2, started_at = ?3, finished_at = NULL, error = NULL, \
             runs = runs + 1, host = ?4, heartbeat_at = ?3"
        }
        JobState::Queued => "state = 'queued', owner = NULL, finished_at = NULL",
        _ => "state = ?2, finished_at = ?3, rate = 0",
    };
    format!("UPDATE jobs SET {set}, version = version + 1 WHERE id = ?1 AND state IN ({list})")
}

/// The rows of the jobs table.
pub struct JobStore<'a> {
    m: &'a Manifest,
}

impl<'a> JobStore<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        JobStore { m }
    }

    /// Stores a new job, queued; returns its id. `options` is the JSON object it was given.
    pub fn insert(&self, kind: &str, src: &str, dst: &str, options: &Value) -> Result<i64> {
        let t = now_ms();
        self.m.with(|c| {
            c.query_row(
                "INSERT INTO jobs (kind, src, dst, options, state, created_at, version)
                 VALUES (?1, ?2, ?3, ?4, 'queued', ?5, 1) RETURNING id",
                params![kind, src, dst, options.to_string(), t],
                |r| r.get(0),
            )
        })
    }

    pub fn get(&self, id: i64) -> Result<Option<Job>> {
        self.m.read(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"),
                params![id],
                row_to_job,
            )
            .optional()
        })
    }

    /// Newest first: up to `limit` jobs with an id below `before`, in `state` if given.
    pub fn list(
        &self,
        state: Option<JobState>,
        limit: usize,
        before: Option<i64>,
    ) -> Result<Vec<Job>> {
        let before = before.unwrap_or(i64::MAX);
        self.m.read(|c| {
            // by pages of the index, filtered here (the state as read depends on the owner)
            let mut out = Vec::new();
            let mut below = before;
            loop {
                let page = c.query_map(
                    &format!("SELECT {COLUMNS} FROM jobs WHERE id < ?1 ORDER BY id DESC LIMIT 200"),
                    params![below],
                    row_to_job,
                )?;
                let Some(last) = page.last().map(|j| j.id) else {
                    return Ok(out);
                };
                for j in page {
                    if state.is_none_or(|s| j.state() == s) {
                        out.push(j);
                        if out.len() >= limit {
                            return Ok(out);
                        }
                    }
                }
                below = last;
            }
        })
    }

    /// Moves a job from one of `from` to `to` (recording `owner` when it starts running);
    /// false when it was in none of them.
    pub fn transition(
        &self,
        id: i64,
        from: &[JobState],
        to: JobState,
        owner: Option<&str>,
    ) -> Result<bool> {
        let list = from
            .iter()
            .map(|s| format!("'{}'", s.name()))
            .collect::<Vec<_>>()
            .join(",");
        let sql = transition_sql(to, &list);
        let t = now_ms();
        self.m.with(|c| {
            let n = match to {
                JobState::Running => c.execute(&sql, params![id, owner, t, host_id()])?,
                JobState::Queued => c.execute(&sql, params![id])?,
                other => c.execute(&sql, params![id, other.name(), t])?,
            };
            Ok(n > 0)
        })
    }

    /// Writes a running job's progress, and its heartbeat; false (nothing written) once it
    /// is no longer running: cancelled, perhaps through another worker.
    pub fn progress(&self, id: i64, p: &Progress) -> Result<bool> {
        let t = now_ms();
        self.m.with(|c| {
            c.execute(
                "UPDATE jobs SET objects_done = ?2, objects_total = ?3, objects_failed = ?4,
                    bytes_done = ?5, bytes_total = ?6, total_known = ?7, rate = ?8, version = ?9,
                    heartbeat_at = ?10
                 WHERE id = ?1 AND state = 'running'",
                params![
                    id,
                    p.objects_done as i64,
                    p.objects_total as i64,
                    p.objects_failed as i64,
                    p.bytes_done as i64,
                    p.bytes_total as i64,
                    p.total_known as i64,
                    p.rate,
                    p.version as i64,
                    t
                ],
            )
            .map(|n| n > 0)
        })
    }

    /// Marks a running job interrupted, only if the row still names the runner `owner` (and,
    /// given, the heartbeat `beat` read when it was found dead): a job another worker took or
    /// that beat meanwhile stays running. True when it moved.
    pub fn interrupt(&self, id: i64, owner: &str, beat: Option<i64>) -> Result<bool> {
        let t = now_ms();
        self.m.with(|c| {
            c.execute(
                "UPDATE jobs SET state = 'interrupted', finished_at = ?4, rate = 0,
                    version = version + 1
                 WHERE id = ?1 AND state = 'running' AND COALESCE(owner, '') = ?2
                   AND (CAST(?3 AS BIGINT) IS NULL OR COALESCE(heartbeat_at, -1) = ?3)",
                params![id, owner, beat, t],
            )
            .map(|n| n > 0)
        })
    }

    /// A running job whose runner is gone (as [`read_state`] decides) becomes interrupted,
    /// unless the row changed since it was read. True when it moved.
    pub fn interrupt_if_dead(&self, id: i64) -> Result<bool> {
        type Line = (String, Option<String>, Option<String>, Option<i64>);
        let row: Option<Line> = self.m.read(|c| {
            c.query_row(
                "SELECT state, owner, host, heartbeat_at FROM jobs WHERE id = ?1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
        })?;
        match row {
            Some((state, owner, host, beat))
                if state == "running"
                    && read_state(&state, owner.as_deref(), host.as_deref(), beat)
                        == Some(JobState::Interrupted) =>
            {
                self.interrupt(id, owner.as_deref().unwrap_or(""), beat.or(Some(-1)))
            }
            _ => Ok(false),
        }
    }

    /// The ids of the queued jobs, oldest first: what a worker with a free slot may take.
    pub fn queued(&self) -> Result<Vec<i64>> {
        self.m.read(|c| {
            c.query_map(
                "SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1000",
                params![],
                |r| r.get(0),
            )
        })
    }

    /// Keeps the counts a job reached before it was cancelled or interrupted.
    pub fn keep_progress(&self, id: i64, p: &Progress) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "UPDATE jobs SET objects_done = ?2, objects_failed = ?3, bytes_done = ?4,
                    version = version + 1 WHERE id = ?1",
                params![
                    id,
                    p.objects_done as i64,
                    p.objects_failed as i64,
                    p.bytes_done as i64
                ],
            )
            .map(|_| ())
        })
    }

    /// Records the outcome of a running job (only while it is still running: a cancel wins).
    pub fn finish(
        &self,
        id: i64,
        state: JobState,
        p: &Progress,
        error: Option<&str>,
        result: Option<&Value>,
    ) -> Result<bool> {
        self.m.with(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = ?2, finished_at = ?3, error = ?4, result = ?5,
                    objects_done = ?6, objects_total = ?7, objects_failed = ?8, bytes_done = ?9,
                    bytes_total = ?10, total_known = 1, rate = 0,
                    version = CASE WHEN version > ?11 THEN version ELSE ?11 END + 1
                 WHERE id = ?1 AND state = 'running'",
                params![
                    id,
                    state.name(),
                    now_ms(),
                    error,
                    result.map(Value::to_string),
                    p.objects_done as i64,
                    p.objects_total as i64,
                    p.objects_failed as i64,
                    p.bytes_done as i64,
                    p.bytes_total as i64,
                    p.version as i64
                ],
            )?;
            Ok(n > 0)
        })
    }

    /// How many jobs are in each state (as read: a dead process's running job is interrupted),
    /// with the bytes finished jobs copied.
    pub fn count_by_state(&self) -> Result<JobCounts> {
        type Line = (String, Option<String>, i64, Option<String>, Option<i64>);
        let rows: Vec<Line> = self.m.read(|c| {
            c.query_map(
                "SELECT state, owner, bytes_done, host, heartbeat_at FROM jobs",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
        })?;
        let mut counts = JobCounts::default();
        for (state, owner, bytes, host, beat) in rows {
            let Some(state) = read_state(&state, owner.as_deref(), host.as_deref(), beat) else {
                continue;
            };
            counts.by_state[state as usize] += 1;
            counts.bytes_done += bytes.max(0) as u64;
        }
        Ok(counts)
    }

    /// Jobs marked running by processes that are gone become interrupted; returns their ids
    /// and the ids of queued jobs no live process has taken.
    pub fn recover(&self) -> Result<(Vec<i64>, Vec<i64>)> {
        type Line = (i64, String, Option<String>, Option<String>, Option<i64>);
        let rows: Vec<Line> = self.m.read(|c| {
            c.query_map(
                "SELECT id, state, owner, host, heartbeat_at FROM jobs
                 WHERE state IN ('running', 'queued') ORDER BY id",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
        })?;
        let (mut interrupted, mut queued) = (Vec::new(), Vec::new());
        for (id, state, owner, host, beat) in rows {
            match read_state(&state, owner.as_deref(), host.as_deref(), beat) {
                Some(JobState::Interrupted) if state == "running" => {
                    // only if it still reads as it did: not taken, no new heartbeat
                    let moved =
                        self.interrupt(id, owner.as_deref().unwrap_or(""), beat.or(Some(-1)))?;
                    interrupted.extend(moved.then_some(id));
                }
                Some(JobState::Queued) => queued.push(id),
                _ => {}
            }
        }
        Ok((interrupted, queued))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::params;
    use crate::state::db::testing::conformance;
    use crate::state::db::Location;

    conformance!(
        jobs_move_through_their_states_and_dead_owners_interrupt,
        a_job_of_another_host_lives_by_its_heartbeat
    );

    fn a_job_of_another_host_lives_by_its_heartbeat(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let s = JobStore::new(&m);
        let id = s.insert("copy", "/a", "/b", &json!({})).unwrap();
        let me = owner_tag(std::process::id()).unwrap();
        assert!(s
            .transition(id, &[JobState::Queued], JobState::Running, Some(&me))
            .unwrap());
        assert!(
            s.progress(id, &Progress::default()).unwrap(),
            "running: written"
        );
        assert_eq!(s.get(id).unwrap().unwrap().state(), JobState::Running);
        // as if another host's worker ran it: its PID means nothing here, its heartbeat does
        let moved = |beat: i64| {
            m.with(|c| {
                c.execute(
                    "UPDATE jobs SET host = 'elsewhere', owner = '1:1', heartbeat_at = ?2 WHERE id = ?1",
                    params![id, beat],
                )
            })
            .unwrap()
        };
        moved(now_ms() - 1_000);
        assert_eq!(s.get(id).unwrap().unwrap().state(), JobState::Running);
        assert_eq!(
            s.count_by_state().unwrap().by_state[JobState::Running as usize],
            1
        );
        let stale = now_ms() - JOB_STALE_MS - 1_000;
        moved(stale);
        assert_eq!(s.get(id).unwrap().unwrap().state(), JobState::Interrupted);
        // only if the row still says what was read: another runner, or a newer beat, stay
        assert!(
            !s.interrupt(id, "2:2", Some(stale)).unwrap(),
            "another runner"
        );
        assert!(
            !s.interrupt(id, "1:1", Some(stale - 1)).unwrap(),
            "another heartbeat"
        );
        let (interrupted, _) = s.recover().unwrap();
        assert_eq!(interrupted, vec![id]);
        // cancelled through any worker: the runner's next progress write says so
        let other = s.insert("copy", "/a", "/c", &json!({})).unwrap();
        assert_eq!(s.queued().unwrap(), vec![other]);
        assert!(s
            .transition(other, &[JobState::Queued], JobState::Running, Some(&me))
            .unwrap());
        assert!(s
            .transition(other, &[JobState::Running], JobState::Cancelled, None)
            .unwrap());
        assert!(!s.progress(other, &Progress::default()).unwrap());
        assert!(s.queued().unwrap().is_empty());
    }
    use crate::state::owner::owner_tag;

    fn jobs_move_through_their_states_and_dead_owners_interrupt(loc: &Location) {
        let m = Manifest::open_at(loc).unwrap();
        let s = JobStore::new(&m);
        let a = s.insert("copy", "/a", "/b", &json!({})).unwrap();
        let b = s.insert("copy", "/a", "/b", &json!({})).unwrap();
        assert_eq!(s.get(a).unwrap().unwrap().state, "queued");
        let me = owner_tag(std::process::id()).unwrap();
        assert!(owner_alive(&me));
        assert!(s
            .transition(a, &[JobState::Queued], JobState::Running, Some(&me))
            .unwrap());
        assert!(!s
            .transition(a, &[JobState::Queued], JobState::Running, Some(&me))
            .unwrap());
        // b is claimed by a process that no longer exists (PID 1's start time is never this)
        assert!(s
            .transition(b, &[JobState::Queued], JobState::Running, Some("1:0"))
            .unwrap());
        assert_eq!(
            s.get(b).unwrap().unwrap().state,
            "interrupted",
            "read as interrupted"
        );
        let (interrupted, queued) = s.recover().unwrap();
        assert_eq!((interrupted, queued), (vec![b], vec![]));
        assert_eq!(
            s.get(a).unwrap().unwrap().state,
            "running",
            "a live owner keeps it"
        );
        let snap = Progress {
            objects_done: 3,
            bytes_done: 30,
            version: 7,
            ..Default::default()
        };
        assert!(s
            .finish(a, JobState::Succeeded, &snap, None, Some(&json!({"x": 1})))
            .unwrap());
        let j = s.get(a).unwrap().unwrap();
        assert_eq!(
            (j.state.as_str(), j.bytes_done, j.version),
            ("succeeded", 30, 8)
        );
        assert!(j.finished_at.is_some() && j.result == Some(json!({"x": 1})));
        assert!(
            !s.finish(a, JobState::Failed, &snap, None, None).unwrap(),
            "final stays final"
        );
        let newest = s.list(None, 10, None).unwrap();
        assert_eq!(newest.iter().map(|j| j.id).collect::<Vec<_>>(), vec![b, a]);
        let only = s.list(Some(JobState::Interrupted), 10, None).unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(s.list(None, 10, Some(b)).unwrap()[0].id, a, "paged by id");
        let counts = s.count_by_state().unwrap();
        assert_eq!(counts.by_state[JobState::Succeeded as usize], 1);
        assert_eq!(counts.by_state[JobState::Interrupted as usize], 1);
        assert_eq!(counts.by_state[JobState::Running as usize], 0);
        assert_eq!(counts.bytes_done, 30);
    }

    #[test]
    fn progress_compares_without_versions() {
        let a = Progress {
            bytes_done: 5,
            version: 1,
            ..Default::default()
        };
        let b = Progress {
            version: 9,
            ..a.clone()
        };
        assert!(a.same_progress(&b));
        let mut j = Job {
            id: 1,
            kind: "copy".into(),
            src: "/a".into(),
            dst: "/b".into(),
            options: json!({}),
            state: "running".into(),
            objects_done: 0,
            objects_total: 0,
            objects_failed: 0,
            bytes_done: 0,
            bytes_total: 0,
            total_known: false,
            rate: 0.0,
            created_at: None,
            started_at: None,
            finished_at: None,
            error: None,
            result: None,
            tuning: None,
            version: 4,
        };
        b.apply(&mut j);
        assert_eq!((j.bytes_done, j.version), (5, 9));
    }
}
