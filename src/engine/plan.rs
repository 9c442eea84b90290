//! The planner: pure. One key's listing rows and manifest rows in, one action out. Table-tested
//! below; everything that decides whether slate copies, deletes or leaves a key alone is here.
//!
//! When are two objects equal (docs/ARCHITECTURE.md)? ETags are compared only with themselves
//! over time: equal when the source is what the manifest recorded when slate last copied it,
//! and the destination is what slate's write left there. Without manifest rows (a destination
//! filled by rclone, by hand, by an older slate): sizes equal, then an MD5 both sides list,
//! then the pair's [`Rule`]: rclone's default, size and modification time ([`by_times`], which
//! needs the times a cloud side records: the planner says [`Action::CheckTimes`] and
//! `engine::judge` looks), or content (`--checksum`), or size alone (`--size-only`).

use crate::core::object::State;

/// One key as a reconcile sees it: what the source and the destination hold now (listed, or
/// for a destination the manifest vouches for, recorded), and what the manifest recorded of
/// each side when slate last synced the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    pub src: Option<State>,
    pub dst: Option<State>,
    pub m_src: Option<State>,
    pub m_dst: Option<State>,
}

/// What to do with one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Equal by the manifest (both sides unchanged since slate last synced them).
    EqualRecorded = 0,
    /// Equal by a content digest both sides expose.
    EqualDigest = 1,
    /// Same size, and nothing better to compare: taken as equal, reported as such.
    EqualSizeOnly = 2,
    /// Only in the source: copy.
    CopyMissing = 3,
    /// In both, different: copy over.
    CopyChanged = 4,
    /// Only in the destination: delete.
    Delete = 5,
    /// Only in the destination, but deletes are off: keep.
    KeepExtra = 6,
    /// Same size, and the same modification time (rclone's default rule).
    EqualModTime = 7,
    /// Same content: both sides read and hashed (`--checksum`, no digest both expose).
    EqualContent = 8,
    /// Undecided until both modification times are known (a HEAD of a cloud side): what
    /// [`by_times`] then decides. Never stored.
    CheckTimes = 9,
    /// Undecided until both sides are read and hashed (`--checksum`). Never stored.
    CheckContent = 10,
    /// Synced before; the source's bytes are the recorded ones but its last-modified moved
    /// (an S3 copy-in-place, a GCS metadata update, the same bytes written again): undecided
    /// until its metadata is compared with the recorded fingerprint. Never stored.
    CheckMeta = 11,
    /// Only the metadata changed: the destination's is updated, its bytes stay.
    MetaChanged = 12,
    /// The same bytes and metadata with a newer last-modified: equal; the source's row is
    /// recorded again so that the next run need not look.
    EqualTouched = 13,
    /// In both, not compared: the destination's is kept (`Rule::IgnoreExisting`). Never
    /// recorded as equal.
    Skipped = 14,
}

/// How keys that the manifest cannot vouch for are compared, as rclone's three modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rule {
    /// Size, then modification time (the source's against the one recorded at the
    /// destination); a digest both sides list decides first when there is one.
    #[default]
    ModTime,
    /// Size, then content: a digest both sides list, else both read and hashed.
    Checksum,
    /// Size alone (`--size-only`).
    SizeOnly,
    /// A key the destination holds is left as it is, whatever it holds (`copy
    /// --ignore-existing`, as rclone's): not compared, not recorded as equal.
    IgnoreExisting,
    /// Every key of the source is copied, also where the destination holds the same
    /// (`copy --ignore-times`, as rclone's).
    IgnoreTimes,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::ModTime => "size and modification time",
            Rule::Checksum => "checksum",
            Rule::SizeOnly => "size only",
            Rule::IgnoreExisting => "ignore existing",
            Rule::IgnoreTimes => "ignore times",
        }
    }
}

/// Two modification times this close are the same: what every store and file system here
/// keeps (rclone writes nanoseconds; slate's manifest keeps milliseconds).
pub const MODIFY_WINDOW_MS: i64 = 1;

