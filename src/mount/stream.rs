//! A file written sequentially through the mount is uploaded while it is written: each
//! 8 MiB part goes as soon as the writer has filled it (up to 8 in flight, each within the
//! mount's memory budget), so `close` waits only for the tail. A write or a truncate below what was handed to the upload breaks the
//! stream: it is aborted and `close` uploads the file whole.

use std::sync::Arc;
use std::time::SystemTime;

use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path as StorePath;
use object_store::{MultipartUpload, ObjectStore, PutMultipartOptions, PutPayload};
use tokio::sync::{mpsc, oneshot};

use super::fs::{part_len, Budget, Errno};

/// Parts in flight per file.
const IN_FLIGHT: usize = 8;

enum Msg {
    /// The bytes `[offset, offset + len)` are written: upload them as the next part.
    Part(u64, u64),
    /// The file is `size` bytes: upload what is left and complete.
    Finish(u64, oneshot::Sender<Result<(), Errno>>),
}

/// The writer's side of a file's streaming upload.
#[derive(Debug)]
pub struct Stream {
    tx: mpsc::UnboundedSender<Msg>,
    /// Bytes `[0, sent)` are handed to the upload, as `parts` parts.
    pub sent: u64,
    pub parts: u64,
    /// The modification time the object carries: its metadata goes with the upload's start.
    pub mtime: SystemTime,
}

/// Where a sequential writer is, and whether its file can still stream.
#[derive(Debug, Default)]
pub struct Sequence {
    /// The end of what was written from 0 without a gap.
    pub seq_end: u64,
    /// A write or truncate below `stream.sent`: the stream is useless.
    pub broken: bool,
    pub stream: Option<Stream>,
    /// Writes past `seq_end` not joined to it yet, start → end: the kernel's two request
    /// threads hand sequential writes over out of order.
    ahead: std::collections::BTreeMap<u64, u64>,
}

/// Extents past the sequential end a writer may leave before it counts as random.
const MAX_AHEAD: usize = 1024;

impl Sequence {
    /// Notes a write of `[offset, end)`; returns the parts now ready to go, as (offset, len).
    pub fn wrote(&mut self, offset: u64, end: u64) -> Vec<(u64, u64)> {
        let sent = self.stream.as_ref().map(|s| s.sent).unwrap_or(0);
        if offset < sent {
            self.broken = true;
        }
        if offset <= self.seq_end {
            if end > self.seq_end {
                self.seq_end = end;
                // what was written past the gap this write filled joins the run
                while let Some((&o, &e)) = self.ahead.range(..=self.seq_end).next() {
                    self.ahead.remove(&o);
                    self.seq_end = self.seq_end.max(e);
                }
            }
        } else {
            let e = self.ahead.entry(offset).or_insert(end);
            *e = (*e).max(end);
            if self.ahead.len() > MAX_AHEAD {
                // a random writer: its close uploads it whole
                self.broken = true;
                self.ahead.clear();
            }
        }
        let mut ready = Vec::new();
        let mut at = sent;
        let mut n = self.stream.as_ref().map(|s| s.parts).unwrap_or(0);
        while !self.broken && self.seq_end >= at + part_len(n) {
            ready.push((at, part_len(n)));
            at += part_len(n);
            n += 1;
        }
        ready
    }

    /// Notes a truncate to `size`.
    pub fn truncated(&mut self, size: u64) {
        if size < self.stream.as_ref().map(|s| s.sent).unwrap_or(0) {
            self.broken = true;
        }
        self.seq_end = self.seq_end.min(size);
        self.ahead.retain(|o, _| *o < size);
        for e in self.ahead.values_mut() {
            *e = (*e).min(size);
        }
    }
}

/// Starts the upload task of `key` (its first part not sent yet).
pub(super) fn start(
    rt: &tokio::runtime::Handle,
    store: Arc<dyn ObjectStore>,
    key: StorePath,
    (attributes, mtime): (object_store::Attributes, SystemTime),
    file: std::fs::File,
    limit: Option<Arc<crate::copy::bwlimit::BwLimit>>,
    budget: Budget,
) -> Stream {
    let (tx, rx) = mpsc::unbounded_channel();
    rt.spawn(run(store, key, attributes, file, limit, budget, rx));
    Stream {
        tx,
        sent: 0,
        parts: 0,
        mtime,
    }
}

impl Stream {
    /// Hands `[offset, offset + len)` to the upload.
    pub fn send(&mut self, offset: u64, len: u64) {
        let _ = self.tx.send(Msg::Part(offset, len));
        self.sent = offset + len;
        self.parts += 1;
    }

    /// Uploads the rest of a `size`-byte file and completes; Ok once the object is whole at
    /// the store.
    pub async fn finish(self, size: u64) -> Result<(), Errno> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Finish(size, reply))
            .map_err(|_| libc::EIO)?;
        answer.await.unwrap_or(Err(libc::EIO))
    }
}

fn read_at(file: &std::fs::File, off: u64, len: u64) -> Result<Vec<u8>, Errno> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, off)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    Ok(buf)
}

/// A part task's outcome.
fn joined(r: Result<object_store::Result<()>, tokio::task::JoinError>) -> object_store::Result<()> {
    r.unwrap_or_else(|e| {
        Err(object_store::Error::Generic {
            store: "mount",
            source: Box::new(e),
        })
    })
}

