//! Jobs: copies, reconciles and diffs started through the API (`POST /jobs`) or the dashboard.
//!
//! A job is a row of the database (schema/0004_jobs.sql) from the moment it is accepted, so
//! that it outlives the process running it: `slate jobs` and `slate status` read the rows, a
//! restarted server finds the jobs that were running when its predecessor died and marks them
//! interrupted, and `POST /jobs/{id}/resume` runs them again, continuing from what is already
//! at the destination (a resumed copy is a reconcile without deletes, which skips every object
//! the destination already holds unchanged; a `sync-once` records each copy in the manifest as
//! it lands).
//!
//! While a job runs, its progress lives in the copier's [`Counters`]; a ticker turns them into
//! a snapshot four times a second (a version number grows with every change, the SSE event
//! id) and writes it to the row once a second.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::params;
use serde::Serialize;
use serde_json::{json, Value};

use crate::copy::{self, progress::Counters, CopyOptions, ProgressMode};
use crate::core::error::{Result, SlateError};
use crate::core::filter::{Filter, MAX_PATTERNS};
use crate::core::location::Location;
use crate::engine::once::{self, MaxDelete, SyncOptions};
use crate::state::blocking;
use crate::state::manifest::Manifest;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Copy,
    SyncOnce,
    Diff,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Copy => "copy",
            Kind::SyncOnce => "sync-once",
            Kind::Diff => "diff",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        [Kind::Copy, Kind::SyncOnce, Kind::Diff]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

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
    /// Grows with every change: the id of the job's SSE events.
    #[serde(skip)]
    pub version: u64,
}

impl Job {
    pub fn state(&self) -> JobState {
        JobState::parse(&self.state).unwrap_or(JobState::Failed)
    }
}

/// A request the API refuses: the status, the message and the field it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub field: Option<String>,
    pub message: String,
}

impl Refused {
    fn bad(field: &str, message: impl Into<String>) -> Refused {
        Refused {
            status: 400,
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn not_found(id: i64) -> Refused {
        Refused {
            status: 404,
            field: None,
            message: format!("no job {id}"),
        }
    }

    fn conflict(message: String) -> Refused {
        Refused {
            status: 409,
            field: None,
            message,
        }
    }

    fn internal(e: SlateError) -> Refused {
        Refused {
            status: 500,
            field: None,
            message: e.to_string(),
        }
    }
}

/// A checked `POST /jobs` body.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRequest {
    pub kind: Kind,
    pub src: String,
    pub dst: String,
    /// The options as given (normalised JSON object), stored with the job.
    pub options: Value,
}

const OPTION_FIELDS: &[&str] = &[
    "transfers",
    "streams",
    "chunk_size",
    "verify",
    "dry_run",
    "no_delete",
    "max_delete",
    "include",
    "exclude",
];

/// Checks a `POST /jobs` body; every refusal names the field.
pub fn parse_request(body: &[u8]) -> std::result::Result<JobRequest, Refused> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| Refused::bad("body", format!("not JSON: {e}")))?;
    let Value::Object(o) = v else {
        return Err(Refused::bad("body", "must be a JSON object"));
    };
    for k in o.keys() {
        if !["kind", "src", "dst", "options"].contains(&k.as_str()) {
            return Err(Refused::bad(
                k,
                format!("unknown field '{k}' (known: kind, src, dst, options)"),
            ));
        }
    }
    let text = |name: &str| -> std::result::Result<String, Refused> {
        match o.get(name) {
            None | Some(Value::Null) => Err(Refused::bad(name, format!("'{name}' is required"))),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Some(_) => Err(Refused::bad(
                name,
                format!("'{name}' must be a non-empty string"),
            )),
        }
    };
    let kind_text = text("kind")?;
    let kind = Kind::parse(&kind_text).ok_or_else(|| {
        Refused::bad(
            "kind",
            format!("unknown kind '{kind_text}' (known: copy, sync-once, diff)"),
        )
    })?;
    let (src, dst) = (text("src")?, text("dst")?);
    for (name, url) in [("src", &src), ("dst", &dst)] {
        Location::parse(url).map_err(|e| Refused::bad(name, e.to_string()))?;
    }
    let options = match o.get("options") {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(opts)) => {
            for k in opts.keys() {
                if !OPTION_FIELDS.contains(&k.as_str()) {
                    return Err(Refused::bad(
                        &format!("options.{k}"),
                        format!("unknown option '{k}' (known: {})", OPTION_FIELDS.join(", ")),
                    ));
                }
            }
            Value::Object(opts.clone())
        }
        Some(_) => return Err(Refused::bad("options", "must be a JSON object")),
    };
    let req = JobRequest {
        kind,
        src,
        dst,
        options,
    };
    // the options are checked now, not when the job starts
    req.settings(&CopyOptions::default())?;
    Ok(req)
}

