//! Azure's change feed as the daemon's event source (`--events changefeed://ACCOUNT`).
//! Azurite writes no change feed, so these tests write segments into its `$blobchangefeed`
//! container in the published layout (segment manifests under `idx/segments/`, Avro chunk
//! files under `log/NN/`) and format (Avro object container files of the change feed's
//! records), beside the real blobs they describe.
//!
//! The feed is the account's, shared by every test: they run one at a time and each starts
//! from an empty feed.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use apache_avro::types::Value as Avro;
use common::*;
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt};

static FEED: Mutex<()> = Mutex::new(());

const SPEC: &str = "changefeed://devstoreaccount1?poll=200ms";

/// The change feed record's schema (version 4's fields that matter here, as Azure publishes
/// them: optional fields are unions with null).
const SCHEMA: &str = r#"{
  "type": "record", "name": "BlobChangeEvent", "namespace": "com.microsoft.azure.storage.blob",
  "fields": [
    {"name": "schemaVersion", "type": "int"},
    {"name": "topic", "type": "string"},
    {"name": "subject", "type": "string"},
    {"name": "eventType", "type": {"type": "enum", "name": "BlobChangeEventType",
      "symbols": ["UnspecifiedEventType", "BlobCreated", "BlobDeleted", "BlobPropertiesUpdated",
                  "BlobSnapshotCreated", "Control", "BlobTierChanged",
                  "BlobAsyncOperationInitiated", "BlobMetadataUpdated"]}},
    {"name": "eventTime", "type": "string"},
    {"name": "id", "type": "string"},
    {"name": "data", "type": {"type": "record", "name": "BlobChangeEventData", "fields": [
      {"name": "api", "type": "string"},
      {"name": "clientRequestId", "type": "string"},
      {"name": "requestId", "type": "string"},
      {"name": "etag", "type": "string"},
      {"name": "contentType", "type": "string"},
      {"name": "contentLength", "type": "long"},
      {"name": "blobType", "type": "string"},
      {"name": "url", "type": "string"},
      {"name": "sequencer", "type": "string"},
      {"name": "snapshot", "type": ["null", "string"], "default": null}
    ]}}
  ]
}"#;

const SYMBOLS: [&str; 9] = [
    "UnspecifiedEventType",
    "BlobCreated",
    "BlobDeleted",
    "BlobPropertiesUpdated",
    "BlobSnapshotCreated",
    "Control",
    "BlobTierChanged",
    "BlobAsyncOperationInitiated",
    "BlobMetadataUpdated",
];

fn feed() -> Arc<dyn ObjectStore> {
    az("$blobchangefeed")
}

/// Empties the feed (the previous test's segments).
fn clear_feed() {
    let f = feed();
    rt().block_on(async {
        use futures::TryStreamExt;
        let all: Vec<Path> = f
            .list(None)
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .expect("list the feed");
        for p in all {
            f.delete(&p).await.expect("delete");
        }
    });
}

/// One change: (event type, container, blob name, sequencer).
struct Change<'a>(&'a str, &'a str, &'a str, u64);

