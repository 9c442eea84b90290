//! Local folders as source and destination: a streaming walker, the key → path mapping that
//! refuses keys escaping the root, and temp files that become visible only when complete.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::error::SlateError;

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
    walk(root, &mut |_| true)
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

/// Walks `root` recursively (depth first, each folder sorted), calling `out` for each regular
/// file. Symlinks are skipped with a warning; names that are not UTF-8 are reported as errors.
pub fn walk(
    root: &Path,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
) -> Result<(), SlateError> {
    walk_from(vec![(root.to_path_buf(), String::new())], out)
}

/// Walks `root` like [`walk`], its top-level folders `threads` at a time (files in no
/// particular order across folders): a walk is a stat per file, one thread's worth of system
/// calls, and listings (unlike copies) only need the set of files.
pub fn walk_parallel(
    root: &Path,
    threads: usize,
    out: &(dyn Fn(Result<LocalFile, SlateError>) -> bool + Sync),
) -> Result<(), SlateError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    // the root itself, one level: its files go out now, its folders are shared out
    let mut top = Vec::new();
    let mut first = |f: Result<LocalFile, SlateError>| out(f);
    let stop = !walk_level(root, "", &mut first, &mut top)?;
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
                if let Err(e) = walk_from(vec![dir], &mut each) {
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

/// Sends the files directly in `dir` (keys under `rel_dir`) to `out` and pushes its folders
/// onto `subdirs`, sorted; false when `out` asked to stop.
fn walk_level(
    dir: &Path,
    rel_dir: &str,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
    subdirs: &mut Vec<(PathBuf, String)>,
) -> Result<bool, SlateError> {
    let rd = std::fs::read_dir(dir).map_err(|e| SlateError::List {
        url: dir.display().to_string(),
        detail: e.to_string(),
    })?;
    let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            let p = e.path();
            let keep = out(Err(SlateError::Object {
                key: p.display().to_string(),
                detail: "file name is not valid UTF-8; keys must be".into(),
            }));
            if !keep {
                return Ok(false);
            }
            continue;
        };
        if name.starts_with(TMP_PREFIX) {
            if is_orphan_temp(name) {
                // left by a slate that was killed mid-copy: garbage, never an object
                let _ = std::fs::remove_file(e.path());
            }
            continue;
        }
        let rel = if rel_dir.is_empty() {
            name.to_string()
        } else {
            format!("{rel_dir}/{name}")
        };
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            subdirs.push((e.path(), rel));
        } else if ft.is_file() {
            let md = e.metadata().map_err(|err| SlateError::Object {
                key: rel.clone(),
                detail: err.to_string(),
            });
            let item = md.map(|m| LocalFile {
                rel,
                size: m.len(),
                mtime: m.modified().ok(),
            });
            if !out(item) {
                return Ok(false);
            }
        } else if ft.is_symlink() {
            tracing::warn!(path = %e.path().display(), "skipping symlink");
        }
    }
    Ok(true)
}

/// Depth-first walk from the folders of `stack` (each with its key prefix).
fn walk_from(
    mut stack: Vec<(PathBuf, String)>,
    out: &mut dyn FnMut(Result<LocalFile, SlateError>) -> bool,
) -> Result<(), SlateError> {
    while let Some((dir, rel_dir)) = stack.pop() {
        let mut subdirs = Vec::new();
        if !walk_level(&dir, &rel_dir, out, &mut subdirs)? {
            return Ok(());
        }
        // reverse so that the stack pops folders in sorted order
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
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
        Err(e) => Err(err(format!("deleting {}: {e}", path.display()))),
    }
}

/// Creates parent folders of destination files, refusing to follow a symlink that already
/// sits inside the root (it could point anywhere). Verified folders are remembered.
#[derive(Default)]
pub struct DirMaker {
    known: Mutex<HashSet<PathBuf>>,
    /// Zero-byte files this copy wrote. Stores list a folder marker (a zero-byte key ending in
    /// `/`) without its slash, so such a file may turn out to be a folder: it is replaced by one.
    empty: Mutex<HashSet<PathBuf>>,
}

impl DirMaker {
    /// Records a zero-byte file written by this copy (see `empty`).
    pub fn wrote_empty(&self, path: &Path) {
        if let Ok(mut e) = self.empty.lock() {
            e.insert(path.to_path_buf());
        }
    }

    fn was_marker(&self, path: &Path) -> bool {
        self.empty
            .lock()
            .map(|mut e| e.remove(path))
            .unwrap_or(false)
    }

