//! Local folders as a store: streaming walkers, the key → path mapping that refuses keys
//! escaping the root, deletes that never go through a symlink, the sweep of temporary files
//! left by a killed slate, and the one symlink rule of a local source.
//!
//! Symlinks: nothing outside a root. A symlink inside a local source is skipped, with a
//! notice (as rclone does). With `--copy-links` (a local source [`Location`]'s
//! `copy_links`) a link is followed, but only when its canonical target is inside the
//! canonical source root, and never to a folder on its own way down (a loop); a link that
//! breaks either is skipped with a warning naming it. The walkers ([`walk`],
//! [`walk_parallel`], [`walk_sorted_with`]), the single-key [`probe`] and the reads of file
//! content ([`open_source`]) all apply that one [`Rule`]; a read then opens the file with
//! `openat2(2)` beneath the root with no symlink on the way, so a link swapped in after the
//! listing or the probe is refused, never followed out of the root.
//!
//! [`Location`]: crate::core::location::Location

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::core::error::SlateError;

/// Prefix of slate's temporary files; the walker never lists them.
pub const TMP_PREFIX: &str = ".slate-tmp-";

/// A temporary file of a slate process that no longer runs on this machine
/// (`.slate-tmp-PID-RANDOM`, PID not alive).
pub fn is_orphan_temp(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix(TMP_PREFIX)
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return false;
    };
    if pid <= 0 || pid as u32 == std::process::id() {
        return false;
    }
    // SAFETY: signal 0 delivers nothing; it only asks whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Walks `root` only to remove orphaned temporary files (see [`is_orphan_temp`]).
pub fn sweep_orphan_temps(root: &Path) -> Result<(), SlateError> {
    if !root.exists() {
        return Ok(());
    }
    let mut rule = rule_for(root, false)?;
    rule.sweep = true;
    walk_from(&rule, vec![Dir::root(&rule)], &mut |_| true)
}

/// Maps a key to a path under `root`, refusing anything that could land outside it.
pub fn safe_join(root: &Path, key: &str) -> Result<PathBuf, SlateError> {
    let err = |why: &str| SlateError::UnsafeKey {
        key: key.escape_debug().to_string(),
        root: root.display().to_string(),
        why: why.to_string(),
    };
    if key.is_empty() {
        return Err(err("empty key"));
    }
    if key.contains('\0') {
        return Err(err("contains a NUL byte"));
    }
    if key.starts_with('/') {
        return Err(err("absolute key"));
    }
    let mut path = root.to_path_buf();
    for seg in key.split('/') {
        match seg {
            "" => return Err(err("empty path segment ('//' or trailing '/')")),
            "." | ".." => return Err(err("'.' or '..' path segment")),
            s if s.len() > 255 => return Err(err("a path segment is longer than 255 bytes")),
            s => path.push(s),
        }
    }
    Ok(path)
}

/// One file found by the walker.
#[derive(Debug, Clone)]
pub struct LocalFile {
    /// Path relative to the walked root, `/`-separated: the key.
    pub rel: String,
    pub size: u64,
    pub mtime: Option<SystemTime>,
}

fn local_file(rel: String, md: &std::fs::Metadata) -> LocalFile {
    LocalFile {
        rel,
        size: md.len(),
        mtime: md.modified().ok(),
    }
}

fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

const SKIP_NOTICE: &str =
    "skipping symlink (--copy-links follows links that stay inside the source root)";

/// The symlink rule of one local source: nothing outside the root. A link is skipped with a
/// notice, unless `follow` (`--copy-links`); a followed link must lead inside the root (its
/// canonical target under the canonical root), and not to a folder on its own way down (a
/// loop), else it is skipped with a warning naming it. Walks, probes and reads all ask this.
#[derive(Debug, Clone)]
struct Rule {
    follow: bool,
    /// The root; canonical when links are followed (their targets are checked against it).
    root: PathBuf,
    /// Remove the temporary files of a slate killed mid-copy on the way (only the sweep of a
    /// destination does: a listing, a `diff` or a `--dry-run` change nothing).
    sweep: bool,
}

/// Where a symlink leads under the [`Rule`].
enum Link {
    /// Followed: its canonical target, inside the root, with the target's metadata.
    To(PathBuf, std::fs::Metadata),
    /// Not followed (the notice or warning naming it is logged).
    Skipped,
}

impl Rule {
    fn new(root: &Path, follow: bool) -> io::Result<Rule> {
        let root = if follow {
            std::fs::canonicalize(root)?
        } else {
            root.to_path_buf()
        };
        Ok(Rule {
            follow,
            root,
            sweep: false,
        })
    }

