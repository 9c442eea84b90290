//! Copies that continue where they stopped, and no upload left behind (the `uploads` table,
//! [`crate::state::uploads`]).
//!
//! An object cut into two chunks or more is recorded when its upload begins (the multipart
//! upload id, Azure's block ids, or the local temporary file), and each chunk when it is
//! written (with the digests of its blocks, so that the content hash needs no second read).
//! The row goes when the object is complete, or when its copy fails (the upload is aborted,
//! the temporary file removed: an object slate cannot complete leaves nothing).
//!
//! A copy that is *cut short* (killed with -9, interrupted, stopped, a job cancelled) keeps
//! its row and what it wrote. The next copy to that destination, in whatever command (`copy`,
//! `sync --once`, the daemon, a job), adopts the rows of processes that no longer run
//! ([`Ledger::open`]). When it comes to one of those objects and the source is unchanged (same
//! ETag, or size and mtime for a file), it confirms what the store holds (ListParts, Get Block
//! List, or the temporary file's blocks hashed again) and sends only the missing chunks. Rows it
//! adopted and did not use are aborted when it ends ([`Ledger::release_unused`]); `slate
//! cleanup` aborts them on demand. Uploads that slate did not record are never touched.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::hash::BlockHasher;
use super::transfer::Item;
use crate::core::error::SlateError;
use crate::state::blocking;
use crate::state::manifest::Manifest;
use crate::state::owner::{host_id, owner_tag};
use crate::state::uploads::{Part, Upload, Uploads};
use crate::stores::local::TMP_PREFIX;
use crate::stores::side::{store_path, Side};

/// Objects with a recorded upload under way in this process: what an interrupt leaves to
/// resume (the CLI says so when interrupted).
pub static KEPT: AtomicI64 = AtomicI64::new(0);

/// Rows a copy or ledger of this process holds now: the others of this process are free to
/// adopt (a job cancelled mid-object, continued by its resume in the same server).
static HELD: Mutex<Option<HashSet<i64>>> = Mutex::new(None);

fn unhold(id: i64) {
    if let Ok(mut h) = HELD.lock() {
        if let Some(h) = h.as_mut() {
            h.remove(&id);
        }
    }
}

/// The row one object's copy holds: let go when the copy ends, whichever way (done, failed,
/// or dropped when cut short).
#[derive(Debug, Default)]
pub struct Slot(std::sync::atomic::AtomicI64);

impl Slot {
    /// The copy holds row `id` (already held: adopted or begun).
    pub fn set(&self, id: i64) {
        self.0.store(id, Relaxed);
    }

    pub fn get(&self) -> Option<i64> {
        Some(self.0.load(Relaxed)).filter(|id| *id > 0)
    }

    /// The row, no longer the copy's to let go (finished or discarded).
    pub fn take(&self) -> Option<i64> {
        Some(self.0.swap(0, Relaxed)).filter(|id| *id > 0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(id) = self.take() {
            unhold(id);
        }
    }
}

/// The prefix of a local temporary file that a later copy may resume: `.slate-tmp-r-…`. The
/// sweep of orphaned temporary files (`.slate-tmp-PID-…`) leaves these to the ledger.
pub const RESUMABLE: &str = "r-";

/// The database the uploads are recorded in, as the copy options carry it.
#[derive(Clone)]
pub struct UploadsDb(pub Arc<Manifest>);

impl std::fmt::Debug for UploadsDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UploadsDb({})", self.0.path().display())
    }
}

/// The uploads of one destination, as one copy run (or daemon pair) sees them.
pub struct Ledger {
    db: Arc<Manifest>,
    /// `s3://BUCKET`, `az://CONTAINER`, `gs://BUCKET`, or the local root folder.
    dst: String,
    owner: String,
    host: String,
    /// The keys whose uploads it adopts (a prefix, or one key).
    prefix: String,
    /// Adopted rows not yet resumed or aborted, by key.
    adopted: Mutex<HashMap<String, Upload>>,
    /// Adopted rows of a key adopted twice (the older ones): aborted at the end of the run.
    extra: Mutex<Vec<Upload>>,
}

