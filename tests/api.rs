//! The HTTP API against the real server on 127.0.0.1:0: jobs end to end on the emulators, the
//! SSE stream read to its end, resume after a killed process, cancel, the 400/401/404 cases,
//! the OpenAPI document against the routes, and `slate jobs` / `slate status`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A `slate serve` under test: killed when dropped.
struct Server {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Server {
    fn start(db: &Path, log: &Path, token: Option<&str>) -> Server {
        Server::start_with(db, log, token, &[])
    }

    fn start_with(db: &Path, log: &Path, token: Option<&str>, extra: &[&str]) -> Server {
        let mut c = slate_db(db);
        c.args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
            .args(extra)
            .env("RUST_LOG", "slate=info,warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"));
        match token {
            Some(t) => c.env("SLATE_API_TOKEN", t),
            // these tests are of the jobs, not of the token slate makes on loopback (see
            // `a_web_page_cannot_drive_the_api` for that)
            None => c.env_remove("SLATE_API_TOKEN").arg("--no-token"),
        };
        // the jobs of these tests read and write folders of the system's temporary folder
        c.arg("--allow-root").arg(std::env::temp_dir());
        let child = spawn_ready(c, log, 30, |text| listen_addr(text).is_some());
        Server {
            child,
            addr: listen_addr(&read_log(log)).expect("listening"),
            log: log.to_path_buf(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// (status, JSON body)
fn call(
    method: reqwest::Method,
    url: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, Value) {
    let changes = method != reqwest::Method::GET;
    let mut r = http().request(method, url);
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    if changes {
        r = r.header("content-type", "application/json");
    }
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().expect("body");
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v)
}

fn post_job(s: &Server, body: &Value, token: Option<&str>) -> Value {
    let (st, v) = call(
        reqwest::Method::POST,
        &s.url("/jobs"),
        Some(&body.to_string()),
        token,
    );
    assert_eq!(st, 201, "{v}");
    v
}

fn get_job(s: &Server, id: i64) -> Value {
    let (st, v) = call(
        reqwest::Method::GET,
        &s.url(&format!("/jobs/{id}")),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    v
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    id: u64,
    data: Value,
}

/// Reads a job's event stream to its end.
fn read_events(url: &str, last_id: Option<u64>) -> (u16, Vec<Sse>) {
    let mut r = http().get(url);
    if let Some(l) = last_id {
        r = r.header("Last-Event-ID", l.to_string());
    }
    let resp = r.send().expect("events");
    let status = resp.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut out = Vec::new();
    let (mut event, mut id, mut data) = (String::new(), 0u64, String::new());
    for line in BufReader::new(resp).lines() {
        let line = line.expect("line");
        if line.is_empty() {
            if !data.is_empty() {
                out.push(Sse {
                    event: std::mem::take(&mut event),
                    id,
                    data: serde_json::from_str(&data).expect("event data is JSON"),
                });
                data.clear();
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().expect("numeric id");
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    (status, out)
}

fn files(n: usize, size: usize) -> BTreeMap<String, Vec<u8>> {
    (0..n)
        .map(|i| (format!("d{}/f{i:05}.bin", i % 7), bytes(i as u64, size)))
        .collect()
}

#[test]
fn a_copy_job_runs_to_its_end_and_streams_its_progress() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("s.db");
    let mut s = Server::start(&db, &dir.path().join("serve.log"), None);
    let src = Place::new(End::Local, "api-src");
    let dst = Place::new(End::S3("slate-dst"), "api-dst");
    let data = files(300, 2048);
    src.seed(&data);

    let job = post_job(
        &s,
        &json!({"kind": "copy", "src": src.url(), "dst": dst.url(), "options": {"transfers": 2}}),
        None,
    );
    let id = job["id"].as_i64().expect("id");
    assert!(
        ["queued", "running"].contains(&job["state"].as_str().unwrap_or("")),
        "{job}"
    );
    assert_eq!(job["src"], json!(src.url()));

    let (st, events) = read_events(&s.url(&format!("/jobs/{id}/events")), None);
    assert_eq!(st, 200);
    let last = events.last().expect("events");
    assert_eq!(last.event, "end", "{events:?}");
    assert_eq!(last.data["state"], "succeeded", "{}", last.data);
    assert_eq!(last.data["objects_done"], 300);
    assert_eq!(last.data["bytes_done"], 300 * 2048);
    assert_eq!(last.data["result"]["objects"], 300);
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| e.event == "progress" && e.data["state"] != "succeeded"));
    let ids: Vec<u64> = events.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "event ids grow: {ids:?}"
    );
    assert_same(&dst.read(), &data);

    // reconnecting: after the end, 204 (stop); from an older id, the end again
    let (st, _) = read_events(&s.url(&format!("/jobs/{id}/events")), Some(last.id));
    assert_eq!(st, 204);
    let (st, again) = read_events(&s.url(&format!("/jobs/{id}/events")), Some(1));
    assert_eq!(st, 200);
    assert_eq!(
        again.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        vec!["end"]
    );

    // the same copy again: as `slate copy`, it compares and skips what is equal
    let job = post_job(
        &s,
        &json!({"kind": "copy", "src": src.url(), "dst": dst.url()}),
        None,
    );
    let id2 = job["id"].as_i64().expect("id");
    let (_, events) = read_events(&s.url(&format!("/jobs/{id2}/events")), None);
    let end = events.last().expect("events");
    assert_eq!(end.data["state"], "succeeded", "{}", end.data);
    assert_eq!(end.data["result"]["objects"], 0, "{}", end.data);
    assert_eq!(end.data["result"]["skipped"], 300, "{}", end.data);
    assert_eq!(end.data["bytes_done"], 0, "{}", end.data);

    // the announcement's call: no kind is a copy (here with a storage class for S3)
    let again_dst = Place::new(End::S3("slate-dst"), "api-announced");
    let job = post_job(
        &s,
        &json!({"src": src.url(), "dst": again_dst.url(), "options": {"storage_class": "standard_ia"}}),
        None,
    );
    assert_eq!(job["kind"], "copy", "{job}");
    let id = job["id"].as_i64().expect("id");
    let (_, events) = read_events(&s.url(&format!("/jobs/{id}/events")), None);
    let last = events.last().expect("events");
    assert_eq!(last.data["state"], "succeeded", "{}", last.data);
    assert_same(&again_dst.read(), &data);

    // a diff job, and a sync-once with a dry run: their results
    let diff = post_job(
        &s,
        &json!({"kind": "diff", "src": src.url(), "dst": dst.url()}),
        None,
    );
    let did = diff["id"].as_i64().expect("id");
    wait_for("the diff job", 60, || {
        get_job(&s, did)["state"] == "succeeded"
    });
    let d = get_job(&s, did);
    assert_eq!(d["result"]["equal"], true, "{d}");
    assert_eq!(d["result"]["same"], 300, "{d}");

    // the list, newest first, filtered and paged
    let (st, list) = call(
        reqwest::Method::GET,
        &s.url("/jobs?state=succeeded&limit=1"),
        None,
        None,
    );
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["jobs"][0]["id"], json!(did));
    assert_eq!(list["next"], json!(did));
    let (_, page2) = call(
        reqwest::Method::GET,
        &s.url(&format!("/jobs?limit=5&before={did}")),
        None,
        None,
    );
    assert_eq!(page2["jobs"][0]["id"], json!(id));
    assert_eq!(page2["next"], Value::Null);

    // the CLI reads the same rows
    let out = slate_db(&db).args(["jobs"]).output().expect("jobs");
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.lines().any(|l| l.starts_with(&format!("{id} "))
            && l.contains("copy")
            && l.contains("succeeded")),
        "{text}"
    );
    let out = slate_db(&db)
        .args(["status", &id.to_string()])
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("succeeded"));
    let out = slate_db(&db)
        .args(["status", "424242"])
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no job 424242"), "{}", stderr(&out));
    let out = slate_db(&db)
        .args(["status", &id.to_string(), "--json"])
        .output()
        .expect("status");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["objects_done"], 300);
    assert_eq!(
        s.child.signal(libc::SIGTERM),
        Some(0),
        "SIGTERM stops the server cleanly"
    );
}

