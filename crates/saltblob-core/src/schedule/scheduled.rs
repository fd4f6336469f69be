//! [`ScheduledStore`]: the scheduler in front of a backend. Every request of the store passes through it, so no
//! code path of the core (puts, reads, gc, fsck, the reclaim queue) can bypass admission.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use super::{ClassTag, Scheduler, current_class, in_class};
use crate::backend::layer::ChunkStoreLayer;
use crate::backend::{
    BackendInfo, BackupOptions, BackupReport, BlobRef, ChunkAddress, ChunkId, ChunkRecord,
    ChunkSink, ChunkStore, ChunkWrite, GroupChunks, GroupWrite, IndexCheck, Namespace,
    Precondition, RangePage, ReadShape, RecordChange, RecordWrite, RecordsPlan, ScanPlan,
    ScanRange, SinkPlan, SpaceReport,
};
use crate::base::error::Result;

/// Bytes a page of a record scan is estimated at before it runs.
const SCAN_ESTIMATE_BYTES: u64 = 64 << 10;

/// A backend whose requests are admitted by the store's scheduler, in the class of the task issuing them
/// (requests outside any operation's class, such as intent renewals, run in the store's default class, else
/// `interactive`, and the backend sees that class).
///
/// Record reads and writes, and the deletion of a version's chunks, move no data of their own: in a background
/// class they are admitted beside its data units, not queued behind them ([`Scheduler::admit_record`]).
///
/// Not scheduled: [`ChunkStore::chunk_sink`], [`ChunkStore::read_shape`] and [`ChunkStore::manifest_ranges`]
/// (the backend's choices, no data moved; a sink's writes come back through this store),
/// [`ChunkStore::scan_chunks`] and [`ChunkStore::scan_version_files`] (fsck's listings, streams paced by their
/// consumer), [`ChunkStore::maintain`] (the engine's upkeep), [`ChunkStore::sync_unlogged_chunks`] and
/// [`ChunkStore::sync_chunk_records`] (a flush or an fsync, which move no bytes of their own),
/// [`ChunkStore::begin_chunk_records`] (creating and sizing a file) and
/// [`ChunkStore::reclaim_space`] (engine maintenance after gc). Its layer impl writes out every method, so that a
/// new one cannot bypass admission by default.
#[derive(Debug)]
pub(crate) struct ScheduledStore {
    backend: Arc<dyn ChunkStore>,
    sched: Arc<Scheduler>,
}

impl ScheduledStore {
    pub(crate) fn new(backend: Arc<dyn ChunkStore>, sched: Arc<Scheduler>) -> Self {
        Self { backend, sched }
    }

    /// The class of the request: the operation's, else the store's fallback class, which the backend then sees
    /// too ([`current_class`]).
    fn class(&self) -> ClassTag {
        current_class().unwrap_or_else(|| self.sched.fallback())
    }

    /// Runs `call`, estimated at `estimate` bytes, once admitted, in the request's class; `moved` tells the bytes
    /// it really moved.
    async fn run<T>(
        &self,
        estimate: u64,
        call: impl Future<Output = Result<T>>,
        moved: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        self.run_in(self.class(), estimate, false, call, moved)
            .await
    }

    /// [`ScheduledStore::run`] for a request that moves no data of its own ([`Scheduler::admit_record`]).
    async fn run_record<T>(
        &self,
        bytes: u64,
        call: impl Future<Output = Result<T>>,
        moved: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        self.run_in(self.class(), bytes, true, call, moved).await
    }

    /// [`ScheduledStore::run`] (or, if `record`, [`ScheduledStore::run_record`]) in `class`.
    async fn run_in<T>(
        &self,
        class: ClassTag,
        estimate: u64,
        record: bool,
        call: impl Future<Output = Result<T>>,
        moved: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        let mut permit = if record {
            self.sched.admit_record(class.id, estimate).await
        } else {
            self.sched.admit(class.id, estimate).await
        };
        let out = in_class(Some(class), call).await;
        if let Ok(value) = &out {
            permit.moved(moved(value));
        }
        out
    }
}

