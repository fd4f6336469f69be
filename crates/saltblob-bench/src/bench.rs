//! `saltblob bench`: the salting article's experiment on any store, with the probe's reference in the same run.
//!
//! The bench opens its own [`BlobStore`] on the URL with the layout flags and a grace period of zero, so that
//! the versions it replaces and deletes are reclaimed by its clean-up at the end (no reclaim runs while it
//! measures). Keys live under `saltblob-bench/<run id>/`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use saltblob::codec::CHUNK_HEADER_LEN;
use saltblob::layout::MIN_CHUNK_SIZE;
use saltblob::{
    BackendInfo, BlobRef, BlobStore, ChunkId, ChunkStore, ChunkWrite, Error, Layout, LayoutPolicy,
    PutOptions, Result, StoreConfig, VersionId,
};
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;

use crate::probe::{self, ProbeReport, Settings};
use crate::progress::Progress;
use crate::stats::{MIB, PhaseReport, Tally};
use crate::{BenchArgs, plot, report, write_output};

/// Everything a bench run measured: printed as text, written as JSON with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// The store URL.
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
    /// What the clean-up did.
    pub cleanup: Cleanup,
    /// The parsed reference, for the ratios.
    #[serde(skip)]
    pub reference_report: Option<ProbeReport>,
}

/// The parameters of a run, as resolved (defaults filled in).
#[derive(Clone, Debug, Serialize)]
pub struct BenchConfig {
    /// The backend's name.
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

/// What one operation of a phase did.
enum Outcome {
    /// Succeeded, moving this many bytes.
    Done(u64),
    /// Failed.
    Failed(String),
    /// Read back something other than what was written.
    Wrong(String),
}

impl Tally {
    fn add(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Done(bytes) => self.ok(latency, bytes),
            Outcome::Failed(m) => self.fail(m),
            Outcome::Wrong(m) => self.unverified(m),
        }
    }
}

/// Phase tags stamped into the data, so that a read can tell whose bytes it got.
const TAG_LARGE: u64 = 1;
const TAG_SMALL: u64 = 2;
const TAG_UNCHUNKED: u64 = 3;
const TAG_MIXED: u64 = 4;
const TAG_BACKGROUND: u64 = 5;
/// Bytes of the stamp at the start of every value.
const STAMP_LEN: usize = 16;
/// Small keys of the mixed phases, at most.
const MIXED_POOL: u64 = 1000;

