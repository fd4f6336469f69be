//! The bench's sizes and counts, validated from its options before anything runs.

use std::time::Duration;

use saltblob::{Error, Layout, Result};

use crate::args::BenchArgs;

/// Sizes and counts, validated.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// Large blobs.
    pub(crate) count: u64,
    /// Bytes of one large blob.
    pub(crate) large_bytes: u64,
    /// Bytes of one small blob.
    pub(crate) small_bytes: u64,
    /// Small blobs: the large phases' byte volume.
    pub(crate) small_count: u64,
    /// `--chunk-size`, if given.
    pub(crate) chunk_size: Option<u32>,
    /// `--mixed`, if given.
    pub(crate) mixed: Option<Duration>,
}

impl Plan {
    /// Validates `args`; refuses out-of-range counts, sizes, durations and a plot file that is not SVG.
    pub(crate) fn new(args: &BenchArgs) -> Result<Self> {
        if args.count == 0 || args.count > 1_000_000 {
            return Err(Error::invalid(
                "count",
                format!("{}; it must be 1 to 1000000", args.count),
            ));
        }
        if args.large_mb == 0 || args.large_mb > 64 << 10 {
            return Err(Error::invalid(
                "large blob size",
                format!(
                    "{} MiB; it must be 1 to 65536 MiB (and fit in memory twice)",
                    args.large_mb
                ),
            ));
        }
        if args.small_kb == 0 || args.small_kb > args.large_mb << 10 {
            return Err(Error::invalid(
                "small blob size",
                format!(
                    "{} KiB; it must be 1 KiB to the large size ({} MiB)",
                    args.small_kb, args.large_mb
                ),
            ));
        }
        if args.concurrency == 0 || args.concurrency > 4096 {
            return Err(Error::invalid(
                "concurrency",
                format!("{}; it must be 1 to 4096", args.concurrency),
            ));
        }
        let chunk_size = args
            .chunk_size
            .map(|cs| {
                u32::try_from(cs).map_err(|_| {
                    Error::invalid("chunk size", format!("{cs} bytes; it must fit in 32 bits"))
                })
            })
            .transpose()?;
        let mixed = args
            .mixed
            .map(|s| {
                if s.is_finite() && s > 0.0 && s <= 86_400.0 {
                    Ok(Duration::from_secs_f64(s))
                } else {
                    Err(Error::invalid(
                        "mixed duration",
                        format!("{s} seconds; it must be more than 0 and at most 86400"),
                    ))
                }
            })
            .transpose()?;
        if let Some(path) = &args.plot {
            let svg = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
            if !svg {
                return Err(Error::invalid(
                    "plot file",
                    format!(
                        "{}: plots are drawn as SVG; name the file *.svg (a browser or `rsvg-convert` turns it into PNG)",
                        path.display()
                    ),
                ));
            }
        }
        let large_bytes = args.large_mb << 20;
        let small_bytes = args.small_kb << 10;
        Ok(Self {
            count: args.count,
            large_bytes,
            small_bytes,
            small_count: (args.count * large_bytes).div_ceil(small_bytes),
            chunk_size,
            mixed,
        })
    }
}

/// `layout` in words, for the bench's header.
pub(crate) fn describe_layout(layout: &Layout) -> String {
    match layout {
        Layout::Inline => "inline in the manifest".to_owned(),
        Layout::Chunked(l) => format!(
            "{} chunk(s) of {} KiB over {} salt(s)",
            l.chunk_count,
            l.chunk_size >> 10,
            l.salt_count
        ),
    }
}
