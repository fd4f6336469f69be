//! Priority classes and the scheduler's configuration: names, shares, limits, and how they are checked.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::units::{KIB, parse_size};
use crate::format::layout::Layout;

/// The class of an operation, by name: [`PriorityClass::interactive`], [`PriorityClass::bulk`], or a class
/// configured on the store ([`SchedulerConfig::with_class`]).
///
/// A name is 1 to 32 characters of `a-z`, `0-9`, `-` and `_`. Whether the store knows the class is checked when
/// an operation names it, before any I/O.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PriorityClass(Arc<str>);

/// Name of the built-in class of small requests.
pub const INTERACTIVE: &str = "interactive";
/// Name of the built-in class of large transfers and background work.
pub const BULK: &str = "bulk";

impl PriorityClass {
    /// The built-in class of small requests: inline and single-partition blobs, records, listings.
    pub fn interactive() -> Self {
        Self(Arc::from(INTERACTIVE))
    }

    /// The built-in class of large transfers: salted blobs, streams that turn out large, gc, fsck and reclaim.
    pub fn bulk() -> Self {
        Self(Arc::from(BULK))
    }

    /// The class a blob's reads and writes run in by default (no class named by the operation or the store):
    /// `interactive` for an inline or single-partition `layout`, `bulk` for a salted one or one not known yet (a
    /// stream longer than its read-ahead). The one rule for puts, reads and the S3 server's labels.
    pub fn for_layout(layout: Option<Layout>) -> Self {
        match layout {
            Some(Layout::Inline) => Self::interactive(),
            Some(Layout::Chunked(l)) if l.salt_count == 1 => Self::interactive(),
            _ => Self::bulk(),
        }
    }

    /// A class by name; fails with [`Error::InvalidArgument`] naming `priority` if the name is malformed.
    pub fn new(name: &str) -> Result<Self> {
        check_name("priority", name)?;
        Ok(Self(Arc::from(name)))
    }

    /// The class's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PriorityClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for PriorityClass {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

fn check_name(what: &'static str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            what,
            format!("\"{name}\" is not a class name (1 to 32 characters of a-z, 0-9, - and _)"),
        ))
    }
}

/// Largest number of shares of one class.
pub const MAX_SHARES: u32 = 1_000_000;
/// Largest concurrency limit.
pub const MAX_LIMIT: usize = 4096;

/// How the store schedules backend I/O between priority classes (see `docs/guarantees.md`, *Isolation*).
///
/// Every backend request of an operation is admitted by the store's scheduler: classes get the backend in
/// proportion to their shares (start-time fair queuing over request bytes); background classes (fewer shares than
/// `interactive`) are throttled: their requests in flight adapt to the measured latency of every class between
/// [`SchedulerConfig::min_limit`] and [`SchedulerConfig::max_limit`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct SchedulerConfig {
    /// Whether requests are scheduled at all. When off, every request goes straight to the backend, bounded
    /// only by each operation's in-flight window (the behaviour before classes existed). Defaults to on.
    pub enabled: bool,
    /// Shares of each class, by name. Defaults to `interactive` 1000 and `bulk` 200; both must stay defined.
    pub shares: BTreeMap<String, u32>,
    /// The class every operation of this store runs in unless the operation names one; `None` lets the layout
    /// decide (inline and single-partition blobs `interactive`, larger ones `bulk`). Defaults to `None`.
    pub default_class: Option<PriorityClass>,
    /// Requests of background classes in flight at first. Defaults to 8.
    pub initial_limit: usize,
    /// Fewest requests of background classes in flight the adaptive limit goes down to. Defaults to 2.
    pub min_limit: usize,
    /// Least share of time background classes may keep one request in flight, once the limit is at
    /// [`SchedulerConfig::min_limit`] and the latency of a foreground class (`interactive`) still rises: between
    /// their requests the scheduler then pauses for the time the last one took × (1 ÷ duty − 1), at most 1 s.
    /// Background work alone never pauses. In `(0, 1]`; 1.0 turns the pauses off. Defaults to 0.25
    /// (docs/bench/journal/isolation.md, *bulk work pausing below the minimum limit*).
    pub min_bulk_duty: f64,
    /// Most requests of background classes in flight the adaptive limit goes up to, and most requests of any
    /// other class in flight. Defaults to 64.
    pub max_limit: usize,
    /// Raw chunk bytes of one backend request of a background class (fewer shares than `interactive`): bulk
    /// work is cut into units this small so that it never holds a slot for long. Defaults to 256 KiB.
    pub bulk_unit_bytes: usize,
    /// How far request latency may rise above its no-load baseline before the limit shrinks, as a factor.
    /// Defaults to 2.0.
    pub latency_tolerance: f64,
    /// Whether the CPU work of background classes (checksums, compression, digests) runs on a pool of one
    /// thread per core at a lower OS priority (nice 10) instead of the async runtime's workers. Defaults to off
    /// (see `schedule/cpu.rs`).
    pub bulk_cpu_pool: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            shares: BTreeMap::from([(INTERACTIVE.to_owned(), 1000), (BULK.to_owned(), 200)]),
            default_class: None,
            initial_limit: 8,
            min_limit: 2,
            min_bulk_duty: 0.25,
            max_limit: 64,
            bulk_unit_bytes: (256 * KIB) as usize,
            latency_tolerance: 2.0,
            bulk_cpu_pool: false,
        }
    }
}

