//! Chunks: addressed by (key, version, salt, index), written whole ([`ChunkWrite`]) or as records of their
//! version ([`ChunkRecord`]), in the batches and form a version's sink asks for ([`SinkPlan`], [`SinkShape`],
//! [`ChunkBatch`]); read in the shape the backend asks for ([`ReadShape`]).

use bytes::Bytes;

use crate::base::version::VersionId;

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

/// How [`ChunkStore::backup`] makes its copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupOptions {
    /// Copy every file, even when the destination is on the store's file system (where the default hard-links
    /// the engine's immutable files: instant, but sharing their blocks with the store, so that the copy guards
    /// against mistakes and not against the loss of the device).
    pub copy: bool,
}

impl BackupOptions {
    /// The defaults: hard links where the file system allows them.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`BackupOptions::copy`].
    #[must_use]
    pub fn with_copy(mut self, copy: bool) -> Self {
        self.copy = copy;
        self
    }
}

/// What [`ChunkStore::backup`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    /// The engine's files in the copy (RocksDB: tables, blob files, logs, manifest, options) and their bytes.
    pub engine_files: u64,
    /// Bytes of [`BackupReport::engine_files`].
    pub engine_bytes: u64,
    /// Extent files (the files of large versions) in the copy.
    pub extent_files: u64,
    /// Bytes of [`BackupReport::extent_files`].
    pub extent_bytes: u64,
    /// Whether the files were copied (else hard-linked: the copy shares their blocks with the store).
    pub copied: bool,
    /// How long the store's deletions of files were held back while the copy's instant was taken.
    pub held: std::time::Duration,
}

/// Calls of [`ChunkStore::put_chunk_records`] a sink of chunk records wants issued at once: a version's records
/// go into one file whose writer takes one call at a time and waits for its device writes inside the call, so
/// more calls would only hold scheduler slots while they queue there (every request of their class, gc's record
/// reads and deletes among them, then waited behind the window's bytes of disk writes). Two keep one call's
/// pointer write overlapped with the next one's copy.
pub const RECORD_CALLS_IN_FLIGHT: usize = 2;

/// What a put tells the backend of the version it is about to write, when it asks for a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkPlan {
    /// Raw bytes per chunk (the last chunk may be shorter).
    pub chunk_size: u32,
    /// The blob's size when it is known; `None` for a stream of unknown length.
    pub size: Option<u64>,
    /// The blob's size, or for a stream of unknown length a lower bound of it (what was read ahead).
    pub at_least: u64,
    /// Chunks per call of the core's own batches in the put's class: a sink whose chunks fit one call may ask for
    /// them in the commit's group ([`SinkForm::Commit`]).
    pub batch_chunks: u64,
    /// Whether the put commits right after its chunks (false for a segment, which is parked for a later
    /// compose: its chunks cannot wait for a commit group).
    pub commits: bool,
}

impl SinkPlan {
    /// A plan of chunks of `chunk_size` raw bytes, `size` bytes in all when known, at least `at_least`; the
    /// core's batches hold `batch_chunks` chunks; `commits` whether a commit follows the chunks.
    pub fn new(
        chunk_size: u32,
        size: Option<u64>,
        at_least: u64,
        batch_chunks: u64,
        commits: bool,
    ) -> Self {
        Self {
            chunk_size,
            size,
            at_least,
            batch_chunks,
            commits,
        }
    }

    /// Whether the version's chunks fit one call of the core's batches: a known size of at most
    /// [`SinkPlan::batch_chunks`] chunks.
    pub fn fits_one_call(&self) -> bool {
        self.size.is_some_and(|size| {
            size.div_ceil(u64::from(self.chunk_size.max(1))) <= self.batch_chunks
        })
    }

    /// What [`ChunkStore::begin_chunk_records`] is told of the version.
    pub fn records_plan(&self) -> RecordsPlan {
        RecordsPlan::new(self.chunk_size, self.size)
    }
}

