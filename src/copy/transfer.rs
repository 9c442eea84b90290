//! Copies one object: wait for a slot under the adaptive limits of both sides ([`Limits`]),
//! decide the strategy (server-side, into a local file, single PUT, multipart), split it into
//! block-aligned chunks, run up to `streams` chunks at once (fixed, or steered by the copy's
//! throughput: [`Steer`]) with retries (each read, each PUT,
//! each part and the completion retried on its own), and make the result visible only when
//! complete. Copies in flight and failed store requests are counted for `/metrics`
//! ([`crate::core::metrics`]).

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use futures::stream::{FusedStream, FuturesOrdered, FuturesUnordered, StreamExt, TryStreamExt};
use futures::{Future, Stream};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as StorePath;
use object_store::{
    Attributes, GetOptions, MultipartId, ObjectStore, ObjectStoreExt, PutMultipartOptions,
    PutOptions, PutPayload,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::hash::ContentHash;
use super::local::{DirMaker, TempFile};
use super::read::{read_chunk, ChunkOut, ChunkSink, Guard};
use super::resume::{self, Ledger, Listed};
use super::tune::{choose_chunk, choose_streams, Steer};
use super::{CopyOptions, Counters};
use crate::core::error::SlateError;
use crate::core::location::Scheme;
use crate::core::meta::{Meta, Placement};
use crate::stores::azblob::AzureBlob;
use crate::stores::gcsmeta::GcsPatch;
use crate::stores::limit::{Limiter, Permit};
use crate::stores::local::safe_join;
use crate::stores::retry::{ChunkError, Retry};
use crate::stores::s3copy::{S3CrossBucket, MAX_COPY_OBJECT};
use crate::stores::side::{one_line, store_path, Side};

/// One object to copy.
#[derive(Debug, Clone)]
pub struct Item {
    /// Full key (cloud) or absolute path (local) of the source object.
    pub src: String,
    /// Full key (cloud destination) or path relative to the destination root (local).
    pub dst: String,
    pub size: u64,
    pub etag: Option<String>,
    pub mtime: Option<SystemTime>,
}

/// What copying one object did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub bytes: u64,
    /// None for server-side copies: no byte passed through slate.
    pub hash: Option<ContentHash>,
    pub server_side: bool,
    /// The destination's change token after the write: the ETag the store returned, or for
    /// local files the mtime/size token of `list::local_etag`. None when the store said none.
    pub dst_etag: Option<String>,
    /// Fingerprint of the source's metadata that travelled with the bytes (None: a
    /// server-side copy, which the store makes with the source's own).
    pub meta: Option<String>,
}

/// Everything the transfers share.
pub struct Ctx {
    pub src: Side,
    pub dst: Side,
    /// Root folder for local destinations.
    pub dst_root: PathBuf,
    pub opts: CopyOptions,
    pub counters: Arc<Counters>,
    /// Memory budget for chunk buffers, in units of [`BUDGET_UNIT`] bytes.
    pub budget: Arc<Semaphore>,
    pub dirs: Arc<DirMaker>,
    /// Source and destination are one bucket of one store.
    pub server_side: bool,
    /// Source and destination are two buckets of one S3 endpoint.
    pub cross: Option<Arc<S3CrossBucket>>,
    /// How many objects each cloud side takes at once now.
    pub limits: Limits,
    /// Storage class and ACL of what is written, in the destination store's spelling.
    pub placement: Placement,
    /// Azure destinations: the Blob calls that carry properties (Put Block List).
    pub azure: Option<Arc<AzureBlob>>,
    /// S3 destinations: CopyObject onto itself, which replaces metadata in place.
    pub s3_self: Option<Arc<S3CrossBucket>>,
    /// GCS destinations: objects.patch, which updates metadata in place.
    pub gcs_patch: Option<Arc<GcsPatch>>,
    /// S3 sources: GetObjectTagging, for objects S3 says have tags.
    pub src_tags: Option<Arc<S3CrossBucket>>,
    /// Uploads under way at the destination, recorded so that a copy cut short resumes
    /// (`copy::resume`); None without a database, or for server-side copies.
    pub ledger: Option<Arc<Ledger>>,
    /// Objects of more than one chunk being copied now (their streams share the budget).
    large: Arc<AtomicUsize>,
    /// Objects being copied now.
    active: Arc<AtomicU64>,
    /// Streams per object when they adapt, and the window they are measured over.
    streams: Mutex<StreamWindow>,
}

/// The throughput window of the chunks of objects of more than one chunk, for [`Steer`].
#[derive(Debug)]
struct StreamWindow {
    steer: Steer,
    start: Instant,
    bytes: u64,
    chunks: usize,
    /// The sides' throttle epochs at the window's start.
    epoch: u64,
}

/// One end of a copy, for the retries and limits that belong to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Src,
    Dst,
}

/// The adaptive limits of a copy's cloud sides ([`Limiter`]); a local side has none, and one
/// bucket on both ends shares one.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub src: Option<Arc<Limiter>>,
    pub dst: Option<Arc<Limiter>>,
}

impl Limits {
    /// Limits for the cloud sides of `src` → `dst`: fixed at `--transfers` when asked for,
    /// else adaptive up to the options' ceiling.
    /// `store_side`: the copies are made by the store (one bucket, or two of one S3
    /// endpoint), whose requests tell the limiter neither their time nor their throttles, so
    /// it could only grow: those copies keep a fixed limit (`--transfers`, else 16).
    pub fn new(
        src: &Side,
        dst: &Side,
        opts: &CopyOptions,
        same_bucket: bool,
        store_side: bool,
    ) -> Limits {
        let limit = |side: &Side, name: &'static str| match side {
            Side::Cloud { loc, .. } => Some(match opts.transfers {
                Some(n) => Limiter::new(n, loc.scheme.short(), name),
                None if store_side => {
                    Limiter::new(crate::stores::limit::START, loc.scheme.short(), name)
                }
                None => Limiter::adaptive(opts.ceiling(), loc.scheme.short(), name),
            }),
            Side::Local { .. } => None,
        };
        let dst = limit(dst, "dst");
        let src = if same_bucket {
            dst.clone()
        } else {
            limit(src, "src")
        };
        Limits { src, dst }
    }

    /// When the prefixes of `src` and `dst` (keys; `src` None: the copy sends no request for
    /// the source key, as a server-side copy) are paced, reserves the first request's slot of
    /// each and waits for it, so that a copy waits for a throttled prefix before it holds a
    /// slot others could use, and the copies waiting on one prefix start one slot apart.
    pub async fn ready(&self, src: Option<&str>, dst: &str) {
        if let (Some(l), Some(src)) = (&self.src, src) {
            l.ready(src).await;
        }
        if let Some(l) = &self.dst {
            l.ready(dst).await;
        }
    }

    /// Waits for a slot on both sides: the source's first, always, so that no two copies ever
    /// wait for each other's slot.
    pub async fn acquire(&self) -> (Option<Permit>, Option<Permit>) {
        let src = match &self.src {
            Some(l) => Some(l.acquire().await),
            None => None,
        };
        let dst = match (&self.dst, &self.src) {
            (Some(d), Some(s)) if Arc::ptr_eq(d, s) => None,
            (Some(d), _) => Some(d.acquire().await),
            (None, _) => None,
        };
        (src, dst)
    }

    pub fn of(&self, end: End) -> Option<Arc<Limiter>> {
        match end {
            End::Src => self.src.clone(),
            End::Dst => self.dst.clone(),
        }
    }

    fn each(&self) -> impl Iterator<Item = &Arc<Limiter>> {
        let dst = self
            .dst
            .as_ref()
            .filter(|d| !self.src.as_ref().is_some_and(|s| Arc::ptr_eq(s, d)));
        self.src.iter().chain(dst)
    }
}

