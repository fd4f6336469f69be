//! The isolation figures of `--mixed`: each class (small operations: `interactive`; large ones: `bulk`) alone
//! and while the other class runs, and the two headline ratios with their goals (issue 11).

use serde::Serialize;

use crate::stats::{Latency, PhaseReport, latency_or_nulls};

/// Small gets and puts alone.
pub(crate) const SMALL_ALONE: &str = "small_alone";
/// The large loops alone.
pub(crate) const BULK_ALONE: &str = "bulk_alone";
/// Small gets and puts while the large loops run.
pub(crate) const SMALL_UNDER_LOAD: &str = "small_under_load";
/// The large loops while small gets and puts run (the same seconds as [`SMALL_UNDER_LOAD`]).
pub(crate) const BULK_UNDER_LOAD: &str = "bulk_under_load";

/// Goal of [`Isolation::small_p99_ratio`]: at most this.
pub const SMALL_P99_RATIO_GOAL_MAX: f64 = 2.0;
/// Goal of [`Isolation::bulk_throughput_ratio`]: at least this.
pub const BULK_THROUGHPUT_RATIO_GOAL_MIN: f64 = 0.70;

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
    /// `small_p99_under_load_ms` ÷ `small_p99_alone_ms`; null when either is missing.
    pub small_p99_ratio: Option<f64>,
    /// [`SMALL_P99_RATIO_GOAL_MAX`].
    pub small_p99_ratio_goal_max: f64,
    /// Whether `small_p99_ratio` meets its goal; null when it is null.
    pub small_p99_ratio_met: Option<bool>,
    /// Large-op throughput (puts and gets) of the large loops alone, MiB/s.
    pub bulk_throughput_alone_mib_s: Option<f64>,
    /// The same while small operations run, MiB/s.
    pub bulk_throughput_under_load_mib_s: Option<f64>,
    /// `bulk_throughput_under_load_mib_s` ÷ `bulk_throughput_alone_mib_s`; null when either is missing or the
    /// loops moved nothing alone.
    pub bulk_throughput_ratio: Option<f64>,
    /// [`BULK_THROUGHPUT_RATIO_GOAL_MIN`].
    pub bulk_throughput_ratio_goal_min: f64,
    /// Whether `bulk_throughput_ratio` meets its goal; null when it is null.
    pub bulk_throughput_ratio_met: Option<bool>,
}

/// `numerator ÷ denominator`, or `None` when either is missing or not finite, or the denominator is not positive.
pub(crate) fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if n.is_finite() && d.is_finite() && d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// The isolation figures from the phases of a run, or `None` when `--mixed` did not run.
pub(crate) fn isolation(
    phases: &[PhaseReport],
    seconds: f64,
    large_writers: usize,
    small_concurrency: usize,
) -> Option<Isolation> {
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
        small_p99_ratio_goal_max: SMALL_P99_RATIO_GOAL_MAX,
        small_p99_ratio_met: small_p99_ratio.map(|r| r <= SMALL_P99_RATIO_GOAL_MAX),
        bulk_throughput_alone_mib_s,
        bulk_throughput_under_load_mib_s,
        bulk_throughput_ratio,
        bulk_throughput_ratio_goal_min: BULK_THROUGHPUT_RATIO_GOAL_MIN,
        bulk_throughput_ratio_met: bulk_throughput_ratio
            .map(|r| r >= BULK_THROUGHPUT_RATIO_GOAL_MIN),
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
        let iso = isolation(&phases, 5.0, 2, 16).expect("mixed ran");
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
        assert_eq!(iso.small_p99_ratio_met, Some(false));
        assert!(close(iso.bulk_throughput_alone_mib_s, 120.0), "{iso:?}");
        assert!(close(iso.bulk_throughput_under_load_mib_s, 72.0), "{iso:?}");
        assert!(close(iso.bulk_throughput_ratio, 0.6), "{iso:?}");
        assert_eq!(iso.bulk_throughput_ratio_met, Some(false));
        let bulk_p50 = iso
            .under_load
            .bulk
            .and_then(|c| c.latency_ms)
            .map(|l| l.p50);
        assert!(close(bulk_p50, 800.0), "{bulk_p50:?}");
    }

    #[test]
    fn goals_are_met_within_their_bounds() {
        let big = 1 << 20;
        let phases = [
            small(SMALL_ALONE, 1, 10),
            phase(BULK_ALONE, &[10; 10], big, 1.0),
            small(SMALL_UNDER_LOAD, 1, 19),
            phase(BULK_UNDER_LOAD, &[10; 7], big, 1.0),
        ];
        let iso = isolation(&phases, 1.0, 1, 4).expect("mixed ran");
        assert!(close(iso.small_p99_ratio, 1.9), "{iso:?}");
        assert_eq!(iso.small_p99_ratio_met, Some(true));
        // Exactly the goal (7 MiB/s ÷ 10 MiB/s) meets it.
        assert_eq!(iso.bulk_throughput_ratio, Some(0.7));
        assert_eq!(iso.bulk_throughput_ratio_met, Some(true));
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
        let iso = isolation(&phases, 1.0, 1, 4).expect("mixed ran");
        assert_eq!((iso.small_p99_ratio, iso.small_p99_ratio_met), (None, None));
        assert_eq!(iso.small_p99_under_load_ms, None);
        assert_eq!(iso.bulk_throughput_alone_mib_s, Some(0.0));
        assert_eq!(
            (iso.bulk_throughput_ratio, iso.bulk_throughput_ratio_met),
            (None, None)
        );
        let json = serde_json::to_value(&iso).expect("serializes");
        assert!(json["small_p99_ratio"].is_null(), "{json}");
        assert!(
            json["under_load"]["interactive"]["latency_ms"]["p99"].is_null(),
            "{json}"
        );
        assert_eq!(json["small_p99_ratio_goal_max"], 2.0);
    }

    #[test]
    fn no_mixed_phases_means_no_isolation() {
        let phases = [phase("large_write", &[10], 1, 1.0)];
        assert!(isolation(&phases, 1.0, 1, 4).is_none());
    }
}
