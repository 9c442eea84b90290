//! The daemon: every pair of a process, following change events.
//!
//! Start-up, per process: each distinct queue (SQS queue, Storage Queue, Pub/Sub
//! subscription) gets **one** consumer, whatever the number of pairs it feeds; a message is
//! routed to every pair whose source it names and acknowledged only after all their inbox rows
//! are committed ([`crate::events::source::consume`]). Webhook deliveries reach their pairs the
//! same way through the server's [`Hub`]. Local folders have a watcher each.
//!
//! Per pair, under a supervisor: the backfill (a `--once` run) when the pair was never
//! reconciled, then the loop: expand pending prefixes in bounded, durable steps
//! ([`super::expand`]), take pending keys, reconcile each through the one [`Engine`] path,
//! mark it done, retry it later or dead-letter it. Keys run in parallel, a window of them in
//! flight refilled as they finish, and what finishes together is settled in one transaction;
//! one key is never in two reconciles at once (a key stays claimed until it is settled). A drift check (a
//! full `--once`) runs on a schedule. A pair whose loop fails says why at once (log,
//! `GET /pairs`, `/readyz`, metrics) and is restarted with a backoff while the others run on.
//! A cloud pair's events keep landing in its inbox meanwhile; a local folder's watcher stops
//! with the pair's run, and its restart reconciles the whole folder (its backfill), so
//! nothing is lost either way.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::key::{Applied, Engine};
use super::once::{sync_once, Hooks, SyncOptions, SyncReport};
use super::running::{PairHandle, PairState, Running};
use crate::copy::transfer::Ctx;
use crate::copy::{self, Counters};
use crate::core::backoff::Backoff;
use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::events::changefeed::ChangeFeedSource;
use crate::events::push::Hub;
use crate::events::route::{Fanout, Scope, Target};
use crate::events::source::{consume, consume_widening, ConsumerStats, Source, Widening};
use crate::events::watch;
use crate::state::blocking;
use crate::state::inbox::{self, Inbox, Intake, Kind};
use crate::state::manifest::{self, Manifest};
use crate::state::partitions::{Partitions, Start};
use crate::stores::side::one_line;

/// How one pair's daemon runs.
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
    /// `pubsub://…`, `webhook`); local folders need none.
    pub events: Option<String>,
    /// The config's name for the pair (shown by the API).
    pub name: Option<String>,
    /// The brake on the deletes the daemon applies (`--delete-brake`, a pair's
    /// `delete_brake`).
    pub delete_brake: crate::core::brake::BrakePolicy,
    /// A canary through the pair on this schedule (zero: never); see `engine::canary`.
    pub canary_interval: Duration,
    /// The freshness objective: changes at the replica within this long of the source's write.
    pub freshness_target: Duration,
}

/// One pair for [`run_all`].
#[derive(Debug, Clone)]
pub struct PairRun {
    pub src: Location,
    pub dst: Location,
    pub opts: DaemonOptions,
}

/// Where a pair's change events come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
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
    /// Azure's change feed of the account (`changefeed://ACCOUNT`), read from a stored
    /// cursor by one worker at a time.
    ChangeFeed(String),
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
            Scheme::Azure => "azqueue://ACCOUNT/QUEUE, changefeed://ACCOUNT or webhook",
            Scheme::Gcs => "pubsub://projects/P/subscriptions/S or webhook (Pub/Sub push)",
        };
        match (src.scheme, spec) {
            (Scheme::Local, None) => Ok(EventSource::Watch),
            (Scheme::S3, Some(s)) if s.starts_with("sqs://") => Ok(EventSource::Sqs(s.into())),
            (Scheme::Azure, Some(s)) if s.starts_with("azqueue://") => {
                Ok(EventSource::AzQueue(s.into()))
            }
            (Scheme::Azure, Some(s)) if s.starts_with("changefeed://") => {
                crate::events::changefeed::parse_spec(s)
                    .map_err(|why| bad(format!("{s}: {why}")))?;
                Ok(EventSource::ChangeFeed(s.into()))
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

    /// The queue or subscription as configured (`sqs://…`), `webhook` or `watch`: what dead
    /// letters of no pair are counted under.
    pub fn spec(&self) -> String {
        match self {
            EventSource::Sqs(s)
            | EventSource::AzQueue(s)
            | EventSource::PubSub(s)
            | EventSource::ChangeFeed(s) => s.clone(),
            EventSource::Webhook => "webhook".into(),
            EventSource::Watch => "watch".into(),
        }
    }
}

/// Drops dead letters past their retention every hour (the table cannot grow without bound
/// while the daemon runs for months).
fn prune_dead_letters_hourly(db: Arc<Manifest>, mut stop: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(Duration::from_secs(3600)) => {}
            }
            let d = db.clone();
            let keep = crate::state::deadletters::retention_ms();
            match blocking(move || Inbox::new(&d).prune_dead_letters(keep)).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(dropped = n, "dead letters past their retention dropped"),
                Err(e) => tracing::warn!(error = %e, "could not drop old dead letters"),
            }
            // the delete brake's record of admitted deletes: a day is many windows
            let d = db.clone();
            if let Err(e) = blocking(move || crate::state::brake::Brakes::new(&d).prune()).await {
                tracing::warn!(error = %e, "could not drop the delete brake's old records");
            }
        }
    });
}

/// How often the health lines are told: a minute (`SLATE_TEST_HEALTH_SECS`, a test hook, makes
/// it shorter).
fn health_every() -> Duration {
    std::env::var("SLATE_TEST_HEALTH_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(Duration::from_secs(60), Duration::from_secs)
}

/// The process's store requests and queue receives, told once a minute as a rate per hour
/// over the last hour (or since the start, when shorter, scaled to an hour): what following
/// the pairs costs while it runs. The totals are on `/metrics`.
fn report_requests_per_hour(mut stop: tokio::sync::watch::Receiver<bool>, every: Duration) {
    use crate::stores::requests::{Class, Counts};
    tokio::spawn(async move {
        let mut window: std::collections::VecDeque<(std::time::Instant, Counts)> =
            std::collections::VecDeque::new();
        window.push_back((std::time::Instant::now(), Counts::now()));
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let now = (std::time::Instant::now(), Counts::now());
            while window.len() > 1 && now.0.duration_since(window[0].0) > Duration::from_secs(3600)
            {
                window.pop_front();
            }
            let Some((t0, c0)) = window.front().copied() else {
                continue;
            };
            let secs = now.0.duration_since(t0).as_secs_f64().max(1.0);
            let d = now.1.since(&c0);
            let per_hour = |n: u64| (n as f64 * 3600.0 / secs).round() as u64;
            tracing::info!(
                window_s = secs.round() as u64,
                list = per_hour(d.of(Class::List)),
                head = per_hour(d.of(Class::Head)),
                get = per_hour(d.of(Class::Get)),
                put = per_hour(d.of(Class::Put)),
                delete = per_hour(d.of(Class::Delete)),
                queue_receives = per_hour(d.receives),
                "store requests per hour"
            );
            window.push_back(now);
        }
    });
}

