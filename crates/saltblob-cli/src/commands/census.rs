//! `saltblob census`: the store's blobs by size and layout (counts, bytes, percentiles), as text, JSON (which
//! `saltblob plan --census FILE` reads back) and an SVG histogram.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use futures::future::LocalBoxFuture;
use saltblob::census::{Bucket, LayoutClass, SizeHistogram, Tally, bucket_bounds};
use saltblob::{BlobStore, Census};
use serde_json::{Value, json};

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::{self, KeyArg, parse_key, short};
use crate::progress::Progress;

/// The `"format"` of a census's JSON.
const FORMAT: &str = "saltblob-census/1";
/// The percentiles reported, with their names.
const PERCENTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)];

/// Arguments of `saltblob census`.
#[derive(clap::Args, Debug)]
pub struct CensusCmd {
    /// Count only keys starting with PREFIX (%-escaped as keys are printed).
    #[arg(value_parser = parse_key)]
    prefix: Option<KeyArg>,
    /// Count the first N blobs in key order only (on every backend, a cluster too): not a random sample, it
    /// leans toward the first prefixes.
    #[arg(long, value_name = "N")]
    sample: Option<u64>,
    /// Print JSON (what `saltblob plan --census FILE` reads).
    #[arg(long)]
    json: bool,
    /// Also draw the size histogram as SVG into FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

impl Command for CensusCmd {
    fn without_store(&self, dir: &Path) -> Result<(), Failure> {
        Err(empty(&format!(
            "there is no store at {} yet",
            dir.display()
        )))
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            if let Some(svg) = &self.svg {
                check_svg_path(svg)?;
            }
            let store = context.open().await?;
            let prefix = self.prefix.as_ref().map_or(&[][..], |p| p.as_ref());
            let census = count(&store, prefix, self.sample, context.quiet).await?;
            let shown = human::escape_key(prefix);
            if let Some(svg) = &self.svg {
                std::fs::write(svg, histogram_svg(&census, &shown))
                    .map_err(|e| Failure::usage(format!("--svg {}: {e}", svg.display())))?;
            }
            if self.json {
                emit(&format!("{:#}\n", census_json(&census, &shown)))
            } else {
                emit(&census_text(&census, &shown))
            }
        })
    }
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an error.
pub(super) fn emit(text: &str) -> Result<(), Failure> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// The failure of a census that counted nothing.
fn empty(why: &str) -> Failure {
    Failure::new(
        Failure::NOT_FOUND,
        format!("census: no blob to count: {why}; a size distribution needs at least one blob"),
    )
}

/// Refuses an SVG path that is not `*.svg`, before any work.
pub(super) fn check_svg_path(path: &Path) -> Result<(), Failure> {
    let svg = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if svg {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "--svg {}: the histogram is drawn as SVG; name the file *.svg",
            path.display()
        )))
    }
}

/// Counts the blobs under `prefix` (the first `sample` when given) with a progress spinner, or a bar to
/// `sample`; an empty census is a failure naming the prefix.
pub(super) async fn count(
    store: &BlobStore,
    prefix: &[u8],
    sample: Option<u64>,
    quiet: bool,
) -> Result<Census, Failure> {
    if sample == Some(0) {
        return Err(Failure::usage(
            "--sample 0: a sample counts at least one blob",
        ));
    }
    let mut progress = Progress::items("census", "blobs", sample, quiet);
    let census = store
        .census(prefix, sample, |c| {
            progress.set(c.total().count + c.damaged)
        })
        .await;
    progress.finish();
    let census = census?;
    if census.total().count == 0 {
        let what = if prefix.is_empty() {
            "the store is empty".to_owned()
        } else {
            format!("no key starts with \"{}\"", human::escape_key(prefix))
        };
        let damaged = match census.damaged {
            0 => String::new(),
            n => format!(" ({n} damaged manifest(s): run `saltblob fsck`)"),
        };
        return Err(empty(&format!("{what}{damaged}")));
    }
    Ok(census)
}

