//! A store's configuration and the state every protocol of it shares ([`Inner`]): the backend behind the
//! scheduler and what it can do, the configuration ([`config`]), the puts running in this process
//! (`running.rs`), this process's clock against the cluster's (`skew.rs`); manifest reads, the one paged scan
//! over [`ChunkStore::scan_records`], the low-water marks kept in [`Namespace::Meta`], and the size and retries
//! of one chunk batch. The protocols above (`ledger/`, the API
//! in [`crate::store`], gc and fsck) write their own records through [`Inner::backend`]; this folder uses only
//! `base/`, [`crate::encryption`], `format/`, [`crate::backend`] and [`crate::schedule`].

pub mod config;
pub(crate) mod running;
pub(crate) mod skew;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::backend::{BackendInfo, ChunkStore, Namespace, Precondition, ReadShape};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::retry::Backoff;
use crate::encryption::StoreKeys;
use crate::format::codec::CHUNK_HEADER_LEN;
use crate::format::layout::Layout;
use crate::format::manifest::Manifest;
use crate::schedule::ClassTag;
use crate::state::config::StoreConfig;
use crate::state::running::RunningPuts;

/// Records read per page of a scan.
pub(crate) const PAGE: usize = 512;

/// The state every operation of one store shares: the backend, what it can do, and the configuration.
#[derive(Debug)]
pub(crate) struct Inner {
    /// The backend behind the store's scheduler (the backend itself when scheduling is off): every request of
    /// the core goes through this.
    pub(crate) backend: Arc<dyn ChunkStore>,
    /// The backend as given, for [`crate::store::BlobStore::backend`].
    pub(crate) raw_backend: Arc<dyn ChunkStore>,
    pub(crate) sched: Arc<crate::schedule::Scheduler>,
    pub(crate) info: BackendInfo,
    pub(crate) config: StoreConfig,
    /// The puts of this store running in this process, which gc and fsck never take over.
    pub(crate) running: Arc<RunningPuts>,
    /// The bytes all reads of this store may fetch ahead of their consumers ([`StoreConfig::read_ahead_budget`]).
    pub(crate) read_budget: Arc<ReadBudget>,
    /// The buffers whole-value reads of large values reuse ([`StoreConfig::idle_value_buffers`]).
    pub(crate) value_buffers: Arc<crate::base::collect::ValueBuffers>,
    /// The store's encryption at run time ([`StoreConfig::encryption`]), `None` without a key provider.
    pub(crate) keys: Option<StoreKeys>,
    /// The store id (`docs/format.md`, "Derived keys") once read or made: every sealed version's keys derive
    /// from it, whichever key sealed it (`store/sealing.rs`).
    pub(crate) store_id: tokio::sync::OnceCell<[u8; crate::encryption::STORE_ID_LEN]>,
    /// The buckets of the reclaim queue whose markers this process wrote (`ledger/reclaim.rs`): each is written
    /// once per process, not with every entry.
    pub(crate) marked_buckets: std::sync::Mutex<std::collections::BTreeSet<u64>>,
    /// The same for the buckets of the expiry index.
    pub(crate) marked_expiry_buckets: std::sync::Mutex<std::collections::BTreeSet<u64>>,
    /// On a store one process owns, its turns (`ledger/turns.rs`): record key → record, kept here instead.
    pub(crate) turns: std::sync::Mutex<std::collections::HashMap<Vec<u8>, bytes::Bytes>>,
    /// Whether a gc pass of this process found the intents of earlier builds ([`crate::backend::Namespace::Intent`])
    /// gone: then reads of a version's intent no longer look there (nothing writes there any more).
    pub(crate) legacy_intents_gone: std::sync::atomic::AtomicBool,
    /// This process's clock against the cluster's, for plain writes ([`skew::WriteClock`]).
    pub(crate) write_clock: skew::WriteClock,
}

/// One budget of read-ahead bytes for every read of a store: a read takes a batch's bytes from it before it
/// fetches the batch ahead of its consumer, and gives them back when the consumer has taken the batch. A read
/// with nothing in flight always gets its next batch (over budget if need be), so that every read progresses;
/// N readers that stop consuming thus hold the budget plus at most N batches, not N windows.
#[derive(Debug)]
pub(crate) struct ReadBudget {
    limit: u64,
    used: AtomicU64,
}

