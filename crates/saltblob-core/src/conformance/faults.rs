//! [`Faulty`]: a wrapper around any backend that holds or fails chosen calls, so that cases can stage races
//! (a commit that stalls past its lease, a repair that runs while a put replaces a version) deterministically.
//!
//! A store over the wrapper and a store over the backend itself act like two processes sharing the backend:
//! neither sees the other's puts as running in its own process.

use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use tokio::sync::watch;

use crate::backend::layer::ChunkStoreLayer;
use crate::backend::{
    BlobRef, ChunkAddress, ChunkRecord, ChunkStore, ChunkWrite, GroupChunks, GroupWrite, Namespace,
    Precondition, RecordChange, RecordWrite,
};
use crate::base::error::{Error, Result};

/// A kind of backend call that [`Faulty`] can hold or fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// `get_record` in a namespace.
    RecordRead(Namespace),
    /// `put_record` and `delete_record` in a namespace, and `write_records` of a group that writes there (it
    /// passes the point of each of its namespaces in turn, after [`Point::ChunkWrite`] if it carries chunks).
    RecordWrite(Namespace),
    /// `put_chunks`, `put_chunks_unlogged` and `put_chunk_records`. A held chunk write is already issued, as
    /// an engine's write on a thread of its own is: it lands once released even if its caller has given up on
    /// it. A group of `write_records` that carries chunks passes it too, before it is issued.
    ChunkWrite,
    /// `sync_unlogged_chunks` and `sync_chunk_records`, issued like a chunk write.
    ChunkSync,
    /// `scan_chunks`.
    ChunkScan,
}

/// A backend that forwards every call to another (a [`ChunkStoreLayer`]), except the calls held or failed at a
/// [`Point`].
#[derive(Debug, Clone)]
pub struct Faulty {
    inner: Arc<dyn ChunkStore>,
    state: Arc<Mutex<Faults>>,
}

#[derive(Debug, Default)]
struct Faults {
    held: Vec<(Point, Hold)>,
    failing: Vec<Point>,
}

/// Calls held at one [`Point`] until [`Hold::release`].
#[derive(Clone, Debug)]
pub struct Hold {
    open: watch::Sender<bool>,
    arrived: watch::Sender<u64>,
}

impl Hold {
    /// Waits until a call has arrived at the point (and is held there).
    pub async fn reached(&self) {
        let mut rx = self.arrived.subscribe();
        rx.wait_for(|n| *n > 0).await.expect("the hold is alive");
    }

    /// Lets held calls, and every later one, through.
    pub fn release(&self) {
        self.open.send_replace(true);
    }

    async fn pass(&self) {
        let mut rx = self.open.subscribe();
        self.arrived.send_modify(|n| *n += 1);
        let _ = rx.wait_for(|open| *open).await;
    }
}

impl Faulty {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ChunkStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            state: Arc::new(Mutex::new(Faults::default())),
        })
    }

    /// Holds calls at `point` from now until the returned hold is released.
    pub fn hold(&self, point: Point) -> Hold {
        let hold = Hold {
            open: watch::Sender::new(false),
            arrived: watch::Sender::new(0),
        };
        self.faults().held.push((point, hold.clone()));
        hold
    }

    /// Makes calls at `point` fail (non-retryable) from now on, or heals them.
    pub fn fail(&self, point: Point, failing: bool) {
        let mut faults = self.faults();
        faults.failing.retain(|p| *p != point);
        if failing {
            faults.failing.push(point);
        }
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Passes a call at `point`: waits while it is held, fails if it is set to fail.
    async fn enter(&self, point: Point) -> Result<()> {
        let held: Vec<Hold> = {
            let faults = self.faults();
            faults
                .held
                .iter()
                .filter(|(p, _)| *p == point)
                .map(|(_, h)| h.clone())
                .collect()
        };
        for hold in held {
            hold.pass().await;
        }
        if self.faults().failing.contains(&point) {
            return Err(Error::backend(
                "faulty",
                format!("injected failure at {point:?}"),
                false,
            ));
        }
        Ok(())
    }

    /// Issues `call` to the inner store at `point` on a task of its own, so that once released it runs to its
    /// end even if its caller has given up on it (see [`Point::ChunkWrite`]).
    async fn issue<T, F, Fut>(&self, point: Point, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn ChunkStore>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            this.enter(point).await?;
            call(this.inner).await
        })
        .await
        .map_err(|e| Error::internal("chunk write task", e))?
    }
}

