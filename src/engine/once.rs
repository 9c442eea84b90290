//! `sync --once` and `diff`: make a pair's destination equal to its source, deletes included
//! (or report how they differ).
//!
//! Compare: the source is listed (and the destination, until the manifest can vouch for it)
//! in key order and walked side by side with the manifest ([`super::merge`]); the pure
//! [`plan::plan`] decides each key. `diff` reports. `sync --once` keeps only the keys to act
//! on (in a spill of the database: a run with nothing to do writes nothing), checks the
//! delete guards before anything changes, then acts through the one [`Engine`]: copies, then
//! deletes (each only after the source says "not found" now), recording what both sides hold.
//! One reconcile of a pair at a time: the run holds the pair's lease ([`super::lease`]).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::mpsc;

use super::judge::{self, Judge};
use super::key::Engine;
use super::lease::{PairLease, Wait};
use super::merge::{Input, KeyRange, Listing, Recorded, Walk};
use super::plan::{self, Action, Row, Rule};
use crate::copy::transfer::Ctx;
use crate::copy::{self, progress, CopyOptions};
use crate::core::error::{Result, SlateError};
use crate::core::filter::Filter;
use crate::core::location::{Location, Scheme};
use crate::core::object::Entry;
use crate::state::blocking;
use crate::state::manifest::{self, Manifest, PairInfo, Planned, Record, Spill, SpillFilter};
use crate::stores::inventory::Report;
use crate::stores::list;
use crate::stores::side::Side;

/// Rows per manifest transaction / page.
const BATCH: usize = 10_000;

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
    /// When another reconcile of the pair holds its lease: wait, or stop (exit 2).
    pub wait: Wait,
    /// What the run is, for the lease's holder line (`sync --once`, `drift check`, `job 12`).
    pub purpose: String,
    /// Skip the run when the pair turns out, once its lease is held, to have been reconciled
    /// already (a daemon's first backfill, which another worker may have finished meanwhile).
    pub unless_synced: bool,
    /// How keys the manifest cannot vouch for are compared (`--checksum`, `--size-only`).
    pub rule: Rule,
    /// Act through the inbox: each key to copy, update or delete becomes a pending key of the
    /// pair (its manifest row of the destination forgotten, so that the per-key reconcile
    /// looks at the destination again) instead of being acted on here. The daemon's drift
    /// checks run so: the event loop applies those keys under its claims, one worker and one
    /// reconcile at a time per key, so a drift copy of an old version can never land after
    /// the event loop wrote a newer one.
    pub enqueue: bool,
    /// Only the deletes go through the inbox (copies are acted on here): the daemon's
    /// backfill and start-up reconcile, so that its deletes meet the delete brake.
    pub enqueue_deletes: bool,
    /// `--backup-dir`: what deletes and overwrites would remove at the destination is kept
    /// there first (checked against the pair when it was set).
    pub backup: Option<super::backup::Backup>,
    /// `--inventory`: the source's objects are read from an inventory report instead of a
    /// listing (see [`Inventory`]).
    pub inventory: Option<Inventory>,
    /// `slate copy`: nothing is deleted, and the manifest's rows of what was copied or found
    /// equal are written (so a later sync needs no HEAD for them), but the pair is not marked
    /// reconciled: what only the destination holds is for a sync to judge.
    pub copy_only: bool,
}

/// A reconcile from an inventory report (`--inventory URL`): a first pass takes the source's
/// objects from the report (no listing of the source), copies what the destination lacks or
/// holds otherwise, and deletes nothing (a key absent from the report may have been written
/// after it). What changed after the report's time is then covered as `gap` says.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// The report's manifest, or a folder of reports (the newest is taken).
    pub url: Location,
    pub gap: Gap,
}

/// How a reconcile from an inventory report covers what changed after the report was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gap {
    /// A second pass lists both sides and reconciles as `--once` does (deletes included):
    /// what the first pass copied is equal by the manifest there, so it costs the listings,
    /// no HEAD and no byte. Always correct.
    #[default]
    List,
    /// The pair's event queue received events since before the report's time (the user says
    /// so): they carry every change since, so no listing follows and the pair counts as
    /// reconciled.
    Events,
}

impl Gap {
    pub fn parse(s: &str) -> std::result::Result<Gap, String> {
        match s {
            "list" => Ok(Gap::List),
            "events" => Ok(Gap::Events),
            _ => Err(format!("{s:?}: list or events")),
        }
    }
}

/// The plan's tally (what `diff` reports).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub only_in_source: u64,
    pub only_in_destination: u64,
    pub changed: u64,
    /// Same bytes, other metadata: updated in place where the destination allows it.
    pub metadata_changed: u64,
    pub equal: u64,
    /// Of `equal`: what decided it. Unchanged since slate synced the key (the manifest)...
    pub equal_recorded: u64,
    /// ... an MD5 both sides list ...
    pub equal_digest: u64,
    /// ... size and modification time (rclone's default) ...
    pub equal_mtime: u64,
    /// ... both read and hashed (`--checksum`) ...
    pub equal_content: u64,
    /// ... or size alone (`--size-only`).
    pub equal_size_only: u64,
    pub bytes_to_copy: u64,
    /// Destination extras kept because of `--no-delete`.
    pub kept: u64,
    /// In both, not compared (`copy --ignore-existing`).
    pub skipped: u64,
    /// Bytes per category (source sizes, destination sizes for destination-only keys).
    pub bytes_only_in_source: u64,
    pub bytes_only_in_destination: u64,
    pub bytes_changed: u64,
    pub bytes_equal: u64,
}

