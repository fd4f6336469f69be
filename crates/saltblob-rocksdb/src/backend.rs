//! [`RocksStore`]: the [`ChunkStore`] implementation on RocksDB.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, ColumnFamilyDescriptor, CompactOptions, DB,
    DBCompressionType, DBRecoveryMode, Direction, Env, IteratorMode, Options, WriteBatch,
    WriteOptions,
};
use saltblob_core::backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition,
    Previous, RecordWrite, SpaceReport,
};
use saltblob_core::schedule::{ClassTag, current_class};
use saltblob_core::{Error, Result};

use crate::config::{BackgroundPriority, BlobCompression, RocksConfig};
use crate::{blob_files, error, keys};

/// Backend name used in errors.
pub const NAME: &str = "rocksdb";
/// Largest encoded chunk accepted.
pub const MAX_CHUNK_BYTES: u32 = 64 << 20;
/// Largest batch of chunk bytes written in one `WriteBatch`.
const MAX_BATCH_BYTES: usize = 16 << 20;
/// Format of the database layout (column families and keys); stored at first open, checked at every open.
const DB_FORMAT: u8 = 1;

const CF_MANIFESTS: &str = "manifests";
const CF_CHUNKS: &str = "chunks";
const CF_SYSTEM: &str = "system";
/// Every column family, RocksDB's default one included.
const ALL_COLUMN_FAMILIES: [&str; 4] = [
    rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
    CF_MANIFESTS,
    CF_CHUNKS,
    CF_SYSTEM,
];
const LOCK_STRIPES: usize = 64;
/// Refill period of the background rate limiter (RocksDB's default).
const RATE_LIMIT_REFILL_MICROS: i64 = 100_000;
/// How much more often the rate limiter serves flushes than compactions (RocksDB's default).
const RATE_LIMIT_FAIRNESS: i32 = 10;

/// How RocksDB treats one chunk write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WritePriority {
    /// An ordinary write.
    Normal,
    /// A low-priority write: RocksDB slows it down first when compaction falls behind.
    Low,
}

impl WritePriority {
    /// The priority of a chunk write in `class` (none: outside any scheduled operation) when background classes
    /// get low-priority writes (`bulk_low_pri`).
    pub(crate) fn of_chunk_write(class: Option<&ClassTag>, bulk_low_pri: bool) -> Self {
        match class {
            Some(tag) if bulk_low_pri && tag.is_background() => Self::Low,
            _ => Self::Normal,
        }
    }

    /// Unsynced write options of this priority, through the write-ahead log unless `unlogged`.
    fn write_options(self, unlogged: bool) -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.set_low_pri(self == Self::Low);
        wo.disable_wal(unlogged);
        wo
    }
}

/// The embedded backend: RocksDB with blob files for chunk data.
///
/// Column families: `manifests` (blob key → manifest), `chunks` (chunk key → encoded chunk, in blob files),
/// `system` (internal records and the format marker).
///
/// Chunks of small puts go through the write-ahead log unsynced; the manifest commit is written after them and
/// synced (by default), and RocksDB recovers the log in order (point-in-time recovery), so a recovered manifest
/// always has its chunks. Chunks of large puts ([`RocksConfig::unlogged_min_bytes`]) skip the log: each of their
/// bytes is written once, to a blob file, when their memtable is flushed; before such a put commits, it flushes
/// the chunk memtables and waits ([`ChunkStore::sync_unlogged_chunks`]), and a flush's files are synced before
/// RocksDB records them, so again a recovered manifest always has its chunks.
pub struct RocksStore {
    db: Arc<DB>,
    config: RocksConfig,
    stripes: Arc<Vec<Mutex<()>>>,
    hasher: RandomState,
    /// Held while space is being reclaimed: one compaction of that kind at a time.
    compacting: Arc<Mutex<()>>,
    /// Chunk writes issued as low-priority writes so far.
    low_pri_chunk_writes: AtomicU64,
    /// Unlogged chunk writes completed so far.
    unlogged_writes: Arc<AtomicU64>,
    /// How many of the unlogged writes a finished flush covers; held while flushing, so that concurrent syncs
    /// share one flush.
    unlogged_synced: Arc<Mutex<u64>>,
    /// Flushes done to sync unlogged chunks.
    unlogged_flushes: AtomicU64,
}

impl std::fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.config.path)
            .finish()
    }
}

