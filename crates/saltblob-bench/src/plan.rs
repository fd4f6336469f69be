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
    /// `--large-writers`: concurrent large loops of the bulk phases.
    pub(crate) large_writers: usize,
    /// The paced loads of `--mixed`: `--small-load` (fractions of the small ops' capacity, in (0, 1]) or
    /// `--small-rate` (fixed rates).
    pub(crate) paced_loads: Vec<PacedLoad>,
    /// `--paced-samples`: small operations due in each paced phase, at least.
    pub(crate) paced_samples: u64,
    /// `--paced-grace`: how long a paced phase waits past its schedule for the operations due in it.
    pub(crate) paced_grace: Duration,
}

/// One paced load of `--mixed`: how fast its small operations are due.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PacedLoad {
    /// `--small-load`: a fraction ρ of the small ops' closed-loop capacity X*, in (0, 1]. The goals are stated
    /// at ρ = 0.25 and 0.5.
    Share(f64),
    /// `--small-rate`: a fixed rate, ops/s, whatever X* is, so that stores or builds of different capacity are
    /// compared at the same offered load. No goal is stated at a fixed rate.
    Rate(f64),
}

impl PacedLoad {
    /// Small operations due per second against the small capacity `capacity` (ops/s).
    pub(crate) fn rate(self, capacity: f64) -> f64 {
        match self {
            Self::Share(rho) => rho * capacity,
            Self::Rate(rate) => rate,
        }
    }

    /// The load as a fraction of the small capacity `capacity` (ops/s): ρ as given, or the rate ÷ X*.
    pub(crate) fn rho(self, capacity: f64) -> f64 {
        match self {
            Self::Share(rho) => rho,
            Self::Rate(rate) => rate / capacity,
        }
    }

    /// The load in phase names: `rho0.25`, or `rate800` at a fixed rate.
    pub(crate) fn label(self) -> String {
        match self {
            Self::Share(rho) => format!("rho{rho}"),
            Self::Rate(rate) => format!("rate{rate}"),
        }
    }
}

/// Longest `--paced-grace`, seconds.
const MAX_PACED_GRACE_SECONDS: f64 = 600.0;

/// The paced loads of `--mixed` without `--small-load`.
pub(crate) const DEFAULT_SMALL_LOADS: [f64; 2] = [0.25, 0.5];
/// Highest `--small-rate`, ops/s.
pub(crate) const MAX_SMALL_RATE: f64 = 1e6;
/// Most small operations due in one paced phase (`--paced-samples`).
pub(crate) const MAX_PACED_SAMPLES: u64 = 10_000_000;

/// Most concurrent large loops: each holds two copies of a large blob in memory.
pub(crate) const MAX_LARGE_WRITERS: usize = 64;

