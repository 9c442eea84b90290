//! The copier: lists the source, and moves every object to the destination with many objects
//! in flight (`transfers`) and many chunks per large object (`streams`). Used by `slate copy`
//! now, and by `sync` (reconcile) later. Listing runs ahead of the transfers through a bounded
//! channel, so pages are pipelined with copies and memory does not grow with the object count.

pub mod bwlimit;
pub mod estimate;
pub mod hash;
pub mod local;
pub mod progress;
pub mod read;
pub mod resume;
pub mod transfer;
pub mod tune;

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use object_store::list::PaginatedListStore;
use object_store::ObjectStoreExt;
use tokio::sync::mpsc;

use crate::stores::side::{one_line, prefix_path, Side};
use crate::stores::{limit, list, retry, s3copy};
pub use progress::{Counters, ProgressMode};
use transfer::{copy_one, Ctx, Item};

use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::core::meta::Placement;

/// How a copy runs. Built from CLI flags (and later the config file).
///
/// `transfers`, `streams` and `chunk_size` are None unless the user asked for a value (flag,
/// config `[copy]`, job option): then slate tunes them itself while it copies (see
/// `stores/limit.rs` and [`transfer::Ctx::chunk_size_for`]). A value asked for is fixed (the
/// objects in flight are still lowered while a store throttles, and recovered up to it).
/// `CopyOptions::default()` is the adaptive copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Objects in flight at once: fixed at N, or None: adaptive.
    pub transfers: Option<usize>,
    /// Chunks in flight per large object: fixed at N, or None: adaptive.
    pub streams: Option<usize>,
    /// Chunk (and multipart part) size, a multiple of 1 MiB, at least 5 MiB: fixed, or None:
    /// chosen per object from the measured round trip and throughput.
    pub chunk_size: Option<u64>,
    /// Budget for chunk buffers held in memory (cloud destinations).
    pub memory_limit: u64,
    /// Re-read every destination object and compare content hashes.
    pub verify: bool,
    /// fsync local files before renaming them into place.
    pub fsync: bool,
    pub progress: ProgressMode,
    /// Progress counters to update instead of fresh ones (a job's, which the API streams).
    pub counters: Option<Arc<Counters>>,
    /// Local sources: follow symlinks (`--copy-links`) instead of skipping them, but never
    /// to anything outside the source root. The source [`Location`]'s `copy_links` is what
    /// listings obey: entry points set it from this ([`source`]), and a copy's shared state
    /// takes this from it, so that listings, probes and reads agree.
    pub copy_links: bool,
    /// Storage class and canned ACL of what is written (`--storage-class`, `--acl`); checked
    /// for the destination's store by [`CopyOptions::placement_for`].
    pub placement: Placement,
    /// Carry Content-* headers, user metadata and the modification time (default); false
    /// writes the bytes alone (`--no-metadata`), as slate did before it carried them.
    pub metadata: bool,
    /// `--bwlimit`: what every read of the source waits for (one bucket for all the copies
    /// of the process that share these options; a job brings its own).
    pub bwlimit: Option<Arc<bwlimit::BwLimit>>,
    /// Where uploads under way are recorded, so that a copy cut short continues from its last
    /// chunk (`copy::resume`); None: every copy starts from the beginning.
    pub resume: Option<resume::UploadsDb>,
    /// False: a reconcile leaves `resume` as it is instead of recording uploads in its own
    /// database (a copy over a temporary database, whose records would go with it: its
    /// uploads cut short are aborted instead).
    pub record_uploads: bool,
    /// Let the store copy what it can (one bucket of any store; two buckets of one S3
    /// endpoint: CopyObject) (default); false (`--no-server-side-copy`) moves every byte
    /// through slate: for an S3-compatible whose CopyObject is missing or slower than a GET
    /// and a PUT, or when the copies must pass through this host (its `--bwlimit`).
    pub server_side_copy: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            transfers: None,
            streams: None,
            chunk_size: None,
            memory_limit: 1 << 30,
            verify: false,
            fsync: false,
            progress: ProgressMode::Auto,
            counters: None,
            copy_links: false,
            placement: Placement::default(),
            metadata: true,
            bwlimit: None,
            resume: None,
            record_uploads: true,
            server_side_copy: true,
        }
    }
}