/// SQS receives in flight per queue, at least and at most: one returns at most 10 messages,
/// so intake per queue is about 10 × this per two round trips (a receive, then the delete of
/// what it stored). More start while receives come back full (see [`Widening`]): 3,500
/// messages a second across 40 ms need about 30.
const SQS_RECEIVERS: (usize, usize) = (4, 64);

/// One consumer per distinct queue: connects each (an error names the queue and stops the
/// start, exit 2) and runs it until `stop`, storing for every pair in its fan-out.
async fn start_consumers(
    queues: BTreeMap<EventSource, Arc<Fanout>>,
    feeds: BTreeMap<EventSource, Location>,
    db: &Arc<Manifest>,
    running: &Running,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for (source, fanout) in queues {
        let spec = match &source {
            EventSource::Sqs(s)
            | EventSource::AzQueue(s)
            | EventSource::PubSub(s)
            | EventSource::ChangeFeed(s) => s.clone(),
            EventSource::Watch | EventSource::Webhook => continue,
        };
        let stats = Arc::new(ConsumerStats::new(&spec));
        running.add_consumer(stats.clone());
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        match source {
            EventSource::Sqs(spec) => {
                let q = crate::events::sqs::SqsSource::connect(&spec).await?;
                let (min, max) = SQS_RECEIVERS;
                let w = Widening::new(min, max, 10);
                let receivers = consume_widening(q, fanout.clone(), stats.clone(), stop.clone(), w);
                // the handle the daemon keeps: every receiver of the queue ends with it
                let mut stopping = stop.clone();
                tasks.push(tokio::spawn(async move {
                    let _receivers = receivers;
                    let _ = stopping.wait_for(|v| *v).await;
                }));
            }
            EventSource::AzQueue(spec) => {
                let q = crate::events::azqueue::AzQueueSource::connect(&spec).await?;
                tasks.push(tokio::spawn(consume(
                    q,
                    fanout,
                    stats,
                    stopped(stop.clone()),
                )));
            }
            EventSource::PubSub(spec) => {
                let q = crate::events::pubsub::PubSubSource::connect(&spec).await?;
                tasks.push(tokio::spawn(consume(
                    q,
                    fanout,
                    stats,
                    stopped(stop.clone()),
                )));
            }
            EventSource::ChangeFeed(spec) => {
                let Some(src) = feeds.get(&EventSource::ChangeFeed(spec.clone())) else {
                    continue;
                };
                // connected now, so that a feed that cannot be read fails the start
                let feed = ChangeFeedSource::connect(&spec, src, fanout.clone()).await?;
                tasks.push(tokio::spawn(follow_feed(
                    feed,
                    spec,
                    src.clone(),
                    fanout,
                    stats,
                    db.clone(),
                    stop.clone(),
                )));
            }
            EventSource::Watch | EventSource::Webhook => {}
        }
    }
    Ok(tasks)
}

/// Reads a change feed while this worker holds its lease (`changefeed:SPEC`): one reader per
/// feed among the workers of a database, the others waiting to take over. A lease lost (a
/// renewal too late) ends the reading; it starts again from the stored cursor once the lease
/// is back.
async fn follow_feed(
    feed: ChangeFeedSource,
    spec: String,
    src: Location,
    fanout: Arc<Fanout>,
    stats: Arc<ConsumerStats>,
    db: Arc<Manifest>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // one lease per account, whatever ?poll= a worker's config says
    let name = format!("changefeed:{}", feed.spec());
    let mut feed = Some(feed);
    loop {
        let take = super::lease::PairLease::take_named(
            &db,
            &name,
            &spec,
            "reading the change feed",
            super::lease::Wait::Yes,
        );
        let lease = tokio::select! {
            l = take => l,
            _ = stop.wait_for(|v| *v) => return,
        };
        let lease = match lease {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(feed = %spec, error = %e, "cannot take the change feed's lease; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                    _ = stop.wait_for(|v| *v) => return,
                }
            }
        };
        let source = match feed.take() {
            Some(f) => f,
            // after a lost lease: from the cursor stored since (another worker read on)
            None => {
                let opened = loop {
                    match ChangeFeedSource::connect(&spec, &src, fanout.clone()).await {
                        Ok(f) => break f,
                        Err(e) => {
                            tracing::warn!(feed = %spec, error = %e, "cannot open the change feed; trying again");
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                                _ = stop.wait_for(|v| *v) => return,
                            }
                        }
                    }
                };
                opened
            }
        };
        // from the cursor as stored now: the last reader's, not what this worker read at its start
        let mut source = source;
        if let Err(e) = source.load_cursor(&db).await {
            tracing::warn!(feed = %spec, error = %e, "cannot read the change feed's cursor; trying again");
            lease.release().await;
            feed = Some(source);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                _ = stop.wait_for(|v| *v) => return,
            }
        }
        tracing::info!(feed = %spec, "this worker reads the change feed");
        let lost = lease.lost_flag();
        let mut stopping = stop.clone();
        let ended = async move {
            loop {
                tokio::select! {
                    _ = stopping.wait_for(|v| *v) => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        if lost.load(Relaxed) {
                            return;
                        }
                    }
                }
            }
        };
        consume(source, fanout.clone(), stats.clone(), ended).await;
        lease.release().await;
        if *stop.borrow() {
            return;
        }
        tracing::warn!(feed = %spec, "this worker lost the change feed's lease; it waits to take it again");
    }
}

/// How long the `applies` rows (who applied which key, when) are kept.
const APPLIES_KEPT: Duration = Duration::from_secs(6 * 3600);

/// Renews this worker's claims on pending keys every third of their life, until `stop`; a
/// worker that dies stops renewing and its keys pass to the others when the claims expire.
fn renew_claims(db: Arc<Manifest>, mut stop: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(async move {
        let every = inbox::claim_ttl() / 3;
        // the claims run out this long after the last renewal that worked
        let mut valid_until = Instant::now() + inbox::claim_ttl();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let d = db.clone();
            let asked = Instant::now();
            let renewed = blocking(move || {
                let ib = Inbox::new(&d);
                let held = ib.renew_claims(inbox::worker())?;
                ib.prune_applies(APPLIES_KEPT.as_millis() as i64)?;
                Ok(held)
            });
            match renewed.await {
                Ok(_) => {
                    valid_until = asked + inbox::claim_ttl();
                    if inbox::claims_lapsed() {
                        tracing::warn!(
                            "this worker's claims are renewed again; it takes keys again"
                        );
                        inbox::set_claims_lapsed(false);
                    }
                }
                Err(e) if Instant::now() >= valid_until => {
                    if !inbox::claims_lapsed() {
                        tracing::error!(error = %e, "this worker's claims ran out while their renewals failed: it stops applying keys until a renewal works (another worker may have taken them)");
                        inbox::set_claims_lapsed(true);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing this worker's claims failed; retried")
                }
            }
        }
    });
}

