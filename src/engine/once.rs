//! Reconcile: make a pair's destination equal to its source, deletes included.
//!
//! `sync --once` and `diff` share the first two steps: list (the source, and the destination
//! unless the manifest can vouch for it) into the manifest's scan table, then plan every key
//! with the pure [`plan::plan`]. `diff` reports; `sync --once` then copies through the copier,
//! deletes what the source no longer has (only after asking the source again), and records
//! everything in the manifest.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use tokio::sync::mpsc;

use super::plan::{self, Action};
use crate::copy::transfer::{copy_one, Ctx, End};
use crate::copy::{self, progress, CopyOptions};
use crate::core::error::{Result, SlateError};
use crate::core::filter::Filter;
use crate::core::location::Location;
use crate::state::manifest::{self, Manifest, PairInfo, Record, ScanRow, State};
use crate::stores::list::{self, Entry};
use crate::stores::side::{one_line, store_path, Side};

/// Rows per manifest transaction / page.
const BATCH: usize = 10_000;
/// Marker for keys a filter leaves out.
const EXCLUDED: u8 = 255;

/// `--max-delete`: a count or a percentage of the destination's objects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MaxDelete {
    Count(u64),
    Percent(f64),
}

impl MaxDelete {
    pub fn parse(s: &str) -> std::result::Result<MaxDelete, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a percentage"))?;
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("'{s}' is outside 0%..100%"));
            }
            return Ok(MaxDelete::Percent(v));
        }
        t.parse()
            .map(MaxDelete::Count)
            .map_err(|_| format!("'{s}' is not a count or a percentage (1000 or 5%)"))
    }

    /// Whether deleting `n` of `total` destination objects is allowed.
    pub fn allows(&self, n: u64, total: u64) -> bool {
        match *self {
            MaxDelete::Count(c) => n <= c,
            MaxDelete::Percent(p) => (n as f64) <= (total as f64) * p / 100.0,
        }
    }

    fn text(&self) -> String {
        match self {
            MaxDelete::Count(c) => c.to_string(),
            MaxDelete::Percent(p) => format!("{p}%"),
        }
    }
}

/// How a reconcile runs.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub dry_run: bool,
    pub no_delete: bool,
    pub max_delete: Option<MaxDelete>,
    pub filter: Filter,
    /// List the destination even when the manifest can vouch for it.
    pub full: bool,
    pub copy: CopyOptions,
}

/// The plan's tally (what `diff` reports).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub only_in_source: u64,
    pub only_in_destination: u64,
    pub changed: u64,
    pub equal: u64,
    /// Of `equal`: decided by size alone (no digest to compare).
    pub equal_size_only: u64,
    pub bytes_to_copy: u64,
    /// Destination extras kept because of `--no-delete`.
    pub kept: u64,
    /// Bytes per category (source sizes, destination sizes for destination-only keys).
    pub bytes_only_in_source: u64,
    pub bytes_only_in_destination: u64,
    pub bytes_changed: u64,
    pub bytes_equal: u64,
}

impl Counts {
    fn add(&mut self, a: Action, row: &ScanRow) {
        match a {
            Action::EqualRecorded | Action::EqualDigest => self.equal += 1,
            Action::EqualSizeOnly => {
                self.equal += 1;
                self.equal_size_only += 1
            }
            Action::CopyMissing => self.only_in_source += 1,
            Action::CopyChanged => self.changed += 1,
            Action::Delete => self.only_in_destination += 1,
            Action::KeepExtra => self.kept += 1,
        }
        let src = row.src.as_ref().map(|s| s.size).unwrap_or(0);
        let dst = row.dst.as_ref().map(|s| s.size).unwrap_or(0);
        match a {
            Action::CopyMissing => self.bytes_only_in_source += src,
            Action::CopyChanged => self.bytes_changed += src,
            Action::Delete | Action::KeepExtra => self.bytes_only_in_destination += dst,
            _ => self.bytes_equal += src,
        }
        if a.is_copy() {
            self.bytes_to_copy += src;
        }
    }

    pub fn differences(&self) -> u64 {
        self.only_in_source + self.only_in_destination + self.changed + self.kept
    }
}

/// What a listing pass produced.
pub struct Scan {
    pub pair: PairInfo,
    pub plan: copy::Plan,
    pub listed_src: u64,
    /// None when the destination came from the manifest.
    pub listed_dst: Option<u64>,
}

