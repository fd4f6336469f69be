//! The device reference of an embedded store: sequential O_DIRECT bandwidth on a pre-sized (fallocated) file in
//! its directory, at 128 KiB, 1 MiB and 4 MiB requests and queue depths 1, 2, 4, 8 and 16 (one thread per request in
//! flight, each issuing `pwrite`/`pread` at the next free offset), with the depth where bandwidth stops growing
//! (< 5% gain from doubling it). By Little's law, the requests in flight needed = bandwidth × latency; past that
//! depth, more requests only queue. Then dd's pattern (1 MiB requests, one at a time, appending to a new file
//! that is not pre-sized), which also pays for allocating blocks as it writes. The files are deleted afterwards.
//!
//! This module holds the crate's one `unsafe` call (`fallocate`, in [`preallocate`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use saltblob::{Error, Result};
use serde::Serialize;

use crate::args::Settings;
use crate::device::{self, DeviceInfo};
use crate::progress::Progress;
use crate::stats::MIB;

/// Request sizes of the O_DIRECT probe.
pub const REQUEST_SIZES: [usize; 3] = [128 << 10, 1 << 20, 4 << 20];
/// Queue depths of the O_DIRECT probe.
pub const DEPTHS: [usize; 5] = [1, 2, 4, 8, 16];
/// Doubling the depth must gain at least this fraction for bandwidth to count as still growing.
pub const KNEE_GAIN: f64 = 0.05;
/// Buffer alignment for O_DIRECT: the 4 KiB sector (a multiple of every logical block size in use).
const ALIGN: usize = 4096;
/// Size of each file of the durable dd pattern: the bench's default large blob.
pub const DURABLE_BYTES: u64 = 60 << 20;
/// Files of the durable dd pattern (the median is reported).
pub const DURABLE_RUNS: usize = 5;

/// O_DIRECT results on the device behind a directory.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceProbe {
    /// The device and its sector sizes.
    pub device: DeviceInfo,
    /// The test file (deleted when the probe ends).
    pub file: PathBuf,
    /// Its size.
    pub file_bytes: u64,
    /// Whether `fallocate` pre-sized it (otherwise it was only truncated to size, sparse).
    pub preallocated: bool,
    /// Bandwidth of the first, allocating pass over the file (1 MiB requests, depth 4): it converts the
    /// pre-allocated extents to written ones, so it is usually below the overwrite points.
    pub prefill_mib_s: f64,
    /// One entry per (operation, request size, depth).
    pub points: Vec<Point>,
    /// Per (operation, request size): the depth where bandwidth stops growing.
    pub knees: Vec<Knee>,
    /// The best write point, MiB/s: the reference write bandwidth.
    pub write_mib_s: f64,
    /// The best read point, MiB/s: the reference read bandwidth.
    pub read_mib_s: f64,
    /// 1 MiB writes at depth 1 on the pre-sized file (overwriting allocated blocks), MiB/s.
    pub write_1mib_depth1_mib_s: f64,
    /// 1 MiB writes at depth 1 appended to a new file that is not pre-sized, MiB/s: what
    /// `dd if=/dev/zero of=FILE bs=1M oflag=direct` measures. The gap to `write_1mib_depth1_mib_s` is the cost
    /// of allocating blocks while writing, which pre-sizing a file avoids.
    pub append_1mib_depth1_mib_s: f64,
    /// dd's pattern made durable, as a put must be: [`DURABLE_BYTES`] (or the probe file's size, if smaller)
    /// appended to a new file in 1 MiB requests
    /// at depth 1, then `fdatasync`, the median of [`DURABLE_RUNS`] files, MiB/s. On a disk with a volatile
    /// write cache (a virtual disk's host cache) the final flush can cost as much as the writes; dd's own
    /// figure leaves it out.
    pub durable_1mib_depth1_mib_s: f64,
    /// The median `fdatasync` of those files, milliseconds.
    pub durable_sync_ms: f64,
    /// The extent I/O settings of the embedded store that this device's write knees suggest.
    pub extent_settings: Option<ExtentSettings>,
    /// Wall time of the whole probe, seconds.
    pub seconds: f64,
}

