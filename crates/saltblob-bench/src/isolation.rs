//! The isolation figures of `--mixed`. Closed loop (capacity, and a stress figure with no goal): each class
//! (small operations: `interactive`; large ones: `bulk`) alone and while the other runs. Paced (open loop, the
//! figures with goals, issue 23): per load ρ, the small mix at ρ × the small capacity, alone and beside the
//! unthrottled large loops, timed from when each operation was due.

use serde::Serialize;

use crate::scheduler_trace::SchedulerTrace;
use crate::stats::{Latency, PhaseReport, latency_or_nulls};
use crate::wakeup::Wakeups;

/// Small gets and puts alone.
pub(crate) const SMALL_ALONE: &str = "small_alone";
/// The large loops alone.
pub(crate) const BULK_ALONE: &str = "bulk_alone";
/// Small gets and puts while the large loops run.
pub(crate) const SMALL_UNDER_LOAD: &str = "small_under_load";
/// The large loops while small gets and puts run (the same seconds as [`SMALL_UNDER_LOAD`]).
pub(crate) const BULK_UNDER_LOAD: &str = "bulk_under_load";

/// One class in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct ClassResult {
    /// The phase that measured it (`small_alone`, `small_under_load`, `bulk_alone`, `bulk_under_load`).
    pub phase: String,
    /// Operations that succeeded.
    pub ops: u64,
    /// Operations that failed.
    pub errors: u64,
    /// Bytes moved by the operations that succeeded.
    pub bytes: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// `bytes` ÷ MiB ÷ `seconds`.
    pub throughput_mib_s: f64,
    /// `ops` ÷ `seconds`.
    pub ops_per_s: f64,
    /// Latency percentiles of the operations that succeeded, ms; every field null when none did.
    #[serde(serialize_with = "latency_or_nulls")]
    pub latency_ms: Option<Latency>,
}

impl ClassResult {
    fn of(p: &PhaseReport) -> Self {
        Self {
            phase: p.name.clone(),
            ops: p.ops,
            errors: p.errors,
            bytes: p.bytes,
            seconds: p.seconds,
            throughput_mib_s: p.throughput_mib_s,
            ops_per_s: p.ops_per_s,
            latency_ms: p.latency_ms,
        }
    }

    /// P99 in ms, when an operation succeeded.
    fn p99(&self) -> Option<f64> {
        self.latency_ms.filter(|_| self.ops > 0).map(|l| l.p99)
    }
}

/// Both classes in one situation; null where the phase did not run.
#[derive(Clone, Debug, Serialize)]
pub struct Classes {
    /// Small gets and puts (`--small-kb`, `--concurrency` in flight).
    pub interactive: Option<ClassResult>,
    /// Large puts and gets (`--large-mb`, `--large-writers` loops).
    pub bulk: Option<ClassResult>,
}

/// What `--mixed` shows: `"isolation"` in the JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Isolation {
    /// Seconds of each phase (`--mixed`).
    pub seconds: f64,
    /// Concurrent large put/get/delete loops (`--large-writers`).
    pub large_writers: usize,
    /// Small operations in flight (`--concurrency`).
    pub small_concurrency: usize,
    /// Each class alone: `interactive` from `small_alone`, `bulk` from `bulk_alone`.
    pub alone: Classes,
    /// Both classes at once: `interactive` from `small_under_load`, `bulk` from `bulk_under_load`.
    pub under_load: Classes,
    /// Small-op P99 alone, ms.
    pub small_p99_alone_ms: Option<f64>,
    /// Small-op P99 while the large loops run, ms.
    pub small_p99_under_load_ms: Option<f64>,
    /// `small_p99_under_load_ms` ÷ `small_p99_alone_ms`; null when either is missing. A stress figure with no
    /// goal: closed loop, the small ops saturate the machine alone, so this is the inverse of the share of it
    /// they keep (Little's law); the paced figures carry the goals.
    pub small_p99_ratio: Option<f64>,
    /// Large-op throughput (puts and gets) of the large loops alone, MiB/s.
    pub bulk_throughput_alone_mib_s: Option<f64>,
    /// The same while small operations run, MiB/s.
    pub bulk_throughput_under_load_mib_s: Option<f64>,
    /// `bulk_throughput_under_load_mib_s` ÷ `bulk_throughput_alone_mib_s`; null when either is missing or the
    /// loops moved nothing alone. A stress figure with no goal, as `small_p99_ratio`.
    pub bulk_throughput_ratio: Option<f64>,
    /// The small ops' capacity X*: ops/s of the closed-loop `small_alone`; the paced rates are fractions of it.
    pub small_capacity_ops_s: Option<f64>,
    /// The bulk capacity B*: `bulk_throughput_alone_mib_s`; the paced bulk shares are fractions of it.
    pub bulk_capacity_mib_s: Option<f64>,
    /// CPU cores the large loops used alone (process CPU seconds ÷ wall seconds of `bulk_alone`).
    pub bulk_alone_cpu_cores: Option<f64>,
    /// One entry per paced load ρ (`--small-load`), in order.
    pub paced: Vec<Paced>,
    /// The reclaims run between phases, in order ([`Reclaim`]); empty through S3.
    pub reclaims_between_phases: Vec<Reclaim>,
}