/// `saltblob bench`: runs the phases on the store at `url`, prints the results, writes `--json` and `--plot`.
/// Progress bars appear on a terminal unless `quiet`. Failed operations are results (counted, with their
/// messages), not errors; an error is returned only when the bench cannot run at all (bad flags, store not
/// reachable, output file not writable).
pub async fn bench(url: &str, args: &BenchArgs, quiet: bool) -> Result<BenchReport> {
    let plan = Plan::new(args)?;
    let backend = saltblob::open_backend(url).await?;
    let info = backend.info();
    let mut policy = LayoutPolicy::default();
    if let Some(cs) = plan.chunk_size {
        policy = policy.with_chunk_size(cs);
    }
    if let Some(s) = args.max_salt {
        policy = policy.with_max_salt(s);
    }
    let inflight = StoreConfig::default()
        .inflight_bytes
        .max(4 * policy.chunk_size as usize);
    let config = StoreConfig::default()
        .with_policy(policy.clone())
        .with_inflight_bytes(inflight)
        .with_grace(Duration::ZERO);
    let store = BlobStore::new(Arc::clone(&backend), config)?;
    let run_id = VersionId::generate().to_string();
    let largest_chunk = u64::from(info.max_chunk_bytes).saturating_sub(CHUNK_HEADER_LEN as u64);
    let config = BenchConfig {
        backend: info.name,
        run_id: run_id.clone(),
        count: args.count,
        large_mb: args.large_mb,
        large_bytes: plan.large_bytes,
        large_layout: describe_layout(&policy.layout_for(plan.large_bytes)),
        chunk_size: policy.chunk_size,
        max_salt: policy.max_salt,
        small_kb: args.small_kb,
        small_bytes: plan.small_bytes,
        small_layout: describe_layout(&policy.layout_for(plan.small_bytes)),
        small_count: plan.small_count,
        concurrency: args.concurrency,
        unchunked: args.unchunked,
        mixed_seconds: args.mixed,
        largest_chunk_bytes: largest_chunk,
        probe_size: args.probe.probe_size,
        probe_seconds: args.probe.probe_seconds,
        keep: args.keep,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    println!("{}", report::bench_header(url, &config));

    let settings = Settings {
        options: args.probe.clone(),
        concurrency: args.concurrency,
        value_bytes: u64::from(policy.chunk_size),
        quiet,
    };
    let (reference, reference_report) = if args.no_probe {
        (serde_json::Value::Null, None)
    } else {
        match probe::measure(url, &backend, &settings).await {
            Ok(r) => {
                print!("{}", report::probe_text(&r));
                println!();
                (serde_json::to_value(&r).unwrap_or_default(), Some(r))
            }
            Err(e) => {
                eprintln!("saltblob: warning: the reference probe failed: {e}");
                (json!({ "error": e.to_string() }), None)
            }
        }
    };

    let run = Run {
        store,
        backend,
        info,
        plan,
        prefix: format!("saltblob-bench/{run_id}/"),
        tag: rand::random::<u64>() & 0x00ff_ffff_ffff_ffff,
        concurrency: args.concurrency,
        quiet,
        large_base: random_bytes(args_large(args)),
        small_base: random_bytes(usize::try_from(args.small_kb << 10).unwrap_or(0)),
    };
    let mut phases = Vec::new();
    let mut raw_values = Vec::new();
    let show = |p: PhaseReport, phases: &mut Vec<PhaseReport>| {
        println!("{}", report::phase_block(&p));
        phases.push(p);
    };
    show(run.large_write().await, &mut phases);
    show(run.large_read().await, &mut phases);
    show(run.small_write().await?, &mut phases);
    show(run.small_read().await?, &mut phases);
    if args.unchunked {
        let (w, r, raw) = run.unchunked(largest_chunk).await;
        raw_values = raw;
        show(w, &mut phases);
        show(r, &mut phases);
    }
    if let Some(seconds) = args.mixed {
        let (alone, loaded) = run.mixed(seconds).await?;
        show(alone, &mut phases);
        show(loaded, &mut phases);
    }
    let cleanup = if args.keep {
        Cleanup::default()
    } else {
        run.cleanup(&raw_values).await
    };
    for p in &cleanup.problems {
        eprintln!("saltblob: warning: clean-up: {p}");
    }

    let ratios = ratios(&phases, reference_report.as_ref(), &run.plan, largest_chunk);
    let report = BenchReport {
        store: url.to_owned(),
        config,
        reference,
        phases,
        ratios,
        cleanup,
        reference_report,
    };
    println!("{}", report::summary_table(&report));
    println!("{}", report::ratios_text(&report.ratios));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::invalid("json", e.to_string()))?;
        write_output(path, &text)?;
    }
    if let Some(path) = &args.plot {
        plot::draw(path, &report)?;
    }
    Ok(report)
}

fn args_large(args: &BenchArgs) -> usize {
    usize::try_from(args.large_mb << 20).unwrap_or(0)
}

/// Sizes and counts, validated.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    count: u64,
    large_bytes: u64,
    small_bytes: u64,
    small_count: u64,
    chunk_size: Option<u32>,
    mixed: Option<Duration>,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Self> {
        if args.count == 0 || args.count > 1_000_000 {
            return Err(Error::invalid(
                "count",
                format!("{}; it must be 1 to 1000000", args.count),
            ));
        }
        if args.large_mb == 0 || args.large_mb > 64 << 10 {
            return Err(Error::invalid(
                "large blob size",
                format!(
                    "{} MiB; it must be 1 to 65536 MiB (and fit in memory twice)",
                    args.large_mb
                ),
            ));
        }
        if args.small_kb == 0 || args.small_kb > args.large_mb << 10 {
            return Err(Error::invalid(
                "small blob size",
                format!(
                    "{} KiB; it must be 1 KiB to the large size ({} MiB)",
                    args.small_kb, args.large_mb
                ),
            ));
        }
        if args.concurrency == 0 || args.concurrency > 4096 {
            return Err(Error::invalid(
                "concurrency",
                format!("{}; it must be 1 to 4096", args.concurrency),
            ));
        }
        let chunk_size = args
            .chunk_size
            .map(|cs| {
                u32::try_from(cs).map_err(|_| {
                    Error::invalid("chunk size", format!("{cs} bytes; it must fit in 32 bits"))
                })
            })
            .transpose()?;
        let mixed = args
            .mixed
            .map(|s| {
                if s.is_finite() && s > 0.0 && s <= 86_400.0 {
                    Ok(Duration::from_secs_f64(s))
                } else {
                    Err(Error::invalid(
                        "mixed duration",
                        format!("{s} seconds; it must be more than 0 and at most 86400"),
                    ))
                }
            })
            .transpose()?;
        if let Some(path) = &args.plot {
            let svg = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
            if !svg {
                return Err(Error::invalid(
                    "plot file",
                    format!(
                        "{}: plots are drawn as SVG; name the file *.svg (a browser or `rsvg-convert` turns it into PNG)",
                        path.display()
                    ),
                ));
            }
        }
        let large_bytes = args.large_mb << 20;
        let small_bytes = args.small_kb << 10;
        Ok(Self {
            count: args.count,
            large_bytes,
            small_bytes,
            small_count: (args.count * large_bytes).div_ceil(small_bytes),
            chunk_size,
            mixed,
        })
    }
}

