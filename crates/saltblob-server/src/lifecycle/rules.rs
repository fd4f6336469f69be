//! A bucket's lifecycle rules: as checked from an S3 configuration, as S3 shows them, which objects and
//! versions they match, and when they expire them (their record is `record.rs`).

use std::time::{Duration, SystemTime};

use s3s::dto::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
    LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator, LifecycleRuleFilter,
    NoncurrentVersionExpiration, Tag, Timestamp, TimestampFormat,
};
use s3s::{S3Result, s3_error};
use saltblob_core::{Manifest, VersionId};

use crate::tagging::{MAX_OBJECT_TAGS, Tags};

/// Most rules of one configuration, as S3.
pub(super) const MAX_RULES: usize = 1000;
/// Longest rule ID in bytes, as S3.
const MAX_ID_LEN: usize = 255;
/// Longest rule prefix in bytes: S3's longest key.
pub(super) const MAX_PREFIX_LEN: usize = 1024;
/// Most noncurrent versions a rule may keep (`NewerNoncurrentVersions`), as S3.
pub(super) const MAX_NEWER_NONCURRENT: u32 = 100;
/// A day in microseconds: the length of a lifecycle day unless a server is given another (for tests).
pub(crate) const DAY_MICROS: u64 = 86_400_000_000;

/// Which elements a rule's filter was given with, so that it is shown as given (bits of [`Filter::shown`]).
pub(crate) mod shown {
    /// `Filter` `Prefix` (also an empty `Filter`, shown with an empty prefix).
    pub(crate) const PREFIX: u8 = 1;
    /// `Filter` `Tag`.
    pub(crate) const TAG: u8 = 2;
    /// `Filter` `ObjectSizeGreaterThan`.
    pub(crate) const SIZE_GREATER: u8 = 4;
    /// `Filter` `ObjectSizeLessThan`.
    pub(crate) const SIZE_LESS: u8 = 8;
    /// `Filter` `And` (holding the prefix, tags and sizes given).
    pub(crate) const AND: u8 = 16;
    /// The older top-level `Prefix`, no `Filter`.
    pub(crate) const LEGACY: u8 = 32;
    /// Every bit a record may hold.
    pub(crate) const ALL: u8 = 63;
}

/// The objects a rule applies to: every condition given holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Filter {
    /// The keys it applies to: those starting with it (empty: every key).
    pub prefix: String,
    /// Tags an object must have, each with this value.
    pub tags: Vec<(String, String)>,
    /// Sizes it applies to: more bytes than this.
    pub size_greater: Option<u64>,
    /// Sizes it applies to: fewer bytes than this.
    pub size_less: Option<u64>,
    /// How it was given ([`shown`] bits).
    pub shown: u8,
}

impl Filter {
    /// A filter of `prefix` alone, given in a `Filter`.
    pub(crate) fn prefix(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            tags: Vec::new(),
            size_greater: None,
            size_less: None,
            shown: shown::PREFIX,
        }
    }

    /// Whether version `m` of object `key` passes it (a delete marker has no tags and size 0).
    pub(crate) fn matches(&self, key: &str, m: &Manifest) -> bool {
        if !key.starts_with(&self.prefix)
            || self.size_greater.is_some_and(|n| m.size <= n)
            || self.size_less.is_some_and(|n| m.size >= n)
        {
            return false;
        }
        if self.tags.is_empty() {
            return true;
        }
        let has = Tags::of(m).0;
        self.tags.iter().all(|t| has.contains(t))
    }
}

/// When an `Expiration` expires the current version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Days after its creation (then rounded up to the next midnight UTC).
    Days(u32),
    /// At this date (midnight UTC), in Unix microseconds.
    Date(u64),
}

/// `NoncurrentVersionExpiration`: when a noncurrent version is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Noncurrent {
    /// Days after it became noncurrent (then rounded up to the next midnight UTC).
    pub days: u32,
    /// The newest noncurrent versions kept whatever their age (`NewerNoncurrentVersions`).
    pub newer: Option<u32>,
}

/// One lifecycle rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Its ID (given, or drawn when the configuration had none, as S3 does).
    pub id: String,
    /// `Status` Enabled; a disabled rule is kept and shown but does nothing.
    pub enabled: bool,
    /// What it applies to.
    pub filter: Filter,
    /// `Expiration` in `Days` or at a `Date`: the current version expires.
    pub expiration: Option<Expiry>,
    /// `Expiration` `ExpiredObjectDeleteMarker`: a delete marker left with no other version is removed.
    pub expired_delete_marker: bool,
    /// `NoncurrentVersionExpiration`.
    pub noncurrent: Option<Noncurrent>,
    /// `AbortIncompleteMultipartUpload` `DaysAfterInitiation`.
    pub abort_after_days: Option<u32>,
}

/// A bucket's lifecycle configuration, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// The version of the bucket record it was written for.
    pub bucket_version: VersionId,
    /// The rules, in the order given.
    pub rules: Vec<Rule>,
}

/// When the lifecycle's days end: [`DAY_MICROS`] long, or shorter for tests (`ServerConfig::lifecycle_day`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Days(pub u64);

impl Default for Days {
    fn default() -> Self {
        Days(DAY_MICROS)
    }
}

impl Days {
    /// Days of length `day` (at least a microsecond).
    pub(crate) fn of_length(day: Duration) -> Self {
        Days(u64::try_from(day.as_micros()).unwrap_or(DAY_MICROS).max(1))
    }

