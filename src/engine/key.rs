//! The one path that reconciles a key, used by `sync --once`, the daemon and jobs alike:
//! **probe** the source now (HEAD, or a stat that obeys the symlink rule), **decide** with the
//! manifest ([`super::plan`]), **act** (copy, or delete only after the source said "not found"
//! now), and **record** what both sides hold. `--once` comes in with what its listing saw a
//! moment ago (a listing is a probe of every key at once); the daemon comes in with a key
//! name and probes it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::{GetOptions, ObjectStoreExt};

use super::{judge, plan};
use crate::copy::transfer::{copy_one, Ctx, End, Outcome};
use crate::copy::{self};
use crate::core::error::{Result, SlateError};
use crate::core::filter::Filter;
use crate::core::location::{Location, Scheme};
use crate::core::meta::Meta;
use crate::core::object::{local_etag, millis, Entry};
use crate::state::blocking;
use crate::state::manifest::{self, Manifest, Record, State};
use crate::stores::local::safe_join;
use crate::stores::local::{self as local_store, Probe};
use crate::stores::s3copy::{Replaced, MAX_COPY_OBJECT};
use crate::stores::s3tags::tag_count;
use crate::stores::side::{one_line, store_path, Side};

/// What reconciling one key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Copied `bytes` to the destination.
    Copied {
        bytes: u64,
    },
    Deleted,
    /// Source and destination already agree (a duplicate or stale event).
    Unchanged,
    /// Only the metadata changed: the destination's was updated, its bytes stayed.
    MetaUpdated,
    /// Not at the source and not at the destination: nothing to delete.
    AlreadyGone,
    /// The event is older than (or the same as) one already applied to the key: skipped
    /// without asking the source.
    Stale,
    /// The pair's filter leaves the key out (`--include`/`--exclude`, or older than
    /// `--max-age`): neither copied nor deleted.
    Filtered,
    /// A delete the pair's delete brake holds for an operator (`fresh`: this delete engaged
    /// the brake).
    Held {
        fresh: bool,
    },
}

impl Applied {
    /// The outcome's name in the `applies` table.
    pub fn name(&self) -> &'static str {
        match self {
            Applied::Copied { .. } => "copied",
            Applied::Deleted => "deleted",
            Applied::Unchanged => "unchanged",
            Applied::MetaUpdated => "metadata",
            Applied::AlreadyGone => "already-gone",
            Applied::Stale => "stale",
            Applied::Filtered => "filtered",
            Applied::Held { .. } => "held",
        }
    }
}

/// A pair's reconcile of single keys: the copier's shared state and the manifest.
pub struct Engine {
    pub db: Arc<Manifest>,
    pub pair_id: i64,
    pub ctx: Arc<Ctx>,
    pub dst_loc: Location,
    /// The pair's filter: keys it leaves out are never copied or deleted by a reconcile of
    /// single keys (the compare of `--once` filters its listings with the same one).
    pub filter: Filter,
    /// The daemon's delete brake (None: deletes are applied as they come, as `--once` does
    /// after its own `--max-delete` check).
    pub brake: Option<crate::core::brake::BrakePolicy>,
    /// `--backup-dir`: what a delete or an overwrite would remove goes there first.
    pub backup: Option<super::backup::Backup>,
    /// `--no-delete`: what the source deletes stays at the destination (a canary excepted).
    pub no_delete: bool,
}

/// The manifest's state of a listed or probed entry.
pub fn state_of(e: &Entry) -> State {
    State {
        size: e.size,
        etag: e.etag.clone(),
        mtime_ms: millis(e.mtime),
    }
}

/// Whether the source's state `again` differs from the `tried` one that a copy started from.
fn moved(tried: &Entry, again: Option<&Entry>) -> bool {
    match again {
        None => true,
        Some(a) => a.size != tried.size || a.etag != tried.etag || a.mtime != tried.mtime,
    }
}

