//! The latency lab (test and bench tooling, the cargo feature `lab`): a loopback TCP proxy in
//! front of an emulator that makes it look far away. Each direction gets a one-way delay (a
//! byte read at `t` is written at `t + delay`, so a round trip costs twice the delay while a
//! stream still flows at full speed, as on a long link), and both directions share a bandwidth
//! cap (one token bucket per direction, over every connection). It counts the bytes it carries,
//! so a test can say how much a copy read from the source.
//!
//! `tc netem` is not available on these machines; this runs anywhere, on 127.0.0.1 only.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Mutex};
use tokio::time::Instant;

/// How the lab shapes the link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Link {
    /// Delay of what the client sends (requests, uploads).
    pub up: Duration,
    /// Delay of what the server sends (answers, downloads).
    pub down: Duration,
    /// Bytes per second in each direction, shared by all connections (None: no cap).
    pub rate: Option<u64>,
    /// Bytes per second in each direction of any one connection (None: no cap): a long link's
    /// TCP flow, held back by its window at this round trip, so that only more connections
    /// side by side fill the link.
    pub flow: Option<u64>,
}

impl Link {
    /// A link of `rtt` round trip (half each way) and `rate` bytes/s each way.
    pub fn rtt(rtt: Duration, rate: Option<u64>) -> Link {
        Link {
            up: rtt / 2,
            down: rtt / 2,
            rate,
            flow: None,
        }
    }

    /// The same link with each connection capped at `flow` bytes a second each way.
    pub fn per_flow(self, flow: u64) -> Link {
        Link {
            flow: Some(flow),
            ..self
        }
    }
}

/// Bytes carried so far.
#[derive(Debug, Default)]
pub struct Counters {
    /// Client → server.
    pub up: AtomicU64,
    /// Server → client.
    pub down: AtomicU64,
    pub connections: AtomicU64,
}

/// A token bucket: `rate` bytes a second, bursts of up to a tenth of a second's worth.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        let rate = rate.max(1) as f64;
        let burst = (rate / 10.0).max(64.0 * 1024.0);
        Bucket {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Waits until `n` bytes may pass.
    async fn take(&self, n: usize) {
        let mut need = n as f64;
        while need > 0.0 {
            let wait = {
                let mut st = self.state.lock().await;
                let now = Instant::now();
                let (tokens, last) = *st;
                let tokens =
                    (tokens + now.duration_since(last).as_secs_f64() * self.rate).min(self.burst);
                let grant = tokens.min(need);
                need -= grant;
                *st = (tokens - grant, now);
                if need <= 0.0 {
                    None
                } else {
                    Some(Duration::from_secs_f64(need.min(self.burst) / self.rate))
                }
            };
            if let Some(w) = wait {
                tokio::time::sleep(w).await;
            }
        }
    }
}

