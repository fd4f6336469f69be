//! The figures of merit of `BENCHMARKS.md`, computed from a run's phases and its reference.

use crate::cpu::CpuSteps;
use crate::isolation::Isolation;
use crate::plan::Plan;
use crate::reference::ProbeReport;
use crate::results::Ratio;
use crate::stats::{MIB, PhaseReport, SEALED_SUFFIX};

/// The figures of BENCHMARKS.md.
pub(crate) fn ratios(
    phases: &[PhaseReport],
    reference: Option<&ProbeReport>,
    plan: &Plan,
    largest_chunk: u64,
    isolation: Option<&Isolation>,
    cpu: &CpuSteps,
) -> Vec<Ratio> {
    let phase = |name: &str| phases.iter().find(|p| p.name == name && p.ops > 0);
    let lat = |name: &str| phase(name).and_then(|p| p.latency_ms);
    let ref_name = match reference {
        Some(ProbeReport::Device(_)) => "device O_DIRECT bandwidth",
        Some(ProbeReport::Rows(_)) => "single-row throughput",
        None => "reference",
    };
    let mut out = Vec::new();
    let no_ref = "no reference (probe skipped or failed)";
    let dd = reference.and_then(ProbeReport::dd_write_mib_s);
    let dd_name = "dd pattern: 1 MiB O_DIRECT appends, depth 1";
    let no_dd = "no dd-pattern reference (needs the device probe of an embedded store)";
    let detail = |phase_name: &str, key: &str| {
        phase(phase_name).and_then(|p| p.details.as_ref()?.get(key)?.as_f64())
    };
    let dd_read = detail("large_read", "dd_read_mib_s");
    let dd_read_name = "dd pattern: 1 MiB O_DIRECT reads, depth 1, of as many bytes of a file of the bench's own, \
                        run beside the gets";
    let no_dd_read =
        "no dd-pattern reads beside the gets (they need the device probe of an embedded store)";
    let (dd_write, dd_durable) = (
        detail("large_write", "dd_write_mib_s"),
        detail("large_write", "dd_write_durable_mib_s"),
    );
    let dd_write_name = "dd pattern: 1 MiB O_DIRECT appends, depth 1, to a file of the bench's own, as many \
                         bytes, run beside the puts";
    let dd_durable_name = "the same, each blob's worth then fdatasync'd";
    let no_dd_write =
        "no dd-pattern writes beside the puts (they need the device probe of an embedded store)";
    let durable = reference.and_then(ProbeReport::durable_write_mib_s);
    let durable_name = "durable dd pattern: 60 MiB of 1 MiB O_DIRECT appends, then fdatasync";
    for (name, what, phase_name, reference_bw, bw_name, missing) in [
        (
            "large_write_vs_reference",
            "large-blob write throughput ÷ reference write bandwidth",
            "large_write",
            reference.map(ProbeReport::write_mib_s),
            ref_name,
            no_ref,
        ),
        (
            "large_read_vs_reference",
            "large-blob read throughput ÷ reference read bandwidth",
            "large_read",
            reference.map(ProbeReport::read_mib_s),
            ref_name,
            no_ref,
        ),
        (
            "large_write_vs_dd",
            "large-blob write throughput ÷ the probe's dd-pattern write bandwidth, measured before the phases",
            "large_write",
            dd,
            dd_name,
            no_dd,
        ),
        (
            "large_write_vs_dd_beside",
            "large-blob write throughput ÷ dd's write pattern measured beside the puts, in the same phase (goal \
             ≥ 0.8)",
            "large_write",
            dd_write,
            dd_write_name,
            no_dd_write,
        ),
        (
            "large_write_vs_durable_dd_beside",
            "large-blob write throughput ÷ dd's write pattern beside the puts with the fdatasync every durable \
             put pays",
            "large_write",
            dd_durable,
            dd_durable_name,
            no_dd_write,
        ),
        (
            "large_read_vs_dd",
            "large-blob read throughput ÷ dd's read pattern measured beside the gets, in the same phase (goal ≥ \
             0.8)",
            "large_read",
            dd_read,
            dd_read_name,
            no_dd_read,
        ),
        (
            "large_write_vs_durable_dd",
            "large-blob write throughput ÷ the probe's durable dd pattern (the same writes, then the fdatasync \
             every durable put pays)",
            "large_write",
            durable,
            durable_name,
            no_dd,
        ),
    ] {
        let (value, computed) = match (phase(phase_name), reference_bw.filter(|b| *b > 0.0)) {
            (Some(p), Some(bw)) => (
                Some(p.throughput_mib_s / bw),
                format!(
                    "{:.1} MiB/s ÷ {bw:.1} MiB/s ({bw_name})",
                    p.throughput_mib_s
                ),
            ),
            (None, _) => (None, format!("{phase_name} has no successful operation")),
            (_, None) => (None, missing.to_owned()),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    let mib = plan.large_bytes as f64 / MIB;
    for (name, what, phase_name, reference_bw, missing) in [
        (
            "large_put_p99_vs_ideal",
            "P99 of one large put ÷ (large size ÷ reference write bandwidth)",
            "large_write",
            reference.map(ProbeReport::write_mib_s),
            no_ref,
        ),
        (
            "large_get_p99_vs_ideal",
            "P99 of one large get ÷ (large size ÷ reference read bandwidth)",
            "large_read",
            reference.map(ProbeReport::read_mib_s),
            no_ref,
        ),
        (
            "large_put_p99_vs_dd_ideal",
            "P99 of one large put ÷ (large size ÷ the probe's dd-pattern write bandwidth)",
            "large_write",
            dd,
            no_dd,
        ),
        (
            "large_put_p99_vs_dd_beside_ideal",
            "P99 of one large put ÷ (large size ÷ dd's write bandwidth beside the puts) (goal ≤ 1.5)",
            "large_write",
            dd_write,
            no_dd_write,
        ),
        (
            "large_put_p99_vs_durable_ideal",
            "P99 of one large put ÷ (large size ÷ the probe's durable dd-pattern bandwidth)",
            "large_write",
            durable,
            no_dd,
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
            (_, None) => (None, missing.to_owned()),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    let large_write = phase("large_write");
    let disk = large_write.and_then(|p| {
        let bytes = p.details.as_ref()?.get("disk_write_bytes")?.as_u64()?;
        (p.bytes > 0).then_some((bytes, p.bytes))
    });
    out.push(Ratio {
        name: "large_write_disk_bytes_per_byte",
        what: "bytes the process wrote to storage during large_write ÷ bytes put (1.0: each byte written once; \
               flushes still pending when the phase ends are not counted)",
        value: disk.map(|(d, b)| d as f64 / b as f64),
        computed: disk.map_or_else(
            || "the kernel reports no write_bytes (/proc/self/io)".to_owned(),
            |(d, b)| format!("{:.1} MiB ÷ {:.1} MiB", d as f64 / MIB, b as f64 / MIB),
        ),
    });
    for (name, what, phase_name) in [
        (
            "large_write_cpu_seconds_per_gib",
            "CPU seconds of the whole process (every thread) per GiB put, during the large puts; read against \
             cpu_floor_seconds_per_gib",
            "large_write",
        ),
        (
            "large_read_cpu_seconds_per_gib",
            "CPU seconds of the whole process per GiB read, during the large gets",
            "large_read",
        ),
    ] {
        let cpu_s = phase(phase_name).and_then(|p| {
            let d = p.details.as_ref()?;
            Some((
                d.get("cpu_seconds")?.as_f64()?,
                d.get("cpu_seconds_per_gib")?.as_f64()?,
            ))
        });
        out.push(Ratio {
            name,
            what,
            value: cpu_s.map(|(_, per_gib)| per_gib),
            computed: cpu_s.map_or_else(
                || format!("{phase_name} has no successful operation"),
                |(s, _)| {
                    let gib = phase(phase_name).map_or(0.0, |p| p.bytes as f64 / (MIB * 1024.0));
                    format!("{s:.3} CPU s ÷ {gib:.3} GiB")
                },
            ),
        });
    }
    out.push(Ratio {
        name: "cpu_floor_seconds_per_gib",
        what: "one core's seconds per GiB of what a put cannot avoid: BLAKE3 + CRC32C + one copy, per 64 KiB chunk \
               (measured in this run)",
        value: Some(cpu.floor_s_per_gib),
        computed: format!(
            "BLAKE3 {:.3} + CRC32C {:.3} + copy {:.3} s/GiB",
            cpu.blake3_s_per_gib, cpu.crc32c_s_per_gib, cpu.copy_s_per_gib
        ),
    });
    out.push(Ratio {
        name: "seal_cpu_seconds_per_gib",
        what: "one core's seconds per GiB to seal chunks (a copy, AES-256-GCM, CRC32C of the sealed bytes; a \
               plaintext chunk has its CRC32C alone), measured in this run",
        value: cpu.seal_s_per_gib.is_finite().then_some(cpu.seal_s_per_gib),
        computed: format!(
            "seal {:.3} s/GiB against CRC32C alone {:.3} s/GiB",
            cpu.seal_s_per_gib, cpu.crc32c_s_per_gib
        ),
    });
    let rss = phase(crate::stream::STREAM_PUT).and_then(|p| {
        let mib = p.details.as_ref()?.get("peak_rss_mib")?.as_f64()?;
        Some((mib, p.bytes))
    });
    out.push(Ratio {
        name: "stream_put_peak_rss_mib",
        what: "peak resident memory of `saltblob put KEY -` streaming --stream-mb MiB, in MiB (goal ≤ 64 for 1 GiB)",
        value: rss.map(|(mib, _)| mib),
        computed: rss.map_or_else(
            || "run with --stream-mb MIB".to_owned(),
            |(mib, bytes)| format!("{mib:.1} MiB peak while streaming {} MiB", bytes >> 20),
        ),
    });
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
    let missing = |what: &str| match isolation {
        None => "run with --mixed SECONDS".to_owned(),
        Some(_) => format!("{what} has no successful operation"),
    };
    let small = isolation.and_then(|i| Some((i.small_p99_ratio?, i)));
    out.push(Ratio {
        name: "small_p99_under_load_over_alone",
        what: "small-op P99 under large-blob load ÷ small-op P99 alone",
        value: small.map(|(r, _)| r),
        computed: small.map_or_else(
            || missing("a small mixed phase"),
            |(_, i)| {
                format!(
                    "{:.2} ms ÷ {:.2} ms",
                    i.small_p99_under_load_ms.unwrap_or(f64::NAN),
                    i.small_p99_alone_ms.unwrap_or(f64::NAN)
                )
            },
        ),
    });
    let bulk = isolation.and_then(|i| Some((i.bulk_throughput_ratio?, i)));
    out.push(Ratio {
        name: "bulk_throughput_under_load_over_alone",
        what: "bulk throughput under small-op load ÷ bulk throughput alone",
        value: bulk.map(|(r, _)| r),
        computed: bulk.map_or_else(
            || missing("a bulk phase"),
            |(_, i)| {
                format!(
                    "{:.1} MiB/s ÷ {:.1} MiB/s, {} large writer(s)",
                    i.bulk_throughput_under_load_mib_s.unwrap_or(f64::NAN),
                    i.bulk_throughput_alone_mib_s.unwrap_or(f64::NAN),
                    i.large_writers
                )
            },
        ),
    });
    for (name, what, phase_name, by_p99) in [
        (
            "sealed_large_write_vs_plain",
            "sealed ÷ plaintext large-blob put throughput (goal ≥ 0.9)",
            "large_write",
            false,
        ),
        (
            "sealed_large_read_vs_plain",
            "sealed ÷ plaintext large-blob get throughput (goal ≥ 0.9)",
            "large_read",
            false,
        ),
        (
            "sealed_small_write_p99_vs_plain",
            "sealed ÷ plaintext small put P99 (goal ≤ 1.1)",
            "small_write",
            true,
        ),
        (
            "sealed_small_read_p99_vs_plain",
            "sealed ÷ plaintext small get P99 (goal ≤ 1.1)",
            "small_read",
            true,
        ),
    ] {
        let sealed_name = format!("{phase_name}{SEALED_SUFFIX}");
        let figure = |p: &PhaseReport| {
            if by_p99 {
                p.latency_ms.map(|l| l.p99)
            } else {
                Some(p.throughput_mib_s)
            }
        };
        let unit = if by_p99 { "ms (P99)" } else { "MiB/s" };
        let (value, computed) = match (
            phase(phase_name).and_then(figure),
            phase(&sealed_name).and_then(figure),
        ) {
            (Some(plain), Some(sealed)) if plain > 0.0 => (
                Some(sealed / plain),
                format!("{sealed:.2} ÷ {plain:.2} {unit}"),
            ),
            _ if !phases.iter().any(|p| p.name == sealed_name) => {
                (None, "run with --encrypt".to_owned())
            }
            _ => (
                None,
                format!("{phase_name} or {sealed_name} has no successful operation"),
            ),
        };
        out.push(Ratio {
            name,
            what,
            value,
            computed,
        });
    }
    out
}
