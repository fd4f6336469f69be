//! The intent record's format: its key (shard, version, then the blob key) and its 37-byte value. Decoding fails with
//! [`Error::Corrupt`] naming what is wrong, as the manifest's decoder does. See `docs/format.md`.

use std::time::Duration;

use bytes::Bytes;

use crate::backend::{BlobRef, Namespace};
use crate::base::error::{Error, Result};
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::decode::Reader;
use crate::format::layout::MAX_SALT_LIMIT;
use crate::ledger::shards;

/// Format byte of an intent record's value.
const INTENT_FORMAT: u8 = 1;

/// Length of an intent record's value.
const INTENT_LEN: usize = 37;

/// An intent record. Key: [`intent_key`]. Value (37 bytes, little-endian):
/// format byte 1, start (u64 Unix µs), lease expiry (u64 Unix µs), salt count (u32), chunks whose writes have
/// started (u64, a bound of the chunk indexes stored) and the stored bytes of the writes that completed (u64),
/// both as of the last renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) started_micros: u64,
    pub(crate) expires_micros: u64,
    pub(crate) salt_count: u32,
    pub(crate) chunks: u64,
    pub(crate) stored_bytes: u64,
}

impl Intent {
    pub(crate) fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(INTENT_LEN);
        v.push(INTENT_FORMAT);
        v.extend_from_slice(&self.started_micros.to_le_bytes());
        v.extend_from_slice(&self.expires_micros.to_le_bytes());
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunks.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        Bytes::from(v)
    }

    /// Decodes a record's value. Fails with [`Error::Corrupt`] for another format or length, or a salt count
    /// out of bounds (gc deletes an abandoned put's chunks salt by salt: a damaged count must not make it loop
    /// billions of times).
    pub(crate) fn decode(v: &[u8]) -> Result<Self> {
        let corrupt = |detail: String| Error::corrupt("intent record", detail);
        let mut r = Reader::new(Bytes::copy_from_slice(v), &corrupt);
        let format = r.u8()?;
        if format != INTENT_FORMAT {
            return Err(corrupt(format!(
                "unknown format byte {format} (expected {INTENT_FORMAT})"
            )));
        }
        let (started_micros, expires_micros, salt_count) = (r.u64()?, r.u64()?, r.u32()?);
        let intent = Self {
            started_micros,
            expires_micros,
            salt_count,
            chunks: r.u64()?,
            stored_bytes: r.u64()?,
        };
        r.end()?;
        if !(1..=MAX_SALT_LIMIT).contains(&salt_count) {
            return Err(corrupt(format!(
                "salt count {salt_count} outside 1..={MAX_SALT_LIMIT}"
            )));
        }
        Ok(intent)
    }

    /// Whether the lease has ended at `now`.
    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expires_micros <= now
    }

    /// Whether the put is abandoned at `now`: its lease expired and `hold` ([`crate::base::timing::takeover_hold`])
    /// passed since.
    pub(crate) fn abandoned(&self, now: u64, hold: Duration) -> bool {
        self.expires_micros.saturating_add(micros(hold)) <= now
    }
}

/// The record key of the intent of `blob` in [`Namespace::ShardedIntent`] or [`Namespace::ParkedIntent`]: its
/// shard ([`shards::shard_of`] of the blob key), version (u128 big-endian, so that a shard sorts by the put's
/// start), blob key.
pub(crate) fn intent_key(blob: &BlobRef) -> Vec<u8> {
    let mut k = Vec::with_capacity(17 + blob.key.len());
    k.push(shards::shard_of(&blob.key));
    k.extend_from_slice(&blob.version.to_be_bytes());
    k.extend_from_slice(&blob.key);
    k
}

/// The record key of the intent of `blob` in the single-partition [`Namespace::Intent`] of earlier builds:
/// version, blob key.
pub(crate) fn legacy_intent_key(blob: &BlobRef) -> Vec<u8> {
    intent_key(blob)[1..].to_vec()
}

