//! slate keeps object stores consistent by replicating only what changed.
//!
//! The map of the house, in the order data flows through it:
//! - [`location`]: the URLs users type (`s3://`, `az://`, `gs://`, paths) → [`location::Location`].
//! - [`store`]: object_store clients from each cloud's standard environment variables.
//! - [`faults`]: a test hook (`SLATE_FAULTS`) wrapping those clients to fail requests on purpose.
//! - [`copy`]: the chunked parallel copier (listing, ranged reads, multipart writes, local
//!   files written at offsets, hashing, retries, the adaptive transfer limit, progress,
//!   estimates).
//! - [`config`]: the TOML config file.
//! - [`cli`]: one file per subcommand; `main.rs` only parses and dispatches.
//! - [`metrics`]: process-wide meters (store request errors and retries, transfers in flight)
//!   and the lag histogram, rendered on `GET /metrics`.
//! - [`events`] → [`inbox`] → [`reconcile`] → [`manifest`]: the daemon's path, from a cloud's
//!   change notification to the replicated object.
//! - [`jobs`] and [`api`]: jobs started over HTTP, the API server and the dashboard.

pub mod api;
pub mod cli;
pub mod config;
pub mod copy;
pub mod error;
pub mod events;
pub mod faults;
pub mod inbox;
pub mod jobs;
pub mod location;
pub mod manifest;
pub mod metrics;
pub mod reconcile;
pub mod store;

pub use error::{Result, SlateError};
