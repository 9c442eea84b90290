//! The two ends of a copy. A [`Side`] is a cloud store (through object_store) or a local
//! folder (slate's own file code, so that keys stay byte-exact and files are written at
//! offsets). Reading one chunk of an object, the unit of parallelism, lives here.

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{GetOptions, GetRange, ObjectStore};

use super::hash::{BlockHasher, BLOCK};
use super::local::TempFile;
use crate::error::SlateError;
use crate::location::Location;
use object_store::list::PaginatedListStore;
use object_store::multipart::MultipartStore;

/// One end of a copy.
#[derive(Clone)]
pub enum Side {
    Cloud {
        store: Arc<dyn ObjectStore>,
        /// The same store's page-at-a-time listing (with a delimiter when wanted).
        pager: Arc<dyn PaginatedListStore>,
        /// The same store's multipart API (parts by number, each one retried on its own).
        parts: Arc<dyn MultipartStore>,
        loc: Location,
    },
    Local {
        loc: Location,
    },
}

impl Side {
    pub fn open(loc: &Location) -> Result<Side, SlateError> {
        Ok(match loc.scheme {
            crate::location::Scheme::Local => Side::Local { loc: loc.clone() },
            _ => {
                let s = crate::store::build_paged(loc)?;
                Side::Cloud {
                    store: s.store,
                    pager: s.pager,
                    parts: s.parts,
                    loc: loc.clone(),
                }
            }
        })
    }

    pub fn location(&self) -> &Location {
        match self {
            Side::Cloud { loc, .. } | Side::Local { loc } => loc,
        }
    }

    /// The same store at another location (a sub-prefix of the same bucket).
    pub fn with_loc(&self, loc: Location) -> Side {
        match self {
            Side::Cloud {
                store,
                pager,
                parts,
                ..
            } => Side::Cloud {
                store: store.clone(),
                pager: pager.clone(),
                parts: parts.clone(),
                loc,
            },
            Side::Local { .. } => Side::Local { loc },
        }
    }
}

/// Parses a key into an object_store path without re-encoding it (keys are data).
///
/// object_store drops a leading and a trailing `/` (`Path::parse("a/")` is `a`, and `/` is the
/// bucket itself), so such a key would name another object, or the bucket: a HEAD, PUT or
/// DELETE sent for it would act on that instead (a DELETE on the bucket URL is S3's
/// DeleteBucket). Those keys are refused, naming the key; nothing is sent for them.
pub fn store_path(key: &str) -> Result<StorePath, SlateError> {
    let refuse = |why: String| SlateError::Unaddressable {
        key: key.to_string(),
        why,
    };
    let path = StorePath::parse(key).map_err(|e| refuse(e.to_string()))?;
    if path.as_ref() == key && !key.is_empty() {
        return Ok(path);
    }
    Err(refuse(unaddressable(key).to_string()))
}

/// Why object_store cannot name `key` as it is (see [`store_path`]); for a key it refuses.
pub fn unaddressable(key: &str) -> &'static str {
    if key.is_empty() || key.chars().all(|c| c == '/') {
        "it names the bucket itself"
    } else if key.ends_with('/') {
        "a key ending in '/' (a folder marker) would name the object without the '/'"
    } else if key.starts_with('/') {
        "a key beginning with '/' would name the object without the '/'"
    } else {
        "it contains an empty segment ('//')"
    }
}

/// A bucket prefix (or a pair's prefix) as an object_store path; a trailing `/` is allowed.
pub fn prefix_path(prefix: &str) -> Result<StorePath, SlateError> {
    store_path(prefix.strip_suffix('/').unwrap_or(prefix))
}

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
}

/// Failure of one chunk: worth another attempt, or final.
#[derive(Debug)]
pub enum ChunkError {
    Retry(String),
    Fatal(String),
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkError::Retry(s) | ChunkError::Fatal(s) => f.write_str(s),
        }
    }
}

/// Makes one line of an object_store error (they carry response bodies over several lines).
pub fn one_line(e: &dyn std::fmt::Display) -> String {
    let s = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 400 {
        let mut cut = 400;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &s[..cut])
    } else {
        s
    }
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
            let status = crate::metrics::status_of(&other);
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

