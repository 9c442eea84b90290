//! Resume from the middle of an object, and no orphan uploads: a copy of a 512 MiB object
//! killed with -9 at half continues from its last chunk when run again (the latency lab in
//! front of moto counts what the rerun reads), the result is byte-equal, and no unfinished
//! upload of slate's is left, while another client's upload in the same place is untouched.
//! A source that changed since starts afresh; `slate cleanup` aborts what a killed copy left.

mod common;

use std::path::Path;
use std::process::Child;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use slate::lab::{Lab, Link};

/// Blocks of 1 MiB the copies recorded in `db` as written (0 before the table exists).
fn blocks_written(db: &Path) -> u64 {
    let Ok(c) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    c.query_row(
        "SELECT COALESCE(SUM(length(digests)), 0) / 16 FROM upload_parts",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .unwrap_or(0)
}

fn uploads_recorded(db: &Path) -> i64 {
    let c = rusqlite::Connection::open(db).expect("db");
    c.query_row("SELECT COUNT(*) FROM uploads", [], |r| r.get(0))
        .expect("count")
}

/// Waits until the running copy has recorded `mib` MiB, then kills it with -9, proving that
/// the kill landed mid-copy (the process still ran).
fn kill_at(child: &mut Child, db: &Path, mib: u64, ctx: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            panic!("{ctx}: the copy ended ({st}) before {mib} MiB were written");
        }
        if blocks_written(db) >= mib {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ctx}: {mib} MiB not written in time"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
}

/// The counter `read` once it stops moving (what the lab still carried of a killed process's
/// connections, from its socket buffers, is counted before a rerun starts).
fn settled(read: impl Fn() -> u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = read();
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "the lab kept carrying bytes");
        last = now;
    }
}

/// `moved` bytes of an object of `size` are at most `percent` of it; `what` moved them.
fn at_most(moved: u64, size: usize, percent: u64, what: &str) {
    assert!(
        moved <= size as u64 * percent / 100,
        "{what} {} MiB of {} MiB (at most {percent}% expected)",
        moved >> 20,
        size >> 20
    );
}

/// Multipart uploads open under `prefix` in moto's `bucket`: their upload ids.
fn open_uploads(bucket: &str, prefix: &str) -> Vec<String> {
    let (st, body) = s3_raw("GET", &format!("/{bucket}?uploads&prefix={prefix}"), "");
    assert_eq!(st, 200, "listing uploads: {body}");
    body.split("<UploadId>")
        .skip(1)
        .filter_map(|r| r.split("</UploadId>").next())
        .map(str::to_string)
        .collect()
}

/// Another client's multipart upload of `key`: started, never completed.
fn foreign_upload(bucket: &str, key: &str) -> String {
    let (st, body) = s3_raw("POST", &format!("/{bucket}/{key}?uploads"), "");
    assert_eq!(st, 200, "starting an upload: {body}");
    body.split("<UploadId>")
        .nth(1)
        .and_then(|r| r.split("</UploadId>").next())
        .expect("an upload id")
        .to_string()
}

/// A source behind the lab: where it is, and the variable that sends slate through the lab.
struct Source {
    place: Place,
    lab: Lab,
    var: &'static str,
}

impl Source {
    /// `end`'s emulator behind a lab capped at `rate` bytes/s each way, holding `data`.
    fn new(
        runtime: &tokio::runtime::Runtime,
        end: End,
        rate: u64,
        key: &str,
        data: &[u8],
    ) -> Source {
        let (upstream, var) = match end {
            End::S3(_) => (s3_endpoint(), "AWS_ENDPOINT_URL"),
            _ => (azurite_url(), "AZURITE_BLOB_STORAGE_URL"),
        };
        let addr: std::net::SocketAddr = upstream
            .trim_start_matches("http://")
            .parse()
            .expect("emulator address");
        let place = Place::new(end, "resume-src");
        place.seed(&[(key.to_string(), data.to_vec())].into());
        let lab = runtime
            .block_on(Lab::start(
                addr,
                Link::rtt(Duration::from_millis(2), Some(rate)),
                0,
            ))
            .expect("lab");
        Source { place, lab, var }
    }