/// What identifies the source's version: its ETag, or size and mtime for a local file.
pub fn source_token(item: &Item) -> Option<String> {
    if let Some(e) = &item.etag {
        return Some(e.clone());
    }
    let t = item.mtime?.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(format!("{}:{}", item.size, t.as_nanos()))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The name of a destination in the `uploads` table.
pub fn dst_id(dst: &Side, root: &Path) -> String {
    match dst {
        Side::Cloud { loc, .. } => loc.store_id(),
        Side::Local { .. } => std::path::absolute(root)
            .unwrap_or_else(|_| root.to_path_buf())
            .display()
            .to_string(),
    }
}

/// The part ETag as both S3 answers spell it (quoted or not).
fn bare(etag: &str) -> &str {
    etag.trim_matches('"')
}

impl Ledger {
    /// The ledger of `dst` (its root folder `root` when local), adopting the uploads under
    /// its prefix (of `only`, when the copy is of one object) that processes which no longer
    /// run left behind.
    pub fn open(
        db: Arc<Manifest>,
        dst: &Side,
        root: &Path,
        only: Option<&str>,
    ) -> Result<Ledger, SlateError> {
        // without a PID:START tag another process could take this one's uploads for a dead one's
        let owner = owner_tag(std::process::id()).ok_or_else(|| SlateError::Manifest {
            path: db.path().display().to_string(),
            why: "cannot tell this process from a later one with its PID (/proc)".into(),
        })?;
        let host = host_id();
        let id = dst_id(dst, root);
        let prefix = match (only, dst) {
            (Some(key), _) => key.to_string(),
            (None, Side::Cloud { loc, .. }) => loc.prefix.clone(),
            (None, Side::Local { .. }) => String::new(),
        };
        let ledger = Ledger {
            db,
            dst: id,
            owner,
            host,
            prefix,
            adopted: Mutex::new(HashMap::new()),
            extra: Mutex::new(Vec::new()),
        };
        ledger.adopt_now()?;
        Ok(ledger)
    }

    /// Adopts the uploads that processes of this host which no longer run left under the
    /// ledger's prefix (at open, and in a long-running daemon now and then: a worker beside it
    /// killed mid-copy); returns their ids.
    pub fn adopt_now(&self) -> Result<Vec<i64>, SlateError> {
        let poisoned = || SlateError::Manifest {
            path: self.db.path().display().to_string(),
            why: "internal: upload lock poisoned".into(),
        };
        // checked and marked under one lock: two ledgers of this process never take one row
        let taken = {
            let mut h = HELD.lock().map_err(|_| poisoned())?;
            let h = h.get_or_insert_with(HashSet::new);
            let taken = Uploads::new(&self.db).adopt(
                Some(&self.dst),
                &self.prefix,
                &self.owner,
                &self.host,
                &|r| h.contains(&r),
            )?;
            h.extend(taken.iter().map(|u| u.id));
            taken
        };
        if !taken.is_empty() {
            tracing::info!(
                dst = %self.dst,
                "{} upload(s) left by a slate that stopped: resumed when their objects come up, \
                 aborted at the end otherwise",
                taken.len()
            );
        }
        // one row per key resumes (the newest); older ones of the same key only wait to go
        let ids = taken.iter().map(|u| u.id).collect();
        let mut adopted = self.adopted.lock().map_err(|_| poisoned())?;
        let mut extra = self.extra.lock().map_err(|_| poisoned())?;
        for u in taken {
            if let Some(old) = adopted.insert(u.key.clone(), u) {
                if old.id > adopted[&old.key].id {
                    // the row already held was the newer one: keep it
                    let newer = adopted.insert(old.key.clone(), old);
                    extra.extend(newer);
                } else {
                    extra.push(old);
                }
            }
        }
        Ok(ids)
    }

    /// Aborts the adopted rows among `ids` that no copy took meanwhile.
    pub async fn release_ids(&self, dst: &Side, ids: &[i64]) {
        let mut rest = Vec::new();
        if let Ok(mut a) = self.adopted.lock() {
            let keys: Vec<String> = a
                .iter()
                .filter(|(_, u)| ids.contains(&u.id))
                .map(|(k, _)| k.clone())
                .collect();
            rest.extend(keys.iter().filter_map(|k| a.remove(k)));
        }
        if let Ok(mut e) = self.extra.lock() {
            let (go, stay): (Vec<Upload>, Vec<Upload>) =
                e.drain(..).partition(|u| ids.contains(&u.id));
            *e = stay;
            rest.extend(go);
        }
        for u in rest {
            tracing::info!(key = %u.key, "aborting an upload a stopped slate left: its object was not copied again");
            self.abort(&u, dst).await;
        }
    }

    /// The adopted upload of `key`, if any (taken: this copy resumes or aborts it).
    pub fn take(&self, key: &str) -> Option<Upload> {
        self.adopted.lock().ok()?.remove(key)
    }

    /// A row for an upload of `item` beginning now.
    pub fn new_upload(
        &self,
        item: &Item,
        upload_id: Option<String>,
        temp: Option<String>,
        chunk_size: u64,
        meta: Option<String>,
    ) -> Upload {
        Upload {
            id: 0,
            dst: self.dst.clone(),
            key: item.dst.clone(),
            upload_id,
            temp,
            src: item.src.clone(),
            src_token: source_token(item),
            meta,
            size: item.size,
            chunk_size,
            owner: self.owner.clone(),
            host: self.host.clone(),
            started_at: now_ms(),
        }
    }

    /// Records an upload that begins; None when the database refuses (said once: the copy
    /// goes on, without resume).
    pub async fn begin(&self, u: Upload) -> Option<i64> {
        let db = self.db.clone();
        // inserted and held under one lock: a ledger opening meanwhile never takes it
        let r = blocking(move || {
            let mut h = HELD.lock().map_err(|_| SlateError::Manifest {
                path: db.path().display().to_string(),
                why: "internal: upload lock poisoned".into(),
            })?;
            let id = Uploads::new(&db).begin(&u)?;
            h.get_or_insert_with(HashSet::new).insert(id);
            Ok(id)
        })
        .await;
        match r {
            Ok(id) => {
                KEPT.fetch_add(1, Relaxed);
                Some(id)
            }
            Err(e) => {
                db_failed(&e);
                None
            }
        }
    }

    /// An adopted row this copy continues: counted as kept again.
    pub fn resumed(&self) {
        KEPT.fetch_add(1, Relaxed);
    }

    /// Records chunk `part` of upload `id` as written.
    pub async fn part_done(&self, id: i64, part: usize, etag: Option<String>, digests: Vec<u128>) {
        let db = self.db.clone();
        let part = part as u32;
        let r = blocking(move || Uploads::new(&db).part_done(id, part, etag.as_deref(), &digests))
            .await;
        if let Err(e) = r {
            db_failed(&e);
        }
    }

    /// The chunks recorded for upload `id`.
    pub async fn parts(&self, id: i64) -> Vec<Part> {
        let db = self.db.clone();
        blocking(move || Uploads::new(&db).parts(id))
            .await
            .unwrap_or_else(|e| {
                db_failed(&e);
                Vec::new()
            })
    }

    /// Upload `id` is complete: forgotten.
    pub async fn finish(&self, id: i64) {
        KEPT.fetch_sub(1, Relaxed);
        self.forget(id).await;
    }

    async fn forget(&self, id: i64) {
        unhold(id);
        let db = self.db.clone();
        if let Err(e) = blocking(move || Uploads::new(&db).forget(id)).await {
            db_failed(&e);
        }
    }

    /// Upload `id` cannot be completed (its copy failed): aborted at the store, or its
    /// temporary file removed, and forgotten.
    pub async fn discard(&self, id: i64, dst: &Side) {
        KEPT.fetch_sub(1, Relaxed);
        let db = self.db.clone();
        if let Ok(Some(u)) = blocking(move || Uploads::new(&db).get(id)).await {
            self.abort(&u, dst).await;
        } else {
            self.forget(id).await;
        }
    }

    /// Aborts the upload of an adopted row that will not be resumed, and forgets it.
    pub async fn abort(&self, u: &Upload, dst: &Side) {
        // one the store would not abort stays recorded; this process lets go of it, and the
        // next run or `slate cleanup` tries again
        if abort_upload(u, dst).await {
            self.forget(u.id).await;
        } else {
            unhold(u.id);
        }
    }

    /// Aborts what was adopted and not resumed: the end of a copy run.
    pub async fn release_unused(&self, dst: &Side) {
        let mut rest: Vec<Upload> = self
            .adopted
            .lock()
            .map(|mut a| a.drain().map(|(_, u)| u).collect())
            .unwrap_or_default();
        if let Ok(mut e) = self.extra.lock() {
            rest.append(&mut e);
        }
        for u in rest {
            tracing::info!(key = %u.key, "aborting an upload a stopped slate left: its object was not copied again");
            self.abort(&u, dst).await;
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // adopted and neither resumed nor aborted (the run was cut short): free again
        if let Ok(a) = self.adopted.lock() {
            for u in a.values() {
                unhold(u.id);
            }
        }
        if let Ok(e) = self.extra.lock() {
            for u in e.iter() {
                unhold(u.id);
            }
        }
    }
}

fn db_failed(e: &SlateError) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            "recording uploads failed, copies cut short will start again from the beginning: {e}"
        )
    });
}

