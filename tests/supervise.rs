//! A pair whose loop fails does not take the others down: it says why at once (`/readyz`,
//! `GET /pairs`, the log), is restarted after a pause, and catches up; the other pair of the
//! same process applies its changes all along. The failure is injected with the test builds'
//! `SLATE_FAULT_PAIR` hook (the `faults` feature).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn get(addr: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::blocking::get(format!("http://{addr}{path}")).expect("get");
    let status = r.status().as_u16();
    let body = r.text().expect("body");
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn a_failing_pair_restarts_while_the_other_runs_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let (db, log) = (dir.path().join("slate.db"), dir.path().join("daemon.log"));
    let a_src = Place::new(End::Local, "sup-a-src");
    let a_dst = Place::new(End::Local, "sup-a-dst");
    let b_src = Place::new(End::Local, "sup-b-src");
    let b_dst = Place::new(End::Local, "sup-b-dst");
    a_src.seed(&[("a0".to_string(), b"a".to_vec())].into());
    b_src.seed(&[("b0".to_string(), b"b".to_vec())].into());
    let conf = dir.path().join("slate.toml");
    std::fs::write(
        &conf,
        format!(
            "[daemon]\nlisten = \"127.0.0.1:0\"\ndrift_check_interval = \"0\"\n\n\
             [[pairs]]\nname = \"a\"\nsrc = \"{}\"\ndst = \"{}\"\n\n\
             [[pairs]]\nname = \"b\"\nsrc = \"{}\"\ndst = \"{}\"\n",
            a_src.url(),
            a_dst.url(),
            b_src.url(),
            b_dst.url()
        ),
    )
    .expect("config");
    let mut c = slate_db(&db);
    // the API without a token: this test reads GET /pairs; tokens are tests/api.rs's
    c.args([
        "sync",
        "--config",
        &conf.display().to_string(),
        "--no-token",
    ])
    .env("SLATE_FAULT_PAIR", format!("{}:3", a_src.prefix))
    .env("RUST_LOG", "slate=info,warn")
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"));
    let daemon = spawn_daemon(c, &log, 2);
    let text = read_log(&log);
    let addr = listen_addr(&text).expect("listening line");

    // pair a fails: /readyz says so, naming it and why, and the failure is in the log at once
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut saw_failed = false;
    let mut b_written = 0;
    while Instant::now() < deadline {
        // pair b keeps applying changes meanwhile
        std::fs::write(b_src.root.join(format!("b{}", b_written + 1)), b"x").expect("write");
        b_written += 1;
        let (status, ready) = get(&addr, "/readyz");
        let failed = ready["states"].as_array().and_then(|a| {
            a.iter()
                .find(|p| p["state"] == "failed")
                .map(|p| p["error"].as_str().unwrap_or("").to_string())
        });
        if let Some(error) = failed {
            assert_eq!(status, 503, "{ready}");
            assert!(error.contains("injected pair failure"), "{ready}");
            assert!(
                read_log(&log).contains("failed: "),
                "the failure must be in the log at once"
            );
            saw_failed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        saw_failed,
        "pair a never showed as failed: {}",
        log_tail(&read_log(&log))
    );
    // a change at a while it is down is applied after its restart
    std::fs::write(a_src.root.join("while-down"), b"late").expect("write");

    // both equal in the end: b all along, a after its restarts
    wait_equal_within(&db, &b_src.url(), &b_dst.url(), 60, Some(&log));
    assert!(
        b_dst.read().len() > b_written / 2,
        "pair b stalled while a failed"
    );
    // pair a is restarted three times (the hook fails it three times), then follows again
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, pairs) = get(&addr, "/pairs");
        let a = pairs["pairs"]
            .as_array()
            .and_then(|v| v.iter().find(|p| p["name"] == "a").cloned())
            .expect("pair a");
        if a["restarts"] == serde_json::json!(3) && a["state"] == serde_json::json!("following") {
            break;
        }
        assert!(Instant::now() < deadline, "pair a did not recover: {a}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, ready) = get(&addr, "/readyz");
    assert_eq!(status, 200, "{ready}");
    wait_equal_within(&db, &a_src.url(), &a_dst.url(), 120, Some(&log));
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}
