//! The FUSE adapter: each kernel request becomes a task on the runtime that awaits the file
//! system's answer and replies, so the session's threads never wait on the network.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use super::fs::{Attr, Fs, Kind, PageCache};

/// The adapter between fuser and [`Fs`].
pub struct Adapter {
    pub fs: Arc<Fs>,
    pub rt: tokio::runtime::Handle,
}

fn kind(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl Adapter {
    fn attr(&self, a: &Attr) -> FileAttr {
        let a = &self.fs.shown(a);
        let o = &self.fs.opts;
        FileAttr {
            ino: INodeNo(a.ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: a.mtime,
            mtime: a.mtime,
            ctime: a.mtime,
            crtime: a.mtime,
            kind: kind(a.kind),
            perm: o.perm(a.kind),
            nlink: if a.kind == Kind::Dir { 2 } else { 1 },
            uid: o.uid,
            gid: o.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// How long the kernel may keep an entry or attributes: the folder TTL (events
    /// invalidate it sooner through the notifier).
    fn ttl(&self) -> Duration {
        self.fs.opts.dir_ttl
    }
}

impl fuser::Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // O_TRUNC reaches open itself: an existing file opened to be overwritten is not
        // fetched first only to be truncated by a setattr after
        if config
            .add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC)
            .is_err()
        {
            tracing::debug!("the kernel has no FUSE_ATOMIC_O_TRUNC");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        let (fs, me) = (self.fs.clone(), self.clone_view());
        self.rt.spawn(async move {
            match fs.lookup(parent.0, &name).await {
                Ok(a) => reply.entry(&me.ttl(), &me.attr(&a), Generation(0)),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(mut a) => {
                // an open file is the size of the version it reads
                if let Some((_, size)) = fh.and_then(|f| self.fs.open_size(f.0)) {
                    a.size = size;
                }
                reply.attr(&self.ttl(), &self.attr(&a))
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) || truncate;
        let fs = self.fs.clone();
        let opener = tgid(req.pid());
        self.rt.spawn(async move {
            match fs.open(ino.0, write, truncate).await {
                // the kernel's page cache of the file is dropped at each open (no
                // FOPEN_KEEP_CACHE): the next open reads the newest version
                Ok(fh) => {
                    fs.set_opener(fh, opener);
                    let flags = match fs.page_cache(fh) {
                        PageCache::Direct => FopenFlags::FOPEN_DIRECT_IO,
                        PageCache::Shared => FopenFlags::empty(),
                    };
                    reply.opened(FileHandle(fh), flags)
                }
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        self.rt.spawn(async move {
            match fs.read(fh.0, offset, size).await {
                Ok(b) => reply.data(&b),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        self.rt.spawn(async move {
            fs.release_written(fh.0).await;
            reply.ok();
        });
    }

    // close: a written file is at the store before close returns (the opener's close)
    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let tgid = tgid(req.pid());
        self.answer_empty(reply, move |fs| async move { fs.close(fh.0, tgid).await });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.answer_empty(reply, move |fs| async move { fs.flush(fh.0).await });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let (fs, me) = (self.fs.clone(), self.clone_view());
        let opener = tgid(req.pid());
        self.rt.spawn(async move {
            match fs.create(parent.0, &name).await {
                Ok((a, fh)) => {
                    fs.set_opener(fh, opener);
                    reply.created(
                        &me.ttl(),
                        &me.attr(&a),
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::empty(),
                    )
                }
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        // a local file's write: no network, answered on the spot
        match self.fs.write(fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // chmod, chown and times are accepted and not kept (docs/MOUNT.md); a size truncates
        let (fs, me) = (self.fs.clone(), self.clone_view());
        self.rt.spawn(async move {
            let r = match size {
                Some(s) => fs.truncate(ino.0, fh.map(|f| f.0), s).await,
                None => fs.getattr(ino.0),
            };
            match r {
                Ok(a) => reply.attr(&me.ttl(), &me.attr(&a)),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        self.answer_empty(
            reply,
            move |fs| async move { fs.unlink(parent.0, &name).await },
        );
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let (fs, me) = (self.fs.clone(), self.clone_view());
        self.rt.spawn(async move {
            match fs.mkdir(parent.0, &name).await {
                Ok(a) => reply.entry(&me.ttl(), &me.attr(&a), Generation(0)),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(name) = name.to_str().map(str::to_string) else {
            return reply.error(Errno::ENOENT);
        };
        self.answer_empty(
            reply,
            move |fs| async move { fs.rmdir(parent.0, &name).await },
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (Some(name), Some(new_name)) = (
            name.to_str().map(str::to_string),
            new_name.to_str().map(str::to_string),
        ) else {
            return reply.error(Errno::EINVAL);
        };
        if !flags.is_empty() {
            // RENAME_EXCHANGE, RENAME_NOREPLACE: not with a copy and a delete
            return reply.error(Errno::EINVAL);
        }
        self.answer_empty(reply, move |fs| async move {
            fs.rename(parent.0, &name, new_parent.0, &new_name).await
        });
    }

    // what an object store cannot hold
    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(err(libc::ENOTSUP));
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        reply.error(err(libc::ENOTSUP));
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(err(libc::ENOTSUP));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let fs = self.fs.clone();
        self.rt.spawn(async move {
            match fs.readdir(ino.0).await {
                Ok(entries) => {
                    if offset == 0 {
                        fs.list_ahead(ino.0);
                    }
                    for (i, (ino, k, name)) in entries.into_iter().enumerate().skip(offset as usize)
                    {
                        if reply.add(INodeNo(ino), i as u64 + 1, kind(k), &name) {
                            break;
                        }
                    }
                    reply.ok()
                }
                Err(e) => reply.error(err(e)),
            }
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // an object store has no fixed size: plenty free, as other object mounts say
        let blocks = 1u64 << 40;
        reply.statfs(blocks, blocks, blocks, 1 << 30, 1 << 30, 4096, 1024, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    // extended attributes: objects have none a mount shows (ENODATA, an empty list)
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(Errno::from_i32(libc::ENODATA));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }
}

impl Adapter {
    /// Runs `op` on the file system in a task and answers `reply` with its outcome: the
    /// shape of every request that answers nothing but success or an errno.
    fn answer_empty<F>(&self, reply: ReplyEmpty, op: impl FnOnce(Arc<Fs>) -> F)
    where
        F: std::future::Future<Output = Result<(), i32>> + Send + 'static,
    {
        let fut = op(self.fs.clone());
        self.rt.spawn(async move {
            match fut.await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err(e)),
            }
        });
    }

    /// A copy of what building replies needs, for a task.
    fn clone_view(&self) -> Adapter {
        Adapter {
            fs: self.fs.clone(),
            rt: self.rt.clone(),
        }
    }
}

/// The thread group (process) of thread `pid`, as a FUSE request names its caller by thread;
/// None when it cannot be read (gone, or in another PID namespace).
fn tgid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}
