//! Configuration of the embedded backend, from code or from a `rocksdb://` URL.

use std::path::PathBuf;
use std::str::FromStr;

use saltblob_core::{Error, Result};

/// URL scheme of the embedded backend.
pub const SCHEME: &str = "rocksdb";
/// Accepted values of [`RocksConfig::max_write_buffer_number`].
pub const MAX_WRITE_BUFFER_NUMBERS: std::ops::RangeInclusive<u32> = 2..=64;
/// Default of [`RocksConfig::unlogged_min_bytes`].
pub const DEFAULT_UNLOGGED_MIN_BYTES: u64 = 8 << 20;
/// Default of [`RocksConfig::extent_min_bytes`].
pub const DEFAULT_EXTENT_MIN_BYTES: u64 = 8 << 20;
/// Default of [`RocksConfig::extent_io_bytes`].
pub const DEFAULT_EXTENT_IO_BYTES: usize = 1 << 20;
/// Default of [`RocksConfig::extent_io_depth`].
pub const DEFAULT_EXTENT_IO_DEPTH: usize = 4;
/// Default of [`RocksConfig::extent_read_bytes`].
pub const DEFAULT_EXTENT_READ_BYTES: usize = 512 << 10;
/// Default of [`RocksConfig::extent_read_depth`].
pub const DEFAULT_EXTENT_READ_DEPTH: usize = 4;
/// Default of [`RocksConfig::extent_yield`].
pub const DEFAULT_EXTENT_YIELD: std::time::Duration =
    std::time::Duration::from_millis(DEFAULT_EXTENT_YIELD_MS);
const DEFAULT_EXTENT_YIELD_MS: u64 = 15;
/// The longest accepted [`RocksConfig::extent_yield`], in milliseconds.
pub const MAX_EXTENT_YIELD_MS: u64 = 1000;
/// Accepted values of [`RocksConfig::extent_io_bytes`] (and it must be a multiple of 4 KiB).
pub const EXTENT_IO_BYTES: std::ops::RangeInclusive<usize> = (64 << 10)..=(64 << 20);
/// Accepted values of [`RocksConfig::extent_io_depth`].
pub const EXTENT_IO_DEPTHS: std::ops::RangeInclusive<usize> = 1..=64;
/// Smallest nonzero [`RocksConfig::background_rate_limit`], in bytes per second: below it a flush of one
/// memtable would take longer than writes can wait.
pub const MIN_RATE_LIMIT: u64 = 1 << 20;

/// Compression RocksDB applies to blob files (chunk data). saltblob already compresses chunks when asked, so
/// the default is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlobCompression {
    /// No compression. The default.
    #[default]
    None,
    /// LZ4.
    Lz4,
    /// zstd.
    Zstd,
}

impl FromStr for BlobCompression {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Self::None),
            "lz4" => Ok(Self::Lz4),
            "zstd" => Ok(Self::Zstd),
            _ => Err(Error::invalid(
                "blob_compression",
                format!("\"{s}\"; use none, lz4 or zstd"),
            )),
        }
    }
}

/// What lowering the priority of RocksDB's background threads covers. The threads are RocksDB's process-wide
/// pools, shared by every database the process opens, and a lowered thread stays lowered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackgroundPriority {
    /// Flushes and compactions run at the process's CPU and I/O priority.
    Normal,
    /// Compaction threads get the lowest CPU priority (nice 19) and the idle I/O class; flushes, which free the
    /// memtables writes wait for, keep normal priority.
    #[default]
    LowCompaction,
    /// Flush threads too get the lowest CPU priority and the idle I/O class: writes may then wait longer for
    /// memtables to be flushed.
    Low,
}

impl FromStr for BackgroundPriority {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "normal" => Ok(Self::Normal),
            "low_compaction" => Ok(Self::LowCompaction),
            "low" => Ok(Self::Low),
            _ => Err(Error::invalid(
                "background_priority",
                format!("\"{s}\"; use normal, low_compaction or low"),
            )),
        }
    }
}

