//! One reconcile of a pair at a time (rule 8 of docs/ARCHITECTURE.md): `sync --once`, the
//! daemon's backfill and drift check and jobs take the pair's lease ([`crate::state::leases`])
//! for the whole run and renew it while they work. A second taker waits for it or stops with
//! exit 2, naming the holder: `pair s3://a -> az://b is busy: held by PID 123 on host-x since …`.
//! The daemon's reconciles of single keys take no lease: they are level-triggered, each from
//! the source's state now, and harmless beside a full run.
//!
//! The lease names the pair, not a process. With SQLite every holder is on one host (SQLite
//! in WAL mode is shared by the processes of one machine); the holder's host is recorded all
//! the same, so that workers of several hosts sharing a server database can take it the
//! same way.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::{Result, SlateError};
use crate::state::blocking;
use crate::state::leases::{Holder, Leases};
use crate::state::manifest::Manifest;
use crate::state::owner;

/// How long a lease lives without renewal: longer than a renewal can wait out a PostgreSQL
/// outage (60 s) plus the time between renewals (a third of this), so that a live holder's
/// lease does not lapse during one.
pub const TTL: Duration = Duration::from_secs(120);

/// What a taker does when the lease is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Stop with [`SlateError::Busy`] (exit 2).
    #[default]
    No,
    /// Wait until it is free.
    Yes,
}

/// A held lease; renewed in the background until released or dropped.
pub struct PairLease {
    db: Arc<Manifest>,
    name: String,
    owner: String,
    renewer: tokio::task::JoinHandle<()>,
    lost: Arc<AtomicBool>,
}

use crate::state::clock::now_ms;

fn describe(h: &Holder) -> String {
    let since = chrono::DateTime::from_timestamp_millis(h.acquired_at)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| "?".into());
    format!(
        "PID {} on {} since {since} ({})",
        h.pid,
        crate::state::owner::host_label(&h.host),
        h.purpose
    )
}

impl PairLease {
    /// Takes the lease of pair `pair_id` (shown as `label`) for `purpose`.
    pub async fn take(
        db: &Arc<Manifest>,
        pair_id: i64,
        label: &str,
        purpose: &str,
        wait: Wait,
    ) -> Result<PairLease> {
        PairLease::take_named(db, &format!("pair:{pair_id}"), label, purpose, wait).await
    }

    /// A new holder's owner tag: this process and a random part (`PID:START:RANDOM`).
    pub fn new_owner() -> String {
        let me = owner::owner_tag(std::process::id())
            .unwrap_or_else(|| format!("{}:0", std::process::id()));
        format!("{me}:{:016x}", fastrand::u64(..))
    }

    /// Takes the lease `name` (a pair's, or one under it: a partition's, a planner's).
    pub async fn take_named(
        db: &Arc<Manifest>,
        name: &str,
        label: &str,
        purpose: &str,
        wait: Wait,
    ) -> Result<PairLease> {
        let name = name.to_string();
        let owner = PairLease::new_owner();
        let host = owner::host_id();
        let mut logged = false;
        loop {
            let (d, n, o, h, p) = (
                db.clone(),
                name.clone(),
                owner.clone(),
                host.clone(),
                purpose.to_string(),
            );
            let held = blocking(move || {
                Leases::new(&d).acquire(&n, &o, &h, &p, now_ms(), TTL.as_millis() as i64)
            })
            .await?;
            let Some(holder) = held else { break };
            if wait == Wait::No {
                return Err(SlateError::Busy {
                    pair: label.to_string(),
                    holder: describe(&holder),
                });
            }
            if !logged {
                tracing::info!(pair = label, holder = %describe(&holder), "waiting for the pair's lease");
                logged = true;
            }
            tokio::time::sleep(Duration::from_millis(250 + fastrand::u64(..250))).await;
        }
        Ok(PairLease::held(db, name, owner))
    }

    /// A lease `owner` has just taken (in a transaction of its own, as a partition is taken),
    /// renewed from now on.
    pub fn held(db: &Arc<Manifest>, name: String, owner: String) -> PairLease {
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (db, name, owner, lost) = (db.clone(), name.clone(), owner.clone(), lost.clone());
            tokio::spawn(async move {
                // the lease runs out this long after the last renewal that worked
                let mut valid_until = std::time::Instant::now() + TTL;
                loop {
                    tokio::time::sleep(TTL / 3).await;
                    let (d, n, o) = (db.clone(), name.clone(), owner.clone());
                    let until = now_ms() + TTL.as_millis() as i64;
                    let asked = std::time::Instant::now();
                    let renewed = blocking(move || Leases::new(&d).renew(&n, &o, until)).await;
                    if !matches!(renewed, Ok(true)) && std::time::Instant::now() >= valid_until {
                        // renewals failed past the lease's life: another holder may have it
                        // now, so this run stops (it checks the flag between pages of work)
                        lost.store(true, Relaxed);
                        tracing::error!(lease = %name, "the lease ran out while its renewals failed; this run stops");
                        return;
                    }
                    match renewed {
                        Ok(true) => valid_until = asked + TTL,
                        Ok(false) => {
                            lost.store(true, Relaxed);
                            tracing::error!(lease = %name, "the lease was taken by another holder (this one was too slow to renew it)");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(lease = %name, error = %e, "renewing the lease failed")
                        }
                    }
                }
            })
        };
        PairLease {
            db: db.clone(),
            name,
            owner,
            renewer,
            lost,
        }
    }

    /// Set when another holder took the lease meanwhile (a renewal found it gone): the run
    /// checks it between pages of work and stops.
    pub fn lost_flag(&self) -> Arc<AtomicBool> {
        self.lost.clone()
    }

    /// Gives the lease up now.
    pub async fn release(mut self) {
        self.renewer.abort();
        let (d, n, o) = (
            self.db.clone(),
            self.name.clone(),
            std::mem::take(&mut self.owner),
        );
        if let Err(e) = blocking(move || Leases::new(&d).release(&n, &o)).await {
            tracing::warn!(error = %e, "releasing the lease failed; it expires by itself");
        }
    }
}

impl Drop for PairLease {
    /// A lease dropped on an error path is released in the background (or expires).
    fn drop(&mut self) {
        self.renewer.abort();
        if self.owner.is_empty() {
            return; // released already
        }
        let (d, n, o) = (self.db.clone(), self.name.clone(), self.owner.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn_blocking(move || {
                let _ = Leases::new(&d).release(&n, &o);
            });
        }
    }
}