impl CopyOptions {
    /// Checks the options and names the flag that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |option: &str, why: String| {
            Err(SlateError::BadOption {
                option: option.into(),
                why,
            })
        };
        if let Some(t) = self.transfers.filter(|t| *t == 0 || *t > 4096) {
            return bad("--transfers", format!("{t} is outside 1..=4096"));
        }
        if let Some(s) = self.streams.filter(|s| *s == 0 || *s > 256) {
            return bad("--streams", format!("{s} is outside 1..=256"));
        }
        if let Some(c) = self.chunk_size {
            if c < 5 << 20 || c % hash::BLOCK != 0 || c > 4 << 30 {
                return bad(
                    "--chunk-size",
                    format!("{c} must be a multiple of 1 MiB between 5 MiB and 4 GiB"),
                );
            }
        }
        let chunk = self.chunk_size.unwrap_or(tune::MIN_PART);
        if self.memory_limit < chunk {
            return bad(
                "--memory-limit",
                format!("{} is smaller than one chunk ({chunk})", self.memory_limit),
            );
        }
        Ok(())
    }

    /// The most objects in flight: `--transfers` when asked for; else the adaptive ceiling,
    /// min(1024, one per MiB of `--memory-limit`, a quarter of the open files this process may
    /// have).
    pub fn ceiling(&self) -> usize {
        self.transfers.unwrap_or_else(|| {
            let by_memory = (self.memory_limit >> 20).max(1) as usize;
            ADAPTIVE_MAX
                .min(by_memory)
                .min(open_files() / 4) // a socket per stream, a temp file, idle pooled connections
                .max(limit::START)
        })
    }

    /// The placement in the spelling `dst`'s store takes; an exit-2 error naming the value
    /// (and the flag) when that store has no such class or ACL.
    ///
    /// An rclone remote's `storage_class`/`access_tier` and `acl`/`object_acl` apply where
    /// the flags and the config name none.
    pub fn placement_for(&self, dst: &Location) -> Result<Placement> {
        let remote = |what: &str| {
            dst.remote
                .as_ref()
                .map(|r| format!("{what} of remote '{}'", r.name))
        };
        let (class_from, class) = match &self.placement.storage_class {
            Some(c) => (None, Some(c.clone())),
            None => (remote("storage class"), dst.remote_storage_class()),
        };
        let (acl_from, acl) = match &self.placement.acl {
            Some(a) => (None, Some(a.clone())),
            None => (remote("acl"), dst.remote_acl()),
        };
        Placement {
            storage_class: class,
            acl,
        }
        .for_store(dst.scheme)
        .map_err(|why| {
            let option = if why.starts_with("ACL") {
                acl_from.unwrap_or_else(|| "--acl".into())
            } else {
                class_from.unwrap_or_else(|| "--storage-class".into())
            };
            SlateError::BadOption { option, why }
        })
    }

    /// The memory the chunk buffers can take at most, for `--help` and the summary.
    pub fn buffer_bound(&self) -> u64 {
        match (self.transfers, self.streams, self.chunk_size) {
            (Some(t), Some(s), Some(c)) => (t as u64 * s as u64 * c).min(self.memory_limit),
            _ => self.memory_limit,
        }
    }
}

/// The most objects in flight an adaptive copy takes.
pub const ADAPTIVE_MAX: usize = 1024;

