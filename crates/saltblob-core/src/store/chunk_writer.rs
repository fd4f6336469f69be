//! The chunk writer of a put: chunks grouped into backend calls, at most the in-flight window in flight, and the
//! blob's digest: each chunk hashed in the task that encodes it, or in order on the put's task when the chunk
//! size is no BLAKE3 subtree (see `digest.rs`).
//!
//! A put stores its chunks one of four ways ([`Path`]), chosen by its size and what the backend asks for: as
//! records of their version (large puts on a backend that keeps a version in a file of its own: the header and
//! the payload are handed over apart, so the backend copies each byte once, into its I/O buffer), unlogged
//! (large puts on a backend whose log would write them twice), in the commit's group (puts whose chunks fit
//! one backend call, on a backend that writes atomic groups: the writer encodes them and the commit writes
//! them), or plainly.
//!
//! A sealed version's chunks are sealed in the same tasks, after compression (`codec.rs`, `encode_sealed`). The
//! last chunk's nonce differs from the others', so the writer holds each chunk back until the next one (or the
//! end) says whether it was the last: one chunk more in memory.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::backend::{BlobRef, ChunkRecord, ChunkStore, ChunkWrite, GroupChunks, RecordsPlan};
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::encryption::seal::VersionKeys;
use crate::format::codec::{ChunkPlace, Codec, encode_chunk, encode_record, encode_sealed};
use crate::format::layout::ChunkLayout;
use crate::ledger::intent::Progress;
use crate::schedule::{ClassTag, cpu, current_class, in_class};
use crate::state::Inner;
use crate::store::digest::{BlobDigest, ChunkHash, ChunkHasher};

/// Backend calls of one put's chunk records issued at once (waiting for admission or running). A version's
/// records go into one file whose writer takes one call at a time and waits for its device writes inside the
/// call, so more calls would only hold scheduler slots while they queue there: with the whole window in calls,
/// every request of their class (gc's record reads and deletes among them, which the reclaim pass issues one
/// after another) waited behind the window's bytes of disk writes, per request. Two calls keep one call's
/// pointer write overlapped with the next one's copy.
pub(crate) const RECORD_CALLS_IN_FLIGHT: usize = 2;

/// How a put stores its chunks, and what it must do before its commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// [`ChunkStore::put_chunks`]; nothing to do before the commit.
    Logged,
    /// [`ChunkStore::put_chunks_unlogged`], then [`ChunkStore::sync_unlogged_chunks`].
    Unlogged,
    /// [`ChunkStore::begin_chunk_records`], [`ChunkStore::put_chunk_records`], then
    /// [`ChunkStore::sync_chunk_records`] of the version.
    Records,
    /// Encoded only, and kept for the commit to write in its group ([`ChunkStore::write_records`]).
    InCommit,
}

