//! Listing one side recursively as a stream of [`Entry`] (key relative to the side's prefix,
//! size, change token, mtime) **in key order**, sent through a bounded channel so that the
//! consumer (the copier, or a reconcile walking the manifest alongside) runs while pages are
//! still being fetched. A page whose request fails
//! with a transient error is asked for again (same token), so one bad answer does not end a
//! listing of millions of keys.

use std::sync::Arc;

use futures::StreamExt;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};

use tokio::sync::mpsc;

use super::local;
use super::retry::Retry;
use super::side::{one_line, prefix_path, Side};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::core::object::{local_etag, Entry};
use crate::core::range::KeyRange;
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
            tokio::task::spawn_blocking(move || walk_local(&root, follow, &range, &tx))
                .await
                .map_err(|e| SlateError::List {
                    url,
                    detail: e.to_string(),
                })?
        }
    }
}

/// Prefixes listed at once when the source fans out into "folders".
const LIST_FANOUT: usize = 8;

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
    /// first level are listed up to [`LIST_FANOUT`] at once, each a little ahead of the one
    /// being sent.
    fn list(
        &self,
        prefix: Option<object_store::path::Path>,
        depth: u8,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> futures::future::BoxFuture<'static, Result<u64>> {
        let this = self.clone();
        Box::pin(async move {
            if depth >= 2 {
                return match &prefix {
                    Some(p) => this.list_flat(p, &tx).await,
                    None => Ok(0),
                };
            }
            let with_slash = prefix.as_ref().map(|p| format!("{p}/"));
            let offset = this.level_offset(with_slash.as_deref());
            let (mut n, mut token, mut first) = (0u64, None, true);
            loop {
                let opts = PaginatedListOptions {
                    delimiter: Some("/".into()),
                    max_keys: Some(1000),
                    page_token: token.take(),
                    offset: offset.clone(),
                    ..Default::default()
                };
                let page = match this.page(with_slash.as_deref(), opts).await {
                    Ok(p) => p,
                    Err(e) if first && depth == 0 => return Err((this.classify)(&this.loc, &e)),
                    Err(e) => {
                        return Err(SlateError::List {
                            url: this.loc.to_string(),
                            detail: one_line(&e),
                        })
                    }
                };
                first = false;
                let mut items = Vec::with_capacity(
                    page.result.objects.len() + page.result.common_prefixes.len(),
                );
                for meta in page.result.objects {
                    // The folder's own marker (a key `folder/`, as consoles create them), which
                    // object_store hands back as `folder`: not an object (see `store_path`).
                    if Some(&meta.location) == prefix.as_ref() || meta.location.as_ref().is_empty()
                    {
                        continue;
                    }
                    items.push(Item::Object(meta));
                }
                for folder in page.result.common_prefixes {
                    if folder.as_ref().is_empty() || Some(&folder) == prefix.as_ref() {
                        // keys beginning with `/` (or `folder//…`): object_store would name
                        // other keys for them
                        return Err(SlateError::List {
                            url: this.loc.to_string(),
                            detail: format!(
                                "keys under '{}/' cannot be addressed: object_store drops the empty segment, so they would be read and written as other keys",
                                folder.as_ref()
                            ),
                        });
                    }
                    items.push(Item::Folder(folder));
                }
                items.sort_by_key(Item::sort_key);
                match this.send_items(items, depth, &tx).await? {
                    Some(k) => n += k,
                    None => return Ok(n),
                }
                match page.page_token {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => return Ok(n),
                }
            }
        })
    }

    /// Sends one page's items in order, listing its folders (ahead, in parallel, at the
    /// first level); None when the receiver is gone.
    async fn send_items(
        &self,
        items: Vec<Item>,
        depth: u8,
        tx: &mpsc::Sender<Result<Entry>>,
    ) -> Result<Option<u64>> {
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
        let fanout = if depth == 0 { LIST_FANOUT } else { 1 };
        for item in items {
            match item {
                Item::Object(meta) => {
                    let rel = self.rel(meta.location.as_ref());
                    if self.range.beyond(rel) {
                        return Ok(None);
                    }
                    if self.range.before(rel) {
                        continue;
                    }
                    n += 1;
                    if tx.send(Ok(entry(meta, &self.strip))).await.is_err() {
                        return Ok(None);
                    }
                }
                Item::Folder(f) => {
                    let dir = format!("{}/", self.rel(f.as_ref()));
                    if self.range.misses_folder(&dir) {
                        if self.range.beyond(&dir) {
                            for (_, t) in ahead {
                                t.abort();
                            }
                            return Ok(None);
                        }
                        continue;
                    }
                    while ahead.len() < fanout && next < folders.len() {
                        let (ftx, frx) = mpsc::channel(AHEAD);
                        let task =
                            tokio::spawn(self.list(Some(folders[next].clone()), depth + 1, ftx));
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
                            return Ok(None);
                        }
                    }
                    n += task.await.map_err(|e| SlateError::List {
                        url: self.loc.to_string(),
                        detail: e.to_string(),
                    })??;
                }
            }
        }
        Ok(Some(n))
    }

    /// Sends everything under `prefix` (recursive, no delimiter, in the server's key order),
    /// page after page; returns how many.
    async fn list_flat(
        &self,
        prefix: &object_store::path::Path,
        tx: &mpsc::Sender<Result<Entry>>,
    ) -> Result<u64> {
        let with_slash = format!("{prefix}/");
        // a range starting inside this folder: the listing starts after its first key
        let offset = self
            .range
            .after
            .as_deref()
            .filter(|a| a.starts_with(self.rel(&with_slash)))
            .map(|a| format!("{}{a}", self.strip));
        let (mut n, mut token) = (0u64, None);
        loop {
            let opts = PaginatedListOptions {
                max_keys: Some(1000),
                page_token: token.take(),
                offset: offset.clone(),
                ..Default::default()
            };
            let page = match self.page(Some(&with_slash), opts).await {
                Ok(p) => p,
                Err(e) => {
                    return Err(SlateError::List {
                        url: self.loc.to_string(),
                        detail: one_line(&e),
                    })
                }
            };
            // zero-byte keys may be folder markers: asked about together, 16 at a time
            let zero = page.result.objects.iter().filter(|m| m.size == 0);
            let markers = markers(&self.store, zero.map(|m| m.location.clone()).collect()).await;
            for meta in page.result.objects {
                if markers.contains(&meta.location) {
                    continue;
                }
                let rel = self.rel(meta.location.as_ref());
                if self.range.beyond(rel) {
                    return Ok(n);
                }
                if self.range.before(rel) {
                    continue;
                }
                n += 1;
                if tx.send(Ok(entry(meta, &self.strip))).await.is_err() {
                    return Ok(n);
                }
            }
            match page.page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(n),
            }
        }
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
