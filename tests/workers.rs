//! Competing workers: several `slate sync` daemons on one PostgreSQL state consume one cloud
//! queue; each key is applied by one worker at a time; a worker killed with -9 loses its keys
//! to the others when its claims expire, and the replica still ends equal.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use object_store::ObjectStoreExt;

/// How long a claim lives in these tests (`--claim-secs`).
const CLAIM_SECS: i64 = 6;

/// (key, worker, started_at, finished_at, outcome) of every apply recorded.
fn applies(pg: &PgDb) -> Vec<(String, String, i64, i64, String)> {
    pg.query("SELECT key, worker, started_at, finished_at, outcome FROM applies ORDER BY key, started_at")
        .into_iter()
        .map(|r| {
            let s = |i: usize| r[i].clone().unwrap_or_default();
            let n = |i: usize| s(i).parse::<i64>().expect("a number");
            (s(0), s(1), n(2), n(3), s(4))
        })
        .collect()
}

/// Fails if two different workers' applies of one key overlap in time.
fn assert_one_worker_at_a_time(rows: &[(String, String, i64, i64, String)]) {
    let mut by_key: BTreeMap<&str, Vec<(i64, i64, &str)>> = BTreeMap::new();
    for (k, w, s, f, _) in rows {
        by_key.entry(k).or_default().push((*s, *f, w));
    }
    for (k, mut v) in by_key {
        v.sort();
        for pair in v.windows(2) {
            let ((_, f0, w0), (s1, _, w1)) = (pair[0], pair[1]);
            assert!(
                w0 == w1 || s1 >= f0,
                "key {k} applied by {w0} until {f0} and by {w1} from {s1}: at the same time"
            );
        }
    }
}

#[test]
fn three_workers_share_one_sqs_queue_and_one_dies() {
    let pg = PgDb::new("workers_sqs");
    let db = pg.path();
    let (bucket, queue) = sqs_bucket("w");
    let store = s3(&bucket);
    let initial: BTreeMap<String, Vec<u8>> = (0..500)
        .map(|i| {
            (
                format!("k{i:03}.bin"),
                bytes(i, 200 + (i as usize % 7) * 300),
            )
        })
        .collect();
    rt().block_on(seed(&store, "data", &initial));

    let dir = tempfile::tempdir().expect("tmp");
    let dst = dir.path().join("replica");
    let su = format!("s3://{bucket}/data");
    let du = dst.display().to_string();
    let events = format!("sqs://{queue}");
    let claim = CLAIM_SECS.to_string();
    let extra = ["--events", events.as_str(), "--claim-secs", claim.as_str()];
    // started together: one backfills, the others wait for the pair's lease and find it done
    let mut workers: Vec<Daemon> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..3)
            .map(|i| {
                let (db, su, du, log) = (&db, &su, &du, dir.path().join(format!("w{i}.log")));
                s.spawn(move || Daemon::start(db, su, du, &extra, &log))
            })
            .collect();
        starts
            .into_iter()
            .map(|h| h.join().expect("start"))
            .collect()
    });
    wait_equal_within(&db, &su, &du, 120, Some(&workers[0].log));
    let backfills = workers
        .iter()
        .filter(|w| w.log_text().contains("copied 500 (500 new"))
        .count();
    assert_eq!(backfills, 1, "one worker backfills the pair");

    // a burst of 200 changes: overwrites, new keys and deletes
    let burst_start = now_ms();
    let store2 = store.clone();
    let burst = std::thread::spawn(move || {
        rt().block_on(async {
            use futures::StreamExt;
            futures::stream::iter(0..200u64)
                .map(|i| {
                    let store = store2.clone();
                    async move {
                        let path = object_store::path::Path::from(match i {
                            0..=119 => format!("data/k{:03}.bin", i * 4),
                            120..=159 => format!("data/new{i}.bin"),
                            _ => format!("data/k{:03}.bin", (i - 160) * 4 + 1),
                        });
                        if i < 160 {
                            store
                                .put(&path, bytes(1000 + i, 777).into())
                                .await
                                .expect("put");
                        } else {
                            store.delete(&path).await.expect("delete");
                        }
                    }
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await;
        })
    });

    // kill worker 1 while it holds claims on burst keys (the kill lands mid-run)
    let pid = workers[1].child.id();
    let mine = format!("claimed_by LIKE '{pid}:%'");
    wait_for("worker 1 holding claims of the burst", 60, || {
        pg.count(&format!("SELECT COUNT(*) FROM inbox WHERE {mine}")) > 0
    });
    workers[1].child.kill9();
    let killed_at = now_ms();
    let held: Vec<(String, i64)> = pg
        .query(&format!("SELECT key, claim_until FROM inbox WHERE {mine}"))
        .into_iter()
        .map(|r| {
            let key = r[0].clone().unwrap_or_default();
            (key, r[1].clone().unwrap_or_default().parse().unwrap_or(0))
        })
        .collect();
    assert!(!held.is_empty(), "the killed worker held keys when it died");
    burst.join().expect("burst");

    let want = rt().block_on(read_all(&store, "data"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = read_local(&dst);
        let pending = pg.count("SELECT COUNT(*) FROM inbox");
        if got == want && pending == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica not equal within 120 s: {} keys pending, {} vs {} objects\n{}",
            pending,
            got.len(),
            want.len(),
            log_tail(&workers[0].log_text())
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_equal_within(&db, &su, &du, 60, Some(&workers[0].log));

    let rows = applies(&pg);
    assert_one_worker_at_a_time(&rows);
    // every changed key was applied after the burst began
    let applied: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.2 >= burst_start)
        .map(|r| r.0.as_str())
        .collect();
    for i in 0..200u64 {
        let key = match i {
            0..=119 => format!("k{:03}.bin", i * 4),
            120..=159 => format!("new{i}.bin"),
            _ => format!("k{:03}.bin", (i - 160) * 4 + 1),
        };
        assert!(applied.contains(key.as_str()), "{key} was never applied");
    }
    // the dead worker's keys were taken over by another once its claims expired, not later
    for (key, until) in &held {
        let by_other = rows
            .iter()
            .filter(|r| &r.0 == key && !r.1.starts_with(&format!("{pid}:")) && r.2 >= killed_at)
            .map(|r| r.2)
            .min();
        let Some(at) = by_other else {
            panic!("{key}, held by the killed worker, was never applied by another");
        };
        assert!(
            at <= until + 5_000,
            "{key}: its claim expired at {until}, another worker took it only at {at}"
        );
    }
    // who applied: all three workers had a share; the survivors are up
    let workers_seen: BTreeSet<String> = rows
        .iter()
        .map(|r| r.1.split(':').next().unwrap_or("").to_string())
        .collect();
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        *per.entry(r.1.split(':').next().unwrap_or("")).or_default() += 1;
    }
    eprintln!(
        "applies per worker (PID): {per:?}; worker {pid} killed holding {} keys",
        held.len()
    );
    assert!(workers_seen.len() >= 2, "{workers_seen:?}");
    assert!(
        workers[0].alive() && workers[2].alive(),
        "the survivors are up"
    );
    assert_eq!(workers[0].stop(), Some(0));
    assert_eq!(workers[2].stop(), Some(0));
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
