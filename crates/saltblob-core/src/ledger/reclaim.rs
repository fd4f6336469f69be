//! The reclaim queue: deferred deletion of the chunks of replaced, deleted and abandoned versions.
//!
//! A put's commit or a delete queues the version it replaces, due after the grace period (readers that started
//! before may still be reading it); gc queues the chunks of abandoned puts. A reclaim pass deletes the chunks of
//! every due entry whose version is no longer current and that no live put still holds, then the entry.

use std::collections::HashSet;

use bytes::Bytes;

use crate::backend::{BlobRef, Namespace, Precondition, RecordChange};
use crate::base::error::{Error, Result};
use crate::base::timing::{CLOCK_MARGIN_MICROS, COMMIT_WINDOW_MICROS};
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::decode::Reader;
use crate::format::layout::MAX_SALT_LIMIT;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::liveness::{self, Ownership};
use crate::state::Inner;

/// Format byte of a reclaim entry's value.
const ENTRY_FORMAT: u8 = 1;

/// Key of the reclaim queue's low-water mark in [`Namespace::Meta`]: a due time (u64 LE, Unix µs).
const RECLAIM_WATERMARK: &[u8] = b"reclaim-watermark";

/// What one reclaim pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Versions whose chunks were deleted.
    pub versions: u64,
    /// Chunks deleted.
    pub chunks: u64,
    /// Stored bytes freed.
    pub bytes: u64,
    /// Entries dropped because their version is the current one and the write that queued them is over (see
    /// `awaiting_commit`).
    pub still_current: u64,
    /// Due entries left in place whose version is still current: the commit or delete that queued them may
    /// not have landed yet. They are dropped ten minutes after they fell due, or reclaimed once replaced.
    pub awaiting_commit: u64,
    /// When the next queued version becomes due (Unix microseconds), if any is queued.
    pub next_due_micros: Option<u64>,
    /// Entries that do not decode (left in place, reported).
    pub undecodable: u64,
    /// Due entries left in place because a put of that version still holds a live intent.
    pub in_flight: u64,
}

/// A queued deletion of one version's chunks. Record key: due time (u64 big-endian, so that the queue sorts by
/// due time), version (u128 big-endian), blob key. Value: format byte 1, salt count (u32 LE), chunk count
/// (u64 LE), stored bytes (u64 LE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReclaimEntry {
    pub(crate) due_micros: u64,
    pub(crate) version: VersionId,
    pub(crate) key: Bytes,
    pub(crate) salt_count: u32,
    pub(crate) chunk_count: u64,
    pub(crate) stored_bytes: u64,
}

impl ReclaimEntry {
    pub(crate) fn encode(&self) -> (Vec<u8>, Bytes) {
        let mut k = Vec::with_capacity(24 + self.key.len());
        k.extend_from_slice(&self.due_micros.to_be_bytes());
        k.extend_from_slice(&self.version.to_be_bytes());
        k.extend_from_slice(&self.key);
        let mut v = Vec::with_capacity(21);
        v.push(ENTRY_FORMAT);
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunk_count.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        (k, Bytes::from(v))
    }

    /// Decodes an entry; fails with [`Error::Corrupt`] for a record that is not an entry of this format, or
    /// whose salt count is out of bounds (a reclaim pass deletes chunks salt by salt: a damaged count must not
    /// make it loop billions of times).
    pub(crate) fn decode(k: &Bytes, v: &Bytes) -> Result<Self> {
        let corrupt = |detail: String| Error::corrupt("reclaim entry", detail);
        let mut key = Reader::new(k.clone(), &corrupt);
        let (due_micros, version) = (key.u64_be()?, VersionId(key.u128_be()?));
        let key = key.rest_nonempty()?;
        let mut r = Reader::new(v.clone(), &corrupt);
        let format = r.u8()?;
        if format != ENTRY_FORMAT {
            return Err(corrupt(format!(
                "unknown format byte {format} (expected {ENTRY_FORMAT})"
            )));
        }
        let salt_count = r.u32()?;
        let entry = Self {
            due_micros,
            version,
            key,
            salt_count,
            chunk_count: r.u64()?,
            stored_bytes: r.u64()?,
        };
        r.end()?;
        if !(1..=MAX_SALT_LIMIT).contains(&salt_count) {
            return Err(corrupt(format!(
                "salt count {salt_count} outside 1..={MAX_SALT_LIMIT}"
            )));
        }
        Ok(entry)
    }
}

/// The chunks of one version, as a reclaim entry records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkSet {
    pub(crate) salt_count: u32,
    pub(crate) chunk_count: u64,
    pub(crate) stored_bytes: u64,
}

