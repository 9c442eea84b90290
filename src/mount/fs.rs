//! The mount's file system, written once and independent of the FUSE binding (`fuse.rs` is a
//! thin adapter): an inode table over the store's keys, folders listed with the delimiter
//! and kept for `dir_ttl`, files opened on one version (its ETag, read back with `If-Match`)
//! and read with ranged GETs through a read-ahead window that grows while the reader stays
//! sequential. Every operation is async and answers an errno on failure; no lock is held
//! across a request to the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use object_store::path::Path as StorePath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

/// The root folder's inode.
pub const ROOT: u64 = 1;
/// The first read of a file fetches this much, and a random reader fetches blocks of it.
pub const BLOCK: u64 = 128 * 1024;
/// The read-ahead window's cap.
pub const MAX_WINDOW: u64 = 64 * 1024 * 1024;
/// A window is fetched as parallel ranged GETs of at most this much, and a file is
/// uploaded in parts of this much (its first thousand: see [`part_len`]).
pub const PART: u64 = 8 * 1024 * 1024;

/// The length of an upload's part `n` (from 0): [`PART`] for the first thousand, then twice
/// that for the next thousand, and so on up to 2 GiB (under every store's part limit), so a
/// file of any size S3 takes (5 TiB) fits in its 10,000 parts while the parts of the usual
/// file stay small. (A part is held in memory while it is uploaded: past 56 GiB a file's
/// parts are 64 MiB and more, larger than the default memory budget.)
pub fn part_len(n: u64) -> u64 {
    PART << (n / 1000).min(8)
}

/// An errno (`libc::ENOENT`, …).
pub type Errno = i32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// What `stat` shows of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
}

/// How the mount presents entries.
#[derive(Debug, Clone)]
pub struct FsOpts {
    /// How long a folder's listing is trusted (events invalidate it sooner).
    pub dir_ttl: Duration,
    pub uid: u32,
    pub gid: u32,
    pub umask: u32,
    pub read_only: bool,
    /// The store's kind: what metadata a write carries.
    pub scheme: crate::core::location::Scheme,
    /// Where files open for writing are kept until they are uploaded, and the block cache.
    pub cache_dir: std::path::PathBuf,
    /// The block cache's limit in bytes (`--cache-max-size`).
    pub cache_max: u64,
    /// The budget of fetched bytes in memory at once (`--memory-limit`).
    pub memory_limit: u64,
    /// `--write-back`: close returns at once and the upload follows this long after.
    pub write_back: Option<Duration>,
    /// The storage class (or Azure access tier) of what is written, checked for the store.
    pub storage_class: Option<String>,
    /// `--bwlimit`: bytes fetched and uploaded, together, at most this fast.
    pub bwlimit: Option<Arc<crate::copy::bwlimit::BwLimit>>,
}

impl FsOpts {
    /// The permission bits of a file or folder.
    pub fn perm(&self, kind: Kind) -> u16 {
        let base = match kind {
            Kind::Dir => 0o777,
            Kind::File => 0o666,
        };
        let mut p = base & !self.umask;
        if self.read_only {
            p &= !0o222;
        }
        p as u16
    }
}

#[derive(Debug)]
struct Node {
    parent: u64,
    /// The path below the mount's root, `/`-separated; empty for the root.
    rel: String,
    attr: Attr,
    /// A folder's entries by name, and when they were listed (None: never, or invalidated).
    listed: Option<Instant>,
    /// Bumped at each invalidation: a listing that began before one does not count as
    /// fresh when it ends (what it saw may predate the change).
    epoch: u64,
    /// Queued to be listed ahead of a reader of the tree.
    queued: bool,
    /// When its entries were last read (readdir), not only looked up: a subfolder read
    /// soon after ([`WALK`]) is a walk of the tree.
    read: Option<Instant>,
    children: BTreeMap<String, u64>,
}

#[derive(Debug, Default)]
struct Nodes {
    by_ino: HashMap<u64, Node>,
    by_rel: HashMap<String, u64>,
    next: u64,
}

impl Nodes {
    /// The inode of `rel` (made when new) with `attr`'s kind, size and time.
    fn upsert(&mut self, parent: u64, rel: &str, kind: Kind, size: u64, mtime: SystemTime) -> u64 {
        if let Some(&ino) = self.by_rel.get(rel) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                if n.attr.kind == kind {
                    n.attr.size = size;
                    n.attr.mtime = mtime;
                    return ino;
                }
            }
            // a file became a folder (or back): a new inode, the old one forgotten
            self.by_ino.remove(&ino);
        }
        self.next += 1;
        let ino = self.next;
        self.by_ino.insert(
            ino,
            Node {
                parent,
                rel: rel.to_string(),
                attr: Attr {
                    ino,
                    kind,
                    size,
                    mtime,
                },
                listed: None,
                epoch: 0,
                queued: false,
                read: None,
                children: BTreeMap::new(),
            },
        );
        self.by_rel.insert(rel.to_string(), ino);
        ino
    }
}

/// A file open for writing: its cache file, and whether it changed since uploaded.
#[derive(Debug)]
pub struct WriteState {
    pub file: std::fs::File,
    pub path: std::path::PathBuf,
    pub dirty: bool,
    /// A sequential writer's parts, uploaded while it writes (`stream.rs`).
    pub seq: super::stream::Sequence,
    /// Unlinked while open: its close uploads nothing.
    pub unlinked: bool,
    /// Writes and truncations so far: a flush leaves the file clean only when none came
    /// while it uploaded.
    pub changes: u64,
}

impl WriteState {
    pub fn new(file: std::fs::File, path: std::path::PathBuf, dirty: bool) -> WriteState {
        WriteState {
            file,
            path,
            dirty,
            seq: Default::default(),
            unlinked: false,
            changes: 0,
        }
    }

    /// The file changed: its next flush uploads it.
    pub fn changed(&mut self) {
        self.dirty = true;
        self.changes += 1;
    }
}

impl Drop for WriteState {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A range being fetched for a handle, into the block cache: done when `done` holds its
/// outcome.
#[derive(Debug)]
struct Part {
    range: std::ops::Range<u64>,
    done: tokio::sync::watch::Receiver<Option<Result<(), Errno>>>,
    task: tokio::task::AbortHandle,
}

/// One open file: the version it reads and what is fetched ahead of its reader; or, written
/// (or waiting for its write-back), its local file.
#[derive(Debug)]
pub struct Handle {
    pub ino: u64,
    pub rel: String,
    pub(super) key: StorePath,
    etag: Option<String>,
    /// What the block cache knows this version by: its ETag, else its size and time.
    version: String,
    /// Where the last read ended, the window the next sequential read keeps fetched ahead,
    /// and the run of fetches the reader is in (`ahead_start..ahead_end`).
    last_end: u64,
    window: u64,
    ahead_start: u64,
    ahead_end: u64,
    parts: Vec<Part>,
    pub size: u64,
    pub write: Option<WriteState>,
    /// A file read from a local copy: a write-back not uploaded yet.
    pub(super) local: Option<std::fs::File>,
    /// The process (thread group) that opened it: only its `close` uploads (see
    /// [`Fs::close`]).
    pub(super) opener: Option<u32>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // what was fetched ahead for this reader and not arrived yet is not wanted
        for p in &self.parts {
            p.task.abort();
        }
    }
}

/// The memory budget (`--memory-limit`): the bytes of data fetched or being uploaded that
/// may be in memory at once, shared by every reader and writer of the mount.
#[derive(Clone)]
pub(super) struct Budget {
    /// Units of [`BUDGET_UNIT`] bytes.
    sem: Arc<tokio::sync::Semaphore>,
    units: u32,
}

impl Budget {
    pub(super) fn new(bytes: u64) -> Budget {
        let units = (bytes / BUDGET_UNIT).clamp(1, u32::MAX as u64 >> 4) as u32;
        Budget {
            sem: Arc::new(tokio::sync::Semaphore::new(units as usize)),
            units,
        }
    }

