//! The sinks a backend hands out for a version's chunks ([`crate::backend::ChunkStore::chunk_sink`]): whole
//! chunks through `put_chunks` ([`PlainSink`]), unlogged chunks synced before the commit ([`UnloggedSink`]),
//! records of the version in storage of its own ([`RecordsSink`]), chunks kept for the commit's atomic group
//! ([`CommitSink`]); a backend that writes atomic groups wraps its choice with [`grouped`], and a layer that must
//! see every write takes groups away with [`without_commit_groups`]. Each sink issues its writes through the store
//! the put runs on: its choice is which of the store's calls to make.

use async_trait::async_trait;

use crate::backend::chunks::{ChunkBatch, RecordsPlan, SinkForm, SinkPlan, SinkShape};
use crate::backend::{BlobRef, ChunkSink, ChunkStore};
use crate::base::error::Result;

/// The sink of a backend that chooses nothing: whole chunks through [`ChunkStore::put_chunks`], durable as they
/// are written, in the core's batches, committed with separate writes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainSink;

#[async_trait]
impl ChunkSink for PlainSink {
    fn shape(&self) -> SinkShape {
        SinkShape::plain()
    }

    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()> {
        store.put_chunks(blob, batch.into_chunks()).await
    }
}

/// Whole chunks through [`ChunkStore::put_chunks_unlogged`], made durable by
/// [`ChunkStore::sync_unlogged_chunks`] before the commit: for an engine whose log would otherwise write every
/// chunk byte twice.
#[derive(Clone, Copy, Debug)]
pub struct UnloggedSink {
    /// The shape the backend asks for (its form is [`SinkForm::Chunks`]).
    pub shape: SinkShape,
}

#[async_trait]
impl ChunkSink for UnloggedSink {
    fn shape(&self) -> SinkShape {
        self.shape.with_form(SinkForm::Chunks)
    }

    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()> {
        store.put_chunks_unlogged(blob, batch.into_chunks()).await
    }

    async fn finish(&self, store: &dyn ChunkStore, _blob: &BlobRef) -> Result<()> {
        store.sync_unlogged_chunks().await
    }
}

/// Chunk records of a version stored apart ([`ChunkStore::begin_chunk_records`],
/// [`ChunkStore::put_chunk_records`], then [`ChunkStore::sync_chunk_records`] before the commit): for an engine
/// that keeps a large version in a file of its own.
#[derive(Clone, Copy, Debug)]
pub struct RecordsSink {
    /// The shape the backend asks for (its form is [`SinkForm::Records`]).
    pub shape: SinkShape,
    /// What [`ChunkStore::begin_chunk_records`] is told.
    pub plan: RecordsPlan,
}

#[async_trait]
impl ChunkSink for RecordsSink {
    fn shape(&self) -> SinkShape {
        self.shape.with_form(SinkForm::Records)
    }

    async fn begin(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        store.begin_chunk_records(blob, self.plan).await
    }

    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()> {
        match batch {
            ChunkBatch::Records(records) => store.put_chunk_records(blob, records).await,
            // Whole chunks (never sent to a records sink by the core) are stored as they are.
            ChunkBatch::Chunks(chunks) => store.put_chunks(blob, chunks).await,
        }
    }

    async fn finish(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        store.sync_chunk_records(blob).await
    }
}

/// Whole chunks kept by the core for the commit's atomic group ([`SinkForm::Commit`]): nothing is stored before
/// the commit.
#[derive(Clone, Copy, Debug)]
pub struct CommitSink;

#[async_trait]
impl ChunkSink for CommitSink {
    fn shape(&self) -> SinkShape {
        SinkShape::plain()
            .with_form(SinkForm::Commit)
            .with_commit_group(true)
    }

    /// Never called by the core for this form; stores the chunks plainly if it is.
    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()> {
        store.put_chunks(blob, batch.into_chunks()).await
    }
}

