//! Credentials the way each cloud's CLI leaves them: for S3 and SQS the files `aws configure`
//! writes (and a named profile), for Azure a container SAS URL for the data and a queue SAS
//! URL for the events. Each slate here runs with no credential variable but the one under test.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use object_store::path::Path;
use object_store::ObjectStoreExt;

/// `slate` with every cloud credential variable removed and HOME in `home`.
fn bare(home: &std::path::Path) -> Command {
    let mut c = slate();
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_PROFILE",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_KEY",
    ] {
        c.env_remove(k);
    }
    c.env("HOME", home);
    c
}

fn aws_files(home: &std::path::Path) {
    let aws = home.join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n\n\
         [team]\naws_access_key_id = team-key\naws_secret_access_key = team-secret\n",
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        "[default]\nregion = us-east-1\n\n[profile team]\nregion = us-east-1\n",
    )
    .unwrap();
}

#[test]
fn s3_takes_the_aws_cli_files_and_a_named_profile() {
    let home = tempfile::tempdir().unwrap();
    let src = Place::new(End::Local, "cred-src");
    let data: BTreeMap<String, Vec<u8>> =
        (0..3).map(|i| (format!("f{i}"), bytes(i, 300))).collect();
    src.seed(&data);

    // nothing at all: the error says where credentials come from, nothing is copied
    let dst = Place::new(End::S3("slate-dst"), "cred-none");
    let out = run({
        let mut c = bare(home.path());
        c.args(["copy", &src.url(), &dst.url(), "-q"]);
        c
    });
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("aws configure"), "{}", stderr(&out));

    aws_files(home.path());
    for (profile, name) in [(None, "cred-default"), (Some("team"), "cred-team")] {
        let dst = Place::new(End::S3("slate-dst"), name);
        let out = run({
            let mut c = bare(home.path());
            if let Some(p) = profile {
                c.env("AWS_PROFILE", p);
            }
            c.args(["copy", &src.url(), &dst.url(), "-q"]);
            c
        });
        assert!(out.status.success(), "{profile:?}: {}", stderr(&out));
        assert_same(&dst.read(), &data);
    }
    // a profile the files do not have: an error naming it
    let dst = Place::new(End::S3("slate-dst"), "cred-nope");
    let out = run({
        let mut c = bare(home.path());
        c.env("AWS_PROFILE", "nope");
        c.args(["copy", &src.url(), &dst.url(), "-q"]);
        c
    });
    assert!(!out.status.success());
    assert!(stderr(&out).contains("'nope'"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("team-secret"), "{}", stderr(&out));
}

