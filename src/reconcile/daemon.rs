//! The daemon for one pair: events → inbox → level-triggered reconcile of each key.
//!
//! Start-up: the event source starts first (its events land in the inbox), then, if the
//! manifest has never finished a reconcile of the pair, the backfill runs (`--once` path), so
//! nothing that changes during the backfill is missed. Then the loop takes pending keys,
//! reads each key's current state at the source, and copies or deletes (delete only when the
//! source says "not found" now), records the manifest, and marks the key done. Keys run in
//! parallel; one key is never in two reconciles at once (the inbox holds one row per key and a
//! batch is finished before the next is taken). A drift check (full `--once`) runs on a schedule.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use tokio::sync::mpsc;

use super::{blocking, sync_once, SyncOptions};
use crate::copy::list::{self, Entry};
use crate::copy::side::{one_line, store_path, Side};
use crate::copy::transfer::{copy_one, Ctx, End};
use crate::copy::{self, Counters};
use crate::error::{Result, SlateError};
use crate::events::route::{SourceStats, Target};
use crate::events::watch;
use crate::events::webhook::Hub;
use crate::inbox::{self, Inbox, Kind};
use crate::location::{Location, Scheme};
use crate::manifest::{self, Manifest, Record, State};

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub sync: SyncOptions,
    /// Full compare on this schedule (zero: never).
    pub drift_interval: Duration,
    /// Keys taken from the inbox at once.
    pub batch: usize,
    /// How long in-flight work may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// The event source for a cloud source (`sqs://QUEUE`, `azqueue://ACCOUNT/QUEUE`,
    /// `webhook`); local folders need none.
    pub events: Option<String>,
    /// The listener's delivery hub, for `webhook` sources.
    pub hub: Option<Arc<Hub>>,
    /// The config's name for the pair (shown by the API).
    pub name: Option<String>,
}

/// Where a pair's change events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventSource {
    /// A local folder: inotify.
    Watch,
    /// S3 notifications through SQS (`sqs://…`).
    Sqs(String),
    /// Azure Event Grid through a Storage Queue (`azqueue://ACCOUNT/QUEUE`).
    AzQueue(String),
    /// GCS notifications through a Pub/Sub pull subscription
    /// (`pubsub://projects/P/subscriptions/S`).
    PubSub(String),
    /// Event Grid or Pub/Sub push deliveries on slate's listener.
    Webhook,
}

impl EventSource {
    /// Decides from the source's scheme and `--events`; a combination that cannot work is an
    /// error naming what the scheme accepts.
    pub fn choose(src: &Location, spec: Option<&str>) -> Result<EventSource> {
        let bad = |why: String| SlateError::BadOption {
            option: "--events".into(),
            why,
        };
        let accepted = match src.scheme {
            Scheme::Local => "none (inotify)",
            Scheme::S3 => "sqs://QUEUE_NAME or sqs://QUEUE_URL",
            Scheme::Azure => "azqueue://ACCOUNT/QUEUE or webhook",
            Scheme::Gcs => "pubsub://projects/P/subscriptions/S or webhook (Pub/Sub push)",
        };
        match (src.scheme, spec) {
            (Scheme::Local, None) => Ok(EventSource::Watch),
            (Scheme::S3, Some(s)) if s.starts_with("sqs://") => Ok(EventSource::Sqs(s.into())),
            (Scheme::Azure, Some(s)) if s.starts_with("azqueue://") => {
                Ok(EventSource::AzQueue(s.into()))
            }
            (Scheme::Gcs, Some(s)) if s.starts_with("pubsub://") => {
                Ok(EventSource::PubSub(s.into()))
            }
            (Scheme::Azure | Scheme::Gcs, Some("webhook")) => Ok(EventSource::Webhook),
            (_, None) => Err(bad(format!(
                "{src} needs an event source ({accepted}), or use --once"
            ))),
            (_, Some(s)) => Err(bad(format!("'{s}' cannot feed {src}; it takes {accepted}"))),
        }
    }
}