/// Queues the chunks `chunks` of `blob` for deletion after the grace period counted from `queued_at`: the one
/// writer of reclaim entries. Returns the entry's record key.
pub(crate) async fn enqueue(
    inner: &Inner,
    blob: &BlobRef,
    chunks: ChunkSet,
    queued_at: u64,
) -> Result<Vec<u8>> {
    let (k, v) = entry(inner, blob, chunks, queued_at).encode();
    inner
        .backend
        .put_record(Namespace::Reclaim, &k, v, &Precondition::None)
        .await?;
    Ok(k)
}

/// The entry that queues `chunks` of `blob`, due the grace period after `queued_at`.
fn entry(inner: &Inner, blob: &BlobRef, chunks: ChunkSet, queued_at: u64) -> ReclaimEntry {
    ReclaimEntry {
        due_micros: queued_at.saturating_add(micros(inner.config.grace)),
        version: blob.version,
        key: blob.key.clone(),
        salt_count: chunks.salt_count,
        chunk_count: chunks.chunk_count,
        stored_bytes: chunks.stored_bytes,
    }
}

/// Removes the entry [`enqueue`] wrote under `entry_key`.
pub(crate) async fn withdraw(inner: &Inner, entry_key: &[u8]) -> Result<()> {
    inner
        .backend
        .delete_record(Namespace::Reclaim, entry_key, &Precondition::None)
        .await
        .map(|_| ())
}

/// The versions in the queue, due or not, of those `among` holds: the queue is read a page at a time, so memory
/// is bounded by `among`, not by the queue.
pub(crate) async fn queued_versions(
    inner: &Inner,
    among: &HashSet<(Bytes, VersionId)>,
) -> Result<HashSet<(Bytes, VersionId)>> {
    let mut out = HashSet::new();
    let mut pages = inner.scan(Namespace::Reclaim, b"", None);
    while let Some(page) = pages.next_page().await? {
        for (k, v) in &page {
            match ReclaimEntry::decode(k, v) {
                Ok(e) => {
                    let version = (e.key, e.version);
                    if among.contains(&version) {
                        out.insert(version);
                    }
                }
                Err(e) => tracing::warn!("{e}: left out of the queued versions"),
            }
        }
    }
    Ok(out)
}

/// Queues the chunks of `old` that `new` does not use (all of them for a delete, `new` being `None`) for deletion
/// after the grace period: one entry per version its chunks lie under (its own, or each chunked segment's); inline
/// versions have none. A manifest that keeps its version (a re-wrap of its data keys) queues nothing.
pub(crate) async fn schedule(
    inner: &Inner,
    key: &Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
) -> Result<()> {
    let now = inner.now_micros();
    for (blob, chunks) in replaced_sets(key, old, new) {
        enqueue(inner, &blob, chunks, now).await?;
    }
    Ok(())
}

/// The writes of the entries [`schedule`] writes, queued at `queued_at`: for a commit that writes them in one
/// atomic group with its manifest.
pub(crate) fn schedule_changes(
    inner: &Inner,
    key: &Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
    queued_at: u64,
) -> Vec<RecordChange> {
    replaced_sets(key, old, new)
        .map(|(blob, chunks)| {
            let (k, v) = entry(inner, &blob, chunks, queued_at).encode();
            RecordChange::put(Namespace::Reclaim, k, v, Precondition::None)
        })
        .collect()
}

/// The versions the chunks of `old` lie under (its own, or each chunked segment's), with their chunks, less those
/// that `new` names too (its own version, or a segment of it).
fn replaced_sets<'a>(
    key: &'a Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
) -> impl Iterator<Item = (BlobRef, ChunkSet)> + 'a {
    let kept: Vec<VersionId> = new.map_or_else(Vec::new, |m| {
        m.segments().into_iter().map(|s| s.version).collect()
    });
    old.segments().into_iter().filter_map(move |segment| {
        let ManifestBody::Chunked {
            layout,
            stored_bytes,
            ..
        } = &segment.body
        else {
            return None;
        };
        if kept.contains(&segment.version) {
            return None;
        }
        let blob = BlobRef {
            key: key.clone(),
            version: segment.version,
        };
        let chunks = ChunkSet {
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: *stored_bytes,
        };
        Some((blob, chunks))
    })
}

/// Like [`schedule`] of all of `manifest`'s chunks, but failures are logged, not returned: for when the operation
/// that replaced the version has already succeeded, or may have. False if queueing failed.
pub(crate) async fn schedule_logged(inner: &Inner, key: &Bytes, manifest: &Manifest) -> bool {
    match schedule(inner, key, manifest, None).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                "could not queue version {} for reclaim: {e}",
                manifest.version
            );
            false
        }
    }
}

