//! Segments and their composition: a blob assembled from parts written separately (an S3 multipart upload)
//! without copying their bytes.
//!
//! [`BlobStore::put_segment`] writes a part's chunks as a version of the key that is never committed; its intent
//! stays **parked** until the lease it was given ends, so gc leaves the chunks alone until then and reclaims them
//! after, like an abandoned put's. [`BlobStore::compose`] claims every segment's intent (as a put claims its own
//! before its commit) and commits a manifest that lists the segments (format version 2): from then on the
//! composed version owns their chunks, which are reclaimed when it is replaced or deleted, entry by entry.
//! [`BlobStore::discard_segment`] queues a segment's chunks for reclaim at once.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;

use super::BlobStore;
use super::key::validate_key;
use super::write::{self, Finish, PutPlan};
use crate::backend::BlobRef;
use crate::config::PutOptions;
use crate::intent;
use crate::manifest::{MAX_SEGMENTS, Manifest, ManifestBody, Segment, segments_digest};
use crate::reclaim::{self, ChunkSet};
use crate::schedule::{self, PriorityClass};
use crate::units::micros;
use crate::version::VersionId;
use crate::{Error, Result};

/// Intents claimed or removed at once by a compose.
const INTENT_CONCURRENCY: usize = 16;

impl BlobStore {
    /// Writes everything `reader` yields as one segment of a blob to be composed under `key`, and returns it.
    /// No version of `key` is committed: the segment is claimable by [`BlobStore::compose`] for `lease` from
    /// now, after which gc reclaims its chunks. Keep the returned [`Segment`] (e.g. [`Segment::encode`]) to
    /// compose it. Layout, codec, size hint and class come from `opts` as for [`BlobStore::put_stream`]; its
    /// condition, content type and metadata belong to the compose and are ignored here. A segment at or under
    /// the inline limit is returned inline and stores nothing.
    ///
    /// # Errors
    /// As [`BlobStore::put_stream`], but never a condition error.
    pub async fn put_segment<R>(
        &self,
        key: impl AsRef<[u8]>,
        mut reader: R,
        opts: &PutOptions,
        lease: Duration,
    ) -> Result<Segment>
    where
        R: AsyncRead + Unpin + Send,
    {
        let opts = PutOptions {
            condition: Default::default(),
            content_type: None,
            metadata: Default::default(),
            late_metadata: None,
            ..opts.clone()
        };
        let plan = PutPlan::read(&self.inner, key.as_ref(), &opts, &mut reader).await?;
        let until = self.inner.now_micros().saturating_add(micros(lease));
        let m = plan.run(&self.inner, reader, Finish::Park(until)).await?;
        Ok(Segment {
            version: m.version,
            size: m.size,
            digest: m.digest,
            body: m.body,
        })
    }