/// Raises this process's soft limit of open files to its hard limit (as most servers do at
/// start): each object in flight holds sockets, and a temporary file when local, and the
/// common soft default of 1,024 would cap the adaptive ceiling needlessly. Called once by
/// `main`.
pub fn raise_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write only the struct they are given
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Makes glibc's malloc serve buffers of 128 KiB and more from their own mappings, returned
/// to the system when freed, for good: by default the threshold rises to the size of the
/// largest buffer freed, after which buffers of a few hundred KiB (small objects held whole,
/// hundreds in flight) come from the heap arenas, which keep their pages when freed, so the
/// resident size stays near the highest ever in flight. The price is CPU, not nothing: every
/// buffer of 128 KiB or more is a fresh mapping, which the kernel zeroes and faults in page by
/// page as it is first written, and unmaps when freed. On a shared 2-core development machine
/// (while a build ran) an mmap, a write per 4 KiB page and a munmap took about 170 µs for
/// 256 KiB, 6 ms for 8 MiB and 65 ms for 64 MiB, about 1 µs a page. Chunks of 32 MiB and
/// more were mappings before as well (glibc's threshold rises at most to 32 MiB); what this
/// adds is the cost for buffers between 128 KiB and 32 MiB, which the measured runs paid
/// without losing speed (3,000 objects at 20 ms) for a resident size of a fraction.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a malloc parameter, called once before any thread starts
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// The open files this process may have (RLIMIT_NOFILE, soft), 1024 when it cannot be read.
pub fn open_files() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, nothing else
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    if ok && r.rlim_cur != libc::RLIM_INFINITY {
        r.rlim_cur.min(1 << 20) as usize
    } else if ok {
        1 << 20
    } else {
        1024
    }
}

/// The source as the copier lists and reads it: a local folder with `copy_links` (from the
/// options or already on the location) follows the symlinks that stay inside it.
pub fn source(loc: &Location, opts: &CopyOptions) -> Location {
    loc.clone()
        .with_copy_links(loc.copy_links || opts.copy_links)
}

/// The result of a copy.
#[derive(Debug, Clone, Default)]
pub struct CopySummary {
    pub objects: u64,
    pub bytes: u64,
    pub failed: u64,
    pub server_side: u64,
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

impl CopySummary {
    pub fn line(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let mbps = self.bytes as f64 / 1e6 / secs.max(1e-6);
        let mut s = format!(
            "copied {} objects, {} in {:.2} s ({:.1} MB/s)",
            self.objects,
            progress::human_bytes(self.bytes),
            secs,
            mbps
        );
        if self.server_side > 0 {
            s.push_str(&format!(", {} server-side", self.server_side));
        }
        if self.failed > 0 {
            s.push_str(&format!(", {} FAILED", self.failed));
        }
        s
    }
}

/// What the source resolved to.
pub struct Plan {
    pub src: Side,
    pub dst: Side,
    pub dst_root: PathBuf,
    /// Set when the source is one object: (its item, with the destination already decided).
    pub single: Option<Item>,
    /// Both ends are one bucket (or container) of one store: copies are server-side.
    pub server_side: bool,
    /// Two buckets of one S3 endpoint: copies up to 5 GiB are server-side (CopyObject).
    pub cross: Option<Arc<s3copy::S3CrossBucket>>,
}

impl Plan {
    /// Whether an object of `size` bytes is copied without passing through slate.
    pub fn is_server_side(&self, size: u64) -> bool {
        self.server_side || (self.cross.is_some() && size <= s3copy::MAX_COPY_OBJECT)
    }
}

/// The `<Code>` and `<Message>` of an XML error body, when the store sent one.
fn xml_error(text: &str) -> Option<String> {
    let pick = |tag: &str| {
        let open = format!("<{tag}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{tag}>"))?;
        Some(text[start..end].to_string())
    };
    match (pick("Code"), pick("Message")) {
        (Some(c), Some(m)) => Some(format!("{c}: {m}")),
        (Some(c), None) => Some(c),
        _ => None,
    }
}

pub fn classify_store_error(loc: &Location, e: &object_store::Error) -> SlateError {
    let text = one_line(e);
    let short = xml_error(&text).unwrap_or_else(|| text.clone());
    let lower = text.to_ascii_lowercase();
    if matches!(e, object_store::Error::NotFound { .. })
        || lower.contains("nosuchbucket")
        || lower.contains("containernotfound")
        || lower.contains("bucket does not exist")
        || lower.contains("no bucket named") // fake-gcs-server answers 500 with this
        || lower.contains("404 not found")
    {
        return SlateError::BucketNotFound {
            url: format!("{}://{}", loc.scheme.short(), loc.bucket),
            detail: short,
        };
    }
    let denied = [
        "403 forbidden",
        "401 unauthorized",
        "accessdenied",
        "authenticationfailed",
        "signaturedoesnotmatch",
        "invalidaccesskeyid",
    ];
    if denied.iter().any(|d| lower.contains(d)) {
        return SlateError::Store {
            url: loc.to_string(),
            detail: format!("access denied: {short}"),
        };
    }
    SlateError::List {
        url: loc.to_string(),
        detail: text,
    }
}