/// Writes the chunks of one version: groups them into batches of up to the batch size and keeps at most the
/// in-flight window of raw bytes in backend calls at once.
pub(crate) struct ChunkWriter {
    backend: Arc<dyn ChunkStore>,
    blob: BlobRef,
    /// The planned layout, with `chunk_count` the chunks pushed so far.
    layout: ChunkLayout,
    codec: Codec,
    per_batch: usize,
    /// Retries of a failed chunk write.
    backoff: Backoff,
    window: Arc<Semaphore>,
    window_bytes: usize,
    /// At most [`RECORD_CALLS_IN_FLIGHT`] calls of [`ChunkStore::put_chunk_records`] at once (records only;
    /// the encoding of the window's other batches goes on meanwhile).
    record_calls: Arc<Semaphore>,
    /// Each task's stored bytes and the subtrees of its chunks (none for a sequential digest).
    tasks: JoinSet<TaskResult>,
    /// Chunks to write next: index, raw bytes, whether it is the last.
    batch: Vec<(u64, Bytes, bool)>,
    /// The keys the chunks are sealed with; `None` for plaintext.
    keys: Option<Arc<VersionKeys>>,
    /// The chunk pushed last, held back until it is known whether it is the last (sealed versions only).
    held: Option<Bytes>,
    stored: u64,
    /// Shared with the put's intent lease, which records it at each renewal.
    progress: Arc<Progress>,
    /// The put's class, which the writes of its spawned tasks run in.
    class: Option<ClassTag>,
    /// How the chunks are stored: as records or unlogged (both synced in [`ChunkWriter::finish`]) for a large
    /// put on a backend that asks for it ([`crate::backend::BackendInfo::chunk_records_min_bytes`],
    /// [`crate::backend::BackendInfo::unlogged_chunks_min_bytes`]), else plainly.
    path: Path,
    /// What [`ChunkStore::begin_chunk_records`] is told; `Some` until it was called (records only).
    plan: Option<RecordsPlan>,
    /// Whether [`ChunkStore::begin_chunk_records`] was called: the version has storage to delete on abort.
    begun: bool,
    /// The encoded chunks kept for the commit's group ([`Path::InCommit`] only).
    kept: Vec<ChunkWrite>,
    /// The blob's digest: fed the subtrees the tasks hash, or the raw chunks in order as they are pushed.
    digest: BlobDigest,
}

impl ChunkWriter {
    /// A writer of the chunks of `blob`, spread over `salt_count` salts, in the caller's class, sealed with `keys`
    /// when given; `size` is the blob's size when known, `at_least` its size or, for a stream of unknown length, a
    /// lower bound of it.
    #[expect(clippy::too_many_arguments, reason = "the put's plan, passed once")]
    pub(crate) fn new(
        inner: &Inner,
        blob: BlobRef,
        salt_count: u32,
        codec: Codec,
        chunk_size: u32,
        size: Option<u64>,
        at_least: u64,
        progress: Arc<Progress>,
        keys: Option<Arc<VersionKeys>>,
    ) -> Self {
        let window_bytes = inner.config.inflight_bytes;
        let class = current_class();
        let path = if inner.info.records_put(at_least) {
            Path::Records
        } else if inner.info.unlogged_put(at_least) {
            Path::Unlogged
        } else {
            Path::Logged
        };
        Self {
            backend: Arc::clone(&inner.backend),
            blob,
            layout: ChunkLayout {
                chunk_size,
                chunk_count: 0,
                salt_count,
            },
            codec,
            per_batch: usize::try_from(inner.chunks_per_batch_of(
                chunk_size,
                class.as_ref(),
                at_least,
            ))
            .unwrap_or(1),
            backoff: inner.chunk_backoff(),
            window: Arc::new(Semaphore::new(window_bytes)),
            window_bytes,
            record_calls: Arc::new(Semaphore::new(RECORD_CALLS_IN_FLIGHT)),
            tasks: JoinSet::new(),
            batch: Vec::new(),
            keys,
            held: None,
            stored: 0,
            progress,
            digest: BlobDigest::new(chunk_size, class.clone()),
            class,
            plan: (path == Path::Records).then(|| RecordsPlan::new(chunk_size, size)),
            path,
            begun: false,
            kept: Vec::new(),
        }
    }

    /// Keeps the chunks for the commit to write in its group ([`ChunkWriter::take_for_commit`]) in place of
    /// writing them, for a put whose chunks [`Inner::commits_chunks_in_group`] (which only a put that would
    /// write them plainly does). Called before the first chunk.
    pub(crate) fn in_commit(mut self) -> Self {
        self.path = Path::InCommit;
        self.plan = None;
        self
    }

    /// Prepares the backend's storage of the version when its chunks are stored as records (a file of their
    /// own, created and pre-sized); does nothing otherwise. Called before the first chunk.
    pub(crate) async fn begin(&mut self) -> Result<()> {
        if let Some(plan) = self.plan.take() {
            // Counted as begun before the call: a failure may leave what it created, for abort to delete.
            self.begun = true;
            let backend = &self.backend;
            let blob = &self.blob;
            self.backoff
                .run(|| backend.begin_chunk_records(blob, plan))
                .await?;
        }
        Ok(())
    }

