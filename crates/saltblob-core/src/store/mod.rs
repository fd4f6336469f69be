//! [`BlobStore`]: the saltblob API on top of any [`ChunkStore`], and the protocols of its requests.
//!
//! Each method hands over to the protocol that does the work, which checks the input first. From the bottom up,
//! each file using only those listed before it:
//! - `key.rs`: what a key may be; `pieces.rs`: a stream of byte pieces read as an `AsyncRead`;
//! - `digest.rs`: the blob digest (BLAKE3), hashed in the chunk tasks;
//! - `sealing.rs`: the keys a put seals its version with, and a read opens it with (encryption at rest);
//! - `commit.rs`: the commit primitive, the one writer of manifest records, and its crash-safety rule;
//! - `chunk_writer.rs`: a put's chunks, in batches, within the in-flight window;
//! - `put.rs`: a put: its plan ([`put::PutPlan`]), then intent, chunks and commit;
//! - `delete.rs`: a delete, a conditional delete, the delete of an expired blob;
//! - `read.rs`: a read: its preamble, then streaming ([`BlobStream`]);
//! - this file, the API; then `segments.rs` (segments and their composition: multipart uploads),
//!   `kept_versions.rs` (a key's kept versions listed and removed), `reseal.rs` (sealing plaintext blobs,
//!   re-wrapping sealed ones' data keys), `metadata.rs` (a version's
//!   user metadata changed in place), `sealed_metadata.rs` (what a
//!   sealed version keeps sealed beside its chunks, customer key fingerprints) and [`pass`] (passes over every
//!   manifest, by the backend's ranges, resumable), which add methods to [`BlobStore`].
//!
//! The store stands on `ledger/` (intents, the reclaim queue) and `state/`; gc and fsck (`upkeep/`) stand on the
//! store, and add their methods to [`BlobStore`] themselves.

pub(crate) mod chunk_writer;
pub(crate) mod commit;
pub(crate) mod delete;
mod digest;
mod kept_versions;
mod key;
mod metadata;
pub mod pass;
mod pieces;
pub(crate) mod put;
pub(crate) mod read;
mod reseal;
mod sealed_metadata;
pub(crate) mod sealing;
mod segments;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;

pub use self::kept_versions::{KeyVersion, RemovedVersion};
pub use self::key::{MAX_KEY_LEN, validate_key};
pub use self::pieces::StreamReader;
use self::put::{Finish, PutPlan};
pub use self::read::BlobStream;
pub use self::reseal::Rekeyed;
use crate::backend::{BlobRef, ChunkStore, Namespace};
use crate::base::error::{Error, Result};
use crate::base::version::VersionId;
use crate::encryption::StoreKeys;
use crate::format::layout::{ByteRange, Layout};
use crate::format::manifest::{Manifest, ManifestBody};
use crate::schedule::{self, PriorityClass, ScheduledStore, Scheduler, SchedulerStats};
use crate::state::config::{GetOptions, PutOptions, StoreConfig};
use crate::state::{Inner, ReadBudget};

/// Shortest accepted [`StoreConfig::intent_lease`].
const MIN_INTENT_LEASE: Duration = Duration::from_millis(300);

/// A blob store: values of any size under one key-value API, on any [`ChunkStore`] backend.
///
/// Cloning is cheap and shares the backend.
#[derive(Clone, Debug)]
pub struct BlobStore {
    pub(crate) inner: Arc<Inner>,
}

/// A blob listed by [`BlobStore::list`] and its kin.
///
/// A listing reports a key whose manifest is damaged and goes on: one bad record does not hide the keys after
/// it.
#[derive(Debug)]
pub struct ListEntry {
    /// The key.
    pub key: Bytes,
    /// Its current version's manifest, or [`Error::Corrupt`] when the stored manifest does not decode (a damaged
    /// key is listed whether or not it has expired; [`BlobStore::delete`] removes it).
    pub manifest: Result<Manifest>,
}

