//! Deliberately broken backends: [`ChunkStore`] wrappers that each break one guarantee saltblob relies on,
//! so that tests can show the checker catches real bugs. Each wraps any backend (a [`ChunkStoreLayer`]) and
//! delegates everything else unchanged.
//!
//! - [`ManifestFirst`]: commits the manifest before the chunks it lists → readers hit missing chunks
//!   ([`crate::ViolationKind::Corrupt`]).
//! - [`StaleReads`]: manifest reads sometimes return the key's previous record, like a lagging replica →
//!   [`crate::ViolationKind::Stale`] (or [`crate::ViolationKind::Lost`] when the previous state was absent).
//! - [`LostAck`]: sometimes acknowledges a manifest write without doing it →
//!   [`crate::ViolationKind::Stale`] or [`crate::ViolationKind::Lost`].
//! - [`RefusedButApplied`]: sometimes performs a conditional manifest write although its condition does not
//!   hold, and reports it refused, like a lightweight transaction whose outcome was misread →
//!   [`crate::ViolationKind::Refused`] (or [`crate::ViolationKind::Corrupt`] when the refused put already
//!   deleted its chunks).
//! - [`DropsKept`]: sometimes acknowledges the write of a kept-version record without doing it, so that a
//!   keeping put loses the version it replaced → [`crate::ViolationKind::LostVersion`].

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use saltblob_core::backend::{ChunkSink, SinkPlan, without_commit_groups};
use saltblob_core::{
    BlobRef, ChunkRecord, ChunkStore, ChunkStoreLayer, ChunkWrite, GroupChunks, GroupWrite,
    Manifest, Namespace, Precondition, Previous, RecordChange, RecordWrite, Result,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The inner store's sink for `plan`, with commits made one record write at a time (no atomic groups): they go
/// through the manifest writes each wrapper breaks.
fn one_record_at_a_time(inner: &dyn ChunkStore, plan: &SinkPlan) -> Box<dyn ChunkSink> {
    without_commit_groups(inner.chunk_sink(plan))
}

/// A seeded coin, shared by the tasks using one wrapper; it counts the heads it threw.
#[derive(Debug)]
struct Coin {
    probability: f64,
    rng: Mutex<StdRng>,
    heads: AtomicU64,
}

impl Coin {
    fn new(probability: f64, seed: u64) -> Self {
        Self {
            probability: probability.clamp(0.0, 1.0),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            heads: AtomicU64::new(0),
        }
    }

    fn heads(&self) -> u64 {
        self.heads.load(Ordering::Relaxed)
    }

    fn flip(&self) -> bool {
        let heads = lock(&self.rng).random_bool(self.probability);
        self.heads.fetch_add(u64::from(heads), Ordering::Relaxed);
        heads
    }

    fn duration(&self, range: &Range<Duration>) -> Duration {
        if range.start >= range.end {
            return range.start;
        }
        let micros = lock(&self.rng).random_range(range.start.as_micros()..range.end.as_micros());
        Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
    }
}

/// Commits the manifest before the chunks: `put_chunks`, `put_chunks_unlogged` and `put_chunk_records` only
/// buffer the chunks and return at once; the manifest write is done first and the buffered chunks of that
/// version are written only after a random delay, each batch the way it came (and the unlogged ones and the
/// records then synced). Readers that find the new manifest in that window miss its chunks.
#[derive(Debug)]
pub struct ManifestFirst {
    inner: Arc<dyn ChunkStore>,
    delay: Range<Duration>,
    coin: Coin,
    /// Buffered chunk writes per version, in call order (each within the backend's batch limit).
    pending: Mutex<HashMap<BlobRef, Vec<Batch>>>,
}

/// One buffered chunk write, the way it came.
#[derive(Debug)]
enum Batch {
    /// `put_chunks`, or `put_chunks_unlogged` when `unlogged`.
    Chunks {
        chunks: Vec<ChunkWrite>,
        unlogged: bool,
    },
    /// `put_chunk_records`.
    Records(Vec<ChunkRecord>),
}

impl ManifestFirst {
    /// Wraps `inner`; chunks are written 2 to 20 ms after their manifest.
    pub fn new(inner: Arc<dyn ChunkStore>) -> Self {
        Self::with_delay(
            inner,
            Duration::from_millis(2)..Duration::from_millis(20),
            0,
        )
    }

    /// Wraps `inner`; chunks are written a random delay within `delay` (seeded by `seed`) after their manifest.
    pub fn with_delay(inner: Arc<dyn ChunkStore>, delay: Range<Duration>, seed: u64) -> Self {
        Self {
            inner,
            delay,
            coin: Coin::new(0.0, seed),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Versions whose chunks are buffered, not yet written.
    pub fn pending_versions(&self) -> usize {
        lock(&self.pending).len()
    }

    fn buffer(&self, blob: &BlobRef, batch: Batch) {
        lock(&self.pending)
            .entry(blob.clone())
            .or_default()
            .push(batch);
    }
}

#[async_trait]
impl ChunkStoreLayer for ManifestFirst {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        one_record_at_a_time(self.inner.as_ref(), plan)
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let version = (ns == Namespace::Manifest)
            .then(|| Manifest::decode(&value, &|| "manifest".to_owned()).ok())
            .flatten()
            .map(|m| m.version);
        let written = self.inner.put_record(ns, key, value, cond).await?;
        let Some(version) = version else {
            return Ok(written);
        };
        let blob = BlobRef {
            key: Bytes::copy_from_slice(key),
            version,
        };
        let batches = lock(&self.pending).remove(&blob).unwrap_or_default();
        if matches!(written, RecordWrite::Done(_)) && !batches.is_empty() {
            tokio::time::sleep(self.coin.duration(&self.delay)).await;
            let (mut unlogged, mut records) = (false, false);
            for batch in batches {
                match batch {
                    Batch::Chunks {
                        chunks,
                        unlogged: true,
                    } => {
                        unlogged = true;
                        self.inner.put_chunks_unlogged(&blob, chunks).await?;
                    }
                    Batch::Chunks { chunks, .. } => self.inner.put_chunks(&blob, chunks).await?,
                    Batch::Records(batch) => {
                        records = true;
                        self.inner.put_chunk_records(&blob, batch).await?;
                    }
                }
            }
            if unlogged {
                self.inner.sync_unlogged_chunks().await?;
            }
            if records {
                self.inner.sync_chunk_records(&blob).await?;
            }
        }
        Ok(written)
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.buffer(
            blob,
            Batch::Chunks {
                chunks,
                unlogged: false,
            },
        );
        Ok(())
    }

    /// Buffered like `put_chunks`; the put's sync before its commit then reaches the inner store with nothing
    /// of this version written yet.
    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.buffer(
            blob,
            Batch::Chunks {
                chunks,
                unlogged: true,
            },
        );
        Ok(())
    }

    /// Buffered like `put_chunks`; the put's sync of its records reaches the inner store with nothing of them
    /// written yet.
    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        self.buffer(blob, Batch::Records(records));
        Ok(())
    }

    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        lock(&self.pending).remove(blob);
        self.inner
            .delete_chunks(blob, salt_count, chunk_count)
            .await
    }
}

