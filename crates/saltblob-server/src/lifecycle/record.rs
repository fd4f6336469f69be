//! A bucket's lifecycle record: its rules as stored under `s3/l/<bucket>` (`keys.rs`), written and read here only.
//!
//! Record format (little-endian), versions 1 to 3:
//!
//! ```text
//! magic "SBLC" | format u8 (1, 2 or 3) | bucket record version u128 | rule count u16 (1..=1000)
//! formats 1 and 2, rule: status u8 (0 disabled, 1 enabled) | days u32 (>= 1) | id length u8 | id (UTF-8)
//!       | prefix length u16 (<= 1024) | prefix (UTF-8)
//!       | format 2 only: prefix form u8 (0 in a Filter, 1 the older top-level Prefix)
//! format 3, rule: status u8 | id length u8 | id | filter form u8 (bits: 1 Prefix, 2 Tag, 4 ObjectSizeGreaterThan,
//!       8 ObjectSizeLessThan, 16 And, 32 the older top-level Prefix) | prefix length u16 | prefix
//!       | tag count u8 (<= 10) | each: key length u16 | key | value length u16 | value
//!       | actions u8 (bits: 1 ObjectSizeGreaterThan, 2 ObjectSizeLessThan, 4 Expiration Days, 8 Expiration Date,
//!         16 ExpiredObjectDeleteMarker, 32 NoncurrentVersionExpiration, 64 NewerNoncurrentVersions,
//!         128 AbortIncompleteMultipartUpload)
//!       | then, for each bit set, in this order: size u64 | size u64 | days u32 | date u64 (Unix µs, midnight)
//!         | noncurrent days u32 | newer noncurrent versions u32 | days after initiation u32
//! ```
//!
//! Format 1 is written while every rule is `Expiration` `Days` with its prefix in a `Filter` (so servers that
//! read only format 1 still read it), format 2 once one gives the older `Prefix`, format 3 once one has anything
//! else (tags, sizes, a date, noncurrent versions, delete markers, multipart aborts): a server that reads only
//! formats 1 and 2 reports it as corrupt and applies none of its rules, never some of them. Nothing follows the
//! last rule; a record that breaks any of this is reported as corrupt with what broke and where, and its
//! bucket's objects are then never expired.

use crate::record_reader::Reader;

use super::rules::{Expiry, Filter, Lifecycle, MAX_PREFIX_LEN, MAX_RULES, Noncurrent, Rule, shown};
use crate::tagging::MAX_OBJECT_TAGS;

/// The first bytes of a lifecycle record.
const MAGIC: &[u8; 4] = b"SBLC";
/// The record format of rules that all give their prefix in a `Filter`.
const FORMAT_FILTERS: u8 = 1;
/// The record format that also keeps each rule's prefix form.
const FORMAT_FORMS: u8 = 2;
/// The record format of every filter and action.
const FORMAT_ACTIONS: u8 = 3;

/// Bits of a format 3 rule's actions byte.
mod action {
    pub(super) const SIZE_GREATER: u8 = 1;
    pub(super) const SIZE_LESS: u8 = 2;
    pub(super) const DAYS: u8 = 4;
    pub(super) const DATE: u8 = 8;
    pub(super) const DELETE_MARKER: u8 = 16;
    pub(super) const NONCURRENT: u8 = 32;
    pub(super) const NEWER: u8 = 64;
    pub(super) const ABORT: u8 = 128;
}

impl Rule {
    /// Whether formats 1 and 2 hold this rule: `Expiration` `Days` under a prefix, nothing else.
    fn fits_format_2(&self) -> bool {
        matches!(self.expiration, Some(Expiry::Days(_)))
            && !self.expired_delete_marker
            && self.noncurrent.is_none()
            && self.abort_after_days.is_none()
            && (self.filter.shown == shown::PREFIX || self.filter.shown == shown::LEGACY)
            && self.filter.tags.is_empty()
            && self.filter.size_greater.is_none()
            && self.filter.size_less.is_none()
    }

