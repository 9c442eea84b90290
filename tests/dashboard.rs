//! The web dashboard (GET /) in a real browser: `slate sync --config CFG --listen 127.0.0.1:0`
//! with one local folder → local folder pair and a bearer token, a long copy job started with
//! POST /jobs (5,000 small files to moto S3, one transfer at a time), then
//! `node tests/browser/dashboard.mjs`, which drives Debian's Chromium with playwright-core and
//! checks that the job's progress advances live, that the pair's row shows its lag, backlog and
//! health, and that the form shows the API's error for a bad source. Its screenshot goes to
//! target/test-artifacts/dashboard.png.
//!
//! Needs Chromium and playwright-core: `scripts/services.sh browser` installs both (scripts/test.sh
//! runs it) and `scripts/services.sh env` says where they are. Without them this test fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Chromium and playwright-core: where `scripts/services.sh env` says, else where
/// `scripts/services.sh browser` puts them.
fn browser() -> (PathBuf, PathBuf) {
    let how = "install them with `scripts/services.sh browser` (scripts/test.sh does), then \
               `eval \"$(scripts/services.sh env)\"`";
    let chromium = PathBuf::from(
        std::env::var("SLATE_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
    );
    assert!(
        chromium.is_file(),
        "no Chromium at {} (SLATE_TEST_CHROMIUM): {how}",
        chromium.display()
    );
    // default: where `scripts/services.sh browser` puts it
    let playwright = std::env::var("SLATE_TEST_PLAYWRIGHT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let home = std::env::var("SLATE_TEST_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    PathBuf::from(std::env::var("HOME").unwrap_or_default())
                        .join(".cache/slate-test")
                });
            home.join("browser/node_modules/playwright-core")
        });
    assert!(
        playwright.join("package.json").is_file(),
        "no playwright-core at {} (SLATE_TEST_PLAYWRIGHT): {how}",
        playwright.display()
    );
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.map(|o| o.status.success()).unwrap_or(false),
        "`node` does not run (the browser test is a Node.js script): {how}"
    );
    (chromium, playwright)
}

/// Starts the daemon as a user would (no token configured: it makes one and prints the
/// dashboard's URL with it) and returns it with the address it listens on and that URL.
fn start_daemon(db: &Path, cfg: &Path, log: &Path) -> (Child, String, String) {
    let mut c = slate_db(db);
    c.args(["sync", "--config", &cfg.display().to_string()])
        .args(["--listen", "127.0.0.1:0", "--quiet"])
        // the job below reads a folder of the system's temporary folder
        .arg("--allow-root")
        .arg(std::env::temp_dir())
        .env_remove("SLATE_API_TOKEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"));
    let child = spawn_ready(c, log, 60, |text| {
        listen_addr(text).is_some() && text.contains("following changes")
    });
    let text = read_log(log);
    let addr = listen_addr(&text).expect("listening");
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("slate: dashboard at "))
        .expect("the dashboard's URL")
        .trim()
        .to_string();
    (child, addr, url)
}

struct Api {
    base: String,
    token: String,
    http: reqwest::blocking::Client,
}

impl Api {
    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(30));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let r = req
            .send()
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status().as_u16();
        let text = r.text().unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, v)
    }
}

