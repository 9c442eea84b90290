//! The database: the manifest, the event inbox and dead letters, jobs. The only code that
//! knows SQL.

pub mod brake;
pub mod clock;
pub mod db;
pub mod deadletters;
pub mod inbox;
pub mod jobs;
pub mod leases;
pub mod manifest;
pub mod owner;
pub mod partitions;
pub mod pgtls;
pub mod uploads;

use crate::core::error::{Result, SlateError};

/// Runs database work on the blocking pool (SQLite calls block).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SlateError::Manifest {
            path: String::new(),
            why: format!("internal: {e}"),
        })?
}

/// Runs synchronous database work from code that may be on a runtime's worker thread: on a
/// multi-threaded runtime the worker is handed over first (`block_in_place`), so the other
/// tasks it runs are not stalled while the statement waits (PostgreSQL: out to its reconnect
/// window); elsewhere (no runtime, a current-thread runtime) it simply runs.
pub fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