    /// The rule for the symlink `link`, found in the folder `dir` of a walk.
    fn link(&self, link: &Path, dir: &Dir) -> io::Result<Link> {
        if !self.follow {
            tracing::warn!(path = %link.display(), "{SKIP_NOTICE}");
            return Ok(Link::Skipped);
        }
        let skip = |why: &str, target: &Path| {
            tracing::warn!(path = %link.display(), target = %target.display(),
                "skipping symlink: {why}");
            Ok(Link::Skipped)
        };
        let target = match std::fs::canonicalize(link) {
            Ok(t) => t,
            Err(e) if gone(&e) => return skip("it leads nowhere", Path::new("")),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return skip("too many levels of symlinks", Path::new(""))
            }
            Err(e) => return Err(e),
        };
        if !target.starts_with(&self.root) {
            return skip("it leads outside the source root", &target);
        }
        let md = match std::fs::metadata(&target) {
            Ok(m) => m,
            Err(e) if gone(&e) => return skip("it leads nowhere", &target),
            Err(e) => return Err(e),
        };
        if md.is_dir() && dir.on_the_way(&target) {
            return skip("it leads back to a folder on its own way (a loop)", &target);
        }
        Ok(Link::To(target, md))
    }

    /// The path of the file `key` (a safe key) names now under the rule: each folder on the
    /// way and the file itself looked at without following, a symlink as [`Rule::link`] says.
    /// None when the key names no file slate copies (gone, a folder, a skipped link, a
    /// socket). With links followed, the path is canonical.
    fn resolve(&self, key: &str) -> io::Result<Option<PathBuf>> {
        let mut dir = Dir::root(self);
        let mut segs = key.split('/').peekable();
        while let Some(seg) = segs.next() {
            let path = dir.path.join(seg);
            let ft = match std::fs::symlink_metadata(&path) {
                Ok(m) => m.file_type(),
                Err(e) if gone(&e) => return Ok(None),
                Err(e) => return Err(e),
            };
            let last = segs.peek().is_none();
            match kind_of(self, &dir, path, String::new(), Ok(ft)) {
                Kind::File(p) if last => return Ok(Some(p)),
                Kind::Folder(d) if !last => dir = d,
                Kind::Error(e) => return Err(io::Error::other(e)),
                _ => return Ok(None),
            }
        }
        Ok(None)
    }
}

/// A folder of a walk.
#[derive(Debug, Clone)]
struct Dir {
    /// Where it is read (canonical when links are followed).
    path: PathBuf,
    /// Its key prefix (`""` for the root).
    rel: String,
    /// The folders that followed links led out of on the way here (for loop checks).
    above: Arc<Vec<PathBuf>>,
}

impl Dir {
    fn root(rule: &Rule) -> Dir {
        Dir {
            path: rule.root.clone(),
            rel: String::new(),
            above: Arc::default(),
        }
    }

    fn key(&self, name: &str) -> String {
        if self.rel.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.rel)
        }
    }

    /// A folder in this one at `path`: a real one, or the target of a followed link.
    fn child(&self, path: PathBuf, rel: String, via_link: bool) -> Dir {
        let above = if via_link {
            let mut a = (*self.above).clone();
            a.push(self.path.clone());
            Arc::new(a)
        } else {
            self.above.clone()
        };
        Dir { path, rel, above }
    }

    /// Whether the folder `target` holds (or is) this folder or one a link led out of: a walk
    /// into it would come back here, for ever.
    fn on_the_way(&self, target: &Path) -> bool {
        self.path.starts_with(target) || self.above.iter().any(|a| a.starts_with(target))
    }
}

/// What an entry of a folder is to a walk, its symlinks resolved under the [`Rule`].
enum Kind {
    /// A regular file (or a followed link's target) at this path.
    File(PathBuf),
    /// A folder to walk (or a followed link's target).
    Folder(Dir),
    /// Nothing slate copies: a skipped symlink (logged), a socket, a device, a fifo.
    Nothing,
    /// It could not be looked at (the detail names the path).
    Error(String),
}

fn kind_of(
    rule: &Rule,
    dir: &Dir,
    path: PathBuf,
    rel: String,
    ft: io::Result<std::fs::FileType>,
) -> Kind {
    match ft {
        // removed since the folder was read (a file system without d_type looks now)
        Err(e) if e.kind() == io::ErrorKind::NotFound => Kind::Nothing,
        Err(e) => Kind::Error(format!("{}: {e}", path.display())),
        Ok(ft) if ft.is_file() => Kind::File(path),
        Ok(ft) if ft.is_dir() => Kind::Folder(dir.child(path, rel, false)),
        Ok(ft) if ft.is_symlink() => match rule.link(&path, dir) {
            Ok(Link::To(t, m)) if m.is_dir() => Kind::Folder(dir.child(t, rel, true)),
            Ok(Link::To(t, m)) if m.is_file() => Kind::File(t),
            Ok(_) => Kind::Nothing,
            Err(e) => Kind::Error(format!("following the symlink {}: {e}", path.display())),
        },
        Ok(_) => Kind::Nothing,
    }
}

fn rule_for(root: &Path, follow: bool) -> Result<Rule, SlateError> {
    Rule::new(root, follow).map_err(|e| SlateError::List {
        url: root.display().to_string(),
        detail: e.to_string(),
    })
}

/// Walks `root` recursively (depth first, each folder sorted), calling `out` for each regular
/// file. Symlinks follow the [`Rule`] (`follow`: `--copy-links`); names that are not UTF-8,
/// and entries that cannot be read, are reported as errors naming them.
pub fn walk(
    root: &Path,
    follow: bool,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
) -> Result<(), SlateError> {
    let rule = rule_for(root, follow)?;
    walk_from(&rule, vec![Dir::root(&rule)], out)
}

