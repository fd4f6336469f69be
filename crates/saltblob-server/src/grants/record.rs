//! An access key's record, as stored (sealed) under `s3/k/<access key id>` (`keys.rs`), and its types ([`Right`],
//! [`Grant`], [`KeyRecord`]): written and read here only.
//!
//! Record format (little-endian), version 1:
//!
//! ```text
//! magic "SBAK" | format u8 = 1 | flags u8 (bit 0: may create buckets; the others 0) | created u64 (Unix µs)
//! | name length u8 (1..=64) | name (UTF-8) | secret length u8 (20..=128) | secret (ASCII)
//! | grant count u16 (<= 10000)
//! grant: bucket length u8 (3..=63) | bucket | bucket record version u128 | right u8 (1 read, 2 write, 3 owner)
//! ```
//!
//! Grants are stored in bucket-name order, each bucket once. Nothing follows the last grant; a record that breaks
//! any of this is reported as corrupt with what broke and where, and its key is then refused.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use saltblob_core::VersionId;
use zeroize::Zeroizing;

use crate::record_reader::Reader;

/// The first bytes of a key record.
const MAGIC: &[u8; 4] = b"SBAK";
/// The record format this code writes and reads.
const FORMAT: u8 = 1;
/// The flag of a key that may create buckets.
const MAY_CREATE_BUCKETS: u8 = 1;
/// Longest key name, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 64;
/// Most grants one key holds.
pub(crate) const MAX_GRANTS: usize = 10_000;
/// Bounds of a secret's length (AWS's secrets are 40 characters).
const SECRET_LENS: std::ops::RangeInclusive<usize> = 20..=128;

/// What a grant allows on its bucket; each right includes those before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Right {
    /// Read objects, list them, read the bucket's settings.
    Read = 1,
    /// Also write and delete objects, run multipart uploads.
    Write = 2,
    /// Also change the bucket's settings, delete the bucket.
    Owner = 3,
}

impl fmt::Display for Right {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::Owner => "owner",
        })
    }
}

impl FromStr for Right {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "read" => Ok(Right::Read),
            "write" => Ok(Right::Write),
            "owner" => Ok(Right::Owner),
            other => Err(format!("\"{other}\" is not a right: read, write or owner")),
        }
    }
}

/// One key's grant on one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The version of the bucket record the grant was given on.
    pub(crate) bucket_version: VersionId,
    pub(crate) right: Right,
}

/// An access key kept in the store.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeyRecord {
    /// The access key id (the record's store key, not in its bytes).
    pub(crate) id: String,
    /// A name for people.
    pub(crate) name: String,
    pub(crate) secret: Zeroizing<String>,
    pub(crate) may_create_buckets: bool,
    pub(crate) created_micros: u64,
    /// By bucket name.
    pub(crate) grants: BTreeMap<String, Grant>,
}

impl fmt::Debug for KeyRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("secret", &"***")
            .field("may_create_buckets", &self.may_create_buckets)
            .field("grants", &self.grants)
            .finish()
    }
}

impl KeyRecord {
    /// The key's right on `bucket` as it is now (its record at `bucket_version`), if it has one.
    pub(crate) fn right_on(&self, bucket: &str, bucket_version: VersionId) -> Option<Right> {
        self.grants
            .get(bucket)
            .filter(|g| g.bucket_version == bucket_version)
            .map(|g| g.right)
    }
}