/// The result of `sync --once`.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    pub counts: Counts,
    pub listed_src: u64,
    pub listed_dst: Option<u64>,
    pub copied: u64,
    pub copied_bytes: u64,
    pub deleted: u64,
    /// Deletes not applied because the source has the key again.
    pub delete_skipped: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub dry_run: bool,
}

impl SyncReport {
    pub fn line(&self) -> String {
        let c = &self.counts;
        let dst = match self.listed_dst {
            Some(n) => format!("{n} listed"),
            None => "from the manifest (not listed)".into(),
        };
        let verb = if self.dry_run { "would copy" } else { "copied" };
        let mut s = format!(
            "sync: source {} listed, destination {dst}; {verb} {} ({} new, {} changed, {}), {} {}, {} equal",
            self.listed_src,
            if self.dry_run { c.only_in_source + c.changed } else { self.copied },
            c.only_in_source,
            c.changed,
            progress::human_bytes(if self.dry_run { c.bytes_to_copy } else { self.copied_bytes }),
            if self.dry_run { "would delete" } else { "deleted" },
            if self.dry_run { c.only_in_destination } else { self.deleted },
            c.equal,
        );
        if c.equal_size_only > 0 {
            s.push_str(&format!(
                " (of which {} by size only: no comparable digest)",
                c.equal_size_only
            ));
        }
        if c.kept > 0 {
            s.push_str(&format!(", {} extra kept (--no-delete)", c.kept));
        }
        if self.delete_skipped > 0 {
            s.push_str(&format!(
                ", {} deletes skipped (source has the key again)",
                self.delete_skipped
            ));
        }
        if c.only_in_source + c.changed == 0 && !self.dry_run {
            s.push_str("; no data transferred");
        }
        if self.failed > 0 {
            s.push_str(&format!(", {} FAILED", self.failed));
        }
        s.push_str(&format!(" in {:.2} s", self.elapsed.as_secs_f64()));
        s
    }
}

fn to_state(e: &Entry) -> State {
    State {
        size: e.size,
        etag: e.etag.clone(),
        mtime_ms: list::millis(e.mtime),
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SlateError::Manifest {
            path: String::new(),
            why: format!("internal: {e}"),
        })?
}

/// Lists one side into the scan table; returns how many entries passed the filter.
async fn list_side(
    manifest: Arc<Manifest>,
    pair_id: i64,
    side: Side,
    which: manifest::Side,
    filter: Filter,
) -> Result<u64> {
    let (tx, mut rx) = mpsc::channel(BATCH);
    let side2 = side.clone();
    let lister =
        tokio::spawn(
            async move { list::list_entries(&side2, tx, copy::classify_store_error).await },
        );
    let now = SystemTime::now();
    let mut batch = Vec::with_capacity(BATCH);
    let mut n = 0u64;
    while let Some(e) = rx.recv().await {
        let e = e?;
        if !filter.key(&e.rel) || !filter.age(e.mtime, now) {
            continue;
        }
        n += 1;
        batch.push((e.rel.clone(), to_state(&e)));
        if batch.len() >= BATCH {
            let (m, b) = (manifest.clone(), std::mem::take(&mut batch));
            blocking(move || m.scan_add(pair_id, which, &b)).await?;
        }
    }
    let (m, b) = (manifest.clone(), batch);
    blocking(move || m.scan_add(pair_id, which, &b)).await?;
    lister.await.map_err(|e| SlateError::List {
        url: side.location().to_string(),
        detail: e.to_string(),
    })??;
    Ok(n)
}

/// Step 1: list into the scan table. The destination is listed when `list_dst` is true or the
/// manifest cannot vouch for it (no finished sync of this pair yet).
pub async fn scan(
    manifest: &Arc<Manifest>,
    src: &Location,
    dst: &Location,
    filter: &Filter,
    list_dst: bool,
) -> Result<Scan> {
    let plan = copy::plan(src, dst).await?;
    if plan.single.is_some() {
        return Err(SlateError::BadUrl {
            url: src.raw.clone(),
            why: "names one object; sync and diff work on prefixes and folders (use slate copy for one object)".into(),
        });
    }
    let (s, d) = (src.to_string(), dst.to_string());
    let m = manifest.clone();
    let pair = blocking(move || {
        let p = m.pair(&s, &d)?;
        m.scan_reset(p.id)?;
        Ok(p)
    })
    .await?;
    let list_dst = list_dst || pair.last_sync_at.is_none();
    let src_task = list_side(
        manifest.clone(),
        pair.id,
        plan.src.clone(),
        manifest::Side::Src,
        filter.clone(),
    );
    let (listed_src, listed_dst) = if list_dst {
        let dst_task = list_side(
            manifest.clone(),
            pair.id,
            plan.dst.clone(),
            manifest::Side::Dst,
            filter.clone(),
        );
        let (a, b) = tokio::join!(src_task, dst_task);
        (a?, Some(b?))
    } else {
        // a listing sweeps the temporary files of a slate killed mid-copy; without one, a
        // local destination is swept here, or they would stay forever
        let sweep = async {
            if let Side::Local { loc } = &plan.dst {
                let root = loc.local_path();
                blocking(move || crate::stores::local::sweep_orphan_temps(&root)).await
            } else {
                Ok(())
            }
        };
        let (listed, swept) = tokio::join!(src_task, sweep);
        if let Err(e) = swept {
            tracing::warn!(error = %e, "sweeping temporary files failed");
        }
        let listed = listed?;
        let (m, id) = (manifest.clone(), pair.id);
        blocking(move || m.scan_dst_from_manifest(id)).await?;
        (listed, None)
    };
    Ok(Scan {
        pair,
        plan,
        listed_src,
        listed_dst,
    })
}

