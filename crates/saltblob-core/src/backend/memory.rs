//! An in-memory backend: the reference implementation of [`ChunkStore`] for fast tests of the core.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;

use futures::stream::{self, BoxStream, StreamExt};

use crate::backend::deadline;
use crate::backend::{
    BackendInfo, BlobRef, ChunkAddress, ChunkId, ChunkRecord, ChunkSink, ChunkStore, ChunkWrite,
    GroupChunks, GroupWrite, Namespace, PlainSink, Precondition, Previous, RECORD_CALLS_IN_FLIGHT,
    RecordChange, RecordWrite, RecordsPlan, RecordsSink, SinkPlan, SinkShape, UnloggedSink,
    grouped,
};
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;

type ChunkKey = (Bytes, VersionId, u32, u64);

/// Puts of at least this many bytes store their chunks unlogged (see [`MemoryStore::lose_unsynced_chunks`]).
pub const MEMORY_UNLOGGED_MIN_BYTES: u64 = 1 << 20;
/// Puts of at least this many bytes store their chunks as records of a version "file" of its own
/// ([`ChunkStore::begin_chunk_records`]), as RocksDB's extents do: listed by
/// [`ChunkStore::scan_version_files`], lost until synced, removed with the version's chunks.
pub const MEMORY_RECORDS_MIN_BYTES: u64 = 8 << 20;

/// A [`ChunkStore`] in process memory. Nothing survives the process; for tests and examples.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Whether its sinks ask for commit groups (see [`MemoryStore::with_atomic_record_groups`]).
    atomic_record_groups: bool,
}

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<(Namespace, Bytes), Bytes>,
    chunks: BTreeMap<ChunkKey, Bytes>,
    /// Record writes (puts and deletes) in these namespaces fail (see [`MemoryStore::fail_writes`]).
    failing_records: Vec<Namespace>,
    /// Chunk deletions fail.
    failing_chunk_deletes: bool,
    /// Chunks stored unlogged and not synced since: what a crash would lose.
    unsynced: std::collections::BTreeSet<ChunkKey>,
    /// Versions begun with `begin_chunk_records` and not deleted since: their "files".
    files: std::collections::BTreeSet<(Bytes, VersionId)>,
}

impl State {
    /// Stores `chunks` of `blob` as durable at once ([`ChunkStore::put_chunks`]).
    fn put_chunks(&mut self, blob: &BlobRef, chunks: Vec<ChunkWrite>) {
        for c in chunks {
            let k = (blob.key.clone(), blob.version, c.salt, c.index);
            self.unsynced.remove(&k);
            self.chunks.insert(k, c.data);
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that writes atomic groups of records ([`ChunkStore::write_records`]), as RocksDB does:
    /// puts then commit with one group. [`MemoryStore::new`] does not, as on Cassandra.
    pub fn with_atomic_record_groups() -> Self {
        Self {
            atomic_record_groups: true,
            ..Self::default()
        }
    }

    /// From now on, makes record writes (puts and deletes) in `namespaces` fail, and chunk deletions too when
    /// `chunk_deletes`, with a non-retryable error; for tests of error paths. `fail_writes(&[], false)` heals.
    pub fn fail_writes(&self, namespaces: &[Namespace], chunk_deletes: bool) -> Result<()> {
        let mut state = self.lock()?;
        state.failing_records = namespaces.to_vec();
        state.failing_chunk_deletes = chunk_deletes;
        Ok(())
    }

    /// Drops every chunk stored with `put_chunks_unlogged` and not synced since, as a crash of an engine that
    /// keeps such chunks out of its log would; returns how many. For tests of the durability protocol.
    pub fn lose_unsynced_chunks(&self) -> Result<usize> {
        let mut state = self.lock()?;
        let lost = std::mem::take(&mut state.unsynced);
        for k in &lost {
            state.chunks.remove(k);
        }
        Ok(lost.len())
    }

    /// Number of chunks held, of every version.
    pub fn chunk_count(&self) -> Result<usize> {
        Ok(self.lock()?.chunks.len())
    }

    /// Number of version files held (versions begun with [`ChunkStore::begin_chunk_records`], not deleted).
    pub fn version_file_count(&self) -> Result<usize> {
        Ok(self.lock()?.files.len())
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::backend("memory", "state lock poisoned by a panic", false))
    }

    /// The state, for a record write in `ns`: an injected failure if writes there are set to fail, `IntentLost`
    /// past the write's deadline ([`deadline`]).
    fn lock_for_record_write(&self, ns: Namespace) -> Result<std::sync::MutexGuard<'_, State>> {
        let state = self.lock()?;
        if state.failing_records.contains(&ns) {
            return Err(injected(&format!("write of a {ns:?} record")));
        }
        // Under the lock, right before the write: past the write's deadline nothing is written.
        deadline::check_current()?;
        Ok(state)
    }
}

