//! rclone's flags that slate does not have: an rclone user's command line gets one line naming
//! the flag as rclone's and saying what slate does instead (docs/FROM-RCLONE.md has the table),
//! where clap alone would say "unexpected argument" and suggest `-- --flag`.

/// (rclone's flag, what to use in slate). Flags slate has under the same name and meaning
/// (`--transfers`, `--checksum`, `--dry-run`, `--include`, …) are not here: clap takes them.
pub const RCLONE_ONLY: &[(&str, &str)] = &[
    ("--checkers", "slate has no checkers: listings run in parallel spans and comparisons need no HEAD where the manifest vouches; --transfers sets objects in flight"),
    ("--buffer-size", "use --memory-limit (the budget of all chunk buffers together, 1GiB by default)"),
    ("--multi-thread-streams", "use --streams (chunks in flight per large object; adaptive without it)"),
    ("--multi-thread-cutoff", "use --chunk-size (an object up to one chunk goes in one request)"),
    ("--multi-thread-chunk-size", "use --chunk-size"),
    ("--s3-chunk-size", "use --chunk-size"),
    ("--s3-upload-concurrency", "use --streams"),
    ("--s3-upload-cutoff", "use --chunk-size (an object up to one chunk goes in one PUT)"),
    ("--azureblob-chunk-size", "use --chunk-size"),
    ("--azureblob-upload-concurrency", "use --streams"),
    ("--gcs-chunk-size", "use --chunk-size"),
    ("--s3-acl", "use --acl"),
    ("--s3-storage-class", "use --storage-class"),
    ("--azureblob-access-tier", "use --storage-class (Hot, Cool, Cold, Archive)"),
    ("--gcs-storage-class", "use --storage-class"),
    ("--gcs-object-acl", "use --acl"),
    ("--delete-before", "slate deletes only after every copy has landed (as --delete-after, which it accepts)"),
    ("--delete-during", "slate deletes only after every copy has landed (as --delete-after, which it accepts)"),
    ("--update", "not supported: slate copies what differs by size and recorded modification time (or --checksum), whichever side is newer: the source is the truth"),
    ("-u", "not supported: slate copies what differs by size and recorded modification time (or --checksum), whichever side is newer: the source is the truth"),
    ("--use-server-modtime", "slate compares the time it (or rclone) recorded at the destination, and the manifest spares the HEAD once a key was synced"),
    ("--no-traverse", "slate lists the destination once, in parallel spans; the manifest spares the HEADs"),
    ("--no-check-dest", "on copy, use --ignore-times (copy everything again without comparing)"),
    ("--track-renames", "not supported: a renamed object is copied under its new key and deleted under the old"),
    ("--suffix", "--backup-dir keeps what a delete or overwrite removes, as KEY.TIME"),
    ("--stats", "use --progress-lines SECONDS"),
    ("--stats-one-line", "use --progress-lines SECONDS (one line each)"),
    ("--log-file", "slate logs to stderr: redirect it (2>>FILE), or run it under systemd (journald)"),
    ("--log-level", "use -v (debug) or -vv (trace); RUST_LOG for more"),
    ("--low-level-retries", "slate retries each request with backoff by itself (transient errors, throttling)"),
    ("--retries", "slate retries each request with backoff; run the same command again to continue (it skips what landed)"),
    ("--retries-sleep", "slate retries each request with backoff by itself"),
    ("--timeout", "not configurable: slate's requests time out by themselves and are retried"),
    ("--contimeout", "not configurable: slate's requests time out by themselves and are retried"),
    ("--tpslimit", "use --bwlimit (bytes a second); a store that throttles slows its prefix down by itself"),
    ("--max-transfer", "not supported: filter by --max-size, or stop the copy and run it again later (it skips what landed)"),
    ("--max-duration", "not supported: stop the copy (Ctrl-C) and run it again later; it skips what landed"),
    ("--immutable", "not supported: on copy, --ignore-existing leaves what the destination holds"),
    ("--no-update-modtime", "slate records the source's modification time with each copy (as rclone's metadata)"),
    ("--metadata", "slate copies metadata by default (Content-*, user metadata, modification time); --no-metadata writes the bytes alone"),
    ("-M", "slate copies metadata by default (Content-*, user metadata, modification time); --no-metadata writes the bytes alone"),
    ("--create-empty-src-dirs", "object stores have no folders; local empty folders are not copied"),
    ("--links", "use -L/--copy-links (follows links that stay inside the source)"),
    ("-l", "use -L/--copy-links (follows links that stay inside the source)"),
    ("--interactive", "use --dry-run (-n) to see the plan first"),
    ("-i", "use --dry-run (-n) to see the plan first"),
    ("--order-by", "not supported: slate copies in key order, many at once"),
    ("--check-first", "slate compares both listings before it copies anything already"),
    ("--compare-dest", "not supported"),
    ("--copy-dest", "not supported"),
    ("--ignore-size", "not supported: objects of different sizes always differ"),
    ("--ignore-checksum", "slate checks what a store reports after each write; --verify re-reads"),
    ("--no-gzip-encoding", "slate copies gzip-encoded objects byte for byte, Content-Encoding kept"),
    ("--s3-no-check-bucket", "slate never creates buckets: a missing one is an error at the start"),
    ("--s3-no-head", "slate's copies need no HEAD after the write"),
    ("--fast-list-threshold", "not needed: slate lists in parallel spans"),
    ("--filter", "use --include/--exclude, or --filter-from FILE"),
    ("-f", "use --include/--exclude, or --filter-from FILE"),
    ("--human-readable", "slate prints human units already"),
];