/// Runs every pair until `stop` turns true. Returns each pair's label and counters when it
/// stopped. Setup errors (a bad option, a missing queue or bucket) end the start with an
/// error before anything runs; errors of a running pair are the supervisor's.
pub async fn run_all(
    db: Arc<Manifest>,
    pairs: Vec<PairRun>,
    hub: Option<Arc<Hub>>,
    running: Arc<Running>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<Arc<PairHandle>>> {
    // tombstones outlive any queue's retention (SQS keeps messages 14 days at most)
    // dead letters are kept 30 days for a person to look at, then dropped
    // who applied what is kept APPLIES_KEPT; a worker started again on this host frees the
    // claims its dead predecessor held at once (others' expire by themselves)
    let d = db.clone();
    blocking(move || {
        d.prune_tombstones(15 * 86_400)?;
        let ib = Inbox::new(&d);
        ib.prune_applies(APPLIES_KEPT.as_millis() as i64)?;
        let freed = ib.release_dead_claims(&inbox::worker().host)?;
        if freed > 0 {
            tracing::info!(
                keys = freed,
                "freed the claims of a worker of this host that is gone"
            );
        }
        crate::state::brake::Brakes::new(&d).prune()?;
        ib.prune_dead_letters(crate::state::deadletters::retention_ms())
    })
    .await?;
    renew_claims(db.clone(), stop.clone());
    prune_dead_letters_hourly(db.clone(), stop.clone());
    report_requests_per_hour(stop.clone(), health_every());
    let mut queues: BTreeMap<EventSource, Arc<Fanout>> = BTreeMap::new();
    // a change feed is read with the credentials of the first pair it feeds
    let mut feeds: BTreeMap<EventSource, Location> = BTreeMap::new();
    let mut handles = Vec::new();
    for p in &pairs {
        let source = EventSource::choose(&p.src, p.opts.events.as_deref())?;
        // what a restart cannot mend fails the start (exit 2): a bad location, missing
        // credentials, a bucket that does not exist
        copy::plan_prefix(&p.src, &p.dst).await?;
        let (s, d, m) = (p.src.to_string(), p.dst.to_string(), db.clone());
        let info = blocking(move || m.pair(&s, &d)).await?;
        let handle = PairHandle::new(
            info.id,
            format!("{} -> {}", p.src, p.dst),
            p.opts.name.clone(),
        );
        if let Ok(mut b) = handle.delete_brake.lock() {
            *b = p.opts.delete_brake.clone();
        }
        handle
            .stats
            .freshness
            .target_ms
            .store(p.opts.freshness_target.as_millis() as u64, Relaxed);
        let target = Target {
            pair_id: info.id,
            scope: Scope::of(&p.src),
            stats: handle.intake.clone(),
        };
        match &source {
            EventSource::Sqs(_)
            | EventSource::AzQueue(_)
            | EventSource::PubSub(_)
            | EventSource::ChangeFeed(_) => {
                if let EventSource::ChangeFeed(spec) = &source {
                    let account = |s: &str| {
                        crate::events::changefeed::parse_spec(s)
                            .map(|(a, _)| a)
                            .unwrap_or_default()
                    };
                    if let Some(other) = feeds.keys().find_map(|k| match k {
                        EventSource::ChangeFeed(o) if o != spec && account(o) == account(spec) => {
                            Some(o.clone())
                        }
                        _ => None,
                    }) {
                        return Err(SlateError::BadOption {
                            option: "--events".into(),
                            why: format!(
                                "{spec} and {other} name one account's change feed: give every pair the same"
                            ),
                        });
                    }
                    feeds.entry(source.clone()).or_insert_with(|| p.src.clone());
                }
                let what = p.src.scheme.short();
                queues
                    .entry(source.clone())
                    .or_insert_with(|| Fanout::new(db.clone(), what, source.spec()))
                    .add(target);
            }
            EventSource::Webhook => match &hub {
                Some(h) if p.src.scheme == Scheme::Azure => h.eventgrid.add(target),
                Some(h) => h.pubsub.add(target),
                None => {
                    return Err(SlateError::BadOption {
                        option: "--events".into(),
                        why: "webhook deliveries need the listener (--listen ADDR)".into(),
                    })
                }
            },
            EventSource::Watch => {}
        }
        running.add(handle.clone());
        handles.push(handle);
    }
    // webhook deliveries are stored from now on: every pair they may name is registered
    if let Some(h) = &hub {
        h.set_ready();
    }
    // events first, so that nothing changing during a backfill is missed
    let consumers = start_consumers(queues, feeds, &db, &running, stop.clone()).await?;
    let mut tasks = Vec::new();
    for (p, handle) in pairs.into_iter().zip(handles.iter().cloned()) {
        // a pair's state changes are logged as they happen
        let mut rx = handle.subscribe();
        let label = handle.label.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let st = rx.borrow_and_update().clone();
                if let PairState::Failed { error, retry_at_ms } = &st {
                    let wait = retry_at_ms.saturating_sub(crate::core::metrics::unix_ms());
                    tracing::error!(pair = %label, error = %error, restart_in_ms = wait,
                        "pair failed; its events are kept in its inbox and it restarts after a pause");
                }
            }
        });
        if !p.opts.canary_interval.is_zero() {
            // awaited with the pairs: a canary cut short by the stop is removed before exit
            tasks.push(tokio::spawn(canaries(
                db.clone(),
                p.clone(),
                handle.clone(),
                stop.clone(),
            )));
        }
        let (db, stop) = (db.clone(), stop.clone());
        tasks.push(tokio::spawn(supervise(db, p, handle, stop)));
    }
    for t in tasks {
        let _ = t.await;
    }
    for c in consumers {
        c.abort();
    }
    Ok(handles)
}

