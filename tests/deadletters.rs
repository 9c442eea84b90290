//! No event lost behind a 200, dead letters an operator can see (issue 23), through the real
//! daemon and the real emulators: Event Grid webhook deliveries up to 1 MB applied whole and a
//! delivery that cannot be stored answered 503; a message of one good record and 100,000
//! malformed ones; dead letters of SQS, a Storage Queue and Pub/Sub listed, counted under their
//! queue and retried through the inbox; events outside every pair's prefix of a followed
//! bucket counted and not kept.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use object_store::ObjectStoreExt;

/// A token long enough for any rule on tokens (256 bits, as `slate serve` makes them).
const TOKEN: &str = "dl-test-token-0123456789abcdef0123456789abcdef";

/// A daemon on `conf` with a listener; returns it with its address.
fn daemon(db: &Path, conf: &Path, log: &Path, pairs: usize) -> (Child, String) {
    let mut c = slate_db(db);
    c.args(["sync", "--config", &conf.display().to_string(), "--quiet"])
        .env("SLATE_API_TOKEN", TOKEN)
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    let child = spawn_daemon(c, log, pairs);
    let addr = listen_addr(&read_log(log)).expect("listening line");
    (child, addr)
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}

fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let r = http()
        .get(format!("http://{addr}{path}"))
        .bearer_auth(TOKEN)
        .send()
        .expect("get");
    assert_eq!(r.status().as_u16(), 200, "GET {path}");
    serde_json::from_str(&r.text().expect("body")).expect("json")
}

fn metrics(addr: &str) -> String {
    http()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .expect("metrics")
        .text()
        .expect("body")
}

/// The value of the sample of `metrics` that starts with `prefix`, 0 when there is none.
fn sample(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// `slate deadletters --json` of `db`: one object per letter.
fn letters(db: &Path) -> Vec<serde_json::Value> {
    let mut c = slate_db(db);
    c.args(["deadletters", "--json", "--limit", "1000"]);
    let out = run(c);
    assert!(out.status.success(), "deadletters: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// Files of a local folder, by relative name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    read_local(dir)
}

/// A realistic Event Grid BlobCreated event (the fields of Azure's own; about 800 bytes).
fn blob_created(container: &str, key: &str, size: usize, seq: u64) -> serde_json::Value {
    serde_json::json!({
        "topic": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/devstoreaccount1",
        "subject": format!("/blobServices/default/containers/{container}/blobs/{key}"),
        "eventType": "Microsoft.Storage.BlobCreated",
        "id": format!("{seq:08x}-0000-0000-0000-{seq:012x}"),
        "eventTime": "2026-12-03T10:00:00.0000000Z",
        "data": {
            "api": "PutBlob",
            "requestId": format!("{seq:08x}-001e-0026-0000-000000000000"),
            "eTag": format!("0x8DD{seq:013X}"),
            "contentType": "application/octet-stream",
            "contentLength": size,
            "blobType": "BlockBlob",
            "url": format!("http://127.0.0.1:10000/devstoreaccount1/{container}/{key}"),
            "sequencer": format!("{seq:032X}"),
            "storageDiagnostics": {"batchId": format!("{seq:08x}-3006-0065-00ff-cf0b5b000000")}
        },
        "dataVersion": "",
        "metadataVersion": "1"
    })
}

#[test]
fn event_grid_deliveries_up_to_a_megabyte_are_applied_and_a_failed_store_is_a_503() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("dst"),
    );
    std::fs::create_dir_all(&dst).expect("dst");
    let prefix = unique("egbig");
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nsrc = \"az://slate-src/{prefix}\"\ndst = \"{}\"\nevents = \"webhook\"\n",
            dst.display()
        ),
    )
    .expect("config");
    let (child, addr) = daemon(&db, &conf, &log, 1);
    // the blobs are written after the backfill: only the deliveries can bring them
    let store = az("slate-src");
    let keys: Vec<String> = (0..1570).map(|i| format!("k{i:05}.bin")).collect();
    rt().block_on(async {
        futures::future::join_all(keys.chunks(64).map(|chunk| {
            let store = store.clone();
            let prefix = prefix.clone();
            async move {
                for k in chunk {
                    store
                        .put(
                            &object_store::path::Path::from(format!("{prefix}/{k}")),
                            bytes(k.len() as u64, 64).into(),
                        )
                        .await
                        .expect("put");
                }
            }
        }))
        .await
    });
    let batch = |ks: &[String], first_seq: u64| -> String {
        serde_json::Value::Array(
            ks.iter()
                .enumerate()
                .map(|(i, k)| {
                    blob_created(
                        "slate-src",
                        &format!("{prefix}/{k}"),
                        64,
                        first_seq + i as u64,
                    )
                })
                .collect(),
        )
        .to_string()
    };
    let (small, big) = (batch(&keys[..320], 1), batch(&keys[320..], 1000));
    eprintln!(
        "deliveries: 320 events = {} bytes, 1,250 events = {} bytes",
        small.len(),
        big.len()
    );
    assert!(small.len() > 256 * 1024, "{}", small.len());
    assert!(
        big.len() > 1_000_000 && big.len() <= 1024 * 1024,
        "{}",
        big.len()
    );
    let eg = format!("http://{addr}/events/eventgrid");
    for body in [&small, &big] {
        let r = http()
            .post(&eg)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .expect("post");
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.text());
    }
    wait_for("every event of both deliveries applied", 300, || {
        files(&dst).len() == keys.len()
    });
    assert!(letters(&db).is_empty(), "{:?}", letters(&db));

    // A delivery that cannot be stored (another process holds the database's write lock
    // past the daemon's busy timeout) is answered 503, which Event Grid retries; the retry,
    // once the lock is gone, is applied.
    let late = format!("{prefix}/late.bin");
    rt().block_on(store.put(
        &object_store::path::Path::from(late.clone()),
        bytes(7, 99).into(),
    ))
    .expect("put");
    let lock = rusqlite::Connection::open(&db).expect("open");
    lock.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let body =
        serde_json::Value::Array(vec![blob_created("slate-src", &late, 99, 9999)]).to_string();
    let started = Instant::now();
    let r = http()
        .post(&eg)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 503, "{:?}", r.text());
    eprintln!("503 after {:?}", started.elapsed());
    lock.execute_batch("ROLLBACK").expect("unlock");
    drop(lock);
    assert!(!files(&dst).contains_key("late.bin"));
    let r = http()
        .post(&eg)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    wait_for("the retried delivery applied", 60, || {
        files(&dst).get("late.bin") == Some(&bytes(7, 99))
    });
    assert_eq!(child.stop(libc::SIGTERM), Some(0));
}