/// Reads manifests from a "lagging replica": with probability `p`, reading a manifest returns the record the
/// key held before its latest write (or nothing, if it held none), as a read at consistency ONE might.
#[derive(Debug)]
pub struct StaleReads {
    inner: Arc<dyn ChunkStore>,
    coin: Coin,
    /// Key → its manifest record before the latest write through this wrapper.
    previous: Mutex<HashMap<Bytes, Option<Bytes>>>,
}

impl StaleReads {
    /// Wraps `inner`; a manifest read is stale with probability `p` (seeded by `seed`).
    pub fn new(inner: Arc<dyn ChunkStore>, p: f64, seed: u64) -> Self {
        Self {
            inner,
            coin: Coin::new(p, seed),
            previous: Mutex::new(HashMap::new()),
        }
    }

    /// Remembers what a manifest write replaced (reading it first when the backend does not report it).
    async fn remember(&self, key: &[u8], before: Option<Option<Bytes>>, written: &RecordWrite) {
        let replaced = match written {
            RecordWrite::Done(Previous::Value(v)) => Some(v.clone()),
            RecordWrite::Done(Previous::Absent) => None,
            RecordWrite::Done(Previous::Unknown) => match before {
                Some(b) => b,
                None => return,
            },
            RecordWrite::ConditionFailed(_) => return,
        };
        lock(&self.previous).insert(Bytes::copy_from_slice(key), replaced);
    }