impl ReadBudget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// Takes `bytes`: when they fit in the budget, or whatever the budget says when `must` (the read has nothing
    /// else in flight). `None` when they do not fit.
    pub(crate) fn take(self: &Arc<Self>, bytes: u64, must: bool) -> Option<BudgetHeld> {
        if must {
            self.used.fetch_add(bytes, Ordering::AcqRel);
        } else {
            self.used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes).filter(|total| *total <= self.limit)
                })
                .ok()?;
        }
        Some(BudgetHeld {
            budget: Arc::clone(self),
            bytes,
        })
    }

    /// Bytes taken now.
    pub(crate) fn in_use(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The budget.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }
}

/// Bytes taken from a [`ReadBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct BudgetHeld {
    budget: Arc<ReadBudget>,
    bytes: u64,
}

impl Drop for BudgetHeld {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Inner {
    /// Now, by the store's clock ([`StoreConfig::clock`]): Unix µs.
    pub(crate) fn now_micros(&self) -> u64 {
        self.config.clock.now_micros()
    }

    /// Decodes the manifest record of `key`; errors name the key. Besides the format's own checks, a chunk
    /// size larger than this backend can hold is corruption: no put here could have written it.
    pub(crate) fn decode_manifest(&self, key: &[u8], bytes: &Bytes) -> Result<Manifest> {
        let what = || format!("manifest of key \"{}\"", KeyDisplay::from(key));
        let manifest = Manifest::decode(bytes, &what)?;
        if let Layout::Chunked(l) = manifest.layout() {
            let max = self.info.max_chunk_payload();
            if l.chunk_size > max {
                return Err(Error::corrupt(
                    what(),
                    format!(
                        "chunk size {} is larger than the {} backend's largest chunk ({max} bytes)",
                        l.chunk_size, self.info.name
                    ),
                ));
            }
        }
        Ok(manifest)
    }

    /// The current manifest of `key`, or `None` if there is none or it has expired.
    pub(crate) async fn read_manifest(&self, key: &[u8]) -> Result<Option<Manifest>> {
        let Some(bytes) = self.backend.get_record(Namespace::Manifest, key).await? else {
            return Ok(None);
        };
        let manifest = self.decode_manifest(key, &bytes)?;
        Ok(Some(manifest).filter(|m| !m.is_expired(self.now_micros())))
    }

    /// The current manifest of `key`; [`Error::NotFound`] if there is none or it has expired.
    pub(crate) async fn current_manifest(&self, key: &[u8]) -> Result<Manifest> {
        self.read_manifest(key)
            .await?
            .ok_or_else(|| Error::NotFound { key: key.into() })
    }

    /// Pages through the records of `ns` whose key starts with `prefix`, after `start_after` when given.
    pub(crate) fn scan<'a>(
        &'a self,
        ns: Namespace,
        prefix: &'a [u8],
        start_after: Option<Bytes>,
    ) -> RecordPages<'a> {
        RecordPages {
            backend: &*self.backend,
            ns,
            prefix,
            after: start_after,
            done: false,
        }
    }

    /// A low-water mark of `N` bytes recorded in [`Namespace::Meta`]; `None` if absent, unreadable or of
    /// another length (the scan it bounds then starts from the beginning).
    pub(crate) async fn read_mark<const N: usize>(&self, key: &[u8]) -> Option<[u8; N]> {
        let bytes = self.backend.get_record(Namespace::Meta, key).await.ok()??;
        bytes.as_ref().try_into().ok()
    }

    /// Records a low-water mark in [`Namespace::Meta`]; a failure is logged (the next pass scans more).
    pub(crate) async fn write_mark(&self, key: &[u8], value: &[u8]) {
        let value = Bytes::copy_from_slice(value);
        if let Err(e) = self
            .backend
            .put_record(Namespace::Meta, key, value, &Precondition::None)
            .await
        {
            tracing::warn!(
                "could not record the low-water mark {}: {e}",
                key.escape_ascii()
            );
        }
    }
}

impl Inner {
    /// How a chunk read or write is retried: [`Backoff::CHUNK_IO`], or once when the backend retries by itself
    /// ([`BackendInfo::retries_internally`]).
    pub(crate) fn chunk_backoff(&self) -> Backoff {
        if self.info.retries_internally {
            Backoff::ONCE
        } else {
            Backoff::CHUNK_IO
        }
    }