impl Counts {
    pub fn add(&mut self, a: Action, row: &Row) {
        match a {
            Action::EqualRecorded | Action::EqualTouched => {
                self.equal += 1;
                self.equal_recorded += 1
            }
            Action::MetaChanged => self.metadata_changed += 1,
            Action::EqualDigest => {
                self.equal += 1;
                self.equal_digest += 1
            }
            Action::EqualModTime => {
                self.equal += 1;
                self.equal_mtime += 1
            }
            Action::EqualContent => {
                self.equal += 1;
                self.equal_content += 1
            }
            Action::EqualSizeOnly => {
                self.equal += 1;
                self.equal_size_only += 1
            }
            // decided before they are counted
            Action::CheckTimes | Action::CheckContent | Action::CheckMeta => {}
            Action::CopyMissing => self.only_in_source += 1,
            Action::CopyChanged => self.changed += 1,
            Action::Delete => self.only_in_destination += 1,
            Action::KeepExtra => self.kept += 1,
            Action::Skipped => self.skipped += 1,
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
        self.only_in_source
            + self.only_in_destination
            + self.changed
            + self.kept
            + self.metadata_changed
    }

    /// How the equal keys were found equal, e.g. `12 by the manifest, 3 by modification
    /// time`; empty when none are.
    pub fn equal_by(&self) -> String {
        [
            (self.equal_recorded, "by the manifest"),
            (self.equal_digest, "by MD5"),
            (self.equal_mtime, "by size and modification time"),
            (self.equal_content, "by content"),
            (self.equal_size_only, "by size only"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, how)| format!("{n} {how}"))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// The result of `sync --once`.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    pub counts: Counts,
    pub listed_src: u64,
    pub listed_dst: Option<u64>,
    pub copied: u64,
    pub copied_bytes: u64,
    /// Of `copied`: copied by the store itself (CopyObject, Put Blob From URL, rewrite).
    pub server_side: u64,
    pub deleted: u64,
    /// Keys whose metadata alone was brought up to date (no bytes moved).
    pub meta_updated: u64,
    /// Deletes not applied because the source has the key again.
    pub delete_skipped: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub dry_run: bool,
    /// Keys put through the inbox instead of acted on ([`SyncOptions::enqueue`]).
    pub queued: u64,
    /// The source's objects came from an inventory report (the report's URL), not a listing.
    pub inventory: Option<String>,
    /// A reconcile from an inventory report: its first pass (the report's line comes first).
    pub first_pass: Option<Box<SyncReport>>,
    /// Objects the pass from a report could not copy, left to the listing pass that follows
    /// (changed or removed since the report, or failing).
    pub left: u64,
    /// Source objects in an archive tier (S3 Glacier Flexible Retrieval / Deep Archive,
    /// Azure Archive) that cannot be read until restored: skipped with one line each, not
    /// failures; the next run tries them again.
    pub archived: u64,
}

/// The archive tier ("the archive tier GLACIER", or "an archive tier" when the answer was cut
/// before its class) a failed read names, when the store refused it because the object must be
/// restored first: S3's `InvalidObjectState` (with its `<StorageClass>`), Azure's
/// `BlobArchived`.
pub fn archived_tier(msg: &str) -> Option<String> {
    if msg.contains("InvalidObjectState") {
        let class = msg
            .split("<StorageClass>")
            .nth(1)
            .and_then(|r| r.split('<').next())
            .filter(|c| {
                !c.is_empty() && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            })
            .map(|c| format!("the archive tier {c}"))
            .unwrap_or_else(|| "an archive tier".into());
        return Some(class);
    }
    if msg.contains("BlobArchived") || msg.contains("not permitted on an archived blob") {
        return Some("the archive tier Archive".into());
    }
    None
}

impl SyncReport {
    /// Counts an object that failed, tells the caller's hook, and keeps the first error.
    fn fail(&mut self, hook: Option<&FailedHook>, key: &str, msg: String) {
        if let Some(tier) = archived_tier(&msg) {
            self.archived += 1;
            tracing::warn!(
                key = %key,
                "in {tier}: skipped (restore it to copy it; the next run tries again)"
            );
            return;
        }
        self.failed += 1;
        tell(hook, key, &msg);
        self.first_error.get_or_insert(msg);
    }

    /// The summary of a `slate copy` of a prefix: what it copied and what it skipped.
    pub fn copy_line(&self) -> String {
        let c = &self.counts;
        let secs = self.elapsed.as_secs_f64();
        let (n, bytes) = if self.dry_run {
            (c.only_in_source + c.changed, c.bytes_to_copy)
        } else {
            (self.copied, self.copied_bytes)
        };
        let mut s = format!(
            "copy: source {} listed, destination {} listed; {} {n}{} ({} new, {} changed, {}) in {secs:.2} s ({:.1} MB/s), skipped {}",
            self.listed_src,
            self.listed_dst.map(|n| n.to_string()).unwrap_or_else(|| "not".into()),
            if self.dry_run { "would copy" } else { "copied" },
            self.of_planned(n),
            c.only_in_source,
            c.changed,
            progress::human_bytes(bytes),
            bytes as f64 / 1e6 / secs.max(1e-6),
            c.equal + c.skipped,
        );
        let mut why = Vec::new();
        if c.equal > 0 {
            why.push(format!("{} equal: {}", c.equal, c.equal_by()));
        }
        if c.skipped > 0 {
            why.push(format!(
                "{} already at the destination, not compared (--ignore-existing)",
                c.skipped
            ));
        }
        if !why.is_empty() {
            s.push_str(&format!(" ({})", why.join("; ")));
        }
        s.push_str(&self.meta_part(self.meta_updated));
        if self.server_side > 0 {
            s.push_str(&format!(", {} server-side", self.server_side));
        }
        if c.kept > 0 {
            s.push_str(&format!(
                ", {} only at the destination (left; `slate sync` deletes them)",
                c.kept
            ));
        }
        s.push_str(&self.archived_part());
        if self.failed > 0 {
            s.push_str(&format!(", {} FAILED", self.failed));
        }
        s
    }

    /// ` of N` when fewer were copied than the plan named (the rest failed or were skipped
    /// as archived): the counts in parentheses are the plan's.
    fn of_planned(&self, copied: u64) -> String {
        let planned = self.counts.only_in_source + self.counts.changed;
        if self.dry_run || copied >= planned {
            String::new()
        } else {
            format!(" of {planned}")
        }
    }

    fn archived_part(&self) -> String {
        match self.archived {
            0 => String::new(),
            n => format!(", {n} in archive tiers (skipped: restore them to copy them)"),
        }
    }

    /// `, N updated (metadata only, no bytes moved)` when metadata alone changed; `updated`:
    /// what this pass updated.
    fn meta_part(&self, updated: u64) -> String {
        let c = &self.counts;
        if c.metadata_changed == 0 {
            return String::new();
        }
        if self.dry_run {
            format!(
                ", {} would update (metadata only, no bytes moved)",
                c.metadata_changed
            )
        } else {
            format!(", {updated} updated (metadata only, no bytes moved)")
        }
    }

    pub fn line(&self) -> String {
        let c = &self.counts;
        let dst = match self.listed_dst {
            Some(n) => format!("{n} listed"),
            None => "from the manifest (not listed)".into(),
        };
        let verb = if self.dry_run { "would copy" } else { "copied" };
        let mut s = String::new();
        // after a pass from a report, this pass's own copies (the totals come last)
        let (mut copied, mut copied_bytes, mut meta_updated) =
            (self.copied, self.copied_bytes, self.meta_updated);
        if let Some(first) = &self.first_pass {
            s.push_str(&first.line());
            s.push('\n');
            copied -= first.copied.min(copied);
            copied_bytes -= first.copied_bytes.min(copied_bytes);
            meta_updated -= first.meta_updated.min(meta_updated);
        }
        let src = match &self.inventory {
            Some(url) => format!("{} from the inventory report {url}", self.listed_src),
            None => format!("{} listed", self.listed_src),
        };
        s.push_str(&format!(
            "sync: source {src}, destination {dst}; {verb} {}{} ({} new, {} changed, {}), {} {}, {} equal",
            if self.dry_run { c.only_in_source + c.changed } else { copied },
            if self.first_pass.is_some() { String::new() } else { self.of_planned(copied) },
            c.only_in_source,
            c.changed,
            progress::human_bytes(if self.dry_run { c.bytes_to_copy } else { copied_bytes }),
            if self.dry_run { "would delete" } else { "deleted" },
            if self.dry_run { c.only_in_destination } else { self.deleted },
            c.equal,
        ));
        if c.equal > 0 {
            s.push_str(&format!(" ({})", c.equal_by()));
        }
        s.push_str(&self.meta_part(meta_updated));
        if c.kept > 0 {
            s.push_str(&format!(
                ", {} extra kept ({})",
                c.kept,
                if self.inventory.is_some() {
                    "a report deletes nothing: they may be newer than it"
                } else {
                    "--no-delete"
                }
            ));
        }
        if self.delete_skipped > 0 {
            s.push_str(&format!(
                ", {} deletes skipped (source has the key again)",
                self.delete_skipped
            ));
        }
        if self.queued > 0 {
            s.push_str(&format!(
                ", {} put through the inbox (applied by the event loop)",
                self.queued
            ));
        }
        if c.only_in_source + c.changed == 0 && !self.dry_run {
            s.push_str("; no data transferred");
        }
        if self.first_pass.is_some() {
            s.push_str(&format!(
                "; both passes copied {} ({})",
                self.copied,
                progress::human_bytes(self.copied_bytes)
            ));
        }
        if self.left > 0 {
            s.push_str(&format!(
                ", {} not copied (changed or gone since the report, or failing): left to the listing pass",
                self.left
            ));
        }
        s.push_str(&self.archived_part());
        if self.failed > 0 {
            s.push_str(&format!(", {} FAILED", self.failed));
        }
        s.push_str(&format!(" in {:.2} s", self.elapsed.as_secs_f64()));
        s
    }
}

/// What the caller hears of a run as it goes: each planned difference (for `--dry-run` and
/// `diff` output) and each object that failed (named, for the log or the terminal). The
/// library prints nothing itself.
#[derive(Default)]
pub struct Hooks<'a> {
    pub planned: Option<&'a mut PlannedHook>,
    pub failed: Option<&'a FailedHook>,
}

/// Hears each planned difference.
pub type PlannedHook = dyn FnMut(&Row, Action) + Send;

/// Hears each object that failed: its key (relative to the pair; "" when the failure names
/// no key) and the one-line error.
pub type FailedHook = dyn Fn(&str, &str) + Send + Sync;

/// Tells the caller's hook about a failed object.
fn tell(failed: Option<&FailedHook>, key: &str, msg: &str) {
    if let Some(f) = failed {
        f(key, msg);
    }
}

/// The compare of a pair: what the listings held, the tally, and (when asked) the spill of
/// keys to act on.
pub struct Compared {
    pub pair: PairInfo,
    pub plan: copy::Plan,
    pub counts: Counts,
    pub listed_src: u64,
    /// None when the destination came from the manifest.
    pub listed_dst: Option<u64>,
    /// Entries a listing could not read (named), counted as failed.
    pub unreadable: Vec<SlateError>,
}

/// Starts the sorted listing of one side (a local source's symlinks follow its location's
/// rule: `--copy-links`).
fn listing(
    side: &Side,
    filter: &Filter,
    range: &KeyRange,
) -> (Input, tokio::task::JoinHandle<Result<u64>>) {
    let (tx, rx) = mpsc::channel(BATCH);
    let (side2, range2) = (side.clone(), range.clone());
    let task = tokio::spawn(async move {
        list::list_range(&side2, tx, copy::classify_store_error, &range2).await
    });
    (
        Input::Listing(Box::new(Listing::new(
            rx,
            side.location().to_string(),
            filter.clone(),
            range.clone(),
        ))),
        task,
    )
}

/// The source's objects from an inventory report, as [`listing`] gives a listing's.
fn report_listing(
    report: &Arc<Report>,
    side: &Side,
    filter: &Filter,
    range: &KeyRange,
) -> (Input, tokio::task::JoinHandle<Result<u64>>) {
    let (tx, rx) = mpsc::channel(BATCH);
    let (r, loc) = (report.clone(), side.location().clone());
    let task = tokio::spawn(async move { r.list(&loc, tx).await });
    (
        Input::Listing(Box::new(Listing::new(
            rx,
            report.url.clone(),
            filter.clone(),
            range.clone(),
        ))),
        task,
    )
}

/// Waits for a lister and turns its failure into the listing's error.
async fn finish_listing(url: &Location, task: tokio::task::JoinHandle<Result<u64>>) -> Result<()> {
    task.await
        .map_err(|e| SlateError::List {
            url: url.to_string(),
            detail: e.to_string(),
        })?
        .map(|_| ())
}

/// Compares a pair: lists and walks (see the module documentation), calling `each` for every
/// key in order with its action; returns the tally. With `spill`, keys to act on are kept
/// there. `list_dst`: list the destination even when the manifest can vouch for it.
#[allow(clippy::too_many_arguments)]
async fn walk_pair(
    db: &Arc<Manifest>,
    plan: copy::Plan,
    pair: PairInfo,
    filter: &Filter,
    list_dst: bool,
    deletes: bool,
    rule: Rule,
    metadata: bool,
    limit: Option<Arc<crate::copy::bwlimit::BwLimit>>,
    spill: Option<&Spill>,
    range: &KeyRange,
    report: Option<&Arc<Report>>,
    each: &mut (dyn FnMut(&Row, Action) + Send),
) -> Result<Compared> {
    let list_dst = list_dst || pair.last_sync_at.is_none();
    // the source's tags count where a copy carries them (an S3 source, an S3 or Azure
    // destination, metadata carried): as `Ctx::wants_tags`
    let src_tags = match plan.dst.location().scheme {
        Scheme::S3 | Scheme::Azure if metadata => {
            crate::stores::s3tags::tag_reader(plan.src.location())?
        }
        _ => None,
    };
    let judge = Judge {
        src: plan.src.clone(),
        dst: plan.dst.clone(),
        rule,
        db: db.clone(),
        pair_id: pair.id,
        metadata,
        src_tags,
        limit,
    };
    let (src_in, src_task) = match report {
        Some(r) => report_listing(r, &plan.src, filter, range),
        None => listing(&plan.src, filter, range),
    };
    let recorded = |side| Recorded::from(db.clone(), pair.id, side, range.after.clone());
    let (dst_in, dst_task) = if list_dst {
        let (i, t) = listing(&plan.dst, filter, range);
        (i, Some(t))
    } else {
        (Input::Recorded(recorded(manifest::Side::Dst)), None)
    };
    let mut walk = Walk::new(
        src_in,
        dst_in,
        recorded(manifest::Side::Src),
        recorded(manifest::Side::Dst),
        filter.clone(),
    )
    .within(range.clone());
    let mut counts = Counts::default();
    let mut unreadable = Vec::new();
    let mut batch = Vec::new();
    // Keys in order, each with its planned action; undecided ones are decided a window at a
    // time (a HEAD or a read of each, `judge::AT_ONCE` at once), in order.
    let mut window: Vec<(Row, Action)> = Vec::new();
    let mut undecided = 0usize;
    let walked: Result<()> = async {
        loop {
            let next = walk.next(&mut unreadable).await?;
            if let Some(row) = next.as_ref() {
                if row.src.is_some() || row.dst.is_some() {
                    let a = plan::plan(row, deletes, rule);
                    undecided += a.is_undecided() as usize;
                    window.push((row.clone(), a));
                } else {
                    window.push((row.clone(), Action::EqualRecorded));
                }
            }
            let full = undecided >= 4 * judge::AT_ONCE || window.len() >= BATCH;
            if !(full || next.is_none()) {
                continue;
            }
            let decided: Vec<(Row, Action)> = if undecided == 0 {
                std::mem::take(&mut window)
            } else {
                let judge = &judge;
                futures::stream::iter(std::mem::take(&mut window))
                    .map(|(row, a)| async move {
                        let a = judge.decide(&row, a).await;
                        (row, a)
                    })
                    .buffered(judge::AT_ONCE)
                    .collect()
                    .await
            };
            undecided = 0;
            for (row, a) in decided {
                let gone_both = row.src.is_none() && row.dst.is_none();
                // the manifest remembers a side that no longer has the key
                let prune_src = row.m_src.is_some() && row.src.is_none();
                let prune_dst = list_dst && row.m_dst.is_some() && row.dst.is_none();
                if gone_both {
                    if (prune_src || prune_dst) && spill.is_some() {
                        batch.push(Planned {
                            key: row.key.clone(),
                            action: Action::EqualRecorded as u8,
                            src: None,
                            dst: None,
                            prune_src,
                            prune_dst,
                        });
                    }
                } else {
                    counts.add(a, &row);
                    each(&row, a);
                    if spill.is_some() && (a != Action::EqualRecorded || prune_src || prune_dst) {
                        batch.push(Planned {
                            prune_dst: prune_dst && !a.is_copy(),
                            prune_src,
                            key: row.key,
                            action: a as u8,
                            src: row.src,
                            dst: row.dst,
                        });
                    }
                }
                if batch.len() >= BATCH {
                    if let Some(sp) = spill {
                        spill_add(db, sp, std::mem::take(&mut batch)).await?;
                    }
                }
            }
            if next.is_none() {
                break;
            }
        }
        if let Some(sp) = spill {
            spill_add(db, sp, std::mem::take(&mut batch)).await?;
        }
        Ok(())
    }
    .await;
    let listed_src = walk.src.seen();
    let listed_dst = list_dst.then(|| walk.dst.seen());
    drop(walk); // stops the listers if the walk ended early
    walked?;
    finish_listing(plan.src.location(), src_task).await?;
    if let Some(t) = dst_task {
        finish_listing(plan.dst.location(), t).await?;
    }
    Ok(Compared {
        pair,
        plan,
        counts,
        listed_src,
        listed_dst,
        unreadable,
    })
}

async fn spill_add(db: &Arc<Manifest>, spill: &Spill, rows: Vec<Planned>) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let (d, sp) = (db.clone(), spill.clone());
    blocking(move || d.spill_add(&sp, &rows)).await
}

