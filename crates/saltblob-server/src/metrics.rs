//! The server's metrics, written in Prometheus' text format by hand (a few counters and histograms need no
//! metrics framework), with the build and the process figures (`process.rs`). `docs/s3.md` lists the names.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use saltblob_core::{GcReport, PriorityClass, SchedulerStats};

/// Why a connection was closed by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// No request by the first-request deadline.
    FirstRequest,
    /// No request in flight for the idle timeout.
    Idle,
    /// A write made no progress for the IO timeout.
    Write,
}

impl Closed {
    /// The metrics label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::FirstRequest => "first_request",
            Self::Idle => "idle",
            Self::Write => "write",
        }
    }
}

/// Upper bounds of the request duration histogram's buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0,
];

/// A latency histogram.
#[derive(Clone, Debug, Default)]
struct Histogram {
    /// Per bucket of [`BUCKETS`] (not cumulative), then the overflow.
    counts: [u64; BUCKETS.len() + 1],
    sum_seconds: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let slot = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        if let Some(count) = self.counts.get_mut(slot) {
            *count += 1;
        }
        self.sum_seconds += seconds;
    }
}

/// What the last gc pass found.
#[derive(Clone, Debug, Default)]
struct GcFigures {
    runs_ok: u64,
    runs_failed: u64,
    last: Option<GcReport>,
    last_run_unix_seconds: u64,
    reclaimed_bytes_total: u64,
    reclaimed_versions_total: u64,
    abandoned_puts_total: u64,
    lifecycle_expired_total: u64,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Requests by (operation, status).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Durations by (operation, class).
    durations: Mutex<BTreeMap<(String, PriorityClass), Histogram>>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    in_flight: AtomicI64,
    gc: Mutex<GcFigures>,
    connections_open: AtomicI64,
    connections_refused: AtomicU64,
    /// Connections the server closed, by [`Closed`] (first request, idle, write).
    connections_closed: [AtomicU64; 3],
    requests_shed: AtomicU64,
}