    fn add_stored(
        &mut self,
        done: std::result::Result<TaskResult, tokio::task::JoinError>,
    ) -> Result<()> {
        let (bytes, hashes, kept) = done.map_err(|e| Error::internal("write task failed", e))??;
        self.digest.add(hashes)?;
        self.kept.extend(kept);
        self.stored += bytes;
        Ok(())
    }

    /// Adds the next chunk's raw bytes; writes a batch once it is full. Fails with `IntentLost` once gc has
    /// taken the put's intent over: chunks written after that would be referred to by nothing.
    pub(crate) async fn push(&mut self, raw: Bytes) -> Result<()> {
        if self.progress.lost() {
            return Err(Error::IntentLost {
                key: self.blob.key[..].into(),
                version: self.blob.version,
                detail: "garbage collection took the intent over while the put was writing".into(),
            });
        }
        self.digest.update(&raw).await?;
        let ready = if self.keys.is_some() {
            self.held.replace(raw)
        } else {
            Some(raw)
        };
        if let Some(raw) = ready {
            self.enqueue(raw, false).await?;
        }
        while let Some(done) = self.tasks.try_join_next() {
            self.add_stored(done)?;
        }
        Ok(())
    }

    /// Adds chunk `raw` (the last one when `last`) to the batch; writes the batch once it is full.
    async fn enqueue(&mut self, raw: Bytes, last: bool) -> Result<()> {
        self.batch.push((self.layout.chunk_count, raw, last));
        self.layout.chunk_count += 1;
        if self.batch.len() >= self.per_batch {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let raw_bytes: usize = batch.iter().map(|(_, b, _)| b.len()).sum();
        let permits = u32::try_from(raw_bytes.min(self.window_bytes)).unwrap_or(u32::MAX);
        let permit = Arc::clone(&self.window)
            .acquire_many_owned(permits)
            .await
            .map_err(|e| Error::internal("write window closed", e))?;
        // Every chunk enqueued so far is in this batch or an earlier one.
        self.progress.writing(self.layout.chunk_count);
        let progress = Arc::clone(&self.progress);
        let record_calls = Arc::clone(&self.record_calls);
        let keys = self.keys.clone();
        let (backend, blob, layout, codec, backoff, class, path, hasher) = (
            Arc::clone(&self.backend),
            self.blob.clone(),
            self.layout,
            self.codec,
            self.backoff,
            self.class.clone(),
            self.path,
            self.digest.chunk_hasher(),
        );
        self.tasks.spawn(in_class(self.class.clone(), async move {
            let _permit = permit;
            let encoding = blob.clone();
            let (encoded, hashes) = cpu::run(class.as_ref(), move || {
                encode_batch(
                    &encoding,
                    layout,
                    codec,
                    hasher,
                    keys.as_deref(),
                    &batch,
                    path,
                )
            })
            .await??;
            let stored = encoded.stored_bytes();
            match encoded {
                Encoded::Writes(writes) if path == Path::InCommit => {
                    return Ok((stored, hashes, writes));
                }
                Encoded::Writes(writes) => {
                    backoff
                        .run(|| {
                            if path == Path::Unlogged {
                                backend.put_chunks_unlogged(&blob, writes.clone())
                            } else {
                                backend.put_chunks(&blob, writes.clone())
                            }
                        })
                        .await?
                }
                Encoded::Records(records) => {
                    let _call = record_calls
                        .acquire_owned()
                        .await
                        .map_err(|e| Error::internal("record call gate closed", e))?;
                    backoff
                        .run(|| backend.put_chunk_records(&blob, records.clone()))
                        .await?
                }
            }
            progress.stored(stored);
            Ok((stored, hashes, Vec::new()))
        }));
        Ok(())
    }

    /// Waits for every chunk and, for unlogged chunks and records, for the backend to make them durable; returns
    /// the stored bytes and the BLAKE3 digest of the raw bytes pushed. Only then may the put commit.
    pub(crate) async fn finish(&mut self) -> Result<(u64, blake3::Hash)> {
        if let Some(last) = self.held.take() {
            self.enqueue(last, true).await?;
        }
        self.flush().await?;
        while let Some(done) = self.tasks.join_next().await {
            self.add_stored(done)?;
        }
        let backend = &self.backend;
        match self.path {
            Path::Logged | Path::InCommit => {}
            Path::Unlogged => self.backoff.run(|| backend.sync_unlogged_chunks()).await?,
            Path::Records => {
                let blob = &self.blob;
                self.backoff
                    .run(|| backend.sync_chunk_records(blob))
                    .await?
            }
        }
        Ok((self.stored, self.digest.finalize().await?))
    }

    /// The chunks kept for the commit's group ([`ChunkWriter::in_commit`]), once [`ChunkWriter::finish`]
    /// returned; `None` for chunks the writer wrote itself.
    pub(crate) fn take_for_commit(&mut self) -> Option<GroupChunks> {
        (self.path == Path::InCommit).then(|| GroupChunks {
            blob: self.blob.clone(),
            chunks: std::mem::take(&mut self.kept),
        })
    }

    /// Raw bytes per chunk (the last may be shorter).
    pub(crate) fn chunk_size(&self) -> u32 {
        self.layout.chunk_size
    }

    /// The layout of the chunks pushed: the planned salt count, or fewer salts when there are fewer chunks.
    pub(crate) fn layout(&self) -> ChunkLayout {
        let planned = self.layout.salt_count;
        ChunkLayout {
            salt_count: u32::try_from(u64::from(planned).min(self.layout.chunk_count))
                .unwrap_or(planned),
            ..self.layout
        }
    }

    /// Waits for the writes in flight, then deletes what was written; false if that failed (logged).
    ///
    /// The writes are waited for, not aborted: an engine write already issued (RocksDB's runs on a blocking
    /// thread) lands even when its task is aborted, and one landing after the delete would leave chunks that no
    /// record refers to once the intent is removed. The window bounds how much is in flight, so the wait is at
    /// most one backend call per batch in flight.
    pub(crate) async fn abort(mut self) -> bool {
        while self.tasks.join_next().await.is_some() {}
        // Chunks kept for the commit were never written.
        if self.path == Path::InCommit {
            return true;
        }
        if (self.layout.chunk_count > 0 || self.begun)
            && let Err(e) = self
                .backend
                .delete_chunks(&self.blob, self.layout.salt_count, self.layout.chunk_count)
                .await
        {
            tracing::warn!(
                "could not delete the chunks of failed put {}: {e}",
                self.blob.version
            );
            return false;
        }
        true
    }
}

/// A batch of chunks encoded for the way the put stores them.
enum Encoded {
    /// Whole chunks, for [`ChunkStore::put_chunks`] and [`ChunkStore::put_chunks_unlogged`].
    Writes(Vec<ChunkWrite>),
    /// Header and payload apart, for [`ChunkStore::put_chunk_records`].
    Records(Vec<ChunkRecord>),
}

impl Encoded {
    /// Stored bytes of the batch.
    fn stored_bytes(&self) -> u64 {
        match self {
            Encoded::Writes(writes) => ChunkWrite::stored_bytes(writes),
            Encoded::Records(records) => records.iter().map(|r| r.len() as u64).sum(),
        }
    }
}

/// The encoded chunks of a batch of `blob`, sealed with `keys` when given, and their subtrees when `hasher` is
/// given (each chunk hashed right before it is encoded, while it is in the cache; its checksum follows at once).
fn encode_batch(
    blob: &BlobRef,
    layout: ChunkLayout,
    codec: Codec,
    hasher: Option<ChunkHasher>,
    keys: Option<&VersionKeys>,
    batch: &[(u64, Bytes, bool)],
    path: Path,
) -> Result<(Encoded, Vec<ChunkHash>)> {
    let mut hashes = Vec::new();
    let mut hash = |index: u64, raw: &Bytes| {
        if let Some(hasher) = hasher {
            hashes.push(hasher.hash(index, raw));
        }
    };
    let place = |index: u64| ChunkPlace {
        key: &blob.key,
        version: blob.version,
        index,
    };
    let encoded = match (path, keys) {
        (Path::Records, _) => Encoded::Records(
            batch
                .iter()
                .map(|(index, raw, last)| {
                    hash(*index, raw);
                    let (header, payload) = match keys {
                        Some(keys) => encode_sealed(place(*index), raw, codec, keys, *last)?,
                        None => encode_record(place(*index), raw, codec),
                    };
                    Ok(ChunkRecord {
                        salt: layout.salt_of(*index),
                        index: *index,
                        header,
                        payload,
                    })
                })
                .collect::<Result<_>>()?,
        ),
        (_, Some(keys)) => Encoded::Writes(
            batch
                .iter()
                .map(|(index, raw, last)| {
                    hash(*index, raw);
                    let (header, payload) = encode_sealed(place(*index), raw, codec, keys, *last)?;
                    Ok(ChunkRecord {
                        salt: layout.salt_of(*index),
                        index: *index,
                        header,
                        payload,
                    }
                    .into_write())
                })
                .collect::<Result<_>>()?,
        ),
        (_, None) => Encoded::Writes(
            batch
                .iter()
                .map(|(index, raw, _)| {
                    hash(*index, raw);
                    ChunkWrite {
                        salt: layout.salt_of(*index),
                        index: *index,
                        data: encode_chunk(place(*index), raw, codec),
                    }
                })
                .collect(),
        ),
    };
    Ok((encoded, hashes))
}

/// What a chunk-write task returns: its stored bytes, the subtrees of its chunks, and the chunks it encoded
/// for the commit to write ([`Path::InCommit`]; none otherwise).
type TaskResult = Result<(u64, Vec<ChunkHash>, Vec<ChunkWrite>)>;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::base::version::VersionId;
    use crate::state::config::StoreConfig;
    use crate::store::BlobStore;

