//! One reconcile of a pair at a time (rule 9): a second `sync --once` of a pair that is being
//! reconciled stops with exit 2 naming the holder, `--wait` waits for it, and a holder killed
//! with -9 holds nothing. Real runs of the binary against moto; every check that two runs
//! overlapped is made while the first one provably still runs.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use slate::state::leases::Leases;
use slate::state::manifest::Manifest;

/// Waits until the pair's lease is held; returns the holder's PID.
fn wait_for_lease(db: &std::path::Path, child: &mut Child) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(m) = Manifest::open(db) {
            let pairs = m.pairs().unwrap_or_default();
            if let Some(p) = pairs.first() {
                if let Ok(Some(h)) = Leases::new(&m).holder(&format!("pair:{}", p.id)) {
                    return h.pid;
                }
            }
        }
        assert!(
            child.0.try_wait().expect("wait").is_none(),
            "the first run ended before it took the lease"
        );
        assert!(Instant::now() < deadline, "no lease within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn many(n: usize) -> BTreeMap<String, Vec<u8>> {
    (0..n)
        .map(|i| (format!("d{:02}/f{i:05}", i % 20), bytes(i as u64, 512)))
        .collect()
}

/// Seeds 2,000 objects in a local folder and starts a quiet `sync --once` of them to moto
/// (several seconds), returning the run once it holds the pair's lease, and the holder's PID.
fn first_run_holding_the_lease(
    db: &std::path::Path,
    tag: &str,
) -> (Place, Place, BTreeMap<String, Vec<u8>>, Child, u32) {
    let src = Place::new(End::Local, &format!("{tag}-src"));
    let dst = Place::new(End::S3("slate-dst"), &format!("{tag}-dst"));
    let data = many(2_000);
    src.seed(&data);
    let mut c = slate_db(db);
    c.args(["sync", "--once", &src.url(), &dst.url(), "--quiet"]);
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut first = Child(c.spawn().expect("spawn"));
    let holder = wait_for_lease(db, &mut first);
    (src, dst, data, first, holder)
}

#[test]
fn two_reconciles_of_one_pair_never_run_at_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    // the first run copies 2,000 objects to moto (several seconds)
    let (src, dst, data, mut first, holder) = first_run_holding_the_lease(&db, "lease");
    assert_eq!(holder, first.0.id(), "the first run holds the lease");

    // a second run of the same pair stops at once, naming the holder
    let mut c = slate_db(&db);
    c.args(["sync", "--once", &src.url(), &dst.url()]);
    let out = c.output().expect("run");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is busy: held by PID") && err.contains(&holder.to_string()),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        first.0.try_wait().expect("wait").is_none(),
        "the first run must still be running when the second is refused"
    );

    // --wait waits for it, then finds nothing left to do
    let mut c = slate_db(&db);
    c.args(["sync", "--once", &src.url(), &dst.url(), "--wait"]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = first.0.wait().expect("wait");
    assert!(status.success(), "the first run failed");
    assert!(
        stdout(&out).contains("no data transferred"),
        "the waiting run came after the first: {}",
        stdout(&out)
    );
    assert_same(&dst.read(), &data);
}

#[test]
fn a_holder_killed_with_9_holds_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let (src, dst, data, mut first, _) = first_run_holding_the_lease(&db, "lease-kill");
    first.0.kill().expect("kill -9");
    let status = first.0.wait().expect("wait");
    assert!(!status.success(), "the kill landed mid-run");

    // the lease's expiry is 30 s away, but its holder is gone: the next run (which does not
    // wait: a held lease would stop it with exit 2) goes ahead now
    let mut c = slate_db(&db);
    c.args(["sync", "--once", &src.url(), &dst.url()]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same(&dst.read(), &data);
}