    /// The day (since the epoch) of `micros`.
    pub(crate) fn of(self, micros: u64) -> u64 {
        micros / self.0.max(1)
    }

    /// The start of the day after the one of `micros`.
    pub(crate) fn next_midnight(self, micros: u64) -> u64 {
        self.of(micros).saturating_add(1).saturating_mul(self.0)
    }

    /// Whether these are shortened days, to test rules.
    pub(crate) fn shortened(self) -> bool {
        self.0 != DAY_MICROS
    }

    /// When something `days` old at `from_micros` is due: at the first midnight after `from_micros` plus the days,
    /// as S3 rounds; with [`Days::shortened`] days, exactly then (as RGW counts its debug interval), so that a
    /// test need not wait for a day's end.
    pub(crate) fn after(self, from_micros: u64, days: u32) -> u64 {
        let due = from_micros.saturating_add(u64::from(days).saturating_mul(self.0));
        if self.shortened() {
            due
        } else {
            self.next_midnight(due)
        }
    }
}

impl Lifecycle {
    /// The configuration `config` of the bucket whose record is `bucket_version`, checked against what this
    /// server applies.
    ///
    /// # Errors
    /// `MalformedXML` for no rule, a bad `Status`, a rule with both or neither of `Filter` and `Prefix`, an
    /// `Expiration` with not exactly one of `Days`, `Date` and `ExpiredObjectDeleteMarker`; `InvalidRequest` for
    /// more than 1000 rules, a rule without an action, tags
    /// beside `ExpiredObjectDeleteMarker` or `AbortIncompleteMultipartUpload`; `InvalidArgument` for days under 1,
    /// a `Date` not at midnight UTC, `NewerNoncurrentVersions` outside 1–100, sizes that leave nothing, an ID over
    /// 255 bytes or used twice, a prefix over 1024 bytes, a bad tag; `NotImplemented` naming transitions.
    pub(crate) fn from_config(
        config: BucketLifecycleConfiguration,
        bucket_version: VersionId,
    ) -> S3Result<Self> {
        if config.rules.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "A lifecycle configuration needs at least one Rule"
            ));
        }
        if config.rules.len() > MAX_RULES {
            return Err(s3_error!(
                InvalidRequest,
                "A lifecycle configuration holds at most {MAX_RULES} rules; this one has {}",
                config.rules.len()
            ));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.into_iter().enumerate() {
            let rule = checked_rule(rule, i + 1)?;
            if rules.iter().any(|r| r.id == rule.id) {
                return Err(s3_error!(
                    InvalidArgument,
                    "Rule ID must be unique. Found same ID for more than one rule: {:?}",
                    rule.id
                ));
            }
            rules.push(rule);
        }
        Ok(Self {
            bucket_version,
            rules,
        })
    }

    /// The rules as S3 shows them: each filter as given, the ID, the status and the actions.
    pub(crate) fn to_config(&self) -> Vec<LifecycleRule> {
        self.rules.iter().map(Rule::to_config).collect()
    }

    /// When version `m` of object `key`, current, expires, in Unix microseconds, and under which rule: the
    /// enabled rule with an `Expiration` in days or at a date, whose filter it passes, of the earliest expiry
    /// (the first given of equals). `None` when none applies.
    pub(crate) fn expiry(&self, key: &str, m: &Manifest, days: Days) -> Option<(&Rule, u64)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && r.filter.matches(key, m))
            .filter_map(|r| {
                let at = match r.expiration? {
                    Expiry::Days(n) => days.after(m.created_micros, n),
                    Expiry::Date(at) => at,
                };
                Some((r, at))
            })
            .min_by_key(|(_, at)| *at)
    }

    /// Whether a noncurrent version `m` of `key`, `newer` noncurrent versions after it, that became noncurrent
    /// at `since_micros`, is due for removal at `now` under an enabled rule's `NoncurrentVersionExpiration`.
    pub(crate) fn noncurrent_due(
        &self,
        key: &str,
        m: &Manifest,
        newer: usize,
        since_micros: u64,
        now: u64,
        days: Days,
    ) -> bool {
        self.rules.iter().any(|r| {
            let Some(n) = r.noncurrent.filter(|_| r.enabled) else {
                return false;
            };
            let kept = n
                .newer
                .map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX));
            newer >= kept && days.after(since_micros, n.days) <= now && r.filter.matches(key, m)
        })
    }

    /// Whether delete marker `marker` of `key`, left with no other version, is due for removal at `now`: under an
    /// enabled rule with `ExpiredObjectDeleteMarker`, or with `Expiration` `Days` once the marker is that old (a
    /// rule with tags or a least size never applies to a marker).
    pub(crate) fn lone_marker_due(
        &self,
        key: &str,
        marker: &Manifest,
        now: u64,
        days: Days,
    ) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && r.filter.matches(key, marker)
                && (r.expired_delete_marker
                    || matches!(r.expiration, Some(Expiry::Days(n)) if days.after(marker.created_micros, n) <= now))
        })
    }

    /// Whether an upload of `key` initiated at `initiated_micros` is due to be aborted at `now` under an enabled
    /// rule's `AbortIncompleteMultipartUpload`.
    pub(crate) fn abort_due(&self, key: &str, initiated_micros: u64, now: u64, days: Days) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && key.starts_with(&r.filter.prefix)
                && r.abort_after_days
                    .is_some_and(|n| days.after(initiated_micros, n) <= now)
        })
    }

    /// Whether a pass must read the versions of each key: the bucket keeps versions and a rule removes some.
    pub(crate) fn removes_versions(&self) -> bool {
        self.rules.iter().any(|r| {
            r.enabled
                && (r.noncurrent.is_some()
                    || r.expired_delete_marker
                    || matches!(r.expiration, Some(Expiry::Days(_))))
        })
    }

    /// Whether a rule aborts incomplete multipart uploads.
    pub(crate) fn aborts_uploads(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.enabled && r.abort_after_days.is_some())
    }
}