/// Walks `root` like [`walk`], its top-level folders `threads` at a time (files in no
/// particular order across folders): a walk is a stat per file, one thread's worth of system
/// calls, and listings (unlike copies) only need the set of files.
pub fn walk_parallel(
    root: &Path,
    follow: bool,
    threads: usize,
    out: &(dyn Fn(Result<LocalFile, SlateError>) -> bool + Sync),
) -> Result<(), SlateError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let rule = rule_for(root, follow)?;
    // the root itself, one level: its files go out now, its folders are shared out
    let mut top = Vec::new();
    let mut first = |f: Result<LocalFile, SlateError>| out(f);
    let stop = !walk_level(&rule, &Dir::root(&rule), &mut first, &mut top)?;
    if stop || top.is_empty() {
        return Ok(());
    }
    let (next, halt) = (AtomicUsize::new(0), AtomicBool::new(false));
    let first_err = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, top.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Relaxed);
                let Some(dir) = top.get(i).cloned() else {
                    break;
                };
                if halt.load(Relaxed) {
                    break;
                }
                let mut each = |f: Result<LocalFile, SlateError>| {
                    let keep = !halt.load(Relaxed) && out(f);
                    if !keep {
                        halt.store(true, Relaxed);
                    }
                    keep
                };
                if let Err(e) = walk_from(&rule, vec![dir], &mut each) {
                    halt.store(true, Relaxed);
                    if let Ok(mut g) = first_err.lock() {
                        g.get_or_insert(e);
                    }
                    break;
                }
            });
        }
    });
    match first_err.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

fn stat(rel: String, md: io::Result<std::fs::Metadata>) -> Result<LocalFile, SlateError> {
    match md {
        Ok(m) => Ok(local_file(rel, &m)),
        Err(e) => Err(SlateError::Object {
            key: rel,
            detail: e.to_string(),
        }),
    }
}

/// Sends the files directly in `dir` to `out` and pushes its folders (and followed links to
/// folders) onto `subdirs`, sorted; false when `out` asked to stop.
fn walk_level(
    rule: &Rule,
    dir: &Dir,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
    subdirs: &mut Vec<Dir>,
) -> Result<bool, SlateError> {
    let rd = std::fs::read_dir(&dir.path).map_err(|e| SlateError::List {
        url: dir.path.display().to_string(),
        detail: e.to_string(),
    })?;
    let mut entries = Vec::new();
    for e in rd {
        match e {
            Ok(e) => entries.push(e),
            // never a folder silently shorter: what is missing from it would be deleted
            Err(e) => {
                let err = SlateError::Object {
                    key: dir.path.display().to_string(),
                    detail: format!("reading the folder: {e}"),
                };
                if !out(Err(err)) {
                    return Ok(false);
                }
            }
        }
    }
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            let keep = out(Err(SlateError::Object {
                key: e.path().display().to_string(),
                detail: "file name is not valid UTF-8; keys must be".into(),
            }));
            if !keep {
                return Ok(false);
            }
            continue;
        };
        if name.starts_with(TMP_PREFIX) {
            if rule.sweep && is_orphan_temp(name) {
                // left by a slate that was killed mid-copy: garbage, never an object
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        let rel = dir.key(name);
        let item = match e.file_type() {
            // the common case, one fstatat relative to the folder
            Ok(ft) if ft.is_file() => stat(rel, e.metadata()),
            ft => match kind_of(rule, dir, e.path(), rel.clone(), ft) {
                Kind::File(target) => stat(rel, std::fs::metadata(target)),
                Kind::Folder(d) => {
                    subdirs.push(d);
                    continue;
                }
                Kind::Nothing => continue,
                Kind::Error(detail) => Err(SlateError::Object { key: rel, detail }),
            },
        };
        if !out(item) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Depth-first walk from the folders of `stack`.
fn walk_from(
    rule: &Rule,
    mut stack: Vec<Dir>,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
) -> Result<(), SlateError> {
    while let Some(dir) = stack.pop() {
        let mut subdirs = Vec::new();
        if !walk_level(rule, &dir, out, &mut subdirs)? {
            return Ok(());
        }
        // reverse so that the stack pops folders in sorted order
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// What a local source holds at a key now.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A regular file (or, with links followed, a link to one inside the root).
    File(LocalFile),
    /// Nothing at that key: no file, a folder, or something slate does not copy (a symlink
    /// that is skipped, a socket, a device). A replica of such a key is deleted.
    Absent,
}

/// Looks at `key` under `root` now, under the symlink [`Rule`] of the walkers (`follow`:
/// `--copy-links`), so that a probe and a listing agree on every key. An I/O error other than
/// "not found" is an error: a key is never taken as gone on a guess.
pub fn probe(root: &Path, key: &str, follow: bool) -> Result<Probe, SlateError> {
    safe_join(root, key)?;
    let err = |e: io::Error| SlateError::Object {
        key: key.to_string(),
        detail: format!("reading the source: {e}"),
    };
    let rule = match Rule::new(root, follow) {
        Ok(r) => r,
        Err(e) if gone(&e) => return Ok(Probe::Absent),
        Err(e) => return Err(err(e)),
    };
    let Some(path) = rule.resolve(key).map_err(err)? else {
        return Ok(Probe::Absent);
    };
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => Ok(Probe::File(local_file(key.to_string(), &m))),
        // a symlink swapped in since is not followed either
        Ok(_) => Ok(Probe::Absent),
        Err(e) if gone(&e) => Ok(Probe::Absent),
        Err(e) => Err(err(e)),
    }
}

/// Opens the file at `path` of the local source `root` for reading, under the symlink
/// [`Rule`]: with `openat2(2)` beneath the root and no symlink anywhere on the way, so that a
/// link swapped in after a listing or a check is refused, never followed. With `follow`, the
/// path is resolved first (its canonical target must be inside the root) and that target is
/// opened the same way. `path == root`: a source that is one file, opened as the user named it.
pub fn open_source(root: &Path, path: &Path, follow: bool) -> io::Result<std::fs::File> {
    let refused = |why: &str| io::Error::other(format!("{}: {why}", path.display()));
    let Ok(rel) = path.strip_prefix(root) else {
        return Err(refused("not inside the source root"));
    };
    if rel.as_os_str().is_empty() {
        return std::fs::File::open(path);
    }
    let key = rel.to_str().ok_or_else(|| refused("not a UTF-8 path"))?;
    let not_followed = || {
        refused("no longer a file inside the source root (gone, or a symlink that is not followed)")
    };
    let rule = Rule::new(root, follow)?;
    let target = match follow {
        true => Some(rule.resolve(key)?.ok_or_else(not_followed)?),
        false => None,
    };
    let rel = match &target {
        Some(t) => t.strip_prefix(&rule.root).map_err(|_| not_followed())?,
        None => Path::new(key),
    };
    let file = match open_beneath(root, rel) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // no openat2 (a kernel before 5.6, or a seccomp filter without it): the same rule
            // through paths; only a swap of the last component is refused (O_NOFOLLOW)
            let p = match target {
                Some(t) => t,
                None => rule.resolve(key)?.ok_or_else(not_followed)?,
            };
            open_nofollow(&p)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EXDEV)) => {
            return Err(refused("a symlink on the way, which is not followed"))
        }
        other => other,
    }?;
    if !file.metadata()?.is_file() {
        return Err(refused("not a regular file"));
    }
    Ok(file)
}

