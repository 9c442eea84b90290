//! The mount's disk cache of fetched blocks: each object's blocks live in a sparse file of
//! its own with a map of which [`BLOCK`]s are there, valid while the object's ETag is the
//! one they were fetched at; the least recently used objects are evicted when the total
//! passes `max` bytes. Reads are `pread`s of those files (the kernel's page cache, not this
//! process's memory). The map is the process's own: a new mount starts with an empty cache
//! (its folder, `blocks/TAG`, is removed at exit, and those of mounts that are gone are
//! removed at start: [`Tag`]).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::fs::BLOCK;

struct Obj {
    etag: String,
    size: u64,
    /// Its file, while open: the least recently used objects' are closed past
    /// [`OPEN_FILES`] and opened again when wanted.
    file: Option<Arc<std::fs::File>>,
    /// Which file: the number in its name (a file replaced under the same key is another).
    n: u64,
    path: PathBuf,
    /// The blocks here, and when each was last written or read.
    blocks: HashMap<u64, u64>,
    used: u64,
    /// Raised at each hole punched in its file: a read or a write made outside the lock
    /// counts only when no punch came meanwhile (it may have punched those very blocks).
    punched: u64,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<String, Obj>,
    /// Bytes the blocks of every object take.
    total: u64,
    clock: u64,
    next_file: u64,
    /// Objects whose file is open.
    open: usize,
}

/// Files of the cache kept open at once: a cache of many small objects must not run the
/// process out of descriptors.
const OPEN_FILES: usize = 256;

/// Fetched blocks of objects, on disk, bounded.
pub struct BlockCache {
    dir: PathBuf,
    max: u64,
    /// Files kept open at once ([`OPEN_FILES`]).
    open_max: usize,
    inner: Mutex<Inner>,
    /// Reads answered from the cache, and bytes evicted, for `/metrics` and tests.
    pub hits: std::sync::atomic::AtomicU64,
    pub evicted: std::sync::atomic::AtomicU64,
}

/// What the cache knows one version of an object by: versions of a key live side by side,
/// so a file open on the old version reads its blocks after an overwrite elsewhere.
fn id(key: &str, etag: &str) -> String {
    format!("{key}\u{0}{etag}")
}

/// The bytes block `b` of a `size`-byte object holds.
fn block_len(b: u64, size: u64) -> u64 {
    BLOCK.min(size.saturating_sub(b * BLOCK))
}

/// A mount's name for its files in the cache folder (`PID-N`: `blocks/TAG`, `w-TAG-…`,
/// `dirty/TAG-…`), and its claim on them: an exclusive lock on `locks/TAG`, held while the
/// mount lives. A lock, not the PID alone, tells whose files are whose: a mount restarted
/// in a container gets the same PID as the one before it, and processes of other PID
/// namespaces (containers sharing the folder) have PIDs this one cannot see.
pub struct Tag {
    pub name: String,
    _lock: std::fs::File,
    /// The folder of locks.
    dir: PathBuf,
}

impl Drop for Tag {
    /// A mount that ends removes its lock file, still holding the lock (a claim checks
    /// that the file it locked is still at its path).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(&self.name));
    }
}

/// Mounts this process made so far (the `N` of their tags).
static MOUNTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl Tag {
    /// A tag nobody holds, claimed: what a mount that held it before left (blocks, cache
    /// files of open handles) is removed; so is what any other mount that is gone left.
    pub fn claim(root: &Path) -> std::io::Result<Tag> {
        let locks = root.join("locks");
        // a folder the mount cannot write fails every tag alike: said at once, not after
        // trying them all
        let cannot = |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot create mount lock in {}: {}",
                    locks.display(),
                    os_reason(&e)
                ),
            )
        };
        std::fs::create_dir_all(&locks).map_err(cannot)?;
        // the same name tried once more: its file was refused, then gone
        let (mut name, mut again) = (String::new(), false);
        for _ in 0..10_000 {
            let retry = std::mem::take(&mut again);
            if !retry {
                let n = MOUNTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                name = format!("{}-{n}", std::process::id());
            }
            match unheld(&locks, &name) {
                Ok(Some(lock)) => {
                    remove_left(root, &name);
                    sweep(root, &name);
                    return Ok(Tag {
                        name,
                        _lock: lock,
                        dir: locks,
                    });
                }
                // held by a live mount
                Ok(None) => continue,
                Err(Locking::Open(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    // another user's lock file (a container of another uid): not ours
                    if locks.join(&name).symlink_metadata().is_ok() {
                        continue;
                    }
                    // no such file: the folder refuses it, unless another mount's sweep
                    // removed that user's file meanwhile, which the same name tells
                    if retry {
                        return Err(cannot(e));
                    }
                    again = true;
                }
                Err(Locking::Open(e)) => return Err(cannot(e)),
                Err(Locking::Lock(e)) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!(
                            "{}: locking (the cache folder must take flock locks): {e}",
                            locks.join(&name).display()
                        ),
                    ))
                }
            }
        }
        Err(std::io::Error::other(format!(
            "{}: no free mount tag",
            locks.display()
        )))
    }
}