/// A job's options turned into the copier's and the reconciler's.
#[derive(Debug, Clone)]
struct Settings {
    copy: CopyOptions,
    sync: SyncOptions,
}

impl JobRequest {
    fn settings(&self, base: &CopyOptions) -> std::result::Result<Settings, Refused> {
        let o = self.options.as_object().cloned().unwrap_or_default();
        let field = |k: &str| format!("options.{k}");
        let count = |k: &str| -> std::result::Result<Option<usize>, Refused> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=1024).contains(&n) => Ok(Some(n as usize)),
                    _ => Err(Refused::bad(&field(k), format!("'{k}' must be 1 to 1024"))),
                },
            }
        };
        let flag = |k: &str| -> std::result::Result<bool, Refused> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(Refused::bad(
                    &field(k),
                    format!("'{k}' must be true or false"),
                )),
            }
        };
        let list = |k: &str| -> std::result::Result<Vec<String>, Refused> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) if a.len() > MAX_PATTERNS => Err(Refused::bad(
                    &field(k),
                    format!(
                        "'{k}' holds {} patterns, more than the {MAX_PATTERNS} accepted",
                        a.len()
                    ),
                )),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            Refused::bad(&field(k), format!("'{k}' must be a list of patterns"))
                        })
                    })
                    .collect(),
                Some(_) => Err(Refused::bad(
                    &field(k),
                    format!("'{k}' must be a list of patterns"),
                )),
            }
        };
        let mut copy = base.clone();
        copy.progress = ProgressMode::Quiet;
        if let Some(n) = count("transfers")? {
            copy.transfers = n;
        }
        if let Some(n) = count("streams")? {
            copy.streams = n;
        }
        match o.get("chunk_size") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                copy.chunk_size = n.as_u64().unwrap_or_default()
            }
            Some(Value::String(s)) => {
                copy.chunk_size = crate::config::parse_size(s)
                    .map_err(|e| Refused::bad("options.chunk_size", e))?
            }
            Some(_) => {
                return Err(Refused::bad(
                    "options.chunk_size",
                    "'chunk_size' must be a size like \"64MiB\"",
                ))
            }
        }
        copy.verify = flag("verify")?;
        copy.validate()
            .map_err(|e| Refused::bad("options", e.to_string()))?;
        let max_delete = match o.get("max_delete") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(
                MaxDelete::parse(&n.to_string())
                    .map_err(|e| Refused::bad("options.max_delete", e))?,
            ),
            Some(Value::String(s)) => {
                Some(MaxDelete::parse(s).map_err(|e| Refused::bad("options.max_delete", e))?)
            }
            Some(_) => {
                return Err(Refused::bad(
                    "options.max_delete",
                    "'max_delete' must be a count or a percentage like \"10%\"",
                ))
            }
        };
        let (dry_run, no_delete) = (flag("dry_run")?, flag("no_delete")?);
        let filter = Filter::new(list("include")?, list("exclude")?, None)
            .map_err(|e| Refused::bad(&field(e.list), format!("'{}': {e}", e.list)))?;
        let only_sync = [
            ("dry_run", dry_run),
            ("no_delete", no_delete),
            ("max_delete", max_delete.is_some()),
        ];
        if self.kind != Kind::SyncOnce {
            if let Some((k, _)) = only_sync.iter().find(|(_, set)| *set) {
                return Err(Refused::bad(
                    &field(k),
                    format!("'{k}' applies to sync-once jobs only"),
                ));
            }
        }
        if self.kind == Kind::Copy && !filter.include().is_empty() | !filter.exclude().is_empty() {
            return Err(Refused::bad(
                "options.include",
                "include/exclude apply to sync-once and diff jobs",
            ));
        }
        Ok(Settings {
            sync: SyncOptions {
                dry_run,
                no_delete,
                max_delete,
                filter,
                full: false,
                copy: copy.clone(),
            },
            copy,
        })
    }
}

fn now_ms() -> i64 {
    crate::state::inbox::now()
}

/// Unix milliseconds as RFC 3339 UTC.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// This process, as a job's owner: `PID:START` (START from /proc, so that a reused PID is not
/// mistaken for the process that died).
pub fn owner_tag(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) may hold spaces: count fields after its closing parenthesis
    let after = stat.rsplit_once(')')?.1;
    let start = after.split_whitespace().nth(19)?;
    Some(format!("{pid}:{start}"))
}

