//! Listing one side recursively as a stream of [`Entry`] (key relative to the side's prefix,
//! size, change token, mtime), sent through a bounded channel so that the consumer (the copier,
//! or the manifest scan) runs while pages are still being fetched. A page whose request fails
//! with a transient error is asked for again (same token), so one bad answer does not end a
//! listing of millions of keys.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use object_store::list::{PaginatedListOptions, PaginatedListResult, PaginatedListStore};

use tokio::sync::mpsc;

use super::local;
use super::retry::Backoff;
use super::side::{one_line, prefix_path, Side};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use object_store::ObjectStoreExt as _;

/// One object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Key relative to the listed prefix (`/`-separated).
    pub rel: String,
    pub size: u64,
    /// The store's ETag; for local files a change token made of mtime and size.
    pub etag: Option<String>,
    pub mtime: Option<SystemTime>,
}

/// Change token of a local file: any rewrite changes its mtime (nanoseconds) or size.
pub fn local_etag(mtime: Option<SystemTime>, size: u64) -> Option<String> {
    let t = mtime?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!("{:x}.{:x}-{size:x}", t.as_secs(), t.subsec_nanos()))
}

/// Milliseconds since the epoch (what the manifest stores).
pub fn millis(t: Option<SystemTime>) -> Option<i64> {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
}

