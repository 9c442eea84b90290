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
/// A window is fetched as parallel ranged GETs of at most this much.
pub const PART: u64 = 8 * 1024 * 1024;

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
    /// Where files open for writing are kept until they are uploaded.
    pub cache_dir: std::path::PathBuf,
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
}

impl WriteState {
    pub fn new(file: std::fs::File, path: std::path::PathBuf, dirty: bool) -> WriteState {
        WriteState {
            file,
            path,
            dirty,
            seq: Default::default(),
        }
    }
}

impl Drop for WriteState {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One open file: the version it reads and what was fetched ahead; or, written, its cache
/// file.
#[derive(Debug)]
pub struct Handle {
    pub ino: u64,
    pub rel: String,
    pub(super) key: StorePath,
    etag: Option<String>,
    /// Bytes fetched from `buf.0` on.
    buf: (u64, Bytes),
    /// Where the last read ended, and the window the next sequential read fetches.
    last_end: u64,
    window: u64,
    pub size: u64,
    pub write: Option<WriteState>,
    /// Reads of the handle take turns.
    turn: Arc<tokio::sync::Mutex<()>>,
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
    pub fetched: AtomicU64,
    /// Keys invalidated by change events.
    pub invalidations: AtomicU64,
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
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, opts: FsOpts) -> Fs {
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
                children: BTreeMap::new(),
            },
        );
        nodes.by_rel.insert(String::new(), ROOT);
        Fs {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            opts,
            nodes: Mutex::new(nodes),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            virtual_dirs: Mutex::new(HashSet::new()),
            rt: tokio::runtime::Handle::try_current().ok(),
            uploaded: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
        }
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
        let (rel, fresh) = {
            let nodes = self.nodes();
            let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
            if n.attr.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            let fresh = n.listed.is_some_and(|t| t.elapsed() < self.opts.dir_ttl);
            (n.rel.clone(), fresh)
        };
        if !fresh {
            self.list(ino, &rel).await?;
        }
        let nodes = self.nodes();
        let n = nodes.by_ino.get(&ino).ok_or(libc::ENOENT)?;
        Ok(n.children
            .iter()
            .filter_map(|(name, c)| nodes.by_ino.get(c).map(|c| (name.clone(), c.attr.clone())))
            .collect())
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

    pub(super) fn remove_child(&self, parent: u64, name: &str) {
        let mut nodes = self.nodes();
        let gone = nodes
            .by_ino
            .get_mut(&parent)
            .and_then(|p| p.children.remove(name));
        if let Some(ino) = gone {
            if let Some(n) = nodes.by_ino.remove(&ino) {
                nodes.by_rel.remove(&n.rel);
            }
        }
    }

    /// Folder `ino` is listed again at its next look.
    pub(super) fn forget_listing(&self, ino: u64) {
        if let Some(n) = self.nodes().by_ino.get_mut(&ino) {
            n.listed = None;
        }
    }

    pub(super) fn set_size(&self, ino: u64, size: u64) {
        if let Some(n) = self.nodes().by_ino.get_mut(&ino) {
            n.attr.size = size;
            n.attr.mtime = SystemTime::now();
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

    pub(super) fn is_virtual_dir(&self, rel: &str) -> bool {
        self.virtual_dirs().contains(rel)
    }

    /// A new handle on `ino`.
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
                etag,
                size,
                buf: (0, Bytes::new()),
                last_end: 0,
                window: BLOCK,
                write,
                turn: Arc::new(tokio::sync::Mutex::new(())),
            },
        );
        fh
    }

    /// Lists folder `rel` with the delimiter (one listing, every page) and stores its entries.
    async fn list(&self, ino: u64, rel: &str) -> Result<(), Errno> {
        let full = join(&self.prefix, rel);
        let at = Instant::now();
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
        let writing: Vec<(String, u64)> = self
            .handles()
            .values()
            .filter(|h| h.write.is_some())
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
            n.listed = Some(at);
        }
        Ok(())
    }

    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr, Errno> {
        self.children(parent)
            .await?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
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
        Ok(self.new_handle(ino, &rel, meta.e_tag, meta.size, None))
    }

    pub fn release(&self, fh: u64) {
        self.handles().remove(&fh);
    }

    /// The size an open file reads as.
    pub fn open_size(&self, fh: u64) -> Option<(u64, u64)> {
        self.handles().get(&fh).map(|h| (h.ino, h.size))
    }

    /// Up to `size` bytes at `offset` of the version `fh` opened.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes, Errno> {
        // one read of a handle at a time: the kernel's parallel read-ahead requests wait for
        // the window the first one fetches instead of each fetching its own block
        let turn = self
            .handles()
            .get(&fh)
            .map(|h| h.turn.clone())
            .ok_or(libc::EBADF)?;
        let _turn = turn.lock().await;
        let (key, etag, file_size, fetch) = {
            let mut handles = self.handles();
            let h = handles.get_mut(&fh).ok_or(libc::EBADF)?;
            if offset >= h.size || size == 0 {
                return Ok(Bytes::new());
            }
            if let Some(w) = &h.write {
                let n = (size as u64).min(h.size - offset) as usize;
                let mut buf = vec![0u8; n];
                use std::os::unix::fs::FileExt;
                w.file
                    .read_exact_at(&mut buf, offset)
                    .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
                return Ok(Bytes::from(buf));
            }
            let end = (offset + size as u64).min(h.size);
            let (start, buf) = (&h.buf.0, &h.buf.1);
            if offset >= *start && end <= start + buf.len() as u64 {
                let from = (offset - start) as usize;
                let out = buf.slice(from..from + (end - offset) as usize);
                h.last_end = end;
                return Ok(out);
            }
            // sequential (at or just past where reading was, out-of-order read-ahead
            // included): the window doubles, to its cap; a seek starts small again
            let buf_end = start + buf.len() as u64;
            let near = offset > 0
                && offset + h.window >= h.last_end.min(*start)
                && offset <= buf_end.max(h.last_end) + h.window;
            h.window = if near {
                (h.window * 2).min(MAX_WINDOW)
            } else {
                BLOCK
            };
            let want = h.window.max(end - offset);
            let fetch_end = (offset + want).min(h.size);
            (h.key.clone(), h.etag.clone(), h.size, offset..fetch_end)
        };
        let bytes = self.fetch(&key, etag, fetch.clone()).await?;
        let got = bytes.len() as u64;
        if got < fetch.end - fetch.start {
            tracing::warn!(key = %key, "mount: short read ({got} of {} bytes)", fetch.end - fetch.start);
            return Err(libc::EIO);
        }
        let _ = file_size;
        let n = (size as u64).min(got) as usize;
        let out = bytes.slice(0..n);
        if let Some(h) = self.handles().get_mut(&fh) {
            h.buf = (fetch.start, bytes);
            h.last_end = offset + n as u64;
        }
        Ok(out)
    }

    /// `range` of `key` at version `etag`, as parallel ranged GETs of at most [`PART`].
    async fn fetch(
        &self,
        key: &StorePath,
        etag: Option<String>,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, Errno> {
        let mut parts = Vec::new();
        let mut at = range.start;
        while at < range.end {
            let end = (at + PART).min(range.end);
            parts.push(at..end);
            at = end;
        }
        let gets = parts.into_iter().map(|r| {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(r)),
                if_match: etag.clone(),
                ..Default::default()
            };
            async move {
                let got = self.store.get_opts(key, opts).await?;
                got.bytes().await
            }
        });
        let got = futures::future::try_join_all(gets).await.map_err(|e| {
            if matches!(e, object_store::Error::Precondition { .. }) {
                tracing::warn!(key = %key, "mount: the object changed while open: the open file's version is gone (ESTALE); open it again");
            } else {
                tracing::warn!(key = %key, error = %e, "mount: read failed");
            }
            errno(&e)
        })?;
        let total: usize = got.iter().map(Bytes::len).sum();
        self.fetched.fetch_add(total as u64, Ordering::Relaxed);
        if got.len() == 1 {
            return Ok(got.into_iter().next().unwrap_or_default());
        }
        let mut out = Vec::with_capacity(total);
        for b in got {
            out.extend_from_slice(&b);
        }
        Ok(Bytes::from(out))
    }

    /// Forgets what the mount knows of `rel` (a key changed at the store): its folder is
    /// listed again at the next look, and its attributes are read again. The inodes to
    /// invalidate in the kernel: (parent, name) of the entry, and the entry's inode.
    pub fn invalidate(&self, rel: &str) -> Vec<(u64, String, Option<u64>)> {
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
                cache_dir: std::env::temp_dir(),
            },
        )
    }

    async fn put(s: &InMemory, k: &str, b: Vec<u8>) {
        s.put(&StorePath::from(k), PutPayload::from(b))
            .await
            .unwrap();
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
}
