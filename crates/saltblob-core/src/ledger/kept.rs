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
//!
//! A removal leaves a **removal marker** ([`remove`]): a record under the version's record key followed by
//! [`REMOVED_TAG`], holding the removal's time. A version with a marker is not kept, whatever record it has: a
//! put that read the version as current before the removal and writes its kept record after it (its commit then
//! fails, or retries on the version another put committed) would otherwise bring the removed version back. Such
//! a put issues that record within [`KEEP_ISSUE_MICROS`] of its read, so the marker is needed for
//! [`MARKER_HOLD_MICROS`] only: the reclaim pass then deletes it, with any record the version still has, from an
//! entry the removal queued ([`crate::ledger::reclaim::REMOVAL_ENTRY`], [`bury`]).

use bytes::Bytes;

use crate::backend::{Namespace, Precondition, RecordChange, RecordWrite};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::timing::COMMIT_WINDOW_MICROS;
use crate::base::version::VersionId;
use crate::format::manifest::Manifest;
use crate::state::Inner;

/// Bytes of a kept record's key that name its partition: a prefix of the blob key's BLAKE3 hash.
pub(crate) const PARTITION_LEN: usize = 8;
/// Kept records read by one scan.
const PAGE: usize = 256;
/// The byte after the version id in the key of a version's removal marker. Part of the format.
const REMOVED_TAG: u8 = 0x02;
/// Format byte of a removal marker's value (then the removal's time, Unix µs, u64 LE). Part of the format.
const MARKER_FORMAT: u8 = 1;
/// How long after reading the version it keeps a put may still issue its kept record: half a commit window (a
/// write issued lands within a commit window, `base/timing.rs`).
pub(crate) const KEEP_ISSUE_MICROS: u64 = COMMIT_WINDOW_MICROS / 2;
/// How long a removal marker stays: past every kept record issued before the removal (within
/// [`KEEP_ISSUE_MICROS`] of a read that preceded it) landing, with a margin.
pub(crate) const MARKER_HOLD_MICROS: u64 = 2 * COMMIT_WINDOW_MICROS;

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

/// The key of the removal marker of version `version` of `key`: its record key, then [`REMOVED_TAG`].
fn marker_key(key: &[u8], version: VersionId) -> Bytes {
    let mut k = record_key(key, version).to_vec();
    k.push(REMOVED_TAG);
    Bytes::from(k)
}

/// What a record of [`Namespace::Kept`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    /// The kept record of this version.
    Kept(VersionId),
    /// The removal marker of this version.
    Removed(VersionId),
}

/// What a record of `key` (whose prefix the record key starts with) is, if the record key is one of `key`'s: a
/// longer key of the same hash prefix and starting with `key` is another key's.
fn row_of(key: &[u8], record: &[u8]) -> Option<Row> {
    let rest = record.get(PARTITION_LEN + key.len()..)?;
    let (id, tag) = rest.split_at_checked(16)?;
    let version = VersionId(u128::from_be_bytes(id.try_into().ok()?));
    match tag {
        [] => Some(Row::Kept(version)),
        [REMOVED_TAG] => Some(Row::Removed(version)),
        _ => None,
    }
}

/// The time (Unix µs) a removal marker's value says the removal was made; `None` when it does not decode.
fn removed_at(marker: &[u8]) -> Option<u64> {
    match marker {
        [MARKER_FORMAT, at @ ..] => Some(u64::from_le_bytes(at.try_into().ok()?)),
        _ => None,
    }
}

/// The records of version `version` of `key`: its kept record (if any) and whether it has a removal marker (with
/// the marker's value).
async fn rows(inner: &Inner, key: &[u8], version: VersionId) -> Result<VersionRows> {
    let prefix = record_key(key, version);
    let page = inner
        .backend
        .scan_records(Namespace::Kept, &prefix, None, 4)
        .await?;
    let mut found = VersionRows::default();
    for (k, value) in page {
        match row_of(key, &k) {
            Some(Row::Kept(v)) if v == version => found.record = Some(value),
            Some(Row::Removed(v)) if v == version => found.marker = Some(value),
            _ => {}
        }
    }
    Ok(found)
}

/// The records of one version ([`rows`]).
#[derive(Default)]
struct VersionRows {
    record: Option<Bytes>,
    marker: Option<Bytes>,
}

