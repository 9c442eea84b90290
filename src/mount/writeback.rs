//! `--write-back DELAY`: `close` returns once the file's bytes are kept in the cache folder
//! (`dirty/`) and recorded in the mount's state; an uploader sends each one DELAY after its
//! last close, and clears its record only when the object is complete at the store. A file
//! waiting shows in the mount with its new bytes; deleted through the mount it is not
//! uploaded; renamed (or its folder renamed) it is uploaded first. At a clean unmount every
//! waiting file is uploaded before the process ends; after a kill, the next mount of the
//! same source uploads what its state still lists, first thing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use super::fs::{at_or_under, Errno, Fs};

/// Files a write-back uploads at once.
const UPLOADS_AT_ONCE: usize = 16;
use super::state::MountState;

/// A file closed and not uploaded yet.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub file: PathBuf,
    pub size: u64,
    pub mtime: SystemTime,
    pub gen: i64,
    pub due: Instant,
    /// Failed uploads so far (each waits longer).
    pub tries: u32,
    /// The multipart upload its writer streamed while writing: completing it is the upload
    /// (taken by whoever uploads first).
    pub stream: Arc<std::sync::Mutex<Option<super::stream::Stream>>>,
}

/// The mount's state and what waits in it.
pub struct Backlog {
    pub(super) src: String,
    pub(super) state: MountState,
    pub(super) waiting: std::sync::Mutex<HashMap<String, Waiting>>,
    pub(super) wake: tokio::sync::Notify,
}