impl RocksStore {
    /// Opens (creating if missing) the database described by `config`.
    pub fn open(config: RocksConfig) -> Result<Self> {
        if config.path.is_file() {
            return Err(Error::backend(
                NAME,
                format!(
                    "cannot open the store at {}: it is a file, not a directory",
                    config.path.display()
                ),
                false,
            ));
        }
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
        db_opts.increase_parallelism(
            i32::try_from(std::thread::available_parallelism().map_or(2, |n| n.get())).unwrap_or(2),
        );
        db_opts.set_max_background_jobs(4);
        db_opts.set_bytes_per_sync(1 << 20);
        db_opts.set_wal_bytes_per_sync(config.wal_bytes_per_sync);
        db_opts.set_max_total_wal_size(512 << 20);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_enable_pipelined_write(config.pipelined_write);
        if config.background_rate_limit > 0 {
            db_opts.set_auto_tuned_ratelimiter(
                i64::try_from(config.background_rate_limit).unwrap_or(i64::MAX),
                RATE_LIMIT_REFILL_MICROS,
                RATE_LIMIT_FAIRNESS,
            );
        }
        if config.background_priority != BackgroundPriority::Normal {
            let mut env = Env::new().map_err(error::map)?;
            env.lower_thread_pool_cpu_priority();
            env.lower_thread_pool_io_priority();
            if config.background_priority == BackgroundPriority::Low {
                env.lower_high_priority_thread_pool_cpu_priority();
                env.lower_high_priority_thread_pool_io_priority();
            }
            db_opts.set_env(&env);
        }

        let mut chunk_opts = Options::default();
        chunk_opts.set_enable_blob_files(true);
        chunk_opts.set_min_blob_size(config.min_blob_size);
        chunk_opts.set_blob_file_size(config.blob_file_size);
        chunk_opts.set_blob_compression_type(match config.blob_compression {
            BlobCompression::None => DBCompressionType::None,
            BlobCompression::Lz4 => DBCompressionType::Lz4,
            BlobCompression::Zstd => DBCompressionType::Zstd,
        });
        chunk_opts.set_enable_blob_gc(config.blob_gc);
        chunk_opts.set_blob_gc_age_cutoff(config.blob_gc_age_cutoff);
        chunk_opts.set_blob_gc_force_threshold(config.blob_gc_force_threshold);
        chunk_opts.set_write_buffer_size(config.write_buffer_size);
        chunk_opts.set_max_write_buffer_number(
            i32::try_from(config.max_write_buffer_number).unwrap_or(i32::MAX),
        );
        chunk_opts.set_compression_type(DBCompressionType::None);

        let mut small_opts = Options::default();
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        small_opts.set_block_based_table_factory(&table);
        small_opts.set_compression_type(DBCompressionType::Lz4);

        let cfs = vec![
            ColumnFamilyDescriptor::new(CF_MANIFESTS, small_opts.clone()),
            ColumnFamilyDescriptor::new(CF_CHUNKS, chunk_opts),
            ColumnFamilyDescriptor::new(CF_SYSTEM, small_opts),
        ];
        // Listed before the open: files of earlier processes only, none that this one's flushes are writing.
        let earlier_blob_files = blob_files::named(&config.path);
        let db = DB::open_cf_descriptors(&db_opts, &config.path, cfs)
            .map_err(|e| error::open(&config.path, e))?;
        blob_files::remove_unfinished(&db, &ALL_COLUMN_FAMILIES, &earlier_blob_files);
        let store = Self {
            db: Arc::new(db),
            config,
            stripes: Arc::new((0..LOCK_STRIPES).map(|_| Mutex::new(())).collect()),
            hasher: RandomState::new(),
            compacting: Arc::new(Mutex::new(())),
            low_pri_chunk_writes: AtomicU64::new(0),
            unlogged_writes: Arc::new(AtomicU64::new(0)),
            unlogged_synced: Arc::new(Mutex::new(0)),
            unlogged_flushes: AtomicU64::new(0),
        };
        store.check_format()?;
        Ok(store)
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &RocksConfig {
        &self.config
    }

    /// Chunk writes issued as RocksDB low-priority writes so far (those of a background class, with
    /// [`RocksConfig::bulk_low_pri`]).
    pub fn low_pri_chunk_writes(&self) -> u64 {
        self.low_pri_chunk_writes.load(Ordering::Relaxed)
    }

    /// Flushes of the chunk memtables done so far to make unlogged chunks durable (at most one per large put;
    /// concurrent puts share one).
    pub fn unlogged_flushes(&self) -> u64 {
        self.unlogged_flushes.load(Ordering::Relaxed)
    }

    /// Writes chunks in one batch, through the write-ahead log unless `unlogged`.
    async fn write_chunks(
        &self,
        blob: &BlobRef,
        chunks: Vec<ChunkWrite>,
        unlogged: bool,
    ) -> Result<()> {
        let blob = blob.clone();
        // The class is task-local: read it here, not on the blocking thread.
        let priority =
            WritePriority::of_chunk_write(current_class().as_ref(), self.config.bulk_low_pri);
        if priority == WritePriority::Low {
            self.low_pri_chunk_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.blocking(move |db| {
            let handle = cf(db, CF_CHUNKS)?;
            let mut batch = WriteBatch::default();
            for c in &chunks {
                batch.put_cf(handle, keys::chunk_key(&blob, c.salt, c.index), &c.data);
            }
            // Unsynced: the synced manifest commit that follows makes logged chunks durable too (one ordered
            // log); unlogged ones are made durable by `sync_unlogged_chunks` before it.
            db.write_opt(batch, &priority.write_options(unlogged))
                .map_err(error::map)
        })
        .await?;
        if unlogged {
            self.unlogged_writes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Flushes memtables and syncs the write-ahead log (for tests and orderly shutdown).
    pub fn flush(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(error::map)?;
        for name in [CF_MANIFESTS, CF_CHUNKS, CF_SYSTEM] {
            self.db.flush_cf(&cf(&self.db, name)?).map_err(error::map)?;
        }
        Ok(())
    }

    fn check_format(&self) -> Result<()> {
        let system = cf(&self.db, CF_SYSTEM)?;
        match self
            .db
            .get_cf(&system, keys::FORMAT_MARKER_KEY)
            .map_err(error::map)?
        {
            None => {
                let mut wo = WriteOptions::default();
                wo.set_sync(true);
                self.db
                    .put_cf_opt(&system, keys::FORMAT_MARKER_KEY, [DB_FORMAT], &wo)
                    .map_err(error::map)
            }
            Some(v) if v == [DB_FORMAT] => Ok(()),
            Some(v) => Err(Error::corrupt(
                format!("store at {}", self.config.path.display()),
                format!(
                    "database format marker is {v:?}; this build reads format [{DB_FORMAT}] (is it from a newer saltblob?)"
                ),
            )),
        }
    }

    /// Runs `f` on a blocking thread with the database.
    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&DB) -> Result<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(error::join)?
    }

    /// The record's column family and storage key.
    fn record_location(ns: Namespace, key: &[u8]) -> (&'static str, Vec<u8>) {
        match ns {
            Namespace::Manifest => (CF_MANIFESTS, key.to_vec()),
            _ => (CF_SYSTEM, keys::system_key(ns, key)),
        }
    }

    fn stripe_of(&self, cf_name: &str, key: &[u8]) -> usize {
        (self.hasher.hash_one((cf_name, key)) % LOCK_STRIPES as u64) as usize
    }

    /// Whether writes to `ns` are synced: manifests (the commit point) follow the `sync` setting; internal
    /// records are rebuilt or collected if lost.
    fn write_options(&self, ns: Namespace) -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.set_sync(ns == Namespace::Manifest && self.config.sync);
        wo
    }

    /// Reads, checks `cond` and applies `write` under the record's lock stripe.
    async fn conditional(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
        write: impl FnOnce(&mut WriteBatch, &rocksdb::ColumnFamily, &[u8]) + Send + 'static,
    ) -> Result<RecordWrite> {
        let (cf_name, storage_key) = Self::record_location(ns, key);
        let stripe = self.stripe_of(cf_name, &storage_key);
        let stripes = Arc::clone(&self.stripes);
        let wo = self.write_options(ns);
        let cond = cond.clone();
        self.blocking(move |db| {
            let _guard: MutexGuard<'_, ()> = stripes
                .get(stripe)
                .ok_or_else(|| Error::backend(NAME, "lock stripe out of range", false))?
                .lock()
                .map_err(|_| Error::backend(NAME, "record lock poisoned by a panic", false))?;
            let handle = cf(db, cf_name)?;
            let current = db
                .get_cf(&handle, &storage_key)
                .map_err(error::map)?
                .map(Bytes::from);
            if !cond.holds(current.as_ref()) {
                return Ok(RecordWrite::ConditionFailed(current));
            }
            let mut batch = WriteBatch::default();
            write(&mut batch, handle, &storage_key);
            db.write_opt(batch, &wo).map_err(error::map)?;
            Ok(RecordWrite::Done(
                current.map_or(Previous::Absent, Previous::Value),
            ))
        })
        .await
    }
}

/// Bytes of SST and blob files of every column family.
fn disk_bytes(db: &DB) -> Result<u64> {
    let mut total = 0;
    for name in [CF_MANIFESTS, CF_CHUNKS, CF_SYSTEM] {
        let handle = cf(db, name)?;
        for property in [
            "rocksdb.total-sst-files-size",
            "rocksdb.total-blob-file-size",
        ] {
            total += db
                .property_int_value_cf(handle, property)
                .map_err(error::map)?
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// Compacts all of column family `name`, down to the bottommost level.
fn compact_all(db: &DB, name: &str) -> Result<()> {
    let mut opts = CompactOptions::default();
    opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
    db.compact_range_cf_opt(cf(db, name)?, None::<&[u8]>, None::<&[u8]>, &opts);
    Ok(())
}

/// Returns the space of deleted chunks: compacts the chunk index (small: blob files hold the data), so that
/// deleted ranges are dropped and blob files holding only garbage are removed; then, when more than
/// `space_reclaim_threshold` of the remaining blob bytes are garbage, compacts again with blob garbage collection over every
/// blob file, which moves the live chunks out of partly-garbage files (rewriting live data).
fn reclaim_space_blocking(db: &DB, config: &RocksConfig) -> Result<SpaceReport> {
    let threshold = config.space_reclaim_threshold;
    let bytes_before = disk_bytes(db)?;
    db.flush_wal(true).map_err(error::map)?;
    compact_all(db, CF_SYSTEM)?;
    compact_all(db, CF_MANIFESTS)?;
    compact_all(db, CF_CHUNKS)?;
    let chunks = cf(db, CF_CHUNKS)?;
    let live = db
        .property_int_value_cf(chunks, "rocksdb.live-blob-file-size")
        .map_err(error::map)?
        .unwrap_or(0);
    let garbage = db
        .property_int_value_cf(chunks, "rocksdb.live-blob-file-garbage-size")
        .map_err(error::map)?
        .unwrap_or(0);
    #[expect(clippy::cast_precision_loss, reason = "a ratio of byte counts")]
    let rewrite = live > 0 && garbage as f64 > threshold * live as f64;
    if rewrite {
        let on = |enabled: bool, cutoff: f64| {
            db.set_options_cf(
                chunks,
                &[
                    (
                        "enable_blob_garbage_collection",
                        if enabled { "true" } else { "false" },
                    ),
                    ("blob_garbage_collection_age_cutoff", &cutoff.to_string()),
                ],
            )
            .map_err(error::map)
        };
        on(true, 1.0)?;
        let compacted = compact_all(db, CF_CHUNKS);
        let restored = on(config.blob_gc, config.blob_gc_age_cutoff);
        compacted?;
        restored?;
    }
    Ok(SpaceReport {
        bytes_before,
        bytes_after: disk_bytes(db)?,
        rewrote_live_data: rewrite,
    })
}

fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a rocksdb::ColumnFamily> {
    db.cf_handle(name)
        .ok_or_else(|| Error::backend(NAME, format!("column family {name} is missing"), false))
}

#[async_trait]
impl ChunkStore for RocksStore {
    fn info(&self) -> BackendInfo {
        BackendInfo::new(NAME, MAX_CHUNK_BYTES, MAX_BATCH_BYTES, true)
            .with_unlogged_chunks(self.config.unlogged_min_bytes)
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let (cf_name, storage_key) = Self::record_location(ns, key);
        self.blocking(move |db| {
            Ok(db
                .get_cf(cf(db, cf_name)?, storage_key)
                .map_err(error::map)?
                .map(Bytes::from))
        })
        .await
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.conditional(ns, key, cond, move |batch, handle, k| {
            batch.put_cf(handle, k, &value)
        })
        .await
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        self.conditional(ns, key, cond.for_delete(), |batch, handle, k| {
            batch.delete_cf(handle, k)
        })
        .await
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
        self.blocking(move |db| {
            // From the prefix, or from `start_after` if that lies beyond it (a `start_after` before the prefix
            // excludes nothing).
            let from = start
                .as_deref()
                .filter(|s| *s > storage_prefix.as_slice())
                .unwrap_or(&storage_prefix);
            let mut out = Vec::new();
            for item in db.iterator_cf(
                cf(db, cf_name)?,
                IteratorMode::From(from, Direction::Forward),
            ) {
                let (k, v) = item.map_err(error::map)?;
                if Some(&*k) == start.as_deref() {
                    continue;
                }
                if !k.starts_with(&storage_prefix) || out.len() >= limit {
                    break;
                }
                out.push((
                    Bytes::copy_from_slice(k.get(strip..).unwrap_or_default()),
                    Bytes::from(v),
                ));
            }
            Ok(out)
        })
        .await
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.write_chunks(blob, chunks, false).await
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.write_chunks(blob, chunks, true).await
    }

    /// Flushes the chunk memtables (and waits for every earlier flush of them), unless a flush that started
    /// after the last completed unlogged write already did. A flush writes its blob and table files, syncs
    /// them, then records them in RocksDB's manifest.
    async fn sync_unlogged_chunks(&self) -> Result<()> {
        let wanted = self.unlogged_writes.load(Ordering::SeqCst);
        let synced = Arc::clone(&self.unlogged_synced);
        let writes = Arc::clone(&self.unlogged_writes);
        let flushed = self
            .blocking(move |db| {
                let mut covered = synced
                    .lock()
                    .map_err(|_| Error::backend(NAME, "flush lock poisoned by a panic", false))?;
                if *covered >= wanted {
                    return Ok(false);
                }
                // Writes completed before the flush starts are in the memtables it flushes.
                let upto = writes.load(Ordering::SeqCst);
                db.flush_cf(cf(db, CF_CHUNKS)?).map_err(error::map)?;
                *covered = upto;
                Ok(true)
            })
            .await?;
        if flushed {
            self.unlogged_flushes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let keys: Vec<Vec<u8>> = chunks
            .iter()
            .map(|c| keys::chunk_key(blob, c.salt, c.index))
            .collect();
        self.blocking(move |db| {
            db.batched_multi_get_cf(cf(db, CF_CHUNKS)?, &keys, false)
                .into_iter()
                .map(|slot| {
                    slot.map(|v| v.map(|s| Bytes::copy_from_slice(&s)))
                        .map_err(error::map)
                })
                .collect()
        })
        .await
    }

    async fn delete_chunks(
        &self,
        blob: &BlobRef,
        salt_count: u32,
        _chunk_count: u64,
    ) -> Result<()> {
        let (start, end) = keys::version_range(blob, salt_count);
        self.blocking(move |db| {
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(cf(db, CF_CHUNKS)?, start, end);
            db.write_opt(batch, &WriteOptions::default())
                .map_err(error::map)
        })
        .await
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ChunkAddress>>(1024);
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let handle = match cf(&db, CF_CHUNKS) {
                Ok(h) => h,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            for item in db.iterator_cf(handle, IteratorMode::Start) {
                let addr = item.map_err(error::map).and_then(|(k, _)| {
                    keys::parse_chunk_key(&k).ok_or_else(|| {
                        Error::corrupt(
                            "chunk index of the embedded store",
                            format!("key {:?} does not decode", k.escape_ascii().to_string()),
                        )
                    })
                });
                let failed = addr.is_err();
                // Stop when the consumer went away or after reporting an error.
                if tx.blocking_send(addr).is_err() || failed {
                    return;
                }
            }
        });
        stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed()
    }

    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        let config = self.config.clone();
        let compacting = Arc::clone(&self.compacting);
        self.blocking(move |db| {
            let _one_at_a_time = compacting
                .lock()
                .map_err(|_| Error::backend(NAME, "compaction lock poisoned by a panic", false))?;
            reclaim_space_blocking(db, &config).map(Some)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use saltblob_core::{BlobStore, PriorityClass, PutOptions, StoreConfig};

    use super::*;

    /// Low-priority chunk writes of `store` after one put of a multi-chunk blob in `class`.
    async fn low_pri_writes_after_put(config: RocksConfig, class: PriorityClass) -> u64 {
        let store = Arc::new(RocksStore::open(config).expect("open"));
        let blobs = BlobStore::new(
            Arc::clone(&store) as Arc<dyn ChunkStore>,
            StoreConfig::default(),
        )
        .expect("store");
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