impl VersionRows {
    /// The kept record, unless the version was removed.
    fn kept(self) -> Option<Bytes> {
        self.marker.is_none().then_some(self.record).flatten()
    }
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

/// Removes version `version` of `key` from the kept versions: writes its removal marker (the removal's time), then
/// deletes its kept record (nothing if there is none). The caller queues [`crate::ledger::reclaim::REMOVAL_ENTRY`]
/// for it first, so that the reclaim pass deletes the marker ([`bury`]).
pub(crate) async fn remove(inner: &Inner, key: &[u8], version: VersionId) -> Result<()> {
    let mut marker = vec![MARKER_FORMAT];
    marker.extend_from_slice(&inner.now_micros().to_le_bytes());
    inner
        .backend
        .put_record(
            Namespace::Kept,
            &marker_key(key, version),
            Bytes::from(marker),
            &Precondition::None,
        )
        .await?;
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

/// What [`bury`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Burial {
    /// There is no marker.
    NoMarker,
    /// The marker (and any kept record) is deleted.
    Buried,
    /// The marker must stay until this time (Unix µs).
    HeldUntil(u64),
}

/// Deletes the removal marker of version `version` of `key`, with any kept record the version still has (one a
/// put issued before the removal), once the marker is [`MARKER_HOLD_MICROS`] old at `now`. A marker whose value
/// does not decode is deleted (reported): only this module writes markers.
pub(crate) async fn bury(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    now: u64,
) -> Result<Burial> {
    let Some(marker) = rows(inner, key, version).await?.marker else {
        return Ok(Burial::NoMarker);
    };
    match removed_at(&marker) {
        Some(at) if now < at.saturating_add(MARKER_HOLD_MICROS) => {
            return Ok(Burial::HeldUntil(at.saturating_add(MARKER_HOLD_MICROS)));
        }
        Some(_) => {}
        None => tracing::warn!(
            "removal marker of version {version} of key \"{}\" does not decode ({marker:02x?}): deleted",
            KeyDisplay::from(key)
        ),
    }
    for k in [record_key(key, version), marker_key(key, version)] {
        inner
            .backend
            .delete_record(Namespace::Kept, &k, &Precondition::None)
            .await?;
    }
    Ok(Burial::Buried)
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

/// The record of kept version `version` of `key`, if kept (and not removed: see [`remove`]).
pub(crate) async fn read(inner: &Inner, key: &[u8], version: VersionId) -> Result<Option<Bytes>> {
    Ok(rows(inner, key, version).await?.kept())
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

/// Every kept version of `key` (but those removed), oldest first, read a page at a time.
pub(crate) async fn list(inner: &Inner, key: &[u8]) -> Result<KeptVersions> {
    let prefix = key_prefix(key);
    let mut pages = inner.scan(Namespace::Kept, &prefix, None);
    let mut kept: Vec<KeptRecord> = Vec::new();
    while let Some(page) = pages.next_page().await? {
        for (k, record) in page {
            match row_of(key, &k) {
                Some(Row::Kept(version)) => kept.push(KeptRecord { version, record }),
                // A version's marker sorts right after its record.
                Some(Row::Removed(version))
                    if kept.last().is_some_and(|k| k.version == version) =>
                {
                    kept.pop();
                }
                Some(Row::Removed(_)) | None => {}
            }
        }
    }
    Ok(KeptVersions(kept))
}

/// Whether a kept version of `key` owns chunk version `version` (is it, or lists it as a segment): `Ok(None)`
/// when one does not decode (nothing can then be said, so nothing may be deleted).
pub(crate) async fn owns(inner: &Inner, key: &[u8], version: VersionId) -> Result<Option<bool>> {
    // The version itself kept: one short range read (its record and marker), the common case.
    if read(inner, key, version).await?.is_some() {
        return Ok(Some(true));
    }
    let prefix = key_prefix(key);
    let mut after: Option<Bytes> = None;
    // A kept record is judged once the next record shows it has no marker.
    let mut pending: Option<(VersionId, Bytes)> = None;
    loop {
        let page = inner
            .backend
            .scan_records(Namespace::Kept, &prefix, after.as_deref(), PAGE)
            .await?;
        for (k, record) in &page {
            let next = match row_of(key, k) {
                Some(Row::Kept(v)) => Some((v, record.clone())),
                Some(Row::Removed(v)) => {
                    if pending.as_ref().is_some_and(|(p, _)| *p == v) {
                        pending = None;
                    }
                    continue;
                }
                None => continue,
            };
            if let Some(found) = owned_by(inner, key, version, pending.take()) {
                return Ok(found);
            }
            pending = next;
        }
        if page.len() < PAGE {
            return Ok(owned_by(inner, key, version, pending).unwrap_or(Some(false)));
        }
        after = page.last().map(|(k, _)| k.clone());
    }
}

/// [`owns`]' verdict on one kept record, `None` when it says nothing (it does not own `version`, or there is none).
fn owned_by(
    inner: &Inner,
    key: &[u8],
    version: VersionId,
    kept: Option<(VersionId, Bytes)>,
) -> Option<Option<bool>> {
    let (_, record) = kept?;
    match inner.decode_manifest(key, &record) {
        Ok(m) if m.owns(version) => Some(Some(true)),
        Ok(_) => None,
        Err(_) => Some(None),
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
        assert_eq!(row_of(b"photos/a", &k), Some(Row::Kept(VersionId(7))));
        // Another key's record, even one that starts with this key, is not this key's.
        let longer = record_key(b"photos/ab", VersionId(7));
        assert_eq!(row_of(b"photos/a", &longer), None);
        let marker_of_longer = marker_key(b"photos/a\x02", VersionId(7));
        assert_eq!(row_of(b"photos/a", &marker_of_longer), None);
        // A key's versions sort oldest first.
        assert!(record_key(b"x", VersionId(1)) < record_key(b"x", VersionId(256)));
        assert_eq!(&k[..PARTITION_LEN], &partition(b"photos/a"));
    }

    #[test]
    fn a_removal_marker_names_its_version_and_sorts_right_after_its_record() {
        let m = marker_key(b"photos/a", VersionId(7));
        assert_eq!(row_of(b"photos/a", &m), Some(Row::Removed(VersionId(7))));
        assert!(record_key(b"photos/a", VersionId(7)) < m);
        assert!(m < record_key(b"photos/a", VersionId(8)));
        assert_eq!(
            removed_at(&[MARKER_FORMAT, 1, 0, 0, 0, 0, 0, 0, 0]),
            Some(1)
        );
        assert_eq!(removed_at(&[MARKER_FORMAT, 1]), None);
        assert_eq!(removed_at(&[9, 1, 0, 0, 0, 0, 0, 0, 0]), None);
    }
}