/// A body larger than this makes a request's time no round-trip sample ([`Retry::bulk`]).
const BULK: u64 = 1 << 20;

/// Granularity of the memory budget.
pub const BUDGET_UNIT: u64 = 64 * 1024;

/// Counts an object of more than one chunk as being copied until dropped.
pub struct Large(Arc<AtomicUsize>);

impl Drop for Large {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Counts an object as being copied until dropped, and shows the tuning when it ends.
struct Active<'a>(&'a Ctx);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Relaxed);
        self.0.publish();
    }
}

impl Ctx {
    /// The shared state of one copy run over `plan`. Fails (exit 2) on a storage class or
    /// ACL the destination's store does not have, before anything is copied.
    pub fn new(
        plan: &super::Plan,
        mut opts: CopyOptions,
        counters: Arc<Counters>,
    ) -> Result<Ctx, SlateError> {
        // the source's location carries the symlink rule its listing obeyed; the probes of
        // single keys (`opts.copy_links`) and the reads obey the same
        opts.copy_links = plan.src.location().copy_links;
        let dst_loc = plan.dst.location().clone();
        let placement = opts.placement_for(&dst_loc)?;
        let mut dst = plan.dst.clone();
        if let Some(acl) = &placement.acl {
            // every write of this copy carries the canned ACL
            let name = match dst_loc.scheme {
                Scheme::Gcs => "x-goog-acl",
                _ => "x-amz-acl",
            };
            let mut h = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_str(acl) {
                h.insert(name, v);
            }
            let s = crate::stores::build_with_headers(&dst_loc, &h)?;
            dst = Side::Cloud {
                store: s.store,
                pager: s.pager,
                parts: s.parts,
                loc: dst_loc.clone(),
            };
        }
        let (mut server_side, mut cross) = if opts.server_side_copy {
            (plan.server_side, plan.cross.clone())
        } else {
            (false, None)
        };
        if !placement.is_empty() && (server_side || cross.is_some()) {
            // a store-side copy keeps the source's class and ACL: S3 copies with the
            // placement's headers; the other stores move the bytes
            server_side = false;
            cross = S3CrossBucket::with_placement(plan.src.location(), &dst_loc, &placement)?
                .map(Arc::new);
        }
        let azure = match dst_loc.scheme {
            Scheme::Azure => Some(Arc::new(AzureBlob::for_location(&dst_loc)?)),
            _ => None,
        };
        let s3_self = S3CrossBucket::with_placement(&dst_loc, &dst_loc, &placement)?.map(Arc::new);
        let src_tags = crate::stores::s3tags::tag_reader(plan.src.location())?;
        let gcs_patch = match dst_loc.scheme {
            Scheme::Gcs => Some(Arc::new(GcsPatch::for_location(&dst_loc)?)),
            _ => None,
        };
        let budget_units = (opts.memory_limit / BUDGET_UNIT).min(u32::MAX as u64 / 2) as usize;
        if let Some(l) = &opts.bwlimit {
            // the progress says which limit the copy reads under
            let _ = counters.limit.set(l.clone());
        }
        let ledger = match &opts.resume {
            Some(db) if !server_side => match crate::state::off_the_runtime(|| {
                Ledger::open(
                    db.0.clone(),
                    &dst,
                    &plan.dst_root,
                    plan.single.as_ref().map(|i| i.dst.as_str()),
                )
            }) {
                Ok(l) => Some(Arc::new(l)),
                Err(e) => {
                    tracing::warn!("copies cut short will start again from the beginning: {e}");
                    None
                }
            },
            _ => None,
        };
        Ok(Ctx {
            src: plan.src.clone(),
            limits: Limits::new(
                &plan.src,
                &dst,
                &opts,
                plan.server_side,
                server_side || cross.is_some(),
            ),
            dst,
            dst_root: plan.dst_root.clone(),
            opts,
            counters,
            budget: Arc::new(Semaphore::new(budget_units)),
            dirs: Default::default(),
            server_side,
            cross,
            placement,
            azure,
            s3_self,
            gcs_patch,
            src_tags,
            ledger,
            large: Default::default(),
            active: Default::default(),
            streams: Mutex::new(StreamWindow {
                steer: Steer::default(),
                start: Instant::now(),
                bytes: 0,
                chunks: 0,
                epoch: 0,
            }),
        })
    }

    /// The most objects in flight: `--transfers`, or the adaptive ceiling when a side is a
    /// cloud store (its limit moves below it), or [`super::limit::START`] between local
    /// folders (nothing to measure there).
    pub fn ceiling(&self) -> usize {
        match (self.opts.transfers, self.limits.each().next()) {
            (Some(n), _) => n,
            (None, Some(_)) => self.opts.ceiling(),
            (None, None) => crate::stores::limit::START,
        }
    }

    /// The round-trip estimate of the copy: the longer of its cloud sides'.
    pub fn rtt(&self) -> Option<Duration> {
        self.limits.each().filter_map(|l| l.rtt()).max()
    }

    /// The chunk size of an object of `size` bytes (see [`choose_chunk`]): `--chunk-size`, or
    /// chosen from the measured round trip and stream throughput (of the source when it is a
    /// cloud store, else of the destination). An object of at most this size is read whole
    /// and written with one PUT.
    pub fn chunk_size_for(&self, size: u64) -> u64 {
        let measured = self.limits.src.as_ref().or(self.limits.dst.as_ref());
        let rate = measured.and_then(|l| l.stream_rate());
        let c = choose_chunk(
            size,
            self.opts.chunk_size,
            self.rtt(),
            rate,
            self.opts.memory_limit,
        );
        self.counters.tuning.chunk_size.store(c, Relaxed);
        c
    }

    /// The most chunks in flight for an object of `chunks` chunks: `--streams`, or
    /// [`choose_streams`] (its share of the memory budget); [`Self::width`] says how many of
    /// them now. Hold the returned guard while the object is copied.
    pub fn streams_for(&self, chunks: usize, chunk: u64) -> (usize, Option<Large>) {
        let large = (chunks > 1).then(|| {
            if self.large.fetch_add(1, Relaxed) == 0 {
                // no object of many chunks was under way: the time since is no throughput
                self.restart_window();
            }
            Large(self.large.clone())
        });
        let n = match self.opts.streams {
            Some(n) => n,
            None => choose_streams(
                chunks,
                self.large.load(Relaxed),
                self.opts.memory_limit,
                chunk,
            ),
        };
        if chunks > 1 {
            self.counters
                .tuning
                .streams
                .store(self.width(n) as u64, Relaxed);
        }
        (n, large)
    }

    /// Chunks in flight now for an object whose most is `cap` (from [`Self::streams_for`]):
    /// `cap` when `--streams` fixed it, else the [`Steer`]'s width within it.
    pub fn width(&self, cap: usize) -> usize {
        match self.opts.streams {
            Some(_) => cap,
            None => self.window().steer.width().min(cap).max(1),
        }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, StreamWindow> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Throttles of the copy's sides so far (each side's epoch moves on a throttle).
    fn throttle_epoch(&self) -> u64 {
        self.limits.each().map(|l| l.epoch()).sum()
    }

    fn restart_window(&self) {
        let epoch = self.throttle_epoch();
        let mut w = self.window();
        (w.start, w.bytes, w.chunks, w.epoch) = (Instant::now(), 0, 0, epoch);
    }

