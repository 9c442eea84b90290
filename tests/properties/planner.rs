//! The planner property's worlds: one key's source, destination and manifest states, made
//! truthful (what the manifest recorded is what the stores held when slate last synced), and
//! the check of the plan against what the two sides really hold.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use slate::engine::plan::Row as ScanRow;
use slate::engine::plan::{plan, Action, Rule};
use slate::state::manifest::State;

use crate::fail;

/// How a store reports an object's change token in listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tags {
    /// S3 single-part: the MD5 of the content, quoted.
    Md5,
    /// Azure, GCS, S3 multipart: a new opaque ETag per write, quoted or not depending on the
    /// call (Azure quotes write responses and not listings).
    Opaque,
    /// Some S3-compatibles list no ETag, only a last-modified time.
    MtimeOnly,
    /// Local folders: mtime and size as the token.
    Local,
}

/// One object: its content (few values; sizes collide) and the write that made it.
#[derive(Debug, Clone, Copy)]
struct Written {
    content: u8,
    write: u64,
}

fn size_of(content: u8) -> u64 {
    [4, 4, 5, 5][content as usize % 4]
}

fn listed(tags: Tags, w: Written, quoted: bool) -> State {
    let size = size_of(w.content);
    let q = |s: String| if quoted { format!("\"{s}\"") } else { s };
    let (etag, mtime_ms) = match tags {
        Tags::Md5 => (
            Some(q(format!("{:032x}", 0xD41D_8CD9_u64 + w.content as u64))),
            Some(w.write as i64 * 1000),
        ),
        Tags::Opaque => (
            Some(q(format!("0x8D{:X}", w.write))),
            Some(w.write as i64 * 1000),
        ),
        Tags::MtimeOnly => (None, Some(w.write as i64 * 1000)),
        Tags::Local => (
            Some(format!("{:x}.0-{size:x}", w.write)),
            Some(w.write as i64 * 1000),
        ),
    };
    State {
        size,
        etag,
        mtime_ms,
    }
}

/// What happened to one side since slate last synced the key.
#[derive(Debug, Clone, Copy)]
enum Since {
    Unchanged,
    /// Written again (maybe with the same content).
    Written(u8),
    Deleted,
}

/// One key's world.
#[derive(Debug, Clone)]
pub(crate) struct KeyWorld {
    src_tags: Tags,
    dst_tags: Tags,
    /// 0: never synced (both sides independent), 1: synced (both recorded), 2: only the
    /// source recorded.
    history: u8,
    base: u8,
    src_since: Since,
    dst_since: Since,
    /// Never-synced sides.
    src_alone: Option<u8>,
    dst_alone: Option<u8>,
    quotes: [bool; 4],
}

fn since_strategy() -> impl Strategy<Value = Since> {
    prop_oneof![
        Just(Since::Unchanged),
        (0..4u8).prop_map(Since::Written),
        Just(Since::Deleted)
    ]
}

fn tags_strategy(dst: bool) -> impl Strategy<Value = Tags> {
    if dst {
        // a destination slate writes to always gives a change token back (an ETag, or a
        // local file's mtime and size)
        prop::sample::select(vec![Tags::Md5, Tags::Opaque, Tags::Local])
    } else {
        prop::sample::select(vec![Tags::Md5, Tags::Opaque, Tags::MtimeOnly, Tags::Local])
    }
}

pub(crate) fn key_world_strategy() -> impl Strategy<Value = KeyWorld> {
    (
        (tags_strategy(false), tags_strategy(true), 0..3u8, 0..4u8),
        (since_strategy(), since_strategy()),
        (
            prop::option::of(0..4u8),
            prop::option::of(0..4u8),
            any::<[bool; 4]>(),
        ),
    )
        .prop_map(
            |((src_tags, dst_tags, history, base), (src_since, dst_since), (sa, da, quotes))| {
                KeyWorld {
                    src_tags,
                    dst_tags,
                    history,
                    base,
                    src_since,
                    dst_since,
                    src_alone: sa,
                    dst_alone: da,
                    quotes,
                }
            },
        )
}

