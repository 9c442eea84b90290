//! Listing one side recursively as a stream of [`Entry`] (key relative to the side's prefix,
//! size, change token, mtime) **in key order**, sent through a bounded channel so that the
//! consumer (the copier, or a reconcile walking the manifest alongside) runs while pages are
//! still being fetched. A long sequence of pages (a flat bucket, a folder of millions of keys)
//! is cut into spans as it is listed (see [`Spread`]): each span starts after its first key
//! (`start-after`), several are listed at once, and their keys are sent in key order. A page
//! whose request fails
//! with a transient error is asked for again (same token), so one bad answer does not end a
//! listing of millions of keys.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::local;
use super::retry::Retry;
use super::side::{one_line, prefix_path, Side};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::core::object::{local_etag, Entry};
use crate::core::range::{self, KeyRange};
use object_store::ObjectStoreExt as _;

/// Lists everything under `side`'s prefix into `tx`, **in key order** (byte order of the
/// key, as S3, Azure and GCS list and as the manifest is kept), so that a reconcile can walk
/// a listing and the manifest side by side without holding either; returns how many entries
/// were sent. A failure of the first page is classified (missing bucket, access denied) by
/// `classify`. A local side's symlinks follow its location's rule (`--copy-links`).
pub async fn list_entries(
    side: &Side,
    tx: mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
) -> Result<u64> {
    list_range(side, tx, classify, &KeyRange::all()).await
}

/// [`list_entries`] for the keys of `range` only (a partition of a partitioned reconcile):
/// folders wholly outside it are not listed, a flat listing starts after its first key
/// (`start-after`), and the listing stops at the first key beyond it.
pub async fn list_range(
    side: &Side,
    tx: mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
    range: &KeyRange,
) -> Result<u64> {
    list_spread(side, tx, classify, range, Spread::default()).await
}

/// How one listing of a cloud side spreads over the store.
///
/// A sequence of pages (one folder's, or a flat bucket's) is listed from its start; when a
/// page says more follow, [`range::cuts`] extrapolates its keys to where the keys about
/// [`SPAN_PAGES`] pages on might be, and the rest of the sequence is cut there into spans,
/// each listed from its first key (`start-after`) by a task of its own, up to `spans` at once
/// across the whole listing. A span cuts again while its own pages say more follow, so a guess
/// that fell short is corrected as the listing goes. Spans are sent in key order, each
/// buffering at most [`SPAN_PAGES`] pages ahead, so memory stays bounded whatever the consumer's
/// pace. A store that ignores `start-after` (it answers from the start: Azurite ignores
/// `startFrom`) is found on a span's first page; the listing then stops cutting, and what the
/// spans list twice is filtered out.
#[derive(Debug, Clone)]
pub struct Spread {
    /// Keys asked for per page (1,000: what S3 and GCS give at most).
    pub page: usize,
    /// Spans listed at once beyond the first of each sequence (0: one sequence of pages each).
    pub spans: usize,
    /// Listing requests in flight at once.
    pub requests: usize,
    /// What the listing did.
    pub stats: Arc<SpreadStats>,
}

/// Spans listed at once by default; `SLATE_LIST_SPANS` sets it (0: one sequence of pages).
const SPANS: usize = 32;

/// The most `SLATE_LIST_SPANS` may ask for.
const MAX_SPANS: usize = 1024;

impl Default for Spread {
    fn default() -> Spread {
        Spread {
            page: 1000,
            spans: spans_from_env(),
            requests: 16,
            stats: Default::default(),
        }
    }
}

/// `SLATE_LIST_SPANS` (a number), else [`SPANS`]; a value that is not a number is said once.
fn spans_from_env() -> usize {
    static SPANS_SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPANS_SET.get_or_init(|| match std::env::var("SLATE_LIST_SPANS") {
        Err(_) => SPANS,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n <= MAX_SPANS => n,
            _ => {
                tracing::warn!("SLATE_LIST_SPANS={v:?} is not a number from 0 to {MAX_SPANS}: listing with {SPANS} spans");
                SPANS
            }
        },
    })
}

impl Spread {
    /// Every sequence of pages in one run (as slate listed before spans).
    pub fn sequential() -> Spread {
        Spread {
            spans: 0,
            ..Spread::default()
        }
    }
}

