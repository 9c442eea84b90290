//! Errors of the library. Each variant names the culprit (URL, key, file, variable) and
//! maps to an exit code: 2 for bad input or setup, 1 for a transfer that failed part-way.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum SlateError {
    #[error("bad location '{url}': {why}")]
    BadUrl { url: String, why: String },

    #[error("bad option {option}: {why}")]
    BadOption { option: String, why: String },

    #[error("missing credentials for {url}: {hint}")]
    MissingCredentials { url: String, hint: String },

    #[error("bucket or container not found: {url} ({detail})")]
    BucketNotFound { url: String, detail: String },

    #[error("nothing to copy: {url} does not exist")]
    SourceNotFound { url: String },

    #[error("cannot set up store for {url}: {detail}")]
    Store { url: String, detail: String },

    /// A request to an event queue or subscription failed (connecting to it, receiving,
    /// acknowledging).
    #[error("queue {url}: {detail}")]
    Queue { url: String, detail: String },

    #[error("config {path}: {why}")]
    Config { path: String, why: String },

    #[error("unsafe key '{key}' for local destination {root}: {why}")]
    UnsafeKey {
        key: String,
        root: String,
        why: String,
    },

    #[error("{key}: {detail}")]
    Object { key: String, detail: String },

    /// A key object_store cannot name as it is (see `copy::side::store_path`): no request is
    /// ever sent for it, and trying again cannot help.
    #[error("{key}: key cannot be addressed: {why}")]
    Unaddressable { key: String, why: String },

    #[error("{failed} of {total} objects failed; first error: {first}")]
    Partial {
        failed: u64,
        total: u64,
        first: String,
    },

    /// A partitioned backfill whose partitions failed outright (after their retries).
    #[error("backfill of {pair} failed: {detail}")]
    Backfill { pair: String, detail: String },

    #[error("listing {url} failed: {detail}")]
    List { url: String, detail: String },

    #[error("manifest {path}: {why}")]
    Manifest { path: String, why: String },

    #[error("refusing to delete {planned} objects (more than --max-delete {limit}); nothing was changed")]
    TooManyDeletes { planned: u64, limit: String },

    /// Another reconcile of the pair holds its lease (rule 9: one at a time).
    #[error("pair {pair} is busy: held by {holder}; run again when it is done, or pass --wait")]
    Busy { pair: String, holder: String },

    #[error("mount {mountpoint}: {detail}")]
    Mount { mountpoint: String, detail: String },

    #[error("interrupted")]
    Interrupted,
}

impl SlateError {
    /// Process exit code for this error: 2 = the user must fix something before retrying,
    /// 1 = the work failed part-way (retrying may help), 130 = interrupted.
    pub fn exit_code(&self) -> i32 {
        match self {
            SlateError::BadUrl { .. }
            | SlateError::BadOption { .. }
            | SlateError::MissingCredentials { .. }
            | SlateError::BucketNotFound { .. }
            | SlateError::SourceNotFound { .. }
            | SlateError::Store { .. }
            | SlateError::Queue { .. }
            | SlateError::Config { .. }
            | SlateError::Manifest { .. }
            | SlateError::TooManyDeletes { .. }
            | SlateError::Busy { .. } => 2,
            SlateError::Interrupted => 130,
            _ => 1,
        }
    }

    /// True for an error of one key that no retry can mend: the key itself cannot be written
    /// or addressed there (the daemon dead-letters such a key instead of retrying it).
    ///
    /// A source object in an archive tier is one too: no retry reads it until someone
    /// restores it (then `slate deadletters retry` applies it).
    pub fn is_permanent_for_key(&self) -> bool {
        matches!(
            self,
            SlateError::UnsafeKey { .. } | SlateError::Unaddressable { .. }
        ) || crate::engine::once::archived_tier(&self.to_string()).is_some()
    }
}

pub type Result<T, E = SlateError> = std::result::Result<T, E>;

/// The part of a service's error message an error line shows: its first line that is not
/// empty, trimmed, at most 300 characters (answers carry stack traces, HTML and long texts).
pub fn first_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect()
}

#[cfg(test)]
mod first_line_tests {
    use super::first_line;

    #[test]
    fn first_line_keeps_one_trimmed_line_of_at_most_300_characters() {
        assert_eq!(
            first_line("\n  boom: denied  \nat frame 1\n"),
            "boom: denied"
        );
        assert_eq!(first_line(""), "");
        assert_eq!(first_line(&"é".repeat(400)).chars().count(), 300);
    }
}