/// The form a sink takes chunks in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkForm {
    /// Whole encoded chunks ([`ChunkBatch::Chunks`]).
    Chunks,
    /// Header and payload apart ([`ChunkBatch::Records`]), so that the backend copies each byte once, into its
    /// I/O buffer.
    Records,
    /// None before the commit: the core keeps the encoded chunks and the commit writes them in its atomic group
    /// ([`ChunkStore::write_records`]); the put takes no intent, since it stores nothing before that write. Only
    /// for a put whose plan [`SinkPlan::commits`], and with [`SinkShape::commit_group`].
    Commit,
}

/// How a sink takes a version's chunks and how the version commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkShape {
    /// The form of the batches.
    pub form: SinkForm,
    /// Raw bytes per batch; `None`: the core's batch size (the store's `batch_bytes`, capped by the scheduler's
    /// bulk unit in a background class).
    pub batch_bytes: Option<usize>,
    /// Calls of [`ChunkSink::put`] issued at once; `None`: as many as the store's in-flight window holds.
    pub calls_in_flight: Option<usize>,
    /// Whether the put commits with one atomic group ([`ChunkStore::write_records`]): what it replaces queued for
    /// reclaim, its manifest, and its intent removed under the condition that gc has not taken it over, in place
    /// of a claim of the intent and separate writes. The backend must write such groups atomically.
    pub commit_group: bool,
}

impl SinkShape {
    /// Whole chunks in the core's batches, as many calls as the window holds, a commit of separate writes.
    pub fn plain() -> Self {
        Self {
            form: SinkForm::Chunks,
            batch_bytes: None,
            calls_in_flight: None,
            commit_group: false,
        }
    }

    /// Sets [`SinkShape::form`].
    #[must_use]
    pub fn with_form(mut self, form: SinkForm) -> Self {
        self.form = form;
        self
    }

    /// Sets [`SinkShape::batch_bytes`].
    #[must_use]
    pub fn with_batch_bytes(mut self, bytes: Option<usize>) -> Self {
        self.batch_bytes = bytes;
        self
    }

    /// Sets [`SinkShape::calls_in_flight`].
    #[must_use]
    pub fn with_calls_in_flight(mut self, calls: Option<usize>) -> Self {
        self.calls_in_flight = calls.map(|c| c.max(1));
        self
    }

    /// Sets [`SinkShape::commit_group`].
    #[must_use]
    pub fn with_commit_group(mut self, group: bool) -> Self {
        self.commit_group = group;
        self
    }
}

/// A batch of one version's chunks, in the form its sink asked for.
#[derive(Clone, Debug)]
pub enum ChunkBatch {
    /// Whole encoded chunks.
    Chunks(Vec<ChunkWrite>),
    /// Header and payload apart.
    Records(Vec<ChunkRecord>),
}

impl ChunkBatch {
    /// Stored bytes of the batch.
    pub fn stored_bytes(&self) -> u64 {
        match self {
            ChunkBatch::Chunks(chunks) => ChunkWrite::stored_bytes(chunks),
            ChunkBatch::Records(records) => records.iter().map(|r| r.len() as u64).sum(),
        }
    }
}

impl ChunkBatch {
    /// The batch as whole chunks (records joined: header, then payload).
    pub fn into_chunks(self) -> Vec<ChunkWrite> {
        match self {
            ChunkBatch::Chunks(chunks) => chunks,
            ChunkBatch::Records(records) => {
                records.into_iter().map(ChunkRecord::into_write).collect()
            }
        }
    }
}

/// How the reads of a version go, from [`ChunkStore::read_shape`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadShape {
    /// Raw bytes per call of [`ChunkStore::get_chunks`]; `None`: the core's batch size for the version.
    pub batch_bytes: Option<usize>,
    /// Calls in flight: the depth past which the device reads no faster, and a deeper queue only slower (at
    /// most the store's in-flight window allows); `None`: as many as the window holds.
    pub depth: Option<usize>,
}

impl ReadShape {
    /// Reads of `batch_bytes` raw bytes per call, `depth` calls in flight (each at least 1).
    pub fn new(batch_bytes: usize, depth: usize) -> Self {
        Self {
            batch_bytes: Some(batch_bytes.max(1)),
            depth: Some(depth.max(1)),
        }
    }
}
