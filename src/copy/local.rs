//! Local destinations: parent folders made without following a symlink inside the root, and
//! temp files that become visible only when complete.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use crate::stores::local::TMP_PREFIX;
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
/// streams, renamed into place by [`TempFile::commit`]. Dropped uncommitted, it is removed,
/// unless it is *kept*: a resumable file (`copy::resume`) that a copy cut short leaves to the
/// next one, or that the copy's error path removes itself.
pub struct TempFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: File,
    committed: bool,
    keep: bool,
}

impl TempFile {
    pub fn create(dest: &Path, size: u64) -> io::Result<Self> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            "{TMP_PREFIX}{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        Self::create_at(dest, tmp, size, false)
    }

    /// A new temporary file at `tmp` for `dest`, kept when dropped if `keep`.
    pub fn create_at(dest: &Path, tmp: PathBuf, size: u64, keep: bool) -> io::Result<Self> {
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
            keep,
        };
        if size > 0 {
            preallocate(&t.file, size)?;
        }
        Ok(t)
    }

    /// The temporary file `tmp` an earlier copy left for `dest`, when it has `size` bytes and
    /// is a plain file (never through a symlink); kept when dropped.
    pub fn reopen(dest: &Path, tmp: PathBuf, size: u64) -> io::Result<Self> {
        let m = std::fs::symlink_metadata(&tmp)?;
        if !m.file_type().is_file() || m.len() != size {
            return Err(io::Error::other(format!(
                "{} is not the {size}-byte file it was",
                tmp.display()
            )));
        }
        let file = OpenOptions::new().read(true).write(true).open(&tmp)?;
        Ok(TempFile {
            tmp,
            dest: dest.to_path_buf(),
            file,
            committed: false,
            keep: true,
        })
    }

    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Makes the file visible under its final name: size check, mtime, optional fsync, rename.
    /// With `fsync`, the file's data and then, after the rename, its folder are flushed, so
    /// that the manifest, whose commit follows, never vouches after a power loss for a file
    /// whose name was lost. A modification time that cannot be set fails the commit (a
    /// replica carries its source's mtime; the copy is retried).
    pub fn commit(mut self, size: u64, mtime: Option<SystemTime>, fsync: bool) -> io::Result<()> {
        let actual = self.file.metadata()?.len();
        if actual != size {
            return Err(io::Error::other(format!(
                "size mismatch: wrote {actual} bytes, expected {size}"
            )));
        }
        if let Some(t) = mtime {
            self.file.set_modified(t).map_err(|e| {
                io::Error::new(e.kind(), format!("setting the modification time: {e}"))
            })?;
        }
        if fsync {
            self.file.sync_all()?;
        }
        std::fs::rename(&self.tmp, &self.dest)?;
        self.committed = true;
        if fsync {
            if let Some(dir) = self.dest.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed && !self.keep {
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
}
