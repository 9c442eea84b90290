//! Jobs: copies, reconciles and diffs started through the API (`POST /jobs`) or the dashboard.
//!
//! A job is a row of the database (`crate::state::jobs`, schema/sqlite/0004_jobs.sql) from the
//! moment it is accepted, so that it outlives the process running it: `slate jobs` and
//! `slate status` read the rows, a restarted server finds the jobs that were running when its
//! predecessor died and marks them interrupted, and `POST /jobs/{id}/resume` runs them again,
//! continuing from what is already at the destination (a resumed copy is a reconcile without
//! deletes, which skips every object the destination already holds unchanged; a `sync-once`
//! records each copy in the manifest as it lands).
//!
//! The map:
//! - this file: [`Jobs`], the handle the server holds: accept, read and list jobs (with the
//!   live progress of those this process runs).
//! - [`request`]: `POST /jobs` bodies checked field by field, and a job's options turned into
//!   the copier's and the reconciler's.
//! - `runner`: running a job in a slot, its progress ticks, cancel, resume, and interrupting
//!   the running jobs at shutdown.
//!
//! While a job runs, its progress lives in the copier's `Counters`; a ticker turns them into
//! a snapshot four times a second (a version number grows with every change, the SSE event
//! id) and writes it to the row once a second.

pub mod request;
pub mod roots;
mod runner;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::copy::CopyOptions;
use crate::core::error::Result;
use crate::state::blocking;
use crate::state::jobs::{Job, JobState, JobStore};
use crate::state::manifest::Manifest;
use crate::state::owner::owner_tag;

use self::request::{parse_request, Refused};
use self::runner::Live;

/// The jobs of one process: starts them, follows their progress, cancels and resumes them.
pub struct Jobs {
    manifest: Arc<Manifest>,
    base: CopyOptions,
    slots: Arc<tokio::sync::Semaphore>,
    live: Mutex<HashMap<i64, Arc<Live>>>,
    owner: String,
    /// Set at shutdown: no more queued jobs are taken.
    stopping: std::sync::atomic::AtomicBool,
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
            stopping: Default::default(),
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
        // local folders only under the roots the operator listed
        for (field, url) in [("src", &req.src), ("dst", &req.dst)] {
            roots::check(field, url).map_err(|why| Refused {
                status: 403,
                field: Some(field.into()),
                message: why,
            })?;
        }
        let m = self.manifest.clone();
        let id = blocking(move || {
            JobStore::new(&m).insert(req.kind.name(), &req.src, &req.dst, &req.options)
        })
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

    /// Newest first: up to `limit` jobs with an id below `before`, in `state` if given.
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

    /// A running job as its row says, with the newer progress this process holds.
    fn overlay(&self, mut j: Job) -> Job {
        if j.state() == JobState::Running {
            let live = self.live.lock().ok().and_then(|l| l.get(&j.id).cloned());
            if let Some(live) =
                live.filter(|l| l.claimed.load(std::sync::atomic::Ordering::Relaxed))
            {
                if let Ok(s) = live.snapshot.lock() {
                    s.apply(&mut j);
                }
            }
        }
        j
    }
}
