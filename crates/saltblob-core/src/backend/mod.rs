//! The backend trait: the small set of operations every storage engine provides.
//!
//! A backend stores two things: small **records** (manifests and saltblob's own bookkeeping), each a value
//! under a key in a [`Namespace`], written atomically and optionally conditionally; and **chunks**, addressed by
//! (key, version, salt, index). Everything else (layout, codecs, checksums, versioning, streaming, reclaim)
//! lives in [`crate::store::BlobStore`] on top of this trait, so every backend gets the same semantics.

pub mod layer;
pub mod memory;

use std::fmt::Debug;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};

use crate::base::error::Result;
use crate::base::version::VersionId;

/// A keyspace of small records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Namespace {
    /// Blob key → encoded manifest of its current version. Listing by prefix scans it.
    Manifest,
    /// Deferred deletions of superseded versions' chunks, keyed by due time.
    Reclaim,
    /// A few store-wide bookkeeping values (e.g. how far the reclaim queue has been processed).
    Meta,
    /// Intents of puts in progress: written before a put's first chunk, renewed while it runs, removed after
    /// its commit. An expired intent marks an abandoned put whose chunks garbage collection may reclaim.
    Intent,
}

impl Namespace {
    /// The tag byte of the namespace, where a backend needs one. Part of the format: never renumber.
    pub fn tag(self) -> u8 {
        match self {
            Namespace::Manifest => 0,
            Namespace::Reclaim => 1,
            Namespace::Meta => 2,
            Namespace::Intent => 3,
        }
    }
}

/// A condition on the current value of a record, checked atomically with the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Write unconditionally.
    None,
    /// Write only if the record does not exist.
    Absent,
    /// Write only if the record's current value is exactly these bytes.
    Equals(Bytes),
}

impl Precondition {
    /// Whether the condition holds for a record whose current value is `current`.
    pub fn holds(&self, current: Option<&Bytes>) -> bool {
        match self {
            Precondition::None => true,
            Precondition::Absent => current.is_none(),
            Precondition::Equals(expected) => current == Some(expected),
        }
    }

    /// The condition a delete checks: `Absent` means nothing for a delete and is treated as `None`.
    pub fn for_delete(&self) -> &Precondition {
        match self {
            Precondition::Absent => &Precondition::None,
            other => other,
        }
    }
}

/// What a record write found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordWrite {
    /// The write happened; this is what it replaced.
    Done(Previous),
    /// The precondition did not hold; nothing was written. Carries the current value.
    ConditionFailed(Option<Bytes>),
}

/// The value a record write replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Previous {
    /// There was no record.
    Absent,
    /// This was the record's value, observed atomically with the write.
    Value(Bytes),
    /// The backend cannot tell without extra cost (see [`BackendInfo::reports_previous`]).
    Unknown,
}

/// One write of an atomic group ([`ChunkStore::write_records`]): a put (`value` given) or a delete (`None`) of
/// one record, if `cond` holds (for a delete, as [`Precondition::for_delete`] reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordChange {
    /// The record's namespace.
    pub ns: Namespace,
    /// The record's key.
    pub key: Bytes,
    /// The condition on the record's current value.
    pub cond: Precondition,
    /// The new value; `None` deletes the record.
    pub value: Option<Bytes>,
}

impl RecordChange {
    /// A put of `value` under `key` if `cond` holds.
    pub fn put(ns: Namespace, key: impl Into<Bytes>, value: Bytes, cond: Precondition) -> Self {
        Self {
            ns,
            key: key.into(),
            cond,
            value: Some(value),
        }
    }

    /// A delete of `key` if `cond` holds.
    pub fn delete(ns: Namespace, key: impl Into<Bytes>, cond: Precondition) -> Self {
        Self {
            ns,
            key: key.into(),
            cond,
            value: None,
        }
    }

    /// The condition the write checks: `cond`, as a delete reads it for a delete ([`Precondition::for_delete`]).
    pub fn condition(&self) -> &Precondition {
        match self.value {
            Some(_) => &self.cond,
            None => self.cond.for_delete(),
        }
    }
}

/// What an atomic group of record writes found and did ([`ChunkStore::write_records`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupWrite {
    /// Every write happened; for each, in order, what it replaced.
    Done(Vec<Previous>),
    /// The condition of write `index` (the first, in order, that did not hold) failed; nothing was written.
    /// Carries that record's current value.
    ConditionFailed {
        /// The position of the write in the group.
        index: usize,
        /// Its record's current value.
        current: Option<Bytes>,
    },
}

/// Chunks of one version written in an atomic group ([`ChunkStore::write_records`]): stored as
/// [`ChunkStore::put_chunks`] stores them, in the same engine write as the group's records. A small chunked put
/// commits this way, with no intent: nothing of it is stored before the write that commits it.
#[derive(Clone, Debug)]
pub struct GroupChunks {
    /// The version the chunks belong to.
    pub blob: BlobRef,
    /// The chunks, at most [`BackendInfo::max_batch_bytes`] in all.
    pub chunks: Vec<ChunkWrite>,
}

