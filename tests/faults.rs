//! Store faults (`SLATE_FAULTS`, src/stores/faults.rs) on moto (S3) and Azurite: with one request in
//! five failing (503 SlowDown, 500, 429, connection resets, timeouts, GET bodies cut short),
//! `slate copy`, `slate sync --once` and the daemon converge in one run each to an empty
//! `slate diff` (run without faults) and byte-equal objects. Under a burst of 503s the
//! adaptive transfer limit drops below `--transfers`, and climbs back once the store stops
//! throttling. The fault store exists only in builds with the `faults` feature, which
//! `cargo test` turns on (Cargo.toml's dev-dependency on slate itself).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;

/// Every kind but `lost`, one request in five.
const FAULTS: &str = "rate=0.2,kinds=503,500,429,reset,timeout,truncate";

/// `c` with faults on every cloud store it builds, each injected fault in the log.
fn faulty(mut c: Command, seed: u64) -> Command {
    c.env("SLATE_FAULTS", format!("{FAULTS},seed={seed}"))
        .env("RUST_LOG", "warn,slate::stores::faults=debug");
    c
}

/// What a faulted run went through, from its log.
#[derive(Debug, Default)]
struct Tally {
    injected: usize,
    retries: usize,
}

impl Tally {
    fn of(log: &str) -> Tally {
        Tally {
            injected: log.matches("injected fault").count(),
            retries: log.matches("retrying").count(),
        }
    }
}

/// Runs a faulted command that must succeed in one run; returns what it went through.
fn converges(what: &str, c: Command) -> Tally {
    let out = run(c);
    let log = stderr(&out);
    let t = Tally::of(&log);
    eprintln!("{what}: {t:?}; {}", stdout(&out).trim());
    assert!(
        out.status.success(),
        "{what} did not converge in one run: {}",
        log_tail(&log)
    );
    assert!(
        !log.contains("SLATE_FAULTS is ignored"),
        "{what}: the slate under test was built without the faults feature (Cargo.toml's \
         dev-dependency on slate turns it on for `cargo test`)"
    );
    assert!(t.injected > 0, "{what}: no fault was injected");
    assert!(
        log.contains("SLATE_FAULTS is set"),
        "{what}: no warning: {}",
        log_tail(&log)
    );
    t
}

/// `slate diff` without faults says equal.
fn assert_no_diff(db: &std::path::Path, src: &str, dst: &str) {
    let mut c = slate_db(db);
    c.env_remove("SLATE_FAULTS").args(["diff", src, dst]);
    let out = run(c);
    assert_eq!(
        out.status.code(),
        Some(0),
        "diff {src} -> {dst}: {}",
        stdout(&out)
    );
}

#[test]
fn copy_converges_with_one_request_in_five_failing() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    // the awkward set: 12 MiB (3 parts of 5 MiB) and 5 MiB objects, zero-byte ones, odd keys,
    // and 150 small objects
    let data = dataset(150);
    let local = Place::new(End::Local, "flt-copy-src");
    local.seed(&data);
    let s3 = Place::new(End::S3("slate-dst"), "flt-copy");
    let az = Place::new(End::Az("slate-dst"), "flt-copy");

    // a local folder → S3: the writes are faulted (PUTs, multipart steps, the probe)
    let mut c = faulty(slate(), 11);
    c.args(["copy", &local.url(), &s3.url(), "--chunk-size", "5MiB"]);
    let up = converges("copy local -> s3", c);
    // S3 → Azure: both ends faulted, reads cut short included
    let mut c = faulty(slate(), 12);
    c.args(["copy", &s3.url(), &az.url(), "--chunk-size", "5MiB"]);
    let across = converges("copy s3 -> az", c);
    assert!(up.retries > 0 && across.retries > 0, "{up:?} {across:?}");

    assert_no_diff(&db, &local.url(), &s3.url());
    assert_no_diff(&db, &s3.url(), &az.url());
    // byte for byte: a body cut short was read again, never stored
    assert_same(&s3.read(), &data);
    assert_same(&az.read(), &data);
}

#[test]
fn sync_once_converges_with_one_request_in_five_failing() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let src = Place::new(End::S3("slate-src"), "flt-sync");
    let dst = Place::new(End::Az("slate-dst"), "flt-sync");
    let mut data: BTreeMap<String, Vec<u8>> = (0..120)
        .map(|i| {
            (
                format!("d{}/k{i:03}", i % 5),
                bytes(i, 50 + (i as usize * 37) % 9000),
            )
        })
        .collect();
    data.insert("large/multi.bin".into(), bytes(7, 11 * MIB + 3));
    src.seed(&data);
    let (su, du) = (src.url(), dst.url());
    let sync = |seed: u64| {
        let mut c = faulty(slate_db(&db), seed);
        c.args(["sync", &su, &du, "--once", "--chunk-size", "5MiB"]);
        c
    };
    let first = converges("sync --once (backfill)", sync(21));

    // creates, same-size and resized overwrites, deletes (each confirmed by a faulted HEAD)
    let mut changed = BTreeMap::new();
    for i in 0..20u64 {
        changed.insert(format!("new/n{i:02}"), bytes(1000 + i, 300));
    }
    for i in 0..30u64 {
        let k = format!("d{}/k{i:03}", i % 5);
        let len = data[&k].len() + if i % 2 == 0 { 0 } else { 11 };
        changed.insert(k, bytes(2000 + i, len));
    }
    changed.insert("large/multi.bin".into(), bytes(8, 11 * MIB + 3));
    src.seed(&changed);
    data.extend(changed);
    let gone: Vec<String> = (90..120u64)
        .map(|i| format!("d{}/k{i:03}", i % 5))
        .collect();
    src.remove(&gone.iter().map(String::as_str).collect::<Vec<_>>());
    for k in &gone {
        data.remove(k);
    }
    let second = converges("sync --once (changes)", sync(22));
    assert!(first.retries + second.retries > 0);

    assert_no_diff(&db, &su, &du);
    assert_same(&dst.read(), &data);
}