/// One listing request for at most one key or "folder" under `loc`'s prefix: reaches the
/// bucket (a missing bucket or bad credentials fail here, classified) and says whether
/// anything is there. Never more than one request, however big the prefix.
async fn probe(pager: &Arc<dyn PaginatedListStore>, loc: &Location) -> Result<bool> {
    if !loc.prefix.is_empty() {
        prefix_path(&loc.prefix)?; // the same checks as every other use of the prefix
    }
    let prefix = (!loc.prefix.is_empty()).then(|| format!("{}/", loc.prefix));
    let opts = object_store::list::PaginatedListOptions {
        delimiter: Some("/".into()),
        max_keys: Some(1),
        ..Default::default()
    };
    // sent again while the error is transient; a missing bucket or denied access is reported
    let plain =
        |e: &object_store::Error| matches!(classify_store_error(loc, e), SlateError::List { .. });
    let page = retry::Retry::default()
        .for_store(loc.scheme.short())
        .request(&loc.raw, plain, |_| {
            pager.list_paginated(prefix.as_deref(), opts.clone())
        })
        .await
        .map_err(|e| classify_store_error(loc, &e))?;
    Ok(!page.result.objects.is_empty() || !page.result.common_prefixes.is_empty())
}

/// Decides single object vs prefix, and checks that both ends can be reached.
pub async fn plan(src_loc: &Location, dst_loc: &Location) -> Result<Plan> {
    plan_for(src_loc, dst_loc, false).await
}

/// [`plan`] for a reconcile (`sync`, `diff`, the daemon): the source is a prefix that may be
/// empty (a bucket that fills later), not a missing object; one that names a single object is
/// still reported as one (`single`).
pub async fn plan_prefix(src_loc: &Location, dst_loc: &Location) -> Result<Plan> {
    plan_for(src_loc, dst_loc, true).await
}

async fn plan_for(src_loc: &Location, dst_loc: &Location, prefix_only: bool) -> Result<Plan> {
    let src = Side::open(src_loc)?;
    let dst = Side::open(dst_loc)?;
    let server_side = src_loc.same_store(dst_loc);
    // Probe the destination first: a missing bucket or bad credentials fail before any work.
    if let Side::Cloud { pager, loc, .. } = &dst {
        probe(pager, loc).await?;
    }
    let single = match &src {
        Side::Cloud {
            store, pager, loc, ..
        } if !loc.prefix.is_empty() && !loc.is_dir_hint => {
            // A listing first: a prefix copy (the common case) then needs no HEAD, and servers
            // that answer a HEAD on a "folder" with an error (s3s-fs: 500) do not matter.
            let path = prefix_path(&loc.prefix)?;
            if probe(pager, loc).await? {
                None
            } else {
                let head = retry::Retry::default()
                    .for_store(loc.scheme.short())
                    .request(&loc.raw, |_| true, |_| store.head(&path))
                    .await;
                match head {
                    Ok(meta) => Some(Item {
                        src: loc.prefix.clone(),
                        dst: String::new(),
                        size: meta.size,
                        etag: meta.e_tag,
                        mtime: Some(meta.last_modified.into()),
                    }),
                    Err(object_store::Error::NotFound { .. }) if prefix_only => None,
                    Err(object_store::Error::NotFound { .. }) => {
                        return Err(SlateError::SourceNotFound {
                            url: loc.raw.clone(),
                        })
                    }
                    Err(e) => return Err(classify_store_error(loc, &e)),
                }
            }
        }
        Side::Local { loc } => match std::fs::metadata(loc.local_path()) {
            Ok(m) if m.is_file() => Some(Item {
                src: loc.prefix.clone(),
                dst: String::new(),
                size: m.len(),
                etag: None,
                mtime: m.modified().ok(),
            }),
            Ok(m) if m.is_dir() => None,
            Ok(_) => {
                return Err(SlateError::BadUrl {
                    url: loc.raw.clone(),
                    why: "not a regular file or folder".into(),
                })
            }
            Err(_) => {
                return Err(SlateError::SourceNotFound {
                    url: loc.raw.clone(),
                })
            }
        },
        _ => None,
    };
    let mut dst_root = dst_loc.local_path();
    let single = match single {
        None => None,
        Some(mut item) => {
            let name = src_loc.basename().to_string();
            let into_folder = dst_loc.is_dir_hint
                || match dst_loc.scheme {
                    Scheme::Local => dst_root.is_dir(),
                    _ => dst_loc.prefix.is_empty(),
                };
            match dst_loc.scheme {
                Scheme::Local if into_folder => item.dst = name,
                Scheme::Local => {
                    item.dst = dst_root
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .unwrap_or(name);
                    dst_root = dst_root
                        .parent()
                        .map(|p| p.to_path_buf())
                        .unwrap_or_default();
                }
                _ if into_folder => item.dst = dst_loc.key_for(&name),
                _ => item.dst = dst_loc.prefix.clone(),
            }
            Some(item)
        }
    };
    if let (Side::Local { .. }, None) = (&dst, &single) {
        if dst_root.is_file() {
            return Err(SlateError::BadUrl {
                url: dst_loc.raw.clone(),
                why: "is a file, but the source is a folder of objects".into(),
            });
        }
    }
    let cross = s3copy::S3CrossBucket::for_pair(src_loc, dst_loc)?.map(Arc::new);
    Ok(Plan {
        src,
        dst,
        dst_root,
        single,
        server_side,
        cross,
    })
}