/// After a commit of `written` (`None`: a delete) that the backend says replaced `replaced`, having queued
/// `queued` at `queued_at` before writing: queues what it replaced when that is not what it queued (another
/// write landed in between), or when this write landed so late that the reclaimer may have dropped the first
/// entry as still current (see [`COMMIT_WINDOW_MICROS`]).
pub(crate) async fn queue_replaced(
    inner: &Inner,
    key: &Bytes,
    written: Option<VersionId>,
    replaced: Option<&Manifest>,
    queued: Option<&Manifest>,
    queued_at: u64,
) {
    let Some(old) = replaced.filter(|old| Some(old.version) != written) else {
        return;
    };
    let late = inner.now_micros().saturating_sub(queued_at) > COMMIT_WINDOW_MICROS / 2;
    if late || Some(old.version) != queued.map(|q| q.version) {
        schedule_logged(inner, key, old).await;
    }
}

/// Processes the reclaim queue up to due time `cutoff` for keys starting with `prefix` (only counting what it
/// would do when `dry_run`). The scan starts at the low-water mark left by the last full pass that removed
/// entries, so that the deletion markers of processed entries (tombstones on Cassandra) are not read again and
/// again.
pub(crate) async fn run(
    inner: &Inner,
    cutoff: u64,
    dry_run: bool,
    prefix: &[u8],
) -> Result<ReclaimReport> {
    let started = inner.now_micros();
    let mut report = ReclaimReport::default();
    let watermark = inner
        .read_mark(RECLAIM_WATERMARK)
        .await
        .map(u64::from_le_bytes);
    // "After" this 8-byte key is every entry due at or after the mark.
    let after = watermark.map(|w| Bytes::copy_from_slice(&w.saturating_sub(1).to_be_bytes()));
    let mut first_kept = None;
    let outcome = process(
        inner,
        cutoff,
        dry_run,
        prefix,
        after,
        &mut report,
        &mut first_kept,
    )
    .await;
    if outcome.is_ok()
        && !dry_run
        && prefix.is_empty()
        && report.versions + report.still_current > 0
    {
        // Every entry due before min(start, cutoff) was processed, except those left in place (the first of
        // which is due at `first_kept`). Entries queued from now on are due at or after their queueing time;
        // the margin covers clocks of other clients that run behind.
        let mark = started
            .min(cutoff)
            .min(first_kept.unwrap_or(u64::MAX))
            .saturating_sub(CLOCK_MARGIN_MICROS);
        inner
            .write_mark(RECLAIM_WATERMARK, &mark.to_le_bytes())
            .await;
    }
    outcome.map(|()| report)
}

