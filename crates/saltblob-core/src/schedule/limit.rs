//! The adaptive concurrency limit: how many requests may be in flight to the backend. A gradient limit fed
//! with measured latencies: it shrinks when latency rises above its no-load baseline by more than the tolerance
//! and grows back when latency falls. Pure arithmetic on the samples given, so it is tested without a clock.
//!
//! The limit shrinks once a class's recent latency exceeds `tolerance × baseline + 1 ms`: the slack keeps
//! scheduling jitter of fast requests from counting as a rise.
//!
//! Requests differ in size, so a latency is normalized by the request's bytes (per 64 KiB) before use, and each
//! class keeps its own baseline (records and small chunks of `interactive` would otherwise set a baseline that
//! no bulk unit can meet). The limit follows the worst gradient among the classes sampled recently: when small
//! requests slow down because bulk work queues in the engine, fewer requests are let in.

use std::time::Duration;

/// Bytes a latency is normalized by.
const NORMALIZE_BYTES: f64 = 64.0 * 1024.0;
/// Weight of a new sample in the short-term average (about the last ten samples).
const SHORT_WEIGHT: f64 = 0.1;
/// How fast a baseline follows a lasting rise of latency (about the last 500 samples), so that a slower
/// backend (a colder cache, a busier disk) becomes the new normal instead of pinning the limit at its minimum.
const BASELINE_DRIFT: f64 = 0.002;
/// Weight of the new target in the limit (smoothing).
const SMOOTHING: f64 = 0.2;
/// Samples after its last one during which a class still counts.
const ACTIVE_SAMPLES: u64 = 200;
/// Latency a class may gain above its tolerated level before it counts as a rise, in seconds per 64 KiB: jitter
/// of a few hundred microseconds (thread wake-ups on a busy machine) is no sign of a queue in the backend,
/// and a fast backend (memory, a warm cache) would otherwise be held at the minimum by it.
const SLACK: f64 = 0.001;

/// The limit and the latency history it is computed from.
#[derive(Debug)]
pub(crate) struct GradientLimit {
    limit: f64,
    min: f64,
    max: f64,
    tolerance: f64,
    classes: Vec<Latencies>,
    samples: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Latencies {
    short: f64,
    baseline: f64,
    last_sample: Option<u64>,
}

impl Latencies {
    fn gradient(&self, tolerance: f64) -> f64 {
        if self.short <= 0.0 {
            return 1.0;
        }
        ((tolerance * self.baseline + SLACK) / self.short).clamp(0.5, 1.0)
    }
}

/// A latency per 64 KiB of request.
pub(crate) fn normalized(latency: Duration, bytes: u64) -> f64 {
    latency.as_secs_f64() / (1.0 + bytes as f64 / NORMALIZE_BYTES)
}

impl GradientLimit {
    /// A limit starting at `initial` within `min..=max`, for `classes` classes.
    pub(crate) fn new(
        min: usize,
        initial: usize,
        max: usize,
        tolerance: f64,
        classes: usize,
    ) -> Self {
        Self {
            limit: initial as f64,
            min: min as f64,
            max: max as f64,
            tolerance,
            classes: vec![Latencies::default(); classes],
            samples: 0,
        }
    }

