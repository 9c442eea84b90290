//! slate and rclone read each other's replicas: the modification time travels in rclone's key
//! and format, so a replica made by `rclone copy` is equal to slate's first `sync --once`
//! without a byte copied, and after slate's copy `rclone check` is clean and `rclone sync
//! --dry-run` would transfer nothing (local ↔ moto). And a destination filled earlier with
//! same-size stale objects is replaced (rclone's default rule: size, then modification time).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use common::*;

/// rclone (Debian's package; `scripts/services.sh install` puts it there) with a remote
/// `moto:` for the emulator, configured through the environment only.
fn rclone(args: &[&str]) -> Output {
    let out = Command::new("rclone")
        .env_remove("AWS_CA_BUNDLE")
        .env("RCLONE_CONFIG_MOTO_TYPE", "s3")
        .env("RCLONE_CONFIG_MOTO_PROVIDER", "Other")
        .env("RCLONE_CONFIG_MOTO_ENDPOINT", s3_endpoint())
        .env("RCLONE_CONFIG_MOTO_ACCESS_KEY_ID", "testing")
        .env("RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY", "testing")
        .env("RCLONE_CONFIG_MOTO_REGION", "us-east-1")
        .env("RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE", "true")
        .args(["--config", "/dev/null"])
        .args(args)
        .output()
        .expect("run rclone (apt-get install rclone)");
    out
}

fn rclone_ok(args: &[&str]) -> String {
    let out = rclone(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "rclone {args:?}: {err}");
    err
}

/// A folder of files of several sizes, each with its own modification time in the past.
fn files() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..12 {
        m.insert(
            format!("docs/page-{i:02}.html"),
            bytes(i, 100 + i as usize * 37),
        );
    }
    m.insert("data/table.csv".into(), bytes(99, 4096));
    m.insert("data/empty.txt".into(), Vec::new());
    m
}

fn seed_files(root: &std::path::Path, data: &BTreeMap<String, Vec<u8>>, base: SystemTime) {
    seed_local(root, data);
    for (i, k) in data.keys().enumerate() {
        let f = std::fs::File::options()
            .write(true)
            .open(root.join(k))
            .expect("open");
        // distinct times with sub-second parts, as real files have
        f.set_modified(base + Duration::from_millis(i as u64 * 1_234 + 567))
            .expect("set mtime");
    }
}

fn past() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_650_000_000)
}

fn rclone_url(p: &Place) -> String {
    match p.end {
        End::S3(b) => format!("moto:{b}/{}", p.prefix),
        End::Local => p.root.display().to_string(),
        _ => unreachable!(),
    }
}

fn sync_once(db: &std::path::Path, src: &str, dst: &str, extra: &[&str]) -> Output {
    let mut c = slate_db(db);
    c.args(["sync", "--once", src, dst]).args(extra);
    run(c)
}

#[test]
fn a_replica_made_by_rclone_is_equal_without_a_byte_copied() {
    let tmp = tempfile::tempdir().unwrap();
    // local -> S3 by rclone, then slate's first sync of the same pair
    let src = Place::new(End::Local, "rc-src");
    seed_files(&src.root, &files(), past());
    let dst = Place::new(End::S3("slate-dst"), "rc-made");
    rclone_ok(&["copy", &rclone_url(&src), &rclone_url(&dst)]);
    let out = sync_once(&tmp.path().join("a.db"), &src.url(), &dst.url(), &[]);
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert!(
        line.contains("copied 0 (") && line.contains("no data transferred"),
        "{line}"
    );
    assert!(
        line.contains(&format!("{} by size and modification time", files().len())),
        "every key equal by rclone's rule: {line}"
    );
    // S3 -> local by rclone (it sets each file's time from the object's mtime), then slate
    let back = Place::new(End::Local, "rc-back");
    rclone_ok(&["copy", &rclone_url(&dst), &rclone_url(&back)]);
    let out = sync_once(&tmp.path().join("b.db"), &dst.url(), &back.url(), &[]);
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert!(line.contains("no data transferred"), "{line}");
    assert!(line.contains("by size and modification time"), "{line}");
}