/// Request size and depth for extent files (`rocksdb://` options `extent_io_bytes` and `extent_io_depth`): of
/// the write knees, the one that needs the least buffer memory (request × (depth + 1)) among those within 5% of
/// the best knee's bandwidth.
#[derive(Clone, Debug, Serialize)]
pub struct ExtentSettings {
    /// Bytes per request.
    pub io_bytes: u64,
    /// Requests in flight.
    pub io_depth: usize,
    /// Write bandwidth at that point, MiB/s.
    pub mib_s: f64,
}

/// The [`ExtentSettings`] that `knees` suggest; `None` without write knees.
pub fn extent_settings(knees: &[Knee]) -> Option<ExtentSettings> {
    let writes: Vec<&Knee> = knees.iter().filter(|k| k.op == "write").collect();
    let best = writes.iter().map(|k| k.mib_s).fold(0.0, f64::max);
    writes
        .iter()
        .filter(|k| k.mib_s >= best * (1.0 - KNEE_GAIN))
        .min_by_key(|k| k.request_bytes * (k.depth as u64 + 1))
        .map(|k| ExtentSettings {
            io_bytes: k.request_bytes,
            io_depth: k.depth,
            mib_s: k.mib_s,
        })
}

/// One O_DIRECT measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// `write` or `read`.
    pub op: &'static str,
    /// Bytes per request.
    pub request_bytes: u64,
    /// Requests in flight (threads).
    pub depth: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Bandwidth.
    pub mib_s: f64,
    /// Mean time of one request, milliseconds.
    pub mean_latency_ms: f64,
    /// Little's law: bandwidth × mean latency ÷ request size, the requests actually in flight on average.
    pub little_in_flight: f64,
}

/// Where bandwidth stops growing for one operation and request size.
#[derive(Clone, Debug, Serialize)]
pub struct Knee {
    /// `write` or `read`.
    pub op: &'static str,
    /// Bytes per request.
    pub request_bytes: u64,
    /// The smallest depth whose doubling gains less than 5%.
    pub depth: usize,
    /// Bandwidth at that depth.
    pub mib_s: f64,
    /// True when even the deepest step still gained 5% or more: the knee lies beyond the depths tried.
    pub still_growing: bool,
    /// Gain of each doubling, in percent (depth 1→2, 2→4, …).
    pub gains_percent: Vec<f64>,
}

/// `e` as saltblob's I/O error, its message prefixed with `context`.
pub(crate) fn io_error(context: String, e: io::Error) -> Error {
    Error::Io(io::Error::new(e.kind(), format!("{context}: {e}")))
}