impl GroupChunks {
    /// Stored bytes of the chunks.
    pub fn stored_bytes(&self) -> u64 {
        ChunkWrite::stored_bytes(&self.chunks)
    }
}

/// Which blob version chunks belong to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// The blob's key.
    pub key: Bytes,
    /// The version.
    pub version: VersionId,
}

/// One chunk to store.
#[derive(Clone, Debug)]
pub struct ChunkWrite {
    /// Partition within the version, `index % salt_count`.
    pub salt: u32,
    /// Chunk index.
    pub index: u64,
    /// Encoded chunk (header and payload).
    pub data: Bytes,
}

impl ChunkWrite {
    /// Stored bytes of `chunks`: their encoded lengths, added up.
    pub fn stored_bytes(chunks: &[ChunkWrite]) -> u64 {
        chunks.iter().map(|c| c.data.len() as u64).sum()
    }
}

/// One encoded chunk in its two parts, the 12-byte header and the payload, for
/// [`ChunkStore::put_chunk_records`]. An engine that copies chunks into I/O buffers of its own copies each byte
/// once: the payload of a chunk stored as is shares the caller's raw bytes, it is not a copy of them.
#[derive(Clone, Debug)]
pub struct ChunkRecord {
    /// Partition within the version, `index % salt_count`.
    pub salt: u32,
    /// Chunk index.
    pub index: u64,
    /// The chunk header (format byte, codec tag, raw length, CRC32C; `docs/format.md`).
    pub header: [u8; crate::format::codec::CHUNK_HEADER_LEN],
    /// The payload the header describes.
    pub payload: Bytes,
}

impl ChunkRecord {
    /// Stored bytes of the record: header and payload.
    pub fn len(&self) -> usize {
        self.header.len() + self.payload.len()
    }

    /// Whether the record is empty (never: the header is always there).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The record as one [`ChunkWrite`], header and payload copied into one buffer.
    pub fn into_write(self) -> ChunkWrite {
        let mut data = Vec::with_capacity(self.len());
        data.extend_from_slice(&self.header);
        data.extend_from_slice(&self.payload);
        ChunkWrite {
            salt: self.salt,
            index: self.index,
            data: Bytes::from(data),
        }
    }
}

/// What a backend learns of a version before its chunk records arrive ([`ChunkStore::begin_chunk_records`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordsPlan {
    /// Raw bytes per chunk (the last chunk may be shorter).
    pub chunk_size: u32,
    /// The blob's size when it is known; `None` for a stream of unknown length.
    pub size: Option<u64>,
}

impl RecordsPlan {
    /// A plan of chunks of `chunk_size` raw bytes, `size` bytes in all when known.
    pub fn new(chunk_size: u32, size: Option<u64>) -> Self {
        Self { chunk_size, size }
    }

    /// The most bytes the records can take when the size is known: every chunk stored as is, with its header
    /// (compression is kept only where it shrinks a chunk).
    pub fn max_stored_bytes(&self) -> Option<u64> {
        let size = self.size?;
        let chunks = size.div_ceil(u64::from(self.chunk_size.max(1)));
        size.checked_add(chunks.checked_mul(crate::format::codec::CHUNK_HEADER_LEN as u64)?)
    }
}

/// The address of one chunk within a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkId {
    /// Partition within the version.
    pub salt: u32,
    /// Chunk index.
    pub index: u64,
}

/// Where one stored chunk lies, as listed by [`ChunkStore::scan_chunks`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkAddress {
    /// The blob's key.
    pub key: Bytes,
    /// The version the chunk belongs to.
    pub version: VersionId,
    /// The partition (salt) it is stored under.
    pub salt: u32,
    /// Its chunk index.
    pub index: u64,
}

