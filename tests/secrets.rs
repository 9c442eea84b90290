//! Credentials never appear: with distinctive secrets in every credential variable slate reads,
//! every command (copy, sync --once, diff, pairs, jobs, status, the daemon and `serve` with their
//! HTTP API), at every verbosity (default, -v, -vv, RUST_LOG=trace), on success and on error
//! paths (a refusing endpoint, a missing bucket, a bad key), never prints a secret, nor its
//! base64, URL-encoded or JSON-escaped form, nor any 16-character piece of it: not on stdout or
//! stderr, not in log files, not in an HTTP response, not in the database.
//!
//! The emulators need their own credentials (moto accepts any key; Azurite only its well-known
//! key), so the successful runs use those, and those exact strings are checked too.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

// ---------------------------------------------------------------------------------------------
// the secrets

/// moto's secret key in the successful runs (moto accepts any key id, so the id differs: a key id
/// is no secret and AWS's own trace logs print it).
const MOTO_SECRET: &str = "testing";
const MOTO_KEY_ID: &str = "AKIAEMULATOR0KEYID01";

const AWS_KEY_ID: &str = "AKIASLATEFAKE7Q2X9ZC";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiSLATEsecret9Zq";
const AWS_TOKEN: &str =
    "IQoJb3JpZ2luX2VjEFAaCXVzLWVhc3QtMSJHMEUCISLATEsessionToken/9f8e+7d6c5b4a3Q2w==";
const SAS_SIG: &str = "SLATEsasSig0a1b2c3d4e5f6g7h8i9j0kLmNoPqRsTu%2B%3D";
const GCS_KEY_ID: &str = "8f1c2d3e4b5a69780f1e2d3c4b5a6978d0c1SLATE";
const API_TOKEN: &str = "slate-api-3c9e1f7a5b2d4e6f8a0c1e3b5d7f9a1c";

/// An account key as Azure makes them: 64 random bytes, base64.
fn azure_key(seed: u64) -> String {
    b64(&bytes(seed, 64))
}

fn sas() -> String {
    format!(
        "sv=2022-11-02&ss=bq&srt=sco&sp=rwdlacup&se=2031-01-01T00:00:00Z&st=2024-01-01T00:00:00Z&spr=https,http&sig={SAS_SIG}"
    )
}

/// A real RSA key when openssl is at hand (so that signing gets as far as asking for a token),
/// else a well-formed but invalid one.
fn private_key_pem() -> String {
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).expect("pem"),
        _ => {
            let body = b64(&bytes(77, 1200));
            let lines: Vec<&str> = body
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).expect("ascii"))
                .collect();
            format!(
                "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
                lines.join("\n")
            )
        }
    }
}

/// One secret and how to look for it.
struct Secret {
    name: String,
    value: String,
    /// also look for every 16-character piece of these (a truncated or partial leak)
    pieces_of: Vec<String>,
}

impl Secret {
    fn new(name: &str, value: &str) -> Secret {
        Secret {
            name: name.to_string(),
            value: value.to_string(),
            pieces_of: if value.len() >= 24 {
                vec![value.to_string()]
            } else {
                Vec::new()
            },
        }
    }

    /// (form, text) pairs to search for.
    fn forms(&self) -> Vec<(String, String)> {
        let v = &self.value;
        let mut f = vec![("raw".to_string(), v.clone())];
        let enc = b64(v.as_bytes());
        f.push(("base64".into(), enc.trim_end_matches('=').to_string()));
        f.push((
            "base64url".into(),
            enc.trim_end_matches('=')
                .replace('+', "-")
                .replace('/', "_"),
        ));
        let pct = percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        f.push(("percent-encoded".into(), pct));
        let form: String = url::form_urlencoded::byte_serialize(v.as_bytes()).collect();
        f.push(("form-encoded".into(), form));
        let decoded = percent_encoding::percent_decode_str(v)
            .decode_utf8_lossy()
            .to_string();
        f.push(("percent-decoded".into(), decoded));
        let json = serde_json::to_string(v).expect("json");
        f.push(("json-escaped".into(), json[1..json.len() - 1].to_string()));
        for p in &self.pieces_of {
            for line in p.lines() {
                let chars: Vec<char> = line.chars().collect();
                if chars.len() < 16 {
                    continue;
                }
                for i in 0..=chars.len() - 16 {
                    let piece: String = chars[i..i + 16].iter().collect();
                    f.push((format!("piece at {i}"), piece));
                }
            }
        }
        f.sort_by(|a, b| a.1.cmp(&b.1));
        f.dedup_by(|a, b| a.1 == b.1);
        f
    }
}

/// Everything slate said or wrote, by where it came from.
#[derive(Default)]
struct Transcript {
    items: Vec<(String, Vec<u8>)>,
}

impl Transcript {
    fn add(&mut self, label: impl Into<String>, data: impl Into<Vec<u8>>) {
        self.items.push((label.into(), data.into()));
    }

    fn add_output(&mut self, label: &str, out: &std::process::Output) {
        self.add(format!("{label}: stdout"), out.stdout.clone());
        self.add(format!("{label}: stderr"), out.stderr.clone());
    }

    fn add_file(&mut self, label: &str, path: &Path) {
        if let Ok(data) = std::fs::read(path) {
            self.add(format!("{label}: {}", path.display()), data);
        }
    }