impl Rule {
    /// The rule as S3 shows it.
    fn to_config(&self) -> LifecycleRule {
        let f = &self.filter;
        let tag = |(k, v): &(String, String)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        };
        let size = |n: Option<u64>| n.and_then(|n| i64::try_from(n).ok());
        let legacy = f.shown & shown::LEGACY != 0;
        let filter = if legacy {
            None
        } else if f.shown & shown::AND != 0 {
            Some(LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
                    tags: (!f.tags.is_empty()).then(|| f.tags.iter().map(tag).collect()),
                    object_size_greater_than: size(f.size_greater),
                    object_size_less_than: size(f.size_less),
                }),
                ..LifecycleRuleFilter::default()
            })
        } else {
            Some(LifecycleRuleFilter {
                prefix: (f.shown & shown::PREFIX != 0).then(|| f.prefix.clone()),
                tag: f
                    .tags
                    .first()
                    .filter(|_| f.shown & shown::TAG != 0)
                    .map(tag),
                object_size_greater_than: size(f.size_greater),
                object_size_less_than: size(f.size_less),
                and: None,
            })
        };
        let expiration = (self.expiration.is_some() || self.expired_delete_marker).then(|| {
            LifecycleExpiration {
                days: match self.expiration {
                    Some(Expiry::Days(n)) => i32::try_from(n).ok(),
                    _ => None,
                },
                date: match self.expiration {
                    Some(Expiry::Date(at)) => Some(timestamp(at)),
                    _ => None,
                },
                expired_object_delete_marker: self.expired_delete_marker.then_some(true),
            }
        });
        LifecycleRule {
            expiration,
            filter,
            id: Some(self.id.clone()),
            status: ExpirationStatus::from(
                if self.enabled { "Enabled" } else { "Disabled" }.to_owned(),
            ),
            abort_incomplete_multipart_upload: self.abort_after_days.map(|n| {
                AbortIncompleteMultipartUpload {
                    days_after_initiation: i32::try_from(n).ok(),
                }
            }),
            noncurrent_version_expiration: self.noncurrent.map(|n| NoncurrentVersionExpiration {
                noncurrent_days: i32::try_from(n.days).ok(),
                newer_noncurrent_versions: n.newer.and_then(|k| i32::try_from(k).ok()),
            }),
            noncurrent_version_transitions: None,
            prefix: legacy.then(|| f.prefix.clone()),
            transitions: None,
        }
    }
}

/// `micros` since the epoch as a timestamp.
fn timestamp(micros: u64) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

/// A count of days given for `element` of rule `name`, which must be at least 1.
fn positive_days(days: Option<i32>, name: &str, element: &str) -> S3Result<u32> {
    match days.map(u32::try_from) {
        Some(Ok(days)) if days > 0 => Ok(days),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "{name}: '{element}' must be a positive integer"
        )),
        None => Err(s3_error!(MalformedXML, "{name}: {element} is required")),
    }
}

/// A size bound of a filter (at least 0).
fn size_bound(n: Option<i64>, name: &str) -> S3Result<Option<u64>> {
    n.map(|n| {
        u64::try_from(n).map_err(|_| {
            s3_error!(
                InvalidArgument,
                "{name}: an object size bound must be 0 or more"
            )
        })
    })
    .transpose()
}

/// The filter of rule `name`: its `Filter` or the older top-level `Prefix`.
fn checked_filter(
    filter: Option<LifecycleRuleFilter>,
    legacy: Option<String>,
    name: &str,
) -> S3Result<Filter> {
    let mut f = match (filter, legacy) {
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                MalformedXML,
                "{name}: give Filter or the older Prefix, not both"
            ));
        }
        (None, None) => {
            return Err(s3_error!(
                MalformedXML,
                "{name}: a rule needs a Filter (an empty Filter applies it to the whole bucket)"
            ));
        }
        (None, Some(prefix)) => Filter {
            shown: shown::LEGACY,
            ..Filter::prefix(&prefix)
        },
        (Some(filter), None) => {
            let tops = [
                filter.prefix.is_some(),
                filter.tag.is_some(),
                filter.object_size_greater_than.is_some(),
                filter.object_size_less_than.is_some(),
            ];
            let tops_given = tops.iter().any(|t| *t);
            let mut shown = 0;
            for (given, bit) in tops.iter().zip([
                shown::PREFIX,
                shown::TAG,
                shown::SIZE_GREATER,
                shown::SIZE_LESS,
            ]) {
                if *given {
                    shown |= bit;
                }
            }
            let top = Filter {
                prefix: filter.prefix.unwrap_or_default(),
                tags: Tags::from_dto(filter.tag.into_iter().collect(), 1)?.0,
                size_greater: size_bound(filter.object_size_greater_than, name)?,
                size_less: size_bound(filter.object_size_less_than, name)?,
                // An empty Filter is shown with an empty Prefix.
                shown: if shown == 0 { shown::PREFIX } else { shown },
            };
            match filter.and {
                None => top,
                Some(and) => {
                    let and = Filter {
                        prefix: and.prefix.unwrap_or_default(),
                        tags: Tags::from_dto(and.tags.unwrap_or_default(), MAX_OBJECT_TAGS)?.0,
                        size_greater: size_bound(and.object_size_greater_than, name)?,
                        size_less: size_bound(and.object_size_less_than, name)?,
                        shown: shown::AND,
                    };
                    if tops_given {
                        both(top, and, name)?
                    } else {
                        and
                    }
                }
            }
        }
    };
    if f.prefix.len() > MAX_PREFIX_LEN {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: the prefix has {} bytes; at most {MAX_PREFIX_LEN}",
            f.prefix.len()
        ));
    }
    if let (Some(more), Some(less)) = (f.size_greater, f.size_less)
        && less <= more.saturating_add(1)
    {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: ObjectSizeLessThan must be more than ObjectSizeGreaterThan + 1: no object passes it"
        ));
    }
    f.shown &= shown::ALL;
    Ok(f)
}