    /// The progress an intent records follows the chunk writes as they start and complete, not the writer's
    /// next chunk: a put stalled on its input (as a writer that is about to die is) renews its intent with what it
    /// stored.
    #[tokio::test]
    async fn progress_is_current_while_the_put_waits_for_its_input() {
        let backend = Arc::new(MemoryStore::new());
        let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
        let progress = Arc::new(Progress::default());
        let blob = BlobRef {
            key: Bytes::from_static(b"stalled"),
            version: VersionId::generate(),
        };
        let chunk_size = 4096;
        let mut writer = ChunkWriter::new(
            &store.inner,
            blob,
            1,
            Codec::None,
            chunk_size,
            None,
            0,
            Arc::clone(&progress),
            None,
        );
        writer.begin().await.expect("begin");
        let per_batch = u64::try_from(writer.per_batch).expect("batch size");
        // Exactly one batch: its last chunk starts its write, and then the writer is given nothing more.
        for _ in 0..per_batch {
            writer
                .push(Bytes::from(vec![7u8; chunk_size as usize]))
                .await
                .expect("push");
        }
        assert_eq!(progress.counts().0, per_batch, "the writes have started");
        // Waits for an event (the batch's write, run by its own task), not for time to pass.
        for _ in 0..500 {
            if progress.counts().1 > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (chunks, stored) = progress.counts();
        assert!(
            chunks == per_batch && stored > 0,
            "the stored bytes are counted once the write completes: {chunks} chunks, {stored} bytes with {:?} \
             chunks stored",
            backend.chunk_count()
        );
        let (finished, _) = writer.finish().await.expect("finish");
        assert_eq!(stored, finished, "the bytes the writer reports at its end");
        assert!(writer.abort().await, "nothing left behind");
        assert_eq!(backend.chunk_count().expect("count"), 0);
    }
}
