//! The text output: a cassandra-stress-like block per phase, the side-by-side table, the ratios, the isolation
//! figures, the probe.

use std::fmt::Write;

use crate::direct::DEPTHS;
use crate::isolation::Isolation;
use crate::reference::ProbeReport;
use crate::results::{BenchConfig, BenchReport, Ratio, S3_BACKEND};
use crate::stats::{Latency, PhaseReport};

/// The opening lines of a bench run.
pub fn bench_header(url: &str, c: &BenchConfig) -> String {
    let mut s = format!(
        "saltblob bench on {url} ({} backend, {} CPUs), run {}\n",
        c.backend, c.cpus, c.run_id
    );
    if c.backend == S3_BACKEND {
        let _ = writeln!(
            s,
            "  through S3: the phases of --mixed, {} KiB small and {} MiB large objects; layout, sealing and \
             scheduling are the server's store's",
            c.small_kb, c.large_mb
        );
    } else {
        let _ = writeln!(
            s,
            "  large: {} x {} MiB, one at a time: {}",
            c.count, c.large_mb, c.large_layout
        );
        let _ = writeln!(
            s,
            "  small: {} x {} KiB, {} in flight: {}",
            c.small_count, c.small_kb, c.concurrency, c.small_layout
        );
        if c.unchunked {
            let _ = writeln!(
                s,
                "  unchunked: {} x {} MiB as one value each (largest chunk: {} bytes)",
                c.count, c.large_mb, c.largest_chunk_bytes
            );
        }
        let _ = writeln!(
            s,
            "  scheduler: {}",
            if c.scheduler["enabled"] == true {
                format!(
                    "on, shares {}, {}-{} requests in flight",
                    c.scheduler["shares"],
                    c.scheduler["limits"]["min"],
                    c.scheduler["limits"]["max"]
                )
            } else {
                "off".to_owned()
            }
        );
    }
    if let Some(m) = c.mixed_seconds {
        let _ = writeln!(
            s,
            "  mixed: {m} s of small gets/puts alone, {m} s of {} large put/get/delete loop(s) alone, then {m} s \
             of both",
            c.large_writers
        );
    }
    s
}