/// The filter of a `Filter` that gives `And` beside other elements: every condition of both applies, shown as one
/// `And`. RGW takes such a filter so (ceph/s3-tests' `*_tags2` cases); AWS refuses it (`MalformedXML`).
///
/// # Errors
/// `InvalidArgument` when nothing could pass it (two prefixes neither of which starts with the other, a tag key
/// given two values) or it names more than [`MAX_OBJECT_TAGS`] tags.
fn both(top: Filter, and: Filter, name: &str) -> S3Result<Filter> {
    let prefix = if top.prefix.starts_with(&and.prefix) {
        top.prefix
    } else if and.prefix.starts_with(&top.prefix) {
        and.prefix
    } else {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: the Filter's Prefix and its And's Prefix leave no key"
        ));
    };
    let mut tags = top.tags;
    for (k, v) in and.tags {
        match tags.iter().find(|(key, _)| *key == k) {
            Some((_, value)) if *value != v => {
                return Err(s3_error!(
                    InvalidArgument,
                    "{name}: the Filter gives tag {k:?} two values: no object passes it"
                ));
            }
            Some(_) => {}
            None => tags.push((k, v)),
        }
    }
    if tags.len() > MAX_OBJECT_TAGS {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: the Filter names {} tags; at most {MAX_OBJECT_TAGS}",
            tags.len()
        ));
    }
    let size_less = match (top.size_less, and.size_less) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Filter {
        prefix,
        tags,
        size_greater: top.size_greater.max(and.size_greater),
        size_less,
        shown: shown::AND,
    })
}

/// Rule number `n` (from 1) of a configuration, checked.
fn checked_rule(rule: LifecycleRule, n: usize) -> S3Result<Rule> {
    let name = match &rule.id {
        Some(id) => format!("Rule {n} (ID {id:?})"),
        None => format!("Rule {n}"),
    };
    let refused = |element: &str| {
        Err(s3_error!(
            NotImplemented,
            "{name}: {element} is not supported; saltblob has one storage class"
        ))
    };
    if let Some(transitions) = rule.transitions.as_ref().filter(|t| !t.is_empty()) {
        // A value S3 refuses is refused as S3 does (400) before the element is (501).
        for date in transitions.iter().filter_map(|t| t.date.as_ref()) {
            midnight(date, &format!("{name}: Transition"))?;
        }
        return refused("Transition");
    }
    if rule
        .noncurrent_version_transitions
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return refused("NoncurrentVersionTransition");
    }
    let enabled = match rule.status.as_str() {
        "Enabled" => true,
        "Disabled" => false,
        other => {
            return Err(s3_error!(
                MalformedXML,
                "{name}: Status is Enabled or Disabled, not {other:?}"
            ));
        }
    };
    let filter = checked_filter(rule.filter, rule.prefix, &name)?;
    let (expiration, expired_delete_marker) = match rule.expiration {
        None => (None, false),
        Some(e) => {
            let marker = e.expired_object_delete_marker == Some(true);
            match (e.days, e.date, marker) {
                (Some(days), None, false) => (
                    Some(Expiry::Days(positive_days(Some(days), &name, "Days")?)),
                    false,
                ),
                (None, Some(date), false) => (Some(Expiry::Date(midnight(&date, &name)?)), false),
                (None, None, true) => (None, true),
                // `ExpiredObjectDeleteMarker` false alone: no action.
                (None, None, false) if e.expired_object_delete_marker.is_some() => (None, false),
                _ => {
                    return Err(s3_error!(
                        MalformedXML,
                        "{name}: Expiration holds exactly one of Days, Date and ExpiredObjectDeleteMarker"
                    ));
                }
            }
        }
    };
    let noncurrent = match rule.noncurrent_version_expiration {
        None => None,
        Some(nc) => {
            let days = positive_days(nc.noncurrent_days, &name, "NoncurrentDays")?;
            let newer = match nc.newer_noncurrent_versions.map(u32::try_from) {
                None => None,
                Some(Ok(k)) if (1..=MAX_NEWER_NONCURRENT).contains(&k) => Some(k),
                Some(_) => {
                    return Err(s3_error!(
                        InvalidArgument,
                        "{name}: NewerNoncurrentVersions must be between 1 and {MAX_NEWER_NONCURRENT}"
                    ));
                }
            };
            Some(Noncurrent { days, newer })
        }
    };
    let abort_after_days = match rule.abort_incomplete_multipart_upload {
        None => None,
        Some(a) => Some(positive_days(
            a.days_after_initiation,
            &name,
            "DaysAfterInitiation",
        )?),
    };
    if expiration.is_none()
        && !expired_delete_marker
        && noncurrent.is_none()
        && abort_after_days.is_none()
    {
        return Err(s3_error!(
            InvalidRequest,
            "{name}: At least one action needs to be specified in a rule (Expiration, NoncurrentVersionExpiration or AbortIncompleteMultipartUpload)"
        ));
    }
    let filtered =
        !filter.tags.is_empty() || filter.size_greater.is_some() || filter.size_less.is_some();
    if expired_delete_marker && !filter.tags.is_empty() {
        return Err(s3_error!(
            InvalidRequest,
            "{name}: ExpiredObjectDeleteMarker cannot be specified with tags"
        ));
    }
    if abort_after_days.is_some() && filtered {
        return Err(s3_error!(
            InvalidRequest,
            "{name}: AbortIncompleteMultipartUpload cannot be specified with tags or object sizes"
        ));
    }
    let id = match rule.id {
        Some(id) if !id.is_empty() => id,
        // S3 draws an ID for a rule given none.
        _ => VersionId::generate().to_string(),
    };
    if id.len() > MAX_ID_LEN {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: ID length should not exceed allowed limit of {MAX_ID_LEN}"
        ));
    }
    Ok(Rule {
        id,
        enabled,
        filter,
        expiration,
        expired_delete_marker,
        noncurrent,
        abort_after_days,
    })
}