    /// Appends the rule in format 3.
    fn encode_actions(&self, out: &mut Vec<u8>) {
        let f = &self.filter;
        out.push(u8::from(self.enabled));
        push_u8_text(out, &self.id);
        out.push(f.shown);
        push_u16_text(out, &f.prefix);
        // At most 10 tags, checked by `from_config` (and `decode`).
        out.push(u8::try_from(f.tags.len()).unwrap_or(u8::MAX));
        for (k, v) in &f.tags {
            push_u16_text(out, k);
            push_u16_text(out, v);
        }
        let mut bits = 0;
        let mut tail = Vec::new();
        if let Some(n) = f.size_greater {
            bits |= action::SIZE_GREATER;
            tail.extend_from_slice(&n.to_le_bytes());
        }
        if let Some(n) = f.size_less {
            bits |= action::SIZE_LESS;
            tail.extend_from_slice(&n.to_le_bytes());
        }
        match self.expiration {
            Some(Expiry::Days(n)) => {
                bits |= action::DAYS;
                tail.extend_from_slice(&n.to_le_bytes());
            }
            Some(Expiry::Date(at)) => {
                bits |= action::DATE;
                tail.extend_from_slice(&at.to_le_bytes());
            }
            None => {}
        }
        if self.expired_delete_marker {
            bits |= action::DELETE_MARKER;
        }
        if let Some(nc) = self.noncurrent {
            bits |= action::NONCURRENT;
            tail.extend_from_slice(&nc.days.to_le_bytes());
            if let Some(k) = nc.newer {
                bits |= action::NEWER;
                tail.extend_from_slice(&k.to_le_bytes());
            }
        }
        if let Some(n) = self.abort_after_days {
            bits |= action::ABORT;
            tail.extend_from_slice(&n.to_le_bytes());
        }
        out.push(bits);
        out.extend_from_slice(&tail);
    }
}