/// Counters of the daemon, for the per-minute health line, `/metrics` and the API's pairs.
/// Timestamps (`*_ms`) are milliseconds since the Unix epoch, 0 for never.
#[derive(Debug, Default)]
pub struct DaemonStats {
    /// File events of a local folder stored in the inbox (cloud sources count theirs in
    /// their `SourceStats`).
    pub received: std::sync::atomic::AtomicU64,
    /// Keys reconciled without error (every outcome but `failed`).
    pub applied: std::sync::atomic::AtomicU64,
    pub copied: std::sync::atomic::AtomicU64,
    pub deleted: std::sync::atomic::AtomicU64,
    pub unchanged: std::sync::atomic::AtomicU64,
    /// Events skipped by their ordering token (older than what was applied).
    pub stale: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
    /// Differences drift checks found (new, changed and extra keys; extras kept by
    /// `--no-delete` not counted), repaired or not.
    pub drift_found: std::sync::atomic::AtomicU64,
    /// Objects drift checks copied or deleted.
    pub drift_repaired: std::sync::atomic::AtomicU64,
    /// Bytes written to the destination: by applied keys, the backfill and drift checks.
    pub bytes_copied: std::sync::atomic::AtomicU64,
    /// When an event of the pair was last stored in the inbox.
    pub last_event_ms: std::sync::atomic::AtomicU64,
    /// When a key was last reconciled without error.
    pub last_applied_ms: std::sync::atomic::AtomicU64,
    /// When a drift check last finished without error.
    pub last_drift_check_ms: std::sync::atomic::AtomicU64,
    /// Replication lag (first event of a key → key reconciled) of the last key applied, ms.
    pub lag_ms_last: std::sync::atomic::AtomicU64,
    /// Largest lag since the last health line (which resets it), ms; failed keys included.
    pub lag_ms_max: std::sync::atomic::AtomicU64,
    /// Replication lag of every key applied.
    pub lag: crate::metrics::Histogram,
}

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
    /// Not at the source and not at the destination: nothing to delete.
    AlreadyGone,
    /// The event is older than (or the same as) one already applied to the key: skipped
    /// without asking the source.
    Stale,
}

/// The source's current state of `key`, or None when it does not exist (404 now). The HEAD is
/// sent again while its error is transient.
async fn source_state(ctx: &Ctx, key: &str) -> Result<Option<Entry>> {
    match &ctx.src {
        Side::Cloud { store, loc, .. } => {
            let path = store_path(&loc.key_for(key))?;
            let head = ctx
                .retry(End::Src)
                .request(key, |_| true, |_| store.head(&path))
                .await;
            match head {
                Ok(meta) => Ok(Some(Entry {
                    rel: key.to_string(),
                    size: meta.size,
                    etag: meta.e_tag,
                    mtime: Some(meta.last_modified.into()),
                })),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(SlateError::Object {
                    key: key.to_string(),
                    detail: format!("reading the source: {}", one_line(&e)),
                }),
            }
        }
        Side::Local { loc } => match std::fs::metadata(loc.local_path().join(key)) {
            Ok(m) if m.is_file() => {
                let mtime = m.modified().ok();
                Ok(Some(Entry {
                    rel: key.to_string(),
                    size: m.len(),
                    etag: list::local_etag(mtime, m.len()),
                    mtime,
                }))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SlateError::Object {
                key: key.to_string(),
                detail: format!("reading the source: {e}"),
            }),
        },
    }
}