    async fn read_before(&self, ns: Namespace, key: &[u8]) -> Option<Option<Bytes>> {
        if ns != Namespace::Manifest || self.inner.info().reports_previous {
            return None;
        }
        self.inner.get_record(ns, key).await.ok()
    }
}

#[async_trait]
impl ChunkStoreLayer for StaleReads {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        one_record_at_a_time(self.inner.as_ref(), plan)
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        if ns == Namespace::Manifest && self.coin.flip() {
            let stale = lock(&self.previous).get(key).cloned();
            if let Some(stale) = stale {
                return Ok(stale);
            }
        }
        self.inner.get_record(ns, key).await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let before = self.read_before(ns, key).await;
        let written = self.inner.put_record(ns, key, value, cond).await?;
        if ns == Namespace::Manifest {
            self.remember(key, before, &written).await;
        }
        Ok(written)
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let before = self.read_before(ns, key).await;
        let written = self.inner.delete_record(ns, key, cond).await?;
        if ns == Namespace::Manifest {
            self.remember(key, before, &written).await;
        }
        Ok(written)
    }
}

/// Loses acknowledged commits: with probability `p`, a manifest write returns success (replacing nothing)
/// without being performed.
#[derive(Debug)]
pub struct LostAck {
    inner: Arc<dyn ChunkStore>,
    coin: Coin,
}

impl LostAck {
    /// Wraps `inner`; a manifest write is dropped with probability `p` (seeded by `seed`).
    pub fn new(inner: Arc<dyn ChunkStore>, p: f64, seed: u64) -> Self {
        Self {
            inner,
            coin: Coin::new(p, seed),
        }
    }

    /// Manifest writes dropped so far.
    pub fn lost(&self) -> u64 {
        self.coin.heads()
    }
}

#[async_trait]
impl ChunkStoreLayer for LostAck {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        one_record_at_a_time(self.inner.as_ref(), plan)
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        if ns == Namespace::Manifest && self.coin.flip() {
            return Ok(RecordWrite::Done(Previous::Absent));
        }
        self.inner.put_record(ns, key, value, cond).await
    }
}

/// Misreports conditional manifest writes: with probability `p`, one whose condition does not hold is
/// performed anyway and reported refused.
#[derive(Debug)]
pub struct RefusedButApplied {
    inner: Arc<dyn ChunkStore>,
    coin: Coin,
}

impl RefusedButApplied {
    /// Wraps `inner`; a refused conditional manifest write is applied with probability `p` (seeded by `seed`).
    pub fn new(inner: Arc<dyn ChunkStore>, p: f64, seed: u64) -> Self {
        Self {
            inner,
            coin: Coin::new(p, seed),
        }
    }

    /// Refused writes applied so far.
    pub fn applied(&self) -> u64 {
        self.coin.heads()
    }
}

#[async_trait]
impl ChunkStoreLayer for RefusedButApplied {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        one_record_at_a_time(self.inner.as_ref(), plan)
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let outcome = self.inner.put_record(ns, key, value.clone(), cond).await?;
        if ns != Namespace::Manifest
            || !matches!(outcome, RecordWrite::ConditionFailed(_))
            || !self.coin.flip()
        {
            return Ok(outcome);
        }
        self.inner
            .put_record(ns, key, value, &Precondition::None)
            .await?;
        Ok(outcome)
    }
}

/// Loses kept versions: with probability `p`, a write of a kept-version record ([`Namespace::Kept`], the
/// record a keeping put writes instead of queuing the replaced version for reclaim) returns success without
/// being performed, alone or in an atomic group (where the rest of the group is written). The version the put
/// replaced is then neither kept nor reclaimed: reads of it by id find no such version.
#[derive(Debug)]
pub struct DropsKept {
    inner: Arc<dyn ChunkStore>,
    coin: Coin,
}

impl DropsKept {
    /// Wraps `inner`; a kept-version record write is dropped with probability `p` (seeded by `seed`).
    pub fn new(inner: Arc<dyn ChunkStore>, p: f64, seed: u64) -> Self {
        Self {
            inner,
            coin: Coin::new(p, seed),
        }
    }