/// One finished request, as the metrics count it.
pub(crate) struct Finished<'a> {
    pub op: &'a str,
    pub class: &'a PriorityClass,
    pub status: u16,
    pub duration: Duration,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl Metrics {
    /// A request has started.
    pub(crate) fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request has finished (its response sent, or abandoned).
    pub(crate) fn finished(&self, r: &Finished<'_>) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(r.bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(r.bytes_out, Ordering::Relaxed);
        if let Ok(mut requests) = self.requests.lock() {
            *requests.entry((r.op.to_owned(), r.status)).or_default() += 1;
        }
        if let Ok(mut durations) = self.durations.lock() {
            durations
                .entry((r.op.to_owned(), r.class.clone()))
                .or_default()
                .observe(r.duration.as_secs_f64());
        }
    }

    /// A connection was accepted and is being served.
    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    /// A served connection has ended.
    pub(crate) fn connection_ended(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// A connection beyond the cap was closed unserved.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The server closed a connection, for `why`.
    pub(crate) fn connection_closed(&self, why: Closed) {
        let slot = match why {
            Closed::FirstRequest => 0,
            Closed::Idle => 1,
            Closed::Write => 2,
        };
        if let Some(counter) = self.connections_closed.get(slot) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request beyond the cap on requests in flight was answered `503 SlowDown`.
    pub(crate) fn request_shed(&self) {
        self.requests_shed.fetch_add(1, Ordering::Relaxed);
    }

    /// A lifecycle pass deleted `objects` expired objects.
    pub(crate) fn lifecycle_expired(&self, objects: u64) {
        if let Ok(mut gc) = self.gc.lock() {
            gc.lifecycle_expired_total += objects;
        }
    }

    /// A gc pass has ended.
    pub(crate) fn gc_ran(&self, report: Option<&GcReport>) {
        let Ok(mut gc) = self.gc.lock() else { return };
        gc.last_run_unix_seconds = saltblob_core::version::now_micros() / 1_000_000;
        match report {
            Some(r) => {
                gc.runs_ok += 1;
                gc.reclaimed_bytes_total += r.reclaim.bytes;
                gc.reclaimed_versions_total += r.reclaim.versions;
                gc.abandoned_puts_total += r.abandoned_puts;
                gc.last = Some(r.clone());
            }
            None => gc.runs_failed += 1,
        }
    }

    /// The metrics in Prometheus' text format, with the store's scheduler figures and its read-ahead
    /// (`read_ahead`: bytes in use, budget).
    pub(crate) fn render(&self, scheduler: &SchedulerStats, read_ahead: (u64, u64)) -> String {
        let mut out = String::new();
        let mut lines = Vec::new();

        let name = family(
            &mut out,
            "saltblob_s3_requests_total",
            "counter",
            "S3 requests by operation and HTTP status.",
        );
        if let Ok(requests) = self.requests.lock() {
            for ((op, status), n) in requests.iter() {
                lines.push(format!("{name}{{op=\"{op}\",status=\"{status}\"}} {n}"));
            }
        }
        flush(&mut out, &mut lines);

        let name = family(
            &mut out,
            "saltblob_s3_request_duration_seconds",
            "histogram",
            "S3 request durations (to the end of the response body) by operation and priority class.",
        );
        let durations = self.durations.lock().map(|d| d.clone()).unwrap_or_default();
        for ((op, class), h) in &durations {
            let labels = format!("op=\"{op}\",class=\"{class}\"");
            let mut cumulative = 0;
            for (bound, count) in BUCKETS.iter().zip(h.counts.iter()) {
                cumulative += count;
                lines.push(format!(
                    "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                ));
            }
            cumulative += h.counts.last().copied().unwrap_or(0);
            lines.push(format!(
                "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}"
            ));
            lines.push(format!("{name}_sum{{{labels}}} {}", h.sum_seconds));
            lines.push(format!("{name}_count{{{labels}}} {cumulative}"));
        }
        flush(&mut out, &mut lines);

        for (name, kind, help, value) in [
            (
                "saltblob_s3_bytes_in_total",
                "counter",
                "Request body bytes received.",
                self.bytes_in.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_s3_bytes_out_total",
                "counter",
                "Response body bytes sent.",
                self.bytes_out.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_s3_requests_in_flight",
                "gauge",
                "S3 requests being served.",
                self.in_flight.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_s3_connections_open",
                "gauge",
                "Connections being served.",
                self.connections_open.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_s3_connections_refused_total",
                "counter",
                "Connections closed unserved because --max-connections were open.",
                self.connections_refused.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_s3_requests_shed_total",
                "counter",
                "Requests answered 503 SlowDown because --max-requests were in flight.",
                self.requests_shed.load(Ordering::Relaxed).to_string(),
            ),
            (
                "saltblob_read_ahead_bytes",
                "gauge",
                "Bytes of chunks the store's reads hold ahead of their readers (one budget for all reads).",
                read_ahead.0.to_string(),
            ),
            (
                "saltblob_read_ahead_budget_bytes",
                "gauge",
                "The store's read-ahead budget.",
                read_ahead.1.to_string(),
            ),
            (
                "saltblob_scheduler_limit",
                "gauge",
                "Backend requests the store's scheduler allows in flight (adaptive).",
                scheduler.limit.to_string(),
            ),
            (
                "saltblob_scheduler_in_flight",
                "gauge",
                "Backend requests in flight.",
                scheduler.inflight.to_string(),
            ),
            (
                "saltblob_scheduler_bulk_duty",
                "gauge",
                "Share of time background classes may keep a backend request in flight (1: no pauses).",
                scheduler.duty.to_string(),
            ),
        ] {
            let name = family(&mut out, name, kind, help);
            lines.push(format!("{name} {value}"));
            flush(&mut out, &mut lines);
        }

        let name = family(
            &mut out,
            "saltblob_s3_connections_closed_total",
            "counter",
            "Connections the server closed: no request by the first-request deadline, idle, or a write stalled.",
        );
        for (why, counter) in [Closed::FirstRequest, Closed::Idle, Closed::Write]
            .into_iter()
            .zip(&self.connections_closed)
        {
            lines.push(format!(
                "{name}{{reason=\"{}\"}} {}",
                why.label(),
                counter.load(Ordering::Relaxed)
            ));
        }
        flush(&mut out, &mut lines);

        type ClassFigure = fn(&saltblob_core::ClassStats) -> String;
        let class_families: [(&str, &str, &str, ClassFigure); 6] = [
            (
                "saltblob_scheduler_admitted_total",
                "counter",
                "Backend requests admitted, by priority class.",
                |c| c.admitted.to_string(),
            ),
            (
                "saltblob_scheduler_bytes_total",
                "counter",
                "Bytes moved by admitted backend requests, by priority class.",
                |c| c.bytes.to_string(),
            ),
            (
                "saltblob_scheduler_queued",
                "gauge",
                "Backend requests waiting, by priority class.",
                |c| c.queued.to_string(),
            ),
            (
                "saltblob_scheduler_class_in_flight",
                "gauge",
                "Backend requests in flight, by priority class.",
                |c| c.inflight.to_string(),
            ),
            (
                "saltblob_scheduler_wait_seconds_total",
                "counter",
                "Time admitted backend requests waited, by priority class.",
                |c| seconds(c.wait_micros),
            ),
            (
                "saltblob_scheduler_max_wait_seconds",
                "gauge",
                "Longest wait of an admitted backend request, by priority class.",
                |c| seconds(c.max_wait_micros),
            ),
        ];
        for (name, kind, help, figure) in class_families {
            let name = family(&mut out, name, kind, help);
            for class in &scheduler.classes {
                lines.push(format!(
                    "{name}{{class=\"{}\"}} {}",
                    class.name,
                    figure(class)
                ));
            }
            flush(&mut out, &mut lines);
        }

        let gc = self.gc.lock().map(|g| g.clone()).unwrap_or_default();
        let name = family(
            &mut out,
            "saltblob_gc_runs_total",
            "counter",
            "Gc passes run by the server, by result.",
        );
        lines.push(format!("{name}{{result=\"ok\"}} {}", gc.runs_ok));
        lines.push(format!("{name}{{result=\"failed\"}} {}", gc.runs_failed));
        flush(&mut out, &mut lines);
        let last = gc.last.unwrap_or_default();
        for (name, kind, help, value) in [
            (
                "saltblob_gc_last_run_timestamp_seconds",
                "gauge",
                "When the last gc pass ended (Unix time; 0: none yet).",
                gc.last_run_unix_seconds,
            ),
            (
                "saltblob_gc_reclaimed_bytes_total",
                "counter",
                "Bytes of replaced, deleted and abandoned versions reclaimed by the server's gc.",
                gc.reclaimed_bytes_total,
            ),
            (
                "saltblob_gc_reclaimed_versions_total",
                "counter",
                "Versions reclaimed by the server's gc.",
                gc.reclaimed_versions_total,
            ),
            (
                "saltblob_gc_abandoned_puts_total",
                "counter",
                "Abandoned puts (writer gone, intent expired) found by the server's gc.",
                gc.abandoned_puts_total,
            ),
            (
                "saltblob_lifecycle_expired_objects_total",
                "counter",
                "Objects the server's gc loop deleted because their bucket's lifecycle expired them.",
                gc.lifecycle_expired_total,
            ),
            (
                "saltblob_gc_last_reclaimed_chunks",
                "gauge",
                "Chunks the last gc pass reclaimed.",
                last.reclaim.chunks,
            ),
            (
                "saltblob_gc_last_puts_in_flight",
                "gauge",
                "Puts in progress the last gc pass saw.",
                last.puts_in_flight,
            ),
        ] {
            let name = family(&mut out, name, kind, help);
            lines.push(format!("{name} {value}"));
            flush(&mut out, &mut lines);
        }

        let name = family(
            &mut out,
            "saltblob_build_info",
            "gauge",
            "The server's version, in its label (always 1).",
        );
        lines.push(format!(
            "{name}{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ));
        flush(&mut out, &mut lines);
        for (name, kind, help, value) in crate::process::figures() {
            let name = family(&mut out, name, kind, help);
            lines.push(format!("{name} {value}"));
            flush(&mut out, &mut lines);
        }
        out
    }
}

/// Writes the HELP and TYPE lines of metric `name`; returns the name.
fn family(out: &mut String, name: &str, kind: &str, help: &str) -> String {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    name.to_owned()
}

fn seconds(micros: u64) -> String {
    format!("{}", Duration::from_micros(micros).as_secs_f64())
}

fn flush(out: &mut String, lines: &mut Vec<String>) {
    for line in lines.drain(..) {
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_histograms_are_rendered() {
        let m = Metrics::default();
        m.started();
        m.started();
        m.finished(&Finished {
            op: "GetObject",
            class: &PriorityClass::bulk(),
            status: 200,
            duration: Duration::from_millis(30),
            bytes_in: 0,
            bytes_out: 1000,
        });
        m.connection_closed(Closed::Write);
        let text = m.render(&SchedulerStats::default(), (5, 9));
        for expected in [
            "saltblob_s3_requests_total{op=\"GetObject\",status=\"200\"} 1\n",
            "saltblob_s3_request_duration_seconds_bucket{op=\"GetObject\",class=\"bulk\",le=\"0.025\"} 0\n",
            "saltblob_s3_request_duration_seconds_bucket{op=\"GetObject\",class=\"bulk\",le=\"0.05\"} 1\n",
            "saltblob_s3_request_duration_seconds_bucket{op=\"GetObject\",class=\"bulk\",le=\"+Inf\"} 1\n",
            "saltblob_s3_request_duration_seconds_count{op=\"GetObject\",class=\"bulk\"} 1\n",
            "saltblob_s3_bytes_out_total 1000\n",
            "saltblob_s3_requests_in_flight 1\n",
            "saltblob_s3_connections_closed_total{reason=\"write\"} 1\n",
            "saltblob_read_ahead_bytes 5\n",
            concat!(
                "saltblob_build_info{version=\"",
                env!("CARGO_PKG_VERSION"),
                "\"} 1\n"
            ),
        ] {
            assert!(text.contains(expected), "{expected} missing from\n{text}");
        }
    }
}