/// The scan row the planner sees, and the contents the two sides really hold.
fn row_of(k: &KeyWorld) -> (ScanRow, Option<u8>, Option<u8>) {
    if k.history == 0 {
        let src = k.src_alone.map(|c| Written {
            content: c,
            write: 5,
        });
        let dst = k.dst_alone.map(|c| Written {
            content: c,
            write: 6,
        });
        return (
            ScanRow {
                key: "k".into(),
                src: src.map(|w| listed(k.src_tags, w, k.quotes[0])),
                dst: dst.map(|w| listed(k.dst_tags, w, k.quotes[1])),
                m_src: None,
                m_dst: None,
            },
            src.map(|w| w.content),
            dst.map(|w| w.content),
        );
    }
    // slate copied the source's write 1 to the destination, which became its write 2
    let s0 = Written {
        content: k.base,
        write: 1,
    };
    let d0 = Written {
        content: k.base,
        write: 2,
    };
    let after = |w0: Written, since: Since, write: u64| match since {
        Since::Unchanged => Some(w0),
        Since::Written(c) => Some(Written { content: c, write }),
        Since::Deleted => None,
    };
    let src = after(s0, k.src_since, 3);
    let dst = after(d0, k.dst_since, 4);
    (
        ScanRow {
            key: "k".into(),
            src: src.map(|w| listed(k.src_tags, w, k.quotes[0])),
            dst: dst.map(|w| listed(k.dst_tags, w, k.quotes[1])),
            // what the source listed then, and what slate's write returned
            m_src: Some(listed(k.src_tags, s0, k.quotes[2])),
            m_dst: (k.history == 1).then(|| listed(k.dst_tags, d0, k.quotes[3])),
        },
        src.map(|w| w.content),
        dst.map(|w| w.content),
    )
}

pub(crate) fn check_plan(k: &KeyWorld) -> Result<(), TestCaseError> {
    let (row, src, dst) = row_of(k);
    for deletes in [true, false] {
        let action = plan(&row, deletes, Rule::SizeOnly);
        let ctx = || format!("{action:?} (deletes {deletes}) for {row:?}");
        // the other rules leave undecided exactly what size alone took as equal
        for (rule, undecided) in [
            (Rule::ModTime, Action::CheckTimes),
            (Rule::Checksum, Action::CheckContent),
        ] {
            let other = plan(&row, deletes, rule);
            let same = if action == Action::EqualSizeOnly {
                other == undecided
            } else {
                other == action
            };
            if !same {
                return Err(fail(format!("{rule:?} planned {other:?}: {}", ctx())));
            }
        }
        if action == Action::Delete && (src.is_some() || !deletes) {
            return Err(fail(format!("deletes a key it must keep: {}", ctx())));
        }
        if action == Action::KeepExtra && (deletes || src.is_some() || dst.is_none()) {
            return Err(fail(format!("keeps what it should not: {}", ctx())));
        }
        let after = match action {
            Action::CopyMissing | Action::CopyChanged => src,
            Action::Delete => None,
            Action::EqualRecorded
            | Action::EqualDigest
            | Action::EqualSizeOnly
            | Action::EqualModTime
            | Action::EqualContent
            | Action::CheckTimes
            | Action::CheckContent
            | Action::CheckMeta
            | Action::MetaChanged
            | Action::EqualTouched
            | Action::Skipped
            | Action::KeepExtra => dst,
        };
        if action == Action::EqualSizeOnly {
            // the documented weak verdict: only when sizes agree and nothing better exists
            let both_md5 = k.src_tags == Tags::Md5 && k.dst_tags == Tags::Md5;
            let both_recorded = row.m_src.is_some() && row.m_dst.is_some();
            if both_md5 || both_recorded || src.map(size_of) != dst.map(size_of) {
                return Err(fail(format!(
                    "size-only verdict where more is known: {}",
                    ctx()
                )));
            }
            continue;
        }
        let want = if deletes || src.is_some() { src } else { dst };
        if after != want {
            return Err(fail(format!(
                "plan leaves the destination at {after:?}, source is {src:?}: {}",
                ctx()
            )));
        }
    }
    Ok(())
}
