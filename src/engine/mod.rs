//! The engine: make a pair's destination equal to its source, deletes included. One path
//! reconciles a key ([`key::Engine`]: probe the source now, decide with the pure [`plan`],
//! copy or confirm-and-delete, record) for `sync --once` ([`once`]), the daemon ([`daemon`])
//! and jobs alike.

pub mod backup;
pub mod canary;
pub mod daemon;
pub mod expand;
pub mod judge;
pub mod key;
pub mod lease;
pub mod merge;
pub mod once;
pub mod partition;
pub mod plan;
pub mod running;
