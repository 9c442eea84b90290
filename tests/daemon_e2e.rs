//! The daemon (`slate sync SRC DST` without --once) on a local folder → moto S3: creates,
//! overwrites, deletes, a burst of duplicates and folder moves reach the destination; SIGTERM
//! stops it cleanly; a SIGKILL and a restart lose nothing.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use object_store::ObjectStoreExt;

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
    let extra: Vec<&str> = events.map(|e| vec!["--events", e]).unwrap_or_default();
    Daemon::start(db, src, dst, &extra, log).child
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
    let d = Replica::s3();
    let initial: BTreeMap<String, Vec<u8>> = (0..40)
        .map(|i| (format!("dir{}/f{i}.bin", i % 4), bytes(i, 100 + i as usize)))
        .collect();
    s.seed(&initial);
    let (su, du) = (s.url(), d.url());
    let daemon = start(&db, &su, &du, &log);
    assert_same(&d.read(), &initial);

    let mut feed = LocalFeed {
        root: s.root.clone(),
        keys: Vec::new(),
    };
    scenario(&mut feed, &db, &log, &d);

    // a nested folder created at once, a folder moved in from outside, one removed as a whole
    std::fs::create_dir_all(s.root.join("new/deep")).expect("mkdir");
    for i in 0..10 {
        std::fs::write(
            s.root.join(format!("new/deep/n{i}.txt")),
            bytes(100 + i, 64),
        )
        .expect("write");
    }
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

    wait_equal_within(&db, &su, &du, 60, Some(&log));
    assert_same(&d.read(), &local_files(&s.root));
    assert!(d.read().contains_key("moved/b.txt"));
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0), "SIGTERM exits 0");

    // SIGKILL right after changes, then restart: nothing is lost
    let daemon = start(&db, &su, &du, &log);
    std::fs::write(s.root.join("after-kill.txt"), b"x").expect("write");
    std::fs::remove_file(s.root.join("dir1/f5.bin")).expect("rm");
    // killed once it has seen the create (stored in its inbox, or applied already)
    wait_for("the daemon to see the create", 30, || {
        d.read().contains_key("after-kill.txt")
            || rusqlite::Connection::open(&db)
                .and_then(|c| {
                    c.query_row(
                        "SELECT COUNT(*) FROM inbox WHERE key LIKE '%after-kill.txt'",
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .is_ok_and(|n| n > 0)
    });
    assert_eq!(daemon.stop(libc::SIGKILL), None, "ended by the SIGKILL");
    std::fs::write(s.root.join("while-down.txt"), b"y").expect("write"); // no daemon to see it
    let daemon = start(&db, &su, &du, &log);
    wait_equal_within(&db, &su, &du, 60, Some(&log));
    assert_same(&d.read(), &local_files(&s.root));
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
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
    let daemon = start_with(&db, &su, &du, Some(&format!("sqs://{queue}")), &log);

    let mut feed = SqsFeed {
        store: store.clone(),
        bucket: bucket.clone(),
        queue: queue.clone(),
        sent: Vec::new(),
    };
    scenario(&mut feed, &db, &log, &dst);

    rt().block_on(async {
        // hostile and foreign messages: dead-lettered, the daemon goes on
        let c = sqs_client().await;
        let url = c.get_queue_url().queue_name(&queue).send().await.expect("url").queue_url.expect("url");
        c.send_message().queue_url(&url).message_body("{ this is not json").send().await.expect("send");
        let foreign = r#"{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"some-other-bucket"},"object":{"key":"x","size":1}}}]}"#;
        c.send_message().queue_url(&url).message_body(foreign).send().await.expect("send");
        // keys object_store would address as other keys: a `..` segment (reaches the inbox,
        // then is dead-lettered by the apply, not retried), an empty segment (dead-lettered
        // on arrival); and a folder marker, ignored
        for (name, key) in [
            ("ObjectRemoved:Delete", "data/a/../f1.bin"),
            ("ObjectRemoved:Delete", "data//f2.bin"),
            ("ObjectCreated:Put", "data/sub/"),
        ] {
            let body = format!(
                r#"{{"Records":[{{"eventSource":"aws:s3","eventName":"{name}","s3":{{"bucket":{{"name":"{bucket}"}},"object":{{"key":"{key}","size":0}}}}}}]}}"#
            );
            c.send_message().queue_url(&url).message_body(body).send().await.expect("send");
        }
    });
    // and a change after them: the daemon still follows
    let late = [("after.bin".to_string(), b"late".to_vec())].into();
    rt().block_on(seed(&store, "data", &late));

    wait_equal_within(&db, &su, &du, 60, Some(&log));
    let want = rt().block_on(read_all(&store, "data"));
    assert_same(&dst.read(), &want);
    assert!(want.contains_key("after.bin"));
    // SQS does not keep order: the two hostile messages may arrive after the rest
    let conn = rusqlite::Connection::open(&db).expect("db");
    let deadline = Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let dead: i64 = conn
            .query_row("SELECT COUNT(*) FROM dead_letters", [], |r| r.get(0))
            .expect("count");
        if dead >= 4 || Instant::now() > deadline {
            break dead;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        dead, 4,
        "the malformed and the foreign message, and two keys that cannot be addressed, are dead letters"
    );
    let reasons: Vec<String> = conn
        .prepare("SELECT reason FROM dead_letters ORDER BY id")
        .expect("sql")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("a/../f1.bin") && r.contains("cannot be addressed")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("data//f2.bin")),
        "{reasons:?}"
    );
    // neither was applied to another key: f1.bin and f2.bin are still at the destination
    let got = dst.read();
    assert!(got.contains_key("f1.bin") && got.contains_key("f2.bin"));
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
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
    let daemon = spawn_daemon(c, &log, 2);
    std::fs::write(a.root.join("new-a.txt"), b"1").expect("write");
    std::fs::write(b.root.join("new-b.txt"), b"2").expect("write");
    wait_equal_within(&db, &a.url(), &a2.url(), 60, Some(&log));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !b2.read().contains_key("new-b.txt") {
        assert!(Instant::now() < deadline, "second pair did not follow");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}

fn dead_letters(db: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("db");
    conn.query_row("SELECT COUNT(*) FROM dead_letters", [], |r| r.get(0))
        .expect("count")
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

    let q = Arc::new(q);
    let send = q.clone();
    let mut feed = AzFeed {
        container: container.to_string(),
        prefix: prefix.clone(),
        seq: 100,
        sent: Vec::new(),
        // as Event Grid writes to a Storage Queue: base64 JSON
        deliver: Box::new(move |ev, _| rt().block_on(send.send(&b64(ev))).expect("send")),
    };
    scenario(&mut feed, &db, &log, &dst);

    let key = |k: &str| format!("{prefix}/{k}");
    // a delete, then a late create older than it: the create is skipped by the tombstone
    feed.delete("top2.bin");
    let late = blob_event(
        container,
        &key("top2.bin"),
        "BlobCreated",
        700,
        feed.seq - 1,
        false,
    );
    // the directory went as a whole (ADLS Gen2): one event, a prefix reconcile
    rt().block_on(async {
        for k in ["dir/f0.bin", "dir/f1.bin", "dir/f4.bin", "dir/f5.bin"] {
            store
                .delete(&object_store::path::Path::parse(key(k)).expect("key"))
                .await
                .expect("delete");
        }
        let dir_deleted = blob_event(container, &key("dir"), "DirectoryDeleted", 0, 900, false);
        q.send(&b64(&dir_deleted)).await.expect("send");
        // plain JSON (a queue fed by hand), a malformed message and a stranger
        let plain = blob_event(container, &key("top1.bin"), "BlobCreated", 1, 103, false);
        q.send(&plain).await.expect("send");
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
    assert!(!got.contains_key("top2.bin"));
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
    // every message was acknowledged (deleted) after it was stored: none left, the received
    // and not yet deleted counted too
    wait_for("every message deleted from the queue", 30, || {
        rt().block_on(q.approximate_messages()).expect("count") == 0
    });
    rt().block_on(q.send(&b64(&late))).expect("send");
    // (receiving here would hide the message from the daemon: wait for the daemon's word)
    wait_for("the late create applied as stale", 60, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains("applied") && l.contains("key=top2.bin") && l.contains("Stale"))
    });
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines()
            .any(|l| l.contains("applied") && l.contains("key=top2.bin") && l.contains("Stale")),
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
    let seed_a: BTreeMap<String, Vec<u8>> = (0..4)
        .map(|i| (format!("a{i}.bin"), bytes(i, 100)))
        .collect();
    rt().block_on(seed(&az_store, &pa, &seed_a));
    rt().block_on(seed(&gs_write, &pg, &seed_a));
    let token = "tok-3f9a-secret-0b1c2d3e4f5a6b7c";
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
    let mut daemon = spawn_daemon(c, &log, 2);
    let text = std::fs::read_to_string(&log).expect("log");
    let addr = listen_addr(&text).expect("listening line");
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
    let ready: serde_json::Value = serde_json::from_str(&r.text().expect("body")).expect("json");
    assert_eq!(
        (&ready["status"], &ready["pairs"], &ready["ready"]),
        (
            &serde_json::json!("ready"),
            &serde_json::json!(2),
            &serde_json::json!(2)
        ),
        "{ready}"
    );
    assert!(
        ready["states"]
            .as_array()
            .is_some_and(|a| a.iter().all(|p| p["state"] == "following")),
        "{ready}"
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

    // Azure: every event POSTed as Event Grid would, a batch in its schema or a CloudEvent
    let (post, url) = (http.clone(), eg.clone());
    let mut feed_a = AzFeed {
        container: "slate-src".into(),
        prefix: pa.clone(),
        seq: 0,
        sent: Vec::new(),
        deliver: Box::new(move |ev, cloud| {
            let r = if cloud {
                post.post(&url)
                    .header("content-type", "application/cloudevents+json")
                    .body(ev.to_string())
            } else {
                post.post(&url).body(format!("[{ev}]"))
            };
            let r = r.bearer_auth(token).send().expect("post");
            assert_eq!(r.status().as_u16(), 200);
        }),
    };
    scenario(&mut feed_a, &db, &log, &dst_a);
    // GCS: fake-gcs-server's notifications reach slate through the emulator's push
    let mut feed_g = GcsFeed {
        prefix: pg.clone(),
        sent: Vec::new(),
    };
    scenario(&mut feed_g, &db, &log, &dst_g);
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
    assert!(
        dead_letters(&db) >= 1,
        "the malformed delivery is a dead letter"
    );
    // Prometheus text: open on loopback (local scrapers); counts what each pair did
    let r = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .expect("metrics");
    assert_eq!(r.status().as_u16(), 200);
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
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
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
    // emulator; slate pulls them (Pub/Sub's REST pull).
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

    let mut feed = GcsFeed {
        prefix: prefix.clone(),
        sent: Vec::new(),
    };
    scenario(&mut feed, &db, &log, &dst);

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
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}

#[test]
fn every_change_of_a_pubsub_burst_arrives_promptly() {
    // Three bursts of GCS writes (25, 12, 12), each after the daemon went idle: every key of a
    // burst must be in the replica soon after the burst's last write. The bound is wide for a
    // slow shared machine; a tail held back by the consumer arrived 60-180 s late. The daemon
    // ran and stopped three times before on this subscription (stopped, killed, stopped, as
    // upgrades and crashes do): nothing an earlier one left behind may keep taking messages.
    const BOUND: Duration = Duration::from_secs(15);
    // past the bound, how long to keep looking, only to say in the failure how late it was
    const MEASURE: Duration = Duration::from_secs(200);
    let sub = Subscription::new("slate-burst", None);
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let dst = Replica::Local(dir.path().join("replica"));
    let prefix = unique("psb");
    let write = gcs_writer("slate-src");
    let initial: BTreeMap<String, Vec<u8>> = [("seed.bin".to_string(), bytes(1, 100))].into();
    rt().block_on(seed(&write, &prefix, &initial));
    let su = format!("gs://slate-src/{prefix}");
    let spec = format!("pubsub://projects/test-project/subscriptions/{}", sub.0);
    for (n, signal) in [libc::SIGTERM, libc::SIGKILL, libc::SIGTERM]
        .into_iter()
        .enumerate()
    {
        let earlier = dir.path().join(format!("earlier{n}.log"));
        let d = start_with(&db, &su, &dst.url(), Some(&spec), &earlier);
        assert_same(&dst.read(), &initial);
        let code = d.stop(signal);
        assert!(signal == libc::SIGKILL || code == Some(0), "exit {code:?}");
    }
    let mut daemon = start_with(&db, &su, &dst.url(), Some(&spec), &log);

    let mut timings = Vec::new();
    for (n, size) in [25u64, 12, 12].into_iter().enumerate() {
        let burst: BTreeMap<String, Vec<u8>> = (0..size)
            .map(|i| (format!("b{n}/k{i:02}.bin"), bytes(1000 * n as u64 + i, 300)))
            .collect();
        rt().block_on(seed(&write, &prefix, &burst));
        let last_write = Instant::now();
        let missing = || -> Vec<String> {
            let have = dst.read();
            burst
                .iter()
                .filter(|(k, v)| have.get(*k) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect()
        };
        let mut left = missing();
        while !left.is_empty() && last_write.elapsed() < BOUND + MEASURE {
            std::thread::sleep(Duration::from_millis(100));
            left = missing();
        }
        let took = last_write.elapsed();
        timings.push(took);
        if took > BOUND {
            let _ = daemon.kill();
            let _ = daemon.wait();
            let late = if left.is_empty() {
                format!(
                    "the last of them arrived {:.1} s after the last write",
                    took.as_secs_f64()
                )
            } else {
                format!("still missing after {:.1} s: {left:?}", took.as_secs_f64())
            };
            panic!(
                "burst {n} ({size} writes): not every key in the replica {} s after the last \
                 write; {late} (earlier bursts: {:?})\n{}",
                BOUND.as_secs(),
                &timings[..n],
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    }
    eprintln!("bursts applied after their last write in {timings:?}");
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
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
    assert_eq!(daemon.stop(libc::SIGKILL), None, "killed by a signal");
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
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}

// ---------------------------------------------------------------------------------------------
// The scenario every transport's test runs: creates (awkward keys), overwrites (same size and
// another size), deletes, a burst of writes on one key, then every event delivered again in a
// shuffled order; it ends when `slate diff` says the pair is equal, and the bytes agree.
// ---------------------------------------------------------------------------------------------

/// A source under test and the way its events reach the daemon.
trait Feed {
    fn url(&self) -> String;
    /// The source's objects, relative keys.
    fn read(&self) -> BTreeMap<String, Vec<u8>>;
    /// Writes `key`, and delivers its event when the transport does not do it by itself.
    fn put(&mut self, key: &str, data: &[u8]);
    /// Deletes `key`, and delivers its event when the transport does not do it by itself.
    fn delete(&mut self, key: &str);
    /// How many events `redeliver` can deliver again.
    fn delivered(&self) -> usize;
    /// Delivers again the events numbered in `order`, as a redelivering queue would.
    fn redeliver(&mut self, order: &[usize]);
}

/// A fixed permutation of `0..n` (Fisher–Yates on xorshift).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Runs the scenario on a daemon already following `feed` into `dst`. The source must hold at
/// least four objects.
fn scenario(feed: &mut dyn Feed, db: &std::path::Path, log: &std::path::Path, dst: &Replica) {
    let before = feed.read();
    let old: Vec<String> = before.keys().take(4).cloned().collect();
    assert_eq!(
        old.len(),
        4,
        "the scenario needs four objects at the source"
    );
    // creates, with the keys that trip encoders: a space, `+`, `%`, non-ASCII, nesting
    for i in 0..3u64 {
        feed.put(
            &format!("sc/new {i}+ü%.bin"),
            &bytes(7000 + i, 90 + i as usize),
        );
    }
    // overwrites: same size with new content, and another size
    let same = before[&old[0]].len();
    feed.put(&old[0], &bytes(7100, same));
    feed.put(&old[1], &bytes(7101, same + 333));
    // deletes
    feed.delete(&old[2]);
    feed.delete(&old[3]);
    // a burst on one key: the last write wins
    for i in 0..10u64 {
        feed.put("sc/burst.bin", &bytes(7200 + i, 40 + i as usize));
    }
    // everything once more, shuffled: old states must not come back, deletes must hold
    let order = shuffled(feed.delivered(), 0x5eed);
    feed.redeliver(&order);

    let (su, du) = (feed.url(), dst.url());
    wait_equal_within(db, &su, &du, 60, Some(log));
    let want = feed.read();
    assert_same(&dst.read(), &want);
    assert!(want.contains_key("sc/new 1+ü%.bin") && !want.contains_key(&old[2]));
    assert_eq!(
        want["sc/burst.bin"],
        bytes(7209, 49),
        "the burst's last write"
    );
    // a delete delivered twice is one delete: the second finds the key gone (S3 answers a
    // DELETE of a missing key as of one deleted, so it is looked at first)
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for k in &old[2..4] {
        let deleted = text
            .lines()
            .filter(|l| l.contains(&format!("key={k} ")) && l.contains("a=Deleted"))
            .count();
        assert!(deleted <= 1, "{k} counted as deleted {deleted} times");
    }
}

/// A local folder: inotify sees every write. A redelivery is the same content written again
/// (an editor saving twice); a delete cannot be seen twice.
struct LocalFeed {
    root: std::path::PathBuf,
    keys: Vec<String>,
}

impl Feed for LocalFeed {
    fn url(&self) -> String {
        self.root.display().to_string()
    }
    fn read(&self) -> BTreeMap<String, Vec<u8>> {
        read_local(&self.root)
    }
    fn put(&mut self, key: &str, data: &[u8]) {
        let p = self.root.join(key);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, data).expect("write");
        self.keys.push(key.to_string());
    }
    fn delete(&mut self, key: &str) {
        std::fs::remove_file(self.root.join(key)).expect("rm");
        self.keys.push(key.to_string());
    }
    fn delivered(&self) -> usize {
        self.keys.len()
    }
    fn redeliver(&mut self, order: &[usize]) {
        for &i in order {
            let p = self.root.join(&self.keys[i]);
            if let Ok(now) = std::fs::read(&p) {
                std::fs::write(&p, now).expect("write again");
            }
        }
    }
}

/// S3 on moto, whose bucket notifications reach the queue; a redelivery is the event sent
/// again to the same queue, as S3 would (URL-encoded key, no sequencer: moto sends none).
struct SqsFeed {
    store: Arc<dyn object_store::ObjectStore>,
    bucket: String,
    queue: String,
    sent: Vec<String>,
}

impl SqsFeed {
    fn record(&mut self, key: &str, name: &str, size: usize) {
        let full = format!("data/{key}");
        let enc: String = url::form_urlencoded::byte_serialize(full.as_bytes()).collect();
        let enc = enc.replace("%2F", "/");
        self.sent.push(
            serde_json::json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
                "eventName": name, "s3": {"bucket": {"name": self.bucket},
                "object": {"key": enc, "size": size}}}]})
            .to_string(),
        );
    }
}