    /// Room for `bytes` (all of the budget at most, so a part larger than the budget
    /// still goes, alone); held until the permit is dropped.
    pub(super) async fn take(&self, bytes: u64) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let units = (bytes.div_ceil(BUDGET_UNIT) as u32).clamp(1, self.units.max(1));
        self.sem.clone().acquire_many_owned(units).await.ok()
    }

    /// Bytes of the budget in use now.
    pub(super) fn used(&self) -> u64 {
        (self.units as u64).saturating_sub(self.sem.available_permits() as u64) * BUDGET_UNIT
    }
}

/// What fetches ranges of objects into the block cache, within the memory budget; cloned
/// into each part's task.
#[derive(Clone)]
pub(super) struct Fetcher {
    store: Arc<dyn ObjectStore>,
    pub(super) cache: Arc<super::cache::BlockCache>,
    pub(super) budget: Budget,
    fetched: Arc<AtomicU64>,
    bwlimit: Option<Arc<crate::copy::bwlimit::BwLimit>>,
}

/// The memory budget's unit.
const BUDGET_UNIT: u64 = 64 * 1024;
/// What a ranged GET streaming into the block cache counts against the budget: the block it
/// is filling and the chunk that completes it (256 KiB), and the HTTP client's buffers of
/// its connection (measured: about 1 MiB a GET in all).
const GET_HELD: u64 = 1024 * 1024;

/// `range` split into the ranged GETs that fetch it: [`PART`] at most each.
fn parts(range: std::ops::Range<u64>) -> Vec<std::ops::Range<u64>> {
    (range.start..range.end)
        .step_by(PART as usize)
        .map(|at| at..(at + PART).min(range.end))
        .collect()
}

/// A GET of `r` at version `etag` (a changed object answers Precondition).
fn ranged(r: &std::ops::Range<u64>, etag: Option<String>) -> GetOptions {
    GetOptions {
        range: Some(GetRange::Bounded(r.clone())),
        if_match: etag,
        ..Default::default()
    }
}

/// The errno of a failed read of `key`, logged.
fn read_failed(key: &StorePath, e: &object_store::Error) -> Errno {
    if matches!(e, object_store::Error::Precondition { .. }) {
        tracing::warn!(key = %key, "mount: the object changed while open: the open file's version is gone (ESTALE); open it again");
    } else {
        tracing::warn!(key = %key, error = %e, "mount: read failed");
    }
    errno(e)
}

impl Fetcher {
    /// `range` of `key` at `etag` (ranged GETs of at most [`PART`], in parallel), each part
    /// kept in the block cache as it arrives; within the memory budget.
    async fn fetch(
        &self,
        key: &StorePath,
        etag: Option<String>,
        version: &str,
        size: u64,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, Errno> {
        let gets = parts(range).into_iter().map(|r| {
            let opts = ranged(&r, etag.clone());
            async move {
                let _permit = self.budget.take(r.end - r.start).await;
                if let Some(l) = &self.bwlimit {
                    l.take(r.end - r.start).await;
                }
                let got = self.store.get_opts(key, opts).await?;
                let bytes = got.bytes().await?;
                self.fetched
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                self.cache.put(key.as_ref(), version, size, r.start, &bytes);
                Ok::<_, object_store::Error>(bytes)
            }
        });
        let got = futures::future::try_join_all(gets)
            .await
            .map_err(|e| read_failed(key, &e))?;
        if got.len() == 1 {
            return Ok(got.into_iter().next().unwrap_or_default());
        }
        let total: usize = got.iter().map(Bytes::len).sum();
        let mut out = Vec::with_capacity(total);
        for b in got {
            out.extend_from_slice(&b);
        }
        Ok(Bytes::from(out))
    }

    /// Fetches `range` of `key` at `etag` into the block cache (ranged GETs of at most
    /// [`PART`], in parallel), each streamed into the cache block by block as it arrives:
    /// a GET holds a block or two in memory, not its part.
    async fn fill(
        &self,
        key: &StorePath,
        etag: Option<String>,
        version: &str,
        size: u64,
        range: std::ops::Range<u64>,
    ) -> Result<(), Errno> {
        let gets = parts(range)
            .into_iter()
            .map(|r| self.fill_part(key, etag.clone(), version, size, r));
        futures::future::try_join_all(gets)
            .await
            .map_err(|e| read_failed(key, &e))?;
        Ok(())
    }

    async fn fill_part(
        &self,
        key: &StorePath,
        etag: Option<String>,
        version: &str,
        size: u64,
        r: std::ops::Range<u64>,
    ) -> Result<(), object_store::Error> {
        use futures::StreamExt;
        let _permit = self.budget.take(GET_HELD.min(r.end - r.start)).await;
        if let Some(l) = &self.bwlimit {
            l.take(r.end - r.start).await;
        }
        let mut body = self
            .store
            .get_opts(key, ranged(&r, etag))
            .await?
            .into_stream();
        let mut held: Vec<u8> = Vec::with_capacity(2 * BLOCK as usize);
        let mut at = r.start;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            self.fetched
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            held.extend_from_slice(&chunk);
            let whole = (held.len() as u64 / BLOCK) * BLOCK;
            if whole > 0 {
                self.cache
                    .put(key.as_ref(), version, size, at, &held[..whole as usize]);
                held.drain(..whole as usize);
                at += whole;
            }
        }
        // the object's last block, shorter than a block
        if !held.is_empty() {
            self.cache.put(key.as_ref(), version, size, at, &held);
        }
        Ok(())
    }
}

/// How the kernel serves an open file's reads ([`Fs::page_cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageCache {
    Shared,
    Direct,
}

/// Where a read is answered.
enum Local {
    Bytes(Bytes),
    Store(u64),
}

/// The file system over one store location.
pub struct Fs {
    pub(super) store: Arc<dyn ObjectStore>,
    /// The location's prefix inside the store (no leading or trailing `/`).
    prefix: String,
    pub opts: FsOpts,
    nodes: Mutex<Nodes>,
    handles: Mutex<HashMap<u64, Handle>>,
    pub(super) next_fh: AtomicU64,
    /// Folders made in the mount that hold no key yet.
    virtual_dirs: Mutex<HashSet<String>>,
    /// Bytes uploaded, for `/metrics` and tests.
    pub uploaded: AtomicU64,
    /// The runtime uploads run on (parts of a file still being written start from the
    /// kernel's write callback, outside it).
    pub(super) rt: Option<tokio::runtime::Handle>,
    /// Bytes fetched from the store, for `/metrics` and tests.
    pub fetched: Arc<AtomicU64>,
    pub(super) fetcher: Fetcher,
    /// Keys invalidated by change events.
    pub invalidations: AtomicU64,
    /// The mount's state: files closed with `--write-back` waiting for their upload, and
    /// dropped messages (`writeback.rs`).
    pub(super) backlog: Option<super::writeback::Backlog>,
    /// Event messages dropped as unreadable.
    pub dropped: AtomicU64,
    /// A lock per folder being listed: one listing of a folder at a time, which the others
    /// wanting it wait for.
    listing: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// Listings of subfolders started ahead of a reader of the tree (`find`, `ls -R`).
    list_ahead: Arc<tokio::sync::Semaphore>,
    /// S3's CopyObject with the mount's storage class, for renames (None: the store's copy).
    pub(super) copier: Option<Arc<crate::stores::s3copy::S3CrossBucket>>,
    /// A lock per path being uploaded, deleted or renamed, and per folder above one
    /// ([`Fs::hold`], [`Fs::share`], [`Fs::hold_folder`]).
    paths: Paths,
    /// This mount's name for its files in the cache folder, and its claim on them.
    pub(super) tag: super::cache::Tag,
}

type Paths = Arc<Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>>;

/// How one key is held.
enum Guard {
    Shared(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<()>),
    Sole(#[allow(dead_code)] tokio::sync::OwnedRwLockWriteGuard<()>),
}

/// One key of [`Fs::paths`] held; its lock goes from the map when nobody else wants it.
struct Lock {
    key: String,
    paths: Paths,
    guard: Option<Guard>,
}

impl Drop for Lock {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        // nobody else holds or waits for the key: its lock goes
        if paths
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            paths.remove(&self.key);
        }
    }
}