impl SchedulerConfig {
    /// No scheduling: requests go straight to the backend.
    pub fn off() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }

    /// Adds a class, or sets the shares of an existing one (built-in ones included).
    pub fn with_class(mut self, name: impl Into<String>, shares: u32) -> Self {
        self.shares.insert(name.into(), shares);
        self
    }

    /// Sets [`SchedulerConfig::default_class`].
    pub fn with_default_class(mut self, class: PriorityClass) -> Self {
        self.default_class = Some(class);
        self
    }

    /// Sets the adaptive limit's bounds and starting point ([`SchedulerConfig::min_limit`],
    /// [`SchedulerConfig::initial_limit`], [`SchedulerConfig::max_limit`]).
    pub fn with_limits(mut self, min: usize, initial: usize, max: usize) -> Self {
        (self.min_limit, self.initial_limit, self.max_limit) = (min, initial, max);
        self
    }

    /// Sets [`SchedulerConfig::min_bulk_duty`].
    pub fn with_min_bulk_duty(mut self, duty: f64) -> Self {
        self.min_bulk_duty = duty;
        self
    }

    /// Sets [`SchedulerConfig::bulk_cpu_pool`].
    pub fn with_bulk_cpu_pool(mut self, pooled: bool) -> Self {
        self.bulk_cpu_pool = pooled;
        self
    }

    /// Sets [`SchedulerConfig::bulk_unit_bytes`].
    pub fn with_bulk_unit_bytes(mut self, bytes: usize) -> Self {
        self.bulk_unit_bytes = bytes;
        self
    }

    /// Checks the configuration; errors name the option at fault. Called by [`crate::store::BlobStore::new`], before
    /// any I/O.
    pub fn validate(&self) -> Result<()> {
        for builtin in [INTERACTIVE, BULK] {
            if !self.shares.contains_key(builtin) {
                return Err(Error::invalid(
                    "classes",
                    format!("the built-in class \"{builtin}\" cannot be removed"),
                ));
            }
        }
        for (name, &shares) in &self.shares {
            check_name("classes", name)?;
            if !(1..=MAX_SHARES).contains(&shares) {
                return Err(Error::invalid(
                    "classes",
                    format!("class \"{name}\" has {shares} shares; shares are 1 to {MAX_SHARES}"),
                ));
            }
        }
        if let Some(class) = &self.default_class {
            self.check_known(class)?;
        }
        if !(1 <= self.min_limit
            && self.min_limit <= self.initial_limit
            && self.initial_limit <= self.max_limit
            && self.max_limit <= MAX_LIMIT)
        {
            return Err(Error::invalid(
                "concurrency",
                format!(
                    "limits {}..{} starting at {}; they must satisfy 1 <= min <= initial <= max <= {MAX_LIMIT}",
                    self.min_limit, self.max_limit, self.initial_limit
                ),
            ));
        }
        if !(self.min_bulk_duty > 0.0 && self.min_bulk_duty <= 1.0) {
            return Err(Error::invalid(
                "bulk_duty",
                format!(
                    "{}; it must be a share of time in (0, 1] (1: no pauses)",
                    self.min_bulk_duty
                ),
            ));
        }
        if self.bulk_unit_bytes < 4 * KIB as usize {
            return Err(Error::invalid(
                "bulk_unit",
                format!("{} bytes; it must be at least 4 KiB", self.bulk_unit_bytes),
            ));
        }
        if !(self.latency_tolerance.is_finite() && self.latency_tolerance >= 1.0) {
            return Err(Error::invalid(
                "latency_tolerance",
                format!(
                    "{}; it must be a factor of at least 1.0",
                    self.latency_tolerance
                ),
            ));
        }
        Ok(())
    }

    /// Fails with [`Error::InvalidArgument`] naming `priority` unless the store has the class.
    pub fn check_known(&self, class: &PriorityClass) -> Result<()> {
        if self.shares.contains_key(class.name()) {
            Ok(())
        } else {
            let known: Vec<&str> = self.shares.keys().map(String::as_str).collect();
            Err(Error::invalid(
                "priority",
                format!(
                    "unknown class \"{class}\"; this store has {}",
                    known.join(", ")
                ),
            ))
        }
    }

    /// Applies one store-level URL parameter; returns `false` (changing nothing) for a parameter that is not the
    /// scheduler's, so the caller can hand it to the backend. The parameters:
    ///
    /// | parameter | meaning | example |
    /// |---|---|---|
    /// | `scheduler` | `on` or `off` | `scheduler=off` |
    /// | `priority` | the store's [`SchedulerConfig::default_class`] | `priority=bulk` |
    /// | `classes` | shares by class, comma-separated | `classes=interactive:1000,bulk:200,batch:50` |
    /// | `concurrency` | `MIN-MAX` or `MIN-INITIAL-MAX` background requests in flight | `concurrency=2-8-64` |
    /// | `bulk_unit` | [`SchedulerConfig::bulk_unit_bytes`] | `bulk_unit=256KiB` |
    /// | `bulk_cpu` | `pool` or `inline` ([`SchedulerConfig::bulk_cpu_pool`]) | `bulk_cpu=pool` |
    /// | `bulk_duty` | [`SchedulerConfig::min_bulk_duty`] | `bulk_duty=0.25` |
    pub fn apply_url_param(&mut self, name: &str, value: &str) -> Result<bool> {
        match name {
            "scheduler" => {
                self.enabled = match value {
                    "on" | "true" => true,
                    "off" | "false" => false,
                    _ => {
                        return Err(Error::invalid(
                            "scheduler",
                            format!("\"{value}\"; use on or off"),
                        ));
                    }
                }
            }
            "priority" => self.default_class = Some(PriorityClass::new(value)?),
            "classes" => {
                for item in value.split(',').filter(|s| !s.is_empty()) {
                    let (class, shares) = item.split_once(':').ok_or_else(|| {
                        Error::invalid(
                            "classes",
                            format!("\"{item}\" is not NAME:SHARES (e.g. batch:50)"),
                        )
                    })?;
                    let shares: u32 = shares.parse().map_err(|_| {
                        Error::invalid(
                            "classes",
                            format!(
                                "\"{item}\": shares must be a whole number from 1 to {MAX_SHARES}"
                            ),
                        )
                    })?;
                    check_name("classes", class)?;
                    self.shares.insert(class.to_owned(), shares);
                }
            }
            "concurrency" => {
                let parts: Option<Vec<usize>> =
                    value.split('-').map(|p| p.trim().parse().ok()).collect();
                (self.min_limit, self.initial_limit, self.max_limit) = match parts.as_deref() {
                    Some(&[min, max]) => (min, self.initial_limit.clamp(min, max.max(min)), max),
                    Some(&[min, initial, max]) => (min, initial, max),
                    _ => {
                        return Err(Error::invalid(
                            "concurrency",
                            format!("\"{value}\" is not MIN-MAX or MIN-INITIAL-MAX (e.g. 2-64)"),
                        ));
                    }
                };
            }
            "bulk_cpu" => {
                self.bulk_cpu_pool = match value {
                    "pool" => true,
                    "inline" => false,
                    _ => {
                        return Err(Error::invalid(
                            "bulk_cpu",
                            format!("\"{value}\"; use pool or inline"),
                        ));
                    }
                }
            }
            "bulk_duty" => {
                self.min_bulk_duty = value.trim().parse().map_err(|_| {
                    Error::invalid(
                        "bulk_duty",
                        format!("\"{value}\" is not a share of time (e.g. 0.25)"),
                    )
                })?;
            }
            "bulk_unit" => {
                let bytes = parse_size(value).map_err(|e| Error::invalid("bulk_unit", e))?;
                self.bulk_unit_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<impl fmt::Debug>) -> String {
        match result {
            Err(Error::InvalidArgument { what, reason }) => format!("{what}: {reason}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn class_names_are_checked() {
        assert_eq!(
            PriorityClass::new("batch-2").map(|c| c.to_string()).ok(),
            Some("batch-2".into())
        );
        for bad in ["", "Bulk", "a b", &"x".repeat(33)] {
            assert!(
                reason(PriorityClass::new(bad)).starts_with("priority: "),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_configurations_name_the_option() {
        let cases = [
            (
                SchedulerConfig::default().with_class("batch", 0),
                "classes: class \"batch\" has 0 shares",
            ),
            (
                SchedulerConfig {
                    shares: BTreeMap::from([(INTERACTIVE.to_owned(), 1)]),
                    ..SchedulerConfig::default()
                },
                "classes: the built-in class \"bulk\"",
            ),
            (
                SchedulerConfig::default()
                    .with_class("x", 1)
                    .with_default_class(PriorityClass::new("nope").expect("name")),
                "priority: unknown class \"nope\"; this store has bulk, interactive, x",
            ),
            (
                SchedulerConfig::default().with_limits(0, 1, 2),
                "concurrency: ",
            ),
            (
                SchedulerConfig::default().with_limits(4, 2, 8),
                "concurrency: ",
            ),
            (
                SchedulerConfig::default().with_bulk_unit_bytes(100),
                "bulk_unit: ",
            ),
            (
                SchedulerConfig::default().with_min_bulk_duty(0.0),
                "bulk_duty: 0; it must be a share of time in (0, 1]",
            ),
            (
                SchedulerConfig::default().with_min_bulk_duty(1.5),
                "bulk_duty: ",
            ),
            (
                SchedulerConfig::default().with_min_bulk_duty(f64::NAN),
                "bulk_duty: ",
            ),
        ];
        for (config, expected) in cases {
            let got = reason(config.validate());
            assert!(got.starts_with(expected), "{got}");
        }
        assert!(SchedulerConfig::default().validate().is_ok());
    }

    #[test]
    fn url_parameters_set_the_scheduler() {
        let mut c = SchedulerConfig::default();
        for (name, value) in [
            ("scheduler", "off"),
            ("priority", "batch"),
            ("classes", "batch:50,bulk:300"),
            ("concurrency", "4-16-32"),
            ("bulk_unit", "128KiB"),
            ("bulk_cpu", "pool"),
            ("bulk_duty", "0.5"),
        ] {
            assert!(c.apply_url_param(name, value).expect(name), "{name}");
        }
        assert!(!c.apply_url_param("sync", "true").expect("not ours"));
        assert!(!c.enabled);
        assert_eq!(
            c.default_class.as_ref().map(PriorityClass::name),
            Some("batch")
        );
        assert_eq!(
            (c.shares["batch"], c.shares["bulk"], c.shares[INTERACTIVE]),
            (50, 300, 1000)
        );
        assert_eq!((c.min_limit, c.initial_limit, c.max_limit), (4, 16, 32));
        assert_eq!(c.bulk_unit_bytes, 128 << 10);
        assert!(c.bulk_cpu_pool);
        assert_eq!(c.min_bulk_duty, 0.5, "not the default (0.25)");
        assert!(c.validate().is_ok());
        for (name, value, expected) in [
            ("scheduler", "maybe", "scheduler: "),
            ("classes", "batch", "classes: \"batch\" is not NAME:SHARES"),
            (
                "classes",
                "batch:-1",
                "classes: \"batch:-1\": shares must be",
            ),
            ("concurrency", "lots", "concurrency: "),
            ("priority", "Bulk", "priority: "),
            ("bulk_cpu", "threads", "bulk_cpu: "),
            ("bulk_duty", "half", "bulk_duty: \"half\" is not a share"),
        ] {
            let got = reason(SchedulerConfig::default().apply_url_param(name, value));
            assert!(got.starts_with(expected), "{got}");
        }
    }
}