    /// Every database file under `dir` (the db, its WAL).
    fn add_databases(&mut self, dir: &Path) {
        for e in std::fs::read_dir(dir).expect("dir").flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.contains(".db") {
                self.add_file("database", &e.path());
            }
        }
    }

    fn bytes(&self) -> usize {
        self.items.iter().map(|(_, d)| d.len()).sum()
    }

    /// Fails naming every place a secret appears in.
    fn assert_clean(&self, secrets: &[Secret]) {
        if let Some(dir) = std::env::var_os("SLATE_SECRETS_DUMP") {
            // everything that was checked, for a human to read
            let mut all = Vec::new();
            for (label, data) in &self.items {
                all.extend_from_slice(format!("===== {label}\n").as_bytes());
                all.extend_from_slice(data);
                all.push(b'\n');
            }
            let path = Path::new(&dir).join(format!("{}.txt", unique("transcript")));
            std::fs::write(&path, all).expect("dump");
            eprintln!("transcript: {}", path.display());
        }
        let found = self.findings(secrets);
        assert!(
            found.is_empty(),
            "secrets appear in slate's output:\n{}",
            found.join("\n")
        );
    }

    /// Every place a secret appears in, with some context.
    fn findings(&self, secrets: &[Secret]) -> Vec<String> {
        let mut found = Vec::new();
        for s in secrets {
            let forms = s.forms();
            for (label, data) in &self.items {
                let text = String::from_utf8_lossy(data);
                for (form, needle) in &forms {
                    if let Some(at) = text.find(needle.as_str()) {
                        let from = text[..at]
                            .char_indices()
                            .rev()
                            .nth(120)
                            .map_or(0, |(i, _)| i);
                        let to = (at + needle.len() + 80).min(text.len());
                        let to = (to..=text.len())
                            .find(|i| text.is_char_boundary(*i))
                            .unwrap_or(text.len());
                        found.push(format!(
                            "{} ({form}) in {label}:\n    …{}…",
                            s.name,
                            &text[from..to]
                        ));
                        break;
                    }
                }
            }
        }
        found
    }
}

// ---------------------------------------------------------------------------------------------
// a hostile endpoint

/// An HTTP server that refuses with 403, in the shape real stores use, echoing the request back
/// as S3 does in `SignatureDoesNotMatch` (its canonical request carries `x-amz-security-token`)
/// and Azure in `AuthenticationErrorDetail`: whatever prints an error body verbatim would leak a
/// session token or a SAS signature. With `lists`, listings (S3, Azure, GCS) succeed with one
/// object, so that the refusal comes later, per object (reads, writes, deletes).
fn refusing_server(lists: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut head = String::new();
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                let mut s = stream;
                if lists {
                    if let Some(resp) = listing(&head) {
                        let _ = s.write_all(resp.as_bytes());
                        return;
                    }
                }
                let resp = if head.to_ascii_lowercase().contains("\nx-amz-target:") {
                    aws_json_refusal(&head)
                } else {
                    xml_refusal(&head)
                };
                let _ = s.write_all(resp.as_bytes());
            });
        }
    });
    format!("http://{addr}")
}

/// S3's and Azure's refusal: the request echoed in elements of their own.
fn xml_refusal(head: &str) -> String {
    let echo = head
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let text = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>\
         <Message>The request signature we calculated does not match the signature you provided.</Message>\
         <CanonicalRequest>{echo}</CanonicalRequest>\
         <AuthenticationErrorDetail>{echo}</AuthenticationErrorDetail></Error>"
    );
    format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// The refusal of an AWS JSON-protocol service (SQS): the canonical string it expected, signed
/// headers with their values (`x-amz-security-token` among them), inside the error's message,
/// as AWS writes it.
fn aws_json_refusal(head: &str) -> String {
    let mut lines = head.lines();
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, path) = (parts.next().unwrap_or("POST"), parts.next().unwrap_or("/"));
    let mut headers: Vec<String> = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
        .map(|(k, v)| format!("{}:{}", k.to_ascii_lowercase(), v.trim()))
        .collect();
    headers.sort();
    let names: Vec<&str> = headers.iter().filter_map(|h| h.split(':').next()).collect();
    let message = format!(
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret \
         Access Key and signing method. Consult the service documentation for details.\n\n\
         The Canonical String for this request should have been\n'{method}\n{path}\n\n{}\n\n{}\n\
         e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'\n\n\
         The String-to-Sign should have been\n'AWS4-HMAC-SHA256\n20261130T000000Z\n20261130/us-east-1/sqs/aws4_request\n\
         0000000000000000000000000000000000000000000000000000000000000000'\n",
        headers.join("\n"),
        names.join(";")
    );
    let text = serde_json::json!({
        "__type": "com.amazon.coral.service#SignatureDoesNotMatch",
        "message": message,
    })
    .to_string();
    format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/x-amz-json-1.0\r\n\
         x-amzn-query-error: SignatureDoesNotMatch;Sender\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// A listing with one object `PREFIX/a.bin` when `head` asks for one (S3 ListObjectsV2, Azure
