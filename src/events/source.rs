//! One trait for every queue-like transport (SQS, an Azure Storage Queue, a Pub/Sub pull
//! subscription): take the next batch of messages, then acknowledge those whose events are
//! stored, or give back those that could not be. [`consume`] is the one loop that drives any
//! of them: receive → parse → fan out to every pair ([`super::route::Fanout`]) → one inbox
//! transaction → ack (rule 2 of docs/ARCHITECTURE.md: never ack before the commit). A process runs one
//! consumer per distinct queue, however many pairs that queue feeds.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use async_trait::async_trait;

use super::route::{Fanout, Received};
use super::Parsed;
use crate::core::backoff::Backoff;
use crate::core::error::Result;

/// One message as received: its raw text (kept for dead letters), what the parser made of it
/// (`Err`: the reason it cannot be used, which becomes the dead letter's reason), and the
/// transport's handle to acknowledge it.
pub struct Message<A> {
    pub raw: Vec<u8>,
    /// The text the parser read, when the transport decoded `raw` first (a Storage Queue's
    /// base64): what a dead letter shows.
    pub decoded: Option<Vec<u8>>,
    pub parsed: std::result::Result<Parsed, String>,
    pub ack: A,
}

/// A queue-like transport.
#[async_trait]
pub trait Source: Send + 'static {
    /// What acknowledges one message (an SQS receipt handle, a pop receipt, an ack id).
    type Ack: Send + 'static;

    /// The transport's name, for logs, metrics and dead letters (`sqs`, `azqueue`, `pubsub`).
    fn name(&self) -> &'static str;

    /// What this source was configured as (`sqs://queue`, …): safe to show, never a secret.
    fn spec(&self) -> &str;

    /// Waits for the next messages. May return an empty batch (a long poll that timed out);
    /// an error is a failed receive, retried by [`consume`] with a backoff.
    async fn next_batch(&mut self) -> Result<Vec<Message<Self::Ack>>>;

    /// Acknowledges messages whose events are durably stored. Returns how many could not be
    /// acknowledged (they will be delivered again, which only repeats coalesced events).
    async fn ack(&mut self, acks: Vec<Self::Ack>) -> usize;

    /// Gives back messages that could not be stored, so that they are delivered again soon.
    /// Transports without such a call let the visibility timeout do it.
    async fn nack(&mut self, acks: Vec<Self::Ack>) {
        drop(acks);
    }

    /// A log-like source (Azure's change feed, read from a cursor rather than acknowledged)
    /// says where the batch it handed out last ends, as (feed, cursor): stored in the
    /// transaction that stores the batch's events, so that a restart reads on from there.
    /// Queues have none.
    fn checkpoint(&self) -> Option<(String, String)> {
        None
    }
}

/// Counters and state of one consumer (one queue), for `/readyz`, `GET /pairs` and metrics.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    /// What it consumes (`sqs://queue`, …): never a secret.
    pub spec: String,
    pub messages: std::sync::atomic::AtomicU64,
    pub receive_errors: std::sync::atomic::AtomicU64,
    pub store_errors: std::sync::atomic::AtomicU64,
    pub ack_errors: std::sync::atomic::AtomicU64,
    /// When a receive last succeeded (unix ms; 0: not yet).
    pub last_ok_ms: std::sync::atomic::AtomicU64,
    /// Failed receives in a row (0 once one succeeds).
    pub failing: std::sync::atomic::AtomicU64,
    /// The last receive error, one line.
    pub last_error: std::sync::Mutex<Option<String>>,
}

impl ConsumerStats {
    pub fn new(spec: &str) -> ConsumerStats {
        ConsumerStats {
            spec: spec.to_string(),
            ..Default::default()
        }
    }

    /// Failing for a while: every receive of the last `for_ms` failed (a deleted queue,
    /// expired credentials). What `/readyz` reports.
    pub fn stuck(&self, now_ms: u64, for_ms: u64) -> Option<String> {
        if self.failing.load(Relaxed) == 0 {
            return None;
        }
        let ok = self.last_ok_ms.load(Relaxed);
        if now_ms.saturating_sub(ok) < for_ms {
            return None;
        }
        Some(
            self.last_error
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .unwrap_or_else(|| "receives fail".into()),
        )
    }
}

/// Drives `source` until `stop` resolves: every batch is routed to the pairs of `fanout` and
/// stored in one transaction, and only then acknowledged. A batch that cannot be stored is
/// given back (never acknowledged). Receive errors are retried with the one [`Backoff`].
pub async fn consume<S: Source>(
    source: S,
    fanout: Arc<Fanout>,
    stats: Arc<ConsumerStats>,
    stop: impl std::future::Future<Output = ()> + Send,
) {
    consume_with(source, fanout, stats, stop, |_| true).await
}