/// Step 2: plans every key of the scan, stores the actions in the scan table and returns the
/// tally. `each` sees every difference in key order (for `diff` output).
pub async fn plan_all(
    manifest: &Arc<Manifest>,
    pair_id: i64,
    deletes: bool,
    filter: &Filter,
    mut each: impl FnMut(&ScanRow, Action),
) -> Result<Counts> {
    let mut counts = Counts::default();
    let mut after = String::new();
    let now = SystemTime::now();
    loop {
        let (m, a) = (manifest.clone(), after.clone());
        let page = blocking(move || m.scan_page(pair_id, &a, BATCH, None)).await?;
        let Some((last, _)) = page.last() else { break };
        after = last.key.clone();
        let mut actions = Vec::with_capacity(page.len());
        for (row, _) in &page {
            // rows that came from the manifest are filtered here (listings were filtered already)
            let mtime = row
                .src
                .as_ref()
                .or(row.dst.as_ref())
                .and_then(|s| s.mtime_ms);
            let t = mtime.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64));
            if !filter.key(&row.key) || !filter.age(t, now) {
                actions.push((row.key.clone(), EXCLUDED));
                continue;
            }
            let a = plan::plan(row, deletes);
            counts.add(a, row);
            if !a.is_equal() {
                each(row, a);
            }
            actions.push((row.key.clone(), a as u8));
        }
        let m = manifest.clone();
        blocking(move || m.scan_set_actions(pair_id, &actions)).await?;
    }
    Ok(counts)
}

/// Rows planned for `action`, page by page.
async fn rows_with(
    manifest: &Arc<Manifest>,
    pair_id: i64,
    action: Action,
    after: &str,
) -> Result<Vec<ScanRow>> {
    let (m, a) = (manifest.clone(), after.to_string());
    let page = blocking(move || m.scan_page(pair_id, &a, BATCH, Some(action as u8))).await?;
    Ok(page.into_iter().map(|(r, _)| r).collect())
}

