//! Segments and their composition: a blob assembled from parts written separately (an S3 multipart upload)
//! without copying their bytes.
//!
//! [`BlobStore::put_segment`] writes a part's chunks as a version of the key that is never committed; its intent
//! stays **parked** until the lease it was given ends, so gc leaves the chunks alone until then and reclaims them
//! after, like an abandoned put's. [`BlobStore::compose`] claims every segment's intent (as a put claims its own
//! before its commit) and commits a manifest that lists the segments (format version 2): from then on the
//! composed version owns their chunks, which are reclaimed when it is replaced or deleted, entry by entry.
//! [`BlobStore::discard_segment`] ends a segment's lease one intent lease from now, after which gc reclaims it.
//!
//! The fence between a compose and a discard of the same segment (they may run at once, in two processes): a
//! compose claims (or, where writes land late, checks) each segment's intent only while more than a lease is
//! left of it, and issues its commit within three quarters of a lease of its call; a discard never brings a
//! lease's end nearer than one lease from now, and never removes the intent. So a compose that got past a
//! segment's claim before its discard has its manifest written before gc may take the segment over, and the
//! reclaimer then finds the chunks owned; one that comes after the discard fails with `SegmentGone`.
//!
//! The same fence holds between two composes of the same segments (a client retrying a complete whose outcome
//! it did not see): after its commit a compose ends each segment's lease as a discard does, rather than
//! removing the intent. A second compose that claimed a segment before that commits within its own deadline,
//! while the intent still lives; and while it lives, gc and the reclaim pass leave the segment's chunks alone,
//! even when the first compose's version is replaced and queued for reclaim with a grace shorter than
//! [`BlobStore::compose_settles_within`]. So the chunks of a replaced composed version go no sooner than a
//! lease (plus the takeover hold where writes land late) after its compose, and never under a compose that
//! lands later.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;

use super::BlobStore;
use super::commit::{CommitChunks, Fences};
use super::key::validate_key;
use super::put::{self, Finish, PutPlan};
use crate::backend::BlobRef;
use crate::base::error::{Error, Result};
use crate::base::timing::takeover_hold;
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::manifest::{MAX_SEGMENTS, Manifest, ManifestBody, Segment, segments_digest};
use crate::ledger::intent;
use crate::schedule::{self, PriorityClass};
use crate::state::config::PutOptions;

/// Intents claimed or settled at once by a compose.
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
            // A segment is never committed on its own: the composed blob's expiry is the compose's.
            ttl: None,
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
            sealing: m.sealing,
        })
    }

    /// Commits, under `key`, the blob made of `segments` in order (each written by [`BlobStore::put_segment`]
    /// under the same key), without copying their bytes; returns its manifest. Its digest is BLAKE3 of the
    /// segments' digests (each segment's own digest is verified when it is read whole). Condition, content
    /// type, metadata and whether the version it replaces is kept ([`PutOptions::keep_replaced`]) come from
    /// `opts`. Once committed, the blob owns the segments' chunks; on error nothing
    /// is committed and the segments stay claimable until their leases end (a retry may succeed).
    ///
    /// A segment may be discarded ([`BlobStore::discard_segment`]) while a compose of it runs, by this process
    /// or another: the compose then either fails with [`Error::SegmentGone`] (the discard came first) or
    /// commits, and the composed blob owns the segment whole (see the module's fence). The commit is issued
    /// within three quarters of the intent lease of this call, or not at all ([`Error::IntentLost`]), checked
    /// before the call and again by the backend right before its engine write: so it has landed, or never will,
    /// [`BlobStore::compose_settles_within`] after the call.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidArgument`] (no segments, too many, the same one twice, a
    /// segmented segment, attributes), [`Error::TooLarge`], [`Error::SegmentGone`] (a segment's lease ended or
    /// it was discarded), [`Error::IntentLost`] (claiming the segments took past the commit deadline; nothing
    /// was committed, a retry may succeed), condition errors as [`BlobStore::put`], [`Error::Backend`].
    pub async fn compose(
        &self,
        key: impl AsRef<[u8]>,
        segments: &[Segment],
        opts: &PutOptions,
    ) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        let inner = &self.inner;
        // The latest moment the commit may be issued (see the module's fence).
        let issue_by = inner
            .now_micros()
            .saturating_add(micros(inner.config.intent_lease) / 4 * 3);
        check_segments(segments)?;
        let size = segments
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.size))
            .ok_or_else(|| Error::invalid("segments", "their sizes add up past 2^64"))?;
        put::check_size(inner, &key, size, None)?;
        let class = inner
            .sched
            .choose(opts.priority.as_ref(), PriorityClass::interactive())?;
        let now = inner.now_micros();
        let mut metadata = opts.metadata.clone();
        if let Some(late) = &opts.late_metadata {
            metadata.extend(late.entries());
        }
        let mut manifest = Manifest {
            sealing: None,
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
            let expect = put::check_condition(inner, &key, opts.condition).await?;
            stream::iter(chunked.clone())
                .map(|blob| async move { intent::claim_segment(inner, &blob).await })
                .buffer_unordered(INTENT_CONCURRENCY)
                .try_collect::<Vec<()>>()
                .await?;
            manifest.version = inner.config.clock.draw_version(inner.now_micros());
            let fences = Fences {
                chunks: CommitChunks::None,
                issue_by: Some(issue_by),
            };
            put::commit_put(inner, &key, &manifest, opts, expect, fences).await?;
            stream::iter(chunked)
                .map(|blob| async move { intent::settle_composed(inner, &blob).await })
                .buffer_unordered(INTENT_CONCURRENCY)
                .collect::<Vec<()>>()
                .await;
            Ok(manifest)
        })
        .await
    }

    /// How long after a call of [`BlobStore::compose`] its commit has either landed or never will: three
    /// quarters of the intent lease (the compose issues its commit by then or fails), plus the takeover hold
    /// where writes may land late (the commit window, ten minutes, `docs/guarantees.md`). Read on the store's
    /// clock; a caller comparing with a time another process wrote adds the clock margin it allows.
    pub fn compose_settles_within(&self) -> Duration {
        self.inner.config.intent_lease / 4 * 3 + takeover_hold(self.inner.info.late_writes)
    }

    /// Gives up `segment` of `key`: ends its lease one intent lease from now, so that no compose can claim it
    /// any more, after which gc reclaims its chunks (on a backend whose writes may land late, once the takeover
    /// hold has passed too). A compose of the segment already past its claim still commits, and then owns the
    /// chunks (see the module's fence). Returns false when there was nothing to discard: the segment is inline,
    /// its lease ends within a lease anyway (discarded already, or about to expire), or it has no intent (a
    /// compose committed it, or gc reclaimed it).
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::Corrupt`] (its intent does not decode: left for `fsck`),
    /// [`Error::Backend`].
    pub async fn discard_segment(&self, key: impl AsRef<[u8]>, segment: &Segment) -> Result<bool> {
        let key = validate_key(key.as_ref())?;
        if !matches!(segment.body, ManifestBody::Chunked { .. }) {
            return Ok(false);
        }
        let blob = BlobRef {
            key,
            version: segment.version,
        };
        intent::end_segment_lease(&self.inner, &blob).await
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