fn record(c: &Change, n: u64) -> Avro {
    let Change(kind, container, name, seq) = c;
    let s = |v: &str| Avro::String(v.to_string());
    let idx = SYMBOLS.iter().position(|x| x == kind).expect("event type") as u32;
    Avro::Record(vec![
        ("schemaVersion".into(), Avro::Int(4)),
        (
            "topic".into(),
            s("/subscriptions/0/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/devstoreaccount1"),
        ),
        (
            "subject".into(),
            s(&format!("/blobServices/default/containers/{container}/blobs/{name}")),
        ),
        ("eventType".into(), Avro::Enum(idx, kind.to_string())),
        (
            "eventTime".into(),
            s(&chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        ),
        ("id".into(), s(&format!("{n:08x}-0000-0000-0000-000000000000"))),
        (
            "data".into(),
            Avro::Record(vec![
                ("api".into(), s(if *kind == "BlobDeleted" { "DeleteBlob" } else { "PutBlob" })),
                ("clientRequestId".into(), s("c")),
                ("requestId".into(), s("r")),
                ("etag".into(), s("0x8D0000000000000")),
                ("contentType".into(), s("application/octet-stream")),
                ("contentLength".into(), Avro::Long(0)),
                ("blobType".into(), s("BlockBlob")),
                ("url".into(), s("")),
                ("sequencer".into(), s(&format!("{seq:048x}"))),
                ("snapshot".into(), Avro::Union(0, Box::new(Avro::Null))),
            ]),
        ),
    ])
}

/// An Avro chunk file of `changes`.
fn chunk(changes: &[Change]) -> Vec<u8> {
    let schema = apache_avro::Schema::parse_str(SCHEMA).expect("schema");
    let mut w = apache_avro::Writer::new(&schema, Vec::new());
    for (i, c) in changes.iter().enumerate() {
        w.append(record(c, i as u64)).expect("append");
    }
    w.into_inner().expect("avro")
}

/// The folder part of a segment's paths for the hour `hours_ago` before now.
fn hour(hours_ago: i64) -> String {
    let t = chrono::Utc::now() - chrono::Duration::hours(hours_ago);
    t.format("%Y/%m/%d/%H00").to_string()
}

/// Writes a segment of one shard: its chunks (each a list of changes), then its manifest.
fn write_segment(when: &str, status: &str, chunks: &[Vec<u8>]) {
    let f = feed();
    let shard = format!("log/00/{when}/");
    rt().block_on(async {
        for (i, bytes) in chunks.iter().enumerate() {
            let p = Path::parse(format!("{shard}{i:05}.avro")).expect("path");
            f.put(&p, bytes.clone().into()).await.expect("put chunk");
        }
        let meta = serde_json::json!({
            "version": 0, "begin": format!("{when}"), "intervalSecs": 3600, "status": status,
            "config": {"version": 0, "configVersionEtag": "0x0", "numShards": 1,
                       "recordsFormat": "avro", "formatSchemaVersion": 4, "shardDistFnVersion": 1},
            "chunkFilePaths": [format!("$blobchangefeed/{shard}")],
            "storageDiagnostics": {"version": 0, "lastModifiedTime": "", "data": {"aid": "0"}}
        });
        let p = Path::parse(format!("idx/segments/{when}/meta.json")).expect("path");
        f.put(&p, meta.to_string().into_bytes().into())
            .await
            .expect("put manifest");
        let last =
            serde_json::json!({"version": 0, "lastConsumable": chrono::Utc::now().to_rfc3339()});
        f.put(
            &Path::parse("meta/segments.json").expect("path"),
            last.to_string().into_bytes().into(),
        )
        .await
        .expect("put segments.json");
    });
}

fn daemon(db: &std::path::Path, src: &str, dst: &str, log: &std::path::Path) -> Child {
    let mut c = slate_db(db);
    c.args([
        "sync",
        src,
        dst,
        "--events",
        SPEC,
        "--drift-check-secs",
        "0",
        "--quiet",
    ])
    .env("RUST_LOG", "slate=info,warn")
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(log).expect("log"));
    spawn_daemon(c, log, 1)
}

fn key(p: &Place, k: &str) -> String {
    format!("{}/{k}", p.prefix)
}