/// Configuration of a [`crate::RocksStore`]. Chunk data lives in RocksDB blob files (key-value separation):
/// values of at least `min_blob_size` bytes are kept out of the LSM tree.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct RocksConfig {
    /// Directory of the database; created if missing.
    pub path: PathBuf,
    /// Whether each manifest commit (and delete) fsyncs the write-ahead log before it returns. With `false` a
    /// commit survives a crash of the process but may be lost with the machine (power loss, kernel panic).
    /// Defaults to `true`.
    pub sync: bool,
    /// Values of at least this many bytes go to blob files. Defaults to 4096.
    pub min_blob_size: u64,
    /// Target size of one blob file. Defaults to 256 MiB.
    pub blob_file_size: u64,
    /// Compression of blob files. Defaults to none.
    pub blob_compression: BlobCompression,
    /// Whether every compaction of the chunk family moves the live blobs of the oldest blob files
    /// (`blob_gc_age_cutoff`) into new ones (RocksDB's blob garbage collection). Defaults to `false`: a gc pass
    /// that freed chunks turns it on for its own compaction when garbage passes `space_reclaim_threshold`. On
    /// all the time, it rewrote live chunks whether or not any had been freed: 160 MiB/s of compaction writes
    /// beside small puts and bulk, whose writeback held small commits' log syncs back
    /// (docs/bench/journal/isolation.md, *compactions that rewrite live chunks*).
    pub blob_gc: bool,
    /// Fraction of the oldest blob files that blob garbage collection considers. Defaults to 0.25.
    pub blob_gc_age_cutoff: f64,
    /// Garbage ratio of the oldest blob files above which compaction is forced to collect them. Defaults to 0.5.
    pub blob_gc_force_threshold: f64,
    /// Size of one memtable of the chunk column family (at most `max_write_buffer_number` exist at once, so this
    /// bounds the memory that buffered chunk data takes). Defaults to 16 MiB.
    pub write_buffer_size: usize,
    /// When garbage collection has freed chunks and more than this fraction of the remaining blob-file bytes is
    /// garbage, it compacts with blob garbage collection over every blob file, rewriting the live chunks so that
    /// disk usage comes back to the live data. Lower keeps the disk tighter, higher rewrites less. Defaults to
    /// 0.1.
    pub space_reclaim_threshold: f64,
    /// Most memtables of the chunk column family at once (2 to 64). When they are all full and waiting to be
    /// flushed, RocksDB stalls every write of the database, small commits included; more of them absorb a large
    /// put while the flush catches up. Defaults to 6 (16 MiB each: 96 MiB of chunk data at most).
    pub max_write_buffer_number: u32,
    /// Whether chunk writes of a background class (`bulk`) are RocksDB low-priority writes, which RocksDB slows
    /// down first when compaction falls behind, before it slows every write. Defaults to `false`: measured, it
    /// kept small commits fast but cut bulk throughput under small load to a tenth, a strict priority rather
    /// than a share (docs/bench/journal/isolation.md, *Isolation: small operations under huge-blob load*).
    pub bulk_low_pri: bool,
    /// Bytes per second that flushes and compactions may write, auto-tuned by RocksDB up to this ceiling; 0
    /// turns the rate limiter off. Defaults to 0.
    pub background_rate_limit: u64,
    /// CPU and I/O priority of RocksDB's background threads. Defaults to [`BackgroundPriority::LowCompaction`].
    pub background_priority: BackgroundPriority,
    /// Whether RocksDB pipelines write-ahead-log and memtable writes (`enable_pipelined_write`), so that a
    /// commit can enter the log while an earlier large write is still filling the memtable. The log keeps the
    /// order of writes either way, so chunks stay at least as durable as a later commit. Defaults to `false`:
    /// with it on, RocksDB 11.8 never took writes again after a log write found the disk full (its recovery
    /// flush failed on the old log's error every 5 s); off, writes came back 5 s after space did
    /// (`resource_faults` in the server's tests), and the isolation bench found no difference between the two
    /// (docs/bench/journal/isolation.md, *Two engine options against the puts' wait*).
    pub pipelined_write: bool,
    /// Bytes of write-ahead log written between background syncs of it (0: none). A synced commit writes out
    /// whatever the log holds unsynced, chunks of other puts included, so this bounds what a commit waits for.
    /// Defaults to 256 KiB.
    pub wal_bytes_per_sync: u64,
    /// Puts of at least this many bytes write their chunks without the write-ahead log, so that each chunk byte
    /// is written once (to a blob file, at the memtable flush) instead of twice, and flush the chunk memtables
    /// before their commit; smaller puts log their chunks, as a flush per small put would cost more than the
    /// second write. `None` (URL value `off`): every put logs its chunks. Defaults to 8 MiB (the fan-out
    /// threshold: the puts that are salted). Puts that go to an extent file ([`RocksConfig::extent_min_bytes`])
    /// do neither.
    pub unlogged_min_bytes: Option<u64>,
    /// Puts of at least this many bytes (a stream: once it is known to be that long) store their chunks in an
    /// extent file of their version's own under `<path>/extents/`, written once with aligned direct I/O into a
    /// file that grows with the bytes received, with RocksDB holding a 13-byte pointer per chunk (`docs/format.md`, *Extent
    /// files*); smaller puts keep RocksDB's blob files. `None` (URL value `off`): never. Defaults to 8 MiB
    /// (measured: docs/bench/journal/extents.md, *Extent files for large values*).
    pub extent_min_bytes: Option<u64>,
    /// Bytes of one write of an extent file, and of each of its I/O buffers: the device's knee, past which
    /// bigger requests gain nothing (`saltblob probe` measures it). A multiple of 4 KiB from 64 KiB to 64 MiB.
    /// Defaults to 1 MiB.
    pub extent_io_bytes: usize,
    /// Writes of one extent file in flight at once (1 to 64): the depth at the probe's knee. Each file being
    /// written uses `extent_io_depth + 1` write buffers of `extent_io_bytes`, each in transparent huge pages of its
    /// own (2 MiB for the default 1 MiB); the store keeps, idle, those of up to four files written at once.
    /// Defaults to 4.
    pub extent_io_depth: usize,
    /// Bytes of chunk records per read of a large get (one aligned read each; same accepted values as
    /// `extent_io_bytes`). Defaults to 512 KiB.
    pub extent_read_bytes: usize,
    /// Reads of `extent_read_bytes` one large get keeps in flight (1 to 64). This virtual disk reads no faster
    /// with more than 2 MiB queued, and slower with the store's whole 16 MiB in-flight window: over ten-get runs
    /// a 60 MiB get ran at 0.80–0.96 of dd's read pattern with 1 MiB reads 2 deep, 0.84–0.91 3 deep, 0.90–0.99
    /// with 512 KiB reads 4 deep, 0.48–0.55 with 1 MiB reads 1 deep (docs/bench/journal/extents.md, *Large gets
    /// beside dd's read pattern*). Defaults to 4.
    pub extent_read_depth: usize,
    /// Whether extent files are written and read with `O_DIRECT` (no page-cache copy). Where the file system
    /// refuses it (ramfs, some network and FUSE file systems) they fall back to buffered I/O, and the reason is
    /// logged once. Defaults to `true`.
    pub extent_direct_io: bool,
    /// Bytes the file system must keep free after a new large put (an extent file) takes its whole size: below
    /// it the put is refused at once with a "No space left on device" error saying how much is free (the S3
    /// server answers 503 SlowDown); a put in progress fails when its file would grow into half of it. Small
    /// puts (in RocksDB) are not refused by it: the room below the floor is theirs and RocksDB's. `Some(0)`
    /// (URL `extent_free_floor=0`): no floor; a floor set here keeps half of itself free as its hard floor.
    /// `None` (the default): 1 GiB, or 5% of the file system when that is less, its hard floor half of it;
    /// neither below [`RocksConfig::resume_free_bytes`] + 16 MiB (80 MiB by default), so that RocksDB can take
    /// writes again once space an outside writer took is given back; a file system that reports no size (ramfs)
    /// has none.
    pub extent_free_floor: Option<u64>,
    /// The longest each extent read or write waits, before it is issued, while a synced commit is pending (so
    /// that a small put's log write does not queue in the device behind huge reads and writes); zero (URL
    /// `extent_yield_ms=0`): extent I/O never waits. At most 1 s. Defaults to 15 ms: alone it shortened the small
    /// puts' median beside huge values but not their tail (docs/bench/journal/isolation.md, *Extent I/O standing
    /// back for synced commits*); with [`RocksConfig::bulk_idle_io`], 5 ms took the small P99 beside bulk from
    /// 24–32 to 19–26 ms in six runs each (*bulk extent I/O in the idle class*), and 15 ms against 5 ms took it
    /// from 18.1–28.0 (median 19.6) to 16.4–19.0 ms (median 17.4) in six runs of 20 000 samples each, at the same
    /// bulk share (*a longer stand-back for synced commits*).
    pub extent_yield: std::time::Duration,
    /// Whether the extent reads and writes of background classes (`bulk`) run in the kernel's idle I/O class
    /// (`ioprio_set(2)`), so that an I/O scheduler that honours it (`mq-deadline`, the usual one for virtual and
    /// SATA disks, or `bfq`) serves small puts' log writes and journal commits first; `none` and `kyber` ignore
    /// it. Idle requests are still served when nothing else waits, and `mq-deadline` ages them (10 s at most by
    /// default). Defaults to `true` (docs/bench/journal/isolation.md, *bulk extent I/O in the idle class*).
    pub bulk_idle_io: bool,
    /// Table and blob files RocksDB keeps open (its `max_open_files`; URL `max_open_files=`): more are opened
    /// and closed as read. `None` (the default): a quarter of the process's open-file limit less a reserve
    /// ([`saltblob_core::fds::FdShares`]), read when the store opens.
    pub max_open_files: Option<u64>,
    /// Extent files open at once, puts in progress and reads together (URL `extent_open_files=`): a new large
    /// put past it fails at once with a retryable error (the S3 server answers 503 SlowDown), a read waits for
    /// a file to close for up to 2 s, then fails the same way. `None` (the default): a quarter of the process's
    /// open-file limit less a reserve ([`saltblob_core::fds::FdShares`]), read when the store opens.
    pub extent_open_files: Option<u64>,
}

