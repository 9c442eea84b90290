//! Load: the daemon follows a sustained stream of changes (a local folder → moto S3, as fast as
//! the writer and moto allow) for `SLATE_LOAD_SECS` (default 120 s). Every second the test
//! samples the daemon's backlog (from its /metrics) and its resident memory. It asserts that
//! the backlog does not grow over the run, drains once the writer stops, that memory stays
//! bounded, and that the replica ends equal (`slate diff` exit 0). The figures are printed
//! for RELIABILITY.md.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn backlog(addr: &str) -> Option<u64> {
    let text = reqwest::blocking::Client::new()
        .get(format!("http://{addr}/metrics"))
        .timeout(Duration::from_secs(5))
        .send()
        .ok()?
        .text()
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("slate_backlog{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_daemon_holds_a_sustained_stream_with_bounded_memory_and_backlog() {
    let secs: u64 = std::env::var("SLATE_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("s.db");
    let log = dir.path().join("d.log");
    let src = Place::new(End::Local, "load-src");
    let dst = Place::new(End::S3("slate-dst"), "load-dst");
    let initial: std::collections::BTreeMap<String, Vec<u8>> = (0..500)
        .map(|i| (format!("d{}/f{i}.bin", i % 50), bytes(i, 512)))
        .collect();
    src.seed(&initial);

    let mut c = slate_db(&db);
    c.args([
        "sync",
        &src.url(),
        &dst.url(),
        "--listen",
        "127.0.0.1:0",
        "--drift-check-secs",
        "0",
    ])
    .env("RUST_LOG", "slate=info,warn")
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).expect("log"));
    let mut daemon = spawn_ready(c, &log, 60, |text| {
        text.contains("following changes") && listen_addr(text).is_some()
    });
    let pid = daemon.id();
    let addr = listen_addr(&read_log(&log)).expect("listening");

    // the writer: creates, overwrites and deletes over 50 folders at `SLATE_LOAD_RATE` changes
    // a second (default 150: what moto takes on 2 shared cores with room to spare; at 400/s
    // moto, not slate, falls behind)
    let rate: u64 = std::env::var("SLATE_LOAD_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let root = src.root.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut n = 0u64;
        let start = Instant::now();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("d{}/w{}.bin", x % 50, (x >> 8) % 2000);
            let p = root.join(&key);
            if x % 10 < 3 {
                let _ = std::fs::remove_file(&p);
            } else {
                std::fs::write(&p, bytes(x, 256 + (x % 1024) as usize)).expect("write");
            }
            n += 1;
            let due = start + Duration::from_micros(n * 1_000_000 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        n
    });

    let mut samples: Vec<(u64, u64)> = Vec::new(); // (backlog, rss KiB)
    let run_end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < run_end {
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            daemon.try_wait().ok().flatten().is_none(),
            "the daemon died: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        samples.push((backlog(&addr).unwrap_or(0), status_kib(pid, "VmRSS:")));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = writer.join().expect("writer");
    let drain_start = Instant::now();
    let drained = loop {
        if backlog(&addr) == Some(0) {
            break drain_start.elapsed();
        }
        assert!(
            drain_start.elapsed() < Duration::from_secs(60),
            "the backlog did not drain after the writer stopped"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let peak_kib = status_kib(pid, "VmHWM:");
    let third = samples.len() / 3;
    let max_of = |s: &[(u64, u64)]| s.iter().map(|x| x.0).max().unwrap_or(0);
    let (first, last) = (max_of(&samples[..third]), max_of(&samples[2 * third..]));
    let rss_first = samples[..third].iter().map(|x| x.1).max().unwrap_or(0);
    let rss_last = samples[2 * third..].iter().map(|x| x.1).max().unwrap_or(0);
    println!(
        "load: {secs} s, {changes} changes ({:.0}/s), backlog max first third {first}, last third {last}, \
         drained {:.1} s after the writer stopped; RSS max first third {} MiB, last third {} MiB, peak {} MiB",
        changes as f64 / secs as f64,
        drained.as_secs_f64(),
        rss_first / 1024,
        rss_last / 1024,
        peak_kib / 1024
    );
    assert!(
        changes as f64 / secs as f64 > rate as f64 * 0.8,
        "the writer fell behind its rate"
    );
    // no growth: the backlog late in the run is not beyond what it was early, give or take
    // a second of changes
    assert!(
        last <= first.max(1) * 2 + 400,
        "the backlog grew: {first} early, {last} late"
    );
    assert!(peak_kib < 256 * 1024, "peak RSS {} MiB", peak_kib / 1024);
    assert!(
        rss_last <= rss_first * 3 / 2 + 16 * 1024,
        "memory grew: {} MiB early, {} MiB late",
        rss_first / 1024,
        rss_last / 1024
    );
    let out = slate_db(&db)
        .args(["diff", &src.url(), &dst.url()])
        .output()
        .expect("diff");
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(daemon.stop(libc::SIGTERM), Some(0));
}
