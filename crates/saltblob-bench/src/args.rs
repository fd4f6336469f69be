//! The options of `saltblob bench` and `saltblob probe`, as parsed, and the probe [`Settings`] resolved from
//! either.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use saltblob::parse_size;
use saltblob::{Error, Result};

/// Options of `saltblob bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Measure listings and passes instead, at each size of --listing-sizes: fill that many 64-byte blobs, then
    /// time ls pages (first, middle, under a prefix), S3 ListObjectsV2 pages with and without delimiter through an
    /// in-process `saltblob serve`, and a pass over every manifest, serial and parallel (docs/scaling.md).
    #[arg(long)]
    pub listing: bool,
    /// The numbers of blobs --listing measures at, ascending (the store is filled up to each in turn).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10000,100000,1000000",
        value_name = "N,N,..."
    )]
    pub listing_sizes: Vec<u64>,
    /// Measure gc's background work instead: how record writes spread over partitions in a mixed run, how fast a
    /// gc pass drains the reclaim queue (16 partitions at once, and one entry at a time), duplicate chunk deletions
    /// with three runners at once, the largest chunk partition of a 10 GiB and a 1 TiB blob (docs/scaling.md).
    #[arg(long, conflicts_with = "listing")]
    pub background: bool,
    /// Measure a put through S3 instead: each of --count rounds puts one blob of MIB MiB directly and through an
    /// in-process `saltblob serve` with object_store's S3 client (one PutObject signed, one unsigned, one
    /// multipart upload of 16 MiB parts), and reports each S3 way's throughput ÷ the direct put's.
    #[arg(long, value_name = "MIB", conflicts_with_all = ["listing", "background"])]
    pub s3_put: Option<u64>,
    /// Keys of --background's mixed run (it queues about 1.5 times as many reclaim entries per round).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub reclaim_queue: u64,
    /// Number of large blobs, written one at a time.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub count: u64,
    /// Size of each large blob, in MiB.
    #[arg(long, default_value_t = 60, value_name = "MIB")]
    pub large_mb: u64,
    /// Size of each small blob, in KiB; the small phases move the same byte volume as the large ones.
    #[arg(long, default_value_t = 64, value_name = "KIB")]
    pub small_kb: u64,
    /// Small operations in flight at once (small phases, mixed phases, cluster probe).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub concurrency: usize,
    /// Chunk size of the blobs, large and small (e.g. 64KiB, 1MiB), and of the cluster probe's rows. Defaults to
    /// the layout policy's: 64 KiB, and for blobs above the fan-out threshold the backend's large chunk size
    /// (1 MiB on CQL; the URL's `large_chunk_size` sets it alone).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Largest salt count (fan-out) of the large blobs. Defaults to the layout policy's (100).
    #[arg(long, value_name = "N")]
    pub max_salt: Option<u32>,
    /// Also write and read each large blob as ONE value, without chunking (the article's baseline).
    #[arg(long)]
    pub unchunked: bool,
    /// Also measure isolation. Capacity first, closed loop: small gets and puts for SECONDS alone (small ops/s
    /// X*), the large put/get/delete loops for SECONDS alone (bulk MiB/s B*), then both at once for SECONDS (a
    /// stress figure, no goal). Then, per `--small-load` ρ, the small mix paced (open loop) at ρ·X*, alone and
    /// beside the unthrottled large loops, each op timed from when it was due: small P99 ratio and excess, small
    /// goodput, bulk share and work W, with their goals.
    #[arg(long, value_name = "SECONDS")]
    pub mixed: Option<f64>,
    /// Paced small loads of `--mixed`, as fractions ρ of the small ops' closed-loop capacity X*, comma-separated,
    /// each in (0, 1]. Default: 0.25,0.5.
    #[arg(long, value_name = "RHO[,RHO...]", value_delimiter = ',')]
    pub small_load: Vec<f64>,
    /// Paced small loads of `--mixed` at fixed rates instead, ops/s, comma-separated: the same offered load
    /// whatever the small capacity X* is, to compare stores or builds whose X* differs (the figures then report
    /// ρ = rate ÷ X*, and no goal is judged). Not with `--small-load`.
    #[arg(long, value_name = "OPS[,OPS...]", value_delimiter = ',')]
    pub small_rate: Vec<f64>,
    /// Small operations due in each paced phase of `--mixed`, at least: a paced phase lasts the longer of
    /// `--mixed` and this many ÷ the paced rate (at most 600 s), so that its P99 is stable.
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    pub paced_samples: u64,
    /// Seconds a paced phase of `--mixed` waits, past its schedule, for the small operations due in it (those
    /// late because the store fell behind are still issued then); the bulk loops run until it ends. What is
    /// still running after it counts as unfinished. At most 600.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub paced_grace: f64,
    /// Also stream MIB MiB through `saltblob put KEY -` in a child process (the running binary) and report its
    /// peak resident memory (phase `stream_put`); on an embedded store the child writes to a fresh store beside
    /// it. 0 (the default): skip.
    #[arg(long, default_value_t = 0, value_name = "MIB")]
    pub stream_mb: u64,
    /// Also run the large and small write and read phases on sealed blobs (encryption at rest: a keyring of the
    /// run's own, AES-256-GCM) and report the cost as ratios to plaintext (goals: large throughput ≥ 0.9, small
    /// P99 ≤ 1.1). Each large phase's sealed twin (`large_write_sealed`, …) runs right after it; each small
    /// phase runs interleaved with its twin in one load (one plaintext operation, one sealed, in turn), so that
    /// both meet the same state of the store.
    #[arg(long)]
    pub encrypt: bool,
    /// With `--encrypt`, run each large sealed phase before its plaintext twin instead of after it: the store's
    /// state drifts within a run (flushes and compactions of what the earlier phases wrote), so alternating the
    /// order between runs and comparing medians cancels that drift out of the ratios.
    #[arg(long, requires = "encrypt")]
    pub sealed_first: bool,
    /// Concurrent large put/get/delete loops (each on its own keys) in the bulk phases of `--mixed`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub large_writers: usize,
    /// Write the results as JSON to FILE ("-": standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw latency percentiles per phase to FILE (SVG); with `--mixed`, also the isolation result (small-op
    /// latency and bulk throughput, alone vs under load, with their goals).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Keep the bench's keys instead of deleting them at the end.
    #[arg(long)]
    pub keep: bool,
    /// Skip the reference measurement (the probe); "reference" is then null.
    #[arg(long)]
    pub no_probe: bool,
    /// How the reference is measured.
    #[command(flatten)]
    pub probe: ProbeOptions,
}