/// What slate says of `flag` (as typed: `--checkers`, `--checkers=64`), when it is one of
/// rclone's flags that slate does not have.
pub fn advice(flag: &str) -> Option<&'static str> {
    let name = flag.split_once('=').map(|(n, _)| n).unwrap_or(flag);
    RCLONE_ONLY
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(_, what)| *what)
}

/// The line printed for an rclone flag slate lacks.
pub fn refusal(flag: &str) -> Option<String> {
    let name = flag.split_once('=').map(|(n, _)| n).unwrap_or(flag);
    advice(flag)
        .map(|what| format!("{name} is rclone's flag, not slate's: {what} (docs/FROM-RCLONE.md)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_rclone_flags_and_what_to_use() {
        let cases = [
            ("--checkers", Some("--transfers")),
            ("--checkers=64", Some("--transfers")),
            ("--buffer-size", Some("--memory-limit")),
            ("--multi-thread-streams", Some("--streams")),
            ("--delete-before", Some("--delete-after")),
            ("-u", Some("modification time")),
            ("--no-such-flag", None),
            ("--transfers", None),
        ];
        for (flag, want) in cases {
            match (refusal(flag), want) {
                (Some(line), Some(w)) => {
                    assert!(
                        line.contains(w) && line.contains("rclone's flag"),
                        "{flag}: {line}"
                    );
                    assert!(
                        !line.contains('='),
                        "{flag}: the value is not echoed: {line}"
                    );
                }
                (None, None) => {}
                (got, _) => panic!("{flag}: {got:?}"),
            }
        }
    }

    #[test]
    fn rclone_spellings_parse() {
        use clap::Parser;
        let lines: [&[&str]; 3] = [
            &[
                "slate",
                "copy",
                "azure:c",
                "s3:b/p",
                "-P",
                "--dry-run",
                "--checksum",
                "--max-delete",
                "10",
                "--bwlimit",
                "10M",
                "--transfers",
                "64",
                "--include",
                "*.bin",
                "--exclude",
                "*.tmp",
                "--filter-from",
                "f",
                "--exclude-from",
                "f",
                "--include-from",
                "f",
                "--files-from",
                "f",
                "--min-size",
                "16Mi",
                "--max-size",
                "1Gi",
                "--min-age",
                "1h",
                "--max-age",
                "7d",
                "--fast-list",
            ],
            &[
                "slate",
                "sync",
                "--once",
                "a",
                "b",
                "-n",
                "--size-only",
                "--max-delete",
                "10",
                "--delete-after",
                "--fast-list",
                "-P",
                "--chunk-size",
                "16Mi",
                "--memory-limit",
                "256Mi",
                "--min-size",
                "1k",
            ],
            &[
                "slate",
                "diff",
                "a",
                "b",
                "--max-size",
                "512k",
                "--files-from",
                "f",
                "-c",
            ],
        ];
        for line in lines {
            if let Err(e) = crate::cli::Cli::try_parse_from(line) {
                panic!("{line:?}: {e}");
            }
        }
        let cli = crate::cli::Cli::try_parse_from(lines[0]).expect("parses");
        let crate::cli::Command::Copy(c) = cli.command else {
            panic!("not copy")
        };
        assert_eq!(c.filters.min_size, Some(16 << 20));
        assert_eq!(c.filters.max_size, Some(1 << 30));
        assert!(c.dry_run && c.compare.checksum && c.tuning.progress && c.tuning.fast_list);
        assert_eq!(
            c.filters.min_age,
            Some(std::time::Duration::from_secs(3600))
        );
        // and the one refused with a line of its own
        let e = crate::cli::Cli::try_parse_from(["slate", "copy", "a", "b", "--checkers", "8"])
            .expect_err("not slate's");
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
    }

    #[test]
    fn every_entry_is_a_flag_said_once() {
        let mut seen = std::collections::HashSet::new();
        for (f, what) in RCLONE_ONLY {
            assert!(f.starts_with('-') && !what.is_empty(), "{f}");
            assert!(seen.insert(*f), "{f} twice");
        }
    }
}
