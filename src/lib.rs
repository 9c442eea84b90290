//! slate keeps object stores consistent by replicating only what changed.
//!
//! The map of the house, bottom layer first; each layer uses only those below it
//! (docs/ARCHITECTURE.md tells the whole story):
//! - [`core`]: plain types and pure rules: locations, errors, object states, filters, sizes
//!   and timestamps, metrics.
//! - [`state`]: the database (manifest, inbox, dead letters, job rows, leases); the only code
//!   that knows SQL.
//! - [`stores`]: object_store clients from each cloud's environment, wrapped for retries,
//!   limits, metrics and (in test builds) faults; listings; local folders as a store.
//! - [`copy`]: the chunked parallel copier.
//! - [`events`]: change notifications: pure parsers, transports behind one `Source` trait,
//!   and the fan-out of each message to every pair it names, stored before it is acked.
//! - [`engine`]: the one reconcile-a-key path used by `sync --once`, the daemon and jobs.
//! - [`jobs`]: jobs started over HTTP: requests and their checks, the runner, progress.
//! - [`server`]: HTTP: the API, SSE, probes, metrics, webhook intake, the dashboard.
//! - [`cli`]: one file per subcommand; `main.rs` only parses and dispatches.

pub mod cli;
pub mod config;
pub mod copy;
pub mod core;
pub mod engine;
pub mod events;
pub mod jobs;
#[cfg(feature = "lab")]
pub mod lab;
pub mod mount;
pub mod server;
pub mod state;
pub mod stores;

pub use crate::core::error::{Result, SlateError};
