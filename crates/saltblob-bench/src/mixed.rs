//! The isolation phases of `--mixed` on one [`Load`] (a store's, or an S3 endpoint's): the closed-loop capacity
//! and stress phases, then the paced (open-loop) phases per load ρ.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use saltblob::{Error, Result};
use serde_json::json;

use crate::cpu::CpuClock;
use crate::isolation::{
    BULK_ALONE, BULK_UNDER_LOAD, Mixed, PacedMeasure, PacedSide, Reclaim, SMALL_ALONE,
    SMALL_UNDER_LOAD,
};
use crate::load::{BulkLoad, bulk_load, run_concurrent, run_timed};
use crate::paced::{Pace, run_paced};
use crate::payload::{Outcome, TAG_MIXED, check, random_bytes, stamped};
use crate::plan::{PacedLoad, Plan};
use crate::progress::Progress;
use crate::stats::{Latency, PhaseReport, Tally};
use crate::target::Target;
use crate::wakeup::WakeProbe;

/// Small keys of the mixed phases, at most.
const MIXED_POOL: u64 = 1000;
/// Longest paced phase, seconds, whatever `--paced-samples` asks.
pub(crate) const PACED_MAX_SECONDS: f64 = 600.0;
/// Most paced small operations in flight: enough that a store keeping up never makes one wait for another,
/// few enough to bound memory when it does not keep up (operations then start late, and count it).
pub(crate) const PACED_MAX_IN_FLIGHT: usize = 256;

/// What a run's phases work on: where their operations go, under which keys, with what payloads.
#[derive(Clone)]
pub(crate) struct Load {
    /// Where the operations go.
    pub(crate) target: Target,
    /// Sizes and counts.
    pub(crate) plan: Plan,
    /// Prefix of every key of the run: `saltblob-bench/<run id>/`.
    pub(crate) prefix: String,
    /// The run's stamp tag.
    pub(crate) tag: u64,
    /// Small operations in flight (closed loop).
    pub(crate) concurrency: usize,
    /// No progress bars.
    pub(crate) quiet: bool,
    /// Payload of the large blobs (stamped per blob).
    pub(crate) large_base: Bytes,
    /// Payload of the small blobs (stamped per blob).
    pub(crate) small_base: Bytes,
}

impl Load {
    /// A run's load on `target` under `prefix`: a stamp tag of its own and random payloads of the plan's sizes.
    pub(crate) fn new(
        target: Target,
        plan: Plan,
        prefix: String,
        concurrency: usize,
        quiet: bool,
    ) -> Self {
        let bytes = |n: u64| random_bytes(usize::try_from(n).unwrap_or(0));
        Self {
            target,
            prefix,
            tag: rand::random::<u64>() & 0x00ff_ffff_ffff_ffff,
            concurrency,
            quiet,
            large_base: bytes(plan.large_bytes),
            small_base: bytes(plan.small_bytes),
            plan,
        }
    }
}

/// What [`Load::mixed`] ran.
pub(crate) struct MixedRun {
    /// Every phase, in the order run.
    pub(crate) phases: Vec<PhaseReport>,
    /// The reclaims run between phases, in order.
    pub(crate) reclaims: Vec<Reclaim>,
    /// CPU cores the large loops used alone.
    pub(crate) bulk_alone_cpu_cores: Option<f64>,
    /// One per paced load, in order.
    pub(crate) paced: Vec<PacedMeasure>,
}

impl MixedRun {
    /// The isolation summary of this run of `load`, whose closed-loop phases lasted `duration` (`embedded`: see
    /// [`Mixed::embedded`]), and the phases, in the order run.
    pub(crate) fn into_summary(
        self,
        load: &Load,
        duration: Duration,
        embedded: bool,
    ) -> (Mixed, Vec<PhaseReport>) {
        let mixed = Mixed {
            seconds: duration.as_secs_f64(),
            large_writers: load.plan.large_writers,
            small_concurrency: load.concurrency,
            embedded,
            bulk_alone_cpu_cores: self.bulk_alone_cpu_cores,
            paced: self.paced,
            reclaims: self.reclaims,
        };
        (mixed, self.phases)
    }
}

