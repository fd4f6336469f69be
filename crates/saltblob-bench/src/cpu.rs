//! CPU time: the process's CPU seconds around a phase (every thread: the runtime's workers, blocking threads and
//! RocksDB's own), and what each per-byte step of a put costs on this CPU, measured in place (BLAKE3 of a
//! chunk, its CRC32C, one copy of it into an I/O buffer), so that the measured CPU seconds per GiB can be read
//! against the sum of the steps a put cannot avoid; and what sealing a chunk adds (`bench --encrypt`).

use std::time::Instant;

use bytes::Bytes;
use saltblob::VersionId;
use saltblob::codec::{ChunkPlace, Codec, encode_record, encode_sealed};
use saltblob::encryption::Secret;
use saltblob::encryption::seal::VersionKeys;
use serde::Serialize;

use crate::stats::MIB;

/// Bytes in a GiB, as a float.
const GIB: f64 = 1024.0 * MIB;
/// Chunk size of the step measurements: the layout policy's default.
const CHUNK: usize = 64 << 10;
/// Bytes each step is measured over (per round).
const SAMPLE: usize = 64 << 20;
/// The I/O buffer the copy step fills (a 1 MiB extent buffer).
const IO_BUFFER: usize = 1 << 20;

/// CPU seconds this process has used so far, every thread included (`CLOCK_PROCESS_CPUTIME_ID`).
pub(crate) fn process_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// The process's CPU time and the wall time since a start, for the CPU cores a phase used.
pub(crate) struct CpuClock {
    cpu: f64,
    wall: Instant,
}

impl CpuClock {
    /// Starts both clocks now.
    pub(crate) fn start() -> Self {
        Self {
            cpu: process_cpu_seconds(),
            wall: Instant::now(),
        }
    }

    /// CPU seconds of every thread of the process since the start ÷ wall seconds since then: the cores it
    /// used; `None` before any wall time passed.
    pub(crate) fn cores(&self) -> Option<f64> {
        let wall = self.wall.elapsed().as_secs_f64();
        (wall > 0.0).then(|| (process_cpu_seconds() - self.cpu) / wall)
    }
}

/// One CPU core's seconds per GiB of each step of a put, on this machine, now.
#[derive(Clone, Debug, Serialize)]
pub struct CpuSteps {
    /// BLAKE3 of each 64 KiB chunk (the blob digest's subtrees): the chunk's first touch, from memory.
    pub blake3_s_per_gib: f64,
    /// CRC32C of each chunk with its 12-byte header, as the chunk codec computes it, right after its BLAKE3
    /// (the chunk in the cache, as in a put).
    pub crc32c_s_per_gib: f64,
    /// One copy of each chunk into a 1 MiB I/O buffer, right after its CRC32C.
    pub copy_s_per_gib: f64,
    /// The sum: the CPU a put needs per GiB at the least (one hash, one checksum, one copy).
    pub floor_s_per_gib: f64,
    /// A sealed chunk's encoding, each 64 KiB chunk in turn: a copy, AES-256-GCM and the CRC32C of the sealed
    /// bytes (`encode_sealed`), where a plaintext chunk has its CRC32C alone: what sealing adds to a put is this
    /// minus `crc32c_s_per_gib`.
    pub seal_s_per_gib: f64,
}

