//! A bucket's lifecycle record: its rules as stored under `s3/l/<bucket>` (`keys.rs`), written and read here only.
//!
//! Record format (little-endian), versions 1 and 2:
//!
//! ```text
//! magic "SBLC" | format u8 (1 or 2) | bucket record version u128 | rule count u16 (1..=1000)
//! rule: status u8 (0 disabled, 1 enabled) | days u32 (>= 1) | id length u8 | id (UTF-8)
//!       | prefix length u16 (<= 1024) | prefix (UTF-8)
//!       | format 2 only: prefix form u8 (0 in a Filter, 1 the older top-level Prefix)
//! ```
//!
//! Format 1 is written while every rule gives its prefix in a `Filter` (so servers that read only format 1 still
//! read it), format 2 once one gives the older `Prefix`. Nothing follows the last rule; a record that breaks any
//! of this is reported as corrupt with what broke and where, and its bucket's objects are then never expired.

use crate::record_reader::Reader;

use super::rules::{Lifecycle, MAX_PREFIX_LEN, MAX_RULES, Rule};

/// The first bytes of a lifecycle record.
const MAGIC: &[u8; 4] = b"SBLC";
/// The record format of rules that all give their prefix in a `Filter`.
const FORMAT_FILTERS: u8 = 1;
/// The record format that also keeps each rule's prefix form.
const FORMAT_FORMS: u8 = 2;

impl Lifecycle {
    /// The record's bytes: format 1 when no rule gives the older top-level `Prefix`, else format 2.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let format = if self.rules.iter().any(|r| r.legacy_prefix) {
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
            out.push(u8::from(r.enabled));
            out.extend_from_slice(&r.days.to_le_bytes());
            out.push(u8::try_from(r.id.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(r.id.as_bytes());
            out.extend_from_slice(
                &u16::try_from(r.prefix.len())
                    .unwrap_or(u16::MAX)
                    .to_le_bytes(),
            );
            out.extend_from_slice(r.prefix.as_bytes());
            if format == FORMAT_FORMS {
                out.push(u8::from(r.legacy_prefix));
            }
        }
        out
    }

    /// The configuration in record `bytes`.
    ///
    /// # Errors
    /// What is wrong and at which byte offset, for anything that is not a record of format 1 or 2.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes);
        let (format, bucket_version, count) =
            r.bucket_setting_head(MAGIC, &[FORMAT_FILTERS, FORMAT_FORMS], MAX_RULES)?;
        let mut rules = Vec::with_capacity(count);
        for _ in 0..count {
            let status_at = r.at;
            let enabled = match r.u8()? {
                0 => false,
                1 => true,
                other => return Err(format!("status byte {other} at offset {status_at}")),
            };
            let days_at = r.at;
            let days = u32::from_le_bytes(r.array()?);
            if days == 0 {
                return Err(format!("0 days at offset {days_at}"));
            }
            let id_len = usize::from(r.u8()?);
            let id = r.text(id_len)?;
            let prefix_len = usize::from(u16::from_le_bytes(r.array()?));
            if prefix_len > MAX_PREFIX_LEN {
                return Err(format!(
                    "a prefix of {prefix_len} bytes at offset {}",
                    r.at - 2
                ));
            }
            let prefix = r.text(prefix_len)?;
            let legacy_prefix = if format == FORMAT_FORMS {
                let form_at = r.at;
                match r.u8()? {
                    0 => false,
                    1 => true,
                    other => return Err(format!("prefix form byte {other} at offset {form_at}")),
                }
            } else {
                false
            };
            rules.push(Rule {
                id,
                prefix,
                days,
                enabled,
                legacy_prefix,
            });
        }
        r.end("the last rule")?;
        Ok(Self {
            bucket_version,
            rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use saltblob_core::VersionId;

    use super::*;
    use crate::lifecycle::rules::tests::rule;

    #[test]
    fn a_rule_given_the_older_prefix_is_kept_in_format_2() {
        let mut legacy = rule("old", "o/", 3, true);
        legacy.legacy_prefix = true;
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
        other[4] = 3;
        assert!(
            Lifecycle::decode(&other)
                .expect_err("format")
                .contains("format 3")
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
}