#[async_trait]
impl ChunkStore for MemoryStore {
    fn info(&self) -> BackendInfo {
        BackendInfo::new("memory", 64 << 20, 8 << 20, true)
    }

    /// As the embedded backend chooses: records of the version from [`MEMORY_RECORDS_MIN_BYTES`], unlogged chunks
    /// from [`MEMORY_UNLOGGED_MIN_BYTES`], plain chunks below; with commit groups when made with
    /// [`MemoryStore::with_atomic_record_groups`].
    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink> {
        let other: Option<Box<dyn ChunkSink>> = if plan.at_least >= MEMORY_RECORDS_MIN_BYTES {
            let shape = SinkShape::plain().with_calls_in_flight(Some(RECORD_CALLS_IN_FLIGHT));
            Some(Box::new(RecordsSink {
                shape,
                plan: plan.records_plan(),
            }))
        } else if plan.at_least >= MEMORY_UNLOGGED_MIN_BYTES {
            Some(Box::new(UnloggedSink {
                shape: SinkShape::plain(),
            }))
        } else {
            None
        };
        match other {
            _ if self.atomic_record_groups => grouped(plan, other),
            Some(sink) => sink,
            None => Box::new(PlainSink),
        }
    }

    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self
            .lock()?
            .records
            .get(&(ns, Bytes::copy_from_slice(key)))
            .cloned())
    }

    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let mut state = self.lock_for_record_write(ns)?;
        let k = (ns, Bytes::copy_from_slice(key));
        let current = state.records.get(&k);
        if !cond.holds(current) {
            return Ok(RecordWrite::ConditionFailed(current.cloned()));
        }
        let previous = state.records.insert(k, value);
        Ok(RecordWrite::Done(
            previous.map_or(Previous::Absent, Previous::Value),
        ))
    }

    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite> {
        let mut state = self.lock_for_record_write(ns)?;
        let k = (ns, Bytes::copy_from_slice(key));
        let current = state.records.get(&k);
        if !cond.for_delete().holds(current) {
            return Ok(RecordWrite::ConditionFailed(current.cloned()));
        }
        let previous = state.records.remove(&k);
        Ok(RecordWrite::Done(
            previous.map_or(Previous::Absent, Previous::Value),
        ))
    }

    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        if !self.atomic_record_groups {
            return Err(Error::internal(
                "write_records",
                "this memory store writes no atomic groups of records",
            ));
        }
        let mut state = self.lock()?;
        if let Some(change) = changes
            .iter()
            .find(|c| state.failing_records.contains(&c.ns))
        {
            return Err(injected(&format!("write of a {:?} record", change.ns)));
        }
        deadline::check_current()?;
        for (index, change) in changes.iter().enumerate() {
            let current = state.records.get(&(change.ns, change.key.clone()));
            if !change.condition().holds(current) {
                return Ok(GroupWrite::ConditionFailed {
                    index,
                    current: current.cloned(),
                });
            }
        }
        let previous = changes
            .into_iter()
            .map(|change| {
                let k = (change.ns, change.key);
                let previous = match change.value {
                    Some(value) => state.records.insert(k, value),
                    None => state.records.remove(&k),
                };
                previous.map_or(Previous::Absent, Previous::Value)
            })
            .collect();
        if let Some(GroupChunks { blob, chunks }) = chunks {
            state.put_chunks(&blob, chunks);
        }
        Ok(GroupWrite::Done(previous))
    }

    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let state = self.lock()?;
        // From the prefix, or from `start_after` if that lies beyond it (a `start_after` before the prefix
        // excludes nothing).
        let from = start_after.filter(|a| *a > prefix).unwrap_or(prefix);
        Ok(state
            .records
            .range((ns, Bytes::copy_from_slice(from))..)
            .filter(|((_, k), _)| start_after != Some(k.as_ref()))
            .take_while(|((n, k), _)| *n == ns && k.starts_with(prefix))
            .take(limit)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        let mut state = self.lock_for_record_write(ns)?;
        state
            .records
            .retain(|(n, k), _| *n != ns || !k.starts_with(part));
        Ok(())
    }

    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.lock()?.put_chunks(blob, chunks);
        Ok(())
    }

    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        let mut state = self.lock()?;
        for c in chunks {
            let k = (blob.key.clone(), blob.version, c.salt, c.index);
            state.unsynced.insert(k.clone());
            state.chunks.insert(k, c.data);
        }
        Ok(())
    }

    async fn sync_unlogged_chunks(&self) -> Result<()> {
        self.lock()?.unsynced.clear();
        Ok(())
    }

    async fn begin_chunk_records(&self, blob: &BlobRef, _plan: RecordsPlan) -> Result<()> {
        self.lock()?.files.insert((blob.key.clone(), blob.version));
        Ok(())
    }

    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        let mut state = self.lock()?;
        if !state.files.contains(&(blob.key.clone(), blob.version)) {
            return Err(Error::backend(
                "memory",
                format!("records of version {} before its begin", blob.version),
                false,
            ));
        }
        for r in records {
            let k = (blob.key.clone(), blob.version, r.salt, r.index);
            state.unsynced.insert(k.clone());
            state.chunks.insert(k, r.into_write().data);
        }
        Ok(())
    }

    /// Syncs the records of `blob` only: unlogged chunks and other versions' records stay unsynced.
    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        let mut state = self.lock()?;
        let lo = (blob.key.clone(), blob.version, 0, 0);
        let hi = (blob.key.clone(), blob.version, u32::MAX, u64::MAX);
        let synced: Vec<ChunkKey> = state.unsynced.range(lo..=hi).cloned().collect();
        for k in synced {
            state.unsynced.remove(&k);
        }
        Ok(())
    }

    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>> {
        let state = self.lock()?;
        Ok(chunks
            .iter()
            .map(|c| {
                state
                    .chunks
                    .get(&(blob.key.clone(), blob.version, c.salt, c.index))
                    .cloned()
            })
            .collect())
    }

    async fn delete_chunks(
        &self,
        blob: &BlobRef,
        salt_count: u32,
        _chunk_count: u64,
    ) -> Result<()> {
        let mut state = self.lock()?;
        if state.failing_chunk_deletes {
            return Err(injected("chunk deletion"));
        }
        let lo = (blob.key.clone(), blob.version, 0, 0);
        let hi = (blob.key.clone(), blob.version, salt_count, 0);
        let doomed: Vec<ChunkKey> = state.chunks.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            state.unsynced.remove(&k);
            state.chunks.remove(&k);
        }
        state.files.remove(&(blob.key.clone(), blob.version));
        Ok(())
    }

    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        let file = self
            .lock()?
            .files
            .contains(&(blob.key.clone(), blob.version));
        Ok(Some(
            if file { "version file" } else { "chunks" }.to_owned(),
        ))
    }

    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        let listed: Result<Vec<BlobRef>> = self.lock().map(|state| {
            state
                .files
                .iter()
                .map(|(key, version)| BlobRef {
                    key: key.clone(),
                    version: *version,
                })
                .collect()
        });
        match listed {
            Ok(all) => stream::iter(all.into_iter().map(Ok)).boxed(),
            Err(e) => stream::once(async move { Err(e) }).boxed(),
        }
    }

    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>> {
        let listed: Result<Vec<ChunkAddress>> = self.lock().map(|state| {
            state
                .chunks
                .keys()
                .map(|(key, version, salt, index)| ChunkAddress {
                    key: key.clone(),
                    version: *version,
                    salt: *salt,
                    index: *index,
                })
                .collect()
        });
        match listed {
            Ok(all) => stream::iter(all.into_iter().map(Ok)).boxed(),
            Err(e) => stream::once(async move { Err(e) }).boxed(),
        }
    }
}

fn injected(what: &str) -> Error {
    Error::backend("memory", format!("injected failure: {what}"), false)
}
