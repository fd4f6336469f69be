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
//!
//! Below its minimum the limit goes on as a **duty**: the share of time background work may keep one request
//! in flight (1.0: always; the scheduler pauses between background requests otherwise). Fewer requests in flight
//! cannot hold back an engine that runs one bulk request as fast as many (one Cassandra node, a device queue
//! that one large write fills), so once the limit is at its minimum and the latency of a foreground class
//! (`interactive`) still rises, the duty shrinks, down to its own floor; when that latency is back within
//! tolerance the duty grows back to 1.0 before the limit grows. Only a foreground class's own samples shrink the
//! duty (background samples neither do with their own latency nor repeat the foreground's last figure), and a
//! foreground class counts only while it runs a load (a request in the last half second, 20 in the last one or
//! two): bulk work alone, or beside a trickle of small requests, runs without pauses.

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

/// How fast the duty grows back per sample within tolerance, as a target factor (smoothed like the limit).
const DUTY_GROWTH: f64 = 1.25;
/// Seconds after its last sample during which a foreground class still counts for the duty. Counted in time,
/// not samples: while the duty pauses bulk work, its samples come slowly, and a foreground class that has gone
/// quiet must not keep it paused.
const FOREGROUND_ACTIVE_SECS: f64 = 0.5;
/// Samples a foreground class must have had in its current and previous window of [`FOREGROUND_ACTIVE_SECS`]
/// to count for the duty: a load to protect, not a trickle. Every large get reads its manifest as `interactive`
/// (its layout, and so its class, is not known before), a few such reads a second; measured, they alone held
/// large gets at the duty's floor.
const FOREGROUND_MIN_SAMPLES: u32 = 20;

/// The limit and the latency history it is computed from.
#[derive(Debug)]
pub(crate) struct GradientLimit {
    limit: f64,
    min: f64,
    max: f64,
    /// The share of time background work may hold a request in flight, in `min_duty..=1.0`.
    duty: f64,
    min_duty: f64,
    tolerance: f64,
    classes: Vec<Latencies>,
    samples: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Latencies {
    /// Whether the class is background work, whose own latency never shrinks the duty.
    background: bool,
    short: f64,
    baseline: f64,
    last_sample: Option<u64>,
    /// When it was sampled last, in seconds on the caller's clock.
    last_at: f64,
    /// Start of its current window of [`FOREGROUND_ACTIVE_SECS`], and its samples in it and in the one before.
    window_at: f64,
    window_samples: u32,
    previous_window_samples: u32,
}

impl Latencies {
    /// Counts a sample at `at` in its window.
    fn count(&mut self, at: f64) {
        let since = at - self.window_at;
        if since >= FOREGROUND_ACTIVE_SECS {
            self.previous_window_samples = if since < 2.0 * FOREGROUND_ACTIVE_SECS {
                self.window_samples
            } else {
                0
            };
            (self.window_at, self.window_samples) = (at, 0);
        }
        self.window_samples = self.window_samples.saturating_add(1);
        self.last_at = at;
    }

    /// Whether it is a foreground load the duty protects at `at`: recent, and more than a trickle.
    fn protected(&self, at: f64) -> bool {
        !self.background
            && at - self.last_at <= FOREGROUND_ACTIVE_SECS
            && self.window_samples + self.previous_window_samples >= FOREGROUND_MIN_SAMPLES
    }

    /// Its gradient: 1.0 while its latency is within tolerance, down to 0.5.
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
    /// A limit starting at `initial` within `min..=max`, for classes that are background work or not
    /// (`background`, by class); below `min`, the duty goes down to `min_duty` (1.0: never).
    pub(crate) fn new(
        min: usize,
        initial: usize,
        max: usize,
        min_duty: f64,
        tolerance: f64,
        background: &[bool],
    ) -> Self {
        Self {
            limit: initial as f64,
            min: min as f64,
            max: max as f64,
            duty: 1.0,
            min_duty: min_duty.clamp(f64::MIN_POSITIVE, 1.0),
            tolerance,
            classes: background
                .iter()
                .map(|&background| Latencies {
                    background,
                    ..Latencies::default()
                })
                .collect(),
            samples: 0,
        }
    }

