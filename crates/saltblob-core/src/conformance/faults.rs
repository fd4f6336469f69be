//! [`Faulty`]: a wrapper around any backend that holds or fails chosen calls, so that cases can stage races
//! (a commit that stalls past its lease, a repair that runs while a put replaces a version) deterministically.
//!
//! A store over the wrapper and a store over the backend itself act like two processes sharing the backend:
//! neither sees the other's puts as running in its own process.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use tokio::sync::watch;

use crate::backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition,
    RecordWrite, SpaceReport,
};
use crate::{Error, Result};

/// A kind of backend call that [`Faulty`] can hold or fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// `get_record` in a namespace.
    RecordRead(Namespace),
    /// `put_record` and `delete_record` in a namespace.
    RecordWrite(Namespace),
    /// `put_chunks`. A held chunk write is already issued, as an engine's write on a thread of its own is: it
    /// lands once released even if its caller has given up on it.
    ChunkWrite,
    /// `scan_chunks`.
    ChunkScan,
}

/// A backend that forwards every call to another, except the calls held or failed at a [`Point`].
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
}

#[async_trait]
impl ChunkStore for Faulty {
    fn info(&self) -> BackendInfo {
        self.inner.info()
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

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        self.inner
            .scan_records(ns, prefix, start_after, limit)
            .await
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let (this, blob) = (self.clone(), blob.clone());
        tokio::spawn(async move {
            this.enter(Point::ChunkWrite).await?;
            this.inner.put_chunks(&blob, chunks).await
        })
        .await
        .map_err(|e| Error::internal("chunk write task", e))?
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        self.inner.get_chunks(blob, chunks).await
    }

    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        self.inner
            .delete_chunks(blob, salt_count, chunk_count)
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

    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        self.inner.reclaim_space().await
    }
}
