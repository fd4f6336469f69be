//! The chunk writer of a put: chunks grouped into backend calls, at most the in-flight window in flight, and the
//! blob's digest: each chunk hashed in the task that encodes it, or in order on the put's task when the chunk
//! size is no BLAKE3 subtree (see `digest.rs`).
//!
//! How the chunks are stored is the backend's choice: the put asked it for a sink
//! ([`crate::backend::ChunkStore::chunk_sink`]), and the writer encodes each batch in the form the sink's shape
//! asks for (whole chunks, or header and payload apart so that the backend copies each byte once, into its I/O
//! buffer), in its batch size and with at most its calls in flight, hands it to the sink, and has the sink make
//! them durable before the commit. A sink of the [`SinkForm::Commit`] form takes nothing: the writer keeps the
//! encoded chunks and the commit writes them in its atomic group.
//!
//! A sealed version's chunks are sealed in the same tasks, after compression (`codec.rs`, `encode_sealed`). The
//! last chunk's nonce differs from the others', so the writer holds each chunk back until the next one (or the
//! end) says whether it was the last: one chunk more in memory.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::backend::{
    BlobRef, ChunkBatch, ChunkRecord, ChunkSink, ChunkStore, ChunkWrite, GroupChunks, SinkForm,
    SinkShape,
};
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::encryption::seal::VersionKeys;
use crate::format::codec::{ChunkPlace, Codec, encode_chunk, encode_record, encode_sealed};
use crate::format::layout::ChunkLayout;
use crate::ledger::intent::Progress;
use crate::schedule::{ClassTag, cpu, current_class, in_class};
use crate::state::Inner;
use crate::store::digest::{BlobDigest, ChunkHash, ChunkHasher};

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
    /// The sink the backend chose for the version, and its shape.
    sink: Arc<dyn ChunkSink>,
    shape: SinkShape,
    /// At most [`SinkShape::calls_in_flight`] calls of the sink at once, when it says (the encoding of the
    /// window's other batches goes on meanwhile).
    calls: Option<Arc<Semaphore>>,
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
    /// Whether [`ChunkSink::begin`] was called for a sink of records: the version has storage of its own to
    /// delete on abort.
    begun: bool,
    /// The encoded chunks kept for the commit's group ([`SinkForm::Commit`] only).
    kept: Vec<ChunkWrite>,
    /// The blob's digest: fed the subtrees the tasks hash, or the raw chunks in order as they are pushed.
    digest: BlobDigest,
}

impl ChunkWriter {
    /// A writer of the chunks of `blob`, spread over `salt_count` salts, through `sink`, in the caller's class,
    /// sealed with `keys` when given.
    #[expect(clippy::too_many_arguments, reason = "the put's plan, passed once")]
    pub(crate) fn new(
        inner: &Inner,
        blob: BlobRef,
        salt_count: u32,
        codec: Codec,
        chunk_size: u32,
        sink: Box<dyn ChunkSink>,
        progress: Arc<Progress>,
        keys: Option<Arc<VersionKeys>>,
    ) -> Self {
        let window_bytes = inner.config.inflight_bytes;
        let class = current_class();
        let shape = sink.shape();
        let per_batch = inner.chunks_per_sink_batch(chunk_size, class.as_ref(), shape.batch_bytes);
        Self {
            backend: Arc::clone(&inner.backend),
            blob,
            layout: ChunkLayout {
                chunk_size,
                chunk_count: 0,
                salt_count,
            },
            codec,
            per_batch: usize::try_from(per_batch).unwrap_or(1),
            backoff: inner.chunk_backoff(),
            window: Arc::new(Semaphore::new(window_bytes)),
            window_bytes,
            sink: Arc::from(sink),
            shape,
            calls: shape.calls_in_flight.map(|n| Arc::new(Semaphore::new(n))),
            tasks: JoinSet::new(),
            batch: Vec::new(),
            keys,
            held: None,
            stored: 0,
            progress,
            digest: BlobDigest::new(chunk_size, class.clone()),
            class,
            begun: false,
            kept: Vec::new(),
        }
    }