    /// A chunk of `bytes` of an object of more than one chunk, which may have `cap` chunks in
    /// flight, is done (written to its file or uploaded as a part). Once a window has seen a
    /// chunk per stream and lasted half a second and four round trips, its throughput steers
    /// the streams per object.
    fn chunk_done(&self, bytes: u64, cap: usize) {
        self.publish();
        if self.opts.streams.is_some() {
            return;
        }
        let (rtt, epoch) = (self.rtt().unwrap_or_default(), self.throttle_epoch());
        let mut w = self.window();
        w.bytes += bytes;
        w.chunks += 1;
        let took = w.start.elapsed();
        if took < (rtt * 4).max(Duration::from_millis(500)) || w.chunks < w.steer.width() {
            return;
        }
        let rate = w.bytes as f64 / took.as_secs_f64();
        let throttled = epoch != w.epoch;
        let width = w.steer.step(rate, throttled);
        (w.start, w.bytes, w.chunks, w.epoch) = (Instant::now(), 0, 0, epoch);
        drop(w);
        tracing::debug!(
            "streams per object: {width} (the last window moved {:.1} MiB/s{})",
            rate / (1 << 20) as f64,
            if throttled { ", throttled" } else { "" }
        );
        self.counters
            .tuning
            .streams
            .store(width.min(cap) as u64, Relaxed);
    }

    /// Shows the tuning of the copy now in its counters (progress, job progress).
    fn publish(&self) {
        let t = &self.counters.tuning;
        t.in_flight.store(self.active.load(Relaxed), Relaxed);
        let limit = self.limits.each().map(|l| l.limit()).min();
        t.limit
            .store(limit.unwrap_or_else(|| self.ceiling()) as u64, Relaxed);
        let rtt = self.rtt().map_or(0, |d| d.as_micros() as u64);
        t.rtt_micros.store(rtt, Relaxed);
    }

    /// A chunk of `bytes` was read, its headers after `first_byte`, whole after `took`: the
    /// limits count the bytes, the source's takes a round-trip and a throughput sample.
    fn moved(&self, bytes: u64, first_byte: Option<Duration>, took: Duration) {
        match (&self.limits.src, first_byte) {
            (Some(src), Some(fb)) => {
                src.rtt_sample(fb);
                src.chunk_sample(bytes, took.saturating_sub(fb));
            }
            (Some(src), None) => src.add_bytes(bytes),
            (None, _) => {}
        }
        if let Some(dst) = self
            .limits
            .dst
            .as_ref()
            .filter(|d| !self.limits.src.as_ref().is_some_and(|s| Arc::ptr_eq(s, d)))
        {
            dst.add_bytes(bytes);
        }
    }

    /// A part of `bytes` was uploaded in `took`: with a local source (no reads to measure),
    /// the destination's stream throughput, from which the chunk size is chosen.
    fn uploaded(&self, bytes: u64, took: Duration) {
        if let (None, Some(dst)) = (&self.limits.src, &self.limits.dst) {
            let rtt = dst.rtt().unwrap_or_default();
            dst.stream_sample(bytes, took.saturating_sub(rtt));
        }
    }

    /// What the source object carries: from a response of the store (`attrs`; the object's
    /// listed time when it records no `mtime`), or a local file's name and mtime.
    fn src_meta(&self, item: &Item, attrs: Option<&Attributes>) -> Meta {
        match &self.src {
            Side::Local { .. } => Meta::of_local_file(&item.src, item.mtime),
            Side::Cloud { loc, .. } => attrs
                .map(|a| Meta::from_attributes(loc.scheme, a))
                .unwrap_or_default()
                .or_listed_time(item.mtime),
        }
    }

    /// `meta` as the destination's store takes it, with the storage class asked for; every
    /// change made to fit is logged, what cannot fit is an error naming the object and field.
    pub fn dst_attributes(&self, item: &Item, meta: &Meta) -> Result<Attributes, SlateError> {
        let scheme = self.dst.location().scheme;
        if !self.opts.metadata {
            // the bytes alone (--no-metadata), with the storage class asked for
            return Meta::default()
                .to_attributes(scheme, self.placement.storage_class.as_deref())
                .map(|(a, _)| a)
                .map_err(|e| obj_err(item, e));
        }
        let (attrs, notes) = meta
            .to_attributes(scheme, self.placement.storage_class.as_deref())
            .map_err(|e| obj_err(item, format!("metadata for {}: {e}", item.dst)))?;
        for n in notes {
            tracing::info!(key = %item.dst, "{}", n.0);
        }
        Ok(attrs)
    }

    /// The attributes of a cloud source object without its body (a HEAD): for objects no
    /// chunk read brings them with (empty ones).
    async fn head_attrs(&self, item: &Item) -> Result<(Option<Attributes>, u32), SlateError> {
        let Side::Cloud { store, .. } = &self.src else {
            return Ok((None, 0));
        };
        let path = store_path(&item.src)?;
        let opts = GetOptions {
            head: true,
            ..Default::default()
        };
        let res = self
            .retry(End::Src)
            .request(&item.src, any, |_| store.get_opts(&path, opts.clone()))
            .await
            .map_err(|e| obj_err(item, format!("reading properties: {}", one_line(&e))))?;
        let count = crate::stores::s3tags::tag_count(&res);
        Ok((Some(res.attributes), count))
    }

    /// [`Ctx::src_meta`] with the source's tags, read when S3 said it has `tag_count` of them
    /// and the destination can hold them (S3, Azure; with metadata carried).
    /// The source's tags are read (S3 source; S3 or Azure destination; metadata carried).
    pub fn wants_tags(&self) -> Option<&Arc<S3CrossBucket>> {
        let holds = matches!(self.dst.location().scheme, Scheme::S3 | Scheme::Azure);
        self.src_tags
            .as_ref()
            .filter(|_| holds && self.opts.metadata)
    }

    async fn src_meta_tags(
        &self,
        item: &Item,
        attrs: Option<&Attributes>,
        tag_count: u32,
    ) -> Result<Meta, SlateError> {
        let mut meta = self.src_meta(item, attrs);
        let holds = matches!(self.dst.location().scheme, Scheme::S3 | Scheme::Azure);
        if tag_count > 0 && self.opts.metadata {
            if let (true, Some(t)) = (holds, &self.src_tags) {
                let tags = t
                    .get_tagging(&item.src)
                    .await
                    .map_err(|e| obj_err(item, format!("reading tags: {e}")))?;
                meta.tags = tags.into_iter().collect();
            } else if !holds {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(
                        "object tags are not kept: {} destinations have no place for them",
                        self.dst.location().scheme.short()
                    )
                });
            }
        }
        Ok(meta)
    }

    /// The tags of `meta` as object_store writes them.
    fn tag_set(&self, meta: &Meta) -> object_store::TagSet {
        let mut t = object_store::TagSet::default();
        if self.opts.metadata {
            for (k, v) in &meta.tags {
                t.push(k, v);
            }
        }
        t
    }

    pub fn side(&self, end: End) -> &Side {
        match end {
            End::Src => &self.src,
            End::Dst => &self.dst,
        }
    }

    /// Retries of requests to `end`: counted under its store, throttles and successes told to
    /// its limit.
    pub fn retry(&self, end: End) -> Retry {
        Retry::default()
            .for_store(self.side(end).location().scheme.short())
            .limited(self.limits.of(end))
    }

    async fn reserve(&self, bytes: u64) -> Result<OwnedSemaphorePermit, SlateError> {
        // a chunk bigger than the whole budget (a huge object's parts, which 10,000 parts
        // make large) waits for all of it, never for more than there is (that would wait
        // forever, and hold up every later reservation behind it)
        let total = (self.opts.memory_limit / BUDGET_UNIT).clamp(1, u32::MAX as u64 / 2);
        let units = bytes.div_ceil(BUDGET_UNIT).clamp(1, total) as u32;
        self.budget
            .clone()
            .acquire_many_owned(units)
            .await
            .map_err(|_| SlateError::Interrupted)
    }
}