/// The sink a backend that writes atomic groups hands out, given the sinks it would use otherwise: `other`
/// (its sink for `plan`, unlogged or records for a large put) unless the put's chunks fit one call and are
/// written plainly, in which case they go into the commit's group ([`CommitSink`]); either way the commit is
/// one group.
pub fn grouped(plan: &SinkPlan, other: Option<Box<dyn ChunkSink>>) -> Box<dyn ChunkSink> {
    match other {
        Some(sink) => Box::new(Regrouped { sink, group: true }),
        None if plan.commits && plan.fits_one_call() => Box::new(CommitSink),
        None => Box::new(Regrouped {
            sink: Box::new(PlainSink),
            group: true,
        }),
    }
}

/// `sink` without commit groups: for a layer that intercepts record or chunk writes, so that no commit passes it
/// by in a group ([`ChunkStore::write_records`]). Chunks the sink would leave to the commit's group are written
/// plainly, as [`PlainSink`] does.
pub fn without_commit_groups(sink: Box<dyn ChunkSink>) -> Box<dyn ChunkSink> {
    if sink.shape().form == SinkForm::Commit {
        return Box::new(PlainSink);
    }
    Box::new(Regrouped { sink, group: false })
}

/// `sink`, with its put committing with one atomic group or not, as `group` says ([`SinkShape::commit_group`]).
#[derive(Debug)]
struct Regrouped {
    sink: Box<dyn ChunkSink>,
    group: bool,
}

#[async_trait]
impl ChunkSink for Regrouped {
    fn shape(&self) -> SinkShape {
        self.sink.shape().with_commit_group(self.group)
    }

    async fn begin(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        self.sink.begin(store, blob).await
    }

    async fn put(&self, store: &dyn ChunkStore, blob: &BlobRef, batch: ChunkBatch) -> Result<()> {
        self.sink.put(store, blob, batch).await
    }

    async fn finish(&self, store: &dyn ChunkStore, blob: &BlobRef) -> Result<()> {
        self.sink.finish(store, blob).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::chunks::RECORD_CALLS_IN_FLIGHT;

    fn plan(size: u64, commits: bool) -> SinkPlan {
        SinkPlan::new(1024, Some(size), size, 4, commits)
    }

    /// A backend that writes groups leaves a committing put's chunks to its commit when they fit one call, and
    /// otherwise keeps its other choice, with a commit group either way; a parked put (no commit) never waits
    /// for a group; taking groups away writes plainly.
    #[test]
    fn grouped_sinks_choose_the_commit_only_for_a_committing_put_that_fits_one_call() {
        let shape = |sink: &dyn ChunkSink| (sink.shape().form, sink.shape().commit_group);
        assert_eq!(
            shape(&*grouped(&plan(4096, true), None)),
            (SinkForm::Commit, true)
        );
        assert_eq!(
            shape(&*grouped(&plan(4097, true), None)),
            (SinkForm::Chunks, true)
        );
        assert_eq!(
            shape(&*grouped(&plan(100, false), None)),
            (SinkForm::Chunks, true)
        );
        let unknown = SinkPlan::new(1024, None, 100, 4, true);
        assert_eq!(shape(&*grouped(&unknown, None)), (SinkForm::Chunks, true));
        let records = RecordsSink {
            shape: SinkShape::plain().with_calls_in_flight(Some(RECORD_CALLS_IN_FLIGHT)),
            plan: plan(100, true).records_plan(),
        };
        let sink = grouped(&plan(100, true), Some(Box::new(records)));
        assert_eq!(shape(&*sink), (SinkForm::Records, true));
        assert_eq!(sink.shape().calls_in_flight, Some(RECORD_CALLS_IN_FLIGHT));
        let ungrouped = without_commit_groups(sink);
        assert_eq!(shape(&*ungrouped), (SinkForm::Records, false));
        let plain = without_commit_groups(grouped(&plan(4096, true), None));
        assert_eq!(shape(&*plain), (SinkForm::Chunks, false));
    }
}