/// What a listing did: for the log and for tests.
#[derive(Debug, Default)]
pub struct SpreadStats {
    /// Pages asked for.
    pub pages: AtomicU64,
    /// Spans cut from sequences (besides each sequence's first).
    pub spans: AtomicU64,
    /// Whether the store answered a span from before its first key (it ignores `start-after`).
    pub offsets_ignored: AtomicBool,
}

/// A span is cut about this many pages long, and buffers at most that many pages ahead.
pub const SPAN_PAGES: u32 = 3;

/// Spans cut from one full page at most.
const CUTS_AT_ONCE: usize = 4;

/// [`list_range`] spread as `spread` says (a local side walks its folders in parallel and
/// takes no spans).
pub async fn list_spread(
    side: &Side,
    tx: mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
    range: &KeyRange,
    spread: Spread,
) -> Result<u64> {
    match side {
        Side::Cloud {
            store, pager, loc, ..
        } => {
            let prefix = if loc.prefix.is_empty() {
                None
            } else {
                Some(prefix_path(&loc.prefix)?)
            };
            let level = Level {
                store: store.clone(),
                pager: pager.clone(),
                loc: loc.clone(),
                strip: if loc.prefix.is_empty() {
                    String::new()
                } else {
                    format!("{}/", loc.prefix)
                },
                classify,
                range: Arc::new(range.clone()),
                shared: Arc::new(Shared {
                    requests: Arc::new(Semaphore::new(spread.requests.clamp(1, MAX_SPANS))),
                    spans: Arc::new(Semaphore::new(spread.spans.min(MAX_SPANS))),
                    ahead: Arc::new(Semaphore::new(SUBFOLDERS_AHEAD)),
                    offsets: AtomicBool::new(true),
                    spread,
                }),
            };
            level.list(prefix, 0, tx).await
        }
        Side::Local { loc } => {
            let (root, follow) = (loc.local_path(), loc.copy_links);
            let url = loc.to_string();
            if !root.exists() {
                return Ok(0);
            }
            let range = range.clone();
            producer(move || walk_local(&root, follow, &range, &tx))
                .await
                .map_err(|detail| SlateError::List { url, detail })?
        }
    }
}

/// Prefixes listed at once when the source fans out into "folders".
const LIST_FANOUT: usize = 8;

/// Runs a producer that waits on its consumer (a blocking send into a bounded channel) on a
/// thread of its own. On the runtime's blocking pool, which is capped, enough such producers
/// at once would hold every thread while their consumers wait for one (a database call), and
/// nothing would move. The error is the thread's panic, in words.
pub(crate) async fn producer<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("slate-producer".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    rx.await
        .map_err(|_| "internal: a listing thread panicked".to_string())
}

/// Folders listed at once below each first-level folder (as many as a listing's requests in
/// flight: a tree of small folders is bound by round trips, one per folder).
const SUBFOLDER_FANOUT: usize = 16;

/// Folders below the first level listed ahead at once across a whole listing, beyond the one
/// each first-level folder is sending: a bound on memory for a wide tree (each may buffer
/// [`AHEAD`] entries and its spans' pages).
const SUBFOLDERS_AHEAD: usize = 32;

/// Threads walking a local folder's top-level folders at once.
const LOCAL_WALKERS: usize = 4;

/// Entries waiting per folder listed ahead of the one being sent.
const AHEAD: usize = 1000;

/// A folder listed ahead: its entries as they come, and the task listing it (its count).
type Ahead = (
    mpsc::Receiver<Result<Entry>>,
    tokio::task::JoinHandle<Result<u64>>,
);

/// HEADs in flight per listing page to tell folder markers from zero-byte objects.
const MARKER_HEADS: usize = 16;

fn local_entry(f: local::LocalFile) -> Entry {
    Entry {
        etag: local_etag(f.mtime, f.size),
        rel: f.rel,
        size: f.size,
        mtime: f.mtime,
    }
}

