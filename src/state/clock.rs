//! The clock that claims, leases, job heartbeats and partitions are compared on. Workers on
//! several hosts read each other's expiry times: with PostgreSQL they all use the database
//! server's clock (this host's, corrected by the offset measured against the server when the
//! database opens and every few minutes after), so a host whose clock runs fast cannot take
//! a live worker's claims, and one that runs slow does not hold a dead worker's for longer.
//! With SQLite every holder is on this host and the offset stays 0.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

/// Server time minus this host's, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// When the offset was last measured (this host's milliseconds; 0: never).
static MEASURED_AT: AtomicI64 = AtomicI64::new(0);

/// Whether a measurement succeeded yet.
static MEASURED_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How often the offset is measured again.
pub const REMEASURE_MS: i64 = 5 * 60 * 1000;

/// An offset past this is worth a warning: the host's clock should be kept by NTP.
const WARN_MS: i64 = 1_000;

/// Unix milliseconds by the shared clock.
pub fn now_ms() -> i64 {
    local_ms() + OFFSET_MS.load(Relaxed)
}

/// Unix milliseconds by this host's clock.
pub fn local_ms() -> i64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    t + skew()
}

/// A test hook (test builds only): this process's clock set off by `SLATE_FAULT_CLOCK_SKEW_MS`.
#[cfg(feature = "faults")]
fn skew() -> i64 {
    static SKEW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SKEW.get_or_init(|| {
        std::env::var("SLATE_FAULT_CLOCK_SKEW_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

#[cfg(not(feature = "faults"))]
fn skew() -> i64 {
    0
}

/// The offset in use (server minus host, milliseconds).
pub fn offset_ms() -> i64 {
    OFFSET_MS.load(Relaxed)
}

/// Whether the offset is due to be measured again.
pub(crate) fn due() -> bool {
    let at = MEASURED_AT.load(Relaxed);
    at == 0 || local_ms() - at >= REMEASURE_MS
}

/// Takes the measurement that is due: true for one caller only, which then measures (a
/// measurement that fails is tried again a period later, not by every call meanwhile).
pub(crate) fn begin() -> bool {
    let at = MEASURED_AT.load(Relaxed);
    let now = local_ms();
    (at == 0 || now - at >= REMEASURE_MS)
        && MEASURED_AT
            .compare_exchange(at, now.max(1), Relaxed, Relaxed)
            .is_ok()
}

/// The offset a measurement gives: the server's time against the middle of the round trip.
fn offset_of(server_ms: i64, sent_ms: i64, got_ms: i64) -> i64 {
    server_ms - sent_ms + (sent_ms - got_ms) / 2
}

/// Records a measurement: the server said `server_ms` between this host's `sent_ms` and
/// `got_ms` (taken as the middle of the round trip).
pub(crate) fn measured(server_ms: i64, sent_ms: i64, got_ms: i64) {
    let offset = offset_of(server_ms, sent_ms, got_ms);
    let before = OFFSET_MS.swap(offset, Relaxed);
    let first = !MEASURED_ONCE.swap(true, Relaxed);
    if offset.abs() > WARN_MS && (first || (offset - before).abs() > WARN_MS) {
        tracing::warn!(
            offset_ms = offset,
            "this host's clock is {:.1} s off the database server's: claims, leases and heartbeats use the server's (keep the host's clock with NTP)",
            offset as f64 / 1000.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_the_servers_time_at_the_middle_of_the_round_trip() {
        // (server, sent, got) → offset
        let cases = [
            (1_000, 1_000, 1_000, 0),
            (10_050, 10_000, 10_100, 0),
            (70_050, 10_000, 10_100, 60_000),
            (10_050, 70_000, 70_100, -60_000),
        ];
        for (server, sent, got, want) in cases {
            assert_eq!(offset_of(server, sent, got), want, "{server} {sent} {got}");
        }
    }
}
