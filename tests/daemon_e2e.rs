//! The daemon (`slate sync SRC DST` without --once) on a local folder → moto S3: creates,
//! overwrites, deletes, a burst of duplicates and folder moves reach the destination; SIGTERM
//! stops it cleanly; a SIGKILL and a restart lose nothing.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Starts the daemon and waits until it follows changes. The caller stops it with `stop`.
#[allow(clippy::zombie_processes)]
fn start(db: &std::path::Path, src: &str, dst: &str, log: &std::path::Path) -> Child {
    let mut c = slate_db(db);
    let err = std::fs::File::create(log).expect("log");
    c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
        .stdout(Stdio::null())
        .stderr(err);
    let mut child = c.spawn().expect("spawn daemon");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(log) {
            let _ = f.read_to_string(&mut text);
        }
        if text.contains("following changes") {
            return child;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("daemon did not start: {text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_equal(db: &std::path::Path, src: &str, dst: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = slate_db(db);
        c.args(["diff", src, dst, "--json"]);
        let out = c.output().expect("diff");
        if out.status.code() == Some(0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not equal in time: {}",
            stdout(&out)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn stop(mut child: Child, signal: i32) -> Option<i32> {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    child.wait().expect("wait").code()
}

fn local_files(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    read_local(root)
}

#[test]
fn local_folder_daemon_follows_every_kind_of_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let log = dir.path().join("daemon.log");
    let s = Place::new(End::Local, "dmn-src");
    let d = Place::new(End::S3("slate-dst"), "dmn-dst");
    let initial: BTreeMap<String, Vec<u8>> = (0..40)
        .map(|i| (format!("dir{}/f{i}.bin", i % 4), bytes(i, 100 + i as usize)))
        .collect();
    s.seed(&initial);
    let (su, du) = (s.url(), d.url());
    let daemon = start(&db, &su, &du, &log);
    assert_same(&d.read(), &initial);

    // creates (nested), overwrites (same size too), deletes
    std::fs::create_dir_all(s.root.join("new/deep")).expect("mkdir");
    for i in 0..10 {
        std::fs::write(
            s.root.join(format!("new/deep/n{i}.txt")),
            bytes(100 + i, 64),
        )
        .expect("write");
    }
    std::fs::write(s.root.join("dir0/f0.bin"), bytes(999, 100)).expect("same size");
    std::fs::write(s.root.join("dir1/f1.bin"), bytes(998, 5000)).expect("other size");
    for i in [2, 6, 10] {
        std::fs::remove_file(s.root.join(format!("dir{}/f{i}.bin", i % 4))).expect("rm");
    }
    // a burst of duplicates on one key: the last write wins
    for i in 0..50u64 {
        std::fs::write(s.root.join("dir3/f3.bin"), bytes(5000 + i, 200)).expect("burst");
    }
    // a folder moved in from outside, and one removed as a whole
    let outside = dir.path().join("outside");
    seed_local(
        &outside,
        &[
            ("m/a.txt".to_string(), b"moved in".to_vec()),
            ("m/b.txt".to_string(), b"too".to_vec()),
        ]
        .into(),
    );
    std::fs::rename(outside.join("m"), s.root.join("moved")).expect("mv in");
    std::fs::remove_dir_all(s.root.join("dir2")).expect("rm -r");

    wait_equal(&db, &su, &du);
    assert_same(&d.read(), &local_files(&s.root));
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0), "SIGTERM exits 0");

    // SIGKILL right after changes, then restart: nothing is lost
    let daemon = start(&db, &su, &du, &log);
    std::fs::write(s.root.join("after-kill.txt"), b"x").expect("write");
    std::fs::remove_file(s.root.join("dir0/f4.bin")).expect("rm");
    std::thread::sleep(Duration::from_millis(150));
    stop(daemon, libc::SIGKILL);
    std::fs::write(s.root.join("while-down.txt"), b"y").expect("write"); // no daemon to see it
    let daemon = start(&db, &su, &du, &log);
    wait_equal(&db, &su, &du);
    assert_same(&d.read(), &local_files(&s.root));
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}
