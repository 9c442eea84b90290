//! The latency lab as a process, for bench scripts: `lab --listen PORT --upstream HOST:PORT
//! [--delay 20ms | --up 10ms --down 10ms] [--rate 100M] [--flow-rate 10M]`. Prints `listening on …` once ready;
//! on SIGUSR1 prints `up N down N connections N` (bytes so far), and on SIGTERM or SIGINT prints
//! it once more and exits. 127.0.0.1 only.

use std::time::Duration;

use slate::lab::{parse_delay, Lab, Link};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn fail(msg: String) -> ! {
    eprintln!("lab: {msg}");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = arg(&args, "--listen")
        .unwrap_or_else(|| "0".into())
        .parse()
        .unwrap_or_else(|_| fail("--listen takes a port".into()));
    let upstream = arg(&args, "--upstream").unwrap_or_else(|| fail("--upstream HOST:PORT".into()));
    let upstream: std::net::SocketAddr = upstream
        .parse()
        .unwrap_or_else(|_| fail(format!("--upstream '{upstream}' is not HOST:PORT")));
    if !upstream.ip().is_loopback() {
        fail(format!(
            "--upstream {upstream}: the lab talks to loopback only"
        ));
    }
    let d = |n: &str| {
        arg(&args, n).map(|v| parse_delay(&v).unwrap_or_else(|e| fail(format!("{n}: {e}"))))
    };
    let (up, down) = match (d("--delay"), d("--up"), d("--down")) {
        (Some(rtt), _, _) => (rtt / 2, rtt / 2),
        (None, u, dn) => (u.unwrap_or(Duration::ZERO), dn.unwrap_or(Duration::ZERO)),
    };
    let rate = arg(&args, "--rate").map(|r| {
        slate::core::units::parse_size(&r).unwrap_or_else(|e| fail(format!("--rate: {e}")))
    });
    let flow = arg(&args, "--flow-rate").map(|r| {
        slate::core::units::parse_size(&r).unwrap_or_else(|e| fail(format!("--flow-rate: {e}")))
    });
    let lab = Lab::start(
        upstream,
        Link {
            up,
            down,
            rate,
            flow,
        },
        port,
    )
    .await
    .unwrap_or_else(|e| fail(format!("cannot listen: {e}")));
    println!("listening on {}", lab.addr);
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).unwrap_or_else(|e| fail(e.to_string()));
    let mut usr1 = signal(SignalKind::user_defined1()).unwrap_or_else(|e| fail(e.to_string()));
    let counters = || {
        let c = &lab.counters;
        use std::sync::atomic::Ordering::Relaxed;
        println!(
            "up {} down {} connections {}",
            c.up.load(Relaxed),
            c.down.load(Relaxed),
            c.connections.load(Relaxed)
        );
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            // a bench asks for the bytes so far, to tell what one step fetched
            _ = usr1.recv() => counters(),
        }
    }
    counters();
}