fn obj_err(item: &Item, detail: impl Into<String>) -> SlateError {
    SlateError::Object {
        key: item.src.clone(),
        detail: detail.into(),
    }
}

/// Splits `size` bytes into chunks of `chunk` bytes (the last one shorter).
pub fn chunks(size: u64, chunk: u64) -> Vec<Range<u64>> {
    (0..size.div_ceil(chunk))
        .map(|i| i * chunk..((i + 1) * chunk).min(size))
        .collect()
}

fn retryable(e: &ChunkError) -> bool {
    matches!(e, ChunkError::Retry(_))
}

/// Any transient error of a write is worth sending again (see [`crate::stores::retry::transient`]).
fn any(_: &object_store::Error) -> bool {
    true
}

/// Reads one chunk of the source with retries; the chunk is re-read from its start on each
/// attempt, so a body cut short is read again whole, never kept.
async fn chunk_with_retry(
    ctx: &Ctx,
    item_key: &str,
    guard: &Arc<Guard>,
    range: Range<u64>,
    whole: bool,
    sink: ChunkSink,
) -> Result<ChunkOut, ChunkError> {
    let side = &ctx.src;
    let started = tokio::time::Instant::now();
    // a large range's time is mostly its body's: its first byte is the round-trip sample
    // (`Ctx::moved`), not the whole request
    let retry = match range.end - range.start > BULK {
        true => ctx.retry(End::Src).bulk(),
        false => ctx.retry(End::Src),
    };
    retry
        .run(item_key, retryable, |_| {
            let sink = sink.clone();
            let range = range.clone();
            async move {
                let limit = ctx.opts.bwlimit.as_ref();
                let out =
                    read_chunk(side, item_key, guard, range.clone(), whole, sink, limit).await?;
                Ok(out)
            }
        })
        .await
        .inspect(|out| {
            ctx.counters
                .bytes_done
                .fetch_add(range.end - range.start, Relaxed);
            ctx.moved(range.end - range.start, out.first_byte, started.elapsed());
        })
}

/// Copies one object from `ctx.src` to `ctx.dst`.
pub async fn copy_one(ctx: &Ctx, item: &Item) -> Result<Outcome, SlateError> {
    // a slot under both sides' adaptive limits; like the in-flight count, dropped on every way
    // out: done, failed, or cancelled mid-copy
    let read = !server_side_copy(ctx, item);
    ctx.limits
        .ready(read.then_some(item.src.as_str()), &item.dst)
        .await;
    let _slots = ctx.limits.acquire().await;
    let _in_flight = crate::core::metrics::InFlight::start();
    ctx.active.fetch_add(1, Relaxed);
    let _active = Active(ctx);
    ctx.publish();
    let out = copy_inner(ctx, item).await?;
    // the limits measure what completes
    for l in ctx.limits.each() {
        l.object_done();
    }
    Ok(out)
}

/// Whether `item` is copied by the destination store (no request reads the source key).
fn server_side_copy(ctx: &Ctx, item: &Item) -> bool {
    ctx.server_side || (ctx.cross.is_some() && item.size <= MAX_COPY_OBJECT)
}

async fn copy_inner(ctx: &Ctx, item: &Item) -> Result<Outcome, SlateError> {
    if server_side_copy(ctx, item) {
        return server_side(ctx, item).await;
    }
    let out = match &ctx.dst {
        Side::Local { .. } => to_local(ctx, item).await?,
        Side::Cloud { store, parts, .. } => {
            // chosen once: the object is sent in chunks of the size that made it multipart
            let chunk = ctx.chunk_size_for(item.size);
            if item.size <= chunk {
                to_cloud_single(ctx, store, item).await?
            } else {
                to_cloud_multipart(ctx, parts, item, chunk).await?
            }
        }
    };
    if ctx.opts.verify {
        verify(ctx, item, out.hash).await?;
    }
    Ok(out)
}

async fn server_side(ctx: &Ctx, item: &Item) -> Result<Outcome, SlateError> {
    let Side::Cloud { store, .. } = &ctx.dst else {
        return Err(obj_err(item, "server-side copy needs a cloud store"));
    };
    let to = store_path(&item.dst)?;
    let dst_etag = match &ctx.cross {
        Some(cross) => cross
            .copy(&item.src, &item.dst)
            .await
            .map_err(|e| obj_err(item, format!("copy to {}: {e}", item.dst)))?,
        None => {
            let from = store_path(&item.src)?;
            ctx.retry(End::Dst)
                .request(&item.dst, any, |_| {
                    store.copy_opts(&from, &to, Default::default())
                })
                .await
                .map_err(|e| {
                    obj_err(
                        item,
                        format!("server-side copy to {}: {}", item.dst, one_line(&e)),
                    )
                })
                .map(|_| None)?
        }
    };
    ctx.counters.bytes_done.fetch_add(item.size, Relaxed);
    ctx.counters.objects_server_side.fetch_add(1, Relaxed);
    if ctx.opts.verify {
        let head = ctx
            .retry(End::Dst)
            .request(&item.dst, any, |_| store.head(&to))
            .await
            .map_err(|e| obj_err(item, format!("verify: {}", one_line(&e))))?;
        if head.size != item.size {
            return Err(obj_err(
                item,
                format!(
                    "verify: destination has {} bytes, source {}",
                    head.size, item.size
                ),
            ));
        }
        let a = hash_object(ctx, End::Src, &item.src, item.size).await?;
        let b = hash_object(ctx, End::Dst, &item.dst, item.size).await?;
        if a != b {
            return Err(obj_err(
                item,
                format!("verify: content hash differs ({a} vs {b})"),
            ));
        }
    }
    Ok(Outcome {
        bytes: item.size,
        hash: None,
        server_side: true,
        dst_etag,
        meta: None,
    })
}

/// Where a local destination file goes, its folders made (never through a symlink), and a
/// temp file for it there; None for a folder marker whose folder exists (nothing to write).
/// File-system calls: run on the blocking pool, not on a runtime worker.
async fn local_dest(ctx: &Ctx, item: &Item) -> Result<(PathBuf, Option<TempFile>), SlateError> {
    let path = safe_join(&ctx.dst_root, &item.dst)?;
    let (dirs, root, size) = (ctx.dirs.clone(), ctx.dst_root.clone(), item.size);
    let p = path.clone();
    let made = tokio::task::spawn_blocking(move || {
        dirs.ensure_parent(&root, &p)
            .map_err(|e| format!("creating folders for {}: {e}", p.display()))?;
        if size == 0 && p.is_dir() {
            return Ok(None);
        }
        TempFile::create(&p, size)
            .map(Some)
            .map_err(|e| format!("creating {}: {e}", p.display()))
    })
    .await
    .map_err(|e| obj_err(item, e.to_string()))?
    .map_err(|e| obj_err(item, e))?;
    Ok((path, made))
}

