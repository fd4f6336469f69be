//! The backend contract: the small set of operations every storage engine provides ([`ChunkStore`]), and what it
//! says of itself ([`BackendInfo`]).
//!
//! A backend stores two things: small **records** (manifests and saltblob's own bookkeeping), each a value
//! under a key in a [`Namespace`], written atomically and optionally conditionally (`records.rs`); and **chunks**,
//! addressed by (key, version, salt, index) (`chunks.rs`), which a put hands over through the sink the backend
//! chooses for it ([`ChunkStore::chunk_sink`], [`ChunkSink`]; the usual sinks in [`sink`]). Everything else
//! (layout, codecs, checksums, versioning, streaming, reclaim) lives in [`crate::store::BlobStore`] on top of this
//! trait, so every backend gets the same semantics. [`layer`] is the forwarding base of every wrapper of a
//! backend; [`memory`] the in-memory reference backend. A pass over every manifest reads them by the ranges the
//! backend splits them into ([`ranges`]), in no key order. A commit's record write may carry a deadline by which
//! the engine write must be issued ([`deadline`]).
//!
//! Uses `base/` and `format/`, nothing else.

pub mod chunks;
pub mod counting;
pub mod deadline;
pub mod layer;
pub mod memory;
pub mod ranges;
pub mod records;
pub mod sink;

use std::fmt::Debug;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};

use crate::base::error::Result;

pub use self::chunks::{
    BackupOptions, BackupReport, BlobRef, ChunkAddress, ChunkBatch, ChunkId, ChunkRecord,
    ChunkWrite, GroupChunks, RECORD_CALLS_IN_FLIGHT, ReadShape, RecordsPlan, SinkForm, SinkPlan,
    SinkShape, SpaceReport,
};
pub use self::ranges::{IndexCheck, RangePage, ScanPlan, ScanRange};
pub use self::records::{GroupWrite, Namespace, Precondition, Previous, RecordChange, RecordWrite};
pub use self::sink::{
    CommitSink, PlainSink, RecordsSink, UnloggedSink, grouped, without_commit_groups,
};

/// What a backend is and can do.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BackendInfo {
    /// Short name, e.g. `rocksdb`, used in errors.
    pub name: &'static str,
    /// Largest encoded chunk the backend accepts, header included. Chunk sizes are validated against it.
    pub max_chunk_bytes: u32,
    /// Largest number of encoded bytes to pass in one [`ChunkStore::put_chunks`] call.
    pub max_batch_bytes: usize,
    /// Whether [`ChunkStore::put_record`] and [`ChunkStore::delete_record`] report the replaced value
    /// (otherwise they return [`Previous::Unknown`] for unconditional writes).
    pub reports_previous: bool,
    /// Whether the backend already retries transient failures itself; the core then does not retry on top
    /// (which would multiply the attempts and the delays). Defaults to `false`.
    pub retries_internally: bool,
    /// Whether a write that failed or timed out may still take effect later (a cluster: a replica that got
    /// the write before the timeout; hints and read repair spread it afterwards). Puts then do not claim their
    /// intents, and gc waits the reclaim queue's commit window past an intent's lease before taking it over, so
    /// that it never takes over a put whose manifest write may still land. Defaults to `false`: writes take effect before their call returns
    /// or not at all.
    pub late_writes: bool,
    /// The chunk size the backend prefers for large blobs (above the fan-out threshold), where its per-row cost
    /// makes bigger rows faster (see [`crate::format::layout::LayoutPolicy::large_chunk_size`]). Defaults to `None`: the
    /// policy's chunk size.
    pub large_chunk_size: Option<u32>,
    /// The most bytes one chunk partition should hold on this backend, where partitions are handled whole
    /// (compacted, repaired, streamed: a cluster), so that huge blobs get more salts
    /// ([`crate::format::layout::LayoutPolicy::max_partition_bytes`]). Defaults to `None`: partitions cost nothing
    /// by their size (an embedded store), no bound.
    pub max_partition_bytes: Option<u64>,
    /// Whether one process at a time owns the store (an embedded engine holds a lock on its directory): gc then
    /// shares its work with nobody and takes no leases (`ledger/work.rs`), so that a killed process's leases
    /// never hold a later pass back. Defaults to `false`: several processes (or stores) may work on it at once.
    pub exclusive: bool,
}

