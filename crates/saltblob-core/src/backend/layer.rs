//! [`ChunkStoreLayer`]: the base every [`ChunkStore`] wrapper is written on (the scheduler, the fault injector,
//! the deliberately broken backends of `saltblob-check`), after OpenDAL's `LayeredAccess`.
//!
//! A layer names its inner store and overrides only the calls it changes; every other call goes to the inner
//! store. [`ChunkStore`] is implemented once, for every layer, by forwarding each of its methods to the layer's
//! method of the same name, and that impl carries `#[deny(clippy::missing_trait_methods)]`: no wrapper can let
//! one of [`ChunkStore`]'s default bodies run in place of the inner store's own method (the way a wrapper that
//! forgot `put_chunks_unlogged` wrote an engine's unlogged chunks through its logged path), and a method added to
//! [`ChunkStore`] does not compile until it is added here, with a default that forwards.

use std::fmt::Debug;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

use crate::backend::{
    BackendInfo, BackupOptions, BackupReport, BlobRef, ChunkAddress, ChunkId, ChunkRecord,
    ChunkSink, ChunkStore, ChunkWrite, GroupChunks, GroupWrite, IndexCheck, Namespace,
    Precondition, RangePage, ReadShape, RecordChange, RecordWrite, RecordsPlan, ScanPlan,
    ScanRange, SinkPlan, SpaceReport,
};
use crate::base::error::Result;

/// A [`ChunkStore`] that wraps another: implement this, not [`ChunkStore`], and the wrapper is a [`ChunkStore`].
///
/// # Contract
/// - Each method's default calls the same method of [`ChunkStoreLayer::inner`] with the same arguments and
///   returns what it returns. An override is what the wrapper's [`ChunkStore`] method does.
/// - A layer that intercepts record writes (`put_record`, `delete_record`) or chunk writes (`put_chunks`)
///   intercepts `write_records` too, which carries both, or hands out its inner store's sinks without commit
///   groups ([`crate::backend::without_commit_groups`] in its `chunk_sink`), so that no commit passes it by.
/// - A method is overridden alone: a layer that changes chunk writes overrides both `put_chunks` and
///   `put_chunks_unlogged`, and `sync_unlogged_chunks` too if it holds or defers writes.
/// - A layer whose contract covers every request (the scheduler admits each one or says why not) puts
///   `#[deny(clippy::missing_trait_methods)]` on its impl, so that a new method cannot pass it by default.
/// - A layer that moves a record write to another task carries the write's deadline there
///   (reads [`crate::backend::deadline::current`] before, and checks it there right before the write); forwarding
///   in the calling task, as the defaults do, carries it by itself.
/// - With this trait and [`ChunkStore`] both in scope, a call on the wrapper's own type is ambiguous: call it
///   through `dyn ChunkStore` or as `ChunkStore::method(&wrapper, ..)`.
#[async_trait]
pub trait ChunkStoreLayer: Send + Sync + Debug + 'static {
    /// The store this layer wraps, which every method it does not override reaches.
    fn inner(&self) -> &dyn ChunkStore;

    /// [`ChunkStore::info`].
    fn info(&self) -> BackendInfo {
        self.inner().info()
    }

    /// [`ChunkStore::get_record`].
    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner().get_record(ns, key).await
    }

    /// [`ChunkStore::put_record`].
    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.inner().put_record(ns, key, value, cond).await
    }

    /// [`ChunkStore::delete_record`].
    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.inner().delete_record(ns, key, cond).await
    }

    /// [`ChunkStore::write_records`].
    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        self.inner().write_records(changes, chunks).await
    }

    /// [`ChunkStore::scan_records`].
    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        self.inner()
            .scan_records(ns, prefix, start_after, limit)
            .await
    }

    /// [`ChunkStore::drop_partition`].
    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        self.inner().drop_partition(ns, part).await
    }

    /// [`ChunkStore::manifest_ranges`].
    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        self.inner().manifest_ranges().await
    }

    /// [`ChunkStore::scan_manifest_range`].
    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        self.inner().scan_manifest_range(range, after, limit).await
    }

    /// [`ChunkStore::chunk_sink`].
    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        self.inner().chunk_sink(plan)
    }

    /// [`ChunkStore::read_shape`].
    fn read_shape(&self, size: u64) -> ReadShape {
        self.inner().read_shape(size)
    }

    /// [`ChunkStore::put_chunks`].
    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.inner().put_chunks(blob, chunks).await
    }

    /// [`ChunkStore::put_chunks_unlogged`].
    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.inner().put_chunks_unlogged(blob, chunks).await
    }

    /// [`ChunkStore::sync_unlogged_chunks`].
    async fn sync_unlogged_chunks(&self) -> Result<()> {
        self.inner().sync_unlogged_chunks().await
    }

    /// [`ChunkStore::begin_chunk_records`].
    async fn begin_chunk_records(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        self.inner().begin_chunk_records(blob, plan).await
    }

    /// [`ChunkStore::put_chunk_records`].
    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        self.inner().put_chunk_records(blob, records).await
    }

    /// [`ChunkStore::sync_chunk_records`].
    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        self.inner().sync_chunk_records(blob).await
    }

    /// [`ChunkStore::get_chunks`].
    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        self.inner().get_chunks(blob, chunks).await
    }

    /// [`ChunkStore::delete_chunks`].
    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        self.inner()
            .delete_chunks(blob, salt_count, chunk_count)
            .await
    }

    /// [`ChunkStore::chunk_storage`].
    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        self.inner().chunk_storage(blob).await
    }

    /// [`ChunkStore::scan_chunks`].
    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        self.inner().scan_chunks()
    }

    /// [`ChunkStore::scan_version_files`].
    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        self.inner().scan_version_files()
    }

    /// [`ChunkStore::reclaim_space`].
    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        self.inner().reclaim_space().await
    }

    /// [`ChunkStore::check_index`].
    async fn check_index(&self, prefix: &[u8], repair: bool) -> Result<Option<IndexCheck>> {
        self.inner().check_index(prefix, repair).await
    }

    /// [`ChunkStore::maintain`].
    async fn maintain(&self) -> Result<()> {
        self.inner().maintain().await
    }

    /// [`ChunkStore::cluster_time`].
    async fn cluster_time(&self) -> Result<Option<u64>> {
        self.inner().cluster_time().await
    }

    /// [`ChunkStore::backup`].
    async fn backup(
        &self,
        dest: &std::path::Path,
        options: &BackupOptions,
    ) -> Result<Option<BackupReport>> {
        self.inner().backup(dest, options).await
    }
}