#[test]
fn daemon_converges_with_one_request_in_five_failing() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let log = dir.path().join("daemon.log");
    let src = Place::new(End::Local, "flt-dmn-src");
    let dst = Place::new(End::S3("slate-dst"), "flt-dmn");
    let mut data: BTreeMap<String, Vec<u8>> = (0..60)
        .map(|i| {
            (
                format!("dir{}/f{i}.bin", i % 4),
                bytes(i, 100 + i as usize * 50),
            )
        })
        .collect();
    src.seed(&data);
    let (su, du) = (src.url(), dst.url());
    let mut c = faulty(slate_db(&db), 31);
    c.args(["sync", &su, &du, "--drift-check-secs", "0", "--quiet"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    // the backfill goes through the faulted store: 90 s for it, as for every wait here
    let daemon = spawn_ready(c, &log, 90, |text| text.contains("following changes"));
    wait_equal_within(&db, &su, &du, 90, Some(&log));

    // every kind of change, through the faulted store
    for i in 0..20u64 {
        let k = format!("new/g{i:02}.bin");
        let v = bytes(500 + i, 2000);
        std::fs::create_dir_all(src.root.join("new")).expect("mkdir");
        std::fs::write(src.root.join(&k), &v).expect("write");
        data.insert(k, v);
    }
    for i in 0..10u64 {
        let k = format!("dir{}/f{i}.bin", i % 4);
        let v = bytes(900 + i, 100 + i as usize * 50);
        std::fs::write(src.root.join(&k), &v).expect("overwrite");
        data.insert(k, v);
    }
    for i in 50..60u64 {
        let k = format!("dir{}/f{i}.bin", i % 4);
        std::fs::remove_file(src.root.join(&k)).expect("rm");
        data.remove(&k);
    }
    wait_equal_within(&db, &su, &du, 90, Some(&log));
    assert_same(&dst.read(), &data);

    let code = daemon.stop(libc::SIGTERM);
    let text = read_log(&log);
    let t = Tally::of(&text);
    let failed_keys = text.matches("reconcile failed").count();
    eprintln!("daemon: {t:?}, keys failed and retried later: {failed_keys}");
    assert_eq!(code, Some(0), "{}", log_tail(&text));
    assert!(t.injected > 0, "no fault was injected");
}

/// `(side, limit, in flight)` of every change of the adaptive limit in a debug log.
fn limit_changes(log: &str) -> Vec<(String, usize, usize)> {
    log.lines()
        .filter(|l| l.contains("transfer limit"))
        .filter_map(|l| {
            let field = |name: &str| {
                let start = l.find(&format!(" {name}="))? + name.len() + 2;
                let rest = &l[start..];
                let end = rest.find(' ').unwrap_or(rest.len());
                Some(rest[..end].trim_matches('"').to_string())
            };
            Some((
                field("side")?,
                field("limit")?.parse().ok()?,
                field("in_flight")?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn the_transfer_limit_backs_off_while_the_store_throttles_and_recovers() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let src = Place::new(End::Local, "flt-aimd-src");
    let data: BTreeMap<String, Vec<u8>> = (0..400)
        .map(|i| (format!("p{}/o{i:03}", i % 8), bytes(i, 64 + i as usize)))
        .collect();
    src.seed(&data);
    let dst = Place::new(End::S3("slate-dst"), "flt-aimd");
    // half the requests answer 503 SlowDown for the first 3 s of the store's life, then none
    let mut c = slate();
    c.env("SLATE_FAULTS", "rate=0.5,kinds=503,until_ms=3000,seed=5")
        .env("RUST_LOG", "warn,slate::stores::limit=debug")
        .args(["copy", &src.url(), &dst.url(), "--transfers", "16"]);
    let started = Instant::now();
    let out = run(c);
    let log = stderr(&out);
    assert!(out.status.success(), "{}", log_tail(&log));
    let seen: Vec<(String, usize, usize)> = limit_changes(&log)
        .into_iter()
        .filter(|(side, _, _)| side == "dst")
        .collect();
    let changes: Vec<usize> = seen.iter().map(|c| c.1).collect();
    let most_in_flight = seen.iter().map(|c| c.2).max().unwrap_or(0);
    let (at, low) = changes
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|(_, l)| *l)
        .expect("the limit never changed");
    let after = changes[at..].iter().copied().max().unwrap_or(low);
    let last = changes.last().copied().unwrap_or(low);
    eprintln!(
        "limit of the S3 side: {} changes, down to {low}, back up to {after} (last {last}), \
         at most {most_in_flight} in flight at a change, in {:.1} s: {changes:?}",
        changes.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(low < 16, "the limit never dropped: {changes:?}");
    assert!(
        most_in_flight <= 16,
        "more in flight than --transfers: {seen:?}"
    );
    assert!(
        low <= 4,
        "half the requests throttled: the limit should fall far: {changes:?}"
    );
    assert!(
        after > low + 4,
        "the limit did not climb back once the throttling stopped: {changes:?}"
    );
    assert_no_diff(&db, &src.url(), &dst.url());
}
