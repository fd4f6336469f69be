//! What a bench run reports: [`BenchReport`], with the resolved [`BenchConfig`], the [`Ratio`]s, the
//! [`Isolation`] figures and the [`Cleanup`]. Printed by the `report` module, drawn by `plot`, written as JSON with `--json`.

use serde::Serialize;

use crate::cpu::CpuSteps;
use crate::isolation::Isolation;
use crate::reference::ProbeReport;
use crate::stats::PhaseReport;

/// Everything a bench run measured: printed as text, written as JSON with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The store URL, its password hidden ([`saltblob::redact_url`]).
    pub store: String,
    /// What was run.
    pub config: BenchConfig,
    /// The probe's result (the hardware or single-row reference), `{"error": ...}` if it failed, null with
    /// `--no-probe`.
    pub reference: serde_json::Value,
    /// One entry per phase, in the order run.
    pub phases: Vec<PhaseReport>,
    /// The figures of BENCHMARKS.md, computed from this run.
    pub ratios: Vec<Ratio>,
    /// Per-class latency and throughput alone and under load, and the isolation ratios; null without `--mixed`.
    pub isolation: Option<Isolation>,
    /// What the clean-up did.
    pub cleanup: Cleanup,
    /// One core's CPU seconds per GiB of each step a put cannot avoid (BLAKE3, CRC32C, one copy), measured at
    /// the end of the run: what `large_write`'s `cpu_seconds_per_gib` is read against.
    pub cpu_steps: CpuSteps,
    /// The parsed reference, for the ratios.
    #[serde(skip)]
    pub reference_report: Option<ProbeReport>,
}

/// [`BenchConfig::backend`] of a run on an S3 endpoint (`s3+http://…`).
pub const S3_BACKEND: &str = "s3";

/// The parameters of a run, as resolved (defaults filled in).
#[derive(Clone, Debug, Serialize)]
pub struct BenchConfig {
    /// The backend's name; [`S3_BACKEND`] for an S3 endpoint.
    pub backend: &'static str,
    /// Identifies this run's keys: `saltblob-bench/<run_id>/`.
    pub run_id: String,
    /// Large blobs.
    pub count: u64,
    /// Size of one large blob, MiB.
    pub large_mb: u64,
    /// Size of one large blob, bytes.
    pub large_bytes: u64,
    /// How a large blob is laid out, in words.
    pub large_layout: String,
    /// Chunk size of the large blobs.
    pub chunk_size: u32,
    /// Largest salt count of the large blobs.
    pub max_salt: u32,
    /// Size of one small blob, KiB.
    pub small_kb: u64,
    /// Size of one small blob, bytes.
    pub small_bytes: u64,
    /// How a small blob is laid out, in words.
    pub small_layout: String,
    /// Small blobs written (the large phases' byte volume).
    pub small_count: u64,
    /// Small operations in flight.
    pub concurrency: usize,
    /// Whether the unchunked phases ran.
    pub unchunked: bool,
    /// Seconds of each mixed phase, when they ran.
    pub mixed_seconds: Option<f64>,
    /// Concurrent large loops of the bulk phases of `--mixed`.
    pub large_writers: usize,
    /// The paced loads of `--mixed` (`--small-load`), as fractions of the small capacity; null without
    /// `--mixed` or with `--small-rate`.
    pub small_loads: Option<Vec<f64>>,
    /// The paced loads of `--mixed` at fixed rates (`--small-rate`), ops/s; null without it.
    pub small_rates: Option<Vec<f64>>,
    /// Small operations due in each paced phase, at least (`--paced-samples`).
    pub paced_samples: u64,
    /// Seconds a paced phase waits past its schedule for the operations due in it (`--paced-grace`).
    pub paced_grace_s: f64,
    /// The store's scheduler, from the URL's store-level parameters: `enabled`, `shares`, `default_class`,
    /// `limits`, `min_bulk_duty` and `bulk_unit_bytes`.
    pub scheduler: serde_json::Value,
    /// Largest value the backend takes as one chunk (the largest unchunked blob through saltblob).
    pub largest_chunk_bytes: u64,
    /// Probe file size or byte budget.
    pub probe_size: u64,
    /// Longest time of one probe measurement.
    pub probe_seconds: f64,
    /// Whether the keys were kept.
    pub keep: bool,
    /// CPUs available to this process.
    pub cpus: usize,
    /// Whether the write and read phases also ran on sealed blobs (`--encrypt`).
    pub encrypt: bool,
    /// Whether each sealed phase ran before its plaintext twin (`--sealed-first`).
    pub sealed_first: bool,
}

/// One figure of merit.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// Stable identifier.
    pub name: &'static str,
    /// What it measures.
    pub what: &'static str,
    /// The ratio, or null when this run cannot compute it (see `computed`).
    pub value: Option<f64>,
    /// The operands, or why it is missing.
    pub computed: String,
}

/// The bench's clean-up.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cleanup {
    /// Keys deleted.
    pub deleted_keys: u64,
    /// Raw (unchunked, outside saltblob) values deleted.
    pub deleted_raw_values: u64,
    /// Chunks reclaimed right away.
    pub reclaimed_chunks: u64,
    /// Problems met (the bench's results stand; leftovers are reclaimed by later runs or gc).
    pub problems: Vec<String>,
}
