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
        let path = self.opts.cache_dir.join(format!("w-{}-{n}", self.tag.name));
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
        let fh = self
            .new_write_handle(attr.ino, &rel, 0, self.write_state(file, path, true))
            .await;
        Ok((attr, fh))
    }

    /// Opens file `ino` for writing: its bytes in a cache file first, unless `truncate`.
    pub async fn open_write(&self, ino: u64, truncate: bool) -> Result<u64, Errno> {
        self.refuse_writes()?;
        let rel = self.file_rel(ino)?;
        let (file, path) = self.cache_file()?;
        let mut size = 0;
        // closed with --write-back and not uploaded: its bytes are here (unless uploaded
        // meanwhile: then the store has them)
        let waiting = match self.waiting(&rel).filter(|_| !truncate) {
            Some(w) => self.open_waiting(&rel, &w).map_err(|e| io_errno(&e))?,
            None => None,
        };
        if let Some(mut from) = waiting {
            let mut to = &file;
            size = std::io::copy(&mut from, &mut to).map_err(|e| io_errno(&e))?;
        } else if !truncate {
            // the object's bytes into the cache file as they arrive: memory holds one
            // chunk of the response, whatever the object's size
            let key = self.key(&rel);
            let got = self
                .store
                .get(&key)
                .await
                .map_err(|e| super::fs::errno(&e))?;
            let mut chunks = got.into_stream();
            while let Some(chunk) = futures::StreamExt::next(&mut chunks).await {
                let chunk = chunk.map_err(|e| super::fs::errno(&e))?;
                if let Some(l) = &self.opts.bwlimit {
                    l.take(chunk.len() as u64).await;
                }
                file.write_all_at(&chunk, size).map_err(|e| io_errno(&e))?;
                size += chunk.len() as u64;
                self.fetched
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
        let fh = self
            .new_write_handle(ino, &rel, size, self.write_state(file, path, truncate))
            .await;
        // what stat answers from now on: an O_TRUNC open empties the file now (0 bytes
        // before any write); another open changes no time until it writes
        if truncate {
            self.set_size(ino, size);
        } else {
            self.set_len(ino, size);
        }
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
        w.changed();
        let end = offset + data.len() as u64;
        let ready = w.seq.wrote(offset, end);
        if !ready.is_empty() {
            if w.seq.stream.is_none() {
                if let (Some(rt), Ok(file)) = (&self.rt, w.file.try_clone()) {
                    let mtime = SystemTime::now();
                    let attributes = self.attributes_for(&h.rel, mtime)?;
                    w.seq.stream = Some(super::stream::start(
                        rt,
                        self.store.clone(),
                        h.key.clone(),
                        (attributes, mtime),
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
        w.changed();
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
        // the path held (shared) while it uploads: an unlink or rename of it waits, and
        // one that came first is seen (`unlinked`, a new name). Nothing to upload: nothing
        // held, nothing waited for
        let _held = loop {
            let rel = {
                let handles = self.handles();
                let Some(h) = handles.get(&fh) else {
                    return Ok(());
                };
                match &h.write {
                    Some(w) if w.dirty && !w.unlinked => h.rel.clone(),
                    _ => return Ok(()),
                }
            };
            let held = self.share(&rel).await;
            if self.handles().get(&fh).is_some_and(|h| h.rel == rel) {
                break held;
            }
        };
        let (ino, rel, file, stream, path, changes) = {
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
            (
                h.ino,
                h.rel.clone(),
                file,
                stream,
                w.path.clone(),
                w.changes,
            )
        };
        // clean again only when no write came while this flush uploaded (the next flush
        // uploads those)
        let uploaded = |me: &Fs| {
            if let Some(w) = me.handles().get_mut(&fh).and_then(|h| h.write.as_mut()) {
                if w.changes == changes {
                    w.dirty = false;
                }
            }
        };
        let key = self.key(&rel);
        let size = file.metadata().map_err(|e| io_errno(&e))?.len();
        // the time the object carries, which the mount shows from now on: a streamed
        // upload's was sent with its start
        let mtime = stream.as_ref().map_or_else(SystemTime::now, |s| s.mtime);
        if let Some(delay) = self.opts.write_back {
            self.keep_for_upload(&rel, (&file, &path), (size, mtime), delay, stream)?;
            uploaded(self);
            self.fetcher.cache.forget(key.as_ref());
            self.set_stored(ino, size, mtime);
            return Ok(());
        }
        // two closes of one path upload in turn: the later close's bytes land last
        let _turn = self.upload_turn(&rel).await;
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
        uploaded(self);
        self.uploaded.fetch_add(size, Ordering::Relaxed);
        self.fetcher.cache.forget(key.as_ref());
        self.set_stored(ino, size, mtime);
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
        completed(upload, sent, failed).await
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
        // an upload of it under way (a close's, or a write-back's) ends first, or it would
        // put the file back; none starts until the delete is done. The path is the one the
        // file has once held (a folder's rename may have moved it meanwhile)
        let mut rel = join(&self.rel_of(parent)?, name);
        let held = loop {
            let held = self.hold(&rel).await;
            let now = join(&self.rel_of(parent)?, name);
            if now == rel {
                break held;
            }
            rel = now;
        };
        // the DELETE first (never uploaded: nothing to delete there); only once it is done
        // do an open writer's close and a waiting upload lose their bytes, and the entry
        // go, all before the path is let go (a new handle waiting for it sees it gone)
        let deleted = match self.store.delete(&self.key(&rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(super::fs::errno(&e)),
        };
        if deleted.is_ok() {
            self.unlink_open(&rel, None);
            self.drop_waiting(&rel);
            self.remove_child(parent, name);
        }
        drop(held);
        deleted
    }

    /// The file at `rel` is gone from the mount (unlinked, or renamed over): a handle open
    /// for writing on it (other than file `keep`) stays open on the unlinked file, and
    /// its close uploads nothing.
    fn unlink_open(&self, rel: &str, keep: Option<u64>) {
        for h in self.handles().values_mut() {
            if h.rel == rel && Some(h.ino) != keep {
                if let Some(w) = h.write.as_mut() {
                    w.unlinked = true;
                    w.seq.broken = true;
                    w.seq.stream = None;
                }
            }
        }
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
        // no upload, delete or other rename of what moves runs meanwhile: a file's rename
        // holds both its names, a folder's rename both folders (uploads of their files
        // wait, then go to their new names; the rest of the mount goes on). What waited for
        // its upload at the destination is replaced: it is not uploaded (after an upload of
        // it under way, which the copy overwrites). The names are the ones the entries have
        // once held (another folder's rename may have moved them meanwhile)
        let names = || -> Result<(String, String), Errno> {
            Ok((
                join(&self.rel_of(parent)?, name),
                join(&self.rel_of(new_parent)?, new_name),
            ))
        };
        let (from, to, _held) = loop {
            let (from, to) = names()?;
            if from == to {
                return Ok(());
            }
            let held = match a.kind {
                Kind::File => self.hold_both(&from, &to).await,
                Kind::Dir => {
                    // what waits goes first, while the rest of the mount goes on
                    if self.settle(&from).await > 0 {
                        return Err(libc::EIO);
                    }
                    self.hold_folders(&from, &to).await
                }
            };
            if names()? == (from.clone(), to.clone()) {
                break (from, to, held);
            }
        };
        // what waits for its upload goes first: the rename copies it at the store (for a
        // folder: what was closed in it since the settle above)
        for r in self.waiting_under(&from) {
            self.upload_held(&r).await.map_err(|e| {
                tracing::error!(path = %r, errno = e, "mount: uploading a --write-back file before its rename failed");
                libc::EIO
            })?;
        }
        self.rename_held(a, (parent, name, &from), (new_parent, new_name, &to))
            .await
    }

    async fn rename_held(
        &self,
        a: Attr,
        (parent, name, from): (u64, &str, &str),
        (new_parent, new_name, to): (u64, &str, &str),
    ) -> Result<(), Errno> {
        let (from, to) = (from.to_string(), to.to_string());
        let mut over_a_file = false;
        if let Ok(b) = self.lookup(new_parent, new_name).await {
            match (a.kind, b.kind) {
                (Kind::File, Kind::Dir) => return Err(libc::EISDIR),
                (Kind::Dir, Kind::File) => return Err(libc::ENOTDIR),
                (Kind::Dir, Kind::Dir) if self.readdir(b.ino).await?.len() > 2 => {
                    return Err(libc::ENOTEMPTY)
                }
                _ => {}
            }
            over_a_file = b.kind == Kind::File;
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
            match (&self.copier, writing) {
                // with the storage class asked for (a file being written is uploaded whole
                // under its new name by its close, with it)
                (Some(c), false) => {
                    if let Err(why) = c.copy(self.key(f).as_ref(), self.key(t).as_ref()).await {
                        tracing::warn!(from = %f, to = %t, %why, "mount: rename: the copy failed");
                        return Err(libc::EIO);
                    }
                }
                // Azure's and GCS's copies cannot ask for a class: the bytes move through
                // the mount, as the copier moves them when a class is asked for
                (None, false) if self.copies_through() => self.copy_through(f, t).await?,
                _ => match self.store.copy(&self.key(f), &self.key(t)).await {
                    Ok(()) => {}
                    Err(object_store::Error::NotFound { .. }) if writing => continue,
                    Err(e) => return Err(super::fs::errno(&e)),
                },
            }
            match self.store.delete(&self.key(f)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(super::fs::errno(&e)),
            }
        }
        if over_a_file {
            self.drop_waiting(&to);
            self.unlink_open(&to, Some(a.ino));
        }
        self.fetcher.cache.forget(self.key(&from).as_ref());
        self.move_child(parent, name, new_parent, new_name);
        Ok(())
    }

    /// Whether a rename's copy moves the bytes through the mount: a class asked for on a
    /// store whose server-side copy keeps the source's (Azure, GCS).
    fn copies_through(&self) -> bool {
        self.opts.storage_class.is_some() && matches!(self.opts.scheme, Scheme::Azure | Scheme::Gcs)
    }

    /// Copies `from` to `to` by reading it and writing it again: its own Content-Type and
    /// metadata (its modification time among them), with the mount's storage class. One PUT
    /// up to a part, else a multipart upload of parts taken from the GET as they arrive, one
    /// at a time within the memory budget. An object the GET cannot read whole as stored
    /// (GCS serving a gzip-encoded object decompressed, an Azure blob in the Archive tier)
    /// is copied by the store instead, keeping its own class.
    async fn copy_through(&self, from: &str, to: &str) -> Result<(), Errno> {
        use futures::StreamExt;
        let (src, dst) = (self.key(from), self.key(to));
        let failed = |e: object_store::Error| {
            tracing::warn!(from = %src, to = %dst, error = %e, "mount: rename: the copy failed");
            super::fs::errno(&e)
        };
        let by_store = |why: &dyn std::fmt::Display| {
            tracing::warn!(from = %src, to = %dst, %why, "mount: rename: the object cannot be read as stored to copy it with --storage-class; the store copies it, with its own class");
        };
        let got = match self.store.get(&src).await {
            Ok(got) => got,
            // gone, or a passing failure (a 5xx, a timeout): the rename fails, as a
            // copy that failed would, rather than drop the class
            Err(e @ object_store::Error::NotFound { .. }) => return Err(failed(e)),
            Err(e) if crate::stores::retry::transient(&e) => return Err(failed(e)),
            Err(e) => {
                by_store(&e);
                return self.store.copy(&src, &dst).await.map_err(failed);
            }
        };
        let scheme = self.opts.scheme;
        // GCS serves a gzip-encoded object decompressed: its stored bytes are not these
        let encoded = got
            .attributes
            .get(&object_store::Attribute::ContentEncoding)
            .is_some_and(|v| v.as_ref().to_ascii_lowercase().contains("gzip"));
        if scheme == Scheme::Gcs && encoded {
            drop(got);
            by_store(&"Content-Encoding: gzip");
            return self.store.copy(&src, &dst).await.map_err(failed);
        }
        let size = got.meta.size;
        let attributes = Meta::from_attributes(scheme, &got.attributes)
            .to_attributes(scheme, self.opts.storage_class.as_deref())
            .map(|(a, _)| a)
            .map_err(|why| {
                tracing::warn!(key = %src, %why, "mount: rename: metadata");
                libc::EIO
            })?;
        let mut body = got.into_stream();
        // what the body's last chunk held past the part it ended
        let mut rest = bytes::Bytes::new();
        // the next `len` bytes of the body, within the budget and --bwlimit (read, then
        // written: each byte passes twice)
        let mut next = async |len: u64| -> Result<(Vec<u8>, _), Errno> {
            if let Some(l) = &self.opts.bwlimit {
                l.take(2 * len).await;
            }
            let permit = self.fetcher.budget.take(len).await;
            let mut buf = Vec::with_capacity(len as usize);
            loop {
                let want = len as usize - buf.len();
                if rest.len() >= want {
                    buf.extend_from_slice(&rest.split_to(want));
                    break;
                }
                buf.extend_from_slice(&rest);
                match body.next().await {
                    Some(Ok(b)) => rest = b,
                    Some(Err(e)) => return Err(failed(e)),
                    None => {
                        rest = bytes::Bytes::new();
                        break;
                    }
                }
            }
            if buf.len() as u64 != len {
                tracing::warn!(key = %src, "mount: rename: the object changed while copied");
                return Err(libc::EIO);
            }
            Ok((buf, permit))
        };
        if size <= PART {
            let (buf, _permit) = next(size).await?;
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            self.store
                .put_opts(&dst, PutPayload::from(buf), opts)
                .await
                .map_err(failed)?;
            self.copied_through(size);
            return Ok(());
        }
        let mut upload = self
            .store
            .put_multipart_opts(
                &dst,
                PutMultipartOptions {
                    attributes,
                    ..Default::default()
                },
            )
            .await
            .map_err(failed)?;
        let sent = async {
            let (mut off, mut n) = (0, 0);
            while off < size {
                let len = part_len(n).min(size - off);
                n += 1;
                let (buf, _permit) = next(len).await?;
                upload
                    .put_part(PutPayload::from(buf))
                    .await
                    .map_err(failed)?;
                off += len;
            }
            Ok::<(), Errno>(())
        }
        .await;
        completed(upload, sent, failed).await?;
        self.copied_through(size);
        Ok(())
    }

    /// Counts `size` bytes a rename read and wrote again (`/metrics`).
    fn copied_through(&self, size: u64) {
        self.fetched.fetch_add(size, Ordering::Relaxed);
        self.uploaded.fetch_add(size, Ordering::Relaxed);
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

/// A multipart upload completed once all its parts were `sent`; aborted when they were not,
/// or when it could not be completed.
async fn completed(
    mut upload: Box<dyn object_store::MultipartUpload>,
    sent: Result<(), Errno>,
    failed: impl Fn(object_store::Error) -> Errno,
) -> Result<(), Errno> {
    let done = match sent {
        Ok(()) => upload.complete().await.map(|_| ()).map_err(failed),
        Err(e) => Err(e),
    };
    if done.is_err() {
        let _ = upload.abort().await;
    }
    done
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

#[cfg(test)]
mod tests {
    use super::super::fs::{FsOpts, ROOT};
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutResult,
    };
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    /// A store whose PUTs, once gated, wait until the test lets each one go.
    #[derive(Debug)]
    struct Gated {
        inner: InMemory,
        gate: AtomicBool,
        /// Copies wait too, while set.
        gate_copy: AtomicBool,
        /// GETs wait too, while set.
        gate_get: AtomicBool,
        /// DELETEs fail, while set.
        fail_delete: AtomicBool,
        /// GETs fail (as GCS's answer to a gzip-encoded object without its length), while set.
        fail_get: AtomicBool,
        /// GETs fail with a 503, while set.
        fail_get_503: AtomicBool,
        started: tokio::sync::Semaphore,
        open: tokio::sync::Semaphore,
    }

    impl std::fmt::Display for Gated {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Gated")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Gated {
        async fn put_opts(
            &self,
            location: &StorePath,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.pause_if(&self.gate).await;
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &StorePath,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &StorePath,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            if self.fail_get.load(Ordering::SeqCst) {
                return Err(object_store::Error::Generic {
                    store: "Gated",
                    source: "a GET that cannot be read".into(),
                });
            }
            if self.fail_get_503.load(Ordering::SeqCst) {
                return Err(object_store::Error::Generic {
                    store: "Gated",
                    source: "Server returned non-2xx status code: 503 Service Unavailable".into(),
                });
            }
            // the answer is under way (its bytes taken) when it waits
            let got = self.inner.get_opts(location, options).await;
            self.pause_if(&self.gate_get).await;
            got
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<StorePath>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<StorePath>> {
            if self.fail_delete.load(Ordering::SeqCst) {
                use futures::StreamExt;
                return locations
                    .map(|_| {
                        Err(object_store::Error::Generic {
                            store: "Gated",
                            source: "a DELETE that fails".into(),
                        })
                    })
                    .boxed();
            }
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&StorePath>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&StorePath>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &StorePath,
            to: &StorePath,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.pause_if(&self.gate_copy).await;
            self.inner.copy_opts(from, to, options).await
        }
    }

    impl Default for Gated {
        fn default() -> Gated {
            Gated {
                inner: InMemory::new(),
                gate: AtomicBool::new(false),
                gate_copy: AtomicBool::new(false),
                gate_get: AtomicBool::new(false),
                fail_delete: AtomicBool::new(false),
                fail_get: AtomicBool::new(false),
                fail_get_503: AtomicBool::new(false),
                started: tokio::sync::Semaphore::new(0),
                open: tokio::sync::Semaphore::new(0),
            }
        }
    }

    impl Gated {
        /// While `gate` is set: tells the test a call started, and waits until it lets
        /// one go.
        async fn pause_if(&self, gate: &AtomicBool) {
            if gate.load(Ordering::SeqCst) {
                self.started.add_permits(1);
                if let Ok(p) = self.open.acquire().await {
                    p.forget();
                }
            }
        }

        /// Waits until a gated PUT has started.
        async fn put_started(&self) {
            let p = tokio::time::timeout(Duration::from_secs(10), self.started.acquire())
                .await
                .expect("no PUT started within 10 s")
                .unwrap();
            p.forget();
        }
        async fn body(&self, k: &str) -> Option<Vec<u8>> {
            match self.inner.get(&StorePath::from(k)).await {
                Ok(g) => Some(g.bytes().await.unwrap().to_vec()),
                Err(_) => None,
            }
        }
    }

    /// Lets the other tasks of the test's runtime run a while.
    async fn let_others_run() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    fn fs(store: Arc<Gated>, dir: &std::path::Path, write_back: Option<Duration>) -> Arc<Fs> {
        fs_of("s3://t", store, dir, write_back)
    }

    /// A test mount's options: an S3 mount of the cache folder `dir`.
    fn opts(dir: &std::path::Path, write_back: Option<Duration>) -> FsOpts {
        FsOpts {
            dir_ttl: Duration::from_secs(3600),
            uid: 0,
            gid: 0,
            umask: 0o022,
            read_only: false,
            scheme: Scheme::S3,
            cache_dir: dir.to_path_buf(),
            cache_max: 1 << 30,
            memory_limit: 64 << 20,
            write_back,
            storage_class: None,
            bwlimit: None,
        }
    }

    fn fs_of(
        src: &str,
        store: Arc<Gated>,
        dir: &std::path::Path,
        write_back: Option<Duration>,
    ) -> Arc<Fs> {
        let mut f = Fs::new(store, "", opts(dir, write_back)).unwrap();
        let state = super::super::state::MountState::open(dir).unwrap();
        f.set_backlog(super::super::writeback::Backlog::load(src, state).unwrap());
        Arc::new(f)
    }

    /// A file `name` written with `body` and closed (with --write-back: waiting).
    async fn written(f: &Fs, name: &str, body: &[u8]) {
        let (_, fh) = f.create(ROOT, name).await.unwrap();
        f.write(fh, 0, body).unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
    }

    #[tokio::test]
    async fn a_rename_asking_for_a_class_moves_the_bytes_whole_with_their_metadata() {
        use object_store::{Attribute, AttributeValue};
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let mut o = opts(d.path(), None);
        o.scheme = Scheme::Azure;
        o.storage_class = Some("Cool".into());
        // a small budget: each part waits for the last one's room
        o.memory_limit = 9 << 20;
        let f = Fs::new(s.clone(), "", o).unwrap();
        let t = std::time::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let (seeded, _) = Meta::of_local_file("x.csv", Some(t))
            .to_attributes(Scheme::Azure, None)
            .unwrap();
        let mut total = 0;
        // the sizes around a part's, and one the GET hands over in a chunk spanning parts
        for size in [0, 5, PART - 1, PART, PART + 1, 2 * PART + 3] {
            let body: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            let src = StorePath::from(format!("src-{size}.csv"));
            let opts = PutOptions {
                attributes: seeded.clone(),
                ..Default::default()
            };
            s.inner
                .put_opts(&src, PutPayload::from(body.clone()), opts)
                .await
                .unwrap();
            f.copy_through(src.as_ref(), &format!("d/dst-{size}.csv"))
                .await
                .unwrap();
            let got = s
                .inner
                .get(&StorePath::from(format!("d/dst-{size}.csv")))
                .await
                .unwrap();
            let attrs = got.attributes.clone();
            assert!(got.bytes().await.unwrap() == body, "{size} bytes");
            assert_eq!(
                attrs.get(&Attribute::StorageClass),
                Some(&AttributeValue::from("Cool")),
                "{size} bytes"
            );
            for (k, v) in seeded.iter() {
                assert_eq!(attrs.get(k), Some(v), "{size} bytes: {k:?}");
            }
            total += size;
        }
        assert_eq!(f.uploaded.load(Ordering::Relaxed), total);
        assert_eq!(f.fetched.load(Ordering::Relaxed), total);
        // an object the GET cannot read whole is copied by the store, keeping its class
        s.fail_get.store(true, Ordering::SeqCst);
        f.copy_through("src-5.csv", "d/by-store.csv").await.unwrap();
        s.fail_get.store(false, Ordering::SeqCst);
        let got = s
            .inner
            .get(&StorePath::from("d/by-store.csv"))
            .await
            .unwrap();
        assert_eq!(got.attributes.get(&Attribute::StorageClass), None);
        assert_eq!(&got.bytes().await.unwrap()[..], &[0, 7, 14, 21, 28]);
        // a source that is gone is an error, not a copy; so is a passing failure, which
        // a store's copy would answer by dropping the class
        assert_eq!(
            f.copy_through("nothing.csv", "d/x.csv").await,
            Err(libc::ENOENT)
        );
        s.fail_get_503.store(true, Ordering::SeqCst);
        assert_eq!(f.copy_through("src-5.csv", "d/x.csv").await, Err(libc::EIO));
        s.fail_get_503.store(false, Ordering::SeqCst);
        assert!(s.body("d/x.csv").await.is_none());
        // GCS serves a gzip-encoded object decompressed: the store copies it
        let mut g = opts(d.path(), None);
        g.scheme = Scheme::Gcs;
        g.storage_class = Some("NEARLINE".into());
        let gf = Fs::new(s.clone(), "", g).unwrap();
        let mut gz = object_store::Attributes::new();
        gz.insert(Attribute::ContentEncoding, AttributeValue::from("gzip"));
        let opts_gz = PutOptions {
            attributes: gz,
            ..Default::default()
        };
        s.inner
            .put_opts(
                &StorePath::from("z.gz"),
                PutPayload::from_static(b"\x1f\x8b"),
                opts_gz,
            )
            .await
            .unwrap();
        gf.copy_through("z.gz", "d/z.gz").await.unwrap();
        let got = s.inner.get(&StorePath::from("d/z.gz")).await.unwrap();
        assert_eq!(got.attributes.get(&Attribute::StorageClass), None);
        assert_eq!(gf.uploaded.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_open_for_writing_that_writes_nothing_changes_no_time() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        s.inner
            .put(&StorePath::from("a.txt"), PutPayload::from_static(b"abc"))
            .await
            .unwrap();
        let f = fs(s.clone(), d.path(), None);
        let a = f.lookup(ROOT, "a.txt").await.unwrap();
        let fh = f.open(a.ino, true, false).await.unwrap();
        let open = f.getattr(a.ino).unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        let closed = f.getattr(a.ino).unwrap();
        assert_eq!((open.size, open.mtime), (3, a.mtime));
        assert_eq!((closed.size, closed.mtime), (3, a.mtime));
        // an O_TRUNC open empties it now
        let fh = f.open(a.ino, true, true).await.unwrap();
        let t = f.getattr(a.ino).unwrap();
        assert!(t.size == 0 && t.mtime > a.mtime, "{t:?}");
        f.release(fh);
    }

    #[tokio::test]
    async fn a_write_made_while_its_file_uploads_is_uploaded_by_the_next_flush() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        let (_, fh) = f.create(ROOT, "a.txt").await.unwrap();
        f.write(fh, 0, b"one").unwrap();
        s.gate.store(true, Ordering::SeqCst);
        let flushing = tokio::spawn({
            let f = f.clone();
            async move { f.flush(fh).await }
        });
        s.put_started().await;
        f.write(fh, 3, b"two").unwrap();
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        flushing.await.unwrap().unwrap();
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"one"[..]));
        f.flush(fh).await.unwrap();
        assert_eq!(
            s.body("a.txt").await.as_deref(),
            Some(&b"onetwo"[..]),
            "the write made during the first upload was not uploaded"
        );
        f.release(fh);
    }

    #[tokio::test]
    async fn two_mounts_of_one_process_share_a_cache_folder_without_meeting() {
        let d = tempfile::tempdir().unwrap();
        let (s1, s2) = (Arc::new(Gated::default()), Arc::new(Gated::default()));
        let wb = Some(Duration::from_secs(3600));
        let f1 = fs_of("s3://one", s1.clone(), d.path(), wb);
        let f2 = fs_of("s3://two", s2.clone(), d.path(), wb);
        let (_, h1) = f1.create(ROOT, "a.txt").await.unwrap();
        let (_, h2) = f2.create(ROOT, "a.txt").await.unwrap();
        f1.write(h1, 0, b"first").unwrap();
        f2.write(h2, 0, b"second").unwrap();
        f1.flush(h1).await.unwrap();
        f2.flush(h2).await.unwrap();
        f1.release(h1);
        f2.release(h2);
        assert_eq!(f1.settle("").await, 0);
        assert_eq!(f2.settle("").await, 0);
        assert_eq!(s1.body("a.txt").await.as_deref(), Some(&b"first"[..]));
        assert_eq!(s2.body("a.txt").await.as_deref(), Some(&b"second"[..]));
    }

    #[tokio::test]
    async fn a_waiting_file_whose_kept_bytes_are_gone_is_listed_as_lost_not_retried() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"abc").await;
        let kept = f.waiting("a.txt").expect("waiting").file;
        std::fs::remove_file(&kept).unwrap();
        assert_eq!(f.settle("").await, 0, "nothing left to retry");
        assert_eq!(f.waiting_count(), 0);
        assert_eq!(s.body("a.txt").await, None);
        let state = super::super::state::MountState::open(d.path()).unwrap();
        assert!(state.pending(None).unwrap().is_empty());
        let lost = state.lost(Some("s3://t")).unwrap();
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!((lost[0].rel.as_str(), lost[0].size), ("a.txt", 3));
        assert_eq!(lost[0].file, kept);
    }

    #[tokio::test]
    async fn a_rename_over_a_waiting_file_is_not_undone_by_its_upload() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "dst.txt", b"old").await;
        written(&f, "src.txt", b"new").await;
        assert_eq!(f.waiting_count(), 2);
        f.rename(ROOT, "src.txt", ROOT, "dst.txt").await.unwrap();
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("dst.txt").await.as_deref(), Some(&b"new"[..]));
        assert_eq!(s.body("src.txt").await, None);
        assert_eq!(f.waiting_count(), 0);
        // a rename onto itself changes nothing
        f.rename(ROOT, "dst.txt", ROOT, "dst.txt").await.unwrap();
        assert_eq!(s.body("dst.txt").await.as_deref(), Some(&b"new"[..]));
    }

    #[tokio::test]
    async fn an_unlink_during_the_files_upload_is_not_undone_by_it() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"bytes").await;
        s.gate.store(true, Ordering::SeqCst);
        let settling = tokio::spawn({
            let f = f.clone();
            async move { f.settle("").await }
        });
        s.put_started().await;
        let unlinking = tokio::spawn({
            let f = f.clone();
            async move { f.unlink(ROOT, "a.txt").await }
        });
        // the unlink waits for the upload under way
        let_others_run().await;
        assert!(
            !unlinking.is_finished(),
            "the unlink did not wait for the upload"
        );
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        assert_eq!(settling.await.unwrap(), 0);
        unlinking.await.unwrap().unwrap();
        assert_eq!(s.body("a.txt").await, None, "the unlinked file came back");
    }

    #[tokio::test]
    async fn an_unlink_during_a_closes_upload_is_not_undone_by_it() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        let (_, fh) = f.create(ROOT, "a.txt").await.unwrap();
        f.write(fh, 0, b"bytes").unwrap();
        s.gate.store(true, Ordering::SeqCst);
        let closing = tokio::spawn({
            let f = f.clone();
            async move { f.flush(fh).await }
        });
        s.put_started().await;
        let unlinking = tokio::spawn({
            let f = f.clone();
            async move { f.unlink(ROOT, "a.txt").await }
        });
        let_others_run().await;
        assert!(
            !unlinking.is_finished(),
            "the unlink did not wait for the close's upload"
        );
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        closing.await.unwrap().unwrap();
        unlinking.await.unwrap().unwrap();
        assert_eq!(s.body("a.txt").await, None, "the unlinked file came back");
        // the handle's next close uploads nothing
        f.write(fh, 0, b"again").unwrap();
        f.flush(fh).await.unwrap();
        assert_eq!(
            s.body("a.txt").await,
            None,
            "a close after the unlink uploaded"
        );
        f.release(fh);
    }

    #[tokio::test]
    async fn a_close_during_a_rename_of_its_file_goes_to_the_new_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "src.txt", b"one").await;
        let ino = f.lookup(ROOT, "src.txt").await.unwrap().ino;
        let fh = f.open_write(ino, false).await.unwrap();
        f.write(fh, 0, b"two").unwrap();
        // the rename uploads the waiting "one" first: held there
        s.gate.store(true, Ordering::SeqCst);
        let renaming = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "src.txt", ROOT, "dst.txt").await }
        });
        s.put_started().await;
        let closing = tokio::spawn({
            let f = f.clone();
            async move { f.flush(fh).await }
        });
        let_others_run().await;
        assert!(
            !closing.is_finished(),
            "the close did not wait for the rename"
        );
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        renaming.await.unwrap().unwrap();
        closing.await.unwrap().unwrap();
        f.release(fh);
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("dst.txt").await.as_deref(), Some(&b"two"[..]));
        assert_eq!(s.body("src.txt").await, None, "the old name came back");
        assert_eq!(f.waiting_count(), 0);
    }

    #[tokio::test]
    async fn kept_files_of_a_tag_held_before_are_not_overwritten_and_orphans_go() {
        let d = tempfile::tempdir().unwrap();
        let dirty = d.path().join("dirty");
        std::fs::create_dir_all(&dirty).unwrap();
        // a file kept and recorded by another source's mount; one kept and never
        // recorded by a mount that is gone; one of a live mount elsewhere, not recorded yet
        let state = super::super::state::MountState::open(d.path()).unwrap();
        std::fs::write(dirty.join("999999-1-1"), b"recorded").unwrap();
        let now = std::time::SystemTime::now();
        state
            .record("s3://other", "r.txt", &dirty.join("999999-1-1"), 8, now)
            .unwrap();
        drop(state);
        std::fs::write(dirty.join("999999-1-2"), b"orphan").unwrap();
        std::fs::create_dir_all(d.path().join("locks")).unwrap();
        let live = std::fs::File::create(d.path().join("locks").join("999998-1")).unwrap();
        assert!(super::super::cache::try_lock(&live).unwrap());
        std::fs::write(dirty.join("999998-1-1"), b"live").unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        assert!(dirty.join("999999-1-1").exists(), "a recorded file went");
        assert!(!dirty.join("999999-1-2").exists(), "an orphan stayed");
        assert!(
            dirty.join("999998-1-1").exists(),
            "a live mount's file went"
        );
        // names this mount would give next are taken (by the tag's earlier holder)
        let next = f.next_fh.load(Ordering::Relaxed);
        let state = super::super::state::MountState::open(d.path()).unwrap();
        for n in next..next + 4 {
            let p = dirty.join(format!("{}-{n}", f.tag.name));
            std::fs::write(&p, b"earlier").unwrap();
            state
                .record("s3://other", &format!("e{n}.txt"), &p, 7, now)
                .unwrap();
        }
        written(&f, "a.txt", b"mine").await;
        for n in next..next + 4 {
            let p = dirty.join(format!("{}-{n}", f.tag.name));
            assert_eq!(
                std::fs::read(&p).unwrap(),
                b"earlier",
                "{} overwritten",
                p.display()
            );
        }
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"mine"[..]));
    }

    #[tokio::test]
    async fn a_close_does_not_wait_for_an_upload_of_its_file_under_way() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"one").await;
        s.gate.store(true, Ordering::SeqCst);
        let settling = tokio::spawn({
            let f = f.clone();
            async move { f.settle("").await }
        });
        s.put_started().await;
        // while "one" uploads: a write-back close of a new version, and a reader's close
        let ino = f.lookup(ROOT, "a.txt").await.unwrap().ino;
        let fh = f.open_write(ino, true).await.unwrap();
        f.write(fh, 0, b"two").unwrap();
        tokio::time::timeout(Duration::from_secs(10), f.flush(fh))
            .await
            .expect("a write-back close waited for the upload under way")
            .unwrap();
        f.release(fh);
        let rh = f.open(ino, false, false).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), f.flush(rh))
            .await
            .expect("a reader's close waited for the upload under way")
            .unwrap();
        f.release(rh);
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        assert_eq!(settling.await.unwrap(), 0);
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"two"[..]));
    }

    #[tokio::test]
    async fn a_close_during_a_rename_of_its_folder_goes_to_the_new_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        let dir = f.mkdir(ROOT, "d").await.unwrap().ino;
        let (_, fh) = f.create(dir, "x").await.unwrap();
        f.write(fh, 0, b"one").unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        assert_eq!(f.settle("").await, 0);
        let ino = f.lookup(dir, "x").await.unwrap().ino;
        let fh = f.open_write(ino, false).await.unwrap();
        f.write(fh, 0, b"two").unwrap();
        // the folder's rename copies d/x to e/x: held there
        s.gate_copy.store(true, Ordering::SeqCst);
        let renaming = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "d", ROOT, "e").await }
        });
        s.put_started().await;
        let closing = tokio::spawn({
            let f = f.clone();
            async move { f.flush(fh).await }
        });
        let_others_run().await;
        assert!(
            !closing.is_finished(),
            "a close in the folder did not wait for its rename"
        );
        // a close elsewhere in the mount does not wait
        let (_, oh) = f.create(ROOT, "other.txt").await.unwrap();
        f.write(oh, 0, b"o").unwrap();
        tokio::time::timeout(Duration::from_secs(10), f.flush(oh))
            .await
            .expect("a close elsewhere waited for the folder's rename")
            .unwrap();
        f.release(oh);
        s.gate_copy.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        renaming.await.unwrap().unwrap();
        closing.await.unwrap().unwrap();
        f.release(fh);
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("e/x").await.as_deref(), Some(&b"two"[..]));
        assert_eq!(s.body("d/x").await, None, "the old folder came back");
        assert_eq!(f.waiting_count(), 0);
    }

    #[tokio::test]
    async fn a_live_mount_sharing_the_cache_folder_keeps_its_uploads() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let wb = Some(Duration::from_secs(3600));
        let a = fs(s.clone(), d.path(), wb);
        written(&a, "a.txt", b"mine").await;
        // a second mount of the source (another container) while the first lives
        let b = fs(s.clone(), d.path(), wb);
        assert_eq!(b.waiting_count(), 0, "a live mount's file was taken over");
        drop(b);
        // the first ends without uploading (killed): the next mount uploads its file
        drop(a);
        let c = fs(s.clone(), d.path(), wb);
        assert_eq!(c.waiting_count(), 1);
        assert_eq!(c.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"mine"[..]));
    }

    #[tokio::test]
    async fn a_file_renamed_while_its_bytes_are_fetched_for_writing_is_written_at_its_new_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        s.inner
            .put(&StorePath::from("x.txt"), PutPayload::from(b"one".to_vec()))
            .await
            .unwrap();
        let f = fs(s.clone(), d.path(), None);
        let ino = f.lookup(ROOT, "x.txt").await.unwrap().ino;
        // an open for writing fetches the bytes: held there while the file is renamed
        s.gate_get.store(true, Ordering::SeqCst);
        let opening = tokio::spawn({
            let f = f.clone();
            async move { f.open_write(ino, false).await }
        });
        s.put_started().await;
        s.gate_get.store(false, Ordering::SeqCst);
        f.rename(ROOT, "x.txt", ROOT, "y.txt").await.unwrap();
        s.open.add_permits(1);
        let fh = opening.await.unwrap().unwrap();
        f.write(fh, 0, b"two").unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        assert_eq!(s.body("y.txt").await.as_deref(), Some(&b"two"[..]));
        assert_eq!(s.body("x.txt").await, None, "the old name came back");
    }

    #[tokio::test]
    async fn a_waiting_file_another_mount_deleted_is_not_uploaded() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"bytes").await;
        // a mount sharing the cache folder deletes it (its rm forgets the record)
        let other = super::super::state::MountState::open(d.path()).unwrap();
        other.forget("s3://t", "a.txt").unwrap();
        assert_eq!(f.settle("").await, 0);
        assert_eq!(
            s.body("a.txt").await,
            None,
            "a file deleted elsewhere came back"
        );
        assert_eq!(f.waiting_count(), 0);
    }

    #[tokio::test]
    async fn a_record_spelling_the_cache_folder_otherwise_finds_its_file_by_name() {
        let d = tempfile::tempdir().unwrap();
        let dirty = d.path().join("dirty");
        std::fs::create_dir_all(&dirty).unwrap();
        std::fs::write(dirty.join("999999-1-5"), b"far").unwrap();
        // kept by a mount in a container that sees this folder as /cache
        let state = super::super::state::MountState::open(d.path()).unwrap();
        let elsewhere = std::path::Path::new("/cache/dirty/999999-1-5");
        let now = std::time::SystemTime::now();
        state
            .record("s3://t", "far.txt", elsewhere, 3, now)
            .unwrap();
        drop(state);
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        assert_eq!(f.waiting_count(), 1, "the file was judged lost");
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("far.txt").await.as_deref(), Some(&b"far"[..]));
    }

    #[tokio::test]
    async fn an_unlink_whose_delete_fails_loses_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"kept").await;
        s.fail_delete.store(true, Ordering::SeqCst);
        assert!(f.unlink(ROOT, "a.txt").await.is_err());
        s.fail_delete.store(false, Ordering::SeqCst);
        assert_eq!(f.waiting_count(), 1, "the waiting upload was dropped");
        assert!(f.lookup(ROOT, "a.txt").await.is_ok(), "the entry went");
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"kept"[..]));
    }

    #[tokio::test]
    async fn a_deleted_waiting_files_kept_copy_goes_even_when_its_record_cannot_be_forgotten() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"bytes").await;
        let kept = f.waiting("a.txt").expect("not waiting").file;
        assert!(kept.exists());
        // the state fails from here on: its table of records is dropped behind its back
        rusqlite::Connection::open(d.path().join("state.db"))
            .unwrap()
            .execute_batch("DROP TABLE pending")
            .unwrap();
        let b = f.backlog.as_ref().expect("no backlog");
        assert!(
            b.state.forget(&b.src, "a.txt").is_err(),
            "the state did not fail"
        );
        f.drop_waiting("a.txt");
        assert!(!kept.exists(), "a deleted file's kept copy stayed");
        assert_eq!(f.waiting_count(), 0);
    }

    #[tokio::test]
    async fn a_waiting_file_closed_again_is_read_at_its_newest_close() {
        use std::io::Read;
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"one").await;
        let older = f.waiting("a.txt").expect("not waiting");
        let ino = f.lookup(ROOT, "a.txt").await.unwrap().ino;
        let fh = f.open_write(ino, true).await.unwrap();
        f.write(fh, 0, b"two").unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        let newer = f.waiting("a.txt").expect("not waiting");
        assert_ne!(older.gen, newer.gen);
        assert!(!older.file.exists(), "the older close's file stayed");
        // a reader that saw the older close reads the newer one's bytes
        let mut got = String::new();
        f.open_waiting("a.txt", &older)
            .expect("the older close's file was gone: an error")
            .expect("judged uploaded")
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, "two");
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"two"[..]));
        // uploaded: the store has it
        assert!(f.open_waiting("a.txt", &older).unwrap().is_none());
    }

    #[tokio::test]
    async fn an_upload_that_meets_a_newer_close_leaves_it_waiting_and_it_lands_last() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), Some(Duration::from_secs(3600)));
        written(&f, "a.txt", b"one").await;
        s.gate.store(true, Ordering::SeqCst);
        let settling = tokio::spawn({
            let f = f.clone();
            async move { f.settle("").await }
        });
        s.put_started().await;
        // "one" uploads: "two" is closed meanwhile
        let ino = f.lookup(ROOT, "a.txt").await.unwrap().ino;
        let fh = f.open_write(ino, true).await.unwrap();
        f.write(fh, 0, b"two").unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        let newer = f.waiting("a.txt").expect("not waiting");
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        assert_eq!(settling.await.unwrap(), 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"one"[..]));
        let still = f
            .waiting("a.txt")
            .expect("the newer close was cleared by the older upload");
        assert_eq!(still.gen, newer.gen);
        assert!(still.file.exists(), "the newer close's file went");
        let b = f.backlog.as_ref().expect("no backlog");
        assert_eq!(b.state.names(&b.src, "a.txt", newer.gen), Ok(true));
        assert_eq!(f.settle("").await, 0);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"two"[..]));
        assert_eq!(f.waiting_count(), 0);
    }

    #[tokio::test]
    async fn two_closes_of_one_path_upload_in_turn() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        let (_, h1) = f.create(ROOT, "a.txt").await.unwrap();
        f.write(h1, 0, b"first").unwrap();
        let ino = f.lookup(ROOT, "a.txt").await.unwrap().ino;
        let h2 = f.open_write(ino, true).await.unwrap();
        f.write(h2, 0, b"second").unwrap();
        s.gate.store(true, Ordering::SeqCst);
        let first = tokio::spawn({
            let f = f.clone();
            async move { f.flush(h1).await }
        });
        s.put_started().await;
        let second = tokio::spawn({
            let f = f.clone();
            async move { f.flush(h2).await }
        });
        let_others_run().await;
        assert_eq!(
            s.started.available_permits(),
            0,
            "the second close's upload started while the first's was under way"
        );
        assert!(!second.is_finished(), "the second close did not wait");
        s.open.add_permits(1);
        first.await.unwrap().unwrap();
        // then the second's goes
        s.put_started().await;
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        second.await.unwrap().unwrap();
        f.release(h1);
        f.release(h2);
        assert_eq!(s.body("a.txt").await.as_deref(), Some(&b"second"[..]));
    }

    type Task = tokio::task::JoinHandle<Result<(), Errno>>;

    /// `d/a.txt` written, its close's upload paused (holding the path), and the rename of
    /// folder `d` to `e` checked to wait for it: the folder, the file's handle, the close
    /// and the rename.
    async fn an_upload_under_a_folder_being_renamed(
        f: &Arc<Fs>,
        s: &Gated,
    ) -> (u64, u64, Task, Task) {
        let dir = f.mkdir(ROOT, "d").await.unwrap().ino;
        let (_, fh) = f.create(dir, "a.txt").await.unwrap();
        f.write(fh, 0, b"bytes").unwrap();
        s.gate.store(true, Ordering::SeqCst);
        let closing = tokio::spawn({
            let f = f.clone();
            async move { f.flush(fh).await }
        });
        s.put_started().await;
        let renaming = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "d", ROOT, "e").await }
        });
        let_others_run().await;
        assert!(
            !renaming.is_finished(),
            "the folder's rename did not wait for the upload in it"
        );
        (dir, fh, closing, renaming)
    }

    #[tokio::test]
    async fn an_unlink_waiting_behind_an_upload_while_its_folder_is_renamed_deletes_the_new_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        // the folder's rename waits for the upload; the unlink, which came after, waits too
        let (dir, fh, closing, renaming) = an_upload_under_a_folder_being_renamed(&f, &s).await;
        let unlinking = tokio::spawn({
            let f = f.clone();
            async move { f.unlink(dir, "a.txt").await }
        });
        let_others_run().await;
        assert!(
            !unlinking.is_finished(),
            "the unlink did not wait for the upload"
        );
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        closing.await.unwrap().unwrap();
        renaming.await.unwrap().unwrap();
        unlinking.await.unwrap().unwrap();
        // the rename moved the file before the unlink had its path: it went at its new name
        assert_eq!(
            s.body("e/a.txt").await,
            None,
            "the unlink missed the file at its new name"
        );
        assert_eq!(s.body("d/a.txt").await, None, "the old name came back");
        assert_eq!(f.lookup(dir, "a.txt").await, Err(libc::ENOENT));
        assert_eq!(f.rel_of(dir).unwrap(), "e");
        // the open handle was unlinked at its new name: its next close uploads nothing
        f.write(fh, 0, b"again").unwrap();
        f.flush(fh).await.unwrap();
        f.release(fh);
        assert_eq!(
            s.body("e/a.txt").await,
            None,
            "a close after the unlink uploaded"
        );
    }

    #[tokio::test]
    async fn a_file_rename_behind_an_upload_while_its_folder_is_renamed_moves_the_new_name() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        let (dir, fh, closing, moving_folder) =
            an_upload_under_a_folder_being_renamed(&f, &s).await;
        // d/a.txt -> d/b.txt, asked while the file is d/a.txt
        let moving_file = tokio::spawn({
            let f = f.clone();
            async move { f.rename(dir, "a.txt", dir, "b.txt").await }
        });
        let_others_run().await;
        assert!(
            !moving_file.is_finished(),
            "the file's rename did not wait for the upload"
        );
        s.gate.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        closing.await.unwrap().unwrap();
        moving_folder.await.unwrap().unwrap();
        moving_file.await.unwrap().unwrap();
        // the file was e/a.txt by then: it is e/b.txt
        assert_eq!(s.body("e/b.txt").await.as_deref(), Some(&b"bytes"[..]));
        assert_eq!(
            s.body("e/a.txt").await,
            None,
            "the file's rename left the name the folder's rename gave it"
        );
        assert_eq!(s.body("d/a.txt").await, None);
        assert_eq!(s.body("d/b.txt").await, None);
        assert_eq!(f.lookup(dir, "a.txt").await, Err(libc::ENOENT));
        assert!(f.lookup(dir, "b.txt").await.is_ok());
        f.release(fh);
    }

    #[tokio::test]
    async fn a_file_made_under_a_folder_renames_destination_waits_for_the_rename() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        s.inner
            .put(&StorePath::from("d/x"), PutPayload::from(b"x".to_vec()))
            .await
            .unwrap();
        let f = fs(s.clone(), d.path(), None);
        let e = f.mkdir(ROOT, "e").await.unwrap().ino;
        // the rename copies d/x to e/x: held there
        s.gate_copy.store(true, Ordering::SeqCst);
        let renaming = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "d", ROOT, "e").await }
        });
        s.put_started().await;
        let making = tokio::spawn({
            let f = f.clone();
            async move {
                let (_, fh) = f.create(e, "y").await?;
                f.write(fh, 0, b"y")?;
                let r = f.flush(fh).await;
                f.release(fh);
                r
            }
        });
        let_others_run().await;
        assert!(
            !making.is_finished(),
            "a file under the destination was made and closed during the folder's rename"
        );
        assert_eq!(
            s.body("e/y").await,
            None,
            "a file under the destination was uploaded during the folder's rename"
        );
        s.gate_copy.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        renaming.await.unwrap().unwrap();
        making.await.unwrap().unwrap();
        assert_eq!(s.body("e/x").await.as_deref(), Some(&b"x"[..]));
        assert_eq!(s.body("e/y").await.as_deref(), Some(&b"y"[..]));
        assert_eq!(s.body("d/x").await, None);
    }

    #[tokio::test]
    async fn two_folder_renames_to_one_destination_do_not_merge() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        for k in ["c/x", "d/z"] {
            s.inner
                .put(&StorePath::from(k), PutPayload::from(k.as_bytes().to_vec()))
                .await
                .unwrap();
        }
        let f = fs(s.clone(), d.path(), None);
        s.gate_copy.store(true, Ordering::SeqCst);
        let first = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "c", ROOT, "e").await }
        });
        s.put_started().await;
        let second = tokio::spawn({
            let f = f.clone();
            async move { f.rename(ROOT, "d", ROOT, "e").await }
        });
        let_others_run().await;
        assert_eq!(
            s.started.available_permits(),
            0,
            "the second rename copied into the destination during the first"
        );
        assert!(!second.is_finished(), "the second rename did not wait");
        s.gate_copy.store(false, Ordering::SeqCst);
        s.open.add_permits(1);
        first.await.unwrap().unwrap();
        // e is c's now, not empty
        assert_eq!(second.await.unwrap(), Err(libc::ENOTEMPTY));
        assert_eq!(s.body("e/x").await.as_deref(), Some(&b"c/x"[..]));
        assert_eq!(s.body("e/z").await, None, "the second folder merged in");
        assert_eq!(s.body("d/z").await.as_deref(), Some(&b"d/z"[..]));
    }

    #[tokio::test]
    async fn a_file_unlinked_while_open_for_writing_is_not_listed_nor_uploaded() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(Gated::default());
        let f = fs(s.clone(), d.path(), None);
        let (_, fh) = f.create(ROOT, "a.txt").await.unwrap();
        f.write(fh, 0, b"bytes").unwrap();
        let names = |l: Vec<(u64, Kind, String)>| -> Vec<String> {
            l.into_iter().map(|(_, _, n)| n).collect()
        };
        // listed while written (nothing at the store yet)
        f.forget_all_listings();
        assert!(names(f.readdir(ROOT).await.unwrap()).contains(&"a.txt".to_string()));
        f.unlink(ROOT, "a.txt").await.unwrap();
        // the handle lives on; a listing from the store does not show it
        f.write(fh, 5, b" more").unwrap();
        f.forget_all_listings();
        let listed = names(f.readdir(ROOT).await.unwrap());
        assert!(
            !listed.contains(&"a.txt".to_string()),
            "an unlinked file open for writing was listed: {listed:?}"
        );
        assert_eq!(f.lookup(ROOT, "a.txt").await, Err(libc::ENOENT));
        f.flush(fh).await.unwrap();
        f.release(fh);
        assert_eq!(
            s.body("a.txt").await,
            None,
            "the close of an unlinked file uploaded it"
        );
        f.forget_all_listings();
        assert!(!names(f.readdir(ROOT).await.unwrap()).contains(&"a.txt".to_string()));
    }
}
