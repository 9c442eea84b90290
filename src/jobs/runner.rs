//! Running jobs: each waits for a slot, runs as a task of its own while a ticker follows its
//! progress, and records its outcome; cancel and resume move the row first and then stop or
//! start the task; at shutdown the running jobs are marked interrupted.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::request::{JobRequest, Kind, Refused};
use super::Jobs;
use crate::copy::{self, progress::Counters, CopyOptions};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::engine::once::{self, SyncOptions};
use crate::state::blocking;
use crate::state::jobs::{Job, JobState, JobStore, Progress};
use crate::state::manifest::Manifest;

/// A job this process runs.
pub(super) struct Live {
    counters: Arc<Counters>,
    /// The latest progress, shown instead of the row's.
    pub(super) snapshot: Mutex<Progress>,
    abort: Mutex<Option<tokio::task::AbortHandle>>,
    /// Set once this process claimed the job (another worker may have taken it first): only
    /// then is its snapshot the job's progress.
    pub(super) claimed: std::sync::atomic::AtomicBool,
}

impl Live {
    fn abort(&self) {
        if let Some(a) = self.abort.lock().ok().and_then(|a| a.clone()) {
            a.abort();
        }
    }
}

/// How the job's copy is tuned now; None before its first object started.
fn tuning(c: &Counters) -> Option<crate::state::jobs::Tuning> {
    let t = &c.tuning;
    let limit = t.limit.load(Relaxed);
    (limit > 0).then(|| crate::state::jobs::Tuning {
        in_flight: t.in_flight.load(Relaxed),
        limit,
        streams: t.streams.load(Relaxed),
        chunk_size: t.chunk_size.load(Relaxed),
        rtt_ms: match t.rtt_micros.load(Relaxed) {
            0 => None,
            us => Some(us as f64 / 1000.0),
        },
    })
}

/// The copier's counters as a job's progress.
fn snapshot(c: &Counters, rate: f64, version: u64) -> Progress {
    let done = c.objects_done.load(Relaxed);
    let failed = c.objects_failed.load(Relaxed);
    let bytes = c.bytes_done.load(Relaxed);
    Progress {
        objects_done: done,
        objects_total: c.objects_listed.load(Relaxed).max(done + failed),
        objects_failed: failed,
        bytes_done: bytes,
        bytes_total: c.bytes_listed.load(Relaxed).max(bytes),
        total_known: c.listing_done.load(Relaxed),
        rate,
        tuning: tuning(c),
        version,
    }
}

