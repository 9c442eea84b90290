//! Metadata-only changes replicate without moving the bytes: an S3 copy-in-place with new
//! metadata (`ObjectCreated:Copy`) reaches an S3 and an Azure replica through the daemon, and
//! `diff --json` / `sync --once` see and apply one, while a counting proxy in front of moto
//! proves that no GET of the object's body was sent.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use common::*;
use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::path::Path;
use object_store::{Attribute, ClientOptions, ObjectStore, ObjectStoreExt};

/// A loopback TCP proxy to moto that counts the GETs of the paths given (request lines
/// `GET /BUCKET/KEY` in what clients send; HEADs, listings and `?tagging` reads do not count).
struct Counter {
    addr: String,
    gets: Arc<AtomicU64>,
}

impl Counter {
    fn start(watch: Vec<String>) -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = format!("http://{}", listener.local_addr().expect("addr"));
        let upstream = s3_endpoint().trim_start_matches("http://").to_string();
        let gets = Arc::new(AtomicU64::new(0));
        let g = gets.clone();
        let watch = Arc::new(watch);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (g, watch) = (g.clone(), watch.clone());
                let mut client_r = client;
                let mut server_w = server;
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    // the tail of the previous read, so a request line split across reads counts
                    let mut tail: Vec<u8> = Vec::new();
                    while let Ok(n) = client_r.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let mut hay = std::mem::take(&mut tail);
                        hay.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&hay);
                        for w in watch.iter() {
                            let line = format!("GET {w} ");
                            let line_q = format!("GET {w}?");
                            // a read of the object's tags is no read of its body
                            let tags = format!("GET {w}?tagging");
                            let n = text.matches(&line).count() + text.matches(&line_q).count()
                                - text.matches(&tags).count();
                            g.fetch_add(n as u64, Relaxed);
                        }
                        let keep = hay.len().saturating_sub(256);
                        // only what could start a line not yet counted
                        tail = hay[keep..].to_vec();
                        if let Some(p) = tail.iter().rposition(|b| *b == b'\n') {
                            tail.drain(..=p);
                        }
                        if server_w.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = server_w.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Counter { addr, gets }
    }
}