/// One reclaim between phases of `--mixed` (`"reclaims_between_phases"` in the JSON): the versions the run had
/// replaced and deleted so far, reclaimed after phase `after`, outside every phase's clock, so that the store
/// holds about one phase's worth of large values. Not run through S3 (the server's store reclaims on its own).
#[derive(Clone, Debug, Serialize)]
pub struct Reclaim {
    /// The phase it followed.
    pub after: String,
    /// Whether the target reclaims at all (false through S3; such entries are dropped).
    #[serde(skip)]
    pub target_reclaims: bool,
    /// How long it took.
    pub seconds: f64,
    /// Versions whose chunks were deleted.
    pub versions: u64,
    /// Stored bytes freed.
    pub bytes: u64,
    /// Why it failed, if it did (the run goes on; its clean-up reclaims again).
    pub error: Option<String>,
}

/// What the mixed phases measured beyond their phase reports, and how to read it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mixed {
    /// Seconds of each closed-loop phase (`--mixed`).
    pub seconds: f64,
    /// `--large-writers`.
    pub large_writers: usize,
    /// `--concurrency`.
    pub small_concurrency: usize,
    /// The store is embedded (RocksDB, memory): the tighter excess allowances of [`paced_goals`].
    pub embedded: bool,
    /// CPU cores the large loops used in `bulk_alone`.
    pub bulk_alone_cpu_cores: Option<f64>,
    /// One per paced load, in order.
    pub paced: Vec<PacedMeasure>,
    /// The reclaims between phases, in order.
    pub reclaims: Vec<Reclaim>,
}

/// One paced load's measurements.
#[derive(Clone, Debug)]
pub(crate) struct PacedMeasure {
    /// The load, as a fraction of the small capacity.
    pub rho: f64,
    /// Paced at a fixed rate (`--small-rate`), not at a fraction of the capacity: no goal is judged.
    pub fixed_rate: bool,
    /// Small operations due per second.
    pub rate_ops_s: f64,
    /// Seconds small operations were issued in each of the two phases.
    pub seconds: f64,
    /// The paced small mix alone.
    pub alone: PacedSide,
    /// The paced small mix beside the large loops.
    pub under_load: PacedSide,
    /// The large loops' MiB/s (puts and gets) while the paced small mix ran beside them.
    pub bulk_mib_s: f64,
}

/// The paced small mix in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PacedSide {
    /// The phase that measured it.
    pub phase: String,
    /// Operations due.
    pub intended: u64,
    /// Operations that succeeded (verified, for gets).
    pub succeeded: u64,
    /// Operations that failed.
    pub failed: u64,
    /// Operations issued more than 1 ms after they were due (the in-flight limit was reached).
    pub late: u64,
    /// Operations still running at the end of the phase's grace.
    pub unfinished: u64,
    /// `succeeded` ÷ `intended`.
    pub goodput: f64,
    /// `succeeded` ÷ the seconds operations were issued.
    pub achieved_ops_s: f64,
    /// Latency percentiles of the operations that succeeded, each timed from when it was due, ms.
    #[serde(serialize_with = "latency_or_nulls")]
    pub latency_ms: Option<Latency>,
    /// The same, of the gets alone (verified reads).
    #[serde(serialize_with = "latency_or_nulls")]
    pub get_latency_ms: Option<Latency>,
    /// The same, of the puts alone (each a synced commit on a store with `sync=true`).
    #[serde(serialize_with = "latency_or_nulls")]
    pub put_latency_ms: Option<Latency>,
    /// Process CPU seconds ÷ wall seconds over the phase: every class that ran in it.
    pub cpu_cores: f64,
    /// What the store's scheduler did meanwhile; null through S3 or without a scheduler.
    pub scheduler: Option<SchedulerTrace>,
    /// How late the bench's runtime and an OS thread woke meanwhile (see `wakeup.rs`).
    pub wakeups: Wakeups,
}

