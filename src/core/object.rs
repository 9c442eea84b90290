//! What is known of an object: as a listing or a probe saw it ([`Entry`]), and as the
//! manifest records it ([`State`]).

use std::time::{SystemTime, UNIX_EPOCH};

/// One object found by a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Key relative to the listed prefix (`/`-separated).
    pub rel: String,
    pub size: u64,
    /// The store's ETag; for local files a change token made of mtime and size.
    pub etag: Option<String>,
    pub mtime: Option<SystemTime>,
}

/// Change token of a local file: any rewrite changes its mtime (nanoseconds) or size.
pub fn local_etag(mtime: Option<SystemTime>, size: u64) -> Option<String> {
    let t = mtime?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!("{:x}.{:x}-{size:x}", t.as_secs(), t.subsec_nanos()))
}

/// Milliseconds since the epoch (what the manifest stores).
pub fn millis(t: Option<SystemTime>) -> Option<i64> {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
}

/// What is known of one object on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub size: u64,
    pub etag: Option<String>,
    /// Unix milliseconds.
    pub mtime_ms: Option<i64>,
}

impl State {
    /// The manifest's state of a listed or probed entry.
    pub fn of(e: &Entry) -> State {
        State {
            size: e.size,
            etag: e.etag.clone(),
            mtime_ms: millis(e.mtime),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn local_change_token_sees_mtime_and_size() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123);
        let a = local_etag(Some(t), 10);
        assert_eq!(a.as_deref(), Some("6553f100.7b-a"));
        assert_ne!(a, local_etag(Some(t + Duration::from_nanos(1)), 10));
        assert_ne!(a, local_etag(Some(t), 11));
        assert_eq!(local_etag(None, 1), None);
    }
}
