//! `saltblob bench`: the salting article's experiment on any store, with the probe's reference in the same run.
//!
//! The bench opens its own [`BlobStore`] on the URL with the layout flags, the URL's store-level (scheduler)
//! parameters ([`saltblob::split_store_params`]) and a grace period of zero, so that the versions it replaces
//! and deletes are reclaimed by its clean-up at the end, and between the phases of `--mixed` that run large
//! loops (no reclaim runs while a phase measures). Keys live under `saltblob-bench/<run id>/`. This module runs
//! the phases in order and reports them; the report types are re-exported here.

use std::sync::Arc;
use std::time::Duration;

use saltblob::codec::CHUNK_HEADER_LEN;
use saltblob::encryption::{EncryptionConfig, Keyring, LocalProvider};
use saltblob::{BlobStore, ChunkStore, Error, Result, SchedulerConfig, StoreConfig, VersionId};
use serde_json::json;

use crate::args::{BenchArgs, Settings};
use crate::isolation::{Mixed, isolation};
use crate::mixed::Load;
use crate::output::write_output;
use crate::phases::Run;
use crate::plan::{Plan, describe_layout};
use crate::ratios::ratios;
use crate::reference;
use crate::stats::{PhaseReport, SEALED_SUFFIX};
use crate::target::Target;
use crate::{plot, report};

pub use crate::isolation::{
    ClassResult, Classes, Isolation, Paced, PacedGoals, PacedMet, PacedSide,
    SUSTAINABLE_GOODPUT_MIN, paced_goals,
};
pub use crate::results::{BenchConfig, BenchReport, Cleanup, Ratio, S3_BACKEND};
pub use crate::scheduler_trace::{ClassTrace, SchedulerTrace};