/// `slate sync --config CONF` on `db` through the counting proxy at `endpoint`, its log (every
/// applied key) in `log`.
fn daemon_cmd(
    db: &std::path::Path,
    conf: &std::path::Path,
    log: &std::path::Path,
    endpoint: &str,
) -> std::process::Command {
    let mut c = slate_db(db);
    c.env("AWS_ENDPOINT_URL", endpoint)
        .args(["sync", "--config"])
        .arg(conf)
        .args(["--drift-check-secs", "0", "--quiet"])
        .env("RUST_LOG", "slate=debug,warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    c
}

/// Waits for a later second than `key`'s last write: S3 keeps last-modified in seconds, so a
/// listing tells a change apart only from one made in an earlier second.
fn after_last_write(src: &Arc<dyn ObjectStore>, key: &str) {
    let last = rt()
        .block_on(src.head(&Path::parse(key).unwrap()))
        .expect("head")
        .last_modified;
    wait_for("a later second than the last write", 5, || {
        chrono::Utc::now().timestamp() > last.timestamp()
    });
}

/// Replaces the metadata of `bucket/key` in place, as `aws s3 cp s3://b/k s3://b/k
/// --metadata-directive REPLACE` does (moto publishes `ObjectCreated:Copy`).
fn s3_replace_metadata(bucket: &str, key: &str, content_type: &str, meta: &[(&str, &str)]) {
    let source = format!("/{bucket}/{key}");
    let names: Vec<String> = meta
        .iter()
        .map(|(k, _)| format!("x-amz-meta-{k}"))
        .collect();
    let mut headers = vec![
        ("x-amz-copy-source", source.as_str()),
        ("x-amz-metadata-directive", "REPLACE"),
        ("content-type", content_type),
    ];
    headers.extend(names.iter().zip(meta).map(|(n, (_, v))| (n.as_str(), *v)));
    let (status, _, body) = s3_signed("PUT", &format!("/{bucket}/{key}"), &headers, "");
    assert!(status == 200, "copy-in-place: {status} {body}");
}

/// Content-Type and the user metadata of an object, read back with the store's own HEAD.
fn head(store: &Arc<dyn ObjectStore>, key: &str) -> (String, BTreeMap<String, String>) {
    rt().block_on(async {
        let Ok(r) = store
            .get_opts(
                &Path::parse(key).unwrap(),
                object_store::GetOptions {
                    head: true,
                    ..Default::default()
                },
            )
            .await
        else {
            return (String::new(), BTreeMap::new());
        };
        let ct = r
            .attributes
            .get(&Attribute::ContentType)
            .map(|v| v.to_string())
            .unwrap_or_default();
        let meta = r
            .attributes
            .iter()
            .filter_map(|(k, v)| match k {
                Attribute::Metadata(n) => Some((n.to_string(), v.to_string())),
                _ => None,
            })
            .collect();
        (ct, meta)
    })
}

/// The storage class moto reports for an object (None: STANDARD).
fn s3_class(bucket: &str, key: &str) -> Option<String> {
    let (_, headers, _) = s3_signed("HEAD", &format!("/{bucket}/{key}"), &[], "");
    headers.get("x-amz-storage-class").cloned()
}

/// Content-Type and `owner` of a GCS object, from fake-gcs-server's JSON API.
fn gcs_owner(key: &str) -> (String, String) {
    let url = format!(
        "{}/storage/v1/b/slate-dst/o/{}",
        gcs_endpoint(),
        url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
    );
    let v: serde_json::Value = reqwest::blocking::get(url)
        .expect("get")
        .json()
        .expect("json");
    let s = |p: &str| {
        v.pointer(p)
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_string()
    };
    (s("/contentType"), s("/metadata/owner"))
}

fn owner_is(store: &Arc<dyn ObjectStore>, key: &str, owner: &str, ct: &str) -> bool {
    let (got_ct, meta) = head(store, key);
    got_ct == ct && meta.get("owner").map(String::as_str) == Some(owner)
}

#[test]
fn a_metadata_only_change_reaches_s3_and_azure_replicas_without_moving_bytes() {
    let (bucket, queue) = sqs_bucket("meta");
    let prefix = unique("mo");
    let key = format!("{prefix}/page.html");
    let body = bytes(5, 200_000);
    let src = s3(&bucket);
    rt().block_on(async {
        let mut attrs = object_store::Attributes::new();
        attrs.insert(Attribute::ContentType, "text/plain".into());
        attrs.insert(Attribute::Metadata("owner".into()), "team-a".into());
        src.put_opts(
            &Path::parse(&key).unwrap(),
            body.clone().into(),
            object_store::PutOptions {
                attributes: attrs,
                ..Default::default()
            },
        )
        .await
        .expect("seed");
    });
    let counter = Counter::start(vec![format!("/{bucket}/{key}")]);
    // a GCS replica kept by sync --once (no events), first filled now
    let gs_rep = unique("mo-gs");
    let gs_url = format!("gs://slate-dst/{gs_rep}");
    let dir = tempfile::tempdir().unwrap();
    let (db, log, conf) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("slate.toml"),
    );
    let (s3_rep, az_rep) = (unique("mo-s3"), unique("mo-az"));
    std::fs::write(
        &conf,
        format!(
            "[[pairs]]\nname = \"to-s3\"\nsrc = \"s3://{bucket}/{prefix}\"\n\
             dst = \"s3://slate-dst/{s3_rep}\"\nevents = \"sqs://{queue}\"\n\
             storage_class = \"STANDARD_IA\"\n\n\
             [[pairs]]\nname = \"to-az\"\nsrc = \"s3://{bucket}/{prefix}\"\n\
             dst = \"az://slate-dst/{az_rep}\"\nevents = \"sqs://{queue}\"\n"
        ),
    )
    .unwrap();
    let c = daemon_cmd(&db, &conf, &log, &counter.addr);
    let su = format!("s3://{bucket}/{prefix}");
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr)
            .args(["sync", "--once", &su, &gs_url]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        gcs_owner(&format!("{gs_rep}/page.html")),
        ("text/plain".into(), "team-a".into())
    );
    let mut daemon = spawn_daemon(c, &log, 2);
    let (dst_s3, dst_az) = (s3("slate-dst"), az("slate-dst"));
    let (k_s3, k_az) = (format!("{s3_rep}/page.html"), format!("{az_rep}/page.html"));
    let backfilled = || {
        owner_is(&dst_s3, &k_s3, "team-a", "text/plain")
            && owner_is(&dst_az, &k_az, "team-a", "text/plain")
    };
    // the replicas themselves say when both backfills are done
    wait_for("both backfills", 60, backfilled);
    // the backfill read the body: one GET per replica (or per chunk), no more from now on
    let before = counter.gets.load(Relaxed);
    assert!(before >= 1, "the backfill's copies went through the proxy");

    s3_replace_metadata(
        &bucket,
        &key,
        "text/html; charset=utf-8",
        &[("owner", "team-b")],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(owner_is(&dst_s3, &k_s3, "team-b", "text/html; charset=utf-8")
        && owner_is(&dst_az, &k_az, "team-b", "text/html; charset=utf-8"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the new metadata did not reach both replicas: s3 {:?}, az {:?}\n{}",
            head(&dst_s3, &k_s3),
            head(&dst_az, &k_az),
            log_tail(&read_log(&log))
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        counter.gets.load(Relaxed),
        before,
        "a metadata-only change moved no bytes: {}",
        log_tail(&read_log(&log))
    );
    // the pair's storage class stayed through the update in place
    assert_eq!(s3_class("slate-dst", &k_s3).as_deref(), Some("STANDARD_IA"));
    // the bytes are the same objects still
    assert_eq!(
        rt().block_on(read_all(&dst_s3, &s3_rep)).get("page.html"),
        Some(&body)
    );
    assert!(daemon.try_wait().ok().flatten().is_none());
    let _ = daemon.stop(libc::SIGTERM);

    // --once sees the next one by the source's last-modified, which S3 keeps in seconds: a
    // change within the second of the last write is seen by the daemon (its event), not by
    // a listing; the next change is made in a later second
    after_last_write(&src, &key);
    s3_replace_metadata(
        &bucket,
        &key,
        "text/html; charset=utf-8",
        &[("owner", "team-c")],
    );
    let du = format!("s3://slate-dst/{s3_rep}");
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr)
            .args(["diff", &su, &du, "--json"]);
        c
    });
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains(r#""status":"metadata_changed""#) && text.contains(r#""metadata_changed":1"#),
        "{text}"
    );
    let before = counter.gets.load(Relaxed);
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr)
            .args(["sync", "--once", &su, &du]);
        c
    });
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert!(line.contains("1 updated (metadata only"), "{line}");
    assert!(owner_is(
        &dst_s3,
        &k_s3,
        "team-c",
        "text/html; charset=utf-8"
    ));
    assert_eq!(
        counter.gets.load(Relaxed),
        before,
        "no GET of the body: {line}"
    );
    // GCS: patched in place, no GET either
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr)
            .args(["sync", "--once", &su, &gs_url]);
        c
    });
    let line = stdout(&out) + &stderr(&out);
    assert!(line.contains("1 updated (metadata only"), "{line}");
    assert_eq!(
        gcs_owner(&format!("{gs_rep}/page.html")),
        ("text/html; charset=utf-8".into(), "team-c".into())
    );
    assert_eq!(
        counter.gets.load(Relaxed),
        before,
        "no GET of the body: {line}"
    );
    // and now they agree
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr)
            .args(["diff", &su, &du, "--json"]);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // asked for no store-side copies, a change of metadata alone is written again whole (the
    // server may lack the CopyObject that replaces metadata in place): a GET of the body;
    // made in a later second than the last write, as above
    after_last_write(&src, &key);
    s3_replace_metadata(&bucket, &key, "text/plain", &[("owner", "team-d")]);
    let before = counter.gets.load(Relaxed);
    let out = run({
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", &counter.addr).args([
            "sync",
            "--once",
            "--no-server-side-copy",
            &su,
            &du,
        ]);
        c
    });
    let line = stdout(&out) + &stderr(&out);
    assert!(out.status.success(), "{line}");
    assert!(owner_is(&dst_s3, &k_s3, "team-d", "text/plain"), "{line}");
    assert!(
        counter.gets.load(Relaxed) > before,
        "the body read and written again: {line}"
    );
}