/// Peak and current resident memory of a process, in KiB (Linux `/proc`).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// An SQS queue of its own (no bucket sends to it: only the test's messages arrive).
fn own_queue() -> (String, String) {
    let name = unique("slate-dlq");
    let url = rt().block_on(async {
        sqs_client()
            .await
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .expect("queue")
            .queue_url
            .expect("url")
    });
    (name, url)
}

fn sqs_send(url: &str, body: &str) {
    rt().block_on(async {
        sqs_client()
            .await
            .send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await
            .expect("send")
    });
}

fn s3_record(bucket: &str, key: &str) -> serde_json::Value {
    serde_json::json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-12-03T10:00:00.000Z", "eventName": "ObjectCreated:Put",
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "slate",
            "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
            "object": {"key": key, "size": 10, "sequencer": "0062E99A88DC407460"}}
    })
}

#[test]
fn a_message_of_one_good_record_and_100000_malformed_ones_is_one_letter_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("dst"),
    );
    std::fs::create_dir_all(&dst).expect("dst");
    let prefix = unique("dlmem");
    let (queue, url) = own_queue();
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nsrc = \"s3://slate-src/{prefix}\"\ndst = \"{}\"\nevents = \"sqs://{queue}\"\n",
            dst.display()
        ),
    )
    .expect("config");
    let (child, _addr) = daemon(&db, &conf, &log, 1);
    let pid = child.0.id();
    let (before_peak, before) = memory_kib(pid);
    let store = s3("slate-src");
    rt().block_on(store.put(
        &object_store::path::Path::from(format!("{prefix}/good.bin")),
        bytes(3, 10).into(),
    ))
    .expect("put");
    // {"Records": [good, 1, 1, 1, …]}: 100,000 elements that are no record
    let mut body = format!(
        "{{\"Records\":[{}",
        s3_record("slate-src", &format!("{prefix}/good.bin"))
    );
    for _ in 0..100_000 {
        body.push_str(",1");
    }
    body.push_str("]}");
    assert!(body.len() < 256 * 1024, "{}", body.len());
    sqs_send(&url, &body);
    wait_for("the good record applied", 120, || {
        files(&dst).get("good.bin") == Some(&bytes(3, 10))
    });
    wait_for("the letter stored", 60, || !letters(&db).is_empty());
    let (after_peak, after) = memory_kib(pid);
    eprintln!(
        "daemon memory: before {before} KiB (peak {before_peak}), after {after} KiB (peak {after_peak}): +{} KiB at the peak",
        after_peak.saturating_sub(before_peak.max(before))
    );
    assert!(
        after_peak < before_peak.max(before) + 64 * 1024,
        "peak {after_peak} KiB vs {before_peak} KiB before"
    );
    let got = letters(&db);
    assert_eq!(got.len(), 1, "{got:?}");
    let l = &got[0];
    assert_eq!(l["source"], "sqs");
    assert_eq!(l["queue"], format!("sqs://{queue}"));
    let reason = l["reason"].as_str().expect("reason");
    assert!(reason.len() < 4096, "{} bytes", reason.len());
    assert!(
        reason.ends_with("and 99991 more malformed events"),
        "{reason}"
    );
    assert_eq!(l["message"].as_str().map(str::len), Some(body.len()));
    // one WARN line, naming the queue
    let text = read_log(&log);
    assert!(
        text.lines()
            .any(|l| l.contains("WARN") && l.contains("dead letter") && l.contains(&queue)),
        "{}",
        log_tail(&text)
    );
    assert_eq!(child.stop(libc::SIGTERM), Some(0));
}