/// A running lab: clients connect to [`Lab::addr`] instead of the upstream.
pub struct Lab {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Lab {
    /// Starts a lab on 127.0.0.1 (port `port`, 0 for any) in front of `upstream`.
    pub async fn start(upstream: SocketAddr, link: Link, port: u16) -> std::io::Result<Lab> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        // a rate of 0 is no cap (as `--bwlimit 0`), never a link that stands still
        let rate = link.rate.filter(|r| *r > 0);
        let buckets = (
            rate.map(|r| Arc::new(Bucket::new(r))),
            rate.map(|r| Arc::new(Bucket::new(r))),
        );
        let c = counters.clone();
        let task = tokio::spawn(async move {
            // the connections belong to this task: dropping the lab (aborting it) cuts them
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    // out of file descriptors or the like: not a busy loop
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                while conns.try_join_next().is_some() {}
                let (c, up_b, down_b) = (c.clone(), buckets.0.clone(), buckets.1.clone());
                let flow = link.flow.filter(|r| *r > 0);
                let (up_f, down_f) = (flow.map(Bucket::new), flow.map(Bucket::new));
                conns.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    c.connections.fetch_add(1, Relaxed);
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = pump(cr, sw, link.up, [up_b, up_f.map(Arc::new)], c.clone(), true);
                    let down = pump(sr, cw, link.down, [down_b, down_f.map(Arc::new)], c, false);
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Ok(Lab {
            addr,
            counters,
            task,
        })
    }

    /// `http://127.0.0.1:PORT`, for an endpoint variable.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Acknowledges what `from` received at once (TCP_QUICKACK, which the kernel clears
/// again: set after each read). The lab's own hops are loopback, and a delayed ACK there is
/// no part of the link it models: a sender without TCP_NODELAY (s3s-fs) holds the last
/// partial segment of a response until the ACK of the one before, so a delayed ACK on
/// loopback added 40 ms to every bounded ranged GET through the lab.
fn quick_ack(from: &tokio::net::tcp::OwnedReadHalf) {
    use std::os::fd::AsRawFd;
    let fd = from.as_ref().as_raw_fd();
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on a socket this process owns, with a c_int it reads
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Carries one direction: each read is stamped and handed to a writer that waits for its
/// due time (order kept), then for the buckets' tokens (the link's, the connection's), then
/// writes. End of stream passes on
/// as a shutdown after the same delay.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
    buckets: [Option<Arc<Bucket>>; 2],
    counters: Arc<Counters>,
    up: bool,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Option<Vec<u8>>)>(1024);
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            quick_ack(&from);
            // the cap is taken here, as it is read: the sender is held back as on a slow
            // link, instead of its bytes piling up in the lab
            for b in buckets.iter().flatten().filter(|_| n > 0) {
                b.take(n).await;
            }
            let due = Instant::now() + delay;
            let data = (n > 0).then(|| buf[..n].to_vec());
            if tx.send((due, data)).await.is_err() || n == 0 {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, data)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            let Some(data) = data else {
                let _ = to.shutdown().await;
                return;
            };
            let c = if up { &counters.up } else { &counters.down };
            c.fetch_add(data.len() as u64, Relaxed);
            if to.write_all(&data).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(reader, writer);
}

/// Parses a duration like `20ms`, `0.5s`, `80` (milliseconds).
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "ms"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a delay (20ms, 0.5s)"))?;
    let ms = match unit {
        "ms" => v,
        "s" => v * 1000.0,
        "us" => v / 1000.0,
        _ => return Err(format!("'{s}': unit must be us, ms or s")),
    };
    if !(0.0..=60_000.0).contains(&ms) {
        return Err(format!("'{s}' is outside 0..60 s"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_parse() {
        assert_eq!(parse_delay("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_delay("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_delay("80"), Ok(Duration::from_millis(80)));
        assert!(parse_delay("fast").is_err());
        assert!(parse_delay("5h").is_err());
    }

    /// An upstream that answers every byte with the same byte (an echo), for the tests.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_round_trip_costs_both_delays_and_bytes_are_counted() {
        let lab = Lab::start(echo().await, Link::rtt(Duration::from_millis(80), None), 0)
            .await
            .unwrap();
        let mut s = TcpStream::connect(lab.addr).await.unwrap();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            s.write_all(b"ping").await.unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
            let rtt = t.elapsed();
            assert!(rtt >= Duration::from_millis(80), "round trip {rtt:?}");
        }
        drop(s);
        assert_eq!(lab.counters.up.load(Relaxed), 12);
        assert_eq!(lab.counters.down.load(Relaxed), 12);
    }

    /// Sends `n` bytes through the lab to the echo server and reads them back; the seconds
    /// it took.
    async fn echo_through(addr: std::net::SocketAddr, n: usize) -> f64 {
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = s.into_split();
        let t = std::time::Instant::now();
        let send = tokio::spawn(async move {
            w.write_all(&vec![7u8; n]).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        send.await.unwrap();
        assert_eq!(got.len(), n);
        t.elapsed().as_secs_f64()
    }

    #[tokio::test]
    async fn the_flow_cap_holds_each_connection_and_not_the_link() {
        // 2 MiB through a connection at 4 MiB/s: at least 0.4 s (less the first burst), alone
        // or side by side with three others; and four side by side take about as long as one
        // alone, where a cap shared by the link would make them take four times as long
        let flow = 4 << 20;
        let lab = Lab::start(
            echo().await,
            Link::rtt(Duration::ZERO, None).per_flow(flow),
            0,
        )
        .await
        .unwrap();
        let n = 2usize << 20;
        let one = |addr| echo_through(addr, n);
        let alone = one(lab.addr).await;
        let (a, b, c, d) = tokio::join!(one(lab.addr), one(lab.addr), one(lab.addr), one(lab.addr));
        let floor = (n as f64 - flow as f64 / 10.0) / flow as f64;
        let side_by_side = [a, b, c, d];
        assert!(
            alone >= floor && side_by_side.iter().all(|t| *t >= floor),
            "{n} bytes at {flow}/s a flow: alone {alone:.3} s, four at once {side_by_side:.3?} s"
        );
        // shared, the four would need (4n - a burst) / flow: 1.9 s against 0.4 s alone; a
        // ratio, not a time, so that a slow machine does not fail it
        let slowest = side_by_side.iter().copied().fold(0.0, f64::max);
        assert!(
            slowest < 2.5 * alone,
            "four flows side by side took {slowest:.3} s, one alone {alone:.3} s: the cap is \
             shared"
        );
        assert_eq!(lab.counters.down.load(Relaxed), 5 * n as u64);
        assert_eq!(lab.counters.connections.load(Relaxed), 5);
    }

    #[tokio::test]
    async fn the_cap_holds_a_stream_to_its_rate() {
        // 4 MiB at 8 MiB/s each way: at least 0.4 s (less the first burst) however fast the
        // machine is; the echo sends it back through the other capped direction meanwhile
        let rate = 8 << 20;
        let lab = Lab::start(echo().await, Link::rtt(Duration::ZERO, Some(rate)), 0)
            .await
            .unwrap();
        let n = 4usize << 20;
        let took = echo_through(lab.addr, n).await;
        let floor = (n as f64 - rate as f64 / 10.0) / rate as f64;
        assert!(took >= floor, "{n} bytes at {rate}/s took {took:.3} s");
        assert_eq!(lab.counters.down.load(Relaxed), n as u64);
    }
}