/// Runs a canary through the pair every `canary_interval` while it follows its events; a
/// canary that does not make it through marks the pair degraded (`/readyz`, `GET /pairs`,
/// the dashboard, `slate_canary_ok`) until one does.
async fn canaries(
    db: Arc<Manifest>,
    p: PairRun,
    handle: Arc<PairHandle>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let every = p.opts.canary_interval;
    // each half may take the interval, at most two minutes, at least ten seconds
    let timeout = every
        .min(Duration::from_secs(120))
        .max(Duration::from_secs(10));
    let mut last_ok_ms = 0;
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tokio::time::sleep(every) => {}
        }
        if handle.state() != PairState::Following {
            continue;
        }
        let say = |line: String| tracing::debug!(pair = %handle.label, "canary: {line}");
        let key = super::canary::new_key("daemon", handle.pair_id);
        let run = tokio::select! {
            _ = stop.wait_for(|v| *v) => None,
            r = super::canary::run(db.clone(), handle.pair_id, &p.src, &p.dst, &key, timeout, &say) => Some(r),
        };
        let Some(run) = run else {
            // stopping mid-run: the canary goes, not left for a person to wonder about
            super::canary::remove(db.clone(), handle.pair_id, &p.src, &p.dst, &key).await;
            return;
        };
        let now = crate::core::metrics::unix_ms();
        let status = match run {
            Ok(r) => {
                let ok = r.verdict() == super::canary::Verdict::Ok;
                let line = r.summary(&p.src.to_string(), &p.dst.to_string(), timeout);
                if ok {
                    last_ok_ms = now;
                    tracing::debug!(pair = %handle.label, "{line}");
                } else {
                    tracing::warn!(pair = %handle.label, "canary: {line}");
                }
                crate::engine::running::CanaryStatus {
                    at_ms: now,
                    ok,
                    line,
                    replica_ms: r.replica.map(|d| d.as_millis() as u64),
                    gone_ms: r.gone.map(|d| d.as_millis() as u64),
                    last_ok_ms,
                }
            }
            Err(e) => {
                let line = format!("the canary could not run: {}", one_line(&e));
                tracing::warn!(pair = %handle.label, "{line}");
                crate::engine::running::CanaryStatus {
                    at_ms: now,
                    ok: false,
                    line,
                    replica_ms: None,
                    gone_ms: None,
                    last_ok_ms,
                }
            }
        };
        handle.set_canary(status);
    }
}

/// Runs one pair, restarting its loop with a backoff when it fails, until `stop`.
async fn supervise(
    db: Arc<Manifest>,
    p: PairRun,
    handle: Arc<PairHandle>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let backoff = Backoff::forever();
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let stopped = {
            let mut rx = stop.clone();
            async move {
                let _ = rx.wait_for(|v| *v).await;
            }
        };
        // a panic in the pair's loop is a failure like any other: the pair restarts
        let run = std::panic::AssertUnwindSafe(run_pair(db.clone(), &p, &handle, stopped));
        let r = match futures::FutureExt::catch_unwind(run).await {
            Ok(r) => r,
            Err(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".into());
                Err(SlateError::Store {
                    url: handle.label.clone(),
                    detail: format!("internal error: {why}"),
                })
            }
        };
        // the keys it had claimed and not settled (a failure, a shutdown) are free again at
        // once, for its next run or another worker: renewed, they would be held for good
        let (d, pair_id) = (db.clone(), handle.pair_id);
        let freed = blocking(move || Inbox::new(&d).release_claims(pair_id, inbox::worker())).await;
        match freed {
            Ok(0) => {}
            Ok(n) => tracing::debug!(pair = %handle.label, keys = n, "claims given back"),
            Err(e) => {
                tracing::warn!(pair = %handle.label, error = %e, "giving back claims failed; they expire")
            }
        }
        if *stop.borrow() {
            handle.set_state(PairState::Stopped);
            if let Err(e) = r {
                tracing::warn!(pair = %handle.label, error = %e, "pair stopped with an error");
            }
            return;
        }
        let e = match r {
            Ok(()) => SlateError::Store {
                url: handle.label.clone(),
                detail: "the pair's loop ended without being asked to".into(),
            },
            Err(e) => e,
        };
        // a loop that ran a good while before failing starts its backoff over
        if started.elapsed() > Duration::from_secs(600) {
            failures = 0;
        }
        failures += 1;
        let delay = backoff.delay(failures + 1).max(Duration::from_millis(500));
        handle.stats.restarts.fetch_add(1, Relaxed);
        let error = one_line(&e);
        let (d, pair_id, note) = (db.clone(), handle.pair_id, error.clone());
        if let Err(e) = blocking(move || d.note_failure(pair_id, &note)).await {
            tracing::warn!(pair = %handle.label, error = %e, "could not record the failure");
        }
        handle.set_state(PairState::Failed {
            error,
            retry_at_ms: crate::core::metrics::unix_ms() + delay.as_millis() as u64,
        });
        tokio::select! {
            _ = stop.wait_for(|v| *v) => {
                handle.set_state(PairState::Stopped);
                return;
            }
            _ = tokio::time::sleep(delay) => {}
        }
        handle.set_state(PairState::Starting);
    }
}