/// Opens both sides and the pair's manifest rows; refuses a source that names one object.
pub(crate) async fn open_pair(
    db: &Arc<Manifest>,
    src: &Location,
    dst: &Location,
) -> Result<(copy::Plan, PairInfo)> {
    let plan = copy::plan_prefix(src, dst).await?;
    if plan.single.is_some() {
        return Err(SlateError::BadUrl {
            url: src.raw.clone(),
            why: "names one object; sync and diff work on prefixes and folders (use slate copy for one object)".into(),
        });
    }
    let (s, d, m) = (src.to_string(), dst.to_string(), db.clone());
    let pair = blocking(move || m.pair(&s, &d)).await?;
    Ok((plan, pair))
}

/// `slate diff`: lists both sides and compares them with the manifest; `each` sees every
/// difference in key order. A local source's symlinks follow `src`'s rule (`--copy-links`).
pub async fn compare(
    db: &Arc<Manifest>,
    src: &Location,
    dst: &Location,
    filter: &Filter,
    rule: Rule,
    each: &mut (dyn FnMut(&Row, Action) + Send),
) -> Result<Compared> {
    let (plan, pair) = open_pair(db, src, dst).await?;
    let mut only_diffs = |row: &Row, a: Action| {
        if !a.is_equal() {
            each(row, a)
        }
    };
    walk_pair(
        db,
        plan,
        pair,
        filter,
        true,
        true,
        rule,
        true,
        None,
        None,
        &KeyRange::all(),
        None,
        &mut only_diffs,
    )
    .await
}

