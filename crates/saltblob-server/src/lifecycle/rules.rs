//! A bucket's lifecycle rules: as checked from an S3 configuration, as S3 shows them, and when they expire an
//! object (their record is `record.rs`).

use std::time::{Duration, SystemTime};

use s3s::dto::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
    LifecycleRuleFilter, Timestamp, TimestampFormat,
};
use s3s::{S3Result, s3_error};
use saltblob_core::VersionId;

/// Most rules of one configuration, as S3.
pub(super) const MAX_RULES: usize = 1000;
/// Longest rule ID in bytes, as S3.
const MAX_ID_LEN: usize = 255;
/// Longest rule prefix in bytes: S3's longest key.
pub(super) const MAX_PREFIX_LEN: usize = 1024;
/// A day in microseconds.
pub(crate) const DAY_MICROS: u64 = 86_400_000_000;

/// One expiration rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Its ID (given, or drawn when the configuration had none, as S3 does).
    pub id: String,
    /// The keys it applies to: those starting with it (empty: every key).
    pub prefix: String,
    /// Days after an object's creation it expires (then rounded up to midnight UTC).
    pub days: u32,
    /// `Status` Enabled; a disabled rule is kept and shown but expires nothing.
    pub enabled: bool,
    /// Whether the prefix was given as the older top-level `Prefix` (not in a `Filter`): the rule is shown as
    /// it was given, as S3 shows it.
    pub legacy_prefix: bool,
}

/// A bucket's lifecycle configuration, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// The version of the bucket record it was written for.
    pub bucket_version: VersionId,
    /// The rules, in the order given.
    pub rules: Vec<Rule>,
}

impl Lifecycle {
    /// The configuration `config` of the bucket whose record is `bucket_version`, checked against what this
    /// server applies.
    ///
    /// # Errors
    /// `MalformedXML` for no rule, a bad `Status` or a rule with both or neither of `Filter` and `Prefix`;
    /// `InvalidRequest` for more than 1000 rules or a rule without `Expiration`; `InvalidArgument` for days
    /// under 1, an ID over 255 bytes or used twice, a prefix over 1024 bytes; `NotImplemented` naming any
    /// element saltblob does not apply.
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

    /// The rules as S3 shows them: the prefix as given (a `Filter` with it, or the older `Prefix`), the ID, the
    /// status and `Expiration` in days.
    pub(crate) fn to_config(&self) -> Vec<LifecycleRule> {
        self.rules
            .iter()
            .map(|r| LifecycleRule {
                expiration: Some(LifecycleExpiration {
                    days: i32::try_from(r.days).ok(),
                    ..LifecycleExpiration::default()
                }),
                filter: (!r.legacy_prefix).then(|| LifecycleRuleFilter {
                    prefix: Some(r.prefix.clone()),
                    ..LifecycleRuleFilter::default()
                }),
                id: Some(r.id.clone()),
                status: ExpirationStatus::from(
                    if r.enabled { "Enabled" } else { "Disabled" }.to_owned(),
                ),
                abort_incomplete_multipart_upload: None,
                noncurrent_version_expiration: None,
                noncurrent_version_transitions: None,
                prefix: r.legacy_prefix.then(|| r.prefix.clone()),
                transitions: None,
            })
            .collect()
    }

    /// When object `key` (of the bucket) created at `created_micros` expires, in Unix microseconds, and under
    /// which rule: the enabled rule of the earliest expiry among those whose prefix it starts with (the first
    /// given of equals). `None` when no enabled rule applies.
    pub(crate) fn expiry(&self, key: &str, created_micros: u64) -> Option<(&Rule, u64)> {
        self.rules
            .iter()
            .filter(|r| r.enabled && key.starts_with(&r.prefix))
            .map(|r| (r, expires_at(created_micros, r.days)))
            .min_by_key(|(_, at)| *at)
    }
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
            "{name}: {element} is not supported; saltblob applies Expiration in Days to keys under a Prefix"
        ))
    };
    if rule.transitions.as_ref().is_some_and(|t| !t.is_empty()) {
        return refused("Transition");
    }
    if rule
        .noncurrent_version_transitions
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return refused("NoncurrentVersionTransition");
    }
    if rule.noncurrent_version_expiration.is_some() {
        return refused("NoncurrentVersionExpiration (not implemented yet)");
    }
    if rule.abort_incomplete_multipart_upload.is_some() {
        return refused(
            "AbortIncompleteMultipartUpload (the server removes uploads idle for 7 days by itself)",
        );
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
    let legacy_prefix = rule.filter.is_none();
    let prefix = match (rule.filter, rule.prefix) {
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
        (None, Some(prefix)) => prefix,
        (Some(filter), None) => {
            if filter.tag.is_some() {
                return refused("Filter Tag");
            }
            if filter.and.is_some() {
                return refused("Filter And");
            }
            if filter.object_size_greater_than.is_some() {
                return refused("Filter ObjectSizeGreaterThan");
            }
            if filter.object_size_less_than.is_some() {
                return refused("Filter ObjectSizeLessThan");
            }
            filter.prefix.unwrap_or_default()
        }
    };
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(s3_error!(
            InvalidArgument,
            "{name}: the prefix has {} bytes; at most {MAX_PREFIX_LEN}",
            prefix.len()
        ));
    }
    let Some(expiration) = rule.expiration else {
        return Err(s3_error!(
            InvalidRequest,
            "{name}: At least one action needs to be specified in a rule (Expiration)"
        ));
    };
    if expiration.date.is_some() {
        return refused("Expiration Date (give Days)");
    }
    if expiration.expired_object_delete_marker == Some(true) {
        return refused("Expiration ExpiredObjectDeleteMarker (not implemented yet)");
    }
    let days = match expiration.days.map(u32::try_from) {
        Some(Ok(days)) if days > 0 => days,
        Some(_) => {
            return Err(s3_error!(
                InvalidArgument,
                "{name}: 'Days' for Expiration action must be a positive integer"
            ));
        }
        None => {
            return Err(s3_error!(MalformedXML, "{name}: Expiration needs Days"));
        }
    };
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
        prefix,
        days,
        enabled,
        legacy_prefix,
    })
}