/// Count, bytes and percentiles of one histogram.
fn summary_json(sizes: &SizeHistogram) -> Value {
    let Tally { count, bytes } = sizes.total();
    let mut v = json!({ "count": count, "bytes": bytes });
    for (name, q) in PERCENTILES {
        v[name] = json!(sizes.percentile(q));
    }
    v
}

/// The census as JSON: totals and percentiles by class and overall, blobs by partition count, and the
/// histogram's buckets (`[index, count, bytes, min, max]`, bounds as `saltblob::census::bucket_bounds` says)
/// from which `saltblob plan` rebuilds it.
pub(super) fn census_json(census: &Census, prefix: &str) -> Value {
    let classes: Vec<Value> = LayoutClass::ALL
        .iter()
        .map(|class| {
            let mut v = summary_json(census.sizes_of(*class));
            v["class"] = json!(class.as_str());
            v
        })
        .collect();
    let buckets: serde_json::Map<String, Value> = LayoutClass::ALL
        .iter()
        .map(|class| {
            let rows: Vec<Value> = census
                .sizes_of(*class)
                .buckets()
                .map(|(i, b)| json!([i, b.tally.count, b.tally.bytes, b.min, b.max]))
                .collect();
            (class.as_str().to_owned(), Value::from(rows))
        })
        .collect();
    let partitions: Vec<Value> = census
        .partitions
        .iter()
        .map(|(p, t)| json!([p, t.count, t.bytes]))
        .collect();
    json!({
        "format": FORMAT,
        "prefix": prefix,
        "sampled": census.sampled,
        "damaged": census.damaged,
        "all": summary_json(&census.all_sizes()),
        "classes": classes,
        "partitions": partitions,
        "buckets": buckets,
    })
}

/// Reads back what [`census_json`] wrote; `what` names the file in errors.
pub(super) fn census_from_json(v: &Value, what: &str) -> Result<Census, Failure> {
    let bad = |why: String| {
        Failure::usage(format!(
            "{what}: not a census ({why}); write one with `saltblob census --json > FILE`"
        ))
    };
    if v["format"] != FORMAT {
        return Err(bad(format!(
            "\"format\" is {}, not \"{FORMAT}\"",
            v["format"]
        )));
    }
    let numbers = |row: &Value, n: usize| -> Result<Vec<u64>, Failure> {
        let items = row
            .as_array()
            .filter(|a| a.len() == n)
            .ok_or_else(|| bad(format!("{row} is not a row of {n} numbers")))?;
        items
            .iter()
            .map(|x| {
                x.as_u64()
                    .ok_or_else(|| bad(format!("{x} in {row} is not a count")))
            })
            .collect()
    };
    let rows = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut census = Census {
        sampled: v["sampled"].as_bool().unwrap_or(false),
        damaged: v["damaged"].as_u64().unwrap_or(0),
        ..Census::default()
    };
    for class in LayoutClass::ALL {
        for row in rows(&v["buckets"][class.as_str()]) {
            let n = numbers(&row, 5)?;
            let index =
                u32::try_from(n[0]).map_err(|_| bad(format!("bucket {} out of range", n[0])))?;
            let bucket = Bucket {
                tally: Tally {
                    count: n[1],
                    bytes: n[2],
                },
                min: n[3],
                max: n[4],
            };
            census.sizes[class as usize]
                .add_checked(index, bucket)
                .map_err(|e| bad(e.to_string()))?;
        }
    }
    for row in rows(&v["partitions"]) {
        let n = numbers(&row, 3)?;
        let tally = census.partitions.entry(n[0]).or_default();
        tally.count += n[1];
        tally.bytes = tally.bytes.saturating_add(n[2]);
    }
    if census.total().count == 0 {
        return Err(empty(&format!("{what} counts no blob")));
    }
    if census.partitions.values().map(|t| t.count).sum::<u64>() != census.total().count {
        return Err(bad(
            "its partition counts and its size buckets count different numbers of blobs".to_owned(),
        ));
    }
    Ok(census)
}

