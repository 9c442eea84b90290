//! The mount's writes: a file opened for writing is a local cache file (the object's bytes
//! first, unless it is truncated or new); `close` (flush) uploads it whole — one PUT, or a
//! multipart upload of 8 MiB parts past that — with its Content-Type from its extension and
//! its modification time in rclone's metadata convention, and answers only once the object
//! is complete at the store. Unlink deletes; rename is a server-side copy and a delete (a
//! folder: key by key, not atomic); mkdir makes a folder that lives in the mount until a file
//! is put under it (object stores have no empty folders).

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload};

use super::fs::{join, part_len, Attr, Errno, Fs, Kind, WriteState, PART};
use crate::core::location::Scheme;
use crate::core::meta::Meta;

/// The errno of an I/O error on the cache file.
fn io_errno(e: &std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Fs {
    /// A cache file for a handle: in the cache folder, removed when the handle is released.
    fn cache_file(&self) -> Result<(std::fs::File, std::path::PathBuf), Errno> {
        std::fs::create_dir_all(&self.opts.cache_dir).map_err(|e| io_errno(&e))?;
        let n = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let path = self
            .opts
            .cache_dir
            .join(format!("w-{}-{n}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| {
                tracing::warn!(file = %path.display(), error = %e, "mount: cache file");
                io_errno(&e)
            })?;
        Ok((f, path))
    }

    fn refuse_writes(&self) -> Result<(), Errno> {
        if self.opts.read_only {
            Err(libc::EROFS)
        } else {
            Ok(())
        }
    }

    /// A new empty file `name` in `parent`, open for writing: it is at the store once
    /// closed (an empty file too).
    pub async fn create(&self, parent: u64, name: &str) -> Result<(Attr, u64), Errno> {
        self.refuse_writes()?;
        let children = self.children_of(parent).await?;
        if let Some(a) = children.iter().find(|(n, _)| n == name).map(|(_, a)| a) {
            if a.kind == Kind::Dir {
                return Err(libc::EISDIR);
            }
        }
        let rel = join(&self.rel_of(parent)?, name);
        let attr = self.add_child(parent, name, &rel, Kind::File, 0, SystemTime::now());
        let (file, path) = self.cache_file()?;
        let fh = self.new_handle(
            attr.ino,
            &rel,
            None,
            0,
            Some(self.write_state(file, path, true)),
        );
        Ok((attr, fh))
    }

    /// Opens file `ino` for writing: its bytes in a cache file first, unless `truncate`.
    pub async fn open_write(&self, ino: u64, truncate: bool) -> Result<u64, Errno> {
        self.refuse_writes()?;
        let rel = self.file_rel(ino)?;
        let (file, path) = self.cache_file()?;
        let mut size = 0;
        let waiting = self.waiting(&rel).filter(|_| !truncate);
        if let Some(w) = waiting {
            // closed with --write-back and not uploaded: its bytes are here
            let mut from = std::fs::File::open(&w.file).map_err(|e| io_errno(&e))?;
            let mut to = &file;
            size = std::io::copy(&mut from, &mut to).map_err(|e| io_errno(&e))?;
        } else if !truncate {
            let key = self.key(&rel);
            let got = self
                .store
                .get(&key)
                .await
                .map_err(|e| super::fs::errno(&e))?;
            let bytes = got.bytes().await.map_err(|e| super::fs::errno(&e))?;
            file.write_all_at(&bytes, 0).map_err(|e| io_errno(&e))?;
            size = bytes.len() as u64;
            self.fetched.fetch_add(size, Ordering::Relaxed);
        }
        let fh = self.new_handle(
            ino,
            &rel,
            None,
            size,
            Some(self.write_state(file, path, truncate)),
        );
        // what stat answers from now on (an O_TRUNC open: 0, before any write)
        self.set_size(ino, size);
        Ok(fh)
    }

    /// A handle's write state (with `--write-back` too, a sequential writer's parts go as
    /// they fill: its close records it and the completion follows at once).
    fn write_state(
        &self,
        file: std::fs::File,
        path: std::path::PathBuf,
        dirty: bool,
    ) -> WriteState {
        WriteState::new(file, path, dirty)
    }

    /// Writes `data` at `offset` of an open file's cache file; parts a sequential writer has
    /// filled go to the store at once.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        let mut handles = self.handles();
        let h = handles.get_mut(&fh).ok_or(libc::EBADF)?;
        let w = h.write.as_mut().ok_or(libc::EBADF)?;
        w.file
            .write_all_at(data, offset)
            .map_err(|e| io_errno(&e))?;
        w.dirty = true;
        let end = offset + data.len() as u64;
        let ready = w.seq.wrote(offset, end);
        if !ready.is_empty() {
            if w.seq.stream.is_none() {
                if let (Some(rt), Ok(file)) = (&self.rt, w.file.try_clone()) {
                    let attributes = self.attributes_for(&h.rel, SystemTime::now())?;
                    w.seq.stream = Some(super::stream::start(
                        rt,
                        self.store.clone(),
                        h.key.clone(),
                        attributes,
                        file,
                        self.opts.bwlimit.clone(),
                        self.fetcher.budget.clone(),
                    ));
                }
            }
            if let Some(s) = w.seq.stream.as_mut() {
                for (o, l) in ready {
                    s.send(o, l);
                }
            }
        }
        if end > h.size {
            h.size = end;
        }
        let (ino, size) = (h.ino, h.size);
        drop(handles);
        self.set_size(ino, size);
        Ok(data.len() as u32)
    }

    /// Truncates (or extends) file `ino` to `size`: on its open handle, or through one.
    pub async fn truncate(&self, ino: u64, fh: Option<u64>, size: u64) -> Result<Attr, Errno> {
        self.refuse_writes()?;
        // the kernel truncates an O_TRUNC open with a setattr that may name no handle: the
        // file's open write handle is the one truncated
        let own = fh
            .filter(|f| self.is_writing(*f))
            .or_else(|| self.writing_handle(ino));
        let own = match own {
            Some(f) => f,
            None => {
                let f = self.open_write(ino, size == 0).await?;
                let r = self.truncate_open(f, size);
                let r = match r {
                    Ok(()) => self.flush(f).await,
                    Err(e) => Err(e),
                };
                self.release(f);
                r?;
                return self.getattr(ino);
            }
        };
        self.truncate_open(own, size)?;
        self.getattr(ino)
    }

    fn truncate_open(&self, fh: u64, size: u64) -> Result<(), Errno> {
        let mut handles = self.handles();
        let h = handles.get_mut(&fh).ok_or(libc::EBADF)?;
        let w = h.write.as_mut().ok_or(libc::EBADF)?;
        w.file.set_len(size).map_err(|e| io_errno(&e))?;
        w.dirty = true;
        w.seq.truncated(size);
        h.size = size;
        let ino = h.ino;
        drop(handles);
        self.set_size(ino, size);
        Ok(())
    }

    /// A `close` of a descriptor of `fh` by process `tgid`: the file is uploaded (`flush`)
    /// when the process that opened it closes it. A close by another process is the copy
    /// a fork inherited (closed at its exec, or at its exit) while the opener may still be
    /// writing: it uploads nothing, and the opener's close, or the release after the last
    /// descriptor, does (as mountpoint-s3 does). An unknown process (another PID namespace)
    /// uploads.
    pub async fn close(&self, fh: u64, tgid: Option<u32>) -> Result<(), Errno> {
        let opener = self.handles().get(&fh).and_then(|h| h.opener);
        if let (Some(o), Some(t)) = (opener, tgid) {
            if o != t {
                tracing::debug!(fh, opener = o, closer = t, "mount: a close by another process than the opener: the upload waits for the opener's close or the release");
                return Ok(());
            }
        }
        self.flush(fh).await
    }

    /// The last descriptor of `fh` is gone: what no close uploaded is uploaded now (an
    /// error is logged: nobody is left to answer), and the handle goes.
    pub async fn release_written(&self, fh: u64) {
        if let Err(e) = self.flush(fh).await {
            let rel = self.handles().get(&fh).map(|h| h.rel.clone());
            tracing::error!(path = ?rel, errno = e, "mount: the upload at the file's release failed; its bytes are not at the store");
        }
        self.release(fh);
    }

    /// Uploads an open file's cache file when it changed, and waits until the object is
    /// complete at the store (what `close` answers).
    pub async fn flush(&self, fh: u64) -> Result<(), Errno> {
        let (ino, rel, file, stream, path) = {
            let mut handles = self.handles();
            let Some(h) = handles.get_mut(&fh) else {
                return Ok(());
            };
            let Some(w) = h.write.as_mut() else {
                return Ok(());
            };
            if !w.dirty || w.unlinked {
                return Ok(());
            }
            let file = w.file.try_clone().map_err(|e| io_errno(&e))?;
            // what was streamed finishes now, unless a later write went below it; either
            // way this handle streams no more (its next close uploads whole)
            let stream = w.seq.stream.take().filter(|_| !w.seq.broken);
            w.seq.broken = true;
            (h.ino, h.rel.clone(), file, stream, w.path.clone())
        };
        let key = self.key(&rel);
        let size = file.metadata().map_err(|e| io_errno(&e))?.len();
        let mtime = SystemTime::now();
        if let Some(delay) = self.opts.write_back {
            self.keep_for_upload(&rel, (&file, &path), (size, mtime), delay, stream)?;
            if let Some(w) = self.handles().get_mut(&fh).and_then(|h| h.write.as_mut()) {
                w.dirty = false;
            }
            self.fetcher.cache.forget(key.as_ref());
            self.set_size(ino, size);
            return Ok(());
        }
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
            self.upload(&key, &rel, file, size, mtime).await?;
        }
        if let Some(w) = self.handles().get_mut(&fh).and_then(|h| h.write.as_mut()) {
            w.dirty = false;
        }
        self.uploaded.fetch_add(size, Ordering::Relaxed);
        self.fetcher.cache.forget(key.as_ref());
        self.set_size(ino, size);
        tracing::debug!(key = %key, size, "mount: uploaded");
        Ok(())
    }

    /// The cache file's `size` bytes to `key`: one PUT up to a part, else a multipart upload.
    pub(super) async fn upload(
        &self,
        key: &StorePath,
        rel: &str,
        file: std::fs::File,
        size: u64,
        mtime: SystemTime,
    ) -> Result<(), Errno> {
        let attributes = self.attributes_for(rel, mtime)?;
        let failed = |e: object_store::Error| {
            tracing::warn!(key = %key, error = %e, "mount: upload failed");
            super::fs::errno(&e)
        };
        let read = |off: u64, len: u64| -> Result<Vec<u8>, Errno> {
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, off)
                .map_err(|e| io_errno(&e))?;
            Ok(buf)
        };
        if size <= PART {
            if let Some(l) = &self.opts.bwlimit {
                l.take(size).await;
            }
            let _permit = self.fetcher.budget.take(size).await;
            let body = read(0, size)?;
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            self.store
                .put_opts(key, PutPayload::from(body), opts)
                .await
                .map_err(failed)?;
            return Ok(());
        }
        let upload = self
            .store
            .put_multipart_opts(
                key,
                PutMultipartOptions {
                    attributes,
                    ..Default::default()
                },
            )
            .await
            .map_err(failed)?;
        // parts in flight (8 at most), each holding its bytes and a share of the budget
        // until it is uploaded
        let mut upload = upload;
        let mut inflight = futures::stream::FuturesUnordered::new();
        let (mut off, mut n) = (0, 0);
        let sent = async {
            while off < size {
                let len = part_len(n).min(size - off);
                n += 1;
                while inflight.len() >= 8 {
                    if let Some(r) = futures::StreamExt::next(&mut inflight).await {
                        part_done(r).map_err(failed)?;
                    }
                }
                if let Some(l) = &self.opts.bwlimit {
                    l.take(len).await;
                }
                let permit = self.fetcher.budget.take(len).await;
                let part = upload.put_part(PutPayload::from(read(off, len)?));
                inflight.push(tokio::spawn(async move {
                    let done = part.await;
                    drop(permit);
                    done
                }));
                off += len;
            }
            while let Some(r) = futures::StreamExt::next(&mut inflight).await {
                part_done(r).map_err(failed)?;
            }
            Ok::<(), Errno>(())
        }
        .await;
        let done = match sent {
            Ok(()) => upload.complete().await.map(|_| ()).map_err(failed),
            Err(e) => Err(e),
        };
        if done.is_err() {
            let _ = upload.abort().await;
        }
        done
    }

    /// What a file written at `rel` carries: its Content-Type and modification time (none on
    /// a local folder, whose files hold their own).
    fn attributes_for(
        &self,
        rel: &str,
        mtime: SystemTime,
    ) -> Result<object_store::Attributes, Errno> {
        if self.opts.scheme == Scheme::Local {
            return Ok(object_store::Attributes::new());
        }
        Meta::of_local_file(rel, Some(mtime))
            .to_attributes(self.opts.scheme, self.opts.storage_class.as_deref())
            .map(|(a, _)| a)
            .map_err(|why| {
                tracing::warn!(key = %rel, %why, "mount: metadata");
                libc::EIO
            })
    }

    /// Deletes file `name` of `parent` at the store.
    pub async fn unlink(&self, parent: u64, name: &str) -> Result<(), Errno> {
        self.refuse_writes()?;
        let children = self.children_of(parent).await?;
        let a = children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .ok_or(libc::ENOENT)?;
        if a.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        let rel = join(&self.rel_of(parent)?, name);
        let waited = self.waiting(&rel).is_some();
        self.drop_waiting(&rel);
        // a file unlinked while open for writing stays unlinked: its close uploads nothing
        for h in self.handles().values_mut() {
            if h.rel == rel {
                if let Some(w) = h.write.as_mut() {
                    w.unlinked = true;
                    w.seq.broken = true;
                    w.seq.stream = None;
                }
            }
        }
        match self.store.delete(&self.key(&rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            // never uploaded: nothing at the store to delete
            Err(_) if waited => {}
            Err(e) => return Err(super::fs::errno(&e)),
        }
        self.remove_child(parent, name);
        Ok(())
    }

    /// A folder `name` in `parent`: kept by the mount until a file is put under it.
    pub async fn mkdir(&self, parent: u64, name: &str) -> Result<Attr, Errno> {
        self.refuse_writes()?;
        let children = self.children_of(parent).await?;
        if children.iter().any(|(n, _)| n == name) {
            return Err(libc::EEXIST);
        }
        let rel = join(&self.rel_of(parent)?, name);
        self.add_virtual_dir(&rel);
        let attr = self.add_child(parent, name, &rel, Kind::Dir, 0, SystemTime::now());
        Ok(attr)
    }

    /// Removes an empty folder.
    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<(), Errno> {
        self.refuse_writes()?;
        let a = self.lookup(parent, name).await?;
        if a.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let inside = self.readdir(a.ino).await?;
        if inside.len() > 2 {
            return Err(libc::ENOTEMPTY);
        }
        let rel = join(&self.rel_of(parent)?, name);
        // a folder marker some tools write (`name/`), if any
        let _ = self
            .store
            .delete(&StorePath::from(format!("{}/", join(self.prefix(), &rel))))
            .await;
        self.remove_virtual_dir(&rel);
        self.remove_child(parent, name);
        Ok(())
    }

    /// Renames `name` of `parent` to `new_name` of `new_parent`: a server-side copy and a
    /// delete per key (a folder's keys one by one: not atomic).
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
    ) -> Result<(), Errno> {
        self.refuse_writes()?;
        let a = self.lookup(parent, name).await?;
        let from = join(&self.rel_of(parent)?, name);
        let to = join(&self.rel_of(new_parent)?, new_name);
        // what waits for its upload goes first: the rename copies it at the store
        if self.settle(&from).await > 0 {
            return Err(libc::EIO);
        }
        if let Ok(b) = self.lookup(new_parent, new_name).await {
            match (a.kind, b.kind) {
                (Kind::File, Kind::Dir) => return Err(libc::EISDIR),
                (Kind::Dir, Kind::File) => return Err(libc::ENOTDIR),
                (Kind::Dir, Kind::Dir) if self.readdir(b.ino).await?.len() > 2 => {
                    return Err(libc::ENOTEMPTY)
                }
                _ => {}
            }
        }
        let moves: Vec<(String, String)> = match a.kind {
            Kind::File => vec![(from.clone(), to.clone())],
            Kind::Dir => {
                use futures::TryStreamExt;
                let base = join(self.prefix(), &from);
                let keys: Vec<object_store::ObjectMeta> = self
                    .store
                    .list(Some(&StorePath::from(base.as_str())))
                    .try_collect()
                    .await
                    .map_err(|e| super::fs::errno(&e))?;
                keys.into_iter()
                    .filter_map(|m| {
                        let k = m.location.to_string();
                        let rest = k.strip_prefix(&format!("{base}/"))?.to_string();
                        Some((join(&from, &rest), join(&to, &rest)))
                    })
                    .collect()
            }
        };
        // a file open for writing may not be at the store yet: its close uploads it under
        // the new name
        let writing = a.kind == Kind::File && self.writing_handle(a.ino).is_some();
        for (f, t) in &moves {
            match self.store.copy(&self.key(f), &self.key(t)).await {
                Ok(()) => {}
                Err(object_store::Error::NotFound { .. }) if writing => continue,
                Err(e) => return Err(super::fs::errno(&e)),
            }
            match self.store.delete(&self.key(f)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(super::fs::errno(&e)),
            }
        }
        self.fetcher.cache.forget(self.key(&from).as_ref());
        self.move_child(parent, name, new_parent, new_name);
        Ok(())
    }

    /// An open write handle of file `ino`, if any.
    fn writing_handle(&self, ino: u64) -> Option<u64> {
        self.handles()
            .iter()
            .find(|(_, h)| h.ino == ino && h.write.is_some())
            .map(|(f, _)| *f)
    }

    fn is_writing(&self, fh: u64) -> bool {
        self.handles().get(&fh).is_some_and(|h| h.write.is_some())
    }
}

/// A part task's outcome.
fn part_done(
    r: Result<object_store::Result<()>, tokio::task::JoinError>,
) -> object_store::Result<()> {
    r.unwrap_or_else(|e| {
        Err(object_store::Error::Generic {
            store: "mount",
            source: Box::new(e),
        })
    })
}