/// `slate diff --from-manifest`: what the manifest believes of both sides, with no request
/// to either store.
pub async fn compare_recorded(
    db: &Arc<Manifest>,
    pair_id: i64,
    filter: &Filter,
    each: &mut (dyn FnMut(&Row, Action) + Send),
) -> Result<Counts> {
    let mut walk = Walk::new(
        Input::Recorded(Recorded::new(db.clone(), pair_id, manifest::Side::Src)),
        Input::Recorded(Recorded::new(db.clone(), pair_id, manifest::Side::Dst)),
        Recorded::new(db.clone(), pair_id, manifest::Side::Src),
        Recorded::new(db.clone(), pair_id, manifest::Side::Dst),
        filter.clone(),
    );
    let mut counts = Counts::default();
    let mut none = Vec::new();
    while let Some(row) = walk.next(&mut none).await? {
        if row.src.is_none() && row.dst.is_none() {
            continue;
        }
        // no store is asked: rows neither side's manifest vouches for are compared by size
        let a = plan::plan(&row, true, Rule::SizeOnly);
        counts.add(a, &row);
        if !a.is_equal() {
            each(&row, a);
        }
    }
    Ok(counts)
}

/// The start of a reconcile: its options checked, the source as they read it (`--copy-links`),
/// both sides and the pair's manifest rows opened.
async fn begin(
    db: &Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
) -> Result<(Instant, Location, copy::Plan, PairInfo)> {
    opts.copy.validate()?;
    let start = Instant::now();
    let src = copy::source(src, &opts.copy);
    let (plan, pair) = open_pair(db, &src, dst).await?;
    Ok((start, src, plan, pair))
}