fn describe_layout(layout: &Layout) -> String {
    match layout {
        Layout::Inline => "inline in the manifest".to_owned(),
        Layout::Chunked(l) => format!(
            "{} chunk(s) of {} KiB over {} salt(s)",
            l.chunk_count,
            l.chunk_size >> 10,
            l.salt_count
        ),
    }
}

fn random_bytes(len: usize) -> Bytes {
    let mut v = vec![0u8; len];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut v);
    Bytes::from(v)
}

/// The first bytes of every value: run tag + phase tag, and the index.
fn stamp_bytes(run_tag: u64, phase: u64, index: u64) -> [u8; STAMP_LEN] {
    let mut s = [0u8; STAMP_LEN];
    let (a, b) = s.split_at_mut(8);
    a.copy_from_slice(&(run_tag | (phase << 56)).to_le_bytes());
    b.copy_from_slice(&index.to_le_bytes());
    s
}

/// A copy of `base` that starts with the stamp of (`phase`, `index`).
fn stamped(base: &Bytes, run_tag: u64, phase: u64, index: u64) -> Bytes {
    let mut v = base.to_vec();
    let stamp = stamp_bytes(run_tag, phase, index);
    let n = v.len().min(STAMP_LEN);
    if let (Some(dst), Some(src)) = (v.get_mut(..n), stamp.get(..n)) {
        dst.copy_from_slice(src);
    }
    Bytes::from(v)
}

/// Checks a read: its length and its stamp (its content was verified against the manifest digest by the read).
fn check(got: &Bytes, len: u64, run_tag: u64, phase: u64, index: u64) -> Outcome {
    let stamp = stamp_bytes(run_tag, phase, index);
    let n = (len as usize).min(STAMP_LEN);
    if got.len() as u64 != len {
        Outcome::Wrong(format!("read {} bytes, {len} were written", got.len()))
    } else if got.get(..n) != stamp.get(..n) {
        Outcome::Wrong("read bytes that another write stored (stamp differs)".to_owned())
    } else {
        Outcome::Done(len)
    }
}

struct Run {
    store: BlobStore,
    backend: Arc<dyn ChunkStore>,
    info: BackendInfo,
    plan: Plan,
    prefix: String,
    tag: u64,
    concurrency: usize,
    quiet: bool,
    large_base: Bytes,
    small_base: Bytes,
}

impl Run {
    fn key(&self, kind: &str, index: u64) -> String {
        format!("{}{kind}/{index:07}", self.prefix)
    }

