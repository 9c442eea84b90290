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