/// Streams the items of a prefix copy into `tx`. Returns the number listed.
async fn list_into(
    src: Side,
    dst_loc: Location,
    tx: mpsc::Sender<Result<Item>>,
    counters: Arc<Counters>,
) -> Result<u64> {
    let (etx, mut erx) = mpsc::channel(8192);
    let src2 = src.clone();
    let lister =
        tokio::spawn(async move { list::list_entries(&src2, etx, classify_store_error).await });
    while let Some(e) = erx.recv().await {
        let item = e.map(|e| {
            counters.objects_listed.fetch_add(1, Relaxed);
            counters.bytes_listed.fetch_add(e.size, Relaxed);
            item_for(&src, &dst_loc, e)
        });
        if tx.send(item).await.is_err() {
            break;
        }
    }
    let listed = lister.await.map_err(|e| SlateError::List {
        url: src.location().to_string(),
        detail: e.to_string(),
    })??;
    // the totals are final now, long before the last transfer ends
    counters.listing_done.store(true, Relaxed);
    Ok(listed)
}

/// The copy of one listed entry: full source key (or path) and destination key (or path
/// relative to the destination root).
pub(crate) fn item_for(src: &Side, dst_loc: &Location, e: crate::core::object::Entry) -> Item {
    let src_key = match src {
        Side::Cloud { loc, .. } => loc.key_for(&e.rel),
        Side::Local { loc } => loc.local_path().join(&e.rel).to_string_lossy().to_string(),
    };
    let dst = match dst_loc.scheme {
        Scheme::Local => e.rel,
        _ => dst_loc.key_for(&e.rel),
    };
    Item {
        src: src_key,
        dst,
        size: e.size,
        etag: match src {
            Side::Cloud { .. } => e.etag,
            Side::Local { .. } => None,
        },
        mtime: e.mtime,
    }
}