/// Paths held ([`Fs::hold`], [`Fs::share`], ...) until dropped. Every holder takes its
/// keys in one order: the folders above its paths (shared, by name), then its paths (by
/// name), then an upload's turn; so no two holders wait for each other.
pub(super) struct Held(#[allow(dead_code)] Vec<Lock>);

/// The key of folder `rel`'s lock (a folder's rename takes it alone; whatever holds a
/// path under it shares it). A NUL, which no name holds, keeps it apart from any path's
/// key, and sorts it before them.
fn folder_key(rel: &str) -> String {
    format!("\0F{rel}")
}

/// The keys of the folders above `rel` (not the root: it is never renamed).
fn folders_above(rel: &str) -> Vec<String> {
    rel.match_indices('/')
        .map(|(i, _)| folder_key(&rel[..i]))
        .collect()
}

/// How soon after its parent's entries were read a folder's read counts as a walk: a
/// walker (`find`, `ls -R`) reads a folder, then its first subfolder at once; an `ls` of a
/// subfolder an hour after its parent's is not one.
const WALK: Duration = Duration::from_secs(30);

/// Subfolder listings fetched ahead at once.
const LIST_AHEAD: usize = 16;

/// Whether `path` is `rel` or under it (every path is under the root, "").
pub(super) fn at_or_under(path: &str, rel: &str) -> bool {
    rel.is_empty() || path == rel || path.strip_prefix(rel).is_some_and(|x| x.starts_with('/'))
}

pub(super) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

/// The errno of a store error.
pub(super) fn errno(e: &object_store::Error) -> Errno {
    match e {
        object_store::Error::NotFound { .. } => libc::ENOENT,
        object_store::Error::Precondition { .. } => libc::ESTALE,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => libc::EACCES,
        _ => libc::EIO,
    }
}

impl Fs {
    /// The file system over `store`'s `prefix`; its block cache in `opts.cache_dir` (an
    /// error names that folder when it cannot be made).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, opts: FsOpts) -> Result<Fs, String> {
        let mut nodes = Nodes {
            next: ROOT,
            ..Default::default()
        };
        nodes.by_ino.insert(
            ROOT,
            Node {
                parent: ROOT,
                rel: String::new(),
                attr: Attr {
                    ino: ROOT,
                    kind: Kind::Dir,
                    size: 0,
                    mtime: SystemTime::now(),
                },
                listed: None,
                epoch: 0,
                queued: false,
                read: None,
                children: BTreeMap::new(),
            },
        );
        nodes.by_rel.insert(String::new(), ROOT);
        let tag = super::cache::Tag::claim(&opts.cache_dir)
            .map_err(|e| format!("{}: the cache folder: {e}", opts.cache_dir.display()))?;
        let cache = super::cache::BlockCache::new(&opts.cache_dir, opts.cache_max, &tag.name)
            .map_err(|e| format!("{}: the block cache: {e}", opts.cache_dir.display()))?;
        let fetched = Arc::new(AtomicU64::new(0));
        let fetcher = Fetcher {
            store: store.clone(),
            cache: Arc::new(cache),
            budget: Budget::new(opts.memory_limit),
            fetched: fetched.clone(),
            bwlimit: opts.bwlimit.clone(),
        };
        Ok(Fs {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            opts,
            nodes: Mutex::new(nodes),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            virtual_dirs: Mutex::new(HashSet::new()),
            rt: tokio::runtime::Handle::try_current().ok(),
            uploaded: AtomicU64::new(0),
            fetched,
            fetcher,
            invalidations: AtomicU64::new(0),
            backlog: None,
            dropped: AtomicU64::new(0),
            listing: Mutex::new(HashMap::new()),
            list_ahead: Arc::new(tokio::sync::Semaphore::new(LIST_AHEAD)),
            paths: Default::default(),
            copier: None,
            tag,
        })
    }

    /// Holds `rel` alone (a delete): waits until no upload of it is under way, and none
    /// starts until the [`Held`] is dropped (an upload that ended after a delete of its
    /// file would put the file back).
    pub(super) async fn hold(&self, rel: &str) -> Held {
        self.take(folders_above(rel), vec![(rel.to_string(), true)])
            .await
    }

    /// Holds `rel` shared (an upload, a write-back close's record, a new handle): others
    /// that share it go on; a delete or rename of it, or of a folder above it, waits.
    pub(super) async fn share(&self, rel: &str) -> Held {
        self.take(folders_above(rel), vec![(rel.to_string(), false)])
            .await
    }

    /// Holds both names of a file's rename alone.
    pub(super) async fn hold_both(&self, a: &str, b: &str) -> Held {
        let mut above = folders_above(a);
        above.extend(folders_above(b));
        self.take(above, vec![(a.to_string(), true), (b.to_string(), true)])
            .await
    }

    /// The turn of one uploader of `rel` (taken after [`Fs::share`], last): two uploads of
    /// one path never run at once, so an older one cannot land after a newer one.
    pub(super) async fn upload_turn(&self, rel: &str) -> Held {
        Held(vec![self.lock(&format!("\0T{rel}"), true).await])
    }

    /// Holds folders `from` and `to` alone (a folder's rename): waits until nothing under
    /// either is held, and holds off whatever would hold something under them. The rest
    /// of the mount goes on.
    pub(super) async fn hold_folders(&self, from: &str, to: &str) -> Held {
        let mut above = folders_above(from);
        above.extend(folders_above(to));
        self.take(
            above,
            vec![(folder_key(from), true), (folder_key(to), true)],
        )
        .await
    }

    /// Takes `above` shared and `keys` as asked, all in the order of their keys (folders'
    /// first): every holder takes its keys in that one order, so none waits for another
    /// that waits for it. A key asked for twice is taken once, alone if either asks so.
    async fn take(&self, above: Vec<String>, keys: Vec<(String, bool)>) -> Held {
        let mut all: Vec<(String, bool)> = above.into_iter().map(|k| (k, false)).collect();
        all.extend(keys);
        all.sort();
        let mut merged: Vec<(String, bool)> = Vec::with_capacity(all.len());
        for (k, sole) in all {
            match merged.last_mut() {
                Some((last, s)) if *last == k => *s |= sole,
                _ => merged.push((k, sole)),
            }
        }
        let mut held = Vec::with_capacity(merged.len());
        for (k, sole) in &merged {
            held.push(self.lock(k, *sole).await);
        }
        Held(held)
    }

    async fn lock(&self, key: &str, sole: bool) -> Lock {
        let lock = self
            .paths
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_default()
            .clone();
        let guard = if sole {
            Guard::Sole(lock.write_owned().await)
        } else {
            Guard::Shared(lock.read_owned().await)
        };
        Lock {
            key: key.to_string(),
            paths: self.paths.clone(),
            guard: Some(guard),
        }
    }

    /// Renames copy with `c` (before the mount is shared).
    pub fn set_copier(&mut self, c: Arc<crate::stores::s3copy::S3CrossBucket>) {
        self.copier = Some(c);
    }

    /// Gives the mount its state (before it is shared).
    pub fn set_backlog(&mut self, b: super::writeback::Backlog) {
        self.backlog = Some(b);
        self.sweep_dirty();
    }

    pub(super) fn key(&self, rel: &str) -> StorePath {
        StorePath::from(join(&self.prefix, rel))
    }

    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, Nodes> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn handles(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        self.nodes()
            .by_ino
            .get(&ino)
            .map(|n| n.attr.clone())
            .ok_or(libc::ENOENT)
    }

    /// The folder `ino`'s entries, listed again when its listing is older than the TTL or
    /// was invalidated.
    async fn children(&self, ino: u64) -> Result<Vec<(String, Attr)>, Errno> {
        self.listed(ino).await?;
        let nodes = self.nodes();
        let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
        Ok(n.children
            .iter()
            .filter_map(|(name, c)| nodes.by_ino.get(c).map(|c| (name.clone(), c.attr.clone())))
            .collect())
    }

    /// The folder `ino`'s path and whether its listing is current.
    fn fresh(&self, ino: u64) -> Result<(String, bool), Errno> {
        let nodes = self.nodes();
        let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
        if n.attr.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let fresh = n.listed.is_some_and(|t| t.elapsed() < self.opts.dir_ttl);
        Ok((n.rel.clone(), fresh))
    }

    /// Lists the folder `ino` unless its listing is current; a listing already under way
    /// (by another caller or ahead of a reader) is waited for, not repeated.
    async fn listed(&self, ino: u64) -> Result<(), Errno> {
        if self.fresh(ino)?.1 {
            return Ok(());
        }
        let lock = self
            .listing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(ino)
            .or_default()
            .clone();
        let result = {
            let _one = lock.lock().await;
            match self.fresh(ino) {
                Ok((_, true)) => Ok(()),
                Ok((rel, false)) => self.list(ino, &rel).await,
                Err(e) => Err(e),
            }
        };
        let mut listing = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        if listing.get(&ino).is_some_and(|l| Arc::strong_count(l) <= 2) {
            listing.remove(&ino);
        }
        result
    }

    /// Notes that folder `ino`'s entries are read. A folder read after its parent's
    /// entries were is a walk of the tree (`find`, `ls -R`, a dataset loader): its
    /// siblings not listed yet are listed in the background, [`LIST_AHEAD`] at once, as one
    /// round trip per folder in turn is what makes a walk slow. A lone `ls` lists nothing
    /// more.
    pub fn list_ahead(self: &Arc<Self>, ino: u64) {
        let subs: Vec<u64> = {
            let mut nodes = self.nodes();
            let Some(n) = nodes.by_ino.get_mut(&ino) else {
                return;
            };
            n.read = Some(Instant::now());
            let parent = n.parent;
            let Some(p) = nodes.by_ino.get(&parent) else {
                return;
            };
            // a lookup lists a folder too (`ls /a/b` lists `a`): only a parent whose
            // entries were read makes this a walk
            let walking = p.read.is_some_and(|t| t.elapsed() < WALK);
            if ino == ROOT || p.listed.is_none() || !walking {
                return;
            }
            let subs: Vec<u64> = p
                .children
                .values()
                .filter(|c| {
                    nodes.by_ino.get(c).is_some_and(|c| {
                        c.attr.kind == Kind::Dir && c.listed.is_none() && !c.queued
                    })
                })
                .copied()
                .collect();
            for s in &subs {
                if let Some(n) = nodes.by_ino.get_mut(s) {
                    n.queued = true;
                }
            }
            subs
        };
        let Some(rt) = self
            .rt
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            return;
        };
        for sub in subs {
            let (fs, gate) = (self.clone(), self.list_ahead.clone());
            rt.spawn(async move {
                let Ok(_turn) = gate.acquire_owned().await else {
                    return;
                };
                let _ = fs.listed(sub).await;
            });
        }
    }

    pub(super) async fn children_of(&self, ino: u64) -> Result<Vec<(String, Attr)>, Errno> {
        self.children(ino).await
    }

    pub(super) fn rel_of(&self, ino: u64) -> Result<String, Errno> {
        self.nodes()
            .by_ino
            .get(&ino)
            .map(|n| n.rel.clone())
            .ok_or(libc::ENOENT)
    }

    /// The path of file `ino` (EISDIR for a folder).
    pub(super) fn file_rel(&self, ino: u64) -> Result<String, Errno> {
        let nodes = self.nodes();
        let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
        if n.attr.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        Ok(n.rel.clone())
    }

    /// Puts `name` in folder `parent`'s entries (made or written by the mount itself).
    pub(super) fn add_child(
        &self,
        parent: u64,
        name: &str,
        rel: &str,
        kind: Kind,
        size: u64,
        mtime: SystemTime,
    ) -> Attr {
        let mut nodes = self.nodes();
        let ino = nodes.upsert(parent, rel, kind, size, mtime);
        if let Some(p) = nodes.by_ino.get_mut(&parent) {
            p.children.insert(name.to_string(), ino);
        }
        if kind == Kind::Dir {
            if let Some(n) = nodes.by_ino.get_mut(&ino) {
                // nothing under it yet: no listing needed until the TTL says so
                n.listed.get_or_insert_with(Instant::now);
            }
        }
        nodes
            .by_ino
            .get(&ino)
            .map(|n| n.attr.clone())
            .unwrap_or(Attr {
                ino,
                kind,
                size,
                mtime,
            })
    }

    /// Takes `name` out of folder `parent`: its path is free. Its inode stays while a file
    /// is open on it (an unlinked open file still answers `fstat` and reads what it has).
    pub(super) fn remove_child(&self, parent: u64, name: &str) {
        let open: HashSet<u64> = self.handles().values().map(|h| h.ino).collect();
        let mut nodes = self.nodes();
        let gone = nodes
            .by_ino
            .get_mut(&parent)
            .and_then(|p| p.children.remove(name));
        if let Some(ino) = gone {
            let rel = nodes.by_ino.get(&ino).map(|n| n.rel.clone());
            if let Some(rel) = rel {
                if nodes.by_rel.get(&rel) == Some(&ino) {
                    nodes.by_rel.remove(&rel);
                }
            }
            if !open.contains(&ino) {
                nodes.by_ino.remove(&ino);
            }
        }
    }

    /// Moves entry `name` of `parent` to `new_name` of `new_parent`, keeping its inode (the
    /// kernel's moved entry still names it) and those of everything under it; an entry it
    /// replaces is taken out first. Open files, files waiting for a write-back and folders
    /// made in the mount move with it.
    pub(super) fn move_child(&self, parent: u64, name: &str, new_parent: u64, new_name: &str) {
        let (from, to) = {
            let nodes = self.nodes();
            let rel = |ino: u64| nodes.by_ino.get(&ino).map(|n| n.rel.clone());
            match (rel(parent), rel(new_parent)) {
                (Some(a), Some(b)) => (join(&a, name), join(&b, new_name)),
                _ => return,
            }
        };
        self.remove_child(new_parent, new_name);
        let moved = |r: &str| format!("{to}{}", &r[from.len()..]);
        {
            let mut nodes = self.nodes();
            let Some(ino) = nodes
                .by_ino
                .get_mut(&parent)
                .and_then(|p| p.children.remove(name))
            else {
                return;
            };
            let renames: Vec<(u64, String)> = nodes
                .by_ino
                .iter()
                .filter(|(i, n)| **i == ino || (n.rel != from && at_or_under(&n.rel, &from)))
                .map(|(i, n)| (*i, n.rel.clone()))
                .collect();
            for (i, old) in renames {
                if nodes.by_rel.get(&old) == Some(&i) {
                    nodes.by_rel.remove(&old);
                }
                let new = moved(&old);
                if let Some(n) = nodes.by_ino.get_mut(&i) {
                    n.rel = new.clone();
                }
                nodes.by_rel.insert(new, i);
            }
            if let Some(n) = nodes.by_ino.get_mut(&ino) {
                n.parent = new_parent;
            }
            if let Some(p) = nodes.by_ino.get_mut(&new_parent) {
                p.children.insert(new_name.to_string(), ino);
            }
        }
        {
            let mut virt = self.virtual_dirs();
            let inside: Vec<String> = virt
                .iter()
                .filter(|v| at_or_under(v, &from))
                .cloned()
                .collect();
            for v in inside {
                virt.remove(&v);
                virt.insert(moved(&v));
            }
        }
        for h in self.handles().values_mut() {
            if at_or_under(&h.rel, &from) {
                h.rel = moved(&h.rel);
                h.key = self.key(&h.rel);
                if let Some(w) = h.write.as_mut() {
                    // what streamed went to the old name: the close uploads it whole, here
                    w.seq.stream = None;
                    w.seq.broken = true;
                    // a flush uploading under the old name meanwhile leaves it dirty
                    w.changed();
                }
            }
        }
    }

    /// Every folder is listed again at its next look.
    pub(super) fn forget_all_listings(&self) {
        for n in self.nodes().by_ino.values_mut() {
            n.listed = None;
            n.epoch += 1;
        }
    }

    /// File `ino` is `size` bytes, written now.
    pub(super) fn set_size(&self, ino: u64, size: u64) {
        self.set_stored(ino, size, SystemTime::now());
    }

    /// File `ino` is `size` bytes, its time unchanged.
    pub(super) fn set_len(&self, ino: u64, size: u64) {
        if let Some(n) = self.nodes().by_ino.get_mut(&ino) {
            n.attr.size = size;
        }
    }

    /// File `ino` is `size` bytes with modification time `mtime`: what its upload carries.
    pub(super) fn set_stored(&self, ino: u64, size: u64, mtime: SystemTime) {
        if let Some(n) = self.nodes().by_ino.get_mut(&ino) {
            n.attr.size = size;
            n.attr.mtime = mtime;
        }
    }

    fn virtual_dirs(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.virtual_dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn add_virtual_dir(&self, rel: &str) {
        self.virtual_dirs().insert(rel.to_string());
    }

    pub(super) fn remove_virtual_dir(&self, rel: &str) {
        self.virtual_dirs().remove(rel);
    }

    /// A new handle on `ino`.
    /// The path of `ino` as the mount shows it now; None once it was deleted.
    pub(super) fn shown_rel(&self, ino: u64) -> Option<String> {
        let nodes = self.nodes();
        let n = nodes.by_ino.get(&ino)?;
        (nodes.by_rel.get(&n.rel) == Some(&ino)).then(|| n.rel.clone())
    }

    /// A write handle of file `ino` (last seen at `rel`), made holding its path, at the
    /// name the file has now: a rename or delete while its bytes were fetched moved it, or
    /// took it away (then its close uploads nothing). A rename or delete later finds it.
    pub(super) async fn new_write_handle(
        &self,
        ino: u64,
        rel: &str,
        size: u64,
        w: WriteState,
    ) -> u64 {
        let mut rel = rel.to_string();
        loop {
            let _held = self.share(&rel).await;
            let now = self.shown_rel(ino);
            if let Some(r) = now.as_ref().filter(|r| **r != rel) {
                rel = r.clone();
                continue;
            }
            let fh = self.new_handle(ino, &rel, None, size, Some(w));
            if now.is_none() {
                if let Some(w) = self.handles().get_mut(&fh).and_then(|h| h.write.as_mut()) {
                    w.unlinked = true;
                }
            }
            return fh;
        }
    }

    pub(super) fn new_handle(
        &self,
        ino: u64,
        rel: &str,
        etag: Option<String>,
        size: u64,
        write: Option<WriteState>,
    ) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles().insert(
            fh,
            Handle {
                ino,
                rel: rel.to_string(),
                key: self.key(rel),
                version: etag.clone().unwrap_or_default(),
                etag,
                size,
                last_end: 0,
                window: BLOCK,
                ahead_start: 0,
                ahead_end: 0,
                parts: Vec::new(),
                write,
                local: None,
                opener: None,
            },
        );
        fh
    }

    /// Lists folder `rel` with the delimiter (one listing, every page) and stores its entries.
    async fn list(&self, ino: u64, rel: &str) -> Result<(), Errno> {
        let full = join(&self.prefix, rel);
        let at = Instant::now();
        let epoch = self.nodes().by_ino.get(&ino).map(|n| n.epoch);
        let listed = self
            .store
            .list_with_delimiter(
                (!full.is_empty())
                    .then(|| StorePath::from(full.as_str()))
                    .as_ref(),
            )
            .await
            .map_err(|e| {
                tracing::warn!(folder = %full, error = %e, "mount: listing failed");
                errno(&e)
            })?;
        let name_of = |p: &StorePath| p.filename().map(str::to_string);
        let mut entries: Vec<(String, Kind, u64, SystemTime)> = Vec::new();
        for d in &listed.common_prefixes {
            if let Some(n) = name_of(d) {
                entries.push((n, Kind::Dir, 0, SystemTime::now()));
            }
        }
        for o in &listed.objects {
            if let Some(n) = name_of(&o.location) {
                // a name that is a folder too shows as the folder (as rclone shows it)
                if !entries
                    .iter()
                    .any(|(e, k, _, _)| *e == n && *k == Kind::Dir)
                {
                    entries.push((n, Kind::File, o.size, o.last_modified.into()));
                }
            }
        }
        // folders made here that hold nothing yet, and files being written, stay
        {
            let mut virt = self.virtual_dirs();
            for (n, k, _, _) in &entries {
                if *k == Kind::Dir {
                    virt.remove(&join(rel, n));
                }
            }
            for v in virt.iter() {
                let parent = v.rsplit_once('/').map(|x| x.0).unwrap_or("");
                let name = v.rsplit('/').next().unwrap_or(v);
                if parent == rel && !entries.iter().any(|(n, _, _, _)| n == name) {
                    entries.push((name.to_string(), Kind::Dir, 0, SystemTime::now()));
                }
            }
        }
        // files closed with --write-back show their new bytes until uploaded
        for (name, size, mtime) in self.waiting_in(rel) {
            match entries.iter_mut().find(|(n, _, _, _)| *n == name) {
                Some(e) if e.1 == Kind::File => {
                    e.2 = size;
                    e.3 = mtime;
                }
                Some(_) => {}
                None => entries.push((name, Kind::File, size, mtime)),
            }
        }
        let writing: Vec<(String, u64)> = self
            .handles()
            .values()
            // unlinked while open: no entry of the folder any more
            .filter(|h| h.write.as_ref().is_some_and(|w| !w.unlinked))
            .map(|h| (h.rel.clone(), h.size))
            .collect();
        for (w, size) in writing {
            let parent = w.rsplit_once('/').map(|x| x.0).unwrap_or("");
            let name = w.rsplit('/').next().unwrap_or(&w).to_string();
            if parent == rel && !entries.iter().any(|(n, _, _, _)| *n == name) {
                entries.push((name, Kind::File, size, SystemTime::now()));
            }
        }
        let mut nodes = self.nodes();
        let mut children = BTreeMap::new();
        for (name, kind, size, mtime) in entries {
            let child = nodes.upsert(ino, &join(rel, &name), kind, size, mtime);
            children.insert(name, child);
        }
        if let Some(n) = nodes.by_ino.get_mut(&ino) {
            n.children = children;
            n.queued = false;
            // invalidated while this listing was under way: listed again at the next look
            if Some(n.epoch) == epoch {
                n.listed = Some(at);
            }
        }
        Ok(())
    }

    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr, Errno> {
        self.listed(parent).await?;
        let nodes = self.nodes();
        nodes
            .by_ino
            .get(&parent)
            .and_then(|p| p.children.get(name))
            .and_then(|c| nodes.by_ino.get(c))
            .map(|c| c.attr.clone())
            .ok_or(libc::ENOENT)
    }

    /// `.`, `..` and the folder's entries, in name order.
    pub async fn readdir(&self, ino: u64) -> Result<Vec<(u64, Kind, String)>, Errno> {
        let children = self.children(ino).await?;
        let parent = self
            .nodes()
            .by_ino
            .get(&ino)
            .map(|n| n.parent)
            .unwrap_or(ROOT);
        let mut out = vec![
            (ino, Kind::Dir, ".".into()),
            (parent, Kind::Dir, "..".into()),
        ];
        out.extend(children.into_iter().map(|(n, a)| (a.ino, a.kind, n)));
        Ok(out)
    }

    /// Opens file `ino`: for reading, its newest version (a HEAD), read to the end as that
    /// version; for writing, a cache file (`write.rs`).
    pub async fn open(&self, ino: u64, write: bool, truncate: bool) -> Result<u64, Errno> {
        if write {
            return self.open_write(ino, truncate).await;
        }
        let rel = {
            let nodes = self.nodes();
            let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
            if n.attr.kind == Kind::Dir {
                return Err(libc::EISDIR);
            }
            n.rel.clone()
        };
        let writer = self.handles().values().find_map(|h| {
            (h.ino == ino)
                .then(|| {
                    h.write
                        .as_ref()
                        .and_then(|w| w.file.try_clone().ok())
                        .map(|f| (f, h.size))
                })
                .flatten()
        });
        if let Some((file, size)) = writer {
            // open for writing elsewhere: what it wrote, not yet at the store
            let fh = self.new_handle(ino, &rel, None, size, None);
            if let Some(h) = self.handles().get_mut(&fh) {
                h.local = Some(file);
            }
            return Ok(fh);
        }
        let waiting = match self.waiting(&rel) {
            Some(w) => self
                .open_waiting(&rel, &w)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?
                .map(|f| (f, w)),
            None => None,
        };
        if let Some((file, w)) = waiting {
            // closed with --write-back, not uploaded yet: its own bytes
            let size = file.metadata().map(|m| m.len()).unwrap_or(w.size);
            let fh = self.new_handle(ino, &rel, None, size, None);
            if let Some(h) = self.handles().get_mut(&fh) {
                h.local = Some(file);
            }
            return Ok(fh);
        }
        let meta = self
            .store
            .head(&self.key(&rel))
            .await
            .map_err(|e| errno(&e))?;
        {
            let mut nodes = self.nodes();
            if let Some(n) = nodes.by_ino.get_mut(&ino) {
                n.attr.size = meta.size;
                n.attr.mtime = meta.last_modified.into();
            }
        }
        let fh = self.new_handle(ino, &rel, meta.e_tag.clone(), meta.size, None);
        if meta.e_tag.is_none() {
            // no ETag: the cache knows the version by its size and time
            if let Some(h) = self.handles().get_mut(&fh) {
                h.version = format!(
                    "{}-{}",
                    meta.size,
                    meta.last_modified.timestamp_nanos_opt().unwrap_or_default()
                );
            }
        }
        Ok(fh)
    }

    /// The attributes the kernel is told for `a`: while a file is open on an older,
    /// longer version than the newest, its size is that version's, or the kernel (whose
    /// size of the file all its handles share) would end that reader's reads early. The
    /// newest version's readers read around the kernel's size ([`PageCache::Direct`]).
    pub fn shown(&self, a: &Attr) -> Attr {
        let mut a = a.clone();
        if a.kind == Kind::File {
            for h in self.handles().values() {
                if h.ino == a.ino && h.write.is_none() && h.local.is_none() {
                    a.size = a.size.max(h.size);
                }
            }
        }
        a
    }

    /// How the kernel should serve read handle `fh`, which the kernel's page cache of its
    /// inode is shared with: `Shared` when no other handle of the inode reads another
    /// version; `Direct` when one does, so that this version's pages never mix with that
    /// one's in the page cache.
    pub fn page_cache(&self, fh: u64) -> PageCache {
        let handles = self.handles();
        let Some(h) = handles.get(&fh) else {
            return PageCache::Shared;
        };
        if h.write.is_some() || h.local.is_some() {
            return PageCache::Shared;
        }
        let other = handles.iter().any(|(f, o)| {
            *f != fh
                && o.ino == h.ino
                && (o.version != h.version || o.write.is_some() || o.local.is_some())
        });
        if other {
            PageCache::Direct
        } else {
            PageCache::Shared
        }
    }

    pub fn release(&self, fh: u64) {
        self.handles().remove(&fh);
    }

    /// Notes the process that opened `fh`.
    pub fn set_opener(&self, fh: u64, tgid: Option<u32>) {
        if let Some(h) = self.handles().get_mut(&fh) {
            h.opener = tgid;
        }
    }

    /// The size an open file reads as.
    pub fn open_size(&self, fh: u64) -> Option<(u64, u64)> {
        self.handles().get(&fh).map(|h| (h.ino, h.size))
    }

    /// Up to `size` bytes at `offset` of the version `fh` opened: from the block cache,
    /// else from what is already being fetched for this reader, else fetched now. A
    /// sequential reader keeps a window fetched ahead of it, in the background, that
    /// doubles to [`MAX_WINDOW`]; a random reader fetches only the blocks it touches.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes, Errno> {
        let end = match self.read_local(fh, offset, size)? {
            Local::Bytes(b) => return Ok(b),
            Local::Store(end) => end,
        };
        // decided under the lock, so the kernel's parallel read-ahead requests find the
        // parts the first one started instead of each fetching its own
        let (key, etag, version, file_size, waits) = {
            let mut handles = self.handles();
            let readers = handles.len() as u64;
            let h = handles.get_mut(&fh).ok_or(libc::EBADF)?;
            if let Some(b) = self
                .fetcher
                .cache
                .get(h.key.as_ref(), &h.version, offset..end)
            {
                // advance judges this read against where the last one ended: noted after
                self.advance(h, offset, end, readers);
                h.last_end = end;
                return Ok(b);
            }
            self.advance(h, offset, end, readers);
            let waits: Vec<_> = h
                .parts
                .iter()
                .filter(|p| p.range.start < end && p.range.end > offset)
                .map(|p| p.done.clone())
                .collect();
            h.last_end = end;
            (
                h.key.clone(),
                h.etag.clone(),
                h.version.clone(),
                h.size,
                waits,
            )
        };
        let mut failed = None;
        for mut w in waits {
            // a part aborted (its reader went) is fetched below
            if let Ok(v) = w.wait_for(|v| v.is_some()).await {
                if let Some(Err(e)) = v.as_ref() {
                    failed = Some(*e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if let Some(b) = self.fetcher.cache.get(key.as_ref(), &version, offset..end) {
            return Ok(b);
        }
        // not in the cache (a cache smaller than what is in flight): this read's own range
        self.fetcher
            .fetch(&key, etag, &version, file_size, offset..end)
            .await
    }

    /// A read of a handle whose bytes are local (being written, or a write-back not
    /// uploaded) is answered here; else the range the store has to answer.
    fn read_local(&self, fh: u64, offset: u64, size: u32) -> Result<Local, Errno> {
        let handles = self.handles();
        let h = handles.get(&fh).ok_or(libc::EBADF)?;
        if offset >= h.size || size == 0 {
            return Ok(Local::Bytes(Bytes::new()));
        }
        let end = (offset + size as u64).min(h.size);
        let Some(f) = h.write.as_ref().map(|w| &w.file).or(h.local.as_ref()) else {
            return Ok(Local::Store(end));
        };
        let mut buf = vec![0u8; (end - offset) as usize];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut buf, offset)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        Ok(Local::Bytes(Bytes::from(buf)))
    }

    /// Notes a read of `[offset, end)` and starts what it and the reader's window need:
    /// sequential (at or just past where reading was, out-of-order read-ahead included)
    /// doubles the window and keeps it fetched ahead; a seek starts small again and fetches
    /// the blocks the read touches.
    fn advance(&self, h: &mut Handle, offset: u64, end: u64, readers: u64) {
        // a part done is in the cache (or gone from it) now
        h.parts.retain(|p| p.done.borrow().is_none());
        let near = offset > 0
            && offset + h.window >= h.last_end.min(h.ahead_start)
            && offset <= h.ahead_end.max(h.last_end) + h.window;
        let covered = offset >= h.ahead_start && end <= h.ahead_end;
        if near {
            h.window = (h.window * 2).min(self.max_window(readers));
        } else if !covered || offset == 0 {
            h.window = BLOCK;
        }
        let align = |x: u64| (x / BLOCK) * BLOCK;
        let up = |x: u64| x.div_ceil(BLOCK) * BLOCK;
        if !(near || covered) {
            // a seek: a run starts at the read's first block
            h.ahead_start = align(offset);
            h.ahead_end = h.ahead_start;
        }
        let want = if near || offset == 0 {
            offset + h.window
        } else {
            end
        };
        let want = up(want.max(end)).min(h.size);
        // the window is topped up when less than half of it is left ahead of the reader,
        // so a reader at the cap starts parts of megabytes, not one per read
        let short =
            h.ahead_end < up(end).min(h.size) || h.ahead_end.saturating_sub(offset) < h.window / 2;
        if want <= h.ahead_end || !short {
            return;
        }
        let mut at = h.ahead_end;
        while at < want {
            let part_end = (at + PART).min(want);
            // what an earlier open of the same version fetched is not fetched again
            if !self
                .fetcher
                .cache
                .has(h.key.as_ref(), &h.version, at..part_end)
            {
                self.start_part(h, at..part_end);
            }
            at = part_end;
        }
        h.ahead_end = want;
    }

    /// The window's cap: [`MAX_WINDOW`], or a quarter of the block cache shared by the open
    /// files (what is fetched ahead must still be there when its reader gets to it).
    fn max_window(&self, readers: u64) -> u64 {
        let quarter = (self.fetcher.cache.max() / 4 / readers.max(1) / BLOCK) * BLOCK;
        MAX_WINDOW.min(quarter).max(BLOCK)
    }

    /// Fetches `range` of `h`'s version into the block cache in a task of its own.
    fn start_part(&self, h: &mut Handle, range: std::ops::Range<u64>) {
        let (tx, rx) = tokio::sync::watch::channel(None);
        let f = self.fetcher.clone();
        let (key, etag, version, size, r) = (
            h.key.clone(),
            h.etag.clone(),
            h.version.clone(),
            h.size,
            range.clone(),
        );
        let task = async move {
            let got = f.fill(&key, etag, &version, size, r).await;
            let _ = tx.send(Some(got));
        };
        let task = match &self.rt {
            Some(rt) => rt.spawn(task),
            None => tokio::spawn(task),
        };
        h.parts.push(Part {
            range,
            done: rx,
            task: task.abort_handle(),
        });
    }

    /// Forgets what the mount knows of `rel` (a key changed at the store): its folder is
    /// listed again at the next look, and its attributes are read again. The inodes to
    /// invalidate in the kernel: (parent, name) of the entry, and the entry's inode.
    pub fn invalidate(&self, rel: &str) -> Vec<(u64, String, Option<u64>)> {
        // the cache's blocks stay: they name their version (an open file of the old one
        // reads on; least recently used, they go)
        let mut nodes = self.nodes();
        let mut out = Vec::new();
        // the key and every folder above it: a new key can make new folders
        let mut path = rel.trim_matches('/').to_string();
        loop {
            let (parent_rel, name) = match path.rsplit_once('/') {
                Some((p, n)) => (p.to_string(), n.to_string()),
                None => (String::new(), path.clone()),
            };
            let ino = nodes.by_rel.get(&path).copied();
            if let Some(&parent) = nodes.by_rel.get(&parent_rel) {
                if let Some(p) = nodes.by_ino.get_mut(&parent) {
                    p.listed = None;
                    p.epoch += 1;
                }
                out.push((parent, name, ino));
            }
            if parent_rel.is_empty() {
                break;
            }
            path = parent_rel;
        }
        out
    }

    /// How many files are open through the mount.
    pub fn open_files(&self) -> usize {
        self.handles().len()
    }

    /// How many inodes the table holds.
    pub fn inodes(&self) -> usize {
        self.nodes().by_ino.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::PutPayload;

    fn fs(store: Arc<InMemory>, prefix: &str) -> Fs {
        Fs::new(
            store,
            prefix,
            FsOpts {
                dir_ttl: Duration::from_secs(3600),
                uid: 0,
                gid: 0,
                umask: 0o022,
                read_only: true,
                scheme: crate::core::location::Scheme::S3,
                cache_dir: std::env::temp_dir()
                    .join(format!("slate-fs-test-{}", std::process::id())),
                cache_max: 1 << 30,
                memory_limit: 256 << 20,
                write_back: None,
                storage_class: None,
                bwlimit: None,
            },
        )
        .unwrap()
    }

    async fn put(s: &InMemory, k: &str, b: Vec<u8>) {
        s.put(&StorePath::from(k), PutPayload::from(b))
            .await
            .unwrap();
    }

    #[test]
    fn a_range_is_fetched_as_parts_of_at_most_part_bytes() {
        type Case = (std::ops::Range<u64>, &'static [(u64, u64)]);
        let cases: [Case; 4] = [
            (0..0, &[]),
            (3..4, &[(3, 4)]),
            (0..PART, &[(0, PART)]),
            (5..2 * PART + 1, &[(5, PART + 5), (PART + 5, 2 * PART + 1)]),
        ];
        for (range, want) in cases {
            let got: Vec<(u64, u64)> = parts(range.clone())
                .into_iter()
                .map(|r| (r.start, r.end))
                .collect();
            assert_eq!(got, want, "{range:?}");
        }
    }

    #[test]
    fn a_path_is_at_or_under_itself_and_its_folders_only() {
        for (path, rel, want) in [
            ("a/b", "a/b", true),
            ("a/b/c", "a/b", true),
            ("a/b/c/d", "a/b", true),
            ("a/bc", "a/b", false),
            ("a/b.txt", "a/b", false),
            ("a", "a/b", false),
            ("b", "a", false),
            ("", "a", false),
            ("a/b", "", true),
            ("", "", true),
        ] {
            assert_eq!(at_or_under(path, rel), want, "{path:?} under {rel:?}");
        }
    }

    #[tokio::test]
    async fn folders_list_once_and_files_read_whole_through_a_growing_window() {
        let s = Arc::new(InMemory::new());
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        put(&s, "p/a/big.bin", big.clone()).await;
        put(&s, "p/a/sub/x.txt", b"x".to_vec()).await;
        put(&s, "p/top.txt", b"top".to_vec()).await;
        put(&s, "other/no.txt", b"no".to_vec()).await;
        let f = fs(s.clone(), "p");
        let names: Vec<String> = f
            .readdir(ROOT)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.2)
            .collect();
        assert_eq!(names, [".", "..", "a", "top.txt"]);
        let a = f.lookup(ROOT, "a").await.unwrap();
        assert_eq!(a.kind, Kind::Dir);
        let big_attr = f.lookup(a.ino, "big.bin").await.unwrap();
        assert_eq!(big_attr.size, big.len() as u64);
        assert_eq!(f.lookup(a.ino, "nope").await, Err(libc::ENOENT));
        assert_eq!(f.open(big_attr.ino, true, false).await, Err(libc::EROFS));
        assert_eq!(f.open(a.ino, false, false).await, Err(libc::EISDIR));
        let fh = f.open(big_attr.ino, false, false).await.unwrap();
        let mut out = Vec::new();
        let mut off = 0u64;
        loop {
            let b = f.read(fh, off, 128 * 1024).await.unwrap();
            if b.is_empty() {
                break;
            }
            off += b.len() as u64;
            out.extend_from_slice(&b);
        }
        assert_eq!(out, big, "every byte, in order");
        // sequential: fetched about once, not once per read
        let fetched = f.fetched.load(Ordering::Relaxed);
        assert!(fetched <= big.len() as u64 + MAX_WINDOW, "{fetched}");
        f.release(fh);
    }

    #[tokio::test]
    async fn a_random_reader_fetches_only_its_blocks_and_an_overwrite_is_stale_until_reopened() {
        let s = Arc::new(InMemory::new());
        let big = vec![5u8; 10 * 1024 * 1024];
        put(&s, "f.bin", big.clone()).await;
        let f = fs(s.clone(), "");
        let a = f.lookup(ROOT, "f.bin").await.unwrap();
        let fh = f.open(a.ino, false, false).await.unwrap();
        for off in [9_000_000u64, 100, 5_000_000] {
            assert_eq!(f.read(fh, off, 4096).await.unwrap().len(), 4096);
        }
        let fetched = f.fetched.load(Ordering::Relaxed);
        assert!(
            fetched <= 3 * BLOCK,
            "no read amplification past a block: {fetched}"
        );
        // overwritten at the store: the open file does not mix versions
        put(&s, "f.bin", vec![6u8; 10]).await;
        assert_eq!(f.read(fh, 2_000_000, 4096).await, Err(libc::ESTALE));
        f.release(fh);
        let fh = f.open(a.ino, false, false).await.unwrap();
        assert_eq!(f.read(fh, 0, 100).await.unwrap().as_ref(), &[6u8; 10]);
    }

    #[tokio::test]
    async fn many_random_reads_stay_random_and_fetch_about_a_block_each() {
        let s = Arc::new(InMemory::new());
        let size = 256u64 << 20;
        put(&s, "r.bin", vec![1u8; size as usize]).await;
        let f = fs(s.clone(), "");
        let a = f.lookup(ROOT, "r.bin").await.unwrap();
        let fh = f.open(a.ino, false, false).await.unwrap();
        // a fixed sequence of 4 KiB reads at random offsets (a linear congruential walk)
        let mut x = 12345u64;
        let reads = 2000u64;
        for _ in 0..reads {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = ((x >> 20) % (size / 4096)) * 4096;
            assert_eq!(f.read(fh, off, 4096).await.unwrap().len(), 4096);
        }
        let fetched = f.fetched.load(Ordering::Relaxed);
        assert!(
            fetched <= reads * BLOCK + BLOCK * 64,
            "{reads} random reads fetched {} MiB",
            fetched >> 20
        );
        f.release(fh);
    }

    #[tokio::test]
    async fn an_invalidated_folder_is_listed_again_within_the_ttl() {
        let s = Arc::new(InMemory::new());
        put(&s, "d/a.txt", b"a".to_vec()).await;
        let f = fs(s.clone(), "");
        let d = f.lookup(ROOT, "d").await.unwrap();
        assert!(f.lookup(d.ino, "b.txt").await.is_err());
        put(&s, "d/b.txt", b"b".to_vec()).await;
        // within the TTL the listing is trusted
        assert!(f.lookup(d.ino, "b.txt").await.is_err());
        let inval = f.invalidate("d/b.txt");
        assert_eq!(inval[0].0, d.ino);
        assert_eq!(inval[0].1, "b.txt");
        assert_eq!(f.lookup(d.ino, "b.txt").await.unwrap().size, 1);
        // a delete: gone after its invalidation
        s.delete(&StorePath::from("d/a.txt")).await.unwrap();
        f.invalidate("d/a.txt");
        assert_eq!(f.lookup(d.ino, "a.txt").await, Err(libc::ENOENT));
        // a new folder shows in its parent
        put(&s, "e/f/g.txt", b"g".to_vec()).await;
        f.invalidate("e/f/g.txt");
        assert_eq!(f.lookup(ROOT, "e").await.unwrap().kind, Kind::Dir);
    }

    #[tokio::test]
    async fn a_walk_of_the_tree_lists_sibling_folders_ahead_and_a_lone_ls_does_not() {
        let s = Arc::new(InMemory::new());
        for d in ["a", "b", "c"] {
            for sub in ["x", "y"] {
                put(&s, &format!("{d}/{sub}/f.txt"), b"f".to_vec()).await;
            }
        }
        let f = Arc::new(fs(s.clone(), ""));
        let ino = |f: &Fs, rel: &str| f.nodes().by_rel.get(rel).copied().unwrap();
        let listed = |f: &Fs, rel: &str| f.fresh(ino(f, rel)).unwrap().1;
        // `ls` of the root: its folders are not listed
        f.readdir(ROOT).await.unwrap();
        f.list_ahead(ROOT);
        for d in ["a", "b", "c"] {
            assert!(!listed(&f, d), "{d} listed by a lone ls");
        }
        // `ls b/x`: b is listed by the lookup, not read; x's siblings are not listed ahead
        let b = f.lookup(ROOT, "b").await.unwrap().ino;
        let bx = f.lookup(b, "x").await.unwrap().ino;
        f.readdir(bx).await.unwrap();
        f.list_ahead(bx);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(listed(&f, "b") && listed(&f, "b/x"));
        assert!(
            !listed(&f, "b/y"),
            "a lone ls of a subfolder listed its siblings"
        );
        // `find`: the root, then a: b and c are listed in the background, not their subfolders
        let a = ino(&f, "a");
        f.readdir(a).await.unwrap();
        f.list_ahead(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(listed(&f, "b") && listed(&f, "c")) {
            assert!(Instant::now() < deadline, "b and c were not listed ahead");
            tokio::task::yield_now().await;
        }
        assert_eq!(f.lookup(ino(&f, "b"), "x").await.unwrap().kind, Kind::Dir);
        assert!(!listed(&f, "c/x") && !listed(&f, "a/x"));
        // a listing in flight when its folder is invalidated does not count as current
        let b = ino(&f, "b");
        let epoch = f.nodes().by_ino.get(&b).map(|n| n.epoch);
        f.invalidate("b/z.txt");
        assert_ne!(f.nodes().by_ino.get(&b).map(|n| n.epoch), epoch);
        assert!(!listed(&f, "b"));
    }

    #[tokio::test]
    async fn a_folder_read_long_after_its_parent_is_not_a_walk() {
        let s = Arc::new(InMemory::new());
        for d in ["a", "b"] {
            put(&s, &format!("{d}/f.txt"), b"f".to_vec()).await;
        }
        let f = Arc::new(fs(s.clone(), ""));
        f.readdir(ROOT).await.unwrap();
        f.list_ahead(ROOT);
        // the root's entries were read a while ago
        let Some(ago) = Instant::now().checked_sub(WALK + Duration::from_secs(1)) else {
            return;
        };
        f.nodes().by_ino.get_mut(&ROOT).unwrap().read = Some(ago);
        let a = f.lookup(ROOT, "a").await.unwrap().ino;
        f.readdir(a).await.unwrap();
        f.list_ahead(a);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let b = f.nodes().by_rel.get("b").copied().unwrap();
        assert!(
            !f.fresh(b).unwrap().1,
            "an ls of a long after its parent's listed its sibling b"
        );
        // read again now, the parent makes it a walk
        f.readdir(ROOT).await.unwrap();
        f.list_ahead(ROOT);
        f.list_ahead(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f.fresh(b).unwrap().1 {
            assert!(Instant::now() < deadline, "b was not listed ahead");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn folder_keys_sort_before_every_path_and_never_meet_a_files_key() {
        use futures::FutureExt;
        let f = fs(Arc::new(InMemory::new()), "");
        let keys = |h: &Held| h.0.iter().map(|l| l.key.clone()).collect::<Vec<_>>();
        // a name starting with a control character sorts before any letter, still after
        // every folder's key
        let h = f.hold_both("\u{1}", "z/y").await;
        assert_eq!(
            keys(&h),
            [folder_key("z"), "\u{1}".to_string(), "z/y".to_string()]
        );
        drop(h);
        let h = f.hold_folders("b", "a/c").await;
        assert_eq!(
            keys(&h),
            [folder_key("a"), folder_key("a/c"), folder_key("b")]
        );
        drop(h);
        // folder `a` held alone (its rename): a path under it waits
        let renaming = f.hold_folders("a", "b").await;
        assert!(
            f.share("a/x").now_or_never().is_none(),
            "a path under a folder being renamed was held"
        );
        // a file `a` at the root, or named like the folder key's text, does not wait
        for p in ["a", "Fa", "\u{1}Fa", "b"] {
            let held = tokio::time::timeout(Duration::from_secs(10), f.hold(p))
                .await
                .unwrap_or_else(|_| panic!("file {p:?} waited for folder a's rename"));
            let turn = tokio::time::timeout(Duration::from_secs(10), f.upload_turn(p))
                .await
                .unwrap_or_else(|_| panic!("file {p:?}'s upload waited for folder a's rename"));
            drop((held, turn));
        }
        drop(renaming);
        tokio::time::timeout(Duration::from_secs(10), f.share("a/x"))
            .await
            .expect("a path under a renamed folder waited after the rename");
        // every lock went once let go
        assert!(f.paths.lock().unwrap().is_empty());
    }
}