fn hms(seconds: f64) -> String {
    let ms = (seconds * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

/// One phase, in the shape of cassandra-stress's summary.
pub fn phase_block(p: &PhaseReport) -> String {
    let mut s = format!("Results: {} ({})\n", p.name, p.description);
    let line = |s: &mut String, label: &str, value: String| {
        let _ = writeln!(s, "{label:<26}: {value}");
    };
    line(&mut s, "Op rate", format!("{:>12.2} op/s", p.ops_per_s));
    line(
        &mut s,
        "Throughput",
        format!("{:>12.1} MiB/s", p.throughput_mib_s),
    );
    let ms = |v: Option<f64>| v.map_or_else(|| format!("{:>12}", "-"), |v| format!("{v:>12.3} ms"));
    let l = p.latency_ms;
    let get = |f: fn(&Latency) -> f64| l.as_ref().map(f);
    line(&mut s, "Latency mean", ms(get(|l| l.mean)));
    line(&mut s, "Latency min", ms(get(|l| l.min)));
    line(&mut s, "Latency median", ms(get(|l| l.p50)));
    line(&mut s, "Latency 95th percentile", ms(get(|l| l.p95)));
    line(&mut s, "Latency 99th percentile", ms(get(|l| l.p99)));
    line(&mut s, "Latency 99.9th percentile", ms(get(|l| l.p999)));
    line(&mut s, "Latency max", ms(get(|l| l.max)));
    line(&mut s, "Total operations", format!("{:>12}", p.ops));
    line(
        &mut s,
        "Total bytes",
        format!("{:>12} ({})", p.bytes, mib(p.bytes)),
    );
    line(&mut s, "Total errors", format!("{:>12}", p.errors));
    for m in &p.error_messages {
        line(&mut s, "  error", m.clone());
    }
    if let Some(v) = p.verified {
        line(
            &mut s,
            "Verified",
            if v {
                "every read: length, stamp, BLAKE3 digest".to_owned()
            } else {
                "NO: see errors".to_owned()
            },
        );
    }
    if let Some(d) = &p.details {
        if let Some(how) = d.get("how").and_then(|h| h.as_str()) {
            line(&mut s, "Mode", how.to_owned());
        }
        let loops = |bg: &serde_json::Value| {
            format!(
                "{} loop(s): {} large puts + {} large gets, {:.1} MiB/s, {} errors",
                bg["large_writers"],
                bg["large_puts"],
                bg["large_gets"],
                bg["throughput_mib_s"].as_f64().unwrap_or(0.0),
                bg["errors"]
            )
        };
        if let Some(bg) = d.get("background") {
            line(&mut s, "Background load", loops(bg));
        }
        if d.get("large_writers").is_some() {
            line(&mut s, "Large loops", loops(d));
        }
    }
    line(&mut s, "Total operation time", hms(p.seconds));
    s
}

/// Every phase side by side, then the article's comparison (one value vs chunked) when it ran.
pub fn summary_table(r: &BenchReport) -> String {
    let mut s = String::from("Summary (latency in ms)\n");
    let _ = writeln!(
        s,
        "{:<18} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "phase", "ops", "MiB/s", "mean", "p50", "p95", "p99", "p99.9", "max", "errors"
    );
    for p in &r.phases {
        let l = |f| latency_cell(p.latency_ms.as_ref(), f);
        let _ = writeln!(
            s,
            "{:<18} {:>7} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
            p.name,
            p.ops,
            p.throughput_mib_s,
            l(|l| l.mean),
            l(|l| l.p50),
            l(|l| l.p95),
            l(|l| l.p99),
            l(|l| l.p999),
            l(|l| l.max),
            p.errors
        );
    }
    let find = |n: &str| r.phases.iter().find(|p| p.name == n);
    if let (Some(uw), Some(ur), Some(cw), Some(cr)) = (
        find("unchunked_write"),
        find("unchunked_read"),
        find("large_write"),
        find("large_read"),
    ) {
        let cell = |p: &PhaseReport| match p.latency_ms {
            Some(l) => format!("{:.1} / {:.1} ms", l.mean, l.p99),
            None => format!("refused ({} errors)", p.errors),
        };
        let _ = writeln!(
            s,
            "\nThe article's comparison, {} MiB blobs (mean / P99):",
            r.config.large_mb
        );
        let _ = writeln!(
            s,
            "{:<8} {:>28} {:>36}",
            "",
            "one value (unchunked)",
            format!(
                "chunked ({} KiB, max {} salts)",
                r.config.chunk_size >> 10,
                r.config.max_salt
            )
        );
        let _ = writeln!(s, "{:<8} {:>28} {:>36}", "write", cell(uw), cell(cw));
        let _ = writeln!(s, "{:<8} {:>28} {:>36}", "read", cell(ur), cell(cr));
    }
    s
}

/// The ratios, one per line with their operands.
pub fn ratios_text(ratios: &[Ratio]) -> String {
    let mut s = String::from("Ratios (this run)\n");
    for r in ratios {
        let v = r
            .value
            .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"));
        let _ = writeln!(s, "  {:<64} {:>8}   {}", r.what, v, r.computed);
    }
    s
}

/// The isolation figures of `--mixed`: closed loop, each class alone and under load and the two stress ratios;
/// then per paced load its figures against their goals.
pub fn isolation_text(i: &Isolation) -> String {
    let mut s = format!(
        "Isolation, closed loop (--mixed {} s: {} small ops in flight = class interactive, {} large loop(s) = class \
         bulk; capacity and stress, no goal)\n",
        i.seconds, i.small_concurrency, i.large_writers
    );
    let _ = writeln!(
        s,
        "  {:<12} {:<11} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "class", "load", "ops", "MiB/s", "p50", "p95", "p99", "p99.9", "max", "errors"
    );
    for (class, load, c) in [
        ("interactive", "alone", &i.alone.interactive),
        ("interactive", "under load", &i.under_load.interactive),
        ("bulk", "alone", &i.alone.bulk),
        ("bulk", "under load", &i.under_load.bulk),
    ] {
        let Some(c) = c else { continue };
        let l = |f| latency_cell(c.latency_ms.as_ref(), f);
        let _ = writeln!(
            s,
            "  {class:<12} {load:<11} {:>7} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
            c.ops,
            c.throughput_mib_s,
            l(|l| l.p50),
            l(|l| l.p95),
            l(|l| l.p99),
            l(|l| l.p999),
            l(|l| l.max),
            c.errors
        );
    }
    let value = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"));
    let num = |v: Option<f64>, unit: &str| {
        v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2} {unit}"))
    };
    let _ = writeln!(
        s,
        "  small_p99_ratio       = {:>6}   (small P99 {} under load ÷ {} alone)",
        value(i.small_p99_ratio),
        num(i.small_p99_under_load_ms, "ms"),
        num(i.small_p99_alone_ms, "ms")
    );
    let _ = writeln!(
        s,
        "  bulk_throughput_ratio = {:>6}   (bulk {} under small load ÷ {} alone)",
        value(i.bulk_throughput_ratio),
        num(i.bulk_throughput_under_load_mib_s, "MiB/s"),
        num(i.bulk_throughput_alone_mib_s, "MiB/s")
    );
    if i.paced.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\nIsolation, paced (open loop: small ops due at {}, X* = {} ops/s, each timed from when it was due; bulk \
         unthrottled beside them; B* = {}; bulk alone used {} CPU cores)",
        if i.paced.iter().any(|p| p.fixed_rate) {
            "fixed rates (rho = rate / X*)"
        } else {
            "rho x X*"
        },
        value(i.small_capacity_ops_s),
        num(i.bulk_capacity_mib_s, "MiB/s"),
        value(i.bulk_alone_cpu_cores)
    );
    let _ = writeln!(
        s,
        "  {:>5} {:>8} {:>6} {:>8} {:>10} {:>10} {:>7} {:>9} {:>8} {:>7} {:>6} {:>11} {:>11}",
        "rho",
        "ops/s",
        "s",
        "samples",
        "p99 alone",
        "p99 load",
        "ratio",
        "excess",
        "goodput",
        "share",
        "W",
        "cores small",
        "cores both"
    );
    for p in &i.paced {
        let _ = writeln!(
            s,
            "  {:>5} {:>8.0} {:>6.0} {:>8} {:>10} {:>10} {:>7} {:>9} {:>8.3} {:>7} {:>6} {:>11.2} {:>11.2}",
            if p.fixed_rate {
                format!("{:.3}", p.rho)
            } else {
                p.rho.to_string()
            },
            p.rate_ops_s,
            p.seconds,
            p.under_load.succeeded,
            num(p.small_p99_alone_ms, "ms"),
            num(p.small_p99_under_load_ms, "ms"),
            value(p.small_p99_ratio),
            num(p.small_p99_excess_ms, "ms"),
            p.small_goodput,
            value(p.bulk_share),
            value(p.work),
            p.cpu_cores_small_alone,
            p.cpu_cores_under_load
        );
    }
    for p in &i.paced {
        let goals = p.goals.map_or_else(String::new, |g| {
            format!(
                " (goals: P99 <= {:.0}x alone or + {:.0} ms, goodput >= {}, share >= {}, W >= {})",
                g.small_p99_ratio_max,
                g.small_p99_excess_ms_max,
                g.small_goodput_min,
                g.bulk_share_min,
                g.work_min
            )
        });
        let _ = writeln!(s, "  {}: {}{goals}", p.label(), p.verdict);
        let p99 = |l: Option<crate::stats::Latency>| {
            l.map_or_else(|| "-".to_owned(), |l| format!("{:.2} ms", l.p99))
        };
        let _ = writeln!(
            s,
            "  {}: by operation, P99 alone -> beside bulk: gets {} -> {}, puts {} -> {}",
            p.label(),
            p99(p.alone.get_latency_ms),
            p99(p.under_load.get_latency_ms),
            p99(p.alone.put_latency_ms),
            p99(p.under_load.put_latency_ms),
        );
        if let Some(t) = &p.under_load.scheduler {
            let bulk = t
                .classes
                .get(saltblob::schedule::BULK)
                .map_or_else(String::new, |b| {
                    format!(
                        "; bulk admitted {:.0} MiB, waiting {:.2} ms each on average",
                        b.bytes as f64 / (1 << 20) as f64,
                        b.mean_wait_ms
                    )
                });
            let _ = writeln!(
                s,
                "  {}: the scheduler beside bulk: duty {:.2} on average (lowest {:.2}, below 1 in {:.0}% of {} \
                 samples), limit {:.1} on average (lowest {}){bulk}",
                p.label(),
                t.mean_duty,
                t.min_duty,
                t.paused_share * 100.0,
                t.samples,
                t.mean_limit,
                t.min_limit,
            );
        }
        for (side, w) in [
            ("alone", &p.alone.wakeups),
            ("beside bulk", &p.under_load.wakeups),
        ] {
            let _ = writeln!(s, "  {}: {side}, {}", p.label(), w.describe());
        }
    }
    s
}