impl Load {
    /// The isolation phases of `--mixed`: the closed-loop ones, each for `duration` (small gets and puts alone,
    /// the large loops alone, then both at once), then per paced load its two phases ([`Load::paced`]). Returns
    /// every phase in the order run (`small_alone`, `bulk_alone`, `small_under_load`, `bulk_under_load`, then
    /// per load `paced_small_alone_L`, `paced_small_under_load_L`, `paced_bulk_under_load_L`), and
    /// what they measured beyond their reports. `small_under_load` also carries the large loops' summary as
    /// `details.background`.
    ///
    /// The bulk phase alone runs before the loaded pair, so that whatever the earlier phases left the store to
    /// do (compaction) weighs on the loaded figures, not on the baselines. After each phase with large loops,
    /// before the next phase starts, the versions they replaced and deleted are reclaimed ([`Load::reclaim`]),
    /// so that the store holds about one phase's worth of large values, not the whole run's.
    pub(crate) async fn mixed(&self, duration: Duration) -> Result<MixedRun> {
        let pool = self
            .plan
            .small_count
            .clamp(self.concurrency as u64, MIXED_POOL);
        // The keys the mixed phases read and overwrite, written first (not measured).
        let (target, base, tag, prefix) = (
            self.target.clone(),
            self.small_base.clone(),
            self.tag,
            self.prefix.clone(),
        );
        let progress = Progress::new("mixed (preload)", pool, "blobs", self.quiet);
        let (preload, _) = run_concurrent(self.concurrency, pool, &progress, move |i| {
            let (target, data) = (target.clone(), stamped(&base, tag, TAG_MIXED, i));
            let key = format!("{prefix}mixed/{i:07}");
            async move {
                match target.put(&key, data).await {
                    Ok(size) => Outcome::Done(size),
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

        let mix = self.small_mix(pool);
        let small_alone = self.small_closed(SMALL_ALONE, duration, &mix).await?;

        let progress = Progress::timed(BULK_ALONE, Some(duration.as_secs_f64()), self.quiet);
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = CpuClock::start();
        let (bulk_alone, ()) =
            tokio::join!(self.bulk(BULK_ALONE, Arc::clone(&stop), &progress), async {
                tokio::time::sleep(duration).await;
                stop.store(true, Ordering::Relaxed);
            });
        let bulk_alone_cpu_cores = cpu.cores();
        progress.finish();
        let bulk_alone = bulk_alone?.report(BULK_ALONE, self.bulk_description(duration, "alone"));
        let mut reclaims = vec![self.reclaim(BULK_ALONE).await];

        // Silent: the small phase's spinner shows the progress of the pair.
        let hidden = Progress::timed(BULK_UNDER_LOAD, None, true);
        let stop = Arc::new(AtomicBool::new(false));
        let (bulk_loaded, small_loaded) = tokio::join!(
            self.bulk(BULK_UNDER_LOAD, Arc::clone(&stop), &hidden),
            async {
                let small = self.small_closed(SMALL_UNDER_LOAD, duration, &mix).await;
                // Stop the large loops whatever happened, or they would never end.
                stop.store(true, Ordering::Relaxed);
                small
            }
        );
        let (bulk_loaded, mut small_loaded) = (bulk_loaded?, small_loaded?);
        if let Some(details) = small_loaded
            .details
            .as_mut()
            .and_then(|d| d.as_object_mut())
        {
            details.insert("background".into(), bulk_loaded.summary_json());
        }
        let bulk_loaded = bulk_loaded.report(
            BULK_UNDER_LOAD,
            self.bulk_description(
                duration,
                &format!(
                    "while small gets and puts run ({} in flight)",
                    self.concurrency
                ),
            ),
        );
        reclaims.push(self.reclaim(BULK_UNDER_LOAD).await);
        let capacity = (small_alone.ops > 0).then_some(small_alone.ops_per_s);
        let mut phases = vec![small_alone, bulk_alone, small_loaded, bulk_loaded];
        let mut paced = Vec::new();
        match capacity {
            Some(capacity) => {
                for &load in &self.plan.paced_loads {
                    let (reports, measure) = self.paced(load, capacity, duration, &mix).await?;
                    if let Some(bulk) = reports.last() {
                        reclaims.push(self.reclaim(&bulk.name).await);
                    }
                    phases.extend(reports);
                    paced.push(measure);
                }
            }
            None => eprintln!(
                "saltblob: warning: no small operation succeeded alone, so the small capacity is unknown: the \
                 paced phases are skipped"
            ),
        }
        reclaims.retain(|r| r.target_reclaims);
        Ok(MixedRun {
            phases,
            reclaims,
            bulk_alone_cpu_cores,
            paced,
        })
    }

    /// The two paced phases of `load`: the small mix at its rate (ρ × `capacity` ops/s, or the fixed rate)
    /// alone, then beside the unthrottled large loops, each for the longer of `duration` and `--paced-samples` ÷
    /// the rate (at most [`PACED_MAX_SECONDS`]). Returns `paced_small_alone_L`, `paced_small_under_load_L` and
    /// `paced_bulk_under_load_L` (L: `rhoR`, or `rateN` at a fixed rate), and their measurements.
    async fn paced(
        &self,
        load: PacedLoad,
        capacity: f64,
        duration: Duration,
        mix: &SmallMix,
    ) -> Result<(Vec<PhaseReport>, PacedMeasure)> {
        let rate = load.rate(capacity);
        let rho = load.rho(capacity);
        let label = load.label();
        let seconds = (self.plan.paced_samples as f64 / rate)
            .max(duration.as_secs_f64())
            .min(PACED_MAX_SECONDS);
        let pace = Pace {
            rate,
            duration: Duration::from_secs_f64(seconds),
            max_in_flight: PACED_MAX_IN_FLIGHT,
            grace: self.plan.paced_grace,
        }
        .checked()
        .map_err(|e| Error::invalid("paced load", e))?;
        let alone_name = format!("paced_small_alone_{label}");
        let (alone_report, alone) = self.small_paced(&alone_name, pace, mix, "alone").await;

        let loaded_name = format!("paced_small_under_load_{label}");
        let bulk_name = format!("paced_bulk_under_load_{label}");
        let hidden = Progress::timed(&bulk_name, None, true);
        let stop = Arc::new(AtomicBool::new(false));
        let writers = self.plan.large_writers;
        let beside = format!(
            "beside large puts, gets and deletes in {writers} unthrottled loop{}",
            if writers == 1 { "" } else { "s" }
        );
        let (bulk, (loaded_report, loaded)) =
            tokio::join!(self.bulk(&bulk_name, Arc::clone(&stop), &hidden), async {
                let small = self.small_paced(&loaded_name, pace, mix, &beside).await;
                stop.store(true, Ordering::Relaxed);
                small
            });
        let bulk = bulk?;
        let bulk_mib_s = bulk.throughput_mib_s();
        let bulk_report = bulk.report(
            &bulk_name,
            self.bulk_description(
                Duration::from_secs_f64(seconds),
                &format!("beside small gets and puts paced at {rate:.0} ops/s (ρ = {rho:.3})"),
            ),
        );
        let measure = PacedMeasure {
            rho,
            fixed_rate: matches!(load, PacedLoad::Rate(_)),
            rate_ops_s: rate,
            seconds,
            alone,
            under_load: loaded,
            bulk_mib_s,
        };
        Ok((vec![alone_report, loaded_report, bulk_report], measure))
    }

    /// The small mix paced at `pace` as phase `name`; `load` says what runs beside it.
    async fn small_paced(
        &self,
        name: &str,
        pace: Pace,
        mix: &SmallMix,
        load: &str,
    ) -> (PhaseReport, PacedSide) {
        let progress = Progress::timed(name, Some(pace.duration.as_secs_f64()), self.quiet);
        let bar = progress.handle();
        let (gets, puts) = mix.counts();
        let cpu = CpuClock::start();
        let tracer = self.target.trace_scheduler();
        let probe = WakeProbe::start();
        let started = Instant::now();
        let out = run_paced(pace, |n| {
            let (op, bar) = (mix.op(n), bar.clone());
            let op = async move {
                let outcome = op.await;
                bar.inc(1);
                outcome
            };
            (SmallMix::kind(n), op)
        })
        .await;
        let wall = started.elapsed().as_secs_f64();
        let cpu_cores = cpu.cores().unwrap_or(0.0);
        let scheduler = match tracer {
            Some(tracer) => tracer.finish().await,
            None => None,
        };
        let wakeups = probe.finish().await;
        progress.finish();
        let (gets, puts) = {
            let (g, p) = mix.counts();
            (g - gets, p - puts)
        };
        let issued = pace.duration.as_secs_f64();
        let succeeded = out.tally.latencies.count();
        let side = PacedSide {
            phase: name.to_owned(),
            intended: out.intended,
            succeeded,
            failed: out.tally.errors,
            late: out.late,
            unfinished: out.unfinished,
            goodput: out.goodput(),
            achieved_ops_s: succeeded as f64 / issued,
            latency_ms: out.tally.latencies.latency(),
            get_latency_ms: kind_latency(&out.by_kind, SmallMix::GET),
            put_latency_ms: kind_latency(&out.by_kind, SmallMix::PUT),
            cpu_cores,
            scheduler,
            wakeups,
        };
        let mut report = out.tally.report(
            name,
            format!(
                "{issued:.0} s of small gets and puts (half each) of {} KiB on {} keys, paced at {:.0} ops/s \
                 (open loop, each timed from when it was due, at most {} in flight), {load}",
                self.plan.small_bytes >> 10,
                mix.pool,
                pace.rate,
                pace.max_in_flight
            ),
            wall,
            true,
        );
        report.details = Some(json!({
            "gets": gets,
            "puts": puts,
            "pool_keys": mix.pool,
            "rate_ops_s": pace.rate,
            "intended": side.intended,
            "late": side.late,
            "unfinished": side.unfinished,
            "goodput": side.goodput,
            "cpu_cores": side.cpu_cores,
            "scheduler": side.scheduler,
            "wakeups": side.wakeups,
        }));
        (report, side)
    }

    /// Reclaims, between phases, what the run replaced and deleted so far, after phase `after`; outside every
    /// phase's clock. A failure is recorded, not fatal: the clean-up at the end reclaims again.
    async fn reclaim(&self, after: &str) -> Reclaim {
        let started = Instant::now();
        let done = self.target.reclaim().await;
        let mut out = Reclaim {
            after: after.to_owned(),
            target_reclaims: done.is_some(),
            seconds: 0.0,
            versions: 0,
            bytes: 0,
            error: None,
        };
        match done {
            Some(Ok(r)) => (out.versions, out.bytes) = (r.versions, r.bytes),
            Some(Err(e)) => out.error = Some(e.to_string()),
            None => {}
        }
        out.seconds = started.elapsed().as_secs_f64();
        out
    }

    /// Runs the run's large loops (`--large-writers`) under the keys of `phase` until `stop`.
    async fn bulk(
        &self,
        phase: &str,
        stop: Arc<AtomicBool>,
        progress: &Progress,
    ) -> Result<BulkLoad> {
        let load = |target| {
            bulk_load(
                target,
                self.large_base.clone(),
                self.tag,
                format!("{}mixed-large/{phase}/", self.prefix),
                self.plan.large_writers,
                stop,
                progress.handle(),
            )
        };
        match &self.target {
            Target::Store(_) => load(self.target.clone()).await,
            // Through S3 the large loops are a second program using the bucket: a client with a connection pool
            // of its own, on threads of its own, so that what the small ops' client sees is the server's doing
            // (and the shared cores'), not the bench's tasks waiting behind its own large transfers.
            #[cfg(feature = "s3")]
            Target::S3(s3) => {
                let bulk = load(Target::S3(s3.second_client()?));
                let (tx, rx) = tokio::sync::oneshot::channel();
                std::thread::Builder::new()
                    .name("bench-bulk-client".into())
                    .spawn(move || {
                        let ran = tokio::runtime::Builder::new_multi_thread()
                            .enable_all()
                            .build()
                            .map_err(|e| Error::internal("bulk client runtime", e))
                            .and_then(|rt| rt.block_on(bulk));
                        let _ = tx.send(ran);
                    })
                    .map_err(|e| Error::internal("bulk client thread", e))?;
                rx.await
                    .map_err(|e| Error::internal("bulk client thread", e))?
            }
        }
    }

    fn bulk_description(&self, duration: Duration, load: &str) -> String {
        let writers = self.plan.large_writers;
        format!(
            "{:.0} s of large puts, gets (verified) and deletes of {} MiB, {writers} loop{} at once each on its own \
             keys, {load}",
            duration.as_secs_f64(),
            self.plan.large_bytes >> 20,
            if writers == 1 { "" } else { "s" },
        )
    }

    /// The small mix of the mixed phases on `pool` keys.
    fn small_mix(&self, pool: u64) -> SmallMix {
        SmallMix {
            target: self.target.clone(),
            base: self.small_base.clone(),
            tag: self.tag,
            prefix: self.prefix.clone(),
            len: self.plan.small_bytes,
            pool,
            gets: Arc::new(AtomicU64::new(0)),
            puts: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The small mix closed-loop as phase `name`: `--concurrency` in flight for `duration`.
    async fn small_closed(
        &self,
        name: &'static str,
        duration: Duration,
        mix: &SmallMix,
    ) -> Result<PhaseReport> {
        let (gets, puts) = mix.counts();
        let progress = Progress::timed(name, Some(duration.as_secs_f64()), self.quiet);
        let ops = mix.clone();
        let (tally, seconds) =
            run_timed(self.concurrency, duration, &progress, move |n| ops.op(n)).await?;
        progress.finish();
        let writers = self.plan.large_writers;
        let load = if name == SMALL_ALONE {
            "alone".to_owned()
        } else {
            format!(
                "while large blobs are written, read and deleted in {writers} loop{}",
                if writers == 1 { "" } else { "s" }
            )
        };
        let mut report = tally.report(
            name,
            format!(
                "{:.0} s of small gets and puts (half each) of {} KiB on {} keys, {} in flight (closed loop), {load}",
                duration.as_secs_f64(),
                mix.len >> 10,
                mix.pool,
                self.concurrency
            ),
            seconds,
            true,
        );
        let (g, p) = mix.counts();
        report.details = Some(json!({
            "gets": g - gets,
            "puts": p - puts,
            "pool_keys": mix.pool,
        }));
        Ok(report)
    }
}

/// The latency of the operations of `kind` in a paced phase's tally by kind, if any ended.
fn kind_latency(by_kind: &[Tally], kind: usize) -> Option<Latency> {
    by_kind.get(kind).and_then(|t| t.latencies.latency())
}

/// The small mix of the mixed phases: operation `n` puts (odd `n`) or gets and verifies (even `n`) a random
/// key of the pool; the gets and puts issued are counted.
#[derive(Clone)]
struct SmallMix {
    target: Target,
    /// Payload (stamped per key).
    base: Bytes,
    tag: u64,
    /// The run's prefix.
    prefix: String,
    /// Bytes of one small blob.
    len: u64,
    /// Keys: `<prefix>mixed/0000000` onwards.
    pool: u64,
    gets: Arc<AtomicU64>,
    puts: Arc<AtomicU64>,
}

impl SmallMix {
    /// The kind of the gets, in [`SmallMix::kind`].
    const GET: usize = 0;
    /// The kind of the puts.
    const PUT: usize = 1;

    /// Operation `n`'s kind: puts are the odd ones.
    fn kind(n: u64) -> usize {
        if n % 2 == 1 { Self::PUT } else { Self::GET }
    }

    /// Gets and puts issued so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.gets.load(Ordering::Relaxed),
            self.puts.load(Ordering::Relaxed),
        )
    }

    /// Operation `n`; its value is prepared here, before the operation's clock starts.
    fn op(&self, n: u64) -> impl Future<Output = Outcome> + Send + use<> {
        let target = self.target.clone();
        let k = rand::random_range(0..self.pool);
        let key = format!("{}mixed/{k:07}", self.prefix);
        let (tag, len) = (self.tag, self.len);
        let data = (Self::kind(n) == Self::PUT).then(|| stamped(&self.base, tag, TAG_MIXED, k));
        match &data {
            Some(_) => &self.puts,
            None => &self.gets,
        }
        .fetch_add(1, Ordering::Relaxed);
        async move {
            match data {
                Some(data) => match target.put(&key, data).await {
                    Ok(size) => Outcome::Done(size),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
                None => match target.get(&key).await {
                    Ok(got) => check(&got, len, tag, TAG_MIXED, k),
                    Err(e) => Outcome::Failed(e.to_string()),
                },
            }
        }
    }
}