/// Deletes the probe's test file however the probe ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs every measurement on a test file in `dir` (blocking: run it off the async runtime); `limit` bounds
/// each point.
pub(crate) fn measure_device(
    dir: &Path,
    settings: &Settings,
    limit: Duration,
) -> Result<DeviceProbe> {
    let started = Instant::now();
    let file_bytes = settings.options.probe_size / (1 << 20) * (1 << 20);
    if file_bytes < (4 << 20) {
        return Err(Error::invalid(
            "probe size",
            format!(
                "{} bytes; the O_DIRECT test file needs at least 4 MiB (1 GiB or more gives stable numbers)",
                settings.options.probe_size
            ),
        ));
    }
    let device = device::inspect(dir)
        .map_err(|e| io_error(format!("cannot inspect {}", dir.display()), e))?;
    let path = dir.join(format!(".saltblob-probe-{:016x}", rand::random::<u64>()));
    let (file, _cleanup, preallocated) = create_sized(&path, file_bytes, "--probe-size")?;

    let total_points = 2 + 2 * REQUEST_SIZES.len() * DEPTHS.len();
    let mut progress = Progress::new(
        "probe (O_DIRECT)",
        total_points as u64,
        "points",
        settings.quiet,
    );
    let context = |op: &str| format!("O_DIRECT {op} on {}", path.display());
    // First pass: allocates every block, so that the measured writes all overwrite and the reads read data.
    let prefill = run_point(&file, Op::Write, 1 << 20, 4, file_bytes, limit * 4)
        .map_err(|e| io_error(context("write"), e))?;
    progress.inc(1);
    let written = prefill.covered.max(1 << 20);
    let mut points = Vec::new();
    for op in [Op::Write, Op::Read] {
        for &request in &REQUEST_SIZES {
            for &depth in &DEPTHS {
                let p = run_point(&file, op, request, depth, written, limit)
                    .map_err(|e| io_error(context(op.name()), e))?;
                points.push(p.point);
                progress.inc(1);
            }
        }
    }
    drop(file);
    // dd's pattern: 1 MiB requests, one at a time, appended to a new file that is not pre-sized, so that every
    // write also allocates blocks and extends the file.
    let append_path = dir.join(format!(
        ".saltblob-probe-append-{:016x}",
        rand::random::<u64>()
    ));
    let append_file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(&append_path)
        .map_err(|e| io_error(format!("cannot create {}", append_path.display()), e))?;
    let _append_cleanup = RemoveOnDrop(append_path.clone());
    let append = run_point(&append_file, Op::Write, 1 << 20, 1, file_bytes, limit)
        .map_err(|e| io_error(format!("O_DIRECT append to {}", append_path.display()), e))?;
    drop(append_file);
    progress.inc(1);
    let (durable_1mib_depth1_mib_s, durable_sync_ms) =
        durable_pattern(dir, file_bytes.min(DURABLE_BYTES))?;
    progress.finish();
    let knees = knees(&points);
    let best = |op: &str| {
        points
            .iter()
            .filter(|p| p.op == op)
            .map(|p| p.mib_s)
            .fold(0.0, f64::max)
    };
    let dd_like = points
        .iter()
        .find(|p| p.op == "write" && p.request_bytes == 1 << 20 && p.depth == 1)
        .map_or(0.0, |p| p.mib_s);
    Ok(DeviceProbe {
        device,
        file: path,
        file_bytes,
        preallocated,
        prefill_mib_s: prefill.point.mib_s,
        write_mib_s: best("write"),
        read_mib_s: best("read"),
        write_1mib_depth1_mib_s: dd_like,
        append_1mib_depth1_mib_s: append.point.mib_s,
        durable_1mib_depth1_mib_s,
        durable_sync_ms,
        extent_settings: extent_settings(&knees),
        points,
        knees,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A new file at `path` opened for O_DIRECT reads and writes and pre-sized to `bytes` (allocated, unwritten
/// extents; merely sized where the file system cannot allocate), deleted when the returned guard drops; whether
/// it was pre-sized. `size_flag` names the option that sets `bytes`, for the error when space runs out.
fn create_sized(path: &Path, bytes: u64, size_flag: &str) -> Result<(File, RemoveOnDrop, bool)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                " (the file system does not support O_DIRECT)"
            } else {
                ""
            };
            io_error(format!("cannot create {}{hint}", path.display()), e)
        })?;
    let cleanup = RemoveOnDrop(path.to_path_buf());
    let preallocated = match preallocate(&file, bytes) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            file.set_len(bytes)
                .map_err(|e| io_error(format!("cannot size {}", path.display()), e))?;
            false
        }
        Err(e) => {
            return Err(io_error(
                format!(
                    "cannot pre-size {} to {} MiB (free space? try a smaller {size_flag})",
                    path.display(),
                    bytes >> 20
                ),
                e,
            ));
        }
    };
    Ok((file, cleanup, preallocated))
}

/// dd's read pattern, measured beside the large gets (`large_read_vs_dd`): a file of the bench's own in the
/// store's directory, `segments` segments of `segment` bytes (whole MiB) written once in 1 MiB O_DIRECT
/// requests and made durable, as the large puts' extent files are. [`DdReads::read`] reads one segment as
/// `dd iflag=direct bs=1M` would: 1 MiB O_DIRECT requests, one at a time. The file is deleted when this drops.
pub(crate) struct DdReads {
    file: File,
    _cleanup: RemoveOnDrop,
    segment: u64,
    segments: u64,
    buf: AlignedBuf,
}