    async fn large_write(&self) -> PhaseReport {
        let plan = &self.plan;
        let mut progress = Progress::new("large_write", plan.count, "blobs", self.quiet);
        let mut tally = Tally::default();
        let mut busy = Duration::ZERO;
        for i in 0..plan.count {
            let data = stamped(&self.large_base, self.tag, TAG_LARGE, i);
            let t = Instant::now();
            let result = self
                .store
                .put(self.key("large", i), data, &PutOptions::new())
                .await;
            let elapsed = t.elapsed();
            busy += elapsed;
            tally.add(
                match result {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
                elapsed,
            );
            progress.inc(1);
        }
        progress.finish();
        tally.report(
            "large_write",
            format!(
                "{} puts of {} MiB, one at a time",
                plan.count,
                plan.large_bytes >> 20
            ),
            busy.as_secs_f64(),
            false,
        )
    }

    async fn large_read(&self) -> PhaseReport {
        let plan = &self.plan;
        let mut progress = Progress::new("large_read", plan.count, "blobs", self.quiet);
        let mut tally = Tally::default();
        let mut busy = Duration::ZERO;
        for i in 0..plan.count {
            let t = Instant::now();
            let result = self.store.get(self.key("large", i)).await;
            let elapsed = t.elapsed();
            busy += elapsed;
            let outcome = match result {
                Ok(got) => check(&got, plan.large_bytes, self.tag, TAG_LARGE, i),
                Err(e) => Outcome::Failed(e.to_string()),
            };
            tally.add(outcome, elapsed);
            progress.inc(1);
        }
        progress.finish();
        tally.report(
            "large_read",
            format!(
                "{} gets of {} MiB, one at a time, BLAKE3 digest verified",
                plan.count,
                plan.large_bytes >> 20
            ),
            busy.as_secs_f64(),
            true,
        )
    }

    async fn small_write(&self) -> Result<PhaseReport> {
        let plan = &self.plan;
        let (store, base, tag, prefix) = (
            self.store.clone(),
            self.small_base.clone(),
            self.tag,
            self.prefix.clone(),
        );
        let progress = Progress::new("small_write", plan.small_count, "blobs", self.quiet);
        let (tally, seconds) =
            run_concurrent(self.concurrency, plan.small_count, &progress, move |i| {
                let (store, data) = (store.clone(), stamped(&base, tag, TAG_SMALL, i));
                let key = format!("{prefix}small/{i:07}");
                async move {
                    match store.put(key, data, &PutOptions::new()).await {
                        Ok(m) => Outcome::Done(m.size),
                        Err(e) => Outcome::Failed(e.to_string()),
                    }
                }
            })
            .await?;
        progress.finish();
        Ok(tally.report(
            "small_write",
            format!(
                "{} puts of {} KiB, {} in flight",
                plan.small_count,
                plan.small_bytes >> 10,
                self.concurrency
            ),
            seconds,
            false,
        ))
    }

    async fn small_read(&self) -> Result<PhaseReport> {
        let plan = &self.plan;
        let (store, tag, prefix, len) = (
            self.store.clone(),
            self.tag,
            self.prefix.clone(),
            plan.small_bytes,
        );
        let progress = Progress::new("small_read", plan.small_count, "blobs", self.quiet);
        let (tally, seconds) =
            run_concurrent(self.concurrency, plan.small_count, &progress, move |i| {
                let store = store.clone();
                let key = format!("{prefix}small/{i:07}");
                async move {
                    match store.get(key).await {
                        Ok(got) => check(&got, len, tag, TAG_SMALL, i),
                        Err(e) => Outcome::Failed(e.to_string()),
                    }
                }
            })
            .await?;
        progress.finish();
        Ok(tally.report(
            "small_read",
            format!(
                "{} gets of {} KiB, {} in flight, BLAKE3 digest verified",
                plan.small_count,
                plan.small_bytes >> 10,
                self.concurrency
            ),
            seconds,
            true,
        ))
    }

    /// Each large blob as one value. Through saltblob (one chunk of the blob's size, one salt) when the
    /// backend's largest chunk allows; otherwise as one raw value written straight to the backend (the
    /// article's one-CQL-row baseline), so that the server itself accepts or refuses it. Returns the raw values
    /// written, for the clean-up.
    async fn unchunked(&self, largest_chunk: u64) -> (PhaseReport, PhaseReport, Vec<BlobRef>) {
        let plan = &self.plan;
        let size = plan.large_bytes;
        let through_saltblob = size <= largest_chunk && size >= u64::from(MIN_CHUNK_SIZE);
        let mut raw = Vec::new();
        let mut write = Tally::default();
        let mut read = Tally::default();
        let (mut write_busy, mut read_busy) = (Duration::ZERO, Duration::ZERO);
        let mut progress = Progress::new("unchunked_write", plan.count, "blobs", self.quiet);
        for i in 0..plan.count {
            let data = stamped(&self.large_base, self.tag, TAG_UNCHUNKED, i);
            let key = self.key("unchunked", i);
            let t = Instant::now();
            let outcome = if through_saltblob {
                let opts = PutOptions::new()
                    .with_chunk_size(u32::try_from(size).unwrap_or(u32::MAX))
                    .with_max_salt(1);
                match self.store.put(&key, data, &opts).await {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            } else {
                let blob = BlobRef {
                    key: Bytes::from(key),
                    version: VersionId::generate(),
                };
                let one = ChunkWrite {
                    salt: 0,
                    index: 0,
                    data,
                };
                raw.push(blob.clone());
                match self.backend.put_chunks(&blob, vec![one]).await {
                    Ok(()) => Outcome::Done(size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            let elapsed = t.elapsed();
            write_busy += elapsed;
            write.add(outcome, elapsed);
            progress.inc(1);
        }
        progress.finish();

        let mut progress = Progress::new("unchunked_read", plan.count, "blobs", self.quiet);
        for i in 0..plan.count {
            let key = self.key("unchunked", i);
            let t = Instant::now();
            let outcome = if through_saltblob {
                match self.store.get(&key).await {
                    Ok(got) => check(&got, size, self.tag, TAG_UNCHUNKED, i),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            } else {
                let Some(blob) = usize::try_from(i).ok().and_then(|i| raw.get(i)) else {
                    continue;
                };
                match self
                    .backend
                    .get_chunks(blob, &[ChunkId { salt: 0, index: 0 }])
                    .await
                {
                    Ok(slots) => match slots.into_iter().next().flatten() {
                        Some(got) => check(&got, size, self.tag, TAG_UNCHUNKED, i),
                        None => Outcome::Failed(
                            "not found (the write of this value did not succeed)".to_owned(),
                        ),
                    },
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            };
            let elapsed = t.elapsed();
            read_busy += elapsed;
            read.add(outcome, elapsed);
            progress.inc(1);
        }
        progress.finish();

        let mib = size >> 20;
        let (mode, how) = if through_saltblob {
            (
                "saltblob_single_chunk",
                format!("through saltblob as one {mib} MiB chunk in one salt"),
            )
        } else {
            (
                "raw_single_value",
                format!(
                    "{mib} MiB is over the {} backend's largest chunk ({largest_chunk} bytes): written as one raw \
                     value straight to the backend, as the article's one-row baseline, so the server decides",
                    self.info.name
                ),
            )
        };
        let details = json!({
            "mode": mode,
            "value_bytes": size,
            "largest_chunk_bytes": largest_chunk,
            "how": how,
        });
        let mut w = write.report(
            "unchunked_write",
            format!(
                "{} puts of {mib} MiB as ONE value each, one at a time",
                plan.count
            ),
            write_busy.as_secs_f64(),
            false,
        );
        let mut r = read.report(
            "unchunked_read",
            format!(
                "{} gets of {mib} MiB stored as ONE value each, one at a time",
                plan.count
            ),
            read_busy.as_secs_f64(),
            true,
        );
        w.details = Some(details.clone());
        r.details = Some(details);
        (w, r, raw)
    }

    /// Small gets and puts for `seconds`, alone, then while large blobs are written, read and deleted in a loop.
    async fn mixed(&self, seconds: f64) -> Result<(PhaseReport, PhaseReport)> {
        let duration = self.plan.mixed.unwrap_or(Duration::from_secs_f64(seconds));
        let pool = self
            .plan
            .small_count
            .clamp(self.concurrency as u64, MIXED_POOL);
        // The keys the mixed phases read and overwrite, written first (not measured).
        let (store, base, tag, prefix) = (
            self.store.clone(),
            self.small_base.clone(),
            self.tag,
            self.prefix.clone(),
        );
        let progress = Progress::new("mixed (preload)", pool, "blobs", self.quiet);
        let (preload, _) = run_concurrent(self.concurrency, pool, &progress, move |i| {
            let (store, data) = (store.clone(), stamped(&base, tag, TAG_MIXED, i));
            let key = format!("{prefix}mixed/{i:07}");
            async move {
                match store.put(key, data, &PutOptions::new()).await {
                    Ok(m) => Outcome::Done(m.size),
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
        })
        .await?;
        progress.finish();
        if preload.errors > 0 {
            eprintln!(
                "saltblob: warning: {} of {pool} keys of the mixed phases could not be written: {}",
                preload.errors,
                preload.messages.join("; ")
            );
        }

        let alone = self.small_mix("small_alone", duration, pool, None).await?;

        let stop = Arc::new(AtomicBool::new(false));
        let background = tokio::spawn(background_load(
            self.store.clone(),
            self.large_base.clone(),
            self.tag,
            self.prefix.clone(),
            Arc::clone(&stop),
        ));
        let loaded = self
            .small_mix("small_under_load", duration, pool, Some(stop))
            .await;
        let load = background
            .await
            .map_err(|e| Error::backend("bench", format!("background task failed: {e}"), false))?;
        let mut loaded = loaded?;
        if let Some(details) = loaded.details.as_mut().and_then(|d| d.as_object_mut()) {
            details.insert("background".into(), load);
        }
        Ok((alone, loaded))
    }

    async fn small_mix(
        &self,
        name: &'static str,
        duration: Duration,
        pool: u64,
        stop: Option<Arc<AtomicBool>>,
    ) -> Result<PhaseReport> {
        let (store, base, tag, prefix, len) = (
            self.store.clone(),
            self.small_base.clone(),
            self.tag,
            self.prefix.clone(),
            self.plan.small_bytes,
        );
        let gets = Arc::new(AtomicU64::new(0));
        let puts = Arc::new(AtomicU64::new(0));
        let (g, p) = (Arc::clone(&gets), Arc::clone(&puts));
        let progress = Progress::timed(name, Some(duration.as_secs_f64()), self.quiet);
        let (tally, seconds) = run_timed(self.concurrency, duration, &progress, move |n| {
            let store = store.clone();
            let k = rand::random_range(0..pool);
            let key = format!("{prefix}mixed/{k:07}");
            let put = n % 2 == 1;
            let data = put.then(|| stamped(&base, tag, TAG_MIXED, k));
            let (g, p) = (Arc::clone(&g), Arc::clone(&p));
            async move {
                match data {
                    Some(data) => {
                        p.fetch_add(1, Ordering::Relaxed);
                        match store.put(key, data, &PutOptions::new()).await {
                            Ok(m) => Outcome::Done(m.size),
                            Err(e) => Outcome::Failed(e.to_string()),
                        }
                    }
                    None => {
                        g.fetch_add(1, Ordering::Relaxed);
                        match store.get(key).await {
                            Ok(got) => check(&got, len, tag, TAG_MIXED, k),
                            Err(e) => Outcome::Failed(e.to_string()),
                        }
                    }
                }
            }
        })
        .await?;
        if let Some(stop) = stop {
            stop.store(true, Ordering::Relaxed);
        }
        progress.finish();
        let load = if name == "small_alone" {
            "alone"
        } else {
            "while large blobs are written, read and deleted in a loop"
        };
        let mut report = tally.report(
            name,
            format!(
                "{:.0} s of small gets and puts (half each) of {} KiB on {pool} keys, {} in flight, {load}",
                duration.as_secs_f64(),
                len >> 10,
                self.concurrency
            ),
            seconds,
            true,
        );
        report.details = Some(json!({
            "gets": gets.load(Ordering::Relaxed),
            "puts": puts.load(Ordering::Relaxed),
            "pool_keys": pool,
        }));
        Ok(report)
    }

    /// Deletes every key under the run's prefix and the raw values, then reclaims their chunks (grace 0).
    async fn cleanup(&self, raw: &[BlobRef]) -> Cleanup {
        let mut out = Cleanup::default();
        let progress = Progress::timed("clean-up", None, self.quiet);
        loop {
            let page = match self
                .store
                .list_page(self.prefix.as_bytes(), None, 1000)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    out.problems
                        .push(format!("listing the bench's keys failed: {e}"));
                    break;
                }
            };
            if page.is_empty() {
                break;
            }
            let results: Vec<Result<Option<VersionId>>> = futures::stream::iter(page)
                .map(|entry| {
                    let store = self.store.clone();
                    async move { store.delete(&entry.key).await }
                })
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            let (mut failed, mut deleted) = (0, 0);
            for r in results {
                match r {
                    Ok(_) => deleted += 1,
                    Err(e) => {
                        failed += 1;
                        if out.problems.len() < 5 {
                            out.problems.push(format!("delete failed: {e}"));
                        }
                    }
                }
            }
            out.deleted_keys += deleted;
            progress.handle().inc(deleted);
            if failed > 0 {
                break;
            }
        }
        for blob in raw {
            match self.backend.delete_chunks(blob, 1, 1).await {
                Ok(()) => out.deleted_raw_values += 1,
                Err(e) => out
                    .problems
                    .push(format!("deleting a raw value failed: {e}")),
            }
        }
        match self.store.reclaim_due().await {
            Ok(r) => out.reclaimed_chunks = r.chunks,
            Err(e) => out
                .problems
                .push(format!("reclaim failed (the next command retries): {e}")),
        }
        progress.finish();
        out
    }
}

/// Writes, reads (verifying) and deletes large blobs one after another until `stop`; returns what it did.
async fn background_load(
    store: BlobStore,
    base: Bytes,
    tag: u64,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> serde_json::Value {
    let started = Instant::now();
    let (mut puts, mut gets, mut bytes, mut tally) = (0u64, 0u64, 0u64, Tally::default());
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{prefix}mixed-large/{n:07}");
        let data = stamped(&base, tag, TAG_BACKGROUND, n);
        let len = data.len() as u64;
        let t = Instant::now();
        match store.put(&key, data, &PutOptions::new()).await {
            Ok(_) => {
                puts += 1;
                bytes += len;
                tally.ok(t.elapsed(), len);
            }
            Err(e) => tally.fail(e.to_string()),
        }
        if !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            match store.get(&key).await {
                Ok(got) => match check(&got, len, tag, TAG_BACKGROUND, n) {
                    Outcome::Done(b) => {
                        gets += 1;
                        bytes += b;
                        tally.ok(t.elapsed(), b);
                    }
                    Outcome::Failed(m) | Outcome::Wrong(m) => tally.fail(m),
                },
                Err(e) => tally.fail(e.to_string()),
            }
        }
        if let Err(e) = store.delete(&key).await {
            tally.fail(e.to_string());
        }
        n += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let latency = tally.latencies.latency();
    json!({
        "large_puts": puts,
        "large_gets": gets,
        "bytes": bytes,
        "seconds": seconds,
        "throughput_mib_s": if seconds > 0.0 { bytes as f64 / MIB / seconds } else { 0.0 },
        "errors": tally.errors,
        "error_messages": tally.messages,
        "large_op_p99_ms": latency.map(|l| l.p99),
    })
}

/// Runs `op(0..total)` with `concurrency` operations in flight; returns the merged tally and the wall time.
async fn run_concurrent<F, Fut>(
    concurrency: usize,
    total: u64,
    progress: &Progress,
    op: F,
) -> Result<(Tally, f64)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..concurrency {
        let (op, next, bar) = (Arc::clone(&op), Arc::clone(&next), progress.handle());
        set.spawn(async move {
            let mut tally = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // The value is prepared when the future is made, before the clock starts.
                let fut = op(i);
                let t = Instant::now();
                let outcome = fut.await;
                tally.add(outcome, t.elapsed());
                bar.inc(1);
            }
            tally
        });
    }
    join_all(set, started).await
}

/// Runs `op(n)` (n counts each worker's operations) with `concurrency` in flight for `duration`.
async fn run_timed<F, Fut>(
    concurrency: usize,
    duration: Duration,
    progress: &Progress,
    op: F,
) -> Result<(Tally, f64)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let mut set = JoinSet::new();
    for worker in 0..concurrency {
        let (op, bar) = (Arc::clone(&op), progress.handle());
        set.spawn(async move {
            let mut tally = Tally::default();
            let mut n = worker as u64;
            while started.elapsed() < duration {
                let fut = op(n);
                let t = Instant::now();
                let outcome = fut.await;
                tally.add(outcome, t.elapsed());
                bar.inc(1);
                n += 1;
            }
            tally
        });
    }
    join_all(set, started).await
}

async fn join_all(mut set: JoinSet<Tally>, started: Instant) -> Result<(Tally, f64)> {
    let mut tally = Tally::default();
    while let Some(done) = set.join_next().await {
        let t =
            done.map_err(|e| Error::backend("bench", format!("worker task failed: {e}"), false))?;
        tally.merge(&t);
    }
    Ok((tally, started.elapsed().as_secs_f64()))
}

/// The figures of BENCHMARKS.md.
pub(crate) fn ratios(
    phases: &[PhaseReport],
    reference: Option<&ProbeReport>,
    plan: &Plan,
    largest_chunk: u64,
) -> Vec<Ratio> {
    let phase = |name: &str| phases.iter().find(|p| p.name == name && p.ops > 0);
    let lat = |name: &str| phase(name).and_then(|p| p.latency_ms);
    let ref_name = match reference {
        Some(ProbeReport::Device(_)) => "device O_DIRECT bandwidth",
        Some(ProbeReport::Rows(_)) => "single-row throughput",
        None => "reference",
    };
    let mut out = Vec::new();
    let no_ref = "no reference (probe skipped or failed)".to_owned();
    for (name, what, phase_name, reference_bw) in [
        (
            "large_write_vs_reference",
            "large-blob write throughput ÷ reference write bandwidth",
            "large_write",
            reference.map(ProbeReport::write_mib_s),
        ),
        (
            "large_read_vs_reference",
            "large-blob read throughput ÷ reference read bandwidth",
            "large_read",
            reference.map(ProbeReport::read_mib_s),
        ),
    ] {
        let (value, computed) = match (phase(phase_name), reference_bw.filter(|b| *b > 0.0)) {
            (Some(p), Some(bw)) => (
                Some(p.throughput_mib_s / bw),
                format!(
                    "{:.1} MiB/s ÷ {bw:.1} MiB/s ({ref_name})",
                    p.throughput_mib_s
                ),
            ),
            (None, _) => (None, format!("{phase_name} has no successful operation")),
            (_, None) => (None, no_ref.clone()),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    let mib = plan.large_bytes as f64 / MIB;
    for (name, what, phase_name, reference_bw) in [
        (
            "large_put_p99_vs_ideal",
            "P99 of one large put ÷ (large size ÷ reference write bandwidth)",
            "large_write",
            reference.map(ProbeReport::write_mib_s),
        ),
        (
            "large_get_p99_vs_ideal",
            "P99 of one large get ÷ (large size ÷ reference read bandwidth)",
            "large_read",
            reference.map(ProbeReport::read_mib_s),
        ),
    ] {
        let (value, computed) = match (lat(phase_name), reference_bw.filter(|b| *b > 0.0)) {
            (Some(l), Some(bw)) => {
                let ideal_ms = mib / bw * 1e3;
                (
                    Some(l.p99 / ideal_ms),
                    format!(
                        "{:.1} ms ÷ ({mib:.0} MiB ÷ {bw:.1} MiB/s = {ideal_ms:.1} ms)",
                        l.p99
                    ),
                )
            }
            (None, _) => (None, format!("{phase_name} has no successful operation")),
            (_, None) => (None, no_ref.clone()),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    for (name, what, phase_name) in [
        (
            "large_write_p99_over_p50",
            "large-blob put P99 ÷ P50 (tail tightness)",
            "large_write",
        ),
        (
            "large_read_p99_over_p50",
            "large-blob get P99 ÷ P50 (tail tightness)",
            "large_read",
        ),
    ] {
        let (value, computed) = match lat(phase_name) {
            Some(l) if l.p50 > 0.0 => (
                Some(l.p99 / l.p50),
                format!("{:.1} ms ÷ {:.1} ms", l.p99, l.p50),
            ),
            _ => (None, format!("{phase_name} has no successful operation")),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    for (name, what, chunked, unchunked) in [
        (
            "chunked_over_unchunked_write_p99",
            "chunked ÷ unchunked put P99 (same size)",
            "large_write",
            "unchunked_write",
        ),
        (
            "chunked_over_unchunked_read_p99",
            "chunked ÷ unchunked get P99 (same size)",
            "large_read",
            "unchunked_read",
        ),
    ] {
        let ran = phases.iter().find(|p| p.name == unchunked);
        let (value, computed) = match (lat(chunked), lat(unchunked), ran) {
            (Some(c), Some(u), _) if u.p99 > 0.0 => (
                Some(c.p99 / u.p99),
                format!("{:.1} ms ÷ {:.1} ms at {mib:.0} MiB", c.p99, u.p99),
            ),
            (_, _, None) => (None, "run with --unchunked".to_owned()),
            (_, None, Some(p)) => (
                None,
                format!(
                    "the backend refused {mib:.0} MiB as one value ({}); its largest chunk through saltblob is \
                     {largest_chunk} bytes: rerun with a smaller --large-mb",
                    p.error_messages
                        .first()
                        .map_or("no message", String::as_str)
                ),
            ),
            _ => (None, format!("{chunked} has no successful operation")),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    let (value, computed) = match (lat("small_under_load"), lat("small_alone")) {
        (Some(loaded), Some(alone)) if alone.p99 > 0.0 => (
            Some(loaded.p99 / alone.p99),
            format!("{:.2} ms ÷ {:.2} ms", loaded.p99, alone.p99),
        ),
        _ if !phases.iter().any(|p| p.name == "small_alone") => {
            (None, "run with --mixed SECONDS".to_owned())
        }
        _ => (None, "a mixed phase has no successful operation".to_owned()),
    };
    out.push(Ratio {
        name: "small_p99_under_load_over_alone",
        what: "small-op P99 under large-blob load ÷ small-op P99 alone",
        value,
        computed,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_tell_writes_apart() {
        let base = random_bytes(4096);
        let a = stamped(&base, 7, TAG_LARGE, 1);
        assert!(matches!(
            check(&a, 4096, 7, TAG_LARGE, 1),
            Outcome::Done(4096)
        ));
        assert!(matches!(
            check(&a, 4096, 7, TAG_LARGE, 2),
            Outcome::Wrong(_)
        ));
        assert!(matches!(
            check(&a, 4095, 7, TAG_LARGE, 1),
            Outcome::Wrong(_)
        ));
        assert_eq!(&a[STAMP_LEN..], &base[STAMP_LEN..]);
        // Values shorter than a stamp still work.
        let tiny = stamped(&random_bytes(3), 7, TAG_SMALL, 9);
        assert!(matches!(check(&tiny, 3, 7, TAG_SMALL, 9), Outcome::Done(3)));
    }
}
