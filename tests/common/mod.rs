//! Shared helpers for the integration tests: the real emulators (started by
//! `scripts/test.sh`), stores built independently of slate's own `store.rs` for seeding and
//! checking, a dataset with the awkward cases, and a way to run the `slate` binary.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};

pub mod mount;

pub const MIB: usize = 1 << 20;

fn var(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

pub fn s3_endpoint() -> String {
    var("SLATE_TEST_S3_ENDPOINT", "http://127.0.0.1:5000")
}
/// Azurite blob URL without the account path (what object_store's emulator mode wants).
pub fn azurite_url() -> String {
    let full = var(
        "SLATE_TEST_AZURITE_BLOB",
        "http://127.0.0.1:10000/devstoreaccount1",
    );
    full.trim_end_matches("/devstoreaccount1").to_string()
}
/// Azurite queue URL without the account path (what slate's AZURITE_QUEUE_STORAGE_URL wants).
pub fn azurite_queue_url() -> String {
    let full = var(
        "SLATE_TEST_AZURITE_QUEUE",
        "http://127.0.0.1:10001/devstoreaccount1",
    );
    full.trim_end_matches("/devstoreaccount1").to_string()
}
/// The Pub/Sub emulator's host:port.
pub fn pubsub_host() -> String {
    var("PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
}
/// The Pub/Sub emulator's REST endpoint.
pub fn pubsub_url() -> String {
    format!("http://{}", pubsub_host())
}
/// fake-gcs-server itself (reads, lists).
pub fn gcs_endpoint() -> String {
    var("SLATE_TEST_GCS_ENDPOINT", "http://127.0.0.1:4443")
}
/// The XML-API write shim in front of fake-gcs-server (see README, "GCS as a destination").
pub fn gcs_write_endpoint() -> String {
    var("SLATE_TEST_GCS_WRITE_ENDPOINT", "http://127.0.0.1:4444")
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A prefix no other test (or earlier run) uses.
pub fn unique(name: &str) -> String {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}-{}-{n}", std::process::id())
}

pub fn s3(bucket: &str) -> Arc<dyn ObjectStore> {
    s3_at(&s3_endpoint(), bucket)
}

/// An S3 client for `bucket` at another S3 server (s3s-fs), with the test keys.
pub fn s3_at(endpoint: &str, bucket: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .with_bucket_name(bucket)
            .build()
            .expect("s3 store"),
    )
}

pub fn az(container: &str) -> Arc<dyn ObjectStore> {
    // SAFETY of env: object_store reads AZURITE_BLOB_STORAGE_URL in emulator mode; all tests set
    // the same value, so concurrent tests agree.
    unsafe { std::env::set_var("AZURITE_BLOB_STORAGE_URL", azurite_url()) };
    Arc::new(
        MicrosoftAzureBuilder::new()
            .with_use_emulator(true)
            .with_container_name(container)
            .build()
            .expect("azure store"),
    )
}

fn gcs_at(bucket: &str, url: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        GoogleCloudStorageBuilder::new()
            .with_base_url(url)
            .with_bearer_token("emulator")
            .with_client_options(ClientOptions::new().with_allow_http(true))
            .with_bucket_name(bucket)
            .build()
            .expect("gcs store"),
    )
}

/// GCS for reading and checking: fake-gcs-server directly, no shim in the way.
pub fn gcs(bucket: &str) -> Arc<dyn ObjectStore> {
    gcs_at(bucket, &gcs_endpoint())
}