/// One page of a listing, from [`BlobStore::list_page`].
#[derive(Debug)]
pub struct ListPage {
    /// The blobs of the page, in key order.
    pub entries: Vec<ListEntry>,
    /// How many records the page read, expired blobs included: what it cost.
    pub read: usize,
    /// The last key the page read, after which the next page starts; `None` when the listing is over (the page
    /// read fewer records than it could).
    pub next: Option<Bytes>,
}

/// How one key is laid out, from [`BlobStore::describe`].
#[derive(Clone, Debug)]
pub struct Description {
    /// The key.
    pub key: Bytes,
    /// The current version's manifest.
    pub manifest: Manifest,
    /// `inline`, `single-partition`, `salted` or `segmented`.
    pub layout_kind: &'static str,
    /// Logical bytes under each salt (empty for inline blobs).
    pub bytes_per_salt: Vec<u64>,
    /// Where the backend keeps the chunks, as it says ([`ChunkStore::chunk_storage`]: on RocksDB `extent`, a
    /// file of the version's own, or `blob files`); for a segmented blob, each kind its segments use, joined by
    /// `+`. `None` for an inline blob, or when the backend does not say.
    pub storage: Option<String>,
}

impl BlobStore {
    /// A store on `backend` with `config`, which is checked against the backend's limits.
    pub fn new(backend: Arc<dyn ChunkStore>, mut config: StoreConfig) -> Result<Self> {
        let info = backend.info();
        config.policy = config
            .policy
            .resolve_for(info.large_chunk_size, info.max_partition_bytes);
        config.policy.validate(info.max_chunk_payload())?;
        if config.inflight_bytes < config.policy.chunk_size as usize {
            return Err(Error::invalid(
                "in-flight window",
                format!(
                    "{} bytes; it must hold at least one chunk ({} bytes)",
                    config.inflight_bytes, config.policy.chunk_size
                ),
            ));
        }
        if config.intent_lease < MIN_INTENT_LEASE {
            return Err(Error::invalid(
                "intent lease",
                format!(
                    "{:?}; it must be at least {MIN_INTENT_LEASE:?}",
                    config.intent_lease
                ),
            ));
        }
        if config.batch_bytes == 0 {
            return Err(Error::invalid(
                "batch size",
                "0 bytes; it must be at least 1",
            ));
        }
        config.scheduler.validate()?;
        let sched = Arc::new(Scheduler::new(config.scheduler.clone()));
        let scheduled: Arc<dyn ChunkStore> = if sched.enabled() {
            Arc::new(ScheduledStore::new(
                Arc::clone(&backend),
                Arc::clone(&sched),
            ))
        } else {
            Arc::clone(&backend)
        };
        Ok(Self {
            inner: Arc::new(Inner {
                backend: scheduled,
                raw_backend: backend,
                sched,
                info,
                read_budget: Arc::new(ReadBudget::new(config.read_ahead_budget as u64)),
                value_buffers: crate::base::collect::ValueBuffers::new(
                    usize::MAX,
                    config.idle_value_buffers,
                ),
                keys: config
                    .encryption
                    .as_ref()
                    .map(|e| StoreKeys::new(e, Arc::clone(&config.clock))),
                store_id: tokio::sync::OnceCell::new(),
                config,
                running: Arc::default(),
                marked_buckets: std::sync::Mutex::default(),
                marked_expiry_buckets: std::sync::Mutex::default(),
                turns: std::sync::Mutex::default(),
                legacy_intents_gone: std::sync::atomic::AtomicBool::new(false),
                write_clock: crate::state::skew::WriteClock::default(),
            }),
        })
    }

