//! The chunk writer of a put: chunks grouped into backend calls, at most the in-flight window in flight, and the
//! blob's digest: each chunk hashed in the task that encodes it, or in order on the put's task when the chunk
//! size is no BLAKE3 subtree (see `digest.rs`).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::backend::{BlobRef, ChunkStore, ChunkWrite};
use crate::codec::{ChunkPlace, Codec, encode_chunk};
use crate::intent::Progress;
use crate::layout::ChunkLayout;
use crate::retry::Backoff;
use crate::schedule::{ClassTag, cpu, current_class, in_class};
use crate::state::Inner;
use crate::store::digest::{BlobDigest, ChunkHash, ChunkHasher};
use crate::{Error, Result};

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
    /// Each task's stored bytes and the subtrees of its chunks (none for a sequential digest).
    tasks: JoinSet<TaskResult>,
    batch: Vec<(u64, Bytes)>,
    stored: u64,
    /// Shared with the put's intent lease, which records it at each renewal.
    progress: Arc<Progress>,
    /// The put's class, which the writes of its spawned tasks run in.
    class: Option<ClassTag>,
    /// Whether the chunks are stored unlogged and synced in [`ChunkWriter::finish`] (a large put on a backend
    /// that asks for it: [`crate::backend::BackendInfo::unlogged_chunks_min_bytes`]).
    unlogged: bool,
    /// The blob's digest: fed the subtrees the tasks hash, or the raw chunks in order as they are pushed.
    digest: BlobDigest,
}

impl ChunkWriter {
    /// A writer of the chunks of `blob`, spread over `salt_count` salts, in the caller's class; `size` is the
    /// blob's size or, for a stream of unknown length, a lower bound of it.
    pub(crate) fn new(
        inner: &Inner,
        blob: BlobRef,
        salt_count: u32,
        codec: Codec,
        chunk_size: u32,
        size: u64,
        progress: Arc<Progress>,
    ) -> Self {
        let window_bytes = inner.config.inflight_bytes;
        let class = current_class();
        Self {
            backend: Arc::clone(&inner.backend),
            blob,
            layout: ChunkLayout {
                chunk_size,
                chunk_count: 0,
                salt_count,
            },
            codec,
            per_batch: usize::try_from(inner.chunks_per_batch(chunk_size, class.as_ref()))
                .unwrap_or(1),
            backoff: inner.chunk_backoff(),
            window: Arc::new(Semaphore::new(window_bytes)),
            window_bytes,
            tasks: JoinSet::new(),
            batch: Vec::new(),
            stored: 0,
            progress,
            digest: BlobDigest::new(chunk_size, class.clone()),
            class,
            unlogged: inner.info.unlogged_put(size),
        }
    }

    fn add_stored(
        &mut self,
        done: std::result::Result<TaskResult, tokio::task::JoinError>,
    ) -> Result<()> {
        let (bytes, hashes) = done.map_err(|e| Error::internal("write task failed", e))??;
        self.digest.add(hashes)?;
        self.stored += bytes;
        self.progress.record(self.layout.chunk_count, self.stored);
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
        self.batch.push((self.layout.chunk_count, raw));
        self.layout.chunk_count += 1;
        if self.batch.len() >= self.per_batch {
            self.flush().await?;
        }
        while let Some(done) = self.tasks.try_join_next() {
            self.add_stored(done)?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let raw_bytes: usize = batch.iter().map(|(_, b)| b.len()).sum();
        let permits = u32::try_from(raw_bytes.min(self.window_bytes)).unwrap_or(u32::MAX);
        let permit = Arc::clone(&self.window)
            .acquire_many_owned(permits)
            .await
            .map_err(|e| Error::internal("write window closed", e))?;
        let (backend, blob, layout, codec, backoff, class, unlogged, hasher) = (
            Arc::clone(&self.backend),
            self.blob.clone(),
            self.layout,
            self.codec,
            self.backoff,
            self.class.clone(),
            self.unlogged,
            self.digest.chunk_hasher(),
        );
        self.tasks.spawn(in_class(self.class.clone(), async move {
            let _permit = permit;
            let encoding = blob.clone();
            let (writes, hashes) = cpu::run(class.as_ref(), move || {
                encode_batch(&encoding, layout, codec, hasher, &batch)
            })
            .await?;
            let stored: u64 = writes.iter().map(|w| w.data.len() as u64).sum();
            backoff
                .run(|| {
                    if unlogged {
                        backend.put_chunks_unlogged(&blob, writes.clone())
                    } else {
                        backend.put_chunks(&blob, writes.clone())
                    }
                })
                .await?;
            Ok((stored, hashes))
        }));
        Ok(())
    }

    /// Waits for every chunk and, for unlogged chunks, for the backend to make them durable; returns the stored
    /// bytes and the BLAKE3 digest of the raw bytes pushed. Only then may the put commit.
    pub(crate) async fn finish(&mut self) -> Result<(u64, blake3::Hash)> {
        self.flush().await?;
        while let Some(done) = self.tasks.join_next().await {
            self.add_stored(done)?;
        }
        if self.unlogged {
            let backend = &self.backend;
            self.backoff.run(|| backend.sync_unlogged_chunks()).await?;
        }
        Ok((self.stored, self.digest.finalize().await?))
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
        if self.layout.chunk_count > 0
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

/// The encoded chunks of a batch of `blob`, and their subtrees when `hasher` is given (each chunk hashed
/// right before it is encoded, while it is in the cache).
fn encode_batch(
    blob: &BlobRef,
    layout: ChunkLayout,
    codec: Codec,
    hasher: Option<ChunkHasher>,
    batch: &[(u64, Bytes)],
) -> (Vec<ChunkWrite>, Vec<ChunkHash>) {
    let mut hashes = Vec::new();
    let writes = batch
        .iter()
        .map(|(index, raw)| {
            if let Some(hasher) = hasher {
                hashes.push(hasher.hash(*index, raw));
            }
            let place = ChunkPlace {
                key: &blob.key,
                version: blob.version,
                index: *index,
            };
            ChunkWrite {
                salt: layout.salt_of(*index),
                index: *index,
                data: encode_chunk(place, raw, codec),
            }
        })
        .collect();
    (writes, hashes)
}

/// What a chunk-write task returns: its stored bytes and the subtrees of its chunks.
type TaskResult = Result<(u64, Vec<ChunkHash>)>;
