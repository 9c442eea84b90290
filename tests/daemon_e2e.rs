//! The daemon (`slate sync SRC DST` without --once) on a local folder → moto S3: creates,
//! overwrites, deletes, a burst of duplicates and folder moves reach the destination; SIGTERM
//! stops it cleanly; a SIGKILL and a restart lose nothing.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use object_store::ObjectStoreExt;

/// Spawns the daemon and waits until `pairs` pairs follow changes. The caller stops it.
#[allow(clippy::zombie_processes)]
fn spawn_and_wait(mut c: std::process::Command, log: &std::path::Path, pairs: usize) -> Child {
    let mut child = c.spawn().expect("spawn daemon");
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
    let mut c = slate_db(db);
    let err = std::fs::File::create(log).expect("log");
    c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
        .stdout(Stdio::null())
        .stderr(err);
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
    // moto delivers real S3 event notifications for put, copy and delete into a real SQS queue.
    let bucket = format!("slate-sqs-{}", std::process::id());
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

    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let log = dir.path().join("daemon.log");
    let dst = dir.path().join("replica");
    let store = s3(&bucket);
    let initial: BTreeMap<String, Vec<u8>> = (0..20)
        .map(|i| (format!("f{i}.bin"), bytes(i, 300)))
        .collect();
    rt().block_on(seed(&store, "data", &initial));
    let su = format!("s3://{bucket}/data");
    let du = dst.display().to_string();
    let mut c = slate_db(&db);
    let err = std::fs::File::create(&log).expect("log");
    c.args([
        "sync",
        &su,
        &du,
        "--events",
        &format!("sqs://{queue}"),
        "--drift-check-secs",
        "0",
        "--quiet",
    ])
    .stdout(Stdio::null())
    .stderr(err);
    let mut daemon = spawn_and_wait(c, &log, 1);

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
    assert_same(&read_local(&dst), &want);
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