#[test]
fn a_gcs_metadata_update_notification_reaches_an_s3_replica() {
    // fake-gcs-server updates metadata (objects.patch) but publishes no OBJECT_METADATA_UPDATE:
    // the test patches the object and then publishes the notification GCS would send.
    let sub = unique("slate-mdu");
    let ps = |path: &str| format!("{}/v1/projects/test-project/{path}", pubsub_url());
    let http = reqwest::blocking::Client::new();
    let r = http
        .put(ps(&format!("subscriptions/{sub}")))
        .header("content-type", "application/json")
        .body(r#"{"topic": "projects/test-project/topics/gcs-events", "ackDeadlineSeconds": 10}"#)
        .send()
        .expect("subscription");
    assert!(r.status().is_success(), "subscription: {}", r.status());
    let prefix = unique("mdu");
    let key = format!("{prefix}/doc.txt");
    let write = gcs_writer("slate-src");
    rt().block_on(async {
        let mut attrs = object_store::Attributes::new();
        attrs.insert(Attribute::ContentType, "text/plain".into());
        attrs.insert(Attribute::Metadata("owner".into()), "team-a".into());
        write
            .put_opts(
                &Path::parse(&key).unwrap(),
                b"a document".to_vec().into(),
                object_store::PutOptions {
                    attributes: attrs,
                    ..Default::default()
                },
            )
            .await
            .expect("seed");
    });
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("s.db"), dir.path().join("d.log"));
    let rep = unique("mdu-s3");
    let spec = format!("pubsub://projects/test-project/subscriptions/{sub}");
    let mut daemon = Daemon::start(
        &db,
        &format!("gs://slate-src/{prefix}"),
        &format!("s3://slate-dst/{rep}"),
        &["--events", &spec],
        &log,
    );
    let dst = s3("slate-dst");
    let k_dst = format!("{rep}/doc.txt");
    wait_for("the backfill", 60, || {
        owner_is(&dst, &k_dst, "team-a", "text/plain")
    });

    // the metadata changes at the source, and GCS says so
    let obj = format!(
        "{}/storage/v1/b/slate-src/o/{}",
        gcs_endpoint(),
        url::form_urlencoded::byte_serialize(key.as_bytes()).collect::<String>()
    );
    let r = http
        .patch(&obj)
        .header("content-type", "application/json")
        .body(r#"{"contentType": "text/markdown", "metadata": {"owner": "team-b"}}"#)
        .send()
        .expect("patch");
    assert!(r.status().is_success(), "patch: {}", r.status());
    let v: serde_json::Value = http.get(&obj).send().expect("get").json().expect("json");
    let generation = v["generation"].as_str().unwrap_or("1").to_string();
    let data = serde_json::json!({"kind": "storage#object", "bucket": "slate-src", "name": key,
        "generation": generation, "metageneration": "2", "size": "10"});
    let msg = serde_json::json!({"messages": [{"data": b64(&data.to_string()), "attributes": {
        "eventType": "OBJECT_METADATA_UPDATE", "payloadFormat": "JSON_API_V1",
        "bucketId": "slate-src", "objectId": key, "objectGeneration": generation}}]});
    let r = http
        .post(ps("topics/gcs-events:publish"))
        .header("content-type", "application/json")
        .body(msg.to_string())
        .send()
        .expect("publish");
    assert!(r.status().is_success(), "publish: {}", r.status());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !owner_is(&dst, &k_dst, "team-b", "text/markdown") {
        assert!(
            std::time::Instant::now() < deadline,
            "the metadata update did not reach the replica: {:?}\n{}",
            head(&dst, &k_dst),
            log_tail(&daemon.log_text())
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // the replica changes before the daemon logs the key as applied: wait for the line
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !daemon.log_text().contains("MetaUpdated") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            log_tail(&daemon.log_text())
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(daemon.stop(), Some(0));
    let _ = http.delete(ps(&format!("subscriptions/{sub}"))).send();
}

/// A signed request to moto for `bucket/key_and_query` with a body; status and body.
fn s3_call(method: &str, bucket: &str, key_and_query: &str, body: &str) -> (u16, String) {
    s3_raw(method, &format!("/{bucket}/{key_and_query}"), body)
}

/// The tags of an S3 object, `k=v` sorted.
fn s3_tags(bucket: &str, key: &str) -> Vec<String> {
    let (status, xml) = s3_call("GET", bucket, &format!("{key}?tagging"), "");
    assert_eq!(status, 200, "{xml}");
    let mut out: Vec<String> = slate::stores::s3tags::parse_tagging(&xml)
        .expect("tags")
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.sort();
    out
}

/// The blob index tags of an Azurite blob, `k=v` sorted.
fn az_tags(container: &str, key: &str) -> Vec<String> {
    use object_store::azure::{AzureAccessKey, AzureAuthorizer, AzureCredential};
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    let cred = AzureCredential::AccessKey(AzureAccessKey::try_new(KEY).expect("key"));
    let mut req = http::Request::builder()
        .method("GET")
        .uri(format!(
            "{}/devstoreaccount1/{container}/{key}?comp=tags",
            azurite_url()
        ))
        .body(HttpRequestBody::from(Vec::new()))
        .expect("request");
    AzureAuthorizer::new(&cred, "devstoreaccount1")
        .try_authorize(&mut req)
        .expect("sign");
    let client = ReqwestConnector::default()
        .connect(&ClientOptions::new().with_allow_http(true))
        .expect("client");
    let xml = rt().block_on(async move {
        let resp = client.execute(req).await.expect("send");
        let body = resp.into_body().bytes().await.unwrap_or_default();
        String::from_utf8_lossy(&body).to_string()
    });
    let mut out: Vec<String> = slate::stores::s3tags::parse_tagging(&xml)
        .expect("tags")
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.sort();
    out
}

#[test]
fn s3_tags_travel_and_a_tagging_change_reaches_s3_and_azure_replicas() {
    let (bucket, queue) = sqs_bucket("tags");
    // the bucket's notifications, with tagging events too
    let arn = format!("arn:aws:sqs:us-east-1:123456789012:{queue}");
    let conf = format!(
        "<NotificationConfiguration><QueueConfiguration><Id>slate</Id><Queue>{arn}</Queue>\
         <Event>s3:ObjectCreated:*</Event><Event>s3:ObjectRemoved:*</Event>\
         <Event>s3:ObjectTagging:*</Event></QueueConfiguration></NotificationConfiguration>"
    );
    let (st, body) = s3_call("PUT", &bucket, "?notification", &conf);
    assert_eq!(st, 200, "notification configuration: {body}");
    let prefix = unique("tg");
    let key = format!("{prefix}/model.bin");
    let data = bytes(11, 7 * MIB);
    let src = s3(&bucket);
    rt().block_on(async {
        let mut tags = object_store::TagSet::default();
        tags.push("team", "vision");
        tags.push("stage", "raw data");
        src.put_opts(
            &Path::parse(&key).unwrap(),
            data.clone().into(),
            object_store::PutOptions {
                tags,
                ..Default::default()
            },
        )
        .await
        .expect("seed");
    });
    // and a small one (one Put Blob's worth) with tags Azure must be told apart from
    let small = format!("{prefix}/note.txt");
    rt().block_on(async {
        let mut tags = object_store::TagSet::default();
        tags.push("owner@corp", "a b");
        src.put_opts(
            &Path::parse(&small).unwrap(),
            b"note".to_vec().into(),
            object_store::PutOptions {
                tags,
                ..Default::default()
            },
        )
        .await
        .expect("seed");
    });
    let counter = Counter::start(vec![format!("/{bucket}/{key}")]);
    let dir = tempfile::tempdir().unwrap();
    let (db, log, conf) = (
        dir.path().join("s.db"),
        dir.path().join("d.log"),
        dir.path().join("slate.toml"),
    );
    let (s3_rep, az_rep) = (unique("tg-s3"), unique("tg-az"));
    std::fs::write(
        &conf,
        format!(
            "[copy]\nchunk_size = \"5MiB\"\n\n\
             [[pairs]]\nsrc = \"s3://{bucket}/{prefix}\"\ndst = \"s3://slate-dst/{s3_rep}\"\n\
             events = \"sqs://{queue}\"\n\n\
             [[pairs]]\nsrc = \"s3://{bucket}/{prefix}\"\ndst = \"az://slate-dst/{az_rep}\"\n\
             events = \"sqs://{queue}\"\n"
        ),
    )
    .unwrap();
    let c = daemon_cmd(&db, &conf, &log, &counter.addr);
    let mut daemon = spawn_daemon(c, &log, 2);
    let (k_s3, k_az) = (format!("{s3_rep}/model.bin"), format!("{az_rep}/model.bin"));
    let before = vec!["stage=raw data".to_string(), "team=vision".to_string()];
    // the backfill: server-side within S3 (the store copies the tags), a multipart upload to
    // Azure (the block list carries them)
    wait_for("both backfills", 60, || {
        rt().block_on(dst_has(&k_s3)) && rt().block_on(az_has(&k_az))
    });
    assert_eq!(s3_tags("slate-dst", &k_s3), before);
    assert_eq!(az_tags("slate-dst", &k_az), before);
    // the small one: a space kept as a space, `@` (which Azure refuses) as `_`
    wait_for("the small one at Azure", 60, || {
        rt().block_on(az_has(&format!("{az_rep}/note.txt")))
    });
    assert_eq!(
        az_tags("slate-dst", &format!("{az_rep}/note.txt")),
        vec!["owner_corp=a b".to_string()]
    );
    let gets = counter.gets.load(Relaxed);

    // new tags at the source (ObjectTagging:Put): both replicas follow, no byte moves
    let xml = "<Tagging><TagSet><Tag><Key>team</Key><Value>vision</Value></Tag>\
               <Tag><Key>stage</Key><Value>curated</Value></Tag></TagSet></Tagging>";
    let (st, body) = s3_call("PUT", &bucket, &format!("{key}?tagging"), xml);
    assert_eq!(st, 200, "put tagging: {body}");
    let after = vec!["stage=curated".to_string(), "team=vision".to_string()];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(s3_tags("slate-dst", &k_s3) == after && az_tags("slate-dst", &k_az) == after) {
        assert!(
            std::time::Instant::now() < deadline,
            "tags did not follow: s3 {:?}, az {:?}\n{}",
            s3_tags("slate-dst", &k_s3),
            az_tags("slate-dst", &k_az),
            log_tail(&read_log(&log))
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        counter.gets.load(Relaxed),
        gets,
        "a tagging change moved no bytes"
    );
    assert!(daemon.try_wait().ok().flatten().is_none());
    let _ = daemon.stop(libc::SIGTERM);
}

async fn dst_has(key: &str) -> bool {
    s3("slate-dst")
        .head(&Path::parse(key).unwrap())
        .await
        .is_ok()
}

async fn az_has(key: &str) -> bool {
    az("slate-dst")
        .head(&Path::parse(key).unwrap())
        .await
        .is_ok()
}