impl DdReads {
    /// Writes the file (blocking): `segments` × `segment` bytes, `segment` rounded up to a whole MiB.
    pub(crate) fn create(dir: &Path, segment: u64, segments: u64) -> Result<Self> {
        let segment = segment.div_ceil(1 << 20).max(1) << 20;
        let segments = segments.max(1);
        let path = dir.join(format!(".saltblob-bench-dd-{:016x}", rand::random::<u64>()));
        let (file, cleanup, _) = create_sized(&path, segment * segments, "--large-mb or --count")?;
        let mut buf = AlignedBuf::new(1 << 20);
        rand::RngCore::fill_bytes(&mut rand::rng(), buf.bytes_mut());
        let fail = |e: io::Error| io_error(format!("dd pattern on {}", path.display()), e);
        for i in 0..(segment * segments) >> 20 {
            file.write_all_at(buf.bytes(), i << 20).map_err(fail)?;
        }
        file.sync_data().map_err(fail)?;
        Ok(Self {
            file,
            _cleanup: cleanup,
            segment,
            segments,
            buf,
        })
    }

    /// Reads segment `i` (modulo the segments) the way dd does (blocking).
    pub(crate) fn read(&mut self, i: u64) -> Result<DdTimed> {
        let base = (i % self.segments) * self.segment;
        let started = Instant::now();
        for k in 0..self.segment >> 20 {
            self.file
                .read_exact_at(self.buf.bytes_mut(), base + (k << 20))
                .map_err(|e| io_error("dd-pattern read of the bench's own file".to_owned(), e))?;
        }
        Ok(DdTimed {
            bytes: self.segment,
            io: started.elapsed(),
            sync: Duration::ZERO,
        })
    }
}

/// dd's write pattern, measured beside the large puts (`large_write_vs_dd_beside`): a file of the bench's own in
/// the store's directory, which [`DdWrites::write`] grows by one segment (`segment` bytes, whole MiB) as
/// `dd oflag=direct bs=1M` would, 1 MiB O_DIRECT appends one at a time to a file that is not pre-sized (the
/// probe's dd pattern), then `fdatasync`s, timed apart. It grows to as many bytes as the large puts write and is
/// deleted when this drops, not before: on a file system mounted with online discard, deleting during the
/// phase would discard beside the puts.
pub(crate) struct DdWrites {
    file: File,
    path: PathBuf,
    _cleanup: RemoveOnDrop,
    segment: u64,
    end: u64,
    buf: AlignedBuf,
}

/// One segment of dd's pattern, timed: its bytes, the time of its requests and that of its `fdatasync` (zero
/// for reads).
pub(crate) struct DdTimed {
    pub(crate) bytes: u64,
    pub(crate) io: Duration,
    pub(crate) sync: Duration,
}