impl Feed for SqsFeed {
    fn url(&self) -> String {
        format!("s3://{}/data", self.bucket)
    }
    fn read(&self) -> BTreeMap<String, Vec<u8>> {
        rt().block_on(read_all(&self.store, "data"))
    }
    fn put(&mut self, key: &str, data: &[u8]) {
        rt().block_on(seed(
            &self.store,
            "data",
            &[(key.to_string(), data.to_vec())].into(),
        ));
        self.record(key, "ObjectCreated:Put", data.len());
    }
    fn delete(&mut self, key: &str) {
        let p = object_store::path::Path::from(format!("data/{key}"));
        rt().block_on(self.store.delete(&p)).expect("delete");
        self.record(key, "ObjectRemoved:Delete", 0);
    }
    fn delivered(&self) -> usize {
        self.sent.len()
    }
    fn redeliver(&mut self, order: &[usize]) {
        rt().block_on(async {
            let c = sqs_client().await;
            let url = c
                .get_queue_url()
                .queue_name(&self.queue)
                .send()
                .await
                .expect("url");
            let url = url.queue_url.expect("url");
            for &i in order {
                c.send_message()
                    .queue_url(&url)
                    .message_body(&self.sent[i])
                    .send()
                    .await
                    .expect("send");
            }
        });
    }
}