impl BackendInfo {
    /// Describes a backend.
    pub fn new(
        name: &'static str,
        max_chunk_bytes: u32,
        max_batch_bytes: usize,
        reports_previous: bool,
    ) -> Self {
        Self {
            name,
            max_chunk_bytes,
            max_batch_bytes,
            reports_previous,
            retries_internally: false,
            late_writes: false,
            large_chunk_size: None,
            max_partition_bytes: None,
            exclusive: false,
        }
    }

    /// Declares that one process at a time owns the store ([`BackendInfo::exclusive`]).
    #[must_use]
    pub fn with_exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// The largest chunk payload the backend takes: its largest chunk less the chunk header. Chunk sizes of new
    /// puts are validated against it, and a stored manifest whose chunk size exceeds it is corrupt.
    pub fn max_chunk_payload(&self) -> u32 {
        self.max_chunk_bytes
            .saturating_sub(crate::format::codec::CHUNK_HEADER_LEN as u32)
    }

    /// Declares that the backend retries transient failures itself ([`BackendInfo::retries_internally`]).
    #[must_use]
    pub fn with_internal_retries(mut self) -> Self {
        self.retries_internally = true;
        self
    }

    /// Declares the chunk size the backend prefers for large blobs ([`BackendInfo::large_chunk_size`]).
    #[must_use]
    pub fn with_large_chunk_size(mut self, bytes: u32) -> Self {
        self.large_chunk_size = Some(bytes);
        self
    }

    /// Declares the bound on a chunk partition's bytes the backend wants ([`BackendInfo::max_partition_bytes`]).
    #[must_use]
    pub fn with_max_partition_bytes(mut self, bytes: u64) -> Self {
        self.max_partition_bytes = Some(bytes);
        self
    }

    /// Declares that failed writes may take effect later ([`BackendInfo::late_writes`]).
    #[must_use]
    pub fn with_late_writes(mut self) -> Self {
        self.late_writes = true;
        self
    }
}

