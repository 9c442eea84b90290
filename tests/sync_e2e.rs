//! `slate sync --once` and `slate diff` end to end through the real emulators: backfill, then
//! creates, overwrites (same size too) and deletes; exact diff counts; dry runs and the delete
//! guard change nothing; a killed run converges when run again.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

fn dataset_n(n: usize, seed: u64) -> BTreeMap<String, Vec<u8>> {
    (0..n)
        .map(|i| {
            (
                format!("d{:02}/obj-{i:05}", i % 20),
                bytes(seed + i as u64, 100 + (i * 37) % 3000),
            )
        })
        .collect()
}

fn json_summary(out: &std::process::Output) -> serde_json::Value {
    let text = stdout(out);
    let last = text.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON {last:?}: {e}"));
    v["summary"].clone()
}

fn sync(db: &std::path::Path, src: &str, dst: &str, extra: &[&str]) -> std::process::Output {
    let mut c = slate_db(db);
    c.args(["sync", "--once", src, dst, "--progress-lines", "3600"])
        .args(extra);
    c.output().expect("run")
}

fn diff(db: &std::path::Path, src: &str, dst: &str, extra: &[&str]) -> std::process::Output {
    let mut c = slate_db(db);
    c.args(["diff", src, dst]).args(extra);
    c.output().expect("run")
}