impl PacedSide {
    fn p99(&self) -> Option<f64> {
        self.latency_ms
            .filter(|_| self.succeeded > 0)
            .map(|l| l.p99)
    }
}

/// Small goodput alone below this: the store cannot sustain the load at all, and the load is reported as such
/// rather than as an isolation result.
pub const SUSTAINABLE_GOODPUT_MIN: f64 = 0.99;

/// The goals of one paced load (issue 23); a figure meets `small_p99` when it is within either bound.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PacedGoals {
    /// Small P99 under load ÷ alone, at most.
    pub small_p99_ratio_max: f64,
    /// Or: small P99 under load − alone, ms, at most.
    pub small_p99_excess_ms_max: f64,
    /// Small goodput under load, at least.
    pub small_goodput_min: f64,
    /// Bulk share, at least.
    pub bulk_share_min: f64,
    /// Work W, at least.
    pub work_min: f64,
}

/// The goals at load `rho`: stated at ρ = 0.25 and ρ = 0.5 only (none at another load). The excess allowance
/// is 10 / 20 ms on an embedded store, 20 / 30 ms on a remote one (a cluster, or through S3).
pub fn paced_goals(rho: f64, embedded: bool) -> Option<PacedGoals> {
    let at = |r: f64| (rho - r).abs() < 1e-9;
    let (ratio, excess, share) = if at(0.25) {
        (2.0, if embedded { 10.0 } else { 20.0 }, 0.65)
    } else if at(0.5) {
        (3.0, if embedded { 20.0 } else { 30.0 }, 0.40)
    } else {
        return None;
    };
    Some(PacedGoals {
        small_p99_ratio_max: ratio,
        small_p99_excess_ms_max: excess,
        small_goodput_min: SUSTAINABLE_GOODPUT_MIN,
        bulk_share_min: share,
        work_min: 0.90,
    })
}

/// Which goals a paced load met; null where a figure is missing.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PacedMet {
    /// Small P99 under load within the ratio or the excess bound.
    pub small_p99: Option<bool>,
    /// Small goodput under load.
    pub small_goodput: bool,
    /// Bulk share.
    pub bulk_share: Option<bool>,
    /// Work W.
    pub work: Option<bool>,
    /// All four; null when one is null.
    pub all: Option<bool>,
}

/// One paced load's figures: `"isolation"."paced"[i]` in the JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Paced {
    /// The load, as a fraction of the small capacity X* (with `fixed_rate`, the rate ÷ X*).
    pub rho: f64,
    /// Paced at a fixed rate (`--small-rate`) rather than at ρ × X*: no goal is judged (`goals` null).
    pub fixed_rate: bool,
    /// Small operations due per second: ρ × X*, or the fixed rate.
    pub rate_ops_s: f64,
    /// Seconds small operations were issued in each phase.
    pub seconds: f64,
    /// Small goodput alone is at least [`SUSTAINABLE_GOODPUT_MIN`]; when not, the store cannot carry this load
    /// at all, and its goals are not judged (`met` null).
    pub sustainable_alone: bool,
    /// The paced small mix alone.
    pub alone: PacedSide,
    /// The paced small mix beside the unthrottled large loops.
    pub under_load: PacedSide,
    /// Small P99 alone, ms (timed from when each op was due).
    pub small_p99_alone_ms: Option<f64>,
    /// Small P99 beside the large loops, ms.
    pub small_p99_under_load_ms: Option<f64>,
    /// `small_p99_under_load_ms` ÷ `small_p99_alone_ms`.
    pub small_p99_ratio: Option<f64>,
    /// `small_p99_under_load_ms` − `small_p99_alone_ms`.
    pub small_p99_excess_ms: Option<f64>,
    /// Small goodput beside the large loops: succeeded ÷ due.
    pub small_goodput: f64,
    /// The large loops' MiB/s beside the paced small mix.
    pub bulk_mib_s: f64,
    /// `bulk_mib_s` ÷ the bulk capacity B*.
    pub bulk_share: Option<f64>,
    /// Work W = achieved small rate under load ÷ X* + `bulk_share`: the share of the machine's capacity the
    /// two classes kept together.
    pub work: Option<f64>,
    /// CPU cores of the process in the paced small phase alone (the interactive class at this load).
    pub cpu_cores_small_alone: f64,
    /// CPU cores of the process while both classes ran.
    pub cpu_cores_under_load: f64,
    /// The goals at this load; null where none is stated.
    pub goals: Option<PacedGoals>,
    /// Which goals were met; null without goals or when the load is not sustainable alone.
    pub met: Option<PacedMet>,
    /// The verdict in words: `met`, `MISSED (...)`, `no goal at this load`, or `not sustainable alone (...)`.
    pub verdict: String,
}

