//! [`RocksCore`]: the thin wrapper over the RocksDB engine. It opens the database (options, column families,
//! format check), runs the engine calls on column families and byte keys (each on a blocking thread, errors
//! mapped), serializes conditional writes with lock stripes, gives chunk writes their priority, flushes to make
//! unlogged chunks durable and compacts to return space. It knows column families and keys, not saltblob's
//! namespaces and blobs: those are the `backend` module's.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, ColumnFamily, ColumnFamilyDescriptor,
    CompactOptions, DB, DBCompressionType, DBRecoveryMode, Direction, Env, IteratorMode, Options,
    WriteBatch, WriteOptions,
};
use saltblob_core::backend::deadline;
use saltblob_core::backend::{GroupWrite, Precondition, Previous, RecordWrite, SpaceReport};
use saltblob_core::schedule::{ClassTag, current_class};
use saltblob_core::{Error, Result};

use crate::commit_gate::CommitGate;
use crate::config::{BackgroundPriority, BlobCompression, RocksConfig, SMALL_WRITE_BUFFER_SIZE};
use crate::error::{self, Exhausted, NAME, stops_the_store};
use crate::{blob_files, keys};

/// Format of the database layout (column families and keys); stored at first open, checked at every open.
/// Format 1: chunks in the `chunks` family (blob files). Format 2 adds extent files, whose chunks the family
/// holds pointers to (`docs/format.md`); a store moves to 2 when its first extent file is created, so that a
/// build that reads only format 1 refuses it instead of misreading pointers as chunks.
const DB_FORMAT: u8 = 1;
/// The format of a store that has held extent files.
const DB_FORMAT_EXTENTS: u8 = 2;

/// Column family of manifests (blob key → manifest).
pub(crate) const CF_MANIFESTS: &str = "manifests";
/// Column family of chunks (chunk key → encoded chunk, in blob files).
pub(crate) const CF_CHUNKS: &str = "chunks";
/// Column family of internal records and the format marker.
pub(crate) const CF_SYSTEM: &str = "system";
/// Every column family, RocksDB's default one included.
const ALL_COLUMN_FAMILIES: [&str; 4] = [
    rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
    CF_MANIFESTS,
    CF_CHUNKS,
    CF_SYSTEM,
];
/// Locks that serialize the conditional writes of one key (a key's stripe is a hash of its family and key). A
/// group holds its keys' stripes through its synced write, so two keys on one stripe wait for each other's log
/// sync: with 64 stripes, the slowest 1% of small puts' groups beside bulk at ρ = 0.5 waited 21 ms at the mean
/// for their stripes; with 4096 (32 KiB of locks), every paced goal at ρ = 0.5 was met in 6 of 6 runs, against
/// 1 of 6 with 64 (docs/bench/journal/isolation.md, *compactions that rewrite live chunks*).
const LOCK_STRIPES: usize = 4096;
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

/// One write of [`RocksCore::conditional_group`]: `change` to `key` of column family `cf_name`, if `cond` holds
/// on its value (a delete's condition as [`Precondition::for_delete`] reads it).
pub(crate) struct Conditional {
    pub(crate) cf_name: &'static str,
    pub(crate) key: Vec<u8>,
    pub(crate) cond: Precondition,
    pub(crate) change: Change,
}

/// The change a conditional write makes to its key.
pub(crate) enum Change {
    /// Sets the key's value.
    Put(Bytes),
    /// Removes the key.
    Delete,
}

/// How long a reopen waits for the engine calls in flight to end before it gives up, puts the engine back and
/// tries again later ([`RocksCore::reopen_if_due`]).
const REOPEN_DRAIN_WAIT: Duration = Duration::from_secs(5);
/// The shortest time between two attempts to reopen the engine.
const REOPEN_RETRY: Duration = Duration::from_secs(1);
/// Free descriptors (below the soft limit) a reopen waits for: opening the engine takes a dozen (its lock,
/// manifest, log, directories, the tables and blob files of the recovery's flush), and the engine's calls
/// after it more.
const REOPEN_FREE_FDS: u64 = 32;

/// What the reopens of the engine remember ([`RocksCore::reopen_if_due`]).
#[derive(Default)]
struct Reopening {
    /// When the last attempt began.
    last_try: Option<Instant>,
    /// Set when a reopen was refused for good: it would lose unlogged chunk writes.
    refused: bool,
}