/// Sends one Event Grid event (JSON; true: a CloudEvent) to the daemon.
type Deliver = Box<dyn Fn(&str, bool)>;

/// Azure Blob on Azurite. No Event Grid emulator exists: each write is followed by the event
/// Event Grid would deliver (every other one a CloudEvent, sequencers increasing), through
/// `deliver` (a Storage Queue, or a POST to the webhook). A redelivery sends the same event.
struct AzFeed {
    container: String,
    prefix: String,
    seq: u64,
    sent: Vec<(String, bool)>,
    deliver: Deliver,
}

impl AzFeed {
    fn event(&mut self, key: &str, kind: &str, size: usize) {
        self.seq += 1;
        let cloud = self.seq % 2 == 0;
        let full = format!("{}/{key}", self.prefix);
        let ev = blob_event(&self.container, &full, kind, size, self.seq, cloud);
        (self.deliver)(&ev, cloud);
        self.sent.push((ev, cloud));
    }
}

impl Feed for AzFeed {
    fn url(&self) -> String {
        format!("az://{}/{}", self.container, self.prefix)
    }
    fn read(&self) -> BTreeMap<String, Vec<u8>> {
        rt().block_on(read_all(&az(&self.container), &self.prefix))
    }
    fn put(&mut self, key: &str, data: &[u8]) {
        let data = [(key.to_string(), data.to_vec())].into();
        rt().block_on(seed(&az(&self.container), &self.prefix, &data));
        self.event(key, "BlobCreated", data[key].len());
    }
    fn delete(&mut self, key: &str) {
        let p = object_store::path::Path::from(format!("{}/{key}", self.prefix));
        rt().block_on(az(&self.container).delete(&p))
            .expect("delete");
        self.event(key, "BlobDeleted", 0);
    }
    fn delivered(&self) -> usize {
        self.sent.len()
    }
    fn redeliver(&mut self, order: &[usize]) {
        for &i in order {
            let (ev, cloud) = &self.sent[i];
            (self.deliver)(ev, *cloud);
        }
    }
}