/// `saltblob bench`: runs the phases on the store at `url`, prints the results, writes `--json` and `--plot`.
/// Progress bars appear on a terminal unless `quiet`. Failed operations are results (counted, with their
/// messages), not errors; an error is returned only when the bench cannot run at all (bad flags, store not
/// reachable, output file not writable).
pub async fn bench(url: &str, args: &BenchArgs, quiet: bool) -> Result<BenchReport> {
    #[cfg(feature = "s3")]
    if crate::s3::is_s3_url(url) {
        return bench_s3(url, args, quiet).await;
    }
    let plan = Plan::new(args)?;
    // The store-level parameters of the URL (the scheduler's) configure the bench's store, the rest the backend.
    let (backend_url, store_config) = saltblob::split_store_params(url, StoreConfig::default())?;
    let backend = saltblob::open_backend(&backend_url).await?;
    let info = backend.info();
    // The URL's chunk sizes, if any, then the flags', resolved for the backend as the store does.
    let mut policy = store_config.policy.clone();
    if let Some(cs) = plan.chunk_size {
        policy = policy.with_single_chunk_size(cs);
    }
    if let Some(s) = args.max_salt {
        policy = policy.with_max_salt(s);
    }
    let policy = policy.resolve_for(info.large_chunk_size, info.max_partition_bytes);
    let inflight = store_config
        .inflight_bytes
        .max(4 * policy.chunk_size as usize);
    let scheduler = describe_scheduler(&store_config.scheduler);
    let config = store_config
        .with_policy(policy.clone())
        .with_inflight_bytes(inflight)
        .with_grace(Duration::ZERO);
    let sealed_keys = args
        .encrypt
        .then(|| BenchKeyring::new(&backend, &config))
        .transpose()?;
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
        large_writers: plan.large_writers,
        small_loads: args
            .mixed
            .map(|_| plan.small_loads())
            .filter(|l| !l.is_empty()),
        small_rates: args
            .mixed
            .map(|_| plan.small_rates())
            .filter(|r| !r.is_empty()),
        paced_samples: plan.paced_samples,
        paced_grace_s: plan.paced_grace.as_secs_f64(),
        scheduler,
        largest_chunk_bytes: largest_chunk,
        probe_size: args.probe.probe_size,
        probe_seconds: args.probe.probe_seconds,
        keep: args.keep,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        encrypt: args.encrypt,
        sealed_first: args.sealed_first,
    };
    // The URL as shown everywhere (terminal, JSON, plot): without its password.
    let shown_url = saltblob::redact_url(url);
    println!("{}", report::bench_header(&shown_url, &config));

    let settings = Settings {
        options: args.probe.clone(),
        concurrency: args.concurrency,
        value_bytes: u64::from(policy.chunk_size),
        quiet,
    };
    let (reference, reference_report) = if args.no_probe {
        (serde_json::Value::Null, None)
    } else {
        match reference::measure(&backend_url, &backend, &settings).await {
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

    // dd's read pattern over as many bytes as the large blobs (so that no read is of bytes the device just
    // read), and its write pattern growing a file of its own by one blob per put.
    let (segment, segments) = (plan.large_bytes, plan.count);
    let dd_reads = dd_beside(
        &backend_url,
        reference_report.as_ref(),
        "dd-pattern reads beside the large gets",
        move |dir| crate::direct::DdReads::create(&dir, segment, segments),
    )
    .await;
    let dd_writes = dd_beside(
        &backend_url,
        reference_report.as_ref(),
        "dd-pattern writes beside the large puts",
        move |dir| crate::direct::DdWrites::create(&dir, segment),
    )
    .await;
    let load = Load::new(
        Target::Store(store.clone()),
        plan,
        format!("saltblob-bench/{run_id}/"),
        args.concurrency,
        quiet,
    );
    let run = Run {
        store,
        backend,
        info,
        load,
        dd_reads,
        dd_writes,
    };
    // The sealed twin of the run: the same sizes on sealed blobs, under a prefix of its own below the run's (so
    // that the clean-up deletes them too).
    let sealed = sealed_keys.as_ref().map(|keys| Run {
        store: keys.store.clone(),
        backend: Arc::clone(&run.backend),
        info: run.info.clone(),
        load: Load {
            target: Target::Store(keys.store.clone()),
            prefix: format!("{}sealed/", run.load.prefix),
            tag: run.load.tag ^ 1,
            ..run.load.clone()
        },
        dd_reads: None,
        dd_writes: None,
    });
    let mut phases = Vec::new();
    let mut raw_values = Vec::new();
    let show = |p: PhaseReport, phases: &mut Vec<PhaseReport>| {
        println!("{}", report::phase_block(&p));
        phases.push(p);
    };
    let twin = |mut p: PhaseReport| {
        p.name = format!("{}{SEALED_SUFFIX}", p.name);
        p
    };
    // Each phase, and its sealed twin right before or after it (`--sealed-first`).
    let order: Vec<&Run> = match &sealed {
        Some(s) if args.sealed_first => vec![s, &run],
        Some(s) => vec![&run, s],
        None => vec![&run],
    };
    let named = |r: &Run, p: PhaseReport| if std::ptr::eq(r, &run) { p } else { twin(p) };
    for r in &order {
        show(named(r, r.large_write().await), &mut phases);
    }
    for r in &order {
        show(named(r, r.large_read().await), &mut phases);
    }
    // The small phases interleave the plaintext and sealed operations in one load: their P99s meet the same store.
    for p in run.small_write(sealed.as_ref()).await? {
        let first = phases.iter().all(|q: &PhaseReport| q.name != "small_write");
        show(if first { p } else { twin(p) }, &mut phases);
    }
    for p in run.small_read(sealed.as_ref()).await? {
        let first = phases.iter().all(|q: &PhaseReport| q.name != "small_read");
        show(if first { p } else { twin(p) }, &mut phases);
    }
    if args.stream_mb > 0 {
        let (url, key, mib) = (
            url.to_owned(),
            format!("{}stream", run.load.prefix),
            args.stream_mb,
        );
        let id = run_id.clone();
        let p =
            tokio::task::spawn_blocking(move || crate::stream::stream_put(&url, &key, mib, &id))
                .await
                .map_err(|e| Error::internal("stream phase", e))?;
        show(p, &mut phases);
    }
    if args.unchunked {
        let (w, r, raw) = run.unchunked(largest_chunk).await;
        raw_values = raw;
        show(w, &mut phases);
        show(r, &mut phases);
    }
    let mut mixed = None;
    if let Some(duration) = run.load.plan.mixed {
        let embedded = matches!(run.info.name, "rocksdb" | "memory");
        let (summary, ran) = run
            .load
            .mixed(duration)
            .await?
            .into_summary(&run.load, duration, embedded);
        for p in ran {
            show(p, &mut phases);
        }
        mixed = Some(summary);
    }
    let cleanup = if args.keep {
        Cleanup::default()
    } else {
        run.cleanup(&raw_values).await
    };
    let finished = Finished {
        store: shown_url,
        config,
        reference,
        reference_report,
        phases,
        mixed,
        cleanup,
        partial: false,
    };
    finished.report(&run.load.plan, largest_chunk, args).await
}

/// A bench run's results before its figures: what [`Finished::report`] turns into the [`BenchReport`].
struct Finished {
    store: String,
    config: BenchConfig,
    reference: serde_json::Value,
    reference_report: Option<reference::ProbeReport>,
    phases: Vec<PhaseReport>,
    mixed: Option<Mixed>,
    cleanup: Cleanup,
    /// Only some phases can run on this target (S3): the text lists only the ratios it measured (the JSON has
    /// all, as always).
    partial: bool,
}

impl Finished {
    /// The isolation figures, the CPU floor and the ratios of the run; prints them, and writes `--json` and
    /// `--plot`.
    async fn report(
        self,
        plan: &Plan,
        largest_chunk: u64,
        args: &BenchArgs,
    ) -> Result<BenchReport> {
        for p in &self.cleanup.problems {
            eprintln!("saltblob: warning: clean-up: {p}");
        }
        let isolation = self.mixed.and_then(|m| isolation(&self.phases, &m));
        let cpu_steps = tokio::task::spawn_blocking(crate::cpu::measure_steps)
            .await
            .map_err(|e| Error::internal("cpu steps", e))?;
        let ratios = ratios(
            &self.phases,
            self.reference_report.as_ref(),
            plan,
            largest_chunk,
            isolation.as_ref(),
            &cpu_steps,
        );
        let report = BenchReport {
            store: self.store,
            config: self.config,
            reference: self.reference,
            phases: self.phases,
            ratios,
            isolation,
            cleanup: self.cleanup,
            cpu_steps,
            reference_report: self.reference_report,
        };
        println!("{}", report::summary_table(&report));
        let measured: Vec<Ratio> = report
            .ratios
            .iter()
            .filter(|r| !self.partial || r.value.is_some())
            .cloned()
            .collect();
        println!("{}", report::ratios_text(&measured));
        if let Some(iso) = &report.isolation {
            println!("{}", report::isolation_text(iso));
        }
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
}

/// `saltblob bench` on an S3 endpoint (`s3+http://HOST:PORT/BUCKET`, module `s3`): the isolation phases of
/// `--mixed` (closed-loop capacities, then the paced loads) through object_store's S3 client, under the keys
/// `saltblob-bench/<run id>/` of the bucket, deleted at the end unless `--keep`. The flags that choose how
/// saltblob lays out or seals a blob, and the phases that need the store itself (`--unchunked`, `--encrypt`,
/// `--stream-mb`, the probe), are refused or skipped: the server's store decides those.
#[cfg(feature = "s3")]
async fn bench_s3(url: &str, args: &BenchArgs, quiet: bool) -> Result<BenchReport> {
    let plan = Plan::new(args)?;
    let refused = [
        (args.chunk_size.is_some(), "--chunk-size"),
        (args.max_salt.is_some(), "--max-salt"),
        (args.unchunked, "--unchunked"),
        (args.encrypt, "--encrypt"),
        (args.stream_mb > 0, "--stream-mb"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        return Err(Error::invalid(
            "bench on S3",
            format!(
                "{flag} needs a saltblob store URL: through S3 the server's store lays out and seals blobs"
            ),
        ));
    }
    let Some(duration) = plan.mixed else {
        return Err(Error::invalid(
            "bench on S3",
            "an S3 endpoint is benched by the isolation phases: give --mixed SECONDS",
        ));
    };
    let s3 = crate::s3::S3Target::open(url)?;
    let run_id = VersionId::generate().to_string();
    let through = "as the server's store lays it out".to_owned();
    let config = BenchConfig {
        backend: S3_BACKEND,
        run_id: run_id.clone(),
        count: args.count,
        large_mb: args.large_mb,
        large_bytes: plan.large_bytes,
        large_layout: through.clone(),
        chunk_size: 0,
        max_salt: 0,
        small_kb: args.small_kb,
        small_bytes: plan.small_bytes,
        small_layout: through,
        small_count: plan.small_count,
        concurrency: args.concurrency,
        unchunked: false,
        mixed_seconds: args.mixed,
        large_writers: plan.large_writers,
        small_loads: Some(plan.small_loads()).filter(|l| !l.is_empty()),
        small_rates: Some(plan.small_rates()).filter(|r| !r.is_empty()),
        paced_samples: plan.paced_samples,
        paced_grace_s: plan.paced_grace.as_secs_f64(),
        scheduler: serde_json::Value::Null,
        largest_chunk_bytes: 0,
        probe_size: args.probe.probe_size,
        probe_seconds: args.probe.probe_seconds,
        keep: args.keep,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        encrypt: false,
        sealed_first: false,
    };
    let shown = s3.shown().to_owned();
    println!("{}", report::bench_header(&shown, &config));
    let load = Load::new(
        Target::S3(s3.clone()),
        plan.clone(),
        format!("saltblob-bench/{run_id}/"),
        args.concurrency,
        quiet,
    );
    let (summary, ran) = load
        .mixed(duration)
        .await?
        .into_summary(&load, duration, false);
    let mut phases = Vec::new();
    for p in ran {
        println!("{}", report::phase_block(&p));
        phases.push(p);
    }
    let mixed = Some(summary);
    let cleanup = if args.keep {
        Cleanup::default()
    } else {
        s3.cleanup(&load.prefix, args.concurrency).await
    };
    let finished = Finished {
        store: shown,
        config,
        reference: serde_json::Value::Null,
        reference_report: None,
        phases,
        mixed,
        cleanup,
        partial: true,
    };
    finished.report(&plan, 0, args).await
}

/// The sealed twin's store and the keyring of its own it seals with (a file in the temporary directory,
/// removed when dropped).
struct BenchKeyring {
    store: BlobStore,
    path: std::path::PathBuf,
}

impl BenchKeyring {
    /// A keyring with one key, `bench`, and a store on `backend` with `config` sealing under it.
    fn new(backend: &Arc<dyn ChunkStore>, config: &StoreConfig) -> Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "saltblob-bench-{:016x}.keyring",
            rand::random::<u64>()
        ));
        let mut ring = Keyring::create(&path)?;
        let store = (move || {
            ring.add("bench", config.clock.now_micros())?;
            let provider = Arc::new(LocalProvider::new(ring));
            let sealed = config
                .clone()
                .with_encryption(EncryptionConfig::new(provider).with_key("bench"));
            BlobStore::new(Arc::clone(backend), sealed)
        })();
        match store {
            Ok(store) => Ok(Self { store, path }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }
}

impl Drop for BenchKeyring {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A file of the bench's own for one of dd's patterns beside the large phases (`large_write_vs_dd_beside`,
/// `large_read_vs_dd`), in the store's directory, made by `make` when the device probe ran. A failure to make it
/// is a warning naming `what`: the ratios that divide by it are then missing.
async fn dd_beside<T: Send + 'static>(
    url: &str,
    reference: Option<&reference::ProbeReport>,
    what: &str,
    make: impl FnOnce(std::path::PathBuf) -> Result<T> + Send + 'static,
) -> Option<Arc<std::sync::Mutex<T>>> {
    if !matches!(reference, Some(reference::ProbeReport::Device(_))) {
        return None;
    }
    let dir = reference::local_dir(url)?;
    let made = tokio::task::spawn_blocking(move || make(dir))
        .await
        .map_err(|e| Error::internal("dd file task", e))
        .and_then(|r| r);
    match made {
        Ok(dd) => Some(Arc::new(std::sync::Mutex::new(dd))),
        Err(e) => {
            eprintln!("saltblob: warning: no {what}: {e}");
            None
        }
    }
}

/// The store's scheduler as the bench's configuration shows it (`"scheduler"` in the JSON).
fn describe_scheduler(s: &SchedulerConfig) -> serde_json::Value {
    json!({
        "enabled": s.enabled,
        "shares": s.shares,
        "default_class": s.default_class.as_ref().map(|c| c.name().to_owned()),
        "limits": { "min": s.min_limit, "initial": s.initial_limit, "max": s.max_limit },
        "min_bulk_duty": s.min_bulk_duty,
        "bulk_unit_bytes": s.bulk_unit_bytes,
    })
}