/// Whether the process that wrote `owner` still runs.
fn owner_alive(owner: &str) -> bool {
    let Some(pid) = owner.split(':').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    owner_tag(pid).as_deref() == Some(owner)
}

const COLUMNS: &str = "id, kind, src, dst, options, state, objects_done, objects_total, \
     objects_failed, bytes_done, bytes_total, total_known, rate, created_at, started_at, \
     finished_at, error, result, owner, version";

fn row_to_job(r: &rusqlite::Row) -> rusqlite::Result<Job> {
    let ts = |i: usize| -> rusqlite::Result<Option<String>> {
        Ok(r.get::<_, Option<i64>>(i)?.map(rfc3339))
    };
    let json_col = |i: usize| -> rusqlite::Result<Option<Value>> {
        Ok(r.get::<_, Option<String>>(i)?
            .and_then(|s| serde_json::from_str(&s).ok()))
    };
    let mut state: String = r.get(5)?;
    let owner: Option<String> = r.get(18)?;
    // a running job whose process is gone was interrupted, whoever reads it
    if state == "running" && !owner.as_deref().is_some_and(owner_alive) {
        state = "interrupted".into();
    }
    Ok(Job {
        id: r.get(0)?,
        kind: r.get(1)?,
        src: r.get(2)?,
        dst: r.get(3)?,
        options: json_col(4)?.unwrap_or_else(|| json!({})),
        state,
        objects_done: r.get::<_, i64>(6)? as u64,
        objects_total: r.get::<_, i64>(7)? as u64,
        objects_failed: r.get::<_, i64>(8)? as u64,
        bytes_done: r.get::<_, i64>(9)? as u64,
        bytes_total: r.get::<_, i64>(10)? as u64,
        total_known: r.get::<_, i64>(11)? != 0,
        rate: r.get(12)?,
        created_at: ts(13)?,
        started_at: ts(14)?,
        finished_at: ts(15)?,
        error: r.get(16)?,
        result: json_col(17)?,
        version: r.get::<_, i64>(19)? as u64,
    })
}

/// The rows of the jobs table.
pub struct JobStore<'a> {
    m: &'a Manifest,
}

impl<'a> JobStore<'a> {
    pub fn new(m: &'a Manifest) -> Self {
        JobStore { m }
    }

    pub fn insert(&self, req: &JobRequest) -> Result<i64> {
        self.m.with(|c| {
            c.execute(
                "INSERT INTO jobs (kind, src, dst, options, state, created_at, version)
                 VALUES (?1, ?2, ?3, ?4, 'queued', ?5, 1)",
                params![
                    req.kind.name(),
                    req.src,
                    req.dst,
                    req.options.to_string(),
                    now_ms()
                ],
            )?;
            Ok(c.last_insert_rowid())
        })
    }

    pub fn get(&self, id: i64) -> Result<Option<Job>> {
        self.m.with(|c| {
            let mut st = c.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"))?;
            let mut rows = st.query_map([id], row_to_job)?;
            rows.next().transpose()
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
        let jobs: Vec<Job> = self.m.with(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE id < ?1 ORDER BY id DESC"
            ))?;
            let rows = st.query_map([before], row_to_job)?;
            let mut out = Vec::new();
            for j in rows {
                let j = j?;
                if state.is_none_or(|s| j.state() == s) {
                    out.push(j);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })?;
        Ok(jobs)
    }

    /// Moves a job from one of `from` to `to`; false when it was in none of them.
    fn transition(
        &self,
        id: i64,
        from: &[JobState],
        to: JobState,
        owner: Option<&str>,
    ) -> Result<bool> {
        let from: Vec<&str> = from.iter().map(|s| s.name()).collect();
        let list = from
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(",");
        let t = now_ms();
        self.m.with(|c| {
            let n = match to {
                JobState::Running => c.execute(
                    &format!(
                        "UPDATE jobs SET state = 'running', owner = ?2, started_at = ?3, \
                         finished_at = NULL, error = NULL, runs = runs + 1, version = version + 1 \
                         WHERE id = ?1 AND state IN ({list})"
                    ),
                    params![id, owner, t],
                )?,
                JobState::Queued => c.execute(
                    &format!(
                        "UPDATE jobs SET state = 'queued', owner = NULL, finished_at = NULL, \
                         version = version + 1 WHERE id = ?1 AND state IN ({list})"
                    ),
                    params![id],
                )?,
                other => c.execute(
                    &format!(
                        "UPDATE jobs SET state = ?2, finished_at = ?3, rate = 0, \
                         version = version + 1 WHERE id = ?1 AND state IN ({list})"
                    ),
                    params![id, other.name(), t],
                )?,
            };
            Ok(n > 0)
        })
    }

    fn progress(&self, id: i64, p: &Snapshot) -> Result<()> {
        self.m.with(|c| {
            c.execute(
                "UPDATE jobs SET objects_done = ?2, objects_total = ?3, objects_failed = ?4,
                    bytes_done = ?5, bytes_total = ?6, total_known = ?7, rate = ?8, version = ?9
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
                    p.version as i64
                ],
            )
            .map(|_| ())
        })
    }