/// The size-and-time rule for one key whose sizes are equal: `src` is the source's
/// modification time (the one it records, else its last-modified), `dst_recorded` the one
/// recorded at the destination (rclone's and slate's `mtime`, a file's mtime), `dst_modified`
/// the destination's last-modified. Without a recorded time, a destination written before
/// the source last changed is out of date; without any time, the key is copied (equality is
/// never assumed).
pub fn by_times(src: Option<i64>, dst_recorded: Option<i64>, dst_modified: Option<i64>) -> Action {
    match (src, dst_recorded, dst_modified) {
        (Some(s), Some(d), _) if same_instant(s, d) => Action::EqualModTime,
        (Some(_), Some(_), _) => Action::CopyChanged,
        (Some(s), None, Some(m)) if m >= s || same_instant(s, m) => Action::EqualModTime,
        _ => Action::CopyChanged,
    }
}

/// Two times (Unix ms) that name the same instant as far as both can say: within
/// [`MODIFY_WINDOW_MS`], or in the same second when one of them has whole seconds only (an
/// HTTP `Last-Modified`, which S3, GCS and Azure give in seconds where listings give ms).
pub fn same_instant(a: i64, b: i64) -> bool {
    (a - b).abs() <= MODIFY_WINDOW_MS
        || ((a.rem_euclid(1000) == 0 || b.rem_euclid(1000) == 0)
            && a.div_euclid(1000) == b.div_euclid(1000))
}

impl Action {
    pub fn from_u8(v: u8) -> Option<Action> {
        use Action::*;
        [
            EqualRecorded,
            EqualDigest,
            EqualSizeOnly,
            CopyMissing,
            CopyChanged,
            Delete,
            KeepExtra,
            EqualModTime,
            EqualContent,
            CheckTimes,
            CheckContent,
            CheckMeta,
            MetaChanged,
            EqualTouched,
            Skipped,
        ]
        .into_iter()
        .find(|a| *a as u8 == v)
    }

    pub fn is_copy(self) -> bool {
        matches!(self, Action::CopyMissing | Action::CopyChanged)
    }

    pub fn is_equal(self) -> bool {
        matches!(
            self,
            Action::EqualRecorded
                | Action::EqualDigest
                | Action::EqualSizeOnly
                | Action::EqualModTime
                | Action::EqualContent
                | Action::EqualTouched
                | Action::Skipped
        )
    }

    /// Still to be decided by a look at the objects ([`by_times`], reading both, or the
    /// source's metadata).
    pub fn is_undecided(self) -> bool {
        matches!(
            self,
            Action::CheckTimes | Action::CheckContent | Action::CheckMeta
        )
    }

    /// Which rule said "equal", as the manifest records it and reports count it.
    pub fn equal_by(self) -> Option<&'static str> {
        Some(match self {
            Action::EqualRecorded | Action::EqualTouched => "manifest",
            Action::EqualDigest => "digest",
            Action::EqualSizeOnly => "size",
            Action::EqualModTime => "mtime",
            Action::EqualContent => "content",
            _ => return None,
        })
    }
}

/// An S3-style single-part ETag is the MD5 of the content: 32 hex digits (quotes stripped).
fn md5_etag(etag: &Option<String>) -> Option<String> {
    let e = etag.as_deref()?.trim_matches('"');
    (e.len() == 32 && e.bytes().all(|b| b.is_ascii_hexdigit())).then(|| e.to_ascii_lowercase())
}

/// An ETag without the quoting that differs between a store's write responses and its
/// listings (Azure quotes one and not the other; weak tags carry `W/`).
fn norm(etag: &Option<String>) -> Option<&str> {
    etag.as_deref()
        .map(|e| e.trim_start_matches("W/").trim_matches('"'))
}