/// `slate sync --once`: scan, plan, then copy, delete and record.
pub async fn sync_once(
    manifest: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
) -> Result<SyncReport> {
    opts.copy.validate()?;
    let start = Instant::now();
    let scan = scan(&manifest, src, dst, &opts.filter, opts.full).await?;
    let pair_id = scan.pair.id;
    let deletes = !opts.no_delete;
    let dry = opts.dry_run;
    let counts = plan_all(&manifest, pair_id, deletes, &opts.filter, |row, a| {
        if dry {
            let what = match a {
                Action::CopyMissing => "copy (new)",
                Action::CopyChanged => "copy (changed)",
                Action::Delete => "delete",
                Action::KeepExtra => "keep (--no-delete)",
                _ => return,
            };
            println!("{what}: {}", row.key);
        }
    })
    .await?;
    let mut report = SyncReport {
        counts: counts.clone(),
        listed_src: scan.listed_src,
        listed_dst: scan.listed_dst,
        dry_run: dry,
        ..Default::default()
    };
    // Deletes are deliberate: an empty source never empties a destination by default, and
    // --max-delete is checked before anything at all is changed.
    let dst_total = counts.equal + counts.changed + counts.only_in_destination + counts.kept;
    if counts.only_in_destination > 0 {
        let limit = match (opts.max_delete, scan.listed_src) {
            (Some(l), _) => Some(l),
            (None, 0) => Some(MaxDelete::Count(0)),
            (None, _) => None,
        };
        if let Some(limit) = limit {
            if !limit.allows(counts.only_in_destination, dst_total) {
                let mut e = SlateError::TooManyDeletes {
                    planned: counts.only_in_destination,
                    limit: limit.text(),
                };
                if scan.listed_src == 0 && opts.max_delete.is_none() {
                    e = SlateError::TooManyDeletes {
                        planned: counts.only_in_destination,
                        limit: "0 (the source is empty; pass --max-delete 100% if that is meant)"
                            .into(),
                    };
                }
                return Err(e);
            }
        }
    }
    if dry {
        report.elapsed = start.elapsed();
        return Ok(report);
    }

    let counters = opts.copy.counters.clone().unwrap_or_default();
    counters
        .objects_listed
        .store(counts.only_in_source + counts.changed, Relaxed);
    counters.bytes_listed.store(counts.bytes_to_copy, Relaxed);
    counters.listing_done.store(true, Relaxed);
    let ctx = Arc::new(Ctx::new(&scan.plan, opts.copy.clone(), counters.clone()));
    let show = if counts.only_in_source + counts.changed > 0 {
        opts.copy.progress
    } else {
        copy::ProgressMode::Quiet
    };
    let reporter = progress::Reporter::start(counters.clone(), show);
    let result = apply(&manifest, &scan, &ctx, &mut report).await;
    reporter.finish().await;
    result?;

    // Keys the listings no longer show are forgotten, so that the manifest mirrors both sides.
    if opts.filter.is_empty() && report.failed == 0 {
        let m = manifest.clone();
        let listed_dst = scan.listed_dst.is_some();
        blocking(move || {
            m.prune_unseen(pair_id, manifest::Side::Src)?;
            if listed_dst {
                m.prune_unseen(pair_id, manifest::Side::Dst)?;
            }
            m.mark_synced(pair_id, "sync --once")
        })
        .await?;
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Copies, records equal keys, deletes.
async fn apply(
    manifest: &Arc<Manifest>,
    scan: &Scan,
    ctx: &Arc<Ctx>,
    report: &mut SyncReport,
) -> Result<()> {
    let pair_id = scan.pair.id;
    let src_loc = scan.plan.src.location().clone();
    let dst_loc = scan.plan.dst.location().clone();

    // 1. keys equal without a manifest row on both sides: record them, so that the next run
    //    knows them by their change tokens
    for action in [Action::EqualDigest, Action::EqualSizeOnly] {
        let mut after = String::new();
        loop {
            let rows = rows_with(manifest, pair_id, action, &after).await?;
            let Some(last) = rows.last() else { break };
            after = last.key.clone();
            let mut recs = Vec::with_capacity(rows.len() * 2);
            for r in rows {
                if let (Some(s), Some(d)) = (r.src, r.dst) {
                    recs.push(Record {
                        side: manifest::Side::Src,
                        key: r.key.clone(),
                        state: s,
                        hash: None,
                    });
                    recs.push(Record {
                        side: manifest::Side::Dst,
                        key: r.key,
                        state: d,
                        hash: None,
                    });
                }
            }
            let m = manifest.clone();
            blocking(move || m.record(pair_id, &recs)).await?;
        }
    }

    // 2. copies, `transfers` at once; results recorded in batches as they complete
    for action in [Action::CopyMissing, Action::CopyChanged] {
        let mut after = String::new();
        loop {
            let rows = rows_with(manifest, pair_id, action, &after).await?;
            let Some(last) = rows.last() else { break };
            after = last.key.clone();
            let mut results = futures::stream::iter(rows.into_iter().filter_map(|r| {
                let s = r.src.clone()?;
                let entry = Entry {
                    rel: r.key.clone(),
                    size: s.size,
                    etag: s.etag.clone(),
                    mtime: s
                        .mtime_ms
                        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)),
                };
                Some((r.key, s, copy::item_for(&ctx.src, &dst_loc, entry)))
            }))
            .map(|(key, s, item)| {
                let ctx = ctx.clone();
                async move {
                    let r = copy_one(&ctx, &item).await;
                    (key, s, r)
                }
            })
            .buffer_unordered(ctx.opts.transfers);
            let mut recs = Vec::new();
            let mut last_flush = Instant::now();
            while let Some((key, s, r)) = results.next().await {
                match r {
                    Ok(out) => {
                        report.copied += 1;
                        report.copied_bytes += out.bytes;
                        ctx.counters.objects_done.fetch_add(1, Relaxed);
                        let hash = out.hash.map(|h| h.to_string());
                        let d = State {
                            size: out.bytes,
                            etag: out.dst_etag,
                            mtime_ms: list::millis(Some(SystemTime::now())),
                        };
                        recs.push(Record {
                            side: manifest::Side::Src,
                            key: key.clone(),
                            state: s,
                            hash: hash.clone(),
                        });
                        recs.push(Record {
                            side: manifest::Side::Dst,
                            key,
                            state: d,
                            hash,
                        });
                    }
                    Err(e) => {
                        report.failed += 1;
                        let msg = e.to_string();
                        eprintln!("error: {msg}");
                        report.first_error.get_or_insert(msg);
                    }
                }
                // Flush often enough that a killed run loses little: every 1,000 objects or second.
                if recs.len() >= 2000 || last_flush.elapsed() > Duration::from_secs(1) {
                    let (m, b) = (manifest.clone(), std::mem::take(&mut recs));
                    blocking(move || m.record(pair_id, &b)).await?;
                    last_flush = Instant::now();
                }
            }
            let m = manifest.clone();
            blocking(move || m.record(pair_id, &recs)).await?;
        }
    }

    // 3. deletes, each confirmed by the source saying "not found" now
    let mut after = String::new();
    loop {
        let rows = rows_with(manifest, pair_id, Action::Delete, &after).await?;
        let Some(last) = rows.last() else { break };
        after = last.key.clone();
        let mut results = futures::stream::iter(rows)
            .map(|r| {
                let (src_loc, dst_loc) = (&src_loc, &dst_loc);
                async move {
                    // a delete takes a slot like a copy: both ask the stores for something
                    let _slots = ctx.limits.acquire().await;
                    let res = delete_one(ctx, src_loc, dst_loc, &r.key).await;
                    (r.key, res)
                }
            })
            .buffer_unordered(ctx.opts.transfers);
        let mut gone = Vec::new();
        while let Some((key, res)) = results.next().await {
            match res {
                Ok(true) => {
                    report.deleted += 1;
                    gone.push(key);
                }
                Ok(false) => report.delete_skipped += 1,
                Err(e) => {
                    report.failed += 1;
                    let msg = e.to_string();
                    eprintln!("error: {msg}");
                    report.first_error.get_or_insert(msg);
                }
            }
        }
        let m = manifest.clone();
        blocking(move || m.forget(pair_id, &gone)).await?;
    }
    Ok(())
}

