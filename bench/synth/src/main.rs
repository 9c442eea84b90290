//! `synth-s3`: a synthetic S3 store for slate's scale benchmark (issue 24), on the s3s crate.
//!
//! - bucket `--src` (default `synth-src`) holds `--objects` generated objects (`--shape tree`
//!   or `flat`, keys of 20–120 characters with some unicode, sizes uniform in
//!   `--mean-size` ± `--spread`), listed in O(page), their bytes made on GET from (key,
//!   version), ETags the MD5 of those bytes; PUT, DELETE and copy go to an overlay;
//! - bucket `--sink` (default `synth-sink`) keeps of what it receives only sizes, part MD5s,
//!   ETags and metadata, so a replica of millions of objects can be checked without storing it;
//! - the admin port (`--admin-port`, 127.0.0.1 only) answers `GET /verify?src=P&sink=Q` (the
//!   sink's `Q…` against the source's `P…`, as JSON), `POST /change?new=N&overwrite=N&delete=N
//!   &seed=S` (a change set in the source; the changed keys as JSON lines) and `GET /counts`
//!   (requests served by operation).
//!
//! It listens on 127.0.0.1 only. Two instances (one as source, one as sink) make bytes pass
//! through slate, as `--no-server-side-copy` does with one.

mod model;
mod queue;
mod store;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

use model::{mix, Shape, Spec};
use store::Synth;

