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

/// The tests share one PostgreSQL server: the one that restarts it runs alone (write), the
/// others side by side (read).
static SERVER: std::sync::RwLock<()> = std::sync::RwLock::new(());

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
        // each apply against every earlier one still under way: the latest finish so far,
        // per worker
        let mut until: BTreeMap<&str, i64> = BTreeMap::new();
        for (s, f, w) in v {
            for (other, end) in &until {
                assert!(
                    *other == w || s >= *end,
                    "key {k} applied by {other} until {end} and by {w} from {s}: at the same time"
                );
            }
            let e = until.entry(w).or_insert(f);
            *e = (*e).max(f);
        }
    }
}

/// Writes an object of a source (and delivers its event where the store does not).
type Put = Box<dyn Fn(&str, &[u8]) + Send + Sync>;

/// A source bucket whose changes reach a cloud queue: how to write, delete and read it.
struct Source {
    url: String,
    /// `--events`
    events: String,
    put: Put,
    delete: Box<dyn Fn(&str) + Send + Sync>,
    read: Box<dyn Fn() -> BTreeMap<String, Vec<u8>> + Send + Sync>,
    /// What must live as long as the test (a subscription).
    _keep: Box<dyn std::any::Any>,
}

/// Runs `op(i)` for every i in `0..n`, 8 at a time.
fn in_parallel(n: u64, op: &(dyn Fn(u64) + Sync)) {
    std::thread::scope(|s| {
        for t in 0..8 {
            s.spawn(move || {
                for i in (t..n).step_by(8) {
                    op(i);
                }
            });
        }
    });
}

/// S3 on moto, whose notifications reach an SQS queue: a bucket of its own for each source. A
/// bucket has one notification configuration, so two tests on one bucket (as the SQS variant
/// and the restart test once were, both `slate-sqsw-PID`) each point it at their own queue, and
/// the later one takes every event of the other: the SQS variant's workers then heard nothing.
fn sqs_source() -> Source {
    static SOURCES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SOURCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (bucket, queue) = sqs_bucket(&format!("w{n}"));
    let store = s3(&bucket);
    let (w, d, r) = (store.clone(), store.clone(), store);
    Source {
        url: format!("s3://{bucket}/data"),
        events: format!("sqs://{queue}"),
        put: Box::new(move |k, data| {
            let path = object_store::path::Path::from(format!("data/{k}"));
            rt().block_on(w.put(&path, data.to_vec().into()))
                .expect("put");
        }),
        delete: Box::new(move |k| {
            let path = object_store::path::Path::from(format!("data/{k}"));
            rt().block_on(d.delete(&path)).expect("delete");
        }),
        read: Box::new(move || rt().block_on(read_all(&r, "data"))),
        _keep: Box::new(()),
    }
}

/// GCS on fake-gcs-server, which publishes each change to the Pub/Sub emulator's topic; a
/// pull subscription of the test's own.
fn pubsub_source() -> Source {
    let sub = Subscription::new("slate-workers", None);
    let prefix = unique("wk");
    let (p1, p2, p3) = (prefix.clone(), prefix.clone(), prefix.clone());
    Source {
        url: format!("gs://slate-src/{prefix}"),
        events: format!("pubsub://projects/test-project/subscriptions/{}", sub.0),
        put: Box::new(move |k, data| {
            let d = [(k.to_string(), data.to_vec())].into();
            rt().block_on(seed(&gcs_writer("slate-src"), &p1, &d));
        }),
        delete: Box::new(move |k| {
            let path = object_store::path::Path::from(format!("{p2}/{k}"));
            rt().block_on(gcs("slate-src").delete(&path))
                .expect("delete");
        }),
        read: Box::new(move || rt().block_on(read_all(&gcs("slate-src"), &p3))),
        _keep: Box::new(sub),
    }
}