/// The blob an intent record key of namespace `ns` names; fails with [`Error::Corrupt`] for a key too short to
/// name one, or whose shard is not its blob key's.
pub(crate) fn parse_intent_key(ns: Namespace, k: &Bytes) -> Result<BlobRef> {
    let corrupt = |detail: String| Error::corrupt("intent record key", detail);
    let mut r = Reader::new(k.clone(), &corrupt);
    let shard = match ns.partition_len() {
        0 => None,
        _ => Some(r.u8()?),
    };
    let version = VersionId(r.u128_be()?);
    let blob = BlobRef {
        version,
        key: r.rest_nonempty()?,
    };
    match shard {
        Some(shard) if shard != shards::shard_of(&blob.key) => Err(corrupt(format!(
            "shard byte {shard} is not its blob key's ({})",
            shards::shard_of(&blob.key)
        ))),
        _ => Ok(blob),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Arbitrary records never panic the decoder, and what decodes is within bounds.
        #[test]
        fn arbitrary_records_never_panic(mut v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), real_format in proptest::prelude::any::<bool>()) {
            if real_format && !v.is_empty() {
                v[0] = INTENT_FORMAT;
            }
            if let Ok(i) = Intent::decode(&v) {
                proptest::prop_assert!((1..=MAX_SALT_LIMIT).contains(&i.salt_count));
            }
        }
    }

    #[test]
    fn intents_round_trip_and_reject_other_formats_with_evidence() {
        let i = Intent {
            started_micros: 1,
            expires_micros: 2,
            salt_count: 3,
            chunks: 4,
            stored_bytes: 5,
        };
        let v = i.encode();
        assert_eq!(v.len(), INTENT_LEN);
        assert_eq!(Intent::decode(&v).ok(), Some(i));
        let mut other = v.to_vec();
        other[0] = 2;
        let err = Intent::decode(&other).expect_err("format 2").to_string();
        assert!(err.contains("unknown format byte 2"), "{err}");
        let err = Intent::decode(&v[..36]).expect_err("short").to_string();
        assert!(err.contains("needed 8 more bytes, 7 left"), "{err}");
        let err = Intent::decode(&[&v[..], &[0]].concat())
            .expect_err("long")
            .to_string();
        assert!(err.contains("1 unexpected bytes"), "{err}");
        for salt_count in [0, MAX_SALT_LIMIT + 1, u32::MAX] {
            let bad = Intent { salt_count, ..i };
            let err = Intent::decode(&bad.encode()).expect_err("salt count");
            assert!(
                err.is_corruption() && err.to_string().contains(&salt_count.to_string()),
                "{err}"
            );
        }
        assert!(i.expired(2) && !i.expired(1));
        let hold = Duration::from_micros(3);
        assert!(i.abandoned(5, hold) && !i.abandoned(4, hold));
    }

    #[test]
    fn intent_keys_round_trip() {
        let blob = BlobRef {
            key: Bytes::from_static(b"some/key"),
            version: VersionId(0x0102_0304),
        };
        for (ns, k) in [
            (Namespace::ShardedIntent, intent_key(&blob)),
            (Namespace::ParkedIntent, intent_key(&blob)),
            (Namespace::Intent, legacy_intent_key(&blob)),
        ] {
            assert_eq!(
                parse_intent_key(ns, &Bytes::from(k)).ok(),
                Some(blob.clone())
            );
        }
        assert_eq!(intent_key(&blob)[0], shards::shard_of(b"some/key"));
        let mut other_shard = intent_key(&blob);
        other_shard[0] ^= 1;
        let err = parse_intent_key(Namespace::ShardedIntent, &Bytes::from(other_shard))
            .expect_err("wrong shard")
            .to_string();
        assert!(err.contains("is not its blob key's"), "{err}");
        assert!(parse_intent_key(Namespace::Intent, &Bytes::from_static(b"short")).is_err());
        assert!(parse_intent_key(Namespace::Intent, &Bytes::from(vec![0u8; 16])).is_err());
    }
}