fn len(value: &Option<Bytes>) -> u64 {
    value.as_ref().map_or(0, |v| v.len() as u64)
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ChunkStoreLayer for ScheduledStore {
    fn inner(&self) -> &dyn ChunkStore {
        self.backend.as_ref()
    }

    fn info(&self) -> BackendInfo {
        self.backend.info()
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        self.run_record(0, self.backend.get_record(ns, key), len)
            .await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let bytes = value.len() as u64;
        let call = self.backend.put_record(ns, key, value, cond);
        self.run_record(bytes, call, |_| bytes).await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.run_record(0, self.backend.delete_record(ns, key, cond), |_| 0)
            .await
    }

    /// A group that carries chunks moves their data: it is admitted as a chunk write is.
    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        let records: u64 = changes.iter().map(|c| len(&c.value)).sum();
        let data = chunks.as_ref().map(GroupChunks::stored_bytes);
        let bytes = records + data.unwrap_or(0);
        let call = self.backend.write_records(changes, chunks);
        self.run_in(self.class(), bytes, data.is_none(), call, |_| bytes)
            .await
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let call = self.backend.scan_records(ns, prefix, start_after, limit);
        self.run(SCAN_ESTIMATE_BYTES, call, |page| {
            page.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
        })
        .await
    }

    /// Admitted as a record delete is.
    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        self.run_record(0, self.backend.drop_partition(ns, part), |_| 0)
            .await
    }

    /// Not admitted: the backend's choice (from what it knows of its cluster), no data moved.
    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        self.backend.manifest_ranges().await
    }

    /// Admitted as a page of [`ChunkStore::scan_records`] is.
    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        let call = self.backend.scan_manifest_range(range, after, limit);
        self.run(SCAN_ESTIMATE_BYTES, call, |page| {
            page.records
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64)
                .sum()
        })
        .await
    }

    /// Not admitted: the backend's choice, no I/O. The sink's writes go through this store, which admits them.
    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        self.backend.chunk_sink(plan)
    }

    fn read_shape(&self, size: u64) -> ReadShape {
        self.backend.read_shape(size)
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let bytes = ChunkWrite::stored_bytes(&chunks);
        self.run(bytes, self.backend.put_chunks(blob, chunks), |_| bytes)
            .await
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let bytes = ChunkWrite::stored_bytes(&chunks);
        let call = self.backend.put_chunks_unlogged(blob, chunks);
        self.run(bytes, call, |_| bytes).await
    }

    /// Not admitted: it moves no bytes of its own (it waits for the engine to persist those already written),
    /// and its latency, a flush, would read as a congested backend to the limit.
    async fn sync_unlogged_chunks(&self) -> Result<()> {
        self.backend.sync_unlogged_chunks().await
    }

    /// Not admitted: it creates and sizes a file, and moves no bytes of its own.
    async fn begin_chunk_records(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        self.backend.begin_chunk_records(blob, plan).await
    }

    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        let bytes: u64 = records.iter().map(|r| r.len() as u64).sum();
        let call = self.backend.put_chunk_records(blob, records);
        self.run(bytes, call, |_| bytes).await
    }

    /// Not admitted, like [`ChunkStore::sync_unlogged_chunks`]: it waits for bytes already written.
    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        self.backend.sync_chunk_records(blob).await
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let class = self.class();
        let id = class.id;
        let estimate = self.sched.estimate_chunk_read(id, chunks.len());
        let call = self.backend.get_chunks(blob, chunks);
        self.run_in(class, estimate, false, call, |found| {
            let bytes = found.iter().map(len).sum();
            self.sched.learn_chunk_read(id, chunks.len(), bytes);
            bytes
        })
        .await
    }

    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        let call = self.backend.delete_chunks(blob, salt_count, chunk_count);
        self.run_record(0, call, |_| 0).await
    }

    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        self.run_record(0, self.backend.chunk_storage(blob), |_| 0)
            .await
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        self.backend.scan_chunks()
    }

    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        self.backend.scan_version_files()
    }

    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        self.backend.reclaim_space().await
    }

    /// Not admitted as a whole (one call of many reads, which the backend bounds itself, a few dozen at once;
    /// `fsck` runs it last, in its maintenance class).
    async fn check_index(&self, prefix: &[u8], repair: bool) -> Result<Option<IndexCheck>> {
        self.backend.check_index(prefix, repair).await
    }

    /// Not admitted, like [`ChunkStore::reclaim_space`]: engine upkeep.
    async fn maintain(&self) -> Result<()> {
        self.backend.maintain().await
    }

    /// Not admitted: one small read that decides whether a pass may run, which must not wait behind the
    /// traffic it would judge.
    async fn cluster_time(&self) -> Result<Option<u64>> {
        self.backend.cluster_time().await
    }

    /// Not admitted: one call that the engine runs beside the traffic (its files, not requests).
    async fn backup(
        &self,
        dest: &std::path::Path,
        options: &BackupOptions,
    ) -> Result<Option<BackupReport>> {
        self.backend.backup(dest, options).await
    }
}
