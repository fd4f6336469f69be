//! Latency recording (HDR histograms) and the result of one phase.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

/// Bytes in a MiB, as a float.
pub const MIB: f64 = 1_048_576.0;

/// Distinct error messages kept per phase (the count covers all of them).
const MAX_MESSAGES: usize = 5;

/// Latencies in nanoseconds, in an auto-resizing HDR histogram with 3 significant digits.
#[derive(Clone, Debug)]
pub struct Recorder {
    hist: Histogram<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self {
            hist: Histogram::new(3).expect("3 significant digits is a valid HDR precision"),
        }
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // `record` grows the auto-resizing histogram to fit; saturating only if it cannot.
        if self.hist.record(nanos).is_err() {
            self.hist.saturating_record(nanos);
        }
    }

    /// Adds every latency of `other`.
    pub fn merge(&mut self, other: &Recorder) {
        // Auto-resizing histograms accept any value: the addition cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The percentiles in milliseconds, or `None` when nothing was recorded.
    pub fn latency(&self) -> Option<Latency> {
        if self.hist.is_empty() {
            return None;
        }
        let ms = |nanos: u64| nanos as f64 / 1e6;
        let h = &self.hist;
        Some(Latency {
            min: ms(h.min()),
            mean: h.mean() / 1e6,
            p50: ms(h.value_at_quantile(0.50)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        })
    }
}

/// Latency percentiles of a phase, in milliseconds (from an HDR histogram: each is within 0.1% of the exact
/// value, rounded up).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    /// Fastest operation.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest operation.
    pub max: f64,
}

/// What the name of a phase run on sealed blobs ends with (`large_write_sealed`, `bench --encrypt`).
pub const SEALED_SUFFIX: &str = "_sealed";

/// The result of one phase, as printed and as written to JSON.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseReport {
    /// `large_write`, `large_read`, `small_write`, `small_read`, `unchunked_write`, `unchunked_read`,
    /// `small_alone`, `bulk_alone`, `small_under_load` or `bulk_under_load`.
    pub name: String,
    /// What the phase did, in words.
    pub description: String,
    /// Operations that succeeded.
    pub ops: u64,
    /// Bytes moved by the operations that succeeded.
    pub bytes: u64,
    /// Wall time of the phase's operations, in seconds.
    pub seconds: f64,
    /// `bytes` ÷ MiB ÷ `seconds`.
    pub throughput_mib_s: f64,
    /// `ops` ÷ `seconds`.
    pub ops_per_s: f64,
    /// Operations that failed (not in the latencies).
    pub errors: u64,
    /// The first distinct error messages.
    pub error_messages: Vec<String>,
    /// Latency of the operations that succeeded; every field null when none did.
    #[serde(serialize_with = "latency_or_nulls")]
    pub latency_ms: Option<Latency>,
    /// For read phases: whether every read was verified (length, content stamp and BLAKE3 digest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// Phase-specific details (unchunked mode, background load of the mixed phase, the large writers of a bulk
    /// phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

pub(crate) fn latency_or_nulls<S: Serializer>(
    l: &Option<Latency>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Nulls {
        min: Option<f64>,
        mean: Option<f64>,
        p50: Option<f64>,
        p95: Option<f64>,
        p99: Option<f64>,
        p999: Option<f64>,
        max: Option<f64>,
    }
    match l {
        Some(l) => l.serialize(s),
        None => Nulls {
            min: None,
            mean: None,
            p50: None,
            p95: None,
            p99: None,
            p999: None,
            max: None,
        }
        .serialize(s),
    }
}

/// What one worker (or a sequential loop) of a phase measured.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Latencies of the operations that succeeded.
    pub latencies: Recorder,
    /// Bytes they moved.
    pub bytes: u64,
    /// Failed operations.
    pub errors: u64,
    /// The first distinct messages of the failures.
    pub messages: Vec<String>,
    /// Failed verifications (subset of `errors`).
    pub unverified: u64,
}

impl Tally {
    /// Counts a successful operation.
    pub fn ok(&mut self, latency: Duration, bytes: u64) {
        self.latencies.record(latency);
        self.bytes += bytes;
    }

