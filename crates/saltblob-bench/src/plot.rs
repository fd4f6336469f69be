//! `--plot FILE.svg`: latency percentiles per phase, one line per phase, on a log scale.

use std::path::Path;

use plotters::prelude::*;
use saltblob::{Error, Result};

use crate::results::BenchReport;
use crate::stats::Latency;

/// The percentiles drawn, left to right.
const LABELS: [&str; 6] = ["min", "p50", "p95", "p99", "p99.9", "max"];

fn values(l: &Latency) -> [f64; 6] {
    [l.min, l.p50, l.p95, l.p99, l.p999, l.max]
}

/// Draws the latency percentiles of every phase that has some to `path` (SVG).
pub fn draw(path: &Path, report: &BenchReport) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| {
        Error::Io(std::io::Error::other(format!(
            "cannot draw {}: {e}",
            path.display()
        )))
    };
    let series: Vec<(&str, [f64; 6])> = report
        .phases
        .iter()
        .filter_map(|p| p.latency_ms.as_ref().map(|l| (p.name.as_str(), values(l))))
        .collect();
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let lo = all
        .clone()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = all.fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 2.0, hi * 2.0)
    } else {
        (0.001, 1.0)
    };
    let floor = lo;

    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let title = format!(
        "saltblob bench: {} ({}), {} x {} MiB, {} KiB small",
        report.store,
        report.config.backend,
        report.config.count,
        report.config.large_mb,
        report.config.small_kb
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2f64..5.2f64, (lo..hi).log_scale())
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_labels(LABELS.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                LABELS
                    .get(i as usize)
                    .map_or(String::new(), |l| (*l).to_owned())
            } else {
                String::new()
            }
        })
        .x_desc("percentile")
        .y_desc("latency (ms, log scale)")
        .draw()
        .map_err(|e| fail(&e))?;
    for (idx, (name, v)) in series.iter().enumerate() {
        let color = Palette99::pick(idx).to_rgba();
        let points: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .map(|(i, y)| (i as f64, y.max(floor)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| fail(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