/// Aborts one recorded upload at `dst` (a multipart upload; Azure keeps uncommitted blocks
/// for 7 days and has no abort) or removes its temporary file; true when it is gone (or was
/// already). A temporary file is removed only where its row says its object goes, and only
/// with slate's name.
pub async fn abort_upload(u: &Upload, dst: &Side) -> bool {
    match dst {
        Side::Cloud { parts, .. } => {
            let Some(id) = u.upload_id.as_deref().filter(|id| !id.is_empty()) else {
                return true;
            };
            let Ok(path) = store_path(&u.key) else {
                return false;
            };
            let id = id.to_string();
            let r = crate::stores::retry::Retry::default()
                .request(&u.key, crate::stores::retry::transient, |_| {
                    parts.abort_multipart(&path, &id)
                })
                .await;
            match r {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => true,
                Err(e) => {
                    tracing::warn!(
                        key = %u.key,
                        "aborting an upload failed (kept for the next run or `slate cleanup`): {}",
                        crate::stores::side::one_line(&e)
                    );
                    false
                }
            }
        }
        Side::Local { .. } => {
            let Some(t) = u.temp.as_ref().map(PathBuf::from) else {
                return true;
            };
            if !temp_belongs(u, &t) {
                tracing::warn!(file = %t.display(), "not removing a recorded temporary file outside its destination");
                return false;
            }
            tokio::task::spawn_blocking(move || remove_temp(&t))
                .await
                .is_ok()
        }
    }
}