#[test]
fn events_outside_every_prefix_of_the_followed_bucket_are_counted_and_not_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("dst"),
    );
    std::fs::create_dir_all(&dst).expect("dst");
    // the layout of config.example.toml: a pair on s3://bucket/data fed by the bucket's queue
    let (bucket, queue) = sqs_bucket("out");
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nsrc = \"s3://{bucket}/data\"\ndst = \"{}\"\nevents = \"sqs://{queue}\"\n",
            dst.display()
        ),
    )
    .expect("config");
    let (child, addr) = daemon(&db, &conf, &log, 1);
    let store = s3(&bucket);
    rt().block_on(async {
        for i in 0..100 {
            store
                .put(
                    &object_store::path::Path::from(format!("logs/{i}.txt")),
                    bytes(i, 20).into(),
                )
                .await
                .expect("put");
        }
        store
            .put(
                &object_store::path::Path::from("data/in.bin"),
                bytes(1, 30).into(),
            )
            .await
            .expect("put");
    });
    wait_for("the key inside the prefix applied", 120, || {
        files(&dst).contains_key("in.bin")
    });
    let outside = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("slate_events_outside_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    wait_for("100 events outside the prefix counted", 120, || {
        outside(&metrics(&addr)) >= 100
    });
    assert!(letters(&db).is_empty(), "{:?}", letters(&db));
    let conn = rusqlite::Connection::open(&db).expect("open");
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM inbox", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 0, "nothing outside the prefix waits in the inbox");
    assert_eq!(files(&dst).len(), 1);
    assert_eq!(child.stop(libc::SIGTERM), Some(0));
}

/// A Pub/Sub topic of the test's own with a pull subscription on it (no bucket publishes
/// there: only the test's messages arrive).
fn own_subscription() -> (String, String) {
    let (topic, sub) = (unique("dltopic"), unique("dlsub"));
    let c = http();
    let r = c
        .put(format!(
            "{}/v1/projects/test-project/topics/{topic}",
            pubsub_url()
        ))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .expect("topic");
    assert!(r.status().is_success(), "topic: {}", r.status());
    let r = c
        .put(format!(
            "{}/v1/projects/test-project/subscriptions/{sub}",
            pubsub_url()
        ))
        .header("content-type", "application/json")
        .body(
            serde_json::json!({"topic": format!("projects/test-project/topics/{topic}"),
                "ackDeadlineSeconds": 10})
            .to_string(),
        )
        .send()
        .expect("subscription");
    assert!(r.status().is_success(), "subscription: {}", r.status());
    (topic, sub)
}