/// Sends what the sorted walk of one folder found; false when the receiver is gone.
fn send_walked(w: local::Walked, prefix: &str, tx: &dyn Fn(Result<Entry>) -> bool) -> bool {
    match w {
        local::Walked::File(mut f) => {
            if !prefix.is_empty() {
                f.rel = format!("{prefix}/{}", f.rel);
            }
            tx(Ok(local_entry(f)))
        }
        local::Walked::Unreadable { rel, error, .. } => {
            let key = if prefix.is_empty() {
                rel
            } else {
                format!("{prefix}/{rel}")
            };
            tx(Err(SlateError::Object {
                key,
                detail: format!("cannot read it: {error}"),
            }))
        }
        local::Walked::BadName { path } => tx(Err(SlateError::Object {
            key: path.display().to_string(),
            detail: "file name is not valid UTF-8; keys must be".into(),
        })),
    }
}

/// Walks a local folder in key order, its top-level folders [`LOCAL_WALKERS`] at a time
/// (see [`local::walk_sorted_parallel`]); returns how many entries were sent.
fn walk_local(
    root: &std::path::Path,
    follow: bool,
    range: &KeyRange,
    tx: &mpsc::Sender<Result<Entry>>,
) -> Result<u64> {
    let mut n = 0u64;
    local::walk_sorted_parallel(root, follow, LOCAL_WALKERS, &mut |w| {
        let rel = match &w {
            local::Walked::File(f) => Some(f.rel.as_str()),
            local::Walked::Unreadable { rel, .. } => Some(rel.as_str()),
            local::Walked::BadName { .. } => None,
        };
        if let Some(rel) = rel {
            if range.before(rel) {
                return true;
            }
            if range.beyond(rel) {
                return false;
            }
        }
        n += 1;
        send_walked(w, "", &|e| tx.blocking_send(e).is_ok())
    })?;
    Ok(n)
}

/// An object or a "folder" (common prefix) of a delimiter listing, in the order keys sort.
enum Item {
    Object(object_store::ObjectMeta),
    Folder(object_store::path::Path),
}

impl Item {
    /// Where it sorts: a folder as its keys do (`a/` sorts after `a.txt`, before `a0`).
    fn sort_key(&self) -> String {
        match self {
            Item::Object(m) => m.location.as_ref().to_string(),
            Item::Folder(p) => format!("{p}/"),
        }
    }
}

/// The listing of one cloud side, shared by the tasks that list its folders.
#[derive(Clone)]
struct Level {
    store: Arc<dyn object_store::ObjectStore>,
    pager: Arc<dyn PaginatedListStore>,
    loc: Location,
    strip: String,
    classify: fn(&Location, &object_store::Error) -> SlateError,
    /// Keys outside it are not sent.
    range: Arc<KeyRange>,
    shared: Arc<Shared>,
}

/// What every sequence of one listing shares.
struct Shared {
    spread: Spread,
    /// A permit per request in flight.
    requests: Arc<Semaphore>,
    /// A permit per span cut and not yet sent on.
    spans: Arc<Semaphore>,
    /// A permit per folder below the first level listed ahead of the one being sent, across
    /// the whole listing: what bounds the entries buffered ahead (a folder's channel and its
    /// spans') whatever the width of the tree.
    ahead: Arc<Semaphore>,
    /// False once the store is found to ignore `start-after`.
    offsets: AtomicBool,
}

/// A span being listed: its keys as they come, its task (aborted when dropped), and its
/// permit among the listing's spans (None for a sequence's first).
struct SpanRun {
    rx: mpsc::Receiver<Result<Entry>>,
    task: Aborting,
    _slot: Option<OwnedSemaphorePermit>,
}

/// A task that is aborted when its handle is dropped (a listing given up ends its spans).
struct Aborting(Option<tokio::task::JoinHandle<Result<u64>>>);

impl Aborting {
    /// Waits for the task's end.
    async fn join(&mut self, url: &str) -> Result<u64> {
        let Some(task) = self.0.take() else {
            return Ok(0);
        };
        task.await.map_err(|e| SlateError::List {
            url: url.to_string(),
            detail: e.to_string(),
        })?
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

/// The spans cut from one sequence and not yet sent on, by their first key (exclusive).
#[derive(Default)]
struct Spans {
    waiting: BTreeMap<String, SpanRun>,
    /// Set when the sequence ends or is given up: no more spans are cut.
    closed: bool,
}

type Registry = Arc<Mutex<Spans>>;

/// Closes a sequence's registry when the sequence ends, however it ends: the spans still
/// waiting are aborted and their permits given back.
struct CloseOnDrop(Registry);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let waiting = match self.0.lock() {
            Ok(mut r) => {
                r.closed = true;
                std::mem::take(&mut r.waiting)
            }
            Err(_) => return,
        };
        drop(waiting);
    }
}

