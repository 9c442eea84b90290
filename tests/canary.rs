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
    // the figures of the run, for whoever reads the test's output
    eprintln!("{}", said.lines().last().unwrap_or(""));
}

/// Another team's deploy leaves the bucket's notification configuration with only its own
/// entry: slate's is gone.
fn lose_slates_entry(bucket: &str) {
    let (st, body) = s3_raw(
        "PUT",
        &format!("/{bucket}?notification"),
        "<NotificationConfiguration><CloudFunctionConfiguration><Id>theirs</Id>\
         <CloudFunction>arn:aws:lambda:us-east-1:123456789012:function:f</CloudFunction>\
         <Event>s3:ObjectCreated:*</Event></CloudFunctionConfiguration></NotificationConfiguration>",
    );
    assert_eq!(st, 200, "{body}");
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
    lose_slates_entry(&bucket);
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
    lose_slates_entry(&bucket);
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
    // stopped (mid-run, as likely as not), the daemon leaves none of its canaries behind
    assert_eq!(daemon.stop(), Some(0));
    let left = rt().block_on(read_all(&s3(&bucket), "data/.slate-canary"));
    assert!(left.is_empty(), "{:?}", left.keys().collect::<Vec<_>>());
}

#[test]
fn a_burst_of_changes_is_measured_against_the_freshness_objective() {
    let (bucket, queue) = sqs_bucket("fresh");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let su = format!("s3://{bucket}/data");
    let du = replica.to_str().expect("utf-8").to_string();
    let mut daemon = Daemon::start(
        &db,
        &su,
        &du,
        &[
            "--events",
            &format!("sqs://{queue}"),
            "--freshness-target",
            "5m",
            "--listen",
            "127.0.0.1:0",
            "--no-token",
        ],
        &log,
    );
    let addr = listen_addr(&daemon.log_text()).expect("listening");
    // 100 changes through the bucket's own notifications
    let burst: BTreeMap<String, Vec<u8>> = (0..100)
        .map(|i| (format!("b{i:03}.bin"), bytes(500 + i, 64)))
        .collect();
    rt().block_on(seed(&s3(&bucket), "data", &burst));
    wait_for("the burst at the replica", 120, || {
        read_local(&replica) == burst
    });
    wait_for("100 changes measured", 30, || {
        pair_json(&addr)["freshness"]["applied"].as_u64() >= Some(100)
    });
    let f = pair_json(&addr)["freshness"].clone();
    // the burst's figures, for whoever reads the test's output
    let (_, metrics) = get(&addr, "/metrics");
    for l in metrics.lines().filter(|l| {
        l.starts_with("slate_source_to_replica_seconds")
            || l.starts_with("slate_replication_lag_seconds")
    }) {
        eprintln!("{l}");
    }
    assert_eq!(f["target_secs"], 300, "{f}");
    assert_eq!(f["within_target_ratio"], 1.0, "{f}");
    assert_eq!(f["applied"], f["within_target"], "{f}");
    let hour = f["last_hour"].as_array().cloned().unwrap_or_default();
    assert!(!hour.is_empty(), "{f}");
    let minutes: u64 = hour.iter().filter_map(|m| m["applied"].as_u64()).sum();
    assert_eq!(Some(minutes), f["applied"].as_u64(), "{f}");
    // a change the source made an hour before its event came (a daemon down, a queue that
    // held it): late by the event's own time, past the target
    let key = "data/late.bin";
    rt().block_on(seed(
        &s3(&bucket),
        "data",
        &[("late.bin".to_string(), bytes(9, 10))].into(),
    ));
    wait_for("late.bin at the replica", 60, || {
        replica.join("late.bin").exists()
    });
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let body = serde_json::json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": hour_ago.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket}, "object": {"key": key, "size": 12, "sequencer": "FFFFFFFFFFFFFFFFFF"}}
    }]})
    .to_string();
    // the object changes with it, so that the event is applied as a change; the bucket's own
    // notifications are off for this (they would bring a fresh event for the same change)
    lose_slates_entry(&bucket);
    rt().block_on(seed(
        &s3(&bucket),
        "data",
        &[("late.bin".to_string(), bytes(10, 12))].into(),
    ));
    rt().block_on(async {
        let c = sqs_client().await;
        let url = c
            .get_queue_url()
            .queue_name(&queue)
            .send()
            .await
            .expect("url")
            .queue_url
            .expect("url");
        c.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("send")
    });
    wait_for("a change counted past the target", 60, || {
        let f = pair_json(&addr)["freshness"].clone();
        f["within_target"].as_u64() < f["applied"].as_u64()
    });
    let f = pair_json(&addr)["freshness"].clone();
    let ratio = f["within_target_ratio"].as_f64().unwrap_or(1.0);
    assert!(ratio < 1.0 && ratio > 0.9, "{f}");
    let (_, metrics) = get(&addr, "/metrics");
    let line = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {metrics}"))
            .to_string()
    };
    let count: f64 = line("slate_source_to_replica_seconds_count{")
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(count >= 102.0, "{metrics}");
    // the late change is in the top bucket: over 15 minutes
    assert!(
        line("slate_source_to_replica_seconds_sum{")
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|s| s > 3000.0),
        "{metrics}"
    );
    assert!(
        line("slate_freshness_within_target_ratio{").contains("0.9"),
        "{metrics}"
    );
    // the counts behind the ratio (a windowed ratio in PromQL): one change past the target
    let value = |name: &str| -> u64 {
        line(name)
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (all, within) = (
        value("slate_freshness_changes_total{"),
        value("slate_freshness_changes_within_target_total{"),
    );
    assert!(all >= 102 && within + 1 == all, "{metrics}");
    assert!(
        line("slate_freshness_target_seconds{").ends_with(" 300.0"),
        "{metrics}"
    );
    assert!(
        line("slate_oldest_pending_seconds{").ends_with(" 0.0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slate_last_event_age_seconds{"),
        "{metrics}"
    );
    assert_eq!(daemon.stop(), Some(0));
}