impl Engine {
    pub fn new(db: Arc<Manifest>, pair_id: i64, ctx: Arc<Ctx>, dst_loc: Location) -> Engine {
        Engine {
            db,
            pair_id,
            ctx,
            dst_loc,
            filter: Filter::default(),
            brake: None,
            backup: None,
            no_delete: false,
        }
    }

    /// The same engine, keeping at the destination what the source deletes.
    pub fn with_no_delete(self, no_delete: bool) -> Engine {
        Engine { no_delete, ..self }
    }

    /// The same engine, keeping what deletes and overwrites would remove in `backup`.
    pub fn with_backup(self, backup: Option<super::backup::Backup>) -> Engine {
        Engine { backup, ..self }
    }

    /// The same engine, its deletes under `policy`'s brake.
    pub fn with_brake(self, policy: crate::core::brake::BrakePolicy) -> Engine {
        Engine {
            brake: (!policy.is_off()).then_some(policy),
            ..self
        }
    }

    /// Asks the brake to admit one delete: None when there is no brake or the delete was
    /// released by an operator, Some(Err(held)) when held, Some(Ok(id)) when admitted.
    async fn admit_delete(&self, released: bool) -> Result<Option<std::result::Result<i64, bool>>> {
        let Some(policy) = self.brake.clone().filter(|_| !released) else {
            return Ok(None);
        };
        let (db, id) = (self.db.clone(), self.pair_id);
        let admitted = blocking(move || {
            let b = crate::state::brake::Brakes::new(&db);
            match b.admit(id, &policy, None)? {
                // a new window: its base is what the source holds now (read outside the
                // write transaction)
                crate::state::brake::Admit::NeedBase => {
                    let base = b.source_objects(id)?;
                    b.admit(id, &policy, Some(base))
                }
                a => Ok(a),
            }
        })
        .await?;
        Ok(Some(match admitted {
            crate::state::brake::Admit::Yes { id } => Ok(id),
            crate::state::brake::Admit::Held { fresh } => Err(fresh),
            crate::state::brake::Admit::NeedBase => Err(false),
        }))
    }

    /// The same engine, leaving out what `filter` leaves out.
    pub fn with_filter(self, filter: Filter) -> Engine {
        Engine { filter, ..self }
    }

    /// The source's state of `key` now, or None when it has no such object (404 now; for a
    /// local source also a symlink that is not followed, or one that leads out of the root).
    /// The HEAD is sent again while its error is transient; any other error is an error,
    /// never a "gone".
    pub async fn probe(&self, key: &str) -> Result<Option<Entry>> {
        Ok(self.probe_meta(key).await?.map(|(e, _)| e))
    }

    /// [`Engine::probe`], with what a cloud object carries (the same HEAD brings it; None for
    /// a local file, whose metadata is its name and mtime).
    async fn probe_meta(&self, key: &str) -> Result<Option<(Entry, Option<Meta>)>> {
        match &self.ctx.src {
            Side::Cloud { store, loc, .. } => {
                // the full key: its prefix is what a throttle paces (as the copier's requests)
                let full = loc.key_for(key);
                let path = store_path(&full)?;
                let opts = GetOptions {
                    head: true,
                    ..Default::default()
                };
                // a probe takes no slot under the limit: it is no part of its measure
                let head = self
                    .ctx
                    .retry(End::Src)
                    .outside()
                    .request(&full, |_| true, |_| store.get_opts(&path, opts.clone()))
                    .await;
                match head {
                    Ok(res) => {
                        let mtime: SystemTime = res.meta.last_modified.into();
                        let mut meta = Meta::from_attributes(loc.scheme, &res.attributes)
                            .or_listed_time(Some(mtime));
                        if let (Some(t), true) = (self.ctx.wants_tags(), tag_count(&res) > 0) {
                            let k = loc.key_for(key);
                            meta.tags = t
                                .get_tagging(&k)
                                .await
                                .map_err(|e| SlateError::Object {
                                    key: key.to_string(),
                                    detail: format!("reading tags: {e}"),
                                })?
                                .into_iter()
                                .collect();
                        }
                        Ok(Some((
                            Entry {
                                rel: key.to_string(),
                                size: res.meta.size,
                                etag: res.meta.e_tag,
                                mtime: Some(mtime),
                            },
                            Some(meta),
                        )))
                    }
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(SlateError::Object {
                        key: key.to_string(),
                        detail: format!("reading the source: {}", one_line(&e)),
                    }),
                }
            }
            Side::Local { loc } => {
                let (root, k, follow) =
                    (loc.local_path(), key.to_string(), self.ctx.opts.copy_links);
                let probed = blocking(move || local_store::probe(&root, &k, follow)).await?;
                Ok(match probed {
                    Probe::File(f) => Some((
                        Entry {
                            etag: local_etag(f.mtime, f.size),
                            rel: f.rel,
                            size: f.size,
                            mtime: f.mtime,
                        },
                        None,
                    )),
                    Probe::Absent => None,
                })
            }
        }
    }

