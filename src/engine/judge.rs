//! Decides the keys the planner left undecided ([`Action::CheckTimes`],
//! [`Action::CheckContent`]): keys the manifest cannot vouch for (a first reconcile against a
//! destination filled by rclone, by hand, by an older slate) whose sizes are equal. It looks
//! at the objects: the modification time each side records (a HEAD of a cloud side: rclone's
//! and slate's `mtime`, else the last-modified), or, with `--checksum`, the content of both
//! (read and hashed with xxh3). The decision itself is the planner's ([`plan::by_times`]).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use object_store::GetOptions;

use super::plan::{self, Action, Row, Rule};
use crate::copy::bwlimit::BwLimit;
use crate::copy::hash::ContentHash;
use crate::copy::read::{read_chunk, ChunkSink};
use crate::copy::transfer::chunks;
use crate::core::meta::Meta;
use crate::core::object::millis;
use crate::state::blocking;
use crate::state::manifest::{self, Manifest};
use crate::stores::retry::{ChunkError, Retry};
use crate::stores::s3copy::S3CrossBucket;
use crate::stores::s3tags::tag_count;
use crate::stores::side::{store_path, Side};

/// How many undecided keys are looked at at once.
pub const AT_ONCE: usize = 32;

/// The chunk in which content is read for `--checksum`.
const CHUNK: u64 = 64 << 20;

/// What decides undecided keys of one pair.
pub struct Judge {
    pub src: Side,
    pub dst: Side,
    pub rule: Rule,
    /// The manifest and the pair: the recorded metadata fingerprints.
    pub db: Arc<Manifest>,
    pub pair_id: i64,
    /// Metadata is carried (not `--no-metadata`): metadata-only changes count.
    pub metadata: bool,
    /// S3 source whose tags travel (see `Ctx::wants_tags`): their reader.
    pub src_tags: Option<Arc<S3CrossBucket>>,
    /// `--bwlimit`: what the `--checksum` reads wait for.
    pub limit: Option<Arc<BwLimit>>,
}

/// A side's view of one object's time: the one it records, and its last-modified.
struct Times {
    recorded: Option<i64>,
    modified: Option<i64>,
}

impl Judge {
    /// The final action for `row`, planned as `a`: `a` itself unless it is undecided. A look
    /// that fails decides "copy": never equal on a guess, and copying again loses nothing.
    pub async fn decide(&self, row: &Row, a: Action) -> Action {
        let r = match a {
            Action::CheckTimes => self.by_times(row).await,
            Action::CheckContent => self.by_content(row).await,
            Action::CheckMeta => self.by_meta(row).await,
            a => return a,
        };
        r.unwrap_or_else(|e| {
            tracing::info!(key = %row.key, error = %e, "could not compare; copying it");
            Action::CopyChanged
        })
    }

    async fn by_times(&self, row: &Row) -> Result<Action, String> {
        let src = times(&self.src, row, true).await?;
        let dst = times(&self.dst, row, false).await?;
        // the source's time is the one it records (rclone's `mtime`), else its last change as
        // listed (ms, what a copy writes as `mtime`; a HEAD's is whole seconds)
        let listed = row.src.as_ref().and_then(|s| s.mtime_ms);
        let src_time = src.recorded.or(listed).or(src.modified);
        Ok(plan::by_times(src_time, dst.recorded, dst.modified))
    }

    /// Same bytes, newer last-modified: the metadata now against the fingerprint recorded
    /// when slate last copied (or updated) the key. Without a recorded fingerprint (a row of
    /// an older slate) the metadata is taken as changed: updating it loses nothing.
    async fn by_meta(&self, row: &Row) -> Result<Action, String> {
        if !self.metadata {
            // --no-metadata: only the bytes are kept equal
            return Ok(Action::EqualTouched);
        }
        let listed = row.src.as_ref().and_then(|s| s.mtime_ms);
        let now = meta_now(&self.src, &row.key, listed, self.src_tags.as_deref()).await?;
        let (db, id, k) = (self.db.clone(), self.pair_id, row.key.clone());
        let recorded = blocking(move || db.meta_of(id, manifest::Side::Src, &k))
            .await
            .map_err(|e| e.to_string())?;
        Ok(if recorded.as_deref() == Some(now.fingerprint().as_str()) {
            Action::EqualTouched
        } else {
            Action::MetaChanged
        })
    }

