//! The FUSE adapter: each kernel request becomes a task on the runtime that awaits the file
//! system's answer and replies, so the session's threads never wait on the network.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use super::fs::{Attr, Fs, Kind};

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

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write =
            !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) || flags.0 & libc::O_TRUNC != 0;
        let fs = self.fs.clone();
        self.rt.spawn(async move {
            match fs.open(ino.0, write).await {
                // the kernel's page cache of the file is dropped at each open: the next open
                // reads the newest version
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
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
        self.fs.release(fh.0);
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
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
    /// A copy of what building replies needs, for a task.
    fn clone_view(&self) -> Adapter {
        Adapter {
            fs: self.fs.clone(),
            rt: self.rt.clone(),
        }
    }
}