/// Size of one memtable of the column families of small records (manifests, the system records) and of the
/// default one: RocksDB's own default, set explicitly because it sets [`RocksConfig::resume_free_bytes`].
pub const SMALL_WRITE_BUFFER_SIZE: usize = 64 << 20;

impl RocksConfig {
    /// Defaults for a database in `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            sync: true,
            min_blob_size: 4096,
            blob_file_size: 256 << 20,
            blob_compression: BlobCompression::None,
            blob_gc: false,
            blob_gc_age_cutoff: 0.25,
            blob_gc_force_threshold: 0.5,
            write_buffer_size: 16 << 20,
            space_reclaim_threshold: 0.1,
            max_write_buffer_number: 6,
            bulk_low_pri: false,
            background_rate_limit: 0,
            background_priority: BackgroundPriority::LowCompaction,
            pipelined_write: false,
            wal_bytes_per_sync: 256 << 10,
            unlogged_min_bytes: Some(DEFAULT_UNLOGGED_MIN_BYTES),
            extent_min_bytes: Some(DEFAULT_EXTENT_MIN_BYTES),
            extent_io_bytes: DEFAULT_EXTENT_IO_BYTES,
            extent_io_depth: DEFAULT_EXTENT_IO_DEPTH,
            extent_read_bytes: DEFAULT_EXTENT_READ_BYTES,
            extent_read_depth: DEFAULT_EXTENT_READ_DEPTH,
            extent_direct_io: true,
            extent_free_floor: None,
            extent_yield: DEFAULT_EXTENT_YIELD,
            bulk_idle_io: true,
            max_open_files: None,
            extent_open_files: None,
        }
    }

    /// Sets [`RocksConfig::sync`].
    pub fn with_sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// Bytes the file system must have free before RocksDB takes writes again after a full disk stopped them:
    /// its largest memtable ([`SMALL_WRITE_BUFFER_SIZE`], or [`RocksConfig::write_buffer_size`] when larger),
    /// the room RocksDB reserves to flush it (its `SstFileManager` looks every 5 s). The default extent
    /// free-space floor keeps at least this much free, with a margin.
    pub fn resume_free_bytes(&self) -> u64 {
        u64::try_from(SMALL_WRITE_BUFFER_SIZE.max(self.write_buffer_size)).unwrap_or(u64::MAX)
    }

    /// Parses `rocksdb:///absolute/path?key=value&...` (or `rocksdb://relative/path`). Keys: `sync`,
    /// `min_blob_size`, `blob_file_size`, `blob_compression`, `blob_gc`, `blob_gc_age_cutoff`,
    /// `blob_gc_force_threshold`, `write_buffer_size`, `space_reclaim_threshold`, `max_write_buffer_number`,
    /// `bulk_low_pri`, `background_rate_limit`, `background_priority`, `pipelined_write`, `wal_bytes_per_sync`,
    /// `unlogged_min_bytes` (bytes, or `off`), `extent_min_bytes` (bytes, or `off`), `extent_io_bytes`,
    /// `extent_io_depth`, `extent_read_bytes`, `extent_read_depth`, `extent_direct_io`, `extent_free_floor`
    /// (bytes), `extent_yield_ms`, `bulk_idle_io`, `max_open_files`, `extent_open_files`.
    pub fn from_url(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        let rest = url.strip_prefix("rocksdb://").ok_or_else(|| {
            bad(
                "an embedded store URL starts with rocksdb://, e.g. rocksdb:///var/lib/saltblob"
                    .into(),
            )
        })?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(bad(
                "the path is empty; e.g. rocksdb:///var/lib/saltblob".into()
            ));
        }
        let mut config = Self::new(path);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("\"{pair}\" is not key=value")))?;
            let num = |what: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{what}={v} is not a whole number of bytes")))
            };
            let ratio = |what: &str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .ok_or_else(|| bad(format!("{what}={v} is not a number between 0 and 1")))
            };
            let flag = |what: &str| match v {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(bad(format!("{what}={v} is not true or false"))),
            };
            match k {
                "sync" => config.sync = flag(k)?,
                "min_blob_size" => config.min_blob_size = num(k)?,
                "blob_file_size" => config.blob_file_size = num(k)?.max(1),
                "blob_compression" => config.blob_compression = v.parse()?,
                "blob_gc" => config.blob_gc = flag(k)?,
                "blob_gc_age_cutoff" => config.blob_gc_age_cutoff = ratio(k)?,
                "blob_gc_force_threshold" => config.blob_gc_force_threshold = ratio(k)?,
                "space_reclaim_threshold" => config.space_reclaim_threshold = ratio(k)?,
                "write_buffer_size" => {
                    config.write_buffer_size =
                        usize::try_from(num(k)?.max(1 << 20)).unwrap_or(usize::MAX)
                }
                "max_write_buffer_number" => {
                    config.max_write_buffer_number = num(k)
                        .ok()
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| MAX_WRITE_BUFFER_NUMBERS.contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "{k}={v} is not a whole number from {} to {}",
                                MAX_WRITE_BUFFER_NUMBERS.start(),
                                MAX_WRITE_BUFFER_NUMBERS.end()
                            ))
                        })?;
                }
                "bulk_low_pri" => config.bulk_low_pri = flag(k)?,
                "background_rate_limit" => {
                    let rate = num(k)?;
                    if rate != 0 && !(MIN_RATE_LIMIT..=i64::MAX as u64).contains(&rate) {
                        return Err(bad(format!(
                            "{k}={v} is below {MIN_RATE_LIMIT} bytes per second (0 turns the limiter off)"
                        )));
                    }
                    config.background_rate_limit = rate;
                }
                "background_priority" => config.background_priority = v.parse()?,
                "pipelined_write" => config.pipelined_write = flag(k)?,
                "wal_bytes_per_sync" => config.wal_bytes_per_sync = num(k)?,
                "unlogged_min_bytes" | "extent_min_bytes" => {
                    let min = match v {
                        "off" | "none" => None,
                        _ => Some(v.parse::<u64>().map_err(|_| {
                            bad(format!("{k}={v} is not a whole number of bytes or off"))
                        })?),
                    };
                    if k == "unlogged_min_bytes" {
                        config.unlogged_min_bytes = min;
                    } else {
                        config.extent_min_bytes = min;
                    }
                }
                "extent_io_bytes" | "extent_read_bytes" => {
                    let bytes = num(k)
                        .ok()
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|n| EXTENT_IO_BYTES.contains(n) && n % 4096 == 0)
                        .ok_or_else(|| {
                            bad(format!(
                                "{k}={v} is not a multiple of 4096 from {} to {} bytes",
                                EXTENT_IO_BYTES.start(),
                                EXTENT_IO_BYTES.end()
                            ))
                        })?;
                    if k == "extent_io_bytes" {
                        config.extent_io_bytes = bytes;
                    } else {
                        config.extent_read_bytes = bytes;
                    }
                }
                "extent_io_depth" | "extent_read_depth" => {
                    let depth = num(k)
                        .ok()
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|n| EXTENT_IO_DEPTHS.contains(n))
                        .ok_or_else(|| {
                            bad(format!(
                                "{k}={v} is not a whole number from {} to {}",
                                EXTENT_IO_DEPTHS.start(),
                                EXTENT_IO_DEPTHS.end()
                            ))
                        })?;
                    if k == "extent_io_depth" {
                        config.extent_io_depth = depth;
                    } else {
                        config.extent_read_depth = depth;
                    }
                }
                "extent_direct_io" => config.extent_direct_io = flag(k)?,
                "extent_free_floor" => config.extent_free_floor = Some(num(k)?),
                "bulk_idle_io" => config.bulk_idle_io = flag(k)?,
                "max_open_files" | "extent_open_files" => {
                    let files = v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        bad(format!("{k}={v} is not a whole number of files above 0"))
                    })?;
                    if k == "max_open_files" {
                        config.max_open_files = Some(files);
                    } else {
                        config.extent_open_files = Some(files);
                    }
                }
                "extent_yield_ms" => {
                    let ms = v
                        .parse::<u64>()
                        .ok()
                        .filter(|ms| *ms <= MAX_EXTENT_YIELD_MS)
                        .ok_or_else(|| {
                            bad(format!(
                                "{k}={v} is not a whole number of milliseconds from 0 to {MAX_EXTENT_YIELD_MS}"
                            ))
                        })?;
                    config.extent_yield = std::time::Duration::from_millis(ms);
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option \"{k}\"; accepted: sync, min_blob_size, blob_file_size, blob_compression, \
                         blob_gc, blob_gc_age_cutoff, blob_gc_force_threshold, write_buffer_size, \
                         space_reclaim_threshold, max_write_buffer_number, bulk_low_pri, background_rate_limit, \
                         background_priority, pipelined_write, wal_bytes_per_sync, unlogged_min_bytes, \
                         extent_min_bytes, extent_io_bytes, extent_io_depth, extent_read_bytes, extent_read_depth, \
                         extent_direct_io, extent_free_floor, extent_yield_ms, bulk_idle_io, max_open_files, \
                         extent_open_files"
                    )));
                }
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_options() {
        let c = RocksConfig::from_url("rocksdb:///tmp/x").expect("parses");
        assert_eq!(c, RocksConfig::new("/tmp/x"));
        let c = RocksConfig::from_url(
            "rocksdb://rel/dir?sync=false&blob_compression=zstd&min_blob_size=100",
        )
        .expect("parses");
        assert_eq!(c.path, PathBuf::from("rel/dir"));
        assert!(!c.sync);
        assert_eq!(
            (c.blob_compression, c.min_blob_size),
            (BlobCompression::Zstd, 100)
        );
        for bad in [
            "rocksdb://",
            "cql://x",
            "rocksdb:///x?sync=maybe",
            "rocksdb:///x?nope=1",
            "rocksdb:///x?blob_gc_age_cutoff=2",
        ] {
            let err = RocksConfig::from_url(bad).expect_err(bad).to_string();
            assert!(err.starts_with("invalid store URL"), "{bad}: {err}");
        }
    }

    #[test]
    fn isolation_levers_parse_with_documented_defaults() {
        let c = RocksConfig::new("/tmp/x");
        assert_eq!(c.max_write_buffer_number, 6);
        assert!(!c.bulk_low_pri);
        assert_eq!(c.background_rate_limit, 0);
        assert_eq!(c.background_priority, BackgroundPriority::LowCompaction);
        assert!(!c.pipelined_write);
        assert_eq!(c.wal_bytes_per_sync, 256 << 10);
        assert_eq!(c.unlogged_min_bytes, Some(8 << 20));
        assert_eq!((c.max_open_files, c.extent_open_files), (None, None));
        let c = RocksConfig::from_url("rocksdb:///x?max_open_files=100&extent_open_files=20")
            .expect("open-file shares");
        assert_eq!(
            (c.max_open_files, c.extent_open_files),
            (Some(100), Some(20))
        );

        let c = RocksConfig::from_url(
            "rocksdb:///x?max_write_buffer_number=8&bulk_low_pri=true&background_rate_limit=67108864\
             &background_priority=normal&pipelined_write=true&wal_bytes_per_sync=1048576\
             &unlogged_min_bytes=0",
        )
        .expect("parses");
        assert_eq!(c.max_write_buffer_number, 8);
        assert!(c.bulk_low_pri);
        assert_eq!(c.background_rate_limit, 64 << 20);
        assert_eq!(c.background_priority, BackgroundPriority::Normal);
        assert!(c.pipelined_write);
        assert_eq!(c.wal_bytes_per_sync, 1 << 20);
        assert_eq!(c.unlogged_min_bytes, Some(0));
        let c = RocksConfig::from_url("rocksdb:///x?unlogged_min_bytes=off").expect("parses");
        assert_eq!(c.unlogged_min_bytes, None);
        assert_eq!(c.extent_min_bytes, Some(8 << 20));
        assert_eq!((c.extent_io_bytes, c.extent_io_depth), (1 << 20, 4));
        assert_eq!((c.extent_read_bytes, c.extent_read_depth), (512 << 10, 4));
        assert!(c.extent_direct_io);
        assert_eq!(c.extent_yield, std::time::Duration::from_millis(15));
        assert!(c.bulk_idle_io);
        let c = RocksConfig::from_url(
            "rocksdb:///x?extent_min_bytes=0&extent_io_bytes=4194304&extent_io_depth=2&extent_direct_io=false\
             &extent_yield_ms=1000&extent_read_depth=16&extent_read_bytes=1048576&bulk_idle_io=false",
        )
        .expect("parses");
        assert!(!c.bulk_idle_io);
        assert_eq!(c.extent_yield, std::time::Duration::from_secs(1));
        assert_eq!(c.extent_min_bytes, Some(0));
        assert_eq!((c.extent_io_bytes, c.extent_io_depth), (4 << 20, 2));
        assert_eq!((c.extent_read_bytes, c.extent_read_depth), (1 << 20, 16));
        assert!(!c.extent_direct_io);
        let c = RocksConfig::from_url("rocksdb:///x?extent_min_bytes=off").expect("parses");
        assert_eq!(c.extent_min_bytes, None);
        let c = RocksConfig::from_url(
            "rocksdb:///x?background_rate_limit=0&background_priority=LOW&max_write_buffer_number=64",
        )
        .expect("parses");
        assert_eq!(c.background_rate_limit, 0);
        assert_eq!(c.background_priority, BackgroundPriority::Low);
        assert_eq!(c.max_write_buffer_number, 64);
    }

    #[test]
    fn bad_isolation_levers_are_refused_naming_the_option() {
        for (url, option) in [
            (
                "rocksdb:///x?max_write_buffer_number=1",
                "max_write_buffer_number",
            ),
            (
                "rocksdb:///x?max_write_buffer_number=65",
                "max_write_buffer_number",
            ),
            (
                "rocksdb:///x?max_write_buffer_number=-3",
                "max_write_buffer_number",
            ),
            ("rocksdb:///x?bulk_low_pri=sometimes", "bulk_low_pri"),
            (
                "rocksdb:///x?background_rate_limit=1000",
                "background_rate_limit",
            ),
            (
                "rocksdb:///x?background_rate_limit=fast",
                "background_rate_limit",
            ),
            (
                "rocksdb:///x?background_rate_limit=18446744073709551615",
                "background_rate_limit",
            ),
            (
                "rocksdb:///x?background_priority=idle",
                "background_priority",
            ),
            ("rocksdb:///x?pipelined_write=2", "pipelined_write"),
            ("rocksdb:///x?wal_bytes_per_sync=1MiB", "wal_bytes_per_sync"),
            ("rocksdb:///x?max_open_files=0", "max_open_files"),
            ("rocksdb:///x?extent_open_files=many", "extent_open_files"),
            ("rocksdb:///x?unlogged_min_bytes=8MiB", "unlogged_min_bytes"),
            ("rocksdb:///x?unlogged_min_bytes=-1", "unlogged_min_bytes"),
            ("rocksdb:///x?extent_min_bytes=8MiB", "extent_min_bytes"),
            ("rocksdb:///x?extent_io_bytes=1000000", "extent_io_bytes"),
            ("rocksdb:///x?extent_io_bytes=4096", "extent_io_bytes"),
            ("rocksdb:///x?extent_io_bytes=134217728", "extent_io_bytes"),
            ("rocksdb:///x?extent_io_depth=0", "extent_io_depth"),
            ("rocksdb:///x?extent_io_depth=65", "extent_io_depth"),
            ("rocksdb:///x?extent_read_depth=0", "extent_read_depth"),
            ("rocksdb:///x?extent_read_bytes=1000", "extent_read_bytes"),
            ("rocksdb:///x?extent_read_depth=x", "extent_read_depth"),
            ("rocksdb:///x?extent_direct_io=maybe", "extent_direct_io"),
            ("rocksdb:///x?extent_yield_ms=1001", "extent_yield_ms"),
            ("rocksdb:///x?extent_yield_ms=5ms", "extent_yield_ms"),
            ("rocksdb:///x?bulk_idle_io=sometimes", "bulk_idle_io"),
        ] {
            let err = RocksConfig::from_url(url).expect_err(url).to_string();
            assert!(err.contains(option), "{url}: {err}");
        }
    }
}
