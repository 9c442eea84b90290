//! The latency lab in front of a real emulator: a copy through it at 40 ms RTT reads what it
//! must, lands equal, and the lab counts the bytes (what resume tests will weigh).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use slate::lab::{Lab, Link};

#[test]
fn a_copy_through_the_lab_is_slowed_by_its_rtt_and_counted() {
    let runtime = rt();
    let moto: std::net::SocketAddr = s3_endpoint()
        .trim_start_matches("http://")
        .parse()
        .expect("moto address");
    let rtt = Duration::from_millis(200);
    let lab = runtime
        .block_on(Lab::start(moto, Link::rtt(rtt, None), 0))
        .expect("lab");
    let src = Place::new(End::S3("slate-src"), "lab-src");
    let data: BTreeMap<String, Vec<u8>> = [
        ("big.bin".to_string(), bytes(1, 3 * MIB)),
        ("small.txt".to_string(), bytes(2, 1000)),
    ]
    .into_iter()
    .collect();
    src.seed(&data);
    let copy_via = |endpoint: &str| {
        let dst = Place::new(End::Local, "lab-dst");
        let t = Instant::now();
        let out = run({
            let mut c = slate();
            c.env("AWS_ENDPOINT_URL", endpoint)
                .args(["copy", &src.url(), &dst.url(), "-q"]);
            c
        });
        let took = t.elapsed();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_same(&dst.read(), &data);
        took
    };
    let direct = copy_via(&s3_endpoint());
    let through = copy_via(&lab.url());
    // a listing, then the objects' reads: at least two round trips more than straight to moto
    assert!(
        through >= direct + 2 * rtt - Duration::from_millis(100),
        "through the lab {through:?}, direct {direct:?}"
    );
    let down = lab.counters.down.load(Relaxed);
    let total: u64 = data.values().map(|v| v.len() as u64).sum();
    assert!(
        down >= total && down < total + 256 * 1024,
        "the lab carried {down} bytes down for {total} bytes of objects"
    );
    assert!(lab.counters.connections.load(Relaxed) >= 1);
}