    fn read(&self) -> u64 {
        self.lab.counters.down.load(Relaxed)
    }
}

fn copy_cmd(db: &Path, src: &Source, dst: &str, chunk: &str) -> std::process::Command {
    let mut c = slate_db(db);
    let src_url = src.place.url();
    c.env(src.var, src.lab.url()).args([
        "copy",
        &src_url,
        dst,
        "--chunk-size",
        chunk,
        "--streams",
        "4",
        "-q",
    ]);
    c
}

#[test]
fn a_copy_killed_at_half_reads_at_most_60_percent_when_run_again() {
    let runtime = rt();
    const SIZE: usize = 512 * MIB;
    let data = bytes(513, SIZE);
    // capped, so that the copy takes seconds and the kill lands where it is asked to; the
    // S3 destination reads from Azurite (S3 to S3 in one endpoint would copy server-side)
    let rate = 96 << 20;
    let from_s3 = Source::new(&runtime, End::S3("slate-src"), rate, "big.bin", &data);
    let from_az = Source::new(&runtime, End::Az("slate-src"), rate, "big.bin", &data);
    for (end, src) in [(End::Local, &from_s3), (End::S3("slate-dst"), &from_az)] {
        let dst = Place::new(end, "resume-dst");
        let ctx = format!("to {}", dst.url());
        let dir = tempfile::tempdir().expect("tmp");
        let db = dir.path().join("slate.db");
        let other = match dst.end {
            End::S3(b) => Some(foreign_upload(b, &format!("{}/other.bin", dst.prefix))),
            _ => None,
        };
        let mut child = copy_cmd(&db, src, &dst.url(), "16MiB")
            .spawn()
            .expect("spawn");
        kill_at(&mut child, &db, 256, &ctx);
        assert!(
            !dst.read().contains_key("big.bin"),
            "{ctx}: a torn object is visible after the kill"
        );
        assert_eq!(uploads_recorded(&db), 1, "{ctx}: the killed copy's upload");

        let before = settled(|| src.read());
        let out = copy_cmd(&db, src, &dst.url(), "16MiB")
            .output()
            .expect("rerun");
        assert!(
            out.status.success(),
            "{ctx}: the rerun failed: {}",
            stderr(&out)
        );
        let read = src.read() - before;
        at_most(read, SIZE, 60, &format!("{ctx}: the rerun read"));
        let got = dst.read();
        assert!(
            got.get("big.bin") == Some(&data),
            "{ctx}: the result differs from the source"
        );
        assert_eq!(uploads_recorded(&db), 0, "{ctx}: a recorded upload is left");
        match dst.end {
            End::S3(b) => {
                // slate's upload is gone; the other client's is still there
                let open = open_uploads(b, &format!("{}/", dst.prefix));
                assert_eq!(open, vec![other.clone().unwrap_or_default()], "{ctx}");
            }
            _ => {
                let names: Vec<String> = std::fs::read_dir(&dst.root)
                    .expect("dst")
                    .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
                    .collect();
                assert_eq!(
                    names,
                    vec!["big.bin".to_string()],
                    "{ctx}: temporary files left"
                );
            }
        }
        eprintln!(
            "{ctx}: the rerun read {} MiB of {} MiB",
            read >> 20,
            SIZE >> 20
        );
        dst.remove(&["big.bin"]);
    }
    // the emulators hold objects in memory
    from_s3.place.remove(&["big.bin"]);
    from_az.place.remove(&["big.bin"]);
}