impl DdWrites {
    /// Creates the (empty) file; `segment` is rounded up to a whole MiB.
    pub(crate) fn create(dir: &Path, segment: u64) -> Result<Self> {
        let path = dir.join(format!(
            ".saltblob-bench-ddw-{:016x}",
            rand::random::<u64>()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(|e| io_error(format!("cannot create {}", path.display()), e))?;
        let mut buf = AlignedBuf::new(1 << 20);
        rand::RngCore::fill_bytes(&mut rand::rng(), buf.bytes_mut());
        Ok(Self {
            file,
            _cleanup: RemoveOnDrop(path.clone()),
            path,
            segment: segment.div_ceil(1 << 20).max(1) << 20,
            end: 0,
            buf,
        })
    }

    /// Appends the next segment the way dd does, then syncs it (blocking).
    pub(crate) fn write(&mut self) -> Result<DdTimed> {
        let fail = |e: io::Error| {
            io_error(
                format!(
                    "dd-pattern write of the bench's own file {}",
                    self.path.display()
                ),
                e,
            )
        };
        let started = Instant::now();
        for k in 0..self.segment >> 20 {
            self.file
                .write_all_at(self.buf.bytes(), self.end + (k << 20))
                .map_err(fail)?;
        }
        let written = Instant::now();
        self.file.sync_data().map_err(fail)?;
        self.end += self.segment;
        Ok(DdTimed {
            bytes: self.segment,
            io: written - started,
            sync: written.elapsed(),
        })
    }
}

/// dd's pattern made durable: `bytes` (a whole number of MiB; [`DURABLE_BYTES`] unless the probe file is
/// smaller) appended in 1 MiB O_DIRECT requests at depth 1 to a new file, then `fdatasync`; [`DURABLE_RUNS`]
/// files, each deleted after. Returns the median bandwidth, write and sync together, and the median sync time
/// in milliseconds.
fn durable_pattern(dir: &Path, bytes: u64) -> Result<(f64, f64)> {
    let mut runs = Vec::with_capacity(DURABLE_RUNS);
    for _ in 0..DURABLE_RUNS {
        // A new file each time, deleted when `dd` drops.
        let mut dd = DdWrites::create(dir, bytes)?;
        let timed = dd.write()?;
        runs.push((
            (timed.io + timed.sync).as_secs_f64(),
            timed.sync.as_secs_f64(),
        ));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let total = median(runs.iter().map(|r| r.0).collect());
    let sync = median(runs.iter().map(|r| r.1).collect());
    let mib_s = if total > 0.0 {
        bytes as f64 / MIB / total
    } else {
        0.0
    };
    Ok((mib_s, sync * 1e3))
}

/// Pre-sizes `file` to `len` bytes with allocated (unwritten) extents.
#[allow(unsafe_code)]
fn preallocate(file: &File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size over off_t"))?;
    // SAFETY: fallocate takes only integers: the descriptor is open (owned by `file`, which outlives the call)
    // and no memory is passed to the kernel.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}

/// A buffer whose usable part starts at a 4 KiB boundary, as O_DIRECT requires (found by address arithmetic
/// within an over-allocated vector, so no unsafe allocation is needed).
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let addr = storage.as_ptr().addr();
        let start = (ALIGN - addr % ALIGN) % ALIGN;
        Self {
            storage,
            start,
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

struct PointRun {
    point: Point,
    /// Bytes from offset 0 that are certainly written (writes only).
    covered: u64,
}

/// `depth` threads issue `request`-byte requests at consecutive offsets of `[0, limit)` until it is covered or
/// `time` has passed.
fn run_point(
    file: &File,
    op: Op,
    request: usize,
    depth: usize,
    limit: u64,
    time: Duration,
) -> io::Result<PointRun> {
    let next = AtomicU64::new(0);
    let req = request as u64;
    let started = Instant::now();
    let results: Vec<io::Result<(u64, Duration)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..depth)
            .map(|_| {
                let next = &next;
                scope.spawn(move || -> io::Result<(u64, Duration)> {
                    let mut buf = AlignedBuf::new(request);
                    if op == Op::Write {
                        rand::RngCore::fill_bytes(&mut rand::rng(), buf.bytes_mut());
                    }
                    let (mut done, mut busy) = (0u64, Duration::ZERO);
                    // The clock is checked before an offset is claimed, so every claimed offset is written.
                    while started.elapsed() < time {
                        let offset = next.fetch_add(req, Ordering::Relaxed);
                        if offset + req > limit {
                            break;
                        }
                        let t = Instant::now();
                        match op {
                            Op::Write => file.write_all_at(buf.bytes(), offset)?,
                            Op::Read => file.read_exact_at(buf.bytes_mut(), offset)?,
                        }
                        busy += t.elapsed();
                        done += 1;
                    }
                    Ok((done, busy))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(io::Error::other("probe thread panicked")))
            })
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let (mut requests, mut busy) = (0u64, Duration::ZERO);
    for r in results {
        let (n, b) = r?;
        requests += n;
        busy += b;
    }
    let bytes = requests * req;
    let mib_s = if seconds > 0.0 {
        bytes as f64 / MIB / seconds
    } else {
        0.0
    };
    let mean_latency_s = if requests > 0 {
        busy.as_secs_f64() / requests as f64
    } else {
        0.0
    };
    let covered = next.load(Ordering::Relaxed).min(limit / req * req);
    Ok(PointRun {
        point: Point {
            op: op.name(),
            request_bytes: req,
            depth,
            bytes,
            seconds,
            mib_s,
            mean_latency_ms: mean_latency_s * 1e3,
            little_in_flight: mib_s * MIB * mean_latency_s / req as f64,
        },
        covered,
    })
}

/// Per (operation, request size), the smallest depth whose doubling gains less than [`KNEE_GAIN`].
pub fn knees(points: &[Point]) -> Vec<Knee> {
    let mut out = Vec::new();
    for op in ["write", "read"] {
        let mut sizes: Vec<u64> = points
            .iter()
            .filter(|p| p.op == op)
            .map(|p| p.request_bytes)
            .collect();
        sizes.dedup();
        for size in sizes {
            let mut series: Vec<&Point> = points
                .iter()
                .filter(|p| p.op == op && p.request_bytes == size)
                .collect();
            series.sort_by_key(|p| p.depth);
            let gains: Vec<f64> = series
                .windows(2)
                .map(|w| match w {
                    [a, b] if a.mib_s > 0.0 => (b.mib_s / a.mib_s - 1.0) * 100.0,
                    _ => 0.0,
                })
                .collect();
            let knee_at = gains.iter().position(|g| *g < KNEE_GAIN * 100.0);
            let idx = knee_at.unwrap_or(series.len().saturating_sub(1));
            if let Some(p) = series.get(idx) {
                out.push(Knee {
                    op: p.op,
                    request_bytes: size,
                    depth: p.depth,
                    mib_s: p.mib_s,
                    still_growing: knee_at.is_none(),
                    gains_percent: gains.iter().map(|g| (g * 10.0).round() / 10.0).collect(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(op: &'static str, depth: usize, mib_s: f64) -> Point {
        Point {
            op,
            request_bytes: 1 << 20,
            depth,
            bytes: 0,
            seconds: 1.0,
            mib_s,
            mean_latency_ms: 1.0,
            little_in_flight: depth as f64,
        }
    }

    #[test]
    fn the_knee_is_where_doubling_stops_paying() {
        let points = vec![
            point("write", 1, 100.0),
            point("write", 2, 180.0),
            point("write", 4, 300.0),
            point("write", 8, 310.0),
            point("write", 16, 320.0),
            point("read", 1, 100.0),
            point("read", 2, 200.0),
            point("read", 4, 400.0),
        ];
        let k = knees(&points);
        assert_eq!(k.len(), 2);
        assert_eq!(
            (k[0].op, k[0].depth, k[0].still_growing),
            ("write", 4, false)
        );
        assert_eq!(k[0].gains_percent, vec![80.0, 66.7, 3.3, 3.2]);
        assert_eq!((k[1].op, k[1].depth, k[1].still_growing), ("read", 4, true));
    }

    #[test]
    fn the_extent_settings_are_the_cheapest_knee_near_the_best() {
        let knee = |op: &'static str, request_bytes: u64, depth: usize, mib_s: f64| Knee {
            op,
            request_bytes,
            depth,
            mib_s,
            still_growing: false,
            gains_percent: Vec::new(),
        };
        let knees = vec![
            knee("write", 128 << 10, 16, 3000.0),
            knee("write", 1 << 20, 2, 2900.0),
            knee("write", 4 << 20, 1, 3100.0),
            knee("read", 128 << 10, 1, 9000.0),
        ];
        let s = extent_settings(&knees).expect("suggested");
        // 128 KiB × 17 = 2.1 MiB and 1 MiB × 3 = 3 MiB are within 5% of 3100; 4 MiB × 2 = 8 MiB is not cheaper.
        assert_eq!((s.io_bytes, s.io_depth), (128 << 10, 16));
        assert!(extent_settings(&knees[3..]).is_none());
    }

    #[test]
    fn buffers_are_aligned() {
        for len in [4096, 128 << 10, 1 << 20] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.bytes().as_ptr().addr() % ALIGN, 0);
            assert_eq!(b.bytes_mut().len(), len);
        }
    }
}