/// `slate sync --once`: compare, check the delete guards, then copy, delete and record.
pub async fn sync_once(
    db: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
    hooks: Hooks<'_>,
) -> Result<SyncReport> {
    let (start, src, plan, pair) = begin(&db, src, dst, opts).await?;
    let src = &src;
    let label = format!("{src} -> {dst}");
    let lease = PairLease::take(&db, pair.id, &label, &opts.purpose, opts.wait).await?;
    if opts.unless_synced {
        let (m, s, d) = (db.clone(), src.to_string(), dst.to_string());
        let now = blocking(move || m.find_pair(&s, &d)).await?;
        if now.is_some_and(|p| p.last_sync_at.is_some()) {
            tracing::info!(pair = %label, "reconciled meanwhile by another worker: nothing to do");
            lease.release().await;
            return Ok(SyncReport::default());
        }
    }
    let r = match &opts.inventory {
        Some(inv) => sync_inventory(&db, plan, pair, &lease, inv, opts, hooks, start, &label).await,
        None => {
            sync_leased(
                &db, plan, pair, &lease, None, opts, hooks, start, &label, None,
            )
            .await
        }
    };
    lease.release().await;
    r
}

/// `sync --once --inventory`: the pass from the report, then the gap covered (see
/// [`Inventory`]).
#[allow(clippy::too_many_arguments)]
async fn sync_inventory(
    db: &Arc<Manifest>,
    plan: copy::Plan,
    pair: PairInfo,
    lease: &PairLease,
    inv: &Inventory,
    opts: &SyncOptions,
    hooks: Hooks<'_>,
    start: Instant,
    label: &str,
) -> Result<SyncReport> {
    let report = Arc::new(Report::open(&inv.url).await?);
    report.check_source(plan.src.location())?;
    let age = std::time::SystemTime::now()
        .duration_since(report.time)
        .unwrap_or_default();
    tracing::info!(pair = %label, report = %report.url, files = report.files.len(),
        age_s = age.as_secs(), "the source's objects come from an inventory report");
    let Hooks { planned, failed } = hooks;
    let (src, dst, pair_id) = (
        plan.src.location().clone(),
        plan.dst.location().clone(),
        pair.id,
    );
    // With `list`, an object changed or removed since the report fails its copy here (its
    // ETag no longer matches, or it is gone) and the listing pass settles it: it is counted
    // as left, not failed, unless that pass fails it too. With `events`, what failed is told
    // as any failure (a daemon retries it as a pending key; its event brings it again).
    let quiet = |key: &str, msg: &str| {
        tracing::debug!(key, error = msg, "left to the listing pass");
    };
    let mut planned = planned;
    let mut first = sync_leased(
        db,
        plan,
        pair,
        lease,
        None,
        opts,
        Hooks {
            planned: planned.as_deref_mut(),
            failed: match inv.gap {
                Gap::Events => failed,
                Gap::List => Some(&quiet),
            },
        },
        start,
        label,
        Some(report),
    )
    .await?;
    if inv.gap == Gap::Events {
        if !opts.dry_run && opts.filter.is_empty() {
            // the events since the report carry the rest: reconciled as of now, so the
            // report is not read again at the next start
            let d = db.clone();
            blocking(move || d.mark_synced(pair_id, "sync --once --inventory")).await?;
        }
        return Ok(first);
    }
    first.left = std::mem::take(&mut first.failed);
    first.first_error = None;
    if opts.dry_run {
        // nothing was copied, so the listing pass would plan the same again
        return Ok(first);
    }
    let (plan, pair) = open_pair(db, &src, &dst).await?;
    let mut second = sync_leased(
        db,
        plan,
        pair,
        lease,
        None,
        opts,
        Hooks { planned, failed },
        start,
        label,
        None,
    )
    .await?;
    second.copied += first.copied;
    second.copied_bytes += first.copied_bytes;
    second.meta_updated += first.meta_updated;
    second.first_pass = Some(Box::new(first));
    Ok(second)
}

/// One partition of a partitioned reconcile ([`super::partition`]): `sync --once` of the keys
/// in `part.range` only, under the partition's lease (held already). The manifest forgets
/// what the sides no longer hold in the range; the pair is marked reconciled by the run, when
/// all its partitions are done.
pub async fn sync_part(
    db: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: &SyncOptions,
    lease: &PairLease,
    part: &PartCtx,
    hooks: Hooks<'_>,
) -> Result<SyncReport> {
    let (start, src, plan, pair) = begin(&db, src, dst, opts).await?;
    let label = format!("{src} -> {dst} {}", part.range.text());
    sync_leased(
        &db,
        plan,
        pair,
        lease,
        Some(part),
        opts,
        hooks,
        start,
        &label,
        None,
    )
    .await
}

