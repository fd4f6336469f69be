//! The part and segment records of a multipart upload (`upload.rs` lays out every record): the current part of
//! each number, and every segment written for the upload until it is given up or owned by the object.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use s3s::dto::{ETag, Part};
use s3s::{S3Result, s3_error};
use saltblob_core::{BlobStore, Error, ListEntry, Manifest, PutOptions, Segment, VersionId};

use super::upload::{RECORD_TYPE, record_bytes};
use crate::attrs::{ETAG_KEY, last_modified_of, stored_checksums, with_checksums};
use crate::error::from_store;
use crate::keys::uploads_prefix;

/// The prefix of upload `id`'s part records in `bucket`.
fn parts_prefix(bucket: &str, id: &str) -> String {
    format!("{}p/{id}/", uploads_prefix(bucket))
}

/// The store key of part `number` of upload `id` in `bucket` (5 digits, so that parts list in order).
fn part_key(bucket: &str, id: &str, number: i32) -> String {
    format!("{}{number:05}", parts_prefix(bucket, id))
}

/// The prefix of upload `id`'s segment records in `bucket`.
fn segments_prefix(bucket: &str, id: &str) -> String {
    format!("{}s/{id}/", uploads_prefix(bucket))
}

/// The store key of the record of segment `version` of upload `id` in `bucket`.
fn segment_key(bucket: &str, id: &str, version: VersionId) -> String {
    format!("{}{:032x}", segments_prefix(bucket, id), version.0)
}

/// [`segment_key`], as the bytes a listing gives.
pub(crate) fn segment_record_key(bucket: &str, id: &str, version: VersionId) -> Bytes {
    Bytes::from(segment_key(bucket, id, version))
}

/// A part record as read.
pub(crate) struct StoredPart {
    pub number: i32,
    pub segment: Segment,
    pub manifest: Manifest,
}

impl StoredPart {
    /// The part's ETag: the hex MD5 of its bytes; of a sealed part, an opaque one (`part.rs`, `store_part`).
    pub(crate) fn md5_hex(&self) -> &str {
        Self::md5_of(&self.manifest)
    }

    /// The ETag of the part whose record has `manifest` (as [`StoredPart::md5_hex`]).
    pub(crate) fn md5_of(manifest: &Manifest) -> &str {
        manifest.metadata.get(ETAG_KEY).map_or("", String::as_str)
    }

    /// The part as ListParts returns it: a sealed part without checksums (sealed with it, or, in records written
    /// before they were, kept in the clear but not shown).
    #[expect(
        clippy::needless_update,
        reason = "`with_checksums!` defaults the other fields, and a Part has none"
    )]
    pub(crate) fn to_part(&self) -> Part {
        with_checksums!(
            Part {
                e_tag: Some(ETag::Strong(self.md5_hex().to_owned())),
                last_modified: Some(last_modified_of(&self.manifest)),
                part_number: Some(self.number),
                size: i64::try_from(self.segment.size).ok(),
            },
            if self.segment.sealing.is_some() {
                s3s::dto::Checksum::default()
            } else {
                stored_checksums(&self.manifest)
            }
        )
    }
}

/// Up to `limit` part records of upload `id` of `bucket`, in part order, after part `after` (from the first
/// part without one).
pub(crate) async fn parts(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    after: Option<i32>,
    limit: usize,
) -> S3Result<Vec<StoredPart>> {
    let prefix = parts_prefix(bucket, id);
    let start = after.map(|n| Bytes::from(part_key(bucket, id, n)));
    let mut records = store
        .list_stream_after(prefix.as_bytes(), start)
        .take(limit);
    let mut parts = Vec::new();
    while let Some(ListEntry { key, manifest }) = records.try_next().await.map_err(from_store)? {
        let manifest = manifest.map_err(from_store)?;
        let number = std::str::from_utf8(key.get(prefix.len()..).unwrap_or_default())
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| s3_error!(InternalError, "a part record key does not decode"))?;
        let bytes = record_bytes(store, &key, &manifest).await?;
        let segment = Segment::decode(&bytes).map_err(from_store)?;
        parts.push(StoredPart {
            number,
            segment,
            manifest,
        });
    }
    Ok(parts)
}

/// Every part record of upload `id` of `bucket`, in part order.
pub(crate) async fn all_parts(
    store: &BlobStore,
    bucket: &str,
    id: &str,
) -> S3Result<Vec<StoredPart>> {
    parts(store, bucket, id, None, usize::MAX).await
}

/// Writes the record of `segment`, written for upload `id` of `bucket`, before it is used: a complete or an
/// abort finds every such segment, also one whose part was replaced meanwhile.
pub(crate) async fn put_segment_record(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    segment: &Segment,
) -> S3Result<()> {
    let opts = PutOptions::new().with_content_type(RECORD_TYPE);
    store
        .put(
            segment_key(bucket, id, segment.version),
            segment.encode(),
            &opts,
        )
        .await
        .map_err(from_store)?;
    Ok(())
}

/// Every segment recorded for upload `id` of `bucket` (see [`put_segment_record`]), with its record's key.
pub(crate) async fn segment_records(
    store: &BlobStore,
    bucket: &str,
    id: &str,
) -> S3Result<Vec<(Bytes, Segment)>> {
    let prefix = segments_prefix(bucket, id);
    let mut records = store.list_stream(prefix.as_bytes());
    let mut out = Vec::new();
    while let Some(ListEntry { key, manifest }) = records.try_next().await.map_err(from_store)? {
        let manifest = manifest.map_err(from_store)?;
        let bytes = record_bytes(store, &key, &manifest).await?;
        match Segment::decode(&bytes) {
            Ok(segment) => out.push((key, segment)),
            Err(e) => tracing::warn!(upload = id, error = %e, "a segment record does not decode"),
        }
    }
    Ok(out)
}

/// Writes the record of part `number` of upload `id` of `bucket`: the encoded `segment`, with `metadata` (its
/// ETag and checksums). Returns the record written, and the segment of the record it replaced (the same part
/// uploaded again), if any.
pub(crate) async fn put_part(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    number: i32,
    segment: &Segment,
    metadata: BTreeMap<String, String>,
) -> S3Result<(Manifest, Option<Segment>)> {
    let record = part_key(bucket, id, number);
    let replaced = match store.head(&record).await {
        Ok(m) => Some(m),
        Err(Error::NotFound { .. }) => None,
        Err(e) => return Err(from_store(e)),
    };
    let replaced = match replaced {
        Some(old) => {
            let bytes = record_bytes(store, record.as_bytes(), &old).await?;
            Segment::decode(&bytes).ok()
        }
        None => None,
    };
    let mut opts = PutOptions::new().with_content_type(RECORD_TYPE);
    opts.metadata = metadata;
    let stored = store
        .put(&record, segment.encode(), &opts)
        .await
        .map_err(from_store)?;
    Ok((stored, replaced))
}

/// Deletes the records of upload `id` of `bucket` that a finished upload no longer needs: the segment records
/// `segments` (already given up, or owned by the object) and the part records of part `numbers`, at most
/// `concurrency` at once. Failures are logged; the sweep deletes what is left.
pub(crate) async fn delete_records(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    segments: Vec<Bytes>,
    numbers: &[i32],
    concurrency: usize,
) {
    let parts = numbers
        .iter()
        .map(|n| Bytes::from(part_key(bucket, id, *n)));
    let keys: Vec<Bytes> = segments.into_iter().chain(parts).collect();
    futures::stream::iter(keys)
        .map(|key| async move {
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(upload = id, error = %e, "could not delete an upload's record");
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
}