async fn to_local(ctx: &Ctx, item: &Item) -> Result<Outcome, SlateError> {
    let slot = resume::Slot::default();
    let r = to_local_inner(ctx, item, &slot).await;
    if let (true, Some(l)) = (r.is_err(), &ctx.ledger) {
        if let Some(id) = slot.take() {
            // a copy that failed leaves nothing: its resumable temporary file goes with its row
            l.discard(id, &ctx.dst).await;
        }
    }
    r
}

/// A local destination's temporary file for `item` and the chunks it holds already: the file
/// a copy cut short left (adopted by the ledger, its chunks hashed again), or a new one,
/// recorded when the object has more than one chunk. `slot` holds the ledger row.
async fn local_temp(
    ctx: &Ctx,
    item: &Item,
    slot: &resume::Slot,
) -> Result<(PathBuf, Option<TempFile>, u64, HashMap<usize, Vec<u128>>), SlateError> {
    let chunk = ctx.chunk_size_for(item.size);
    let Some(l) = ctx.ledger.as_ref().filter(|_| item.size > chunk) else {
        let (path, tmp) = local_dest(ctx, item).await?;
        return Ok((path, tmp, chunk, HashMap::new()));
    };
    let path = safe_join(&ctx.dst_root, &item.dst)?;
    // the temporary file is recorded in full, so that `slate cleanup` finds it from anywhere
    let full = std::path::absolute(&path).unwrap_or(path.clone());
    if let Some(u) = l.take(&item.dst) {
        // the copy holds the row from now: cut short anywhere below, it is let go
        slot.set(u.id);
        let temp = u.temp.as_ref().map(PathBuf::from);
        let next_to = temp.as_ref().and_then(|t| t.parent()) == full.parent();
        // local chunks are written to disk, not held in memory: no budget to fit in
        if resume::still_fits(&u, item, u64::MAX) && next_to {
            let parts = l.parts(u.id).await;
            let (dest, t, size, c) = (path.clone(), temp.clone(), item.size, u.chunk_size);
            let (src, key) = (ctx.src.clone(), item.src.clone());
            let opened = tokio::task::spawn_blocking(move || {
                let t = t?;
                let ranges = chunks(size, c);
                let tmp = TempFile::reopen(&dest, t.clone(), size).ok()?;
                let held = resume::check_local_parts(&t, &parts, &ranges);
                let kept: Vec<_> = parts
                    .into_iter()
                    .filter(|p| held.contains_key(&(p.part as usize)))
                    .collect();
                // what was written must still be what the source holds
                resume::source_holds(&src, &key, &kept, &ranges).then_some((tmp, held))
            })
            .await
            .ok()
            .flatten();
            if let Some((tmp, done)) = opened {
                l.resumed();
                let have: u64 = chunks(item.size, u.chunk_size)
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| done.contains_key(i))
                    .map(|(_, r)| r.end - r.start)
                    .sum();
                tracing::info!(key = %item.dst, "resuming: {have} of {} bytes already written", item.size);
                ctx.counters.bytes_resumed.fetch_add(have, Relaxed);
                ctx.counters.bytes_done.fetch_add(have, Relaxed);
                return Ok((path, Some(tmp), u.chunk_size, done));
            }
            tracing::info!(key = %item.dst, "the temporary file a stopped copy left is gone or changed: starting again");
        }
        // the source changed, or the file is gone: start again
        slot.take();
        l.abort(&u, &ctx.dst).await;
    }
    let tmp_path = resume::temp_name(&full);
    let new = l.new_upload(
        item,
        None,
        Some(tmp_path.display().to_string()),
        chunk,
        None,
    );
    if let Some(id) = l.begin(new).await {
        slot.set(id);
    }
    let keep = slot.get().is_some();
    let (dirs, root, size, p) = (
        ctx.dirs.clone(),
        ctx.dst_root.clone(),
        item.size,
        path.clone(),
    );
    let tmp = tokio::task::spawn_blocking(move || {
        dirs.ensure_parent(&root, &p)
            .map_err(|e| format!("creating folders for {}: {e}", p.display()))?;
        TempFile::create_at(&p, tmp_path, size, keep)
            .map_err(|e| format!("creating {}: {e}", p.display()))
    })
    .await
    .map_err(|e| obj_err(item, e.to_string()))?
    .map_err(|e| obj_err(item, e))?;
    Ok((path, Some(tmp), chunk, HashMap::new()))
}

async fn to_local_inner(
    ctx: &Ctx,
    item: &Item,
    slot: &resume::Slot,
) -> Result<Outcome, SlateError> {
    let (path, tmp, chunk, done) = local_temp(ctx, item, slot).await?;
    let Some(tmp) = tmp else {
        // A zero-byte "folder marker" (key ending in `/`, as consoles create them) whose folder
        // exists: nothing to write.
        return Ok(Outcome {
            bytes: 0,
            hash: Some(ContentHash::from_blocks(&[], 0)),
            server_side: false,
            dst_etag: None,
            meta: None,
        });
    };
    let tmp = Arc::new(tmp);
    let parts = chunks(item.size, chunk);
    let (cap, _large) = ctx.streams_for(parts.len(), chunk);
    let whole = parts.len() == 1;
    let (rec_id, ledger) = (slot.get(), ctx.ledger.as_ref());
    let todo = parts
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !done.contains_key(i));
    let guard = Arc::new(Guard::new(item.etag.as_deref()));
    let guard = &guard;
    let reads = futures::stream::iter(todo).map(|(i, r)| {
        let sink = ChunkSink::File(tmp.clone());
        async move {
            let len = r.end - r.start;
            let out = chunk_with_retry(ctx, &item.src, guard, r, whole, sink).await?;
            if !whole {
                ctx.chunk_done(len, cap);
            }
            if let (Some(id), Some(l)) = (rec_id, ledger) {
                l.part_done(id, i, None, out.digests.clone()).await;
            }
            Ok::<_, ChunkError>((i, out))
        }
    });
    let mut results: Vec<(usize, ChunkOut)> =
        widening(reads, FuturesUnordered::new(), || ctx.width(cap))
            .try_collect()
            .await
            .map_err(|e| obj_err(item, e.to_string()))?;
    // the modification time travels: the one the source records (rclone's `mtime`), else
    // its listed time
    let attrs = match results.iter().find(|(i, _)| *i == 0) {
        Some((_, out)) => out.attrs.clone(),
        None => ctx.head_attrs(item).await?.0,
    };
    results.extend(done.into_iter().map(|(i, digests)| {
        (
            i,
            ChunkOut {
                digests,
                data: None,
                attrs: None,
                tag_count: 0,
                first_byte: None,
            },
        )
    }));
    let meta = ctx.src_meta(item, attrs.as_ref());
    let mtime = if ctx.opts.metadata {
        meta.mtime
    } else {
        item.mtime
    };
    let hash = assemble(results, item.size);
    let tmp =
        Arc::try_unwrap(tmp).map_err(|_| obj_err(item, "internal: temp file still shared"))?;
    if item.size == 0 {
        ctx.dirs.wrote_empty(&path);
    }
    let (size, fsync, p) = (item.size, ctx.opts.fsync, path.clone());
    let committed = tokio::task::spawn_blocking(move || {
        match tmp.commit(size, mtime, fsync) {
            Ok(()) => {}
            // a folder marker whose folder another object created meanwhile
            Err(_) if size == 0 && p.is_dir() => {}
            Err(e) => return Err(format!("finishing {}: {e}", p.display())),
        }
        Ok(std::fs::metadata(&p)
            .ok()
            .and_then(|m| crate::core::object::local_etag(m.modified().ok(), m.len())))
    })
    .await
    .map_err(|e| obj_err(item, e.to_string()))?;
    let dst_etag = committed.map_err(|e| obj_err(item, e))?;
    if let (Some(l), Some(id)) = (&ctx.ledger, slot.take()) {
        l.finish(id).await;
    }
    Ok(Outcome {
        bytes: item.size,
        hash: Some(hash),
        server_side: false,
        dst_etag,
        meta: Some(meta.fingerprint()),
    })
}

