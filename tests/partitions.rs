//! Partitioned backfills: workers sharing one PostgreSQL state split a pair's backfill into
//! key ranges; each takes partitions with their lease; a worker killed with -9 in the middle
//! of one costs only that partition's unfinished part, which another worker finishes.

mod common;

use std::collections::BTreeSet;
use std::time::Instant;

use common::*;

use slate::engine::partition::PART_KEYS;

/// Objects in the source (ten partitions of 500 keys).
const OBJECTS: u64 = 5_000;

/// Partitions of the run.
const PARTS: u64 = OBJECTS / PART_KEYS;

/// Each worker's link (`--bwlimit`): a partition of 500 × 4 KiB takes it about 2 s, 4 s while
/// the worker's other slot runs one too.
const BWLIMIT: &str = "1M";

fn key(i: u64) -> String {
    // seven folders, so that partitions start and end inside folders
    format!("d{}/k{i:04}.bin", i % 7)
}

/// A worker: `slate sync` on the pair, not waited for (its backfill is what the test watches).
fn worker(db: &std::path::Path, src: &str, dst: &str, queue: &str, log: &std::path::Path) -> Child {
    let mut c = slate_db(db);
    c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
        .args(["--events", &format!("sqs://{queue}"), "--bwlimit", BWLIMIT])
        // the API without a token: this test reads GET /pairs; tokens are tests/api.rs's
        .args(["--listen", "127.0.0.1:0", "--no-token"])
        .env("RUST_LOG", "slate=debug,warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    Child(c.spawn().expect("slate sync"))
}

#[test]
fn three_workers_split_a_backfill_and_one_killed_mid_partition_costs_only_its_rest() {
    let pg = PgDb::new("parts");
    let db = pg.path();
    // a bucket without notifications, and a queue of its own that stays quiet: the backfill
    // alone brings the objects
    let bucket = format!("slate-parts-{}", std::process::id());
    let (st, body) = s3_raw("PUT", &format!("/{bucket}"), "");
    assert!(
        st == 200 || body.contains("BucketAlreadyOwnedByYou"),
        "bucket: {st} {body}"
    );
    let queue = unique("slate-parts-q");
    rt().block_on(async {
        sqs_client()
            .await
            .create_queue()
            .queue_name(&queue)
            .send()
            .await
            .expect("queue")
    });
    let store = s3(&bucket);
    let data: std::collections::BTreeMap<String, Vec<u8>> =
        (0..OBJECTS).map(|i| (key(i), bytes(i, 4096))).collect();
    rt().block_on(seed(&store, "data", &data));

    // the replica in another bucket: a local folder is each host's own, and workers on
    // several hosts do not split a pair whose destination is one
    let dir = tempfile::tempdir().expect("tmp");
    let dst_prefix = unique("parts-replica");
    let (su, du) = (
        format!("s3://{bucket}/data"),
        format!("s3://slate-dst/{dst_prefix}"),
    );
    let logs: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("w{i}.log")))
        .collect();
    let mut workers: Vec<Child> = logs
        .iter()
        .map(|log| worker(&db, &su, &du, &queue, log))
        .collect();
    let pids: Vec<u32> = workers.iter().map(|w| w.id()).collect();
    let logs_text = || {
        logs.iter()
            .map(|l| log_tail(&read_log(l)))
            .collect::<Vec<_>>()
            .join("\n---\n")
    };

    wait_for("the workers made their schema", 60, || {
        pg.count("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'parts'") == 1
    });
    // a partition held by a worker that has copied (and recorded) part of it: its worker dies
    let (mut victim, mut range) = (usize::MAX, (String::new(), String::new(), 0i64));
    let waited = Instant::now();
    while victim == usize::MAX {
        assert!(
            waited.elapsed().as_secs() < 120,
            "timed out: a worker part-way through a partition\n{}",
            logs_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        let held = pg.query(
            "SELECT p.idx, COALESCE(p.after_key, ''), COALESCE(p.through_key, ''), l.owner
             FROM parts p JOIN part_runs r ON r.id = p.run_id
             JOIN leases l ON l.name = 'pair:' || r.pair_id || '/run:' || r.id || '/part:' || p.idx
             WHERE p.state = 'pending' ORDER BY p.idx",
        );
        for row in held {
            let s = |i: usize| row[i].clone().unwrap_or_default();
            let (idx, after, through, owner) = (s(0), s(1), s(2), s(3));
            let upper = if through.is_empty() {
                String::new()
            } else {
                format!(" AND key <= '{through}'")
            };
            let recorded = pg.count(&format!(
                "SELECT COUNT(d_size) FROM entries WHERE key > '{after}'{upper}"
            ));
            if recorded < 100 {
                continue;
            }
            if let Some(i) = pids
                .iter()
                .position(|p| owner.starts_with(&format!("{p}:")))
            {
                victim = i;
                range = (after, through, idx.parse().expect("idx"));
                break;
            }
        }
    }
    // killed at once: a partition of 500 keys has a few seconds left once 100 are recorded
    workers[victim].kill9();
    // while the run goes on, a whole-pair reconcile of the pair is refused, naming a holder
    let out = run({
        let mut c = slate_db(&db);
        c.args(["sync", "--once", &su, &du]);
        c
    });
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("busy"), "{}", stderr(&out));
    let dead = pids[victim];
    let killed_part = range.2;

    wait_for("the partitioned run finished", 180, || {
        pg.count("SELECT COUNT(*) FROM part_runs WHERE finished_at IS NOT NULL") == 1
    });
    assert_eq!(
        pg.count("SELECT COUNT(*) FROM pairs WHERE last_sync_at IS NOT NULL"),
        1,
        "the run vouches for the pair\n{}",
        logs_text()
    );
    wait_equal_within(&db, &su, &du, 60, Some(&logs[(victim + 1) % 3]));
    let got = rt().block_on(read_all(&s3("slate-dst"), &dst_prefix));
    assert_same(&got, &data);

    // (idx, keys, state, attempts, done_by, copied)
    let parts: Vec<(i64, i64, String, i64, String, i64)> = pg
        .query("SELECT idx, keys, state, attempts, done_by, copied FROM parts ORDER BY idx")
        .into_iter()
        .map(|r| {
            let s = |i: usize| r[i].clone().unwrap_or_default();
            let n = |i: usize| s(i).parse::<i64>().expect("a number");
            (n(0), n(1), s(2), n(3), s(4), n(5))
        })
        .collect();
    eprintln!("partitions: {parts:?}; worker {dead} killed in partition {killed_part}");
    assert_eq!(parts.len(), PARTS as usize, "{parts:?}");
    assert_eq!(parts.iter().map(|p| p.1).sum::<i64>(), OBJECTS as i64);
    assert!(parts.iter().all(|p| p.2 == "done"), "{parts:?}");
    let by_pid = |by: &str| by.split(':').next().unwrap_or("").to_string();
    let killed = &parts[killed_part as usize];
    assert_ne!(
        by_pid(&killed.4),
        dead.to_string(),
        "finished by another worker"
    );
    assert!(killed.3 >= 2, "taken again after the kill: {killed:?}");
    assert!(
        killed.5 < killed.1,
        "the second taker copied only what the dead one had not: {killed:?}"
    );
    // every worker took partitions: the dead one its last, the others those they finished
    let mut takers: BTreeSet<String> = parts.iter().map(|p| by_pid(&p.4)).collect();
    takers.insert(dead.to_string());
    assert_eq!(takers.len(), 3, "{parts:?}");
    // any worker's API shows the run: every partition done, none failed
    let survivor = (victim + 1) % 3;
    let addr = listen_addr(&read_log(&logs[survivor])).expect("the survivor listens");
    let pairs: serde_json::Value = reqwest::blocking::get(format!("http://{addr}/pairs"))
        .expect("GET /pairs")
        .json()
        .expect("json");
    let run = &pairs["pairs"][0]["partitioned_run"];
    assert_eq!(run["purpose"], "daemon backfill", "{pairs}");
    assert_eq!(run["done"], PARTS, "{pairs}");
    assert_eq!(run["failed"], 0, "{pairs}");
    assert_eq!(run["pending"], 0, "{pairs}");
    assert_eq!(run["planned"], true, "{pairs}");
    assert!(run["finished_at"].is_string(), "{pairs}");
    for (i, w) in workers.iter_mut().enumerate() {
        if i != victim {
            assert!(matches!(w.try_wait(), Ok(None)), "the survivors are up");
            assert_eq!(w.signal(libc::SIGTERM), Some(0));
        }
    }
}
