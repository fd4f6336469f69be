//! `--plot FILE.svg`: latency percentiles per phase, one line per phase, on a log scale; with `--mixed`, the
//! isolation results below: the closed-loop stress pair (small-op latency and bulk throughput, each alone and
//! under load, no goal), then per paced load the small P99 alone and beside bulk, and the small goodput, bulk
//! share and work W, each with its goal.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::combinators::LogCoord;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use saltblob::{Error, Result};

use crate::isolation::{ClassResult, Isolation, Paced};
use crate::results::BenchReport;
use crate::stats::Latency;

/// The percentiles drawn, left to right.
const LABELS: [&str; 6] = ["min", "p50", "p95", "p99", "p99.9", "max"];

fn values(l: &Latency) -> [f64; 6] {
    [l.min, l.p50, l.p95, l.p99, l.p999, l.max]
}

/// Height of the per-phase chart, pixels; the isolation panels of `--mixed` go below it.
const PHASES_HEIGHT: u32 = 600;
/// Height of the closed-loop isolation panels.
const ISOLATION_HEIGHT: u32 = 450;
/// Height of the paced isolation panels.
const PACED_HEIGHT: u32 = 450;
/// Width of the image.
const WIDTH: u32 = 1000;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Draws the latency percentiles of every phase that has some to `path` (SVG); with `--mixed`, below them the
/// isolation results: closed loop, small-op latency alone vs under load and bulk throughput alone vs under small
/// load; paced, per load, the small P99 alone vs beside bulk, and goodput, bulk share and W, with their goals.
pub fn draw(path: &Path, report: &BenchReport) -> Result<()> {
    let paced = report
        .isolation
        .as_ref()
        .is_some_and(|i| !i.paced.is_empty());
    let height = PHASES_HEIGHT
        + report.isolation.as_ref().map_or(0, |_| ISOLATION_HEIGHT)
        + if paced { PACED_HEIGHT } else { 0 };
    let drawn = (|| {
        let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(PHASES_HEIGHT);
        draw_phases(&top, report)?;
        if let Some(iso) = &report.isolation {
            let (closed, paced) = bottom.split_vertically(ISOLATION_HEIGHT);
            let (left, right) = closed.split_horizontally(WIDTH / 2);
            draw_small(&left, iso)?;
            draw_bulk(&right, iso)?;
            if !iso.paced.is_empty() {
                let (left, right) = paced.split_horizontally(WIDTH / 2);
                draw_paced_p99(&left, &iso.paced)?;
                draw_paced_shares(&right, &iso.paced)?;
            }
        }
        root.present()
    })();
    drawn.map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "cannot draw {}: {e}",
            path.display()
        )))
    })
}

/// `(lo / 2, hi * 2)` of the positive values, for a log axis; `(0.001, 1)` when there is none.
fn log_range(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let lo = values
        .clone()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = values.fold(0.0, f64::max);
    if lo.is_finite() && hi > 0.0 {
        (lo / 2.0, hi * 2.0)
    } else {
        (0.001, 1.0)
    }
}

/// A formatter of the x axis that names whole positions after `labels`.
fn category<'l>(labels: &'l [&'l str]) -> impl Fn(&f64) -> String + 'l {
    move |x| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels
                .get(i as usize)
                .map_or(String::new(), |l| (*l).to_owned())
        } else {
            String::new()
        }
    }
}

fn draw_phases(area: &Area, report: &BenchReport) -> DrawResult {
    let series: Vec<(&str, [f64; 6])> = report
        .phases
        .iter()
        .filter_map(|p| p.latency_ms.as_ref().map(|l| (p.name.as_str(), values(l))))
        .collect();
    let (lo, hi) = log_range(series.iter().flat_map(|(_, v)| v.iter().copied()));
    let floor = lo;
    let title = format!(
        "saltblob bench: {} ({}), {} x {} MiB, {} KiB small",
        report.store,
        report.config.backend,
        report.config.count,
        report.config.large_mb,
        report.config.small_kb
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2f64..5.2f64, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(LABELS.len())
        .x_label_formatter(&category(&LABELS))
        .x_desc("percentile")
        .y_desc("latency (ms, log scale)")
        .draw()?;
    for (idx, (name, v)) in series.iter().enumerate() {
        draw_percentiles(&mut chart, name, v, floor, Palette99::pick(idx).to_rgba())?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// A chart of percentiles (categories left to right) on a log scale of milliseconds.
type LogChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// One line of percentiles with a dot per value and a legend entry; values below `floor` are drawn at it.
fn draw_percentiles(
    chart: &mut LogChart<'_, '_>,
    name: &str,
    values: &[f64],
    floor: f64,
    color: RGBAColor,
) -> DrawResult {
    let points: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, y)| (i as f64, y.max(floor)))
        .collect();
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 3, color.filled())),
    )?;
    Ok(())
}