    /// Prepares the version's storage ([`ChunkSink::begin`]: for a sink of records, a file of its own, created
    /// with a first allocation that grows with the records received). Called once, before the first chunk, after the put's intent is written.
    pub(crate) async fn begin(&mut self) -> Result<()> {
        if self.shape.form == SinkForm::Commit {
            return Ok(());
        }
        // Counted as begun before the call: a failure may leave what it created, for abort to delete.
        self.begun = self.shape.form == SinkForm::Records;
        let (sink, backend, blob) = (&self.sink, &*self.backend, &self.blob);
        self.backoff.run(|| sink.begin(backend, blob)).await
    }

    /// Whether the chunks go into the commit's atomic group ([`SinkForm::Commit`]): the put then takes no
    /// intent, since nothing is stored before its commit.
    pub(crate) fn in_commit(&self) -> bool {
        self.shape.form == SinkForm::Commit
    }

    /// Whether the put commits with one atomic group ([`SinkShape::commit_group`]).
    pub(crate) fn commit_group(&self) -> bool {
        self.shape.commit_group
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
        let calls = self.calls.clone();
        let keys = self.keys.clone();
        let (backend, sink, blob, layout, codec, backoff, class, form, hasher) = (
            Arc::clone(&self.backend),
            Arc::clone(&self.sink),
            self.blob.clone(),
            self.layout,
            self.codec,
            self.backoff,
            self.class.clone(),
            self.shape.form,
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
                    form,
                )
            })
            .await??;
            let stored = encoded.stored_bytes();
            if form == SinkForm::Commit {
                return Ok((stored, hashes, encoded.into_chunks()));
            }
            let _call = match calls {
                Some(calls) => Some(
                    calls
                        .acquire_owned()
                        .await
                        .map_err(|e| Error::internal("sink call gate closed", e))?,
                ),
                None => None,
            };
            backoff
                .run(|| sink.put(&*backend, &blob, encoded.clone()))
                .await?;
            progress.stored(stored);
            Ok((stored, hashes, Vec::new()))
        }));
        Ok(())
    }

    /// Waits for every chunk and for the sink to make them durable ([`ChunkSink::finish`]); returns the stored bytes
    /// and the BLAKE3 digest of the raw bytes pushed. Only then may the put commit.
    pub(crate) async fn finish(&mut self) -> Result<(u64, blake3::Hash)> {
        if let Some(last) = self.held.take() {
            self.enqueue(last, true).await?;
        }
        self.flush().await?;
        while let Some(done) = self.tasks.join_next().await {
            self.add_stored(done)?;
        }
        if self.shape.form != SinkForm::Commit {
            let (sink, backend, blob) = (&self.sink, &*self.backend, &self.blob);
            self.backoff.run(|| sink.finish(backend, blob)).await?;
        }
        Ok((self.stored, self.digest.finalize().await?))
    }

    /// The chunks kept for the commit's group ([`ChunkWriter::in_commit`]), once [`ChunkWriter::finish`]
    /// returned; `None` for chunks the sink stored.
    pub(crate) fn take_for_commit(&mut self) -> Option<GroupChunks> {
        self.in_commit().then(|| GroupChunks {
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
        if self.in_commit() {
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

/// The encoded chunks of a batch of `blob`, sealed with `keys` when given, and their subtrees when `hasher` is
/// given (each chunk hashed right before it is encoded, while it is in the cache; its checksum follows at once).
fn encode_batch(
    blob: &BlobRef,
    layout: ChunkLayout,
    codec: Codec,
    hasher: Option<ChunkHasher>,
    keys: Option<&VersionKeys>,
    batch: &[(u64, Bytes, bool)],
    form: SinkForm,
) -> Result<(ChunkBatch, Vec<ChunkHash>)> {
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
    let encoded = match (form, keys) {
        (SinkForm::Records, _) => ChunkBatch::Records(
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
        (_, Some(keys)) => ChunkBatch::Chunks(
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
        (_, None) => ChunkBatch::Chunks(
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
/// for the commit to write ([`SinkForm::Commit`]; none otherwise).
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
            Box::new(crate::backend::PlainSink),
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