/// A rule's `Date` (of its `Expiration`, or of a `Transition`) in Unix microseconds.
///
/// # Errors
/// `InvalidArgument` for a date before the epoch or not at midnight UTC, as S3.
fn midnight(date: &Timestamp, name: &str) -> S3Result<u64> {
    // Whole seconds print without a fraction; anything else is not at midnight.
    let mut secs = Vec::new();
    let at = date
        .format(TimestampFormat::EpochSeconds, &mut secs)
        .ok()
        .and_then(|()| std::str::from_utf8(&secs).ok()?.parse::<u64>().ok())
        .map(|s| s.saturating_mul(1_000_000))
        .filter(|at| at % DAY_MICROS == 0);
    at.ok_or_else(|| s3_error!(InvalidArgument, "{name}: 'Date' must be at midnight GMT"))
}

/// The value of `x-amz-expiration` for an object that expires at `at_micros` under `rule`:
/// `expiry-date="Fri, 23 Dec 2012 00:00:00 GMT", rule-id="ID"`, the ID percent-encoded outside
/// `A-Z a-z 0-9 - _ . ~`.
pub(crate) fn expiration_header(rule: &Rule, at_micros: u64) -> String {
    let mut date = Vec::new();
    let date = match timestamp(at_micros).format(TimestampFormat::HttpDate, &mut date) {
        Ok(()) => String::from_utf8_lossy(&date).into_owned(),
        Err(_) => String::new(),
    };
    let id = crate::percent::encode(&rule.id, b"");
    format!("expiry-date=\"{date}\", rule-id=\"{id}\"")
}