/// Whether the temporary file `t` of row `u` is where that row's object goes: next to
/// `DST/KEY`, both absolute with no `.` or `..` on the way.
pub fn temp_belongs(u: &Upload, t: &Path) -> bool {
    use std::path::Component;
    let plain = |p: &Path| {
        p.is_absolute()
            && p.components()
                .all(|c| !matches!(c, Component::ParentDir | Component::CurDir))
    };
    let Ok(dest) = crate::stores::local::safe_join(Path::new(&u.dst), &u.key) else {
        return false;
    };
    plain(t) && plain(&dest) && t.parent() == dest.parent()
}

/// Removes a resumable temporary file, only if its name is slate's.
pub fn remove_temp(p: &Path) {
    let ours = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(&format!("{TMP_PREFIX}{RESUMABLE}")));
    if ours {
        let _ = std::fs::remove_file(p);
    }
}

/// A new name for a resumable temporary file next to `dest`.
pub fn temp_name(dest: &Path) -> PathBuf {
    let dir = dest.parent().unwrap_or(Path::new("."));
    dir.join(format!("{TMP_PREFIX}{RESUMABLE}{:016x}", fastrand::u64(..)))
}

/// Whether an adopted row still describes `item`: the same object, of the same size, from an
/// unchanged source, cut the way it still can be.
/// The chunk must also be one this copy can hold: from 5 MiB, within `memory_limit` (a
/// budget smaller than one recorded chunk would wait for memory forever).
pub fn still_fits(u: &Upload, item: &Item, memory_limit: u64) -> bool {
    u.size == item.size
        && u.src == item.src
        && u.src_token.is_some()
        && u.src_token == source_token(item)
        && u.chunk_size >= 5 << 20
        && u.chunk_size <= memory_limit.min(4 << 30)
        && u.chunk_size % super::hash::BLOCK == 0
}