/// Sets user metadata on an Azurite blob in place (Set Blob Metadata: the bytes stay; Event
/// Grid would say nothing of it, the change feed records it).
fn set_metadata(container: &str, name: &str, meta: &[(&str, &str)]) {
    use object_store::azure::{AzureAccessKey, AzureAuthorizer, AzureCredential};
    let cred = AzureCredential::AccessKey(AzureAccessKey::try_new(AZURITE_KEY).expect("key"));
    let url = format!(
        "{}/devstoreaccount1/{container}/{name}?comp=metadata",
        azurite_url()
    );
    let mut b = http::Request::builder().method("PUT").uri(&url);
    for (k, v) in meta {
        b = b.header(format!("x-ms-meta-{k}"), *v);
    }
    let mut req = b
        .header("content-length", "0")
        .body(HttpRequestBody::from(Vec::new()))
        .expect("request");
    AzureAuthorizer::new(&cred, "devstoreaccount1")
        .try_authorize(&mut req)
        .expect("sign");
    let status = rt().block_on(async {
        let http: HttpClient = ReqwestConnector::default()
            .connect(&ClientOptions::new().with_allow_http(true))
            .expect("client");
        http.execute(req).await.expect("send").status().as_u16()
    });
    assert_eq!(status, 200, "Set Blob Metadata {container}/{name}");
}

/// The user metadata of a replica blob, read with object_store's HEAD.
fn metadata_of(container: &str, name: &str) -> BTreeMap<String, String> {
    rt().block_on(async {
        let r = az(container)
            .get_opts(
                &Path::parse(name).expect("key"),
                object_store::GetOptions {
                    head: true,
                    ..Default::default()
                },
            )
            .await
            .expect("head");
        r.attributes
            .iter()
            .filter_map(|(k, v)| match k {
                object_store::Attribute::Metadata(n) => Some((n.to_string(), v.to_string())),
                _ => None,
            })
            .collect()
    })
}

#[test]
fn the_feed_drives_creates_overwrites_deletes_and_metadata_in_order() {
    let _one = FEED.lock().unwrap_or_else(|e| e.into_inner());
    clear_feed();
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let src = Place::new(End::Az("slate-src"), "cf-src");
    let dst = Place::new(End::Az("slate-dst"), "cf-dst");
    src.seed(&[("old".to_string(), b"old".to_vec())].into());
    let d = daemon(&db, &src.url(), &dst.url(), &log);
    wait_equal_within(&db, &src.url(), &dst.url(), 60, Some(&log));

    // the blobs as they end, and the feed's record of how they got there: `a` written twice,
    // `gone` written then deleted, `old` deleted, a record of a container no pair follows
    src.seed(
        &[
            ("a".to_string(), b"second".to_vec()),
            ("b".to_string(), b"bee".to_vec()),
            ("gone".to_string(), b"x".to_vec()),
        ]
        .into(),
    );
    src.remove(&["gone", "old"]);
    let (ka, kb, kg, ko) = (
        key(&src, "a"),
        key(&src, "b"),
        key(&src, "gone"),
        key(&src, "old"),
    );
    let changes = [
        Change("BlobCreated", "slate-src", &ka, 1),
        Change("BlobCreated", "slate-src", &kb, 2),
        Change("BlobCreated", "slate-src", &kg, 3),
        Change("BlobCreated", "another-container", "x", 4),
        Change("BlobCreated", "slate-src", &ka, 5),
        Change("BlobDeleted", "slate-src", &kg, 6),
        Change("BlobDeleted", "slate-src", &ko, 7),
        Change("BlobSnapshotCreated", "slate-src", &kb, 8),
    ];
    write_segment(&hour(0), "Publishing", &[chunk(&changes)]);
    wait_equal_within(&db, &src.url(), &dst.url(), 60, Some(&log));
    let got = dst.read();
    assert_eq!(got.get("a").map(Vec::as_slice), Some(&b"second"[..]));
    assert!(
        !got.contains_key("gone") && !got.contains_key("old"),
        "{got:?}"
    );

    // Set Blob Metadata: no Event Grid event, a BlobPropertiesUpdated record in the feed
    set_metadata("slate-src", &kb, &[("owner", "feed")]);
    write_segment(
        &hour(0),
        "Publishing",
        &[
            chunk(&changes),
            chunk(&[Change("BlobPropertiesUpdated", "slate-src", &kb, 9)]),
        ],
    );
    let dk = key(&dst, "b");
    wait_for("the metadata change at the replica", 60, || {
        metadata_of("slate-dst", &dk)
            .get("owner")
            .map(String::as_str)
            == Some("feed")
    });
    let text = read_log(&log);
    assert!(!text.contains("dead letter"), "{}", log_tail(&text));
    assert_eq!(d.stop(libc::SIGTERM), Some(0));
}

