//! `--bwlimit`: a copy of 40 MiB at 8 MiB/s takes 5 s (± 20%), all streams together; a
//! timetable that lifts the limit mid-copy is obeyed at once; a bad value is refused naming
//! the flag.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Timelike;
use common::*;

fn forty_mib() -> (Place, BTreeMap<String, Vec<u8>>) {
    let src = Place::new(End::Local, "bw-src");
    let data: BTreeMap<String, Vec<u8>> = (0..4)
        .map(|i| (format!("part-{i}.bin"), bytes(i, 10 * MIB)))
        .collect();
    src.seed(&data);
    (src, data)
}

/// The timed copies run one at a time: two on 2 cores at once would measure each other.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

fn timed_copy(src: &Place, dst: &Place, extra: &[&str]) -> Duration {
    let t = Instant::now();
    let out = run({
        let mut c = slate();
        c.args([
            "copy",
            &src.url(),
            &dst.url(),
            "--chunk-size",
            "8MiB",
            "--progress-lines",
            "1",
        ])
        .args(extra);
        c
    });
    let took = t.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    if extra.iter().any(|a| a.contains(',')) {
        assert!(
            err.contains(", limit"),
            "the progress shows the limit: {err}"
        );
    } else {
        assert!(
            err.contains(", limit 8.00 MiB/s"),
            "the progress shows the limit: {err}"
        );
    }
    took
}

#[test]
fn a_rate_holds_every_stream_to_it_together() {
    let (src, data) = forty_mib();
    let _one = one_at_a_time();
    let dst = Place::new(End::Local, "bw-dst");
    let took = timed_copy(&src, &dst, &["--bwlimit", "8M", "--transfers", "4"]);
    assert_same(&dst.read(), &data);
    let secs = took.as_secs_f64();
    assert!(
        (4.0..=6.0).contains(&secs),
        "40 MiB at 8 MiB/s took {secs:.2} s"
    );
}

#[test]
fn a_timetable_that_lifts_the_limit_mid_copy_is_obeyed() {
    let (src, data) = forty_mib();
    // the table's times are taken once this test has the machine to itself
    let _one = one_at_a_time();
    let dst = Place::new(End::Local, "bw-tt");
    // from now (this second) 4 MiB/s, at the fourth second no limit: the limit is lifted 3 to
    // 4 s into the copy (the clock's second may be late), the rest goes at once; kept to the
    // limit all along it would take 10 s
    let now = chrono::Local::now();
    let at = |secs: i64| {
        let t = now + chrono::Duration::seconds(secs);
        format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second())
    };
    if now.num_seconds_from_midnight() > 86_390 {
        return; // the entries would wrap past midnight
    }
    let table = format!("{},4M {},off", at(0), at(4));
    let took = timed_copy(&src, &dst, &["--bwlimit", &table]);
    assert_same(&dst.read(), &data);
    let secs = took.as_secs_f64();
    assert!(
        (2.9..=7.0).contains(&secs),
        "with '{table}' the copy took {secs:.2} s"
    );
}

#[test]
fn a_bad_limit_is_refused_naming_the_flag() {
    let (src, _) = forty_mib();
    let dst = Place::new(End::Local, "bw-bad");
    for bad in ["fast", "25:00,1M", "08:00 10M"] {
        let out = run({
            let mut c = slate();
            c.args(["copy", &src.url(), &dst.url(), "--bwlimit", bad]);
            c
        });
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            stderr(&out).contains("--bwlimit"),
            "{bad}: {}",
            stderr(&out)
        );
        assert!(dst.read().is_empty(), "{bad}: nothing copied");
    }
}