    /// Kept-version record writes dropped so far.
    pub fn dropped(&self) -> u64 {
        self.coin.heads()
    }
}

#[async_trait]
impl ChunkStoreLayer for DropsKept {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        if ns == Namespace::Kept && self.coin.flip() {
            return Ok(RecordWrite::Done(Previous::Absent));
        }
        self.inner.put_record(ns, key, value, cond).await
    }

    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        // The dropped changes' positions, to report the rest of the group where the caller put it.
        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(changes.len());
        for (i, change) in changes.into_iter().enumerate() {
            if change.ns == Namespace::Kept && change.value.is_some() && self.coin.flip() {
                dropped.push(i);
            } else {
                kept.push(change);
            }
        }
        if dropped.is_empty() {
            return self.inner.write_records(kept, chunks).await;
        }
        Ok(match self.inner.write_records(kept, chunks).await? {
            GroupWrite::Done(mut previous) => {
                for i in dropped {
                    previous.insert(i.min(previous.len()), Previous::Absent);
                }
                GroupWrite::Done(previous)
            }
            GroupWrite::ConditionFailed { index, current } => {
                let mut index = index;
                for i in dropped {
                    if i <= index {
                        index += 1;
                    }
                }
                GroupWrite::ConditionFailed { index, current }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saltblob_core::{BlobStore, Error, LayoutPolicy, MemoryStore, PutOptions, StoreConfig};

    fn store(backend: Arc<dyn ChunkStore>) -> BlobStore {
        let policy = LayoutPolicy::default()
            .with_inline_limit(1024)
            .with_chunk_size(4096);
        BlobStore::new(backend, StoreConfig::default().with_policy(policy)).expect("valid config")
    }

    #[tokio::test]
    async fn manifest_first_exposes_a_manifest_without_chunks() {
        let wrapper = Arc::new(ManifestFirst::with_delay(
            Arc::new(MemoryStore::new()),
            Duration::from_millis(300)..Duration::from_millis(300),
            1,
        ));
        let s = store(wrapper.clone());
        let writer = {
            let s = s.clone();
            tokio::spawn(async move { s.put("k", vec![1u8; 10_000], &PutOptions::new()).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(wrapper.pending_versions(), 0, "taken at commit");
        match s.get("k").await {
            Err(e) => assert!(e.is_corruption(), "{e}"),
            Ok(v) => panic!(
                "read {} bytes of a manifest whose chunks are not written",
                v.len()
            ),
        }
        writer.await.expect("joins").expect("put succeeds");
        assert_eq!(s.get("k").await.expect("chunks written").len(), 10_000);
        // Inline values have no chunks and are not affected; records of other namespaces pass through.
        s.put("small", vec![2u8; 10], &PutOptions::new())
            .await
            .expect("inline put");
        assert_eq!(s.get("small").await.expect("inline get").len(), 10);
        assert!(s.delete("small").await.expect("delete").is_some());
    }

    #[tokio::test]
    async fn manifest_first_forgets_chunks_of_failed_puts() {
        let wrapper = Arc::new(ManifestFirst::new(Arc::new(MemoryStore::new())));
        let backend: &dyn ChunkStore = wrapper.as_ref();
        let blob = BlobRef {
            key: Bytes::from_static(b"k"),
            version: saltblob_core::VersionId(1),
        };
        backend
            .put_chunks(
                &blob,
                vec![ChunkWrite {
                    salt: 0,
                    index: 0,
                    data: Bytes::from_static(b"x"),
                }],
            )
            .await
            .expect("buffered");
        assert_eq!(wrapper.pending_versions(), 1);
        backend.delete_chunks(&blob, 1, 1).await.expect("deleted");
        assert_eq!(wrapper.pending_versions(), 0);
    }

    /// A put large enough to store its chunks unlogged: its buffered chunks are written unlogged after the
    /// manifest, then synced, all in the inner store.
    #[tokio::test]
    async fn manifest_first_writes_unlogged_chunks_unlogged_then_syncs() {
        use saltblob_core::conformance::faults::{Faulty, Point};
        use saltblob_core::memory::MEMORY_UNLOGGED_MIN_BYTES;

        let memory = Arc::new(MemoryStore::new());
        let faulty = Faulty::new(memory.clone());
        let wrapper = Arc::new(ManifestFirst::with_delay(
            faulty.clone(),
            Duration::from_millis(300)..Duration::from_millis(300),
            1,
        ));
        let s = store(wrapper.clone());
        let size = usize::try_from(MEMORY_UNLOGGED_MIN_BYTES * 2).expect("fits");
        let writer = {
            let s = s.clone();
            tokio::spawn(async move { s.put("k", vec![1u8; size], &PutOptions::new()).await })
        };
        // Once the manifest is in, the put's own sync is past: the next one is the late chunks'.
        while s.head("k").await.is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let sync = faulty.hold(Point::ChunkSync);
        sync.reached().await;
        assert!(
            memory.lose_unsynced_chunks().expect("lose") > 0,
            "the late chunks were written unlogged and wait for their sync"
        );
        sync.release();
        writer.await.expect("joins").expect("put succeeds");
    }

    #[tokio::test]
    async fn stale_reads_return_the_previous_record() {
        let s = store(Arc::new(StaleReads::new(
            Arc::new(MemoryStore::new()),
            1.0,
            0,
        )));
        s.put("k", vec![1u8; 10], &PutOptions::new())
            .await
            .expect("put 1");
        assert!(matches!(s.get("k").await, Err(Error::NotFound { .. })));
        s.put("k", vec![2u8; 10], &PutOptions::new())
            .await
            .expect("put 2");
        assert_eq!(s.get("k").await.expect("stale read"), vec![1u8; 10]);
        s.delete("k").await.expect("delete");
        assert_eq!(s.get("k").await.expect("stale read"), vec![2u8; 10]);
        // Never stale with probability 0.
        let s = store(Arc::new(StaleReads::new(
            Arc::new(MemoryStore::new()),
            0.0,
            0,
        )));
        s.put("k", vec![1u8; 10], &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(s.get("k").await.expect("fresh read"), vec![1u8; 10]);
    }

    #[tokio::test]
    async fn drops_kept_loses_the_versions_keeping_puts_replace() {
        use saltblob_core::GetOptions;

        let wrapper = Arc::new(DropsKept::new(Arc::new(MemoryStore::new()), 1.0, 0));
        let s = store(wrapper.clone());
        let keep = PutOptions::new().with_keep_replaced(true);
        let first = s
            .put("k", vec![1u8; 5000], &PutOptions::new())
            .await
            .expect("put");
        s.put("k", vec![2u8; 10], &keep)
            .await
            .expect("acknowledged");
        assert_eq!(wrapper.dropped(), 1);
        let read = s
            .get_with("k", &GetOptions::new().with_version(first.version))
            .await;
        assert!(
            matches!(read, Err(Error::VersionNotFound { .. })),
            "{read:?}"
        );
        assert_eq!(s.get("k").await.expect("current"), vec![2u8; 10]);
        // Never dropped with probability 0.
        let s = store(Arc::new(DropsKept::new(
            Arc::new(MemoryStore::new()),
            0.0,
            0,
        )));
        let first = s
            .put("k", vec![1u8; 5000], &PutOptions::new())
            .await
            .expect("put");
        s.put("k", vec![2u8; 10], &keep).await.expect("put");
        let read = s
            .get_with("k", &GetOptions::new().with_version(first.version))
            .await;
        assert_eq!(read.expect("kept"), vec![1u8; 5000]);
    }

    #[tokio::test]
    async fn lost_ack_drops_acknowledged_manifest_writes() {
        let wrapper = Arc::new(LostAck::new(Arc::new(MemoryStore::new()), 1.0, 0));
        let backend: &dyn ChunkStore = wrapper.as_ref();
        let s = store(wrapper.clone());
        s.put("k", vec![1u8; 5000], &PutOptions::new())
            .await
            .expect("acknowledged");
        assert!(matches!(s.get("k").await, Err(Error::NotFound { .. })));
        assert_eq!(wrapper.lost(), 1);
        assert_eq!(
            futures::StreamExt::count(backend.scan_chunks()).await,
            2,
            "chunks were written, only the commit lost"
        );
        assert_eq!(backend.reclaim_space().await.expect("delegated"), None);
    }
}
