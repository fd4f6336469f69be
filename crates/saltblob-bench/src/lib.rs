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
//! 6. with `--mixed SECONDS`, isolation between small (class `interactive`) and large (class `bulk`) traffic.
//!    Closed loop, each for SECONDS: `small_alone` (its ops/s is the small capacity X*), `bulk_alone`
//!    (`--large-writers` loops of large puts, gets and deletes; its MiB/s is the bulk capacity B*), then
//!    `small_under_load` and `bulk_under_load` together (a stress figure, no goal). Then per `--small-load` ρ
//!    (default 0.25 and 0.5), the small mix paced at ρ·X* (open loop, each op timed from when it was due):
//!    `paced_small_alone_rhoR`, then `paced_small_under_load_rhoR` beside `paced_bulk_under_load_rhoR`. Per ρ:
//!    small P99 ratio and excess, small goodput, bulk share, work W, CPU cores, against the goals of
//!    [`bench::paced_goals`]; printed and written as `"isolation"` in the JSON. `--small-rate OPS` paces at
//!    fixed rates instead (phases `…_rateN`, ρ = rate ÷ X*, no goal judged), to compare stores or builds of
//!    different X* at the same offered load.
//!
//! 7. with `--stream-mb MIB`: `stream_put`, `saltblob put KEY -` of MIB MiB in a child process, which reports its
//!    peak resident memory.
//!
//! **On an S3 endpoint** (`--store s3+http://HOST:PORT/BUCKET`, or `s3+https://`; feature `s3`, on by default):
//! the phases of `--mixed` only, through object_store's S3 client (credentials from `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`, client settings as the URL's query, `%XX`-decoded), with the cluster's excess
//! allowances; the large loops are a second client on threads of their own. `saltblob serve` and any S3 service
//! alike.
//!
//! The large phases also report the process's CPU seconds per GiB, read against the CPU floor of a put measured
//! in the same run ([`cpu::CpuSteps`]: BLAKE3, CRC32C and one copy per byte).
//!
//! Each phase reports op count, bytes, wall time, MiB/s, HDR-histogram latency percentiles and errors, printed
//! as a cassandra-stress-like block, then a side-by-side table and the ratios of `BENCHMARKS.md`; `--json` and
//! `--plot` write the same data. The bench deletes its keys at the end unless `--keep`.
//!
//! **Listing** (`saltblob bench --listing`): listings and passes, measured at each of `--listing-sizes` blob
//! counts instead of the phases above ([`listing`]).
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
//! Each module uses only those listed before it (no import circles).
//! - `args`: [`BenchArgs`], [`ProbeArgs`], [`ProbeOptions`], and the probe settings resolved from them;
//!   `output`: writing `--json` files; `progress`: progress bars.
//! - [`stats`]: HDR latency recording and per-phase results; [`cpu`]: process CPU time and the CPU floor of a put.
//! - [`device`]: which block device holds a directory, and its sector sizes.
//! - `direct`: the O_DIRECT bandwidth of the device behind an embedded store; `rows`: single-row throughput
//!   through any other backend; `reference`: [`ProbeReport`], either of them, for a store URL.
//! - `scheduler_trace`: what the store's scheduler did during a paced phase; `wakeup`: the wake-up lag of the
//!   bench's runtime and of a thread outside it during a paced phase.
//! - `isolation`: the per-class figures and ratios of `--mixed`; `results`: [`BenchReport`] and the other report
//!   types of a bench run.
//! - `plan`: the bench's sizes and counts, validated; `payload`: stamped payloads and how a read is checked;
//!   `s3`: an S3 endpoint as the bench's target (object_store's client); `target`: where the load drivers'
//!   operations go (the bench's store or an S3 bucket);
//!   `load`: load drivers (count-bound, time-bound, background); `paced`: the open-loop driver; `mixed`: the
//!   isolation phases; `phases`: the phase runners and the clean-up; `stream`: the streaming put in a child
//!   process; `ratios`: the figures of `BENCHMARKS.md`.
//! - [`listing`]: `--listing`, the cost of listings and passes as the store grows.
//! - [`background`]: `--background`, gc's background work at cluster scale (sharded records, shared leases).
//! - [`s3_put`]: `--s3-put`, a put through the S3 server beside the same put made directly.
//! - [`report`]: the text output; [`plot`]: the SVG chart.
//! - [`bench`](mod@bench) and [`probe`](mod@probe): the two commands, which run the above in order and print.

mod args;
pub mod background;
pub mod bench;
pub mod cpu;
pub mod device;
mod direct;
mod isolation;
pub mod listing;
mod load;
mod mixed;
mod output;
mod paced;
mod payload;
mod phases;
mod plan;
pub mod plot;
pub mod probe;
mod progress;
mod ratios;
mod reference;
pub mod report;
mod results;
mod rows;
#[cfg(feature = "s3")]
mod s3;
#[cfg(feature = "s3")]
pub mod s3_put;
mod scheduler_trace;
pub mod stats;
mod stream;
mod target;
mod wakeup;

pub use args::{BenchArgs, ProbeArgs, ProbeOptions};
pub use background::{BackgroundRun, background_bench};
pub use bench::{BenchReport, bench};
pub use listing::{ListingRun, listing_bench};
pub use probe::{ProbeReport, probe};
#[cfg(feature = "s3")]
pub use s3_put::{S3PutRun, s3_put_bench};
pub use stats::{Latency, PhaseReport};