#[async_trait]
impl ChunkStoreLayer for Faulty {
    fn inner(&self) -> &dyn ChunkStore {
        self.inner.as_ref()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        self.enter(Point::RecordRead(ns)).await?;
        self.inner.get_record(ns, key).await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.enter(Point::RecordWrite(ns)).await?;
        self.inner.put_record(ns, key, value, cond).await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.enter(Point::RecordWrite(ns)).await?;
        self.inner.delete_record(ns, key, cond).await
    }

    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        if chunks.is_some() {
            self.enter(Point::ChunkWrite).await?;
        }
        let mut namespaces: Vec<Namespace> = Vec::new();
        for change in &changes {
            if !namespaces.contains(&change.ns) {
                namespaces.push(change.ns);
            }
        }
        for ns in namespaces {
            self.enter(Point::RecordWrite(ns)).await?;
        }
        self.inner.write_records(changes, chunks).await
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let blob = blob.clone();
        self.issue(Point::ChunkWrite, move |inner| async move {
            inner.put_chunks(&blob, chunks).await
        })
        .await
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let blob = blob.clone();
        self.issue(Point::ChunkWrite, move |inner| async move {
            inner.put_chunks_unlogged(&blob, chunks).await
        })
        .await
    }

    async fn sync_unlogged_chunks(&self) -> Result<()> {
        self.issue(Point::ChunkSync, |inner| async move {
            inner.sync_unlogged_chunks().await
        })
        .await
    }

    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        let blob = blob.clone();
        self.issue(Point::ChunkWrite, move |inner| async move {
            inner.put_chunk_records(&blob, records).await
        })
        .await
    }

    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        let blob = blob.clone();
        self.issue(Point::ChunkSync, move |inner| async move {
            inner.sync_chunk_records(&blob).await
        })
        .await
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        futures::stream::once(self.enter(Point::ChunkScan))
            .map(move |entered| match entered {
                Ok(()) => self.inner.scan_chunks(),
                Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
            })
            .flatten()
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MEMORY_UNLOGGED_MIN_BYTES;
    use crate::backend::memory::MemoryStore;
    use crate::conformance::data;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    /// A store over `Faulty` over a memory backend, which stores the chunks of puts of at least
    /// [`MEMORY_UNLOGGED_MIN_BYTES`] unlogged; and a value that large.
    fn large_put_setup() -> (Arc<MemoryStore>, Arc<Faulty>, BlobStore, Bytes) {
        let memory = Arc::new(MemoryStore::new());
        let faulty = Faulty::new(memory.clone());
        let store = BlobStore::new(faulty.clone(), StoreConfig::default()).expect("store");
        let size = usize::try_from(MEMORY_UNLOGGED_MIN_BYTES * 3).expect("fits");
        (memory, faulty, store, data(size, 1))
    }

    /// A large put through `Faulty` reaches the inner store's unlogged pair, and can be held at its sync: a crash
    /// there (the put dies, the engine loses what was not synced) loses its chunks before any commit. Without a
    /// hold, nothing of the put is left unsynced once it returns.
    #[tokio::test]
    async fn a_large_put_reaches_the_inner_stores_unlogged_path() {
        let (memory, faulty, store, value) = large_put_setup();
        let sync = faulty.hold(Point::ChunkSync);
        let put = tokio::spawn({
            let (store, value) = (store.clone(), value.clone());
            async move { store.put("large", value, &PutOptions::new()).await }
        });
        sync.reached().await;
        put.abort();
        let lost = memory.lose_unsynced_chunks().expect("lose");
        assert!(lost > 0, "the chunks reached the inner store unlogged");
        assert!(
            matches!(store.get("large").await, Err(Error::NotFound { .. })),
            "the put did not commit before its sync"
        );
        sync.release();

        let (memory, _faulty, store, value) = large_put_setup();
        store
            .put("large", value.clone(), &PutOptions::new())
            .await
            .expect("put");
        assert_eq!(
            memory.lose_unsynced_chunks().expect("lose"),
            0,
            "the sync reached the inner store before the commit"
        );
        assert_eq!(store.get("large").await.expect("get"), value);
    }
}
