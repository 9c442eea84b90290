//! What this process's daemon runs, for the server (`GET /pairs`, `/readyz`, `/metrics`)
//! and the health line: every pair with its counters and its state (starting, following,
//! failed and waiting to restart).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use crate::events::route::IntakeStats;
use crate::events::source::ConsumerStats;

/// Counters of one pair's daemon. Timestamps (`*_ms`) are milliseconds since the Unix
/// epoch, 0 for never.
#[derive(Debug, Default)]
pub struct DaemonStats {
    /// Keys reconciled without error (every outcome but `failed`).
    pub applied: AtomicU64,
    pub copied: AtomicU64,
    pub deleted: AtomicU64,
    pub unchanged: AtomicU64,
    /// Events skipped by their ordering token (older than what was applied).
    pub stale: AtomicU64,
    pub failed: AtomicU64,
    /// Differences drift checks found (new, changed and extra keys; extras kept by
    /// `--no-delete` not counted), repaired or not.
    pub drift_found: AtomicU64,
    /// Objects drift checks copied or deleted.
    pub drift_repaired: AtomicU64,
    /// Objects the backfill (or start-up reconcile) copied and deleted.
    pub backfill_copied: AtomicU64,
    pub backfill_deleted: AtomicU64,
    /// Bytes written to the destination: by applied keys, the backfill and drift checks.
    pub bytes_copied: AtomicU64,
    /// When a key was last reconciled without error.
    pub last_applied_ms: AtomicU64,
    /// When a drift check last finished without error.
    pub last_drift_check_ms: AtomicU64,
    /// Replication lag (first event of a key → key reconciled) of the last key applied, ms.
    pub lag_ms_last: AtomicU64,
    /// Largest lag since the last health line (which resets it), ms; failed keys included.
    pub lag_ms_max: AtomicU64,
    /// Replication lag of every key applied.
    pub lag: crate::core::metrics::LagHistogram,
    /// Times the pair's loop failed and was restarted.
    pub restarts: AtomicU64,
    /// The freshness objective: source write (the provider's event time; the first event's
    /// arrival when events carry none) → replica, per key whose replica changed.
    pub freshness: Freshness,
}

/// Minutes the freshness chart keeps.
pub const FRESHNESS_MINUTES: usize = 60;

/// A pair's freshness: how long changes take from the source's write to the replica, against
/// the pair's target (`freshness_target`, 15 minutes by default: the objective AWS's
/// Replication Time Control states), as S3 RTC reports it: the share within the target.
#[derive(Debug)]
pub struct Freshness {
    pub target_ms: AtomicU64,
    /// Source write → replica of every change applied.
    pub histogram: crate::core::metrics::LagHistogram,
    /// Changes applied, and those within the target.
    pub applied: AtomicU64,
    pub within: AtomicU64,
    /// The last hour, a slot a minute: (unix minute, changes, within target, the largest ms).
    minutes: std::sync::Mutex<std::collections::VecDeque<MinuteSlot>>,
}

/// One minute of [`Freshness`]: when, how many, how many within the target, the slowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteSlot {
    pub minute: u64,
    pub applied: u64,
    pub within: u64,
    pub max_ms: u64,
}

impl Default for Freshness {
    fn default() -> Self {
        Freshness {
            target_ms: AtomicU64::new(15 * 60 * 1000),
            histogram: crate::core::metrics::LagHistogram::freshness(),
            applied: AtomicU64::new(0),
            within: AtomicU64::new(0),
            minutes: Default::default(),
        }
    }
}

impl Freshness {
    /// Counts one change that reached the replica `ms` after the source's write, at `now_ms`.
    pub fn observe(&self, ms: u64, now_ms: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let within = ms <= self.target_ms.load(Relaxed);
        self.histogram.observe_ms(ms);
        self.applied.fetch_add(1, Relaxed);
        if within {
            self.within.fetch_add(1, Relaxed);
        }
        let minute = now_ms / 60_000;
        if let Ok(mut m) = self.minutes.lock() {
            match m.back_mut() {
                Some(s) if s.minute == minute => {
                    s.applied += 1;
                    s.within += u64::from(within);
                    s.max_ms = s.max_ms.max(ms);
                }
                _ => m.push_back(MinuteSlot {
                    minute,
                    applied: 1,
                    within: u64::from(within),
                    max_ms: ms,
                }),
            }
            while m
                .front()
                .is_some_and(|s| s.minute + FRESHNESS_MINUTES as u64 <= minute)
            {
                m.pop_front();
            }
        }
    }

    /// The share of changes applied within the target (None before the first).
    pub fn ratio(&self) -> Option<f64> {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.applied.load(Relaxed);
        (n > 0).then(|| self.within.load(Relaxed) as f64 / n as f64)
    }