    /// Requests that may be in flight now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// Feeds the normalized latency ([`normalized`]) of one request of `class`, which found `inflight` requests
    /// in flight (itself included) when it started.
    pub(crate) fn sample(&mut self, class: usize, latency: f64, inflight: usize) {
        if !latency.is_finite() || latency < 0.0 {
            return;
        }
        self.samples += 1;
        let now = self.samples;
        let Some(own) = self.classes.get_mut(class) else {
            return;
        };
        if own.last_sample.is_none() {
            (own.short, own.baseline) = (latency, latency);
        } else {
            own.short += (latency - own.short) * SHORT_WEIGHT;
            own.baseline = if latency < own.baseline {
                latency
            } else {
                own.baseline + (own.short - own.baseline) * BASELINE_DRIFT
            };
        }
        own.last_sample = Some(now);
        let gradient = self
            .classes
            .iter()
            .filter(|c| c.last_sample.is_some_and(|s| now - s <= ACTIVE_SAMPLES))
            .map(|c| c.gradient(self.tolerance))
            .fold(1.0, f64::min);
        let target = if gradient < 1.0 {
            self.limit * gradient
        } else if (inflight as f64) * 2.0 >= self.limit {
            // Latency is within tolerance and the limit is in use: probe for more.
            self.limit + self.limit.sqrt()
        } else {
            // Latency is fine but the limit is not the bottleneck: growing it would mean nothing.
            self.limit
        };
        self.limit =
            (self.limit * (1.0 - SMOOTHING) + target * SMOOTHING).clamp(self.min, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERACTIVE: usize = 0;
    const BULK: usize = 1;

    fn limit() -> GradientLimit {
        GradientLimit::new(2, 8, 64, 2.0, 2)
    }

    #[test]
    fn latencies_are_normalized_by_size() {
        let small = normalized(Duration::from_millis(1), 0);
        let unit = normalized(Duration::from_millis(5), 256 << 10);
        assert!((small - 0.001).abs() < 1e-12);
        assert!(
            (unit - 0.001).abs() < 1e-12,
            "256 KiB in 5 ms is as fast per byte"
        );
    }

    /// At baseline latency with the limit in use, the limit grows to its maximum, and no further.
    #[test]
    fn it_grows_while_latency_stays_at_baseline() {
        let mut l = limit();
        for _ in 0..200 {
            let inflight = l.limit();
            l.sample(BULK, 0.001, inflight);
        }
        assert_eq!(l.limit(), 64);
    }

    /// A limit that is not used does not grow.
    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut l = limit();
        for _ in 0..200 {
            l.sample(BULK, 0.001, 1);
        }
        assert_eq!(l.limit(), 8);
    }

    /// Small requests slowing to 3x their baseline shrink the limit, down to the minimum and no further;
    /// when they recover, it grows back.
    #[test]
    fn it_shrinks_when_latency_rises_and_recovers() {
        let mut l = limit();
        for _ in 0..20 {
            l.sample(INTERACTIVE, 0.002, 8);
        }
        let before = l.limit();
        for _ in 0..100 {
            l.sample(INTERACTIVE, 0.010, 8);
            l.sample(BULK, 0.002, 8);
        }
        assert!(l.limit() < before, "{} < {before}", l.limit());
        assert_eq!(l.limit(), 2, "down to the minimum");
        for _ in 0..300 {
            let inflight = l.limit();
            l.sample(INTERACTIVE, 0.002, inflight);
        }
        assert!(l.limit() > 8, "grew back: {}", l.limit());
    }

    /// Within the tolerance, latency above the baseline does not shrink the limit.
    #[test]
    fn latency_within_tolerance_is_no_signal() {
        let mut l = limit();
        l.sample(INTERACTIVE, 0.002, 8);
        for _ in 0..100 {
            l.sample(INTERACTIVE, 0.0049, 8);
        }
        assert!(l.limit() >= 8, "{}", l.limit());
    }

    /// Jitter below the slack is no signal, however large as a ratio: 50 µs requests taking 500 µs.
    #[test]
    fn jitter_of_fast_requests_is_no_signal() {
        let mut l = limit();
        l.sample(INTERACTIVE, 0.000_05, 8);
        for _ in 0..100 {
            l.sample(INTERACTIVE, 0.000_5, 8);
        }
        assert!(l.limit() >= 8, "{}", l.limit());
    }

    /// A class not sampled lately does not hold the limit down.
    #[test]
    fn a_class_gone_quiet_stops_counting() {
        let mut l = limit();
        l.sample(INTERACTIVE, 0.002, 8);
        for _ in 0..50 {
            l.sample(INTERACTIVE, 0.020, 8);
        }
        assert_eq!(l.limit(), 2);
        for _ in 0..(ACTIVE_SAMPLES + 200) {
            let inflight = l.limit();
            l.sample(BULK, 0.001, inflight);
        }
        assert!(l.limit() > 8, "{}", l.limit());
    }

    #[test]
    fn nonsense_samples_are_ignored() {
        let mut l = limit();
        l.sample(INTERACTIVE, f64::NAN, 8);
        l.sample(INTERACTIVE, -1.0, 8);
        l.sample(7, 0.001, 8);
        assert_eq!(l.limit(), 8);
    }
}
