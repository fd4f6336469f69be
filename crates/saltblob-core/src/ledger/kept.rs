//! Kept versions: versions a put with [`crate::state::config::PutOptions::keep_replaced`] replaced, kept
//! readable by their version id instead of reclaimed (S3's bucket versioning rests on them).
//!
//! A kept version is its manifest record as it was current, unchanged (a sealed one stays sealed under its own
//! data key), in [`Namespace::Kept`] under [`record_key`]: the first 8 bytes of the BLAKE3 hash of the blob key
//! (the partition: every kept version of a key in one, the keys spread over the cluster), the blob key, and the
//! version id (u128 big-endian, so that a key's versions scan oldest first). The record is written **before**
//! the commit that replaces the version, instead of its reclaim entry, so that no crash loses a version a put
//! asked to keep; a commit that then fails leaves a kept copy of the version that stayed current, which readers
//! take for the current one ([`KeptVersions::without`]) and which keeps nothing alive that the current
//! manifest does not.
//!
//! A kept version **owns** its chunks as a current one does ([`owns`]): gc, the reclaim pass and fsck leave
//! them alone until [`crate::store::BlobStore::remove_version`] queues them for reclaim and removes the record.

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordChange, RecordWrite};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::version::VersionId;
use crate::format::manifest::Manifest;
use crate::state::Inner;

/// Bytes of a kept record's key that name its partition: a prefix of the blob key's BLAKE3 hash.
pub(crate) const PARTITION_LEN: usize = 8;
/// Kept records read by one scan.
const PAGE: usize = 256;

/// The partition of `key`'s kept versions.
fn partition(key: &[u8]) -> [u8; PARTITION_LEN] {
    let mut part = [0; PARTITION_LEN];
    part.copy_from_slice(&blake3::hash(key).as_bytes()[..PARTITION_LEN]);
    part
}

/// The prefix every kept record of `key` starts with: its partition, then the key.
fn key_prefix(key: &[u8]) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(PARTITION_LEN + key.len() + 16);
    prefix.extend_from_slice(&partition(key));
    prefix.extend_from_slice(key);
    prefix
}

/// The key of version `version` of blob key `key` in [`Namespace::Kept`].
pub(crate) fn record_key(key: &[u8], version: VersionId) -> Bytes {
    let mut k = key_prefix(key);
    k.extend_from_slice(&version.0.to_be_bytes());
    Bytes::from(k)
}

/// The version a kept record of `key` (whose prefix the record key starts with) names, if the record key is one
/// of `key`'s: a longer key of the same hash prefix and starting with `key` is another key's.
fn version_of(key: &[u8], record: &[u8]) -> Option<VersionId> {
    let rest = record.get(PARTITION_LEN + key.len()..)?;
    let be: [u8; 16] = rest.try_into().ok()?;
    Some(VersionId(u128::from_be_bytes(be)))
}

/// The kept record of version `version` of `key` (the record bytes of its manifest as it was current), as one
/// change of an atomic group.
pub(crate) fn change(key: &[u8], version: VersionId, record: Bytes) -> RecordChange {
    RecordChange::put(
        Namespace::Kept,
        record_key(key, version),
        record,
        Precondition::None,
    )
}

/// Writes the kept record of version `version` of `key` (idempotent).
pub(crate) async fn keep(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    record: Bytes,
) -> Result<()> {
    inner
        .backend
        .put_record(
            Namespace::Kept,
            &record_key(key, version),
            record,
            &Precondition::None,
        )
        .await
        .map(drop)
}

/// Removes the kept record of version `version` of `key` (nothing if there is none).
pub(crate) async fn forget(inner: &Inner, key: &[u8], version: VersionId) -> Result<()> {
    inner
        .backend
        .delete_record(
            Namespace::Kept,
            &record_key(key, version),
            &Precondition::None,
        )
        .await
        .map(drop)
}

/// Replaces the kept record of version `version` of `key` by `new` if it is still `old`: `Err` with the record
/// found instead when it is not (`None`: removed meanwhile).
pub(crate) async fn replace(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    old: Bytes,
    new: Bytes,
) -> Result<std::result::Result<(), Option<Bytes>>> {
    let written = inner
        .backend
        .put_record(
            Namespace::Kept,
            &record_key(key, version),
            new,
            &Precondition::Equals(old),
        )
        .await?;
    Ok(match written {
        RecordWrite::Done(_) => Ok(()),
        RecordWrite::ConditionFailed(found) => Err(found),
    })
}

/// The record of kept version `version` of `key`, if kept.
pub(crate) async fn read(inner: &Inner, key: &[u8], version: VersionId) -> Result<Option<Bytes>> {
    inner
        .backend
        .get_record(Namespace::Kept, &record_key(key, version))
        .await
}