/// Flags of a source opened for reading: never blocks on a fifo swapped in for a file.
const READ_FLAGS: i32 = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;

/// Opens `rel` beneath the folder `root` with `openat2(2)`: a symlink anywhere on the way
/// fails with ELOOP, a way out of `root` with EXDEV, whatever changed since it was checked.
fn open_beneath(root: &Path, rel: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(root)?;
    let resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    openat2(&dir, rel, READ_FLAGS, resolve).map(std::fs::File::from)
}

/// `openat2(2)` relative to `dir`.
fn openat2(
    dir: &impl AsRawFd,
    path: &Path,
    flags: i32,
    resolve: u64,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain integers; all zero is its "nothing asked" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    let mut last = io::Error::from_raw_os_error(libc::EAGAIN);
    for _ in 0..16 {
        // SAFETY: `c` and `how` outlive the call, which reads size_of::<open_how>() bytes of
        // `how`; a non-negative result is a new descriptor that nothing else owns.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            return Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) });
        }
        last = io::Error::last_os_error();
        // EAGAIN: a rename elsewhere raced the lookup, which RESOLVE_BENEATH asks to repeat
        if !matches!(last.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) {
            break;
        }
    }
    Err(last)
}

/// Opens `path` (already checked under the rule) without following a symlink at its end.
fn open_nofollow(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(READ_FLAGS | libc::O_NOFOLLOW)
        .open(path)
}

/// One entry of a sorted walk.
#[derive(Debug)]
pub enum Walked {
    File(LocalFile),
    /// A file (or folder) that could not be read: its key is known, so it is not dropped
    /// (the caller decides: reconcile it, which reports the error, or fail).
    Unreadable {
        rel: String,
        error: String,
        /// A folder that could not be read (its keys are unknown), not a file.
        folder: bool,
    },
    /// A name that cannot be a key (not UTF-8).
    BadName {
        path: PathBuf,
    },
}

/// [`walk_sorted_with`] that skips every symlink (with a notice).
pub fn walk_sorted(
    root: &Path,
    after: &str,
    out: &mut dyn FnMut(Walked) -> bool,
) -> Result<(), SlateError> {
    walk_sorted_with(root, false, after, out)
}

/// An entry of a folder in a sorted walk: its sort key (`""` for a bad name; a folder's keys
/// all begin with `name/`, which is where it sorts) and what it is.
type Sorted = (String, Result<Kind, PathBuf>);

/// Reads one folder of a sorted walk, its entries in reverse key order (popped smallest
/// first). Files are looked at when visited, not here: a page after `after` skips most.
fn read_sorted(rule: &Rule, dir: &Dir) -> Result<Vec<Sorted>, SlateError> {
    let list_err = |e: io::Error| SlateError::List {
        url: dir.path.display().to_string(),
        detail: e.to_string(),
    };
    let mut entries = Vec::new();
    for e in std::fs::read_dir(&dir.path).map_err(list_err)? {
        let e = e.map_err(list_err)?;
        let path = e.path();
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            entries.push((String::new(), Err(path)));
            continue;
        };
        if name.starts_with(TMP_PREFIX) {
            continue; // never an object; swept by sweep_orphan_temps, not by a listing
        }
        let key = dir.key(&name);
        let kind = match e.file_type() {
            // a skipped link is noticed when visited (once, not on every page)
            Ok(ft) if ft.is_symlink() && !rule.follow => Kind::File(path),
            // looked at when visited
            Ok(ft) if ft.is_file() => Kind::File(path),
            ft => kind_of(rule, dir, path, key.clone(), ft),
        };
        let sort = match kind {
            Kind::Folder(_) => format!("{key}/"),
            _ => key,
        };
        entries.push((sort, Ok(kind)));
    }
    entries.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(entries)
}