/// The OS's words for `e`, without the "(os error N)" that follows them.
fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(n) => text
            .strip_suffix(&format!(" (os error {n})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

/// Why a lock was not taken: its file could not be opened (or made), or locked.
enum Locking {
    Open(std::io::Error),
    Lock(std::io::Error),
}

/// The lock of `tag` in `locks`, taken, when nobody holds it (None when a live mount
/// does). The lock file is checked to still be the one at its path once locked: a sweep
/// removes the lock files of tags that are gone, and a lock on a removed file claims
/// nothing.
fn unheld(locks: &Path, tag: &str) -> Result<Option<std::fs::File>, Locking> {
    use std::os::unix::fs::MetadataExt;
    let path = locks.join(tag);
    loop {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Locking::Open)?;
        if !try_lock(&f).map_err(Locking::Lock)? {
            return Ok(None);
        }
        let held = f.metadata().map_err(Locking::Lock)?;
        match std::fs::metadata(&path) {
            Ok(m) if m.ino() == held.ino() && m.dev() == held.dev() => return Ok(Some(f)),
            // removed (or made anew) between the open and the lock: again
            _ => continue,
        }
    }
}

/// Takes an exclusive lock on `f` (flock: it holds across PID namespaces, and goes with
/// the process, however it ends); false when another open file holds it.
pub fn try_lock(f: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns; no memory is passed
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// The tag of a name the cache folder holds: `TAG` of `TAG` (a folder of blocks),
/// `w-TAG-N` (a handle's cache file) and `TAG-N` (a file in `dirty/`).
pub fn tag_of(name: &str) -> Option<&str> {
    let name = name.strip_prefix("w-").unwrap_or(name);
    let mut dashes = name.match_indices('-').map(|(i, _)| i);
    let first = dashes.next()?;
    let end = dashes.next().unwrap_or(name.len());
    let tag = &name[..end];
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(&tag[..first]) && digits(&tag[first + 1..])).then_some(tag)
}

/// Proof that the mount of a tag is gone: its lock, taken (the lock file goes when this
/// is dropped), or, for a tag of a slate from before locks (no lock file), its PID gone
/// from /proc.
pub struct Gone {
    lock: Option<(std::fs::File, PathBuf)>,
}

impl Drop for Gone {
    fn drop(&mut self) {
        if let Some((_, path)) = &self.lock {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether the mount of `tag` (its files in `root`) is gone: Some while the caller
/// removes or takes over what it left. A tag without a lock file is judged by its PID
/// when `by_pid` (blocks and handles' files, which a slate from before locks may still
/// use), else gone (files kept for an upload: a mount that ended removed its lock file,
/// and a restarted one may have its PID).
pub fn gone(root: &Path, tag: &str, by_pid: bool) -> Option<Gone> {
    let locks = root.join("locks");
    let path = locks.join(tag);
    if path.exists() {
        let lock = unheld(&locks, tag).ok().flatten()?;
        return Some(Gone {
            lock: Some((lock, path)),
        });
    }
    if !by_pid {
        return Some(Gone { lock: None });
    }
    // named before mounts took locks: `PID-N` (or `PID`) of a process of this host
    let pid = tag.split('-').next()?;
    let alive = pid.parse::<u32>().is_ok() && Path::new(&format!("/proc/{pid}")).exists();
    (!alive).then_some(Gone { lock: None })
}

/// Removes what the mount of `tag` left in `root`: its folder of blocks and the cache
/// files of its open handles. What it closed with `--write-back` and did not upload
/// (`dirty/`) stays: the state lists it, and the mount uploads it.
fn remove_left(root: &Path, tag: &str) {
    let _ = std::fs::remove_dir_all(root.join("blocks").join(tag));
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("w-") && tag_of(&name) == Some(tag) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Removes what every mount that is gone left in `root` (other than `mine`), and their
/// lock files.
fn sweep(root: &Path, mine: &str) {
    let mut tags = std::collections::BTreeSet::new();
    let blocks = root.join("blocks");
    for dir in [blocks.clone(), root.join("locks"), root.to_path_buf()] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if dir == root && !name.starts_with("w-") {
                    continue;
                }
                if let Some(t) = tag_of(&name) {
                    tags.insert(t.to_string());
                } else if dir == blocks && name.bytes().all(|b| b.is_ascii_digit()) {
                    // `blocks/PID`, of a slate from before mounts had tags
                    tags.insert(name);
                }
            }
        }
    }
    tags.remove(mine);
    for t in tags {
        if let Some(_gone) = gone(root, &t, true) {
            remove_left(root, &t);
        }
    }
}

impl BlockCache {
    /// A cache of at most `max` bytes in `root/blocks/TAG` (the mount's [`Tag`]).
    pub fn new(root: &Path, max: u64, tag: &str) -> std::io::Result<BlockCache> {
        let dir = root.join("blocks").join(tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(BlockCache {
            dir,
            max,
            open_max: OPEN_FILES,
            inner: Mutex::new(Inner::default()),
            hits: Default::default(),
            evicted: Default::default(),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cache's limit.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.inner().total
    }

    /// `range` of `key` at `etag`, when every block of it is here.
    pub fn get(&self, key: &str, etag: &str, range: std::ops::Range<u64>) -> Option<Bytes> {
        if range.is_empty() {
            return Some(Bytes::new());
        }
        let file = {
            let mut inner = self.inner();
            inner.clock += 1;
            let clock = inner.clock;
            let o = inner.objects.get_mut(&id(key, etag))?;
            if o.etag != etag {
                return None;
            }
            let (first, last) = (range.start / BLOCK, (range.end - 1) / BLOCK);
            if !(first..=last).all(|b| o.blocks.contains_key(&b)) {
                return None;
            }
            for b in first..=last {
                o.blocks.insert(b, clock);
            }
            o.used = clock;
            let (n, punched) = (o.n, o.punched);
            (self.file_of(&mut inner, &id(key, etag))?, n, punched)
        };
        let (file, n, punched) = file;
        // an object evicted meanwhile is unlinked, not overwritten: its blocks still read;
        // one whose blocks were punched meanwhile may read zeros: a miss
        let mut buf = vec![0u8; (range.end - range.start) as usize];
        file.read_exact_at(&mut buf, range.start).ok()?;
        if self.punched_since(key, etag, n, punched) {
            return None;
        }
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Bytes::from(buf))
    }

    /// Keeps `data`, fetched from `start` (a block boundary) of `key` at `etag`, a
    /// `size`-byte object: its whole blocks (and the object's last one) are kept.
    pub fn put(&self, key: &str, etag: &str, size: u64, start: u64, data: &[u8]) {
        if start % BLOCK != 0 || self.max == 0 {
            return;
        }
        let end = start + data.len() as u64;
        let blocks: Vec<u64> = (start / BLOCK..end.div_ceil(BLOCK))
            .filter(|b| b * BLOCK + block_len(*b, size) <= end)
            .collect();
        if blocks.is_empty() {
            return;
        }
        let vid = id(key, etag);
        let (file, n, punched) = match self.object(&vid, etag, size) {
            Some(f) => f,
            None => return,
        };
        let stored = (blocks[0] * BLOCK - start) as usize;
        let stored_end =
            (blocks[blocks.len() - 1] * BLOCK + block_len(blocks[blocks.len() - 1], size)).min(end)
                - start;
        if let Err(e) = file.write_all_at(&data[stored..stored_end as usize], blocks[0] * BLOCK) {
            tracing::warn!(key, error = %e, "mount: writing the block cache failed");
            return;
        }
        let mut inner = self.inner();
        inner.clock += 1;
        let clock = inner.clock;
        let Some(o) = inner.objects.get_mut(&vid) else {
            return;
        };
        // the object was evicted or replaced while this was written: its blocks are not
        // this file's
        if o.n != n {
            return;
        }
        // holes were punched while this was written, maybe in its blocks: not kept
        if o.punched != punched {
            return;
        }
        let mut added = 0;
        for b in blocks {
            if o.blocks.insert(b, clock).is_none() {
                added += block_len(b, size);
            }
        }
        o.used = clock;
        inner.total += added;
        self.evict(&mut inner, &vid);
    }

    /// The file of `key` at `etag` (a new one when the object is new here or changed).
    fn object(&self, key: &str, etag: &str, size: u64) -> Option<(Arc<std::fs::File>, u64, u64)> {
        let mut inner = self.inner();
        if let Some(o) = inner.objects.get(key) {
            if o.etag == etag {
                let (n, punched) = (o.n, o.punched);
                return Some((self.file_of(&mut inner, key)?, n, punched));
            }
        }
        Self::drop_object(&mut inner, key);
        inner.next_file += 1;
        let path = self.dir.join(format!("{}", inner.next_file));
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
        {
            Ok(f) => Arc::new(f),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "mount: the block cache's file");
                return None;
            }
        };
        inner.clock += 1;
        let used = inner.clock;
        let n = inner.next_file;
        inner.objects.insert(
            key.to_string(),
            Obj {
                etag: etag.to_string(),
                size,
                file: Some(file.clone()),
                n,
                path,
                blocks: HashMap::new(),
                used,
                punched: 0,
            },
        );
        inner.open += 1;
        self.close_beyond(&mut inner, key);
        Some((file, n, 0))
    }

    /// Object `vid`'s file, opened again if it was closed.
    fn file_of(&self, inner: &mut Inner, vid: &str) -> Option<Arc<std::fs::File>> {
        let o = inner.objects.get_mut(vid)?;
        if let Some(f) = &o.file {
            return Some(f.clone());
        }
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&o.path)
        {
            Ok(f) => Arc::new(f),
            Err(e) => {
                tracing::warn!(file = %o.path.display(), error = %e, "mount: the block cache's file");
                return None;
            }
        };
        o.file = Some(f.clone());
        inner.open += 1;
        self.close_beyond(inner, vid);
        Some(f)
    }

    /// Closes the files of the least recently used objects (but `keep`'s) past the limit.
    fn close_beyond(&self, inner: &mut Inner, keep: &str) {
        while inner.open > self.open_max {
            let lru = inner
                .objects
                .iter_mut()
                .filter(|(k, o)| o.file.is_some() && k.as_str() != keep)
                .min_by_key(|(_, o)| o.used)
                .map(|(_, o)| o);
            let Some(o) = lru else { break };
            o.file = None;
            inner.open -= 1;
        }
    }

    /// Removes object `vid` and its file.
    fn drop_object(inner: &mut Inner, vid: &str) -> Option<u64> {
        let old = inner.objects.remove(vid)?;
        let bytes: u64 = old.blocks.keys().map(|b| block_len(*b, old.size)).sum();
        inner.total -= bytes;
        if old.file.is_some() {
            inner.open -= 1;
        }
        let _ = std::fs::remove_file(&old.path);
        Some(bytes)
    }

    /// Whether holes were punched in `key` at `etag`'s `file` since its count was `punched`.
    fn punched_since(&self, key: &str, etag: &str, n: u64, punched: u64) -> bool {
        self.inner()
            .objects
            .get(&id(key, etag))
            .is_some_and(|o| o.n == n && o.punched != punched)
    }

    /// Drops the least recently used objects until the cache is under its limit; `keep`
    /// (just written) goes last, and then only the blocks it holds beyond the limit.
    fn evict(&self, inner: &mut Inner, keep: &str) {
        while inner.total > self.max {
            let victim = inner
                .objects
                .iter()
                .filter(|(k, _)| k.as_str() != keep)
                .min_by_key(|(_, o)| o.used)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else { break };
            if let Some(bytes) = Self::drop_object(inner, &victim) {
                self.evicted
                    .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if inner.total > self.max {
            // one object larger than the cache: its least recently used blocks go
            let file = self.file_of(inner, keep);
            if let (Some(o), Some(file)) = (inner.objects.get_mut(keep), file) {
                let mut blocks: Vec<(u64, u64)> = o.blocks.iter().map(|(b, u)| (*u, *b)).collect();
                blocks.sort_unstable();
                let blocks = blocks.into_iter().map(|(_, b)| b);
                let mut over = inner.total - self.max;
                let mut freed = 0;
                for b in blocks {
                    if over == 0 {
                        break;
                    }
                    let len = block_len(b, o.size);
                    o.blocks.remove(&b);
                    o.punched += 1;
                    punch(&file, b * BLOCK, len);
                    freed += len;
                    over = over.saturating_sub(len);
                }
                inner.total -= freed;
                self.evicted
                    .fetch_add(freed, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Whether every block of `range` of `key` at `etag` is here.
    pub fn has(&self, key: &str, etag: &str, range: std::ops::Range<u64>) -> bool {
        if range.is_empty() {
            return true;
        }
        let inner = self.inner();
        inner.objects.get(&id(key, etag)).is_some_and(|o| {
            o.etag == etag
                && (range.start / BLOCK..=(range.end - 1) / BLOCK)
                    .all(|b| o.blocks.contains_key(&b))
        })
    }

    /// Forgets every version of `key` (written through the mount).
    pub fn forget(&self, key: &str) {
        let mut inner = self.inner();
        let prefix = id(key, "");
        let ids: Vec<String> = inner
            .objects
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        for k in ids {
            Self::drop_object(&mut inner, &k);
        }
    }

    /// Bytes the cache's files take on disk (blocks punched out or never written excluded).
    pub fn on_disk(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.blocks() * 512)
                    .sum()
            })
            .unwrap_or(0)
    }
}

impl Drop for BlockCache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Frees `[off, off + len)` of `file` on disk (a hole reads as zeros; the map no longer
/// names those blocks).
fn punch(file: &std::fs::File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open descriptor this process owns; no memory is passed
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        )
    };
    if r != 0 {
        tracing::debug!(
            "mount: punching the block cache failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The default limit: a tenth of the free space of `dir`'s file system, at most 20 GiB.
pub fn default_max(dir: &Path) -> u64 {
    const CAP: u64 = 20 << 30;
    let _ = std::fs::create_dir_all(dir);
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return 1 << 30;
    };
    // SAFETY: statvfs writes into the zeroed struct it is given; the path is NUL-terminated
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return 1 << 30;
    }
    (st.f_bavail as u64 * st.f_frsize as u64 / 10).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(max: u64) -> (tempfile::TempDir, BlockCache) {
        let d = tempfile::tempdir().unwrap();
        let c = BlockCache::new(d.path(), max, "1-1").unwrap();
        (d, c)
    }

    #[test]
    fn the_tag_of_each_name_in_the_cache_folder() {
        for (name, tag) in [
            ("12-3", Some("12-3")),
            ("w-12-3-40", Some("12-3")),
            ("12-3-40", Some("12-3")),
            ("w-12", None),
            ("12", None),
            ("state.db", None),
            ("x-3-4", None),
            ("12--4", None),
            ("w-", None),
        ] {
            assert_eq!(tag_of(name), tag, "{name}");
        }
    }

    #[test]
    fn a_claim_takes_a_free_tag_and_removes_what_only_gone_mounts_left() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let pid = std::process::id();
        // left by: a mount that is gone; one of this very PID before a restart (a container
        // gives the same PID again); a live mount elsewhere (another PID namespace: its PID
        // means nothing here), which holds its lock
        let dead = "999999-1".to_string();
        let restarted = format!("{pid}-999999");
        let live = "999998-2".to_string();
        std::fs::create_dir_all(root.join("locks")).unwrap();
        for t in [&dead, &restarted, &live] {
            std::fs::create_dir_all(root.join("blocks").join(t)).unwrap();
            std::fs::write(root.join("blocks").join(t).join("1"), b"b").unwrap();
            std::fs::write(root.join(format!("w-{t}-5")), b"w").unwrap();
        }
        // a killed mount leaves its lock file, which nobody holds
        for t in [&dead, &restarted] {
            std::fs::File::create(root.join("locks").join(t)).unwrap();
        }
        let held = std::fs::File::create(root.join("locks").join(&live)).unwrap();
        assert!(try_lock(&held).unwrap());
        let a = Tag::claim(root).unwrap();
        let b = Tag::claim(root).unwrap();
        assert_ne!(a.name, b.name, "two claims of one process got one tag");
        for t in [&dead, &restarted] {
            assert!(!root.join("blocks").join(t).exists(), "{t}'s blocks stayed");
            assert!(!root.join(format!("w-{t}-5")).exists(), "{t}'s file stayed");
        }
        assert!(root.join("blocks").join(&live).join("1").exists());
        assert!(root.join(format!("w-{live}-5")).exists());
        // a tag held by a live claim is not taken, nor its files judged left behind
        assert!(
            gone(root, &a.name, true).is_none(),
            "a live tag was judged gone"
        );
        drop(a);
        let name = b.name.clone();
        drop(b);
        assert!(
            !root.join("locks").join(&name).exists(),
            "a lock file stayed"
        );
        // a tag of a slate from before locks: judged by its PID
        assert!(
            gone(root, &format!("{pid}-7"), true).is_none(),
            "this live PID judged gone"
        );
        assert!(gone(root, "999999-7", true).is_some());
        assert!(gone(root, &format!("{pid}-7"), false).is_some());
        // and its folder of blocks named by the PID alone goes too
        std::fs::create_dir_all(root.join("blocks").join("999997")).unwrap();
        let c = Tag::claim(root).unwrap();
        assert!(!root.join("blocks").join("999997").exists());
        drop(c);
    }

    #[test]
    fn a_claim_in_a_lock_folder_it_cannot_write_fails_at_once_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let claim_err = |root: &Path| match Tag::claim(root) {
            Ok(t) => panic!("claimed {} in a folder it cannot write", t.name),
            Err(e) => e.to_string(),
        };
        // a lock folder made read-only by its mode: that stops writes unless the test runs
        // as root (which writes anyway); checked first
        let ro = d.path().join("ro");
        let locks = ro.join("locks");
        std::fs::create_dir_all(&locks).unwrap();
        std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o555)).unwrap();
        let probe = locks.join("probe");
        let mode_stops_writes = std::fs::File::create(&probe).is_err();
        let _ = std::fs::remove_file(&probe);
        if mode_stops_writes {
            let before = MOUNTS.load(std::sync::atomic::Ordering::Relaxed);
            let e = claim_err(&ro);
            let tried = MOUNTS.load(std::sync::atomic::Ordering::Relaxed) - before;
            assert_eq!(
                e,
                format!(
                    "cannot create mount lock in {}: Permission denied",
                    locks.display()
                )
            );
            // other tests claim tags meanwhile, but not thousands
            assert!(tried < 1000, "{tried} tags tried");
        }
        std::fs::set_permissions(&locks, std::fs::Permissions::from_mode(0o755)).unwrap();
        // a lock folder under a regular file cannot be made, by root either
        let file = d.path().join("file");
        std::fs::write(&file, b"not a folder").unwrap();
        assert_eq!(
            claim_err(&file),
            format!(
                "cannot create mount lock in {}: Not a directory",
                file.join("locks").display()
            )
        );
    }

    #[test]
    fn only_the_most_recently_used_files_stay_open_and_the_others_open_again() {
        let (_d, mut c) = cache(1 << 30);
        c.open_max = 3;
        let body = |i: u8| vec![i; BLOCK as usize];
        for i in 0..10u8 {
            c.put(&format!("k{i}"), "e", BLOCK, 0, &body(i));
        }
        let open = |c: &BlockCache| {
            let inner = c.inner();
            let files = inner.objects.values().filter(|o| o.file.is_some()).count();
            assert_eq!(files, inner.open);
            files
        };
        assert_eq!(open(&c), 3);
        for i in 0..10u8 {
            let got = c.get(&format!("k{i}"), "e", 0..BLOCK);
            assert_eq!(got.as_deref(), Some(&body(i)[..]), "k{i}");
            assert!(open(&c) <= 3);
        }
        // the files of closed objects still go with them
        c.forget("k0");
        assert!(c.get("k0", "e", 0..1).is_none());
        assert!(open(&c) <= 3);
        assert_eq!(c.held(), 9 * BLOCK);
    }

    #[test]
    fn blocks_are_kept_whole_and_read_back_only_at_their_etag() {
        let (_d, c) = cache(1 << 30);
        let size = 3 * BLOCK + 10;
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        // a fetch of a block and a half keeps one block
        c.put("k", "e1", size, 0, &data[..(BLOCK + BLOCK / 2) as usize]);
        assert_eq!(c.held(), BLOCK);
        assert_eq!(c.get("k", "e1", 10..100).as_deref(), Some(&data[10..100]));
        assert!(
            c.get("k", "e1", BLOCK - 1..BLOCK + 1).is_none(),
            "block 1 is not whole"
        );
        assert!(c.get("k", "e2", 10..100).is_none(), "another version");
        // the object's last, short block counts as whole
        c.put("k", "e1", size, 3 * BLOCK, &data[(3 * BLOCK) as usize..]);
        assert_eq!(
            c.get("k", "e1", 3 * BLOCK..size).as_deref(),
            Some(&data[(3 * BLOCK) as usize..])
        );
        assert_eq!(c.held(), BLOCK + 10);
        // a put not on a block boundary is not kept
        c.put("k", "e1", size, 5, &data[5..]);
        assert!(c.get("k", "e1", BLOCK..BLOCK + 1).is_none());
        // a new version lives beside the old one (a file open on it reads on)
        c.put("k", "e2", size, 0, &vec![9u8; BLOCK as usize]);
        assert_eq!(c.held(), 2 * BLOCK + 10);
        assert_eq!(c.get("k", "e1", 10..11).as_deref(), Some(&data[10..11]));
        assert_eq!(c.get("k", "e2", 0..2).as_deref(), Some(&[9u8, 9][..]));
        c.forget("k");
        assert_eq!(c.held(), 0);
        assert!(c.get("k", "e2", 0..2).is_none());
    }

    #[test]
    fn the_least_recently_used_objects_go_first_and_the_cache_stays_under_its_limit() {
        let (_d, c) = cache(4 * BLOCK);
        let block = vec![1u8; BLOCK as usize];
        let two = vec![2u8; 2 * BLOCK as usize];
        c.put("a", "e", 2 * BLOCK, 0, &two);
        c.put("b", "e", 2 * BLOCK, 0, &two);
        assert_eq!(c.held(), 4 * BLOCK);
        // a is read: b is now the least recently used
        assert!(c.get("a", "e", 0..1).is_some());
        c.put("c", "e", BLOCK, 0, &block);
        assert!(c.held() <= 4 * BLOCK);
        assert!(c.get("b", "e", 0..1).is_none(), "b went");
        assert!(c.get("a", "e", 0..1).is_some(), "a stayed");
        assert!(c.get("c", "e", 0..1).is_some());
        // one object larger than the cache: its lowest blocks go, and the disk holds no more
        let big = vec![3u8; 10 * BLOCK as usize];
        c.put("big", "e", 10 * BLOCK, 0, &big);
        assert!(c.held() <= 4 * BLOCK, "{}", c.held());
        assert!(c.on_disk() <= 4 * BLOCK + 4096 * 4, "{}", c.on_disk());
        assert!(c.get("big", "e", 9 * BLOCK..10 * BLOCK).is_some());
        assert!(c.get("big", "e", 0..1).is_none());
        // within one object, the blocks read last stay: block 6 is read, then two more come
        assert!(c.get("big", "e", 6 * BLOCK..6 * BLOCK + 1).is_some());
        c.put("big", "e", 10 * BLOCK, 0, &big[..2 * BLOCK as usize]);
        assert!(c.has("big", "e", 6 * BLOCK..7 * BLOCK), "read last: kept");
        assert!(c.has("big", "e", 0..2 * BLOCK));
        assert!(!c.has("big", "e", 7 * BLOCK..8 * BLOCK), "older: gone");
        assert!(c.evicted.load(std::sync::atomic::Ordering::Relaxed) >= 10 * BLOCK);
    }
}
