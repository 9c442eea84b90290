//! How a copy sizes its work when the user did not say (`--chunk-size`, `--streams`): the pure
//! arithmetic, without clocks or state; `transfer::Ctx::chunk_size_for` and
//! `Ctx::streams_for` feed it what the side's limiter (`stores/limit.rs`) measured.

use std::time::Duration;

pub const MIB: u64 = 1 << 20;
/// The smallest multipart part the stores take (S3: 5 MiB, but for the last).
pub const MIN_PART: u64 = 5 * MIB;
/// The chunk size before anything is measured (and the estimate's): the finding of the
/// original Slate post at 80 ms RTT.
pub const DEFAULT_CHUNK: u64 = 64 * MIB;
/// The bounds of an adaptive chunk.
pub const MIN_CHUNK: u64 = 8 * MIB;
pub const MAX_CHUNK: u64 = 256 * MIB;
/// Parts of one multipart upload at most (S3's limit).
pub const MAX_PARTS: u64 = 10_000;
/// A chunk should take this many round trips to move, so that the request's own round trip
/// costs at most a ninth of its time.
const RTTS_PER_CHUNK: f64 = 8.0;
/// Streams per object at most when they adapt.
pub const MAX_STREAMS: usize = 32;
/// Streams per object before anything is measured (rclone's `--multi-thread-streams`).
pub const START_STREAMS: usize = 4;
/// A window's throughput counts as grown when it is this much above the last one's.
const GAIN: f64 = 1.10;
/// A window's throughput counts as kept when it is at least this much of the last one's.
const KEPT: f64 = 0.95;
/// Windows held at one width between two probes.
const HOLD: u32 = 3;

fn round_up_mib(n: u64) -> u64 {
    n.div_ceil(MIB).max(1) * MIB
}

/// The chunk size of an object of `size` bytes: `fixed` when asked for, else from the
/// measured round trip and bytes a second of one stream (a chunk lasts [`RTTS_PER_CHUNK`]
/// round trips, and has at least a MiB per millisecond of round trip up to 64 MiB), within
/// [`MIN_CHUNK`]..=[`MAX_CHUNK`] and the memory budget, [`DEFAULT_CHUNK`] until both are
/// measured. Either way a multiple of 1 MiB, at least [`MIN_PART`], and large
/// enough that the object has at most [`MAX_PARTS`] parts.
pub fn choose_chunk(
    size: u64,
    fixed: Option<u64>,
    rtt: Option<Duration>,
    stream_rate: Option<f64>,
    memory_limit: u64,
) -> u64 {
    let chunk = match (fixed, rtt, stream_rate) {
        (Some(c), _, _) => c,
        (None, Some(rtt), Some(rate)) => {
            // and a MiB per millisecond of round trip, up to 64 MiB: on a far link a chunk's
            // request also pays TCP's restart after idle, which the measured rate of a warm
            // stream does not show (the original post: at 80 ms, 64 MiB beat 8 MiB)
            let far = (rtt.as_secs_f64() * 1000.0) as u64 * MIB;
            let want =
                ((rate * rtt.as_secs_f64() * RTTS_PER_CHUNK) as u64).max(far.min(DEFAULT_CHUNK));
            round_up_mib(want.clamp(MIN_CHUNK, MAX_CHUNK))
                .min(memory_limit / MIB * MIB)
                .max(MIN_PART)
        }
        (None, _, _) => DEFAULT_CHUNK.min(memory_limit / MIB * MIB).max(MIN_PART),
    };
    chunk.max(round_up_mib(size.div_ceil(MAX_PARTS)))
}

/// Chunks in flight for one object of `chunks` chunks while `large` objects of more than one
/// chunk are copied: the memory budget's chunks shared among them, within 1..=[`MAX_STREAMS`],
/// never more than the object has, and for an object of more than four chunks at most half of
/// them: chunks read side by side finish together, so an object read all at once would have
/// none recorded until its end, and a copy cut short at half would keep nothing to resume.
pub fn choose_streams(chunks: usize, large: usize, memory_limit: u64, chunk: u64) -> usize {
    let budget = (memory_limit / chunk.max(1)) as usize;
    let waves = if chunks > 4 {
        chunks.div_ceil(2)
    } else {
        chunks
    };
    (budget / large.max(1))
        .clamp(1, MAX_STREAMS)
        .min(waves.max(1))
}