/// When an object created at `created_micros` expires under a rule of `days`: at the first midnight UTC after
/// its creation plus the days, as S3 rounds.
pub(crate) fn expires_at(created_micros: u64, days: u32) -> u64 {
    let due = created_micros.saturating_add(u64::from(days).saturating_mul(DAY_MICROS));
    (due / DAY_MICROS)
        .saturating_add(1)
        .saturating_mul(DAY_MICROS)
}

/// The value of `x-amz-expiration` for an object that expires at `at_micros` under `rule`:
/// `expiry-date="Fri, 23 Dec 2012 00:00:00 GMT", rule-id="ID"`, the ID percent-encoded outside
/// `A-Z a-z 0-9 - _ . ~`.
pub(crate) fn expiration_header(rule: &Rule, at_micros: u64) -> String {
    let when = Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_micros(at_micros));
    let mut date = Vec::new();
    let date = match when.format(TimestampFormat::HttpDate, &mut date) {
        Ok(()) => String::from_utf8_lossy(&date).into_owned(),
        Err(_) => String::new(),
    };
    let id = crate::percent::encode(&rule.id, b"");
    format!("expiry-date=\"{date}\", rule-id=\"{id}\"")
}

impl Lifecycle {
    /// The prefixes a pass over these rules scans: those of the enabled rules, without any that another covers.
    pub(crate) fn scanned_prefixes(&self) -> Vec<&str> {
        let mut prefixes: Vec<&str> = self
            .rules
            .iter()
            .filter(|r| r.enabled)
            .map(|r| r.prefix.as_str())
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
    use super::*;

    pub(crate) fn rule(id: &str, prefix: &str, days: u32, enabled: bool) -> Rule {
        Rule {
            id: id.to_owned(),
            prefix: prefix.to_owned(),
            days,
            enabled,
            legacy_prefix: false,
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

    #[test]
    fn expiry_rounds_up_to_the_next_midnight_utc() {
        // 2014-01-15 10:30 UTC + 3 days: 2014-01-19 00:00 UTC, AWS's own example.
        let created = 1_389_781_800 * 1_000_000;
        assert_eq!(expires_at(created, 3), 1_390_089_600 * 1_000_000);
        // At midnight exactly: the next one.
        let midnight = 1_389_744_000 * 1_000_000;
        assert_eq!(expires_at(midnight, 1), midnight + 2 * DAY_MICROS);
        assert_eq!(
            expires_at(u64::MAX - 5, 1) % DAY_MICROS,
            u64::MAX % DAY_MICROS
        );
    }

    #[test]
    fn the_earliest_enabled_rule_whose_prefix_matches_applies() {
        let l = Lifecycle {
            bucket_version: VersionId(7),
            rules: vec![
                rule("logs", "logs/", 30, true),
                rule("tmp", "logs/tmp/", 1, true),
                rule("off", "", 1, false),
            ],
        };
        assert_eq!(
            l.expiry("logs/tmp/x", 0).map(|(r, _)| r.id.as_str()),
            Some("tmp")
        );
        assert_eq!(
            l.expiry("logs/a", 0).map(|(r, _)| r.id.as_str()),
            Some("logs")
        );
        assert!(
            l.expiry("data/a", 0).is_none(),
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
    fn configurations_are_checked_and_what_is_not_applied_is_refused_by_name() {
        let ok = Lifecycle::from_config(
            BucketLifecycleConfiguration {
                rules: vec![s3_rule(Some("logs/"), 30), s3_rule(None, 365)],
            },
            VersionId(9),
        )
        .expect("valid");
        assert_eq!(ok.rules[0].prefix, "logs/");
        assert_eq!(
            ok.rules[1].prefix, "",
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
        let shown = Lifecycle::from_config(
            BucketLifecycleConfiguration {
                rules: vec![legacy, s3_rule(Some("new/"), 2)],
            },
            VersionId(1),
        )
        .expect("a legacy Prefix")
        .to_config();
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

        let mut tag = s3_rule(None, 1);
        tag.filter = Some(LifecycleRuleFilter {
            tag: Some(s3s::dto::Tag {
                key: Some("k".to_owned()),
                value: Some("v".to_owned()),
            }),
            ..LifecycleRuleFilter::default()
        });
        let mut date = s3_rule(None, 1);
        date.expiration = Some(LifecycleExpiration {
            date: Some(Timestamp::from(SystemTime::UNIX_EPOCH)),
            ..LifecycleExpiration::default()
        });
        let mut abort = s3_rule(None, 1);
        abort.abort_incomplete_multipart_upload = Some(s3s::dto::AbortIncompleteMultipartUpload {
            days_after_initiation: Some(7),
        });
        let mut noncurrent = s3_rule(None, 1);
        noncurrent.noncurrent_version_expiration =
            Some(s3s::dto::NoncurrentVersionExpiration::default());
        for (rule, element) in [
            (tag, "Filter Tag"),
            (date, "Expiration Date"),
            (abort, "AbortIncompleteMultipartUpload"),
            (noncurrent, "NoncurrentVersionExpiration"),
        ] {
            let (code, message) = refused(vec![rule]);
            assert_eq!(code, "NotImplemented", "{element}");
            assert!(
                message.contains(element) && message.contains("Rule 1"),
                "{message}"
            );
        }
    }
}