/// GCS on fake-gcs-server, which publishes a notification per change to the Pub/Sub
/// emulator's topic. A redelivery publishes the same notification (generation included)
/// to that topic again.
struct GcsFeed {
    prefix: String,
    sent: Vec<serde_json::Value>,
}

impl GcsFeed {
    /// The object's generation, from the JSON API.
    fn generation(&self, key: &str) -> String {
        let mut url =
            url::Url::parse(&format!("{}/storage/v1/b/slate-src/o/", gcs_endpoint())).expect("url");
        url.path_segments_mut()
            .expect("segments")
            .pop()
            .push(&format!("{}/{key}", self.prefix));
        let text = reqwest::blocking::get(url)
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.text())
            .unwrap_or_else(|e| panic!("{key}: generation: {e}"));
        let v: serde_json::Value = serde_json::from_str(&text).expect("object resource");
        match &v["generation"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    fn record(&mut self, key: &str, kind: &str, generation: String, size: usize) {
        let name = format!("{}/{key}", self.prefix);
        let data = serde_json::json!({"kind": "storage#object", "bucket": "slate-src",
            "name": name, "generation": generation, "metageneration": "1",
            "size": size.to_string()});
        self.sent.push(serde_json::json!({
            "data": b64(&data.to_string()),
            "attributes": {"eventType": kind, "payloadFormat": "JSON_API_V1",
                "bucketId": "slate-src", "objectId": name, "objectGeneration": generation},
        }));
    }
}

impl Feed for GcsFeed {
    fn url(&self) -> String {
        format!("gs://slate-src/{}", self.prefix)
    }
    fn read(&self) -> BTreeMap<String, Vec<u8>> {
        rt().block_on(read_all(&gcs("slate-src"), &self.prefix))
    }
    fn put(&mut self, key: &str, data: &[u8]) {
        let d = [(key.to_string(), data.to_vec())].into();
        rt().block_on(seed(&gcs_writer("slate-src"), &self.prefix, &d));
        let g = self.generation(key);
        self.record(key, "OBJECT_FINALIZE", g, data.len());
    }
    fn delete(&mut self, key: &str) {
        let g = self.generation(key);
        let p = object_store::path::Path::from(format!("{}/{key}", self.prefix));
        rt().block_on(gcs("slate-src").delete(&p)).expect("delete");
        self.record(key, "OBJECT_DELETE", g, 0);
    }
    fn delivered(&self) -> usize {
        self.sent.len()
    }
    fn redeliver(&mut self, order: &[usize]) {
        let messages: Vec<_> = order.iter().map(|&i| self.sent[i].clone()).collect();
        let r = reqwest::blocking::Client::new()
            .post(format!(
                "{}/v1/projects/test-project/topics/gcs-events:publish",
                pubsub_url()
            ))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "messages": messages }).to_string())
            .send()
            .expect("publish");
        assert!(r.status().is_success(), "publish: {}", r.status());
    }
}