/// What [`Steer`] is doing now.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Doubling the width while each doubling still brings [`GAIN`].
    Grow,
    /// Holding the width; `n` windows so far.
    Hold(u32),
    /// A quarter more than `from`: kept when it brings [`GAIN`].
    Up { from: usize },
    /// A quarter less than `from`: kept when the throughput stays within [`KEPT`] (the same
    /// bytes a second with fewer streams: more of them only added latency).
    Down { from: usize },
}

/// Streams per object when the user did not say (`--streams`): a hill climb on the copy's
/// throughput, one step per measured window. The width doubles from [`START_STREAMS`] while
/// the throughput grows with it, settles on the last width that paid, then probes a quarter
/// up and a quarter down in turn (up kept when it pays, down kept when nothing is lost): an
/// up probe that paid is followed by another, a down probe kept by another. It halves when
/// the store throttles, and once [`HOLD`] windows pass without a throttle it doubles again
/// while that pays, so a throttle that has passed costs a few windows, not the climb back a
/// quarter at a time. Pure: the caller measures the windows (`transfer::Ctx::chunk_done`).
#[derive(Debug, Clone)]
pub struct Steer {
    width: usize,
    phase: Phase,
    /// Bytes a second at the width held (None until the first window).
    base: Option<f64>,
    /// The next probe goes up.
    up_next: bool,
    /// The widest the width was before the throttles that halved it: once they have passed
    /// (a hold without one) it grows again, doubling while that pays.
    recover: Option<usize>,
}

impl Default for Steer {
    fn default() -> Steer {
        Steer {
            width: START_STREAMS,
            phase: Phase::Grow,
            base: None,
            up_next: true,
            recover: None,
        }
    }
}

impl Steer {
    /// Streams per object now.
    pub fn width(&self) -> usize {
        self.width
    }

    /// A window at [`Self::width`] moved `rate` bytes a second (`throttled`: the store
    /// throttled in it); returns the width for the next window.
    pub fn step(&mut self, rate: f64, throttled: bool) -> usize {
        if throttled {
            self.recover = Some(self.recover.unwrap_or(0).max(self.width));
            self.width = (self.width / 2).max(1);
            self.phase = Phase::Hold(0);
            self.base = None;
            return self.width;
        }
        let Some(base) = self.base else {
            // the first window at this width: its rate is what the next is measured against
            self.base = Some(rate);
            if self.phase == Phase::Grow {
                self.grow();
            }
            return self.width;
        };
        match self.phase {
            Phase::Grow if rate >= base * GAIN => {
                self.base = Some(rate);
                self.grow();
            }
            Phase::Grow => {
                // the last doubling did not pay: back to the width before it
                self.width = (self.width / 2).max(1);
                self.phase = Phase::Hold(0);
            }
            Phase::Hold(n) if n + 1 < HOLD => {
                // the same width: follow its throughput as it drifts
                self.base = Some((base + rate) / 2.0);
                self.phase = Phase::Hold(n + 1);
            }
            Phase::Hold(_) => {
                self.base = Some((base + rate) / 2.0);
                match self.recover.take() {
                    // the throttle has passed: double again while it pays
                    Some(before) if before > self.width => {
                        self.phase = Phase::Grow;
                        self.grow();
                    }
                    _ => self.probe(),
                }
            }
            Phase::Up { from } => {
                if rate >= base * GAIN {
                    self.base = Some(rate);
                    // more streams paid: try more again next
                    self.up_next = true;
                } else {
                    self.width = from;
                }
                self.phase = Phase::Hold(0);
            }
            Phase::Down { from } => {
                if rate >= base * KEPT {
                    self.base = Some(rate);
                    // fewer streams lost nothing: try fewer again next
                    self.up_next = false;
                } else {
                    self.width = from;
                }
                self.phase = Phase::Hold(0);
            }
        }
        self.width
    }

    fn grow(&mut self) {
        if self.width >= MAX_STREAMS {
            self.phase = Phase::Hold(0);
        } else {
            self.width = (self.width * 2).min(MAX_STREAMS);
        }
    }