#[test]
fn a_changed_source_starts_afresh_and_cleanup_aborts_only_slates_uploads() {
    let runtime = rt();
    const SIZE: usize = 96 * MIB;
    let src = Source::new(
        &runtime,
        End::Az("slate-src"),
        24 << 20,
        "obj.bin",
        &bytes(1, SIZE),
    );
    let dst = Place::new(End::S3("slate-dst"), "afresh-dst");
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let other = foreign_upload("slate-dst", &format!("{}/obj.bin", dst.prefix));

    // killed, then `slate cleanup` for that destination aborts slate's upload alone
    let mut child = copy_cmd(&db, &src, &dst.url(), "8MiB")
        .spawn()
        .expect("spawn");
    kill_at(&mut child, &db, 16, "first copy");
    assert_eq!(
        open_uploads("slate-dst", &format!("{}/", dst.prefix)).len(),
        2
    );
    let dry = run({
        let mut c = slate_db(&db);
        c.args(["cleanup", &dst.url(), "--dry-run"]);
        c
    });
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("1 upload(s) to abort"),
        "{}",
        stdout(&dry)
    );
    assert_eq!(
        open_uploads("slate-dst", &format!("{}/", dst.prefix)).len(),
        2
    );
    let out = run({
        let mut c = slate_db(&db);
        c.args(["cleanup", &dst.url()]);
        c
    });
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("1 upload(s) aborted"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        open_uploads("slate-dst", &format!("{}/", dst.prefix)),
        vec![other.clone()]
    );
    assert_eq!(uploads_recorded(&db), 0);

    // killed again; the source changes before the rerun: the rerun reads it all and the
    // killed copy's upload is aborted, not completed with the old bytes
    let mut child = copy_cmd(&db, &src, &dst.url(), "8MiB")
        .spawn()
        .expect("spawn");
    kill_at(&mut child, &db, 48, "second copy");
    let new = bytes(2, SIZE);
    src.place
        .seed(&[("obj.bin".to_string(), new.clone())].into());
    let before = settled(|| src.read());
    let out = copy_cmd(&db, &src, &dst.url(), "8MiB")
        .output()
        .expect("rerun");
    assert!(out.status.success(), "the rerun failed: {}", stderr(&out));
    let read = src.read() - before;
    assert!(
        read >= SIZE as u64,
        "the rerun read {read} bytes of a changed {SIZE}-byte source"
    );
    assert!(dst.read().get("obj.bin") == Some(&new), "not the new bytes");
    assert_eq!(
        open_uploads("slate-dst", &format!("{}/", dst.prefix)),
        vec![other]
    );
    assert_eq!(uploads_recorded(&db), 0);
}