impl Backlog {
    /// `src`'s backlog in `state`: what a mount before this one left is due now.
    pub fn load(src: &str, state: MountState) -> Result<Backlog, String> {
        let mut waiting = HashMap::new();
        for p in state.pending(Some(src))? {
            // the record may spell the cache folder otherwise (a mount in a container of
            // the host's folder): its file is looked for by name in this one's dirty/
            let file = Some(p.file.clone()).filter(|f| f.is_file()).or_else(|| {
                let f = state.dir().join("dirty").join(p.file.file_name()?);
                f.is_file().then_some(f)
            });
            let Some(file) = file else {
                // only if it is still that record: a mount sharing the folder may have
                // taken it over (and removed this file) since it was read
                match state.lose(src, &p.rel, p.gen) {
                    Ok(true) => {
                        tracing::error!(path = %p.rel, file = %p.file.display(), "mount: a file closed with --write-back lost its bytes before its upload (its cache file is gone); it is not uploaded (`slate mount-status` lists it)")
                    }
                    Ok(false) => {}
                    Err(why) => {
                        tracing::error!(path = %p.rel, file = %p.file.display(), %why, "mount: a file closed with --write-back lost its bytes before its upload (its cache file is gone); it is not uploaded, and recording it failed")
                    }
                }
                continue;
            };
            tracing::info!(path = %p.rel, size = p.size, "mount: uploading a file an earlier mount closed with --write-back and did not upload");
            waiting.insert(
                p.rel.clone(),
                Waiting {
                    file,
                    size: p.size,
                    mtime: p.mtime,
                    gen: p.gen,
                    due: Instant::now(),
                    tries: 0,
                    stream: Default::default(),
                },
            );
        }
        Ok(Backlog {
            src: src.to_string(),
            state,
            waiting: std::sync::Mutex::new(waiting),
            wake: tokio::sync::Notify::new(),
        })
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn io_errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Fs {
    fn backlog(&self) -> Result<&Backlog, Errno> {
        self.backlog.as_ref().ok_or(libc::EIO)
    }

    /// What waits for its upload at `rel`, if anything.
    pub(super) fn waiting(&self, rel: &str) -> Option<Waiting> {
        self.backlog.as_ref()?.waiting().get(rel).cloned()
    }

    /// The waiting files directly in folder `rel`: (name, size, mtime).
    pub(super) fn waiting_in(&self, rel: &str) -> Vec<(String, u64, SystemTime)> {
        let Some(b) = &self.backlog else {
            return Vec::new();
        };
        b.waiting()
            .iter()
            .filter_map(|(r, w)| {
                let (parent, name) = r.rsplit_once('/').unwrap_or(("", r));
                (parent == rel).then(|| (name.to_string(), w.size, w.mtime))
            })
            .collect()
    }

    /// The file of waiting `w` at `rel`, open; None when it was uploaded since (its file
    /// is gone, the store has its bytes).
    pub(super) fn open_waiting(
        &self,
        rel: &str,
        w: &Waiting,
    ) -> std::io::Result<Option<std::fs::File>> {
        let mut w = w.clone();
        loop {
            match std::fs::File::open(&w.file) {
                Ok(f) => return Ok(Some(f)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match self.waiting(rel) {
                    // uploaded meanwhile: the store has it
                    None => return Ok(None),
                    // a newer close replaced it meanwhile: that one's bytes
                    Some(x) if x.gen != w.gen => w = x,
                    Some(_) => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// The waiting files at `rel` or under it.
    pub(super) fn waiting_under(&self, rel: &str) -> Vec<String> {
        let Some(b) = &self.backlog else {
            return Vec::new();
        };
        b.waiting()
            .keys()
            .filter(|r| at_or_under(r, rel))
            .cloned()
            .collect()
    }

    /// How many files wait for their upload.
    pub fn waiting_count(&self) -> usize {
        self.backlog
            .as_ref()
            .map(|b| b.waiting().len())
            .unwrap_or(0)
    }

    /// A close with `--write-back`: the cache file `path` of `rel` is kept (a hard link in
    /// `dirty/`, made durable) and recorded; its upload is due `delay` from now, or at once
    /// when its writer streamed it (the parts are at the store: only the completion is left).
    pub(super) fn keep_for_upload(
        &self,
        rel: &str,
        (file, path): (&std::fs::File, &std::path::Path),
        (size, mtime): (u64, SystemTime),
        delay: Duration,
        stream: Option<super::stream::Stream>,
    ) -> Result<(), Errno> {
        let b = self.backlog()?;
        let dirty = self.opts.cache_dir.join("dirty");
        std::fs::create_dir_all(&dirty).map_err(|e| io_errno(&e))?;
        file.sync_all().map_err(|e| io_errno(&e))?;
        let kept = self.keep_as(path).map_err(|e| {
            tracing::warn!(file = %path.display(), error = %e, "mount: keeping a written file for its upload");
            io_errno(&e)
        })?;
        if let Ok(d) = std::fs::File::open(&dirty) {
            let _ = d.sync_all();
        }
        let gen = b
            .state
            .record(&b.src, rel, &kept, size, mtime)
            .map_err(|why| {
                tracing::error!(path = %rel, %why, "mount: recording a written file for its upload failed");
                let _ = std::fs::remove_file(&kept);
                libc::EIO
            })?;
        let old = b.waiting().insert(
            rel.to_string(),
            Waiting {
                file: kept,
                size,
                mtime,
                gen,
                due: Instant::now()
                    + if stream.is_some() {
                        Duration::ZERO
                    } else {
                        delay
                    },
                tries: 0,
                stream: Arc::new(std::sync::Mutex::new(stream)),
            },
        );
        if let Some(old) = old {
            let _ = std::fs::remove_file(old.file);
        }
        b.wake.notify_one();
        tracing::debug!(path = %rel, size, "mount: closed; its upload follows (--write-back)");
        Ok(())
    }

    /// A hard link of `path` in `dirty/` under a name of this mount's tag that was never
    /// given before (the time is in it: whoever held the tag before, its names differ).
    fn keep_as(&self, path: &std::path::Path) -> std::io::Result<PathBuf> {
        let dirty = self.opts.cache_dir.join("dirty");
        loop {
            let n = self.next_fh.fetch_add(1, Ordering::Relaxed);
            let at = SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let kept = dirty.join(format!("{}-{n}-{at}", self.tag.name));
            match std::fs::hard_link(path, &kept) {
                Ok(()) => return Ok(kept),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Uploads one waiting file; clears it when no close came meanwhile.
    async fn upload_waiting(&self, rel: &str) -> Result<(), Errno> {
        // one upload of a path at a time, and always of its newest close: an older close's
        // upload finishing after a newer one would leave the older bytes at the store
        let _shared = self.share(rel).await;
        let _turn = self.upload_turn(rel).await;
        self.upload_held(rel).await
    }

    /// [`Fs::upload_waiting`] by a caller that holds `rel`.
    pub(super) async fn upload_held(&self, rel: &str) -> Result<(), Errno> {
        let b = self.backlog()?;
        let Some(w) = self.waiting(rel) else {
            // uploaded meanwhile (or deleted through the mount)
            return Ok(());
        };
        let w = &w;
        // still this mount's to upload? a mount sharing the cache folder may have deleted
        // it (rm) or taken it over since
        if let Ok(false) = b.state.names(&b.src, rel, w.gen) {
            let mut waiting = b.waiting();
            if waiting.get(rel).is_some_and(|x| x.gen == w.gen) {
                waiting.remove(rel);
                drop(waiting);
                let _ = std::fs::remove_file(&w.file);
            }
            tracing::info!(path = %rel, "mount: not uploaded: another mount sharing the cache folder deleted it or uploads it");
            return Ok(());
        }
        let file = match std::fs::File::open(&w.file) {
            Ok(f) => f,
            // a newer close replaced it meanwhile (its own upload follows), or it was
            // deleted through the mount
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && self.waiting(rel).is_none_or(|x| x.gen != w.gen) =>
            {
                return Ok(())
            }
            // its kept bytes are gone (removed by hand): never uploaded, listed as lost
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match b.state.lose(&b.src, rel, w.gen) {
                    Ok(true) => {
                        let mut waiting = b.waiting();
                        if waiting.get(rel).is_some_and(|x| x.gen == w.gen) {
                            waiting.remove(rel);
                        }
                        tracing::error!(path = %rel, file = %w.file.display(), "mount: a file closed with --write-back lost its bytes before its upload (its cache file is gone); it is not uploaded (`slate mount-status` lists it)");
                        return Ok(());
                    }
                    Ok(false) => return Ok(()),
                    Err(why) => {
                        tracing::error!(path = %rel, %why, "mount: recording a file whose kept bytes are gone failed");
                        return Err(io_errno(&e));
                    }
                }
            }
            Err(e) => return Err(io_errno(&e)),
        };
        let size = file.metadata().map_err(|e| io_errno(&e))?.len();
        let key = self.key(rel);
        let stream = w.stream.lock().unwrap_or_else(|p| p.into_inner()).take();
        let streamed = match stream {
            Some(s) => match s.finish(size).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(key = %key, errno = e, "mount: the streamed upload failed; uploading the file whole");
                    false
                }
            },
            None => false,
        };
        if !streamed {
            self.upload(&key, rel, file, size, w.mtime).await?;
        }
        self.uploaded.fetch_add(size, Ordering::Relaxed);
        let mut waiting = b.waiting();
        if waiting.get(rel).is_some_and(|x| x.gen == w.gen) {
            waiting.remove(rel);
            drop(waiting);
            if let Err(why) = b.state.uploaded(&b.src, rel, w.gen) {
                tracing::warn!(path = %rel, %why, "mount: clearing an uploaded file's record failed (it is uploaded again by the next mount)");
            }
            let _ = std::fs::remove_file(&w.file);
        }
        tracing::info!(path = %rel, size, "mount: uploaded (--write-back)");
        Ok(())
    }

    /// Uploads what is due, then waits for the next due time or a new close, until `stop`.
    pub async fn upload_behind(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(b) = &self.backlog else { return };
        loop {
            let now = Instant::now();
            let due: Vec<(String, Waiting)> = b
                .waiting()
                .iter()
                .filter(|(_, w)| w.due <= now)
                .map(|(r, w)| (r.clone(), w.clone()))
                .collect();
            // several at once: a tree of small files is bound by the round trip, not the link
            let uploads = futures::stream::iter(due).map(|(rel, w)| {
                let me = &self;
                async move {
                    let r = me.upload_waiting(&rel).await;
                    (rel, w, r)
                }
            });
            let mut uploads = uploads.buffer_unordered(UPLOADS_AT_ONCE);
            while let Some((rel, w, r)) = uploads.next().await {
                if let Err(e) = r {
                    let tries = w.tries + 1;
                    let wait = Duration::from_secs(1 << tries.min(8));
                    tracing::warn!(path = %rel, error = %std::io::Error::from_raw_os_error(e), retry_in = ?wait, "mount: a --write-back upload failed; it is tried again");
                    if let Some(x) = b.waiting().get_mut(&rel) {
                        if x.gen == w.gen {
                            x.due = Instant::now() + wait;
                            x.tries = tries;
                        }
                    }
                }
            }
            let next = b.waiting().values().map(|w| w.due).min();
            let sleep = next
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = b.wake.notified() => {}
                _ = stop.wait_for(|v| *v) => return,
            }
        }
    }

    /// Uploads now every waiting file at `rel` or under it (all of them for ""): before a
    /// rename, and at unmount. The failures' count.
    pub async fn settle(&self, rel: &str) -> usize {
        let Some(b) = &self.backlog else { return 0 };
        let these: Vec<(String, Waiting)> = b
            .waiting()
            .iter()
            .filter(|(r, _)| at_or_under(r, rel))
            .map(|(r, w)| (r.clone(), w.clone()))
            .collect();
        let mut failed = 0;
        let mut uploads = futures::stream::iter(these)
            .map(|(r, _)| async move {
                let res = self.upload_waiting(&r).await;
                (r, res)
            })
            .buffer_unordered(UPLOADS_AT_ONCE);
        while let Some((r, res)) = uploads.next().await {
            if let Err(e) = res {
                tracing::error!(path = %r, error = %std::io::Error::from_raw_os_error(e), "mount: uploading a --write-back file failed; it stays in the state for the next mount");
                failed += 1;
            }
        }
        failed
    }

    /// Removes the files in `dirty/` that no record names: kept by a mount killed before it
    /// recorded them (its close failed: nobody waits for them), by a mount that is gone,
    /// or by the one that held this mount's tag before it. And leaves to their own mount
    /// the records of a live mount of this source sharing the cache folder (another
    /// process, another container): it uploads them itself.
    pub(super) fn sweep_dirty(&self) {
        let Some(b) = &self.backlog else { return };
        let root = &self.opts.cache_dir;
        let mine = self.tag.name.as_str();
        let tag_of_file = |p: &std::path::Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(super::cache::tag_of)
                .map(str::to_string)
        };
        // what other mounts left: taken over, each under its mount's lock, so that two
        // mounts starting at once never both upload one
        let theirs: Vec<(String, Waiting, String)> = b
            .waiting()
            .iter()
            .filter_map(|(r, w)| {
                let t = tag_of_file(&w.file)?;
                (t != mine).then(|| (r.clone(), w.clone(), t))
            })
            .collect();
        for (rel, w, t) in theirs {
            let Some(_gone) = super::cache::gone(root, &t, false) else {
                tracing::info!(path = %rel, tag = %t, "mount: a live mount sharing the cache folder uploads this file itself");
                b.waiting().remove(&rel);
                continue;
            };
            // the record made to name a link of this mount's, if it still names the file
            // that mount kept: of two mounts taking it over at once, one does
            let taken = self
                .keep_as(&w.file)
                .map_err(|e| e.to_string())
                .and_then(
                    |kept| match b.state.take_over(&b.src, &rel, &w.file, &kept) {
                        Ok(Some(gen)) => Ok(Some((kept, gen))),
                        other => {
                            let _ = std::fs::remove_file(&kept);
                            other.map(|_| None)
                        }
                    },
                );
            match taken {
                Ok(Some((kept, gen))) => {
                    if let Some(x) = b.waiting().get_mut(&rel) {
                        x.file = kept;
                        x.gen = gen;
                    }
                    let _ = std::fs::remove_file(&w.file);
                }
                Ok(None) => {
                    tracing::info!(path = %rel, "mount: another mount took this file over; it uploads it");
                    b.waiting().remove(&rel);
                }
                Err(why) => {
                    tracing::warn!(path = %rel, %why, "mount: taking over a file a mount that is gone left for its upload failed; the next mount tries again");
                    b.waiting().remove(&rel);
                }
            }
        }
        let dirty = root.join("dirty");
        let Ok(rd) = std::fs::read_dir(&dirty) else {
            return;
        };
        // by name: a record made with another spelling of the cache folder names the same
        // file
        let named = || -> Option<std::collections::HashSet<std::ffi::OsString>> {
            match b.state.pending(None) {
                Ok(p) => Some(
                    p.into_iter()
                        .filter_map(|p| p.file.file_name().map(|n| n.to_os_string()))
                        .collect(),
                ),
                Err(why) => {
                    tracing::warn!(%why, "mount: reading the state to clean dirty/ failed; it is left as it is");
                    None
                }
            }
        };
        let Some(first) = named() else { return };
        for e in rd.flatten() {
            if first.contains(&e.file_name()) {
                continue;
            }
            let Some(tag) = tag_of_file(std::path::Path::new(&e.file_name())) else {
                continue;
            };
            // the tag's lock taken, the records are read again: its mount may have
            // recorded the file since the first read, before it ended
            let _gone = if tag == mine {
                None
            } else {
                match super::cache::gone(root, &tag, false) {
                    Some(g) => Some(g),
                    None => continue,
                }
            };
            if named().is_none_or(|n| n.contains(&e.file_name())) {
                continue;
            }
            tracing::info!(file = %e.path().display(), "mount: removing a kept file no record names (its close had failed)");
            let _ = std::fs::remove_file(e.path());
        }
    }

    /// A waiting file deleted through the mount: not uploaded.
    pub(super) fn drop_waiting(&self, rel: &str) {
        let Some(b) = &self.backlog else { return };
        let w = b.waiting().remove(rel);
        // the record first: a record naming a file that is gone could name, later, a
        // new file of the same name
        if let Err(why) = b.state.forget(&b.src, rel) {
            // its file goes all the same: a deleted file must not come back (the next
            // mount finds the record without its file and lists it as lost)
            tracing::warn!(path = %rel, %why, "mount: forgetting a deleted file's upload");
        }
        if let Some(w) = w {
            let _ = std::fs::remove_file(&w.file);
        }
    }

    /// Keeps a message the mount could not read, for `slate mount-status`.
    pub(super) fn keep_dropped(&self, source: &str, reason: &str, text: &[u8]) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = &self.backlog {
            if let Err(why) = b.state.dropped_message(&b.src, source, reason, text) {
                tracing::warn!(%why, "mount: recording a dropped message failed");
            }
        }
    }
}