impl Paced {
    /// The load in words: `rho = 0.25`, or `800 ops/s (rho 0.213)` at a fixed rate.
    pub fn label(&self) -> String {
        if self.fixed_rate {
            format!("{:.0} ops/s (rho {:.3})", self.rate_ops_s, self.rho)
        } else {
            format!("rho = {}", self.rho)
        }
    }

    /// The figures of `m`, against the small capacity X* and the bulk capacity B* (closed loop, alone).
    fn of(m: &PacedMeasure, x_star: Option<f64>, b_star: Option<f64>, embedded: bool) -> Self {
        let small_p99_alone_ms = m.alone.p99();
        let small_p99_under_load_ms = m.under_load.p99();
        let small_p99_ratio = ratio(small_p99_under_load_ms, small_p99_alone_ms);
        let small_p99_excess_ms = small_p99_under_load_ms
            .zip(small_p99_alone_ms)
            .map(|(l, a)| l - a);
        let bulk_share = ratio(Some(m.bulk_mib_s), b_star);
        let work = ratio(Some(m.under_load.achieved_ops_s), x_star)
            .zip(bulk_share)
            .map(|(s, b)| s + b);
        let sustainable_alone = m.alone.goodput >= SUSTAINABLE_GOODPUT_MIN;
        let goals = paced_goals(m.rho, embedded).filter(|_| !m.fixed_rate);
        let met = goals.filter(|_| sustainable_alone).map(|g| {
            let small_p99 = small_p99_ratio
                .zip(small_p99_excess_ms)
                .map(|(r, e)| r <= g.small_p99_ratio_max || e <= g.small_p99_excess_ms_max);
            let small_goodput = m.under_load.goodput >= g.small_goodput_min;
            let bulk_share = bulk_share.map(|b| b >= g.bulk_share_min);
            let work = work.map(|w| w >= g.work_min);
            let all = [small_p99, Some(small_goodput), bulk_share, work]
                .into_iter()
                .try_fold(true, |all, m| m.map(|m| all && m));
            PacedMet {
                small_p99,
                small_goodput,
                bulk_share,
                work,
                all,
            }
        });
        let verdict = verdict(m, goals, met, sustainable_alone);
        Self {
            rho: m.rho,
            fixed_rate: m.fixed_rate,
            rate_ops_s: m.rate_ops_s,
            seconds: m.seconds,
            sustainable_alone,
            alone: m.alone.clone(),
            under_load: m.under_load.clone(),
            small_p99_alone_ms,
            small_p99_under_load_ms,
            small_p99_ratio,
            small_p99_excess_ms,
            small_goodput: m.under_load.goodput,
            bulk_mib_s: m.bulk_mib_s,
            bulk_share,
            work,
            cpu_cores_small_alone: m.alone.cpu_cores,
            cpu_cores_under_load: m.under_load.cpu_cores,
            goals,
            met,
            verdict,
        }
    }
}