#[test]
fn dashboard_shows_live_progress_in_a_real_browser() {
    let (chromium, playwright) = browser();
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log, cfg) = (
        dir.path().join("slate.db"),
        dir.path().join("daemon.log"),
        dir.path().join("slate.toml"),
    );

    // the config's one pair: local folder → local folder
    let (a, b) = (
        Place::new(End::Local, "dash-a"),
        Place::new(End::Local, "dash-b"),
    );
    a.seed(&[("hello.txt".to_string(), b"hello".to_vec())].into());
    std::fs::create_dir_all(&b.root).expect("mkdir");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\ndrift_check_interval = \"0\"\n\n[[pairs]]\nname = \"dashboard\"\nsrc = \"{}\"\ndst = \"{}\"\n",
            a.url(),
            b.url()
        ),
    )
    .expect("config");

    // the job's source: 5,000 small files, copied one at a time to moto (some 30 s), to have
    // time to watch; the test cancels it when the browser is done
    let src = Place::new(End::Local, "dash-job");
    let files: std::collections::BTreeMap<String, Vec<u8>> = (0..5000u64)
        .map(|i| {
            (
                format!("d{:02}/f{i:05}.bin", i % 20),
                bytes(i, 2048 + (i as usize % 7) * 512),
            )
        })
        .collect();
    src.seed(&files);
    let dst = Place::new(End::S3("slate-dst"), "dash-job");

    let (daemon, addr, printed) = start_daemon(&db, &cfg, &log);
    let token = printed
        .split_once("?token=")
        .map(|(_, t)| t.to_string())
        .unwrap_or_else(|| panic!("no token in the printed URL {printed}"));
    let api = Api {
        base: format!("http://{addr}"),
        token,
        http: reqwest::blocking::Client::new(),
    };

    // the page itself, without a token (its data needs one)
    let r = api
        .http
        .get(format!("{}/", api.base))
        .send()
        .expect("GET /");
    assert_eq!(r.status().as_u16(), 200, "GET /");
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/html"), "GET / content-type: {ct}");

    let (status, pairs) = api.call(reqwest::Method::GET, "/pairs", None);
    assert_eq!(status, 200, "GET /pairs: {pairs}");
    let pair_id = pairs["pairs"][0]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pair id in {pairs}"));

    let (status, job) = api.call(
        reqwest::Method::POST,
        "/jobs",
        Some(serde_json::json!({
            "kind": "copy",
            "src": src.url(),
            "dst": dst.url(),
            "options": {"transfers": 1},
        })),
    );
    assert_eq!(status, 201, "POST /jobs: {job}");
    let job_id = job["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no job id in {job}"));

    // wait until it runs, so that the browser sees it running
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, j) = api.call(reqwest::Method::GET, &format!("/jobs/{job_id}"), None);
        assert_eq!(status, 200, "GET /jobs/{job_id}: {j}");
        match j["state"].as_str() {
            Some("running") => break,
            Some("queued") => {}
            other => panic!("job {job_id} is {other:?} before the browser saw it: {j}"),
        }
        assert!(Instant::now() < deadline, "job {job_id} still queued: {j}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("mkdir target/test-artifacts");
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
    // the browser opens the URL slate printed
    let url = printed.clone();
    let out_path = dir.path().join("browser.out");
    let node = Command::new("node")
        .arg(&script)
        .arg(&url)
        .arg(job_id.to_string())
        .arg(pair_id.to_string())
        .arg(&shot)
        .env("SLATE_TEST_CHROMIUM", &chromium)
        .env("SLATE_TEST_PLAYWRIGHT", &playwright)
        .env("SLATE_DASHBOARD_TIMEOUT", "90")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("out"))
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .append(true)
                .open(&out_path)
                .expect("out"),
        ))
        .spawn()
        .expect("spawn node");
    let mut node = Child(node);
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = node.try_wait().expect("wait node") {
            break s;
        }
        if Instant::now() > deadline {
            node.kill9();
            panic!(
                "tests/browser/dashboard.mjs ran over 150 s: {}",
                read_log(&out_path)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = read_log(&out_path);
    eprint!("{said}");
    assert!(
        status.success(),
        "tests/browser/dashboard.mjs failed ({status}): {}\nscreenshot: {}\ndaemon log:\n{}",
        said.trim(),
        shot.display(),
        read_log(&log)
    );
    assert!(shot.is_file(), "no screenshot at {}", shot.display());

    // done watching: cancel the copy (or see it finished) and stop the daemon
    let (status, j) = api.call(reqwest::Method::DELETE, &format!("/jobs/{job_id}"), None);
    assert!(
        status == 200 || status == 409,
        "DELETE /jobs/{job_id}: {status} {j}"
    );
    let code = daemon.stop(libc::SIGTERM);
    assert_eq!(
        code,
        Some(0),
        "slate sync after SIGTERM: {}",
        read_log(&log)
    );
}