impl Plan {
    /// Validates `args`; refuses out-of-range counts, sizes, durations, large writers (or more than one without
    /// `--mixed`) and a plot file that is not SVG.
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
        if args.large_writers == 0 || args.large_writers > MAX_LARGE_WRITERS {
            return Err(Error::invalid(
                "--large-writers",
                format!(
                    "{}; it must be 1 to {MAX_LARGE_WRITERS} (concurrent large put/get/delete loops of --mixed)",
                    args.large_writers
                ),
            ));
        }
        if args.large_writers > 1 && mixed.is_none() {
            return Err(Error::invalid(
                "--large-writers",
                format!(
                    "{} writers without --mixed: the large loops run only in the mixed phases; add --mixed SECONDS",
                    args.large_writers
                ),
            ));
        }
        for (option, given) in [
            ("--small-load", !args.small_load.is_empty()),
            ("--small-rate", !args.small_rate.is_empty()),
        ] {
            if given && mixed.is_none() {
                return Err(Error::invalid(
                    option,
                    "the paced loads run only in the mixed phases; add --mixed SECONDS",
                ));
            }
        }
        if !args.small_load.is_empty() && !args.small_rate.is_empty() {
            return Err(Error::invalid(
                "--small-rate",
                "give the paced loads either as fractions of the capacity (--small-load) or as rates \
                 (--small-rate), not both",
            ));
        }
        if let Some(bad) = args
            .small_load
            .iter()
            .find(|r| !(r.is_finite() && **r > 0.0 && **r <= 1.0))
        {
            return Err(Error::invalid(
                "--small-load",
                format!(
                    "{bad}; each paced load is a fraction of the small ops' capacity, more than 0 and at most 1"
                ),
            ));
        }
        if let Some(bad) = args
            .small_rate
            .iter()
            .find(|r| !(r.is_finite() && **r > 0.0 && **r <= MAX_SMALL_RATE))
        {
            return Err(Error::invalid(
                "--small-rate",
                format!(
                    "{bad}; each paced rate is small operations per second, more than 0 and at most {MAX_SMALL_RATE}"
                ),
            ));
        }
        if args.paced_samples == 0 || args.paced_samples > MAX_PACED_SAMPLES {
            return Err(Error::invalid(
                "--paced-samples",
                format!(
                    "{}; it must be 1 to {MAX_PACED_SAMPLES}",
                    args.paced_samples
                ),
            ));
        }
        if !(args.paced_grace.is_finite()
            && (0.0..=MAX_PACED_GRACE_SECONDS).contains(&args.paced_grace))
        {
            return Err(Error::invalid(
                "--paced-grace",
                format!(
                    "{}; it must be 0 to {MAX_PACED_GRACE_SECONDS} seconds",
                    args.paced_grace
                ),
            ));
        }
        let paced_grace = Duration::from_secs_f64(args.paced_grace);
        let paced_loads = if !args.small_rate.is_empty() {
            args.small_rate
                .iter()
                .map(|&r| PacedLoad::Rate(r))
                .collect()
        } else if !args.small_load.is_empty() {
            args.small_load
                .iter()
                .map(|&r| PacedLoad::Share(r))
                .collect()
        } else {
            DEFAULT_SMALL_LOADS.map(PacedLoad::Share).to_vec()
        };
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
            large_writers: args.large_writers,
            paced_loads,
            paced_samples: args.paced_samples,
            paced_grace,
        })
    }

    /// The paced loads given as fractions of the capacity (`--small-load`, or the default), in order.
    pub(crate) fn small_loads(&self) -> Vec<f64> {
        self.paced_loads
            .iter()
            .filter_map(|l| match *l {
                PacedLoad::Share(rho) => Some(rho),
                PacedLoad::Rate(_) => None,
            })
            .collect()
    }

    /// The paced loads given as fixed rates (`--small-rate`), in order.
    pub(crate) fn small_rates(&self) -> Vec<f64> {
        self.paced_loads
            .iter()
            .filter_map(|l| match *l {
                PacedLoad::Rate(rate) => Some(rate),
                PacedLoad::Share(_) => None,
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn plan(extra: &[&str]) -> Result<Plan> {
        Plan::new(&Cli::parse_from(["bench"].iter().chain(extra)).args)
    }

    /// The error refusing `extra`, which must name the option `what`.
    fn refused(extra: &[&str], what: &str) -> Error {
        let err = plan(extra).expect_err("refused");
        assert!(
            matches!(&err, Error::InvalidArgument { what: named, .. } if *named == what),
            "{extra:?}: {err}"
        );
        err
    }

    #[test]
    fn large_writers_default_to_one_and_take_n_with_mixed() {
        assert_eq!(plan(&[]).expect("valid").large_writers, 1);
        let p = plan(&["--mixed", "3", "--large-writers", "4"]).expect("valid");
        assert_eq!(
            (p.large_writers, p.mixed),
            (4, Some(Duration::from_secs(3)))
        );
        let most = MAX_LARGE_WRITERS.to_string();
        assert!(plan(&["--mixed", "3", "--large-writers", &most]).is_ok());
    }

    #[test]
    fn bad_large_writers_are_refused_naming_the_flag() {
        let too_many = (MAX_LARGE_WRITERS + 1).to_string();
        for extra in [
            &["--mixed", "3", "--large-writers", "0"][..],
            &["--mixed", "3", "--large-writers", &too_many],
            &["--large-writers", "2"],
        ] {
            let err = refused(extra, "--large-writers");
            assert!(err.to_string().contains("--large-writers"), "{err}");
        }
    }

    #[test]
    fn the_paced_grace_defaults_to_ten_seconds_and_bad_ones_are_refused() {
        let p = plan(&["--mixed", "3"]).expect("valid");
        assert_eq!(p.paced_grace, Duration::from_secs(10));
        let p = plan(&["--mixed", "3", "--paced-grace", "0.5"]).expect("valid");
        assert_eq!(p.paced_grace, Duration::from_millis(500));
        for bad in ["-1", "601", "NaN", "inf"] {
            let arg = format!("--paced-grace={bad}");
            refused(&["--mixed", "3", &arg], "--paced-grace");
        }
    }

    #[test]
    fn paced_loads_are_shares_by_default_or_fixed_rates() {
        let p = plan(&["--mixed", "3"]).expect("valid");
        assert_eq!(
            p.paced_loads,
            [PacedLoad::Share(0.25), PacedLoad::Share(0.5)]
        );
        assert_eq!(
            (p.small_loads(), p.small_rates()),
            (vec![0.25, 0.5], vec![])
        );
        let p = plan(&["--mixed", "3", "--small-rate", "800,1500.5"]).expect("valid");
        assert_eq!(
            p.paced_loads,
            [PacedLoad::Rate(800.0), PacedLoad::Rate(1500.5)]
        );
        assert_eq!(
            (p.small_loads(), p.small_rates()),
            (vec![], vec![800.0, 1500.5])
        );
        // A share follows the capacity, a rate does not; each names its phases.
        assert_eq!(PacedLoad::Share(0.25).rate(4000.0), 1000.0);
        assert_eq!(PacedLoad::Rate(800.0).rate(4000.0), 800.0);
        assert_eq!(PacedLoad::Share(0.25).rho(3000.0), 0.25);
        assert_eq!(PacedLoad::Rate(800.0).rho(4000.0), 0.2);
        assert_eq!(PacedLoad::Share(0.25).label(), "rho0.25");
        assert_eq!(PacedLoad::Rate(800.0).label(), "rate800");
    }

    #[test]
    fn bad_small_rates_are_refused_naming_the_flag() {
        for extra in [
            &["--mixed", "3", "--small-rate", "0"][..],
            &["--mixed", "3", "--small-rate=-5"],
            &["--mixed", "3", "--small-rate", "NaN"],
            &["--mixed", "3", "--small-rate", "1e7"],
            &[
                "--mixed",
                "3",
                "--small-rate",
                "800",
                "--small-load",
                "0.25",
            ],
            &["--small-rate", "800"],
        ] {
            refused(extra, "--small-rate");
        }
    }
}
