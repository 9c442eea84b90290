//! Progress of a copy: shared counters updated by the transfers, shown as a bar on a terminal,
//! as plain periodic lines otherwise, or not at all with `--quiet`. Also the final summary.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counters shared by every task of one copy (also what the API will stream later).
#[derive(Debug, Default)]
pub struct Counters {
    pub objects_listed: AtomicU64,
    pub bytes_listed: AtomicU64,
    pub listing_done: AtomicBool,
    pub objects_done: AtomicU64,
    pub bytes_done: AtomicU64,
    pub objects_failed: AtomicU64,
    pub objects_server_side: AtomicU64,
    /// The bandwidth limit the copy reads under (`--bwlimit`), shown with the progress.
    pub limit: std::sync::OnceLock<Arc<super::bwlimit::BwLimit>>,
    /// Bytes a copy cut short had written already, which this one did not send again.
    pub bytes_resumed: AtomicU64,
    /// How the copy is tuned now (objects in flight, streams, chunk size, round trip).
    pub tuning: Tuning,
}

/// The concurrency of a copy now, as the copier last set it (adaptive or fixed): shown with
/// the progress, in job progress and on `/metrics`.
#[derive(Debug, Default)]
pub struct Tuning {
    /// Objects being copied now.
    pub in_flight: AtomicU64,
    /// Objects that may be in flight now (the lowest of the cloud sides' limits).
    pub limit: AtomicU64,
    /// Chunks in flight of the last large object started (0: none yet).
    pub streams: AtomicU64,
    /// The chunk size last chosen (0: none yet).
    pub chunk_size: AtomicU64,
    /// The round-trip estimate, microseconds (0: none yet).
    pub rtt_micros: AtomicU64,
}

impl Tuning {
    /// `, 37/64 in flight, 4 streams, chunks 64.00 MiB, rtt 41 ms`; the parts not known yet
    /// are left out, and nothing before the first object started.
    pub fn text(&self) -> String {
        let limit = self.limit.load(Relaxed);
        if limit == 0 {
            return String::new();
        }
        let mut s = format!(", {}/{limit} in flight", self.in_flight.load(Relaxed));
        match self.streams.load(Relaxed) {
            0 => {}
            1 => s.push_str(", 1 stream"),
            n => s.push_str(&format!(", {n} streams")),
        }
        let chunk = self.chunk_size.load(Relaxed);
        if chunk > 0 {
            s.push_str(&format!(", chunks {}", human_bytes(chunk)));
        }
        let rtt = self.rtt_micros.load(Relaxed);
        if rtt > 0 {
            s.push_str(&format!(", rtt {:.1} ms", rtt as f64 / 1000.0));
        }
        s
    }
}

impl Counters {
    /// `, limit 8.00 MiB/s` (the rate in force), `, limit off (timetable …)`, or nothing.
    pub fn limit_text(&self) -> String {
        match self.limit.get() {
            None => String::new(),
            Some(l) => match l.schedule().rate_now() {
                Some(r) => format!(", limit {}/s", human_bytes(r)),
                None => format!(", limit off ({})", l.schedule().text()),
            },
        }
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Bar on a terminal, lines otherwise.
    Auto,
    /// Plain lines every N seconds.
    Lines(Duration),
    Quiet,
}

/// Formats a byte count with binary units.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Where progress lines go: nowhere until the application says (the library prints nothing
/// itself; the `slate` binary installs stderr at start, see `cli::run`). A progress bar is
/// drawn only when a printer is installed too.
static PRINTER: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Installs the printer of progress lines (once per process; later calls are ignored).
pub fn set_printer(print: fn(&str)) {
    let _ = PRINTER.set(print);
}

fn print(line: &str) {
    if let Some(p) = PRINTER.get() {
        p(line);
    }
}

/// Runs the display until `stop` resolves.
pub struct Reporter {
    handle: Option<tokio::task::JoinHandle<()>>,
    stop: Arc<tokio::sync::Notify>,
}

impl Reporter {
    pub fn start(counters: Arc<Counters>, mode: ProgressMode) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let mode = match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => None,
            ProgressMode::Auto => Some(ProgressMode::Lines(Duration::from_secs(10))),
            m => Some(m),
        };
        let handle = match mode {
            // no printer installed (the library used by another program): nothing shown
            _ if PRINTER.get().is_none() => None,
            Some(ProgressMode::Quiet) => None,
            None => Some(tokio::spawn(run_bar(counters, stop.clone()))),
            Some(ProgressMode::Lines(every)) => {
                Some(tokio::spawn(run_lines(counters, every, stop.clone())))
            }
            Some(ProgressMode::Auto) => None,
        };
        Reporter { handle, stop }
    }

    pub async fn finish(mut self) {
        self.stop.notify_one();
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}

async fn run_bar(c: Arc<Counters>, stop: Arc<tokio::sync::Notify>) {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(4));
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    loop {
        bar.set_length(c.bytes_listed.load(Relaxed).max(1));
        bar.set_position(c.bytes_done.load(Relaxed));
        let listed = c.objects_listed.load(Relaxed);
        let more = if c.listing_done.load(Relaxed) {
            ""
        } else {
            "+"
        };
        bar.set_message(format!(
            "{}/{listed}{more} objects{}{}",
            c.objects_done.load(Relaxed),
            c.limit_text(),
            c.tuning.text()
        ));
        tokio::select! {
            _ = stop.notified() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    bar.finish_and_clear();
}

async fn run_lines(c: Arc<Counters>, every: Duration, stop: Arc<tokio::sync::Notify>) {
    let start = Instant::now();
    let mut last = (Instant::now(), 0u64);
    loop {
        let stopping = tokio::select! {
            _ = stop.notified() => true,
            _ = tokio::time::sleep(every) => false,
        };
        let done = c.bytes_done.load(Relaxed);
        let total = c.bytes_listed.load(Relaxed);
        let rate = (done - last.1) as f64 / last.0.elapsed().as_secs_f64().max(1e-3);
        last = (Instant::now(), done);
        let eta = if c.listing_done.load(Relaxed) && rate > 0.0 {
            format!("{:.0}s", total.saturating_sub(done) as f64 / rate)
        } else {
            "?".into()
        };
        // a last line at the end, so that a log always shows where the copy got to
        print(&format!(
            "progress: {}/{} objects, {}/{}, {}/s{}{}, ETA {eta}, {:.0}s elapsed",
            c.objects_done.load(Relaxed),
            c.objects_listed.load(Relaxed),
            human_bytes(done),
            human_bytes(total),
            human_bytes(rate as u64),
            c.limit_text(),
            c.tuning.text(),
            start.elapsed().as_secs_f64()
        ));
        if stopping {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tuning_says_what_is_known() {
        let t = Tuning::default();
        assert_eq!(t.text(), "", "nothing before the first object");
        t.limit.store(64, Relaxed);
        t.in_flight.store(37, Relaxed);
        assert_eq!(t.text(), ", 37/64 in flight");
        t.streams.store(4, Relaxed);
        t.chunk_size.store(64 << 20, Relaxed);
        t.rtt_micros.store(41_300, Relaxed);
        assert_eq!(
            t.text(),
            ", 37/64 in flight, 4 streams, chunks 64.00 MiB, rtt 41.3 ms"
        );
    }

    #[test]
    fn formats_bytes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(64 << 20), "64.00 MiB");
    }
}
