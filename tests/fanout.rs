//! One queue, several pairs: two `[[pairs]]` replicate one S3 prefix (moto, real bucket
//! notifications into one real SQS queue) to a local folder and to Azure. One consumer per
//! queue in the process routes every message to both pairs, so neither replica misses the
//! changes the other got (each pair used to run its own consumer of the queue, and SQS gave
//! each message to one of them). A third pair on another prefix of the same bucket takes only
//! its own keys.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;

use common::*;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

#[test]
fn one_queue_feeds_every_pair_it_names() {
    let (bucket, queue) = sqs_bucket("fan");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let store = s3(&bucket);
    let seed_data: BTreeMap<String, Vec<u8>> = (0..5)
        .map(|i| (format!("s{i}.bin"), bytes(i, 64)))
        .collect();
    rt().block_on(seed(&store, "data", &seed_data));
    let local = Place::new(End::Local, "fan-local");
    let azure = Place::new(End::Az("slate-dst"), "fan-az");
    let other = Place::new(End::Local, "fan-other");
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nname = \"to-local\"\nsrc = \"s3://{bucket}/data\"\ndst = \"{}\"\nevents = \"sqs://{queue}\"\n\n\
             [[pairs]]\nname = \"to-azure\"\nsrc = \"s3://{bucket}/data\"\ndst = \"{}\"\nevents = \"sqs://{queue}\"\n\n\
             [[pairs]]\nname = \"other-prefix\"\nsrc = \"s3://{bucket}/other\"\ndst = \"{}\"\nevents = \"sqs://{queue}\"\n",
            local.url(),
            azure.url(),
            other.url()
        ),
    )
    .expect("config");
    let mut c = slate_db(&db);
    c.args(["sync", "--config", &conf.display().to_string()])
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let daemon = spawn_daemon(c, &log, 3);

    // 30 changes: new objects, overwrites of new and seeded ones, deletes
    let mut want = seed_data.clone();
    rt().block_on(async {
        for i in 0..30u64 {
            let (key, body) = match i % 3 {
                0 | 1 => (format!("n{}.bin", i / 3), bytes(100 + i, 50 + i as usize)),
                _ => (format!("s{}.bin", i % 5), bytes(200 + i, 80)),
            };
            store
                .put(
                    &Path::parse(format!("data/{key}")).expect("key"),
                    PutPayload::from(body.clone()),
                )
                .await
                .expect("put");
            want.insert(key, body);
        }
        for key in ["s0.bin", "n1.bin"] {
            store
                .delete(&Path::parse(format!("data/{key}")).expect("key"))
                .await
                .expect("delete");
            want.remove(key);
        }
        store
            .put(
                &Path::parse("other/o.bin").expect("key"),
                PutPayload::from(b"o".to_vec()),
            )
            .await
            .expect("put");
    });
    let src = format!("s3://{bucket}/data");
    wait_equal_within(&db, &src, &local.url(), 90, Some(&log));
    wait_equal_within(&db, &src, &azure.url(), 90, Some(&log));
    wait_equal_within(
        &db,
        &format!("s3://{bucket}/other"),
        &other.url(),
        90,
        Some(&log),
    );
    assert_same(&local.read(), &want);
    assert_same(&azure.read(), &want);
    assert_eq!(
        other.read().keys().collect::<Vec<_>>(),
        vec!["o.bin"],
        "the other prefix's pair takes only its own keys"
    );
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}