/// A job cancelled mid-object keeps its upload; `POST /jobs/{id}/resume` in the same server
/// continues it, reading what was not uploaded yet and little more.
#[test]
fn a_cancelled_job_resumes_from_its_last_part() {
    let runtime = rt();
    const SIZE: usize = 160 * MIB;
    let data = bytes(77, SIZE);
    let src = Source::new(&runtime, End::Az("slate-src"), 48 << 20, "job.bin", &data);
    let dst = Place::new(End::S3("slate-dst"), "job-dst");
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("serve.log"));
    let mut c = slate_db(&db);
    // the API without a token: this test is of resuming; tokens are tests/api.rs's
    c.args(["serve", "--listen", "127.0.0.1:0", "--quiet", "--no-token"])
        .env(src.var, src.lab.url())
        .env("RUST_LOG", "slate=info,warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let mut server = spawn_ready(c, &log, 30, |text| listen_addr(text).is_some());
    let base = format!(
        "http://{}",
        listen_addr(&read_log(&log)).expect("listening")
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let call = |method: reqwest::Method, path: &str, body: Option<serde_json::Value>| {
        let changes = method != reqwest::Method::GET;
        let mut r = client.request(method, format!("{base}{path}"));
        if let Some(b) = body {
            r = r.json(&b);
        }
        if changes {
            // every state-changing request is JSON
            r = r.header("content-type", "application/json");
        }
        let resp = r.send().expect("request");
        let status = resp.status().as_u16();
        (status, resp.json::<serde_json::Value>().expect("json"))
    };
    let (st, job) = call(
        reqwest::Method::POST,
        "/jobs",
        Some(serde_json::json!({
            "src": src.place.url(), "dst": dst.url(),
            "options": { "chunk_size": "8MiB", "streams": 4 },
        })),
    );
    assert_eq!(st, 201, "{job}");
    let id = job["id"].as_i64().expect("id");
    let deadline = Instant::now() + Duration::from_secs(120);
    while blocks_written(&db) < 64 {
        assert!(
            Instant::now() < deadline,
            "the job wrote too little in time"
        );
        let (_, j) = call(reqwest::Method::GET, &format!("/jobs/{id}"), None);
        // queued until the runner takes it, then running
        assert!(
            j["state"] == "running" || j["state"] == "queued",
            "the job ended before it was cancelled: {j}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, j) = call(reqwest::Method::DELETE, &format!("/jobs/{id}"), None);
    assert_eq!(st, 200, "{j}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, j) = call(reqwest::Method::GET, &format!("/jobs/{id}"), None);
        if j["state"] == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "not cancelled: {j}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !dst.read().contains_key("job.bin"),
        "a torn object is visible"
    );
    assert_eq!(
        uploads_recorded(&db),
        1,
        "the cancelled job's upload is kept"
    );

    let before = settled(|| src.read());
    let (st, j) = call(reqwest::Method::POST, &format!("/jobs/{id}/resume"), None);
    assert_eq!(st, 200, "{j}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, j) = call(reqwest::Method::GET, &format!("/jobs/{id}"), None);
        if j["state"] == "succeeded" {
            break;
        }
        assert!(
            j["state"] == "running" || j["state"] == "queued",
            "the resumed job: {j}"
        );
        assert!(
            Instant::now() < deadline,
            "the resumed job did not end: {j}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let read = src.read() - before;
    let _ = server.kill();
    let _ = server.wait();
    at_most(read, SIZE, 70, "the resumed job read");
    assert!(
        dst.read().get("job.bin") == Some(&data),
        "the result differs"
    );
    assert_eq!(uploads_recorded(&db), 0);
    assert!(open_uploads("slate-dst", &format!("{}/", dst.prefix)).is_empty());
    src.place.remove(&["job.bin"]);
    dst.remove(&["job.bin"]);
}

/// A 96 MiB object from S3 to `end`, killed once half is recorded and run again: the rerun
/// reads at most 60% of it, and the result is whole.
fn resumes_at(end: End, name: &str, what: &str) {
    let runtime = rt();
    const SIZE: usize = 96 * MIB;
    let data = bytes(96, SIZE);
    let key = format!("{name}.bin");
    let src = Source::new(&runtime, End::S3("slate-src"), 24 << 20, &key, &data);
    let dst = Place::new(end, name);
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let mut child = copy_cmd(&db, &src, &dst.url(), "8MiB")
        .spawn()
        .expect("spawn");
    kill_at(&mut child, &db, 48, what);
    assert!(
        !dst.read().contains_key(&key),
        "{what}: a torn object is visible"
    );
    let before = settled(|| src.read());
    let out = copy_cmd(&db, &src, &dst.url(), "8MiB")
        .output()
        .expect("rerun");
    assert!(
        out.status.success(),
        "{what}: the rerun failed: {}",
        stderr(&out)
    );
    at_most(
        src.read() - before,
        SIZE,
        60,
        &format!("{what}: the rerun read"),
    );
    assert!(
        dst.read().get(&key) == Some(&data),
        "{what}: the object differs"
    );
    assert_eq!(uploads_recorded(&db), 0);
    src.place.remove(&[&key]);
    dst.remove(&[&key]);
}

/// An Azure destination keeps no upload id: its uncommitted blocks are what a rerun finds
/// (Get Block List) and continues from.
#[test]
fn an_azure_upload_resumes_from_its_uncommitted_blocks() {
    resumes_at(End::Az("slate-dst"), "resume-az", "to Azure");
}

/// A GCS destination: the XML API's multipart upload, confirmed with its ListParts.
#[test]
fn a_gcs_upload_resumes_from_its_listed_parts() {
    resumes_at(End::Gs("slate-dst"), "resume-gs", "to GCS");
}

/// `sync --once` and the daemon continue what a killed run of theirs left: the daemon's
/// backfill of a local folder to S3, killed at half and started again, sends at most 60% of
/// the object again (the lab in front of moto counts what goes up).
#[test]
fn a_killed_daemon_continues_its_upload() {
    let runtime = rt();
    const SIZE: usize = 128 * MIB;
    let data = bytes(128, SIZE);
    let moto: std::net::SocketAddr = s3_endpoint()
        .trim_start_matches("http://")
        .parse()
        .expect("moto address");
    let lab = runtime
        .block_on(Lab::start(
            moto,
            Link::rtt(Duration::from_millis(2), Some(32 << 20)),
            0,
        ))
        .expect("lab");
    let src = Place::new(End::Local, "daemon-src");
    src.seed(&[("weights.bin".to_string(), data.clone())].into());
    let dst = Place::new(End::S3("slate-dst"), "daemon-dst");
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slate.db");
    let daemon = |log: &str| {
        let mut c = slate_db(&db);
        c.env("AWS_ENDPOINT_URL", lab.url())
            .args([
                "sync",
                &src.url(),
                &dst.url(),
                "--chunk-size",
                "8MiB",
                "--streams",
                "4",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join(log)).expect("log"));
        c.spawn().expect("daemon")
    };
    let mut first = daemon("first.log");
    kill_at(&mut first, &db, 64, "the daemon's backfill");
    assert!(
        !dst.read().contains_key("weights.bin"),
        "a torn object is visible"
    );
    let before = settled(|| lab.counters.up.load(Relaxed));
    let mut second = daemon("second.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !dst.read().contains_key("weights.bin") {
        assert!(
            second.try_wait().expect("wait").is_none(),
            "the daemon stopped: {}",
            read_log(&dir.path().join("second.log"))
        );
        assert!(
            Instant::now() < deadline,
            "the object did not arrive in time"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = lab.counters.up.load(Relaxed) - before;
    let _ = second.kill();
    let _ = second.wait();
    at_most(sent, SIZE, 60, "the restarted daemon sent");
    assert!(
        dst.read().get("weights.bin") == Some(&data),
        "the object differs"
    );
    assert!(open_uploads("slate-dst", &format!("{}/", dst.prefix)).is_empty());
    dst.remove(&["weights.bin"]);
}

/// A local file rewritten after a killed copy, its size and mtime set back as they were (a
/// coarse clock, a tool that restores times): the rerun must not finish the old upload with
/// new bytes. Its recorded chunks are hashed again from the source, found different, and the
/// object is sent whole: the destination holds the new version, not a mix; a local
/// destination's temp file likewise.
#[test]
fn a_rewritten_local_source_with_the_same_size_and_mtime_is_not_resumed() {
    const SIZE: usize = 48 * MIB;
    for to_s3 in [true, false] {
        let dir = tempfile::tempdir().expect("tmp");
        let db = dir.path().join("slate.db");
        let src = dir.path().join("src");
        std::fs::create_dir_all(&src).expect("mkdir");
        let file = src.join("obj.bin");
        std::fs::write(&file, bytes(1, SIZE)).expect("write");
        let mtime = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .expect("mtime");
        let local_dst = dir.path().join("dst");
        let dst = match to_s3 {
            true => Place::new(End::S3("slate-dst"), "rewritten-dst").url(),
            false => local_dst.display().to_string(),
        };
        let cmd = || {
            let mut c = slate_db(&db);
            c.args([
                "copy",
                &src.display().to_string(),
                &dst,
                "--chunk-size",
                "8MiB",
                "--streams",
                "2",
                "--bwlimit",
                "16M",
                "-q",
            ]);
            c
        };
        let mut child = cmd().spawn().expect("spawn");
        kill_at(&mut child, &db, 16, "first copy");
        let new = bytes(2, SIZE);
        std::fs::write(&file, &new).expect("rewrite");
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(mtime))
            .expect("set the mtime back");
        let out = cmd().output().expect("rerun");
        assert!(out.status.success(), "the rerun failed: {}", stderr(&out));
        let got = match to_s3 {
            true => {
                let prefix = dst.trim_start_matches("s3://slate-dst/").to_string();
                rt().block_on(read_all(&s3("slate-dst"), &prefix))
                    .remove("obj.bin")
            }
            false => read_local(&local_dst).remove("obj.bin"),
        };
        assert!(
            got.as_ref() == Some(&new),
            "to_s3={to_s3}: not the new bytes ({:?} bytes)",
            got.map(|g| g.len())
        );
        assert_eq!(uploads_recorded(&db), 0);
    }
}