    /// Copies `e` (the source's state a moment ago) and returns what to record for both sides.
    /// Does not record: `--once` records in batches, the daemon at once.
    pub async fn copy(&self, e: &Entry) -> Result<(Outcome, [Record; 2])> {
        if let Some(b) = &self.backup {
            // an overwrite: what the destination holds now is kept first (a canary's is not)
            if !crate::core::canary::is_canary(&e.rel) {
                b.take(&self.ctx, &self.dst_loc, &e.rel).await?;
            }
        }
        let item = copy::item_for(&self.ctx.src, &self.dst_loc, e.clone());
        let out = copy_one(&self.ctx, &item).await?;
        let hash = out.hash.map(|h| h.to_string());
        let recs = [
            Record {
                side: manifest::Side::Src,
                key: e.rel.clone(),
                state: state_of(e),
                hash: hash.clone(),
                equal_by: None,
                meta: out.meta.clone(),
            },
            Record {
                side: manifest::Side::Dst,
                key: e.rel.clone(),
                state: State {
                    size: out.bytes,
                    etag: out.dst_etag.clone(),
                    mtime_ms: millis(Some(SystemTime::now())),
                },
                hash,
                equal_by: Some("copied"),
                meta: out.meta.clone(),
            },
        ];
        Ok((out, recs))
    }