impl Lifecycle {
    /// The prefixes a pass over the bucket's keys scans: those of the enabled rules that act on objects or
    /// versions, without any that another covers.
    pub(crate) fn scanned_prefixes(&self) -> Vec<&str> {
        let mut prefixes: Vec<&str> = self
            .rules
            .iter()
            .filter(|r| {
                r.enabled
                    && (r.expiration.is_some() || r.expired_delete_marker || r.noncurrent.is_some())
            })
            .map(|r| r.filter.prefix.as_str())
            .collect();
        prefixes.sort_unstable();
        let mut kept: Vec<&str> = Vec::with_capacity(prefixes.len());
        for p in prefixes {
            if !kept.last().is_some_and(|k| p.starts_with(k)) {
                kept.push(p);
            }
        }
        kept
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use saltblob_core::ManifestBody;

    use super::*;

    /// A rule expiring keys under `prefix` after `days`.
    pub(crate) fn rule(id: &str, prefix: &str, days: u32, enabled: bool) -> Rule {
        Rule {
            id: id.to_owned(),
            enabled,
            filter: Filter::prefix(prefix),
            expiration: Some(Expiry::Days(days)),
            expired_delete_marker: false,
            noncurrent: None,
            abort_after_days: None,
        }
    }

    /// A version of `size` bytes created at `created_micros` with `metadata`.
    pub(crate) fn version(size: u64, created_micros: u64, metadata: &[(&str, &str)]) -> Manifest {
        Manifest {
            version: VersionId(1),
            size,
            created_micros,
            expires_micros: None,
            digest: [0; 32],
            body: ManifestBody::Inline(bytes::Bytes::new()),
            content_type: None,
            metadata: metadata
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            sealing: None,
        }
    }

    fn s3_rule(prefix: Option<&str>, days: i32) -> LifecycleRule {
        LifecycleRule {
            expiration: Some(LifecycleExpiration {
                days: Some(days),
                ..LifecycleExpiration::default()
            }),
            filter: Some(LifecycleRuleFilter {
                prefix: prefix.map(str::to_owned),
                ..LifecycleRuleFilter::default()
            }),
            id: None,
            status: ExpirationStatus::from("Enabled".to_owned()),
            abort_incomplete_multipart_upload: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: None,
            transitions: None,
        }
    }

    fn refused(rules: Vec<LifecycleRule>) -> (String, String) {
        let e = Lifecycle::from_config(BucketLifecycleConfiguration { rules }, VersionId(1))
            .expect_err("refused");
        (
            e.code().as_str().to_owned(),
            e.message().unwrap_or_default().to_owned(),
        )
    }

    fn accepted(rules: Vec<LifecycleRule>) -> Lifecycle {
        Lifecycle::from_config(BucketLifecycleConfiguration { rules }, VersionId(1)).expect("valid")
    }

    #[test]
    fn expiry_rounds_up_to_the_next_midnight_utc() {
        let days = Days::default();
        // 2014-01-15 10:30 UTC + 3 days: 2014-01-19 00:00 UTC, AWS's own example.
        let created = 1_389_781_800 * 1_000_000;
        assert_eq!(days.after(created, 3), 1_390_089_600 * 1_000_000);
        // At midnight exactly: the next one.
        let midnight = 1_389_744_000 * 1_000_000;
        assert_eq!(days.after(midnight, 1), midnight + 2 * DAY_MICROS);
        assert_eq!(
            days.after(u64::MAX - 5, 1) % DAY_MICROS,
            u64::MAX % DAY_MICROS
        );
        // A test day of 10 s: 1 day after 25 s is 35 s, not rounded.
        let short = Days::of_length(Duration::from_secs(10));
        assert_eq!(short.after(25_000_000, 1), 35_000_000);
        assert_eq!(short.of(25_000_000), 2);
    }

    #[test]
    fn the_earliest_enabled_rule_whose_filter_matches_applies() {
        let l = Lifecycle {
            bucket_version: VersionId(7),
            rules: vec![
                rule("logs", "logs/", 30, true),
                rule("tmp", "logs/tmp/", 1, true),
                rule("off", "", 1, false),
            ],
        };
        let days = Days::default();
        let m = version(10, 0, &[]);
        assert_eq!(
            l.expiry("logs/tmp/x", &m, days).map(|(r, _)| r.id.as_str()),
            Some("tmp")
        );
        assert_eq!(
            l.expiry("logs/a", &m, days).map(|(r, _)| r.id.as_str()),
            Some("logs")
        );
        assert!(
            l.expiry("data/a", &m, days).is_none(),
            "the disabled rule expires nothing"
        );
        assert_eq!(l.scanned_prefixes(), vec!["logs/"]);
        let header = expiration_header(&l.rules[0], 1_390_089_600 * 1_000_000);
        assert_eq!(
            header,
            "expiry-date=\"Sun, 19 Jan 2014 00:00:00 GMT\", rule-id=\"logs\""
        );
        assert!(
            expiration_header(&rule("a \"b\"/é", "", 1, true), 0)
                .ends_with("rule-id=\"a%20%22b%22%2F%C3%A9\"")
        );
    }

    #[test]
    fn filters_match_prefix_tags_and_sizes_together() {
        let f = Filter {
            prefix: "p/".to_owned(),
            tags: vec![("k".to_owned(), "v".to_owned())],
            size_greater: Some(10),
            size_less: Some(100),
            shown: shown::AND,
        };
        let tagged = [("s3:tagging", "k=v&other=x")];
        assert!(f.matches("p/a", &version(50, 0, &tagged)));
        assert!(!f.matches("q/a", &version(50, 0, &tagged)), "prefix");
        assert!(
            !f.matches("p/a", &version(10, 0, &tagged)),
            "not more than 10"
        );
        assert!(
            !f.matches("p/a", &version(100, 0, &tagged)),
            "not less than 100"
        );
        assert!(!f.matches("p/a", &version(50, 0, &[])), "untagged");
        assert!(
            !f.matches("p/a", &version(50, 0, &[("s3:tagging", "k=w")])),
            "another value"
        );
    }

    #[test]
    fn noncurrent_versions_markers_and_uploads_are_due_as_their_rules_say() {
        let days = Days::of_length(Duration::from_secs(10));
        let mut nc = rule("nc", "a/", 1, true);
        nc.expiration = None;
        nc.noncurrent = Some(Noncurrent {
            days: 2,
            newer: Some(2),
        });
        let mut marker = rule("dm", "", 1, true);
        marker.expiration = None;
        marker.expired_delete_marker = true;
        let mut abort = rule("mp", "up/", 1, true);
        abort.expiration = None;
        abort.abort_after_days = Some(1);
        let l = Lifecycle {
            bucket_version: VersionId(1),
            rules: vec![nc, marker, abort],
        };
        let m = version(5, 0, &[]);
        // Noncurrent since 5 s: 2 days of 10 s (test days, not rounded): due at 25 s, and only past the 2 newest.
        assert!(!l.noncurrent_due("a/x", &m, 2, 5_000_000, 24_999_999, days));
        assert!(l.noncurrent_due("a/x", &m, 2, 5_000_000, 25_000_000, days));
        assert!(!l.noncurrent_due("a/x", &m, 1, 5_000_000, 90_000_000, days));
        assert!(!l.noncurrent_due("b/x", &m, 5, 0, u64::MAX, days), "prefix");
        assert!(l.lone_marker_due("b/x", &m, 0, days));
        assert!(!l.abort_due("up/x", 5_000_000, 14_999_999, days));
        assert!(l.abort_due("up/x", 5_000_000, 15_000_000, days));
        assert!(!l.abort_due("other", 0, u64::MAX, days));
        assert!(l.removes_versions() && l.aborts_uploads());
        // A marker left alone under Expiration Days goes once it is that old.
        let by_days = Lifecycle {
            bucket_version: VersionId(1),
            rules: vec![rule("d", "", 5, true)],
        };
        assert!(!by_days.lone_marker_due("k", &version(0, 0, &[]), 49_999_999, days));
        assert!(by_days.lone_marker_due("k", &version(0, 0, &[]), 50_000_000, days));
    }

    #[test]
    fn configurations_are_checked_and_shown_as_given() {
        let ok = accepted(vec![s3_rule(Some("logs/"), 30), s3_rule(None, 365)]);
        assert_eq!(ok.rules[0].filter.prefix, "logs/");
        assert_eq!(
            ok.rules[1].filter.prefix, "",
            "an empty filter is the whole bucket"
        );
        assert_eq!(
            ok.rules[0].id.len(),
            32,
            "an ID is drawn when none is given"
        );
        assert_ne!(ok.rules[0].id, ok.rules[1].id);

        assert_eq!(refused(vec![]).0, "MalformedXML");
        assert_eq!(refused(vec![s3_rule(None, 0)]).0, "InvalidArgument");
        assert_eq!(refused(vec![s3_rule(None, -3)]).0, "InvalidArgument");
        assert_eq!(
            refused(vec![s3_rule(None, 1); MAX_RULES + 1]).0,
            "InvalidRequest"
        );
        let mut twice = vec![s3_rule(None, 1), s3_rule(Some("a"), 2)];
        for r in &mut twice {
            r.id = Some("same".to_owned());
        }
        assert!(refused(twice).1.contains("unique"));
        let mut long_id = s3_rule(None, 1);
        long_id.id = Some("x".repeat(256));
        assert_eq!(refused(vec![long_id]).0, "InvalidArgument");
        let mut both = s3_rule(Some("a"), 1);
        both.prefix = Some("a".to_owned());
        assert_eq!(refused(vec![both]).0, "MalformedXML");
        let mut neither = s3_rule(None, 1);
        neither.filter = None;
        assert_eq!(refused(vec![neither]).0, "MalformedXML");
        let mut legacy = s3_rule(None, 1);
        legacy.filter = None;
        legacy.prefix = Some("old/".to_owned());
        let shown = accepted(vec![legacy, s3_rule(Some("new/"), 2)]).to_config();
        // Each rule is shown as given: the older top-level Prefix, or a Filter.
        assert_eq!(
            (shown[0].prefix.as_deref(), shown[0].filter.is_none()),
            (Some("old/"), true)
        );
        assert_eq!(
            (
                shown[1].prefix.as_deref(),
                shown[1].filter.as_ref().and_then(|f| f.prefix.as_deref())
            ),
            (None, Some("new/"))
        );
        let mut status = s3_rule(None, 1);
        status.status = ExpirationStatus::from("enabled".to_owned());
        assert_eq!(refused(vec![status]).0, "MalformedXML");
        let mut no_action = s3_rule(None, 1);
        no_action.expiration = None;
        assert_eq!(refused(vec![no_action]).0, "InvalidRequest");
        let mut two_kinds = s3_rule(None, 1);
        two_kinds.expiration = Some(LifecycleExpiration {
            days: Some(1),
            expired_object_delete_marker: Some(true),
            ..LifecycleExpiration::default()
        });
        assert_eq!(refused(vec![two_kinds]).0, "MalformedXML");
        let mut transition = s3_rule(None, 1);
        transition.transitions = Some(vec![s3s::dto::Transition::default()]);
        let (code, message) = refused(vec![transition]);
        assert_eq!(code, "NotImplemented");
        assert!(
            message.contains("Transition") && message.contains("Rule 1"),
            "{message}"
        );
        // A transition S3 would refuse for its value is refused for it (400), as S3 does, before the element (501).
        let mut late = s3_rule(None, 1);
        late.transitions = Some(vec![s3s::dto::Transition {
            date: Some(timestamp(20_220_927_000_000)),
            ..s3s::dto::Transition::default()
        }]);
        let (code, message) = refused(vec![late]);
        assert_eq!(code, "InvalidArgument", "{message}");
        assert!(message.contains("Transition"), "{message}");
        let mut at_midnight = s3_rule(None, 1);
        at_midnight.transitions = Some(vec![s3s::dto::Transition {
            date: Some(timestamp(DAY_MICROS * 19_000)),
            ..s3s::dto::Transition::default()
        }]);
        assert_eq!(refused(vec![at_midnight]).0, "NotImplemented");
    }

    /// A `Filter` with `And` beside other elements (ceph/s3-tests' `*_tags2`): every condition applies, shown as
    /// one `And`; one that nothing could pass is refused.
    #[test]
    fn an_and_beside_other_filter_elements_applies_them_all() {
        let tag = |k: &str, v: &str| Tag {
            key: Some(k.to_owned()),
            value: Some(v.to_owned()),
        };
        let rule = |prefix: &str, top: Tag, and_prefix: &str, and_tags: Vec<Tag>| {
            let mut r = s3_rule(None, 1);
            r.filter = Some(LifecycleRuleFilter {
                prefix: Some(prefix.to_owned()),
                tag: Some(top),
                object_size_less_than: Some(100),
                and: Some(LifecycleRuleAndOperator {
                    prefix: Some(and_prefix.to_owned()),
                    tags: Some(and_tags),
                    object_size_greater_than: Some(2),
                    object_size_less_than: Some(50),
                }),
                ..LifecycleRuleFilter::default()
            });
            r
        };
        let l = accepted(vec![rule(
            "days1/",
            tag("tom", "sawyer"),
            "days1",
            vec![tag("huck", "finn"), tag("tom", "sawyer")],
        )]);
        let f = &l.rules[0].filter;
        assert_eq!(
            (f.prefix.as_str(), f.size_greater, f.size_less, f.shown),
            ("days1/", Some(2), Some(50), shown::AND)
        );
        assert_eq!(
            f.tags,
            vec![
                ("tom".to_owned(), "sawyer".to_owned()),
                ("huck".to_owned(), "finn".to_owned())
            ]
        );
        let shown = l.rules[0].to_config().filter.expect("filter");
        assert!(shown.prefix.is_none() && shown.tag.is_none(), "{shown:?}");
        let and = shown.and.expect("shown as one And");
        assert_eq!(and.prefix.as_deref(), Some("days1/"));
        assert_eq!(and.tags.map(|t| t.len()), Some(2));

        let (code, message) = refused(vec![rule("a/", tag("t", "1"), "b/", vec![])]);
        assert_eq!(code, "InvalidArgument", "{message}");
        let (code, message) = refused(vec![rule("a/", tag("t", "1"), "a", vec![tag("t", "2")])]);
        assert_eq!(code, "InvalidArgument", "{message}");
    }

    #[test]
    fn tags_sizes_dates_noncurrent_versions_and_aborts_are_kept_and_shown() {
        let tag = |k: &str, v: &str| Tag {
            key: Some(k.to_owned()),
            value: Some(v.to_owned()),
        };
        let mut and = s3_rule(None, 1);
        and.filter = Some(LifecycleRuleFilter {
            and: Some(LifecycleRuleAndOperator {
                prefix: Some("p/".to_owned()),
                tags: Some(vec![tag("a", "1"), tag("b", "2")]),
                object_size_greater_than: Some(10),
                object_size_less_than: None,
            }),
            ..LifecycleRuleFilter::default()
        });
        let mut date = s3_rule(Some("d/"), 1);
        date.expiration = Some(LifecycleExpiration {
            date: Some(timestamp(1_420_070_400_000_000)),
            ..LifecycleExpiration::default()
        });
        let mut noncurrent = s3_rule(Some("n/"), 1);
        noncurrent.expiration = None;
        noncurrent.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
            noncurrent_days: Some(3),
            newer_noncurrent_versions: Some(5),
        });
        let mut abort = s3_rule(Some("m/"), 1);
        abort.expiration = None;
        abort.abort_incomplete_multipart_upload = Some(AbortIncompleteMultipartUpload {
            days_after_initiation: Some(7),
        });
        let mut size_and_prefix = s3_rule(Some(""), 1);
        if let Some(f) = size_and_prefix.filter.as_mut() {
            f.object_size_greater_than = Some(2000);
        }
        let given = vec![and, date, noncurrent, abort, size_and_prefix];
        let l = accepted(given.clone());
        assert_eq!(l.rules[0].filter.tags.len(), 2);
        assert_eq!(
            l.rules[1].expiration,
            Some(Expiry::Date(1_420_070_400_000_000))
        );
        assert_eq!(
            l.rules[2].noncurrent,
            Some(Noncurrent {
                days: 3,
                newer: Some(5)
            })
        );
        assert_eq!(l.rules[3].abort_after_days, Some(7));
        // Shown as given (but the IDs, drawn).
        for (shown, mut given) in l.to_config().into_iter().zip(given) {
            given.id = shown.id.clone();
            assert_eq!(shown, given);
        }