#[test]
fn the_daemon_leaves_out_what_the_pairs_filter_leaves_out() {
    // the filter of a pair applies to the events the daemon follows, as to its backfill: a
    // key it leaves out is neither copied nor deleted at the destination
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let s = Place::new(End::Local, "flt-src");
    let d = Place::new(End::Local, "flt-dst");
    s.seed(&[("keep.txt".to_string(), b"k".to_vec())].into());
    d.seed(&[("local-only.tmp".to_string(), b"mine".to_vec())].into());
    let daemon = Daemon::start(&db, &s.url(), &d.url(), &["--exclude", "*.tmp"], &log);
    std::fs::write(s.root.join("new.tmp"), b"scratch").expect("write");
    std::fs::write(s.root.join("local-only.tmp"), b"theirs").expect("write");
    std::fs::write(s.root.join("new.txt"), b"n").expect("write");
    let applied = |key: &str| {
        daemon
            .log_text()
            .lines()
            .any(|l| l.contains("applied") && l.contains(&format!("key={key} ")))
    };
    wait_for("the events are applied", 30, || {
        applied("new.txt") && applied("new.tmp") && applied("local-only.tmp")
    });
    std::fs::remove_file(s.root.join("local-only.tmp")).expect("rm");
    std::fs::write(s.root.join("last.txt"), b"l").expect("write");
    let times = |key: &str| {
        daemon
            .log_text()
            .lines()
            .filter(|l| l.contains("applied") && l.contains(&format!("key={key} ")))
            .count()
    };
    wait_for("the delete and the last write are applied", 30, || {
        applied("last.txt") && times("local-only.tmp") >= 2
    });
    let want: BTreeMap<String, Vec<u8>> = [
        ("keep.txt", &b"k"[..]),
        ("new.txt", b"n"),
        ("last.txt", b"l"),
        ("local-only.tmp", b"mine"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_vec()))
    .collect();
    assert_same(&d.read(), &want);
    let mut daemon = daemon;
    assert_eq!(daemon.stop(), Some(0));
}

