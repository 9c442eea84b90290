//! The bottom layer: plain types and pure rules, no I/O. Locations as users type them,
//! errors, what is known of an object, key filters, sizes and timestamps, and the process's
//! meters.

pub mod backoff;
pub mod brake;
pub mod canary;
pub mod error;
pub mod filter;
pub mod location;
pub mod meta;
pub mod metrics;
pub mod object;
pub mod range;
pub mod remote;
pub mod units;