        let mut not_midnight = s3_rule(None, 1);
        not_midnight.expiration = Some(LifecycleExpiration {
            date: Some(timestamp(1_420_070_400_000_000 + 1_000_000)),
            ..LifecycleExpiration::default()
        });
        assert_eq!(refused(vec![not_midnight]).0, "InvalidArgument");
        let mut marker_tags = s3_rule(None, 1);
        marker_tags.expiration = Some(LifecycleExpiration {
            expired_object_delete_marker: Some(true),
            ..LifecycleExpiration::default()
        });
        marker_tags.filter = Some(LifecycleRuleFilter {
            tag: Some(tag("k", "v")),
            ..LifecycleRuleFilter::default()
        });
        assert_eq!(refused(vec![marker_tags]).0, "InvalidRequest");
        let mut too_many = s3_rule(None, 1);
        too_many.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
            noncurrent_days: Some(1),
            newer_noncurrent_versions: Some(101),
        });
        assert_eq!(refused(vec![too_many]).0, "InvalidArgument");
        let mut empty_range = s3_rule(None, 1);
        empty_range.filter = Some(LifecycleRuleFilter {
            object_size_greater_than: Some(10),
            object_size_less_than: Some(11),
            ..LifecycleRuleFilter::default()
        });
        assert_eq!(refused(vec![empty_range]).0, "InvalidArgument");
    }
}