/// GCS for seeding (writes go through the shim).
pub fn gcs_writer(bucket: &str) -> Arc<dyn ObjectStore> {
    gcs_at(bucket, &gcs_write_endpoint())
}

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The awkward cases in one set: a multi-chunk object of odd size (chunk 5 MiB), one of
/// exactly one chunk, zero-byte objects, unicode, spaces, `+`, `%`, a very long key, and
/// `small` small objects in nested folders. Keys are relative.
pub fn dataset(small: usize) -> BTreeMap<String, Vec<u8>> {
    let mut d = BTreeMap::new();
    d.insert("large/odd.bin".to_string(), bytes(1, 12 * MIB + 12_345));
    d.insert("large/exact.bin".to_string(), bytes(2, 5 * MIB));
    d.insert("zero.bin".to_string(), Vec::new());
    d.insert("deep/a/b/c/zero-too".to_string(), Vec::new());
    d.insert("unicode/ü 日本語 ✓.txt".to_string(), b"unicode".to_vec());
    d.insert("space dir/a b.txt".to_string(), b"spaces".to_vec());
    d.insert("chars/plus+and%percent%20x.bin".to_string(), bytes(3, 777));
    let long = format!(
        "{}/{}/{}/{}.bin",
        "l".repeat(200),
        "o".repeat(200),
        "n".repeat(200),
        "g".repeat(200)
    );
    d.insert(long, bytes(4, 99));
    for i in 0..small {
        d.insert(
            format!("small/{:02}/obj-{i:04}.dat", i % 7),
            bytes(100 + i as u64, (i * 131) % 20_000),
        );
    }
    d
}

pub async fn seed(store: &Arc<dyn ObjectStore>, prefix: &str, data: &BTreeMap<String, Vec<u8>>) {
    let puts = data.iter().map(|(k, v)| {
        let store = store.clone();
        let path = Path::parse(format!("{prefix}/{k}")).expect("key");
        let v = v.clone();
        async move { store.put(&path, PutPayload::from(v)).await.map(|_| ()) }
    });
    futures::stream::iter(puts)
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("seeding");
}

use futures::StreamExt;

/// Everything under `prefix`, read back: relative key → bytes.
pub async fn read_all(store: &Arc<dyn ObjectStore>, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    let p = Path::parse(prefix).expect("prefix");
    let metas: Vec<_> = store.list(Some(&p)).try_collect().await.expect("listing");
    let mut out = BTreeMap::new();
    for m in metas {
        let data = match store.get(&m.location).await {
            Ok(r) => r.bytes().await.expect("body"),
            // deleted between the listing and the read (a daemon at work): not there
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => panic!("get {}: {e}", m.location),
        };
        let rel = m
            .location
            .as_ref()
            .strip_prefix(&format!("{prefix}/"))
            .expect("under prefix")
            .to_string();
        out.insert(rel, data.to_vec());
    }
    out
}

pub fn seed_local(root: &std::path::Path, data: &BTreeMap<String, Vec<u8>>) {
    for (k, v) in data {
        let p = root.join(k);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, v).expect("write");
    }
}

/// Every file under `root` (hidden temp files included, so a leftover shows up).
pub fn read_local(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let e = e.expect("entry");
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .to_string();
                // a running daemon may rename or sweep a temporary file between the listing
                // and the read: a file gone by then is not there
                match std::fs::read(&p) {
                    Ok(b) => {
                        out.insert(rel, b);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => panic!("read {}: {e}", p.display()),
                }
            }
        }
    }
    out
}

/// Compares two datasets and names the first difference (no 12 MiB dumps in the output).
pub fn assert_same(got: &BTreeMap<String, Vec<u8>>, want: &BTreeMap<String, Vec<u8>>) {
    let gk: Vec<_> = got.keys().collect();
    let wk: Vec<_> = want.keys().collect();
    assert_eq!(gk, wk, "destination keys differ from source keys");
    for (k, v) in want {
        let g = &got[k];
        assert!(
            g == v,
            "content of {k} differs: {} bytes vs {} expected",
            g.len(),
            v.len()
        );
    }
}

/// The `slate` binary with every emulator's environment set, nothing else from the cloud.
pub fn slate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_slate"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_")
            || k.starts_with("AZURE_")
            || k.starts_with("GOOGLE_")
            || k == "STORAGE_EMULATOR_HOST"
        {
            c.env_remove(k);
        }
    }
    c.env("AWS_ENDPOINT_URL", s3_endpoint())
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AZURE_STORAGE_USE_EMULATOR", "true")
        .env("AZURITE_BLOB_STORAGE_URL", azurite_url())
        .env("AZURITE_QUEUE_STORAGE_URL", azurite_queue_url())
        .env("PUBSUB_EMULATOR_HOST", pubsub_host())
        .env("STORAGE_EMULATOR_HOST", gcs_write_endpoint())
        .env("XDG_CONFIG_HOME", "/nonexistent-slate-test-config")
        // the default database (where `slate copy` records its uploads) of this test process,
        // not the user's
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join(format!("slate-test-data-{}", std::process::id())),
        )
        .env("RUST_LOG", "warn");
    c
}

