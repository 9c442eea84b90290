//! The daemon's delete brake (issue 23): a pair of 200 files, 150 deleted at the source; the
//! brake engages at half, says why (log, `GET /pairs`, `/readyz`, metrics, `slate pairs`),
//! copies go on, a restart applies nothing more, and `slate pairs release-deletes` applies
//! the rest.

mod common;

use std::path::Path;

use common::*;

fn get(addr: &str, path: &str) -> (u16, String) {
    let r = reqwest::blocking::get(format!("http://{addr}{path}")).expect("get");
    (r.status().as_u16(), r.text().expect("body"))
}

fn brake_of(addr: &str) -> serde_json::Value {
    let (st, body) = get(addr, "/pairs");
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["pairs"][0]["delete_brake"].clone()
}

fn count(dir: &Path) -> usize {
    read_local(dir).len()
}

#[test]
fn mass_deletes_meet_the_brake_copies_go_on_and_a_release_applies_the_rest() {
    let dir = tempfile::tempdir().expect("tmp");
    let (src, dst, db, log) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("s.db"),
        dir.path().join("d.log"),
    );
    std::fs::create_dir_all(&src).expect("src");
    std::fs::create_dir_all(&dst).expect("dst");
    for i in 0..200 {
        std::fs::write(src.join(format!("f{i:03}.txt")), format!("file {i}")).expect("write");
    }
    let (su, du) = (src.display().to_string(), dst.display().to_string());
    // the default brake (50% per 10 minutes), said explicitly: the suite's other daemons run
    // without one
    let extra = [
        "--listen",
        "127.0.0.1:0",
        "--no-token",
        "--delete-brake",
        "50%",
    ];
    let mut daemon = Daemon::start(&db, &su, &du, &extra, &log);
    let addr = listen_addr(&daemon.log_text()).expect("listening");
    assert_eq!(count(&dst), 200, "the backfill");

    // 150 deleted at the source (a mistaken rm): at most half of the 200 go at the destination
    for i in 0..150 {
        std::fs::remove_file(src.join(format!("f{i:03}.txt"))).expect("rm");
    }
    wait_for("the brake engaged with 50 deletes held", 120, || {
        let b = brake_of(&addr);
        b["engaged"] == true && b["held"] == 50
    });
    assert_eq!(count(&dst), 100, "exactly the limit deleted (50% of 200)");
    let b = brake_of(&addr);
    assert!(
        b["reason"].as_str().unwrap_or("").contains("limit of 100"),
        "{b}"
    );
    // said at once: the log, /readyz (still 200: the pair follows its events), the metrics
    let text = daemon.log_text();
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("delete brake engaged")),
        "{}",
        log_tail(&text)
    );
    let (st, ready) = get(&addr, "/readyz");
    assert_eq!(st, 200, "{ready}");
    assert!(
        ready.contains("delete_brakes") && ready.contains("limit of 100"),
        "{ready}"
    );
    let (_, metrics) = get(&addr, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("slate_deletes_held{") && l.ends_with(" 50")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("slate_delete_brake_engaged{") && l.ends_with(" 1")),
        "{metrics}"
    );
    // copies go on
    std::fs::write(src.join("new.txt"), b"written after").expect("write");
    wait_for("a new file copied while the brake holds", 60, || {
        std::fs::read(dst.join("new.txt")).ok().as_deref() == Some(&b"written after"[..])
    });
    // `slate pairs` says it
    let mut c = slate_db(&db);
    c.arg("pairs");
    let table = stdout(&run(c));
    assert!(table.contains("DELETE BRAKE ENGAGED: 50"), "{table}");

    // a restart (which reconciles a local folder at once) applies nothing more
    assert_eq!(daemon.stop(), Some(0));
    let mut daemon = Daemon::start(&db, &su, &du, &extra, &log);
    let addr = listen_addr(&daemon.log_text()).expect("listening");
    wait_for("the restarted pair holds the 50 deletes again", 60, || {
        brake_of(&addr)["held"] == 50
    });
    assert_eq!(count(&dst), 101, "nothing more deleted by the restart");

    // the operator looked: release
    let mut c = slate_db(&db);
    c.args(["pairs", "release-deletes", &su, &du]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("50 held delete(s) released"),
        "{}",
        stdout(&out)
    );
    wait_for("the released deletes applied", 60, || count(&dst) == 51);
    let b = brake_of(&addr);
    assert_eq!(
        (b["engaged"].clone(), b["held"].clone()),
        (false.into(), 0.into()),
        "{b}"
    );
    assert_eq!(read_local(&dst), read_local(&src));
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn held_deletes_can_be_dropped_and_the_destination_keeps_them() {
    let dir = tempfile::tempdir().expect("tmp");
    let (src, dst, db, log) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("s.db"),
        dir.path().join("d.log"),
    );
    std::fs::create_dir_all(&src).expect("src");
    std::fs::create_dir_all(&dst).expect("dst");
    for i in 0..40 {
        std::fs::write(src.join(format!("g{i:02}")), format!("{i}")).expect("write");
    }
    let (su, du) = (src.display().to_string(), dst.display().to_string());
    // a count limit: 5 deletes per hour
    let extra = [
        "--listen",
        "127.0.0.1:0",
        "--no-token",
        "--delete-brake",
        "15",
        "--delete-brake-window",
        "1h",
    ];
    let mut daemon = Daemon::start(&db, &su, &du, &extra, &log);
    let addr = listen_addr(&daemon.log_text()).expect("listening");
    for i in 0..30 {
        std::fs::remove_file(src.join(format!("g{i:02}"))).expect("rm");
    }
    wait_for("15 deleted, 15 held", 120, || {
        brake_of(&addr)["held"] == 15 && count(&dst) == 25
    });
    let pairs: serde_json::Value = serde_json::from_str(&get(&addr, "/pairs").1).expect("json");
    let id = pairs["pairs"][0]["id"].as_i64().expect("id");
    // over the API: a POST needs JSON
    let c = reqwest::blocking::Client::new();
    let r = c
        .post(format!("http://{addr}/pairs/{id}/drop-deletes"))
        .header("content-type", "application/json")
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = r.json().expect("json");
    assert_eq!(v["dropped"], 15, "{v}");
    assert_eq!(brake_of(&addr)["engaged"], false);
    assert_eq!(
        count(&dst),
        25,
        "the destination keeps the dropped deletes' objects"
    );
    assert_eq!(daemon.stop(), Some(0));
}