    /// Keeps the counts a job reached before it was cancelled or interrupted.
    fn keep_progress(&self, id: i64, p: &Snapshot) -> Result<()> {
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
    fn finish(
        &self,
        id: i64,
        state: JobState,
        p: &Snapshot,
        error: Option<&str>,
        result: Option<&Value>,
    ) -> Result<bool> {
        self.m.with(|c| {
            let n = c.execute(
                "UPDATE jobs SET state = ?2, finished_at = ?3, error = ?4, result = ?5,
                    objects_done = ?6, objects_total = ?7, objects_failed = ?8, bytes_done = ?9,
                    bytes_total = ?10, total_known = 1, rate = 0, version = MAX(version, ?11) + 1
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
        let rows: Vec<(String, Option<String>, i64)> = self.m.with(|c| {
            let mut st = c.prepare_cached("SELECT state, owner, bytes_done FROM jobs")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect()
        })?;
        let mut counts = JobCounts::default();
        for (state, owner, bytes) in rows {
            let state = match JobState::parse(&state) {
                Some(JobState::Running) if !owner.as_deref().is_some_and(owner_alive) => {
                    JobState::Interrupted
                }
                Some(s) => s,
                None => continue,
            };
            counts.by_state[state as usize] += 1;
            counts.bytes_done += bytes.max(0) as u64;
        }
        Ok(counts)
    }

    /// Jobs marked running by processes that are gone become interrupted; returns their ids
    /// and the ids of queued jobs no live process has taken.
    fn recover(&self) -> Result<(Vec<i64>, Vec<i64>)> {
        let rows: Vec<(i64, String, Option<String>)> = self.m.with(|c| {
            let mut st = c.prepare(
                "SELECT id, state, owner FROM jobs WHERE state IN ('running', 'queued') ORDER BY id",
            )?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect()
        })?;
        let (mut interrupted, mut queued) = (Vec::new(), Vec::new());
        for (id, state, owner) in rows {
            if state == "running" && !owner.as_deref().is_some_and(owner_alive) {
                if self.transition(id, &[JobState::Running], JobState::Interrupted, None)? {
                    interrupted.push(id);
                }
            } else if state == "queued" {
                queued.push(id);
            }
        }
        Ok((interrupted, queued))
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

/// `slate_jobs{state}` and `slate_job_bytes_total` in Prometheus text.
pub fn render_metrics(c: &JobCounts) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "# HELP slate_jobs Jobs in the database, by state.\n# TYPE slate_jobs gauge\n",
    );
    for s in JobState::ALL {
        let _ = writeln!(
            out,
            "slate_jobs{{state=\"{}\"}} {}",
            s.name(),
            c.by_state[s as usize]
        );
    }
    let _ = writeln!(
        out,
        "# HELP slate_job_bytes_total Bytes copied by the jobs in the database.\n\
         # TYPE slate_job_bytes_total counter\nslate_job_bytes_total {}",
        c.bytes_done
    );
    out
}

/// A point in a job's progress.
#[derive(Debug, Clone, Default, PartialEq)]
struct Snapshot {
    objects_done: u64,
    objects_total: u64,
    objects_failed: u64,
    bytes_done: u64,
    bytes_total: u64,
    total_known: bool,
    rate: f64,
    version: u64,
}

impl Snapshot {
    fn of(c: &Counters, rate: f64, version: u64) -> Snapshot {
        let done = c.objects_done.load(Relaxed);
        let failed = c.objects_failed.load(Relaxed);
        let bytes = c.bytes_done.load(Relaxed);
        Snapshot {
            objects_done: done,
            objects_total: c.objects_listed.load(Relaxed).max(done + failed),
            objects_failed: failed,
            bytes_done: bytes,
            bytes_total: c.bytes_listed.load(Relaxed).max(bytes),
            total_known: c.listing_done.load(Relaxed),
            rate,
            version,
        }
    }

    fn same_progress(&self, o: &Snapshot) -> bool {
        Snapshot {
            version: 0,
            ..self.clone()
        } == Snapshot {
            version: 0,
            ..o.clone()
        }
    }

    fn apply(&self, j: &mut Job) {
        j.objects_done = self.objects_done;
        j.objects_total = self.objects_total;
        j.objects_failed = self.objects_failed;
        j.bytes_done = self.bytes_done;
        j.bytes_total = self.bytes_total;
        j.total_known = self.total_known;
        j.rate = self.rate;
        j.version = j.version.max(self.version);
    }
}

/// A job this process runs.
struct Live {
    counters: Arc<Counters>,
    snapshot: Mutex<Snapshot>,
    abort: Mutex<Option<tokio::task::AbortHandle>>,
}

/// The jobs of one process: starts them, follows their progress, cancels and resumes them.
pub struct Jobs {
    manifest: Arc<Manifest>,
    base: CopyOptions,
    slots: Arc<tokio::sync::Semaphore>,
    live: Mutex<HashMap<i64, Arc<Live>>>,
    owner: String,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("owner", &self.owner).finish()
    }
}

impl Jobs {
    /// Jobs run with `base`'s copier settings (the config's), at most `max_running` at once.
    pub fn new(manifest: Arc<Manifest>, base: CopyOptions, max_running: usize) -> Arc<Jobs> {
        Arc::new(Jobs {
            manifest,
            base,
            slots: Arc::new(tokio::sync::Semaphore::new(max_running.max(1))),
            live: Mutex::new(HashMap::new()),
            owner: owner_tag(std::process::id()).unwrap_or_else(|| std::process::id().to_string()),
        })
    }

    /// At start: jobs whose process died while they ran become interrupted; queued jobs that
    /// no process runs are started. Returns (interrupted, started).
    pub async fn recover(self: &Arc<Self>) -> Result<(usize, usize)> {
        let m = self.manifest.clone();
        let (interrupted, queued) = blocking(move || JobStore::new(&m).recover()).await?;
        for id in &queued {
            self.spawn(*id);
        }
        Ok((interrupted.len(), queued.len()))
    }

    /// Accepts a job: stored queued, then started as soon as a slot is free.
    pub async fn create(self: &Arc<Self>, body: &[u8]) -> std::result::Result<Job, Refused> {
        let req = parse_request(body)?;
        let m = self.manifest.clone();
        let id = blocking(move || JobStore::new(&m).insert(&req))
            .await
            .map_err(Refused::internal)?;
        self.spawn(id);
        self.get(id).await?.ok_or_else(|| Refused::not_found(id))
    }

    /// The job, with the live progress when this process runs it.
    pub async fn get(&self, id: i64) -> std::result::Result<Option<Job>, Refused> {
        let m = self.manifest.clone();
        let job = blocking(move || JobStore::new(&m).get(id))
            .await
            .map_err(Refused::internal)?;
        Ok(job.map(|j| self.overlay(j)))
    }

    pub async fn list(
        &self,
        state: Option<JobState>,
        limit: usize,
        before: Option<i64>,
    ) -> std::result::Result<Vec<Job>, Refused> {
        let m = self.manifest.clone();
        let jobs = blocking(move || JobStore::new(&m).list(state, limit, before))
            .await
            .map_err(Refused::internal)?;
        Ok(jobs.into_iter().map(|j| self.overlay(j)).collect())
    }

    fn overlay(&self, mut j: Job) -> Job {
        if j.state() == JobState::Running {
            let live = self.live.lock().ok().and_then(|l| l.get(&j.id).cloned());
            if let Some(live) = live {
                if let Ok(s) = live.snapshot.lock() {
                    s.apply(&mut j);
                }
            }
        }
        j
    }

    /// Cancels a queued or running job. A running job stops at once: objects in flight are
    /// abandoned before they become visible (temp files removed, multipart uploads aborted).
    pub async fn cancel(self: &Arc<Self>, id: i64) -> std::result::Result<Job, Refused> {
        let m = self.manifest.clone();
        let done = blocking(move || {
            JobStore::new(&m).transition(
                id,
                &[JobState::Queued, JobState::Running],
                JobState::Cancelled,
                None,
            )
        })
        .await
        .map_err(Refused::internal)?;
        let job = self.get(id).await?.ok_or_else(|| Refused::not_found(id))?;
        if !done {
            return Err(Refused::conflict(format!(
                "job {id} is {}: only a queued or running job can be cancelled",
                job.state
            )));
        }
        let live = self.live.lock().ok().and_then(|l| l.get(&id).cloned());
        if let Some(abort) = live.and_then(|l| l.abort.lock().ok().and_then(|a| a.clone())) {
            abort.abort();
        }
        Ok(job)
    }

    /// Runs a finished job that did not succeed again, continuing from what is done.
    pub async fn resume(self: &Arc<Self>, id: i64) -> std::result::Result<Job, Refused> {
        let m = self.manifest.clone();
        let done = blocking(move || {
            let s = JobStore::new(&m);
            // a job left running by a dead process is interrupted (recover may not have run)
            if let Some(j) = s.get(id)? {
                if j.state() == JobState::Interrupted {
                    s.transition(id, &[JobState::Running], JobState::Interrupted, None)?;
                }
            }
            s.transition(
                id,
                &[JobState::Interrupted, JobState::Failed, JobState::Cancelled],
                JobState::Queued,
                None,
            )
        })
        .await
        .map_err(Refused::internal)?;
        let job = self.get(id).await?.ok_or_else(|| Refused::not_found(id))?;
        if !done {
            return Err(Refused::conflict(format!(
                "job {id} is {}: only an interrupted, failed or cancelled job can be resumed",
                job.state
            )));
        }
        self.spawn(id);
        Ok(job)
    }

    /// Marks the jobs this process runs as interrupted and stops them (shutdown): a restart or
    /// a resume continues them.
    pub async fn interrupt_all(&self) {
        let ids: Vec<(i64, Arc<Live>)> = self
            .live
            .lock()
            .map(|l| l.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        for (id, live) in ids {
            let m = self.manifest.clone();
            let _ = blocking(move || {
                JobStore::new(&m).transition(id, &[JobState::Running], JobState::Interrupted, None)
            })
            .await;
            if let Some(a) = live.abort.lock().ok().and_then(|a| a.clone()) {
                a.abort();
            }
        }
    }

    fn spawn(self: &Arc<Self>, id: i64) {
        let live = Arc::new(Live {
            counters: Arc::new(Counters::default()),
            snapshot: Mutex::new(Snapshot::default()),
            abort: Mutex::new(None),
        });
        if let Ok(mut l) = self.live.lock() {
            l.insert(id, live.clone());
        }
        let jobs = self.clone();
        tokio::spawn(async move {
            let r = jobs.clone().drive(id, live).await;
            if let Err(e) = r {
                tracing::error!(job = id, error = %e, "job bookkeeping failed");
            }
            if let Ok(mut l) = jobs.live.lock() {
                l.remove(&id);
            }
        });
    }

    /// Waits for a slot, runs the job, records its outcome.
    async fn drive(self: Arc<Self>, id: i64, live: Arc<Live>) -> Result<()> {
        let _slot = self.slots.clone().acquire_owned().await.ok();
        let (m, owner) = (self.manifest.clone(), self.owner.clone());
        let job = blocking(move || {
            let s = JobStore::new(&m);
            let prior = s.get(id)?;
            let started = s.transition(id, &[JobState::Queued], JobState::Running, Some(&owner))?;
            Ok(prior.filter(|_| started))
        })
        .await?;
        // cancelled (or taken by another process) while it waited
        let Some(job) = job else { return Ok(()) };
        let resumed = job.started_at.is_some();
        let req = JobRequest {
            kind: Kind::parse(&job.kind).unwrap_or(Kind::Copy),
            src: job.src.clone(),
            dst: job.dst.clone(),
            options: job.options.clone(),
        };
        let version = Arc::new(AtomicU64::new(job.version + 1));
        tracing::info!(job = id, kind = %job.kind, src = %job.src, dst = %job.dst, resumed, "job started");

        let work = tokio::spawn(run_job(
            self.manifest.clone(),
            req,
            self.base.clone(),
            live.counters.clone(),
            resumed,
        ));
        if let Ok(mut a) = live.abort.lock() {
            *a = Some(work.abort_handle());
        }
        let ticker = tokio::spawn(tick(
            self.manifest.clone(),
            id,
            live.clone(),
            version.clone(),
        ));
        let outcome = work.await;
        ticker.abort();
        let rate = 0.0;
        let snap = Snapshot::of(&live.counters, rate, version.load(Relaxed));
        let (state, error, result) = match outcome {
            Ok(Ok(Outcome { failed: 0, result })) => (JobState::Succeeded, None, Some(result)),
            Ok(Ok(Outcome { failed, result })) => (
                JobState::Failed,
                Some(format!(
                    "{failed} objects failed; first error: {}",
                    result["first_error"].as_str().unwrap_or("unknown")
                )),
                Some(result),
            ),
            Ok(Err(e)) => (JobState::Failed, Some(e.to_string()), None),
            // aborted: cancelled or interrupted, already recorded by who aborted it
            Err(e) if e.is_cancelled() => (JobState::Cancelled, None, None),
            Err(e) => (
                JobState::Failed,
                Some(format!("the job panicked: {e}")),
                None,
            ),
        };
        let m = self.manifest.clone();
        let (err2, res2) = (error.clone(), result.clone());
        let recorded = blocking(move || {
            JobStore::new(&m).finish(id, state, &snap, err2.as_deref(), res2.as_ref())
        })
        .await?;
        if recorded {
            tracing::info!(
                job = id,
                state = state.name(),
                error = error.as_deref().unwrap_or(""),
                "job finished"
            );
        } else {
            // cancelled or interrupted meanwhile: keep the progress it made
            let m = self.manifest.clone();
            let snap = Snapshot::of(&live.counters, 0.0, 0);
            blocking(move || JobStore::new(&m).keep_progress(id, &snap)).await?;
        }
        Ok(())
    }
}

/// Turns the counters into snapshots four times a second, writes one a second.
async fn tick(manifest: Arc<Manifest>, id: i64, live: Arc<Live>, version: Arc<AtomicU64>) {
    let mut window: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let mut last_write = Instant::now();
    let mut last = Snapshot::default();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Instant::now();
        let bytes = live.counters.bytes_done.load(Relaxed);
        window.push_back((now, bytes));
        while window.len() > 1 && now.duration_since(window[0].0) > Duration::from_secs(5) {
            window.pop_front();
        }
        let rate = match (window.front(), window.back()) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                (b.1 - a.1) as f64 / b.0.duration_since(a.0).as_secs_f64()
            }
            _ => 0.0,
        };
        let mut snap = Snapshot::of(&live.counters, rate, version.load(Relaxed));
        if !snap.same_progress(&last) {
            snap.version = version.fetch_add(1, Relaxed) + 1;
            if let Ok(mut s) = live.snapshot.lock() {
                *s = snap.clone();
            }
            last = snap.clone();
        }
        if last_write.elapsed() >= Duration::from_secs(1) {
            last_write = Instant::now();
            let (m, s) = (manifest.clone(), last.clone());
            let _ = blocking(move || JobStore::new(&m).progress(id, &s)).await;
        }
    }
}

/// What a job's work produced: objects that failed, and its summary.
struct Outcome {
    failed: u64,
    result: Value,
}

async fn run_job(
    manifest: Arc<Manifest>,
    req: JobRequest,
    base: CopyOptions,
    counters: Arc<Counters>,
    resumed: bool,
) -> Result<Outcome> {
    let mut settings = req.settings(&base).map_err(|r| SlateError::BadOption {
        option: r.field.unwrap_or_default(),
        why: r.message,
    })?;
    settings.copy.counters = Some(counters.clone());
    settings.sync.copy.counters = Some(counters);
    let src = Location::parse(&req.src)?;
    let dst = Location::parse(&req.dst)?;
    match req.kind {
        Kind::Copy if !resumed => {
            let s = copy::run(&src, &dst, settings.copy).await?;
            Ok(Outcome {
                failed: s.failed,
                result: json!({
                    "objects": s.objects, "bytes": s.bytes, "failed": s.failed,
                    "server_side": s.server_side, "seconds": s.elapsed.as_secs_f64(),
                    "first_error": s.first_error,
                }),
            })
        }
        // a resumed copy: what the destination already holds unchanged is skipped
        Kind::Copy | Kind::SyncOnce => {
            let mut opts = settings.sync;
            if req.kind == Kind::Copy {
                opts.no_delete = true;
            }
            let r = once::sync_once(manifest, &src, &dst, &opts).await?;
            Ok(Outcome {
                failed: r.failed,
                result: json!({
                    "copied": r.copied, "copied_bytes": r.copied_bytes, "deleted": r.deleted,
                    "failed": r.failed, "listed_src": r.listed_src, "listed_dst": r.listed_dst,
                    "equal": r.counts.equal, "dry_run": r.dry_run,
                    "seconds": r.elapsed.as_secs_f64(), "first_error": r.first_error,
                    "summary": r.line(),
                }),
            })
        }
        Kind::Diff => {
            let filter = settings.sync.filter.clone();
            let scan = once::scan(&manifest, &src, &dst, &filter, true).await?;
            let c = once::plan_all(&manifest, scan.pair.id, true, &filter, |_, _| {}).await?;
            Ok(Outcome {
                failed: 0,
                result: json!({
                    "equal": c.differences() == 0,
                    "only_in_source": c.only_in_source,
                    "only_in_destination": c.only_in_destination + c.kept,
                    "changed": c.changed,
                    "same": c.equal,
                    "bytes_to_copy": c.bytes_to_copy,
                    "listed_src": scan.listed_src, "listed_dst": scan.listed_dst,
                }),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_field_by_field() {
        let ok = parse_request(br#"{"kind":"copy","src":"/tmp/a","dst":"s3://b/x"}"#).unwrap();
        assert_eq!((ok.kind, ok.src.as_str()), (Kind::Copy, "/tmp/a"));
        let ok = parse_request(
            br#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"no_delete":true,"max_delete":"10%","transfers":4,"chunk_size":"8MiB","include":["x/**"]}}"#,
        )
        .unwrap();
        assert_eq!(ok.kind, Kind::SyncOnce);
        // (body, the field named)
        let table: &[(&str, &str)] = &[
            ("not json", "body"),
            ("[1]", "body"),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","extra":1}"#,
                "extra",
            ),
            (r#"{"src":"/a","dst":"/b"}"#, "kind"),
            (r#"{"kind":"move","src":"/a","dst":"/b"}"#, "kind"),
            (r#"{"kind":"copy","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"nope://x","dst":"/b"}"#, "src"),
            (r#"{"kind":"copy","src":"/a","dst":"s3://"}"#, "dst"),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":3}"#,
                "options",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"speed":1}}"#,
                "options.speed",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"transfers":0}}"#,
                "options.transfers",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"chunk_size":"huge"}}"#,
                "options.chunk_size",
            ),
            (
                r#"{"kind":"copy","src":"/a","dst":"/b","options":{"no_delete":true}}"#,
                "options.no_delete",
            ),
            (
                r#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"max_delete":"x"}}"#,
                "options.max_delete",
            ),
            (
                r#"{"kind":"sync-once","src":"/a","dst":"/b","options":{"verify":"yes"}}"#,
                "options.verify",
            ),
            (
                r#"{"kind":"diff","src":"/a","dst":"/b","options":{"include":[1]}}"#,
                "options.include",
            ),
            (
                r#"{"kind":"diff","src":"/a","dst":"/b","options":{"exclude":["ok/*",""]}}"#,
                "options.exclude",
            ),
        ];
        for (body, field) in table {
            let e = parse_request(body.as_bytes()).expect_err(body);
            assert_eq!(
                (e.status, e.field.as_deref()),
                (400, Some(*field)),
                "{body}: {e:?}"
            );
            assert!(!e.message.is_empty() && !e.message.contains('\n'), "{e:?}");
        }
    }

    #[test]
    fn glob_lists_are_bounded_and_bad_ones_named() {
        let body = |opts: serde_json::Value| {
            json!({"kind": "sync-once", "src": "/a", "dst": "/b", "options": opts}).to_string()
        };
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("k{i}/*")).collect();
        let long = format!(
            "keep/{}",
            "x".repeat(crate::core::filter::MAX_PATTERN_BYTES)
        );
        let cases = [
            (
                json!({ "include": many }),
                "options.include",
                "101 patterns",
            ),
            (
                json!({"exclude": ["a/*", long]}),
                "options.exclude",
                "'keep/xxx",
            ),
            (json!({"include": [""]}), "options.include", "empty pattern"),
        ];
        for (opts, field, says) in cases {
            let e = parse_request(body(opts).as_bytes()).unwrap_err();
            assert_eq!((e.status, e.field.as_deref()), (400, Some(field)), "{e:?}");
            assert!(e.message.contains(says), "{e:?}");
            assert!(
                e.message.len() < 200,
                "the refusal does not echo a long pattern: {e:?}"
            );
        }
        let req = parse_request(
            body(json!({"include": ["?.txt", "x[1]/**"], "exclude": ["*.tmp"]})).as_bytes(),
        )
        .unwrap();
        let f = req.settings(&CopyOptions::default()).unwrap().sync.filter;
        assert!(f.key("é.txt") && f.key("x[1]/a/b") && !f.key("x[1]/a.tmp") && !f.key("ab.txt"));
    }

    #[test]
    fn jobs_move_through_their_states_and_dead_owners_interrupt() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::open(&dir.path().join("s.db")).unwrap();
        let s = JobStore::new(&m);
        let req = parse_request(br#"{"kind":"copy","src":"/a","dst":"/b"}"#).unwrap();
        let a = s.insert(&req).unwrap();
        let b = s.insert(&req).unwrap();
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
        let snap = Snapshot {
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
        assert_eq!(counts.bytes_done, 30);
        let text = render_metrics(&counts);
        assert!(
            text.contains("slate_jobs{state=\"succeeded\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("slate_jobs{state=\"running\"} 0\n"), "{text}");
        assert!(text.contains("slate_job_bytes_total 30\n"), "{text}");
    }
}