/// Reconciles one key: level-triggered, from the source's state now.
pub async fn apply_key(
    manifest: &Arc<Manifest>,
    pair_id: i64,
    ctx: &Ctx,
    dst_loc: &Location,
    key: &str,
) -> Result<Applied> {
    let mut now = source_state(ctx, key).await?;
    let (m, k) = (manifest.clone(), key.to_string());
    let (m_src, m_dst) = blocking(move || {
        Ok((
            m.get(pair_id, manifest::Side::Src, &k)?,
            m.get(pair_id, manifest::Side::Dst, &k)?,
        ))
    })
    .await?;
    // how many times a source that moved during the copy is followed at once
    let mut retry_moved = 5;
    loop {
        let Some(e) = now else {
            let existed = delete_at_destination(ctx, dst_loc, key).await?;
            let (m, k) = (manifest.clone(), key.to_string());
            blocking(move || m.forget(pair_id, &[k])).await?;
            return Ok(if existed || m_dst.is_some() {
                Applied::Deleted
            } else {
                Applied::AlreadyGone
            });
        };
        let state = State {
            size: e.size,
            etag: e.etag.clone(),
            mtime_ms: list::millis(e.mtime),
        };
        // ETags compared as the planner does (a HEAD may quote what a listing did not);
        // without ETags (some S3-compatibles) the last-modified time decides
        if m_dst.is_some() && super::plan::same_as_recorded(&state, &m_src, true) {
            return Ok(Applied::Unchanged);
        }
        let item = copy::item_for(&ctx.src, dst_loc, e.clone());
        let out = match copy_one(ctx, &item).await {
            Ok(out) => out,
            Err(err) => {
                // A key written again (or deleted) while it was copied fails its etag guard.
                // That is no failure of the key: its newest state is what the event asks
                // for, and the events of that state may already be coalesced into this one,
                // so the newer state is reconciled now instead of after a backoff.
                let again = source_state(ctx, key).await?;
                if moved(&e, again.as_ref()) && retry_moved > 0 {
                    retry_moved -= 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    now = again;
                    continue;
                }
                return Err(err);
            }
        };
        let hash = out.hash.map(|h| h.to_string());
        let bytes = out.bytes;
        let recs = vec![
            Record {
                side: manifest::Side::Src,
                key: key.to_string(),
                state,
                hash: hash.clone(),
            },
            Record {
                side: manifest::Side::Dst,
                key: key.to_string(),
                state: State {
                    size: out.bytes,
                    etag: out.dst_etag,
                    mtime_ms: list::millis(Some(SystemTime::now())),
                },
                hash,
            },
        ];
        let m = manifest.clone();
        blocking(move || m.record(pair_id, &recs)).await?;
        return Ok(Applied::Copied { bytes });
    }
}

/// Whether the source's state `again` differs from the `tried` one that a copy started from.
fn moved(tried: &Entry, again: Option<&Entry>) -> bool {
    match again {
        None => true,
        Some(a) => a.size != tried.size || a.etag != tried.etag || a.mtime != tried.mtime,
    }
}

/// [`apply_key`] behind the key's ordering token: an event no newer than the last one applied
/// (or a delete's tombstone) is skipped; after the apply, the token is recorded with the
/// object, or as a tombstone when the key is gone.
pub async fn apply_with_token(
    manifest: &Arc<Manifest>,
    pair_id: i64,
    ctx: &Ctx,
    dst_loc: &Location,
    key: &str,
    token: Option<&str>,
) -> Result<Applied> {
    let Some(token) = token else {
        return apply_key(manifest, pair_id, ctx, dst_loc, key).await;
    };
    let (m, k) = (manifest.clone(), key.to_string());
    let last = blocking(move || m.last_token(pair_id, &k)).await?;
    if last.is_some_and(|l| l.as_str() >= token) {
        return Ok(Applied::Stale);
    }
    let applied = apply_key(manifest, pair_id, ctx, dst_loc, key).await?;
    let (m, k, t) = (manifest.clone(), key.to_string(), token.to_string());
    blocking(move || match applied {
        Applied::Copied { .. } | Applied::Unchanged => m.set_token(pair_id, &k, &t),
        Applied::Deleted | Applied::AlreadyGone => m.tombstone(pair_id, &k, &t),
        Applied::Stale => Ok(()),
    })
    .await?;
    Ok(applied)
}