/// What a partition's run needs beyond a whole pair's.
#[derive(Debug, Clone)]
pub struct PartCtx {
    pub run_id: i64,
    /// The partition's number in its run.
    pub idx: i64,
    pub range: KeyRange,
}

/// A reconcile under a lease held: the spill, then compare and act.
#[allow(clippy::too_many_arguments)]
async fn sync_leased(
    db: &Arc<Manifest>,
    plan: copy::Plan,
    pair: PairInfo,
    lease: &PairLease,
    part: Option<&PartCtx>,
    opts: &SyncOptions,
    hooks: Hooks<'_>,
    start: Instant,
    label: &str,
    report: Option<Arc<Report>>,
) -> Result<SyncReport> {
    let d = db.clone();
    let spill = SpillGuard {
        db: db.clone(),
        spill: blocking(move || d.spill_new()).await?,
        dropped: false,
    };
    let lost = lease.lost_flag();
    let run = Run {
        db,
        spill: spill.get(),
        lost: &lost,
        label,
        part,
        report,
    };
    let r = sync_held(&run, plan, pair, opts, hooks, start).await;
    spill.drop_now().await;
    r
}

/// Drops a run's spill when the run ends, also when its future is dropped half-way (a job
/// cancelled, a daemon stopping): a temporary table left behind would stay on the writing
/// connection for the life of the process.
struct SpillGuard {
    db: Arc<Manifest>,
    spill: Spill,
    dropped: bool,
}

impl SpillGuard {
    fn get(&self) -> &Spill {
        &self.spill
    }

    async fn drop_now(mut self) {
        self.dropped = true;
        let (d, sp) = (self.db.clone(), self.spill.clone());
        if let Err(e) = blocking(move || d.spill_drop(&sp)).await {
            tracing::warn!(error = %e, "dropping the spill failed");
        }
    }
}

impl Drop for SpillGuard {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (d, sp) = (self.db.clone(), self.spill.clone());
            rt.spawn_blocking(move || {
                let _ = d.spill_drop(&sp);
            });
        }
    }
}

async fn sync_held(
    run: &Run<'_>,
    plan: copy::Plan,
    pair: PairInfo,
    opts: &SyncOptions,
    hooks: Hooks<'_>,
    start: Instant,
) -> Result<SyncReport> {
    let (db, spill) = (run.db, run.spill);
    // a report deletes nothing: a key it lacks may have been written after it
    let deletes = !opts.no_delete && !opts.copy_only && run.report.is_none();
    let dry = opts.dry_run;
    let failed = hooks.failed;
    let mut planned = hooks.planned;
    let mut each = |row: &Row, a: Action| {
        if !a.is_equal() {
            if let Some(f) = planned.as_mut() {
                f(row, a);
            }
        }
    };
    let c = walk_pair(
        db,
        plan,
        pair,
        &opts.filter,
        opts.full,
        deletes,
        opts.rule,
        opts.copy.metadata,
        opts.copy.bwlimit.clone(),
        Some(spill),
        &run.part.map(|p| p.range.clone()).unwrap_or_default(),
        run.report.as_ref(),
        &mut each,
    )
    .await?;
    let counts = c.counts.clone();
    let mut report = SyncReport {
        counts: counts.clone(),
        listed_src: c.listed_src,
        listed_dst: c.listed_dst,
        dry_run: dry,
        inventory: run.report.as_ref().map(|r| {
            let made = chrono::DateTime::<chrono::Utc>::from(r.time).format("%Y-%m-%d %H:%M UTC");
            format!("{} (made {made})", r.url)
        }),
        ..Default::default()
    };
    for e in &c.unreadable {
        let key = match e {
            SlateError::Object { key, .. } => key.as_str(),
            _ => "",
        };
        report.fail(failed, key, e.to_string());
    }
    // Deletes are deliberate: an empty source never empties a destination by default, and
    // --max-delete is checked before anything at all is changed.
    let dst_total = counts.equal + counts.changed + counts.only_in_destination + counts.kept;
    if counts.only_in_destination > 0 {
        let limit = match (opts.max_delete, c.listed_src) {
            (Some(l), _) => Some(l),
            (None, 0) => Some(MaxDelete::Count(0)),
            (None, _) => None,
        };
        if let (Some(MaxDelete::Count(n)), Some(part), false) = (opts.max_delete, run.part, dry) {
            // a count bounds the whole run: each partition reserves its deletes from it
            let (d, id, idx, want) = (
                db.clone(),
                part.run_id,
                part.idx,
                counts.only_in_destination,
            );
            let fits = blocking(move || {
                crate::state::partitions::Partitions::new(&d).reserve_deletes(id, idx, want, n)
            })
            .await?;
            if !fits {
                return Err(SlateError::TooManyDeletes {
                    planned: counts.only_in_destination,
                    limit: format!("{n} over the whole partitioned run"),
                });
            }
        } else if let Some(limit) = limit {
            if !limit.allows(counts.only_in_destination, dst_total) {
                let limit = if c.listed_src == 0 && opts.max_delete.is_none() {
                    "0 (the source is empty; pass --max-delete 100% if that is meant)".into()
                } else {
                    limit.text()
                };
                return Err(SlateError::TooManyDeletes {
                    planned: counts.only_in_destination,
                    limit,
                });
            }
        }
    }
    if dry {
        report.elapsed = start.elapsed();
        return Ok(report);
    }
    // the temporary files of a slate killed mid-copy at a local destination go now (a listing,
    // a diff or a dry run leave them: they change nothing)
    if let Side::Local { loc } = &c.plan.dst {
        let root = loc.local_path();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::stores::local::sweep_orphan_temps(&root) {
                tracing::warn!(error = %e, "sweeping temporary files failed");
            }
        });
    }

    let counters = opts.copy.counters.clone().unwrap_or_default();
    counters
        .objects_listed
        .store(counts.only_in_source + counts.changed, Relaxed);
    counters.bytes_listed.store(counts.bytes_to_copy, Relaxed);
    counters.listing_done.store(true, Relaxed);
    let mut copy_opts = opts.copy.clone();
    if copy_opts.record_uploads {
        copy_opts
            .resume
            .get_or_insert_with(|| copy::resume::UploadsDb(db.clone()));
    }
    let ctx = Arc::new(Ctx::new(&c.plan, copy_opts, counters.clone())?);
    let engine = Engine::new(
        db.clone(),
        c.pair.id,
        ctx.clone(),
        c.plan.dst.location().clone(),
    )
    .with_backup(opts.backup.clone());
    let show = if counts.only_in_source + counts.changed > 0 {
        opts.copy.progress
    } else {
        copy::ProgressMode::Quiet
    };
    let reporter = progress::Reporter::start(counters.clone(), show);
    let result = if opts.enqueue {
        record_equal(run, engine.pair_id).await?;
        enqueue(run, engine.pair_id, &mut report).await
    } else {
        act(run, &engine, &mut report, failed, opts.enqueue_deletes).await
    };
    if let (true, Some(l)) = (result.is_ok(), &ctx.ledger) {
        // what a stopped slate left and this run, to its end, did not continue
        l.release_unused(&ctx.dst).await;
    }
    reporter.finish().await;
    result?;

    // A clean, unfiltered pass: the manifest forgets what the sides no longer hold, and
    // vouches for the destination from now on. Not a pass from a report: the source may
    // hold what the report does not.
    if opts.filter.is_empty() && report.failed == 0 {
        for (which, side) in [
            (SpillFilter::PruneSrc, manifest::Side::Src),
            (SpillFilter::PruneDst, manifest::Side::Dst),
        ] {
            if which == SpillFilter::PruneSrc && run.report.is_some() {
                // what the report lacks may be at the source still (newer than the report);
                // the destination was listed, so what it lacks is gone
                continue;
            }
            let mut pages = Pages::new(run, which);
            while let Some(rows) = pages.next().await? {
                let keys: Vec<String> = rows.into_iter().map(|r| r.key).collect();
                let (d, id) = (db.clone(), c.pair.id);
                blocking(move || d.forget_side(id, side, &keys)).await?;
            }
        }
        if run.part.is_none() && run.report.is_none() && !opts.copy_only {
            let (d, id) = (db.clone(), c.pair.id);
            blocking(move || d.mark_synced(id, "sync --once")).await?;
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
}

/// The spilled rows of one kind, page by page in key order. Each page first checks that the
/// run still holds the pair's lease: a run whose lease another holder took stops there.
struct Pages<'a> {
    db: &'a Arc<Manifest>,
    spill: &'a Spill,
    which: SpillFilter,
    lost: &'a AtomicBool,
    label: &'a str,
    after: Option<String>,
}

