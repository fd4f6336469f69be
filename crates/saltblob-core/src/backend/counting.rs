//! [`CountingStore`]: a layer that counts the record writes reaching its inner store per partition, the partition
//! drops and the chunk deletions per version: how the bench (`saltblob bench --background`) and the tests show
//! how writes spread ([`Namespace::partition_len`]) and that no version is deleted twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::layer::ChunkStoreLayer;
use crate::backend::{
    BlobRef, ChunkStore, GroupChunks, GroupWrite, Namespace, Precondition, RecordChange,
    RecordWrite,
};
use crate::base::error::Result;

/// A record partition: its namespace and the key bytes that name it (none for a namespace kept in one partition;
/// the whole key for a manifest, each its own partition on a cluster).
pub type Partition = (Namespace, Vec<u8>);

/// Counts what reaches the inner store; every call is forwarded unchanged.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ChunkStore>,
    writes: Mutex<HashMap<Partition, u64>>,
    drops: Mutex<Vec<Partition>>,
    chunk_deletes: Mutex<HashMap<BlobRef, u64>>,
    /// Chunk deletions running now, and the most that ever ran at once.
    deletes_running: AtomicUsize,
    deletes_peak: AtomicUsize,
    delete_delay: Option<Duration>,
}

/// The busiest partition of the internal records (manifests apart): [`CountingStore::busiest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busiest {
    /// The partition.
    pub partition: Partition,
    /// Its record writes.
    pub writes: u64,
    /// The record writes of every internal partition.
    pub total: u64,
}

impl Busiest {
    /// `writes` ÷ `total`.
    pub fn share(&self) -> f64 {
        self.writes as f64 / self.total.max(1) as f64
    }
}

impl CountingStore {
    /// A layer over `inner`, every count at zero.
    pub fn new(inner: Arc<dyn ChunkStore>) -> Self {
        Self {
            inner,
            writes: Mutex::default(),
            drops: Mutex::default(),
            chunk_deletes: Mutex::default(),
            deletes_running: AtomicUsize::new(0),
            deletes_peak: AtomicUsize::new(0),
            delete_delay: None,
        }
    }

    /// Makes every chunk deletion wait `delay` first (so that passes running at once overlap, in tests).
    pub fn with_delete_delay(mut self, delay: Duration) -> Self {
        self.delete_delay = Some(delay);
        self
    }

    /// The store counted.
    pub fn counted(&self) -> &Arc<dyn ChunkStore> {
        &self.inner
    }

    fn count(&self, ns: Namespace, key: &[u8]) {
        let part = match ns {
            Namespace::Manifest => key.to_vec(),
            _ => key[..ns.partition_len().min(key.len())].to_vec(),
        };
        if let Ok(mut writes) = self.writes.lock() {
            *writes.entry((ns, part)).or_default() += 1;
        }
    }

    /// The busiest partition of the internal records (manifests apart), if any was written since the last reset.
    pub fn busiest(&self) -> Option<Busiest> {
        let writes = self.writes.lock().ok()?;
        let internal = writes
            .iter()
            .filter(|((ns, _), _)| *ns != Namespace::Manifest);
        let total = internal.clone().map(|(_, n)| n).sum();
        internal.max_by_key(|(_, n)| **n).map(|(p, n)| Busiest {
            partition: p.clone(),
            writes: *n,
            total,
        })
    }

    /// Record writes to namespace `ns`, every partition.
    pub fn writes_to(&self, ns: Namespace) -> u64 {
        self.writes.lock().map_or(0, |writes| {
            writes
                .iter()
                .filter(|((n, _), _)| *n == ns)
                .map(|(_, c)| c)
                .sum()
        })
    }

    /// The partitions dropped, in order.
    pub fn drops(&self) -> Vec<Partition> {
        self.drops.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// Chunk deletions per version.
    pub fn chunk_deletes(&self) -> HashMap<BlobRef, u64> {
        self.chunk_deletes
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// The most chunk deletions that ran at once (since the last reset).
    pub fn chunk_deletes_at_once(&self) -> usize {
        self.deletes_peak.load(Ordering::Relaxed)
    }

    /// Sets every count back to zero.
    pub fn reset(&self) {
        if let Ok(mut w) = self.writes.lock() {
            w.clear();
        }
        if let Ok(mut d) = self.drops.lock() {
            d.clear();
        }
        if let Ok(mut d) = self.chunk_deletes.lock() {
            d.clear();
        }
        self.deletes_peak.store(0, Ordering::Relaxed);
    }
}

/// One call counted as running until it ends or is dropped.
struct Running<'a> {
    count: &'a AtomicUsize,
    /// Calls running with this one.
    now: usize,
}

impl<'a> Running<'a> {
    fn start(count: &'a AtomicUsize) -> Self {
        let now = count.fetch_add(1, Ordering::Relaxed) + 1;
        Self { count, now }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl ChunkStoreLayer for CountingStore {
    fn inner(&self) -> &dyn ChunkStore {
        &*self.inner
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.count(ns, key);
        self.inner.put_record(ns, key, value, cond).await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.count(ns, key);
        self.inner.delete_record(ns, key, cond).await
    }

    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        for c in &changes {
            self.count(c.ns, &c.key);
        }
        self.inner.write_records(changes, chunks).await
    }

    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        if let Ok(mut deletes) = self.chunk_deletes.lock() {
            *deletes.entry(blob.clone()).or_default() += 1;
        }
        let running = Running::start(&self.deletes_running);
        self.deletes_peak.fetch_max(running.now, Ordering::Relaxed);
        if let Some(delay) = self.delete_delay {
            tokio::time::sleep(delay).await;
        }
        self.inner
            .delete_chunks(blob, salt_count, chunk_count)
            .await
    }

    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        if let Ok(mut drops) = self.drops.lock() {
            drops.push((ns, part.to_vec()));
        }
        self.inner.drop_partition(ns, part).await
    }
}