/// Appends `text` after its length as one byte (IDs: at most 255 bytes, checked by `from_config`).
fn push_u8_text(out: &mut Vec<u8>, text: &str) {
    out.push(u8::try_from(text.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(text.as_bytes());
}

/// Appends `text` after its length as a u16 (prefixes: at most 1024 bytes; tags: at most 1024).
fn push_u16_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&u16::try_from(text.len()).unwrap_or(u16::MAX).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

impl Lifecycle {
    /// The record's bytes: format 1 when every rule is `Expiration` `Days` with its prefix in a `Filter`, 2 when
    /// one gives the older `Prefix`, else 3.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let format = if !self.rules.iter().all(Rule::fits_format_2) {
            FORMAT_ACTIONS
        } else if self.rules.iter().any(|r| r.filter.shown == shown::LEGACY) {
            FORMAT_FORMS
        } else {
            FORMAT_FILTERS
        };
        let mut out = Vec::with_capacity(23 + self.rules.len() * 17);
        out.extend_from_slice(MAGIC);
        out.push(format);
        out.extend_from_slice(&self.bucket_version.to_le_bytes());
        // Both checked by `from_config` (and `decode`): at most 1000 rules, IDs of 255 and prefixes of 1024 bytes.
        out.extend_from_slice(
            &u16::try_from(self.rules.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        for r in &self.rules {
            if format == FORMAT_ACTIONS {
                r.encode_actions(&mut out);
                continue;
            }
            let days = match r.expiration {
                Some(Expiry::Days(n)) => n,
                _ => 0,
            };
            out.push(u8::from(r.enabled));
            out.extend_from_slice(&days.to_le_bytes());
            push_u8_text(&mut out, &r.id);
            push_u16_text(&mut out, &r.filter.prefix);
            if format == FORMAT_FORMS {
                out.push(u8::from(r.filter.shown == shown::LEGACY));
            }
        }
        out
    }

    /// The configuration in record `bytes`.
    ///
    /// # Errors
    /// What is wrong and at which byte offset, for anything that is not a record of format 1, 2 or 3.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes);
        let (format, bucket_version, count) = r.bucket_setting_head(
            MAGIC,
            &[FORMAT_FILTERS, FORMAT_FORMS, FORMAT_ACTIONS],
            MAX_RULES,
        )?;
        let mut rules = Vec::with_capacity(count);
        for _ in 0..count {
            let status_at = r.at;
            let enabled = match r.u8()? {
                0 => false,
                1 => true,
                other => return Err(format!("status byte {other} at offset {status_at}")),
            };
            if format == FORMAT_ACTIONS {
                rules.push(decode_actions(&mut r, enabled)?);
                continue;
            }
            let days_at = r.at;
            let days = u32::from_le_bytes(r.array()?);
            if days == 0 {
                return Err(format!("0 days at offset {days_at}"));
            }
            let id_len = usize::from(r.u8()?);
            let id = r.text(id_len)?;
            let prefix = prefix(&mut r)?;
            let legacy = if format == FORMAT_FORMS {
                let form_at = r.at;
                match r.u8()? {
                    0 => false,
                    1 => true,
                    other => return Err(format!("prefix form byte {other} at offset {form_at}")),
                }
            } else {
                false
            };
            let mut filter = Filter::prefix(&prefix);
            if legacy {
                filter.shown = shown::LEGACY;
            }
            rules.push(Rule {
                id,
                enabled,
                filter,
                expiration: Some(Expiry::Days(days)),
                expired_delete_marker: false,
                noncurrent: None,
                abort_after_days: None,
            });
        }
        r.end("the last rule")?;
        Ok(Self {
            bucket_version,
            rules,
        })
    }
}

/// A prefix: its length (u16, at most 1024) and its text.
fn prefix(r: &mut Reader<'_>) -> Result<String, String> {
    let prefix_len = usize::from(u16::from_le_bytes(r.array()?));
    if prefix_len > MAX_PREFIX_LEN {
        return Err(format!(
            "a prefix of {prefix_len} bytes at offset {}",
            r.at - 2
        ));
    }
    r.text(prefix_len)
}

/// A u32 count of days that must be at least 1.
fn days(r: &mut Reader<'_>, what: &str) -> Result<u32, String> {
    let at = r.at;
    let days = u32::from_le_bytes(r.array()?);
    if days == 0 {
        return Err(format!("0 {what} at offset {at}"));
    }
    Ok(days)
}

/// The rest of a format 3 rule, after its status.
fn decode_actions(r: &mut Reader<'_>, enabled: bool) -> Result<Rule, String> {
    let id_len = usize::from(r.u8()?);
    let id = r.text(id_len)?;
    let shown_at = r.at;
    let shown = r.u8()?;
    if shown == 0 || shown & !shown::ALL != 0 {
        return Err(format!("filter form byte {shown} at offset {shown_at}"));
    }
    let prefix = prefix(r)?;
    let count_at = r.at;
    let count = usize::from(r.u8()?);
    if count > MAX_OBJECT_TAGS {
        return Err(format!("{count} tags at offset {count_at}"));
    }
    let mut tags = Vec::with_capacity(count);
    for _ in 0..count {
        let k_len = usize::from(u16::from_le_bytes(r.array()?));
        let k = r.text(k_len)?;
        let v_len = usize::from(u16::from_le_bytes(r.array()?));
        tags.push((k, r.text(v_len)?));
    }
    let bits_at = r.at;
    let bits = r.u8()?;
    let has = |bit: u8| bits & bit != 0;
    if has(action::DAYS) && has(action::DATE) || has(action::NEWER) && !has(action::NONCURRENT) {
        return Err(format!("actions byte {bits:#04x} at offset {bits_at}"));
    }
    let size_greater = if has(action::SIZE_GREATER) {
        Some(u64::from_le_bytes(r.array()?))
    } else {
        None
    };
    let size_less = if has(action::SIZE_LESS) {
        Some(u64::from_le_bytes(r.array()?))
    } else {
        None
    };
    let expiration = if has(action::DAYS) {
        Some(Expiry::Days(days(r, "days")?))
    } else if has(action::DATE) {
        Some(Expiry::Date(u64::from_le_bytes(r.array()?)))
    } else {
        None
    };
    let noncurrent = if has(action::NONCURRENT) {
        let days = days(r, "noncurrent days")?;
        let newer = if has(action::NEWER) {
            Some(u32::from_le_bytes(r.array()?))
        } else {
            None
        };
        Some(Noncurrent { days, newer })
    } else {
        None
    };
    let abort_after_days = if has(action::ABORT) {
        Some(days(r, "days after initiation")?)
    } else {
        None
    };
    let expired_delete_marker = has(action::DELETE_MARKER);
    if expiration.is_none()
        && !expired_delete_marker
        && noncurrent.is_none()
        && abort_after_days.is_none()
    {
        return Err(format!(
            "a rule with no action (actions byte at offset {bits_at})"
        ));
    }
    Ok(Rule {
        id,
        enabled,
        filter: Filter {
            prefix,
            tags,
            size_greater,
            size_less,
            shown,
        },
        expiration,
        expired_delete_marker,
        noncurrent,
        abort_after_days,
    })
}

#[cfg(test)]
mod tests {
    use saltblob_core::VersionId;

    use super::*;
    use crate::lifecycle::rules::tests::rule;

    #[test]
    fn a_rule_given_the_older_prefix_is_kept_in_format_2() {
        let mut legacy = rule("old", "o/", 3, true);
        legacy.filter.shown = shown::LEGACY;
        let l = Lifecycle {
            bucket_version: VersionId(7),
            rules: vec![rule("new", "n/", 2, true), legacy],
        };
        let bytes = l.encode();
        assert_eq!(&bytes[..5], b"SBLC\x02");
        assert_eq!(Lifecycle::decode(&bytes), Ok(l.clone()));
        // The first rule's form byte follows its prefix: 23 + 1 + 4 + 1 + 3 ("new") + 2 + 2 ("n/") = 36.
        assert_eq!(bytes[36], 0);
        let mut form = bytes.clone();
        form[36] = 9;
        assert!(
            Lifecycle::decode(&form)
                .expect_err("form")
                .contains("prefix form byte 9 at offset 36")
        );
        let e = Lifecycle::decode(&bytes[..bytes.len() - 1]).expect_err("cut");
        assert!(e.contains("offset"), "{e}");
        // Without a legacy rule the record stays format 1, which servers that read only it still read.
        let filters = Lifecycle {
            bucket_version: VersionId(7),
            rules: vec![rule("new", "n/", 2, true)],
        };
        assert_eq!(filters.encode()[4], 1);
    }

    #[test]
    fn records_round_trip_and_damage_is_named_with_its_offset() {
        let l = Lifecycle {
            bucket_version: VersionId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
            rules: vec![
                rule("a", "p/", 30, true),
                rule(&"i".repeat(255), &"k".repeat(1024), 1, false),
            ],
        };
        let bytes = l.encode();
        assert_eq!(&bytes[..5], b"SBLC\x01");
        assert_eq!(bytes[5], 0x10, "the version is little-endian");
        assert_eq!(Lifecycle::decode(&bytes), Ok(l.clone()));
        for cut in [0, 4, 20, 23, 30, bytes.len() - 1] {
            let e = Lifecycle::decode(&bytes[..cut]).expect_err("truncated");
            assert!(e.contains("offset"), "{cut}: {e}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            Lifecycle::decode(&longer)
                .expect_err("trailing")
                .contains("after the last rule")
        );
        let mut other = bytes.clone();
        other[4] = 4;
        assert!(
            Lifecycle::decode(&other)
                .expect_err("format")
                .contains("format 4")
        );
        let mut status = bytes.clone();
        status[23] = 7;
        assert!(
            Lifecycle::decode(&status)
                .expect_err("status")
                .contains("status byte 7 at offset 23")
        );
        let mut days = bytes;
        days[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert!(
            Lifecycle::decode(&days)
                .expect_err("days")
                .contains("0 days at offset 24")
        );
    }

    #[test]
    fn rules_beyond_days_under_a_prefix_are_kept_in_format_3() {
        let mut full = rule("full", "p/", 1, true);
        full.filter = Filter {
            prefix: "p/".to_owned(),
            tags: vec![
                ("k".to_owned(), "v".to_owned()),
                ("é".to_owned(), String::new()),
            ],
            size_greater: Some(10),
            size_less: Some(1 << 40),
            shown: shown::AND,
        };
        full.expiration = Some(Expiry::Date(1_420_070_400_000_000));
        full.noncurrent = Some(Noncurrent {
            days: 3,
            newer: Some(5),
        });
        let mut marker = rule("dm", "", 1, false);
        marker.expiration = None;
        marker.expired_delete_marker = true;
        marker.abort_after_days = Some(7);
        let l = Lifecycle {
            bucket_version: VersionId(9),
            rules: vec![full, marker, rule("plain", "x/", 2, true)],
        };
        let bytes = l.encode();
        assert_eq!(&bytes[..5], b"SBLC\x03");
        assert_eq!(Lifecycle::decode(&bytes), Ok(l.clone()));
        for cut in [23, 30, bytes.len() / 2, bytes.len() - 1] {
            let e = Lifecycle::decode(&bytes[..cut]).expect_err("truncated");
            assert!(e.contains("offset"), "{cut}: {e}");
        }
        // The first rule's filter form byte: 23 + 1 (status) + 1 + 4 ("full") = 29.
        let mut form = bytes.clone();
        form[29] = 64;
        assert!(
            Lifecycle::decode(&form)
                .expect_err("form")
                .contains("filter form byte 64 at offset 29")
        );
        // A rule with no action: the second rule's actions byte cleared.
        let mut only = l.clone();
        only.rules.truncate(1);
        let one = only.encode();
        let mut none = one.clone();
        // Its actions byte follows the tags: 29 + 1 + 2 + 2 ("p/") + 1 + (2 + 1 + 2 + 1) + (2 + 2 + 2 + 0) = 47.
        assert_eq!(none[47], 1 | 2 | 8 | 32 | 64);
        none[47] = 0;
        let e = Lifecycle::decode(&none[..48]).expect_err("no action");
        assert!(e.contains("no action"), "{e}");
    }
}