#[test]
fn a_delete_of_a_key_the_s3_replica_never_had_counts_as_already_gone() {
    // S3 answers a DELETE of a missing key with 204, as of one deleted: a delete event for a
    // key the replica does not hold (a delivery repeated after the first was applied, a key
    // written and removed before slate saw it) must count as already gone, not as a delete
    let (bucket, queue) = sqs_bucket("g");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let store = s3(&bucket);
    rt().block_on(seed(
        &store,
        "data",
        &[("kept.bin".to_string(), b"k".to_vec())].into(),
    ));
    let dst = Replica::s3();
    let (su, du) = (format!("s3://{bucket}/data"), dst.url());
    let daemon = start_with(&db, &su, &du, Some(&format!("sqs://{queue}")), &log);
    wait_equal_within(&db, &su, &du, 60, Some(&log));
    let body = serde_json::json!({"Records": [{"eventVersion": "2.1", "eventSource": "aws:s3",
        "eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": bucket},
        "object": {"key": "data/ghost.bin", "size": 0}}}]})
    .to_string();
    rt().block_on(async {
        let c = sqs_client().await;
        let url = c
            .get_queue_url()
            .queue_name(&queue)
            .send()
            .await
            .expect("url");
        c.send_message()
            .queue_url(url.queue_url.expect("url"))
            .message_body(body)
            .send()
            .await
            .expect("send")
    });
    wait_for("the ghost's delete applied", 30, || {
        read_log(&log)
            .lines()
            .any(|l| l.contains("key=ghost.bin ") && l.contains(" a="))
    });
    let text = read_log(&log);
    let line = text
        .lines()
        .find(|l| l.contains("key=ghost.bin ") && l.contains(" a="))
        .unwrap_or_default();
    assert!(line.contains("a=AlreadyGone"), "{line}");
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
    assert_same(
        &dst.read(),
        &[("kept.bin".to_string(), b"k".to_vec())].into(),
    );
}