/// One kept version of a key: its id and its manifest record's bytes.
#[derive(Clone, Debug)]
pub(crate) struct KeptRecord {
    pub(crate) version: VersionId,
    pub(crate) record: Bytes,
}

/// Every kept version of a key, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeptVersions(pub(crate) Vec<KeptRecord>);

impl KeptVersions {
    /// The kept versions other than `current` (a kept copy of the version that stayed current is that one).
    pub(crate) fn without(self, current: Option<VersionId>) -> Vec<KeptRecord> {
        self.0
            .into_iter()
            .filter(|k| Some(k.version) != current)
            .collect()
    }
}

/// Every kept version of `key`, oldest first, read a page at a time.
pub(crate) async fn list(inner: &Inner, key: &[u8]) -> Result<KeptVersions> {
    let prefix = key_prefix(key);
    let mut pages = inner.scan(Namespace::Kept, &prefix, None);
    let mut kept = Vec::new();
    while let Some(page) = pages.next_page().await? {
        kept.extend(page.into_iter().filter_map(|(k, record)| {
            Some(KeptRecord {
                version: version_of(key, &k)?,
                record,
            })
        }));
    }
    Ok(KeptVersions(kept))
}

/// Whether a kept version of `key` owns chunk version `version` (is it, or lists it as a segment): `Ok(None)`
/// when one does not decode (nothing can then be said, so nothing may be deleted).
pub(crate) async fn owns(inner: &Inner, key: &[u8], version: VersionId) -> Result<Option<bool>> {
    // The version itself kept: one point read, the common case.
    if read(inner, key, version).await?.is_some() {
        return Ok(Some(true));
    }
    let prefix = key_prefix(key);
    let mut after: Option<Bytes> = None;
    loop {
        let page = inner
            .backend
            .scan_records(Namespace::Kept, &prefix, after.as_deref(), PAGE)
            .await?;
        for (k, record) in &page {
            if version_of(key, k).is_none() {
                continue;
            }
            match inner.decode_manifest(key, record) {
                Ok(m) if m.owns(version) => return Ok(Some(true)),
                Ok(_) => {}
                Err(_) => return Ok(None),
            }
        }
        if page.len() < PAGE {
            return Ok(Some(false));
        }
        after = page.last().map(|(k, _)| k.clone());
    }
}

/// The manifest of version `version` of `key`, current or kept; the current one when `version` is `None`.
///
/// # Errors
/// [`Error::NotFound`] (no version named, no current one), [`Error::VersionNotFound`] (neither current nor
/// kept), [`Error::Corrupt`] (the current manifest, when no version is named, or the kept one does not decode),
/// [`Error::Backend`].
pub(crate) async fn manifest_of(
    inner: &Inner,
    key: &[u8],
    version: Option<VersionId>,
) -> Result<Manifest> {
    let Some(version) = version else {
        return inner.current_manifest(key).await;
    };
    match inner.read_manifest(key).await {
        Ok(Some(m)) if m.version == version => return Ok(m),
        // A current manifest that does not decode does not keep the kept ones from being read.
        Ok(_) => {}
        Err(e) if e.is_corruption() => {}
        Err(e) => return Err(e),
    }
    match read(inner, key, version).await? {
        Some(record) => decode(inner, key, &KeptRecord { version, record }),
        None => Err(Error::VersionNotFound {
            key: key.into(),
            version,
        }),
    }
}

/// Decodes kept version `kept` of `key`, an error naming it when it does not decode or is not the version its
/// record key says.
pub(crate) fn decode(inner: &Inner, key: &[u8], kept: &KeptRecord) -> Result<Manifest> {
    let m = inner.decode_manifest(key, &kept.record)?;
    if m.version != kept.version {
        return Err(Error::corrupt(
            format!(
                "kept version {} of key \"{}\"",
                kept.version,
                KeyDisplay::from(key)
            ),
            format!("its record holds the manifest of version {}", m.version),
        ));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_name_their_key_and_version_only() {
        let k = record_key(b"photos/a", VersionId(7));
        assert_eq!(k.len(), PARTITION_LEN + 8 + 16);
        assert_eq!(version_of(b"photos/a", &k), Some(VersionId(7)));
        // Another key's record, even one that starts with this key, is not this key's.
        let longer = record_key(b"photos/ab", VersionId(7));
        assert_eq!(version_of(b"photos/a", &longer), None);
        // A key's versions sort oldest first.
        assert!(record_key(b"x", VersionId(1)) < record_key(b"x", VersionId(256)));
        assert_eq!(&k[..PARTITION_LEN], &partition(b"photos/a"));
    }
}