fn assemble(mut results: Vec<(usize, ChunkOut)>, size: u64) -> ContentHash {
    results.sort_by_key(|(i, _)| *i);
    let blocks: Vec<u128> = results.into_iter().flat_map(|(_, o)| o.digests).collect();
    ContentHash::from_blocks(&blocks, size)
}

async fn to_cloud_single(
    ctx: &Ctx,
    store: &Arc<dyn ObjectStore>,
    item: &Item,
) -> Result<Outcome, SlateError> {
    let _permit = ctx.reserve(item.size).await?;
    let dst = store_path(&item.dst)?;
    let (hash, payload, attrs, tag_count) = if item.size == 0 {
        let (attrs, count) = ctx.head_attrs(item).await?;
        (
            ContentHash::from_blocks(&[], 0),
            PutPayload::default(),
            attrs,
            count,
        )
    } else {
        let out = chunk_with_retry(
            ctx,
            &item.src,
            &Arc::new(Guard::new(item.etag.as_deref())),
            0..item.size,
            true,
            ChunkSink::Buffer,
        )
        .await
        .map_err(|e| obj_err(item, e.to_string()))?;
        let data = out.data.unwrap_or_default();
        (
            ContentHash::from_blocks(&out.digests, item.size),
            PutPayload::from_bytes(data),
            out.attrs,
            out.tag_count,
        )
    };
    let meta = ctx.src_meta_tags(item, attrs.as_ref(), tag_count).await?;
    let put_opts = PutOptions {
        attributes: ctx.dst_attributes(item, &meta)?,
        tags: ctx.tag_set(&meta),
        ..Default::default()
    };
    if let (Some(az), Side::Cloud { parts, .. }, true) = (
        &ctx.azure,
        &ctx.dst,
        ctx.opts.metadata && !meta.tags.is_empty(),
    ) {
        // tags to Azure: one block and a block list, which carries them in slate's encoding
        // (object_store's Put Blob would send them form-encoded, a space as `+`)
        let dst_etag =
            azure_one_block(ctx, parts, az, item, &dst, payload, &put_opts, &meta).await?;
        return Ok(Outcome {
            bytes: item.size,
            hash: Some(hash),
            server_side: false,
            dst_etag,
            meta: Some(meta.fingerprint()),
        });
    }
    let retry = match item.size > BULK {
        true => ctx.retry(End::Dst).bulk(),
        false => ctx.retry(End::Dst),
    };
    let put = retry
        .request(&item.dst, any, |_| {
            store.put_opts(&dst, payload.clone(), put_opts.clone())
        })
        .await
        .map_err(|e| obj_err(item, format!("writing {}: {}", item.dst, one_line(&e))))?;
    Ok(Outcome {
        bytes: item.size,
        hash: Some(hash),
        server_side: false,
        dst_etag: put.e_tag,
        meta: Some(meta.fingerprint()),
    })
}

/// Writes a small object to Azure as one block and a block list with `meta`'s tags: visible
/// only when complete, with its properties, metadata and tags at once.
#[allow(clippy::too_many_arguments)]
async fn azure_one_block(
    ctx: &Ctx,
    parts_store: &Arc<dyn MultipartStore>,
    az: &AzureBlob,
    item: &Item,
    dst: &StorePath,
    payload: PutPayload,
    put_opts: &PutOptions,
    meta: &Meta,
) -> Result<Option<String>, SlateError> {
    let retry = ctx.retry(End::Dst);
    let fail = |what: &str, e: String| obj_err(item, format!("{what} {}: {e}", item.dst));
    let id = retry
        .request(&item.dst, any, |_| parts_store.create_multipart(dst))
        .await
        .map_err(|e| fail("starting upload of", one_line(&e)))?;
    let mut guard = AbortGuard(Some((parts_store.clone(), dst.clone(), id.clone())));
    let part = match item.size > BULK {
        true => retry.clone().bulk(),
        false => retry.clone(),
    }
    .request(&item.dst, any, |_| {
        parts_store.put_part(dst, &id, 0, payload.clone())
    })
    .await
    .map_err(|e| fail("uploading", one_line(&e)))?;
    let etag = az
        .put_block_list(&item.dst, &[part], &put_opts.attributes, &meta.tags)
        .await
        .map_err(|e| fail("completing", e))?;
    // a block list commits the blocks: nothing is left to abort
    guard.0 = None;
    Ok(etag)
}

/// Aborts of multipart uploads cut short (error or interrupt), so that the CLI can wait for
/// them before the process exits instead of leaving orphaned parts billed at the store.
static ABORTS: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits (at most `limit`) for the aborts of uploads that were cut short.
pub async fn wait_for_aborts(limit: std::time::Duration) {
    let handles: Vec<_> = ABORTS
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default();
    let _ = tokio::time::timeout(limit, futures::future::join_all(handles)).await;
}

/// Aborts a multipart upload that was neither completed nor aborted (error, cancel).
struct AbortGuard(Option<(Arc<dyn MultipartStore>, StorePath, MultipartId)>);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some((parts, path, id)) = self.0.take() {
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                let task = h.spawn(async move {
                    let _ = parts.abort_multipart(&path, &id).await;
                });
                if let Ok(mut v) = ABORTS.lock() {
                    v.retain(|t| !t.is_finished());
                    v.push(task);
                }
            }
        }
    }
}

/// Copies a large object through a multipart upload. Parts are numbered, so a part whose
/// upload fails is sent again on its own (and so is the start and the completion); a part
/// never takes the place of another. With a ledger, the upload and each part are recorded as
/// they are made, and an upload a copy cut short left is continued (`copy::resume`); an upload
/// that fails is aborted and forgotten.
async fn to_cloud_multipart(
    ctx: &Ctx,
    parts_store: &Arc<dyn MultipartStore>,
    item: &Item,
    chunk: u64,
) -> Result<Outcome, SlateError> {
    let slot = resume::Slot::default();
    let r = multipart_inner(ctx, parts_store, item, chunk, &slot).await;
    if let (true, Some(l)) = (r.is_err(), &ctx.ledger) {
        if let Some(id) = slot.take() {
            l.discard(id, &ctx.dst).await;
        }
    }
    r
}

/// What an upload carries that S3 and GCS fix when it begins: a resume needs the same.
fn begun_with(ctx: &Ctx, meta: &Meta) -> Option<String> {
    if ctx.azure.is_some() {
        return None; // Azure takes them with the block list, at the end
    }
    Some(format!(
        "{}|{:?}|{:?}|{}",
        meta.fingerprint(),
        ctx.placement.storage_class,
        ctx.placement.acl,
        ctx.opts.metadata
    ))
}

/// An upload a copy cut short left, as this copy continues it.
struct Adopted {
    upload: crate::state::uploads::Upload,
    /// The parts the store confirms it holds.
    parts: Vec<crate::state::uploads::Part>,
    meta: Meta,
    attrs: Attributes,
}