/// Disk space before and after [`ChunkStore::reclaim_space`], for engines that can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceReport {
    /// Bytes the engine's files took before.
    pub bytes_before: u64,
    /// Bytes they take after.
    pub bytes_after: u64,
    /// Whether live chunk data was rewritten to free partly-garbage files.
    pub rewrote_live_data: bool,
}

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
    /// Puts of at least this many bytes store their chunks with [`ChunkStore::put_chunks_unlogged`] and call
    /// [`ChunkStore::sync_unlogged_chunks`] before their commit; `None` (the default): never. For engines whose
    /// log would otherwise write every chunk byte twice (RocksDB's write-ahead log, then a blob file).
    pub unlogged_chunks_min_bytes: Option<u64>,
    /// The chunk size the backend prefers for large blobs (above the fan-out threshold), where its per-row cost
    /// makes bigger rows faster (see [`crate::format::layout::LayoutPolicy::large_chunk_size`]). Defaults to `None`: the
    /// policy's chunk size.
    pub large_chunk_size: Option<u32>,
    /// Puts of at least this many bytes store their chunks as records of their version
    /// ([`ChunkStore::begin_chunk_records`], [`ChunkStore::put_chunk_records`], then
    /// [`ChunkStore::sync_chunk_records`] before their commit), in place of the unlogged or logged chunk writes;
    /// `None` (the default): never. For engines that keep a large version in a file of its own (RocksDB's
    /// extent files), written with direct I/O from buffers the encoder fills once.
    pub chunk_records_min_bytes: Option<u64>,
    /// Raw bytes per backend call (a batch) when a version's chunks are stored as records, and when a version
    /// that large is read: larger than the scheduler's bulk unit where a call costs the engine only a copy into
    /// its I/O buffer (a write) or one aligned read of the device's best request size. `None` (the default):
    /// the usual batch size.
    pub chunk_records_batch_bytes: Option<usize>,
    /// Raw bytes per backend call when a version stored as chunk records is read. `None` (the default):
    /// [`BackendInfo::chunk_records_batch_bytes`].
    pub chunk_records_read_bytes: Option<usize>,
    /// Reads of chunk records one read keeps in flight (at most the store's in-flight window allows): the
    /// depth past which the device reads no faster, and a deeper queue only slower. `None` (the default): as
    /// many as the window holds.
    pub chunk_records_read_depth: Option<usize>,
    /// Whether [`ChunkStore::write_records`] writes a group of records (and chunks of one version, if given)
    /// atomically, each record under its condition, in one engine write. A put then commits with one group (what
    /// it replaces queued for reclaim, its manifest, and its intent removed under the condition that gc has not
    /// taken it over) in place of a claim and three writes; a put whose chunks fit one backend call writes them
    /// in that group too, and takes no intent. Defaults to `false`: the backend does not implement
    /// `write_records`. A wrapper that intercepts record or chunk writes either intercepts `write_records` too
    /// or clears this.
    pub atomic_record_groups: bool,
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
            unlogged_chunks_min_bytes: None,
            large_chunk_size: None,
            chunk_records_min_bytes: None,
            chunk_records_batch_bytes: None,
            chunk_records_read_bytes: None,
            chunk_records_read_depth: None,
            atomic_record_groups: false,
        }
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

    /// Declares that failed writes may take effect later ([`BackendInfo::late_writes`]).
    #[must_use]
    pub fn with_late_writes(mut self) -> Self {
        self.late_writes = true;
        self
    }

    /// Declares that puts of at least `min_bytes` bytes should store their chunks unlogged
    /// ([`BackendInfo::unlogged_chunks_min_bytes`]); `None`: never.
    #[must_use]
    pub fn with_unlogged_chunks(mut self, min_bytes: Option<u64>) -> Self {
        self.unlogged_chunks_min_bytes = min_bytes;
        self
    }

    /// Whether a put of `size` bytes (a lower bound, for a stream of unknown length) stores its chunks
    /// unlogged.
    pub fn unlogged_put(&self, size: u64) -> bool {
        self.unlogged_chunks_min_bytes
            .is_some_and(|min| size >= min)
    }

    /// Declares that puts of at least `min_bytes` bytes should store their chunks as records of their version
    /// ([`BackendInfo::chunk_records_min_bytes`]); `None`: never.
    #[must_use]
    pub fn with_chunk_records(mut self, min_bytes: Option<u64>) -> Self {
        self.chunk_records_min_bytes = min_bytes;
        self
    }

    /// Declares the batch size of puts and reads of chunk records ([`BackendInfo::chunk_records_batch_bytes`]).
    #[must_use]
    pub fn with_chunk_records_batch(mut self, bytes: usize) -> Self {
        self.chunk_records_batch_bytes = Some(bytes);
        self
    }

    /// Declares how reads of chunk records go: `bytes` per call, `depth` calls in flight
    /// ([`BackendInfo::chunk_records_read_bytes`], [`BackendInfo::chunk_records_read_depth`]; at least 1 each).
    #[must_use]
    pub fn with_chunk_records_reads(mut self, bytes: usize, depth: usize) -> Self {
        self.chunk_records_read_bytes = Some(bytes.max(1));
        self.chunk_records_read_depth = Some(depth.max(1));
        self
    }

    /// Declares whether the backend writes atomic groups of records ([`BackendInfo::atomic_record_groups`]).
    #[must_use]
    pub fn with_atomic_record_groups(mut self, atomic: bool) -> Self {
        self.atomic_record_groups = atomic;
        self
    }

    /// Whether a put of `size` bytes (a lower bound, for a stream of unknown length) stores its chunks as
    /// records of its version. Takes precedence over [`BackendInfo::unlogged_put`].
    pub fn records_put(&self, size: u64) -> bool {
        self.chunk_records_min_bytes.is_some_and(|min| size >= min)
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
    /// per record. Only for backends that declare [`BackendInfo::atomic_record_groups`]; the default fails,
    /// non-retryable.
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

    /// Prepares the storage of one version whose chunks a put is about to store as records (a put of at least
    /// [`BackendInfo::chunk_records_min_bytes`]): an engine that keeps such a version in a file of its own
    /// creates it here, pre-sized when `plan` gives the size. Called once per version, before its first
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
}