impl<'a> Pages<'a> {
    fn new(run: &'a Run<'a>, which: SpillFilter) -> Pages<'a> {
        Pages {
            db: run.db,
            spill: run.spill,
            which,
            lost: run.lost,
            label: run.label,
            after: None,
        }
    }

    async fn next(&mut self) -> Result<Option<Vec<Planned>>> {
        if self.lost.load(Relaxed) {
            return Err(SlateError::Busy {
                pair: self.label.to_string(),
                holder:
                    "another holder took the pair's lease while this run held it; this run stopped"
                        .into(),
            });
        }
        let (d, sp, which, after) = (
            self.db.clone(),
            self.spill.clone(),
            self.which,
            self.after.clone(),
        );
        let rows = blocking(move || d.spill_page(&sp, which, after.as_deref(), BATCH)).await?;
        match rows.last() {
            Some(last) => {
                self.after = Some(last.key.clone());
                Ok(Some(rows))
            }
            None => Ok(None),
        }
    }
}

/// What the act step of one run works from.
struct Run<'a> {
    db: &'a Arc<Manifest>,
    spill: &'a Spill,
    lost: &'a AtomicBool,
    label: &'a str,
    /// A partition's run: its range and run.
    part: Option<&'a PartCtx>,
    /// The source's objects come from this inventory report, not a listing.
    report: Option<Arc<Report>>,
}

/// The source's entry of a spilled row, as the engine takes it (None: no source row).
fn source_entry(r: Planned) -> Option<Entry> {
    let s = r.src?;
    Some(Entry {
        rel: r.key,
        size: s.size,
        etag: s.etag,
        mtime: s
            .mtime_ms
            .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)),
    })
}

/// The act step: records keys found equal without a manifest row, copies, then deletes.
async fn act(
    run: &Run<'_>,
    engine: &Engine,
    report: &mut SyncReport,
    failed: Option<&FailedHook>,
    deletes_via_inbox: bool,
) -> Result<()> {
    let (db, pair_id) = (run.db, engine.pair_id);
    // 1. keys equal without a manifest row on both sides
    record_equal(run, pair_id).await?;
    act_on_keys(run, engine, report, failed, db, pair_id, deletes_via_inbox).await
}

/// The act step through the inbox ([`SyncOptions::enqueue`]): every key to copy, update or
/// delete becomes a pending key of the pair, applied by the daemon's per-key path under its
/// claims. The destination's manifest row of a key to copy or update is forgotten first, so
/// that the reconcile of the key compares with the destination again (the manifest's row
/// is what the drift check found untrue).
async fn enqueue(run: &Run<'_>, pair_id: i64, report: &mut SyncReport) -> Result<()> {
    enqueue_actions(
        run,
        pair_id,
        report,
        &[
            Action::CopyMissing,
            Action::CopyChanged,
            Action::MetaChanged,
            Action::Delete,
        ],
    )
    .await
}

/// Puts the keys of `actions` through the inbox (see [`enqueue`]).
async fn enqueue_actions(
    run: &Run<'_>,
    pair_id: i64,
    report: &mut SyncReport,
    actions: &[Action],
) -> Result<()> {
    for &action in actions {
        let kind = if action == Action::Delete {
            crate::state::inbox::Kind::Delete
        } else {
            crate::state::inbox::Kind::Upsert
        };
        let mut pages = Pages::new(run, SpillFilter::Action(action as u8));
        while let Some(rows) = pages.next().await? {
            let keys: Vec<String> = rows.into_iter().map(|r| r.key).collect();
            report.queued += keys.len() as u64;
            let d = run.db.clone();
            blocking(move || {
                if kind == crate::state::inbox::Kind::Upsert {
                    d.forget_side(pair_id, manifest::Side::Dst, &keys)?;
                }
                let rows: Vec<_> = keys.into_iter().map(|k| (k, kind, None)).collect();
                crate::state::inbox::Inbox::new(&d).push(pair_id, &rows)
            })
            .await?;
        }
    }
    Ok(())
}