/// List Blobs, GCS JSON list), as a whole HTTP response.
fn listing(head: &str) -> Option<String> {
    let target = head.lines().next()?.split(' ').nth(1)?;
    let url = url::Url::parse(&format!("http://x{target}")).ok()?;
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    let key = format!(
        "{}a.bin",
        if prefix.is_empty() || prefix.ends_with('/') {
            prefix.clone()
        } else {
            format!("{prefix}/")
        }
    );
    let (ctype, body) = if q.contains_key("list-type") {
        (
            "application/xml",
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <Name>b</Name><Prefix>{prefix}</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>\
                 <Contents><Key>{key}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>\
                 <ETag>&quot;0123456789abcdef0123456789abcdef&quot;</ETag><Size>10</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>"
            ),
        )
    } else if q.get("comp").map(String::as_str) == Some("list") {
        (
            "application/xml",
            format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<EnumerationResults ServiceEndpoint=\"http://x/\" ContainerName=\"c\">\
                 <Prefix>{prefix}</Prefix><Blobs><Blob><Name>{key}</Name><Properties>\
                 <Creation-Time>Mon, 01 Jan 2024 00:00:00 GMT</Creation-Time><Last-Modified>Mon, 01 Jan 2024 00:00:00 GMT</Last-Modified>\
                 <Etag>0x8DC0000000000AA</Etag><Content-Length>10</Content-Length><Content-Type>application/octet-stream</Content-Type>\
                 <BlobType>BlockBlob</BlobType></Properties></Blob></Blobs><NextMarker /></EnumerationResults>"
            ),
        )
    } else if target.starts_with("/storage/v1/b/")
        && target.contains("/o")
        && head.starts_with("GET")
        && !target.contains("/o/")
    {
        (
            "application/json",
            serde_json::json!({"kind": "storage#objects", "items": [{
                "name": key, "size": "10", "updated": "2024-01-01T00:00:00Z",
                "etag": "CAE=", "generation": "1", "md5Hash": "ASNFZ4mrze8BI0VniavN7w=="}]})
            .to_string(),
        )
    } else {
        return None;
    };
    Some(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
}

// ---------------------------------------------------------------------------------------------
// running slate

#[derive(Clone, Copy, Debug)]
enum Verbosity {
    Default,
    V,
    Vv,
    TraceEnv,
}

const LEVELS: [Verbosity; 4] = [
    Verbosity::Default,
    Verbosity::V,
    Verbosity::Vv,
    Verbosity::TraceEnv,
];

/// The credential variables slate reads, all of them set.
#[derive(Clone)]
struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    fn set(&mut self, k: &str, v: &str) {
        self.vars.retain(|(n, _)| n != k);
        self.vars.push((k.to_string(), v.to_string()));
    }

    fn command(&self, db: &Path, level: Verbosity, args: &[&str]) -> Command {
        let mut c = slate_db(db);
        for (k, _) in std::env::vars() {
            if k.starts_with("AZURE") || k.starts_with("GOOGLE") || k.starts_with("SLATE_API") {
                c.env_remove(k);
            }
        }
        c.env_remove("AZURE_STORAGE_USE_EMULATOR");
        if self.vars.iter().any(|(k, _)| k.starts_with("GOOGLE_")) {
            // else the emulator wins over the service account
            c.env_remove("STORAGE_EMULATOR_HOST");
        }
        for (k, v) in &self.vars {
            c.env(k, v);
        }
        match level {
            Verbosity::Default => {
                c.env_remove("RUST_LOG");
            }
            Verbosity::V => {
                c.env_remove("RUST_LOG").arg("-v");
            }
            Verbosity::Vv => {
                c.env_remove("RUST_LOG").arg("-vv");
            }
            Verbosity::TraceEnv => {
                c.env("RUST_LOG", "trace");
            }
        }
        c.args(args).stdin(Stdio::null());
        c
    }
}