impl Jobs {
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
        if let Some(live) = self.live.lock().ok().and_then(|l| l.get(&id).cloned()) {
            live.abort();
        }
        Ok(job)
    }

    /// Runs a finished job that did not succeed again, continuing from what is done.
    pub async fn resume(self: &Arc<Self>, id: i64) -> std::result::Result<Job, Refused> {
        let m = self.manifest.clone();
        let done = blocking(move || {
            let s = JobStore::new(&m);
            // a job left running by a dead process is interrupted (recover may not have run)
            s.interrupt_if_dead(id)?;
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
        self.stopping.store(true, Relaxed);
        // only the jobs this process runs: one waiting here for a slot may run on another
        // worker
        let ids: Vec<(i64, Arc<Live>)> = self
            .live
            .lock()
            .map(|l| {
                l.iter()
                    .filter(|(_, v)| v.claimed.load(Relaxed))
                    .map(|(k, v)| (*k, v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (id, live) in ids {
            let (m, owner) = (self.manifest.clone(), self.owner.clone());
            if let Err(e) = blocking(move || JobStore::new(&m).interrupt(id, &owner, None)).await {
                // its row still says running: a later start finds its process gone and marks
                // it interrupted then
                tracing::error!(job = id, error = %e, "could not mark the job interrupted");
            }
            live.abort();
        }
    }

    /// Takes, until the jobs are interrupted for a shutdown, the queued jobs this process
    /// does not follow yet (every 2 s): accepted by another worker whose slots are full, or
    /// left queued by a worker that died. Whichever worker claims one first runs it.
    pub async fn follow_queue(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if self.stopping.load(Relaxed) {
                return;
            }
            let free = self.slots.available_permits();
            if free == 0 {
                continue;
            }
            let m = self.manifest.clone();
            let Ok(ids) = blocking(move || JobStore::new(&m).queued()).await else {
                continue;
            };
            let known: Vec<i64> = self
                .live
                .lock()
                .map(|l| l.keys().copied().collect())
                .unwrap_or_default();
            // no more than it has free slots: a job waiting here is one another worker with a
            // free slot could run
            for id in ids.into_iter().filter(|id| !known.contains(id)).take(free) {
                self.spawn(id);
            }
        }
    }

    /// Runs the job in the background as soon as a slot is free.
    pub(super) fn spawn(self: &Arc<Self>, id: i64) {
        let live = Arc::new(Live {
            counters: Arc::new(Counters::default()),
            snapshot: Mutex::new(Progress::default()),
            abort: Mutex::new(None),
            claimed: Default::default(),
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
        // cancelled (or taken by another process) while it waited
        let Some(job) = self.claim(id).await? else {
            return Ok(());
        };
        live.claimed.store(true, Relaxed);
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
            id,
            req,
            self.base.clone(),
            live.counters.clone(),
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
        let snap = snapshot(&live.counters, 0.0, version.load(Relaxed));
        self.record(id, &live, snap, ending(outcome)).await
    }

    /// Takes a queued job for this process: the job as it was, or None when it is no longer
    /// queued.
    async fn claim(&self, id: i64) -> Result<Option<Job>> {
        let (m, owner) = (self.manifest.clone(), self.owner.clone());
        blocking(move || {
            let s = JobStore::new(&m);
            let prior = s.get(id)?;
            let started = s.transition(id, &[JobState::Queued], JobState::Running, Some(&owner))?;
            Ok(prior.filter(|_| started))
        })
        .await
    }

    /// Writes how the job ended, unless a cancel or an interrupt did first: then only the
    /// progress it made is kept.
    async fn record(&self, id: i64, live: &Live, snap: Progress, end: Ending) -> Result<()> {
        let (state, error, result) = end;
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
            let snap = snapshot(&live.counters, 0.0, 0);
            blocking(move || JobStore::new(&m).keep_progress(id, &snap)).await?;
        }
        Ok(())
    }
}

/// How a job ended: its final state, its error and its summary.
type Ending = (JobState, Option<String>, Option<Value>);

/// The ending of the job's task.
fn ending(outcome: std::result::Result<Result<Outcome>, tokio::task::JoinError>) -> Ending {
    match outcome {
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
    }
}

/// Turns the counters into snapshots four times a second, writes one a second.
async fn tick(manifest: Arc<Manifest>, id: i64, live: Arc<Live>, version: Arc<AtomicU64>) {
    let mut window: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let mut last_write = Instant::now();
    let mut last = Progress::default();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Instant::now();
        window.push_back((now, live.counters.bytes_done.load(Relaxed)));
        while window.len() > 1 && now.duration_since(window[0].0) > Duration::from_secs(5) {
            window.pop_front();
        }
        let mut snap = snapshot(&live.counters, rate(&window), version.load(Relaxed));
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
            if let Ok(false) = blocking(move || JobStore::new(&m).progress(id, &s)).await {
                // cancelled (or found interrupted) through another worker: stop here too
                tracing::info!(
                    job = id,
                    "the job is no longer running in the database: stopping it"
                );
                live.abort();
                return;
            }
        }
    }
}

/// Bytes per second between the first and the last (time, bytes done) of `window`.
fn rate(window: &std::collections::VecDeque<(Instant, u64)>) -> f64 {
    match (window.front(), window.back()) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            (b.1 - a.1) as f64 / b.0.duration_since(a.0).as_secs_f64()
        }
        _ => 0.0,
    }
}

/// What a job's work produced: objects that failed, and its summary.
struct Outcome {
    failed: u64,
    result: Value,
}

async fn run_job(
    manifest: Arc<Manifest>,
    id: i64,
    req: JobRequest,
    base: CopyOptions,
    counters: Arc<Counters>,
) -> Result<Outcome> {
    // checked again at run time: a queued job of an earlier process, or roots changed since
    for (field, url) in [("src", &req.src), ("dst", &req.dst)] {
        super::roots::check(field, url).map_err(|why| SlateError::BadOption {
            option: field.into(),
            why,
        })?;
    }
    let mut settings = req.settings(&base).map_err(|r| SlateError::BadOption {
        option: r.field.unwrap_or_default(),
        why: r.message,
    })?;
    settings.copy.counters = Some(counters.clone());
    settings.sync.copy.counters = Some(counters);
    // a job cut short (cancelled, its server stopped) keeps its uploads; its resume, or the
    // next copy to that destination, continues them
    settings.copy.resume = Some(crate::copy::resume::UploadsDb(manifest.clone()));
    let src = crate::copy::source(&Location::parse(&req.src)?, &settings.copy);
    let dst = Location::parse(&req.dst)?;
    match req.kind {
        // one object goes straight to the copier, as `slate copy` sends it
        Kind::Copy if crate::copy::plan(&src, &dst).await?.single.is_some() => {
            run_copy(&src, &dst, settings.copy).await
        }
        // a prefix, first run or resumed, as `slate copy` copies one: both sides listed, what
        // is equal skipped, the rows seeded into the manifest, nothing deleted
        Kind::Copy | Kind::SyncOnce => {
            let mut opts = settings.sync;
            if req.kind == Kind::Copy {
                opts.no_delete = true;
                opts.copy_only = true;
                opts.full = true;
            }
            opts.purpose = format!("job {id} ({})", req.kind.name());
            run_sync(manifest, id, &src, &dst, &opts).await
        }
        Kind::Diff => run_diff(manifest, &src, &dst, &settings.sync).await,
    }
}

async fn run_copy(src: &Location, dst: &Location, opts: CopyOptions) -> Result<Outcome> {
    let failed = |msg: &str| tracing::warn!(error = %msg, "object failed");
    let s = copy::run(src, dst, opts, &failed).await?;
    Ok(Outcome {
        failed: s.failed,
        result: json!({
            "objects": s.objects, "bytes": s.bytes, "failed": s.failed,
            "server_side": s.server_side, "seconds": s.elapsed.as_secs_f64(),
            "first_error": s.first_error,
        }),
    })
}

async fn run_sync(
    manifest: Arc<Manifest>,
    id: i64,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
) -> Result<Outcome> {
    let failed =
        move |key: &str, msg: &str| tracing::warn!(job = id, key, error = %msg, "object failed");
    let hooks = once::Hooks {
        planned: None,
        failed: Some(&failed),
    };
    let r = once::sync_once(manifest, src, dst, opts, hooks).await?;
    Ok(Outcome {
        failed: r.failed,
        result: json!({
            "copied": r.copied, "copied_bytes": r.copied_bytes, "deleted": r.deleted,
            // a copy job's result names them as a one-object copy does
            "objects": r.copied, "bytes": r.copied_bytes,
            "skipped": r.counts.equal + r.counts.skipped,
            "failed": r.failed, "listed_src": r.listed_src, "listed_dst": r.listed_dst,
            "equal": r.counts.equal, "dry_run": r.dry_run,
            "seconds": r.elapsed.as_secs_f64(), "first_error": r.first_error,
            "summary": r.line(),
        }),
    })
}

async fn run_diff(
    manifest: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
) -> Result<Outcome> {
    let scan = once::compare(&manifest, src, dst, &opts.filter, opts.rule, &mut |_, _| {}).await?;
    let c = scan.counts;
    Ok(Outcome {
        failed: 0,
        result: json!({
            "equal": c.differences() == 0,
            "only_in_source": c.only_in_source,
            "only_in_destination": c.only_in_destination + c.kept,
            "changed": c.changed,
            "metadata_changed": c.metadata_changed,
            "same": c.equal,
            "bytes_to_copy": c.bytes_to_copy,
            "listed_src": scan.listed_src, "listed_dst": scan.listed_dst,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_progress_carries_the_tuning_once_the_copy_started() {
        let c = Counters::default();
        assert_eq!(
            snapshot(&c, 0.0, 1).tuning,
            None,
            "nothing before the first object"
        );
        c.tuning.limit.store(64, Relaxed);
        c.tuning.in_flight.store(37, Relaxed);
        c.tuning.chunk_size.store(8 << 20, Relaxed);
        let t = snapshot(&c, 0.0, 2).tuning.expect("tuning");
        assert_eq!(
            (t.in_flight, t.limit, t.streams, t.chunk_size, t.rtt_ms),
            (37, 64, 0, 8 << 20, None)
        );
        c.tuning.rtt_micros.store(41_500, Relaxed);
        assert_eq!(
            snapshot(&c, 0.0, 3).tuning.and_then(|t| t.rtt_ms),
            Some(41.5)
        );
        // and the job's JSON shows it
        let mut j = serde_json::json!({});
        if let Some(t) = snapshot(&c, 0.0, 4).tuning {
            j = serde_json::to_value(t).expect("json");
        }
        assert_eq!(j["limit"], 64);
        assert_eq!(j["rtt_ms"], 41.5);
    }
}