/// Same object as the manifest recorded: same size, and the same ETag when both have one.
/// Without ETags (some S3-compatible servers list none), a source's last-modified time is
/// compared instead, so a same-size overwrite is still seen. `mtime` is false for destination
/// rows, whose recorded time is when slate wrote, not what the store lists.
pub(crate) fn same_as_recorded(now: &State, recorded: &Option<State>, mtime: bool) -> bool {
    let Some(r) = recorded else { return false };
    if r.size != now.size {
        return false;
    }
    match (norm(&r.etag), norm(&now.etag)) {
        (Some(a), Some(b)) => a == b,
        _ if mtime => match (r.mtime_ms, now.mtime_ms) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        },
        _ => true,
    }
}

/// The source holds the recorded bytes (same size and ETag) but its last-modified moved: its
/// metadata may have changed without its bytes.
pub fn touched(now: &State, recorded: &Option<State>) -> bool {
    let Some(r) = recorded else { return false };
    let same_bytes = r.size == now.size
        && matches!((norm(&r.etag), norm(&now.etag)), (Some(a), Some(b)) if a == b);
    same_bytes && matches!((r.mtime_ms, now.mtime_ms), (Some(a), Some(b)) if !same_instant(a, b))
}

/// Decides one key. `deletes` is false with `--no-delete`; `rule` decides keys the manifest
/// cannot vouch for whose sizes are equal and whose digests (if any) say nothing.
pub fn plan(row: &Row, deletes: bool, rule: Rule) -> Action {
    match (&row.src, &row.dst) {
        (None, None) => Action::EqualRecorded,
        (Some(_), None) => Action::CopyMissing,
        (None, Some(_)) if deletes => Action::Delete,
        (None, Some(_)) => Action::KeepExtra,
        (Some(_), Some(_)) if rule == Rule::IgnoreExisting => Action::Skipped,
        (Some(_), Some(_)) if rule == Rule::IgnoreTimes => Action::CopyChanged,
        (Some(s), Some(d)) => {
            if s.size != d.size {
                return Action::CopyChanged;
            }
            let src_known = row.m_src.is_some();
            let dst_known = row.m_dst.is_some();
            let src_same = same_as_recorded(s, &row.m_src, true);
            let dst_same = same_as_recorded(d, &row.m_dst, false);
            if src_known && dst_known {
                // slate synced this key before: any change on either side since means copy
                return match (src_same && dst_same, touched(s, &row.m_src)) {
                    (true, true) => Action::CheckMeta,
                    (true, false) => Action::EqualRecorded,
                    _ => Action::CopyChanged,
                };
            }
            if src_known && !src_same {
                return Action::CopyChanged;
            }
            match (md5_etag(&s.etag), md5_etag(&d.etag)) {
                (Some(a), Some(b)) if a == b => Action::EqualDigest,
                (Some(_), Some(_)) => Action::CopyChanged,
                _ => match rule {
                    Rule::SizeOnly => Action::EqualSizeOnly,
                    Rule::Checksum => Action::CheckContent,
                    // decided above; here for the match's sake
                    Rule::ModTime | Rule::IgnoreExisting | Rule::IgnoreTimes => Action::CheckTimes,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Action::*;

    fn t(size: u64, mtime: i64) -> Option<State> {
        Some(State {
            size,
            etag: None,
            mtime_ms: Some(mtime),
        })
    }

    fn s(size: u64, etag: &str) -> Option<State> {
        Some(State {
            size,
            etag: (!etag.is_empty()).then(|| etag.to_string()),
            mtime_ms: None,
        })
    }

    fn et(size: u64, etag: &str, mtime: i64) -> Option<State> {
        Some(State {
            size,
            etag: Some(etag.to_string()),
            mtime_ms: Some(mtime),
        })
    }

    const MD5A: &str = "\"0123456789abcdef0123456789abcdef\"";
    const MD5B: &str = "\"fedcba9876543210fedcba9876543210\"";

    /// (name, source, destination, manifest source, manifest destination, deletes, action)
    type Case = (
        &'static str,
        Option<State>,
        Option<State>,
        Option<State>,
        Option<State>,
        bool,
        Action,
    );

    #[test]
    fn plans_every_case() {
        // (source, destination, manifest source, manifest destination, deletes) -> action
        let cases: Vec<Case> = vec![
            (
                "only in source",
                s(5, "a"),
                None,
                None,
                None,
                true,
                CopyMissing,
            ),
            (
                "only in source, manifest remembers a copy gone missing",
                s(5, "a"),
                None,
                s(5, "a"),
                s(5, "d"),
                true,
                CopyMissing,
            ),
            (
                "only in destination",
                None,
                s(5, "d"),
                None,
                None,
                true,
                Delete,
            ),
            (
                "only in destination, deletes off",
                None,
                s(5, "d"),
                None,
                None,
                false,
                KeepExtra,
            ),
            (
                "only in destination, source deleted since sync",
                None,
                s(5, "d"),
                s(5, "a"),
                s(5, "d"),
                true,
                Delete,
            ),
            (
                "synced, unchanged",
                s(5, "a"),
                s(5, "d"),
                s(5, "a"),
                s(5, "d"),
                true,
                EqualRecorded,
            ),
            (
                "synced, source overwritten same size",
                s(5, "a2"),
                s(5, "d"),
                s(5, "a"),
                s(5, "d"),
                true,
                CopyChanged,
            ),
            (
                "synced, source overwritten other size",
                s(6, "a2"),
                s(5, "d"),
                s(5, "a"),
                s(5, "d"),
                true,
                CopyChanged,
            ),
            (
                "synced, destination changed behind our back",
                s(5, "a"),
                s(5, "x"),
                s(5, "a"),
                s(5, "d"),
                true,
                CopyChanged,
            ),
            (
                "sizes differ, no manifest",
                s(5, ""),
                s(6, ""),
                None,
                None,
                true,
                CopyChanged,
            ),
            (
                "no manifest, equal MD5 etags",
                s(5, MD5A),
                s(5, MD5A),
                None,
                None,
                true,
                EqualDigest,
            ),
            (
                "no manifest, different MD5 etags",
                s(5, MD5A),
                s(5, MD5B),
                None,
                None,
                true,
                CopyChanged,
            ),
            (
                "no manifest, opaque etags (Azure)",
                s(5, "0x8D1"),
                s(5, MD5A),
                None,
                None,
                true,
                EqualSizeOnly,
            ),
            (
                "no manifest, local change tokens",
                s(5, "1.2-5"),
                s(5, "3.4-5"),
                None,
                None,
                true,
                EqualSizeOnly,
            ),
            (
                "source recorded and changed, destination unknown",
                s(5, "a2"),
                s(5, "d"),
                s(5, "a"),
                None,
                true,
                CopyChanged,
            ),
            (
                "source recorded unchanged, destination unknown, sizes equal",
                s(5, "a"),
                s(5, "0x1"),
                s(5, "a"),
                None,
                true,
                EqualSizeOnly,
            ),
            (
                "recorded etag quoted, listed unquoted (Azure)",
                s(5, "a"),
                s(5, "0x8D"),
                s(5, "a"),
                s(5, "\"0x8D\""),
                true,
                EqualRecorded,
            ),
            (
                "no etags listed (s3s-fs), source overwritten same size: newer mtime",
                t(5, 2000),
                s(5, ""),
                t(5, 1000),
                s(5, ""),
                true,
                CopyChanged,
            ),
            (
                "no etags listed, unchanged mtime",
                t(5, 1000),
                t(5, 7777),
                t(5, 1000),
                t(5, 3),
                true,
                EqualRecorded,
            ),
            (
                "synced, same bytes, last-modified moved (metadata-only change?)",
                et(5, MD5A, 2000),
                s(5, "d"),
                et(5, MD5A, 1000),
                s(5, "d"),
                true,
                CheckMeta,
            ),
            (
                "synced, same bytes and time",
                et(5, MD5A, 1000),
                s(5, "d"),
                et(5, MD5A, 1000),
                s(5, "d"),
                true,
                EqualRecorded,
            ),
            (
                "synced, new bytes and time",
                et(5, MD5B, 2000),
                s(5, "d"),
                et(5, MD5A, 1000),
                s(5, "d"),
                true,
                CopyChanged,
            ),
            (
                "recorded without etag (server-side copy)",
                s(5, "a"),
                s(5, "d"),
                s(5, "a"),
                s(5, ""),
                true,
                EqualRecorded,
            ),
        ];
        for (name, src, dst, m_src, m_dst, deletes, want) in cases {
            let row = Row {
                key: "k".into(),
                src,
                dst,
                m_src,
                m_dst,
            };
            assert_eq!(plan(&row, deletes, Rule::SizeOnly), want, "{name}");
            // the other rules differ only where size alone decided
            let other = |rule| match want {
                EqualSizeOnly if rule == Rule::ModTime => CheckTimes,
                EqualSizeOnly => CheckContent,
                a => a,
            };
            for rule in [Rule::ModTime, Rule::Checksum] {
                assert_eq!(plan(&row, deletes, rule), other(rule), "{name} ({rule:?})");
            }
            // rclone's --ignore-existing and --ignore-times differ wherever both sides hold
            // the key, whatever the manifest says; elsewhere they plan as the others
            let both = row.src.is_some() && row.dst.is_some();
            let (existing, times) = match want {
                _ if both => (Skipped, CopyChanged),
                a => (a, a),
            };
            assert_eq!(
                plan(&row, deletes, Rule::IgnoreExisting),
                existing,
                "{name} (ignore existing)"
            );
            assert_eq!(
                plan(&row, deletes, Rule::IgnoreTimes),
                times,
                "{name} (ignore times)"
            );
        }
    }

    #[test]
    fn skipped_is_neither_copied_nor_recorded_as_equal() {
        assert!(Skipped.is_equal() && !Skipped.is_copy() && !Skipped.is_undecided());
        assert_eq!(Skipped.equal_by(), None);
        assert_eq!(Action::from_u8(Skipped as u8), Some(Skipped));
    }

    #[test]
    fn times_decide_like_rclone() {
        // (name, source time, recorded at the destination, destination last-modified, action)
        let cases = [
            (
                "same recorded time",
                Some(1000),
                Some(1000),
                Some(9000),
                EqualModTime,
            ),
            (
                "recorded within the window",
                Some(1000),
                Some(1001),
                None,
                EqualModTime,
            ),
            (
                "recorded time older",
                Some(2000),
                Some(1000),
                Some(9000),
                CopyChanged,
            ),
            (
                "recorded time newer",
                Some(1000),
                Some(2000),
                Some(9000),
                CopyChanged,
            ),
            (
                "no record, written after the source changed",
                Some(1000),
                None,
                Some(1500),
                EqualModTime,
            ),
            (
                "no record, written at the same instant",
                Some(1000),
                None,
                Some(1000),
                EqualModTime,
            ),
            (
                "no record, written before the source changed",
                Some(2000),
                None,
                Some(1000),
                CopyChanged,
            ),
            ("nothing to compare", Some(1000), None, None, CopyChanged),
            (
                "a HEAD's whole second against a listing's ms",
                Some(5_000),
                Some(5_734),
                None,
                EqualModTime,
            ),
            (
                "whole seconds on both sides, a second apart",
                Some(5_000),
                Some(6_000),
                None,
                CopyChanged,
            ),
            (
                "ms on both sides, 400 ms apart",
                Some(5_100),
                Some(5_500),
                None,
                CopyChanged,
            ),
            (
                "source time unknown",
                None,
                Some(1000),
                Some(1000),
                CopyChanged,
            ),
        ];
        for (name, src, rec, modified, want) in cases {
            assert_eq!(by_times(src, rec, modified), want, "{name}");
        }
    }

    #[test]
    fn actions_round_trip_through_u8() {
        for a in [
            EqualRecorded,
            EqualDigest,
            EqualSizeOnly,
            CopyMissing,
            CopyChanged,
            Delete,
            KeepExtra,
            EqualModTime,
            EqualContent,
            CheckTimes,
            CheckContent,
            CheckMeta,
            MetaChanged,
            EqualTouched,
        ] {
            assert_eq!(Action::from_u8(a as u8), Some(a));
        }
        assert_eq!(Action::from_u8(99), None);
    }
}