#[test]
fn an_object_in_an_archive_tier_is_dead_lettered_with_why_not_retried_for_ever() {
    let (bucket, queue) = sqs_bucket("arch");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let su = format!("s3://{bucket}/data");
    let events = format!("sqs://{queue}");
    let mut daemon = start_with(
        &db,
        &su,
        &replica.display().to_string(),
        Some(&events),
        &log,
    );
    for (k, class) in [("cold.bin", Some("GLACIER")), ("warm.bin", None)] {
        let h: Vec<(&str, &str)> = class
            .map(|c| ("x-amz-storage-class", c))
            .into_iter()
            .collect();
        let (st, _, body) = s3_signed("PUT", &format!("/{bucket}/data/{k}"), &h, "payload");
        assert_eq!(st, 200, "{body}");
    }
    wait_for(
        "the warm object replicated and the cold one dead-lettered",
        60,
        || replica.join("warm.bin").exists() && read_log(&log).contains("dead-lettered"),
    );
    let out = run({
        let mut c = slate_db(&db);
        c.arg("deadletters");
        c
    });
    let text = stdout(&out);
    assert!(
        text.contains("cold.bin") && text.contains("archive tier") && text.contains("restore"),
        "{text}"
    );
    // once, not again and again
    let tries = read_log(&log)
        .matches("reconcile failed; will retry")
        .count();
    assert_eq!(tries, 0, "{}", log_tail(&read_log(&log)));
    assert!(!replica.join("cold.bin").exists());
    assert!(
        daemon.try_wait().ok().flatten().is_none(),
        "the daemon goes on"
    );
    let _ = daemon.stop(libc::SIGTERM);
}

