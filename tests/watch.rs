//! The local-folder daemon when its input is big: the kernel's event queue overflows (the
//! lost events come back as a rescan of the folder, reconciled at once, not at the next drift
//! check), and a folder of 100,000 files moved in at once (one prefix event, expanded a page
//! at a time with the daemon's memory bounded all along).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const QUEUED: &str = "/proc/sys/fs/inotify/max_queued_events";

/// Sets the kernel's inotify queue length for instances made from now on; puts the old
/// value back when dropped.
struct QueueLimit(String);

impl QueueLimit {
    fn set(n: u32) -> QueueLimit {
        let old = std::fs::read_to_string(QUEUED).expect("read max_queued_events");
        std::fs::write(QUEUED, n.to_string())
            .unwrap_or_else(|e| panic!("this test lowers {QUEUED} and needs to run as root: {e}"));
        QueueLimit(old.trim().to_string())
    }
}

impl Drop for QueueLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(QUEUED, &self.0);
    }
}

fn daemon(db: &std::path::Path, src: &str, dst: &str, log: &std::path::Path) -> Child {
    let mut c = slate_db(db);
    c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    spawn_daemon(c, log, 1)
}

#[test]
fn an_overflowing_event_queue_is_a_rescan_not_a_loss() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let src = Place::new(End::Local, "ovf-src");
    let dst = Place::new(End::Local, "ovf-dst");
    src.seed(&[("first".to_string(), b"1".to_vec())].into());
    // a queue of 32 events for the daemon's inotify instance (made at its start)
    let limit = QueueLimit::set(32);
    let d = daemon(&db, &src.url(), &dst.url(), &log);
    drop(limit);
    // thousands of files at once: three events each, far more than 32 at a time
    for i in 0..3_000 {
        std::fs::write(src.root.join(format!("f{i:05}")), b"x").expect("write");
    }
    wait_equal_within(&db, &src.url(), &dst.url(), 120, Some(&log));
    let text = read_log(&log);
    assert!(
        text.contains("events were lost"),
        "the queue did not overflow, so the test proved nothing: {}",
        log_tail(&text)
    );
    assert_eq!(d.stop(libc::SIGTERM), Some(0));
}

/// Peak resident memory of a running process (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
}

#[test]
fn a_folder_of_100000_files_moved_in_expands_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let src = Place::new(End::Local, "big-src");
    let dst = Place::new(End::Local, "big-dst");
    src.seed(&[("first".to_string(), b"1".to_vec())].into());
    // the folder is made outside the watched root, then moved in: one event for 100,000 keys
    let outside = dir.path().join("staging/big");
    for d in 0..100 {
        let sub = outside.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        for f in 0..1_000 {
            std::fs::write(sub.join(format!("f{f:04}")), b"0123456789").expect("write");
        }
    }
    let d = daemon(&db, &src.url(), &dst.url(), &log);
    let pid = d.id();
    let before = peak_rss_mib(pid).expect("rss");
    std::fs::rename(&outside, src.root.join("big")).expect("move in");
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut peak = before;
    loop {
        peak = peak.max(peak_rss_mib(pid).unwrap_or(0));
        let n = walk_count(&dst.root.join("big"));
        if n == 100_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{n} of 100,000 files after 10 minutes: {}",
            log_tail(&read_log(&log))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_equal_within(&db, &src.url(), &dst.url(), 120, Some(&log));
    eprintln!("peak RSS before {before} MiB, during the expansion {peak} MiB");
    // the expansion holds one page of keys at a time: the daemon's memory must not grow with
    // the 100,000 keys (a list of them all, as before, took far more)
    assert!(
        peak < 96,
        "peak RSS {peak} MiB during a prefix event of 100,000 keys"
    );
    assert_eq!(d.stop(libc::SIGTERM), Some(0));
}

fn walk_count(root: &std::path::Path) -> usize {
    let Ok(rd) = std::fs::read_dir(root) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk_count(&e.path())
            } else {
                1
            }
        })
        .sum()
}