    fn probe(&mut self) {
        let step = (self.width / 4).max(1);
        let up = (self.up_next && self.width < MAX_STREAMS) || self.width <= 1;
        self.up_next = !up;
        let from = self.width;
        if up {
            self.width = (self.width + step).min(MAX_STREAMS);
            self.phase = Phase::Up { from };
        } else {
            self.width = self.width.saturating_sub(step).max(1);
            self.phase = Phase::Down { from };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunk_follows_the_round_trip_and_throughput() {
        const GIB: u64 = 1 << 30;
        let ms = Duration::from_millis;
        // (size, fixed, rtt, bytes a second of a stream, memory limit, chunk)
        type Case = (u64, Option<u64>, Option<Duration>, Option<f64>, u64, u64);
        let table: &[Case] = &[
            // nothing measured yet: 64 MiB
            (GIB, None, None, None, GIB, 64 * MIB),
            (GIB, None, Some(ms(80)), None, GIB, 64 * MIB),
            // 80 ms at 100 MB/s a stream: 8 round trips' worth, 64e6 bytes = 62 MiB, but at
            // least 1 MiB per ms of RTT up to 64 MiB
            (GIB, None, Some(ms(80)), Some(100e6), GIB, 64 * MIB),
            // 80 ms at 20 MB/s: 13 MiB of throughput's worth, 64 MiB for the far link
            (GIB, None, Some(ms(80)), Some(20e6), GIB, 64 * MIB),
            // 20 ms at 20 MB/s: 20 MiB
            (GIB, None, Some(ms(20)), Some(20e6), GIB, 20 * MIB),
            // 10 ms at 1 GB/s: 80e6 bytes → 77 MiB
            (GIB, None, Some(ms(10)), Some(1e9), GIB, 77 * MIB),
            // loopback: small chunks, down to 8 MiB
            (
                GIB,
                None,
                Some(Duration::from_micros(500)),
                Some(1e9),
                GIB,
                8 * MIB,
            ),
            // far and fast: up to 256 MiB
            (GIB, None, Some(ms(200)), Some(1e9), GIB, 256 * MIB),
            // within the memory budget
            (GIB, None, Some(ms(80)), Some(100e6), 32 * MIB, 32 * MIB),
            (GIB, None, None, None, 6 * MIB, 6 * MIB),
            // asked for: fixed
            (GIB, Some(16 * MIB), Some(ms(200)), Some(1e9), GIB, 16 * MIB),
            // at most 10,000 parts: 100 GiB in 5 MiB parts would be 20,480
            (100 * GIB, Some(5 * MIB), None, None, GIB, 11 * MIB),
            (5 << 40, None, Some(ms(1)), Some(1e9), GIB, 525 * MIB),
        ];
        for &(size, fixed, rtt, rate, memory, want) in table {
            let got = choose_chunk(size, fixed, rtt, rate, memory);
            assert_eq!(
                got / MIB,
                want / MIB,
                "size {size}, fixed {fixed:?}, rtt {rtt:?}, rate {rate:?}, memory {memory}"
            );
            assert_eq!(got % MIB, 0);
            assert!(size.div_ceil(got) <= MAX_PARTS);
        }
    }

    #[test]
    fn streams_share_the_memory_budget_among_the_large_objects() {
        // (chunks of the object, large objects in flight, memory limit, chunk, streams)
        let table: &[(usize, usize, u64, u64, usize)] = &[
            (100, 1, 1 << 30, 64 * MIB, 16),
            (100, 4, 1 << 30, 64 * MIB, 4),
            (100, 32, 1 << 30, 64 * MIB, 1),
            (3, 1, 1 << 30, 64 * MIB, 3),
            (4, 1, 1 << 30, 64 * MIB, 4),
            // more than four chunks: at most half at once (two waves at least, so a copy cut
            // short at half has the first recorded)
            (9, 1, 1 << 30, 64 * MIB, 5),
            (20, 1, 1 << 30, 64 * MIB, 10),
            (100, 1, 1 << 30, 8 * MIB, MAX_STREAMS),
            (100, 1, 64 << 30, 8 * MIB, MAX_STREAMS),
            (100, 0, 64 * MIB, 64 * MIB, 1),
        ];
        for &(chunks, large, memory, chunk, want) in table {
            assert_eq!(
                choose_streams(chunks, large, memory, chunk),
                want,
                "{chunks} chunks, {large} large, memory {memory}, chunk {chunk}"
            );
        }
    }

    /// Runs a [`Steer`] against a link whose throughput at `w` streams is `rate(w)`, for
    /// `windows` windows; returns the widths it chose.
    fn climb(rate: impl Fn(usize) -> f64, windows: usize) -> Vec<usize> {
        let mut s = Steer::default();
        (0..windows)
            .map(|_| {
                let r = rate(s.width());
                s.step(r, false)
            })
            .collect()
    }

    #[test]
    fn streams_grow_while_the_throughput_grows_with_them() {
        // each stream 10 MB/s (a window-bound flow), the link 120 MB/s: 12 streams fill it
        let link = |w: usize| (w as f64 * 10e6).min(120e6);
        let widths = climb(link, 40);
        assert_eq!(
            &widths[..4],
            &[8, 16, 32, 16],
            "doubles while it pays, then backs off"
        );
        // it settles where the link is full (12) and no further: up probes that do not pay
        // are taken back, down probes that lose throughput too
        let last = &widths[20..];
        assert!(last.iter().all(|w| (8..=16).contains(w)), "{widths:?}");
        assert!(last.contains(&12) || last.contains(&10), "{widths:?}");
        // a link that one stream fills: down to few streams, as nothing is lost
        let one = climb(|_| 100e6, 60);
        assert!(*one.last().unwrap() <= 2, "{one:?}");
        // a link every stream adds to: up to the most
        let open = climb(|w| w as f64 * 10e6, 20);
        assert_eq!(*open.last().unwrap(), MAX_STREAMS, "{open:?}");
    }

    /// Runs a [`Steer`] for `windows` windows against a link whose throughput in window `i`
    /// at `w` streams is `rate(i, w)`, throttled in the windows `throttles` lists; returns the
    /// widths it chose.
    fn script(
        rate: impl Fn(usize, usize) -> f64,
        throttles: &[usize],
        windows: usize,
    ) -> Vec<usize> {
        let mut s = Steer::default();
        (0..windows)
            .map(|i| {
                let r = rate(i, s.width());
                s.step(r, throttles.contains(&i))
            })
            .collect()
    }

    #[test]
    fn after_a_throttle_the_streams_recover_within_a_few_windows() {
        // every stream adds 10 MB/s (a long link of window-bound flows): 32 streams
        let open = |_: usize, w: usize| w as f64 * 10e6;
        // (throttled in windows, the window the width must be back at 32 by)
        let table: &[(&[usize], usize)] = &[
            // one throttle: 32 → 16, then back within 6 windows
            (&[10], 16),
            // two in a row: 32 → 16 → 8, back to 32 within 6 windows of the last
            (&[10, 11], 17),
            // a throttle while it recovers halves again, and it recovers from that too
            (&[10, 14], 20),
        ];
        for (throttles, by) in table {
            let widths = script(open, throttles, 40);
            assert_eq!(widths[throttles[0] - 1], MAX_STREAMS, "{widths:?}");
            let last = throttles.iter().max().copied().unwrap_or(0);
            assert!(widths[last] < MAX_STREAMS, "halved: {widths:?}");
            assert_eq!(widths[*by], MAX_STREAMS, "{throttles:?}: {widths:?}");
            assert!(widths[*by..].iter().all(|w| *w >= 24), "{widths:?}");
        }
        // a link that 8 streams fill: the recovery doubles only while that pays, and the
        // probes bring the width back near 8
        let full = |_: usize, w: usize| (w as f64 * 10e6).min(80e6);
        let widths = script(full, &[10], 40);
        assert!(
            widths[24..].iter().all(|w| (6..=12).contains(w)),
            "{widths:?}"
        );
        assert!((6..=10).contains(&widths[39]), "{widths:?}");
    }

    #[test]
    fn an_up_probe_that_paid_is_followed_by_another() {
        // a link full at 120 MB/s (12 streams of 10 MB/s) for 40 windows, then open (another
        // copy finished): up probes pay, one after another, with no down probe between them
        let opens = |i: usize, w: usize| {
            let r = w as f64 * 10e6;
            if i < 40 {
                r.min(120e6)
            } else {
                r
            }
        };
        let widths = script(opens, &[], 80);
        assert!(widths[30..40].iter().all(|w| *w <= 16), "{widths:?}");
        let at = widths[40..].iter().position(|w| *w == MAX_STREAMS);
        // five probes of a quarter up, four windows each, after at most a probe down
        assert!(at.is_some_and(|n| n <= 28), "{:?}: {widths:?}", at);
        // from the first probe up that paid, the width only grows until it is at the most
        let first = widths[40..]
            .iter()
            .position(|w| *w > widths[40])
            .unwrap_or(0);
        let grown = &widths[40 + first..40 + at.unwrap_or(0) + 1];
        assert!(grown.windows(2).all(|p| p[1] >= p[0]), "{widths:?}");
    }

    #[test]
    fn a_throttle_halves_the_streams() {
        let mut s = Steer::default();
        s.step(40e6, false);
        assert_eq!(s.width(), 8);
        assert_eq!(s.step(80e6, true), 4);
        assert_eq!(s.step(10e6, true), 2);
        assert_eq!(s.step(10e6, true), 1);
        assert_eq!(s.step(10e6, true), 1);
        // after a throttle it holds, then probes again
        let widths: Vec<usize> = (0..8).map(|_| s.step(10e6, false)).collect();
        assert!(widths.iter().all(|w| *w <= 2), "{widths:?}");
    }
}
