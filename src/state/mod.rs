//! The database: the manifest, the event inbox and dead letters, jobs. The only code that
//! knows SQL.

pub mod clock;
pub mod db;
pub mod deadletters;
pub mod inbox;
pub mod jobs;
pub mod leases;
pub mod manifest;
pub mod owner;
pub mod partitions;
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