    /// The minutes of the last hour before `now_ms` that saw changes, oldest first.
    pub fn last_hour(&self, now_ms: u64) -> Vec<MinuteSlot> {
        let minute = now_ms / 60_000;
        self.minutes
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|s| s.minute + (FRESHNESS_MINUTES as u64) > minute)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Where a pair's daemon is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairState {
    /// Connecting, backfilling: not following events yet.
    Starting,
    /// Following events.
    Following,
    /// The pair's loop failed with `error`; it restarts at `retry_at_ms` (its events are
    /// still stored in its inbox meanwhile, and applied after the restart).
    Failed { error: String, retry_at_ms: u64 },
    /// Stopped at shutdown.
    Stopped,
}

impl PairState {
    pub fn name(&self) -> &'static str {
        match self {
            PairState::Starting => "starting",
            PairState::Following => "following",
            PairState::Failed { .. } => "failed",
            PairState::Stopped => "stopped",
        }
    }
}

/// The newest canary run of a pair's daemon (`canary_interval`, see `engine::canary`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CanaryStatus {
    /// When the run ended (unix ms).
    pub at_ms: u64,
    pub ok: bool,
    /// The run's line: the latencies, or where the chain broke.
    pub line: String,
    /// Write → replica and delete → replica gone, ms.
    pub replica_ms: Option<u64>,
    pub gone_ms: Option<u64>,
    /// The last run that passed (0: none yet).
    pub last_ok_ms: u64,
}

/// One pair the daemon runs.
#[derive(Debug)]
pub struct PairHandle {
    pub pair_id: i64,
    /// `SRC -> DST`.
    pub label: String,
    /// The config's name for the pair, if it has one.
    pub name: Option<String>,
    pub stats: Arc<DaemonStats>,
    pub intake: Arc<IntakeStats>,
    state: tokio::sync::watch::Sender<PairState>,
    /// The pair's delete brake (its window is what `GET /pairs` counts over).
    pub delete_brake: std::sync::Mutex<crate::core::brake::BrakePolicy>,
    /// The newest canary run, when the daemon runs canaries.
    canary: std::sync::Mutex<Option<CanaryStatus>>,
}

impl PairHandle {
    pub fn new(pair_id: i64, label: String, name: Option<String>) -> Arc<PairHandle> {
        Arc::new(PairHandle {
            pair_id,
            label,
            name,
            stats: Default::default(),
            intake: Default::default(),
            state: tokio::sync::watch::Sender::new(PairState::Starting),
            delete_brake: Default::default(),
            canary: Default::default(),
        })
    }

    /// The newest canary run (None: canaries are off, or none ran yet).
    pub fn canary(&self) -> Option<CanaryStatus> {
        self.canary.lock().ok().and_then(|c| c.clone())
    }

    pub fn set_canary(&self, c: CanaryStatus) {
        if let Ok(mut g) = self.canary.lock() {
            *g = Some(c);
        }
    }

    /// Why the pair is degraded: its newest canary did not make it through.
    pub fn degraded(&self) -> Option<String> {
        self.canary().filter(|c| !c.ok).map(|c| c.line)
    }

    /// The pair's delete brake now.
    pub fn brake(&self) -> crate::core::brake::BrakePolicy {
        self.delete_brake
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default()
    }

    pub fn state(&self) -> PairState {
        self.state.borrow().clone()
    }

    pub fn set_state(&self, s: PairState) {
        self.state.send_replace(s);
    }

    /// Sees every change of the pair's state (the CLI prints them).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<PairState> {
        self.state.subscribe()
    }
}

/// Every pair this process's daemon runs, and the queue consumers that feed them.
#[derive(Debug, Default)]
pub struct Running {
    pairs: RwLock<Vec<Arc<PairHandle>>>,
    consumers: RwLock<Vec<Arc<ConsumerStats>>>,
}

/// A consumer that fails every receive for this long makes the process not ready.
pub const CONSUMER_STUCK_MS: u64 = 60_000;

impl Running {
    pub fn new() -> Arc<Running> {
        Arc::new(Running::default())
    }

    pub fn add(&self, p: Arc<PairHandle>) {
        if let Ok(mut v) = self.pairs.write() {
            v.push(p);
        }
    }

    pub fn pairs(&self) -> Vec<Arc<PairHandle>> {
        self.pairs.read().map(|v| v.clone()).unwrap_or_default()
    }

    pub fn find(&self, pair_id: i64) -> Option<Arc<PairHandle>> {
        self.pairs().into_iter().find(|p| p.pair_id == pair_id)
    }

    pub fn add_consumer(&self, c: Arc<ConsumerStats>) {
        if let Ok(mut v) = self.consumers.write() {
            v.push(c);
        }
    }

    pub fn consumers(&self) -> Vec<Arc<ConsumerStats>> {
        self.consumers.read().map(|v| v.clone()).unwrap_or_default()
    }
}