    /// A source whose bytes are the recorded ones but whose last-modified moved: compares its
    /// metadata now with the fingerprint recorded at the last copy, and when they differ
    /// brings the destination's up to date without moving the bytes (S3: CopyObject onto
    /// itself, REPLACE; Azure: Set Blob Properties and Metadata; GCS: objects.patch; a local
    /// file: its mtime). S3 objects over 5 GiB are copied again. Returns whether anything
    /// changed, and what to record.
    pub async fn update_meta(&self, e: &Entry, known: Option<Meta>) -> Result<(bool, Vec<Record>)> {
        let obj = |detail: String| SlateError::Object {
            key: e.rel.clone(),
            detail,
        };
        let meta = match known {
            Some(m) => m,
            None => judge::meta_now(
                &self.ctx.src,
                &e.rel,
                millis(e.mtime),
                self.ctx.wants_tags().map(|t| t.as_ref()),
            )
            .await
            .map_err(obj)?,
        };
        let fp = meta.fingerprint();
        let (db, id, k) = (self.db.clone(), self.pair_id, e.rel.clone());
        let (recorded, m_dst) = blocking(move || {
            Ok((
                db.meta_of(id, manifest::Side::Src, &k)?,
                db.get(id, manifest::Side::Dst, &k)?,
            ))
        })
        .await?;
        let src_rec = Record {
            side: manifest::Side::Src,
            key: e.rel.clone(),
            state: state_of(e),
            hash: None,
            equal_by: None,
            meta: Some(fp.clone()),
        };
        if recorded.as_deref() == Some(fp.as_str()) {
            return Ok((false, vec![src_rec]));
        }
        let item = copy::item_for(&self.ctx.src, &self.dst_loc, e.clone());
        let dst_etag = match &self.ctx.dst {
            Side::Cloud { loc, .. } => {
                let mut copy_again = match loc.scheme {
                    // S3 replaces metadata by a CopyObject onto itself: not where asked
                    // for no store-side copies (the server may lack CopyObject)
                    Scheme::S3 => {
                        e.size > MAX_COPY_OBJECT
                            || self.ctx.s3_self.is_none()
                            || !self.ctx.opts.server_side_copy
                    }
                    Scheme::Azure => self.ctx.azure.is_none(),
                    Scheme::Gcs => self.ctx.gcs_patch.is_none(),
                    Scheme::Local => true,
                };
                let attrs = self.ctx.dst_attributes(&item, &meta)?;
                // the source's tags where they travel; elsewhere the replica's stay
                let tags = self.ctx.wants_tags().map(|_| meta.tags.clone());
                let mut done: std::result::Result<Option<String>, String> = Ok(None);
                if !copy_again {
                    done = match (&self.ctx.s3_self, &self.ctx.azure, &self.ctx.gcs_patch) {
                        (Some(s3), _, _) => {
                            match s3.replace_metadata(&item.dst, &attrs, tags.as_ref()).await {
                                Ok(Replaced::Done(etag)) => Ok(etag),
                                Ok(Replaced::Archived) => {
                                    copy_again = true;
                                    Ok(None)
                                }
                                Err(e) => Err(e),
                            }
                        }
                        (_, Some(az), _) => az.set_all(&item.dst, &attrs, tags.as_ref()).await,
                        // the bytes, and so the ETag that listings show (their MD5), stay
                        (_, _, Some(gs)) => gs.patch(&item.dst, &attrs).await.map(|()| None),
                        _ => Err("no way to update metadata in place".into()),
                    };
                }
                if copy_again {
                    let (_, recs) = self.copy(e).await?;
                    return Ok((true, recs.to_vec()));
                }
                done.map_err(|d| obj(format!("updating metadata of {}: {d}", item.dst)))?
                    .or_else(|| m_dst.as_ref().and_then(|d| d.etag.clone()))
            }
            Side::Local { .. } => {
                let path = safe_join(&self.ctx.dst_root, &item.dst)?;
                let mtime = meta.mtime;
                blocking(move || {
                    use std::os::unix::fs::OpenOptionsExt;
                    let f = std::fs::File::options()
                        .write(true)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&path)
                        .map_err(|e| SlateError::Object {
                            key: path.display().to_string(),
                            detail: format!("setting the modification time: {e}"),
                        })?;
                    if let Some(t) = mtime {
                        f.set_modified(t).map_err(|e| SlateError::Object {
                            key: path.display().to_string(),
                            detail: format!("setting the modification time: {e}"),
                        })?;
                    }
                    let m = f.metadata().map_err(|e| SlateError::Object {
                        key: path.display().to_string(),
                        detail: e.to_string(),
                    })?;
                    Ok(local_etag(m.modified().ok(), m.len()))
                })
                .await?
            }
        };
        let dst_rec = Record {
            side: manifest::Side::Dst,
            key: e.rel.clone(),
            state: State {
                size: e.size,
                etag: dst_etag,
                mtime_ms: millis(Some(SystemTime::now())),
            },
            hash: None,
            equal_by: Some("copied"),
            meta: Some(fp),
        };
        Ok((true, vec![src_rec, dst_rec]))
    }

    /// Deletes `key` at the destination; false when it was not there.
    /// Whether the destination holds `key`, for a store whose DELETE cannot tell (S3: 204
    /// either way); true without asking elsewhere (their DELETE says "not found").
    async fn dst_exists(&self, key: &str) -> Result<bool> {
        let Side::Cloud { store, .. } = &self.ctx.dst else {
            return Ok(true);
        };
        if self.dst_loc.scheme != crate::core::location::Scheme::S3 {
            return Ok(true);
        }
        let full = self.dst_loc.key_for(key);
        let path = store_path(&full)?;
        let head = self
            .ctx
            .retry(End::Dst)
            .outside()
            .request(&full, |_| true, |_| store.head(&path))
            .await;
        match head {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(SlateError::Object {
                key: key.to_string(),
                detail: format!("looking at the destination: {}", one_line(&e)),
            }),
        }
    }

    pub async fn delete_at_destination(&self, key: &str) -> Result<bool> {
        let backed_up = match &self.backup {
            // kept first; a backup that fails stops the delete (the key is retried); a
            // canary is not kept
            Some(b) if !crate::core::canary::is_canary(key) => {
                b.take(&self.ctx, &self.dst_loc, key).await?
            }
            _ => false,
        };
        let deleted = self.delete_only(key).await?;
        Ok(deleted || backed_up)
    }

    async fn delete_only(&self, key: &str) -> Result<bool> {
        let err = |detail: String| SlateError::Object {
            key: key.to_string(),
            detail,
        };
        match &self.ctx.dst {
            Side::Cloud { store, .. } => {
                let full = self.dst_loc.key_for(key);
                let path = store_path(&full)?;
                let _slot = match &self.ctx.limits.dst {
                    Some(l) => Some(l.acquire().await),
                    None => None,
                };
                let deleted = self
                    .ctx
                    .retry(End::Dst)
                    .request(&full, |_| true, |_| store.delete(&path))
                    .await;
                match deleted {
                    Ok(()) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(err(format!("deleting: {}", one_line(&e)))),
                }
            }
            Side::Local { .. } => {
                let (root, k) = (self.ctx.dst_root.clone(), key.to_string());
                blocking(move || local_store::remove_below(&root, &k)).await
            }
        }
    }

    /// Deletes `key` at the destination only if the source says it is gone now (rule 4:
    /// deletes are deliberate). Returns false, deleting nothing, when the source has it.
    pub async fn delete_confirmed(&self, key: &str) -> Result<bool> {
        if self.probe(key).await?.is_some() {
            return Ok(false);
        }
        self.delete_at_destination(key).await?;
        Ok(true)
    }

    /// Reconciles one key from the source's state now: level-triggered, so a duplicate, late
    /// or reordered event can neither resurrect a deleted object nor roll back a newer one.
    pub async fn reconcile(&self, key: &str) -> Result<Applied> {
        self.reconcile_released(key, false).await
    }

    /// [`Engine::reconcile`]; `released`: a delete an operator released from the brake.
    pub async fn reconcile_released(&self, key: &str, released: bool) -> Result<Applied> {
        if !self.filter.key(key) {
            return Ok(Applied::Filtered);
        }
        // a canary is admitted by every filter and passes the brake (core::canary)
        let canary = crate::core::canary::is_canary(key);
        let (mut now, mut meta_now) = match self.probe_meta(key).await? {
            Some((e, m)) => (Some(e), m),
            None => (None, None),
        };
        if let Some(e) = &now {
            if !canary
                && (!self.filter.age(e.mtime, SystemTime::now()) || !self.filter.size(Some(e.size)))
            {
                return Ok(Applied::Filtered);
            }
        }
        let (db, id, k) = (self.db.clone(), self.pair_id, key.to_string());
        let (m_src, m_dst, recorded) = blocking(move || {
            Ok((
                db.get(id, manifest::Side::Src, &k)?,
                db.get(id, manifest::Side::Dst, &k)?,
                db.meta_of(id, manifest::Side::Src, &k)?,
            ))
        })
        .await?;
        // how many times a source that moved during the copy is followed at once
        let mut retry_moved = 5;
        loop {
            let Some(e) = now else {
                // a size filter keeps what it leaves out at the destination, as a listing's
                // walk does (the size recorded of the source, else of the destination)
                let size = m_src.as_ref().or(m_dst.as_ref()).map(|s| s.size);
                if !canary && !self.filter.size(size) {
                    return Ok(Applied::Filtered);
                }
                if self.no_delete && !canary {
                    // `--no-delete`: the destination keeps it; the manifest forgets the
                    // source's side only, so a compare later sees a kept extra
                    let (db, id, k) = (self.db.clone(), self.pair_id, key.to_string());
                    blocking(move || db.forget_side(id, manifest::Side::Src, &[k])).await?;
                    tracing::debug!(
                        key,
                        "gone at the source; kept at the destination (--no-delete)"
                    );
                    return Ok(Applied::Unchanged);
                }
                // the daemon's brake on mass deletes: counted in the shared state, held when
                // the pair's window is full
                let admitted = match self.admit_delete(released || canary).await? {
                    Some(Err(fresh)) => return Ok(Applied::Held { fresh }),
                    Some(Ok(id)) => Some(id),
                    None => None,
                };
                // S3 answers a DELETE of a missing key as of one deleted: a key slate holds no
                // row of (a delete delivered again, after the first forgot it) is looked at
                // first, so that it counts as already gone and costs no DELETE
                let existed = if m_dst.is_none() && !self.dst_exists(key).await? {
                    false
                } else {
                    self.delete_at_destination(key).await?
                };
                if let (Some(bid), false, None) = (admitted, existed, &m_dst) {
                    // nothing was there: the delete costs the window nothing
                    let db = self.db.clone();
                    blocking(move || crate::state::brake::Brakes::new(&db).refund(bid)).await?;
                }
                // an upload of this key a killed slate left (its temporary file, its multipart
                // upload) waits for the key to come up again: gone, it never will
                if let Some(l) = &self.ctx.ledger {
                    if let Some(u) = l.take(key) {
                        tracing::info!(key, "aborting an upload a stopped slate left: its object is gone at the source");
                        l.abort(&u, &self.ctx.dst).await;
                    }
                }
                let (db, id, k) = (self.db.clone(), self.pair_id, key.to_string());
                blocking(move || db.forget(id, &[k])).await?;
                return Ok(if existed || m_dst.is_some() {
                    Applied::Deleted
                } else {
                    Applied::AlreadyGone
                });
            };
            // ETags compared as the planner does (a HEAD may quote what a listing did not);
            // without ETags (some S3-compatibles) the last-modified time decides
            if m_dst.is_some() && plan::same_as_recorded(&state_of(&e), &m_src, true) {
                // The bytes are the recorded ones. Did the metadata change? The probe brought
                // it: compared with the fingerprint recorded at the copy (no request more);
                // a row without one (an older slate, a server-side copy) is looked at when
                // the last-modified moved.
                let differs = match (&recorded, &meta_now) {
                    // --no-metadata: only the bytes are kept equal
                    _ if !self.ctx.opts.metadata => false,
                    (Some(r), Some(m)) => *r != m.fingerprint(),
                    // no fingerprint recorded (a server-side copy, an older slate): the
                    // metadata of a destination on the same kind of store says (one HEAD,
                    // once: the fingerprint is recorded now)
                    (None, Some(m))
                        if self.ctx.dst.location().scheme == self.ctx.src.location().scheme =>
                    {
                        // a destination that cannot be read (gone behind slate's back) is
                        // copied again below, as any other key whose replica differs
                        let dst_tags = self
                            .ctx
                            .s3_self
                            .as_deref()
                            .filter(|_| self.ctx.wants_tags().is_some());
                        let Ok(dst) = judge::meta_now(&self.ctx.dst, key, None, dst_tags).await
                        else {
                            match self.copy(&e).await {
                                Ok((out, recs)) => {
                                    let (db, id) = (self.db.clone(), self.pair_id);
                                    blocking(move || db.record(id, &recs)).await?;
                                    return Ok(Applied::Copied { bytes: out.bytes });
                                }
                                Err(err) => return Err(err),
                            }
                        };
                        let same = dst.fingerprint() == m.fingerprint();
                        if same {
                            let rec = Record {
                                side: manifest::Side::Src,
                                key: key.to_string(),
                                state: state_of(&e),
                                hash: None,
                                equal_by: None,
                                meta: Some(m.fingerprint()),
                            };
                            let (db, id) = (self.db.clone(), self.pair_id);
                            blocking(move || db.record(id, &[rec])).await?;
                        }
                        !same
                    }
                    _ => plan::touched(&state_of(&e), &m_src),
                };
                if !differs {
                    return Ok(Applied::Unchanged);
                }
                let (changed, recs) = self.update_meta(&e, meta_now.take()).await?;
                let (db, id) = (self.db.clone(), self.pair_id);
                blocking(move || db.record(id, &recs)).await?;
                return Ok(if changed {
                    Applied::MetaUpdated
                } else {
                    Applied::Unchanged
                });
            }
            match self.copy(&e).await {
                Ok((out, recs)) => {
                    let (db, id) = (self.db.clone(), self.pair_id);
                    blocking(move || db.record(id, &recs)).await?;
                    return Ok(Applied::Copied { bytes: out.bytes });
                }
                Err(err) => {
                    // A key written again (or deleted) while it was copied fails its etag
                    // guard. That is no failure of the key: its newest state is what the event
                    // asks for, and the events of that state may already be coalesced into
                    // this one, so the newer state is reconciled now instead of after a backoff.
                    let again = self.probe_meta(key).await?;
                    let (again, again_meta) = match again {
                        Some((e, m)) => (Some(e), m),
                        None => (None, None),
                    };
                    if moved(&e, again.as_ref()) && retry_moved > 0 {
                        retry_moved -= 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        now = again;
                        meta_now = again_meta;
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// [`Engine::reconcile`] behind the key's ordering token: an event no newer than the last
    /// one applied (or a delete's tombstone) is skipped; after the apply, the token is recorded
    /// with the object, or as a tombstone when the key is gone.
    pub async fn reconcile_with_token(&self, key: &str, token: Option<&str>) -> Result<Applied> {
        self.reconcile_pending(key, token, false).await
    }

    /// [`Engine::reconcile_with_token`] of an inbox row; `released`: a delete an operator
    /// released from the brake.
    pub async fn reconcile_pending(
        &self,
        key: &str,
        token: Option<&str>,
        released: bool,
    ) -> Result<Applied> {
        let Some(token) = token else {
            return self.reconcile_released(key, released).await;
        };
        if !self.filter.key(key) {
            return Ok(Applied::Filtered);
        }
        let (db, id, k) = (self.db.clone(), self.pair_id, key.to_string());
        let last = blocking(move || db.last_token(id, &k)).await?;
        if last.is_some_and(|l| l.as_str() >= token) {
            return Ok(Applied::Stale);
        }
        let applied = self.reconcile_released(key, released).await?;
        let (db, id, k, t) = (
            self.db.clone(),
            self.pair_id,
            key.to_string(),
            token.to_string(),
        );
        blocking(move || match applied {
            Applied::Copied { .. } | Applied::Unchanged | Applied::MetaUpdated => {
                db.set_token(id, &k, &t)
            }
            Applied::Deleted | Applied::AlreadyGone => db.tombstone(id, &k, &t),
            Applied::Stale | Applied::Filtered | Applied::Held { .. } => Ok(()),
        })
        .await?;
        Ok(applied)
    }
}