    /// Requests that may be in flight now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// The share of time background work may hold a request in flight: 1.0 unless the limit is at its minimum
    /// and latency still rose.
    pub(crate) fn duty(&self) -> f64 {
        self.duty
    }

    /// [`GradientLimit::sample_at`] with every sample at the same time: for tests of the limit alone.
    #[cfg(test)]
    pub(crate) fn sample(&mut self, class: usize, latency: f64, inflight: usize) {
        self.sample_at(class, latency, inflight, 0.0);
    }

    /// Feeds the normalized latency ([`normalized`]) of one request of `class`, which found `inflight` requests
    /// in flight (itself included) when it started and ended `at` seconds on the caller's clock.
    pub(crate) fn sample_at(&mut self, class: usize, latency: f64, inflight: usize, at: f64) {
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
        own.count(at);
        // Only a foreground load's own samples are news of its latency: a background sample must not shrink the
        // duty again on the foreground's last figure, which may be long past (a sequence of small requests, then
        // a large get alone: each of the get's reads would otherwise halve its own speed).
        let foreground_sample = own.protected(at);
        let active = self
            .classes
            .iter()
            .filter(|c| c.last_sample.is_some_and(|s| now - s <= ACTIVE_SAMPLES));
        let (mut gradient, mut foreground, mut any_foreground) = (1.0_f64, 1.0_f64, false);
        for class in active {
            let g = class.gradient(self.tolerance);
            gradient = gradient.min(g);
            if class.protected(at) {
                foreground = foreground.min(g);
                any_foreground = true;
            }
        }
        if !any_foreground {
            // Nothing to keep the bulk work's pauses for.
            self.duty = 1.0;
        }
        let at_min = self.limit <= self.min + 0.5;
        if foreground < 1.0 && at_min && foreground_sample {
            // Fewer requests cannot help any more: pause between them instead.
            let target = self.duty * foreground;
            self.duty =
                (self.duty * (1.0 - SMOOTHING) + target * SMOOTHING).clamp(self.min_duty, 1.0);
        } else if foreground >= 1.0 && self.duty < 1.0 {
            // Within tolerance: first the pauses go, then the limit may grow.
            let target = self.duty * DUTY_GROWTH;
            self.duty = (self.duty * (1.0 - SMOOTHING) + target * SMOOTHING).min(1.0);
            return;
        }
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
        GradientLimit::new(2, 8, 64, 1.0, 2.0, &[false, true])
    }

    fn with_duty(min_duty: f64) -> GradientLimit {
        GradientLimit::new(2, 8, 64, min_duty, 2.0, &[false, true])
    }