/// The chart's legend at `position`.
fn draw_legend<'b, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}

/// `v` with two decimals, or "n/a".
fn figure(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2}"))
}

/// Closed loop: small-op latency percentiles alone and under load (a stress figure, no goal).
fn draw_small(area: &Area, iso: &Isolation) -> DrawResult {
    const SMALL_LABELS: [&str; 5] = ["p50", "p95", "p99", "p99.9", "max"];
    let pick = |c: &Option<ClassResult>| {
        c.as_ref()
            .and_then(|c| c.latency_ms)
            .map(|l| [l.p50, l.p95, l.p99, l.p999, l.max])
    };
    let lines = [
        ("small ops alone", pick(&iso.alone.interactive), BLUE),
        (
            "small ops under load",
            pick(&iso.under_load.interactive),
            RED,
        ),
    ];
    let all = lines.iter().filter_map(|(_, v, _)| *v).flatten();
    let (lo, hi) = log_range(all);
    let title = format!(
        "closed loop, interactive: P99 ratio {} (stress, no goal)",
        figure(iso.small_p99_ratio)
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.2f64..4.2f64, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(SMALL_LABELS.len())
        .x_label_formatter(&category(&SMALL_LABELS))
        .y_desc("latency (ms, log scale)")
        .draw()?;
    for (name, v, color) in lines {
        if let Some(v) = v {
            draw_percentiles(&mut chart, name, &v, lo, color.to_rgba())?;
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// Closed loop: bulk throughput alone and under small load, as two bars (a stress figure, no goal).
fn draw_bulk(area: &Area, iso: &Isolation) -> DrawResult {
    let bars = [
        ("alone", iso.bulk_throughput_alone_mib_s, BLUE),
        (
            "under small load",
            iso.bulk_throughput_under_load_mib_s,
            RED,
        ),
    ];
    let top = bars
        .iter()
        .filter_map(|(_, v, _)| *v)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.3;
    let title = format!(
        "closed loop, bulk ({} loop(s)): throughput ratio {} (no goal)",
        iso.large_writers,
        figure(iso.bulk_throughput_ratio)
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..1.5f64, 0.0..top)?;
    let names = bars.map(|(name, _, _)| name);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&category(&names))
        .y_desc("large puts + gets, MiB/s")
        .draw()?;
    let above =
        TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, (_, v, color)) in bars.iter().enumerate() {
        let Some(v) = *v else { continue };
        let x = i as f64;
        chart.draw_series([Rectangle::new(
            [(x - 0.3, 0.0), (x + 0.3, v)],
            color.mix(0.7).filled(),
        )])?;
        chart.draw_series([Text::new(format!("{v:.1} MiB/s"), (x, v), above.clone())])?;
    }
    Ok(())
}

/// The labels of the paced loads, left to right.
fn rho_labels(paced: &[Paced]) -> Vec<String> {
    paced.iter().map(Paced::label).collect()
}

/// One bar from `x - half` to `x + half`, `v` high, with its value above it.
fn draw_bar<'b>(
    chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    x: f64,
    half: f64,
    v: f64,
    text: String,
    color: RGBAColor,
) -> DrawResult {
    let above =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series([Rectangle::new(
        [(x - half, 0.0), (x + half, v)],
        color.mix(0.7).filled(),
    )])?;
    chart.draw_series([Text::new(text, (x, v), above)])?;
    Ok(())
}

/// A goal drawn as a dashed black tick from `x0` to `x1` at `y`.
fn draw_goal<'b>(
    chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    x0: f64,
    x1: f64,
    y: f64,
) -> DrawResult {
    chart.draw_series(DashedLineSeries::new(
        [(x0, y), (x1, y)],
        4,
        3,
        BLACK.stroke_width(2),
    ))?;
    Ok(())
}

