//! The daemon (`slate sync SRC DST` without --once) on a local folder → moto S3: creates,
//! overwrites, deletes, a burst of duplicates and folder moves reach the destination; SIGTERM
//! stops it cleanly; a SIGKILL and a restart lose nothing.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use object_store::ObjectStoreExt;

/// A daemon under test: killed when dropped, so a failing test leaves no process behind.
struct Child(std::process::Child);

impl std::ops::Deref for Child {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Child {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Spawns the daemon and waits until `pairs` pairs follow changes. The caller stops it.
fn spawn_and_wait(mut c: std::process::Command, log: &std::path::Path, pairs: usize) -> Child {
    let mut child = Child(c.spawn().expect("spawn daemon"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(log) {
            let _ = f.read_to_string(&mut text);
        }
        if text.matches("following changes").count() >= pairs {
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

/// Starts the daemon on one pair and waits until it follows changes.
fn start(db: &std::path::Path, src: &str, dst: &str, log: &std::path::Path) -> Child {
    start_with(db, src, dst, None, log)
}

/// Starts the daemon on one pair following `events` (a local folder: none).
fn start_with(
    db: &std::path::Path,
    src: &str,
    dst: &str,
    events: Option<&str>,
    log: &std::path::Path,
) -> Child {
    let mut c = slate_db(db);
    let err = std::fs::File::create(log).expect("log");
    c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
        .stdout(Stdio::null())
        .stderr(err);
    if let Some(e) = events {
        c.args(["--events", e]);
    }
    spawn_and_wait(c, log, 1)
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

#[test]
fn s3_events_through_sqs_reach_a_local_folder() {
    let dir = tempfile::tempdir().expect("tmp");
    s3_via_sqs(Replica::Local(dir.path().join("replica")), "l");
}

#[test]
fn s3_events_through_sqs_reach_azure() {
    s3_via_sqs(Replica::Az(unique("rep")), "a");
}

/// A moto bucket whose notifications for every create and delete go to a new SQS queue:
/// (bucket, queue name).
fn sqs_bucket(tag: &str) -> (String, String) {
    let bucket = format!("slate-sqs{tag}-{}", std::process::id());
    let queue = unique("slate-q");
    let (st, body) = s3_raw("PUT", &format!("/{bucket}"), "");
    assert!(
        st == 200 || body.contains("BucketAlreadyOwnedByYou"),
        "create bucket: {st} {body}"
    );
    let arn = rt().block_on(async {
        let c = sqs_client().await;
        let url = c
            .create_queue()
            .queue_name(&queue)
            // a message received by a daemon killed before it stored it comes back after this
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
                "3",
            )
            .send()
            .await
            .expect("queue")
            .queue_url
            .expect("url");
        let attrs = c
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("attrs");
        attrs
            .attributes
            .and_then(|a| {
                a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                    .cloned()
            })
            .expect("arn")
    });
    let conf = format!(
        "<NotificationConfiguration><QueueConfiguration><Id>slate</Id><Queue>{arn}</Queue>\
         <Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event></QueueConfiguration></NotificationConfiguration>"
    );
    let (st, body) = s3_raw("PUT", &format!("/{bucket}?notification"), &conf);
    assert_eq!(st, 200, "notification config: {body}");
    (bucket, queue)
}

/// moto S3 with real bucket notifications into real SQS → the daemon → `dst`.
fn s3_via_sqs(dst: Replica, tag: &str) {
    // moto delivers real S3 event notifications for put, copy and delete into a real SQS queue.
    let (bucket, queue) = sqs_bucket(tag);

    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let log = dir.path().join("daemon.log");
    let store = s3(&bucket);
    let initial: BTreeMap<String, Vec<u8>> = (0..20)
        .map(|i| (format!("f{i}.bin"), bytes(i, 300)))
        .collect();
    rt().block_on(seed(&store, "data", &initial));
    let su = format!("s3://{bucket}/data");
    let du = dst.url();
    let mut daemon = start_with(&db, &su, &du, Some(&format!("sqs://{queue}")), &log);

    // creates (awkward keys too), overwrites, deletes, and a burst on one key
    let mut changes: BTreeMap<String, Vec<u8>> = (0..10)
        .map(|i| (format!("new/n {i}+x.bin"), bytes(50 + i, 100)))
        .collect();
    changes.insert("f1.bin".into(), bytes(77, 300));
    changes.insert("f2.bin".into(), bytes(78, 1234));
    rt().block_on(seed(&store, "data", &changes));
    for i in 0..20u64 {
        rt().block_on(seed(
            &store,
            "data",
            &[("f3.bin".to_string(), bytes(1000 + i, 64))].into(),
        ));
    }
    rt().block_on(async {
        for k in ["data/f4.bin", "data/f5.bin"] {
            store.delete(&object_store::path::Path::parse(k).expect("key")).await.expect("delete");
        }
        // hostile and foreign messages: dead-lettered, the daemon goes on
        let c = sqs_client().await;
        let url = c.get_queue_url().queue_name(&queue).send().await.expect("url").queue_url.expect("url");
        c.send_message().queue_url(&url).message_body("{ this is not json").send().await.expect("send");
        let foreign = r#"{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"some-other-bucket"},"object":{"key":"x","size":1}}}]}"#;
        c.send_message().queue_url(&url).message_body(foreign).send().await.expect("send");
        // a duplicate of a real event, delivered again
        let dup = format!(r#"{{"Records":[{{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{{"bucket":{{"name":"{bucket}"}},"object":{{"key":"data/f1.bin","size":300}}}}}}]}}"#);
        for _ in 0..5 {
            c.send_message().queue_url(&url).message_body(&dup).send().await.expect("send");
        }
    });

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = slate_db(&db);
        c.args(["diff", &su, &du]);
        let out = c.output().expect("diff");
        if out.status.code() == Some(0) {
            break;
        }
        if Instant::now() > deadline {
            let _ = daemon.kill();
            let _ = daemon.wait();
            panic!(
                "not equal in time: {}\n{}",
                stdout(&out),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let want = rt().block_on(read_all(&store, "data"));
    assert_same(&dst.read(), &want);
    assert!(want.contains_key("new/n 3+x.bin") && !want.contains_key("f4.bin"));
    // SQS does not keep order: the two hostile messages may arrive after the rest
    let conn = rusqlite::Connection::open(&db).expect("db");
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let dead: i64 = conn
            .query_row("SELECT COUNT(*) FROM dead_letters", [], |r| r.get(0))
            .expect("count");
        if dead >= 2 || Instant::now() > deadline {
            break dead;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        dead, 2,
        "the malformed and the foreign message are dead letters"
    );
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}

#[test]
fn one_process_keeps_every_pair_of_the_config() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let log = dir.path().join("daemon.log");
    let a = Place::new(End::Local, "cfg-a");
    let b = Place::new(End::Local, "cfg-b");
    let a2 = Place::new(End::Local, "cfg-a2");
    let b2 = Place::new(End::S3("slate-dst"), "cfg-b2");
    a.seed(&[("x.txt".to_string(), b"a".to_vec())].into());
    b.seed(
        &[
            ("y.txt".to_string(), b"b".to_vec()),
            ("skip.tmp".to_string(), b"t".to_vec()),
        ]
        .into(),
    );
    let cfg = dir.path().join("slate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\ndrift_check_interval = \"0\"\n\n[[pairs]]\nname = \"first\"\nsrc = \"{}\"\ndst = \"{}\"\n\n\
             [[pairs]]\nname = \"second\"\nsrc = \"{}\"\ndst = \"{}\"\nexclude = [\"*.tmp\"]\n",
            a.url(),
            a2.url(),
            b.url(),
            b2.url()
        ),
    )
    .expect("config");
    let cfgs = cfg.display().to_string();

    // --once over every pair
    let mut c = slate_db(&db);
    c.args(["sync", "--once", "--config", &cfgs]);
    let out = c.output().expect("run");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("sync: "))
            .count(),
        2,
        "{}",
        stdout(&out)
    );
    assert_eq!(a2.read().keys().collect::<Vec<_>>(), vec!["x.txt"]);
    assert_eq!(
        b2.read().keys().collect::<Vec<_>>(),
        vec!["y.txt"],
        "the pair's exclude applies"
    );

    // the daemon follows both pairs in one process
    let mut c = slate_db(&db);
    let err = std::fs::File::create(&log).expect("log");
    c.args(["sync", "--config", &cfgs, "--quiet"])
        .stdout(Stdio::null())
        .stderr(err);
    let daemon = spawn_and_wait(c, &log, 2);
    std::fs::write(a.root.join("new-a.txt"), b"1").expect("write");
    std::fs::write(b.root.join("new-b.txt"), b"2").expect("write");
    wait_equal(&db, &a.url(), &a2.url());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !b2.read().contains_key("new-b.txt") {
        assert!(Instant::now() < deadline, "second pair did not follow");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}

/// An Azure Blob event in the Event Grid schema, or in CloudEvents 1.0.
fn blob_event(
    container: &str,
    key: &str,
    kind: &str,
    size: usize,
    seq: u64,
    cloud: bool,
) -> String {
    let topic = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/devstoreaccount1";
    let subject = format!("/blobServices/default/containers/{container}/blobs/{key}");
    let data = serde_json::json!({
        "api": if kind == "BlobCreated" { "PutBlob" } else { "DeleteBlob" },
        "contentLength": size,
        "blobType": "BlockBlob",
        "url": format!("http://127.0.0.1:10000/devstoreaccount1/{container}/{key}"),
        "sequencer": format!("{seq:032X}"),
    });
    let v = if cloud {
        serde_json::json!({"specversion": "1.0", "type": format!("Microsoft.Storage.{kind}"),
            "source": topic, "subject": subject, "id": unique("ev"),
            "time": "2026-11-30T10:00:00Z", "data": data})
    } else {
        serde_json::json!({"topic": topic, "subject": subject,
            "eventType": format!("Microsoft.Storage.{kind}"), "id": unique("ev"),
            "eventTime": "2026-11-30T10:00:00Z", "data": data, "dataVersion": "",
            "metadataVersion": "1"})
    };
    v.to_string()
}

fn b64(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                A[((n >> (18 - 6 * i)) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

fn dead_letters(db: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("db");
    conn.query_row("SELECT COUNT(*) FROM dead_letters", [], |r| r.get(0))
        .expect("count")
}

/// A subscription on the emulator's GCS notification topic (push to `endpoint`, or pull),
/// deleted when dropped so that the emulator stops delivering to a finished test.
struct Subscription(String);

impl Subscription {
    fn new(name: &str, endpoint: Option<String>) -> Subscription {
        let name = unique(name);
        let mut body = serde_json::json!({
            "topic": "projects/test-project/topics/gcs-events",
            "ackDeadlineSeconds": 10,
        });
        if let Some(e) = endpoint {
            body["pushConfig"] = serde_json::json!({ "pushEndpoint": e });
        }
        let r = reqwest::blocking::Client::new()
            .put(Self::url(&name))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .expect("subscription");
        assert!(
            r.status().is_success(),
            "subscription {name}: {}",
            r.status()
        );
        Subscription(name)
    }

    fn url(name: &str) -> String {
        format!(
            "{}/v1/projects/test-project/subscriptions/{name}",
            pubsub_url()
        )
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = reqwest::blocking::Client::new()
            .delete(Self::url(&self.0))
            .send();
    }
}

/// Where a daemon under test replicates to.
enum Replica {
    Local(std::path::PathBuf),
    /// A prefix of the moto bucket `slate-dst`.
    S3(String),
    /// A prefix of the Azurite container `slate-dst`.
    Az(String),
}

impl Replica {
    fn s3() -> Replica {
        Replica::S3(unique("rep"))
    }
    fn url(&self) -> String {
        match self {
            Replica::Local(p) => p.display().to_string(),
            Replica::S3(p) => format!("s3://slate-dst/{p}"),
            Replica::Az(p) => format!("az://slate-dst/{p}"),
        }
    }
    fn read(&self) -> BTreeMap<String, Vec<u8>> {
        match self {
            Replica::Local(p) => read_local(p),
            Replica::S3(p) => rt().block_on(read_all(&s3("slate-dst"), p)),
            Replica::Az(p) => rt().block_on(read_all(&az("slate-dst"), p)),
        }
    }
}

/// Waits until the replica holds exactly what the source holds.
fn wait_same(
    daemon: &mut Child,
    log: &std::path::Path,
    read: &dyn Fn() -> BTreeMap<String, Vec<u8>>,
    dst: &Replica,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let want = read();
        let have = dst.read();
        if have == want {
            return;
        }
        if Instant::now() > deadline {
            let _ = daemon.kill();
            let _ = daemon.wait();
            let got: Vec<_> = have.into_keys().collect();
            let want: Vec<_> = want.into_keys().collect();
            panic!(
                "{} not equal in time: have {got:?}, want {want:?}\n{}",
                dst.url(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn azure_events_through_a_storage_queue_reach_s3() {
    // No Event Grid emulator exists: the test writes each blob to Azurite and then puts the
    // event Event Grid would deliver (base64 JSON) on a real Azurite queue.
    let container = "slate-src";
    let prefix = unique("azq");
    let queue = unique("slate-q").to_ascii_lowercase();
    let spec = format!("azqueue://devstoreaccount1/{queue}");
    // SAFETY of env: the test's own process reads these to reach Azurite's queue.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&spec).expect("queue");
    rt().block_on(q.create()).expect("create queue");

    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        Replica::s3(),
    );
    let store = az(container);
    let initial: BTreeMap<String, Vec<u8>> = (0..6)
        .map(|i| (format!("dir/f{i}.bin"), bytes(300 + i, 500)))
        .chain((0..4).map(|i| (format!("top{i}.bin"), bytes(400 + i, 700))))
        .collect();
    rt().block_on(seed(&store, &prefix, &initial));
    let su = format!("az://{container}/{prefix}");
    let mut daemon = start_with(&db, &su, &dst.url(), Some(&spec), &log);
    assert_same(&dst.read(), &initial);

    let key = |k: &str| format!("{prefix}/{k}");
    let changes: BTreeMap<String, Vec<u8>> = [
        ("new/a b+ü.bin".to_string(), bytes(1, 333)),
        ("top0.bin".to_string(), bytes(2, 700)), // same size, new content
        ("top1.bin".to_string(), bytes(3, 1)),
    ]
    .into();
    rt().block_on(seed(&store, &prefix, &changes));
    rt().block_on(async {
        for k in [
            "top2.bin",
            "dir/f0.bin",
            "dir/f1.bin",
            "dir/f2.bin",
            "dir/f3.bin",
            "dir/f4.bin",
            "dir/f5.bin",
        ] {
            store
                .delete(&object_store::path::Path::parse(key(k)).expect("key"))
                .await
                .expect("delete");
        }
        let mut seq = 100;
        for (k, v) in &changes {
            seq += 1;
            // Event Grid schema and CloudEvents, both as Event Grid writes them: base64
            let cloud = seq % 2 == 0;
            q.send(&b64(&blob_event(
                container,
                &key(k),
                "BlobCreated",
                v.len(),
                seq,
                cloud,
            )))
            .await
            .expect("send");
        }
        q.send(&b64(&blob_event(
            container,
            &key("top2.bin"),
            "BlobDeleted",
            0,
            200,
            false,
        )))
        .await
        .expect("send");
        // a shuffled redelivery of everything above, and a burst of duplicates on one key
        for (i, (k, v)) in changes.iter().enumerate().rev() {
            let ev = blob_event(
                container,
                &key(k),
                "BlobCreated",
                v.len(),
                101 + i as u64,
                false,
            );
            q.send(&b64(&ev)).await.expect("send");
        }
        let gone = blob_event(container, &key("top2.bin"), "BlobDeleted", 0, 200, true);
        for _ in 0..10 {
            q.send(&b64(&gone)).await.expect("send");
        }
        // the directory went as a whole (ADLS Gen2): one event, a prefix reconcile
        let dir_deleted = blob_event(container, &key("dir"), "DirectoryDeleted", 0, 201, false);
        q.send(&b64(&dir_deleted)).await.expect("send");
        // a duplicate, plain JSON (a queue fed by hand), a malformed one and a stranger
        q.send(&blob_event(
            container,
            &key("top1.bin"),
            "BlobCreated",
            1,
            103,
            false,
        ))
        .await
        .expect("send");
        q.send("bm90IGpzb24gYXQgYWxs").await.expect("send");
        q.send(&b64(&blob_event(
            "another-container",
            "x.bin",
            "BlobCreated",
            1,
            1,
            false,
        )))
        .await
        .expect("send");
    });
    wait_same(
        &mut daemon,
        &log,
        &|| rt().block_on(read_all(&store, &prefix)),
        &dst,
    );
    let got = dst.read();
    assert!(got.contains_key("new/a b+ü.bin") && !got.contains_key("top2.bin"));
    assert!(
        !got.keys().any(|k| k.starts_with("dir/")),
        "{:?}",
        got.keys()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while dead_letters(&db) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        dead_letters(&db),
        2,
        "the malformed and the foreign message"
    );
    // every message was acknowledged (deleted) after it was stored
    std::thread::sleep(Duration::from_millis(500));
    let left = rt().block_on(q.receive()).expect("receive");
    assert!(left.is_empty(), "messages left on the queue: {left:?}");
    // a late create older than the delete already applied: skipped by the tombstone
    let late = blob_event(container, &key("top2.bin"), "BlobCreated", 700, 150, false);
    rt().block_on(q.send(&b64(&late))).expect("send");
    // (receiving here would hide the message from the daemon: wait out its idle polling)
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let stale: u64 = text
        .lines()
        .find_map(|l| {
            l.split(" unchanged, ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no stop line: {text}"));
    assert!(
        stale >= 1,
        "the late create was not skipped as stale: {text}"
    );
    assert!(!dst.read().contains_key("top2.bin"));
}

#[test]
fn webhook_takes_event_grid_and_pubsub_push_deliveries() {
    // Azure: the test writes blobs and POSTs the Event Grid deliveries (no emulator exists).
    // GCS: fully real: fake-gcs-server publishes to the Pub/Sub emulator, whose push
    // subscription delivers to slate's listener.
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    // Azure → moto S3, GCS → moto S3
    let (dst_a, dst_g) = (Replica::s3(), Replica::s3());
    let (pa, pg) = (unique("wha"), unique("whg"));
    let (az_store, gs_read, gs_write) =
        (az("slate-src"), gcs("slate-src"), gcs_writer("slate-src"));
    let seed_a: BTreeMap<String, Vec<u8>> = (0..3)
        .map(|i| (format!("a{i}.bin"), bytes(i, 100)))
        .collect();
    rt().block_on(seed(&az_store, &pa, &seed_a));
    rt().block_on(seed(&gs_write, &pg, &seed_a));
    let token = "tok-3f9a-secret";
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nname = \"azure\"\nsrc = \"az://slate-src/{pa}\"\ndst = \"{}\"\nevents = \"webhook\"\n\n\
             [[pairs]]\nname = \"gcs\"\nsrc = \"gs://slate-src/{pg}\"\ndst = \"{}\"\nevents = \"webhook\"\n",
            dst_a.url(),
            dst_g.url()
        ),
    )
    .expect("config");
    let mut c = slate_db(&db);
    c.args(["sync", "--config", &conf.display().to_string(), "--quiet"])
        .env("SLATE_API_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let mut daemon = spawn_and_wait(c, &log, 2);
    let text = std::fs::read_to_string(&log).expect("log");
    let addr = text
        .lines()
        .find_map(|l| l.strip_prefix("slate: listening on http://"))
        .expect("listening line")
        .trim()
        .to_string();
    assert!(!text.contains(token), "the token must not be logged");
    for d in [&dst_a, &dst_g] {
        assert_eq!(d.read(), seed_a, "backfill of {}: {text}", d.url());
    }

    // the push subscription: the emulator POSTs every GCS notification to slate
    let _sub = Subscription::new(
        "slate-push",
        Some(format!("http://{addr}/events/pubsub?token={token}")),
    );
    let http = reqwest::blocking::Client::new();

    // probes need no token; both pairs have finished their backfill
    let r = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .expect("healthz");
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .expect("readyz");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.text().expect("body"),
        r#"{"pairs":2,"ready":2,"status":"ready"}"#
    );
    let eg = format!("http://{addr}/events/eventgrid");
    // no token, wrong token: 401 and nothing stored
    let r = http.post(&eg).body("[]").send().expect("post");
    assert_eq!(r.status().as_u16(), 401);
    let r = http
        .post(format!("{eg}?token=wrong"))
        .body("[]")
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 401);
    // Event Grid's handshake, and CloudEvents' OPTIONS validation
    let hs = r#"[{"id":"1","topic":"t","subject":"","eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2026-11-30T10:00:00Z","data":{"validationCode":"CODE-123"},"dataVersion":"1","metadataVersion":"1"}]"#;
    let r = http
        .post(format!("{eg}?token={token}"))
        .body(hs)
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.text().expect("body"),
        r#"{"validationResponse":"CODE-123"}"#
    );
    let r = http
        .request(reqwest::Method::OPTIONS, &eg)
        .bearer_auth(token)
        .header("WebHook-Request-Origin", "eventgrid.azure.net")
        .send()
        .expect("options");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()
            .get("webhook-allowed-origin")
            .and_then(|v| v.to_str().ok()),
        Some("eventgrid.azure.net")
    );

    // Azure changes, delivered as one Event Grid batch and one CloudEvent
    let new_a: BTreeMap<String, Vec<u8>> = [
        ("n 1.bin".to_string(), bytes(9, 77)),
        ("a0.bin".to_string(), bytes(10, 100)),
    ]
    .into();
    rt().block_on(seed(&az_store, &pa, &new_a));
    rt().block_on(
        az_store.delete(&object_store::path::Path::parse(format!("{pa}/a1.bin")).expect("key")),
    )
    .expect("delete");
    let batch = format!(
        "[{},{}]",
        blob_event(
            "slate-src",
            &format!("{pa}/n 1.bin"),
            "BlobCreated",
            77,
            5,
            false
        ),
        blob_event(
            "slate-src",
            &format!("{pa}/a1.bin"),
            "BlobDeleted",
            0,
            6,
            false
        )
    );
    let r = http
        .post(&eg)
        .bearer_auth(token)
        .body(batch)
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let ce = blob_event(
        "slate-src",
        &format!("{pa}/a0.bin"),
        "BlobCreated",
        100,
        7,
        true,
    );
    let r = http
        .post(&eg)
        .bearer_auth(token)
        .header("content-type", "application/cloudevents+json")
        .body(ce)
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .post(&eg)
        .bearer_auth(token)
        .body("{broken")
        .send()
        .expect("post");
    assert_eq!(
        r.status().as_u16(),
        200,
        "a malformed delivery is kept as a dead letter, not retried"
    );

    // GCS changes: the notifications come through the emulator's push
    let new_g: BTreeMap<String, Vec<u8>> = [
        ("sub/x y.bin".to_string(), bytes(11, 50)),
        ("a2.bin".to_string(), bytes(12, 3)),
    ]
    .into();
    rt().block_on(seed(&gs_write, &pg, &new_g));
    rt().block_on(
        gs_read.delete(&object_store::path::Path::parse(format!("{pg}/a0.bin")).expect("key")),
    )
    .expect("delete");

    wait_same(
        &mut daemon,
        &log,
        &|| rt().block_on(read_all(&az_store, &pa)),
        &dst_a,
    );
    wait_same(
        &mut daemon,
        &log,
        &|| rt().block_on(read_all(&gs_read, &pg)),
        &dst_g,
    );
    assert!(dst_g.read().contains_key("sub/x y.bin") && !dst_g.read().contains_key("a0.bin"));
    assert!(dst_a.read().contains_key("n 1.bin") && !dst_a.read().contains_key("a1.bin"));
    assert!(
        dead_letters(&db) >= 1,
        "the malformed delivery is a dead letter"
    );
    // Prometheus text: needs the token; counts what each pair did
    let r = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .expect("metrics");
    assert_eq!(r.status().as_u16(), 401);
    let text = http
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(token)
        .send()
        .expect("metrics")
        .text()
        .expect("body");
    let copied = |src: String, dst: &Replica| -> u64 {
        let want = format!(
            "slate_keys_total{{pair=\"{src} -> {}\",result=\"copied\"}} ",
            dst.url()
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&want))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {want:?} in\n{text}"))
    };
    assert!(
        copied(format!("az://slate-src/{pa}"), &dst_a) >= 2,
        "{text}"
    );
    assert!(
        copied(format!("gs://slate-src/{pg}"), &dst_g) >= 2,
        "{text}"
    );
    assert!(!text.contains(token), "the token must not appear");
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}

#[test]
fn a_public_listener_needs_a_token() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = slate_db(&dir.path().join("s.db"));
    c.args([
        "sync",
        "az://slate-src/x",
        &dir.path().join("d").display().to_string(),
        "--events",
        "webhook",
        "--listen",
        "0.0.0.0:0",
    ])
    .env_remove("SLATE_API_TOKEN");
    let out = c.output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("0.0.0.0:0") && err.contains("SLATE_API_TOKEN"),
        "{err}"
    );
}

#[test]
fn gcs_notifications_through_a_pubsub_pull_subscription_reach_a_local_folder() {
    // fully real: fake-gcs-server publishes OBJECT_FINALIZE / OBJECT_DELETE to the Pub/Sub
    // emulator; slate pulls them (google-cloud-pubsub streaming pull).
    let sub = Subscription::new("slate-pull", None);
    let http = reqwest::blocking::Client::new();

    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, dst) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        Replica::Local(dir.path().join("replica")),
    );
    let prefix = unique("ps");
    let (read, write) = (gcs("slate-src"), gcs_writer("slate-src"));
    let initial: BTreeMap<String, Vec<u8>> = (0..5)
        .map(|i| (format!("f{i}.bin"), bytes(70 + i, 200)))
        .collect();
    rt().block_on(seed(&write, &prefix, &initial));
    let su = format!("gs://slate-src/{prefix}");
    let spec = format!("pubsub://projects/test-project/subscriptions/{}", sub.0);
    let mut daemon = start_with(&db, &su, &dst.url(), Some(&spec), &log);
    assert_same(&dst.read(), &initial);

    let changes: BTreeMap<String, Vec<u8>> = [
        ("new/a b+%.bin".to_string(), bytes(1, 10)),
        ("f0.bin".to_string(), bytes(2, 200)), // an overwrite: a new generation
        ("f1.bin".to_string(), bytes(3, 7)),
    ]
    .into();
    rt().block_on(seed(&write, &prefix, &changes));
    rt().block_on(async {
        for k in ["f2.bin", "f3.bin"] {
            read.delete(&object_store::path::Path::parse(format!("{prefix}/{k}")).expect("key"))
                .await
                .expect("delete");
        }
    });
    // a malformed notification on the same topic: a dead letter, acked, the daemon goes on
    let r = http
        .post(format!("{}/v1/projects/test-project/topics/gcs-events:publish", pubsub_url()))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"messages": [{{"data": "{}", "attributes": {{"eventType": "OBJECT_FINALIZE", "payloadFormat": "JSON_API_V1", "bucketId": "slate-src", "objectId": "{prefix}/x"}}}}]}}"#,
            b64("{ not json")
        ))
        .send()
        .expect("publish");
    assert!(r.status().is_success(), "publish: {}", r.status());

    wait_same(
        &mut daemon,
        &log,
        &|| rt().block_on(read_all(&read, &prefix)),
        &dst,
    );
    let got = dst.read();
    assert!(
        got.contains_key("new/a b+%.bin")
            && !got.contains_key("f2.bin")
            && got["f0.bin"] == bytes(2, 200)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let conn = rusqlite::Connection::open(&db).expect("db");
    let mine = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT COUNT(*) FROM dead_letters WHERE source = 'pubsub' AND CAST(raw AS TEXT) LIKE ?1",
            [format!("%{prefix}/x%")],
            |r| r.get(0),
        )
        .expect("count")
    };
    while mine(&conn) < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        mine(&conn),
        1,
        "the malformed notification is one dead letter"
    );
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}

