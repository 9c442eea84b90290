//! slate keeps object stores consistent by replicating only what changed.
//!
//! The map of the house, in the order data flows through it:
//! - [`location`]: the URLs users type (`s3://`, `az://`, `gs://`, paths) → [`location::Location`].
//! - [`store`]: object_store clients from each cloud's standard environment variables.
//! - [`copy`]: the chunked parallel copier (listing, ranged reads, multipart writes, local
//!   files written at offsets, hashing, retries, progress, estimates).
//! - [`config`]: the TOML config file.
//! - [`cli`]: one file per subcommand; `main.rs` only parses and dispatches.
//!
//! Still to come (see DESIGN.md): `events/` → `inbox` → `reconcile/` → `manifest`, `api/`.

pub mod cli;
pub mod config;
pub mod copy;
pub mod error;
pub mod events;
pub mod inbox;
pub mod location;
pub mod manifest;
pub mod reconcile;
pub mod store;

pub use error::{Result, SlateError};