#[test]
fn dead_letters_of_sqs_a_storage_queue_and_pubsub_are_listed_counted_and_retried() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let (dst_s3, dst_az, dst_gs, dst_late) = (
        dir.path().join("s3"),
        dir.path().join("az"),
        dir.path().join("gs"),
        dir.path().join("late"),
    );
    for d in [&dst_s3, &dst_az, &dst_gs, &dst_late] {
        std::fs::create_dir_all(d).expect("dst");
    }
    let (ps, pa, pg, pl) = (unique("dls"), unique("dla"), unique("dlg"), unique("dll"));
    let (sqs_name, sqs_url) = own_queue();
    let azq = unique("slate-dlq").to_ascii_lowercase();
    let az_spec = format!("azqueue://devstoreaccount1/{azq}");
    // SAFETY of env: the test's own process reads these to reach Azurite's queue.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&az_spec).expect("queue");
    rt().block_on(q.create()).expect("create queue");
    let (topic, sub) = own_subscription();
    let pairs = |late: bool| {
        let mut c = format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nsrc = \"s3://slate-src/{ps}\"\ndst = \"{}\"\nevents = \"sqs://{sqs_name}\"\n\n\
             [[pairs]]\nsrc = \"az://slate-src/{pa}\"\ndst = \"{}\"\nevents = \"{az_spec}\"\n\n\
             [[pairs]]\nsrc = \"gs://slate-src/{pg}\"\ndst = \"{}\"\nevents = \"pubsub://projects/test-project/subscriptions/{sub}\"\n",
            dst_s3.display(),
            dst_az.display(),
            dst_gs.display()
        );
        if late {
            // a pair made later, on the same queue: the bucket nobody followed before
            c.push_str(&format!(
                "\n[[pairs]]\nsrc = \"s3://slate-dst/{pl}\"\ndst = \"{}\"\nevents = \"sqs://{sqs_name}\"\n",
                dst_late.display()
            ));
        }
        c
    };
    let conf = dir.path().join("slate.toml");
    std::fs::write(&conf, pairs(false)).expect("config");
    let (child, addr) = daemon(&db, &conf, &log, 3);

    // one bad message on each transport, an SNS subscription confirmation, and an event of a
    // bucket no pair follows (yet)
    sqs_send(&sqs_url, "{not json");
    let confirm = r#"{"Type":"SubscriptionConfirmation","MessageId":"m1","Token":"tok","TopicArn":"arn:aws:sns:us-east-1:123456789012:slate-topic","Message":"You have chosen to subscribe to the topic","SubscribeURL":"https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=tok","Timestamp":"2026-12-03T10:00:00.000Z","SignatureVersion":"1","Signature":"x","SigningCertURL":"https://sns.us-east-1.amazonaws.com/x.pem"}"#;
    sqs_send(&sqs_url, confirm);
    let later_key = format!("{pl}/later.bin");
    sqs_send(
        &sqs_url,
        &serde_json::json!({"Records": [s3_record("slate-dst", &later_key)]}).to_string(),
    );
    let bad_event = r#"[{"eventType":"Microsoft.Storage.BlobCreated","id":"1","eventTime":"2026-12-03T10:00:00Z","data":{}}]"#;
    rt().block_on(q.send(&b64(bad_event))).expect("send");
    let r = http()
        .post(format!(
            "{}/v1/projects/test-project/topics/{topic}:publish",
            pubsub_url()
        ))
        .header("content-type", "application/json")
        .body(
            serde_json::json!({"messages": [{"data": b64("not a notification"),
                "attributes": {"eventType": "OBJECT_FINALIZE", "bucketId": "slate-src",
                    "objectId": format!("{pg}/x"), "payloadFormat": "JSON_API_V1"}}]})
            .to_string(),
        )
        .send()
        .expect("publish");
    assert!(r.status().is_success(), "publish: {}", r.status());
    wait_for("five dead letters", 120, || letters(&db).len() >= 5);
    let got = letters(&db);
    assert_eq!(got.len(), 5, "{got:#?}");
    let by = |source: &str, needle: &str| {
        got.iter()
            .find(|l| l["source"] == source && l["reason"].as_str().unwrap_or("").contains(needle))
            .unwrap_or_else(|| panic!("no {source} letter with '{needle}': {got:#?}"))
            .clone()
    };
    let sqs_bad = by("sqs", "not JSON");
    assert_eq!(sqs_bad["message"], "{not json");
    assert_eq!(sqs_bad["queue"], format!("sqs://{sqs_name}"));
    let sns = by(
        "sqs",
        "SNS SubscriptionConfirmation for topic arn:aws:sns:us-east-1:123456789012:slate-topic",
    );
    assert!(sns["message"]
        .as_str()
        .unwrap_or("")
        .contains("SubscribeURL"));
    let stranger = by("sqs", "in a bucket no pair follows");
    // the Storage Queue's letter shows the decoded event, not base64
    let azl = by("azqueue", "subject");
    assert_eq!(azl["decoded"], true);
    assert_eq!(azl["message"], bad_event);
    assert_eq!(azl["queue"], az_spec);
    let psl = by("pubsub", "data");
    assert_eq!(
        psl["queue"],
        format!("pubsub://projects/test-project/subscriptions/{sub}")
    );
    // every letter is of no pair: counted under its queue, never under the pairs
    let pairs_now = get_json(&addr, "/pairs");
    for p in pairs_now["pairs"].as_array().expect("pairs") {
        assert_eq!(p["dead_letters"], 0, "{p}");
    }
    let m = metrics(&addr);
    assert_eq!(
        sample(
            &m,
            &format!("slate_dead_letters_unowned{{queue=\"sqs://{sqs_name}\"}}")
        ),
        3,
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            &format!("slate_dead_letters_unowned{{queue=\"{az_spec}\"}}")
        ),
        1
    );
    let api = get_json(&addr, "/deadletters?pair=none");
    assert_eq!(
        api["dead_letters"].as_array().map(Vec::len),
        Some(5),
        "{api}"
    );
    // the SNS confirmation said at WARN, with its topic
    let text = read_log(&log);
    assert!(
        text.lines().any(|l| l.contains("WARN")
            && l.contains("SubscriptionConfirmation")
            && l.contains("slate-topic")),
        "{}",
        log_tail(&text)
    );
    // `slate deadletters` (the table) names each source
    let mut c = slate_db(&db);
    c.arg("deadletters");
    let table = stdout(&run(c));
    for s in ["sqs", "azqueue", "pubsub", "5 dead letter(s)"] {
        assert!(table.contains(s), "{table}");
    }
    assert_eq!(child.stop(libc::SIGTERM), Some(0));

    // The operator adds the pair for the bucket nobody followed, then writes the object and
    // retries the letter: it goes through the inbox, and the daemon applies it.
    std::fs::write(&conf, pairs(true)).expect("config");
    let (child, _addr) = daemon(&db, &conf, &log, 4);
    rt().block_on(s3("slate-dst").put(
        &object_store::path::Path::from(later_key.clone()),
        bytes(11, 40).into(),
    ))
    .expect("put");
    let id = stranger["id"].as_i64().expect("id").to_string();
    let mut c = slate_db(&db);
    c.args(["deadletters", "retry", &id]);
    let out = run(c);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 retried"), "{}", stdout(&out));
    wait_for("the retried letter applied", 120, || {
        files(&dst_late).get("later.bin") == Some(&bytes(11, 40))
    });
    // a letter that still cannot be used stays; an unknown id is said
    let mut c = slate_db(&db);
    c.args(["deadletters", "retry", &sqs_bad["id"].to_string(), "999999"]);
    let out = c.output().expect("retry");
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("kept"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no dead letter 999999"),
        "{}",
        stderr(&out)
    );
    assert_eq!(letters(&db).len(), 4);
    // purge: nothing is 1 day old, then everything
    let mut c = slate_db(&db);
    c.args(["deadletters", "purge", "--older-than", "1d"]);
    assert!(stdout(&run(c)).contains("0 dead letter(s) dropped"));
    let mut c = slate_db(&db);
    c.args(["deadletters", "purge", "--all"]);
    assert!(stdout(&run(c)).contains("4 dead letter(s) dropped"));
    assert!(letters(&db).is_empty());
    assert_eq!(child.stop(libc::SIGTERM), Some(0));
}
