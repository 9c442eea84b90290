//! Reading one chunk of an object, the unit of parallelism of the copier: ranged GETs from a
//! cloud store, `pread` or `copy_file_range` from a local file, every byte hashed in fixed
//! blocks on the way.

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{Attributes, GetOptions, GetRange, ObjectStore};

use super::bwlimit::BwLimit;
use super::hash::{BlockHasher, BLOCK};
use super::local::TempFile;
use crate::stores::local::open_source;
use crate::stores::retry::ChunkError;
use crate::stores::side::{one_line, Side};

/// Where the bytes of a chunk go as they arrive.
#[derive(Clone)]
pub enum ChunkSink {
    /// Written at their offset into a destination temp file.
    File(Arc<TempFile>),
    /// Collected into one buffer (a part of a multipart upload, or a small object).
    Buffer,
    /// Only hashed (verification).
    Discard,
}

/// What reading one chunk produced.
pub struct ChunkOut {
    pub digests: Vec<u128>,
    pub data: Option<Bytes>,
    /// What the store sent with the chunk (Content-* headers, user metadata); None for files.
    pub attrs: Option<Attributes>,
    /// How many tags S3 said the object has (0 elsewhere).
    pub tag_count: u32,
    /// How long the store took to answer with the headers (cloud reads): a round trip and
    /// the store's own time, without the body; what the RTT estimate is made of.
    pub first_byte: Option<std::time::Duration>,
}

fn classify(e: object_store::Error) -> ChunkError {
    match e {
        object_store::Error::NotFound { .. } => {
            ChunkError::Fatal("source object vanished during the copy".into())
        }
        object_store::Error::Precondition { .. } => ChunkError::Fatal(
            "source object changed during the copy (etag no longer matches); run again".into(),
        ),
        e @ (object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }) => ChunkError::Fatal(one_line(&e)),
        other => {
            // a client error other than a timeout or throttling does not go away by asking
            // again (a 403 was tried 8 times, ~20 s per object)
            let status = crate::core::metrics::status_of(&other);
            let client_error = status.len() == 3
                && status.starts_with('4')
                && !matches!(status.as_str(), "408" | "429");
            if client_error {
                ChunkError::Fatal(one_line(&other))
            } else {
                ChunkError::Retry(one_line(&other))
            }
        }
    }
}

/// What one version of a local file is: the file (device, inode) and what any write or
/// replacement moves (size, mtime, ctime, which no one can set back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    pub fn of(m: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The change token a listing gives this version (`core::object::local_etag`).
    fn token(&self) -> Option<String> {
        let t = std::time::UNIX_EPOCH
            + std::time::Duration::new(u64::try_from(self.mtime.0).ok()?, self.mtime.1 as u32);
        crate::core::object::local_etag(Some(t), self.size)
    }
}

/// What the source must still be while the chunks of one object are read, so that a copy
/// never stitches two versions: for a cloud object the listed ETag (sent as If-Match); for a
/// local file the version its first chunk found (which must be the listed one, when the
/// listing gave a token), checked again before and after every chunk is read.
#[derive(Debug, Default)]
pub struct Guard {
    etag: Option<String>,
    pinned: std::sync::OnceLock<FileId>,
}

impl Guard {
    pub fn new(etag: Option<&str>) -> Guard {
        Guard {
            etag: etag.map(str::to_string),
            pinned: Default::default(),
        }
    }

    /// The version of a local file this copy reads; a chunk that finds another fails the
    /// copy (retried whole by the caller's next attempt).
    fn check(&self, now: FileId) -> Result<(), ChunkError> {
        let first = *self.pinned.get_or_init(|| now);
        if first != now {
            return Err(ChunkError::Fatal(CHANGED.into()));
        }
        match (&self.etag, first.token()) {
            (Some(listed), Some(found)) if *listed != found => Err(ChunkError::Fatal(
                "source file changed since it was listed; run again".into(),
            )),
            _ => Ok(()),
        }
    }
}

const CHANGED: &str = "source file changed during the copy (written to or replaced); run again";