    /// `n` small requests at their baseline latency (2 ms), each finding the limit in use.
    fn small_requests_at_baseline(l: &mut GradientLimit, n: usize) {
        for _ in 0..n {
            let inflight = l.limit();
            l.sample(INTERACTIVE, 0.002, inflight);
        }
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
        small_requests_at_baseline(&mut l, 300);
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

    /// The duty stays 1.0, with the limit at its minimum, however high latency goes: without a floor below 1.0,
    /// and when the latency is bulk work's own (alone, it runs whole).
    #[test]
    fn the_duty_stays_whole_without_a_floor_or_a_foreground_load() {
        for (mut l, class) in [(limit(), INTERACTIVE), (with_duty(0.1), BULK)] {
            l.sample(class, 0.002, 8);
            for _ in 0..200 {
                l.sample(class, 0.050, 2);
            }
            assert_eq!((l.limit(), l.duty()), (2, 1.0), "class {class}");
        }
    }

    /// Latency still rising with the limit at its minimum shrinks the duty, down to its floor and only once the
    /// limit is there; latency back within tolerance grows the duty back to 1.0 before the limit grows.
    #[test]
    fn below_the_minimum_the_duty_shrinks_and_recovers_first() {
        let mut l = with_duty(0.1);
        l.sample(INTERACTIVE, 0.002, 8);
        l.sample(INTERACTIVE, 0.010, 8);
        assert!(l.limit() > 2, "the limit moves first: {}", l.limit());
        assert_eq!(l.duty(), 1.0, "the duty waits for the limit's minimum");
        for _ in 0..200 {
            l.sample(INTERACTIVE, 0.050, 2);
        }
        assert_eq!(l.limit(), 2);
        assert!(
            (l.duty() - 0.1).abs() < 1e-9,
            "down to the floor: {}",
            l.duty()
        );
        let mut duties = vec![l.duty()];
        while l.duty() < 1.0 {
            l.sample(INTERACTIVE, 0.002, 2);
            duties.push(l.duty());
            assert_eq!(l.limit(), 2, "the limit waits for the duty");
            assert!(duties.len() < 200, "the duty grows back: {duties:?}");
        }
        assert!(
            duties.windows(2).all(|w| w[0] <= w[1]),
            "it never falls back: {duties:?}"
        );
        small_requests_at_baseline(&mut l, 100);
        assert!(l.limit() > 2, "then the limit grows: {}", l.limit());
    }

    /// A foreground class that has gone quiet for more than half a second leaves the bulk work without pauses at
    /// once, however few samples came since.
    #[test]
    fn a_quiet_foreground_ends_the_pauses() {
        let mut l = with_duty(0.1);
        l.sample_at(INTERACTIVE, 0.002, 2, 0.0);
        for i in 0..200 {
            l.sample_at(INTERACTIVE, 0.050, 2, f64::from(i) * 0.001);
        }
        assert!((l.duty() - 0.1).abs() < 1e-9, "{}", l.duty());
        l.sample_at(BULK, 0.002, 1, 0.6);
        assert!((l.duty() - 0.1).abs() < 1e-9, "still paced: {}", l.duty());
        l.sample_at(BULK, 0.002, 1, 0.8);
        assert_eq!(l.duty(), 1.0);
    }

    /// A trickle of slow foreground requests (the manifest reads of large gets, one every 100 ms) never pauses
    /// bulk work; a load of them does.
    #[test]
    fn a_trickle_of_foreground_requests_is_no_load_to_protect() {
        let mut l = with_duty(0.1);
        l.sample_at(INTERACTIVE, 0.000_1, 2, 0.0);
        for i in 1..=100 {
            let at = f64::from(i) * 0.1;
            l.sample_at(INTERACTIVE, 0.050, 2, at);
            for _ in 0..20 {
                l.sample_at(BULK, 0.010, 2, at);
            }
        }
        assert_eq!((l.limit(), l.duty()), (2, 1.0));
        for i in 0..100 {
            l.sample_at(INTERACTIVE, 0.050, 2, 10.0 + f64::from(i) * 0.005);
        }
        assert!(l.duty() < 0.5, "{}", l.duty());
    }

    /// Background samples do not shrink the duty on a foreground load's last latency: after the foreground's
    /// own samples have shrunk it, a run of bulk samples within the foreground's half second leaves it where it
    /// was (before, each one shrank it again, and a large get right after a burst of small requests ran at the
    /// duty's floor).
    #[test]
    fn bulk_samples_do_not_repeat_the_foregrounds_last_figure() {
        let mut l = with_duty(0.1);
        l.sample_at(INTERACTIVE, 0.002, 2, 0.0);
        for i in 1..=30 {
            l.sample_at(INTERACTIVE, 0.050, 2, f64::from(i) * 0.001);
        }
        let after_foreground = l.duty();
        assert!(
            after_foreground < 1.0 && after_foreground > 0.1,
            "{after_foreground}"
        );
        for i in 0..100 {
            l.sample_at(BULK, 0.010, 1, 0.031 + f64::from(i) * 0.001);
        }
        assert_eq!(l.duty(), after_foreground);
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
