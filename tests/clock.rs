//! Workers on several hosts compare each other's claim and lease expiries on the database
//! server's clock, not their own: a worker whose clock is five minutes slow still writes
//! expiries the others read as live (its claims are not taken from it while it works).

mod common;

use common::*;
use slate::state::db::Location;
use slate::state::leases::Leases;
use slate::state::manifest::Manifest;

fn real_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[test]
fn a_host_whose_clock_is_off_uses_the_database_servers_clock() {
    // this test process's clock runs five minutes slow (the only test of this binary: the
    // hook is read once per process)
    std::env::set_var("SLATE_FAULT_CLOCK_SKEW_MS", "-300000");
    assert!(
        (slate::state::clock::local_ms() - (real_ms() - 300_000)).abs() < 2_000,
        "the hook sets the host's clock off"
    );
    let pg = PgDb::new("clock");
    let m = Manifest::open_at(&Location::Postgres(pg_db_url(&pg))).expect("open");
    let now = slate::state::clock::now_ms();
    assert!(
        (now - real_ms()).abs() < 2_000,
        "the shared clock is the server's (the server runs on this machine's true clock): off by {} ms",
        now - real_ms()
    );
    assert!((slate::state::clock::offset_ms() - 300_000).abs() < 2_000);
    // a lease taken on the shared clock for 30 s is live for a worker on a true clock
    let l = Leases::new(&m);
    assert_eq!(
        l.acquire("pair:1", "9:9:slow", "host-slow", "sync", now, 30_000)
            .expect("acquire"),
        None
    );
    let held = l
        .acquire("pair:1", "8:8:true", "host-true", "sync", real_ms(), 30_000)
        .expect("acquire");
    assert_eq!(
        held.map(|h| h.owner).as_deref(),
        Some("9:9:slow"),
        "the slow host's lease is live on the true clock"
    );
}

fn pg_db_url(pg: &PgDb) -> String {
    pg.path().display().to_string()
}
