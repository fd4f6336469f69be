//! [`RocksStore`]: the [`ChunkStore`] implementation on RocksDB, on top of the engine wrapper `RocksCore`
//! (the `core` module): it maps saltblob's namespaces, records and chunks to column families and keys.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use saltblob_core::backend::{
    BackendInfo, BackupOptions, BackupReport, BlobRef, ChunkAddress, ChunkId, ChunkRecord,
    ChunkSink, ChunkStore, ChunkWrite, GroupChunks, GroupWrite, Namespace, Precondition,
    RECORD_CALLS_IN_FLIGHT, ReadShape, RecordChange, RecordWrite, RecordsPlan, RecordsSink,
    SinkPlan, SinkShape, SpaceReport, UnloggedSink, grouped,
};
use saltblob_core::schedule::current_class;
use saltblob_core::{Error, KeyDisplay, Result};

use crate::commit_gate::CommitGate;
use crate::config::RocksConfig;
use crate::core::{CF_CHUNKS, CF_MANIFESTS, CF_SYSTEM, Change, Conditional, RocksCore};
use crate::error::NAME;
use crate::extent::format::Pointer;
use crate::extent::{Extents, IoPriority, Wanted};
use crate::keys;

/// Largest encoded chunk accepted.
pub const MAX_CHUNK_BYTES: u32 = 64 << 20;
/// Largest batch of chunk bytes written in one `WriteBatch`.
const MAX_BATCH_BYTES: usize = 16 << 20;

/// The embedded backend: RocksDB with blob files for the chunks of small and medium blobs, and extent files of
/// saltblob's own for large ones.
///
/// Column families: `manifests` (blob key → manifest), `chunks` (chunk key → encoded chunk, in blob files, or
/// a pointer into the version's extent file), `system` (internal records and the format marker). Extent files
/// live in `<path>/extents/` (`crate::extent`).
///
/// Large puts ([`RocksConfig::extent_min_bytes`]) write their chunk records once, with aligned direct I/O, into
/// an extent file that grows with them, and a pointer per chunk through the write-ahead log (unsynced); before
/// the commit the file is `fdatasync`ed and its directory `fsync`ed ([`ChunkStore::sync_chunk_records`]), and
/// the synced commit that follows makes the pointers durable with it (one ordered log).
///
/// Chunks of small puts go through the write-ahead log unsynced; the manifest commit is written after them and
/// synced (by default), and RocksDB recovers the log in order (point-in-time recovery), so a recovered manifest
/// always has its chunks. Chunks of large puts ([`RocksConfig::unlogged_min_bytes`]) skip the log: each of their
/// bytes is written once, to a blob file, when their memtable is flushed; before such a put commits, it flushes
/// the chunk memtables and waits ([`ChunkStore::sync_unlogged_chunks`]), and a flush's files are synced before
/// RocksDB records them, so again a recovered manifest always has its chunks.
pub struct RocksStore {
    core: Arc<RocksCore>,
    extents: Arc<Extents>,
    gate: Arc<CommitGate>,
}

impl std::fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.core.config().path)
            .finish()
    }
}

impl RocksStore {
    /// Opens (creating if missing) the database described by `config`.
    pub fn open(config: RocksConfig) -> Result<Self> {
        let gate = Arc::new(CommitGate::new(config.extent_yield));
        let core = Arc::new(RocksCore::open(config, Arc::clone(&gate))?);
        let extents = Arc::new(Extents::open(core.config(), Arc::clone(&gate))?);
        crate::backup::remove_leftover_staging(&core.config().path);
        Ok(Self {
            core,
            extents,
            gate,
        })
    }