/// A storage engine for saltblob.
///
/// # Contract
/// - Keys of records and blobs are 1 to [`crate::store::MAX_KEY_LEN`] bytes (record keys of internal namespaces may be
///   longer, up to 2 KiB).
/// - **Ordering and durability**: chunks accepted by `put_chunks` must be at least as durable as any record
///   written after `put_chunks` returned: after a crash, a record is never present while chunks written before
///   it are lost. The manifest record is saltblob's commit point and relies on this. Chunks stored with
///   `put_chunks_unlogged` are the exception: they are durable once a later `sync_unlogged_chunks` returned,
///   which the put calls before its commit.
/// - Record writes are atomic: a reader sees the old value or the new one. A [`Precondition`] is checked
///   atomically with the write.
/// - `put_chunks` is idempotent: writing the same chunk again stores the same bytes.
/// - Missing things are not errors: a missing record is `None`, a missing chunk is `None` in its slot, deleting
///   what does not exist succeeds.
/// - Errors say whether a retry may help ([`crate::base::error::Error::is_retryable`]).
/// - **Deadlines**: a record write (`put_record`, `delete_record`, `write_records`) may be called with a deadline
///   ([`deadline::current`], a task-local of the calling task). The backend checks it ([`deadline::IssueBy::check`])
///   after every wait of its own (locks, a pool, a queue) and right before it issues the engine write, on
///   whatever thread issues it; past it, it writes nothing and returns that check's `IntentLost`, which the
///   commit reports as not written. An attempt issued again (a retry) after the deadline is not made: the call
///   fails with the earlier attempt's error instead (its outcome is unknown), never with `IntentLost`.
///
/// # Wrappers
/// A wrapper of another `ChunkStore` (a scheduler, a fault injector) implements
/// [`crate::backend::layer::ChunkStoreLayer`], not this trait: it overrides the calls it changes and every other call
/// reaches the inner store's own method, never one of the defaults below.
#[async_trait]
pub trait ChunkStore: Send + Sync + Debug + 'static {
    /// What the backend is and its limits.
    fn info(&self) -> BackendInfo;

    /// Reads one record.
    async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>>;

    /// Writes one record if `cond` holds.
    async fn put_record(
        &self,
        ns: Namespace,
        key: &[u8],
        value: Bytes,
        cond: &Precondition,
    ) -> Result<RecordWrite>;

    /// Deletes one record if `cond` holds (`Precondition::Absent` is meaningless here and always holds).
    async fn delete_record(
        &self,
        ns: Namespace,
        key: &[u8],
        cond: &Precondition,
    ) -> Result<RecordWrite>;

    /// Writes `changes`, and `chunks` when given, atomically, in one engine write (synced if any of the changes
    /// is a manifest write the backend syncs): every condition holds and every change happens and every chunk is
    /// stored, or nothing is written and the first change whose condition failed is named. At most one change
    /// per record. Only for backends whose sinks ask for commit groups ([`SinkShape::commit_group`]); the default
    /// fails, non-retryable.
    async fn write_records(
        &self,
        changes: Vec<RecordChange>,
        chunks: Option<GroupChunks>,
    ) -> Result<GroupWrite> {
        let _ = (changes, chunks);
        Err(crate::base::error::Error::internal(
            "write_records",
            format!(
                "backend {} writes no atomic groups of records",
                self.info().name
            ),
        ))
    }

    /// The first `limit` records, in ascending byte order of their keys, of those whose key starts with `prefix`
    /// and, when `start_after` is given, sorts strictly after it. `start_after` need not start with `prefix`:
    /// one that sorts before the prefix excludes nothing, one that sorts after every key of the prefix leaves
    /// nothing. A caller pages by passing the last key of a full page as the next `start_after`.
    async fn scan_records(
        &self,
        ns: Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>>;

    /// Deletes every record of partition `part` of `ns` (a namespace with a [`Namespace::partition_len`], `part`
    /// that many bytes), in one deletion where the backend can (a partition tombstone on a cluster, a range
    /// deletion on an engine), so that later reads of the partition do not read the deletion markers of its
    /// records one by one. A record written to the partition after the call returned is kept. The default scans
    /// the partition and deletes its records one at a time.
    async fn drop_partition(&self, ns: Namespace, part: &[u8]) -> Result<()> {
        loop {
            let page = self.scan_records(ns, part, None, 256).await?;
            if page.is_empty() {
                return Ok(());
            }
            for (k, _) in page {
                self.delete_record(ns, &k, &Precondition::None).await?;
            }
        }
    }

    /// How a pass over every manifest splits them: disjoint ranges that hold every manifest between them, read
    /// each on its own ([`ChunkStore::scan_manifest_range`]), several at once, in no key order, and how many at
    /// once the backend serves well. A range descriptor names a part of the keys, not a server: it stays valid
    /// (for a pass resumed later) when the cluster changes. The default is [`ScanPlan::ordered`]: the whole
    /// namespace in key order, which the core reads with [`ChunkStore::scan_records`].
    async fn manifest_ranges(&self) -> Result<ScanPlan> {
        Ok(ScanPlan::ordered())
    }

    /// Up to `limit` (at least 1) manifest records of `range`, one of this backend's ranges other than
    /// [`ScanRange::ordered`], in the range's own order: from its start, or right after `after`, a key of the
    /// range read from it before. That order is fixed, so that a pass resumed after a key reads every record
    /// that followed it and none that came before. A record written or deleted during the pass may be read or
    /// not, as in a listing. The page says whether the range is over ([`RangePage::done`]); a page that is not
    /// the last may be short. The default fails, non-retryable: a backend that splits reads its ranges itself.
    async fn scan_manifest_range(
        &self,
        range: &ScanRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RangePage> {
        let _ = (range, after, limit);
        Err(crate::base::error::Error::internal(
            "scan_manifest_range",
            format!(
                "backend {} reads its manifests in key order only",
                self.info().name
            ),
        ))
    }

    /// The sink of the chunks of a version a put is about to write, planned as `plan`: how the backend wants
    /// them: which of the chunk writes below, in which form and batches, whether the commit is one atomic group
    /// ([`sink`] has the usual choices; [`PlainSink`] is [`ChunkStore::put_chunks`] in the core's batches). The
    /// put calls only the sink, which issues its writes through the store the put runs on.
    fn chunk_sink(&self, plan: &SinkPlan) -> Box<dyn ChunkSink>;

    /// How the chunks of a version of `size` bytes are best read: bytes per call of [`ChunkStore::get_chunks`]
    /// and calls in flight. The default asks for nothing: the core's batches, as many as its window holds.
    fn read_shape(&self, size: u64) -> ReadShape {
        let _ = size;
        ReadShape::default()
    }

    /// Stores chunks of one version (possibly of several salts), at most [`BackendInfo::max_batch_bytes`].
    async fn put_chunks(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()>;

    /// Stores chunks like [`ChunkStore::put_chunks`], except that they may be lost in a crash until a
    /// [`ChunkStore::sync_unlogged_chunks`] called after this returned has returned: the engine may keep them out of
    /// its write-ahead log. The default is `put_chunks` (and then the default sync, which does nothing, is
    /// right); an engine that overrides this method overrides `sync_unlogged_chunks` too.
    async fn put_chunks_unlogged(&self, blob: &BlobRef, chunks: Vec<ChunkWrite>) -> Result<()> {
        self.put_chunks(blob, chunks).await
    }

    /// Makes durable every chunk whose [`ChunkStore::put_chunks_unlogged`] returned before this call. The
    /// default does nothing.
    async fn sync_unlogged_chunks(&self) -> Result<()> {
        Ok(())
    }

    /// Prepares the storage of one version whose chunks a put is about to store as records (through a
    /// [`RecordsSink`] the backend handed out): an engine that keeps such a version in a file of its own
    /// creates it here (the size `plan` gives caps it; what to allocate ahead is the engine's choice). Called once per version, before its first
    /// [`ChunkStore::put_chunk_records`]. Whatever it creates is removed by
    /// [`ChunkStore::delete_chunks`] of the version, whether or not any record was stored. The default does
    /// nothing.
    async fn begin_chunk_records(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        let _ = (blob, plan);
        Ok(())
    }

    /// Stores chunk records of a version begun with [`ChunkStore::begin_chunk_records`] (of several salts, at
    /// most [`BackendInfo::max_batch_bytes`]). Like unlogged chunks, they may be lost in a crash until a
    /// [`ChunkStore::sync_chunk_records`] of their version, called after this returned, has returned. Readers
    /// get them back with [`ChunkStore::get_chunks`], as one stored chunk each (header, then payload). The
    /// default joins each record into one chunk and stores it with [`ChunkStore::put_chunks_unlogged`].
    async fn put_chunk_records(&self, blob: &BlobRef, records: Vec<ChunkRecord>) -> Result<()> {
        let writes = records.into_iter().map(ChunkRecord::into_write).collect();
        self.put_chunks_unlogged(blob, writes).await
    }

    /// Makes durable every record of `blob` whose [`ChunkStore::put_chunk_records`] returned before this call;
    /// once it returns, the put may commit. A failure is final for the version: an engine that could not make
    /// its records durable (a failed fsync) never reports them durable later, so the put fails and is cleaned
    /// up. The default is [`ChunkStore::sync_unlogged_chunks`], which the default `put_chunk_records` needs.
    async fn sync_chunk_records(&self, blob: &BlobRef) -> Result<()> {
        let _ = blob;
        self.sync_unlogged_chunks().await
    }

    /// Reads chunks of one version; the result has one slot per requested chunk, in request order.
    async fn get_chunks(&self, blob: &BlobRef, chunks: &[ChunkId]) -> Result<Vec<Option<Bytes>>>;

    /// Deletes every chunk of one version (all salts below `salt_count`; `chunk_count` bounds the indexes), and
    /// whatever [`ChunkStore::begin_chunk_records`] created for it.
    async fn delete_chunks(&self, blob: &BlobRef, salt_count: u32, chunk_count: u64) -> Result<()>;

    /// Where the engine keeps the chunks of `blob`, in a few words for `describe` (RocksDB: `extent` or `blob
    /// files`); `None` when it cannot tell or the version has no chunks. The default is `None`.
    async fn chunk_storage(&self, blob: &BlobRef) -> Result<Option<String>> {
        let _ = blob;
        Ok(None)
    }

    /// The address of every stored chunk, of every version, in no particular order; for `fsck`, which compares
    /// them with the manifests. Reads no more than it must (engines that cannot list keys alone may read
    /// values); memory stays bounded however many chunks there are.
    fn scan_chunks(&self) -> BoxStream<'_, Result<ChunkAddress>>;

    /// Every version for which the engine keeps a file of its own (an extent), whether or not
    /// [`ChunkStore::scan_chunks`] lists chunks of it; for `fsck`, which reports the files of versions that
    /// nothing refers to. In no particular order, in bounded memory. The default lists nothing.
    fn scan_version_files(&self) -> BoxStream<'_, Result<BlobRef>> {
        futures::stream::empty().boxed()
    }

    /// Asks the engine to return the space of deleted chunks to the file system, after garbage collection
    /// deleted some. The default does nothing (engines that reclaim space on their own, e.g. by compaction
    /// after the tombstone grace period).
    async fn reclaim_space(&self) -> Result<Option<SpaceReport>> {
        Ok(None)
    }

    /// Compares the backend's own index of the manifests' keys, if it keeps one apart from the manifests (the
    /// CQL backend's listing index), with the manifests whose key starts with `prefix`: keys the index lacks and
    /// entries of keys that have no manifest. With `repair`, writes the missing keys back and removes the stale
    /// entries, each at a write time that cannot undo a newer write or delete. Safe while the store is in use: a
    /// key is reported missing only when the same manifest was read before and after the index. Memory stays
    /// bounded (what it reports aside). The default, for backends whose manifests are their own index (an
    /// ordered engine), is `None`: nothing to check.
    async fn check_index(&self, prefix: &[u8], repair: bool) -> Result<Option<IndexCheck>> {
        let _ = (prefix, repair);
        Ok(None)
    }

    /// The cluster's time (Unix µs) as one of its nodes reads it now, for a backend that processes on several
    /// machines share, so that decisions made by time (gc's, reclaim's) and plain writes' timestamps are checked
    /// against one clock: gc, reclaim and plain writes refuse to run in a process whose clock is off by more than
    /// the margin ([`crate::base::timing::CLOCK_MARGIN_MICROS`]; `state/skew.rs`). Defaults to `None`: the
    /// backend's time is this machine's (an embedded store), and it is asked once. Its precision is the round trip
    /// that fetched it.
    async fn cluster_time(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// The engine's own upkeep, which every gc pass runs after its reclaim pass (on CQL: the listing index's
    /// splits). Must not wait for long: what needs time is begun by one call and finished by a later one. The
    /// default does nothing.
    async fn maintain(&self) -> Result<()> {
        Ok(())
    }

    /// Takes a consistent copy of the store while it serves, into `dest`, a directory that must not exist yet
    /// (its parent must): a store of its own, opened by the same kind of URL, that holds exactly what the store
    /// held at one instant during the call (every write acknowledged before the call, none begun after it),
    /// with the records of the puts in flight then as a crash would leave them (reclaimed by its first gc). The
    /// copy is made beside the store and gets the name `dest` only when complete: nothing half-made is left under
    /// it, whatever fails. The default, for engines that have no copy of their own (a cluster: its own snapshots,
    /// or an export), is `None`.
    async fn backup(
        &self,
        dest: &std::path::Path,
        options: &BackupOptions,
    ) -> Result<Option<BackupReport>> {
        let _ = (dest, options);
        Ok(None)
    }
}

/// The sink of one version's chunks, from [`ChunkStore::chunk_sink`].
///
/// # Contract
/// - [`ChunkSink::begin`] is called once, after the put's intent is written and before any other call; it may
///   create what the version's chunks need (a file of its own). A failed put deletes what the sink stored with
///   [`ChunkStore::delete_chunks`], which removes that too.
/// - [`ChunkSink::put`] is idempotent: a retried call stores the same chunks again. Calls may run concurrently, at
///   most [`SinkShape::calls_in_flight`] at once.
/// - Once [`ChunkSink::finish`] returned, every chunk put is as durable as a record written afterwards (the
///   manifest, the commit point): the ordering [`ChunkStore`] promises for `put_chunks`.
/// - Each call issues its writes through `store`, the store the put runs on.
#[async_trait]
pub trait ChunkSink: Send + Sync + Debug {
    /// How the sink takes chunks.
    fn shape(&self) -> SinkShape;

    /// Prepares the version's storage. The default does nothing.
    async fn begin(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        let _ = (store, blob);
        Ok(())
    }

    /// Stores `batch` of `blob`'s chunks.
    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()>;

    /// Makes every chunk put durable; see the contract. The default does nothing.
    async fn finish(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        let _ = (store, blob);
        Ok(())
    }
}
