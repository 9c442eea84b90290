//! What every fuzz target checks beyond "no panic": a rejection is one short line naming the
//! culprit; an accepted message names keys and buckets that pass slate's checks, and every key
//! maps to a path under a local destination root or is refused. The same rules as
//! `tests/hostile.rs`, which runs the checked-in corpus (`tests/corpus/`) as ordinary tests.

use std::collections::HashMap;
use std::path::{Component, Path};

use slate::events::{ParseError, Parsed};

/// Checks one parser result; panics (a finding) when a rule is broken.
pub fn check(got: Result<Parsed, ParseError>) {
    match got {
        Err(e) => {
            let r = &e.reason;
            assert!(!r.contains(['\n', '\r']) && r.len() <= 310, "reason: {r:?}");
            let (culprit, why) = r.split_once(": ").expect("reason names a culprit");
            assert!(
                !culprit.trim().is_empty() && !why.trim().is_empty(),
                "{r:?}"
            );
        }
        Ok(p) => check_parsed(&p, false),
    }
}

fn check_parsed(p: &Parsed, nested: bool) {
    let bucket_ok = |b: &str| !b.is_empty() && !b.contains(['/', '\0']);
    match p {
        Parsed::Events(evs) => {
            assert!(!evs.is_empty(), "an empty Events");
            for e in evs {
                assert!(
                    !e.key.is_empty() && !e.key.contains('\0'),
                    "key {:?}",
                    e.key
                );
                assert!(bucket_ok(&e.bucket), "bucket {:?}", e.bucket);
                check_key(&e.key);
            }
        }
        Parsed::PrefixReconcile { bucket, prefix } => {
            assert!(bucket_ok(bucket) && prefix.ends_with('/'), "{p:?}");
        }
        Parsed::Batch(items) => {
            assert!(!nested && !items.is_empty(), "{p:?}");
            let events = items
                .iter()
                .filter(|i| matches!(i, Parsed::Events(_)))
                .count();
            assert!(events <= 1, "{p:?}");
            // invalid entries come last, beside at least one good one
            let good = items
                .iter()
                .take_while(|i| !matches!(i, Parsed::Invalid(_)))
                .count();
            assert!(good > 0, "{p:?}");
            assert!(
                items[good..].iter().all(|i| matches!(i, Parsed::Invalid(_))),
                "{p:?}"
            );
            for i in items {
                assert!(!matches!(i, Parsed::Ignore(_) | Parsed::Batch(_)), "{p:?}");
                check_parsed(i, true);
            }
        }
        Parsed::Invalid(why) => {
            assert!(nested, "{p:?}");
            assert!(!why.is_empty() && !why.contains(['\n', '\r']), "{p:?}");
        }
        Parsed::Ignore(why) => assert!(!why.is_empty() && !nested),
        Parsed::Handshake { validation_code } => assert!(!validation_code.is_empty()),
    }
}

/// A key maps to a path strictly under the root, one plain component per segment, or is
/// refused.
pub fn check_key(key: &str) {
    let root = Path::new("/fuzz/root");
    if let Ok(path) = slate::stores::local::safe_join(root, key) {
        let rel = path.strip_prefix(root).expect("a path under the root");
        let parts: Vec<_> = rel.components().collect();
        assert!(
            !parts.is_empty() && parts.iter().all(|c| matches!(c, Component::Normal(_))),
            "{key:?} -> {}",
            path.display()
        );
        assert_eq!(parts.len(), key.split('/').count(), "{key:?}");
    }
}

/// A GCS message from bytes: `name=value` lines, a blank line, then the data (the format of
/// `tests/corpus/gcs/*.msg`).
pub fn split_gcs(input: &[u8]) -> (HashMap<String, String>, Vec<u8>) {
    let (head, data) = match input.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&input[..i], &input[i + 2..]),
        None => (input, &[][..]),
    };
    let attrs = String::from_utf8_lossy(head)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (attrs, data.to_vec())
}