/// Deletes `key` at the destination; false when it was not there.
async fn delete_at_destination(ctx: &Ctx, dst_loc: &Location, key: &str) -> Result<bool> {
    let err = |detail: String| SlateError::Object {
        key: key.to_string(),
        detail,
    };
    match &ctx.dst {
        Side::Cloud { store, .. } => {
            let path = store_path(&dst_loc.key_for(key))?;
            let _slot = match &ctx.limits.dst {
                Some(l) => Some(l.acquire().await),
                None => None,
            };
            let deleted = ctx
                .retry(End::Dst)
                .request(key, |_| true, |_| store.delete(&path))
                .await;
            match deleted {
                Ok(()) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(err(format!("deleting: {}", one_line(&e)))),
            }
        }
        Side::Local { .. } => copy::local::remove_below(&ctx.dst_root, key),
    }
}

/// Feeds a local folder's file events into the inbox. Folders are expanded: the files under a
/// folder that appeared, and the recorded keys under a folder that went away.
async fn pump_watch(
    manifest: Arc<Manifest>,
    pair_id: i64,
    root: std::path::PathBuf,
    mut rx: mpsc::Receiver<watch::Keys>,
    stats: Arc<DaemonStats>,
) {
    while let Some(keys) = rx.recv().await {
        let (m, root2) = (manifest.clone(), root.clone());
        let res = blocking(move || {
            let mut events = Vec::new();
            for k in keys {
                let p = root2.join(&k);
                if p.is_dir() {
                    copy::local::walk(&p, &mut |f| {
                        if let Ok(f) = f {
                            events.push((format!("{k}/{}", f.rel), Kind::Upsert, None));
                        }
                        true
                    })?;
                } else if p.exists() {
                    events.push((k, Kind::Upsert, None));
                } else {
                    for under in m.keys_under(pair_id, manifest::Side::Src, &k)? {
                        events.push((under, Kind::Delete, None));
                    }
                    events.push((k, Kind::Delete, None));
                }
            }
            let n = events.len() as u64;
            Inbox::new(&m).push(pair_id, &events)?;
            Ok(n)
        })
        .await;
        match res {
            Ok(n) => {
                stats.received.fetch_add(n, Relaxed);
                if n > 0 {
                    stats
                        .last_event_ms
                        .store(crate::metrics::unix_ms(), Relaxed);
                }
            }
            Err(e) => tracing::error!(error = %e, "could not store file events"),
        }
    }
}