/// Receivers of one queue that widen with its rate: between `min` and `max` receives in
/// flight; one more starts when a receive comes back full (`full` messages: the queue holds
/// more than the receivers take), and a receiver ends when its receive comes back less than
/// half full (the others take what comes) while more than `min` run.
#[derive(Debug)]
pub struct Widening {
    pub min: usize,
    pub max: usize,
    pub full: usize,
    active: std::sync::atomic::AtomicUsize,
    /// Every receiver started, so that the daemon can end them all.
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Widening {
    pub fn new(min: usize, max: usize, full: usize) -> Arc<Widening> {
        Arc::new(Widening {
            min: min.max(1),
            max: max.max(min.max(1)),
            full: full.max(1),
            active: Default::default(),
            tasks: Default::default(),
        })
    }

    /// Receivers running now.
    pub fn active(&self) -> usize {
        self.active.load(Relaxed)
    }

    /// Aborts every receiver started (the daemon's end).
    pub fn abort_all(&self) {
        if let Ok(tasks) = self.tasks.lock() {
            for t in tasks.iter() {
                t.abort();
            }
        }
    }

    /// Takes a receiver's place while fewer than `bound` run (`more`) or gives one back while
    /// more than `bound` run (`!more`).
    fn step(&self, more: bool, bound: usize) -> bool {
        self.active
            .fetch_update(Relaxed, Relaxed, |n| {
                if more {
                    (n < bound).then_some(n + 1)
                } else {
                    (n > bound).then_some(n - 1)
                }
            })
            .is_ok()
    }

    fn track(&self, t: tokio::task::JoinHandle<()>) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(t);
        }
    }
}

/// A receiver's place among the running ones: given back however the receiver ends (stopped,
/// aborted, panicked), unless it gave it back itself (the queue gave it little).
struct Place {
    w: Arc<Widening>,
    given_back: Arc<AtomicBool>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.given_back.load(Relaxed) {
            self.w.active.fetch_sub(1, Relaxed);
        }
    }
}

/// The receivers of one queue: all aborted when this is dropped.
pub struct Receivers(Arc<Widening>);

impl Drop for Receivers {
    fn drop(&mut self) {
        self.0.abort_all();
    }
}

/// Starts the `min` receivers of `source` (see [`Widening`]); they end when `stop` says true
/// or the returned [`Receivers`] is dropped, the ones added later also when the queue gives
/// them less than half a batch.
pub fn consume_widening<S: Source + Clone + Sync>(
    source: S,
    fanout: Arc<Fanout>,
    stats: Arc<ConsumerStats>,
    stop: tokio::sync::watch::Receiver<bool>,
    widening: Arc<Widening>,
) -> Receivers {
    for _ in 0..widening.min {
        if widening.step(true, widening.min) {
            spawn_receiver(
                source.clone(),
                fanout.clone(),
                stats.clone(),
                stop.clone(),
                widening.clone(),
            );
        }
    }
    Receivers(widening)
}

/// Starts one receiver whose place `w` has counted already.
fn spawn_receiver<S: Source + Clone + Sync>(
    source: S,
    fanout: Arc<Fanout>,
    stats: Arc<ConsumerStats>,
    stop: tokio::sync::watch::Receiver<bool>,
    w: Arc<Widening>,
) {
    let (again, fanout2, stats2, stop2) =
        (source.clone(), fanout.clone(), stats.clone(), stop.clone());
    let mut stopped = stop.clone();
    let given_back = Arc::new(AtomicBool::new(false));
    let place = Place {
        w: w.clone(),
        given_back: given_back.clone(),
    };
    let tracker = w.clone();
    let task = tokio::spawn(async move {
        let _place = place;
        let stopped = async move {
            let _ = stopped.wait_for(|v| *v).await;
        };
        consume_with(source, fanout, stats, stopped, move |n| {
            if n >= w.full && w.step(true, w.max) {
                tracing::debug!(
                    queue = again.spec(),
                    receivers = w.active(),
                    "the queue hands out full batches: one more receiver"
                );
                spawn_receiver(
                    again.clone(),
                    fanout2.clone(),
                    stats2.clone(),
                    stop2.clone(),
                    w.clone(),
                );
            } else if n < w.full / 2 && w.step(false, w.min) {
                given_back.store(true, Relaxed);
                tracing::debug!(
                    queue = again.spec(),
                    receivers = w.active(),
                    "the queue gives less than half a batch: one receiver less"
                );
                return false;
            }
            true
        })
        .await
    });
    tracker.track(task);
}