/// The recorded chunks of a local temporary file that still hold what was recorded: each is
/// read and hashed again (a machine that lost power may have lost what the kill did not).
/// Returns chunk index → digests. Runs on the calling thread: call it on the blocking pool.
pub fn check_local_parts(
    temp: &Path,
    parts: &[Part],
    ranges: &[Range<u64>],
) -> HashMap<usize, Vec<u128>> {
    match std::fs::File::open(temp) {
        Ok(f) => parts_held(&f, parts, ranges),
        Err(_) => HashMap::new(),
    }
}

/// Whether a local source still holds every recorded chunk of a stopped copy: its size and
/// mtime may be the same after a rewrite (a coarse clock, a tool that sets times back), the
/// digests of what was sent cannot. Cheaper than the resend it saves: a read of the file.
/// Runs on the calling thread: call it on the blocking pool.
pub fn source_holds(src: &Side, key: &str, parts: &[Part], ranges: &[Range<u64>]) -> bool {
    let Side::Local { loc } = src else {
        // a cloud source's ETag is its version: `still_fits` compared it
        return true;
    };
    let path = std::path::PathBuf::from(key);
    match crate::stores::local::open_source(&loc.local_path(), &path, loc.copy_links) {
        Ok(f) => parts_held(&f, parts, ranges).len() == parts.len(),
        Err(_) => false,
    }
}

/// The recorded chunks `f` holds: chunk index → digests.
fn parts_held(
    f: &std::fs::File,
    parts: &[Part],
    ranges: &[Range<u64>],
) -> HashMap<usize, Vec<u128>> {
    use std::os::unix::fs::FileExt;
    let mut ok = HashMap::new();
    let mut buf = vec![0u8; super::hash::BLOCK as usize];
    for p in parts {
        let Some(r) = ranges.get(p.part as usize) else {
            continue;
        };
        let mut h = BlockHasher::new();
        let mut off = r.start;
        let mut good = true;
        while off < r.end {
            let n = ((r.end - off) as usize).min(buf.len());
            if f.read_exact_at(&mut buf[..n], off).is_err() {
                good = false;
                break;
            }
            h.update(&buf[..n]);
            off += n as u64;
        }
        if good {
            let d = h.finish();
            if d == p.digests {
                ok.insert(p.part as usize, d);
            }
        }
    }
    ok
}

/// The recorded parts of a cloud upload that the store confirms it holds: `listed` is what
/// it lists (S3: part number → ETag; Azure: block ids), `numbered` says which.
pub fn confirmed_parts(parts: &[Part], listed: &Listed, ranges: &[Range<u64>]) -> Vec<Part> {
    parts
        .iter()
        .filter(|p| {
            // a chunk that exists, with one digest per block of it
            ranges.get(p.part as usize).is_some_and(|r| {
                p.digests.len() as u64 == (r.end - r.start).div_ceil(super::hash::BLOCK)
            })
        })
        .filter(|p| match (&p.etag, listed) {
            (Some(e), Listed::Numbered(m)) => {
                m.get(&(p.part + 1)).is_some_and(|l| bare(l) == bare(e))
            }
            (Some(e), Listed::Blocks(s)) => s.contains(e),
            (None, _) => false,
        })
        .cloned()
        .collect()
}