/// The upload a copy cut short left for `item`, with the parts the store confirms it holds;
/// None (and that upload aborted) when it cannot be continued: the source changed (its ETag,
/// or its metadata and tags, which the upload took when it began), the store no longer has it,
/// or the store cannot say what it holds (GCS).
async fn adopted_upload(
    ctx: &Ctx,
    item: &Item,
    slot: &resume::Slot,
) -> Result<Option<Adopted>, SlateError> {
    let Some(l) = ctx.ledger.as_ref() else {
        return Ok(None);
    };
    let Some(u) = l.take(&item.dst) else {
        return Ok(None);
    };
    // the copy holds the row from now: cut short anywhere below, it is let go
    slot.set(u.id);
    let id = u.upload_id.clone();
    let said = |what: &str, e: String| {
        tracing::warn!(key = %item.dst, "{what} failed, the upload a stopped copy left starts again: {e}");
    };
    let listed = match (&ctx.azure, &ctx.s3_self, id) {
        _ if !resume::still_fits(&u, item, ctx.opts.memory_limit) => None,
        (Some(az), _, Some(_)) => match az.uncommitted_blocks(&item.dst).await {
            Ok(b) => Some(Listed::Blocks(b)),
            Err(e) => {
                said("listing its blocks", e);
                None
            }
        },
        (None, _, Some(id)) if ctx.dst.location().scheme == Scheme::Gcs => {
            match ctx.gcs_patch.as_ref() {
                Some(g) => match g.list_parts(&item.dst, &id).await {
                    Ok(p) => p.map(Listed::Numbered),
                    Err(e) => {
                        said("listing its parts", e);
                        None
                    }
                },
                None => None,
            }
        }
        (None, Some(s3), Some(id)) if ctx.dst.location().scheme == Scheme::S3 => {
            match s3.list_parts(&item.dst, &id).await {
                Ok(p) => p.map(Listed::Numbered),
                Err(e) => {
                    said("listing its parts", e);
                    None
                }
            }
        }
        _ => None,
    };
    // what the source carries now, against what the upload began with
    let now = match listed {
        Some(listed) => {
            let (a, count) = ctx.head_attrs(item).await?;
            let meta = ctx.src_meta_tags(item, a.as_ref(), count).await?;
            let attrs = ctx.dst_attributes(item, &meta)?;
            let same = u.meta.is_none() || u.meta == begun_with(ctx, &meta);
            same.then_some((listed, meta, attrs))
        }
        None => None,
    };
    let Some((listed, meta, attrs)) = now else {
        slot.take();
        l.abort(&u, &ctx.dst).await;
        return Ok(None);
    };
    let ranges = chunks(item.size, u.chunk_size);
    let parts = resume::confirmed_parts(&l.parts(u.id).await, &listed, &ranges);
    // what was sent must still be what a local source holds
    let (src, key, sent) = (ctx.src.clone(), item.src.clone(), parts.clone());
    let holds =
        tokio::task::spawn_blocking(move || resume::source_holds(&src, &key, &sent, &ranges))
            .await
            .unwrap_or(false);
    if !holds {
        tracing::info!(key = %item.dst, "the source no longer holds what a stopped copy sent: starting again");
        slot.take();
        l.abort(&u, &ctx.dst).await;
        return Ok(None);
    }
    l.resumed();
    Ok(Some(Adopted {
        upload: u,
        parts,
        meta,
        attrs,
    }))
}

async fn multipart_inner(
    ctx: &Ctx,
    parts_store: &Arc<dyn MultipartStore>,
    item: &Item,
    chunk: u64,
    slot: &resume::Slot,
) -> Result<Outcome, SlateError> {
    let dst = store_path(&item.dst)?;
    let retry = ctx.retry(End::Dst);
    let adopted = adopted_upload(ctx, item, slot).await?;
    let chunk = adopted.as_ref().map_or(chunk, |a| a.upload.chunk_size);
    let ranges = chunks(item.size, chunk);
    let n = ranges.len();
    let (cap, _large) = ctx.streams_for(n, chunk);
    let mut done: Vec<Option<PartId>> = vec![None; n];
    let mut digests: Vec<Option<Vec<u128>>> = vec![None; n];
    if let Some(a) = &adopted {
        let mut have = 0;
        for p in &a.parts {
            let i = p.part as usize;
            if let (Some(etag), Some(r)) = (&p.etag, ranges.get(i)) {
                done[i] = Some(PartId {
                    content_id: etag.clone(),
                });
                digests[i] = Some(p.digests.clone());
                have += r.end - r.start;
            }
        }
        tracing::info!(key = %item.dst, "resuming: {have} of {} bytes already uploaded", item.size);
        ctx.counters.bytes_resumed.fetch_add(have, Relaxed);
        ctx.counters.bytes_done.fetch_add(have, Relaxed);
    }
    let todo: Vec<(usize, Range<u64>)> = ranges
        .into_iter()
        .enumerate()
        .filter(|(i, _)| done[*i].is_none())
        .collect();
    // Chunks are read `ctx.width(cap)` at a time, in order; each holds its share of the
    // memory budget until its part is uploaded.
    let guard = Arc::new(Guard::new(item.etag.as_deref()));
    let guard = &guard;
    let reads = futures::stream::iter(todo).map(|(i, r)| async move {
        let permit = ctx.reserve(r.end - r.start).await?;
        let out = chunk_with_retry(ctx, &item.src, guard, r, false, ChunkSink::Buffer)
            .await
            .map_err(|e| obj_err(item, e.to_string()))?;
        Ok::<_, SlateError>((i, out, permit))
    });
    let mut reads = widening(reads, FuturesOrdered::new(), || ctx.width(cap));
    let mut first = None;
    let (id, meta, attrs) = match adopted {
        // the upload began with the properties; the block list (Azure) takes them again
        Some(a) => (a.upload.upload_id.unwrap_or_default(), a.meta, a.attrs),
        None => {
            // The first chunk brings the source's properties, which S3 and GCS take when the
            // upload starts and Azure when its blocks are committed.
            first = match reads.next().await {
                Some(r) => Some(r?),
                None => return Err(obj_err(item, "internal: no chunk to upload")),
            };
            let meta = ctx
                .src_meta_tags(
                    item,
                    first.as_ref().and_then(|f| f.1.attrs.as_ref()),
                    first.as_ref().map(|f| f.1.tag_count).unwrap_or(0),
                )
                .await?;
            let attrs = ctx.dst_attributes(item, &meta)?;
            let create = PutMultipartOptions {
                attributes: if ctx.azure.is_some() {
                    Attributes::new()
                } else {
                    attrs.clone()
                },
                tags: if ctx.azure.is_some() {
                    Default::default()
                } else {
                    ctx.tag_set(&meta)
                },
                ..Default::default()
            };
            let id = retry
                .request(&item.dst, any, |_| {
                    parts_store.create_multipart_opts(&dst, create.clone())
                })
                .await
                .map_err(|e| {
                    obj_err(
                        item,
                        format!("starting upload of {}: {}", item.dst, one_line(&e)),
                    )
                })?;
            if let Some(l) = &ctx.ledger {
                let new = l.new_upload(item, Some(id.clone()), None, chunk, begun_with(ctx, &meta));
                if let Some(row) = l.begin(new).await {
                    slot.set(row);
                }
            }
            (id, meta, attrs)
        }
    };
    // an upload the ledger holds is kept when the copy is cut short (the next one continues
    // it) and aborted by this copy's error path; one it does not hold is aborted when dropped
    let mut guard =
        AbortGuard((slot.get().is_none()).then(|| (parts_store.clone(), dst.clone(), id.clone())));
    let part_err = |e: object_store::Error| {
        obj_err(
            item,
            format!("uploading part of {}: {}", item.dst, one_line(&e)),
        )
    };
    let bulk = retry.clone().bulk();
    let mut uploads = FuturesUnordered::new();
    let rec_id = slot.get();
    loop {
        let res = match first.take() {
            Some(f) => Ok(f),
            None => match reads.next().await {
                Some(r) => r,
                None => break,
            },
        };
        let (i, out, permit) = res?;
        let blocks = out.digests;
        let payload = PutPayload::from_bytes(out.data.unwrap_or_default());
        let (retry, dst, id) = (&bulk, &dst, &id);
        uploads.push(async move {
            let (len, started) = (payload.content_length() as u64, std::time::Instant::now());
            let r = retry
                .request(&item.dst, any, |_| {
                    parts_store.put_part(dst, id, i, payload.clone())
                })
                .await;
            drop(permit);
            let part = r?;
            ctx.uploaded(len, started.elapsed());
            ctx.chunk_done(len, cap);
            if let (Some(row), Some(l)) = (rec_id, &ctx.ledger) {
                l.part_done(row, i, Some(part.content_id.clone()), blocks.clone())
                    .await;
            }
            Ok::<_, object_store::Error>((i, part, blocks))
        });
        while uploads.len() >= ctx.width(cap) {
            if let Some(r) = uploads.next().await {
                let (i, part, blocks) = r.map_err(part_err)?;
                done[i] = Some(part);
                digests[i] = Some(blocks);
            }
        }
    }
    while let Some(r) = uploads.next().await {
        let (i, part, blocks) = r.map_err(part_err)?;
        done[i] = Some(part);
        digests[i] = Some(blocks);
    }
    let done: Vec<PartId> = done
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| obj_err(item, "internal: a part is missing"))?;
    let digests: Vec<u128> = digests
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| obj_err(item, "internal: a part's digests are missing"))?
        .concat();
    let put = match &ctx.azure {
        // Azure takes the properties with the block list (object_store's completion sends none)
        Some(az) => {
            let tags = if ctx.opts.metadata {
                meta.tags.clone()
            } else {
                Default::default()
            };
            az.put_block_list(&item.dst, &done, &attrs, &tags).await
        }
        None => retry
            .request(&item.dst, any, |_| {
                parts_store.complete_multipart(&dst, &id, done.clone())
            })
            .await
            .map(|p| p.e_tag)
            .map_err(|e| one_line(&e)),
    };
    let dst_etag = match put {
        Ok(put) => {
            guard.0 = None;
            if let (Some(l), Some(row)) = (&ctx.ledger, slot.take()) {
                l.finish(row).await;
            }
            put
        }
        Err(e) => {
            if let Some((parts, path, id)) = guard.0.take() {
                let _ = parts.abort_multipart(&path, &id).await;
            }
            return Err(obj_err(
                item,
                format!("completing upload of {}: {e}", item.dst),
            ));
        }
    };
    Ok(Outcome {
        bytes: item.size,
        hash: Some(ContentHash::from_blocks(&digests, item.size)),
        server_side: false,
        dst_etag,
        meta: Some(meta.fingerprint()),
    })
}