/// [`consume`], asking `after` after each receive (with the number of messages) whether to
/// go on.
async fn consume_with<S: Source>(
    mut source: S,
    fanout: Arc<Fanout>,
    stats: Arc<ConsumerStats>,
    stop: impl std::future::Future<Output = ()> + Send,
    mut after: impl FnMut(usize) -> bool + Send,
) {
    let backoff = Backoff::forever();
    let mut failures = 0u32;
    tokio::pin!(stop);
    loop {
        let batch = tokio::select! {
            _ = &mut stop => return,
            b = source.next_batch() => b,
        };
        let batch = match batch {
            Ok(b) => {
                failures = 0;
                stats.failing.store(0, Relaxed);
                stats
                    .last_ok_ms
                    .store(crate::core::metrics::unix_ms(), Relaxed);
                b
            }
            Err(e) => {
                failures += 1;
                stats.receive_errors.fetch_add(1, Relaxed);
                stats.failing.fetch_add(1, Relaxed);
                if let Ok(mut last) = stats.last_error.lock() {
                    *last = Some(crate::stores::side::one_line(&e));
                }
                let delay = backoff.delay(failures);
                tracing::warn!(source = source.name(), spec = source.spec(), error = %e,
                    delay_ms = delay.as_millis() as u64, "receive failed");
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                continue;
            }
        };
        if !after(batch.len()) {
            return;
        }
        let checkpoint = source.checkpoint();
        if batch.is_empty() && checkpoint.is_none() {
            continue;
        }
        stats.messages.fetch_add(batch.len() as u64, Relaxed);
        let mut acks = Vec::with_capacity(batch.len());
        let mut items = Vec::with_capacity(batch.len());
        for m in batch {
            acks.push(m.ack);
            items.push(Received {
                raw: m.raw,
                decoded: m.decoded,
                parsed: m.parsed,
            });
        }
        match fanout.store_at(source.name(), items, checkpoint).await {
            Ok(()) => {
                let failed = source.ack(acks).await;
                if failed > 0 {
                    stats.ack_errors.fetch_add(failed as u64, Relaxed);
                }
            }
            Err(e) => {
                stats.store_errors.fetch_add(1, Relaxed);
                tracing::error!(source = source.name(), error = %e,
                    "could not store events; the messages will be delivered again");
                source.nack(acks).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::db::Location;
    use crate::state::manifest::Manifest;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A queue of `left` messages handed out 10 at a time; a receive of an empty queue waits
    /// a little, as a long poll does. Records the most receives in flight at once.
    #[derive(Clone)]
    struct Queue {
        left: Arc<AtomicUsize>,
        acked: Arc<AtomicUsize>,
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    #[async_trait]
    impl Source for Queue {
        type Ack = ();

        fn name(&self) -> &'static str {
            "sqs"
        }

        fn spec(&self) -> &str {
            "test-queue"
        }

        async fn next_batch(&mut self) -> Result<Vec<Message<()>>> {
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let n = self
                .left
                .fetch_update(SeqCst, SeqCst, |l| Some(l.saturating_sub(10)))
                .map_or(0, |l| l.min(10));
            self.in_flight.fetch_sub(1, SeqCst);
            Ok((0..n)
                .map(|_| Message {
                    raw: b"{}".to_vec(),
                    decoded: None,
                    parsed: Ok(Parsed::Ignore("s3:TestEvent")),
                    ack: (),
                })
                .collect())
        }

        async fn ack(&mut self, acks: Vec<()>) -> usize {
            self.acked.fetch_add(acks.len(), SeqCst);
            0
        }
    }

    /// Waits until `done`; fails naming `what` at the deadline.
    async fn wait_for(what: &str, deadline: tokio::time::Instant, done: impl Fn() -> bool) {
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn receivers_widen_while_the_queue_is_full_and_narrow_when_it_runs_dry() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Manifest::open_at(&Location::Sqlite(dir.path().join("m.db"))).unwrap());
        let fanout = Fanout::new(db, "sqs", "test-queue");
        let q = Queue {
            left: Arc::new(AtomicUsize::new(5_000)),
            acked: Default::default(),
            in_flight: Default::default(),
            most: Default::default(),
        };
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let w = Widening::new(2, 16, 10);
        let _receivers = consume_widening(
            q.clone(),
            fanout,
            Arc::new(ConsumerStats::new("test-queue")),
            stop,
            w.clone(),
        );
        assert_eq!(w.active(), 2);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        wait_for("the queue was not drained", deadline, || {
            q.acked.load(SeqCst) >= 5_000
        })
        .await;
        let most = q.most.load(SeqCst);
        assert!(
            most > 2 && most <= 16,
            "{most} receives at once: it did not widen within its bounds"
        );
        // dry: back to the least
        wait_for("receivers stayed above the least", deadline, || {
            w.active() <= 2
        })
        .await;
        assert_eq!(w.active(), 2);
        stop_tx.send(true).unwrap();
        wait_for("receivers did not stop", deadline, || w.active() == 0).await;
    }
}
