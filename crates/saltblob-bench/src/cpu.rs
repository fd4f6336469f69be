//! CPU time: the process's CPU seconds around a phase (every thread: the runtime's workers, blocking threads and
//! RocksDB's own), and what each per-byte step of a put costs on this CPU, measured in place (BLAKE3 of a
//! chunk, its CRC32C, one copy of it into an I/O buffer), so that the measured CPU seconds per GiB can be read
//! against the sum of the steps a put cannot avoid.

use std::time::Instant;

use bytes::Bytes;
use saltblob::VersionId;
use saltblob::codec::{ChunkPlace, Codec, encode_record};
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

/// One CPU core's seconds per GiB of each step of a put, on this machine, now.
#[derive(Clone, Debug, Serialize)]
pub struct CpuSteps {
    /// BLAKE3 of each 64 KiB chunk (the blob digest's subtrees).
    pub blake3_s_per_gib: f64,
    /// CRC32C of each chunk (with its 12-byte header, as the chunk codec computes it).
    pub crc32c_s_per_gib: f64,
    /// One copy of each chunk into a 1 MiB I/O buffer that stays in the cache.
    pub copy_s_per_gib: f64,
    /// The sum: the CPU a put needs per GiB at the least (one hash, one checksum, one copy).
    pub floor_s_per_gib: f64,
}

/// Measures [`CpuSteps`] (about a second): each step over 64 MiB of 64 KiB chunks, the best of three rounds.
pub fn measure_steps() -> CpuSteps {
    let data = Bytes::from(
        (0..SAMPLE)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<_>>(),
    );
    let chunks: Vec<Bytes> = (0..SAMPLE / CHUNK)
        .map(|i| data.slice(i * CHUNK..(i + 1) * CHUNK))
        .collect();
    let best = |mut step: Box<dyn FnMut() -> u64 + '_>| {
        let mut seconds = f64::MAX;
        let mut sink = 0u64;
        for _ in 0..3 {
            let t = Instant::now();
            sink = sink.wrapping_add(step());
            seconds = seconds.min(t.elapsed().as_secs_f64());
        }
        std::hint::black_box(sink);
        seconds / (SAMPLE as f64 / GIB)
    };
    let blake3_s_per_gib = best(Box::new(|| {
        chunks
            .iter()
            .map(|c| u64::from(blake3::hash(c).as_bytes()[0]))
            .sum()
    }));
    let crc32c_s_per_gib = best(Box::new(|| {
        chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let place = ChunkPlace {
                    key: b"k",
                    version: VersionId(1),
                    index: i as u64,
                };
                u64::from(encode_record(place, c, Codec::None).0[8])
            })
            .sum()
    }));
    let mut buffer = vec![0u8; IO_BUFFER];
    let copy_s_per_gib = best(Box::new(|| {
        for (i, c) in chunks.iter().enumerate() {
            let at = (i * CHUNK) % IO_BUFFER;
            buffer[at..at + CHUNK].copy_from_slice(c);
        }
        u64::from(buffer[7])
    }));
    CpuSteps {
        blake3_s_per_gib,
        crc32c_s_per_gib,
        copy_s_per_gib,
        floor_s_per_gib: blake3_s_per_gib + crc32c_s_per_gib + copy_s_per_gib,
    }
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
}