#[test]
fn rclone_finds_nothing_to_do_after_slate_copies() {
    let src = Place::new(End::Local, "sl-src");
    seed_files(&src.root, &files(), past());
    // local -> S3 by slate
    let dst = Place::new(End::S3("slate-dst"), "sl-made");
    let out = copy(&src.url(), &dst.url(), &["-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    rclone_ok(&["check", &rclone_url(&src), &rclone_url(&dst)]);
    let err = rclone_ok(&[
        "sync",
        "--dry-run",
        "-v",
        &rclone_url(&src),
        &rclone_url(&dst),
    ]);
    assert!(
        !err.contains("Skipped copy") && !err.contains("Skipped update"),
        "rclone would transfer: {err}"
    );
    // S3 -> local by slate: the files take the objects' recorded times
    let back = Place::new(End::Local, "sl-back");
    let out = copy(&dst.url(), &back.url(), &["-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    rclone_ok(&["check", &rclone_url(&dst), &rclone_url(&back)]);
    let err = rclone_ok(&[
        "sync",
        "--dry-run",
        "-v",
        &rclone_url(&dst),
        &rclone_url(&back),
    ]);
    assert!(
        !err.contains("Skipped copy") && !err.contains("Skipped update"),
        "rclone would transfer: {err}"
    );
    for k in files().keys() {
        let a = std::fs::metadata(src.root.join(k))
            .unwrap()
            .modified()
            .unwrap();
        let b = std::fs::metadata(back.root.join(k))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(a, b, "{k}: the time made the round trip to the nanosecond");
    }
}

/// Same-size files whose bytes differ from the source's.
fn stale() -> BTreeMap<String, Vec<u8>> {
    files()
        .into_iter()
        .map(|(k, v)| {
            let len = v.len();
            (k, bytes(7_777, len))
        })
        .collect()
}

#[test]
fn a_prefilled_destination_with_same_size_stale_objects_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    // S3 filled an hour before the source's files last changed
    let src = Place::new(End::Local, "stale-src");
    seed_files(&src.root, &files(), now + Duration::from_secs(3600));
    let dst = Place::new(End::S3("slate-dst"), "stale-s3");
    dst.seed(&stale());
    // --size-only keeps today's rule: taken as equal
    let out = sync_once(
        &tmp.path().join("s.db"),
        &src.url(),
        &dst.url(),
        &["--size-only", "--dry-run"],
    );
    let line = stdout(&out) + &stderr(&out);
    assert!(line.contains("would copy 0"), "{line}");
    let out = sync_once(&tmp.path().join("a.db"), &src.url(), &dst.url(), &["-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same(&dst.read(), &files());

    // a local destination whose files are older than the source's
    let dst = Place::new(End::Local, "stale-local");
    seed_files(&dst.root, &stale(), past());
    let src = Place::new(End::Local, "stale-src2");
    seed_files(&src.root, &files(), past() + Duration::from_secs(86_400));
    let out = sync_once(&tmp.path().join("b.db"), &src.url(), &dst.url(), &[]);
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert_same(&read_local(&dst.root), &files());

    // same size and the same times, other bytes: only --checksum sees it
    let dst = Place::new(End::Local, "stale-same-time");
    seed_files(&dst.root, &stale(), past());
    let src = Place::new(End::Local, "stale-src3");
    seed_files(&src.root, &files(), past());
    let out = sync_once(
        &tmp.path().join("c.db"),
        &src.url(),
        &dst.url(),
        &["--dry-run"],
    );
    let line = stdout(&out) + &stderr(&out);
    assert!(
        line.contains("would copy 0"),
        "by times they are equal: {line}"
    );
    let out = sync_once(
        &tmp.path().join("d.db"),
        &src.url(),
        &dst.url(),
        &["--checksum"],
    );
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert_same(&read_local(&dst.root), &files());
    // the empty file is equal by content; the others were copied
    assert!(line.contains("1 by content"), "{line}");
}