/// A queue of futures that [`widening`] fills.
trait Queue<F: Future>: Stream<Item = F::Output> + Unpin {
    fn add(&mut self, f: F);
    fn queued(&self) -> usize;
}

impl<F: Future> Queue<F> for FuturesOrdered<F> {
    fn add(&mut self, f: F) {
        self.push_back(f)
    }
    fn queued(&self) -> usize {
        self.len()
    }
}

impl<F: Future> Queue<F> for FuturesUnordered<F> {
    fn add(&mut self, f: F) {
        self.push(f)
    }
    fn queued(&self) -> usize {
        self.len()
    }
}

/// `buffered` (a [`FuturesOrdered`] queue) or `buffer_unordered` (a [`FuturesUnordered`])
/// of `futures`, with the width read again each time one could start: the streams per object
/// follow [`Steer`] while an object is copied.
fn widening<S, F, Q>(
    futures: S,
    mut queue: Q,
    width: impl Fn() -> usize,
) -> impl Stream<Item = F::Output>
where
    S: Stream<Item = F> + Unpin,
    F: Future,
    Q: Queue<F>,
{
    let mut futures = futures.fuse();
    futures::stream::poll_fn(move |cx| {
        while queue.queued() < width().max(1) {
            match futures.poll_next_unpin(cx) {
                Poll::Ready(Some(f)) => queue.add(f),
                _ => break,
            }
        }
        match queue.poll_next_unpin(cx) {
            // empty: done when nothing more comes, else the source will wake us
            Poll::Ready(None) if !futures.is_terminated() => Poll::Pending,
            p => p,
        }
    })
}

/// Reads a whole object and returns its content hash (for `--verify`).
async fn hash_object(ctx: &Ctx, end: End, key: &str, size: u64) -> Result<ContentHash, SlateError> {
    let side = ctx.side(end);
    let key = match side {
        Side::Local { .. } => safe_join(&ctx.dst_root, key)?.to_string_lossy().to_string(),
        Side::Cloud { .. } => key.to_string(),
    };
    if size == 0 {
        return Ok(ContentHash::from_blocks(&[], 0));
    }
    let chunk = ctx.chunk_size_for(size);
    let parts = chunks(size, chunk);
    let (cap, _large) = ctx.streams_for(parts.len(), chunk);
    let whole = parts.len() == 1;
    let key_ref = key.as_str();
    let guard = Arc::new(Guard::default());
    let guard = &guard;
    let reads = futures::stream::iter(parts.into_iter().enumerate()).map(|(i, r)| async move {
        ctx.retry(end)
            .run(key_ref, retryable, |_| {
                let limit = ctx.opts.bwlimit.as_ref();
                read_chunk(
                    side,
                    key_ref,
                    guard,
                    r.clone(),
                    whole,
                    ChunkSink::Discard,
                    limit,
                )
            })
            .await
            .map(|o| (i, o))
    });
    let results: Vec<(usize, ChunkOut)> =
        widening(reads, FuturesUnordered::new(), || ctx.width(cap))
            .try_collect()
            .await
            .map_err(|e| SlateError::Object {
                key: key.clone(),
                detail: format!("verify read: {e}"),
            })?;
    Ok(assemble(results, size))
}

async fn verify(ctx: &Ctx, item: &Item, hash: Option<ContentHash>) -> Result<(), SlateError> {
    let Some(expected) = hash else { return Ok(()) };
    let dst_key = match &ctx.dst {
        Side::Local { .. } => item.dst.clone(),
        Side::Cloud { .. } => item.dst.clone(),
    };
    if let Side::Local { .. } = &ctx.dst {
        let p: &Path = &safe_join(&ctx.dst_root, &dst_key)?;
        let len = std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX);
        if len != item.size {
            return Err(obj_err(
                item,
                format!("verify: destination has {len} bytes, source {}", item.size),
            ));
        }
    }
    let got = hash_object(ctx, End::Dst, &dst_key, item.size).await?;
    if got != expected {
        return Err(obj_err(
            item,
            format!("verify: destination hash {got} differs from the bytes sent ({expected})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_object_exactly() {
        assert_eq!(chunks(0, 10), Vec::<Range<u64>>::new());
        assert_eq!(chunks(10, 10), vec![0..10]);
        assert_eq!(chunks(25, 10), vec![0..10, 10..20, 20..25]);
        assert_eq!(chunks(30, 10).len(), 3);
    }
}