/// The upload task: parts as they come, then the tail and the completion; dropped without
/// a finish (the file closed with an error, or released), the upload is aborted.
async fn run(
    store: Arc<dyn ObjectStore>,
    key: StorePath,
    attributes: object_store::Attributes,
    file: std::fs::File,
    limit: Option<Arc<crate::copy::bwlimit::BwLimit>>,
    budget: Budget,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut upload: Option<Box<dyn MultipartUpload>> = None;
    let mut inflight = FuturesUnordered::new();
    let mut failed: Option<Errno> = None;
    let mut next = 0u64;
    // parts handed to the upload so far
    let mut index = 0u64;
    let fail = |e: object_store::Error| {
        tracing::warn!(key = %key, error = %e, "mount: a part's upload failed");
        super::fs::errno(&e)
    };
    while let Some(msg) = rx.recv().await {
        let (parts, finish) = match msg {
            Msg::Part(off, len) => (vec![(off, len)], None),
            Msg::Finish(size, reply) => {
                let mut parts = Vec::new();
                let (mut at, mut n) = (next, index);
                while at < size {
                    let len = part_len(n).min(size - at);
                    parts.push((at, len));
                    at += len;
                    n += 1;
                }
                (parts, Some(reply))
            }
        };
        for (off, len) in parts {
            if failed.is_some() {
                break;
            }
            if upload.is_none() {
                match store
                    .put_multipart_opts(
                        &key,
                        PutMultipartOptions {
                            attributes: attributes.clone(),
                            ..Default::default()
                        },
                    )
                    .await
                {
                    Ok(u) => upload = Some(u),
                    Err(e) => {
                        failed = Some(fail(e));
                        break;
                    }
                }
            }
            while inflight.len() >= IN_FLIGHT {
                if let Some(r) = inflight.next().await {
                    if let Err(e) = joined(r) {
                        failed = Some(fail(e));
                    }
                }
            }
            if let Some(l) = &limit {
                l.take(len).await;
            }
            // the part's bytes in memory until it is uploaded, within the budget
            let permit = budget.take(len).await;
            let body = match read_at(&file, off, len) {
                Ok(b) => b,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            if let Some(u) = upload.as_mut() {
                // a task of its own: it goes now, not when this loop next looks
                let part = u.put_part(PutPayload::from(body));
                inflight.push(tokio::spawn(async move {
                    let done = part.await;
                    drop(permit);
                    done
                }));
            }
            next = off + len;
            index += 1;
        }
        if let Some(reply) = finish {
            while let Some(r) = inflight.next().await {
                if let Err(e) = joined(r) {
                    failed = Some(fail(e));
                }
            }
            let result = match (failed, upload.as_mut()) {
                (None, Some(u)) => u.complete().await.map(|_| ()).map_err(fail),
                (None, None) => Err(libc::EIO),
                (Some(e), _) => Err(e),
            };
            if result.is_err() {
                if let Some(u) = upload.as_mut() {
                    let _ = u.abort().await;
                }
            }
            let _ = reply.send(result);
            return;
        }
    }
    // the writer went away without finishing: nothing of this upload may stay
    while inflight.next().await.is_some() {}
    if let Some(u) = upload.as_mut() {
        let _ = u.abort().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount::fs::PART;

    #[test]
    fn a_sequential_writer_hands_parts_as_they_fill_and_a_rewrite_breaks_it() {
        let mut s = Sequence::default();
        assert!(s.wrote(0, PART - 1).is_empty());
        assert_eq!(s.wrote(PART - 1, 2 * PART + 5), [(0, PART), (PART, PART)]);
        // pretend both were handed
        s.stream = Some(Stream {
            tx: mpsc::unbounded_channel().0,
            sent: 2 * PART,
            parts: 2,
            mtime: SystemTime::UNIX_EPOCH,
        });
        // a gap: what is after it waits for the end
        assert!(s.wrote(3 * PART, 4 * PART).is_empty());
        assert_eq!(s.seq_end, 2 * PART + 5);
        // a rewrite of what is above what was handed is fine
        assert!(s.wrote(2 * PART, 2 * PART + 1).is_empty());
        assert!(!s.broken);
        // below it: broken, nothing more goes
        s.wrote(10, 20);
        assert!(s.broken);
        assert!(s.wrote(2 * PART + 5, 5 * PART).is_empty());
        // writes handed over out of order still make a run: the later one waits for the gap
        let mut o = Sequence::default();
        assert!(o.wrote(PART / 2, PART + 10).is_empty());
        assert!(o.wrote(PART + 10, 2 * PART).is_empty());
        assert_eq!(o.seq_end, 0);
        assert_eq!(o.wrote(0, PART / 2), [(0, PART), (PART, PART)]);
        assert_eq!(o.seq_end, 2 * PART);
        let mut t = Sequence {
            stream: Some(Stream {
                tx: mpsc::unbounded_channel().0,
                sent: PART,
                parts: 1,
                mtime: SystemTime::UNIX_EPOCH,
            }),
            ..Default::default()
        };
        t.truncated(PART + 3);
        assert!(!t.broken);
        t.truncated(5);
        assert!(t.broken);
    }

    #[test]
    fn parts_grow_so_that_the_largest_object_fits_in_ten_thousand() {
        assert_eq!(part_len(0), PART);
        assert_eq!(part_len(999), PART);
        assert_eq!(part_len(1000), 2 * PART);
        let fits: u64 = (0..10_000).map(part_len).sum();
        assert!(fits >= 5 << 40, "10,000 parts hold {fits} bytes");
        // a writer past its thousandth part hands the larger parts
        let mut s = Sequence {
            stream: Some(Stream {
                tx: mpsc::unbounded_channel().0,
                sent: 1000 * PART,
                parts: 1000,
                mtime: SystemTime::UNIX_EPOCH,
            }),
            seq_end: 1000 * PART,
            ..Default::default()
        };
        assert!(s.wrote(1000 * PART, 1001 * PART).is_empty());
        assert_eq!(s.wrote(1001 * PART, 1003 * PART), [(1000 * PART, 2 * PART)]);
    }
}
