//! Canary objects: what `slate check` and the daemon's `canary_interval` write under a
//! pair's source prefix to prove that events flow end to end. A canary key lies under
//! [`DIR`] (relative to the pair's prefix). It is admitted by every filter and replicated as
//! any key (so that its arrival can be seen), then deleted on both sides; it is left out of
//! `diff` reports, the delete brake and `--backup-dir`.

/// The reserved folder under a pair's source prefix.
pub const DIR: &str = ".slate-canary/";

/// Whether `rel` (a key relative to the pair's prefix) is a canary's.
pub fn is_canary(rel: &str) -> bool {
    rel.starts_with(DIR)
}

/// A canary key for `who` (`check`, `daemon`) of pair `pair` at `at_ms`, the process's
/// `seq`-th: unique per host, process, pair and run (pairs that share a source and start
/// their canaries in the same millisecond write two objects).
pub fn key(who: &str, host: &str, pid: u32, pair: i64, at_ms: i64, seq: u64) -> String {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    format!("{DIR}{who}-{host}-{pid}-p{pair}-{at_ms}-{seq}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canary_keys_are_recognised() {
        let k = key("check", "node 1.example", 42, 7, 1_700_000_000_000, 3);
        assert_eq!(
            k,
            ".slate-canary/check-node_1_example-42-p7-1700000000000-3"
        );
        assert_ne!(
            k,
            key("check", "node 1.example", 42, 8, 1_700_000_000_000, 3)
        );
        assert_ne!(
            k,
            key("check", "node 1.example", 42, 7, 1_700_000_000_000, 4)
        );
        assert!(is_canary(&k));
        for (rel, want) in [
            (".slate-canary/x", true),
            (".slate-canary", false),
            ("data/.slate-canary/x", false),
            (".slate-canaryx/y", false),
            ("x", false),
        ] {
            assert_eq!(is_canary(rel), want, "{rel}");
        }
    }
}