/// Feeds a local folder's file events into the inbox: a file as a key to reconcile; a folder
/// (or a path that is gone, which may have been one) as a prefix to expand in bounded steps;
/// a watch queue overflow as a prefix covering the folder it happened in.
async fn pump_watch(
    db: Arc<Manifest>,
    target: Target,
    root: std::path::PathBuf,
    mut rx: mpsc::Receiver<watch::Batch>,
) {
    while let Some(batch) = rx.recv().await {
        // a batch that cannot be stored is tried again, never dropped: while it waits the
        // watcher's bounded channel fills, and a long enough wait overflows inotify's queue,
        // which becomes a rescan (nothing is lost either way)
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            match store_watch_batch(&db, &target, &root, batch.clone()).await {
                Ok(()) => break,
                Err(e) => {
                    let delay = Backoff::forever().delay(attempt.saturating_add(1));
                    tracing::error!(error = %e, attempt, delay_ms = delay.as_millis() as u64,
                        "could not store file events; trying again");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Stores one batch of the watcher's news in the inbox.
async fn store_watch_batch(
    db: &Arc<Manifest>,
    target: &Target,
    root: &std::path::Path,
    batch: watch::Batch,
) -> Result<()> {
    {
        let (db2, root2, pair_id) = (db.clone(), root.to_path_buf(), target.pair_id);
        let res = blocking(move || {
            let mut intake = Intake::default();
            for k in batch.keys {
                match std::fs::symlink_metadata(root2.join(&k)) {
                    Ok(m) if m.is_dir() => intake.prefixes.push((pair_id, format!("{k}/"))),
                    Ok(_) => intake.rows.push((pair_id, k, Kind::Upsert, None, None)),
                    Err(_) => {
                        // gone: the key itself, and (when it was a folder) whatever the
                        // manifest holds under it; a file's delete is no prefix event
                        let under = format!("{k}/");
                        if !db2
                            .keys_under_page(pair_id, manifest::Side::Src, &under, "", 1)?
                            .is_empty()
                        {
                            intake.prefixes.push((pair_id, under));
                        }
                        intake.rows.push((pair_id, k, Kind::Delete, None, None));
                    }
                }
            }
            for dir in batch.rescan {
                let p = if dir.is_empty() {
                    dir
                } else {
                    format!("{dir}/")
                };
                intake.prefixes.push((pair_id, p));
            }
            let n = (intake.rows.len() as u64, intake.prefixes.len() as u64);
            Inbox::new(&db2).store(&intake)?;
            Ok(n)
        })
        .await;
        match res {
            Ok((rows, prefixes)) => {
                target.stats.events.fetch_add(rows, Relaxed);
                target.stats.prefixes.fetch_add(prefixes, Relaxed);
                if rows + prefixes > 0 {
                    target
                        .stats
                        .last_event_ms
                        .store(crate::core::metrics::unix_ms(), Relaxed);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Keys a backfill failed to copy that become pending keys at once (more wait for the drift
/// check: a backfill that fails this many has a cause no retry of single keys will mend).
const MAX_RETRIED_AFTER_BACKFILL: usize = 100_000;

/// How often a local folder that inotify cannot watch whole is reconciled by a rescan.
const RESCAN_EVERY: Duration = Duration::from_secs(60);

/// How long uploads that a stopped slate left at a pair's destination wait for their keys to
/// come up again (the inbox applies its pending keys first, a backfill lists them) before
/// they are aborted.
const RELEASE_ADOPTED_AFTER: Duration = Duration::from_secs(600);

/// Pending keys a pair applies at once with no `--transfers`: each one's probe (a HEAD) and
/// metadata update take no transfer slot, so this bounds them; the copies among them still
/// wait for the adaptive limit. Each key in flight holds its task and buffers: more of them
/// (`--transfers N`, e.g. 1024 across a long link) go faster for more memory; the default
/// keeps a daemon's memory where it was (a prefix event of 100,000 keys under 96 MiB).
const DAEMON_KEYS_AT_ONCE: usize = 128;

/// Keys settled in one transaction at most.
const SETTLE_AT_ONCE: usize = 512;

/// Starts following a local source: its watcher (a task storing its batches) — or, when the
/// folder cannot be watched whole (a folder that cannot be read, the inotify watch limit), a
/// rescan of the whole folder every [`RESCAN_EVERY`] instead, said loudly: slower, never blind.
async fn follow_local(
    db: &Arc<Manifest>,
    src: &Location,
    handle: &Arc<PairHandle>,
) -> Option<watch::WatchHandle> {
    let target = Target {
        pair_id: handle.pair_id,
        scope: Scope::of(src),
        stats: handle.intake.clone(),
    };
    let (tx, rx) = mpsc::channel(watch::CHANNEL);
    let root = src.local_path();
    // a recursive watch walks the whole tree: off the runtime's workers
    let r = root.clone();
    let watched =
        tokio::task::spawn_blocking(move || watch::watch(r, Duration::from_millis(100), tx))
            .await
            .map_err(|e| SlateError::Store {
                url: src.to_string(),
                detail: e.to_string(),
            })
            .and_then(|w| w);
    match watched {
        Ok(h) => {
            tokio::spawn(pump_watch(db.clone(), target, root, rx));
            Some(h)
        }
        Err(e) => {
            tracing::error!(pair = %handle.label, error = %e, every_s = RESCAN_EVERY.as_secs(),
                "cannot watch the whole folder: reconciling it by a rescan on a schedule instead");
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(pump_watch(db.clone(), target, root, rx));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(RESCAN_EVERY);
                tick.tick().await; // the backfill has just looked
                loop {
                    tick.tick().await;
                    let batch = watch::Batch {
                        rescan: vec![String::new()],
                        ..Default::default()
                    };
                    if tx.send(batch).await.is_err() {
                        return; // the pair's run ended
                    }
                }
            });
            None
        }
    }
}

/// The daemon's view of a `--once` run: it waits for the pair's lease (or not), prints no
/// progress, and says what it is. An inventory report serves the backfill alone (a drift
/// check lists: a report is a day old).
fn daemon_sync(opts: &SyncOptions, purpose: &str, wait: super::lease::Wait) -> SyncOptions {
    let mut o = opts.clone();
    o.inventory = None;
    o.wait = wait;
    o.purpose = purpose.into();
    o.copy.progress = copy::ProgressMode::Quiet;
    o
}

/// One run of one pair's loop, until `shutdown` resolves or an error ends it.
async fn run_pair(
    db: Arc<Manifest>,
    p: &PairRun,
    handle: &Arc<PairHandle>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let (src, dst, opts) = (&p.src, &p.dst, &p.opts);
    let stats = handle.stats.clone();
    let pair_id = handle.pair_id;
    let src = &copy::source(src, &opts.sync.copy);
    let plan = copy::plan_prefix(src, dst).await?;
    let (s, d, m) = (src.to_string(), dst.to_string(), db.clone());
    let pair = blocking(move || m.pair(&s, &d)).await?;
    tokio::pin!(shutdown);

    let _watch = match src.scheme {
        Scheme::Local => follow_local(&db, src, handle).await,
        _ => None,
    };

    // temporary files of a slate killed mid-copy (the walk removes them); a full listing of
    // the destination does the same, but a pair the manifest vouches for is not listed
    if dst.scheme == Scheme::Local {
        let root = dst.local_path();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::stores::local::sweep_orphan_temps(&root) {
                tracing::warn!(error = %e, "sweeping temporary files failed");
            }
        });
    }

    // the backfill when the pair was never reconciled; a local folder keeps no record of what
    // changed while slate was down (inotify is not a queue), so it is reconciled at every start
    let mut o = daemon_sync(&opts.sync, "daemon backfill", super::lease::Wait::Yes);
    if pair.last_sync_at.is_none() || src.scheme == Scheme::Local {
        // a cloud pair's first backfill may come from an inventory report (a local folder's
        // start-up reconcile lists: it is cheap, and runs at every start)
        if pair.last_sync_at.is_none() && src.scheme != Scheme::Local {
            o.inventory = opts.sync.inventory.clone();
        }
    } else if opts.sync.inventory.is_some() {
        tracing::info!(pair = %handle.label,
            "the pair was reconciled before: its inventory report is not read (the events and drift checks follow it)");
    }
    if pair.last_sync_at.is_none() || src.scheme == Scheme::Local {
        // its deletes go through the inbox, where the delete brake meets them (a folder
        // emptied while slate was down must not empty the destination at the next start)
        o.enqueue_deletes = !opts.delete_brake.is_off();
        // workers sharing a database start together: one backfills a cloud pair, the others
        // wait for its lease and then find it done (a local folder is each host's own)
        o.unless_synced = src.scheme != Scheme::Local;
        // objects the backfill could not copy are not left for the next drift check: they
        // become pending keys, retried with the inbox's backoff like any event's
        let failed_keys = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let keep = failed_keys.clone();
        let on_failed = move |key: &str, _msg: &str| {
            if let Ok(mut v) = keep.lock() {
                if !key.is_empty() && v.len() < MAX_RETRIED_AFTER_BACKFILL {
                    v.push(key.to_string());
                }
            }
        };
        let hooks = Hooks {
            planned: None,
            failed: Some(&on_failed),
        };
        let report = if partitioned(&db, src, dst, &o) {
            // workers sharing a PostgreSQL database split the backfill into key ranges
            let mut waiting = false;
            let r = loop {
                let r = tokio::select! {
                    r = super::partition::reconcile(db.clone(), src, dst, &o, Start::IfNeverSynced, hooks.failed) => r,
                    _ = &mut shutdown => return Ok(()),
                };
                match r {
                    // workers with other options run the pair's backfill (a rolling restart
                    // that changed them): wait for theirs to end, then look again
                    Err(SlateError::Busy { holder, .. }) => {
                        if !waiting {
                            tracing::warn!(pair = %handle.label, %holder, "backfill waits: {holder}");
                            waiting = true;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                            _ = &mut shutdown => return Ok(()),
                        }
                    }
                    r => break r?,
                }
            };
            match r {
                Some(j) => {
                    tracing::info!(pair = %handle.label, "backfill: {}", j.line());
                    if let Some(detail) = j.failure() {
                        // the pair fails and starts again (with backoff): a new run, whose
                        // partitions done before are found equal by the manifest
                        return Err(SlateError::Backfill {
                            pair: handle.label.clone(),
                            detail,
                        });
                    }
                    j.report
                }
                None => {
                    tracing::info!(pair = %handle.label, "backfill: reconciled meanwhile by another worker");
                    SyncReport::default()
                }
            }
        } else {
            tokio::select! {
                r = sync_once(db.clone(), src, dst, &o, hooks) => r?,
                // dropping the run releases its lease and removes its temporary files
                _ = &mut shutdown => return Ok(()),
            }
        };
        stats.bytes_copied.fetch_add(report.copied_bytes, Relaxed);
        stats.backfill_copied.fetch_add(report.copied, Relaxed);
        stats.backfill_deleted.fetch_add(report.deleted, Relaxed);
        if report.failed > 0 {
            let keys = failed_keys.lock().map(|v| v.clone()).unwrap_or_default();
            tracing::warn!(pair = %handle.label, failed = report.failed, first = ?report.first_error,
                "backfill: objects failed; they are retried as pending keys");
            let rows: Vec<_> = keys
                .into_iter()
                .map(|k| (pair_id, k, Kind::Upsert, None, None))
                .collect();
            let m = db.clone();
            blocking(move || {
                Inbox::new(&m).store(&Intake {
                    rows,
                    ..Default::default()
                })
            })
            .await?;
        }
        // one log line (a backfill from a report has a line per pass)
        tracing::info!(pair = %handle.label, "backfill: {}", report.line().replace('\n', " | "));
    }
    tracing::debug!("following changes of {src} -> {dst}");
    handle.set_state(PairState::Following);
    let (d, pair_id) = (db.clone(), handle.pair_id);
    if let Err(e) = blocking(move || d.clear_failure(pair_id)).await {
        tracing::warn!(pair = %handle.label, error = %e, "could not clear the recorded failure");
    }

    let counters = Arc::new(Counters::default());
    let mut copy_opts = opts.sync.copy.clone();
    copy_opts
        .resume
        .get_or_insert_with(|| crate::copy::resume::UploadsDb(db.clone()));
    let ctx = Arc::new(Ctx::new(&plan, copy_opts, counters)?);
    if let Some(l) = ctx.ledger.as_ref().map(Arc::downgrade) {
        // uploads a stopped daemon left are continued by the keys its inbox applies again
        // first; what none of them took by then is aborted (unless the pair stopped first:
        // its ledger is gone then, and what it held is free for the pair's next start)
        let dst_side = ctx.dst.clone();
        let (first, later) = (l.clone(), l);
        tokio::spawn(async move {
            tokio::time::sleep(RELEASE_ADOPTED_AFTER).await;
            if let Some(l) = first.upgrade() {
                l.release_unused(&dst_side).await;
            }
        });
        // a worker beside this one (on this host, sharing the database) killed mid-copy: its
        // uploads are adopted once its claims have expired, so that the worker that applies
        // its keys here continues them, and aborted a while later if none did
        let (dst_side, every) = (
            ctx.dst.clone(),
            (inbox::claim_ttl() * 2).max(Duration::from_secs(30)),
        );
        tokio::spawn(async move {
            // adopted at one round, aborted at the next unless a copy took them meanwhile
            let mut adopted: Vec<i64> = Vec::new();
            loop {
                tokio::time::sleep(every).await;
                let Some(l) = later.upgrade() else { return };
                if !adopted.is_empty() {
                    l.release_ids(&dst_side, &adopted).await;
                }
                adopted = match blocking(move || l.adopt_now()).await {
                    Ok(ids) => ids,
                    Err(e) => {
                        tracing::warn!(error = %e, "looking for uploads that stopped workers left failed");
                        Vec::new()
                    }
                };
            }
        });
    }
    let engine = Arc::new(
        Engine::new(db.clone(), pair_id, ctx, dst.clone())
            .with_filter(opts.sync.filter.clone())
            .with_brake(opts.delete_brake.clone())
            .with_backup(opts.sync.backup.clone())
            .with_no_delete(opts.sync.no_delete),
    );
    let expander = super::expand::Expander::new(db.clone(), pair_id, plan.src.clone());
    let mut last_drift = Instant::now();
    let mut last_health = Instant::now();
    let shared = partitioned(&db, src, dst, &opts.sync);
    let my_spec = super::partition::spec(&opts.sync);
    let mut last_join_look = Instant::now();
    let mut drift: Option<tokio::task::JoinHandle<()>> = None;
    let mut rounds = 0u64;
    // keys reconciled at once, and claimed at a time
    let at_once = engine
        .ctx
        .opts
        .transfers
        .unwrap_or(DAEMON_KEYS_AT_ONCE)
        .max(1);
    let claim = opts.batch.min(at_once / 2).max(1);
    // each key its own task, so that keys go on while the loop expands, claims and settles
    // (dropping the set aborts what is in it: copies cut short leave nothing visible)
    let mut window: tokio::task::JoinSet<Result<Option<inbox::Settle>>> = Default::default();
    let label: Arc<str> = handle.label.as_str().into();
    let result = loop {
        rounds = rounds.saturating_add(1);
        // a test hook (test builds only): the pair fails while it follows its events
        #[cfg(feature = "faults")]
        if rounds == 3 {
            if let Some(e) = crate::stores::faults::pair_failure(&handle.label) {
                break Err(e);
            }
        }
        // the claims lapsed (their renewals failed past their life): the work in flight is
        // dropped, its keys are another's now
        if inbox::claims_lapsed() && !window.is_empty() {
            tracing::error!(
                keys = window.len(),
                "claims lapsed: the keys in flight are dropped; their inbox rows stay"
            );
            window.abort_all();
            while window.join_next().await.is_some() {}
        }
        // listen for the bell before looking, so that a push in between is not missed
        let rung = inbox::bell().notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        // prefixes first, one bounded step each round: their keys join the queue below
        let expanded = tokio::select! {
            r = expander.step() => r?,
            _ = &mut shutdown => break Ok(()),
        };
        // keys are claimed while the window has room for a claim's worth: what a worker
        // claims, the others cannot take, and a key in flight stays claimed until settled
        // (one reconcile of a key at a time)
        if window.len() + claim <= at_once || window.is_empty() {
            let want = (at_once - window.len()).min(claim).max(1);
            let m = db.clone();
            // none while this worker's claims may have lapsed: another may be applying them
            let pending = if inbox::claims_lapsed() {
                Vec::new()
            } else {
                blocking(move || Inbox::new(&m).claim(pair_id, want, inbox::worker())).await?
            };
            for p in pending {
                let (e, m, st, l) = (engine.clone(), db.clone(), stats.clone(), label.clone());
                window.spawn(async move { apply_pending(&e, &m, &st, &l, p).await });
            }
        }
        if window.is_empty() {
            if !expanded {
                tokio::select! {
                    _ = &mut shutdown => break Ok(()),
                    _ = &mut rung => {}
                    // retries come due, and pushes from another process
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        } else {
            tokio::select! {
                first = window.join_next() => {
                    // what finished together is settled together
                    let mut done = vec![first];
                    while done.len() < SETTLE_AT_ONCE {
                        match window.try_join_next() {
                            Some(r) => done.push(Some(r)),
                            None => break,
                        }
                    }
                    settle_finished(&db, pair_id, done).await?;
                }
                // room for more keys (a push), retries come due, the claims' state: the
                // keys in flight go on meanwhile
                _ = &mut rung, if window.len() + claim <= at_once => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = &mut shutdown => break Ok(()),
            }
        }
        if last_health.elapsed() >= health_every() {
            last_health = Instant::now();
            health_line(&db, handle).await?;
        }
        let drifting = drift.as_ref().is_some_and(|d| !d.is_finished());
        if !drifting && shared && last_join_look.elapsed() >= JOIN_LOOK {
            // a partitioned run another worker started (a drift check due on its clock, a
            // backfill after a restart) with this worker's options: it takes partitions too,
            // and its own drift check counts from now
            last_join_look = Instant::now();
            let (m, id) = (db.clone(), pair_id);
            let open = blocking(move || Partitions::new(&m).latest(id)).await?;
            if open.is_some_and(|r| r.finished_at.is_none() && r.spec == my_spec) {
                last_drift = Instant::now();
                let (db, p, stats) = (db.clone(), p.clone(), stats.clone());
                drift = Some(tokio::spawn(async move {
                    drift_check(&db, &p, &stats, Start::Never).await
                }));
                continue;
            }
        }
        if !opts.drift_interval.is_zero()
            && last_drift.elapsed() >= opts.drift_interval
            && !drifting
        {
            // beside the events, not instead of them: a full compare of a large pair takes
            // long, and the pair's events keep being applied meanwhile
            last_drift = Instant::now();
            let (db, p, stats) = (db.clone(), p.clone(), stats.clone());
            // on a shared database, once per interval however many workers (the first whose
            // clock says it is due starts it, the others join)
            // (a tenth of slack for clocks and timers)
            let start = Start::IfNoneSince(opts.drift_interval.as_millis() as i64 * 9 / 10);
            drift = Some(tokio::spawn(async move {
                drift_check(&db, &p, &stats, start).await
            }));
        }
    };
    if result.is_ok() && !window.is_empty() {
        // stopping: the work in flight may finish within the grace period, and is settled;
        // keys not finished stay in the inbox
        tracing::info!(
            keys = window.len(),
            "shutting down: finishing the work in flight"
        );
        let mut done = Vec::new();
        let drain = async {
            while let Some(r) = window.join_next().await {
                done.push(Some(r));
            }
        };
        if tokio::time::timeout(opts.shutdown_grace, drain)
            .await
            .is_err()
        {
            tracing::warn!("shutdown grace period over; unfinished keys stay in the inbox");
        }
        window.abort_all();
        settle_finished(&db, pair_id, done).await?;
    }
    if let Some(d) = drift {
        d.abort(); // its lease is released as it drops
    }
    result
}

/// What one key's task came to: how to settle it, or the database error that ends the loop.
type Finished = Option<std::result::Result<Result<Option<inbox::Settle>>, tokio::task::JoinError>>;

/// Settles what finished together in one transaction (nothing to settle: nothing written),
/// then reports the first database error among them: keys finished beside a failing one are
/// settled all the same, not applied again.
async fn settle_finished(db: &Arc<Manifest>, pair_id: i64, done: Vec<Finished>) -> Result<()> {
    let mut settles = Vec::with_capacity(done.len());
    let mut failed = None;
    for r in done.into_iter().flatten() {
        match r {
            Ok(Ok(s)) => settles.extend(s),
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
            // a task that panicked: its key stays claimed until the claim expires, then is
            // applied again
            Err(e) if e.is_panic() => {
                tracing::error!(error = %e, "a key's reconcile panicked; the key is applied again once its claim expires")
            }
            Err(_) => {}
        }
    }
    if !settles.is_empty() {
        let m = db.clone();
        blocking(move || Inbox::new(&m).settle_all(pair_id, inbox::worker(), &settles)).await?;
    }
    failed.map_or(Ok(()), Err)
}

/// The per-minute health line of a pair.
async fn health_line(db: &Arc<Manifest>, handle: &PairHandle) -> Result<()> {
    let (m, pair_id) = (db.clone(), handle.pair_id);
    let st = blocking(move || Inbox::new(&m).stats(pair_id)).await?;
    let (i, stats) = (&handle.intake, &handle.stats);
    tracing::info!(
        pair = %handle.label,
        received = i.events.load(Relaxed),
        messages = i.messages.load(Relaxed),
        ignored = i.ignored.load(Relaxed),
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
    Ok(())
}

/// Reconciles one pending key and says how to settle its inbox row (the loop settles what
/// finished together in one transaction): done, retried later with the one backoff, or
/// dead-lettered when no retry can apply it; None for a delete the brake holds (recorded
/// here). Only a database error ends the loop.
async fn apply_pending(
    engine: &Engine,
    db: &Arc<Manifest>,
    stats: &super::running::DaemonStats,
    label: &str,
    p: inbox::Pending,
) -> Result<Option<inbox::Settle>> {
    let pair_id = engine.pair_id;
    let started_at = inbox::now();
    let r = engine
        .reconcile_pending(&p.key, p.token.as_deref(), p.released)
        .await;
    let lag = (inbox::now() - p.first_seen).max(0) as u64;
    stats.lag_ms_max.fetch_max(lag, Relaxed);
    let m = db.clone();
    let (key, events) = (p.key.clone(), p.events);
    match r {
        Ok(Applied::Held { fresh }) => {
            if fresh {
                tracing::error!(
                    pair = %label,
                    key = %key,
                    "delete brake engaged: this pair's deletes pass its limit; they are held (copies go on). \
                     Look at the source, then `slate pairs release-deletes SRC DST` to apply them or \
                     `slate pairs drop-deletes SRC DST` to forget them (a later reconcile finds them again)"
                );
            }
            tracing::debug!(key = %key, "delete held by the brake");
            let by = inbox::worker().id.clone();
            blocking(move || crate::state::brake::Brakes::new(&m).hold(pair_id, &key, events, &by))
                .await
                .map(|_| None)
        }
        Ok(a) => {
            stats.applied.fetch_add(1, Relaxed);
            stats.lag.observe_ms(lag);
            stats.lag_ms_last.store(lag, Relaxed);
            let now = crate::core::metrics::unix_ms();
            stats.last_applied_ms.store(now, Relaxed);
            // the freshness objective counts the changes that reached the replica, from the
            // source's write (the event's time; its arrival when it carries none). A clock
            // ahead of ours counts as 0. A canary is slate's own write: it measures the path,
            // not the users' changes, and stays out.
            if matches!(
                a,
                Applied::Copied { .. } | Applied::Deleted | Applied::MetaUpdated
            ) && !crate::core::canary::is_canary(&p.key)
            {
                let written = p.event_at.unwrap_or(p.first_seen).min(p.first_seen);
                stats
                    .freshness
                    .observe((now as i64 - written).max(0) as u64, now);
            }
            match a {
                Applied::Copied { bytes } => {
                    stats.bytes_copied.fetch_add(bytes, Relaxed);
                    stats.copied.fetch_add(1, Relaxed)
                }
                Applied::Deleted => stats.deleted.fetch_add(1, Relaxed),
                // bytes unmoved: counted with the copies, as a change applied
                Applied::MetaUpdated => stats.copied.fetch_add(1, Relaxed),
                Applied::Unchanged | Applied::AlreadyGone | Applied::Filtered => {
                    stats.unchanged.fetch_add(1, Relaxed)
                }
                Applied::Stale => stats.stale.fetch_add(1, Relaxed),
                Applied::Held { .. } => 0,
            };
            tracing::debug!(key = %key, ?a, lag_ms = lag, "applied");
            Ok(Some(inbox::Settle::Applied {
                key,
                events,
                started_at,
                outcome: a.name().to_string(),
            }))
        }
        Err(e) if e.is_permanent_for_key() => {
            // no retry can mend the key itself (it cannot be addressed or written there):
            // kept as a dead letter with the reason
            stats.failed.fetch_add(1, Relaxed);
            let why = match crate::engine::once::archived_tier(&e.to_string()) {
                Some(tier) => {
                    format!(
                        "{key}: in {tier}: restore it, then `slate deadletters retry` applies it"
                    )
                }
                None => one_line(&e),
            };
            tracing::warn!(key = %key, why = %why, "key dead-lettered: no retry can apply it");
            Ok(Some(inbox::Settle::Dead {
                key,
                events,
                started_at,
                why,
            }))
        }
        Err(e) => {
            stats.failed.fetch_add(1, Relaxed);
            tracing::warn!(key = %key, error = %e, attempt = p.attempts + 1, "reconcile failed; will retry");
            let backoff = Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(300),
                ..Backoff::forever()
            };
            Ok(Some(inbox::Settle::Retry {
                key,
                delay_ms: backoff.cap(p.attempts + 2).as_millis() as i64,
            }))
        }
    }
}

/// Whether the pair's backfill and drift checks run partitioned: workers share a PostgreSQL
/// database, both sides are stores they all reach (a local folder is each host's own: a
/// partition copied to one host's disk is not on the others'), and the reconcile covers the
/// whole pair.
fn partitioned(db: &Manifest, src: &Location, dst: &Location, opts: &SyncOptions) -> bool {
    db.is_postgres()
        && src.scheme != Scheme::Local
        && dst.scheme != Scheme::Local
        && super::partition::partitionable(opts)
}

/// How often a worker looks for a partitioned run of its pair that another worker started.
const JOIN_LOOK: Duration = Duration::from_secs(5);

/// A full compare of the pair that repairs what the events missed, counted as drift. On a
/// shared database it is partitioned: started as `start` says, or joined.
async fn drift_check(
    db: &Arc<Manifest>,
    p: &PairRun,
    stats: &super::running::DaemonStats,
    start: Start,
) {
    // another reconcile of the pair is running (a job, a CLI run): it does the same work
    let mut o = daemon_sync(&p.opts.sync, "drift check", super::lease::Wait::No);
    o.full = true;
    // what the drift check finds goes through the inbox: the event loop applies it under its
    // claims (one reconcile of a key at a time, the newest state wins, deletes meet the same
    // checks as an event's)
    o.enqueue = true;
    let r = if partitioned(db, &p.src, &p.dst, &o) {
        match super::partition::reconcile(db.clone(), &p.src, &p.dst, &o, start, None).await {
            Ok(Some(j)) => {
                tracing::info!("drift check: {}", j.line());
                if let Some(f) = j.failure() {
                    tracing::warn!("drift check: {f}");
                }
                Ok(j.report)
            }
            Ok(None) => {
                tracing::debug!("drift check: another worker ran it in this interval");
                return;
            }
            Err(e) => Err(e),
        }
    } else {
        sync_once(db.clone(), &p.src, &p.dst, &o, Hooks::default()).await
    };
    match r {
        Ok(r) => {
            let repaired = r.copied + r.deleted + r.queued;
            let c = &r.counts;
            let found = c.only_in_source + c.changed + c.only_in_destination;
            stats.drift_found.fetch_add(found, Relaxed);
            stats.drift_repaired.fetch_add(repaired, Relaxed);
            stats.bytes_copied.fetch_add(r.copied_bytes, Relaxed);
            stats
                .last_drift_check_ms
                .store(crate::core::metrics::unix_ms(), Relaxed);
            tracing::info!(repaired, "drift check: {}", r.line());
        }
        Err(SlateError::Busy { holder, .. }) => {
            tracing::info!(holder = %holder, "drift check skipped: another reconcile of the pair runs")
        }
        Err(e) => tracing::warn!(error = %e, "drift check failed"),
    }
}