/// The open database and the state of its writers: lock stripes, compaction lock, unlogged-write bookkeeping.
pub(crate) struct RocksCore {
    /// The engine; `None` while it is being reopened ([`RocksCore::reopen_if_due`]). Each call takes a
    /// reference for its duration.
    db: RwLock<Option<Arc<DB>>>,
    config: RocksConfig,
    stripes: Vec<Mutex<()>>,
    hasher: RandomState,
    /// Held while space is being reclaimed: one compaction of that kind at a time.
    compacting: Mutex<()>,
    /// Chunk writes issued as low-priority writes so far.
    low_pri_chunk_writes: AtomicU64,
    /// Unlogged chunk writes completed so far.
    unlogged_writes: AtomicU64,
    /// How many of the unlogged writes a finished flush covers; held while flushing, so that concurrent syncs
    /// share one flush.
    unlogged_synced: Mutex<u64>,
    /// Flushes done to sync unlogged chunks.
    unlogged_flushes: AtomicU64,
    /// Whether the format marker says [`DB_FORMAT_EXTENTS`].
    extents_marked: std::sync::atomic::AtomicBool,
    /// Counts the synced writes in progress, for which extent I/O stands back.
    gate: Arc<CommitGate>,
    /// The first engine write that failed with an I/O error, once one has: from then on every operation fails
    /// (see [`RocksCore::serving`]).
    stopped: OnceLock<String>,
    /// Set when an engine write ran out of file descriptors: RocksDB takes no write after that until reopened,
    /// which the next engine call does once descriptors are free ([`RocksCore::reopen_if_due`]).
    reopen_wanted: AtomicBool,
    /// Held by the call that reopens the engine.
    reopening: Mutex<Reopening>,
    /// Times the engine was reopened in this process.
    reopens: AtomicU64,
}

impl RocksCore {
    /// Opens (creating if missing) the database described by `config`, removes the blob files an earlier
    /// process left unfinished, and checks (or, in a new database, writes) the format marker. Its synced writes
    /// are counted by `gate`.
    pub(crate) fn open(config: RocksConfig, gate: Arc<CommitGate>) -> Result<Self> {
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
        let db = open_engine(&config)?;
        let core = Self {
            db: RwLock::new(Some(Arc::new(db))),
            config,
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: RandomState::new(),
            compacting: Mutex::new(()),
            low_pri_chunk_writes: AtomicU64::new(0),
            unlogged_writes: AtomicU64::new(0),
            unlogged_synced: Mutex::new(0),
            unlogged_flushes: AtomicU64::new(0),
            extents_marked: std::sync::atomic::AtomicBool::new(false),
            gate,
            stopped: OnceLock::new(),
            reopen_wanted: AtomicBool::new(false),
            reopening: Mutex::new(Reopening::default()),
            reopens: AtomicU64::new(0),
        };
        let format = core.check_format()?;
        core.extents_marked
            .store(format == DB_FORMAT_EXTENTS, Ordering::Relaxed);
        Ok(core)
    }

    /// The configuration the database was opened with.
    pub(crate) fn config(&self) -> &RocksConfig {
        &self.config
    }

    /// Chunk writes issued as RocksDB low-priority writes so far.
    pub(crate) fn low_pri_chunk_writes(&self) -> u64 {
        self.low_pri_chunk_writes.load(Ordering::Relaxed)
    }

    /// Flushes of the chunk memtables done so far to make unlogged chunks durable.
    pub(crate) fn unlogged_flushes(&self) -> u64 {
        self.unlogged_flushes.load(Ordering::Relaxed)
    }

    /// Flushes memtables and syncs the write-ahead log.
    pub(crate) fn flush(&self) -> Result<()> {
        self.serving()?;
        self.reopen_if_due();
        let db = self.db()?;
        self.wrote(db.flush_wal(true))?;
        for name in [CF_MANIFESTS, CF_CHUNKS, CF_SYSTEM] {
            self.wrote(db.flush_cf(cf(&db, name)?))?;
        }
        Ok(())
    }