/// Every file under `dir` whose name starts with `key.` (a backup of `key`), by content.
fn backups_of(dir: &Path, key: &str) -> Vec<Vec<u8>> {
    read_local(dir)
        .into_iter()
        .filter(|(k, _)| k.starts_with(&format!("{key}.")))
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn backup_dir_keeps_what_deletes_and_overwrites_remove() {
    let dir = tempfile::tempdir().expect("tmp");
    let (src, dst, trash, db, log) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("trash"),
        dir.path().join("s.db"),
        dir.path().join("d.log"),
    );
    std::fs::create_dir_all(src.join("sub")).expect("src");
    std::fs::create_dir_all(&dst).expect("dst");
    for i in 0..5 {
        std::fs::write(src.join(format!("sub/k{i}")), format!("version 1 of {i}")).expect("w");
    }
    let (su, du) = (src.display().to_string(), dst.display().to_string());
    let td = trash.display().to_string();
    // a backup inside the destination is refused, naming it
    let mut c = slate_db(&db);
    c.args([
        "sync",
        &su,
        &du,
        "--once",
        "--backup-dir",
        &format!("{du}/trash"),
    ]);
    let out = c.output().expect("sync");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--backup-dir"), "{}", stderr(&out));

    let mut daemon = Daemon::start(&db, &su, &du, &["--backup-dir", &td], &log);
    assert_eq!(read_local(&dst).len(), 5);
    // two deleted, two overwritten at the source
    for i in 0..2 {
        std::fs::remove_file(src.join(format!("sub/k{i}"))).expect("rm");
    }
    for i in 2..4 {
        std::fs::write(src.join(format!("sub/k{i}")), format!("version 2 of {i}")).expect("w");
    }
    wait_for("the deletes and overwrites applied", 60, || {
        read_local(&dst) == read_local(&src)
    });
    for i in 0..4 {
        let kept = backups_of(&trash, &format!("sub/k{i}"));
        assert_eq!(
            kept,
            vec![format!("version 1 of {i}").into_bytes()],
            "sub/k{i}: {:?}",
            read_local(&trash).keys().collect::<Vec<_>>()
        );
    }
    assert!(
        backups_of(&trash, "sub/k4").is_empty(),
        "an untouched key keeps no backup"
    );
    assert_eq!(daemon.stop(), Some(0));

    // the same through --once to a bucket: the backup is a prefix of the destination's bucket
    let p = unique("bk");
    let bucket_dst = format!("s3://slate-dst/{p}/data");
    let bucket_trash = format!("s3://slate-dst/{p}/trash");
    let mut c = slate_db(&db);
    c.args(["sync", &su, &bucket_dst, "--once"]);
    assert!(run(c).status.success());
    std::fs::write(src.join("sub/k4"), b"version 2 of 4").expect("w");
    std::fs::remove_file(src.join("sub/k2")).expect("rm");
    let mut c = slate_db(&db);
    c.args([
        "sync",
        &su,
        &bucket_dst,
        "--once",
        "--backup-dir",
        &bucket_trash,
    ]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = rt().block_on(read_all(&s3("slate-dst"), &format!("{p}/trash")));
    let of = |k: &str| -> Vec<Vec<u8>> {
        kept.iter()
            .filter(|(name, _)| name.starts_with(&format!("{k}.")))
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(
        of("sub/k4"),
        vec![b"version 1 of 4".to_vec()],
        "{:?}",
        kept.keys()
    );
    assert_eq!(
        of("sub/k2"),
        vec![b"version 2 of 2".to_vec()],
        "{:?}",
        kept.keys()
    );

    // objects over S3's CopyObject limit (5 GiB; lowered here to 4 bytes) are streamed
    // through slate into the backup: the same bytes and headers land there
    std::fs::write(src.join("sub/k4"), b"version 3 of 4").expect("w");
    std::fs::remove_file(src.join("sub/k3")).expect("rm");
    let mut c = slate_db(&db);
    c.args([
        "sync",
        &su,
        &bucket_dst,
        "--once",
        "--backup-dir",
        &bucket_trash,
    ])
    .env("SLATE_TEST_COPY_LIMIT", "4");
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let kept = rt().block_on(read_all(&s3("slate-dst"), &format!("{p}/trash")));
    let of = |k: &str| -> Vec<Vec<u8>> {
        let mut v: Vec<(String, Vec<u8>)> = kept
            .iter()
            .filter(|(name, _)| name.starts_with(&format!("{k}.")))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        v.sort();
        v.into_iter().map(|(_, b)| b).collect()
    };
    assert!(
        of("sub/k4").contains(&b"version 2 of 4".to_vec()),
        "the overwritten version streamed into the backup: {:?}",
        kept.keys()
    );
    assert_eq!(
        of("sub/k3"),
        vec![b"version 2 of 3".to_vec()],
        "{:?}",
        kept.keys()
    );
    // streamed, not copied server-side: a multipart upload's ETag ("…-1")
    use object_store::ObjectStoreExt;
    let k3 = kept
        .keys()
        .find(|n| n.starts_with("sub/k3."))
        .expect("k3's backup")
        .clone();
    let head = rt()
        .block_on(s3("slate-dst").head(&object_store::path::Path::from(format!("{p}/trash/{k3}"))))
        .expect("head");
    assert!(
        head.e_tag.as_deref().is_some_and(|e| e.contains('-')),
        "{:?}",
        head.e_tag
    );
}

#[test]
fn a_daemon_with_no_delete_keeps_what_the_source_deletes() {
    let dir = tempfile::tempdir().expect("tmp");
    let (src, dst, db, log) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("s.db"),
        dir.path().join("d.log"),
    );
    std::fs::create_dir_all(&src).expect("src");
    for name in ["a.txt", "b.txt"] {
        std::fs::write(src.join(name), name).expect("write");
    }
    let (su, du) = (src.display().to_string(), dst.display().to_string());
    let mut daemon = Daemon::start(&db, &su, &du, &["--no-delete"], &log);
    assert_eq!(count(&dst), 2, "the backfill");
    std::fs::remove_file(src.join("b.txt")).expect("rm");
    // a write after the delete: once it is at the destination, the delete was reconciled too
    std::fs::write(src.join("c.txt"), b"after").expect("write");
    wait_for("c.txt copied", 60, || dst.join("c.txt").exists());
    wait_for("the delete's event reconciled", 60, || {
        daemon
            .log_text()
            .contains("kept at the destination (--no-delete)")
    });
    assert!(dst.join("b.txt").exists(), "--no-delete kept b.txt");
    assert_eq!(daemon.stop(), Some(0));
}