    /// Commits, under `key`, the blob made of `segments` in order (each written by [`BlobStore::put_segment`]
    /// under the same key), without copying their bytes; returns its manifest. Its digest is BLAKE3 of the
    /// segments' digests (each segment's own digest is verified when it is read whole). Condition, content
    /// type and metadata come from `opts`. Once committed, the blob owns the segments' chunks; on error nothing
    /// is committed and the segments stay claimable until their leases end (a retry may succeed).
    ///
    /// A segment must not be discarded ([`BlobStore::discard_segment`]) while a compose of it runs: callers
    /// fence the two (the S3 server does, with its upload record).
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidArgument`] (no segments, too many, the same one twice, a
    /// segmented segment, attributes), [`Error::TooLarge`], [`Error::SegmentGone`] (a segment's lease ended or
    /// it was discarded), condition errors as [`BlobStore::put`], [`Error::Backend`].
    pub async fn compose(
        &self,
        key: impl AsRef<[u8]>,
        segments: &[Segment],
        opts: &PutOptions,
    ) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        check_segments(segments)?;
        let size = segments
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.size))
            .ok_or_else(|| Error::invalid("segments", "their sizes add up past 2^64"))?;
        write::check_size(inner, &key, size, None)?;
        let class = inner
            .sched
            .choose(opts.priority.as_ref(), PriorityClass::interactive())?;
        let now = inner.now_micros();
        let mut metadata = opts.metadata.clone();
        if let Some(late) = &opts.late_metadata {
            metadata.extend(late.entries());
        }
        let mut manifest = Manifest {
            // Drawn once the segments are claimed (below), when the commit is near.
            version: VersionId(0),
            size,
            created_micros: now,
            expires_micros: None,
            digest: segments_digest(segments),
            body: ManifestBody::Segmented(segments.to_vec()),
            content_type: opts.content_type.clone(),
            metadata,
        };
        manifest.validate_attributes()?;
        let chunked = chunked_refs(&key, segments);
        schedule::in_class(class, async {
            let pre = write::precheck(inner, &key, opts.condition).await?;
            stream::iter(chunked.clone())
                .map(|blob| async move { intent::claim_segment(inner, &blob).await })
                .buffer_unordered(INTENT_CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            manifest.version = VersionId::generate_at(inner.now_micros());
            write::commit(inner, &key, &manifest, pre, None).await?;
            stream::iter(chunked)
                .map(|blob| async move { intent::remove(inner, &blob).await })
                .buffer_unordered(INTENT_CONCURRENCY)
                .collect::<Vec<()>>()
                .await;
            Ok(manifest)
        })
        .await
    }

    /// Gives up `segment` of `key`: queues its chunks for reclaim (after the grace period) and removes its
    /// intent, so that no compose can claim it any more. Returns false when there was nothing to discard (the
    /// segment is inline, was discarded or reclaimed already, or a compose committed it: then the composed
    /// blob owns it and it stays).
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::Backend`].
    pub async fn discard_segment(&self, key: impl AsRef<[u8]>, segment: &Segment) -> Result<bool> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        let ManifestBody::Chunked {
            layout,
            stored_bytes,
            ..
        } = &segment.body
        else {
            return Ok(false);
        };
        let blob = BlobRef {
            key,
            version: segment.version,
        };
        let Some(seen) = intent::read_record(inner, &blob).await? else {
            return Ok(false);
        };
        let chunks = ChunkSet {
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: *stored_bytes,
        };
        // Queued first, as gc does with an abandoned put: a crash in between leaves an entry the reclaimer skips
        // while the intent lives, and then honours.
        let entry = reclaim::enqueue(inner, &blob, chunks, inner.now_micros()).await?;
        if intent::take_over(inner, &intent::intent_key(&blob), seen).await? {
            return Ok(true);
        }
        reclaim::withdraw(inner, &entry).await?;
        Ok(false)
    }
}

/// Checks what [`BlobStore::compose`] is given: 1 to [`MAX_SEGMENTS`] segments, none segmented, none twice.
fn check_segments(segments: &[Segment]) -> Result<()> {
    if segments.is_empty() || segments.len() > MAX_SEGMENTS {
        return Err(Error::invalid(
            "segments",
            format!(
                "{}; a blob is composed of 1 to {MAX_SEGMENTS}",
                segments.len()
            ),
        ));
    }
    let mut versions: Vec<VersionId> = segments.iter().map(|s| s.version).collect();
    versions.sort_unstable();
    if let Some(w) = versions.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid(
            "segments",
            format!("segment version {} is given twice", w[0]),
        ));
    }
    if segments
        .iter()
        .any(|s| matches!(s.body, ManifestBody::Segmented(_)))
    {
        return Err(Error::invalid(
            "segments",
            "a segment cannot itself be segmented",
        ));
    }
    Ok(())
}

/// The versions whose chunks `segments` of `key` lie under (inline segments have none).
fn chunked_refs(key: &Bytes, segments: &[Segment]) -> Vec<BlobRef> {
    segments
        .iter()
        .filter(|s| matches!(s.body, ManifestBody::Chunked { .. }))
        .map(|s| BlobRef {
            key: key.clone(),
            version: s.version,
        })
        .collect()
}