    /// Fails once an engine write has failed with an I/O error ([`RocksCore::wrote`]).
    ///
    /// Such a write may be in the write-ahead log although it failed: a failed `fdatasync` of the log leaves
    /// its record in the file, and the engine does not apply it to the memtable. The engine refuses every
    /// later write until reopened, but would go on reading from memory, which no longer says what a reopen
    /// will find: the failed write reappears then. A delete that read its key as absent would report success,
    /// and the failed put would then undo it. So, as PostgreSQL does after a failed fsync, the store serves
    /// nothing more, reads included, until it is reopened and the log replayed.
    fn serving(&self) -> Result<()> {
        match self.stopped.get() {
            None => Ok(()),
            Some(first) => Err(Error::backend(
                NAME,
                format!(
                    "the store at {} stopped serving after a write to disk failed ({first}); reopen it: \
                     its log may hold writes that were reported as failed, which reappear then",
                    self.config.path.display()
                ),
                false,
            )),
        }
    }

    /// The result of an engine write, mapped. A failure that may leave the log saying something the engine
    /// did not apply stops the store ([`RocksCore::serving`]); one that left nothing behind does not
    /// ([`stops_the_store`]).
    fn wrote(&self, result: std::result::Result<(), rocksdb::Error>) -> Result<()> {
        result.map_err(|e| {
            if e.kind() != rocksdb::ErrorKind::IOError {
                return error::map(e);
            }
            let message = e.to_string();
            match Exhausted::of(&message) {
                Some(exhausted) if !stops_the_store(&message) => {
                    if exhausted == Exhausted::Files {
                        self.reopen_wanted.store(true, Ordering::Release);
                    }
                    exhausted.error(&self.config, e)
                }
                _ => {
                    let _ = self.stopped.set(message);
                    error::map(e)
                }
            }
        })
    }

    /// RocksDB's checkpoint of the database into the new directory `path`: memtables flushed first (unlogged
    /// chunks included), then the tables and blob files hard-linked and the live logs copied. A failure stops
    /// nothing (no write of the store's was refused): it is the backup's.
    pub(crate) fn checkpoint(&self, path: &std::path::Path) -> Result<()> {
        self.serving()?;
        let db = self.db()?;
        rocksdb::checkpoint::Checkpoint::new(&db)
            .and_then(|c| c.create_checkpoint(path))
            .map_err(|e| {
                Error::backend_caused(
                    NAME,
                    format!("backup: RocksDB's checkpoint into {}: {e}", path.display()),
                    false,
                    e,
                )
            })
    }

    /// Checks the format marker, writing it in a new database; returns the format.
    fn check_format(&self) -> Result<u8> {
        let db = self.db()?;
        match db
            .get_cf(cf(&db, CF_SYSTEM)?, keys::FORMAT_MARKER_KEY)
            .map_err(error::map)?
        {
            None => self.write_format(DB_FORMAT).map(|()| DB_FORMAT),
            Some(v) if v == [DB_FORMAT] || v == [DB_FORMAT_EXTENTS] => {
                Ok(v.first().copied().unwrap_or(DB_FORMAT))
            }
            Some(v) => Err(Error::corrupt(
                format!("store at {}", self.config.path.display()),
                format!(
                    "database format marker is {v:?}; this build reads formats [{DB_FORMAT}] and \
                     [{DB_FORMAT_EXTENTS}] (is it from a newer saltblob?)"
                ),
            )),
        }
    }