/// Reads `range` of the object `key` (a full key for cloud, an absolute path for local),
/// hashing every byte in fixed blocks and passing it to `sink`. `etag` guards against the
/// source changing between chunks. `whole` asks for a plain GET (no Range header).
pub async fn read_chunk(
    side: &Side,
    key: &str,
    etag: Option<&str>,
    range: Range<u64>,
    whole: bool,
    sink: ChunkSink,
) -> Result<ChunkOut, ChunkError> {
    debug_assert!(range.start % BLOCK == 0);
    match side {
        Side::Cloud { store, .. } => read_cloud(store, key, etag, range, whole, sink).await,
        Side::Local { .. } => {
            let path = PathBuf::from(key);
            tokio::task::spawn_blocking(move || read_local(&path, range, sink))
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
) -> Result<ChunkOut, ChunkError> {
    let path = StorePath::parse(key).map_err(|e| ChunkError::Fatal(e.to_string()))?;
    let want = range.end - range.start;
    let opts = GetOptions {
        if_match: etag.map(str::to_string),
        range: (!whole).then(|| GetRange::Bounded(range.clone())),
        ..Default::default()
    };
    let res = store.get_opts(&path, opts).await.map_err(classify)?;
    if res.range.end - res.range.start != want && !(whole && res.meta.size == want) {
        return Err(ChunkError::Fatal(format!(
            "store returned {} bytes for a {want}-byte range (object size changed?)",
            res.range.end - res.range.start
        )));
    }
    let mut stream = res.into_stream();
    let mut hasher = BlockHasher::new();
    let mut got = 0u64;
    let mut parts: Vec<Bytes> = Vec::new();
    while let Some(item) = stream.next().await {
        let b = item.map_err(classify)?;
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
            ChunkSink::Buffer => parts.push(b.clone()),
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
        ChunkSink::Buffer if parts.len() == 1 => parts.pop(),
        ChunkSink::Buffer => {
            let mut buf = BytesMut::with_capacity(want as usize);
            for p in parts {
                buf.extend_from_slice(&p);
            }
            Some(buf.freeze())
        }
        _ => None,
    };
    Ok(ChunkOut {
        digests: hasher.finish(),
        data,
    })
}

fn read_local(
    path: &std::path::Path,
    range: Range<u64>,
    sink: ChunkSink,
) -> Result<ChunkOut, ChunkError> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            ChunkError::Fatal("source file vanished during the copy".into())
        }
        _ => ChunkError::Fatal(format!("opening source: {e}")),
    })?;
    if let ChunkSink::File(dst) = &sink {
        // Local to local: the kernel copies (copy_file_range: no trip through user space, a
        // reflink where the file system has them); the source range is then read back from the
        // page cache to be hashed. Falls back to read + write where the kernel cannot.
        if kernel_copy(&file, dst.file(), range.clone())? {
            return hash_range(&file, range);
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
            ChunkSink::Buffer => &mut out[done..],
            _ => {
                let n = scratch.len().min(want - done);
                &mut scratch[..n]
            }
        };
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_object_store_would_rename_are_refused() {
        // key → Ok(the same path) or Err(a phrase of the reason)
        let table: &[(&str, Result<&str, &str>)] = &[
            ("a", Ok("a")),
            ("a/b c+%ü", Ok("a/b c+%ü")),
            ("", Err("bucket itself")),
            ("/", Err("bucket itself")),
            ("//", Err("empty path segment")),
            ("folder/", Err("folder marker")),
            ("/etc", Err("beginning with '/'")),
            ("a//b", Err("empty path segment")),
        ];
        for (key, want) in table {
            match (store_path(key), want) {
                (Ok(p), Ok(w)) => assert_eq!(p.as_ref(), *w, "{key:?}"),
                (Err(e), Err(w)) => {
                    let text = e.to_string();
                    assert!(e.is_permanent_for_key(), "{key:?}");
                    assert!(text.contains(w), "{key:?}: {text}");
                }
                (got, _) => panic!("{key:?}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(prefix_path("data/").expect("prefix").as_ref(), "data");
    }
}
