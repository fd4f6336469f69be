//! Giving up what an upload wrote: a segment (and its record) as soon as no complete can use it, and at the end
//! of an upload every segment the object does not own, with the records that are then no longer needed.

use std::collections::HashSet;

use futures::StreamExt;
use saltblob_core::{BlobStore, Segment, VersionId};

use super::CLEANUP_CONCURRENCY;
use super::parts;

/// Gives up `segment` of object key `key` (upload `id`), then deletes its record (`record`), if any. Failures
/// are logged: the record then stays for the complete, abort or sweep, and gc reclaims the segment after its
/// lease anyway.
pub(super) async fn give_up(
    store: &BlobStore,
    key: &str,
    id: &str,
    segment: &Segment,
    record: Option<bytes::Bytes>,
) {
    if let Err(e) = store.discard_segment(key, segment).await {
        tracing::warn!(upload = id, error = %e, "could not give up a segment (gc reclaims it after its lease)");
        return;
    }
    if let Some(record) = record
        && let Err(e) = store.delete(&record).await
    {
        tracing::warn!(upload = id, error = %e, "could not delete a segment record");
    }
}

/// Gives up every segment recorded for upload `id` of `bucket` (object key `key`) but those in `keep`, and
/// deletes their records and the part records, at most [`CLEANUP_CONCURRENCY`] at once. Failures are logged;
/// the sweep cleans up again before it removes the upload.
pub(super) async fn clean_up(
    store: &BlobStore,
    bucket: &str,
    id: &str,
    key: &str,
    keep: &HashSet<VersionId>,
) {
    let (segments, part_records) = match futures::try_join!(
        parts::segment_records(store, bucket, id),
        parts::all_parts(store, bucket, id)
    ) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(upload = id, error = %e, "could not list an upload's segments and parts");
            return;
        }
    };
    // Every recorded segment, and the segment of every part record (an upload written before segment records
    // existed has only those).
    let mut seen: HashSet<VersionId> = segments.iter().map(|(_, s)| s.version).collect();
    let unrecorded: Vec<(Option<bytes::Bytes>, Segment)> = part_records
        .iter()
        .filter(|p| seen.insert(p.segment.version))
        .map(|p| (None, p.segment.clone()))
        .collect();
    let all = segments
        .into_iter()
        .map(|(record, segment)| (Some(record), segment))
        .chain(unrecorded);
    let deleted: Vec<bytes::Bytes> = futures::stream::iter(all)
        .map(|(record, segment)| async move {
            if !keep.contains(&segment.version)
                && let Err(e) = store.discard_segment(key, &segment).await
            {
                tracing::warn!(upload = id, error = %e, "could not give up a segment (gc reclaims it after its lease)");
                return None;
            }
            record
        })
        .buffer_unordered(CLEANUP_CONCURRENCY)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    let numbers: Vec<i32> = part_records.iter().map(|p| p.number).collect();
    parts::delete_records(store, bucket, id, deleted, &numbers, CLEANUP_CONCURRENCY).await;
}
