//! `slate check SRC DST`: a canary through each transport, with a daemon following the pair
//! on real emulators: a local folder (inotify), S3 through SQS (moto's own notifications),
//! GCS through Pub/Sub (fake-gcs-server's notifications), Azure through a Storage Queue (the
//! test posts the events Event Grid would, as the daemon tests do: Azurite emits none). Exit 1
//! with the wiring named when the bucket's notification entry is removed. A canary is left
//! out of `diff` and `--backup-dir`, and nothing of it stays behind.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

fn check(db: &std::path::Path, src: &str, dst: &str, timeout: &str) -> std::process::Output {
    let mut c = slate_db(db);
    c.args(["check", src, dst, "--timeout", timeout]);
    run(c)
}

/// The lines of a passing check, each step's latency among them.
fn assert_ok(out: &std::process::Output) {
    let said = stdout(out);
    assert_eq!(out.status.code(), Some(0), "{said}\n{}", stderr(out));
    for step in [
        "written to",
        "event stored after",
        "replica at",
        "delete event stored after",
        "replica deleted after",
    ] {
        assert!(said.contains(step), "{step}: {said}");
    }
    assert!(
        said.lines().last().unwrap_or("").starts_with("ok: "),
        "{said}"
    );
}

fn canaries_in(root: &std::path::Path) -> usize {
    std::fs::read_dir(root.join(".slate-canary"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_local_pair_passes_and_its_canary_stays_out_of_diff_and_backups() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let (src, dst, backup) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("backup"),
    );
    let data: BTreeMap<String, Vec<u8>> = (0..3)
        .map(|i| (format!("f{i}.bin"), bytes(i, 100)))
        .collect();
    seed_local(&src, &data);
    let (su, du) = (
        src.to_str().expect("utf-8").to_string(),
        dst.to_str().expect("utf-8").to_string(),
    );
    // every filter admits the canary, even one that would leave it out by name
    let mut daemon = Daemon::start(
        &db,
        &su,
        &du,
        &[
            "--backup-dir",
            backup.to_str().expect("utf-8"),
            "--include",
            "*.bin",
        ],
        &log,
    );
    let out = check(&db, &su, &du, "30s");
    assert_ok(&out);
    assert_eq!(canaries_in(&src), 0, "a canary left at the source");
    assert_eq!(canaries_in(&dst), 0, "a canary left at the destination");
    assert_eq!(
        read_local(&backup).len(),
        0,
        "--backup-dir keeps no canary: {:?}",
        read_local(&backup).keys().collect::<Vec<_>>()
    );
    // a canary in flight is no difference
    std::fs::create_dir_all(src.join(".slate-canary")).expect("mkdir");
    std::fs::write(src.join(".slate-canary/check-x-1-1"), b"in flight").expect("write");
    let mut c = slate_db(&db);
    c.args(["diff", &su, &du]);
    let out = run(c);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(daemon.stop(), Some(0));
    // without a daemon: no event, exit 1, the wiring named
    let out = check(&db, &su, &du, "2s");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no event for the canary within 2 s")
            && stderr(&out).contains("slate events check"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn s3_through_sqs_passes_and_fails_once_the_notification_entry_is_gone() {
    let (bucket, queue) = sqs_bucket("can");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let su = format!("s3://{bucket}/data");
    let du = replica.to_str().expect("utf-8").to_string();
    let mut daemon = Daemon::start(
        &db,
        &su,
        &du,
        &["--events", &format!("sqs://{queue}")],
        &log,
    );
    let out = check(&db, &su, &du, "30s");
    assert_ok(&out);
    // another team's deploy leaves the bucket without slate's entry
    let (st, body) = s3_raw(
        "PUT",
        &format!("/{bucket}?notification"),
        "<NotificationConfiguration><CloudFunctionConfiguration><Id>theirs</Id>\
         <CloudFunction>arn:aws:lambda:us-east-1:123456789012:function:f</CloudFunction>\
         <Event>s3:ObjectCreated:*</Event></CloudFunctionConfiguration></NotificationConfiguration>",
    );
    assert_eq!(st, 200, "{body}");
    let out = check(&db, &su, &du, "3s");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no event for the canary within 3 s"),
        "{}",
        stderr(&out)
    );
    // the failed check took its canary away again
    let left = rt().block_on(read_all(&s3(&bucket), "data/.slate-canary"));
    assert!(left.is_empty(), "{:?}", left.keys().collect::<Vec<_>>());
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn gcs_through_pubsub_passes() {
    let sub = Subscription::new("slate-canary", None);
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let prefix = unique("can");
    let su = format!("gs://slate-src/{prefix}");
    let du = replica.to_str().expect("utf-8").to_string();
    let spec = format!("pubsub://projects/test-project/subscriptions/{}", sub.0);
    let mut daemon = Daemon::start(&db, &su, &du, &["--events", &spec], &log);
    let out = check(&db, &su, &du, "30s");
    assert_ok(&out);
    assert_eq!(canaries_in(&replica), 0);
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn azure_through_a_storage_queue_passes() {
    let container = "slate-src";
    let prefix = unique("can");
    let queue = unique("slate-cq").to_ascii_lowercase();
    let spec = format!("azqueue://devstoreaccount1/{queue}");
    // SAFETY of env: the test's own process reads these to reach Azurite's queue.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&spec).expect("queue");
    rt().block_on(q.create()).expect("create queue");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let su = format!("az://{container}/{prefix}");
    let du = replica.to_str().expect("utf-8").to_string();
    let mut daemon = Daemon::start(&db, &su, &du, &["--events", &spec], &log);

    // Event Grid's part: each canary blob that appears or goes gets its event on the queue
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (stop, prefix) = (stop.clone(), prefix.clone());
        std::thread::spawn(move || {
            let store = az(container);
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            let mut seq = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let now = rt().block_on(read_all(&store, &format!("{prefix}/.slate-canary")));
                for (k, v) in &now {
                    if !seen.contains_key(k) {
                        seq += 1;
                        let key = format!("{prefix}/.slate-canary/{k}");
                        let ev = blob_event(container, &key, "BlobCreated", v.len(), seq, false);
                        rt().block_on(q.send(&b64(&ev))).expect("send");
                        seen.insert(k.clone(), v.len());
                    }
                }
                let gone: Vec<String> = seen
                    .keys()
                    .filter(|k| !now.contains_key(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    seq += 1;
                    let key = format!("{prefix}/.slate-canary/{k}");
                    let ev = blob_event(container, &key, "BlobDeleted", 0, seq, true);
                    rt().block_on(q.send(&b64(&ev))).expect("send");
                    seen.remove(&k);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let out = check(&db, &su, &du, "30s");
    stop.store(true, Ordering::Relaxed);
    feeder.join().expect("feeder");
    assert_ok(&out);
    let left = rt().block_on(read_all(&az(container), &prefix));
    assert!(left.is_empty(), "{:?}", left.keys().collect::<Vec<_>>());
    assert_eq!(daemon.stop(), Some(0));
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let r = reqwest::blocking::get(format!("http://{addr}{path}")).expect("get");
    (r.status().as_u16(), r.text().expect("body"))
}

fn pair_json(addr: &str) -> serde_json::Value {
    let (st, body) = get(addr, "/pairs");
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["pairs"][0].clone()
}

#[test]
fn the_daemons_canaries_mark_a_pair_degraded_when_its_events_stop() {
    let (bucket, queue) = sqs_bucket("cand");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let su = format!("s3://{bucket}/data");
    let du = replica.to_str().expect("utf-8").to_string();
    let events = format!("sqs://{queue}");
    let mut daemon = Daemon::start(
        &db,
        &su,
        &du,
        &[
            "--events",
            &events,
            "--canary-interval",
            "1s",
            "--listen",
            "127.0.0.1:0",
            "--no-token",
        ],
        &log,
    );
    let addr = listen_addr(&daemon.log_text()).expect("listening");
    wait_for("a passing canary in GET /pairs", 60, || {
        pair_json(&addr)["canary"]["ok"] == true
    });
    let p = pair_json(&addr);
    assert_eq!(p["health"], "ok", "{p}");
    assert!(p["canary"]["replica_ms"].as_u64().is_some(), "{p}");
    let (_, metrics) = get(&addr, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("slate_canary_ok{") && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("slate_canary_seconds{") && l.contains("step=\"replica\"")),
        "{metrics}"
    );

    // the bucket loses slate's entry: the next canary finds no event, the pair is degraded
    let (st, body) = s3_raw(
        "PUT",
        &format!("/{bucket}?notification"),
        "<NotificationConfiguration><CloudFunctionConfiguration><Id>theirs</Id>\
         <CloudFunction>arn:aws:lambda:us-east-1:123456789012:function:f</CloudFunction>\
         <Event>s3:ObjectCreated:*</Event></CloudFunctionConfiguration></NotificationConfiguration>",
    );
    assert_eq!(st, 200, "{body}");
    wait_for("the pair degraded", 90, || {
        pair_json(&addr)["health"] == "degraded"
    });
    let p = pair_json(&addr);
    assert!(
        p["canary"]["line"]
            .as_str()
            .unwrap_or("")
            .contains("no event for the canary"),
        "{p}"
    );
    let (st, ready) = get(&addr, "/readyz");
    assert_eq!(st, 200, "the pair still follows: {ready}");
    assert!(
        ready.contains("degraded") && ready.contains("no event for the canary"),
        "{ready}"
    );
    let (_, metrics) = get(&addr, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("slate_canary_ok{") && l.ends_with(" 0")),
        "{metrics}"
    );
    assert!(
        daemon
            .log_text()
            .contains("canary: no event for the canary"),
        "the log says it: {}",
        log_tail(&daemon.log_text())
    );
    // nothing of the failed canaries is left at the source
    let left = rt().block_on(read_all(&s3(&bucket), "data/.slate-canary"));
    assert!(left.is_empty(), "{:?}", left.keys().collect::<Vec<_>>());
    assert_eq!(daemon.stop(), Some(0));
}