/// Runs the daemon for one pair until `shutdown` resolves.
pub async fn run(
    manifest: Arc<Manifest>,
    src: &Location,
    dst: &Location,
    opts: DaemonOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Arc<DaemonStats>> {
    let stats = Arc::new(DaemonStats::default());
    let source = EventSource::choose(src, opts.events.as_deref())?;
    let plan = copy::plan(src, dst).await?;
    let (s, d) = (src.to_string(), dst.to_string());
    let m = manifest.clone();
    let pair = blocking(move || m.pair(&s, &d)).await?;
    let pair_id = pair.id;
    // tombstones outlive any queue's retention (SQS keeps messages 14 days at most)
    let m = manifest.clone();
    blocking(move || m.prune_tombstones(15 * 86_400)).await?;

    // 1. events first, so that nothing changing during the backfill is missed
    let target = Target {
        manifest: manifest.clone(),
        pair_id,
        src: plan.src.clone(),
        daemon: stats.clone(),
    };
    let source_stats = Arc::new(SourceStats::default());
    let mut pumps = Vec::new();
    match &source {
        EventSource::Sqs(spec) => {
            let q = crate::events::sqs::SqsSource::connect(spec).await?;
            pumps.push(tokio::spawn(q.pump(target, source_stats.clone())));
        }
        EventSource::AzQueue(spec) => {
            let q = crate::events::azqueue::AzQueueSource::connect(spec).await?;
            pumps.push(tokio::spawn(q.pump(target, source_stats.clone())));
        }
        EventSource::PubSub(spec) => {
            let q = crate::events::pubsub::PubSubSource::connect(spec).await?;
            pumps.push(tokio::spawn(q.pump(target, source_stats.clone())));
        }
        EventSource::Webhook => match &opts.hub {
            Some(hub) => hub.register(src.scheme, target.clone()),
            None => {
                return Err(SlateError::BadOption {
                    option: "--events".into(),
                    why: "webhook deliveries need the listener (--listen ADDR)".into(),
                })
            }
        },
        EventSource::Watch => {}
    }
    if let Some(hub) = &opts.hub {
        hub.meter(crate::events::webhook::PairMeters {
            pair: format!("{src} -> {dst}"),
            pair_id,
            name: opts.name.clone(),
            daemon: stats.clone(),
            source: source_stats.clone(),
        });
    }
    let _watch = match src.scheme {
        Scheme::Local => {
            let (tx, rx) = mpsc::channel(64);
            let h = watch::watch(src.local_path(), Duration::from_millis(100), tx)?;
            tokio::spawn(pump_watch(
                manifest.clone(),
                pair_id,
                src.local_path(),
                rx,
                stats.clone(),
            ));
            Some(h)
        }
        _ => None,
    };

    // temporary files of a slate killed mid-copy (the walk removes them); a full listing of
    // the destination does the same, but a pair the manifest vouches for is not listed
    if dst.scheme == Scheme::Local {
        let root = dst.local_path();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = copy::local::sweep_orphan_temps(&root) {
                tracing::warn!(error = %e, "sweeping temporary files failed");
            }
        });
    }

    // 2. backfill when the pair was never reconciled; a local folder keeps no record of what
    //    changed while slate was down (inotify is not a queue), so it is reconciled at every start
    if pair.last_sync_at.is_none() || src.scheme == Scheme::Local {
        let report = sync_once(manifest.clone(), src, dst, &opts.sync).await?;
        stats.bytes_copied.fetch_add(report.copied_bytes, Relaxed);
        tracing::info!("backfill: {}", report.line());
        eprintln!("{}", report.line());
    }
    eprintln!("slate: following changes of {src} -> {dst}");
    if let Some(hub) = &opts.hub {
        hub.ready.fetch_add(1, Relaxed);
    }

    let counters = Arc::new(Counters::default());
    let ctx = Arc::new(Ctx::new(&plan, opts.sync.copy.clone(), counters));
    let mut last_drift = Instant::now();
    let mut last_health = Instant::now();
    tokio::pin!(shutdown);
    loop {
        let (m, batch) = (manifest.clone(), opts.batch);
        // listen for the bell before looking, so that a push in between is not missed
        let rung = inbox::bell().notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        let pending = blocking(move || Inbox::new(&m).take(pair_id, batch)).await?;
        if pending.is_empty() {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = &mut rung => {}
                // retries come due, and pushes from another process
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        } else {
            let work = futures::stream::iter(pending)
                .map(|p| {
                    let (ctx, manifest, stats) = (ctx.clone(), manifest.clone(), stats.clone());
                    async move {
                        let r = apply_with_token(&manifest, pair_id, &ctx, dst, &p.key, p.token.as_deref()).await;
                        let lag = (inbox::now() - p.first_seen).max(0) as u64;
                        stats.lag_ms_max.fetch_max(lag, Relaxed);
                        let m = manifest.clone();
                        let (key, events) = (p.key.clone(), p.events);
                        match r {
                            Ok(a) => {
                                stats.applied.fetch_add(1, Relaxed);
                                stats.lag.observe_ms(lag);
                                stats.lag_ms_last.store(lag, Relaxed);
                                stats.last_applied_ms.store(crate::metrics::unix_ms(), Relaxed);
                                match a {
                                    Applied::Copied { bytes } => {
                                        stats.bytes_copied.fetch_add(bytes, Relaxed);
                                        stats.copied.fetch_add(1, Relaxed)
                                    }
                                    Applied::Deleted => stats.deleted.fetch_add(1, Relaxed),
                                    Applied::Unchanged | Applied::AlreadyGone => {
                                        stats.unchanged.fetch_add(1, Relaxed)
                                    }
                                    Applied::Stale => stats.stale.fetch_add(1, Relaxed),
                                };
                                tracing::debug!(key = %key, ?a, lag_ms = lag, "applied");
                                blocking(move || Inbox::new(&m).done(pair_id, &key, events)).await
                            }
                            Err(e) if e.is_permanent_for_key() => {
                                // no retry can mend the key itself (it cannot be addressed or
                                // written there): kept as a dead letter with the reason
                                stats.failed.fetch_add(1, Relaxed);
                                tracing::warn!(key = %key, error = %e, "key dead-lettered: no retry can apply it");
                                let why = one_line(&e);
                                blocking(move || {
                                    let ib = Inbox::new(&m);
                                    ib.dead_letter(Some(pair_id), "apply", key.as_bytes(), &why)?;
                                    ib.done(pair_id, &key, events)
                                })
                                .await
                            }
                            Err(e) => {
                                stats.failed.fetch_add(1, Relaxed);
                                tracing::warn!(key = %key, error = %e, attempt = p.attempts + 1, "reconcile failed; will retry");
                                let delay = (1_000i64 << p.attempts.min(8)).min(300_000);
                                blocking(move || Inbox::new(&m).retry_later(pair_id, &key, delay)).await
                            }
                        }
                    }
                })
                // the ceiling: copies and deletes also wait for a slot under the adaptive limit of
                // each store side (copy::limit), lower while a store throttles
                .buffer_unordered(opts.sync.copy.transfers);
            // A batch is finished before the next is taken: one key is never reconciled twice at
            // once. Shutdown lets the batch finish, bounded by the grace period.
            let mut work = std::pin::pin!(work);
            let drain = async {
                while let Some(r) = work.next().await {
                    r?;
                }
                Ok::<(), SlateError>(())
            };
            let mut drain = std::pin::pin!(drain);
            let mut stopping = false;
            tokio::select! {
                r = &mut drain => r?,
                _ = &mut shutdown => {
                    stopping = true;
                    tracing::info!("shutting down: finishing the work in flight");
                    match tokio::time::timeout(opts.shutdown_grace, &mut drain).await {
                        Ok(r) => r?,
                        Err(_) => tracing::warn!("shutdown grace period over; unfinished keys stay in the inbox"),
                    }
                }
            }
            if stopping {
                // keys not finished stay in the inbox (not marked done): reconciled after a restart
                break;
            }
        }
        if last_health.elapsed() >= Duration::from_secs(60) {
            last_health = Instant::now();
            let m = manifest.clone();
            let st = blocking(move || Inbox::new(&m).stats(pair_id)).await?;
            tracing::info!(
                received = stats.received.load(Relaxed) + source_stats.events.load(Relaxed),
                messages = source_stats.messages.load(Relaxed),
                ignored = source_stats.ignored.load(Relaxed),
                applied = stats.applied.load(Relaxed),
                copied = stats.copied.load(Relaxed),
                deleted = stats.deleted.load(Relaxed),
                unchanged = stats.unchanged.load(Relaxed),
                stale = stats.stale.load(Relaxed),
                failed = stats.failed.load(Relaxed),
                backlog = st.pending,
                dead_letters = st.dead_letters,
                lag_ms_max = stats.lag_ms_max.swap(0, Relaxed),
                "health"
            );
        }
        if !opts.drift_interval.is_zero() && last_drift.elapsed() >= opts.drift_interval {
            last_drift = Instant::now();
            let mut o = opts.sync.clone();
            o.full = true;
            match sync_once(manifest.clone(), src, dst, &o).await {
                Ok(r) => {
                    let repaired = r.copied + r.deleted;
                    let c = &r.counts;
                    let found = c.only_in_source + c.changed + c.only_in_destination;
                    stats.drift_found.fetch_add(found, Relaxed);
                    stats.drift_repaired.fetch_add(repaired, Relaxed);
                    stats.bytes_copied.fetch_add(r.copied_bytes, Relaxed);
                    stats
                        .last_drift_check_ms
                        .store(crate::metrics::unix_ms(), Relaxed);
                    tracing::info!(repaired, "drift check: {}", r.line());
                }
                Err(e) => tracing::warn!(error = %e, "drift check failed"),
            }
        }
    }
    for p in pumps {
        p.abort();
    }
    Ok(stats)
}