/// The probe's results.
pub fn probe_text(r: &ProbeReport) -> String {
    let mut s = String::new();
    match r {
        ProbeReport::Device(d) => {
            let dev = &d.device;
            let _ = writeln!(
                s,
                "Probe: {} on {} ({}, {}), device {} [{}]",
                dev.dir.display(),
                dev.mount_point.as_deref().unwrap_or("?"),
                dev.filesystem.as_deref().unwrap_or("?"),
                dev.mount_source.as_deref().unwrap_or("?"),
                dev.device.as_deref().unwrap_or("?"),
                dev.device_dev.as_deref().unwrap_or("?"),
            );
            let size = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
            let _ = writeln!(
                s,
                "  sectors: physical {} B, logical {} B; rotational {}; max request {} KiB; I/O scheduler {}",
                size(dev.physical_block_size),
                size(dev.logical_block_size),
                dev.rotational
                    .map_or_else(|| "?".to_owned(), |r| r.to_string()),
                size(dev.max_sectors_kb),
                dev.io_scheduler.as_deref().unwrap_or("?")
            );
            for n in &dev.notes {
                let _ = writeln!(s, "  note: {n}");
            }
            for w in &dev.warnings {
                let _ = writeln!(s, "  WARNING: {w}");
            }
            let _ = writeln!(
                s,
                "  O_DIRECT on a {} MiB {} file (first pass, allocating: {:.0} MiB/s)",
                d.file_bytes >> 20,
                if d.preallocated {
                    "fallocated"
                } else {
                    "sparse (fallocate unsupported)"
                },
                d.prefill_mib_s
            );
            let _ = writeln!(
                s,
                "  {:<6} {:>8} {}",
                "op",
                "request",
                d.knees
                    .first()
                    .map(|_| {
                        DEPTHS
                            .iter()
                            .map(|q| format!("{:>15}", format!("QD{q} MiB/s")))
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            );
            for k in &d.knees {
                let row: String = d
                    .points
                    .iter()
                    .filter(|p| p.op == k.op && p.request_bytes == k.request_bytes)
                    .map(|p| format!("{:>15.0}", p.mib_s))
                    .collect();
                let _ = writeln!(
                    s,
                    "  {:<6} {:>5} KiB {row}   knee: QD{}{}",
                    k.op,
                    k.request_bytes >> 10,
                    k.depth,
                    if k.still_growing {
                        " (still growing)"
                    } else {
                        ""
                    }
                );
            }
            let _ = writeln!(
                s,
                "  dd's pattern (1 MiB, QD1, appending to a new file, not pre-sized): {:.0} MiB/s; the same on \
                 the pre-sized file: {:.0} MiB/s",
                d.append_1mib_depth1_mib_s, d.write_1mib_depth1_mib_s
            );
            let _ = writeln!(
                s,
                "  durable dd pattern (60 MiB as above, then fdatasync, median of 5): {:.0} MiB/s, of which the \
                 fdatasync took {:.1} ms",
                d.durable_1mib_depth1_mib_s, d.durable_sync_ms
            );
            let _ = writeln!(
                s,
                "  reference: write {:.0} MiB/s, read {:.0} MiB/s (best points), measured in {:.1} s",
                d.write_mib_s, d.read_mib_s, d.seconds
            );
            if let Some(e) = &d.extent_settings {
                let _ = writeln!(
                    s,
                    "  extent files (rocksdb://…?extent_io_bytes={}&extent_io_depth={}): the cheapest write knee within \
                     5% of the best, {:.0} MiB/s",
                    e.io_bytes, e.io_depth, e.mib_s
                );
            }
        }
        ProbeReport::Rows(r) => {
            let _ = writeln!(
                s,
                "Probe: single-row writes and reads of {} KiB through the {} backend, {} in flight",
                r.value_bytes >> 10,
                r.backend,
                r.concurrency
            );
            for p in [&r.write, &r.read] {
                let p99 = p.latency_ms.map_or(f64::NAN, |l| l.p99);
                let _ = writeln!(
                    s,
                    "  {:<12} {:>8} rows {:>9.1} MiB/s  p99 {:>8.2} ms  errors {}",
                    p.name, p.ops, p.throughput_mib_s, p99, p.errors
                );
                for m in &p.error_messages {
                    let _ = writeln!(s, "    error: {m}");
                }
            }
        }
    }
    s
}

/// One latency figure of a table cell, in ms with two decimals; "-" when there is no latency.
fn latency_cell(latency: Option<&Latency>, figure: fn(&Latency) -> f64) -> String {
    latency.map_or_else(|| "-".to_owned(), |l| format!("{:.2}", figure(l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_clock_time() {
        assert_eq!(hms(0.0), "00:00:00.000");
        assert_eq!(hms(3723.5), "01:02:03.500");
    }
}