impl Level {
    /// A listed path relative to the side's prefix (as keys are compared).
    fn rel<'a>(&self, path: &'a str) -> &'a str {
        path.strip_prefix(self.strip.as_str()).unwrap_or(path)
    }

    /// Where a delimiter listing of the level `with_slash` (None: the side's top) starts for
    /// the range: after the name, at this level, of the object or folder the range starts in
    /// (`start-after` the bare folder name, so that the folder itself is still listed as a
    /// common prefix, whichever way a store rolls keys up); None from the level's start.
    fn level_offset(&self, with_slash: Option<&str>) -> Option<String> {
        let level = with_slash.map(|w| self.rel(w)).unwrap_or("");
        let after = self.range.after.as_deref()?;
        let rest = after.strip_prefix(level)?;
        let name = rest.split('/').next().unwrap_or(rest);
        Some(format!("{}{level}{name}", self.strip))
    }

    /// One page of the listing, its request retried while the error is transient (never a
    /// missing bucket or denied access, which the first page reports).
    async fn page(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> std::result::Result<PaginatedListResult, object_store::Error> {
        let plain = |e: &object_store::Error| {
            matches!((self.classify)(&self.loc, e), SlateError::List { .. })
        };
        let _permit = self.shared.requests.acquire().await;
        self.shared.spread.stats.pages.fetch_add(1, Relaxed);
        Retry::default()
            .for_store(self.loc.scheme.short())
            .request("listing", plain, |_| {
                self.pager.list_paginated(prefix, opts.clone())
            })
            .await
    }

    /// Sends everything under `prefix` in key order. The first level and the level below
    /// each of its folders are listed page by page with a delimiter (servers that walk their
    /// whole tree for a recursive listing then only read the folder asked for, and a flat
    /// prefix of millions of keys is never held in memory); deeper down, listings are flat
    /// (one request per 1,000 keys however many small folders there are). The folders of the
    /// first level are listed up to [`LIST_FANOUT`] at once and those below each of them up to
    /// [`SUBFOLDER_FANOUT`], each a little ahead of the one being sent; each level's or
    /// folder's sequence of pages is cut into spans ([`Spread`]).
    fn list(
        &self,
        prefix: Option<object_store::path::Path>,
        depth: u8,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> futures::future::BoxFuture<'static, Result<u64>> {
        let this = self.clone();
        Box::pin(async move {
            if depth >= 2 && prefix.is_none() {
                return Ok(0);
            }
            this.sequence(prefix, depth, tx).await
        })
    }

    /// Lists one sequence of pages (a level with a delimiter, or a folder flat) as spans,
    /// and sends their keys in key order: the first span's, then those cut from it, each
    /// when the one before has ended.
    async fn sequence(
        &self,
        prefix: Option<object_store::path::Path>,
        depth: u8,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> Result<u64> {
        let registry: Registry = Default::default();
        let _close = CloseOnDrop(registry.clone());
        let mut run = self.start_span(prefix.clone(), depth, None, None, registry.clone(), None);
        let mut n = 0u64;
        loop {
            while let Some(e) = run.rx.recv().await {
                if tx.send(e).await.is_err() {
                    return Ok(n);
                }
            }
            n += run.task.join(&self.loc.to_string()).await?;
            let next = match registry.lock() {
                Ok(mut r) => r.waiting.pop_first(),
                Err(_) => None,
            };
            match next {
                Some((_, r)) => run = r,
                None => return Ok(n),
            }
        }
    }

    /// Starts listing the span `(after, through]` of a sequence (None: from the sequence's
    /// start, as the listing's range says; to its end).
    fn start_span(
        &self,
        prefix: Option<object_store::path::Path>,
        depth: u8,
        after: Option<String>,
        through: Option<String>,
        registry: Registry,
        slot: Option<OwnedSemaphorePermit>,
    ) -> SpanRun {
        let (stx, rx) = mpsc::channel(self.shared.spread.page.max(1) * SPAN_PAGES as usize);
        let this = self.clone();
        let task = tokio::spawn(async move {
            this.span(prefix, depth, after, through, stx, registry)
                .await
        });
        SpanRun {
            rx,
            task: Aborting(Some(task)),
            _slot: slot,
        }
    }

    /// Lists one span: page after page from its first key, cutting the rest of it into
    /// spans of their own while its pages say more follow and the listing has room.
    async fn span(
        &self,
        prefix: Option<object_store::path::Path>,
        depth: u8,
        after: Option<String>,
        mut through: Option<String>,
        tx: mpsc::Sender<Result<Entry>>,
        registry: Registry,
    ) -> Result<u64> {
        let flat = depth >= 2;
        let with_slash = prefix.as_ref().map(|p| format!("{p}/"));
        let level = with_slash
            .as_deref()
            .map_or(String::new(), |w| self.rel(w).to_string());
        let offset = match &after {
            Some(a) => Some(format!("{}{a}", self.strip)),
            // a range starting inside this folder: the flat listing starts after its first key
            None if flat => self
                .range
                .after
                .as_deref()
                .filter(|a| a.starts_with(level.as_str()))
                .map(|a| format!("{}{a}", self.strip)),
            None => self.level_offset(with_slash.as_deref()),
        };
        let (mut n, mut token, mut first) = (0u64, None, true);
        loop {
            let opts = PaginatedListOptions {
                delimiter: (!flat).then(|| "/".into()),
                max_keys: Some(self.shared.spread.page),
                page_token: token.take(),
                offset: offset.clone(),
                ..Default::default()
            };
            let page = match self.page(with_slash.as_deref(), opts).await {
                Ok(p) => p,
                Err(e) if first && depth == 0 && after.is_none() => {
                    return Err((self.classify)(&self.loc, &e))
                }
                Err(e) => {
                    return Err(SlateError::List {
                        url: self.loc.to_string(),
                        detail: one_line(&e),
                    })
                }
            };
            let more = page.page_token.filter(|t| !t.is_empty());
            let items = if flat {
                self.flat_items(page.result.objects).await
            } else {
                self.level_items(&prefix, page.result)?
            };
            let keys: Vec<String> = items
                .iter()
                .map(|i| self.rel(&i.sort_key()).to_string())
                .collect();
            if first {
                if let (Some(a), Some(k)) = (&after, keys.first()) {
                    if k <= a {
                        // the store answered from before the span: it ignores `start-after`
                        if self.shared.offsets.swap(false, Relaxed) {
                            tracing::info!(url = %self.loc, "the store ignores start-after: this listing goes on without cutting spans");
                        }
                        self.shared
                            .spread
                            .stats
                            .offsets_ignored
                            .store(true, Relaxed);
                    }
                }
            }
            first = false;
            if more.is_some() && self.shared.offsets.load(Relaxed) {
                let level = (!flat).then_some(level.as_str());
                self.cut(&prefix, depth, &keys, level, &mut through, &registry);
            }
            // this span's own keys: after its start, through its (perhaps new) end
            let bounds = KeyRange {
                after: after.clone(),
                through: through.clone(),
            };
            let mut ended = false;
            let mut own = Vec::with_capacity(items.len());
            for (item, key) in items.into_iter().zip(&keys) {
                if bounds.beyond(key) {
                    ended = true;
                    break;
                }
                if !bounds.before(key) {
                    own.push(item);
                }
            }
            let (sent, go_on) = if flat {
                self.send_objects(own, &tx).await
            } else {
                self.send_items(own, depth, &tx).await?
            };
            n += sent;
            if !go_on {
                return Ok(n);
            }
            match more {
                Some(t) if !ended => token = Some(t),
                _ => return Ok(n),
            }
        }
    }

    /// Cuts the rest of a span (after the page whose sorted keys are `keys`, through
    /// `through`) into spans of their own, as many as the listing has room for: the span
    /// keeps what comes before the first cut.
    fn cut(
        &self,
        prefix: &Option<object_store::path::Path>,
        depth: u8,
        keys: &[String],
        level: Option<&str>,
        through: &mut Option<String>,
        registry: &Registry,
    ) {
        let mut slots = Vec::new();
        while slots.len() < CUTS_AT_ONCE {
            match self.shared.spans.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        if slots.is_empty() {
            return;
        }
        let below = through.as_deref().or(self.range.through.as_deref());
        let page: Vec<&str> = keys.iter().map(String::as_str).collect();
        let cuts = range::cuts(&page, SPAN_PAGES, slots.len(), below, level);
        if cuts.is_empty() {
            return;
        }
        let Ok(mut reg) = registry.lock() else {
            return;
        };
        if reg.closed {
            return;
        }
        let end = through.take();
        for (i, cut) in cuts.iter().enumerate() {
            let until = cuts.get(i + 1).cloned().or_else(|| end.clone());
            let slot = slots.pop();
            let run = self.start_span(
                prefix.clone(),
                depth,
                Some(cut.clone()),
                until,
                registry.clone(),
                slot,
            );
            reg.waiting.insert(cut.clone(), run);
        }
        self.shared
            .spread
            .stats
            .spans
            .fetch_add(cuts.len() as u64, Relaxed);
        *through = cuts.into_iter().next();
    }

    /// A delimiter page's objects and folders, in key order (the level's own marker left out).
    fn level_items(
        &self,
        prefix: &Option<object_store::path::Path>,
        result: object_store::ListResult,
    ) -> Result<Vec<Item>> {
        let mut items = Vec::with_capacity(result.objects.len() + result.common_prefixes.len());
        for meta in result.objects {
            // The folder's own marker (a key `folder/`, as consoles create them), which
            // object_store hands back as `folder`: not an object (see `store_path`).
            if Some(&meta.location) == prefix.as_ref() || meta.location.as_ref().is_empty() {
                continue;
            }
            items.push(Item::Object(meta));
        }
        for folder in result.common_prefixes {
            if folder.as_ref().is_empty() || Some(&folder) == prefix.as_ref() {
                // keys beginning with `/` (or `folder//…`): object_store would name
                // other keys for them
                return Err(SlateError::List {
                    url: self.loc.to_string(),
                    detail: format!(
                        "keys under '{}/' cannot be addressed: object_store drops the empty segment, so they would be read and written as other keys",
                        folder.as_ref()
                    ),
                });
            }
            items.push(Item::Folder(folder));
        }
        items.sort_by_key(Item::sort_key);
        Ok(items)
    }

    /// A flat page's objects, in key order, without folder markers (zero-byte keys are asked
    /// about together, [`MARKER_HEADS`] at a time).
    async fn flat_items(&self, objects: Vec<object_store::ObjectMeta>) -> Vec<Item> {
        let zero = objects.iter().filter(|m| m.size == 0);
        let markers = markers(&self.store, zero.map(|m| m.location.clone()).collect()).await;
        let mut items: Vec<Item> = objects
            .into_iter()
            .filter(|m| !markers.contains(&m.location))
            .map(Item::Object)
            .collect();
        items.sort_by_key(Item::sort_key);
        items
    }

    /// Sends a flat page's objects within the listing's range: how many, and false when the
    /// range has ended or the receiver is gone.
    async fn send_objects(
        &self,
        items: Vec<Item>,
        tx: &mpsc::Sender<Result<Entry>>,
    ) -> (u64, bool) {
        let mut n = 0u64;
        for item in items {
            let Item::Object(meta) = item else { continue };
            let rel = self.rel(meta.location.as_ref());
            if self.range.beyond(rel) {
                return (n, false);
            }
            if self.range.before(rel) {
                continue;
            }
            if tx.send(Ok(entry(meta, &self.strip))).await.is_err() {
                return (n, false);
            }
            n += 1;
        }
        (n, true)
    }

    /// Sends one page's items in order, listing its folders (ahead, in parallel, at the
    /// first two levels): how many, and false when the range has ended or the receiver is gone.
    async fn send_items(
        &self,
        items: Vec<Item>,
        depth: u8,
        tx: &mpsc::Sender<Result<Entry>>,
    ) -> Result<(u64, bool)> {
        let mut n = 0u64;
        let mut ahead: std::collections::VecDeque<Ahead> = Default::default();
        let folders: Vec<object_store::path::Path> = items
            .iter()
            .filter_map(|i| match i {
                Item::Folder(p)
                    if !self
                        .range
                        .misses_folder(&format!("{}/", self.rel(p.as_ref()))) =>
                {
                    Some(p.clone())
                }
                _ => None,
            })
            .collect();
        let mut next = 0usize;
        // the first level's folders, and the folders below each of them (a tree of many small
        // folders: one at a time, each a round trip of its own, listed 256 keys a round trip
        // where a flat prefix lists 1,000 per request in spans), are listed ahead in parallel;
        // the requests in flight stay bounded by `Spread::requests`
        let fanout = match depth {
            0 => LIST_FANOUT,
            1 => SUBFOLDER_FANOUT,
            _ => 1,
        };
        for item in items {
            match item {
                Item::Object(meta) => {
                    let rel = self.rel(meta.location.as_ref());
                    if self.range.beyond(rel) {
                        return Ok((n, false));
                    }
                    if self.range.before(rel) {
                        continue;
                    }
                    n += 1;
                    if tx.send(Ok(entry(meta, &self.strip))).await.is_err() {
                        return Ok((n, false));
                    }
                }
                Item::Folder(f) => {
                    let dir = format!("{}/", self.rel(f.as_ref()));
                    if self.range.misses_folder(&dir) {
                        if self.range.beyond(&dir) {
                            for (_, t) in ahead {
                                t.abort();
                            }
                            return Ok((n, false));
                        }
                        continue;
                    }
                    while ahead.len() < fanout && next < folders.len() {
                        // below the first level, one folder at a time is always listed; more
                        // only while the listing's permits for folders ahead last
                        let permit = if depth >= 1 && !ahead.is_empty() {
                            match self.shared.ahead.clone().try_acquire_owned() {
                                Ok(p) => Some(p),
                                Err(_) => break,
                            }
                        } else {
                            None
                        };
                        let (ftx, frx) = mpsc::channel(AHEAD);
                        let listing = self.list(Some(folders[next].clone()), depth + 1, ftx);
                        let task = tokio::spawn(async move {
                            let _permit = permit;
                            listing.await
                        });
                        ahead.push_back((frx, task));
                        next += 1;
                    }
                    let Some((mut rx, task)) = ahead.pop_front() else {
                        continue;
                    };
                    while let Some(e) = rx.recv().await {
                        if tx.send(e).await.is_err() {
                            for (_, t) in ahead {
                                t.abort();
                            }
                            return Ok((n, false));
                        }
                    }
                    n += task.await.map_err(|e| SlateError::List {
                        url: self.loc.to_string(),
                        detail: e.to_string(),
                    })??;
                }
            }
        }
        Ok((n, true))
    }
}

/// Which of the zero-byte `paths` of a flat listing are folder markers: object_store lists the
/// key `a/b/` as `a/b`, and only a HEAD tells them apart (`a/b` itself is not found). One HEAD
/// per zero-byte object, [`MARKER_HEADS`] at once, not retried: any answer but "not found"
/// keeps it an object (a marker kept by mistake is a key `a/b` listed before the keys under
/// `a/b/`, which its probe later finds gone).
pub(crate) async fn markers(
    store: &Arc<dyn object_store::ObjectStore>,
    paths: Vec<object_store::path::Path>,
) -> std::collections::HashSet<object_store::path::Path> {
    let heads = paths.into_iter().map(|p| {
        let store = store.clone();
        async move {
            let gone = matches!(
                store.head(&p).await,
                Err(object_store::Error::NotFound { .. })
            );
            gone.then_some(p)
        }
    });
    futures::stream::iter(heads)
        .buffer_unordered(MARKER_HEADS)
        .filter_map(futures::future::ready)
        .collect()
        .await
}

fn entry(meta: object_store::ObjectMeta, strip: &str) -> Entry {
    let key = meta.location.as_ref();
    Entry {
        rel: key.strip_prefix(strip).unwrap_or(key).to_string(),
        size: meta.size,
        etag: meta.e_tag,
        mtime: Some(meta.last_modified.into()),
    }
}
