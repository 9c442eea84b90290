//! Local folders as a store: a streaming walker, the key → path mapping that refuses keys
//! escaping the root, deletes that never go through a symlink, and the sweep of temporary
//! files left by a killed slate.

use std::io;
use std::path::{Path, PathBuf};
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

/// What a local source holds at a key now.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A regular file (or, with links followed, a link to one inside the root).
    File(LocalFile),
    /// Nothing at that key: no file, a folder, or something slate does not copy (a symlink
    /// that is skipped, a socket, a device). A replica of such a key is deleted.
    Absent,
}

/// Looks at `key` under `root` now, without following a symlink unless `follow` (and then
/// only to a file inside `root`). An I/O error other than "not found" is an error: a key is
/// never taken as gone on a guess.
pub fn probe(root: &Path, key: &str, follow: bool) -> Result<Probe, SlateError> {
    let path = safe_join(root, key)?;
    let err = |e: io::Error| SlateError::Object {
        key: key.to_string(),
        detail: format!("reading the source: {e}"),
    };
    let gone = |e: &io::Error| {
        e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
    };
    let md = if follow {
        // resolve every link on the way; the file must still be inside the root
        let target = match std::fs::canonicalize(&path) {
            Ok(t) => t,
            Err(e) if gone(&e) => return Ok(Probe::Absent),
            Err(e) => return Err(err(e)),
        };
        let root = std::fs::canonicalize(root).map_err(err)?;
        if !target.starts_with(&root) {
            tracing::warn!(path = %path.display(), target = %target.display(),
                "skipping symlink: it leads outside the source root");
            return Ok(Probe::Absent);
        }
        match std::fs::metadata(&target) {
            Ok(m) => m,
            Err(e) if gone(&e) => return Ok(Probe::Absent),
            Err(e) => return Err(err(e)),
        }
    } else {
        // no link anywhere on the way: every folder and the file itself are looked at
        // without following (a folder link would lead the key out of the root)
        let mut cur = root.to_path_buf();
        let segs: Vec<&str> = key.split('/').collect();
        let mut md = None;
        for (i, seg) in segs.iter().enumerate() {
            cur.push(seg);
            let m = match std::fs::symlink_metadata(&cur) {
                Ok(m) => m,
                Err(e) if gone(&e) => return Ok(Probe::Absent),
                Err(e) => return Err(err(e)),
            };
            if m.file_type().is_symlink() {
                tracing::info!(path = %cur.display(),
                    "skipping symlink (--copy-links follows links that stay inside the source root)");
                return Ok(Probe::Absent);
            }
            if i + 1 < segs.len() && !m.is_dir() {
                return Ok(Probe::Absent);
            }
            md = Some(m);
        }
        match md {
            Some(m) => m,
            None => return Ok(Probe::Absent),
        }
    };
    if !md.is_file() {
        return Ok(Probe::Absent);
    }
    Ok(Probe::File(LocalFile {
        rel: key.to_string(),
        size: md.len(),
        mtime: md.modified().ok(),
    }))
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
    },
    /// A name that cannot be a key (not UTF-8).
    BadName {
        path: PathBuf,
    },
}

/// Walks `root` in key order (byte order of the `/`-joined key, so `a.txt` comes before the
/// folder `a`'s `a/b`, which comes before `a0`), calling `out` for each entry whose key sorts
/// after `after` (`""`: all) until it returns false. Folders that hold only keys up to `after`
/// are not read. Symlinks are skipped with a notice; slate's own temporary files are not
/// listed (orphaned ones are removed).
pub fn walk_sorted(
    root: &Path,
    after: &str,
    follow: bool,
    out: &mut dyn FnMut(Walked) -> bool,
) -> Result<(), SlateError> {
    // a stack of folders still to read, each with its entries not yet visited, in reverse
    // key order so that the smallest is popped first
    struct Dir {
        rel: String,
        entries: Vec<(String, PathBuf, bool)>, // (sort key, path, is_dir)
    }
    let read = |dir: &Path, rel: &str| -> Result<Dir, SlateError> {
        let rd = std::fs::read_dir(dir).map_err(|e| SlateError::List {
            url: dir.display().to_string(),
            detail: e.to_string(),
        })?;
        let mut entries = Vec::new();
        for e in rd {
            let e = e.map_err(|e| SlateError::List {
                url: dir.display().to_string(),
                detail: e.to_string(),
            })?;
            let path = e.path();
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                entries.push((String::new(), path, false));
                continue;
            };
            if name.starts_with(TMP_PREFIX) {
                if is_orphan_temp(&name) {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            let key = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            // a folder's keys all begin with "name/": that is where it sorts
            let sort = if is_dir { format!("{key}/") } else { key };
            entries.push((sort, path, is_dir));
        }
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(Dir {
            rel: rel.to_string(),
            entries,
        })
    };
    let mut stack = vec![read(root, "")?];
    while let Some(top) = stack.last_mut() {
        let Some((sort, path, is_dir)) = top.entries.pop() else {
            stack.pop();
            continue;
        };
        if sort.is_empty() {
            if !out(Walked::BadName { path }) {
                return Ok(());
            }
            continue;
        }
        if is_dir {
            // skip a folder whose keys all sort before `after`
            if sort.as_str() < after && !after.starts_with(sort.as_str()) {
                continue;
            }
            let rel = sort.trim_end_matches('/').to_string();
            match read(&path, &rel) {
                Ok(d) => stack.push(d),
                Err(e) => {
                    let error = e.to_string();
                    if !out(Walked::Unreadable { rel, error }) {
                        return Ok(());
                    }
                }
            }
            continue;
        }
        if sort.as_str() <= after {
            continue;
        }
        let _ = &top.rel;
        let item = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() && follow => {
                // followed only to a file inside the root (the probe's rule)
                let rel = sort.rsplit_once('/').map(|(_, n)| n).unwrap_or(&sort);
                let parent = path.parent().unwrap_or(root);
                match probe(parent, rel, true)? {
                    Probe::File(mut f) => {
                        f.rel = sort;
                        Walked::File(f)
                    }
                    Probe::Absent => continue,
                }
            }
            Ok(m) if m.file_type().is_symlink() => {
                tracing::info!(path = %path.display(),
                    "skipping symlink (--copy-links follows links that stay inside the source root)");
                continue;
            }
            Ok(m) if m.is_file() => Walked::File(LocalFile {
                rel: sort,
                size: m.len(),
                mtime: m.modified().ok(),
            }),
            Ok(_) => continue, // sockets, devices, fifos: not objects
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // gone meanwhile
            Err(e) => Walked::Unreadable {
                rel: sort,
                error: e.to_string(),
            },
        };
        if !out(item) {
            return Ok(());
        }
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