    async fn by_content(&self, row: &Row) -> Result<Action, String> {
        let size = row.src.as_ref().map(|s| s.size).unwrap_or(0);
        let limit = self.limit.as_ref();
        let a = content(&self.src, &row.key, size, limit).await?;
        let b = content(&self.dst, &row.key, size, limit).await?;
        Ok(if a == b {
            Action::EqualContent
        } else {
            Action::CopyChanged
        })
    }
}

/// What the object `rel` of `side` carries now: a cloud object's properties (one HEAD), its
/// recorded modification time or else its last-modified; a local file's type by extension and
/// mtime (`listed_ms`).
pub async fn meta_now(
    side: &Side,
    rel: &str,
    listed_ms: Option<i64>,
    tags: Option<&S3CrossBucket>,
) -> Result<Meta, String> {
    let listed = listed_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
    match side {
        Side::Local { .. } => Ok(Meta::of_local_file(rel, listed)),
        Side::Cloud { store, loc, .. } => {
            let key = loc.key_for(rel);
            let path = store_path(&key).map_err(|e| e.to_string())?;
            let opts = GetOptions {
                head: true,
                ..Default::default()
            };
            let res = Retry::default()
                .for_store(loc.scheme.short())
                .request(&key, |_| true, |_| store.get_opts(&path, opts.clone()))
                .await
                .map_err(|e| format!("HEAD {key}: {e}"))?;
            let mut m = Meta::from_attributes(loc.scheme, &res.attributes)
                .or_listed_time(Some(res.meta.last_modified.into()));
            if let (Some(t), true) = (tags, tag_count(&res) > 0) {
                m.tags = t.get_tagging(&key).await?.into_iter().collect();
            }
            Ok(m)
        }
    }
}

/// The full key (cloud) or absolute path (local) of `rel` on `side`.
fn full_key(side: &Side, rel: &str) -> String {
    match side {
        Side::Cloud { loc, .. } => loc.key_for(rel),
        Side::Local { loc } => loc.local_path().join(rel).to_string_lossy().to_string(),
    }
}

/// The times of `row`'s object on `side`: a local file's mtime is what it records; a cloud
/// object's recorded time needs a HEAD (listings carry no user metadata).
async fn times(side: &Side, row: &Row, is_src: bool) -> Result<Times, String> {
    let listed = if is_src { &row.src } else { &row.dst };
    let listed_ms = listed.as_ref().and_then(|s| s.mtime_ms);
    match side {
        Side::Local { .. } => Ok(Times {
            recorded: listed_ms,
            modified: listed_ms,
        }),
        Side::Cloud { .. } => {
            // the HEAD's time stands in where the object records none (`listed_time`)
            let m = meta_now(side, &row.key, None, None).await?;
            Ok(if m.listed_time {
                Times {
                    recorded: None,
                    modified: millis(m.mtime).or(listed_ms),
                }
            } else {
                Times {
                    recorded: millis(m.mtime),
                    modified: listed_ms,
                }
            })
        }
    }
}

/// The content hash of `rel` on `side`, read in chunks.
async fn content(
    side: &Side,
    rel: &str,
    size: u64,
    limit: Option<&Arc<BwLimit>>,
) -> Result<ContentHash, String> {
    let key = full_key(side, rel);
    if size == 0 {
        return Ok(ContentHash::from_blocks(&[], 0));
    }
    let parts = chunks(size, CHUNK);
    let whole = parts.len() == 1;
    let store_name = side.location().scheme.short();
    let mut digests = Vec::new();
    let guard = std::sync::Arc::new(crate::copy::read::Guard::default());
    let outs: Vec<_> = futures::stream::iter(parts)
        .map(|r| {
            let key = key.as_str();
            let guard = &guard;
            async move {
                Retry::default()
                    .for_store(store_name)
                    .run(
                        key,
                        |e| matches!(e, ChunkError::Retry(_)),
                        |_| {
                            read_chunk(
                                side,
                                key,
                                guard,
                                r.clone(),
                                whole,
                                ChunkSink::Discard,
                                limit,
                            )
                        },
                    )
                    .await
            }
        })
        .buffered(4)
        .try_collect()
        .await
        .map_err(|e| format!("reading {key}: {e}"))?;
    for o in outs {
        digests.extend(o.digests);
    }
    Ok(ContentHash::from_blocks(&digests, size))
}