/// Every layer is a [`ChunkStore`]: each method is the layer's own (its override, else the forward).
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<L: ChunkStoreLayer> ChunkStore for L {
    fn info(&self) -> BackendInfo {
        ChunkStoreLayer::info(self)
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        ChunkStoreLayer::get_record(self, ns, key).await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        ChunkStoreLayer::put_record(self, ns, key, value, cond).await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        ChunkStoreLayer::delete_record(self, ns, key, cond).await
    }

    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        ChunkStoreLayer::write_records(self, changes, chunks).await
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        ChunkStoreLayer::scan_records(self, ns, prefix, start_after, limit).await
    }

    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        ChunkStoreLayer::drop_partition(self, ns, part).await
    }

    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        ChunkStoreLayer::manifest_ranges(self).await
    }

    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        ChunkStoreLayer::scan_manifest_range(self, range, after, limit).await
    }

    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        ChunkStoreLayer::chunk_sink(self, plan)
    }

    fn read_shape(&self, size: u64) -> ReadShape {
        ChunkStoreLayer::read_shape(self, size)
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        ChunkStoreLayer::put_chunks(self, blob, chunks).await
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        ChunkStoreLayer::put_chunks_unlogged(self, blob, chunks).await
    }

    async fn sync_unlogged_chunks(&self) -> Result<()> {
        ChunkStoreLayer::sync_unlogged_chunks(self).await
    }

    async fn begin_chunk_records(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        ChunkStoreLayer::begin_chunk_records(self, blob, plan).await
    }

    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        ChunkStoreLayer::put_chunk_records(self, blob, records).await
    }

    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        ChunkStoreLayer::sync_chunk_records(self, blob).await
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        ChunkStoreLayer::get_chunks(self, blob, chunks).await
    }

    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()> {
        ChunkStoreLayer::delete_chunks(self, blob, salt_count, chunk_count).await
    }

    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        ChunkStoreLayer::chunk_storage(self, blob).await
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        ChunkStoreLayer::scan_chunks(self)
    }

    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        ChunkStoreLayer::scan_version_files(self)
    }

    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        ChunkStoreLayer::reclaim_space(self).await
    }

    async fn check_index(&self, prefix: &[u8], repair: bool) -> Result<Option<IndexCheck>> {
        ChunkStoreLayer::check_index(self, prefix, repair).await
    }

    async fn maintain(&self) -> Result<()> {
        ChunkStoreLayer::maintain(self).await
    }

    async fn cluster_time(&self) -> Result<Option<u64>> {
        ChunkStoreLayer::cluster_time(self).await
    }

    async fn backup(
        &self,
        dest: &std::path::Path,
        options: &BackupOptions,
    ) -> Result<Option<BackupReport>> {
        ChunkStoreLayer::backup(self, dest, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::base::version::VersionId;

    /// A layer that overrides nothing.
    #[derive(Debug, Default)]
    struct Nothing {
        inner: MemoryStore,
    }

    impl ChunkStoreLayer for Nothing {
        fn inner(&self) -> &dyn ChunkStore {
            &self.inner
        }
    }

    /// A layer that overrides nothing reaches the inner store's own unlogged pair, not the trait's defaults (a
    /// logged write, a sync that does nothing).
    #[tokio::test]
    async fn a_layer_forwards_what_it_does_not_override() {
        let layer = Nothing::default();
        let store: &dyn ChunkStore = &layer;
        let blob = BlobRef {
            key: Bytes::from_static(b"k"),
            version: VersionId(1),
        };
        let chunk = ChunkWrite {
            salt: 0,
            index: 0,
            data: Bytes::from_static(b"x"),
        };
        store
            .put_chunks_unlogged(&blob, vec![chunk.clone()])
            .await
            .expect("write");
        assert_eq!(layer.inner.lose_unsynced_chunks().expect("lose"), 1);
        store
            .put_chunks_unlogged(&blob, vec![chunk])
            .await
            .expect("write");
        store.sync_unlogged_chunks().await.expect("sync");
        assert_eq!(layer.inner.lose_unsynced_chunks().expect("lose"), 0);
        assert_eq!(layer.inner.chunk_count().expect("count"), 1);
        assert_eq!(store.info().name, "memory");
    }
}