/// What an entry that is no folder gives a sorted walk.
fn visit(rule: &Rule, dir: &Dir, sort: String, kind: Kind) -> Option<Walked> {
    match kind {
        Kind::File(path) => visit_file(rule, dir, sort, &path),
        Kind::Error(error) => Some(Walked::Unreadable {
            rel: sort,
            error,
            folder: false,
        }),
        Kind::Nothing | Kind::Folder(_) => None,
    }
}

/// A file of a sorted walk, looked at now (`path`: the file, or a followed link's target).
fn visit_file(rule: &Rule, dir: &Dir, rel: String, path: &Path) -> Option<Walked> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let _ = rule.link(path, dir); // logs why it is skipped
            None
        }
        Ok(m) if m.is_file() => Some(Walked::File(local_file(rel, &m))),
        Ok(_) => None, // sockets, devices, fifos
        Err(e) if e.kind() == io::ErrorKind::NotFound => None, // gone meanwhile
        Err(e) => Some(Walked::Unreadable {
            rel,
            error: e.to_string(),
            folder: false,
        }),
    }
}

/// Walks `root` in key order (byte order of the `/`-joined key, so `a.txt` comes before the
/// folder `a`'s `a/b`, which comes before `a0`), calling `out` for each entry whose key sorts
/// after `after` (`""`: all) until it returns false. Folders that hold only keys up to `after`
/// are not read. Symlinks follow the [`Rule`] (`follow`: `--copy-links`; a followed link to a
/// folder sorts as a folder); slate's own temporary files are not listed (orphaned ones are
/// removed).
pub fn walk_sorted_with(
    root: &Path,
    follow: bool,
    after: &str,
    out: &mut dyn FnMut(Walked) -> bool,
) -> Result<(), SlateError> {
    let rule = rule_for(root, follow)?;
    let top = Dir::root(&rule);
    let entries = read_sorted(&rule, &top)?;
    walk_sorted_from(&rule, vec![(entries, top)], after, out);
    Ok(())
}

/// The sorted depth-first walk from the folders on `stack` (each with its entries still to
/// visit, in reverse key order).
fn walk_sorted_from(
    rule: &Rule,
    mut stack: Vec<(Vec<Sorted>, Dir)>,
    after: &str,
    out: &mut dyn FnMut(Walked) -> bool,
) {
    while let Some((entries, dir)) = stack.last_mut() {
        let Some((sort, kind)) = entries.pop() else {
            stack.pop();
            continue;
        };
        let item = match kind {
            Err(path) => Some(Walked::BadName { path }),
            // skip a folder whose keys all sort before `after`
            Ok(Kind::Folder(_)) if sort.as_str() < after && !after.starts_with(sort.as_str()) => {
                None
            }
            Ok(Kind::Folder(d)) => match read_sorted(rule, &d) {
                Ok(e) => {
                    stack.push((e, d));
                    None
                }
                Err(e) => Some(Walked::Unreadable {
                    rel: d.rel,
                    error: e.to_string(),
                    folder: true,
                }),
            },
            _ if sort.as_str() <= after => None,
            Ok(kind) => visit(rule, dir, sort, kind),
        };
        if let Some(item) = item {
            if !out(item) {
                return;
            }
        }
    }
}

/// Entries a folder walked ahead may hold before its walker waits.
const AHEAD: usize = 1024;

/// Walks `root` in key order like [`walk_sorted_with`], its top-level folders `threads` at a
/// time: each a little ahead of the one being sent, its entries waiting (at most [`AHEAD`])
/// until their turn. A walk is a stat per file, one thread's worth of system calls; this keeps
/// several threads busy without giving up the order.
pub fn walk_sorted_parallel(
    root: &Path,
    follow: bool,
    threads: usize,
    out: &mut dyn FnMut(Walked) -> bool,
) -> Result<(), SlateError> {
    let rule = rule_for(root, follow)?;
    let top = Dir::root(&rule);
    let mut entries = read_sorted(&rule, &top)?;
    entries.reverse(); // smallest first
    let folders: Vec<Dir> = entries
        .iter()
        .filter_map(|(_, k)| match k {
            Ok(Kind::Folder(d)) => Some(d.clone()),
            _ => None,
        })
        .collect();
    std::thread::scope(|scope| {
        let rule = &rule;
        let mut ahead = std::collections::VecDeque::new();
        let mut next = 0usize;
        let start_more = |ahead: &mut std::collections::VecDeque<_>, next: &mut usize| {
            while ahead.len() < threads.max(1) && *next < folders.len() {
                let d = folders[*next].clone();
                *next += 1;
                let (tx, rx) = std::sync::mpsc::sync_channel::<Walked>(AHEAD);
                scope.spawn(move || match read_sorted(rule, &d) {
                    Ok(e) => walk_sorted_from(rule, vec![(e, d)], "", &mut |w| tx.send(w).is_ok()),
                    Err(e) => {
                        let _ = tx.send(Walked::Unreadable {
                            rel: d.rel.clone(),
                            error: e.to_string(),
                            folder: true,
                        });
                    }
                });
                ahead.push_back(rx);
            }
        };
        for (sort, kind) in entries {
            let item = match kind {
                Err(path) => Some(Walked::BadName { path }),
                Ok(Kind::Folder(_)) => {
                    start_more(&mut ahead, &mut next);
                    let Some(rx) = ahead.pop_front() else {
                        continue;
                    };
                    for w in rx {
                        if !out(w) {
                            return;
                        }
                    }
                    None
                }
                Ok(kind) => visit(rule, &top, sort, kind),
            };
            if let Some(item) = item {
                if !out(item) {
                    return;
                }
            }
        }
    });
    Ok(())
}