    /// The backend (as given: its requests bypass the store's scheduler).
    #[expect(
        clippy::misnamed_getters,
        reason = "`Inner::backend` is the scheduled backend; this returns the one the store was built on"
    )]
    pub fn backend(&self) -> &Arc<dyn ChunkStore> {
        &self.inner.raw_backend
    }

    /// What the store's scheduler is doing: the adaptive limit, and per class the requests admitted, queued
    /// and in flight, bytes moved and time waited.
    pub fn scheduler_stats(&self) -> SchedulerStats {
        self.inner.sched.stats()
    }

    /// The store's read-ahead: bytes its reads now hold fetched ahead of their consumers, and the budget
    /// ([`StoreConfig::read_ahead_budget`]; a read with nothing else in flight may exceed it by one batch).
    pub fn read_ahead(&self) -> (u64, u64) {
        let budget = &self.inner.read_budget;
        (budget.in_use(), budget.limit())
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Stores `data` under `key` as a new version; returns its manifest. The chunks are slices of `data`: no copy.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidArgument`] (options), [`Error::AlreadyExists`] and
    /// [`Error::PreconditionFailed`] (conditions), [`Error::TooLarge`], [`Error::IntentLost`] (retryable),
    /// [`Error::Corrupt`] (the current manifest it replaces does not decode), [`Error::Backend`] and
    /// [`Error::Internal`]. Never a read error ([`Error::NotFound`], [`Error::RangeNotSatisfiable`], checksum
    /// or digest mismatches).
    pub async fn put(
        &self,
        key: impl AsRef<[u8]>,
        data: impl Into<Bytes>,
        opts: &PutOptions,
    ) -> Result<Manifest> {
        let plan = PutPlan::of_bytes(&self.inner, key.as_ref(), opts, data.into())?;
        plan.run(&self.inner, tokio::io::empty(), Finish::Commit)
            .await
    }

    /// Stores everything `reader` yields under `key` as a new version; returns its manifest.
    ///
    /// Memory stays within the in-flight window whatever the length. When the length is not known
    /// ([`PutOptions::size_hint`] unset), up to the window (at most the fan-out threshold + 1 bytes) is read
    /// ahead to choose the layout; a longer stream is laid out as a salted fan-out.
    ///
    /// The new version becomes visible atomically when its manifest commits, after all its chunks are stored. On
    /// error the previous version stays current and the chunks written so far are deleted.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidArgument`] (options), [`Error::AlreadyExists`] and
    /// [`Error::PreconditionFailed`] (conditions), [`Error::TooLarge`], [`Error::SizeMismatch`] (the stream ended before its announced
    /// length), [`Error::Io`] (reading `reader`), [`Error::IntentLost`] (retryable),
    /// [`Error::Corrupt`] (the current manifest it replaces does not decode), [`Error::Backend`] and
    /// [`Error::Internal`]. Never a read error ([`Error::NotFound`], [`Error::RangeNotSatisfiable`], checksum
    /// or digest mismatches).
    pub async fn put_stream<R>(
        &self,
        key: impl AsRef<[u8]>,
        mut reader: R,
        opts: &PutOptions,
    ) -> Result<Manifest>
    where
        R: AsyncRead + Unpin + Send,
    {
        let plan = PutPlan::read(&self.inner, key.as_ref(), opts, &mut reader).await?;
        plan.run(&self.inner, reader, Finish::Commit).await
    }

    /// Reads the current manifest of `key`.
    pub async fn head(&self, key: impl AsRef<[u8]>) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        self.inner.current_manifest(&key).await
    }

    /// Reads the whole current version of `key`, verifying every chunk and the digest.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::NotFound`], [`Error::Corrupt`] (the manifest does not decode) and
    /// [`Error::Backend`]; while the bytes are read: [`Error::ChecksumMismatch`], [`Error::MissingChunk`],
    /// [`Error::DigestMismatch`] (whole reads), [`Error::Corrupt`] (a chunk does not decode) and
    /// [`Error::VersionReclaimed`] (retryable: the version was replaced and reclaimed during the read).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Bytes> {
        self.get_with(key, &GetOptions::new()).await
    }

    /// Reads the current version of `key` as `opts` say: a range of it, in a priority class. See
    /// [`BlobStore::get_stream_with`].
    ///
    /// # Errors
    /// Those of [`BlobStore::get_stream_with`] and of reading the stream.
    pub async fn get_with(&self, key: impl AsRef<[u8]>, opts: &GetOptions) -> Result<Bytes> {
        self.get_stream_with(key, opts).await?.collect_bytes().await
    }

    /// Streams the current version of `key`; see [`BlobStream`].
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::NotFound`], [`Error::Corrupt`] (the manifest does not decode) and
    /// [`Error::Backend`]; while the bytes are read: [`Error::ChecksumMismatch`], [`Error::MissingChunk`],
    /// [`Error::DigestMismatch`] (whole reads), [`Error::Corrupt`] (a chunk does not decode) and
    /// [`Error::VersionReclaimed`] (retryable: the version was replaced and reclaimed during the read).
    pub async fn get_stream(&self, key: impl AsRef<[u8]>) -> Result<BlobStream> {
        self.get_stream_with(key, &GetOptions::new()).await
    }

    /// Reads bytes `range` of the current version of `key` (a half-open `Range<u64>`, `start..`, or any
    /// [`ByteRange`]), fetching only the chunks that cover it.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::NotFound`], [`Error::Corrupt`] (the manifest does not decode) and
    /// [`Error::Backend`]; [`Error::RangeNotSatisfiable`];
    /// while the bytes are read: [`Error::ChecksumMismatch`], [`Error::MissingChunk`],
    /// [`Error::DigestMismatch`] (whole reads), [`Error::Corrupt`] (a chunk does not decode) and
    /// [`Error::VersionReclaimed`] (retryable: the version was replaced and reclaimed during the read).
    pub async fn get_range(
        &self,
        key: impl AsRef<[u8]>,
        range: impl Into<ByteRange>,
    ) -> Result<Bytes> {
        self.get_with(key, &GetOptions::new().with_range(range))
            .await
    }

    /// Streams bytes `range` of the current version of `key`; see [`BlobStore::get_stream_with`].
    ///
    /// # Errors
    /// Those of [`BlobStore::get_stream_with`].
    pub async fn get_range_stream(
        &self,
        key: impl AsRef<[u8]>,
        range: impl Into<ByteRange>,
    ) -> Result<BlobStream> {
        self.get_stream_with(key, &GetOptions::new().with_range(range))
            .await
    }

    /// Streams the current version of `key`, or [`GetOptions::range`] of it (a half-open `Range<u64>`,
    /// `start..`, or any [`ByteRange`], resolved against the size of the version read: one manifest read), in
    /// [`GetOptions::priority`]'s class. A range that does not lie within the blob fails with
    /// [`Error::RangeNotSatisfiable`]; a whole read verifies the digest at its end.
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::InvalidArgument`] (an unknown class, or a customer key given for a version
    /// not sealed under one: [`crate::encryption::CUSTOMER_KEY_NOT_APPLICABLE`]), [`Error::KeyUnavailable`] (the
    /// version's key cannot be had, or its customer key was not given), [`Error::NotFound`],
    /// [`Error::Corrupt`] (the manifest does not decode) and [`Error::Backend`]; [`Error::RangeNotSatisfiable`];
    /// while the bytes are read: [`Error::ChecksumMismatch`], [`Error::MissingChunk`],
    /// [`Error::DigestMismatch`] (whole reads), [`Error::Corrupt`] (a chunk does not decode) and
    /// [`Error::VersionReclaimed`] (retryable: the version was replaced and reclaimed during the read).
    pub async fn get_stream_with(
        &self,
        key: impl AsRef<[u8]>,
        opts: &GetOptions,
    ) -> Result<BlobStream> {
        let key = validate_key(key.as_ref())?;
        read::open(&self.inner, key, opts).await
    }

    /// Deletes `key`; returns the version it held, or `None` if it held none. The deleted version's chunks are
    /// reclaimed after the grace period; the key's kept versions ([`PutOptions::keep_replaced`]) stay, each
    /// until [`BlobStore::remove_version`].
    ///
    /// # Errors
    /// [`Error::InvalidKey`], [`Error::Backend`]; a manifest that does not decode is deleted, not an error.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<Option<VersionId>> {
        let key = validate_key(key.as_ref())?;
        delete::delete(&self.inner, &key).await
    }

    /// Deletes `key` only if its current version is `version`, atomically with the check: a version written
    /// since the caller read `version` is never deleted by it (S3's conditional deletes). The deleted version's
    /// chunks are reclaimed after the grace period, as with [`BlobStore::delete`]. On the cluster backend the
    /// check costs a lightweight transaction, as a conditional put does.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the key holds no blob; [`Error::PreconditionFailed`] when it holds another
    /// version (`actual` names it; `None` when its manifest does not decode); [`Error::InvalidKey`],
    /// [`Error::Backend`]. Nothing is deleted on any error.
    pub async fn delete_version(&self, key: impl AsRef<[u8]>, version: VersionId) -> Result<()> {
        let key = validate_key(key.as_ref())?;
        delete::delete_version(&self.inner, &key, version).await
    }

    /// Every blob whose key starts with `prefix`, in key order (all in memory: see [`BlobStore::list_stream`]).
    ///
    /// # Errors
    /// [`Error::Backend`] when the scan fails. A damaged manifest is not an error of the listing: its entry
    /// carries the error (see [`ListEntry::manifest`]).
    pub async fn list(&self, prefix: impl AsRef<[u8]>) -> Result<Vec<ListEntry>> {
        self.list_stream(prefix.as_ref()).try_collect().await
    }

    /// Every blob whose key starts with `prefix`, in key order, read a page at a time as the stream is
    /// consumed: memory stays bounded by one page, however many keys there are. A failed scan ends the stream
    /// with its error; a damaged manifest does not (see [`ListEntry::manifest`]).
    pub fn list_stream<'a>(&'a self, prefix: &'a [u8]) -> BoxStream<'a, Result<ListEntry>> {
        self.list_stream_after(prefix, None)
    }

    /// Like [`BlobStore::list_stream`], but only the keys after `start_after` (exclusive) when given: a listing
    /// resumed from a marker or a continuation token, or one that skips past a common prefix, as object_store's
    /// `list_with_offset`.
    pub fn list_stream_after<'a>(
        &'a self,
        prefix: &'a [u8],
        start_after: Option<Bytes>,
    ) -> BoxStream<'a, Result<ListEntry>> {
        let pages = self.inner.scan(Namespace::Manifest, prefix, start_after);
        stream::try_unfold(pages, async |mut pages| {
            Ok::<_, Error>(pages.next_page().await?.map(|page| (page, pages)))
        })
        .map_ok(|page| stream::iter(self.live_entries(page).into_iter().map(Ok)))
        .try_flatten()
        .boxed()
    }

    /// One page of the blobs whose key starts with `prefix`, after `start_after` when given, in key order: one
    /// read of at most `limit` manifest records (at least 1), for a caller that bounds its own work, such as a
    /// server that reads a small page after each jump past a common prefix and stops at a budget. Expired blobs
    /// are left out of [`ListPage::entries`] but count in [`ListPage::read`]; a damaged manifest is listed with
    /// its error (see [`ListEntry::manifest`]).
    ///
    /// # Errors
    /// [`Error::Backend`] when the scan fails.
    pub async fn list_page(
        &self,
        prefix: &[u8],
        start_after: Option<Bytes>,
        limit: usize,
    ) -> Result<ListPage> {
        let limit = limit.max(1);
        let records = self
            .inner
            .backend
            .scan_records(Namespace::Manifest, prefix, start_after.as_deref(), limit)
            .await?;
        let read = records.len();
        let next = if read < limit {
            None
        } else {
            records.last().map(|(key, _)| key.clone())
        };
        Ok(ListPage {
            entries: self.live_entries(records),
            read,
            next,
        })
    }

    /// Runs `fut` with `class` as the class of every operation of this store in it, on this task, that names
    /// none (before the store's default class and the layout's), and of the requests no operation covers: the
    /// bookkeeping of a large operation made of several (a server's multipart part: its records) then counts as
    /// that operation's work, not as a foreground load for the scheduler to protect. Work spawned on other tasks
    /// is not in the scope.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a class the scheduler does not know.
    pub async fn in_class<F: Future>(&self, class: PriorityClass, fut: F) -> Result<F::Output> {
        let tag = self.inner.sched.choose(Some(&class), class.clone())?;
        Ok(crate::schedule::in_scope(class, tag, fut).await)
    }

    /// The class the reads of `manifest`'s blob run in when the operation names none: the store's default class
    /// (`priority=`), else by its layout ([`PriorityClass::for_layout`]). What a server reports as the class a
    /// request of this blob ran in.
    pub fn class_of(&self, manifest: &Manifest) -> PriorityClass {
        self.inner
            .sched
            .resolve(None, PriorityClass::for_layout(Some(manifest.layout())))
    }

    /// The class of the requests of this store that no operation's class covers (manifest reads of `head`,
    /// listings, deletes, bucket-level work of a server): the store's default class (`priority=`), else
    /// `interactive`. What a server reports as their class.
    pub fn default_class(&self) -> PriorityClass {
        self.inner.sched.resolve(None, PriorityClass::interactive())
    }

    /// How `key` is laid out: layout kind, chunk geometry and bytes per salt.
    pub async fn describe(&self, key: impl AsRef<[u8]>) -> Result<Description> {
        let key = validate_key(key.as_ref())?;
        let manifest = self.inner.current_manifest(&key).await?;
        let bytes_per_salt = match manifest.layout() {
            // Salt i of each segment, summed over the segments.
            _ if matches!(manifest.body, ManifestBody::Segmented(_)) => {
                let mut sums: Vec<u64> = Vec::new();
                for segment in manifest.segments() {
                    if let ManifestBody::Chunked { layout, .. } = segment.body {
                        let per_salt = layout.bytes_per_salt(segment.size);
                        sums.resize(sums.len().max(per_salt.len()), 0);
                        for (sum, b) in sums.iter_mut().zip(per_salt) {
                            *sum += b;
                        }
                    }
                }
                sums
            }
            Layout::Inline => Vec::new(),
            Layout::Chunked(l) => l.bytes_per_salt(manifest.size),
        };
        let mut kinds: Vec<String> = Vec::new();
        for segment in manifest.segments() {
            if !matches!(segment.body, ManifestBody::Chunked { .. }) {
                continue;
            }
            let blob = BlobRef {
                key: key.clone(),
                version: segment.version,
            };
            let kind = self.inner.backend.chunk_storage(&blob).await?;
            if let Some(kind) = kind.filter(|k| !kinds.contains(k)) {
                kinds.push(kind);
            }
        }
        let storage = (!kinds.is_empty()).then(|| kinds.join("+"));
        Ok(Description {
            key,
            layout_kind: manifest.layout_kind(),
            manifest,
            bytes_per_salt,
            storage,
        })
    }

    /// The class of gc, fsck and the reclaim queue: the store's default class, else `bulk`.
    pub(crate) fn maintenance_class(&self) -> Option<schedule::ClassTag> {
        // The default class was checked when the store was built, and `bulk` always exists.
        self.inner
            .sched
            .choose(None, PriorityClass::bulk())
            .ok()
            .flatten()
    }

    /// The entries of manifest `records` that have not expired, and those that do not decode.
    fn live_entries(&self, records: Vec<(Bytes, Bytes)>) -> Vec<ListEntry> {
        let now = self.inner.now_micros();
        records
            .into_iter()
            .map(|(key, bytes)| {
                let manifest = self.inner.decode_manifest(&key, &bytes);
                ListEntry { key, manifest }
            })
            .filter(|entry| !matches!(&entry.manifest, Ok(m) if m.is_expired(now)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
