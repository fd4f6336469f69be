//! A bucket's CORS record: its rules as stored under `s3/c/<bucket>` (`keys.rs`), written and read here only.
//!
//! Record format 1 (little-endian):
//!
//! ```text
//! magic "SBCR" | format u8 (1) | bucket record version u128 | rule count u16 (1..=100)
//! rule: id length u8 | id (UTF-8)
//!       | max age u8 (0 none, 1 present) [| seconds u32]
//!       | four lists, in order methods, origins, allowed headers, exposed headers:
//!         count u16 (<= 100; methods and origins >= 1) | each: length u16 (<= 1024) | value (UTF-8)
//! ```
//!
//! Nothing follows the last rule; a record that breaks any of this is reported as corrupt with what broke and
//! where, and its bucket then answers no browser request (as a bucket without rules).

use crate::record_reader::Reader;

use super::rules::{Cors, MAX_RULES, MAX_VALUE_LEN, MAX_VALUES, Rule};

/// The first bytes of a CORS record.
const MAGIC: &[u8; 4] = b"SBCR";
/// The record format written and read.
const FORMAT: u8 = 1;

impl Cors {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(23 + self.rules.len() * 64);
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&self.bucket_version.to_le_bytes());
        // Every count and length is bounded by `from_config` (and `decode`) far below the field's range.
        let u16_of = |n: usize| u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes();
        out.extend_from_slice(&u16_of(self.rules.len()));
        for r in &self.rules {
            out.push(u8::try_from(r.id.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(r.id.as_bytes());
            match r.max_age {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    out.extend_from_slice(&s.to_le_bytes());
                }
            }
            for list in [
                &r.methods,
                &r.origins,
                &r.allowed_headers,
                &r.expose_headers,
            ] {
                out.extend_from_slice(&u16_of(list.len()));
                for v in list {
                    out.extend_from_slice(&u16_of(v.len()));
                    out.extend_from_slice(v.as_bytes());
                }
            }
        }
        out
    }

    /// The configuration in record `bytes`.
    ///
    /// # Errors
    /// What is wrong and at which byte offset, for anything that is not a record of format 1.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes);
        let (_, bucket_version, count) = r.bucket_setting_head(MAGIC, &[FORMAT], MAX_RULES)?;
        let mut rules = Vec::with_capacity(count);
        for _ in 0..count {
            let id_len = usize::from(r.u8()?);
            let id = r.text(id_len)?;
            let age_at = r.at;
            let max_age = match r.u8()? {
                0 => None,
                1 => Some(u32::from_le_bytes(r.array()?)),
                other => return Err(format!("max age byte {other} at offset {age_at}")),
            };
            let mut lists: [Vec<String>; 4] = Default::default();
            for (i, list) in lists.iter_mut().enumerate() {
                let count_at = r.at;
                let n = usize::from(u16::from_le_bytes(r.array()?));
                if n > MAX_VALUES || (i < 2 && n == 0) {
                    return Err(format!("a list of {n} values at offset {count_at}"));
                }
                for _ in 0..n {
                    let len_at = r.at;
                    let len = usize::from(u16::from_le_bytes(r.array()?));
                    if len > MAX_VALUE_LEN {
                        return Err(format!("a value of {len} bytes at offset {len_at}"));
                    }
                    list.push(r.text(len)?);
                }
            }
            let [methods, origins, allowed_headers, expose_headers] = lists;
            rules.push(Rule {
                id,
                methods,
                origins,
                allowed_headers,
                expose_headers,
                max_age,
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

    fn sample() -> Cors {
        Cors {
            bucket_version: VersionId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
            rules: vec![
                Rule {
                    id: "web".into(),
                    methods: vec!["GET".into(), "PUT".into()],
                    origins: vec!["https://a.example".into(), "*.b.example".into()],
                    allowed_headers: vec!["*".into()],
                    expose_headers: vec!["ETag".into()],
                    max_age: Some(3000),
                },
                Rule {
                    id: String::new(),
                    methods: vec!["HEAD".into()],
                    origins: vec!["*".into()],
                    allowed_headers: vec![],
                    expose_headers: vec![],
                    max_age: None,
                },
            ],
        }
    }

    #[test]
    fn records_round_trip_in_their_documented_layout() {
        let c = sample();
        let bytes = c.encode();
        assert_eq!(&bytes[..5], b"SBCR\x01");
        assert_eq!(&bytes[5..21], &c.bucket_version.to_le_bytes());
        assert_eq!(&bytes[21..23], &[2, 0]);
        // The first rule: its id, then its max age.
        assert_eq!(&bytes[23..27], b"\x03web");
        assert_eq!(&bytes[27..32], &[1, 0xb8, 0x0b, 0, 0]);
        assert_eq!(&bytes[32..39], b"\x02\x00\x03\x00GET");
        assert_eq!(Cors::decode(&bytes), Ok(c));
    }

    #[test]
    fn damaged_records_are_refused_with_evidence() {
        let bytes = sample().encode();
        let err = |b: &[u8]| Cors::decode(b).expect_err("corrupt");
        assert!(
            err(b"SBLC\x01").contains("does not start"),
            "{}",
            err(b"SBLC")
        );
        let mut format = bytes.clone();
        format[4] = 2;
        assert_eq!(err(&format), "format 2; this server reads format 1");
        let mut none = bytes[..21].to_vec();
        none.extend_from_slice(&[0, 0]);
        assert!(
            err(&none).contains("0 rules at offset 21"),
            "{}",
            err(&none)
        );
        let mut age = bytes.clone();
        age[27] = 7;
        assert!(
            err(&age).contains("max age byte 7 at offset 27"),
            "{}",
            err(&age)
        );
        let mut no_methods = bytes.clone();
        no_methods[32] = 0;
        assert!(
            err(&no_methods).contains("a list of 0 values at offset 32"),
            "{}",
            err(&no_methods)
        );
        assert!(err(&bytes[..bytes.len() - 1]).contains("ends at"));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(err(&trailing).contains("1 bytes after the last rule"));
    }
}