/// Moves the destination file of `key` under `root` to `name` under `to_root` (`--backup-dir`;
/// its folders made); false when there is no such file. A rename when both lie on one file
/// system, else a copy (the delete or overwrite that follows removes the original).
pub fn move_out(root: &Path, key: &str, to_root: &Path, name: &str) -> Result<bool, SlateError> {
    let from = safe_join(root, key)?;
    let err = |detail: String| SlateError::Object {
        key: key.to_string(),
        detail,
    };
    match std::fs::symlink_metadata(&from) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Ok(false),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) => return Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(false),
        Err(e) => return Err(err(format!("backing up {}: {e}", from.display()))),
    }
    // only now the backup's name (the key and a time: a name near the 255-byte limit has no
    // room for it): a new file, with nothing to back up, is never refused for it
    let to = safe_join(to_root, name)?;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| err(format!("backing up: creating {}: {e}", parent.display())))?;
    }
    match std::fs::rename(&from, &to) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(&from, &to)
                .map_err(|e| err(format!("backing up to {}: {e}", to.display())))?;
            if let Ok(m) = std::fs::metadata(&from).and_then(|m| m.modified()) {
                let _ = std::fs::File::options()
                    .write(true)
                    .open(&to)
                    .and_then(|f| f.set_modified(m));
            }
            Ok(true)
        }
        Err(e) => Err(err(format!("backing up to {}: {e}", to.display()))),
    }
}