#[test]
fn sqs_events_take_the_aws_cli_files() {
    let home = tempfile::tempdir().unwrap();
    aws_files(home.path());
    let (bucket, queue) = sqs_bucket("cred");
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let dst = dir.path().join("replica");
    let prefix = unique("credq");
    let mut c = bare(home.path());
    c.env("SLATE_DB", &db)
        .env("AWS_PROFILE", "team")
        .args([
            "sync",
            &format!("s3://{bucket}/{prefix}"),
            &dst.display().to_string(),
            "--events",
            &format!("sqs://{queue}"),
            "--drift-check-secs",
            "0",
            "--quiet",
        ])
        .env("RUST_LOG", "slate=debug,warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut daemon = spawn_daemon(c, &log, 1);
    // a write after the daemon started reaches it only through the queue
    let store = s3(&bucket);
    rt().block_on(async {
        store
            .put(
                &Path::parse(format!("{prefix}/late.txt")).unwrap(),
                b"late".to_vec().into(),
            )
            .await
            .expect("put");
    });
    wait_for("the queued change applied", 60, || {
        std::fs::read(dst.join("late.txt")).ok().as_deref() == Some(b"late".as_slice())
    });
    // applied from the event (the backfill ended before the write; no drift check runs); the
    // file lands before the daemon logs the key as applied
    wait_for("the daemon's 'applied' line for late.txt", 10, || {
        read_log(&log)
            .lines()
            .any(|l| l.contains("late.txt") && l.contains("applied"))
    });
    let text = read_log(&log);
    assert!(daemon.try_wait().ok().flatten().is_none(), "{text}");
    let _ = daemon.stop(libc::SIGTERM);
}

#[test]
fn an_azure_container_sas_url_serves_copy_and_a_queue_sas_url_the_events() {
    let home = tempfile::tempdir().unwrap();
    let src = Place::new(End::Local, "sas-src");
    let data: BTreeMap<String, Vec<u8>> =
        (0..3).map(|i| (format!("d/f{i}"), bytes(i, 900))).collect();
    src.seed(&data);
    let sas = container_sas_url("slate-dst", "racwdl");
    let dst = Place::new(End::Az("slate-dst"), "sas");
    let out = run({
        let mut c = bare(home.path());
        c.env("AZURE_STORAGE_SAS_URL", &sas).args([
            "copy",
            &src.url(),
            &dst.url(),
            "-q",
            "--chunk-size",
            "5MiB",
        ]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same(&dst.read(), &data);
    // ... and back, with the same URL
    let back = Place::new(End::Local, "sas-back");
    let out = run({
        let mut c = bare(home.path());
        c.env("AZURE_STORAGE_SAS_URL", &sas)
            .args(["copy", &dst.url(), &back.url(), "-q"]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same(&back.read(), &data);
    // a URL for another container: refused, naming both, without the token
    let out = run({
        let mut c = bare(home.path());
        c.env("AZURE_STORAGE_SAS_URL", &sas)
            .args(["copy", &src.url(), "az://slate-src/x", "-q"]);
        c
    });
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("'slate-dst'") && err.contains("'slate-src'"),
        "{err}"
    );
    assert!(!err.contains("sig="), "{err}");

    // events: the queue reached with its own SAS URL (created here with the account key)
    let queue = unique("slate-q").to_ascii_lowercase();
    let spec = format!("azqueue://devstoreaccount1/{queue}");
    // SAFETY of env: this process reaches Azurite's queue to create it and send to it.
    unsafe {
        std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
        std::env::set_var("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url());
    }
    let q = slate::events::azqueue::AzQueueSource::open(&spec).expect("queue");
    rt().block_on(q.create()).expect("create queue");
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let replica = dir.path().join("replica");
    let mut c = bare(home.path());
    c.env("SLATE_DB", &db)
        .env("AZURE_STORAGE_SAS_URL", &sas)
        .env("AZURE_STORAGE_QUEUE_SAS_URL", queue_sas_url(&queue, "raup"))
        .args([
            "sync",
            &dst.url(),
            &replica.display().to_string(),
            "--events",
            &spec,
            "--drift-check-secs",
            "0",
            "--quiet",
        ])
        .env("RUST_LOG", "slate=debug,warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut daemon = spawn_daemon(c, &log, 1);
    let key = format!("{}/late.txt", dst.prefix);
    rt().block_on(async {
        az("slate-dst")
            .put(&Path::parse(&key).unwrap(), b"late".to_vec().into())
            .await
            .expect("put");
        let topic = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/devstoreaccount1";
        let ev = serde_json::json!({"topic": topic,
            "subject": format!("/blobServices/default/containers/slate-dst/blobs/{key}"),
            "eventType": "Microsoft.Storage.BlobCreated", "id": unique("ev"),
            "eventTime": "2026-11-30T10:00:00Z", "dataVersion": "", "metadataVersion": "1",
            "data": {"api": "PutBlob", "contentLength": 4, "blobType": "BlockBlob",
                "url": format!("http://127.0.0.1:10000/devstoreaccount1/slate-dst/{key}"),
                "sequencer": format!("{:032X}", 5)}});
        q.send(&b64(&ev.to_string())).await.expect("send");
    });
    wait_for("the queued change applied", 60, || {
        std::fs::read(replica.join("late.txt")).ok().as_deref() == Some(b"late".as_slice())
    });
    // the message was taken and deleted with the queue's SAS: nothing left to receive
    wait_for("the queue emptied", 30, || {
        rt().block_on(q.receive())
            .map(|m| m.is_empty())
            .unwrap_or(false)
    });
    // applied from the event (the backfill ended before the write; no drift check runs); the
    // file lands before the daemon logs the key as applied
    wait_for("the daemon's 'applied' line for late.txt", 10, || {
        read_log(&log)
            .lines()
            .any(|l| l.contains("late.txt") && l.contains("applied"))
    });
    let text = read_log(&log);
    assert!(daemon.try_wait().ok().flatten().is_none(), "{text}");
    let _ = daemon.stop(libc::SIGTERM);
}