#[test]
fn bad_requests_are_refused_naming_the_field_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = Server::start(
        &dir.path().join("s.db"),
        &dir.path().join("serve.log"),
        None,
    );
    let cases: &[(&str, &str)] = &[
        (
            r#"{"kind":"copy","src":"/tmp/a","dst":"/tmp/b","colour":"red"}"#,
            "colour",
        ),
        (
            r#"{"kind":"copy","src":"nope://bucket/x","dst":"/tmp/b"}"#,
            "src",
        ),
        (r#"{"kind":"copy","src":"/tmp/a","dst":"s3://"}"#, "dst"),
        (
            r#"{"kind":"teleport","src":"/tmp/a","dst":"/tmp/b"}"#,
            "kind",
        ),
        (
            r#"{"kind":"copy","src":"/tmp/a","dst":"/tmp/b","options":{"transfers":-1}}"#,
            "options.transfers",
        ),
        (r#"{"kind":"copy","src":"/tmp/a"}"#, "dst"),
        (r#"{"kind":"copy""#, "body"),
    ];
    for (body, field) in cases {
        let (st, v) = call(reqwest::Method::POST, &s.url("/jobs"), Some(body), None);
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(v["field"], json!(field), "{body}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    let (st, v) = call(reqwest::Method::GET, &s.url("/jobs"), None, None);
    assert_eq!(st, 200);
    assert_eq!(v["jobs"], json!([]), "nothing was half-created");
    let (st, v) = call(
        reqwest::Method::GET,
        &s.url("/jobs?state=sleeping"),
        None,
        None,
    );
    assert_eq!((st, v["field"].clone()), (400, json!("state")));
    let (st, v) = call(reqwest::Method::GET, &s.url("/jobs?color=1"), None, None);
    assert_eq!((st, v["field"].clone()), (400, json!("color")));
    // unknown ids and routes: 404 with a JSON error
    for (m, path) in [
        (reqwest::Method::GET, "/jobs/99999"),
        (reqwest::Method::GET, "/jobs/abc"),
        (reqwest::Method::DELETE, "/jobs/99999"),
        (reqwest::Method::POST, "/jobs/99999/resume"),
        (reqwest::Method::GET, "/jobs/99999/events"),
        (reqwest::Method::GET, "/no/such/route"),
    ] {
        let (st, v) = call(m.clone(), &s.url(path), None, None);
        assert_eq!(st, 404, "{m} {path}: {v}");
        assert!(v["error"].is_string(), "{m} {path}: {v}");
    }
}

#[test]
fn a_token_guards_everything_but_the_page_and_the_probes() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = "api-tok-7d1c9e-5b3a1f0e9d8c7b6a";
    let s = Server::start(
        &dir.path().join("s.db"),
        &dir.path().join("serve.log"),
        Some(token),
    );
    for path in [
        "/jobs",
        "/pairs",
        "/deadletters",
        "/jobs/1",
        "/jobs/1/events",
    ] {
        let (st, v) = call(reqwest::Method::GET, &s.url(path), None, None);
        assert_eq!(st, 401, "{path}: {v}");
        let (st, _) = call(reqwest::Method::GET, &s.url(path), None, Some("wrong"));
        assert_eq!(st, 401, "{path} with a wrong token");
    }
    let (st, _) = call(
        reqwest::Method::POST,
        &s.url("/jobs"),
        Some(r#"{"kind":"copy","src":"/a","dst":"/b"}"#),
        None,
    );
    assert_eq!(st, 401);
    // on loopback the probes and the metrics stay readable without it (local scrapers)
    for path in ["/", "/healthz", "/readyz", "/openapi.yaml", "/metrics"] {
        let r = http().get(s.url(path)).send().expect("get");
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    let (st, v) = call(reqwest::Method::GET, &s.url("/jobs"), None, Some(token));
    assert_eq!(st, 200, "{v}");
    // the query form, for EventSource
    let (st, v) = call(
        reqwest::Method::GET,
        &s.url(&format!("/pairs?token={token}")),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    assert!(!log.contains(token), "the token is never logged");
}

#[test]
fn a_job_killed_with_its_server_resumes_from_where_it_was() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("s.db");
    let mut s = Server::start(&db, &dir.path().join("serve.log"), None);
    let src = Place::new(End::Local, "res-src");
    let dst = Place::new(End::S3("slate-dst"), "res-dst");
    let data = files(1500, 1024);
    src.seed(&data);
    let job = post_job(
        &s,
        &json!({"kind": "copy", "src": src.url(), "dst": dst.url(), "options": {"transfers": 1}}),
        None,
    );
    let id = job["id"].as_i64().expect("id");
    wait_for("progress before the kill", 60, || {
        get_job(&s, id)["objects_done"].as_u64().unwrap_or(0) >= 150
    });
    s.child.kill9();
    let at_kill = dst.read().len();
    assert!(
        (150..1500).contains(&at_kill),
        "the kill must land mid-copy: {at_kill} objects"
    );
    assert!(
        dst.read().iter().all(|(k, v)| data.get(k) == Some(v)),
        "no torn object is visible"
    );

    // without a server, the CLI already sees the job as interrupted
    let out = slate_db(&db)
        .args(["status", &id.to_string()])
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(stdout(&out).contains("interrupted"), "{}", stdout(&out));

    let s = Server::start(&db, &dir.path().join("serve2.log"), None);
    let j = get_job(&s, id);
    assert_eq!(j["state"], "interrupted", "{j}");
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    assert!(log.contains("1 job(s) were running"), "{log}");
    // only a finished job that did not succeed can be resumed; a running one cannot be again
    let (st, v) = call(
        reqwest::Method::POST,
        &s.url(&format!("/jobs/{id}/resume")),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    let (_, events) = read_events(&s.url(&format!("/jobs/{id}/events")), None);
    let end = &events.last().expect("events").data;
    assert_eq!(end["state"], "succeeded", "{end}");
    let copied = end["result"]["copied"].as_u64().expect("copied");
    assert!(
        copied + at_kill as u64 <= 1500 && copied > 0,
        "the resume copied {copied} after {at_kill} were done: it must continue, not start over"
    );
    let out = slate_db(&db)
        .args(["diff", &src.url(), &dst.url()])
        .output()
        .expect("diff");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let (st, v) = call(
        reqwest::Method::POST,
        &s.url(&format!("/jobs/{id}/resume")),
        None,
        None,
    );
    assert_eq!(st, 409, "a succeeded job is not resumed: {v}");
}

#[test]
fn a_cancelled_job_stops_and_leaves_no_partial_object() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("s.db");
    let s = Server::start(&db, &dir.path().join("serve.log"), None);
    // from moto, one object at a time: slow enough to cancel in the middle
    let src = Place::new(End::S3("slate-src"), "can-src");
    let dst_dir = dir.path().join("can-dst");
    let mut data = files(400, 4096);
    data.insert("big/large.bin".into(), bytes(9, 64 * MIB));
    src.seed(&data);
    let job = post_job(
        &s,
        &json!({"kind": "copy", "src": src.url(), "dst": dst_dir.display().to_string(),
                "options": {"transfers": 1}}),
        None,
    );
    let id = job["id"].as_i64().expect("id");
    wait_for("the job to start", 60, || {
        get_job(&s, id)["objects_done"].as_u64().unwrap_or(0) >= 5
    });
    let (st, v) = call(
        reqwest::Method::DELETE,
        &s.url(&format!("/jobs/{id}")),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "cancelled");
    let (_, events) = read_events(&s.url(&format!("/jobs/{id}/events")), None);
    assert_eq!(events.last().expect("end").data["state"], "cancelled");
    // the cancel removes what was in flight: wait for it, not for a fixed time
    wait_for("the cancelled copies' temporary files removed", 30, || {
        read_local(&dst_dir)
            .keys()
            .all(|k| !k.contains(".slate-tmp-"))
    });
    let got = read_local(&dst_dir);
    assert!(got.len() < data.len(), "cancelled before the end");
    for (k, v) in &got {
        assert!(
            !k.contains(".slate-tmp-"),
            "a temp file was left behind: {k}"
        );
        assert_eq!(data.get(k), Some(v), "{k}: a partial object is visible");
    }
    let (st, _) = call(
        reqwest::Method::DELETE,
        &s.url(&format!("/jobs/{id}")),
        None,
        None,
    );
    assert_eq!(st, 409, "cancelling twice");
    let out = slate_db(&db)
        .args(["status", &id.to_string()])
        .output()
        .expect("status");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn the_openapi_document_matches_the_routes() {
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(slate::server::api::OPENAPI).expect("yaml");
    let mut documented = BTreeSet::new();
    let paths = doc["paths"].as_mapping().expect("paths");
    for (path, item) in paths {
        let path = path.as_str().expect("path");
        for (method, _) in item.as_mapping().expect("item") {
            let m = method.as_str().expect("method");
            if m != "parameters" {
                documented.insert((m.to_ascii_uppercase(), path.to_string()));
            }
        }
    }
    let routes: BTreeSet<(String, String)> = slate::server::api::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        documented, routes,
        "schema/openapi.yaml and api::ROUTES differ"
    );

    // and the running server answers every one of them (no "no route", no 405)
    let dir = tempfile::tempdir().expect("tmp");
    let s = Server::start(
        &dir.path().join("s.db"),
        &dir.path().join("serve.log"),
        None,
    );
    for (m, p) in &routes {
        let url = s.url(&p.replace("{id}", "1"));
        let method = reqwest::Method::from_bytes(m.as_bytes()).expect("method");
        let mut resp = http()
            .request(method, &url)
            .timeout(Duration::from_secs(5))
            .send()
            .expect("request");
        let status = resp.status().as_u16();
        let mut body = String::new();
        let _ = resp.by_ref().take(4096).read_to_string(&mut body);
        assert_ne!(status, 405, "{m} {p}");
        assert!(!body.contains("no route"), "{m} {p}: {body}");
    }
}

#[test]
fn jobs_run_on_any_worker_sharing_one_postgresql() {
    // two servers, one job slot each, on one PostgreSQL database
    let pg = PgDb::new("jobs");
    let db = pg.path();
    let dir = tempfile::tempdir().expect("tmp");
    let one = ["--max-jobs", "1"];
    let a = Server::start_with(&db, &dir.path().join("a.log"), None, &one);
    let b = Server::start_with(&db, &dir.path().join("b.log"), None, &one);
    let src = dir.path().join("src");
    seed_local(&src, &files(8, 1 << 20));
    let slow = |dst: &str, rate: &str| {
        json!({"kind": "copy", "src": src.display().to_string(),
               "dst": dir.path().join(dst).display().to_string(),
               "options": {"bwlimit": rate, "transfers": 2}})
    };
    // 8 MiB at 2 MiB/s on A; a second job accepted by A while its slot is taken runs on B
    let first = post_job(&a, &slow("d1", "2M"), None)["id"]
        .as_i64()
        .expect("id");
    wait_for("the first job running", 30, || {
        get_job(&b, first)["state"] == "running"
    });
    let second = post_job(&a, &slow("d2", "4M"), None)["id"]
        .as_i64()
        .expect("id");
    wait_for("the second job running while the first runs", 30, || {
        get_job(&b, second)["state"] == "running"
    });
    assert_eq!(get_job(&a, first)["state"], "running");
    let started_on = |s: &Server, id: i64| {
        read_log(&s.log)
            .lines()
            .any(|l| l.contains("job started") && l.contains(&format!("job={id}")))
    };
    assert!(
        started_on(&a, first) && !started_on(&b, first),
        "A runs its first job"
    );
    assert!(
        started_on(&b, second) && !started_on(&a, second),
        "B took the one A had no slot for"
    );
    // B follows A's job: its progress, then its end, over B's own event stream
    wait_for("A's job's progress seen through B", 30, || {
        get_job(&b, first)["bytes_done"].as_u64().unwrap_or(0) > 0
    });
    let (st, events) = read_events(&b.url(&format!("/jobs/{first}/events")), None);
    assert_eq!(st, 200);
    let end = events.last().expect("events");
    assert_eq!(
        (end.event.as_str(), &end.data["state"]),
        ("end", &json!("succeeded")),
        "{events:?}"
    );
    assert!(events.iter().any(|e| e.event == "progress"), "{events:?}");
    assert_eq!(read_local(&dir.path().join("d1")).len(), 8);

    // a job running on A, cancelled through B, stops on A and leaves no partial object
    let third = post_job(&a, &slow("d3", "1M"), None)["id"]
        .as_i64()
        .expect("id");
    wait_for("the third job under way", 30, || {
        let j = get_job(&b, third);
        j["state"] == "running" && j["bytes_done"].as_u64().unwrap_or(0) > 0
    });
    let runner = if started_on(&a, third) { &a } else { &b };
    let other = if started_on(&a, third) { &b } else { &a };
    let (st, v) = call(
        reqwest::Method::DELETE,
        &other.url(&format!("/jobs/{third}")),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    wait_for(
        "the runner stopping the job cancelled elsewhere",
        15,
        || read_log(&runner.log).contains("no longer running in the database"),
    );
    assert_eq!(get_job(runner, third)["state"], "cancelled");
    let d3 = dir.path().join("d3");
    wait_for("no temporary file left", 15, || {
        std::fs::read_dir(&d3)
            .map(|rd| {
                rd.flatten()
                    .all(|e| !e.file_name().to_string_lossy().starts_with(".slate-tmp"))
            })
            .unwrap_or(true)
    });
    assert!(
        read_local(&d3).iter().all(|(_, v)| v.len() == 1 << 20),
        "only whole objects are visible"
    );
}

/// `slate serve` as a user starts it: no token configured, none refused.
fn serve_default(dir: &Path, extra: &[&str]) -> (Child, String, String) {
    let log = dir.join("serve.log");
    let mut c = slate_db(&dir.join("s.db"));
    c.args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
        .args(extra)
        .env_remove("SLATE_API_TOKEN")
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let child = spawn_ready(c, &log, 30, |text| text.contains("dashboard at "));
    let text = read_log(&log);
    let addr = listen_addr(&text).expect("listening");
    // as Jupyter does: the URL with the token made at start
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("slate: dashboard at "))
        .expect("dashboard line")
        .trim()
        .to_string();
    let token = url
        .split_once("?token=")
        .map(|(_, t)| t.to_string())
        .unwrap_or_else(|| panic!("no token in {url}"));
    assert_eq!(url, format!("http://{addr}/?token={token}"));
    assert_eq!(token.len(), 64, "256 bits, hex: {token}");
    (child, addr, token)
}

#[test]
fn a_web_page_cannot_drive_the_api() {
    let dir = tempfile::tempdir().expect("tmp");
    let allowed = dir.path().join("allowed");
    let (src, dst) = (allowed.join("src"), allowed.join("dst"));
    std::fs::create_dir_all(&src).expect("src");
    std::fs::write(src.join("f.txt"), b"private").expect("write");
    let (_child, addr, token) = serve_default(
        dir.path(),
        &["--allow-root", &allowed.display().to_string()],
    );
    let url = |p: &str| format!("http://{addr}{p}");
    let job = json!({"kind": "copy", "src": src.display().to_string(),
        "dst": dst.display().to_string()})
    .to_string();
    // a page's cross-origin "simple" request: text/plain, then a foreign Origin, then a
    // foreign Host (DNS rebinding); with the token even, so that only the guard refuses
    let c = http();
    let r = c
        .post(url("/jobs"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(job.clone())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 415);
    let r = c
        .post(url("/jobs"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("origin", "https://evil.example")
        .body(job.clone())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 403);
    let r = c
        .post(url("/jobs"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("host", "evil.example:3030")
        .body(job.clone())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 403);
    // and without the token made at start, nothing at all
    let r = c
        .post(url("/jobs"))
        .header("content-type", "application/json")
        .body(job.clone())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 401);
    let (st, v) = call(reqwest::Method::GET, &url("/jobs"), None, Some(&token));
    assert_eq!(st, 200);
    assert_eq!(
        v["jobs"].as_array().map(Vec::len),
        Some(0),
        "no job made: {v}"
    );
    assert!(!dst.exists());
    // a local folder outside --allow-root is refused, naming it; inside, the job runs
    let outside = dir.path().join("elsewhere");
    let (st, v) = call(
        reqwest::Method::POST,
        &url("/jobs"),
        Some(
            &json!({"kind": "copy", "src": src.display().to_string(),
            "dst": outside.display().to_string()})
            .to_string(),
        ),
        Some(&token),
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["field"], "dst", "{v}");
    assert!(
        v["error"].as_str().unwrap_or("").contains("elsewhere"),
        "{v}"
    );
    let (st, v) = call(
        reqwest::Method::POST,
        &url("/jobs"),
        Some(&json!({"kind": "copy", "src": "/etc", "dst": dst.display().to_string()}).to_string()),
        Some(&token),
    );
    assert_eq!((st, &v["field"]), (403, &json!("src")), "{v}");
    let (st, v) = call(
        reqwest::Method::POST,
        &url("/jobs"),
        Some(&job),
        Some(&token),
    );
    assert_eq!(st, 201, "{v}");
    wait_for("the allowed job copied the file", 60, || {
        std::fs::read(dst.join("f.txt")).ok().as_deref() == Some(&b"private"[..])
    });
    // the probes and the metrics stay readable without the token on loopback
    for p in ["/healthz", "/readyz", "/metrics", "/", "/openapi.yaml"] {
        assert_eq!(
            c.get(url(p)).send().expect("get").status().as_u16(),
            200,
            "{p}"
        );
    }
}

#[test]
fn tokens_too_short_are_refused_and_the_webhook_has_its_own() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = slate_db(&dir.path().join("s.db"));
    c.args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLATE_API_TOKEN", "short-token");
    let out = c.output().expect("serve");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("SLATE_API_TOKEN") && err.contains("at least 22"),
        "{err}"
    );
    assert!(
        !err.contains("short-token"),
        "the token is not echoed: {err}"
    );

    let (api, hook) = (
        "api-token-0123456789abcdef0123",
        "hook-token-fedcba9876543210fedc",
    );
    let log = dir.path().join("serve.log");
    let mut c = slate_db(&dir.path().join("s.db"));
    c.args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
        .env("SLATE_API_TOKEN", api)
        .env("SLATE_WEBHOOK_TOKEN", hook)
        .env("RUST_LOG", "slate=info,warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"));
    let _child = spawn_ready(c, &log, 30, |text| listen_addr(text).is_some());
    let addr = listen_addr(&read_log(&log)).expect("addr");
    let eg = format!("http://{addr}/events/eventgrid");
    let post = |tok: Option<&str>| {
        let mut r = http()
            .post(&eg)
            .header("content-type", "application/json")
            .body("[]");
        if let Some(t) = tok {
            r = r.bearer_auth(t);
        }
        r.send().expect("post").status().as_u16()
    };
    assert_eq!(post(Some(hook)), 200);
    assert_eq!(post(None), 401);
    assert_eq!(post(Some("wrong-token-0123456789abcdef")), 401);
    // the API token keeps an existing subscription URL delivering, with a warning
    assert_eq!(post(Some(api)), 200);
    wait_for("the warning about the API token on the webhook", 10, || {
        read_log(&log).contains("carried the API token")
    });
    // the webhook token opens nothing else
    let (st, _) = call(
        reqwest::Method::GET,
        &format!("http://{addr}/jobs"),
        None,
        Some(hook),
    );
    assert_eq!(st, 401);
    let text = read_log(&log);
    assert!(
        !text.contains(api) && !text.contains(hook),
        "no token logged"
    );
}