    /// The path of the extent file of `blob` (which may not exist): for tests and tools.
    pub fn extent_path(&self, blob: &BlobRef) -> std::path::PathBuf {
        self.extents.path_of(blob)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &RocksConfig {
        self.core.config()
    }

    /// Chunk writes issued as RocksDB low-priority writes so far (those of a background class, with
    /// [`RocksConfig::bulk_low_pri`]).
    pub fn low_pri_chunk_writes(&self) -> u64 {
        self.core.low_pri_chunk_writes()
    }

    /// Flushes of the chunk memtables done so far to make unlogged chunks durable (at most one per large put;
    /// concurrent puts share one).
    pub fn unlogged_flushes(&self) -> u64 {
        self.core.unlogged_flushes()
    }

    /// How many extent reads and writes stood back so far while a synced commit was pending
    /// ([`RocksConfig::extent_yield`]), and how long they waited in all.
    pub fn extent_stood_back(&self) -> (u64, std::time::Duration) {
        self.gate.stood_back()
    }

    /// How many extent reads and writes ran in the kernel's idle I/O class so far
    /// ([`RocksConfig::bulk_idle_io`]).
    pub fn extent_idle_ios(&self) -> u64 {
        self.extents.idle_ios()
    }

    /// Times the engine was reopened in this process after a write ran out of file descriptors (RocksDB takes
    /// no write after that until reopened; the store reopens it once descriptors are free).
    pub fn engine_reopens(&self) -> u64 {
        self.core.reopens()
    }

    /// Flushes memtables and syncs the write-ahead log (for tests and orderly shutdown).
    pub fn flush(&self) -> Result<()> {
        self.core.flush()
    }

    /// The record's column family and storage key.
    fn record_location(ns: Namespace, key: &[u8]) -> (&'static str, Vec<u8>) {
        match ns {
            Namespace::Manifest => (CF_MANIFESTS, key.to_vec()),
            _ => (CF_SYSTEM, keys::system_key(ns, key)),
        }
    }

    /// Applies `change` to record `key` of `ns` if `cond` holds. Writes to manifests (the commit point) are
    /// synced as the `sync` setting says; internal records are rebuilt or collected if lost, so never synced.
    async fn write_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
        change: Change,
    ) -> Result<RecordWrite> {
        let (cf_name, storage_key) = Self::record_location(ns, key);
        let sync = ns == Namespace::Manifest && self.core.config().sync;
        self.core
            .conditional(cf_name, storage_key, sync, cond, change)
            .await
    }

    /// Writes chunks in one batch, through the write-ahead log unless `unlogged`.
    async fn write_chunks(
        &self,
        blob: &BlobRef,
        chunks: Vec<ChunkWrite>,
        unlogged: bool,
    ) -> Result<()> {
        self.core
            .write_chunks(Self::chunk_entries(blob, chunks), unlogged)
            .await
    }

    /// `chunks` of `blob` as entries of the chunk column family: chunk key, encoded chunk.
    fn chunk_entries(blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Vec<(Vec<u8>, Bytes)> {
        chunks
            .into_iter()
            .map(|c| (keys::chunk_key(blob, c.salt, c.index), c.data))
            .collect()
    }
}

#[async_trait]
impl ChunkStore for RocksStore {
    fn info(&self) -> BackendInfo {
        BackendInfo::new(NAME, MAX_CHUNK_BYTES, MAX_BATCH_BYTES, true).with_exclusive()
    }

    /// A put of at least `extent_min_bytes` goes to an extent file of its version's own, in calls of
    /// `extent_io_bytes`, two at a time; one of at least `unlogged_min_bytes` to the blob files, out of the
    /// write-ahead log, flushed before the commit; a smaller one whose chunks fit one call goes into its commit's
    /// write batch, any other is written plainly. Every put commits with one atomic write batch.
    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        let config = self.core.config();
        let at_least = |min: Option<u64>| min.is_some_and(|min| plan.at_least >= min);
        let other: Option<Box<dyn ChunkSink>> = if at_least(config.extent_min_bytes) {
            let shape = SinkShape::plain()
                .with_batch_bytes(Some(config.extent_io_bytes))
                .with_calls_in_flight(Some(RECORD_CALLS_IN_FLIGHT));
            Some(Box::new(RecordsSink {
                shape,
                plan: plan.records_plan(),
            }))
        } else if at_least(config.unlogged_min_bytes) {
            Some(Box::new(UnloggedSink {
                shape: SinkShape::plain(),
            }))
        } else {
            None
        };
        grouped(plan, other)
    }

    /// A version in an extent file is read `extent_read_bytes` a call, `extent_read_depth` calls in flight: the
    /// device's best request size and depth (`saltblob probe`).
    fn read_shape(&self, size: u64) -> ReadShape {
        let config = self.core.config();
        match config.extent_min_bytes {
            Some(min) if size >= min => {
                ReadShape::new(config.extent_read_bytes, config.extent_read_depth)
            }
            _ => ReadShape::default(),
        }
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let (cf_name, storage_key) = Self::record_location(ns, key);
        self.core.get(cf_name, storage_key).await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.write_record(ns, key, cond, Change::Put(value)).await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.write_record(ns, key, cond.for_delete(), Change::Delete)
            .await
    }