/// Options of `saltblob probe`.
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Requests in flight for the single-row probe of a cluster store.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub concurrency: usize,
    /// Value size of the single-row probe of a cluster store. Defaults to the layout policy's chunk size (64 KiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Probe this directory's device instead of the store's data directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Write the results as JSON to FILE ("-": standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// How much is measured.
    #[command(flatten)]
    pub probe: ProbeOptions,
}

/// How much the probe measures; shared by `bench` and `probe`.
#[derive(Args, Debug, Clone)]
pub struct ProbeOptions {
    /// Size of the probe's pre-sized O_DIRECT test file (embedded store), or byte budget of its single-row
    /// writes (other stores).
    #[arg(long, default_value = "1GiB", value_name = "SIZE", value_parser = parse_size)]
    pub probe_size: u64,
    /// Longest time one probe measurement (one request size at one queue depth) may take, in seconds.
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    pub probe_seconds: f64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            probe_size: 1 << 30,
            probe_seconds: 3.0,
        }
    }
}

/// How the probe runs (from [`ProbeArgs`] or from the bench's options).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub options: ProbeOptions,
    pub concurrency: usize,
    pub value_bytes: u64,
    pub quiet: bool,
}

impl Settings {
    /// The longest time of one measurement (`--probe-seconds`), validated.
    pub(crate) fn point_limit(&self) -> Result<Duration> {
        let s = self.options.probe_seconds;
        if !(s.is_finite() && s > 0.0 && s <= 3600.0) {
            return Err(Error::invalid(
                "probe seconds",
                format!("{s}; it must be more than 0 and at most 3600"),
            ));
        }
        Ok(Duration::from_secs_f64(s))
    }
}