    /// Counts a failed operation.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.errors += 1;
        let message = message.into();
        if self.messages.len() < MAX_MESSAGES && !self.messages.contains(&message) {
            self.messages.push(message);
        }
    }

    /// Counts a read whose data was not what was written.
    pub fn unverified(&mut self, message: impl Into<String>) {
        self.unverified += 1;
        self.fail(message);
    }

    /// Adds another worker's tally.
    pub fn merge(&mut self, other: &Tally) {
        self.latencies.merge(&other.latencies);
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.unverified += other.unverified;
        for m in &other.messages {
            if self.messages.len() < MAX_MESSAGES && !self.messages.contains(m) {
                self.messages.push(m.clone());
            }
        }
    }

    /// The phase's report; `seconds` is its wall time, `read` whether it verified data.
    pub fn report(self, name: &str, description: String, seconds: f64, read: bool) -> PhaseReport {
        let ops = self.latencies.count();
        let (throughput_mib_s, ops_per_s) = if seconds > 0.0 {
            (self.bytes as f64 / MIB / seconds, ops as f64 / seconds)
        } else {
            (0.0, 0.0)
        };
        PhaseReport {
            name: name.to_owned(),
            description,
            ops,
            bytes: self.bytes,
            seconds,
            throughput_mib_s,
            ops_per_s,
            errors: self.errors,
            error_messages: self.messages,
            latency_ms: self.latencies.latency(),
            verified: read.then_some(self.errors == 0 && ops > 0 && self.unverified == 0),
            details: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(latencies_ms: &[u64], bytes_each: u64) -> Tally {
        let mut t = Tally::default();
        for &ms in latencies_ms {
            t.ok(Duration::from_millis(ms), bytes_each);
        }
        t
    }

    #[test]
    fn percentiles_are_ordered_and_close() {
        let values: Vec<u64> = (1..=1000).collect();
        let l = tally(&values, 1)
            .latencies
            .latency()
            .expect("something recorded");
        assert!(l.min <= l.p50 && l.p50 <= l.p95 && l.p95 <= l.p99);
        assert!(l.p99 <= l.p999 && l.p999 <= l.max);
        // HDR with 3 significant digits: within 0.1% of the exact order statistics.
        for (got, want) in [
            (l.min, 1.0),
            (l.p50, 500.0),
            (l.p99, 990.0),
            (l.max, 1000.0),
        ] {
            assert!((got - want).abs() <= want * 0.001 + 1e-6, "{got} vs {want}");
        }
        assert!((l.mean - 500.5).abs() < 1.0, "{}", l.mean);
    }

    #[test]
    fn throughput_is_bytes_over_seconds() {
        let r = tally(&[10, 20, 30, 40], 1 << 20).report("large_write", "x".into(), 2.0, false);
        assert_eq!((r.ops, r.bytes, r.errors), (4, 4 << 20, 0));
        assert!((r.throughput_mib_s - 2.0).abs() < 1e-9);
        assert!((r.ops_per_s - 2.0).abs() < 1e-9);
        assert_eq!(r.verified, None);
    }

    #[test]
    fn workers_merge_and_errors_are_counted_once_each() {
        let mut a = tally(&[1, 2], 10);
        let mut b = tally(&[3], 10);
        a.fail("boom");
        b.fail("boom");
        b.unverified("bad bytes");
        a.merge(&b);
        let r = a.report("small_read", "x".into(), 1.0, true);
        assert_eq!((r.ops, r.bytes, r.errors), (3, 30, 3));
        assert_eq!(r.error_messages, vec!["boom", "bad bytes"]);
        assert_eq!(r.verified, Some(false));
    }

    #[test]
    fn json_shape_has_every_field_even_without_successes() {
        let mut t = Tally::default();
        t.fail("refused");
        let json = serde_json::to_value(t.report("unchunked_write", "x".into(), 0.5, false))
            .expect("serializes");
        for field in [
            "name",
            "ops",
            "bytes",
            "seconds",
            "throughput_mib_s",
            "errors",
            "error_messages",
        ] {
            assert!(json.get(field).is_some(), "{field} missing: {json}");
        }
        let lat = &json["latency_ms"];
        for field in ["min", "mean", "p50", "p95", "p99", "p999", "max"] {
            assert!(
                lat.get(field).is_some_and(|v| v.is_null()),
                "{field}: {lat}"
            );
        }
        let ok = serde_json::to_value(tally(&[5], 1).report("small_read", "x".into(), 1.0, true))
            .expect("serializes");
        assert_eq!(
            ok["latency_ms"]["p50"].as_f64().map(|v| v.round()),
            Some(5.0)
        );
        assert_eq!(ok["verified"], serde_json::Value::Bool(true));
    }
}