/// Runs a one-shot command within a minute.
fn run(t: &mut Transcript, env: &Env, db: &Path, level: Verbosity, args: &[&str]) -> Option<i32> {
    let mut c = env.command(db, level, args);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let child = c.spawn().expect("spawn");
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            if flag.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: kill(2) on our own child that overran.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let label = format!("slate {} ({level:?})", args.join(" "));
    if started.elapsed() > Duration::from_secs(10) {
        eprintln!(
            "slow: {label} took {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    t.add_output(&label, &out);
    out.status.code()
}

/// A long-running slate (daemon or serve) logging to a file.
struct Server {
    child: Child,
    log: PathBuf,
    out: PathBuf,
    label: String,
    addr: Option<String>,
}

impl Server {
    /// Starts it and waits for `ready` in its log (and the address it listens on, if any).
    fn start(
        env: &Env,
        db: &Path,
        level: Verbosity,
        args: &[&str],
        dir: &Path,
        ready: &str,
    ) -> Server {
        let n = unique("srv");
        let (log, out) = (dir.join(format!("{n}.log")), dir.join(format!("{n}.out")));
        let mut c = env.command(db, level, args);
        c.stdout(std::fs::File::create(&out).expect("out"))
            .stderr(std::fs::File::create(&log).expect("log"));
        let label = format!("slate {} ({level:?})", args.join(" "));
        let child = spawn_ready(c, &log, 60, |text| text.contains(ready));
        let addr = listen_addr(&read_log(&log));
        Server {
            child,
            log,
            out,
            label,
            addr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr.as_deref().expect("listening"))
    }

    /// SIGTERM, wait, and keep everything it printed.
    fn stop(self, t: &mut Transcript) {
        self.child.stop_within(libc::SIGTERM, 30);
        t.add_file(&format!("{}: log", self.label), &self.log);
        t.add_file(&format!("{}: stdout", self.label), &self.out);
    }
}

/// One HTTP exchange, kept whole: status, headers and body.
fn http(
    t: &mut Transcript,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
) -> (u16, String) {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()
        .expect("client");
    let mut r = client.request(method.clone(), url);
    if let Some(tok) = token {
        r = r.bearer_auth(tok);
    }
    if let Some(b) = body {
        r = r.header("content-type", "application/json").body(b);
    }
    let resp = r.send().expect("request");
    let status = resp.status().as_u16();
    let headers: String = resp
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let text = resp.text().unwrap_or_default();
    t.add(
        format!("HTTP {method} {url} -> {status}"),
        format!("{headers}\n{text}"),
    );
    (status, text)
}

/// The API as a user (and the dashboard, and a prober) uses it: every read endpoint, and copy
/// jobs (some succeed, some fail) created and watched to their end over SSE.
fn exercise_api(t: &mut Transcript, s: &Server, jobs: &[(&str, &str)]) {
    use reqwest::Method;
    let tok = Some(API_TOKEN);
    for path in ["/healthz", "/readyz", "/", "/openapi.yaml"] {
        http(t, Method::GET, &s.url(path), None, None);
    }
    for path in ["/metrics", "/pairs", "/jobs"] {
        let (st, _) = http(t, Method::GET, &s.url(path), tok, None);
        assert_eq!(st, 200, "{path}");
        // refused: no token, a wrong one, a token in the query
        http(t, Method::GET, &s.url(path), None, None);
        http(t, Method::GET, &s.url(path), Some("wrong-token"), None);
        http(
            t,
            Method::GET,
            &s.url(&format!("{path}?token={API_TOKEN}")),
            None,
            None,
        );
    }
    // Event Grid's handshake with the token in the URL, as a subscription sends it
    let hs = r#"[{"id":"1","topic":"t","subject":"","eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2026-11-30T10:00:00Z","data":{"validationCode":"CODE-1"},"dataVersion":"1","metadataVersion":"1"}]"#;
    http(
        t,
        Method::POST,
        &s.url(&format!("/events/eventgrid?token={API_TOKEN}")),
        None,
        Some(hs.to_string()),
    );
    // every job created first (they run side by side), then each one watched to its end
    let mut ids = Vec::new();
    for (src, dst) in jobs {
        let body = serde_json::json!({"kind": "copy", "src": src, "dst": dst}).to_string();
        let (st, text) = http(t, Method::POST, &s.url("/jobs"), tok, Some(body));
        assert_eq!(st, 201, "{text}");
        let job: serde_json::Value = serde_json::from_str(&text).expect("job");
        ids.push(job["id"].as_i64().expect("id"));
    }
    for id in ids {
        // the SSE stream ends with the job
        http(
            t,
            Method::GET,
            &s.url(&format!("/jobs/{id}/events")),
            tok,
            None,
        );
        http(
            t,
            Method::GET,
            &s.url(&format!("/jobs/{id}/events?token={API_TOKEN}")),
            None,
            None,
        );
        http(t, Method::GET, &s.url(&format!("/jobs/{id}")), tok, None);
    }
    http(t, Method::GET, &s.url("/jobs"), tok, None);
    http(t, Method::GET, &s.url("/metrics"), tok, None);
}

/// A queue for the daemon's `--events sqs://` (created with the emulator's credentials).
fn sqs_queue() -> String {
    let name = unique("slate-secret-q");
    rt().block_on(async {
        sqs_client()
            .await
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .expect("queue");
    });
    name
}

fn local_source(dir: &Path) -> String {
    let root = dir.join("src");
    let data = (0..5)
        .map(|i| (format!("d/f{i}.bin"), bytes(i, 1000 + i as usize)))
        .collect();
    seed_local(&root, &data);
    root.display().to_string()
}

/// The emulators' own credentials (moto: any key; Azurite: its well-known key, given as a
/// connection string), plus a session token moto ignores and the API token.
fn emulator_env() -> Env {
    Env {
        vars: vec![
            ("AWS_ACCESS_KEY_ID".into(), MOTO_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), MOTO_SECRET.into()),
            ("AWS_SESSION_TOKEN".into(), AWS_TOKEN.into()),
            (
                "AZURE_STORAGE_CONNECTION_STRING".into(),
                format!(
                    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};UseDevelopmentStorage=true"
                ),
            ),
            ("SLATE_API_TOKEN".into(), API_TOKEN.into()),
        ],
    }
}