/// Azure Blob on Azurite, each change followed by the event Event Grid would put on a Storage
/// Queue (no Event Grid emulator exists), sequencers increasing.
fn azqueue_source() -> Source {
    let prefix = unique("wk");
    let queue = unique("slate-wq").to_ascii_lowercase();
    let spec = format!("azqueue://devstoreaccount1/{queue}");
    // SAFETY of env: the test's own process reads these to reach Azurite's queue.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&spec).expect("queue");
    // one runtime for the queue's client: its pooled connections live in the runtime
    let qrt = std::sync::Arc::new(rt());
    qrt.block_on(q.create()).expect("create queue");
    let q = std::sync::Arc::new(q);
    let seq = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1000));
    let send =
        move |key: &str, kind: &str, size: usize, q: &slate::events::azqueue::AzQueueSource| {
            let n = seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let ev = blob_event("slate-src", key, kind, size, n, false);
            // Azurite closes idle keep-alive connections: a send on one it closed fails before
            // anything is stored, and is sent again (the test's own client, not slate's)
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                match qrt.block_on(q.send(&b64(&ev))) {
                    Ok(_) => break,
                    Err(e) if std::time::Instant::now() < deadline => {
                        eprintln!("send again after: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
        };
    let send = std::sync::Arc::new(send);
    let (p1, p2, p3) = (prefix.clone(), prefix.clone(), prefix.clone());
    let (q1, q2, s1, s2) = (q.clone(), q, send.clone(), send);
    Source {
        url: format!("az://slate-src/{prefix}"),
        events: spec,
        put: Box::new(move |k, data| {
            let d = [(k.to_string(), data.to_vec())].into();
            rt().block_on(seed(&az("slate-src"), &p1, &d));
            s1(&format!("{p1}/{k}"), "BlobCreated", data.len(), &q1);
        }),
        delete: Box::new(move |k| {
            let path = object_store::path::Path::from(format!("{p2}/{k}"));
            rt().block_on(az("slate-src").delete(&path))
                .expect("delete");
            s2(&format!("{p2}/{k}"), "BlobDeleted", 0, &q2);
        }),
        read: Box::new(move || rt().block_on(read_all(&az("slate-src"), &p3))),
        _keep: Box::new(()),
    }
}

/// The key the burst's change `i` (of 200) touches: 120 overwrites, 40 new keys, 40 deletes.
fn burst_key(i: u64) -> String {
    match i {
        0..=119 => format!("k{:03}.bin", i * 4),
        120..=159 => format!("new{i}.bin"),
        _ => format!("k{:03}.bin", (i - 160) * 4 + 1),
    }
}

#[test]
fn three_workers_share_one_sqs_queue_and_one_dies() {
    three_workers(sqs_source(), "workers_sqs");
}

#[test]
fn three_workers_share_one_pubsub_subscription_and_one_dies() {
    three_workers(pubsub_source(), "workers_pubsub");
}

#[test]
fn three_workers_share_one_azure_queue_and_one_dies() {
    three_workers(azqueue_source(), "workers_azq");
}

/// Three workers on one PostgreSQL and one queue: 500 objects backfilled, then a burst of 200
/// changes during which one worker is killed with -9 while it holds keys.
fn three_workers(src: Source, tag: &str) {
    let _shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let pg = PgDb::new(tag);
    let db = pg.path();
    in_parallel(500, &|i| {
        (src.put)(
            &format!("k{i:03}.bin"),
            &bytes(i, 200 + (i as usize % 7) * 300),
        );
    });

    let dir = tempfile::tempdir().expect("tmp");
    let dst = dir.path().join("replica");
    let su = src.url.clone();
    let du = dst.display().to_string();
    let claim = CLAIM_SECS.to_string();
    // a worker claims as many keys at a time as it applies at once: with `--transfers` 16
    // (where the adaptive count starts), 16; without, up to 128, whose copies wait for the
    // adaptive limit. A survivor then comes back for the dead worker's keys within about one
    // apply of their expiry, not after a batch of a hundred (seen 5.8 s late under load)
    let extra = [
        "--events",
        src.events.as_str(),
        "--claim-secs",
        claim.as_str(),
        "--transfers",
        "16",
    ];
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
    // the seeding's own 500 events (unchanged keys by now) are applied before the burst: the
    // claims looked for below are then the burst's (not the seeding's, still draining when the
    // replica is first equal), and an apply after the burst began is one of its changes
    wait_for("the events of the seeding applied", 120, || {
        pg.count("SELECT COUNT(*) FROM inbox") == 0
            && pg.count("SELECT COUNT(DISTINCT key) FROM applies") >= 500
    });

    // a burst of 200 changes: overwrites, new keys and deletes
    let burst_start = now_ms();
    let (pid, killed_at, held) = std::thread::scope(|s| {
        let burst = s.spawn(|| {
            in_parallel(200, &|i| {
                if i < 160 {
                    (src.put)(&burst_key(i), &bytes(1000 + i, 777));
                } else {
                    (src.delete)(&burst_key(i));
                }
            })
        });
        // kill the first worker seen holding claims on burst keys (the kill lands mid-run):
        // which one gets keys first depends on which its queue hands messages to. It is
        // frozen (SIGSTOP) before the kill, and killed only if it then holds claims that no
        // transaction is changing (SKIP LOCKED leaves out a settle it may have in flight): a
        // frozen worker settles nothing more, so it dies holding them
        let pids: Vec<u32> = workers.iter().map(|w| w.child.id()).collect();
        let mut victim = 0;
        wait_for("a worker holding claims of the burst", 90, || {
            let holders = pg.query(
                "SELECT claimed_by FROM inbox WHERE claimed_by IS NOT NULL
                 GROUP BY claimed_by ORDER BY COUNT(*) DESC LIMIT 1",
            );
            let Some(by) = holders.first().and_then(|r| r[0].clone()) else {
                return false;
            };
            let Some(i) = pids.iter().position(|p| by.starts_with(&format!("{p}:"))) else {
                return false;
            };
            freeze(&mut workers[i], true);
            let still = pg.query(&format!(
                "SELECT key FROM inbox WHERE claimed_by LIKE '{}:%' FOR SHARE SKIP LOCKED",
                pids[i]
            ));
            if still.is_empty() {
                freeze(&mut workers[i], false);
                return false;
            }
            victim = i;
            true
        });
        workers[victim].child.kill9();
        let pid = pids[victim];
        let mine = format!("claimed_by LIKE '{pid}:%'");
        let killed_at = now_ms();
        // FOR SHARE: waits for what PostgreSQL still finishes of the dead worker's (a settle
        // whose COMMIT it sent before it was frozen), so that a key it settled is not counted
        let held: Vec<(String, i64)> = pg
            .query(&format!(
                "SELECT key, claim_until FROM inbox WHERE {mine} FOR SHARE"
            ))
            .into_iter()
            .map(|r| {
                let key = r[0].clone().unwrap_or_default();
                (key, r[1].clone().unwrap_or_default().parse().unwrap_or(0))
            })
            .collect();
        assert!(!held.is_empty(), "the killed worker held keys when it died");
        burst.join().expect("burst");
        (pid, killed_at, held)
    });
    let victim = workers
        .iter()
        .position(|w| w.child.id() == pid)
        .unwrap_or(0);
    let mut workers: Vec<Daemon> = workers
        .into_iter()
        .enumerate()
        .filter_map(|(i, w)| (i != victim).then_some(w))
        .collect();

    let want = (src.read)();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // a worker killed mid-copy leaves its temporary file (hidden, slate's own name, the
        // PID in it), swept when a worker next starts on the host; nothing else may differ
        let mut got = read_local(&dst);
        got.retain(|k, _| !k.starts_with(&format!(".slate-tmp-{pid}-")));
        let pending = pg.count("SELECT COUNT(*) FROM inbox");
        if got == want && pending == 0 {
            break;
        }
        if Instant::now() >= deadline {
            let differ: Vec<&String> = got
                .keys()
                .chain(want.keys())
                .filter(|k| got.get(*k) != want.get(*k))
                .collect();
            let first = differ.first().map(|k| k.as_str()).unwrap_or("");
            let rows = pg.query(&format!(
                "SELECT worker, started_at, finished_at, outcome FROM applies WHERE key = '{first}'"
            ));
            let logs: Vec<String> = workers
                .iter()
                .map(|w| {
                    w.log_text()
                        .lines()
                        .filter(|l| l.contains(first))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect();
            panic!(
                "replica not equal within 120 s: {pending} keys pending, {} vs {} objects; \
                 differing: {differ:?}; applies of {first}: {rows:?}\n{}",
                got.len(),
                want.len(),
                logs.join("\n---\n")
            );
        }
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
        let key = burst_key(i);
        assert!(applied.contains(key.as_str()), "{key} was never applied");
    }
    // the dead worker's keys were taken over by another once its claims expired, not later
    let mut latest = i64::MIN;
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
        latest = latest.max(at - until);
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
        "applies per worker (PID): {per:?}; worker {pid} killed holding {} keys, taken over \
         at most {latest} ms after their claims expired",
        held.len()
    );
    assert!(workers_seen.len() >= 2, "{workers_seen:?}");
    assert!(
        workers.iter_mut().all(|w| w.alive()),
        "the survivors are up"
    );
    for w in &mut workers {
        assert_eq!(w.stop(), Some(0));
    }
}

/// Stops (SIGSTOP) or continues (SIGCONT) a worker.
fn freeze(w: &mut Daemon, stop: bool) {
    if let Ok(None) = w.child.try_wait() {
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(w.child.id() as i32, signal) };
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
#[test]
fn workers_reconnect_when_postgresql_restarts_and_lose_nothing() {
    let _alone = SERVER.write().unwrap_or_else(|e| e.into_inner());
    let src = sqs_source();
    let pg = PgDb::new("workers_restart");
    let db = pg.path();
    in_parallel(100, &|i| (src.put)(&format!("k{i:03}.bin"), &bytes(i, 500)));
    let dir = tempfile::tempdir().expect("tmp");
    let dst = dir.path().join("replica");
    let (su, du) = (src.url.clone(), dst.display().to_string());
    let claim = CLAIM_SECS.to_string();
    let extra = [
        "--events",
        src.events.as_str(),
        "--claim-secs",
        claim.as_str(),
    ];
    let mut workers: Vec<Daemon> = (0..2)
        .map(|i| Daemon::start(&db, &su, &du, &extra, &dir.path().join(format!("w{i}.log"))))
        .collect();
    wait_equal_within(&db, &su, &du, 120, Some(&workers[0].log));

    // 150 changes; PostgreSQL restarts when a third of them are applied
    let burst_start = now_ms();
    let restarted = std::thread::scope(|s| {
        let burst = s.spawn(|| {
            in_parallel(150, &|i| {
                if i < 120 {
                    (src.put)(&format!("k{:03}.bin", i % 100), &bytes(5000 + i, 600));
                } else {
                    (src.delete)(&format!("k{:03}.bin", i - 20));
                }
            })
        });
        wait_for("a third of the burst applied", 60, || {
            pg.count(&format!(
                "SELECT COUNT(*) FROM applies WHERE started_at >= {burst_start}"
            )) >= 50
        });
        let out = std::process::Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services.sh"))
            .arg("restart-postgres")
            .output()
            .expect("restart-postgres");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let restarted = now_ms();
        burst.join().expect("burst");
        restarted
    });

    let want = (src.read)();
    wait_for(
        "the replica equal to the source, nothing pending",
        120,
        || {
            read_local(&dst) == want
                && std::panic::catch_unwind(|| pg.count("SELECT COUNT(*) FROM inbox")).unwrap_or(1)
                    == 0
        },
    );
    wait_equal_within(&db, &su, &du, 60, Some(&workers[0].log));
    let rows = applies(&pg);
    assert_one_worker_at_a_time(&rows);
    // the restart landed mid-run: the workers went on applying changes after it
    let after = rows.iter().filter(|r| r.2 >= restarted).count();
    assert!(after > 0, "no change applied after the restart");
    eprintln!("{after} keys applied after the restart");
    for (i, w) in workers.iter_mut().enumerate() {
        assert!(w.alive(), "worker {i} is up:\n{}", log_tail(&w.log_text()));
    }
    for w in &mut workers {
        assert_eq!(w.stop(), Some(0));
    }
}

/// The old manifest layout (two rows per key) of a database at `db`: `sql` runs there after
/// the schema of slate before the rewrite (SQLite 12, PostgreSQL 5).
fn old_layout_rows() -> String {
    let mut sql = String::from(
        "INSERT INTO pairs (id, src, dst, created_at) VALUES (1, 's3://a/x', '/tmp/y', 5);\n",
    );
    for i in 0..300 {
        for side in [0, 1] {
            if side == 1 && i % 3 == 0 {
                continue; // not yet copied
            }
            sql.push_str(&format!(
                "INSERT INTO objects (pair_id, side, key, size, etag, last_modified, synced_at)
                 VALUES (1, {side}, 'd/{i:03}', {i}, '\"{:032x}\"', {}, 7);\n",
                i,
                1000 + i
            ));
        }
    }
    sql
}

fn schema_sql(dir: &str, upto: usize) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schema")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .expect("schema")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files[..upto]
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("schema file"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `slate ARGS --db DB`; returns (exit code, stdout, stderr).
fn slate_at(db: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = slate()
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("SLATE_DB")
        .output()
        .expect("slate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 24: the manifest's rewrite to one row per key happens in place, only through
/// `slate db migrate`, after `slate db backup`, and never while another slate process uses the
/// database: a worker starting on the old layout refuses and says what to do.
#[test]
fn the_manifest_is_rewritten_only_by_db_migrate_after_a_backup() {
    let dir = tempfile::tempdir().expect("tmp");
    let lite = dir.path().join("old.db");
    {
        let c = rusqlite::Connection::open(&lite).expect("sqlite");
        c.execute_batch(&schema_sql("sqlite", 12))
            .expect("schema 12");
        c.execute_batch("PRAGMA user_version = 12")
            .expect("version");
        c.execute_batch(&old_layout_rows()).expect("rows");
    }
    let pg = PgDb::new("dbmig");
    pg.query(&format!(
        "CREATE TABLE slate_schema (version BIGINT NOT NULL);\n{}\n\
         INSERT INTO slate_schema VALUES (5);\n{}",
        schema_sql("postgres", 5),
        old_layout_rows()
    ));
    for (db, name) in [(lite.clone(), "sqlite"), (pg.path(), "postgres")] {
        // a worker (any command) refuses the old layout and names the way out
        let (code, _, err) = slate_at(&db, &["pairs"]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(
            err.contains("slate db backup") && err.contains("slate db migrate"),
            "{name}: {err}"
        );
        assert!(
            !err.contains('\n') || err.lines().count() <= 2,
            "{name}: {err}"
        );

        // a backup of the old layout, as it is
        let backup = dir.path().join(format!("{name}.backup"));
        let (code, out, err) = slate_at(
            &db,
            &["db", "backup", "--to", &backup.display().to_string()],
        );
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("backed up"), "{name}: {out}");
        match name {
            "sqlite" => {
                let c = rusqlite::Connection::open(&backup).expect("backup");
                let rows: i64 = c
                    .query_row("SELECT COUNT(*) FROM objects", [], |r| r.get(0))
                    .expect("the old rows in the backup");
                assert_eq!(rows, 500);
            }
            _ => {
                let list = std::process::Command::new("pg_restore")
                    .arg("--list")
                    .arg(&backup)
                    .output()
                    .expect("pg_restore");
                let toc = String::from_utf8_lossy(&list.stdout);
                assert!(toc.contains("TABLE DATA public objects"), "{toc}");
            }
        }
        let (code, _, err) = slate_at(
            &db,
            &["db", "backup", "--to", &backup.display().to_string()],
        );
        assert_eq!(code, 1, "an existing file is not overwritten");
        assert!(err.contains("exists"), "{err}");

        // refused while another slate process uses the database
        let other = match name {
            "sqlite" => Some(
                std::process::Command::new("sleep")
                    .arg("60")
                    .stdin(std::fs::File::open(&lite).expect("open"))
                    .spawn()
                    .expect("sleep"),
            ),
            _ => None,
        };
        if let Some(mut other) = other {
            let (code, _, err) = slate_at(&db, &["db", "migrate"]);
            assert_eq!(code, 1, "{err}");
            assert!(
                err.contains(&format!("pid {}", other.id())),
                "names the process: {err}"
            );
            let _ = other.kill();
            let _ = other.wait();
        }
        let (code, out, err) = slate_at(&db, &["db", "migrate"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            out.contains("1 pair(s), 300 source and 200 destination object(s)"),
            "{name}: {out}"
        );
        let (code, out, err) = slate_at(&db, &["pairs"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("s3://a/x"), "{name}: {out}");
    }
    assert_eq!(pg.count("SELECT COUNT(*) FROM entries"), 300);
    assert_eq!(pg.count("SELECT COUNT(d_size) FROM entries"), 200);
}
