//! # saltblob bench and probe
//!
//! The instrument behind saltblob's published numbers: [`bench()`] runs the salting article's experiment on any
//! store URL, and [`probe()`] measures what the hardware underneath can do, so that every result comes with its
//! reference in the same run.
//!
//! **Bench** (`saltblob bench`), phases in order:
//! 1. `large_write`: `--count` blobs of `--large-mb` MiB, one at a time (chunk size and max salt from the flags or
//!    the layout policy);
//! 2. `large_read`: read them back, digests verified;
//! 3. `small_write`: the same byte volume as blobs of `--small-kb` KiB, one per key, `--concurrency` at once;
//! 4. `small_read`: read those back;
//! 5. with `--unchunked`: `unchunked_write` / `unchunked_read`, the article's baseline: each large blob as one
//!    value, no chunking; a refusal (by saltblob's limits or by the server) is reported as a result;
//! 6. with `--mixed SECONDS`: `small_alone` then `small_under_load`, small gets and puts alone and while large
//!    blobs are written and read continuously.
//!
//! Each phase reports op count, bytes, wall time, MiB/s, HDR-histogram latency percentiles and errors, printed
//! as a cassandra-stress-like block, then a side-by-side table and the ratios of `BENCHMARKS.md`; `--json` and
//! `--plot` write the same data. The bench deletes its keys at the end unless `--keep`.
//!
//! **Probe** (`saltblob probe`): for an embedded store, the block device behind its directory (sector sizes from
//! sysfs) and O_DIRECT sequential bandwidth at 128 KiB and 1 MiB requests and queue depths 1–16, with the depth
//! where bandwidth stops growing; for any other store, single-row (single-chunk) writes and reads through the
//! backend at the bench concurrency.
//!
//! ```no_run
//! # #[tokio::main] async fn main() -> saltblob::Result<()> {
//! use clap::Parser;
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: saltblob_bench::BenchArgs,
//! }
//! let cli = Cli::parse_from(["bench", "--count", "2", "--large-mb", "8", "--json", "out.json"]);
//! let report = saltblob_bench::bench("memory://", &cli.bench, true).await?;
//! println!("{} phases", report.phases.len());
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`bench`](mod@bench): the phases and [`BenchReport`].
//! - [`probe`](mod@probe): [`ProbeReport`]: O_DIRECT bandwidth of the device, or single-row throughput.
//! - [`device`]: which block device holds a directory, and its sector sizes.
//! - [`stats`]: HDR latency recording and per-phase results.
//! - [`report`]: the text output; [`plot`]: the SVG chart.

use std::path::PathBuf;

use clap::Args;
use saltblob::parse_size;

pub mod bench;
pub mod device;
pub mod plot;
pub mod probe;
mod progress;
pub mod report;
pub mod stats;

pub use bench::{BenchReport, bench};
pub use probe::{ProbeReport, probe};
pub use stats::{Latency, PhaseReport};

/// Options of `saltblob bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
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
    /// Chunk size of the large blobs (e.g. 64KiB, 1MiB). Defaults to the layout policy's (64 KiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub chunk_size: Option<u64>,
    /// Largest salt count (fan-out) of the large blobs. Defaults to the layout policy's (100).
    #[arg(long, value_name = "N")]
    pub max_salt: Option<u32>,
    /// Also write and read each large blob as ONE value, without chunking (the article's baseline).
    #[arg(long)]
    pub unchunked: bool,
    /// Also run small gets and puts for SECONDS alone, then for SECONDS while large blobs are written and read.
    #[arg(long, value_name = "SECONDS")]
    pub mixed: Option<f64>,
    /// Write the results as JSON to FILE ("-": standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw latency percentiles per phase to FILE (SVG).
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

/// Writes `text` to `path`, or to standard output when `path` is "-".
pub(crate) fn write_output(path: &std::path::Path, text: &str) -> saltblob::Result<()> {
    if path.as_os_str() == "-" {
        println!("{text}");
        return Ok(());
    }
    std::fs::write(path, format!("{text}\n")).map_err(|e| {
        saltblob::Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", path.display()),
        ))
    })
}