#[derive(Debug, Parser)]
struct Opt {
    /// Port of the S3 API on 127.0.0.1 (0: any; the chosen one is printed).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Port of the admin API on 127.0.0.1 (0: any).
    #[arg(long, default_value_t = 0)]
    admin_port: u16,
    #[arg(long, default_value = "synth-src")]
    src: String,
    #[arg(long, default_value = "synth-sink")]
    sink: String,
    /// Objects in the source bucket.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    #[arg(long, value_enum, default_value_t = Shape::Tree)]
    shape: Shape,
    /// Every generated key begins with it.
    #[arg(long, default_value = "data/")]
    prefix: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Mean object size in bytes (the seed's store: 245760).
    #[arg(long, default_value_t = 1024)]
    mean_size: u64,
    /// Sizes are uniform in mean ± spread.
    #[arg(long, default_value_t = 512)]
    spread: u64,
    #[arg(long, default_value = "testing")]
    access_key: String,
    #[arg(long, default_value = "testing")]
    secret_key: String,
    /// The SQS queue (on the admin port) told of every change to the source.
    #[arg(long, default_value = "synth-events")]
    queue: String,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opt = Opt::parse();
    if opt.objects > 1000 * 65_536 {
        return Err(format!("--objects {}: at most 65,536,000", opt.objects).into());
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(run(opt))
}

async fn run(opt: Opt) -> Result<(), Box<dyn std::error::Error>> {
    let spec = Spec {
        n: opt.objects,
        shape: opt.shape,
        seed: opt.seed,
        mean: opt.mean_size,
        spread: opt.spread.min(opt.mean_size),
        prefix: opt.prefix.clone(),
    };
    let events = Arc::new(queue::Queue::new(&opt.queue));
    let synth = Arc::new(Synth::new(spec, opt.src.clone(), opt.sink.clone(), events));
    let service = {
        let mut b = S3ServiceBuilder::new((*synth).clone());
        b.set_auth(SimpleAuth::from_single(opt.access_key, opt.secret_key));
        b.build()
    };
    let s3 = TcpListener::bind(("127.0.0.1", opt.port)).await?;
    let admin = TcpListener::bind(("127.0.0.1", opt.admin_port)).await?;
    let admin_addr = admin.local_addr()?;
    let queue_url = format!("http://{admin_addr}/000000000000/{}", opt.queue);
    println!(
        "synth-s3: S3 on http://{} (buckets {} with {} objects, {:?}, mean {} B; {}), queue {queue_url}, admin on http://{admin_addr}",
        s3.local_addr()?,
        opt.src,
        opt.objects,
        opt.shape,
        opt.mean_size,
        opt.sink,
    );
    let a = synth.clone();
    let queue_url = Arc::new(queue_url);
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = admin.accept().await else {
                continue;
            };
            let (a, u) = (a.clone(), queue_url.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let (a, u) = (a.clone(), u.clone());
                    async move { Ok::<_, std::convert::Infallible>(admin_answer(&a, &u, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    let http = ConnBuilder::new(TokioExecutor::new());
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let (sock, _): (_, SocketAddr) = tokio::select! {
            r = s3.accept() => match r { Ok(c) => c, Err(_) => continue },
            _ = stop.as_mut() => break,
        };
        let conn = http
            .serve_connection(TokioIo::new(sock), service.clone())
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    Ok(())
}

fn query(req: &hyper::Request<hyper::body::Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn admin_answer(
    s: &Synth,
    queue_url: &str,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let q = query(&req);
    let target = req
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.strip_prefix("AmazonSQS."))
        .map(str::to_string);
    if let Some(op) = target {
        use http_body_util::BodyExt;
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => Bytes::new(),
        };
        let (status, answer) = s.events.answer(&op, &body, queue_url).await;
        return hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-amz-json-1.0")
            .body(Full::new(Bytes::from(answer.to_string())))
            .unwrap_or_default();
    }
    let num = |k: &str| q.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let text = match (req.method().as_str(), req.uri().path()) {
        ("GET", "/verify") => {
            let src = q
                .get("src")
                .cloned()
                .unwrap_or_else(|| s.spec.prefix.clone());
            let sink = q.get("sink").cloned().unwrap_or_default();
            store::verify(s, &src, &sink).to_string()
        }
        ("GET", "/counts") => {
            let c = s.counts.lock().map(|c| c.clone()).unwrap_or_default();
            serde_json::json!({"requests": c, "queue": s.events.stats()}).to_string()
        }
        ("POST", "/change") => change(s, num("new"), num("overwrite"), num("delete"), num("seed")),
        ("POST", "/inventory") => match q.get("dir") {
            Some(dir) => {
                let files = num("files").max(1);
                let (s, dir) = (s.clone(), dir.clone());
                match tokio::task::spawn_blocking(move || inventory(&s, &dir, files)).await {
                    Ok(Ok(text)) => text,
                    Ok(Err(e)) => format!("{{\"error\": {:?}}}", e.to_string()),
                    Err(e) => format!("{{\"error\": {:?}}}", e.to_string()),
                }
            }
            None => "{\"error\": \"dir= is required\"}".into(),
        },
        _ => {
            return hyper::Response::builder()
                .status(404)
                .body(Full::new(Bytes::from(
                    "GET /verify, GET /counts, POST /change, POST /inventory\n",
                )))
                .unwrap_or_default()
        }
    };
    hyper::Response::new(Full::new(Bytes::from(text + "\n")))
}

/// Writes an S3 Inventory report of the source's generated keys as they are now (deleted ones
/// left out, overwritten ones as overwritten; new keys of a change set are not in it) under
/// the folder `dir`, in S3's layout: `SRC/config/data/part-K.csv.gz` (keys dealt round-robin
/// over `files` files, so no file is in key order with the next) and
/// `SRC/config/TIME/manifest.json`. Answers the manifest's path as JSON.
fn inventory(s: &Synth, dir: &str, files: u64) -> std::io::Result<String> {
    use std::io::Write;
    let root = std::path::Path::new(dir);
    let base = format!("{}/config", s.src);
    std::fs::create_dir_all(root.join(&base).join("data"))?;
    let mut outs = Vec::new();
    let mut names = Vec::new();
    for k in 0..files {
        let name = format!("{base}/data/part-{k}.csv.gz");
        let f = std::fs::File::create(root.join(&name))?;
        outs.push(flate2::write::GzEncoder::new(
            std::io::BufWriter::new(f),
            flate2::Compression::fast(),
        ));
        names.push(name);
    }
    let mut rows = 0u64;
    for i in 0..s.spec.n {
        let key = s.spec.key(i);
        let Ok(e) = s.lookup(&s.src, &key) else {
            continue;
        };
        let (size, etag, modified) = s.facts(&key, &e);
        let secs = modified
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let out = &mut outs[(i % files) as usize];
        writeln!(
            out,
            "\"{}\",\"{}\",\"\",\"true\",\"false\",\"{size}\",\"{}\",\"{etag}\",\"STANDARD\"",
            s.src,
            form_encode(&key),
            iso(secs),
        )?;
        rows += 1;
    }
    let mut entries = Vec::new();
    for (out, name) in outs.into_iter().zip(&names) {
        out.finish()?.flush()?;
        let size = std::fs::metadata(root.join(name))?.len();
        entries.push(serde_json::json!({"key": name, "size": size, "MD5checksum": ""}));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let folder = root.join(&base).join("2026-12-04T00-00Z");
    std::fs::create_dir_all(&folder)?;
    let manifest = serde_json::json!({
        "sourceBucket": s.src,
        "destinationBucket": "arn:aws:s3:::synth-inventory",
        "version": "2016-11-30",
        "creationTimestamp": now.to_string(),
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, StorageClass",
        "files": entries,
    });
    let path = folder.join("manifest.json");
    std::fs::write(&path, serde_json::to_vec(&manifest)?)?;
    Ok(serde_json::json!({"manifest": path.display().to_string(), "rows": rows}).to_string())
}

/// A key as S3 Inventory's CSV writes it: URL-encoded as a form is.
fn form_encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 8);
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `2026-03-01T12:00:00.000Z` from seconds since the epoch (UTC, proleptic Gregorian).
fn iso(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A change set in the source: `new` objects beside generated ones, `overwrite` generated
/// objects given a version 1 of a new size, `delete` generated objects deleted; picked from
/// `seed`. Answers one JSON line per change.
fn change(s: &Synth, new: u64, overwrite: u64, delete: u64, seed: u64) -> String {
    let n = s.spec.n.max(1);
    let mut out = String::new();
    let mut h = mix(seed ^ 0x00C4_A96E);
    let mut pick = || {
        h = mix(h);
        h % n
    };
    for j in 0..new {
        let i = pick();
        let key = format!("{}~new-{seed}-{j}", s.spec.key(i));
        let size = s.spec.size(mix(i ^ j));
        let r = s.generate(&key, 1, size);
        out.push_str(&serde_json::json!({"new": key, "ok": r.is_ok()}).to_string());
        out.push('\n');
    }
    for _ in 0..overwrite {
        let i = pick();
        let key = s.spec.key(i);
        let size = s.spec.size(mix(i ^ 0x0E));
        let r = s.generate(&key, 1 + seed, size);
        out.push_str(&serde_json::json!({"overwrite": key, "ok": r.is_ok()}).to_string());
        out.push('\n');
    }
    for _ in 0..delete {
        let key = s.spec.key(pick());
        let r = s.delete_source(&key);
        out.push_str(&serde_json::json!({"delete": key, "ok": r.is_ok()}).to_string());
        out.push('\n');
    }
    out
}