#[test]
fn emulator_credentials_never_appear_on_the_way_to_success() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = local_source(dir.path());
    let env = emulator_env();
    let queue = sqs_queue();
    let mut t = Transcript::default();
    for level in LEVELS {
        let db = dir.path().join(format!("{level:?}.db"));
        let p = unique("sec");
        let (s3a, s3b) = (
            format!("s3://slate-dst/{p}/a"),
            format!("s3://slate-dst/{p}/b"),
        );
        let (aza, azb) = (
            format!("az://slate-dst/{p}/a"),
            format!("az://slate-dst/{p}/b"),
        );
        let ok = |code: Option<i32>, what: &str| assert_eq!(code, Some(0), "{what} ({level:?})");
        ok(
            run(&mut t, &env, &db, level, &["copy", &src, &s3a]),
            "copy to S3",
        );
        ok(
            run(&mut t, &env, &db, level, &["copy", &s3a, &aza]),
            "copy S3 to Azure",
        );
        ok(
            run(&mut t, &env, &db, level, &["sync", "--once", &src, &s3b]),
            "sync to S3",
        );
        ok(
            run(&mut t, &env, &db, level, &["sync", "--once", &s3b, &azb]),
            "sync S3 to Azure",
        );
        for (a, b) in [(&src, &s3b), (&s3b, &azb)] {
            ok(run(&mut t, &env, &db, level, &["diff", a, b]), "diff");
            ok(
                run(&mut t, &env, &db, level, &["diff", a, b, "--json"]),
                "diff --json",
            );
        }
        run(
            &mut t,
            &env,
            &db,
            level,
            &["diff", &src, &azb, "--from-manifest"],
        );

        // the daemon with its listener: the API, an SSE stream, a job that fails
        let dst = format!("s3://slate-dst/{p}/daemon");
        let tmp = std::env::temp_dir().display().to_string();
        let d = Server::start(
            &env,
            &db,
            level,
            &[
                "sync",
                &src,
                &dst,
                "--listen",
                "127.0.0.1:0",
                "--drift-check-secs",
                "0",
                "--allow-root",
                &tmp,
            ],
            dir.path(),
            "following changes",
        );
        exercise_api(
            &mut t,
            &d,
            &[
                (&s3a, &format!("az://slate-dst/{p}/job")),
                ("s3://slate-no-such-bucket-secrets/x", &format!("{src}-job")),
            ],
        );
        d.stop(&mut t);

        // the daemon on S3 events through SQS (the AWS SDK signs with the session token)
        let d = Server::start(
            &env,
            &db,
            level,
            &[
                "sync",
                &s3a,
                &dir.path()
                    .join(format!("sqs-{level:?}"))
                    .display()
                    .to_string(),
                "--events",
                &format!("sqs://{queue}"),
                "--drift-check-secs",
                "0",
            ],
            dir.path(),
            "following changes",
        );
        // one event through the queue, applied: the window holds a receive, a read of S3 and
        // a write, each with the credentials
        let late = format!("{p}/a/late-{level:?}.bin");
        rt().block_on(async {
            object_store::ObjectStoreExt::put(
                &s3("slate-dst"),
                &object_store::path::Path::from(late.as_str()),
                vec![7u8; 100].into(),
            )
                .await
                .expect("put");
            let body = format!(
                r#"{{"Records":[{{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","eventTime":"2026-12-03T10:00:00.000Z","s3":{{"bucket":{{"name":"slate-dst"}},"object":{{"key":"{late}","size":100}}}}}}]}}"#
            );
            let c = sqs_client().await;
            let url = c
                .get_queue_url()
                .queue_name(&queue)
                .send()
                .await
                .expect("queue url");
            c.send_message()
                .queue_url(url.queue_url().unwrap_or_default())
                .message_body(body)
                .send()
                .await
                .expect("send");
        });
        let landed = dir
            .path()
            .join(format!("sqs-{level:?}"))
            .join(format!("late-{level:?}.bin"));
        wait_for("the event's object applied", 60, || landed.exists());
        d.stop(&mut t);

        // serve, then what the jobs left in the database (the jobs' local folders are in the
        // system's temporary folder)
        let tmp = std::env::temp_dir().display().to_string();
        let s = Server::start(
            &env,
            &db,
            level,
            &["serve", "--listen", "127.0.0.1:0", "--allow-root", &tmp],
            dir.path(),
            "listening on",
        );
        exercise_api(
            &mut t,
            &s,
            &[
                (&src, &format!("s3://slate-dst/{p}/served")),
                ("az://slate-no-such-container/x", &format!("{src}-served")),
            ],
        );
        s.stop(&mut t);
        ok(run(&mut t, &env, &db, level, &["pairs"]), "pairs");
        ok(run(&mut t, &env, &db, level, &["jobs"]), "jobs");
        ok(
            run(&mut t, &env, &db, level, &["jobs", "--json"]),
            "jobs --json",
        );
        for id in ["1", "2", "3", "4"] {
            run(&mut t, &env, &db, level, &["status", id]);
            run(&mut t, &env, &db, level, &["status", id, "--json"]);
        }
    }
    t.add_databases(dir.path());
    let secrets = [
        Secret::new("moto's secret key", MOTO_SECRET),
        Secret::new("Azurite's account key", AZURITE_KEY),
        Secret::new("AWS_SESSION_TOKEN", AWS_TOKEN),
        Secret::new("SLATE_API_TOKEN", API_TOKEN),
    ];
    eprintln!(
        "checked {} outputs, {} bytes, for {} secrets",
        t.items.len(),
        t.bytes(),
        secrets.len()
    );
    t.assert_clean(&secrets);
}

/// Fake credentials of every kind, for stores that refuse them.
struct Fakes {
    env: Env,
    secrets: Vec<Secret>,
}

fn fakes(refuser: &str) -> Fakes {
    let (account_key, conn_key) = (azure_key(901), azure_key(902));
    let pem = private_key_pem();
    let sa = serde_json::json!({
        "type": "service_account",
        "project_id": "slate-secrets",
        "private_key_id": GCS_KEY_ID,
        "private_key": pem,
        "client_email": "slate@slate-secrets.iam.gserviceaccount.com",
        "client_id": "109876543210987654321",
        "token_uri": format!("{refuser}/token"),
    })
    .to_string();
    let conn = format!(
        "DefaultEndpointsProtocol=http;AccountName=slatefake;AccountKey={conn_key};BlobEndpoint={refuser}/slatefake;QueueEndpoint={refuser}/slatefake"
    );
    let env = Env {
        vars: vec![
            ("AWS_ACCESS_KEY_ID".into(), AWS_KEY_ID.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), AWS_SECRET.into()),
            ("AWS_SESSION_TOKEN".into(), AWS_TOKEN.into()),
            ("AZURE_STORAGE_ACCOUNT_NAME".into(), "slatefake".into()),
            ("AZURE_STORAGE_ACCOUNT_KEY".into(), account_key.clone()),
            ("AZURE_STORAGE_SAS_KEY".into(), sas()),
            ("AZURE_STORAGE_CONNECTION_STRING".into(), conn.clone()),
            ("GOOGLE_SERVICE_ACCOUNT_KEY".into(), sa.clone()),
            ("GOOGLE_BASE_URL".into(), refuser.to_string()),
            ("SLATE_API_TOKEN".into(), API_TOKEN.into()),
        ],
    };
    let pem_body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut key = Secret::new("GOOGLE_SERVICE_ACCOUNT_KEY private_key", &pem);
    key.pieces_of = vec![pem_body];
    let mut sas_secret = Secret::new("AZURE_STORAGE_SAS_KEY", &sas());
    sas_secret.pieces_of = vec![SAS_SIG.to_string()];
    let mut conn_secret = Secret::new("AZURE_STORAGE_CONNECTION_STRING", &conn);
    conn_secret.pieces_of = vec![conn_key.clone()];
    // the JSON as a whole (its other fields are no secret: only the whole is looked for)
    let mut whole = Secret::new("GOOGLE_SERVICE_ACCOUNT_KEY (whole)", &sa);
    whole.pieces_of.clear();
    let secrets = vec![
        Secret::new("AWS_SECRET_ACCESS_KEY", AWS_SECRET),
        Secret::new("AWS_SESSION_TOKEN", AWS_TOKEN),
        Secret::new("AZURE_STORAGE_ACCOUNT_KEY", &account_key),
        sas_secret,
        Secret::new("SAS signature", SAS_SIG),
        conn_secret,
        Secret::new("connection string AccountKey", &conn_key),
        key,
        whole,
        Secret::new("private_key_id", GCS_KEY_ID),
        Secret::new("SLATE_API_TOKEN", API_TOKEN),
    ];
    Fakes { env, secrets }
}