/// The census as text: one line per class and one for all, then the spread over partitions.
fn census_text(census: &Census, prefix: &str) -> String {
    let mut out = String::new();
    let total = census.total();
    let scope = if prefix.is_empty() {
        "all keys".to_owned()
    } else {
        format!("keys under \"{prefix}\"")
    };
    let sampled = if census.sampled {
        ", a sample: the first blobs in key order"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "census of {scope}: {} blob(s), {}{sampled}",
        total.count,
        short(total.bytes)
    );
    let _ = writeln!(
        out,
        "{:<17} {:>10} {:>7} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10}",
        "layout", "blobs", "%", "bytes", "%", "P50", "P90", "P99", "P99.9"
    );
    let line = |out: &mut String, name: &str, sizes: &SizeHistogram| {
        let t = sizes.total();
        let pct = |x: u64, of: u64| 100.0 * x as f64 / of.max(1) as f64;
        let p = |q| sizes.percentile(q).map_or("-".to_owned(), short);
        let _ = writeln!(
            out,
            "{name:<17} {:>10} {:>6.2}% {:>12} {:>6.2}% {:>10} {:>10} {:>10} {:>10}",
            t.count,
            pct(t.count, total.count),
            short(t.bytes),
            pct(t.bytes, total.bytes),
            p(0.5),
            p(0.9),
            p(0.99),
            p(0.999)
        );
    };
    for class in LayoutClass::ALL {
        line(&mut out, class.as_str(), census.sizes_of(class));
    }
    line(&mut out, "all", &census.all_sizes());
    let most = census.partitions.keys().next_back().copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "partitions per blob (manifest + salts): 1 to {most}; percentiles are within 12.5% (histogram buckets)"
    );
    if census.damaged > 0 {
        let _ = writeln!(
            out,
            "damaged manifests (not counted): {} (run `saltblob fsck`)",
            census.damaged
        );
    }
    out
}

