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
pub const MAX_STREAMS: usize = 16;

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
}