/// The whole life of a pair, as a user goes through it.
fn lifecycle(src_end: End, dst_end: End, n: usize) {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let s = Place::new(src_end, "sync-src");
    let d = Place::new(dst_end, "sync-dst");
    let mut data = dataset_n(n, 1);
    s.seed(&data);
    let (su, du) = (s.url(), d.url());
    let ctx = format!("{src_end:?} -> {dst_end:?}");

    // backfill
    let out = sync(&db, &su, &du, &[]);
    assert_eq!(out.status.code(), Some(0), "{ctx}: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("copied {n} ({n} new")),
        "{ctx}: {}",
        stdout(&out)
    );
    assert_same(&d.read(), &data);
    let out = diff(&db, &su, &du, &[]);
    assert_eq!(out.status.code(), Some(0), "{ctx}: {}", stdout(&out));

    // nothing changed: no transfer; both sides listed (the default), or the destination taken
    // from the manifest (--trust-manifest)
    let out = sync(&db, &su, &du, &[]);
    let text = stdout(&out);
    assert!(
        out.status.success()
            && text.contains("no data transferred")
            && text.contains(&format!("destination {n} listed"))
            && text.contains(&format!("{n} equal ({n} by the manifest)")),
        "{ctx}: {text}"
    );
    let out = sync(&db, &su, &du, &["--trust-manifest"]);
    let text = stdout(&out);
    assert!(
        out.status.success()
            && text.contains("no data transferred")
            && text.contains("destination from the manifest"),
        "{ctx}: {text}"
    );

    // changes: 5 creates, 4 overwrites (2 of the same size), 3 deletes
    let keys: Vec<String> = data.keys().cloned().collect();
    let mut changes = BTreeMap::new();
    for i in 0..5 {
        changes.insert(format!("new/n{i}.bin"), bytes(900 + i, 500));
    }
    for (j, k) in keys.iter().take(4).enumerate() {
        let len = data[k].len() + if j < 2 { 0 } else { 11 };
        changes.insert(k.clone(), bytes(700 + j as u64, len));
    }
    let gone: Vec<&str> = keys[10..13].iter().map(String::as_str).collect();
    std::thread::sleep(Duration::from_millis(20)); // local change tokens include the mtime
    s.seed(&changes);
    s.remove(&gone);
    let before = d.read();
    data.extend(changes);
    for k in &gone {
        data.remove(*k);
    }

    let out = diff(&db, &su, &du, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{ctx}: {}", stdout(&out));
    let sum = json_summary(&out);
    assert_eq!(sum["only_in_source"], 5, "{ctx}: {sum}");
    assert_eq!(sum["changed"], 4, "{ctx}: {sum}");
    assert_eq!(sum["only_in_destination"], 3, "{ctx}: {sum}");
    assert_eq!(sum["equal"], (n - 7) as u64, "{ctx}: {sum}");
    let lines = stdout(&out).lines().count();
    assert_eq!(
        lines,
        5 + 4 + 3 + 1,
        "one line per difference, then the summary"
    );

    // a dry run and a refused delete change nothing
    let out = sync(&db, &su, &du, &["--dry-run"]);
    assert!(out.status.success(), "{ctx}: {}", stderr(&out));
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("delete: "))
            .count(),
        3,
        "{ctx}"
    );
    let out = sync(&db, &su, &du, &["--max-delete", "2"]);
    assert_eq!(out.status.code(), Some(2), "{ctx}: {}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing to delete 3"),
        "{ctx}: {}",
        stderr(&out)
    );
    assert_same(&d.read(), &before);

    // the real thing
    let out = sync(&db, &su, &du, &[]);
    assert_eq!(out.status.code(), Some(0), "{ctx}: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("copied 9 (5 new, 4 changed") && text.contains("deleted 3"),
        "{ctx}: {text}"
    );
    assert_same(&d.read(), &data);
    assert_eq!(diff(&db, &su, &du, &[]).status.code(), Some(0), "{ctx}");

    // another client deletes one object of the replica and overwrites another: --trust-manifest
    // does not see it; diff and a dry run name the same two keys; the next sync repairs both
    let keys: Vec<String> = data.keys().cloned().collect();
    let (lost, clobbered) = (keys[20].clone(), keys[21].clone());
    d.remove(&[lost.as_str()]);
    d.seed(&BTreeMap::from([(
        clobbered.clone(),
        b"written by another client".to_vec(),
    )]));
    let out = sync(&db, &su, &du, &["--trust-manifest"]);
    assert!(out.status.success(), "{ctx}: {}", stderr(&out));
    assert!(
        stdout(&out).contains("no data transferred"),
        "{ctx}: {}",
        stdout(&out)
    );
    let keys_of = |out: &std::process::Output, prefixes: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = stdout(out)
            .lines()
            .filter_map(|l| prefixes.iter().find_map(|p| l.strip_prefix(p)))
            .map(|k| k.trim().to_string())
            .collect();
        v.sort();
        v
    };
    let mut both = vec![lost.clone(), clobbered.clone()];
    both.sort();
    let out = diff(&db, &su, &du, &[]);
    assert_eq!(out.status.code(), Some(1), "{ctx}: {}", stdout(&out));
    let mut diffed: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(st, _)| ["only_in_source", "changed"].contains(st))
        .map(|(_, k)| k.trim().to_string())
        .collect();
    diffed.sort();
    assert_eq!(diffed, both, "{ctx}: {}", stdout(&out));
    let out = sync(&db, &su, &du, &["--dry-run"]);
    assert_eq!(
        keys_of(&out, &["copy (new): ", "copy (changed): "]),
        both,
        "{ctx}: {}",
        stdout(&out)
    );
    let out = sync(&db, &su, &du, &[]);
    assert!(
        out.status.success() && stdout(&out).contains("copied 2 (1 new, 1 changed"),
        "{ctx}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_same(&d.read(), &data);

    let out = diff(&db, &su, &du, &["--from-manifest", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{ctx}: {}", stdout(&out));
    assert_eq!(json_summary(&out)["equal"], (n + 2) as u64, "{ctx}"); // n - 3 deleted + 5 new

    // --from-manifest makes no request: with every store pointed at a closed port it still answers
    let mut c = slate_db(&db);
    c.env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:9")
        .env("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
        .args(["diff", &su, &du, "--from-manifest"]);
    let out = c.output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{ctx}: {}", stderr(&out));
    assert!(
        stdout(&out).contains("from the manifest, as of the last full sync"),
        "{ctx}: {}",
        stdout(&out)
    );
}

#[test]
fn s3_to_azure_backfill_changes_and_deletes() {
    lifecycle(End::S3("slate-src"), End::Az("slate-dst"), 2000);
}

#[test]
fn local_to_s3_and_gcs_to_local() {
    lifecycle(End::Local, End::S3("slate-dst"), 300);
    lifecycle(End::Gs("slate-src"), End::Local, 300);
}

#[test]
fn azure_to_gcs_and_s3_to_s3() {
    lifecycle(End::Az("slate-src"), End::Gs("slate-dst"), 200);
    lifecycle(End::S3("slate-src"), End::S3("slate-dst"), 300);
}

#[test]
fn filters_limit_what_is_copied_and_deleted() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let s = Place::new(End::Local, "filt-src");
    let d = Place::new(End::Local, "filt-dst");
    let data: BTreeMap<String, Vec<u8>> = [
        ("shards/a.bin", "a"),
        ("shards/b.tmp", "b"),
        ("shards/deep/c.bin", "c"),
        ("other/d.bin", "d"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    s.seed(&data);
    seed_local(
        &d.root,
        &[("other/keep-me.bin".to_string(), b"x".to_vec())].into(),
    );
    let out = sync(
        &db,
        &s.url(),
        &d.url(),
        &["--include", "shards/**", "--exclude", "*.tmp"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let got = d.read();
    let keys: Vec<_> = got.keys().map(String::as_str).collect();
    // the excluded and not-included keys are neither copied nor deleted
    assert_eq!(
        keys,
        vec!["other/keep-me.bin", "shards/a.bin", "shards/deep/c.bin"]
    );
    let out = sync(&db, &s.url(), &d.url(), &["--max-age", "1d", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // a bad glob is refused before anything is listed: one line naming the flag and pattern
    let long = format!("shards/{}", "x".repeat(1100));
    for (flag, pattern, says) in [
        ("--exclude", "", "--exclude: pattern '': empty pattern"),
        ("--include", long.as_str(), "--include: pattern 'shards/xxx"),
    ] {
        let out = sync(
            &db,
            &s.url(),
            &d.url(),
            &["--include", "ok/*", flag, pattern],
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(says), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert_eq!(d.read().len(), 3, "nothing changed");
}

#[test]
fn an_empty_source_never_empties_the_destination_by_default() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let s = Place::new(End::Local, "empty-src");
    std::fs::create_dir_all(&s.root).expect("mkdir");
    let d = Place::new(End::Local, "empty-dst");
    let data = dataset_n(10, 3);
    d.seed(&data);
    let out = sync(&db, &s.url(), &d.url(), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("source is empty"), "{}", stderr(&out));
    assert_same(&d.read(), &data);
    let out = sync(&db, &s.url(), &d.url(), &["--max-delete", "100%"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(d.read().is_empty());
    // --no-delete keeps extras
    d.seed(&data);
    let out = sync(&db, &s.url(), &d.url(), &["--no-delete", "--full"]);
    assert!(
        out.status.success() && stdout(&out).contains("10 extra kept"),
        "{}",
        stdout(&out)
    );
    assert_same(&d.read(), &data);
}

#[test]
fn a_killed_sync_converges_without_recopying_what_it_finished() {
    // S3 -> local, killed mid-run with SIGKILL, then run again: the destination converges, no
    // torn file is visible, and objects that had landed are not copied again.
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let n = 1500;
    let s = Place::new(End::S3("slate-src"), "kill-src");
    let d = Place::new(End::Local, "kill-dst");
    let data = dataset_n(n, 5);
    s.seed(&data);
    let mut c = slate_db(&db);
    c.args([
        "sync",
        "--once",
        &s.url(),
        &d.url(),
        "--transfers",
        "2",
        "--quiet",
    ]);
    let mut child = c.spawn().expect("spawn");
    // killed once some objects landed and the run is still going: a kill after the end
    // would prove nothing
    wait_for("some objects landed", 120, || {
        d.read()
            .keys()
            .filter(|k| !k.contains(".slate-tmp-"))
            .count()
            >= 10
    });
    assert!(
        matches!(child.try_wait(), Ok(None)),
        "the run ended before it could be killed"
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let status = child.wait().expect("wait");
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "the kill landed mid-run"
        );
    }
    let landed = d.read();
    let visible: Vec<_> = landed
        .keys()
        .filter(|k| !k.contains(".slate-tmp-"))
        .collect();
    for k in &visible {
        assert_eq!(&landed[*k], &data[*k], "torn or wrong object visible: {k}");
    }
    let out = sync(&db, &s.url(), &d.url(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let want = format!("copied {} (", n - visible.len());
    assert!(
        stdout(&out).contains(&want),
        "expected {want:?} after {} had landed: {}",
        visible.len(),
        stdout(&out)
    );
    let got: BTreeMap<String, Vec<u8>> = d
        .read()
        .into_iter()
        .filter(|(k, _)| !k.contains(".slate-tmp-"))
        .collect();
    assert_same(&got, &data);
    assert_eq!(diff(&db, &s.url(), &d.url(), &[]).status.code(), Some(0));
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let d = dir.path().display().to_string();
    let mut c = slate_db(&db);
    c.args(["sync", "s3://slate-src/x", "/tmp/x"]);
    let out = c.output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--events"), "{}", stderr(&out));
    let out = diff(&db, "s3://no-such-bucket-slate/x", &d, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("s3://no-such-bucket-slate"),
        "{}",
        stderr(&out)
    );
    let out = diff(&db, &d, "/tmp/never-synced", &["--from-manifest"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("sync --once"), "{}", stderr(&out));
    // a database from a newer slate is refused
    let conn = rusqlite::Connection::open(&db).expect("db");
    conn.execute_batch("PRAGMA user_version = 42")
        .expect("pragma");
    drop(conn);
    let out = diff(&db, &d, &d, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("newer slate"), "{}", stderr(&out));
}

#[test]
fn folder_markers_are_not_objects_and_no_key_is_mangled() {
    // Consoles create zero-byte `folder/` keys, and object_store lists `folder/` as `folder`:
    // a copy of it read a key that is not there (404, every run failed), and a request sent
    // for it would act on another object. Markers at every depth (the pair's own, the two
    // levels listed with a delimiter, a deep one from a flat listing) are not objects; a real
    // zero-byte object still is.
    let prefix = unique("markers");
    for (key, body) in [
        ("", ""),
        ("x/", ""),
        ("x/f", "hello"),
        ("a/b/", ""),
        ("a/b/c/d/", ""),
        ("a/b/c/d/e.txt", "e"),
        ("a/b/c/empty", ""),
        ("y", "yy"),
    ] {
        let (status, text) = s3_raw("PUT", &format!("/slate-src/{prefix}/{key}"), body);
        assert_eq!(status, 200, "PUT {key:?}: {text}");
    }
    let want: BTreeMap<String, Vec<u8>> = [
        ("x/f", "hello"),
        ("a/b/c/d/e.txt", "e"),
        ("a/b/c/empty", ""),
        ("y", "yy"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    let src = format!("s3://slate-src/{prefix}");
    let tmp = tempfile::tempdir().expect("tmp");
    let db = tmp.path().join("slate.db");
    let s3_dst = Place::new(End::S3("slate-dst"), "markers-dst");
    let local_dst = Place::new(End::Local, "markers-local");
    for dst in [&s3_dst, &local_dst] {
        let out = sync(&db, &src, &dst.url(), &[]);
        assert!(out.status.success(), "{} {}", stdout(&out), stderr(&out));
        assert!(stdout(&out).contains("source 4 listed"), "{}", stdout(&out));
        assert_same(&dst.read(), &want);
        let d = diff(&db, &src, &dst.url(), &["--json"]);
        assert_eq!(d.status.code(), Some(0), "{}", stdout(&d));
        assert_eq!(json_summary(&d)["equal"], 4, "{}", stdout(&d));
        // and again: nothing to do, still exit 0
        let again = sync(&db, &src, &dst.url(), &[]);
        assert!(again.status.success(), "{}", stderr(&again));
    }
    // a marker never overwrote or deleted a same-named object at the destination
    assert!(!local_dst.root.join("x").is_file());
}

#[test]
fn more_deletes_than_transfers_at_a_cloud_destination_finish() {
    // every delete waits for a slot under the destination's limit; with more deletes than
    // transfers in flight, a second slot taken around it made each wait for ever
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let s = Place::new(End::Local, "dels-src");
    let d = Place::new(End::S3("slate-dst"), "dels-dst");
    let keep = dataset_n(5, 11);
    s.seed(&keep);
    let mut all = keep.clone();
    all.extend((0..30).map(|i| (format!("extra/x{i:03}"), bytes(900 + i, 10))));
    d.seed(&all);
    let mut c = slate_db(&db);
    c.args(["sync", "--once", &s.url(), &d.url(), "--transfers", "4"])
        .stdout(std::process::Stdio::null());
    let mut child = Child(c.spawn().expect("spawn"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "30 deletes with 4 transfers did not finish within 2 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
    assert_same(&d.read(), &keep);
}

#[test]
fn max_age_is_the_sources_age_not_the_destinations() {
    // a destination's times say when slate wrote it: with --max-age, a key whose source is
    // older is left alone (not copied, not deleted), whatever its replica's time
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let s = Place::new(End::Local, "age-src");
    let d = Place::new(End::S3("slate-dst"), "age-dst");
    let data: BTreeMap<String, Vec<u8>> = [("old.txt", &b"old"[..]), ("young.txt", b"young")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    s.seed(&data);
    let three_days = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(s.root.join("old.txt"))
        .and_then(|f| f.set_modified(three_days))
        .expect("age old.txt");
    let out = sync(&db, &s.url(), &d.url(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same(&d.read(), &data);

    let out = sync(
        &db,
        &s.url(),
        &d.url(),
        &["--max-age", "1d", "--full", "--dry-run"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("delete: old.txt"),
        "an old source object's replica planned for deletion: {}",
        stdout(&out)
    );
    // the young file goes away at the source: its replica goes, the old one stays
    std::fs::remove_file(s.root.join("young.txt")).expect("rm");
    let out = sync(&db, &s.url(), &d.url(), &["--max-age", "1d", "--full"]);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(d.read().keys().collect::<Vec<_>>(), vec!["old.txt"]);
}