/// Deletes the destination file of `key` under `root`; false when it was not there. Refuses
/// to go through a symlinked folder inside the root (it could point anywhere), as writes do.
pub fn remove_below(root: &Path, key: &str) -> Result<bool, SlateError> {
    let path = safe_join(root, key)?;
    let err = |detail: String| SlateError::Object {
        key: key.to_string(),
        detail,
    };
    if let Some(rel) = path.parent().and_then(|p| p.strip_prefix(root).ok()) {
        let mut cur = root.to_path_buf();
        for c in rel.components() {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(err(format!(
                        "{} is a symlink; refusing to delete through it",
                        cur.display()
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(err(format!("deleting {}: {e}", path.display()))),
            }
        }
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        // a folder (or a path through a file) is no object of that key: nothing to delete
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EISDIR) | Some(libc::ENOTDIR) | Some(libc::EPERM)
            ) && !path.is_file() =>
        {
            Ok(false)
        }
        Err(e) => Err(err(format!("deleting {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of 250 bytes has no room for the backup's time in its name: a new file (nothing
    /// to back up) is not refused for it; an existing one is, naming the key's backup.
    #[test]
    fn a_long_name_with_nothing_to_back_up_is_not_refused() {
        let (root, trash) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let key = "k".repeat(250);
        let name = crate::engine::backup::Backup::name_for(&key, std::time::SystemTime::now());
        assert_eq!(
            move_out(root.path(), &key, trash.path(), &name).ok(),
            Some(false)
        );
        std::fs::write(root.path().join(&key), b"x").unwrap();
        assert!(move_out(root.path(), &key, trash.path(), &name).is_err());
    }

    #[test]
    fn safe_join_refuses_escapes() {
        let root = Path::new("/dst");
        let ok = [
            ("a", "/dst/a"),
            ("a/b c+d%20e", "/dst/a/b c+d%20e"),
            ("ü/日本.txt", "/dst/ü/日本.txt"),
            ("..a/b..", "/dst/..a/b.."),
        ];
        for (key, want) in ok {
            assert_eq!(safe_join(root, key).unwrap(), PathBuf::from(want), "{key}");
        }
        let bad = [
            ("../etc/passwd", "'..'"),
            ("a/../../x", "'..'"),
            ("/etc/passwd", "absolute"),
            ("a\0b", "NUL"),
            ("a//b", "empty path segment"),
            ("a/", "empty path segment"),
            ("./a", "'.'"),
            ("", "empty key"),
        ];
        for (key, why) in bad {
            let e = safe_join(root, key).unwrap_err().to_string();
            assert!(e.contains(why), "{key:?}: {e}");
            assert!(e.contains("unsafe key"), "{key:?}: {e}");
        }
        let long = "x".repeat(256);
        assert!(safe_join(root, &long).is_err());
    }

    #[test]
    fn walk_lists_files_with_keys_and_skips_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::write(dir.path().join("a"), b"1").unwrap();
        std::fs::write(dir.path().join("b/c/d e"), b"22").unwrap();
        std::fs::write(dir.path().join(format!("{TMP_PREFIX}x")), b"").unwrap();
        let mut got = Vec::new();
        walk(dir.path(), false, &mut |f| {
            let f = f.unwrap();
            got.push((f.rel, f.size));
            true
        })
        .unwrap();
        assert_eq!(got, vec![("a".to_string(), 1), ("b/c/d e".to_string(), 2)]);
    }

    #[test]
    fn a_parallel_walk_finds_what_a_walk_finds_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        for d in 0..7 {
            for f in 0..d * 3 {
                let p = dir.path().join(format!("d{d}/x/{f}"));
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, vec![b'z'; f]).unwrap();
            }
        }
        std::fs::write(dir.path().join("top"), b"t").unwrap();
        std::fs::write(dir.path().join(format!("{TMP_PREFIX}x")), b"").unwrap();
        let mut want = Vec::new();
        walk(dir.path(), false, &mut |f| {
            let f = f.unwrap();
            want.push((f.rel, f.size));
            true
        })
        .unwrap();
        for threads in [1, 2, 4, 16] {
            let got = std::sync::Mutex::new(Vec::new());
            walk_parallel(dir.path(), false, threads, &|f| {
                let f = f.unwrap();
                got.lock().unwrap().push((f.rel, f.size));
                true
            })
            .unwrap();
            let mut got = got.into_inner().unwrap();
            got.sort();
            let mut w = want.clone();
            w.sort();
            assert_eq!(got, w, "{threads} threads");
        }
        assert_eq!(want.len(), 1 + (0..7).map(|d| d * 3).sum::<usize>());
        // a consumer that goes away stops every walker
        let seen = std::sync::atomic::AtomicUsize::new(0);
        walk_parallel(dir.path(), false, 4, &|_| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 4
        })
        .unwrap();
        assert!(seen.into_inner() <= 4 + 4, "walkers went on after the stop");
        // a missing root is an error naming it
        let gone = dir.path().join("nope");
        let e = walk_parallel(&gone, false, 2, &|_| true).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn walks_remove_only_the_temp_files_of_dead_processes() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        // a child that has exited: its PID is not alive (and not reused this soon)
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let files = [
            format!("d/{TMP_PREFIX}{dead}-00000000000000aa"), // orphan: removed
            format!("{TMP_PREFIX}{}-00000000000000bb", std::process::id()), // ours: kept
            format!("{TMP_PREFIX}1-00000000000000cc"),        // init is alive: kept
            format!("{TMP_PREFIX}x"),                         // not slate's pattern: kept
            "d/keep.bin".to_string(),
        ];
        for f in &files {
            std::fs::write(root.path().join(f), b"x").unwrap();
        }
        // listings (a diff, a dry run) never remove anything
        walk(root.path(), false, &mut |_| true).unwrap();
        walk_sorted(root.path(), "", &mut |_| true).unwrap();
        assert!(
            root.path().join(&files[0]).exists(),
            "a listing removed a file"
        );
        sweep_orphan_temps(root.path()).unwrap();
        let exists: Vec<bool> = files.iter().map(|f| root.path().join(f).exists()).collect();
        assert_eq!(exists, vec![false, true, true, true, true]);
    }

    /// Keys of a walk by each walker (sorted), and whether the three agree.
    fn keys_of_every_walker(root: &Path, follow: bool) -> Vec<String> {
        let mut a = Vec::new();
        walk(root, follow, &mut |f| {
            a.push(f.unwrap().rel);
            true
        })
        .unwrap();
        let b = std::sync::Mutex::new(Vec::new());
        walk_parallel(root, follow, 3, &|f| {
            b.lock().unwrap().push(f.unwrap().rel);
            true
        })
        .unwrap();
        let mut c = Vec::new();
        walk_sorted_with(root, follow, "", &mut |w| {
            match w {
                Walked::File(f) => c.push(f.rel),
                other => panic!("{other:?}"),
            }
            true
        })
        .unwrap();
        let mut b = b.into_inner().unwrap();
        b.sort();
        let mut sorted_c = c.clone();
        sorted_c.sort();
        assert_eq!(c, sorted_c, "walk_sorted is in key order");
        let mut sorted_a = a.clone();
        sorted_a.sort();
        assert_eq!(
            (&sorted_a, &b),
            (&c, &c),
            "the walkers agree (follow: {follow})"
        );
        c
    }

    /// A source with every kind of link: inside, outside, to `/`, loops, dangling. Returns
    /// (the parent tempdir, the source root).
    fn linked_tree() -> (tempfile::TempDir, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let (root, out) = (top.path().join("src"), top.path().join("outside"));
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::create_dir_all(out.join("secret")).unwrap();
        std::fs::write(out.join("secret/key.pem"), b"OUTSIDE").unwrap();
        std::fs::write(out.join("file.txt"), b"OUTSIDE").unwrap();
        std::fs::write(root.join("a.txt"), b"a").unwrap();
        std::fs::write(root.join("d/b.txt"), b"bb").unwrap();
        std::fs::write(root.join("d/e/c.txt"), b"ccc").unwrap();
        let link = |target: &Path, at: &str| std::os::unix::fs::symlink(target, root.join(at));
        link(Path::new("a.txt"), "in-file").unwrap();
        link(Path::new("d"), "in-dir").unwrap();
        link(&root.join("d/e"), "in-abs").unwrap();
        link(&out.join("file.txt"), "out-file").unwrap();
        link(&out, "out-dir").unwrap();
        link(Path::new("../outside/secret"), "out-rel").unwrap();
        link(Path::new("/"), "to-root").unwrap();
        link(Path::new("."), "loop").unwrap();
        link(Path::new(".."), "d/up").unwrap();
        link(Path::new("../../d"), "d/e/back").unwrap();
        link(Path::new("self"), "self").unwrap();
        link(Path::new("nowhere"), "dangling").unwrap();
        (top, root)
    }

    #[test]
    fn symlinks_are_skipped_by_default_by_every_walker_probe_and_read() {
        let (_top, root) = linked_tree();
        let keys = keys_of_every_walker(&root, false);
        assert_eq!(keys, ["a.txt", "d/b.txt", "d/e/c.txt"]);
        for key in [
            "in-file",
            "in-dir/b.txt",
            "out-file",
            "out-dir/file.txt",
            "to-root",
        ] {
            assert!(
                matches!(probe(&root, key, false).unwrap(), Probe::Absent),
                "{key}"
            );
            assert!(open_source(&root, &root.join(key), false).is_err(), "{key}");
        }
        assert!(matches!(probe(&root, "d/b.txt", false).unwrap(), Probe::File(f) if f.size == 2));
        let mut text = String::new();
        use std::io::Read;
        open_source(&root, &root.join("d/b.txt"), false)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "bb");
    }

    #[test]
    fn copy_links_follows_links_inside_the_root_only_and_loops_end() {
        let (_top, root) = linked_tree();
        let keys = keys_of_every_walker(&root, true);
        let want = [
            "a.txt",
            "d/b.txt",
            "d/e/c.txt",
            "in-abs/c.txt",
            "in-dir/b.txt",
            "in-dir/e/c.txt",
            "in-file",
        ];
        assert_eq!(keys, want);
        // the probe of a key agrees with the listings, and the read opens what it found
        for key in want {
            let Probe::File(f) = probe(&root, key, true).unwrap() else {
                panic!("{key}: absent")
            };
            let mut file = open_source(&root, &root.join(key), true).unwrap();
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut file, &mut got).unwrap();
            assert_eq!(got.len() as u64, f.size, "{key}");
            assert_ne!(got, b"OUTSIDE", "{key}");
        }
        let refused = [
            "out-file",
            "out-dir/file.txt",
            "out-rel/key.pem",
            "to-root",
            "to-root/etc/passwd",
            "loop/a.txt",
            "loop/loop/d/b.txt",
            "d/up/a.txt",
            "in-dir/up/a.txt",
            "d/e/back/b.txt",
            "self",
            "dangling",
            "in-dir",
        ];
        for key in refused {
            assert!(
                matches!(probe(&root, key, true).unwrap(), Probe::Absent),
                "{key}"
            );
            assert!(open_source(&root, &root.join(key), true).is_err(), "{key}");
        }
    }

    #[test]
    fn a_sorted_walk_is_in_key_order_and_resumes_after_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in ["a.txt", "a/b", "a/c/d", "a0", "b"] {
            std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            std::fs::write(root.join(f), f).unwrap();
        }
        std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        let sorted = |follow: bool, after: &str| {
            let mut got = Vec::new();
            walk_sorted_with(root, follow, after, &mut |w| {
                if let Walked::File(f) = w {
                    got.push(f.rel);
                }
                true
            })
            .unwrap();
            got
        };
        assert_eq!(sorted(false, ""), ["a.txt", "a/b", "a/c/d", "a0", "b"]);
        assert_eq!(sorted(false, "a/b"), ["a/c/d", "a0", "b"]);
        // a followed link to a folder sorts as a folder
        assert_eq!(
            sorted(true, ""),
            ["a.txt", "a/b", "a/c/d", "a0", "b", "l/b", "l/c/d"]
        );
        assert_eq!(sorted(true, "l/b"), ["l/c/d"]);
        // walk_sorted (the daemon's folder expansions) never follows
        let mut plain = Vec::new();
        walk_sorted(root, "", &mut |w| {
            if let Walked::File(f) = w {
                plain.push(f.rel);
            }
            true
        })
        .unwrap();
        assert_eq!(plain, sorted(false, ""));
    }

    #[test]
    fn a_symlink_swapped_in_after_the_check_is_refused_by_the_open() {
        let (top, root) = linked_tree();
        // what open_source checked a moment ago is a plain file; now it is a link out
        let rule = Rule::new(&root, true).unwrap();
        let checked = rule.resolve("d/b.txt").unwrap().unwrap();
        let rel = checked.strip_prefix(&rule.root).unwrap().to_path_buf();
        std::fs::remove_file(root.join("d/b.txt")).unwrap();
        std::os::unix::fs::symlink(top.path().join("outside/file.txt"), root.join("d/b.txt"))
            .unwrap();
        let e = open_beneath(&root, &rel).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert!(
            open_nofollow(&checked).is_err(),
            "the fallback refuses it too"
        );
        // a folder on the way swapped for a link
        std::fs::rename(root.join("d"), root.join("d-moved")).unwrap();
        std::os::unix::fs::symlink(top.path().join("outside"), root.join("d")).unwrap();
        std::fs::write(top.path().join("outside/e"), b"OUTSIDE").unwrap();
        let e = open_beneath(&root, Path::new("d/e")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        for follow in [false, true] {
            let e = open_source(&root, &root.join("d/b.txt"), follow).unwrap_err();
            assert!(e.to_string().contains("d/b.txt"), "{e}");
        }
        // `..` cannot climb out either
        let e = open_beneath(&root.join("d-moved"), Path::new("../../outside/file.txt"));
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EXDEV));
    }

    #[test]
    fn a_fifo_swapped_in_for_a_file_does_not_block_the_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_source(dir.path(), &fifo, false).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(matches!(
            probe(dir.path(), "f", true).unwrap(),
            Probe::Absent
        ));
    }
}
