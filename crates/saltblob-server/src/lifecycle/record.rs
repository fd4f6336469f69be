//! A bucket's lifecycle record: its rules as stored under `s3/l/<bucket>` (`keys.rs`), written and read here only.
//!
//! Record format (little-endian), version 1:
//!
//! ```text
//! magic "SBLC" | format u8 = 1 | bucket record version u128 | rule count u16 (1..=1000)
//! rule: status u8 (0 disabled, 1 enabled) | days u32 (>= 1) | id length u8 | id (UTF-8)
//!       | prefix length u16 (<= 1024) | prefix (UTF-8)
//! ```
//!
//! Nothing follows the last rule; a record that breaks any of this is reported as corrupt with what broke and
//! where, and its bucket's objects are then never expired.

use saltblob_core::VersionId;

use crate::record_reader::Reader;

use super::rules::{Lifecycle, MAX_PREFIX_LEN, MAX_RULES, Rule};

/// The first bytes of a lifecycle record.
const MAGIC: &[u8; 4] = b"SBLC";
/// The record format this code writes and reads.
const FORMAT: u8 = 1;

impl Lifecycle {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(23 + self.rules.len() * 16);
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
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
        }
        out
    }

    /// The configuration in record `bytes`.
    ///
    /// # Errors
    /// What is wrong and at which byte offset, for anything that is not a record of format 1.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes);
        if r.take(4)? != MAGIC {
            return Err("it does not start with \"SBLC\"".to_owned());
        }
        let format = r.u8()?;
        if format != FORMAT {
            return Err(format!(
                "format {format}; this server reads format {FORMAT}"
            ));
        }
        let bucket_version = VersionId(u128::from_le_bytes(r.array()?));
        let count = usize::from(u16::from_le_bytes(r.array()?));
        if !(1..=MAX_RULES).contains(&count) {
            return Err(format!(
                "{count} rules at offset 21; 1 to {MAX_RULES} are stored"
            ));
        }
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
            rules.push(Rule {
                id,
                prefix,
                days,
                enabled,
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
    use super::*;
    use crate::lifecycle::rules::tests::rule;

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
        other[4] = 2;
        assert!(
            Lifecycle::decode(&other)
                .expect_err("format")
                .contains("format 2")
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