#[test]
fn fake_credentials_never_appear_when_the_store_refuses_at_once() {
    fake_credentials_on_error_paths(&refusing_server(false));
}

#[test]
fn fake_credentials_never_appear_when_the_store_refuses_each_object() {
    fake_credentials_on_error_paths(&refusing_server(true));
}

fn fake_credentials_on_error_paths(refuser: &str) {
    let refuser = refuser.to_string();
    let f = fakes(&refuser);
    let dir = tempfile::tempdir().expect("tmp");
    let src = local_source(dir.path());
    let dst = dir.path().join("dst").display().to_string();
    let mut t = Transcript::default();

    // each credential kind alone, so that it is the one used
    let only = |keep: &[&str], extra: &[(&str, &str)]| {
        let mut e = f.env.clone();
        e.vars.retain(|(k, _)| {
            keep.contains(&k.as_str()) || !(k.starts_with("AZURE") || k.starts_with("AWS_"))
        });
        for (k, v) in extra {
            e.set(k, v);
        }
        e
    };
    let aws_refused = only(
        &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ],
        &[("AWS_ENDPOINT_URL", &refuser)],
    );
    let aws_moto = only(
        &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ],
        &[],
    );
    let az_key_refused = only(
        &["AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY"],
        &[
            ("AZURE_STORAGE_ENDPOINT", &refuser),
            ("AZURE_ALLOW_HTTP", "true"),
        ],
    );
    // Azurite itself refuses a key that is not its own
    let az_key_azurite = only(
        &["AZURE_STORAGE_ACCOUNT_KEY"],
        &[
            ("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1"),
            ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ],
    );
    let az_sas_refused = only(
        &["AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_SAS_KEY"],
        &[
            ("AZURE_STORAGE_ENDPOINT", &refuser),
            ("AZURE_ALLOW_HTTP", "true"),
        ],
    );
    // S3 on moto (which takes any key), SQS refusing
    let aws_sqs_refused = only(
        &[
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ],
        &[("AWS_ENDPOINT_URL_SQS", &refuser)],
    );
    let s3prefix = unique("sec-sqs");
    let s3src = format!("s3://slate-src/{s3prefix}");
    rt().block_on(seed(
        &s3("slate-src"),
        &s3prefix,
        &[("a.bin".to_string(), b"a".to_vec())].into(),
    ));
    let az_conn_refused = only(&["AZURE_STORAGE_CONNECTION_STRING"], &[]);
    let sas_conn = format!(
        "AccountName=slatefake;SharedAccessSignature={};BlobEndpoint={refuser}/slatefake;QueueEndpoint={refuser}/slatefake",
        sas()
    );
    let az_sas_conn_refused = only(&[], &[("AZURE_STORAGE_CONNECTION_STRING", &sas_conn)]);
    let every = {
        let mut e = f.env.clone();
        e.set("AWS_ENDPOINT_URL", &refuser);
        e
    };
    let cases: Vec<(&str, &Env, Vec<String>)> = vec![
        (
            "S3, refused",
            &aws_refused,
            vec!["copy".into(), src.clone(), "s3://slate-dst/x".into()],
        ),
        (
            "S3, refused",
            &aws_refused,
            vec!["copy".into(), "s3://slate-src/x".into(), dst.clone()],
        ),
        (
            "S3, no such bucket",
            &aws_moto,
            vec![
                "copy".into(),
                "s3://slate-no-such-bucket-sec/x".into(),
                dst.clone(),
            ],
        ),
        (
            "S3, refused",
            &aws_refused,
            vec![
                "sync".into(),
                "--once".into(),
                src.clone(),
                "s3://slate-dst/x".into(),
            ],
        ),
        (
            "S3, no such bucket",
            &aws_moto,
            vec![
                "sync".into(),
                "--once".into(),
                "s3://slate-no-such-bucket-sec/x".into(),
                dst.clone(),
            ],
        ),
        (
            "S3, refused",
            &aws_refused,
            vec!["diff".into(), src.clone(), "s3://slate-dst/x".into()],
        ),
        (
            "S3, refused",
            &aws_refused,
            vec![
                "diff".into(),
                "--json".into(),
                src.clone(),
                "s3://slate-dst/x".into(),
            ],
        ),
        (
            "S3 + SQS, refused",
            &aws_refused,
            vec![
                "sync".into(),
                "s3://slate-src/x".into(),
                dst.clone(),
                "--events".into(),
                "sqs://slate-q".into(),
            ],
        ),
        (
            "S3 + SQS, no such queue",
            &aws_moto,
            vec![
                "sync".into(),
                "s3://slate-src/x".into(),
                dst.clone(),
                "--events".into(),
                "sqs://slate-no-such-queue-sec".into(),
            ],
        ),
        (
            "Azure key, refused",
            &az_key_refused,
            vec!["copy".into(), "az://cont/x".into(), dst.clone()],
        ),
        (
            "Azure key, refused",
            &az_key_refused,
            vec!["copy".into(), src.clone(), "az://cont/x".into()],
        ),
        (
            "Azure key, Azurite",
            &az_key_azurite,
            vec!["copy".into(), "az://slate-src/x".into(), dst.clone()],
        ),
        (
            "Azure key, Azurite",
            &az_key_azurite,
            vec![
                "sync".into(),
                "--once".into(),
                src.clone(),
                "az://slate-dst/x".into(),
            ],
        ),
        (
            "Azure SAS, refused",
            &az_sas_refused,
            vec!["copy".into(), "az://cont/x".into(), dst.clone()],
        ),
        (
            "Azure SAS, refused",
            &az_sas_refused,
            vec![
                "diff".into(),
                "--json".into(),
                "az://cont/x".into(),
                dst.clone(),
            ],
        ),
        (
            "Azure SAS connection string, refused",
            &az_sas_conn_refused,
            vec!["copy".into(), src.clone(), "az://cont/x".into()],
        ),
        (
            "Azure SAS queue, refused",
            &az_sas_conn_refused,
            vec![
                "sync".into(),
                "az://cont/x".into(),
                dst.clone(),
                "--events".into(),
                "azqueue://slatefake/q".into(),
            ],
        ),
        (
            "Azure connection string, refused",
            &az_conn_refused,
            vec!["copy".into(), src.clone(), "az://cont/x".into()],
        ),
        (
            "Azure connection string, refused",
            &az_conn_refused,
            vec![
                "sync".into(),
                "--once".into(),
                "az://cont/x".into(),
                dst.clone(),
            ],
        ),
        (
            "Azure connection string queue, refused",
            &az_conn_refused,
            vec![
                "sync".into(),
                "az://cont/x".into(),
                dst.clone(),
                "--events".into(),
                "azqueue://slatefake/q".into(),
            ],
        ),
        (
            "GCS service account, token refused",
            &f.env,
            vec!["copy".into(), "gs://slate-src/x".into(), dst.clone()],
        ),
        (
            "GCS service account, token refused",
            &f.env,
            vec!["copy".into(), src.clone(), "gs://slate-dst/x".into()],
        ),
        (
            "GCS service account, token refused",
            &f.env,
            vec!["diff".into(), "gs://slate-src/x".into(), dst.clone()],
        ),
        (
            "every variable",
            &every,
            vec!["copy".into(), src.clone(), "az://cont/x".into()],
        ),
        ("every variable", &every, vec!["pairs".into()]),
        ("every variable", &every, vec!["jobs".into()]),
        ("every variable", &every, vec!["status".into(), "1".into()]),
    ];
    for level in LEVELS {
        let db = dir.path().join(format!("{level:?}.db"));
        let serve_db = dir.path().join(format!("{level:?}-serve.db"));
        // made one at a time: processes creating one database at once race its migrations
        // (see storage_safety.rs, concurrent_first_opens_of_a_new_database_all_succeed)
        for d in [&db, &serve_db] {
            run(&mut t, &every, d, level, &["pairs"]);
        }
        // all at once (a refused read is retried for a while): every one-shot command, a daemon
        // on a refusing queue, a daemon's API and `serve`'s, with jobs failing on every store
        let (codes, parts) = std::thread::scope(|scope| {
            let one_shots: Vec<_> = cases
                .iter()
                .map(|(_, env, args)| {
                    let db = &db;
                    scope.spawn(move || {
                        let a: Vec<&str> = args.iter().map(String::as_str).collect();
                        let mut own = Transcript::default();
                        let code = run(&mut own, env, db, level, &a);
                        (own, code)
                    })
                })
                .collect();
            let (db, serve_db, src, dst, home) = (&db, &serve_db, &src, &dst, dir.path());
            let (s3src, refuser, every, aws_sqs_refused) =
                (&s3src, &refuser, &every, &aws_sqs_refused);
            let daemons = [
                scope.spawn(move || {
                    // its queue refuses every receive (given by URL, so that it starts)
                    let mut own = Transcript::default();
                    let d = Server::start(
                        aws_sqs_refused,
                        db,
                        level,
                        &[
                            "sync",
                            s3src,
                            &format!("{dst}-sqs-{level:?}"),
                            "--events",
                            &format!("sqs://{refuser}/000000000000/slate-q"),
                            "--drift-check-secs",
                            "0",
                        ],
                        home,
                        "following changes",
                    );
                    // the refusal met and logged, not a guess at how long that takes
                    wait_for("a refused receive logged", 60, || {
                        read_log(&d.log).contains("receive failed")
                    });
                    d.stop(&mut own);
                    own
                }),
                scope.spawn(move || {
                    let mut own = Transcript::default();
                    let tmp = std::env::temp_dir().display().to_string();
                    let s = Server::start(
                        every,
                        db,
                        level,
                        &[
                            "sync",
                            src,
                            &format!("{dst}-{level:?}"),
                            "--listen",
                            "127.0.0.1:0",
                            "--drift-check-secs",
                            "0",
                            "--allow-root",
                            &tmp,
                        ],
                        home,
                        "following changes",
                    );
                    exercise_api(
                        &mut own,
                        &s,
                        &[
                            (src, &format!("{dst}-job-{level:?}")),
                            (src, "az://cont/job"),
                        ],
                    );
                    s.stop(&mut own);
                    own
                }),
                scope.spawn(move || {
                    let mut own = Transcript::default();
                    let tmp = std::env::temp_dir().display().to_string();
                    let s = Server::start(
                        every,
                        serve_db,
                        level,
                        &[
                            "serve",
                            "--listen",
                            "127.0.0.1:0",
                            "--max-jobs",
                            "4",
                            "--allow-root",
                            &tmp,
                        ],
                        home,
                        "listening on",
                    );
                    exercise_api(
                        &mut own,
                        &s,
                        &[
                            ("s3://slate-src/x", "gs://slate-dst/x"),
                            ("gs://slate-src/x", "s3://slate-dst/y"),
                            ("az://cont/x", "s3://slate-dst/z"),
                        ],
                    );
                    s.stop(&mut own);
                    own
                }),
            ];
            let mut parts = Vec::new();
            let mut codes = Vec::new();
            for h in one_shots {
                let (own, code) = h.join().expect("thread");
                parts.push(own);
                codes.push(code);
            }
            for h in daemons {
                parts.push(h.join().expect("thread"));
            }
            (codes, parts)
        });
        for ((what, _, args), code) in cases.iter().zip(codes) {
            if !matches!(args[0].as_str(), "pairs" | "jobs" | "status") {
                assert_ne!(
                    code,
                    Some(0),
                    "{what}: slate {} should fail",
                    args.join(" ")
                );
            }
        }
        for p in parts {
            t.items.extend(p.items);
        }
        // what the failed jobs left in the databases
        for d in [&db, &serve_db] {
            run(&mut t, &every, d, level, &["jobs", "--json"]);
            for id in ["1", "2", "3"] {
                run(&mut t, &every, d, level, &["status", id]);
                run(&mut t, &every, d, level, &["status", id, "--json"]);
            }
        }
    }
    t.add_databases(dir.path());
    eprintln!(
        "checked {} outputs, {} bytes, for {} secrets",
        t.items.len(),
        t.bytes(),
        f.secrets.len()
    );
    t.assert_clean(&f.secrets);
}