/// Paced: per load, the small P99 alone and beside bulk (timed from when each op was due), with the bound the
/// goal allows (the larger of the ratio bound and the excess bound) dashed.
fn draw_paced_p99(area: &Area, paced: &[Paced]) -> DrawResult {
    let labels = rho_labels(paced);
    let names: Vec<&str> = labels.iter().map(String::as_str).collect();
    let bound = |p: &Paced| {
        let g = p.goals?;
        let alone = p.small_p99_alone_ms?;
        Some((alone * g.small_p99_ratio_max).max(alone + g.small_p99_excess_ms_max))
    };
    let top = paced
        .iter()
        .flat_map(|p| [p.small_p99_alone_ms, p.small_p99_under_load_ms, bound(p)])
        .flatten()
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.3;
    let n = paced.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "paced: small P99 (ms, timed from when due)",
            ("sans-serif", 18),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&category(&names))
        .y_desc("small P99, ms")
        .draw()?;
    for (i, p) in paced.iter().enumerate() {
        let x = i as f64;
        for (dx, v, color) in [
            (-0.18, p.small_p99_alone_ms, BLUE),
            (0.18, p.small_p99_under_load_ms, RED),
        ] {
            if let Some(v) = v {
                draw_bar(
                    &mut chart,
                    x + dx,
                    0.16,
                    v,
                    format!("{v:.1}"),
                    color.to_rgba(),
                )?;
            }
        }
        if let Some(b) = bound(p) {
            draw_goal(&mut chart, x - 0.4, x + 0.4, b)?;
        }
    }
    draw_bar_legend(
        &mut chart,
        &[("alone", BLUE), ("beside bulk", RED)],
        "goal: the P99 allowed beside bulk",
        SeriesLabelPosition::UpperLeft,
    )
}

/// The legend of a bar chart: one filled box per series, and the dashed goal.
fn draw_bar_legend<'b>(
    chart: &mut ChartContext<'b, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    series: &[(&str, RGBColor)],
    goal: &str,
    position: SeriesLabelPosition,
) -> DrawResult {
    for &(name, color) in series {
        chart
            .draw_series([Rectangle::new(
                [(0.0, 0.0), (0.0, 0.0)],
                color.mix(0.7).filled(),
            )])?
            .label(name)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.mix(0.7).filled())
            });
    }
    chart
        .draw_series([PathElement::new(vec![(0.0, 0.0), (0.0, 0.0)], BLACK)])?
        .label(goal)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    draw_legend(chart, position)
}

/// Paced: per load, small goodput beside bulk, bulk share and work W, each with its goal dashed; the verdicts
/// in the title.
fn draw_paced_shares(area: &Area, paced: &[Paced]) -> DrawResult {
    let labels = rho_labels(paced);
    let names: Vec<&str> = labels.iter().map(String::as_str).collect();
    let n = paced.len() as f64;
    let top = paced
        .iter()
        .flat_map(|p| [Some(p.small_goodput), p.bulk_share, p.work])
        .flatten()
        .fold(1.0, f64::max)
        * 1.35;
    let verdicts: Vec<String> = paced
        .iter()
        .map(|p| {
            let short = p.verdict.split(" (").next().unwrap_or_default();
            format!("{}: {short}", p.label())
        })
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "paced: small goodput, bulk share, work W ({})",
                verdicts.join("; ")
            ),
            ("sans-serif", 16),
        )
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len())
        .x_label_formatter(&category(&names))
        .y_desc("fraction")
        .draw()?;
    let series = [
        ("small goodput", GREEN),
        ("bulk share", MAGENTA),
        ("work W", BLUE),
    ];
    for (i, p) in paced.iter().enumerate() {
        let x = i as f64;
        let goals = p
            .goals
            .map(|g| [g.small_goodput_min, g.bulk_share_min, g.work_min]);
        for (k, v) in [Some(p.small_goodput), p.bulk_share, p.work]
            .into_iter()
            .enumerate()
        {
            let bx = x + (k as f64 - 1.0) * 0.27;
            if let Some(v) = v {
                draw_bar(
                    &mut chart,
                    bx,
                    0.12,
                    v,
                    format!("{v:.2}"),
                    series[k].1.to_rgba(),
                )?;
            }
            if let Some(g) = goals {
                draw_goal(&mut chart, bx - 0.13, bx + 0.13, g[k])?;
            }
        }
    }
    draw_bar_legend(
        &mut chart,
        &series,
        "goals",
        SeriesLabelPosition::UpperRight,
    )
}