#[test]
fn a_daemon_killed_between_receive_and_apply_loses_nothing() {
    // The SQS message is deleted once its event is in the inbox; kill -9 lands while the
    // daemon copies a large object, after the receive and before the apply finished. The
    // restarted daemon must finish from the inbox alone (the queue no longer has the message).
    let (bucket, queue) = sqs_bucket("k");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let dst = Replica::Local(dir.path().join("replica"));
    let store = s3(&bucket);
    let initial: BTreeMap<String, Vec<u8>> = (0..3)
        .map(|i| (format!("f{i}.bin"), bytes(i, 100)))
        .collect();
    rt().block_on(seed(&store, "data", &initial));
    let su = format!("s3://{bucket}/data");
    let events = format!("sqs://{queue}");
    let start = |log: &std::path::Path| start_with(&db, &su, &dst.url(), Some(&events), log);
    let daemon = start(&log);
    let mut changes: BTreeMap<String, Vec<u8>> = (0..5)
        .map(|i| (format!("n{i}.bin"), bytes(20 + i, 64)))
        .collect();
    changes.insert("big.bin".into(), bytes(99, 40 * MIB));
    rt().block_on(seed(&store, "data", &changes));
    rt().block_on(store.delete(&object_store::path::Path::parse("data/f0.bin").expect("key")))
        .expect("delete");
    // the big key's event is in the inbox: kill now, mid-copy
    let conn = rusqlite::Connection::open(&db).expect("db");
    let pending = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row(
            "SELECT COUNT(*) FROM inbox WHERE key = 'big.bin'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while pending(&conn) == 0 {
        assert!(
            Instant::now() < deadline,
            "the big object's event never reached the inbox"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(stop(daemon, libc::SIGKILL), None, "killed by a signal");
    assert_eq!(
        pending(&conn),
        1,
        "the kill must land before the big object was applied"
    );
    drop(conn);
    // restart: no backfill (the pair is known), so only the inbox can bring the changes
    let log2 = dir.path().join("d2.log");
    let mut daemon = start(&log2);
    assert!(
        !std::fs::read_to_string(&log2)
            .unwrap_or_default()
            .contains("source "),
        "a restart must not need a backfill"
    );
    wait_same(
        &mut daemon,
        &log2,
        &|| rt().block_on(read_all(&store, "data")),
        &dst,
    );
    let got = dst.read();
    assert_eq!(got.get("big.bin").map(Vec::len), Some(40 * MIB));
    assert!(!got.contains_key("f0.bin"));
    assert_eq!(stop(daemon, libc::SIGTERM), Some(0));
}