/// [`Paced::verdict`].
fn verdict(
    m: &PacedMeasure,
    goals: Option<PacedGoals>,
    met: Option<PacedMet>,
    sustainable_alone: bool,
) -> String {
    if !sustainable_alone {
        return format!(
            "not sustainable alone (goodput {:.3} < {SUSTAINABLE_GOODPUT_MIN} before any bulk ran: the store cannot \
             carry {:.0} small ops/s; not an isolation result)",
            m.alone.goodput, m.rate_ops_s
        );
    }
    let (Some(_), Some(met)) = (goals, met) else {
        if m.fixed_rate {
            return "no goal at a fixed rate (goals are stated at rho = 0.25 and 0.5 of X*)"
                .to_owned();
        }
        return "no goal at this load (goals are stated at 0.25 and 0.5)".to_owned();
    };
    let missed: Vec<String> = [
        ("small P99", met.small_p99),
        ("small goodput", Some(met.small_goodput)),
        ("bulk share", met.bulk_share),
        ("work", met.work),
    ]
    .into_iter()
    .filter_map(|(name, m)| match m {
        Some(true) => None,
        Some(false) => Some(name.to_owned()),
        None => Some(format!("{name} not measured")),
    })
    .collect();
    if missed.is_empty() {
        "met".to_owned()
    } else {
        format!("MISSED ({})", missed.join(", "))
    }
}