/// Measures [`CpuSteps`] (about a second): each 64 KiB chunk of 64 MiB hashed, checksummed and copied in turn,
/// as a put's chunk task does, each step timed on its own; the best of three rounds (fresh data each round, so
/// that BLAKE3 reads it from memory).
pub fn measure_steps() -> CpuSteps {
    let mut buffer = vec![0u8; IO_BUFFER];
    let mut best = [f64::MAX; 3];
    let mut sink = 0u64;
    for round in 0..3u64 {
        let data = Bytes::from(
            (0..SAMPLE as u64)
                .map(|i| ((i + round).wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect::<Vec<_>>(),
        );
        let mut spent = [0.0f64; 3];
        for (i, at) in (0..SAMPLE).step_by(CHUNK).enumerate() {
            let chunk = data.slice(at..at + CHUNK);
            let t = Instant::now();
            sink = sink.wrapping_add(u64::from(blake3::hash(&chunk).as_bytes()[0]));
            let hashed = Instant::now();
            let place = ChunkPlace {
                key: b"k",
                version: VersionId(1),
                index: i as u64,
            };
            sink = sink.wrapping_add(u64::from(encode_record(place, &chunk, Codec::None).0[8]));
            let checked = Instant::now();
            let to = at % IO_BUFFER;
            if let Some(dest) = buffer.get_mut(to..to + CHUNK) {
                dest.copy_from_slice(&chunk);
            }
            let copied = Instant::now();
            for (s, d) in spent
                .iter_mut()
                .zip([hashed - t, checked - hashed, copied - checked])
            {
                *s += d.as_secs_f64();
            }
        }
        for (b, s) in best.iter_mut().zip(spent) {
            *b = b.min(s);
        }
    }
    std::hint::black_box((sink, buffer.first().copied()));
    let per_gib = |seconds: f64| seconds / (SAMPLE as f64 / GIB);
    let [blake3_s_per_gib, crc32c_s_per_gib, copy_s_per_gib] = best.map(per_gib);
    CpuSteps {
        blake3_s_per_gib,
        crc32c_s_per_gib,
        copy_s_per_gib,
        floor_s_per_gib: blake3_s_per_gib + crc32c_s_per_gib + copy_s_per_gib,
        seal_s_per_gib: per_gib(seal_seconds()),
    }
}

/// Seconds to seal each 64 KiB chunk of [`SAMPLE`] bytes (`encode_sealed`), the best of three rounds; `NAN` if
/// the keys cannot be derived.
fn seal_seconds() -> f64 {
    let Ok(keys) = VersionKeys::derive(&Secret::new([7; 32]), &[1; 16], b"k", VersionId(1)) else {
        return f64::NAN;
    };
    let data = Bytes::from(vec![0x5a; SAMPLE]);
    let mut best = f64::MAX;
    let mut sink = 0u64;
    for _ in 0..3 {
        let t = Instant::now();
        for (i, at) in (0..SAMPLE).step_by(CHUNK).enumerate() {
            let place = ChunkPlace {
                key: b"k",
                version: VersionId(1),
                index: i as u64,
            };
            if let Ok((header, _)) =
                encode_sealed(place, &data[at..at + CHUNK], Codec::None, &keys, false)
            {
                sink = sink.wrapping_add(u64::from(header[8]));
            }
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_time_advances_with_work() {
        let before = process_cpu_seconds();
        let mut x = 0u64;
        let t = Instant::now();
        while t.elapsed().as_millis() < 50 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let used = process_cpu_seconds() - before;
        assert!(used > 0.01 && used < 5.0, "{used}");
    }

    #[test]
    fn a_busy_thread_uses_about_one_core() {
        let clock = CpuClock::start();
        let before = process_cpu_seconds();
        let mut x = 0u64;
        let t = Instant::now();
        // Spins until the process has used 0.1 CPU seconds, not for a fixed wall time: on a busy machine (a
        // build beside the tests) a thread may get a small part of a core, and 100 ms of wall time then showed
        // 0.1-0.2 cores. Bounded, so a clock that never advances fails rather than hangs.
        while process_cpu_seconds() - before < 0.1 && t.elapsed().as_secs() < 30 {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let cores = clock.cores().expect("time passed");
        // One thread spinning (other tests may run beside it in this process): some part of a core, at most
        // every core.
        let most = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
        assert!(cores > 0.0 && cores <= most + 0.1, "{cores}");
        assert!(
            process_cpu_seconds() - before >= 0.1,
            "the spin used under 0.1 CPU seconds in 30 s"
        );
    }
}