impl KeyRecord {
    /// The record's bytes (the secret among them: the caller stores them sealed).
    pub(crate) fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(
            64 + self.name.len() + self.grants.len() * 84,
        ));
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
        out.push(if self.may_create_buckets {
            MAY_CREATE_BUCKETS
        } else {
            0
        });
        out.extend_from_slice(&self.created_micros.to_le_bytes());
        // Lengths checked when the record was made (`check_name`, the secret's generator, `check_bucket_name`).
        out.push(u8::try_from(self.name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(self.name.as_bytes());
        out.push(u8::try_from(self.secret.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(self.secret.as_bytes());
        out.extend_from_slice(
            &u16::try_from(self.grants.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        for (bucket, grant) in &self.grants {
            out.push(u8::try_from(bucket.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(bucket.as_bytes());
            out.extend_from_slice(&grant.bucket_version.0.to_le_bytes());
            out.push(grant.right as u8);
        }
        out
    }

    /// The record in `bytes`, of access key `id`.
    ///
    /// # Errors
    /// What is wrong and at which byte offset, for anything that is not a record of format 1.
    pub(crate) fn decode(id: &str, bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes);
        r.head(MAGIC, &[FORMAT])?;
        let flags = r.u8()?;
        if flags & !MAY_CREATE_BUCKETS != 0 {
            return Err(format!("unknown flags {flags:#04x} at offset 5"));
        }
        let created_micros = u64::from_le_bytes(r.array()?);
        let name_at = r.at;
        let name_len = usize::from(r.u8()?);
        if !(1..=MAX_NAME_LEN).contains(&name_len) {
            return Err(format!("a name of {name_len} bytes at offset {name_at}"));
        }
        let name = r.text(name_len)?;
        let secret_at = r.at;
        let secret_len = usize::from(r.u8()?);
        if !SECRET_LENS.contains(&secret_len) {
            return Err(format!(
                "a secret of {secret_len} bytes at offset {secret_at}"
            ));
        }
        let secret = Zeroizing::new(r.text(secret_len)?);
        let count_at = r.at;
        let count = usize::from(u16::from_le_bytes(r.array()?));
        if count > MAX_GRANTS {
            return Err(format!(
                "{count} grants at offset {count_at}; at most {MAX_GRANTS} are stored"
            ));
        }
        let mut grants = BTreeMap::new();
        for _ in 0..count {
            let bucket_at = r.at;
            let bucket_len = usize::from(r.u8()?);
            let bucket = r.text(bucket_len)?;
            if !s3s::path::check_bucket_name(&bucket) {
                return Err(format!(
                    "a bucket name S3 does not allow at offset {bucket_at}"
                ));
            }
            let bucket_version = VersionId(u128::from_le_bytes(r.array()?));
            let right_at = r.at;
            let right = match r.u8()? {
                1 => Right::Read,
                2 => Right::Write,
                3 => Right::Owner,
                other => return Err(format!("right byte {other} at offset {right_at}")),
            };
            if grants
                .last_key_value()
                .is_some_and(|(last, _)| *last >= bucket)
            {
                return Err(format!(
                    "bucket {bucket:?} out of order or twice at offset {bucket_at}"
                ));
            }
            grants.insert(
                bucket,
                Grant {
                    bucket_version,
                    right,
                },
            );
        }
        r.end("the last grant")?;
        Ok(Self {
            id: id.to_owned(),
            name,
            secret,
            may_create_buckets: flags & MAY_CREATE_BUCKETS != 0,
            created_micros,
            grants,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn record(grants: &[(&str, u128, Right)]) -> KeyRecord {
        KeyRecord {
            id: "SBKTEST".to_owned(),
            name: "reports".to_owned(),
            secret: Zeroizing::new("s".repeat(40)),
            may_create_buckets: true,
            created_micros: 0x0102_0304_0506_0708,
            grants: grants
                .iter()
                .map(|(b, v, right)| {
                    (
                        (*b).to_owned(),
                        Grant {
                            bucket_version: VersionId(*v),
                            right: *right,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_named_with_its_offset() {
        let k = record(&[("alpha", 7, Right::Read), ("beta", 9, Right::Owner)]);
        let bytes = k.encode();
        assert_eq!(&bytes[..6], b"SBAK\x01\x01");
        assert_eq!(bytes[6], 0x08, "the creation time is little-endian");
        assert_eq!(KeyRecord::decode("SBKTEST", &bytes), Ok(k.clone()));
        for cut in [0, 3, 5, 13, 20, 70, bytes.len() - 1] {
            let e = KeyRecord::decode("SBKTEST", &bytes[..cut]).expect_err("truncated");
            assert!(e.contains("offset"), "{cut}: {e}");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        let e = KeyRecord::decode("SBKTEST", &longer).expect_err("trailing");
        assert!(e.contains("after the last grant"), "{e}");
        let mut other = bytes.to_vec();
        other[4] = 2;
        let e = KeyRecord::decode("SBKTEST", &other).expect_err("format");
        assert!(e.contains("format 2"), "{e}");
        let mut flags = bytes.to_vec();
        flags[5] = 0x81;
        let e = KeyRecord::decode("SBKTEST", &flags).expect_err("flags");
        assert!(e.contains("unknown flags 0x81"), "{e}");
        let mut right = bytes.to_vec();
        let last = right.len() - 1;
        right[last] = 4;
        let e = KeyRecord::decode("SBKTEST", &right).expect_err("right");
        assert!(e.contains(&format!("right byte 4 at offset {last}")), "{e}");
        // The same bucket twice (or out of order) is refused: each bucket has one grant.
        let twice = record(&[("alpha", 7, Right::Read)]);
        let mut bytes = twice.encode().to_vec();
        let grant = bytes[bytes.len() - 23..].to_vec();
        bytes.extend_from_slice(&grant);
        let count_at = bytes.len() - 2 * 23 - 2;
        bytes[count_at] = 2;
        let e = KeyRecord::decode("SBKTEST", &bytes).expect_err("twice");
        assert!(e.contains("out of order or twice"), "{e}");
    }

    proptest! {
        #[test]
        fn any_record_round_trips(
            grants in proptest::collection::btree_map("[a-z0-9]{3,20}", (any::<u128>(), 1u8..=3), 0..20),
            name in "[a-zA-Z0-9 _-]{1,64}",
            may_create in any::<bool>(),
            created in any::<u64>(),
        ) {
            let grants: Vec<(&str, u128, Right)> = grants
                .iter()
                .map(|(b, (v, r))| (b.as_str(), *v, match r { 1 => Right::Read, 2 => Right::Write, _ => Right::Owner }))
                .collect();
            let mut k = record(&grants);
            k.name = name;
            k.may_create_buckets = may_create;
            k.created_micros = created;
            prop_assert_eq!(KeyRecord::decode("SBKTEST", &k.encode()), Ok(k));
        }

        #[test]
        fn damaged_records_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = KeyRecord::decode("SBKTEST", &bytes);
        }
    }
}