/// What a store lists of an upload under way.
#[derive(Debug)]
pub enum Listed {
    /// S3's ListParts: part number (from 1) → ETag.
    Numbered(HashMap<u32, String>),
    /// Azure's uncommitted block ids.
    Blocks(HashSet<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(i: u32, etag: &str) -> Part {
        Part {
            part: i,
            etag: Some(etag.into()),
            digests: vec![i as u128],
        }
    }

    #[test]
    fn only_parts_the_store_holds_are_kept() {
        let parts = vec![
            part(0, "\"a\""),
            part(1, "\"b\""),
            part(2, "\"c\""),
            part(9, "z"),
        ];
        // S3 numbers parts from 1 and may quote ETags or not; part 2 holds other bytes now
        let listed = Listed::Numbered(
            [
                (1, "a".to_string()),
                (2, "\"b\"".to_string()),
                (3, "\"x\"".to_string()),
            ]
            .into(),
        );
        let ranges = super::super::transfer::chunks(4 << 20, 1 << 20);
        let got: Vec<u32> = confirmed_parts(&parts, &listed, &ranges)
            .iter()
            .map(|p| p.part)
            .collect();
        assert_eq!(got, vec![0, 1]);
        let blocks = Listed::Blocks(["\"c\"".to_string(), "z".to_string()].into());
        // part 9 is past the object's 4 chunks
        let got: Vec<u32> = confirmed_parts(&parts, &blocks, &ranges)
            .iter()
            .map(|p| p.part)
            .collect();
        assert_eq!(got, vec![2]);
        // a row whose digests do not cover its chunk is not trusted
        let torn = Part {
            part: 0,
            etag: Some("\"a\"".into()),
            digests: vec![0, 0],
        };
        assert!(confirmed_parts(&[torn], &listed, &ranges).is_empty());
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_changed_source_does_not_fit() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(5);
        let item = Item {
            src: "a/b".into(),
            dst: "b".into(),
            size: 10 << 20,
            etag: Some("\"e1\"".into()),
            mtime: Some(t),
        };
        let u = Upload {
            id: 1,
            dst: "s3://x".into(),
            key: "b".into(),
            upload_id: Some("u".into()),
            temp: None,
            src: "a/b".into(),
            src_token: source_token(&item),
            meta: None,
            size: 10 << 20,
            chunk_size: 8 << 20,
            owner: "1:1".into(),
            host: "h".into(),
            started_at: 0,
        };
        assert!(still_fits(&u, &item, GIB));
        let mut other = item.clone();
        other.etag = Some("\"e2\"".into());
        assert!(!still_fits(&u, &other, GIB));
        let mut bigger = item.clone();
        bigger.size += 1;
        assert!(!still_fits(&u, &bigger, GIB));
        // a local source: size and mtime
        let mut file = item.clone();
        file.etag = None;
        let mut uf = u.clone();
        uf.src_token = source_token(&file);
        assert!(still_fits(&uf, &file, GIB));
        file.mtime = Some(t + std::time::Duration::from_nanos(1));
        assert!(!still_fits(&uf, &file, GIB));
        file.mtime = None;
        uf.src_token = None;
        assert!(
            !still_fits(&uf, &file, GIB),
            "no token: nothing proves the source unchanged"
        );
    }

    #[test]
    fn local_parts_are_checked_against_their_digests() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let ranges = super::super::transfer::chunks(data.len() as u64, 1 << 20);
        let digest = |r: &Range<u64>| {
            let mut h = BlockHasher::new();
            h.update(&data[r.start as usize..r.end as usize]);
            h.finish()
        };
        let parts = vec![
            Part {
                part: 0,
                etag: None,
                digests: digest(&ranges[0]),
            },
            Part {
                part: 1,
                etag: None,
                digests: vec![42], // what was recorded is not what the file holds
            },
            Part {
                part: 2,
                etag: None,
                digests: digest(&ranges[2]),
            },
        ];
        let ok = check_local_parts(&p, &parts, &ranges);
        let mut got: Vec<usize> = ok.keys().copied().collect();
        got.sort();
        assert_eq!(got, vec![0, 2]);
        assert!(check_local_parts(&dir.path().join("gone"), &parts, &ranges).is_empty());
    }

    #[test]
    fn only_slates_resumable_temp_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ours = temp_name(&dir.path().join("obj"));
        let theirs = dir.path().join("obj");
        std::fs::write(&ours, b"x").unwrap();
        std::fs::write(&theirs, b"x").unwrap();
        remove_temp(&ours);
        remove_temp(&theirs);
        assert!(!ours.exists());
        assert!(theirs.exists());
        assert!(!crate::stores::local::is_orphan_temp(
            &ours.file_name().unwrap().to_string_lossy()
        ));
    }
}