#[test]
fn the_daemon_tells_its_store_requests_per_hour() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let src = Place::new(End::Local, "rph-src");
    src.seed(&[("a.bin".to_string(), bytes(1, 300))].into_iter().collect());
    let dst = Place::new(End::S3("slate-dst"), "rph-dst");
    let mut c = slate_db(&db);
    c.args([
        "sync",
        &src.url(),
        &dst.url(),
        "--drift-check-secs",
        "0",
        "--quiet",
    ])
    .env("SLATE_TEST_HEALTH_SECS", "1")
    .env("RUST_LOG", "slate=info,warn")
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"));
    let daemon = spawn_daemon(c, &log, 1);
    std::fs::write(src.root.join("b.bin"), bytes(2, 400)).unwrap();
    // a line whose PUTs count the backfill's and the event's uploads (scaled to an hour)
    let put_rate = |text: &str| -> Option<u64> {
        text.lines()
            .filter(|l| l.contains("store requests per hour"))
            .filter_map(|l| {
                l.split("put=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .max()
    };
    wait_for("a requests-per-hour line counting the uploads", 30, || {
        put_rate(&read_log(&log)).is_some_and(|p| p > 0)
    });
    let text = read_log(&log);
    assert!(
        text.lines().any(|l| l.contains("store requests per hour")
            && l.contains("list=")
            && l.contains("head=")),
        "{}",
        log_tail(&text)
    );
    let _ = daemon.stop(libc::SIGTERM);
}