/// Lists everything under `side`'s prefix into `tx`; returns how many entries were sent.
/// A failure of the first page is classified (missing bucket, access denied) by `classify`.
pub async fn list_entries(
    side: &Side,
    tx: mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
) -> Result<u64> {
    match side {
        Side::Cloud {
            store, pager, loc, ..
        } => list_cloud(store, pager, loc, tx, classify).await,
        Side::Local { loc } => {
            let (root, follow) = (loc.local_path(), loc.copy_links);
            let url = loc.to_string();
            if !root.exists() {
                return Ok(0);
            }
            tokio::task::spawn_blocking(move || {
                let n = std::sync::atomic::AtomicU64::new(0);
                local::walk_parallel(&root, follow, LOCAL_WALKERS, &|f| {
                    n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let e = f.map(|f| Entry {
                        etag: local_etag(f.mtime, f.size),
                        rel: f.rel,
                        size: f.size,
                        mtime: f.mtime,
                    });
                    tx.blocking_send(e).is_ok()
                })
                .map(|_| n.into_inner())
            })
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

/// HEADs in flight per listing page to tell folder markers from zero-byte objects.
const MARKER_HEADS: usize = 16;

/// Lists a cloud prefix. When it holds several common prefixes ("folders"), they are listed
/// in parallel (up to [`LIST_FANOUT`] at once): a listing's pages are sequential, so one
/// listing per folder is what makes a large bucket list faster.
async fn list_cloud(
    store: &Arc<dyn object_store::ObjectStore>,
    pager: &Arc<dyn PaginatedListStore>,
    loc: &Location,
    tx: mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
) -> Result<u64> {
    let prefix = if loc.prefix.is_empty() {
        None
    } else {
        Some(prefix_path(&loc.prefix)?)
    };
    let strip = if loc.prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", loc.prefix)
    };
    // The first level and the level below each of its folders are listed page by page with a
    // delimiter: their objects stream out at once and only "folder" names are kept, so a flat
    // prefix of millions of keys is never held in memory (object_store's list_with_delimiter
    // collects every page first), and servers that walk their whole tree for a recursive
    // listing (s3s-fs, some S3-compatibles) only read the folder asked for. Deeper down,
    // listings are flat: one request per 1,000 keys however many small folders there are.
    let level = Level {
        store,
        pager,
        loc,
        strip: &strip,
        tx: &tx,
        classify,
    };
    let (mut n, folders) = level.list(prefix.as_ref(), true).await?;
    let mut subs = futures::stream::iter(folders)
        .map(|folder| {
            let level = &level;
            async move {
                let (mut n, deeper) = level.list(Some(&folder), false).await?;
                for p in deeper {
                    n += level.list_flat(&p).await?;
                }
                Ok::<u64, SlateError>(n)
            }
        })
        .buffer_unordered(LIST_FANOUT);
    while let Some(r) = subs.next().await {
        n += r?;
    }
    Ok(n)
}

/// One "folder" level of a cloud listing, with a delimiter.
struct Level<'a> {
    store: &'a Arc<dyn object_store::ObjectStore>,
    pager: &'a Arc<dyn PaginatedListStore>,
    loc: &'a Location,
    strip: &'a str,
    tx: &'a mpsc::Sender<Result<Entry>>,
    classify: fn(&Location, &object_store::Error) -> SlateError,
}

impl Level<'_> {
    /// One page of the listing, its request retried while the error is transient (never a
    /// missing bucket or denied access, which the first page reports).
    async fn page(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> std::result::Result<PaginatedListResult, object_store::Error> {
        let plain = |e: &object_store::Error| {
            matches!((self.classify)(self.loc, e), SlateError::List { .. })
        };
        Backoff::default()
            .for_store(self.loc.scheme.short())
            .request("listing", plain, |_| {
                self.pager.list_paginated(prefix, opts.clone())
            })
            .await
    }

    /// Sends the objects directly under `prefix` and returns how many, with the folders found
    /// there. `first`: a failure of the first page is classified (missing bucket, denied).
    async fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
        first: bool,
    ) -> Result<(u64, Vec<object_store::path::Path>)> {
        let with_slash = prefix.map(|p| format!("{p}/"));
        let (mut n, mut folders, mut token) = (0u64, Vec::new(), None);
        loop {
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(1000),
                page_token: token.take(),
                ..Default::default()
            };
            let page = match self.page(with_slash.as_deref(), opts).await {
                Ok(p) => p,
                Err(e) if first && n == 0 && folders.is_empty() => {
                    return Err((self.classify)(self.loc, &e))
                }
                Err(e) => {
                    return Err(SlateError::List {
                        url: self.loc.to_string(),
                        detail: one_line(&e),
                    })
                }
            };
            for meta in page.result.objects {
                // The folder's own marker (a key `folder/`, as consoles create them), which
                // object_store hands back as `folder`: not an object (see `store_path`).
                if Some(&meta.location) == prefix || meta.location.as_ref().is_empty() {
                    continue;
                }
                n += 1;
                if self.tx.send(Ok(entry(meta, self.strip))).await.is_err() {
                    return Ok((n, Vec::new()));
                }
            }
            for folder in page.result.common_prefixes {
                if folder.as_ref().is_empty() || Some(&folder) == prefix {
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
                folders.push(folder);
            }
            match page.page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok((n, folders)),
            }
        }
    }

    /// Sends everything under `prefix` (recursive, no delimiter), page after page; returns
    /// how many.
    async fn list_flat(&self, prefix: &object_store::path::Path) -> Result<u64> {
        let with_slash = format!("{prefix}/");
        let (mut n, mut token) = (0u64, None);
        loop {
            let opts = PaginatedListOptions {
                max_keys: Some(1000),
                page_token: token.take(),
                ..Default::default()
            };
            let page = match self.page(Some(&with_slash), opts).await {
                Ok(p) => p,
                Err(e) if n == 0 => return Err((self.classify)(self.loc, &e)),
                Err(e) => {
                    return Err(SlateError::List {
                        url: self.loc.to_string(),
                        detail: one_line(&e),
                    })
                }
            };
            // zero-byte keys may be folder markers: asked about together, 16 at a time
            let zero = page.result.objects.iter().filter(|m| m.size == 0);
            let markers = markers(self.store, zero.map(|m| m.location.clone()).collect()).await;
            for meta in page.result.objects {
                if markers.contains(&meta.location) {
                    continue;
                }
                n += 1;
                if self.tx.send(Ok(entry(meta, self.strip))).await.is_err() {
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
/// keeps it an object (a marker kept by mistake fails its copy, which the next run retries).
async fn markers(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn local_change_token_sees_mtime_and_size() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123);
        let a = local_etag(Some(t), 10);
        assert_eq!(a.as_deref(), Some("6553f100.7b-a"));
        assert_ne!(a, local_etag(Some(t + Duration::from_nanos(1)), 10));
        assert_ne!(a, local_etag(Some(t), 11));
        assert_eq!(local_etag(None, 1), None);
    }
}