#[test]
fn a_daemon_killed_mid_segment_resumes_from_its_cursor_and_one_down_for_days_catches_up() {
    let _one = FEED.lock().unwrap_or_else(|e| e.into_inner());
    clear_feed();
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let src = Place::new(End::Az("slate-src"), "cfk-src");
    let dst = Place::new(End::Local, "cfk-dst");
    src.seed(&[("first".to_string(), b"1".to_vec())].into());
    let d = daemon(&db, &src.url(), &dst.url(), &log);
    wait_equal_within(&db, &src.url(), &dst.url(), 60, Some(&log));
    assert_eq!(d.stop(libc::SIGTERM), Some(0));

    // three days of hourly segments while the daemon was down: 72 segments, 20 changes each
    let mut data = BTreeMap::new();
    let mut seq = 0u64;
    let names: Vec<String> = (0..72 * 20).map(|i| format!("k{i:05}")).collect();
    for (i, n) in names.iter().enumerate() {
        data.insert(n.clone(), format!("v{i}").into_bytes());
    }
    src.seed(&data);
    for h in 0..72 {
        let keys: Vec<String> = (0..20).map(|j| key(&src, &names[h * 20 + j])).collect();
        let changes: Vec<Change> = keys
            .iter()
            .map(|k| {
                seq += 1;
                Change("BlobCreated", "slate-src", k, seq)
            })
            .collect();
        // hours from 72 ago to now, the newest still open
        let status = if h == 71 { "Publishing" } else { "Finalized" };
        write_segment(&hour(71 - h as i64), status, &[chunk(&changes)]);
    }
    let start = Instant::now();
    let mut d = daemon(&db, &src.url(), &dst.url(), &log);
    // killed while it reads the feed: some segments stored, not all
    let cursor = || -> Option<String> {
        let c = rusqlite::Connection::open(&db).ok()?;
        c.query_row("SELECT cursor FROM feed_cursors", [], |r| r.get(0))
            .ok()
    };
    let segment = |c: &str| -> String {
        let v: serde_json::Value = serde_json::from_str(c).expect("cursor JSON");
        v["segment"].as_str().unwrap_or_default().to_string()
    };
    wait_for("a cursor past the first segment", 120, || {
        cursor().is_some_and(|c| {
            let s = segment(&c);
            !s.is_empty() && !s.contains(&hour(71))
        })
    });
    d.kill9();
    let at_kill = cursor().expect("a cursor");
    let applied_at_kill = walk(&dst.root);
    assert!(
        !at_kill.contains(&hour(0)),
        "the kill came after the whole feed was read: {at_kill}"
    );
    let d = daemon(&db, &src.url(), &dst.url(), &log);
    wait_equal_within(&db, &src.url(), &dst.url(), 300, Some(&log));
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "catch-up of 72 segments ({} changes) in {secs:.1} s ({:.0} events/s) with a SIGKILL \
         in the middle (cursor then: {at_kill}; {applied_at_kill} replicas made by then)",
        names.len(),
        names.len() as f64 / secs
    );
    // the restart read on from the cursor stored before the kill, not from the feed's start
    let text = read_log(&log);
    let seg = segment(&at_kill);
    assert!(
        text.lines()
            .any(|l| l.contains("reading on from the cursor") && l.contains(&seg)),
        "the restart did not resume at {seg}: {}",
        log_tail(&text)
    );
    assert_eq!(d.stop(libc::SIGTERM), Some(0));
}

/// Files under `root`.
fn walk(root: &std::path::Path) -> usize {
    read_local(root).len()
}