/// Copies `src` to `dst`. Objects that fail are reported and counted; the copy goes on with
/// the others and the summary says how many failed.
/// `failed` hears of each object that failed (named): the CLI prints it, a job logs it; the
/// library prints nothing.
pub async fn run(
    src_loc: &Location,
    dst_loc: &Location,
    opts: CopyOptions,
    failed: &(dyn Fn(&str) + Send + Sync),
) -> Result<CopySummary> {
    opts.validate()?;
    let src_loc = &source(src_loc, &opts);
    let start = Instant::now();
    let plan = plan(src_loc, dst_loc).await?;
    let counters = opts.counters.clone().unwrap_or_default();
    let ctx = Arc::new(Ctx::new(&plan, opts.clone(), counters.clone())?);
    let reporter = progress::Reporter::start(counters.clone(), opts.progress);
    let (tx, rx) = mpsc::channel::<Result<Item>>(8192);
    let lister = match plan.single {
        Some(item) => {
            counters.objects_listed.fetch_add(1, Relaxed);
            counters.bytes_listed.fetch_add(item.size, Relaxed);
            let _ = tx.send(Ok(item)).await;
            drop(tx);
            None
        }
        None => Some(tokio::spawn(list_into(
            plan.src.clone(),
            dst_loc.clone(),
            tx,
            counters.clone(),
        ))),
    };
    let mut summary = CopySummary::default();
    let mut results = tokio_stream_from(rx)
        .map(|item| {
            let ctx = ctx.clone();
            async move {
                match item {
                    Ok(item) => {
                        let r = copy_one(&ctx, &item).await;
                        (Some(item), r)
                    }
                    Err(e) => (None, Err(e)),
                }
            }
        })
        // the ceiling: each copy also waits for a slot under the limits of the cloud sides
        // (limit.rs), adaptive or lower while a store throttles
        .buffer_unordered(ctx.ceiling());
    while let Some((item, res)) = results.next().await {
        match res {
            Ok(out) => {
                summary.objects += 1;
                summary.bytes += out.bytes;
                summary.server_side += out.server_side as u64;
                counters.objects_done.fetch_add(1, Relaxed);
                if let (Some(item), Some(h)) = (&item, out.hash) {
                    tracing::debug!(key = %item.src, hash = %h, bytes = out.bytes, "copied");
                }
            }
            Err(e) => {
                summary.failed += 1;
                counters.objects_failed.fetch_add(1, Relaxed);
                let msg = e.to_string();
                failed(&msg);
                summary.first_error.get_or_insert(msg);
            }
        }
    }
    counters.listing_done.store(true, Relaxed);
    if let Some(lister) = lister {
        let listed = lister.await.map_err(|e| SlateError::List {
            url: src_loc.to_string(),
            detail: e.to_string(),
        })?;
        match listed {
            Ok(0) if src_loc.scheme != Scheme::Local => {
                reporter.finish().await;
                return Err(SlateError::SourceNotFound {
                    url: src_loc.raw.clone(),
                });
            }
            Ok(_) => {}
            Err(e) => {
                reporter.finish().await;
                return Err(e);
            }
        }
    }
    if let Some(l) = &ctx.ledger {
        // what a stopped slate left and this copy, listed to its end, did not continue
        l.release_unused(&ctx.dst).await;
    }
    reporter.finish().await;
    summary.elapsed = start.elapsed();
    Ok(summary)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Lists the source and tallies what a copy would do, without moving anything.
pub async fn estimate(
    src_loc: &Location,
    dst_loc: &Location,
    opts: &CopyOptions,
) -> Result<estimate::Estimate> {
    opts.validate()?;
    let src_loc = &source(src_loc, opts);
    let plan = plan(src_loc, dst_loc).await?;
    let mut est = estimate::Estimate::default();
    let (s, d) = (src_loc.scheme, dst_loc.scheme);
    match &plan.single {
        Some(item) => est.add(
            item.size,
            opts.chunk_size.unwrap_or(tune::DEFAULT_CHUNK),
            opts.server_side_copy && plan.is_server_side(item.size),
            s,
            d,
        ),
        None => {
            let (tx, mut rx) = mpsc::channel(8192);
            let lister = tokio::spawn(list_into(
                plan.src.clone(),
                dst_loc.clone(),
                tx,
                Arc::new(Counters::default()),
            ));
            while let Some(item) = rx.recv().await {
                let item = item?;
                est.add(
                    item.size,
                    opts.chunk_size.unwrap_or(tune::DEFAULT_CHUNK),
                    opts.server_side_copy && plan.is_server_side(item.size),
                    s,
                    d,
                );
            }
            let listed = lister.await.map_err(|e| SlateError::List {
                url: src_loc.to_string(),
                detail: e.to_string(),
            })??;
            if listed == 0 && s != Scheme::Local {
                return Err(SlateError::SourceNotFound {
                    url: src_loc.raw.clone(),
                });
            }
        }
    }
    est.finish_listing(s);
    Ok(est)
}
