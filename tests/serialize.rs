//! Per-key serialization (issue 23): a drift check that finds keys to act on puts them
//! through the inbox, the one per-key path the events take, so a drift copy of an old version
//! can never land after the event loop wrote a newer one. A daemon with a drift check every
//! second follows bursts of overwrites of the same keys; the destination is watched all the
//! while: no key ever goes back to an older version, and each ends at the newest.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use common::*;

const KEYS: usize = 20;
const ROUNDS: u32 = 20;
const SIZE: usize = 256 * 1024;

/// Version `v` of `key`: its first 8 bytes say the version, the rest makes it big enough that
/// a copy takes a moment.
fn version(key: usize, v: u32) -> Vec<u8> {
    let mut b = format!("{v:08}").into_bytes();
    b.extend(bytes(key as u64 * 1000 + u64::from(v), SIZE - 8));
    b
}

/// The version a destination file holds (None: absent or being written).
fn version_of(path: &Path) -> Option<u32> {
    let b = std::fs::read(path).ok()?;
    if b.len() != SIZE {
        return None;
    }
    std::str::from_utf8(b.get(..8)?).ok()?.parse().ok()
}

/// Replaces `dir/name` whole (a rename: the source never shows a half-written version).
fn write_whole(dir: &Path, name: &str, data: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, data).expect("write");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}

#[test]
fn drift_checks_beside_bursts_of_overwrites_never_roll_a_key_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let (src, dst, db, log) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("s.db"),
        dir.path().join("d.log"),
    );
    std::fs::create_dir_all(&src).expect("src");
    std::fs::create_dir_all(&dst).expect("dst");
    let name = |k: usize| format!("k{k:02}.bin");
    for k in 0..KEYS {
        write_whole(&src, &name(k), &version(k, 0));
    }
    let mut c = slate_db(&db);
    c.args([
        "sync",
        &src.display().to_string(),
        &dst.display().to_string(),
        "--drift-check-secs",
        "1",
        // copies that take a while: a drift copy of an old version in flight while the
        // event loop writes the newer one
        "--bwlimit",
        "4M",
        "--quiet",
    ])
    .env("RUST_LOG", "slate=info,warn")
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"));
    let mut daemon = spawn_daemon(c, &log, 1);

    // the newest version each key was seen with at the destination
    let mut seen: BTreeMap<usize, u32> = BTreeMap::new();
    let watch = |seen: &mut BTreeMap<usize, u32>| {
        for k in 0..KEYS {
            if let Some(v) = version_of(&dst.join(name(k))) {
                let before = seen.insert(k, v).unwrap_or(0);
                assert!(
                    v >= before,
                    "{} went back from version {before} to {v} at the destination: {}",
                    name(k),
                    log_tail(&read_log(&log))
                );
            }
        }
    };
    for round in 1..=ROUNDS {
        for k in 0..KEYS {
            write_whole(&src, &name(k), &version(k, round));
        }
        // paced by the replica: the next burst when this one began to land
        wait_for(
            &format!("round {round} reaching the destination"),
            120,
            || {
                watch(&mut seen);
                seen.values().any(|v| *v == round)
            },
        );
    }
    wait_for("every key at its newest version", 180, || {
        watch(&mut seen);
        seen.len() == KEYS && seen.values().all(|v| *v == ROUNDS)
    });
    // and it stays so through a few more drift checks
    let checks = |t: &str| t.matches("drift check:").count();
    let before = checks(&read_log(&log));
    wait_for("two more drift checks", 60, || {
        watch(&mut seen);
        checks(&read_log(&log)) >= before + 2
    });
    watch(&mut seen);
    assert!(seen.values().all(|v| *v == ROUNDS), "{seen:?}");
    let text = read_log(&log);
    assert!(
        checks(&text) >= 3,
        "the drift check ran beside the events: {}",
        log_tail(&text)
    );
    assert!(daemon.signal(libc::SIGTERM) == Some(0));
}