/// The scan of one reclaim pass, from `after`; see [`run`].
async fn process(
    inner: &Inner,
    cutoff: u64,
    dry_run: bool,
    prefix: &[u8],
    after: Option<Bytes>,
    report: &mut ReclaimReport,
    first_kept: &mut Option<u64>,
) -> Result<()> {
    let now = inner.now_micros();
    let mut pages = inner.scan(Namespace::Reclaim, b"", after);
    while let Some(page) = pages.next_page().await? {
        for (k, v) in page {
            let entry = match ReclaimEntry::decode(&k, &v) {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!("{e}: left in place");
                    report.undecodable += 1;
                    continue;
                }
            };
            if entry.due_micros > cutoff {
                // The queue is sorted by due time: nothing after this entry is due either.
                report.next_due_micros = Some(entry.due_micros);
                return Ok(());
            }
            if !entry.key.starts_with(prefix) {
                continue;
            }
            let blob = BlobRef {
                key: entry.key.clone(),
                version: entry.version,
            };
            // Whether the current version owns the entry's chunks (its own, or a segment's); unsure what is
            // current: delete nothing.
            let current = liveness::ownership(inner, &blob).await? != Ownership::NotOwned;
            if current {
                if now < entry.due_micros.saturating_add(COMMIT_WINDOW_MICROS) {
                    // The commit or delete that queued it may not have landed yet.
                    report.awaiting_commit += 1;
                    first_kept.get_or_insert(entry.due_micros);
                    continue;
                }
                report.still_current += 1;
            } else if liveness::is_in_flight(inner, &blob).await? {
                // Only when a gc pass died between queueing an abandoned put and fencing its intent.
                report.in_flight += 1;
                first_kept.get_or_insert(entry.due_micros);
                continue;
            } else {
                if !dry_run {
                    inner
                        .backend
                        .delete_chunks(&blob, entry.salt_count, entry.chunk_count)
                        .await?;
                }
                report.versions += 1;
                report.chunks += entry.chunk_count;
                report.bytes += entry.stored_bytes;
            }
            if !dry_run {
                withdraw(inner, &k).await?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    proptest::proptest! {
        /// Arbitrary records never panic the decoder, and what decodes is within bounds.
        #[test]
        fn arbitrary_records_never_panic(k in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60), v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30)) {
            if let Ok(e) = ReclaimEntry::decode(&Bytes::from(k), &Bytes::from(v)) {
                proptest::prop_assert!((1..=MAX_SALT_LIMIT).contains(&e.salt_count) && !e.key.is_empty());
            }
        }
    }

    #[test]
    fn reclaim_entries_round_trip_and_sort_by_due_time() {
        let e = ReclaimEntry {
            due_micros: 5,
            version: VersionId(9),
            key: Bytes::from_static(b"key"),
            salt_count: 3,
            chunk_count: 10,
            stored_bytes: 1000,
        };
        let (k, v) = e.encode();
        assert_eq!(
            ReclaimEntry::decode(&Bytes::from(k.clone()), &v).ok(),
            Some(e.clone())
        );
        let later = ReclaimEntry {
            due_micros: 256,
            ..e.clone()
        };
        assert!(k < later.encode().0);
        assert_eq!(
            ReclaimEntry::decode(&Bytes::from_static(b"short"), &v).ok(),
            None
        );
        for salt_count in [0, MAX_SALT_LIMIT + 1, 1 << 31] {
            let (k, v) = ReclaimEntry {
                salt_count,
                ..e.clone()
            }
            .encode();
            assert_eq!(
                ReclaimEntry::decode(&Bytes::from(k), &v).ok(),
                None,
                "salt count {salt_count}"
            );
        }
    }

    fn memory_store() -> (Arc<MemoryStore>, BlobStore) {
        let backend = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_grace(Duration::ZERO);
        let store = BlobStore::new(backend.clone(), config).expect("store");
        (backend, store)
    }

    async fn put_chunked(store: &BlobStore, key: &Bytes) -> Manifest {
        let m = store
            .put(key, Bytes::from(vec![1u8; 300_000]), &PutOptions::new())
            .await
            .expect("put");
        assert!(matches!(m.body, ManifestBody::Chunked { .. }));
        m
    }

    /// A commit queues the version it replaces before its manifest write. A reclaim pass that runs before that
    /// write lands finds the version still current: it must keep the entry, or the version is orphaned once
    /// the write lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_queued_by_a_pending_commit_outlives_the_pass() {
        let (backend, store) = memory_store();
        let key = Bytes::from_static(b"k");
        let old = put_chunked(&store, &key).await;
        schedule(&store.inner, &key, &old, None)
            .await
            .expect("queue");
        let during = store.reclaim_all().await.expect("reclaim");
        assert_eq!(
            (
                during.awaiting_commit,
                during.still_current,
                during.versions
            ),
            (1, 0, 0),
            "{during:?}"
        );
        // The stalled commit (of an inline value) lands.
        let body = Bytes::from_static(b"new");
        let new = Manifest {
            sealing: None,
            version: VersionId::generate(),
            size: body.len() as u64,
            created_micros: crate::base::version::now_micros(),
            expires_micros: None,
            digest: *blake3::hash(&body).as_bytes(),
            body: ManifestBody::Inline(body.clone()),
            content_type: None,
            metadata: Default::default(),
        };
        backend
            .put_record(Namespace::Manifest, &key, new.encode(), &Precondition::None)
            .await
            .expect("the commit lands");
        let after = store.reclaim_all().await.expect("reclaim");
        assert_eq!((after.versions, after.awaiting_commit), (1, 0), "{after:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0, "nothing orphaned");
        assert_eq!(store.get(&key).await.expect("get"), body);
    }

    /// An entry whose version is still current long after it fell due belongs to a write that never landed: it
    /// is dropped, and the version's chunks stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_of_a_commit_that_never_landed_is_dropped_after_the_window() {
        let (backend, store) = memory_store();
        let key = Bytes::from_static(b"k");
        let current = put_chunked(&store, &key).await;
        let ManifestBody::Chunked { layout, .. } = &current.body else {
            unreachable!("checked by put_chunked")
        };
        let stale = ReclaimEntry {
            due_micros: crate::base::version::now_micros() - COMMIT_WINDOW_MICROS - 1,
            version: current.version,
            key: key.clone(),
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: 0,
        };
        let (k, v) = stale.encode();
        backend
            .put_record(Namespace::Reclaim, &k, v, &Precondition::None)
            .await
            .expect("queue");
        let chunks = backend.chunk_count().expect("count");
        let report = store.reclaim_all().await.expect("reclaim");
        assert_eq!(
            (
                report.still_current,
                report.awaiting_commit,
                report.versions
            ),
            (1, 0, 0),
            "{report:?}"
        );
        assert_eq!(backend.chunk_count().expect("count"), chunks);
        let queue = backend
            .scan_records(Namespace::Reclaim, b"", None, 10)
            .await
            .expect("scan");
        assert!(queue.is_empty(), "dropped: {queue:?}");
        assert_eq!(store.get(&key).await.expect("get").len(), 300_000);
    }
}