/// The histogram as SVG: blobs per power of two of size, stacked by layout, on a log scale, and bytes per
/// power of two as a line.
fn histogram_svg(census: &Census, prefix: &str) -> String {
    // Octaves: 0 holds size 0, k holds [2^(k-1), 2^k).
    let octave = |size: u64| 64 - size.leading_zeros() as usize;
    let mut counts = vec![[0u64; 3]; 65];
    let mut bytes = vec![0u64; 65];
    for class in LayoutClass::ALL {
        for (index, bucket) in census.sizes_of(class).buckets() {
            let o = octave(bucket_bounds(index).0);
            counts[o][class as usize] += bucket.tally.count;
            bytes[o] = bytes[o].saturating_add(bucket.tally.bytes);
        }
    }
    let used: Vec<usize> = (0..65)
        .filter(|o| counts[*o].iter().sum::<u64>() > 0)
        .collect();
    let (first, last) = (
        used.first().copied().unwrap_or(0),
        used.last().copied().unwrap_or(0),
    );
    let (w, h, left, top, bottom) = (900.0, 420.0, 70.0, 40.0, 70.0);
    let slots = (last - first + 1) as f64;
    let slot = (w - left - 20.0) / slots;
    let most = counts
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let most_bytes = bytes.iter().copied().max().unwrap_or(1).max(1) as f64;
    let plot_h = h - top - bottom;
    let y_log = |n: f64| top + plot_h - plot_h * (1.0 + n).log10() / (1.0 + most).log10();
    let colours = ["#4c78a8", "#f58518", "#e45756"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let title = format!(
        "saltblob census{}: {} blobs, {} (bars: blobs per size, log scale; line: bytes)",
        if prefix.is_empty() {
            String::new()
        } else {
            format!(" of \"{}\"", xml(prefix))
        },
        census.total().count,
        short(census.total().bytes)
    );
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"20\" font-size=\"13\">{title}</text>"
    );
    let mut line = Vec::new();
    for o in first..=last {
        let x = left + (o - first) as f64 * slot;
        let mut below = 0u64;
        for (class, colour) in colours.iter().enumerate() {
            let n = counts[o][class];
            if n == 0 {
                continue;
            }
            let (y0, y1) = (y_log(below as f64), y_log((below + n) as f64));
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>{} {}: {n}</title></rect>",
                x + 1.0,
                (slot - 2.0).max(1.0),
                (y0 - y1).max(0.5),
                LayoutClass::ALL[class].as_str(),
                octave_label(o)
            );
            below += n;
        }
        let y = top + plot_h - plot_h * bytes[o] as f64 / most_bytes;
        line.push(format!("{:.1},{y:.1}", x + slot / 2.0));
        if (o - first) % (1 + (last - first) / 16) == 0 {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" transform=\"rotate(-45 {:.1} {:.1})\">{}</text>",
                x + slot / 2.0,
                h - bottom + 14.0,
                x + slot / 2.0,
                h - bottom + 14.0,
                octave_label(o)
            );
        }
    }
    let _ = writeln!(
        s,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>",
        line.join(" ")
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        top + plot_h,
        w - 20.0,
        top + plot_h
    );
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"{:.1}\">{}</text>",
        top + 10.0,
        most as u64
    );
    for (i, (class, colour)) in LayoutClass::ALL.iter().zip(colours).enumerate() {
        let x = left + 10.0 + i as f64 * 140.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{colour}\"/>",
            h - 16.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 14.0,
            h - 7.0,
            class.as_str()
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The sizes of octave `o` ([`histogram_svg`]), as their lower bound: `0 B`, `1 B`, `64.0 KiB`, ...
fn octave_label(o: usize) -> String {
    match o {
        0 => "0 B".to_owned(),
        o => short(1u64 << (o - 1)),
    }
}

/// `s` with XML's special characters escaped.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_census() -> Census {
        let mut census = Census::default();
        let blobs = [
            (0u64, 1),
            (10, 1),
            (10_000, 1),
            (100_000, 2),
            (3 << 20, 2),
            (70 << 20, 101),
        ];
        for (size, partitions) in blobs {
            census.sizes[LayoutClass::of_partitions(partitions) as usize].add(size);
            let t = census.partitions.entry(partitions).or_default();
            t.count += 1;
            t.bytes += size;
        }
        census
    }

    #[test]
    fn a_census_reads_back_from_its_json() {
        let census = sample_census();
        let v = census_json(&census, "p/");
        assert_eq!(v["all"]["count"], 6);
        assert_eq!(census_from_json(&v, "c.json").unwrap(), census);
    }

    #[test]
    fn a_broken_or_empty_census_file_is_refused_saying_why() {
        let v = census_json(&sample_census(), "");
        let mut wrong_format = v.clone();
        wrong_format["format"] = json!("other/1");
        let mut bad_bucket = v.clone();
        bad_bucket["buckets"]["inline"][0][3] = json!(1_000_000);
        let mut uneven = v.clone();
        uneven["partitions"] = json!([[1, 1, 0]]);
        let empty = census_json(&Census::default(), "");
        for (doc, says) in [
            (wrong_format, "format"),
            (bad_bucket, "bucket"),
            (uneven, "different numbers"),
            (empty, "counts no blob"),
        ] {
            let e = census_from_json(&doc, "c.json").unwrap_err();
            assert!(
                e.message.contains(says) && e.message.contains("c.json"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn the_histogram_is_an_svg_with_a_bar_per_layout_present() {
        let svg = histogram_svg(&sample_census(), "a&b");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a&amp;b"));
        for class in ["inline", "single-partition", "salted"] {
            assert!(svg.contains(&format!("<title>{class} ")), "{class}");
        }
        assert!(check_svg_path(Path::new("x.png")).is_err());
    }
}