pub fn run(mut c: Command) -> Output {
    let out = c.output().expect("run slate");
    if !out.status.success() {
        eprintln!(
            "slate exited {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

pub fn copy(src: &str, dst: &str, extra: &[&str]) -> Output {
    let mut c = slate();
    c.args(["copy", src, dst, "--chunk-size", "5MiB", "--streams", "3"])
        .args(extra);
    run(c)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// One end of a test copy.
#[derive(Clone, Copy, Debug)]
pub enum End {
    Local,
    S3(&'static str),
    Az(&'static str),
    Gs(&'static str),
}

pub struct Place {
    pub end: End,
    pub prefix: String,
    _dir: Option<tempfile::TempDir>,
    pub root: PathBuf,
}

impl Place {
    /// A cloud place at an existing `prefix` (one another tool named).
    pub fn at(end: End, prefix: &str) -> Place {
        Place {
            end,
            prefix: prefix.to_string(),
            root: PathBuf::new(),
            _dir: None,
        }
    }

    pub fn new(end: End, name: &str) -> Place {
        let prefix = unique(name);
        match end {
            End::Local => {
                let dir = tempfile::tempdir().expect("tempdir");
                let root = dir.path().join(&prefix);
                Place {
                    end,
                    prefix,
                    root,
                    _dir: Some(dir),
                }
            }
            _ => Place {
                end,
                prefix,
                root: PathBuf::new(),
                _dir: None,
            },
        }
    }

    pub fn url(&self) -> String {
        match self.end {
            End::Local => self.root.display().to_string(),
            End::S3(b) => format!("s3://{b}/{}", self.prefix),
            End::Az(c) => format!("az://{c}/{}", self.prefix),
            End::Gs(b) => format!("gs://{b}/{}", self.prefix),
        }
    }

    pub fn seed(&self, data: &BTreeMap<String, Vec<u8>>) {
        match self.end {
            End::Local => seed_local(&self.root, data),
            End::S3(b) => rt().block_on(seed(&s3(b), &self.prefix, data)),
            End::Az(c) => rt().block_on(seed(&az(c), &self.prefix, data)),
            End::Gs(b) => rt().block_on(seed(&gcs_writer(b), &self.prefix, data)),
        }
    }

    pub fn read(&self) -> BTreeMap<String, Vec<u8>> {
        match self.end {
            End::Local => read_local(&self.root),
            End::S3(b) => rt().block_on(read_all(&s3(b), &self.prefix)),
            End::Az(c) => rt().block_on(read_all(&az(c), &self.prefix)),
            End::Gs(b) => rt().block_on(read_all(&gcs(b), &self.prefix)),
        }
    }
}

impl Place {
    /// Deletes keys (relative) at this place.
    pub fn remove(&self, keys: &[&str]) {
        let store = match self.end {
            End::Local => {
                for k in keys {
                    std::fs::remove_file(self.root.join(k)).expect("remove");
                }
                return;
            }
            End::S3(b) => s3(b),
            End::Az(c) => az(c),
            End::Gs(b) => gcs(b),
        };
        rt().block_on(async {
            for k in keys {
                let p = Path::parse(format!("{}/{k}", self.prefix)).expect("key");
                store.delete(&p).await.expect("delete");
            }
        });
    }
}

/// `slate` with a manifest database of the test's own.
pub fn slate_db(db: &std::path::Path) -> Command {
    let mut c = slate();
    c.env("SLATE_DB", db);
    c
}

/// A signed request to moto's S3 API (for what object_store cannot do: buckets, notification
/// configuration). Returns the status and the body.
pub fn s3_raw(method: &str, path_and_query: &str, body: &str) -> (u16, String) {
    let (status, _, body) = s3_signed(method, path_and_query, &[], body);
    (status, body)
}

/// A signed request to moto's S3 API with `headers`: the status, the answer's headers (names
/// lower-case) and its body.
pub fn s3_signed(
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, BTreeMap<String, String>, String) {
    use object_store::aws::{AwsAuthorizer, AwsCredential};
    use object_store::client::HttpRequestBody;
    let cred = AwsCredential {
        key_id: "testing".into(),
        secret_key: "testing".into(),
        token: None,
    };
    let url = format!("{}{path_and_query}", s3_endpoint());
    let mut b = http::Request::builder().method(method).uri(&url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut req = b
        .body(HttpRequestBody::from(body.as_bytes().to_vec()))
        .expect("request");
    AwsAuthorizer::new(&cred, "s3", "us-east-1")
        .try_authorize(&mut req, None)
        .expect("sign");
    send(req)
}

/// Sends `req` (to an emulator on loopback): the status, the answer's headers (names
/// lower-case) and its body.
pub fn send(
    req: http::Request<object_store::client::HttpRequestBody>,
) -> (u16, BTreeMap<String, String>, String) {
    use object_store::client::{HttpConnector, ReqwestConnector};
    let client = ReqwestConnector::default()
        .connect(&ClientOptions::new().with_allow_http(true))
        .expect("client");
    rt().block_on(async move {
        let resp = client.execute(req).await.expect("send");
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let bytes = resp.into_body().bytes().await.unwrap_or_default();
        (status, headers, String::from_utf8_lossy(&bytes).to_string())
    })
}

/// `key` with each segment percent-encoded, for a URL's path.
pub fn enc(key: &str) -> String {
    key.split('/')
        .map(|s| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>())
        .collect::<Vec<_>>()
        .join("/")
        .replace('+', "%20")
}

/// A signed HEAD of a blob at Azurite: its status and headers (names lower-case), the
/// access tier (`x-ms-access-tier`) among them.
pub fn az_head(container: &str, key: &str) -> (u16, BTreeMap<String, String>) {
    use object_store::azure::{AzureAccessKey, AzureAuthorizer, AzureCredential};
    let cred = AzureCredential::AccessKey(AzureAccessKey::try_new(AZURITE_KEY).expect("key"));
    let url = format!(
        "{}/devstoreaccount1/{container}/{}",
        azurite_url(),
        enc(key)
    );
    let mut req = http::Request::builder()
        .method("HEAD")
        .uri(&url)
        .body(object_store::client::HttpRequestBody::from(Vec::new()))
        .expect("request");
    AzureAuthorizer::new(&cred, "devstoreaccount1")
        .try_authorize(&mut req)
        .expect("sign");
    let (status, headers, _) = send(req);
    (status, headers)
}

/// An SQS client for moto.
pub async fn sqs_client() -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(s3_endpoint())
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// Stores an object in fake-gcs-server under any name at all (its JSON upload API takes the
/// name as a query parameter, so names with `..` or a trailing `/` can be made).
pub fn gcs_upload_any_name(bucket: &str, name: &str, body: &str) {
    let mut url = url::Url::parse(&format!(
        "{}/upload/storage/v1/b/{bucket}/o",
        gcs_endpoint()
    ))
    .expect("url");
    url.query_pairs_mut()
        .append_pair("uploadType", "media")
        .append_pair("name", name);
    let r = reqwest::blocking::Client::new()
        .post(url)
        .body(body.to_string())
        .send()
        .expect("upload");
    assert!(r.status().is_success(), "{name}: {}", r.status());
}

/// Standard base64 with padding (what Event Grid's queue delivery and Pub/Sub use).
pub fn b64<T: AsRef<[u8]> + ?Sized>(data: &T) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A moto bucket whose notifications for every create and delete go to a new SQS queue:
/// (bucket, queue name).
pub fn sqs_bucket(tag: &str) -> (String, String) {
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

/// A process under test: killed when dropped, so a failing test leaves none behind.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        self.kill9();
    }
}

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

impl Child {
    /// Sends `signal` unless it has exited (its PID may be another process's by now).
    fn send(&mut self, signal: i32) {
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: kill(2) on our own child, not reaped yet.
            unsafe { libc::kill(self.0.id() as i32, signal) };
        }
    }

    /// Sends `signal` and waits for the exit; returns the exit code (None: ended by a signal).
    pub fn signal(&mut self, signal: i32) -> Option<i32> {
        self.send(signal);
        self.0.wait().expect("wait").code()
    }

    /// `signal` for a child the caller is done with.
    pub fn stop(mut self, signal: i32) -> Option<i32> {
        self.signal(signal)
    }

    /// `stop`, but a process still running `secs` seconds after the signal is SIGKILLed
    /// (then None).
    pub fn stop_within(mut self, signal: i32, secs: u64) -> Option<i32> {
        self.send(signal);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            match self.0.try_wait() {
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(50)),
                Ok(Some(status)) => return status.code(),
                Err(_) => break,
            }
        }
        self.kill9();
        None
    }

    /// SIGKILL (unless it has exited), then waits for the end.
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGKILLs it `delay_ms` from now unless it exits first: then how long it ran (ms).
    pub fn kill_after(&mut self, delay_ms: u64) -> Option<u64> {
        let start = std::time::Instant::now();
        let until = start + std::time::Duration::from_millis(delay_ms);
        while std::time::Instant::now() < until {
            if let Ok(Some(_)) = self.0.try_wait() {
                return Some(start.elapsed().as_millis() as u64);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.kill9();
        None
    }
}

/// What a log file holds now ("" when it does not exist yet).
pub fn read_log(log: &std::path::Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let _ = std::io::Read::read_to_string(&mut f, &mut text);
    }
    text
}

/// The last lines of a log, for assertion messages.
pub fn log_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The address a `--listen 127.0.0.1:0` slate says in its log that it listens on.
pub fn listen_addr(log_text: &str) -> Option<String> {
    log_text
        .lines()
        .find_map(|l| l.strip_prefix("slate: listening on http://"))
        .map(|a| a.trim().to_string())
}

/// Spawns `c` (a slate whose stderr goes to `log`) and waits until `ready` holds for what the
/// log says; one that exits first, or is not ready within `secs` seconds, fails the test.
pub fn spawn_ready(
    mut c: Command,
    log: &std::path::Path,
    secs: u64,
    ready: impl Fn(&str) -> bool,
) -> Child {
    let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy()).collect();
    let what = format!("slate {}", args.join(" "));
    let mut child = Child(c.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}")));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let text = read_log(log);
        if ready(&text) {
            return child;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "{what} exited ({status}) before it was ready: {}",
                log_tail(&text)
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} was not ready within {secs} s: {}",
            log_tail(&text)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Spawns `c` (a daemon whose stderr goes to `log`) and waits until `pairs` pairs follow
/// their changes (after their backfill); a daemon that does not within three minutes fails the
/// test (a backfill of a few hundred objects from moto took over a minute on a loaded 2-core
/// machine, with three workers and their emulators sharing it).
pub fn spawn_daemon(c: Command, log: &std::path::Path, pairs: usize) -> Child {
    spawn_ready(c, log, 180, |text| following(text) >= pairs)
}

/// How many distinct pairs a daemon's log says it follows (`slate: following changes of …`;
/// the debug log says it too, and a restarted pair says it again: neither counts twice).
pub fn following(text: &str) -> usize {
    text.lines()
        .filter_map(|l| l.strip_prefix("slate: following changes of "))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Waits until `slate diff SRC DST` (without faults) says equal (exit 0), at most `secs`
/// seconds; a failure shows the diff and, given `log`, the end of the daemon's log.
pub fn wait_equal_within(
    db: &std::path::Path,
    src: &str,
    dst: &str,
    secs: u64,
    log: Option<&std::path::Path>,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let mut c = slate_db(db);
        c.env_remove("SLATE_FAULTS")
            .args(["diff", src, dst, "--json"]);
        let out = c.output().expect("diff");
        if out.status.code() == Some(0) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{src} -> {dst} not equal within {secs} s:\n{}\n{}\n{}",
            log_tail(&stdout(&out)),
            log_tail(&stderr(&out)),
            log.map(|l| log_tail(&read_log(l))).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// Waits until `cond` holds, at most `secs` seconds, then fails naming `what`.
pub fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A `slate sync SRC DST` daemon of a test: its stderr (every applied key) in `log`, killed
/// when dropped so that a failing test leaves no process behind.
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts the daemon on one pair (with `extra` flags) and waits until it follows changes.
    /// Without the delete brake unless `extra` asks for one (`--delete-brake …`): these
    /// tests churn through deletes on purpose; tests/brake.rs tests the brake.
    pub fn start(
        db: &std::path::Path,
        src: &str,
        dst: &str,
        extra: &[&str],
        log: &std::path::Path,
    ) -> Daemon {
        let mut c = slate_db(db);
        c.args(["sync", src, dst, "--drift-check-secs", "0", "--quiet"])
            .args(extra)
            .args(if extra.contains(&"--delete-brake") {
                &[][..]
            } else {
                &["--delete-brake", "off"][..]
            })
            // every applied key in the log: what a failing test prints, and what some assert on
            .env("RUST_LOG", "slate=debug,warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"));
        Daemon {
            child: spawn_daemon(c, log, 1),
            log: log.to_path_buf(),
        }
    }

    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then its exit code.
    pub fn stop(&mut self) -> Option<i32> {
        self.child.signal(libc::SIGTERM)
    }
}

/// The test PostgreSQL server (`scripts/services.sh` starts it): a database there.
pub fn pg_url() -> String {
    var(
        "SLATE_TEST_PG_URL",
        "postgres://postgres@127.0.0.1:5440/slate_test",
    )
}

/// A fresh database of a test's own on the test PostgreSQL server, dropped with the value.
pub struct PgDb {
    pub url: String,
    name: String,
}

fn pg_admin(sql: &str) {
    let url = pg_url();
    rt().block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e} (scripts/services.sh start)"));
        tokio::spawn(conn);
        client.batch_execute(sql).await.expect(sql);
    });
}

impl PgDb {
    pub fn new(tag: &str) -> PgDb {
        let name = format!("slate_{tag}_{}_{}", std::process::id(), fastrand::u32(..));
        pg_admin(&format!("CREATE DATABASE {name}"));
        let base = pg_url();
        let cut = base.rfind('/').expect("a URL with a database");
        PgDb {
            url: format!("{}/{name}", &base[..cut]),
            name,
        }
    }

    /// The database as `--db` takes it.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.url)
    }

    /// Rows of a query (every column read as text).
    pub fn query(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let url = self.url.clone();
        rt().block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            let rows = client.simple_query(sql).await.expect(sql);
            rows.into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// A query's single number.
    pub fn count(&self, sql: &str) -> i64 {
        self.query(sql)
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number from {sql}"))
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        pg_admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// An Azure Blob event in the Event Grid schema, or in CloudEvents 1.0.
pub fn blob_event(
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

/// A subscription on the emulator's GCS notification topic (push to `endpoint`, or pull),
/// deleted when dropped so that the emulator stops delivering to a finished test.
pub struct Subscription(pub String);

impl Subscription {
    pub fn new(name: &str, endpoint: Option<String>) -> Subscription {
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

    pub fn url(name: &str) -> String {
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

/// Azurite's well-known account key (public, in Microsoft's docs).
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub fn sign(to_sign: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &b64.decode(AZURITE_KEY).unwrap());
    let sig = b64.encode(ring::hmac::sign(&key, to_sign.as_bytes()).as_ref());
    url::form_urlencoded::byte_serialize(sig.as_bytes()).collect()
}

const SV: &str = "2021-12-02";
const EXPIRY: &str = "2030-01-01T00:00:00Z";

/// A service SAS URL for one container, as `az storage container generate-sas --as-url` makes.
pub fn container_sas_url(container: &str, perms: &str) -> String {
    let to_sign = format!(
        "{perms}\n\n{EXPIRY}\n/blob/devstoreaccount1/{container}\n\n\n\n{SV}\nc\n\n\n\n\n\n\n"
    );
    format!(
        "{}/devstoreaccount1/{container}?sv={SV}&se={}&sr=c&sp={perms}&sig={}",
        azurite_url(),
        EXPIRY.replace(':', "%3A"),
        sign(&to_sign)
    )
}

/// A service SAS URL for one queue.
pub fn queue_sas_url(queue: &str, perms: &str) -> String {
    let to_sign = format!("{perms}\n\n{EXPIRY}\n/queue/devstoreaccount1/{queue}\n\n\n\n{SV}");
    format!(
        "{}/devstoreaccount1/{queue}?sv={SV}&se={}&sp={perms}&sig={}",
        azurite_queue_url(),
        EXPIRY.replace(':', "%3A"),
        sign(&to_sign)
    )
}