    /// Writes the format marker, synced.
    fn write_format(&self, format: u8) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        let db = self.db()?;
        self.wrote(db.put_cf_opt(cf(&db, CF_SYSTEM)?, keys::FORMAT_MARKER_KEY, [format], &wo))
    }

    /// Moves the store to the format with extent files, once, before its first extent file is created.
    pub(crate) async fn mark_extents(self: &Arc<Self>) -> Result<()> {
        if self.extents_marked.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.blocking(|core| core.write_format(DB_FORMAT_EXTENTS))
            .await?;
        self.extents_marked.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The engine, for one call: every reference is given back before a reopen closes it. Fails, retryably,
    /// while the engine is being reopened.
    fn db(&self) -> Result<Arc<DB>> {
        self.db
            .read()
            .map_err(|_| Error::backend(NAME, "engine lock poisoned by a panic", false))?
            .clone()
            .ok_or_else(|| {
                Error::backend(
                    NAME,
                    format!(
                        "the store at {} is reopening its engine, which ran out of file descriptors; retry",
                        self.config.path.display()
                    ),
                    true,
                )
            })
    }

    /// Whether a reopen has taken the engine away (calls that hold it give it back soon).
    fn engine_away(&self) -> bool {
        self.db.read().map_or(true, |db| db.is_none())
    }

    /// Times the engine was reopened in this process after it ran out of file descriptors.
    pub(crate) fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }

    /// Reopens the engine if a write ran out of file descriptors (RocksDB then takes no write until reopened,
    /// and its C API has no `Resume`), once [`REOPEN_FREE_FDS`] are free, at most every [`REOPEN_RETRY`], one
    /// call at a time; blocking. Meanwhile, calls fail retryably. The reopen waits up to
    /// [`REOPEN_DRAIN_WAIT`] for the calls in flight to give the engine back, closes it and opens it again:
    /// RocksDB recovers what its log holds, as after a restart (writes it acknowledged are in the log). If the
    /// open fails, calls fail until a later attempt succeeds.
    ///
    /// Unlogged chunk writes (`unlogged_min_bytes`) not yet flushed are only in the engine's memory: a reopen
    /// would lose them while their puts, whose flush has not run yet, could go on to commit. So when any is
    /// pending the engine is not reopened (an error is logged): its writes fail until the process reopens the
    /// store, and those puts fail at their flush. With extent files on (the default), large puts write no
    /// unlogged chunks.
    pub(crate) fn reopen_if_due(&self) {
        if !self.reopen_wanted.load(Ordering::Acquire) {
            return;
        }
        // One call reopens; the others go on (and fail if they find the engine away).
        let Ok(mut state) = self.reopening.try_lock() else {
            return;
        };
        if !self.reopen_wanted.load(Ordering::Acquire)
            || state.refused
            || state.last_try.is_some_and(|at| at.elapsed() < REOPEN_RETRY)
        {
            return;
        }
        state.last_try = Some(Instant::now());
        if free_descriptors().is_some_and(|free| free < REOPEN_FREE_FDS) {
            return;
        }
        let path = self.config.path.display();
        if self.unlogged_pending() {
            state.refused = true;
            tracing::error!(
                store = %path,
                "the engine ran out of file descriptors with unlogged chunk writes not yet flushed, which a \
                 reopen would lose: it takes no write until the store is reopened (restart the process)"
            );
            return;
        }
        match self.reopen() {
            Ok(()) => {
                self.reopen_wanted.store(false, Ordering::Release);
                self.reopens.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(store = %path, "reopened the engine after it ran out of file descriptors");
            }
            Err(e) => {
                // The next attempt a whole REOPEN_RETRY after this one ended (its drain may have been long).
                state.last_try = Some(Instant::now());
                tracing::warn!(
                    store = %path,
                    error = %e,
                    "could not reopen the engine after it ran out of file descriptors; trying again"
                );
            }
        }
    }

    /// Whether unlogged chunk writes were made that no flush of this process has covered (a flush lock that a
    /// panic poisoned counts as pending).
    fn unlogged_pending(&self) -> bool {
        self.unlogged_synced.lock().map_or(true, |synced| {
            self.unlogged_writes.load(Ordering::SeqCst) > *synced
        })
    }

    /// Closes the engine and opens it again ([`RocksCore::reopen_if_due`]).
    fn reopen(&self) -> Result<()> {
        let poisoned = || Error::backend(NAME, "engine lock poisoned by a panic", false);
        let mut slot = self.db.write().map_err(|_| poisoned())?;
        let Some(old) = slot.take() else {
            // Away since an open that failed: open it now.
            *slot = Some(Arc::new(open_engine(&self.config)?));
            return Ok(());
        };
        drop(slot);
        let put_back = |old: Arc<DB>, why: String| -> Result<()> {
            *self.db.write().map_err(|_| poisoned())? = Some(old);
            Err(Error::backend(NAME, why, true))
        };
        let started = Instant::now();
        while Arc::strong_count(&old) > 1 {
            if started.elapsed() > REOPEN_DRAIN_WAIT {
                return put_back(
                    old,
                    format!("engine calls still in flight after {REOPEN_DRAIN_WAIT:?}"),
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // Unlogged writes count themselves while they hold the engine: none made since the check before the
        // drain can be missed here (none can be made once the engine has stopped taking writes).
        if self.unlogged_pending() {
            return put_back(
                old,
                "unlogged chunk writes made during the drain, which a reopen would lose".to_owned(),
            );
        }
        drop(old);
        let reopened = open_engine(&self.config).map(Arc::new);
        *self.db.write().map_err(|_| poisoned())? = reopened.as_ref().ok().cloned();
        reopened.map(drop)
    }

    /// Runs `f` on a blocking thread with the database (reopened first if due: [`RocksCore::reopen_if_due`]).
    pub(crate) async fn blocking<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Self) -> Result<T> + Send + 'static,
    {
        self.serving()?;
        let core = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            core.reopen_if_due();
            f(&core)
        })
        .await
        .map_err(error::join)?
    }

    /// The value of `key` in column family `cf_name`.
    pub(crate) async fn get(
        self: &Arc<Self>,
        cf_name: &'static str,
        key: Vec<u8>,
    ) -> Result<Option<Bytes>> {
        self.blocking(move |core| {
            let db = core.db()?;
            Ok(db
                .get_cf(cf(&db, cf_name)?, key)
                .map_err(error::map)?
                .map(Bytes::from))
        })
        .await
    }

    /// The values of `keys` in column family `cf_name`, in the order of `keys` (blocking: call it on a blocking
    /// thread, see [`RocksCore::blocking`]).
    pub(crate) fn multi_get(
        &self,
        cf_name: &'static str,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Bytes>>> {
        let db = self.db()?;
        db.batched_multi_get_cf(cf(&db, cf_name)?, keys, false)
            .into_iter()
            .map(|slot| {
                slot.map(|v| v.map(|s| Bytes::copy_from_slice(&s)))
                    .map_err(error::map)
            })
            .collect()
    }

    fn stripe_of(&self, cf_name: &str, key: &[u8]) -> usize {
        (self.hasher.hash_one((cf_name, key)) % LOCK_STRIPES as u64) as usize
    }

    /// Reads `key` of column family `cf_name`, checks `cond` on its value and, if it holds, applies `change`
    /// (synced when `sync`), all under the key's lock stripe: conditional writes of one key are serialized.
    pub(crate) async fn conditional(
        self: &Arc<Self>,
        cf_name: &'static str,
        key: Vec<u8>,
        sync: bool,
        cond: &Precondition,
        change: Change,
    ) -> Result<RecordWrite> {
        let write = Conditional {
            cf_name,
            key,
            cond: cond.clone(),
            change,
        };
        Ok(
            match self
                .conditional_group(vec![write], Vec::new(), sync)
                .await?
            {
                GroupWrite::Done(mut previous) => {
                    RecordWrite::Done(previous.pop().unwrap_or(Previous::Absent))
                }
                GroupWrite::ConditionFailed { current, .. } => {
                    RecordWrite::ConditionFailed(current)
                }
            },
        )
    }

    /// Applies `writes`, and puts `chunks` (chunk key, encoded chunk) into the chunk column family, in one
    /// engine write batch (synced when `sync`) if every condition holds on its key's value, else nothing (naming
    /// the first that failed); each key read and the batch written under the keys' lock stripes, taken in
    /// ascending order (two groups cannot deadlock), so that conditional writes of one key are serialized. At
    /// most one write per key. Past the calling task's write deadline ([`deadline`]), checked right before the
    /// engine write, nothing is written and the check's `IntentLost` is returned.
    pub(crate) async fn conditional_group(
        self: &Arc<Self>,
        writes: Vec<Conditional>,
        chunks: Vec<(Vec<u8>, Bytes)>,
        sync: bool,
    ) -> Result<GroupWrite> {
        let mut stripes: Vec<usize> = writes
            .iter()
            .map(|w| self.stripe_of(w.cf_name, &w.key))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        // Read here, in the calling task: the write runs on the blocking pool, which the task-local does not reach.
        let issue_by = deadline::current();
        self.blocking(move |core| {
            let _guards = stripes
                .iter()
                .map(|&stripe| {
                    core.stripes
                        .get(stripe)
                        .ok_or_else(|| Error::backend(NAME, "lock stripe out of range", false))?
                        .lock()
                        .map_err(|_| Error::backend(NAME, "record lock poisoned by a panic", false))
                })
                .collect::<Result<Vec<MutexGuard<'_, ()>>>>()?;
            let db = core.db()?;
            let mut batch = WriteBatch::default();
            let mut previous = Vec::with_capacity(writes.len());
            for (index, write) in writes.into_iter().enumerate() {
                let handle = cf(&db, write.cf_name)?;
                let current = db
                    .get_cf(handle, &write.key)
                    .map_err(error::map)?
                    .map(Bytes::from);
                if !write.cond.holds(current.as_ref()) {
                    return Ok(GroupWrite::ConditionFailed { index, current });
                }
                match write.change {
                    Change::Put(value) => batch.put_cf(handle, &write.key, &value),
                    Change::Delete => batch.delete_cf(handle, &write.key),
                }
                previous.push(current.map_or(Previous::Absent, Previous::Value));
            }
            if !chunks.is_empty() {
                let handle = cf(&db, CF_CHUNKS)?;
                for (key, data) in &chunks {
                    batch.put_cf(handle, key, data);
                }
            }
            // After the locks and the reads, right before the engine write: past the deadline, nothing is written.
            if let Some(by) = &issue_by {
                by.check()?;
            }
            let mut wo = WriteOptions::default();
            wo.set_sync(sync);
            let pending = sync.then(|| core.gate.commit());
            core.wrote(db.write_opt(batch, &wo))?;
            drop(pending);
            Ok(GroupWrite::Done(previous))
        })
        .await
    }

    /// Up to `limit` entries of column family `cf_name` whose keys start with `prefix`, in key order, after
    /// `start_after` when given (a `start_after` before the prefix excludes nothing).
    pub(crate) async fn scan(
        self: &Arc<Self>,
        cf_name: &'static str,
        prefix: Vec<u8>,
        start_after: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<Vec<(Box<[u8]>, Box<[u8]>)>> {
        self.blocking(move |core| {
            // From the prefix, or from `start_after` if that lies beyond it.
            let from = start_after
                .as_deref()
                .filter(|s| *s > prefix.as_slice())
                .unwrap_or(&prefix);
            let db = core.db()?;
            let mut out = Vec::new();
            for item in db.iterator_cf(
                cf(&db, cf_name)?,
                IteratorMode::From(from, Direction::Forward),
            ) {
                let (k, v) = item.map_err(error::map)?;
                if Some(&*k) == start_after.as_deref() {
                    continue;
                }
                if !k.starts_with(&prefix) || out.len() >= limit {
                    break;
                }
                out.push((k, v));
            }
            Ok(out)
        })
        .await
    }

    /// Every key of column family `cf_name`, in order, decoded by `decode`; the stream ends after the first
    /// error (of the engine or of `decode`), or when dropped.
    pub(crate) fn scan_keys<T, D>(
        self: &Arc<Self>,
        cf_name: &'static str,
        decode: D,
    ) -> BoxStream<'static, Result<T>>
    where
        T: Send + 'static,
        D: Fn(&[u8]) -> Result<T> + Send + 'static,
    {
        if let Err(e) = self.serving() {
            return stream::once(async { Err(e) }).boxed();
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<T>>(1024);
        let core = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            core.reopen_if_due();
            let db = match core.db() {
                Ok(db) => db,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            let handle = match cf(&db, cf_name) {
                Ok(h) => h,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            for item in db.iterator_cf(handle, IteratorMode::Start) {
                // A reopen waits for the engine: give it back, saying so.
                let decoded = if core.engine_away() {
                    Err(Error::backend(
                        NAME,
                        "a scan stopped: the engine is being reopened, as it ran out of file descriptors; retry",
                        true,
                    ))
                } else {
                    item.map_err(error::map).and_then(|(k, _)| decode(&k))
                };
                let failed = decoded.is_err();
                // Stop when the consumer went away or after reporting an error.
                if tx.blocking_send(decoded).is_err() || failed {
                    return;
                }
            }
        });
        stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed()
    }

    /// Deletes the keys of column family `cf_name` from `start` (included) to `end` (excluded), unsynced.
    pub(crate) async fn delete_range(
        self: &Arc<Self>,
        cf_name: &'static str,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<()> {
        self.blocking(move |core| {
            let db = core.db()?;
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(cf(&db, cf_name)?, start, end);
            core.wrote(db.write_opt(batch, &WriteOptions::default()))
        })
        .await
    }

    /// Writes chunk entries `(key, encoded chunk)` in one batch, unsynced, through the write-ahead log unless
    /// `unlogged`, at the [`WritePriority`] of the calling task's class.
    pub(crate) async fn write_chunks(
        self: &Arc<Self>,
        entries: Vec<(Vec<u8>, Bytes)>,
        unlogged: bool,
    ) -> Result<()> {
        // The class is task-local: read it here, not on the blocking thread.
        let priority =
            WritePriority::of_chunk_write(current_class().as_ref(), self.config.bulk_low_pri);
        if priority == WritePriority::Low {
            self.low_pri_chunk_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.blocking(move |core| {
            let db = core.db()?;
            let handle = cf(&db, CF_CHUNKS)?;
            let mut batch = WriteBatch::default();
            for (key, data) in &entries {
                batch.put_cf(handle, key, data);
            }
            // Unsynced: the synced manifest commit that follows makes logged chunks durable too (one ordered
            // log); unlogged ones are made durable by `sync_unlogged` before it.
            core.wrote(db.write_opt(batch, &priority.write_options(unlogged)))?;
            // Counted while the engine is held: a reopen, which waits for it, sees the write.
            if unlogged {
                core.unlogged_writes.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
        .await
    }

    /// Makes every unlogged chunk write completed so far durable: flushes the chunk memtables (and waits for
    /// every earlier flush of them), unless a flush that started after the last completed unlogged write
    /// already did. A flush writes its blob and table files, syncs them, then records them in RocksDB's
    /// manifest.
    pub(crate) async fn sync_unlogged(self: &Arc<Self>) -> Result<()> {
        let wanted = self.unlogged_writes.load(Ordering::SeqCst);
        let flushed = self
            .blocking(move |core| {
                let mut covered = core
                    .unlogged_synced
                    .lock()
                    .map_err(|_| Error::backend(NAME, "flush lock poisoned by a panic", false))?;
                if *covered >= wanted {
                    return Ok(false);
                }
                // Writes completed before the flush starts are in the memtables it flushes.
                let upto = core.unlogged_writes.load(Ordering::SeqCst);
                let db = core.db()?;
                core.wrote(db.flush_cf(cf(&db, CF_CHUNKS)?))?;
                *covered = upto;
                Ok(true)
            })
            .await?;
        if flushed {
            self.unlogged_flushes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Returns the space of deleted chunks, one such compaction at a time: compacts the chunk index (small:
    /// blob files hold the data), so that deleted ranges are dropped and blob files holding only garbage are
    /// removed; then, when more than `space_reclaim_threshold` of the remaining blob bytes are garbage,
    /// compacts again with blob garbage collection over every blob file, which moves the live chunks out of
    /// partly-garbage files (rewriting live data).
    pub(crate) async fn reclaim_space(self: &Arc<Self>) -> Result<SpaceReport> {
        self.blocking(|core| {
            let _one_at_a_time = core
                .compacting
                .lock()
                .map_err(|_| Error::backend(NAME, "compaction lock poisoned by a panic", false))?;
            core.reclaim_space_blocking()
        })
        .await
    }

    fn reclaim_space_blocking(&self) -> Result<SpaceReport> {
        let db = self.db()?;
        let config = &self.config;
        let threshold = config.space_reclaim_threshold;
        let bytes_before = self.disk_bytes()?;
        self.wrote(db.flush_wal(true))?;
        compact_all(&db, CF_SYSTEM)?;
        compact_all(&db, CF_MANIFESTS)?;
        compact_all(&db, CF_CHUNKS)?;
        let chunks = cf(&db, CF_CHUNKS)?;
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
            let compacted = compact_all(&db, CF_CHUNKS);
            let restored = on(config.blob_gc, config.blob_gc_age_cutoff);
            compacted?;
            restored?;
        }
        Ok(SpaceReport {
            bytes_before,
            bytes_after: self.disk_bytes()?,
            rewrote_live_data: rewrite,
        })
    }

    /// Bytes of SST and blob files of every column family.
    pub(crate) fn disk_bytes(&self) -> Result<u64> {
        let db = self.db()?;
        let mut total = 0;
        for name in [CF_MANIFESTS, CF_CHUNKS, CF_SYSTEM] {
            let handle = cf(&db, name)?;
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
}

/// Column family `name` of `db`.
fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily> {
    db.cf_handle(name)
        .ok_or_else(|| Error::backend(NAME, format!("column family {name} is missing"), false))
}

/// Compacts all of column family `name` of `db`, down to the bottommost level.
fn compact_all(db: &DB, name: &str) -> Result<()> {
    let mut opts = CompactOptions::default();
    opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
    db.compact_range_cf_opt(cf(db, name)?, None::<&[u8]>, None::<&[u8]>, &opts);
    Ok(())
}

/// Descriptors this process may still open below its soft limit, when `/proc/self/fd` tells (none when even
/// its listing cannot be opened for want of one).
fn free_descriptors() -> Option<u64> {
    let listing = match std::fs::read_dir("/proc/self/fd") {
        Ok(listing) => listing,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => return Some(0),
        Err(_) => return None,
    };
    let open = u64::try_from(listing.count()).unwrap_or(u64::MAX);
    Some(saltblob_core::fds::open_files_limit().saturating_sub(open))
}

/// Opens the engine of the store described by `config` (creating it if missing) and removes the blob files an
/// earlier engine of the store left unfinished.
fn open_engine(config: &RocksConfig) -> Result<DB> {
    let mut db_opts = Options::default();
    // The default column family, unused: its memtable size counts in RocksDB's resume reserve.
    db_opts.set_write_buffer_size(SMALL_WRITE_BUFFER_SIZE);
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
    let max_open_files = config
        .max_open_files
        .unwrap_or_else(|| saltblob_core::fds::FdShares::current().engine);
    db_opts.set_max_open_files(i32::try_from(max_open_files).unwrap_or(i32::MAX));
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
    small_opts.set_write_buffer_size(SMALL_WRITE_BUFFER_SIZE);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    small_opts.set_block_based_table_factory(&table);
    small_opts.set_compression_type(DBCompressionType::Lz4);

    let cfs = vec![
        ColumnFamilyDescriptor::new(CF_MANIFESTS, small_opts.clone()),
        ColumnFamilyDescriptor::new(CF_CHUNKS, chunk_opts),
        ColumnFamilyDescriptor::new(CF_SYSTEM, small_opts),
    ];
    // Listed before the open: files of earlier engines only (another process's, or this one's before a
    // reopen), none that this engine's flushes are writing.
    let earlier_blob_files = blob_files::named(&config.path);
    let db = DB::open_cf_descriptors(&db_opts, &config.path, cfs)
        .map_err(|e| error::open(&config.path, e))?;
    blob_files::remove_unfinished(&db, &ALL_COLUMN_FAMILIES, &earlier_blob_files);
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &std::path::Path) -> Arc<RocksCore> {
        let gate = Arc::new(CommitGate::new(Duration::from_millis(10)));
        Arc::new(RocksCore::open(RocksConfig::new(dir), gate).expect("open"))
    }

    /// Marks a reopen as wanted, as a write that ran out of descriptors does, and lets it be tried now.
    fn want_reopen(core: &RocksCore) {
        core.reopen_wanted.store(true, Ordering::Release);
        *core.reopening.lock().expect("lock") = Reopening::default();
    }

    /// A reopen waits for the calls that hold the engine, puts it back when they hold it too long (calls go on
    /// meanwhile with it), and reopens once they are done; what was written is there after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reopen_waits_for_the_calls_in_flight_and_keeps_what_was_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let core = open(dir.path());
        core.conditional(
            CF_MANIFESTS,
            b"k".to_vec(),
            true,
            &Precondition::None,
            Change::Put(Bytes::from_static(b"v")),
        )
        .await
        .expect("put");

        // A call in flight holds the engine past the drain wait: the reopen gives up and puts it back.
        let held = core.db().expect("engine");
        want_reopen(&core);
        let started = Instant::now();
        core.reopen_if_due();
        assert!(started.elapsed() >= REOPEN_DRAIN_WAIT, "did not wait");
        assert_eq!(core.reopens(), 0);
        assert!(!core.engine_away(), "the engine was not put back");
        drop(held);

        // Tried again after REOPEN_RETRY only, then done by the next call.
        core.reopen_if_due();
        assert_eq!(core.reopens(), 0, "tried again at once");
        want_reopen(&core);
        let got = core.get(CF_MANIFESTS, b"k".to_vec()).await.expect("get");
        assert_eq!(core.reopens(), 1);
        assert_eq!(got.as_deref(), Some(&b"v"[..]));
        assert!(!core.reopen_wanted.load(Ordering::Acquire));
    }

    /// Unlogged chunk writes not yet flushed would be lost by a reopen: it is refused for good.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unlogged_writes_not_yet_flushed_refuse_the_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let core = open(dir.path());
        core.write_chunks(vec![(b"c".to_vec(), Bytes::from_static(b"chunk"))], true)
            .await
            .expect("unlogged write");
        want_reopen(&core);
        core.reopen_if_due();
        assert_eq!(core.reopens(), 0);
        assert!(core.reopening.lock().expect("lock").refused);
        // Refused for good, even once a flush has covered the write.
        core.sync_unlogged().await.expect("flush");
        core.reopen_wanted.store(true, Ordering::Release);
        core.reopening.lock().expect("lock").last_try = None;
        core.reopen_if_due();
        assert_eq!(core.reopens(), 0);
        assert!(!core.engine_away());
    }
}