/// Deletes one key at the destination if the source says it is gone. Returns false when the
/// source has it again (the delete is skipped: rule 4, deletes are deliberate). Both requests
/// are sent again while their errors are transient.
async fn delete_one(ctx: &Ctx, src_loc: &Location, dst_loc: &Location, key: &str) -> Result<bool> {
    let err = |detail: String| SlateError::Object {
        key: key.to_string(),
        detail,
    };
    let present = match &ctx.src {
        Side::Cloud { store, .. } => {
            let path = store_path(&src_loc.key_for(key))?;
            let head = ctx
                .retry(End::Src)
                .request(key, |_| true, |_| store.head(&path))
                .await;
            match head {
                Ok(_) => true,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => {
                    return Err(err(format!(
                        "checking the source before deleting: {}",
                        one_line(&e)
                    )))
                }
            }
        }
        Side::Local { loc } => loc.local_path().join(key).exists(),
    };
    if present {
        return Ok(false);
    }
    match &ctx.dst {
        Side::Cloud { store, .. } => {
            let path = store_path(&dst_loc.key_for(key))?;
            ctx.retry(End::Dst)
                .request(key, |_| true, |_| store.delete(&path))
                .await
                .or_else(|e| match e {
                    object_store::Error::NotFound { .. } => Ok(()),
                    e => Err(err(format!("deleting: {}", one_line(&e)))),
                })?
        }
        Side::Local { .. } => {
            crate::stores::local::remove_below(&ctx.dst_root, key)?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_delete_parses_and_limits() {
        assert_eq!(MaxDelete::parse("1000"), Ok(MaxDelete::Count(1000)));
        assert_eq!(MaxDelete::parse("5%"), Ok(MaxDelete::Percent(5.0)));
        assert!(MaxDelete::parse("101%").is_err());
        assert!(MaxDelete::parse("lots").is_err());
        assert!(MaxDelete::Count(3).allows(3, 10));
        assert!(!MaxDelete::Count(3).allows(4, 10));
        assert!(MaxDelete::Percent(10.0).allows(10, 100));
        assert!(!MaxDelete::Percent(10.0).allows(11, 100));
    }
}