    /// Chunks of `chunk_size` raw bytes per backend call (a batch): the batch size in raw bytes (capped by the
    /// scheduler's bulk unit in a background `class`, see [`crate::schedule`]), and at most the backend's batch
    /// limit in encoded bytes. At least one.
    pub(crate) fn chunks_per_batch(&self, chunk_size: u32, class: Option<&ClassTag>) -> u64 {
        let raw_budget = self.sched.unit_bytes(self.config.batch_bytes, class);
        self.chunks_in(raw_budget, chunk_size)
    }

    /// Chunks of `chunk_size` raw bytes per backend call of a put whose sink asks for batches of `batch_bytes`
    /// raw bytes ([`crate::backend::SinkShape::batch_bytes`]; `None`: [`Inner::chunks_per_batch`] in `class`).
    pub(crate) fn chunks_per_sink_batch(
        &self,
        chunk_size: u32,
        class: Option<&ClassTag>,
        batch_bytes: Option<usize>,
    ) -> u64 {
        match batch_bytes {
            Some(bytes) => self.chunks_in(bytes, chunk_size),
            None => self.chunks_per_batch(chunk_size, class),
        }
    }

    /// Chunks per backend call of a read of a version of `size` bytes, and calls in flight: the backend's read
    /// shape for a version that large ([`ChunkStore::read_shape`]), the rest from [`Inner::chunks_per_batch`] and
    /// as many calls as the store's in-flight window holds.
    pub(crate) fn read_batches_of(
        &self,
        chunk_size: u32,
        class: Option<&ClassTag>,
        size: u64,
    ) -> (u64, usize) {
        let shape = self.backend.read_shape(size);
        let per_batch = self.chunks_per_sink_batch(chunk_size, class, shape.batch_bytes);
        let batch_bytes = usize::try_from(per_batch)
            .unwrap_or(usize::MAX)
            .saturating_mul(chunk_size as usize);
        let depth = read_depth(shape, self.config.inflight_bytes, batch_bytes);
        (per_batch, depth)
    }

    /// Chunks of `chunk_size` raw bytes in `raw_budget`, at most the backend's batch limit in encoded bytes,
    /// at least one.
    fn chunks_in(&self, raw_budget: usize, chunk_size: u32) -> u64 {
        let by_budget = raw_budget / (chunk_size as usize).max(1);
        let by_backend = self.info.max_batch_bytes / (chunk_size as usize + CHUNK_HEADER_LEN);
        by_budget.min(by_backend).max(1) as u64
    }
}

/// Reads in flight ([`Inner::read_batches_of`]) for a backend's read shape `shape`, an in-flight window of
/// `inflight_bytes` and batches of `batch_bytes`: the window's batches, at most the shape's depth, at least one.
fn read_depth(shape: ReadShape, inflight_bytes: usize, batch_bytes: usize) -> usize {
    let window = (inflight_bytes / batch_bytes.max(1)).max(1);
    shape.depth.map_or(window, |depth| window.min(depth))
}

/// A scan of one namespace, [`PAGE`] records at a time, in key order: the one loop over
/// [`ChunkStore::scan_records`]. Made by [`Inner::scan`].
pub(crate) struct RecordPages<'a> {
    backend: &'a dyn ChunkStore,
    ns: Namespace,
    prefix: &'a [u8],
    after: Option<Bytes>,
    done: bool,
}

impl RecordPages<'_> {
    /// The next page of (key, value) records, or `None` when the scan is over. A page shorter than [`PAGE`]
    /// is the last.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<(Bytes, Bytes)>>> {
        if self.done {
            return Ok(None);
        }
        let page = self
            .backend
            .scan_records(self.ns, self.prefix, self.after.as_deref(), PAGE)
            .await?;
        self.done = page.len() < PAGE;
        let Some((last, _)) = page.last() else {
            return Ok(None);
        };
        self.after = Some(last.clone());
        Ok(Some(page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_keep_the_backends_depth_in_flight_and_otherwise_the_window() {
        let deep = |shape, inflight| read_depth(shape, inflight, 1 << 20);
        assert_eq!(
            deep(ReadShape::default(), 16 << 20),
            16,
            "no depth asked for: the window"
        );
        let shape = ReadShape::new(512 << 10, 2);
        assert_eq!(deep(shape, 16 << 20), 2, "the backend's depth");
        assert_eq!(deep(shape, 1 << 20), 1, "the window is smaller");
        assert_eq!(deep(shape, 0), 1, "at least one");
        let at_least_one = ReadShape::new(0, 0);
        assert_eq!(
            (at_least_one.batch_bytes, at_least_one.depth),
            (Some(1), Some(1))
        );
    }
}