/// `numerator ÷ denominator`, or `None` when either is missing or not finite, or the denominator is not positive.
pub(crate) fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if n.is_finite() && d.is_finite() && d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// The isolation figures from the phases of a run and its paced measurements, or `None` when `--mixed` did not
/// run.
pub(crate) fn isolation(phases: &[PhaseReport], mixed: &Mixed) -> Option<Isolation> {
    let Mixed {
        seconds,
        large_writers,
        small_concurrency,
        ..
    } = *mixed;
    let class = |name: &str| phases.iter().find(|p| p.name == name).map(ClassResult::of);
    let alone = Classes {
        interactive: class(SMALL_ALONE),
        bulk: class(BULK_ALONE),
    };
    let under_load = Classes {
        interactive: class(SMALL_UNDER_LOAD),
        bulk: class(BULK_UNDER_LOAD),
    };
    if alone.interactive.is_none() && alone.bulk.is_none() && under_load.interactive.is_none() {
        return None;
    }
    let small_p99_alone_ms = alone.interactive.as_ref().and_then(ClassResult::p99);
    let small_p99_under_load_ms = under_load.interactive.as_ref().and_then(ClassResult::p99);
    let small_p99_ratio = ratio(small_p99_under_load_ms, small_p99_alone_ms);
    let small_capacity_ops_s = alone
        .interactive
        .as_ref()
        .filter(|c| c.ops > 0)
        .map(|c| c.ops_per_s);
    let throughput = |c: &Option<ClassResult>| c.as_ref().map(|c| c.throughput_mib_s);
    let bulk_throughput_alone_mib_s = throughput(&alone.bulk);
    let bulk_throughput_under_load_mib_s = throughput(&under_load.bulk);
    let bulk_throughput_ratio = ratio(
        bulk_throughput_under_load_mib_s,
        bulk_throughput_alone_mib_s,
    );
    Some(Isolation {
        seconds,
        large_writers,
        small_concurrency,
        alone,
        under_load,
        small_p99_alone_ms,
        small_p99_under_load_ms,
        small_p99_ratio,
        bulk_throughput_alone_mib_s,
        bulk_throughput_under_load_mib_s,
        bulk_throughput_ratio,
        small_capacity_ops_s,
        bulk_capacity_mib_s: bulk_throughput_alone_mib_s,
        bulk_alone_cpu_cores: mixed.bulk_alone_cpu_cores,
        paced: mixed
            .paced
            .iter()
            .map(|m| {
                Paced::of(
                    m,
                    small_capacity_ops_s,
                    bulk_throughput_alone_mib_s,
                    mixed.embedded,
                )
            })
            .collect(),
        reclaims_between_phases: mixed.reclaims.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::stats::Tally;

    /// A phase of operations of `ms` each, moving `bytes_each`, over `seconds`.
    fn phase(name: &str, ms: &[u64], bytes_each: u64, seconds: f64) -> PhaseReport {
        let mut t = Tally::default();
        for &ms in ms {
            t.ok(Duration::from_millis(ms), bytes_each);
        }
        t.report(name, String::new(), seconds, true)
    }

    /// 100 small ops: 98 of `fast` ms and 2 of `slow` ms, so the P99 is `slow`.
    fn small(name: &str, fast: u64, slow: u64) -> PhaseReport {
        let mut ms = vec![fast; 98];
        ms.extend([slow, slow]);
        phase(name, &ms, 65536, 1.0)
    }

    /// A run of the closed-loop phases only.
    fn closed(seconds: f64, large_writers: usize, small_concurrency: usize) -> Mixed {
        Mixed {
            seconds,
            large_writers,
            small_concurrency,
            ..Mixed::default()
        }
    }

    /// The paced mix in phase `name`: `intended` due, one success per entry of `ms` (its latency), over 10 s.
    fn side(name: &str, intended: u64, ms: &[u64], cpu_cores: f64) -> PacedSide {
        let mut t = Tally::default();
        for &ms in ms {
            t.ok(Duration::from_millis(ms), 65536);
        }
        let succeeded = t.latencies.count();
        PacedSide {
            phase: name.to_owned(),
            intended,
            succeeded,
            failed: 0,
            late: 0,
            unfinished: 0,
            goodput: succeeded as f64 / intended as f64,
            achieved_ops_s: succeeded as f64 / 10.0,
            latency_ms: t.latencies.latency(),
            get_latency_ms: None,
            put_latency_ms: None,
            cpu_cores,
            scheduler: None,
            wakeups: Wakeups::default(),
        }
    }

    /// `n` latencies of which the slowest 2 % are `slow` ms and the rest `fast`: the P99 is `slow`.
    fn spread(n: usize, fast: u64, slow: u64) -> Vec<u64> {
        let slow_n = n / 50;
        let mut v = vec![fast; n - slow_n];
        v.extend(vec![slow; slow_n]);
        v
    }

    /// Closed-loop phases giving X* = 100 ops/s and B* = 120 MiB/s, and `paced` beside them.
    fn with_paced(embedded: bool, paced: Vec<PacedMeasure>) -> Isolation {
        let big = 60 << 20;
        let phases = [
            small(SMALL_ALONE, 2, 10),
            phase(BULK_ALONE, &[500; 10], big, 5.0),
            small(SMALL_UNDER_LOAD, 3, 35),
            phase(BULK_UNDER_LOAD, &[800; 6], big, 5.0),
        ];
        let mixed = Mixed {
            embedded,
            bulk_alone_cpu_cores: Some(1.5),
            paced,
            ..closed(5.0, 1, 16)
        };
        isolation(&phases, &mixed).expect("mixed ran")
    }

    /// ρ = 0.25 of 100 ops/s for 10 s (250 due): alone P99 10 ms, beside bulk P99 25 ms with `succeeded` of
    /// them done, bulk at 90 MiB/s; `alone_done` done alone.
    fn quarter(alone_done: usize, succeeded: usize) -> PacedMeasure {
        PacedMeasure {
            rho: 0.25,
            fixed_rate: false,
            rate_ops_s: 25.0,
            seconds: 10.0,
            alone: side(
                "paced_small_alone_rho0.25",
                250,
                &spread(alone_done, 2, 10),
                0.3,
            ),
            under_load: side(
                "paced_small_under_load_rho0.25",
                250,
                &spread(succeeded, 3, 25),
                1.9,
            ),
            bulk_mib_s: 90.0,
        }
    }

    fn close(got: Option<f64>, want: f64) -> bool {
        // HDR histograms with 3 significant digits.
        got.is_some_and(|g| (g - want).abs() <= want * 0.002)
    }

    #[test]
    fn ratio_needs_both_operands_and_a_positive_denominator() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(0.0), Some(2.0)), Some(0.0));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(Some(3.0), Some(-1.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(3.0), None), None);
        assert_eq!(ratio(Some(f64::NAN), Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), Some(f64::INFINITY)), None);
    }

    #[test]
    fn classes_and_headline_ratios_come_from_their_phases() {
        // 60 MiB ops: 10 alone in 5 s (120 MiB/s), 6 under load in 5 s (72 MiB/s).
        let big = 60 << 20;
        let phases = [
            phase("large_write", &[1000], big, 1.0),
            small(SMALL_ALONE, 2, 10),
            phase(BULK_ALONE, &[500; 10], big, 5.0),
            small(SMALL_UNDER_LOAD, 3, 35),
            phase(BULK_UNDER_LOAD, &[800; 6], big, 5.0),
        ];
        let iso = isolation(&phases, &closed(5.0, 2, 16)).expect("mixed ran");
        assert_eq!((iso.large_writers, iso.small_concurrency), (2, 16));
        let phase_of = |c: &Option<ClassResult>| c.as_ref().map(|c| c.phase.clone());
        assert_eq!(
            phase_of(&iso.alone.interactive).as_deref(),
            Some(SMALL_ALONE)
        );
        assert_eq!(phase_of(&iso.alone.bulk).as_deref(), Some(BULK_ALONE));
        assert_eq!(
            phase_of(&iso.under_load.interactive).as_deref(),
            Some(SMALL_UNDER_LOAD)
        );
        assert_eq!(
            phase_of(&iso.under_load.bulk).as_deref(),
            Some(BULK_UNDER_LOAD)
        );
        assert!(close(iso.small_p99_alone_ms, 10.0), "{iso:?}");
        assert!(close(iso.small_p99_under_load_ms, 35.0), "{iso:?}");
        assert!(close(iso.small_p99_ratio, 3.5), "{iso:?}");
        assert!(close(iso.bulk_throughput_alone_mib_s, 120.0), "{iso:?}");
        assert!(close(iso.bulk_throughput_under_load_mib_s, 72.0), "{iso:?}");
        assert!(close(iso.bulk_throughput_ratio, 0.6), "{iso:?}");
        let bulk_p50 = iso
            .under_load
            .bulk
            .and_then(|c| c.latency_ms)
            .map(|l| l.p50);
        assert!(close(bulk_p50, 800.0), "{bulk_p50:?}");
    }

    #[test]
    fn missing_operands_give_null_ratios_not_zero() {
        // Mixed ran, but no small op succeeded under load and the loops moved nothing alone.
        let mut t = Tally::default();
        t.fail("timeout");
        let phases = [
            small(SMALL_ALONE, 1, 10),
            phase(BULK_ALONE, &[], 1, 1.0),
            t.report(SMALL_UNDER_LOAD, String::new(), 1.0, true),
            phase(BULK_UNDER_LOAD, &[10], 1 << 20, 1.0),
        ];
        let iso = isolation(&phases, &closed(1.0, 1, 4)).expect("mixed ran");
        assert_eq!(iso.small_p99_ratio, None);
        assert_eq!(iso.small_p99_under_load_ms, None);
        assert_eq!(iso.bulk_throughput_alone_mib_s, Some(0.0));
        assert_eq!(iso.bulk_throughput_ratio, None);
        let json = serde_json::to_value(&iso).expect("serializes");
        assert!(json["small_p99_ratio"].is_null(), "{json}");
        assert!(
            json["under_load"]["interactive"]["latency_ms"]["p99"].is_null(),
            "{json}"
        );
        // The closed loop is a stress figure: no goal.
        assert!(json.get("small_p99_ratio_goal_max").is_none(), "{json}");
    }

    #[test]
    fn goals_are_stated_at_a_quarter_and_a_half_with_the_backends_allowance() {
        let q = paced_goals(0.25, true).expect("goal at 0.25");
        assert_eq!(
            (
                q.small_p99_ratio_max,
                q.small_p99_excess_ms_max,
                q.bulk_share_min
            ),
            (2.0, 10.0, 0.65)
        );
        assert_eq!((q.small_goodput_min, q.work_min), (0.99, 0.90));
        assert_eq!(
            paced_goals(0.25, false).map(|g| g.small_p99_excess_ms_max),
            Some(20.0)
        );
        let h = paced_goals(0.5, true).expect("goal at 0.5");
        assert_eq!(
            (
                h.small_p99_ratio_max,
                h.small_p99_excess_ms_max,
                h.bulk_share_min
            ),
            (3.0, 20.0, 0.40)
        );
        assert_eq!(
            paced_goals(0.5, false).map(|g| g.small_p99_excess_ms_max),
            Some(30.0)
        );
        for rho in [0.1, 0.3, 0.75, 1.0] {
            assert_eq!(paced_goals(rho, true), None, "{rho}");
        }
    }

    #[test]
    fn paced_figures_are_read_against_the_closed_loop_capacities() {
        // 248 of 250 done beside bulk: goodput 0.992; 24.8 ops/s ÷ X* 100 + 90 ÷ 120 MiB/s = 0.248 + 0.75.
        let iso = with_paced(true, vec![quarter(250, 248)]);
        assert!(close(iso.small_capacity_ops_s, 100.0), "{iso:?}");
        assert!(close(iso.bulk_capacity_mib_s, 120.0), "{iso:?}");
        let p = &iso.paced[0];
        assert!(p.sustainable_alone);
        assert!(close(p.small_p99_alone_ms, 10.0), "{p:?}");
        assert!(close(p.small_p99_under_load_ms, 25.0), "{p:?}");
        assert!(close(p.small_p99_ratio, 2.5), "{p:?}");
        assert!(close(p.small_p99_excess_ms, 15.0), "{p:?}");
        assert!((p.small_goodput - 0.992).abs() < 1e-12, "{p:?}");
        assert_eq!(p.bulk_share, Some(0.75));
        assert!(close(p.work, 0.998), "{p:?}");
        assert_eq!(
            (p.cpu_cores_small_alone, p.cpu_cores_under_load),
            (0.3, 1.9)
        );
        // Embedded: ratio 2.5 > 2 and excess 15 ms > 10 ms: the P99 goal alone is missed.
        let met = p.met.expect("judged");
        assert_eq!(
            (
                met.small_p99,
                met.small_goodput,
                met.bulk_share,
                met.work,
                met.all
            ),
            (Some(false), true, Some(true), Some(true), Some(false))
        );
        assert_eq!(p.verdict, "MISSED (small P99)");
        // Remote: 15 ms is within the 20 ms allowance.
        let remote = with_paced(false, vec![quarter(250, 248)]);
        assert_eq!(remote.paced[0].met.and_then(|m| m.all), Some(true));
        assert_eq!(remote.paced[0].verdict, "met");
        let json = serde_json::to_value(&iso).expect("serializes");
        let entry = &json["paced"][0];
        for field in [
            "rho",
            "small_p99_alone_ms",
            "small_p99_under_load_ms",
            "small_p99_ratio",
            "small_p99_excess_ms",
            "small_goodput",
            "bulk_share",
            "work",
        ] {
            assert!(entry[field].is_number(), "{field}: {entry}");
        }
        assert_eq!(entry["met"]["small_p99"], false);
        assert_eq!(entry["goals"]["bulk_share_min"], 0.65);
    }

    #[test]
    fn a_goodput_short_of_the_goal_is_missed() {
        // 240 of 250 beside bulk: 0.96 < 0.99.
        let iso = with_paced(false, vec![quarter(250, 240)]);
        let met = iso.paced[0].met.expect("judged");
        assert!(!met.small_goodput, "{met:?}");
        assert_eq!(iso.paced[0].verdict, "MISSED (small goodput)");
    }

    #[test]
    fn a_load_the_store_cannot_carry_alone_is_labelled_not_judged() {
        // 200 of 250 alone: goodput 0.8 before any bulk ran.
        let iso = with_paced(true, vec![quarter(200, 150)]);
        let p = &iso.paced[0];
        assert!(!p.sustainable_alone);
        assert_eq!(p.met, None);
        assert!(p.goals.is_some());
        assert!(
            p.verdict.starts_with("not sustainable alone"),
            "{}",
            p.verdict
        );
        assert!(
            p.verdict.contains("not an isolation result"),
            "{}",
            p.verdict
        );
    }

    #[test]
    fn a_load_without_goals_is_reported_without_a_verdict_of_its_own() {
        let mut m = quarter(250, 250);
        m.rho = 0.3;
        let iso = with_paced(true, vec![m]);
        assert_eq!((iso.paced[0].goals, iso.paced[0].met), (None, None));
        assert!(
            iso.paced[0].verdict.starts_with("no goal"),
            "{}",
            iso.paced[0].verdict
        );
    }

    #[test]
    fn a_fixed_rate_is_read_against_the_capacity_but_never_judged() {
        // 25 ops/s fixed is ρ = 0.25 of X* 100, where goals are stated: none is judged at a fixed rate.
        let mut m = quarter(250, 250);
        m.fixed_rate = true;
        let iso = with_paced(true, vec![m]);
        let p = &iso.paced[0];
        assert!(p.fixed_rate);
        assert_eq!((p.goals, p.met), (None, None));
        assert!(p.verdict.contains("fixed rate"), "{}", p.verdict);
        assert!(close(p.small_p99_excess_ms, 15.0), "{p:?}");
        let json = serde_json::to_value(p).expect("serializes");
        assert_eq!(json["fixed_rate"], true);
    }

    #[test]
    fn no_mixed_phases_means_no_isolation() {
        let phases = [phase("large_write", &[10], 1, 1.0)];
        assert!(isolation(&phases, &closed(1.0, 1, 4)).is_none());
    }
}