/// Keys found equal without a manifest row on both sides: recorded, so that the next run
/// knows them by their change tokens.
async fn record_equal(run: &Run<'_>, pair_id: i64) -> Result<()> {
    let db = run.db;
    for action in [
        Action::EqualDigest,
        Action::EqualModTime,
        Action::EqualContent,
        Action::EqualSizeOnly,
        Action::EqualTouched,
    ] {
        let mut pages = Pages::new(run, SpillFilter::Action(action as u8));
        while let Some(rows) = pages.next().await? {
            let mut recs = Vec::with_capacity(rows.len() * 2);
            for r in rows {
                if let (Some(s), Some(d)) = (r.src, r.dst) {
                    recs.push(Record {
                        side: manifest::Side::Src,
                        key: r.key.clone(),
                        state: s,
                        hash: None,
                        equal_by: None,
                        meta: None,
                    });
                    recs.push(Record {
                        side: manifest::Side::Dst,
                        key: r.key,
                        state: d,
                        hash: None,
                        equal_by: action.equal_by(),
                        meta: None,
                    });
                }
            }
            let d = db.clone();
            blocking(move || d.record(pair_id, &recs)).await?;
        }
    }
    Ok(())
}

/// Copies, metadata updates, then deletes, acted on here.
async fn act_on_keys(
    run: &Run<'_>,
    engine: &Engine,
    report: &mut SyncReport,
    failed: Option<&FailedHook>,
    db: &Arc<Manifest>,
    pair_id: i64,
    deletes_via_inbox: bool,
) -> Result<()> {
    // 2. copies, `transfers` at once; results recorded in batches as they complete
    let transfers = engine.ctx.ceiling();
    for action in [Action::CopyMissing, Action::CopyChanged] {
        let mut pages = Pages::new(run, SpillFilter::Action(action as u8));
        while let Some(rows) = pages.next().await? {
            let mut results = futures::stream::iter(rows.into_iter().filter_map(source_entry))
                .map(|e| async move {
                    let r = engine.copy(&e).await;
                    (e.rel, r)
                })
                .buffer_unordered(transfers);
            let mut recs = Vec::new();
            let mut last_flush = Instant::now();
            while let Some((key, r)) = results.next().await {
                match r {
                    Ok((out, two)) => {
                        tracing::debug!(key = %key, bytes = out.bytes, "copied");
                        report.copied += 1;
                        report.copied_bytes += out.bytes;
                        report.server_side += out.server_side as u64;
                        engine.ctx.counters.objects_done.fetch_add(1, Relaxed);
                        recs.extend(two);
                    }
                    Err(e) => {
                        tracing::debug!(key = %key, error = %e, "copy failed");
                        report.fail(failed, &key, e.to_string());
                    }
                }
                // Flush often enough that a killed run loses little: every 1,000 objects or second.
                if recs.len() >= 2000 || last_flush.elapsed() > Duration::from_secs(1) {
                    let (d, b) = (db.clone(), std::mem::take(&mut recs));
                    blocking(move || d.record(pair_id, &b)).await?;
                    last_flush = Instant::now();
                }
            }
            let d = db.clone();
            blocking(move || d.record(pair_id, &recs)).await?;
        }
    }

    // 3. metadata-only changes: the destination's metadata updated, its bytes left in place.
    // These take no slot under the limits (an update that copies again takes its own), so an
    // adaptive copy's ceiling (up to 1024) is no bound for them: `--transfers`, or 16.
    let meta_transfers = engine
        .ctx
        .opts
        .transfers
        .unwrap_or(crate::stores::limit::START);
    let mut pages = Pages::new(run, SpillFilter::Action(Action::MetaChanged as u8));
    while let Some(rows) = pages.next().await? {
        let mut results = futures::stream::iter(rows.into_iter().filter_map(source_entry))
            .map(|e| async move {
                let r = engine.update_meta(&e, None).await;
                (e.rel, r)
            })
            .buffer_unordered(meta_transfers);
        let mut recs = Vec::new();
        while let Some((key, r)) = results.next().await {
            match r {
                Ok((changed, two)) => {
                    report.meta_updated += changed as u64;
                    recs.extend(two);
                }
                Err(e) => report.fail(failed, &key, e.to_string()),
            }
        }
        let d = db.clone();
        blocking(move || d.record(pair_id, &recs)).await?;
    }

    // 4. deletes, each confirmed by the source saying "not found" now (or through the inbox)
    if deletes_via_inbox {
        return enqueue_actions(run, pair_id, report, &[Action::Delete]).await;
    }
    let mut pages = Pages::new(run, SpillFilter::Action(Action::Delete as u8));
    while let Some(rows) = pages.next().await? {
        let mut results = futures::stream::iter(rows)
            .map(|r| async move {
                // the delete itself waits for a slot under the destination's limit (taking one
                // here as well would hold one and wait for another: with `transfers` deletes
                // in flight, every one of them waited for ever)
                let res = engine.delete_confirmed(&r.key).await;
                (r.key, res)
            })
            .buffer_unordered(transfers);
        let mut gone = Vec::new();
        while let Some((key, res)) = results.next().await {
            match res {
                Ok(true) => {
                    report.deleted += 1;
                    gone.push(key);
                }
                Ok(false) => report.delete_skipped += 1,
                Err(e) => report.fail(failed, &key, e.to_string()),
            }
        }
        let d = db.clone();
        blocking(move || d.forget(pair_id, &gone)).await?;
    }
    Ok(())
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

    #[test]
    fn archived_tiers_are_told_from_other_refusals() {
        let s3 = "403 Forbidden: <Error><Code>InvalidObjectState</Code><Message>The operation is \
                  not valid for the object's storage class</Message><StorageClass>DEEP_ARCHIVE</StorageClass>";
        assert_eq!(
            archived_tier(s3).as_deref(),
            Some("the archive tier DEEP_ARCHIVE")
        );
        let cut = "403 Forbidden: <Error><Code>InvalidObjectState</Code><Message>The opera…";
        assert_eq!(archived_tier(cut).as_deref(), Some("an archive tier"));
        let az = "409 Conflict: <Error><Code>BlobArchived</Code><Message>This operation is not \
                  permitted on an archived blob.</Message></Error>";
        assert_eq!(
            archived_tier(az).as_deref(),
            Some("the archive tier Archive")
        );
        assert_eq!(
            archived_tier("403 Forbidden: <Code>AccessDenied</Code>"),
            None
        );
    }
}