/// Reads `range` of the object `key` (a full key for cloud, an absolute path under the side's
/// folder for local, opened under the symlink rule of `stores::local::open_source`),
/// hashing every byte in fixed blocks and passing it to `sink`. `guard` keeps the chunks of
/// one object to one version of it. `whole` asks for a plain GET (no Range header).
pub async fn read_chunk(
    side: &Side,
    key: &str,
    guard: &Arc<Guard>,
    range: Range<u64>,
    whole: bool,
    sink: ChunkSink,
    limit: Option<&Arc<BwLimit>>,
) -> Result<ChunkOut, ChunkError> {
    debug_assert!(range.start % BLOCK == 0);
    match side {
        Side::Cloud { store, .. } => {
            let etag = guard.etag.as_deref();
            read_cloud(store, key, etag, range, whole, sink, limit.map(|l| &**l)).await
        }
        Side::Local { loc } => {
            let (root, path, follow) = (loc.local_path(), PathBuf::from(key), loc.copy_links);
            let (limit, guard) = (limit.cloned(), guard.clone());
            tokio::task::spawn_blocking(move || {
                let file = open_local(&root, &path, follow)?;
                let id = || file.metadata().map(|m| FileId::of(&m));
                let stat = |e: std::io::Error| ChunkError::Fatal(format!("reading source: {e}"));
                // the version before the read and after it: a write in between moves the
                // mtime or ctime before it moves a byte
                let named = |e: ChunkError| replaced_by_link(&path).unwrap_or(e);
                guard.check(id().map_err(stat)?).map_err(named)?;
                let out = read_local(&file, range, sink, limit.as_deref())?;
                guard.check(id().map_err(stat)?).map_err(named)?;
                Ok(out)
            })
            .await
            .map_err(|e| ChunkError::Fatal(e.to_string()))?
        }
    }
}

async fn read_cloud(
    store: &Arc<dyn ObjectStore>,
    key: &str,
    etag: Option<&str>,
    range: Range<u64>,
    whole: bool,
    sink: ChunkSink,
    limit: Option<&BwLimit>,
) -> Result<ChunkOut, ChunkError> {
    let path = StorePath::parse(key).map_err(|e| ChunkError::Fatal(e.to_string()))?;
    let want = range.end - range.start;
    let opts = GetOptions {
        if_match: etag.map(str::to_string),
        range: (!whole).then(|| GetRange::Bounded(range.clone())),
        ..Default::default()
    };
    let asked = tokio::time::Instant::now();
    let res = store.get_opts(&path, opts).await.map_err(classify)?;
    let first_byte = asked.elapsed();
    if res.range.end - res.range.start != want && !(whole && res.meta.size == want) {
        return Err(ChunkError::Fatal(format!(
            "store returned {} bytes for a {want}-byte range (object size changed?)",
            res.range.end - res.range.start
        )));
    }
    let attrs = res.attributes.clone();
    let tag_count = crate::stores::s3tags::tag_count(&res);
    let mut stream = res.into_stream();
    let mut hasher = BlockHasher::new();
    let mut got = 0u64;
    // a body that came in one frame is kept as it came; one of many is copied into one
    // buffer as its frames arrive, each frame let go at once (holding them all until the
    // end would hold the object twice, with the read buffers they share)
    let mut whole_frame: Option<Bytes> = None;
    let mut buf: Option<BytesMut> = None;
    while let Some(item) = stream.next().await {
        let b = item.map_err(classify)?;
        if let Some(l) = limit {
            // the stream waits, and so does the connection under it
            l.take(b.len() as u64).await;
        }
        if got + b.len() as u64 > want {
            return Err(ChunkError::Fatal(format!(
                "store sent more than the {want} bytes asked for"
            )));
        }
        hasher.update(&b);
        match &sink {
            ChunkSink::File(f) => f
                .write_at(&b, range.start + got)
                .map_err(|e| ChunkError::Fatal(format!("writing destination: {e}")))?,
            ChunkSink::Buffer if got == 0 && b.len() as u64 == want => {
                whole_frame = Some(b.clone())
            }
            ChunkSink::Buffer => buf
                .get_or_insert_with(|| BytesMut::with_capacity(want as usize))
                .extend_from_slice(&b),
            ChunkSink::Discard => {}
        }
        got += b.len() as u64;
    }
    if got != want {
        return Err(ChunkError::Retry(format!(
            "body ended after {got} of {want} bytes"
        )));
    }
    let data = match sink {
        ChunkSink::Buffer => whole_frame
            .or_else(|| buf.map(BytesMut::freeze))
            .or(Some(Bytes::new())),
        _ => None,
    };
    Ok(ChunkOut {
        digests: hasher.finish(),
        data,
        attrs: Some(attrs),
        tag_count,
        first_byte: Some(first_byte),
    })
}

/// When a changed source is now a symlink (swapped in over the file mid-copy), the error
/// says so: the operator then knows no byte of the link's target was read.
fn replaced_by_link(path: &std::path::Path) -> Option<ChunkError> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.file_type().is_symlink().then(|| {
        ChunkError::Fatal(
            "source file was replaced by a symlink during the copy; nothing of the link was read; run again"
                .into(),
        )
    })
}