    pub fn ensure_parent(&self, root: &Path, path: &Path) -> io::Result<()> {
        let Some(parent) = path.parent() else {
            return Ok(());
        };
        if self
            .known
            .lock()
            .map(|k| k.contains(parent))
            .unwrap_or(false)
        {
            return Ok(());
        }
        std::fs::create_dir_all(root)?;
        let rel = parent.strip_prefix(root).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "destination path outside the root",
            )
        })?;
        let mut cur = root.to_path_buf();
        for c in rel.components() {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} is a symlink; refusing to write through it",
                            cur.display()
                        ),
                    ))
                }
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.len() == 0 && self.was_marker(&cur) => {
                    std::fs::remove_file(&cur)?;
                    std::fs::create_dir(&cur)?;
                }
                Ok(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{} exists and is not a folder", cur.display()),
                    ))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::create_dir(&cur) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            }
        }
        if let Ok(mut k) = self.known.lock() {
            k.insert(parent.to_path_buf());
        }
        Ok(())
    }
}

/// A destination file under construction: pre-allocated, written at offsets by any number of
/// streams, renamed into place by [`TempFile::commit`]. Dropped uncommitted, it is removed.
pub struct TempFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: File,
    committed: bool,
}

impl TempFile {
    pub fn create(dest: &Path, size: u64) -> io::Result<Self> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            "{TMP_PREFIX}{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let t = TempFile {
            tmp,
            dest: dest.to_path_buf(),
            file,
            committed: false,
        };
        if size > 0 {
            preallocate(&t.file, size)?;
        }
        Ok(t)
    }

    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Makes the file visible under its final name: size check, mtime, optional fsync, rename.
    pub fn commit(mut self, size: u64, mtime: Option<SystemTime>, fsync: bool) -> io::Result<()> {
        let actual = self.file.metadata()?.len();
        if actual != size {
            return Err(io::Error::other(format!(
                "size mismatch: wrote {actual} bytes, expected {size}"
            )));
        }
        if let Some(t) = mtime {
            let _ = self.file.set_modified(t);
        }
        if fsync {
            self.file.sync_all()?;
        }
        std::fs::rename(&self.tmp, &self.dest)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn preallocate(file: &File, size: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let Ok(len) = libc::off_t::try_from(size) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "file too large",
        ));
    };
    // SAFETY: the fd is open and owned by `file` for the duration of the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(size),
        code => Err(io::Error::from_raw_os_error(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn temp_file_is_invisible_until_commit_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("obj");
        let t = TempFile::create(&dest, 10).unwrap();
        t.write_at(b"world", 5).unwrap();
        t.write_at(b"hello", 0).unwrap();
        assert!(!dest.exists());
        t.commit(10, None, false).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"helloworld");

        let t = TempFile::create(&dir.path().join("other"), 4).unwrap();
        drop(t);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("obj")]);
    }

    #[test]
    fn walk_lists_files_with_keys_and_skips_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::write(dir.path().join("a"), b"1").unwrap();
        std::fs::write(dir.path().join("b/c/d e"), b"22").unwrap();
        std::fs::write(dir.path().join(format!("{TMP_PREFIX}x")), b"").unwrap();
        let mut got = Vec::new();
        walk(dir.path(), &mut |f| {
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
        walk(dir.path(), &mut |f| {
            let f = f.unwrap();
            want.push((f.rel, f.size));
            true
        })
        .unwrap();
        for threads in [1, 2, 4, 16] {
            let got = std::sync::Mutex::new(Vec::new());
            walk_parallel(dir.path(), threads, &|f| {
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
        walk_parallel(dir.path(), 4, &|_| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 4
        })
        .unwrap();
        assert!(seen.into_inner() <= 4 + 4, "walkers went on after the stop");
        // a missing root is an error naming it
        let gone = dir.path().join("nope");
        let e = walk_parallel(&gone, 2, &|_| true).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }

    #[test]
    fn dir_maker_refuses_symlinks_inside_root() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let dm = DirMaker::default();
        let e = dm
            .ensure_parent(root.path(), &root.path().join("link/x/file"))
            .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        dm.ensure_parent(root.path(), &root.path().join("ok/y/file"))
            .unwrap();
        assert!(root.path().join("ok/y").is_dir());
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
        sweep_orphan_temps(root.path()).unwrap();
        let exists: Vec<bool> = files.iter().map(|f| root.path().join(f).exists()).collect();
        assert_eq!(exists, vec![false, true, true, true, true]);
    }
}