#[test]
fn the_checker_finds_every_form_of_a_secret() {
    // a check that finds nothing must be because nothing is there
    let s = Secret::new("token", AWS_TOKEN);
    let planted = [
        format!("x-amz-security-token: {AWS_TOKEN}"),
        format!("b64 {}", b64(AWS_TOKEN.as_bytes())),
        format!(
            "url {}",
            url::form_urlencoded::byte_serialize(AWS_TOKEN.as_bytes()).collect::<String>()
        ),
        format!("json {}", serde_json::to_string(AWS_TOKEN).expect("json")),
        format!("cut short: {}…", &AWS_TOKEN[..20]),
        format!("cut in front: …{}", &AWS_TOKEN[AWS_TOKEN.len() - 20..]),
    ];
    for text in planted {
        let mut t = Transcript::default();
        t.add("planted", text.clone());
        let found = t.findings(std::slice::from_ref(&s));
        assert!(!found.is_empty(), "not found in {text:?}");
    }
    let mut t = Transcript::default();
    t.add(
        "clean",
        "nothing to see: IQoJb3JpZ2lu is only 12 characters",
    );
    t.assert_clean(&[s]);
}

#[test]
fn a_database_password_never_shows() {
    // in the URL, in PGPASSWORD, and in SLATE_DB behind --help; a server that refuses, one
    // that is not there, and a scheme slate does not serve
    let secret = "pg-Secret-8c1f2e";
    let dir = tempfile::tempdir().expect("tmp");
    let good = pg_url();
    let cut = good.find("://").map(|i| i + 3).expect("a URL");
    let with_pw = format!("{}postgres:{secret}@{}", &good[..cut], &good[cut..]);
    type Case = (Vec<String>, Vec<(&'static str, String)>);
    let cases: Vec<Case> = vec![
        (
            vec!["pairs".into(), "--db".into(), with_pw.clone(), "-vv".into()],
            vec![],
        ),
        (
            vec![
                "pairs".into(),
                "--db".into(),
                format!("postgres://u:{secret}@127.0.0.1:1/x"),
            ],
            vec![],
        ),
        (
            vec![
                "pairs".into(),
                "--db".into(),
                "postgres://u@127.0.0.1:1/x".into(),
            ],
            vec![("PGPASSWORD", secret.to_string())],
        ),
        (
            vec![
                "pairs".into(),
                "--db".into(),
                format!("mysql://u:{secret}@h/db"),
            ],
            vec![],
        ),
        (
            vec!["sync".into(), "--help".into()],
            vec![("SLATE_DB", with_pw.clone())],
        ),
    ];
    for (args, env) in cases {
        let mut c = slate();
        c.args(&args).current_dir(dir.path());
        for (k, v) in &env {
            c.env(k, v);
        }
        let out = c.output().expect("run");
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !text.contains(secret),
            "{args:?}: the password shows:\n{text}"
        );
    }
    // the refused scheme is named, with exit 2; nothing was created for it
    let out = slate()
        .args(["pairs", "--db", &format!("mysql://u:{secret}@h/db")])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("mysql://u:***@h/db"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "nothing created"
    );
}