fn open_local(
    root: &std::path::Path,
    path: &std::path::Path,
    follow: bool,
) -> Result<std::fs::File, ChunkError> {
    // never through a symlink that leads out of the root, even one swapped in just now
    open_source(root, path, follow).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            ChunkError::Fatal("source file vanished during the copy".into())
        }
        _ => ChunkError::Fatal(format!("opening source: {e}")),
    })
}

fn read_local(
    file: &std::fs::File,
    range: Range<u64>,
    sink: ChunkSink,
    limit: Option<&BwLimit>,
) -> Result<ChunkOut, ChunkError> {
    if let (ChunkSink::File(dst), None) = (&sink, limit) {
        // Local to local: the kernel copies (copy_file_range: no trip through user space, a
        // reflink where the file system has them); the source range is then read back from the
        // page cache to be hashed. Falls back to read + write where the kernel cannot.
        if kernel_copy(file, dst.file(), range.clone())? {
            return hash_range(file, range);
        }
    }
    let want = (range.end - range.start) as usize;
    let mut hasher = BlockHasher::new();
    let mut out = match sink {
        ChunkSink::Buffer => vec![0u8; want],
        _ => Vec::new(),
    };
    let mut scratch = match sink {
        ChunkSink::Buffer => Vec::new(),
        _ => vec![0u8; (BLOCK as usize).min(want.max(1))],
    };
    let mut done = 0usize;
    while done < want {
        let buf: &mut [u8] = match sink {
            // under a limit, a block at a time, each after its share of the bucket
            ChunkSink::Buffer if limit.is_some() => {
                let end = (done + BLOCK as usize).min(want);
                &mut out[done..end]
            }
            ChunkSink::Buffer => &mut out[done..],
            _ => {
                let n = scratch.len().min(want - done);
                &mut scratch[..n]
            }
        };
        if let Some(l) = limit {
            l.take_blocking(buf.len() as u64);
        }
        let n = file
            .read_at(buf, range.start + done as u64)
            .map_err(|e| ChunkError::Fatal(format!("reading source: {e}")))?;
        if n == 0 {
            return Err(ChunkError::Fatal(format!(
                "source file shrank during the copy (ended after {} bytes)",
                range.start + done as u64
            )));
        }
        hasher.update(&buf[..n]);
        if let ChunkSink::File(f) = &sink {
            f.write_at(&buf[..n], range.start + done as u64)
                .map_err(|e| ChunkError::Fatal(format!("writing destination: {e}")))?;
        }
        done += n;
    }
    Ok(ChunkOut {
        digests: hasher.finish(),
        data: matches!(sink, ChunkSink::Buffer).then(|| Bytes::from(out)),
        attrs: None,
        tag_count: 0,
        first_byte: None,
    })
}

/// Copies `range` from `src` to the same offsets of `dst` inside the kernel. Returns false
/// (nothing copied) when the kernel cannot do it for these files.
fn kernel_copy(
    src: &std::fs::File,
    dst: &std::fs::File,
    range: Range<u64>,
) -> Result<bool, ChunkError> {
    use std::os::fd::AsRawFd;
    let mut off_in = range.start as libc::loff_t;
    let mut off_out = range.start as libc::loff_t;
    let mut left = (range.end - range.start) as usize;
    while left > 0 {
        // SAFETY: both fds are open for the duration of the call; offsets are our own.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            let unsupported = matches!(
                e.raw_os_error(),
                Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EBADF)
            );
            if unsupported && off_in as u64 == range.start {
                return Ok(false);
            }
            return Err(ChunkError::Fatal(format!("copying: {e}")));
        }
        if n == 0 {
            return Err(ChunkError::Fatal(format!(
                "source file shrank during the copy (ended after {off_in} bytes)"
            )));
        }
        left -= n as usize;
    }
    Ok(true)
}

/// Hashes `range` of a local file.
fn hash_range(file: &std::fs::File, range: Range<u64>) -> Result<ChunkOut, ChunkError> {
    let mut hasher = BlockHasher::new();
    let mut buf = vec![0u8; (BLOCK as usize).min((range.end - range.start).max(1) as usize)];
    let mut pos = range.start;
    while pos < range.end {
        let want = buf.len().min((range.end - pos) as usize);
        let n = file
            .read_at(&mut buf[..want], pos)
            .map_err(|e| ChunkError::Fatal(format!("reading source: {e}")))?;
        if n == 0 {
            return Err(ChunkError::Fatal(
                "source file shrank during the copy".into(),
            ));
        }
        hasher.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(ChunkOut {
        digests: hasher.finish(),
        data: None,
        attrs: None,
        tag_count: 0,
        first_byte: None,
    })
}