    /// One range deletion of the partition's keys in the system column family.
    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        let start = keys::system_key(ns, part);
        let end = keys::successor_of_prefix(&start);
        self.core.delete_range(CF_SYSTEM, start, end).await
    }

    /// The chunks go into the chunk column family's blob files, as [`ChunkStore::put_chunks`] puts them, in
    /// the group's write batch.
    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        let sync = self.core.config().sync && changes.iter().any(|c| c.ns == Namespace::Manifest);
        let writes = changes
            .into_iter()
            .map(|c| {
                let (cf_name, key) = Self::record_location(c.ns, &c.key);
                let cond = c.condition().clone();
                let change = c.value.map_or(Change::Delete, Change::Put);
                Conditional {
                    cf_name,
                    key,
                    cond,
                    change,
                }
            })
            .collect();
        let chunks = chunks.map_or_else(Vec::new, |GroupChunks { blob, chunks }| {
            Self::chunk_entries(&blob, chunks)
        });
        self.core.conditional_group(writes, chunks, sync).await
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let (cf_name, storage_prefix) = Self::record_location(ns, prefix);
        let strip = storage_prefix.len() - prefix.len();
        let start = start_after.map(|s| Self::record_location(ns, s).1);
        let entries = self
            .core
            .scan(cf_name, storage_prefix, start, limit)
            .await?;
        Ok(entries
            .into_iter()
            .map(|(k, v)| {
                (
                    Bytes::copy_from_slice(k.get(strip..).unwrap_or_default()),
                    Bytes::from(v),
                )
            })
            .collect())
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.write_chunks(blob, chunks, false).await
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.write_chunks(blob, chunks, true).await
    }

    /// Flushes the chunk memtables unless a flush already covers every completed unlogged write
    /// (`RocksCore::sync_unlogged`).
    async fn sync_unlogged_chunks(&self) -> Result<()> {
        self.core.sync_unlogged().await
    }

    /// Creates the version's extent file (moving the store to database format 2 first, once).
    async fn begin_chunk_records(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        self.core.mark_extents().await?;
        self.extents.begin(blob, plan).await
    }

    /// Copies the records into the extent file's I/O buffers, then writes their pointers through the log
    /// (unsynced: the synced commit makes them durable). A retried call writes its records again, elsewhere in
    /// the file, and points to the new copies.
    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        let placed = self.extents.append(blob, &records).await?;
        drop(records);
        let entries = placed
            .into_iter()
            .map(|(salt, index, p)| {
                (
                    keys::chunk_key(blob, salt, index),
                    Bytes::copy_from_slice(&p.encode()),
                )
            })
            .collect();
        self.core.write_chunks(entries, false).await
    }

    /// `fdatasync` of the extent file, and `fsync` of its directory.
    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        self.extents.sync(blob).await
    }

    /// Chunks in blob files come back as stored; pointers are followed into the version's extent file, read in
    /// runs of adjacent records on the same blocking thread.
    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let keys: Vec<Vec<u8>> = chunks
            .iter()
            .map(|c| keys::chunk_key(blob, c.salt, c.index))
            .collect();
        let extents = Arc::clone(&self.extents);
        let priority = IoPriority::of(current_class().as_ref(), self.core.config().bulk_idle_io);
        let (blob, ids) = (blob.clone(), chunks.to_vec());
        self.core
            .blocking(move |core| {
                let mut slots = core.multi_get(CF_CHUNKS, &keys)?;
                let mut wanted = Vec::new();
                for (slot, (value, id)) in slots.iter_mut().zip(&ids).enumerate() {
                    let what = || {
                        format!(
                            "chunk {} of key \"{}\" version {}",
                            id.index,
                            KeyDisplay::from(&blob.key[..]),
                            blob.version
                        )
                    };
                    if let Some(pointer) = value
                        .as_deref()
                        .map(|v| Pointer::decode(v, what))
                        .transpose()?
                        .flatten()
                    {
                        *value = None;
                        wanted.push(Wanted {
                            slot,
                            index: id.index,
                            pointer,
                        });
                    }
                }
                for (slot, bytes) in extents.read(&blob, wanted, priority)? {
                    if let Some(s) = slots.get_mut(slot) {
                        *s = Some(bytes);
                    }
                }
                Ok(slots)
            })
            .await
    }

    /// The extent file goes first (a put still writing it stops), then the chunk keys: a crash in between
    /// leaves pointers without a file, which the next gc or `fsck --repair` removes like any orphaned chunks.
    async fn delete_chunks(
        &self,
        blob: &BlobRef,
        salt_count: u32,
        _chunk_count: u64,
    ) -> Result<()> {
        self.extents.remove(blob).await?;
        let (start, end) = keys::version_range(blob, salt_count);
        self.core.delete_range(CF_CHUNKS, start, end).await
    }

    /// `extent` when the version has an extent file, else `blob files`.
    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        let kind = if self.extents.exists(blob) {
            "extent"
        } else {
            "blob files"
        };
        Ok(Some(kind.to_owned()))
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        self.core.scan_keys(CF_CHUNKS, |k| {
            keys::parse_chunk_key(k).ok_or_else(|| {
                Error::corrupt(
                    "chunk index of the embedded store",
                    format!("key {:?} does not decode", k.escape_ascii().to_string()),
                )
            })
        })
    }

    /// Every file in the extent directory of saltblob's naming whose header names its version and key.
    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<BlobRef>>(256);
        let extents = Arc::clone(&self.extents);
        tokio::task::spawn_blocking(move || extents.list(|item| tx.blocking_send(item).is_ok()));
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed()
    }

    /// Compacts (see `RocksCore::reclaim_space`); the figures include the extent files: after, those on disk
    /// now; before, those plus the files deleted since the last report (the reclaim pass that precedes this
    /// call unlinked them, returning their space already).
    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        let mut report = self.core.reclaim_space().await?;
        let freed = self.extents.take_freed();
        let extents = Arc::clone(&self.extents);
        let bytes = tokio::task::spawn_blocking(move || extents.disk_bytes())
            .await
            .map_err(crate::error::join)?;
        report.bytes_before += bytes + freed;
        report.bytes_after += bytes;
        Ok(Some(report))
    }

    /// A checkpoint of RocksDB and links of the extent files, with deletions held back meanwhile (the
    /// `backup` module).
    async fn backup(
        &self,
        dest: &std::path::Path,
        options: &BackupOptions,
    ) -> Result<Option<BackupReport>> {
        crate::backup::backup(&self.core, &self.extents, dest, options)
            .await
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use saltblob_core::{BlobStore, GetOptions, PriorityClass, PutOptions, StoreConfig};

    use super::*;
    use crate::blob_files;
    use crate::core::WritePriority;

    /// A store opened on `config`, and a blob store over it with the default settings.
    fn open_blobs(config: RocksConfig) -> (Arc<RocksStore>, BlobStore) {
        let store = Arc::new(RocksStore::open(config).expect("open"));
        let blobs = BlobStore::new(
            Arc::clone(&store) as Arc<dyn ChunkStore>,
            StoreConfig::default(),
        )
        .expect("store");
        (store, blobs)
    }

    /// Low-priority chunk writes of `store` after one put of a multi-chunk blob in `class`.
    async fn low_pri_writes_after_put(config: RocksConfig, class: PriorityClass) -> u64 {
        let (store, blobs) = open_blobs(config);
        let data = Bytes::from(vec![3u8; 4 << 20]);
        let options = PutOptions::new().with_priority(class);
        blobs.put("k", data, &options).await.expect("put");
        store.low_pri_chunk_writes()
    }

    /// Chunks of a background class are written as RocksDB low-priority writes, and only those: not chunks of
    /// `interactive`, not chunks written outside any class, not with `bulk_low_pri=false`.
    #[tokio::test]
    async fn only_chunk_writes_of_background_classes_are_low_priority() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = |name: &str| {
            let mut config = RocksConfig::new(dir.path().join(name));
            config.bulk_low_pri = true;
            config
        };
        let bulk = low_pri_writes_after_put(config("bulk"), PriorityClass::bulk()).await;
        assert!(bulk > 0, "a bulk put wrote no low-priority chunk batch");
        let interactive =
            low_pri_writes_after_put(config("interactive"), PriorityClass::interactive()).await;
        assert_eq!(
            interactive, 0,
            "an interactive put wrote low-priority chunks"
        );
        let mut off = config("off");
        off.bulk_low_pri = false;
        assert_eq!(
            low_pri_writes_after_put(off, PriorityClass::bulk()).await,
            0,
            "bulk_low_pri=false still wrote low-priority chunks"
        );

        let store = RocksStore::open(config("unscheduled")).expect("open");
        put_one_chunk(&store).await;
        assert_eq!(store.low_pri_chunk_writes(), 0, "a write outside any class");
        assert_eq!(
            WritePriority::of_chunk_write(None, true),
            WritePriority::Normal
        );
    }

    /// Extent reads and writes run in the kernel's idle I/O class after a put and a get of a 4 MiB value (in an
    /// extent file) in `class`: how many did, after the put and after the get.
    async fn idle_ios_after_put_and_get(
        mut config: RocksConfig,
        class: PriorityClass,
    ) -> (u64, u64) {
        config.extent_min_bytes = Some(1 << 20);
        let (store, blobs) = open_blobs(config);
        let data = Bytes::from(vec![5u8; 4 << 20]);
        let options = PutOptions::new().with_priority(class.clone());
        blobs.put("k", data.clone(), &options).await.expect("put");
        let after_put = store.extent_idle_ios();
        let got = blobs
            .get_with("k", &GetOptions::new().with_priority(class))
            .await
            .expect("get");
        assert!(got == data, "the value reads back whole");
        (after_put, store.extent_idle_ios())
    }

    /// The extent writes of a background class's put and the reads of its get run in the idle I/O class, and
    /// only those: not an interactive put's or get's, not with `bulk_idle_io=false`.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn only_extent_io_of_background_classes_runs_in_the_idle_class() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = |name: &str| RocksConfig::new(dir.path().join(name));
        let (put, get) = idle_ios_after_put_and_get(config("bulk"), PriorityClass::bulk()).await;
        assert!(put >= 4, "a bulk put's 4 MiB went out in {put} idle writes");
        assert!(
            get > put,
            "a bulk get's reads were not idle: {put} then {get}"
        );
        let interactive =
            idle_ios_after_put_and_get(config("interactive"), PriorityClass::interactive()).await;
        assert_eq!(interactive, (0, 0), "interactive extent I/O ran idle");
        let mut off = config("off");
        off.bulk_idle_io = false;
        assert_eq!(
            idle_ios_after_put_and_get(off, PriorityClass::bulk()).await,
            (0, 0),
            "bulk_idle_io=false still ran extent I/O idle"
        );
    }

    /// Writes one 64 KiB chunk of key `k`, version 1, outside any class.
    async fn put_one_chunk(store: &RocksStore) {
        let blob = BlobRef {
            key: Bytes::from_static(b"k"),
            version: saltblob_core::VersionId(1),
        };
        let chunk = ChunkWrite {
            salt: 0,
            index: 0,
            data: Bytes::from(vec![7u8; 64 << 10]),
        };
        store.put_chunks(&blob, vec![chunk]).await.expect("put");
    }

    /// Opening removes the blob files a crashed flush left unfinished, and nothing else: not a foreign file
    /// that merely ends in `.blob`, not a file named like RocksDB's that is not one, not a live blob file even
    /// when its footer is damaged (deleting it would turn damage into silent loss).
    #[tokio::test]
    async fn open_removes_only_unfinished_blob_files_that_are_not_live() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let store = RocksStore::open(RocksConfig::new(&path)).expect("open");
        put_one_chunk(&store).await;
        store.flush().expect("flush");
        drop(store);

        let live = blob_files::named(&path);
        assert_eq!(live.len(), 1, "one blob file after the flush: {live:?}");
        let live = &live[0].path;
        // Damage the live file's footer (keeping its size).
        let mut bytes = std::fs::read(live).expect("read live blob file");
        let footer_at = bytes.len() - 32;
        bytes[footer_at..].fill(0);
        std::fs::write(live, &bytes).expect("damage footer");

        let magic = 0x0024_8f37_u32.to_le_bytes();
        let mut torn = vec![0u8; 5000];
        torn[..4].copy_from_slice(&magic);
        let file = |name: &str| path.join(name);
        std::fs::write(file("x.blob"), [0u8; 200]).expect("foreign file");
        std::fs::write(
            file("000900.blob"),
            b"a note, not a blob file of RocksDB".repeat(8),
        )
        .expect("foreign file named like RocksDB's");
        std::fs::write(file("000901.blob"), &torn).expect("torn blob file");
        std::fs::write(file("000902.blob"), b"").expect("empty blob file");

        let store = RocksStore::open(RocksConfig::new(&path)).expect("reopen");
        for kept in [live.clone(), file("x.blob"), file("000900.blob")] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        for removed in [file("000901.blob"), file("000902.blob")] {
            assert!(!removed.exists(), "{} was kept", removed.display());
        }
        drop(store);
    }
}
