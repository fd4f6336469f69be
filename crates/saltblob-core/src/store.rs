//! [`BlobStore`]: the saltblob API on top of any [`ChunkStore`].

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::{self, BoxStream, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::backend::{
    BackendInfo, BlobRef, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition, Previous,
    RecordWrite,
};
use crate::codec::{CHUNK_HEADER_LEN, ChunkPlace, Codec, decode_chunk, encode_chunk};
use crate::config::{PutCondition, PutOptions, StoreConfig};
use crate::layout::{ChunkLayout, Layout, LayoutPolicy, salt_of};
use crate::maintenance::{IntentLease, Progress};
use crate::manifest::{Manifest, ManifestBody, hex};
use crate::version::{VersionId, now_micros};
use crate::{Error, KeyDisplay, Result};

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Compare-and-set attempts of an unconditional commit that keeps losing races to other puts of the same key,
/// before it commits plainly.
const COMMIT_CAS_ATTEMPTS: u32 = 8;

/// Attempts of a chunk read or write that fails with a retryable error.
const ATTEMPTS: u32 = 4;

/// Records read per page when listing or reclaiming.
pub(crate) const PAGE: usize = 512;

/// Key of the reclaim queue's low-water mark in [`Namespace::Meta`].
const RECLAIM_WATERMARK: &[u8] = b"reclaim-watermark";

/// How far behind this process's clock another client's clock may run: the low-water marks of the reclaim queue
/// and of the intent scan stay this far behind what they have seen, so that entries such a client writes are not
/// skipped. One minute.
pub(crate) const CLOCK_MARGIN_MICROS: u64 = 60_000_000;

/// How long after its due time a reclaim entry whose version is still current is kept: a commit or delete queues
/// the version it replaces just before writing, so such an entry may belong to a write that has not landed yet
/// (a stalled engine, a slow cluster). Dropping it earlier would orphan that version once the write lands. A
/// commit that lands later than half this window after queueing queues its replaced version again. Ten minutes.
pub(crate) const COMMIT_WINDOW_MICROS: u64 = 600_000_000;

/// Shortest accepted [`StoreConfig::intent_lease`].
const MIN_INTENT_LEASE: Duration = Duration::from_millis(300);

/// Checks a key: 1 to [`MAX_KEY_LEN`] bytes.
pub fn validate_key(key: &[u8]) -> Result<Bytes> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "the key is empty; keys are 1 to 1024 bytes".into(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidKey {
            reason: format!(
                "the key is {} bytes long; keys are 1 to {MAX_KEY_LEN} bytes",
                key.len()
            ),
        });
    }
    Ok(Bytes::copy_from_slice(key))
}

/// A blob store: values of any size under one key-value API, on any [`ChunkStore`] backend.
///
/// Cloning is cheap and shares the backend.
#[derive(Clone, Debug)]
pub struct BlobStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn ChunkStore>,
    pub(crate) info: BackendInfo,
    pub(crate) config: StoreConfig,
}

/// A blob listed by [`BlobStore::list`].
#[derive(Clone, Debug)]
pub struct ListEntry {
    /// The key.
    pub key: Bytes,
    /// Its current version's manifest.
    pub manifest: Manifest,
}

/// How one key is laid out, from [`BlobStore::describe`].
#[derive(Clone, Debug)]
pub struct Description {
    /// The key.
    pub key: Bytes,
    /// The current version's manifest.
    pub manifest: Manifest,
    /// `inline`, `single-partition` or `salted`.
    pub layout_kind: &'static str,
    /// Logical bytes under each salt (empty for inline blobs).
    pub bytes_per_salt: Vec<u64>,
}

/// What one reclaim pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReclaimReport {
    /// Versions whose chunks were deleted.
    pub versions: u64,
    /// Chunks deleted.
    pub chunks: u64,
    /// Stored bytes freed.
    pub bytes: u64,
    /// Entries dropped because their version is the current one and the write that queued them is over (see
    /// `awaiting_commit`).
    pub still_current: u64,
    /// Due entries left in place whose version is still current: the commit or delete that queued them may
    /// not have landed yet. They are dropped ten minutes after they fell due, or reclaimed once replaced.
    pub awaiting_commit: u64,
    /// When the next queued version becomes due (Unix microseconds), if any is queued.
    pub next_due_micros: Option<u64>,
    /// Entries that do not decode (left in place, reported).
    pub undecodable: u64,
    /// Due entries left in place because a put of that version still holds a live intent.
    pub in_flight: u64,
}

/// The bytes of one version (or a range of it), chunk by chunk, in order.
///
/// At most the store's in-flight window of chunks is fetched ahead of the consumer. A full read verifies the
/// manifest's digest after the last chunk and yields [`Error::DigestMismatch`] instead of ending cleanly if it
/// differs; every chunk is checked against its CRC32C as it arrives.
pub struct BlobStream {
    /// The manifest of the version being read.
    pub manifest: Manifest,
    /// The byte range being read (half-open).
    pub range: Range<u64>,
    stream: BoxStream<'static, Result<Bytes>>,
}

impl std::fmt::Debug for BlobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStream")
            .field("manifest", &self.manifest)
            .field("range", &self.range)
            .finish()
    }
}

impl Stream for BlobStream {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

impl BlobStream {
    /// Reads the whole stream into one buffer.
    pub async fn collect_bytes(mut self) -> Result<Bytes> {
        let len = usize::try_from(self.range.end - self.range.start).unwrap_or(0);
        let mut out = BytesMut::with_capacity(len);
        while let Some(piece) = self.stream.next().await {
            out.extend_from_slice(&piece?);
        }
        Ok(out.freeze())
    }
}

impl BlobStore {
    /// A store on `backend` with `config`, which is checked against the backend's limits.
    pub fn new(backend: Arc<dyn ChunkStore>, config: StoreConfig) -> Result<Self> {
        let info = backend.info();
        config.policy.validate(max_chunk_payload(&info))?;
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
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                info,
                config,
            }),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn ChunkStore> {
        &self.inner.backend
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Stores `data` under `key` as a new version; returns its manifest. The chunks are slices of `data`: no copy.
    pub async fn put(
        &self,
        key: impl AsRef<[u8]>,
        data: impl Into<Bytes>,
        opts: &PutOptions,
    ) -> Result<Manifest> {
        let data: Bytes = data.into();
        let opts = opts.clone().with_size_hint(data.len() as u64);
        self.put_from(key.as_ref(), data, true, tokio::io::empty(), &opts)
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
    pub async fn put_stream<R>(
        &self,
        key: impl AsRef<[u8]>,
        mut reader: R,
        opts: &PutOptions,
    ) -> Result<Manifest>
    where
        R: AsyncRead + Unpin + Send,
    {
        // Bad input fails before any of the stream is consumed.
        validate_key(key.as_ref())?;
        let policy = self.effective_policy(opts)?;
        let inline_probe = policy.inline_limit + 1;
        let lookahead = match opts.size_hint {
            Some(_) => inline_probe,
            None => (policy.fanout_threshold + 1)
                .min(self.inner.config.inflight_bytes as u64)
                .max(inline_probe),
        };
        let mut head = Vec::new();
        let target = usize::try_from(lookahead).unwrap_or(usize::MAX);
        let eof = fill(&mut reader, &mut head, target).await?;
        self.put_from(key.as_ref(), Bytes::from(head), eof, reader, opts)
            .await
    }

    /// The put pipeline: `head` is the start of the blob (all of it when `eof`), `reader` the rest.
    async fn put_from<R>(
        &self,
        key: &[u8],
        head: Bytes,
        eof: bool,
        mut reader: R,
        opts: &PutOptions,
    ) -> Result<Manifest>
    where
        R: AsyncRead + Unpin + Send,
    {
        let key = validate_key(key)?;
        let policy = self.effective_policy(opts)?;
        let head_len = head.len() as u64;
        self.check_size(&key, head_len, opts.size_hint)?;
        let known_size = match (opts.size_hint, eof) {
            (Some(hint), true) if hint != head_len => {
                return Err(Error::SizeMismatch {
                    key: key.as_ref().into(),
                    expected: hint,
                    actual: head_len,
                });
            }
            (Some(hint), _) => Some(hint),
            (None, true) => Some(head_len),
            (None, false) => None,
        };
        if let Some(size) = known_size {
            self.check_size(&key, size, None)?;
        }
        let mut manifest = Manifest {
            version: VersionId::generate(),
            size: 0,
            created_micros: now_micros(),
            expires_micros: None,
            digest: [0; 32],
            body: ManifestBody::Inline(Bytes::new()),
            content_type: opts.content_type.clone(),
            metadata: opts.metadata.clone(),
        };
        manifest.validate_attributes()?;
        let pre = self.precheck(&key, opts.condition).await?;

        let mut hasher = blake3::Hasher::new();
        let layout = known_size.map(|s| policy.layout_for(s));
        if layout == Some(Layout::Inline) {
            hasher.update(&head);
            manifest.size = head_len;
            manifest.digest = *hasher.finalize().as_bytes();
            manifest.body = ManifestBody::Inline(head);
            self.commit(&key, &manifest, pre, None).await?;
            return Ok(manifest);
        }

        let planned_salt = match layout {
            Some(Layout::Chunked(l)) => l.salt_count,
            _ => policy.max_salt,
        };
        let blob = BlobRef {
            key: key.clone(),
            version: manifest.version,
        };
        // The intent goes first: a writer that dies from here on leaves a record that lets gc find its chunks.
        let lease = IntentLease::acquire(&self.inner, &blob, planned_salt).await?;
        let mut writer = ChunkWriter::new(
            &self.inner,
            blob.clone(),
            planned_salt,
            policy.codec,
            policy.chunk_size,
            lease.progress(),
        );
        let written = self
            .write_chunks(
                &key,
                &mut reader,
                head,
                eof,
                &mut writer,
                &mut hasher,
                policy.chunk_size,
                opts.size_hint,
            )
            .await;
        let written = written.and_then(|(size, stored)| match opts.size_hint {
            Some(hint) if hint != size => Err(Error::SizeMismatch {
                key: key.as_ref().into(),
                expected: hint,
                actual: size,
            }),
            _ => Ok((size, stored)),
        });
        // A put whose lease lapsed must not commit: gc may already be deleting its chunks.
        let (size, stored_bytes) = match written.and_then(|w| lease.confirm().map(|()| w)) {
            Ok(v) => v,
            Err(e) => {
                let deleted = writer.abort().await;
                lease.end(deleted).await;
                return Err(e);
            }
        };
        let chunk_count = writer.next_index;
        let salt_count =
            u32::try_from(u64::from(planned_salt).min(chunk_count)).unwrap_or(planned_salt);
        manifest.size = size;
        manifest.digest = *hasher.finalize().as_bytes();
        manifest.body = ManifestBody::Chunked {
            layout: ChunkLayout {
                chunk_size: policy.chunk_size,
                chunk_count,
                salt_count,
            },
            codec: policy.codec,
            stored_bytes,
        };
        self.commit(&key, &manifest, pre, Some(lease)).await?;
        Ok(manifest)
    }

    /// Feeds `head` and then the rest of `reader` to `writer` chunk by chunk; returns (size, stored bytes).
    #[expect(
        clippy::too_many_arguments,
        reason = "one private step of put_stream, sharing its state"
    )]
    async fn write_chunks<R: AsyncRead + Unpin + Send>(
        &self,
        key: &Bytes,
        reader: &mut R,
        mut head: Bytes,
        mut eof: bool,
        writer: &mut ChunkWriter,
        hasher: &mut blake3::Hasher,
        chunk_size: u32,
        size_hint: Option<u64>,
    ) -> Result<(u64, u64)> {
        let cs = chunk_size as usize;
        let mut size = 0u64;
        loop {
            while head.len() >= cs || (eof && !head.is_empty()) {
                let chunk = head.split_to(cs.min(head.len()));
                hasher.update(&chunk);
                size += chunk.len() as u64;
                writer.push(chunk).await?;
            }
            if eof {
                break;
            }
            let mut buf = Vec::with_capacity(cs);
            buf.extend_from_slice(&head);
            eof = fill(reader, &mut buf, cs).await?;
            self.check_size(key, size + buf.len() as u64, size_hint)?;
            head = Bytes::from(buf);
        }
        let stored = writer.finish().await?;
        Ok((size, stored))
    }

    /// Reads the current manifest of `key`.
    pub async fn head(&self, key: impl AsRef<[u8]>) -> Result<Manifest> {
        let key = validate_key(key.as_ref())?;
        self.inner
            .read_manifest(&key)
            .await?
            .ok_or_else(|| Error::NotFound {
                key: key.as_ref().into(),
            })
    }

    /// Reads the whole current version of `key`, verifying every chunk and the digest.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Bytes> {
        self.get_stream(key).await?.collect_bytes().await
    }

    /// Streams the current version of `key`; see [`BlobStream`].
    pub async fn get_stream(&self, key: impl AsRef<[u8]>) -> Result<BlobStream> {
        let key = validate_key(key.as_ref())?;
        let manifest = self.head(&key).await?;
        let range = 0..manifest.size;
        Ok(self.stream_version(key, manifest, range))
    }

    /// Reads bytes `range` (half-open) of the current version of `key`, fetching only the chunks that cover it.
    pub async fn get_range(&self, key: impl AsRef<[u8]>, range: Range<u64>) -> Result<Bytes> {
        self.get_range_stream(key, range)
            .await?
            .collect_bytes()
            .await
    }

    /// Streams bytes `range` (half-open) of the current version of `key`. A range that does not lie within the
    /// blob fails with [`Error::RangeNotSatisfiable`].
    pub async fn get_range_stream(
        &self,
        key: impl AsRef<[u8]>,
        range: Range<u64>,
    ) -> Result<BlobStream> {
        let key = validate_key(key.as_ref())?;
        let manifest = self.head(&key).await?;
        if range.start > range.end || range.end > manifest.size {
            return Err(Error::RangeNotSatisfiable {
                key: key.as_ref().into(),
                start: range.start,
                end: range.end,
                size: manifest.size,
            });
        }
        Ok(self.stream_version(key, manifest, range))
    }

    /// Deletes `key`; returns the version it held, or `None` if it held none. The deleted version's chunks are
    /// reclaimed after the grace period.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<Option<VersionId>> {
        let key = validate_key(key.as_ref())?;
        // Queued before the delete, as in a put's commit, so that a crash right after it orphans nothing.
        let pre_read = match self.inner.read_manifest(&key).await {
            Ok(m) => m,
            // A damaged manifest must stay deletable; its chunks are left to `fsck --repair`.
            Err(e) if e.is_corruption() => None,
            Err(e) => return Err(e),
        };
        let queued_at = now_micros();
        if let Some(old) = &pre_read {
            self.inner.schedule_reclaim(&key, old).await?;
        }
        let previous = match self
            .inner
            .backend
            .delete_record(Namespace::Manifest, &key, &Precondition::None)
            .await?
        {
            RecordWrite::Done(Previous::Value(bytes)) => {
                Some(self.inner.decode_manifest(&key, &bytes)?)
            }
            RecordWrite::Done(Previous::Absent) => None,
            RecordWrite::Done(Previous::Unknown) | RecordWrite::ConditionFailed(_) => {
                pre_read.clone()
            }
        };
        let version = previous.as_ref().map(|m| m.version);
        self.inner
            .queue_replaced(&key, None, previous, pre_read.as_ref(), queued_at)
            .await;
        Ok(version)
    }

    /// Every blob whose key starts with `prefix`, in key order.
    pub async fn list(&self, prefix: impl AsRef<[u8]>) -> Result<Vec<ListEntry>> {
        let mut all = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let page = self
                .list_page(prefix.as_ref(), after.as_deref(), PAGE)
                .await?;
            let Some(last) = page.last() else { break };
            after = Some(last.key.clone());
            let full = page.len() == PAGE;
            all.extend(page);
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// Up to `limit` blobs whose key starts with `prefix`, in key order, after `start_after` when given.
    pub async fn list_page(
        &self,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<ListEntry>> {
        let now = now_micros();
        let records = self
            .inner
            .backend
            .scan_records(Namespace::Manifest, prefix, start_after, limit)
            .await?;
        let mut out = Vec::with_capacity(records.len());
        for (key, bytes) in records {
            let manifest = self.inner.decode_manifest(&key, &bytes)?;
            if !manifest.is_expired(now) {
                out.push(ListEntry { key, manifest });
            }
        }
        Ok(out)
    }

    /// How `key` is laid out: layout kind, chunk geometry and bytes per salt.
    pub async fn describe(&self, key: impl AsRef<[u8]>) -> Result<Description> {
        let key = validate_key(key.as_ref())?;
        let manifest = self.head(&key).await?;
        let (layout_kind, bytes_per_salt) = match manifest.layout() {
            Layout::Inline => ("inline", Vec::new()),
            Layout::Chunked(l) => (
                if l.salt_count == 1 {
                    "single-partition"
                } else {
                    "salted"
                },
                l.bytes_per_salt(manifest.size),
            ),
        };
        Ok(Description {
            key,
            manifest,
            layout_kind,
            bytes_per_salt,
        })
    }

    /// Deletes the chunks of every replaced or deleted version whose grace period has passed.
    pub async fn reclaim_due(&self) -> Result<ReclaimReport> {
        self.inner.reclaim(now_micros(), false, b"").await
    }

    /// Like [`BlobStore::reclaim_due`], but treats every queued version as due (grace period 0).
    pub async fn reclaim_all(&self) -> Result<ReclaimReport> {
        self.inner.reclaim(u64::MAX, false, b"").await
    }

    fn effective_policy(&self, opts: &PutOptions) -> Result<LayoutPolicy> {
        let mut policy = self.inner.config.policy.clone();
        if let Some(cs) = opts.chunk_size {
            policy.chunk_size = cs;
        }
        if let Some(s) = opts.max_salt {
            policy.max_salt = s;
        }
        if let Some(c) = opts.codec {
            policy.codec = c;
        }
        policy.validate(max_chunk_payload(&self.inner.info))?;
        Ok(policy)
    }

    /// Fails as soon as a put has seen more bytes than the configured maximum or its announced size.
    fn check_size(&self, key: &[u8], seen: u64, size_hint: Option<u64>) -> Result<()> {
        if let Some(max) = self.inner.config.max_blob_size
            && seen > max
        {
            return Err(Error::TooLarge {
                key: key.into(),
                size: seen,
                max,
            });
        }
        match size_hint {
            Some(hint) if seen > hint => Err(Error::SizeMismatch {
                key: key.into(),
                expected: hint,
                actual: seen,
            }),
            _ => Ok(()),
        }
    }

    /// Checks the put condition before any chunk is written and returns what the commit needs.
    async fn precheck(&self, key: &Bytes, condition: PutCondition) -> Result<PreCheck> {
        let read_raw = || self.inner.backend.get_record(Namespace::Manifest, key);
        match condition {
            // What an unconditional put replaces is read right before its commit.
            PutCondition::None => Ok(PreCheck {
                condition: Precondition::None,
                expected: condition,
            }),
            PutCondition::IfAbsent => match read_raw().await? {
                Some(bytes) => Err(self.inner.condition_error(key, condition, Some(&bytes))),
                None => Ok(PreCheck {
                    condition: Precondition::Absent,
                    expected: condition,
                }),
            },
            PutCondition::IfVersion(v) => {
                let raw = read_raw().await?;
                let current = raw
                    .as_ref()
                    .map(|b| self.inner.decode_manifest(key, b))
                    .transpose()?;
                match (raw, current) {
                    (Some(raw), Some(m)) if m.version == v => Ok(PreCheck {
                        condition: Precondition::Equals(raw),
                        expected: condition,
                    }),
                    (raw, _) => Err(self.inner.condition_error(key, condition, raw.as_ref())),
                }
            }
        }
    }

    /// Writes the manifest: the commit point. The version it replaces is queued for reclaim first, so that a
    /// crash right after the commit cannot orphan it (if the commit does not happen, the reclaimer finds that
    /// version still current and drops the entry); a failure to queue fails the put before anything changed.
    ///
    /// On backends whose conditional writes are cheap (those that report the replaced record), an unconditional
    /// put commits with a compare-and-set on the manifest it read and queued, and reads, queues and tries again
    /// when another put committed in between, so that what it replaces is always queued first. Elsewhere (CQL,
    /// where a condition costs a Paxos round) it writes plainly: a put committing in between is queued after the
    /// commit, and left to `fsck --repair` if this process dies in that moment.
    ///
    /// `lease` (a chunked put's) is ended once the chunks are committed, deleted or queued for reclaim; if
    /// cleaning up after a failure fails, the intent is left to expire, and gc reclaims the chunks.
    async fn commit(
        &self,
        key: &Bytes,
        manifest: &Manifest,
        pre: PreCheck,
        lease: Option<IntentLease>,
    ) -> Result<()> {
        let inner = &self.inner;
        let cas = pre.condition == Precondition::None && inner.info.reports_previous;
        let mut raw = match &pre.condition {
            // Not knowing what the commit replaces would leave it unqueued: fail instead.
            Precondition::None => match inner.backend.get_record(Namespace::Manifest, key).await {
                Ok(raw) => raw,
                Err(e) => {
                    end_lease(lease, inner.discard(key, manifest).await).await;
                    return Err(e);
                }
            },
            Precondition::Equals(expected) => Some(expected.clone()),
            Precondition::Absent => None,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let before = raw
                .as_ref()
                .and_then(|b| inner.decode_manifest(key, b).ok());
            let queued_at = now_micros();
            if let Some(old) = &before
                && let Err(e) = inner.schedule_reclaim(key, old).await
            {
                end_lease(lease, inner.discard(key, manifest).await).await;
                return Err(e);
            }
            let condition = if cas && attempt <= COMMIT_CAS_ATTEMPTS {
                raw.clone()
                    .map_or(Precondition::Absent, Precondition::Equals)
            } else {
                pre.condition.clone()
            };
            let outcome = inner
                .backend
                .put_record(Namespace::Manifest, key, manifest.encode(), &condition)
                .await;
            let replaced = match outcome {
                Ok(RecordWrite::Done(Previous::Value(bytes))) => {
                    inner.decode_manifest(key, &bytes).ok()
                }
                Ok(RecordWrite::Done(Previous::Absent)) => None,
                Ok(RecordWrite::Done(Previous::Unknown)) => before.clone(),
                // Another put committed since the read: queue what it committed and try again.
                Ok(RecordWrite::ConditionFailed(current)) if condition != pre.condition => {
                    raw = current;
                    continue;
                }
                Ok(RecordWrite::ConditionFailed(current)) => {
                    end_lease(lease, inner.discard(key, manifest).await).await;
                    return Err(inner.condition_error(key, pre.expected, current.as_ref()));
                }
                Err(e) => {
                    // The commit may or may not have happened. Queue this version for reclaim: the reclaimer
                    // leaves it alone if it did become current.
                    end_lease(lease, inner.schedule_reclaim_logged(key, manifest).await).await;
                    return Err(e);
                }
            };
            inner
                .queue_replaced(
                    key,
                    Some(manifest.version),
                    replaced,
                    before.as_ref(),
                    queued_at,
                )
                .await;
            end_lease(lease, true).await;
            return Ok(());
        }
    }

    pub(crate) fn stream_version(
        &self,
        key: Bytes,
        manifest: Manifest,
        range: Range<u64>,
    ) -> BlobStream {
        let full = range.start == 0 && range.end == manifest.size;
        let stream: BoxStream<'static, Result<Bytes>> = match &manifest.body {
            ManifestBody::Inline(data) => {
                let item = if full && *blake3::hash(data).as_bytes() != manifest.digest {
                    Err(digest_error(&key, &manifest, blake3::hash(data)))
                } else {
                    let (s, e) = (usize::try_from(range.start), usize::try_from(range.end));
                    match (s, e) {
                        (Ok(s), Ok(e)) if s <= e && e <= data.len() => Ok(data.slice(s..e)),
                        _ => Err(Error::corrupt(
                            "inline manifest",
                            "range outside the inline payload",
                        )),
                    }
                };
                stream::once(async move { item }).boxed()
            }
            ManifestBody::Chunked { layout, .. } => {
                self.stream_chunks(key, &manifest, *layout, range.clone(), full)
            }
        };
        BlobStream {
            manifest,
            range,
            stream,
        }
    }

    fn stream_chunks(
        &self,
        key: Bytes,
        manifest: &Manifest,
        layout: ChunkLayout,
        range: Range<u64>,
        verify_digest: bool,
    ) -> BoxStream<'static, Result<Bytes>> {
        let chunks = layout.chunks_covering(&range);
        let per_segment = self.inner.chunks_per_segment(layout.chunk_size);
        let depth = (self.inner.config.inflight_bytes
            / (per_segment as usize * layout.chunk_size as usize))
            .max(1);
        let segments: Vec<Range<u64>> = (chunks.start..chunks.end)
            .step_by(usize::try_from(per_segment).unwrap_or(1))
            .map(|s| s..(s + per_segment).min(chunks.end))
            .collect();
        let inner = Arc::clone(&self.inner);
        let (version, size) = (manifest.version, manifest.size);
        let blob = BlobRef {
            key: key.clone(),
            version,
        };
        let fetches = stream::iter(segments)
            .map(move |segment| {
                let task = AbortOnDrop(tokio::spawn(Arc::clone(&inner).fetch_segment(
                    blob.clone(),
                    layout,
                    size,
                    segment,
                    range.clone(),
                )));
                async move {
                    task.await.map_err(|e| {
                        Error::backend("saltblob", format!("read task failed: {e}"), false)
                    })?
                }
            })
            .buffered(depth);
        let state = ReadState {
            fetches: fetches.boxed(),
            pending: VecDeque::new(),
            hasher: verify_digest.then(blake3::Hasher::new),
            key,
            manifest: manifest.clone(),
            done: false,
        };
        stream::unfold(state, |mut st| async move {
            loop {
                if let Some(piece) = st.pending.pop_front() {
                    return Some((Ok(piece), st));
                }
                if st.done {
                    return None;
                }
                match st.fetches.next().await {
                    Some(Ok(pieces)) => {
                        if let Some(h) = st.hasher.as_mut() {
                            pieces.iter().for_each(|p| {
                                h.update(p);
                            });
                        }
                        st.pending.extend(pieces);
                    }
                    Some(Err(e)) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                    None => {
                        st.done = true;
                        if let Some(h) = st.hasher.take() {
                            let got = h.finalize();
                            if *got.as_bytes() != st.manifest.digest {
                                let err = digest_error(&st.key, &st.manifest, got);
                                return Some((Err(err), st));
                            }
                        }
                        return None;
                    }
                }
            }
        })
        .boxed()
    }
}

/// A spawned task that is aborted when its handle is dropped, so that a reader who stops early does not leave
/// chunk fetches running.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = std::result::Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the commit of a put needs from its pre-check.
struct PreCheck {
    condition: Precondition,
    expected: PutCondition,
}

struct ReadState {
    fetches: BoxStream<'static, Result<Vec<Bytes>>>,
    pending: VecDeque<Bytes>,
    /// Present when the read covers the whole blob and its digest is to be verified.
    hasher: Option<blake3::Hasher>,
    key: Bytes,
    manifest: Manifest,
    done: bool,
}

/// Ends a chunked put's lease, if any (see [`IntentLease::end`]).
async fn end_lease(lease: Option<IntentLease>, settled: bool) {
    if let Some(lease) = lease {
        lease.end(settled).await;
    }
}

fn digest_error(key: &[u8], manifest: &Manifest, got: blake3::Hash) -> Error {
    Error::DigestMismatch {
        key: key.into(),
        version: manifest.version,
        expected: manifest.digest_hex(),
        actual: hex(got.as_bytes()),
    }
}

fn max_chunk_payload(info: &BackendInfo) -> u32 {
    info.max_chunk_bytes.saturating_sub(CHUNK_HEADER_LEN as u32)
}

/// Reads from `reader` until `buf` holds `target` bytes or the stream ends; returns whether it ended.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    target: usize,
) -> Result<bool> {
    while buf.len() < target {
        let want = target - buf.len();
        let n = reader.take(want as u64).read_buf(buf).await?;
        if n == 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or `attempts` attempts have failed.
async fn with_retry<T, F, Fut>(attempts: u32, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(20);
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && attempt < attempts => {
                tracing::debug!("retrying after transient error (attempt {attempt}): {e}");
                tokio::time::sleep(delay).await;
                delay *= 4;
                attempt += 1;
            }
            other => return other,
        }
    }
}

impl Inner {
    /// Attempts of a chunk read or write: one when the backend retries by itself.
    fn attempts(&self) -> u32 {
        if self.info.retries_internally {
            1
        } else {
            ATTEMPTS
        }
    }

    fn chunks_per_segment(&self, chunk_size: u32) -> u64 {
        let budget = self.config.batch_bytes.min(self.info.max_batch_bytes);
        (budget / (chunk_size as usize + CHUNK_HEADER_LEN)).max(1) as u64
    }

    pub(crate) fn decode_manifest(&self, key: &[u8], bytes: &Bytes) -> Result<Manifest> {
        Manifest::decode(bytes, &|| {
            format!("manifest of key \"{}\"", KeyDisplay::from(key))
        })
    }

    /// The current manifest of `key`, or `None` if there is none or it has expired.
    pub(crate) async fn read_manifest(&self, key: &[u8]) -> Result<Option<Manifest>> {
        let Some(bytes) = self.backend.get_record(Namespace::Manifest, key).await? else {
            return Ok(None);
        };
        let manifest = self.decode_manifest(key, &bytes)?;
        Ok(Some(manifest).filter(|m| !m.is_expired(now_micros())))
    }

    fn condition_error(
        &self,
        key: &[u8],
        expected: PutCondition,
        current: Option<&Bytes>,
    ) -> Error {
        let actual = current
            .and_then(|b| self.decode_manifest(key, b).ok())
            .map(|m| m.version);
        match (expected, actual) {
            (PutCondition::IfVersion(v), actual) => Error::PreconditionFailed {
                key: key.into(),
                expected: v,
                actual,
            },
            (_, Some(current)) => Error::AlreadyExists {
                key: key.into(),
                current,
            },
            (_, None) => Error::AlreadyExists {
                key: key.into(),
                current: VersionId(0),
            },
        }
    }

    /// Deletes the chunks of a version that was never committed; false if that failed (logged).
    async fn discard(&self, key: &Bytes, manifest: &Manifest) -> bool {
        if let ManifestBody::Chunked { layout, .. } = &manifest.body {
            let blob = BlobRef {
                key: key.clone(),
                version: manifest.version,
            };
            if let Err(e) = self
                .backend
                .delete_chunks(&blob, layout.salt_count, layout.chunk_count)
                .await
            {
                tracing::warn!(
                    "could not delete the chunks of uncommitted version {}: {e}",
                    manifest.version
                );
                return false;
            }
        }
        true
    }

    /// After a commit of `written` (`None`: a delete) that the backend says replaced `replaced`, having queued
    /// `queued` at `queued_at` before writing: queues what it replaced when that is not what it queued (another
    /// write landed in between), or when this write landed so late that the reclaimer may have dropped the first
    /// entry as still current (see [`COMMIT_WINDOW_MICROS`]).
    async fn queue_replaced(
        &self,
        key: &Bytes,
        written: Option<VersionId>,
        replaced: Option<Manifest>,
        queued: Option<&Manifest>,
        queued_at: u64,
    ) {
        let Some(old) = replaced.filter(|old| Some(old.version) != written) else {
            return;
        };
        let late = now_micros().saturating_sub(queued_at) > COMMIT_WINDOW_MICROS / 2;
        if late || Some(old.version) != queued.map(|q| q.version) {
            self.schedule_reclaim_logged(key, &old).await;
        }
    }

    /// Like [`Inner::schedule_reclaim`], but failures are logged, not returned: for when the operation that
    /// replaced the version has already succeeded. False if queueing failed.
    pub(crate) async fn schedule_reclaim_logged(&self, key: &Bytes, manifest: &Manifest) -> bool {
        match self.schedule_reclaim(key, manifest).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "could not queue version {} for reclaim: {e}",
                    manifest.version
                );
                false
            }
        }
    }

    /// Queues the chunks of `manifest` for deletion after the grace period (inline versions have none).
    pub(crate) async fn schedule_reclaim(&self, key: &Bytes, manifest: &Manifest) -> Result<()> {
        let ManifestBody::Chunked {
            layout,
            stored_bytes,
            ..
        } = &manifest.body
        else {
            return Ok(());
        };
        let grace = u64::try_from(self.config.grace.as_micros()).unwrap_or(u64::MAX);
        let entry = ReclaimEntry {
            due_micros: now_micros().saturating_add(grace),
            version: manifest.version,
            key: key.clone(),
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: *stored_bytes,
        };
        let (k, v) = entry.encode();
        self.backend
            .put_record(Namespace::Reclaim, &k, v, &Precondition::None)
            .await
            .map(|_| ())
    }

    /// Processes the reclaim queue up to due time `cutoff` for keys starting with `prefix` (only counting what
    /// it would do when `dry_run`). The scan starts at the low-water mark left by the last full pass that
    /// removed entries, so that the deletion markers of processed entries (tombstones on Cassandra) are not
    /// read again and again.
    pub(crate) async fn reclaim(
        &self,
        cutoff: u64,
        dry_run: bool,
        prefix: &[u8],
    ) -> Result<ReclaimReport> {
        let started = now_micros();
        let mut report = ReclaimReport::default();
        let mut after = self.reclaim_watermark().await.map(|w| {
            // "After" this 8-byte key is every entry due at or after `w`.
            Bytes::copy_from_slice(&w.saturating_sub(1).to_be_bytes())
        });
        let mut first_kept = None;
        let outcome = self
            .reclaim_from(
                cutoff,
                dry_run,
                prefix,
                &mut after,
                &mut report,
                &mut first_kept,
            )
            .await;
        if outcome.is_ok()
            && !dry_run
            && prefix.is_empty()
            && report.versions + report.still_current > 0
        {
            // Every entry due before min(start, cutoff) was processed, except those left in place (the first of
            // which is due at `first_kept`). Entries queued from now on are due at or after their queueing time;
            // the margin covers clocks of other clients that run behind.
            let mark = started
                .min(cutoff)
                .min(first_kept.unwrap_or(u64::MAX))
                .saturating_sub(CLOCK_MARGIN_MICROS);
            self.write_mark(RECLAIM_WATERMARK, &mark.to_le_bytes())
                .await;
        }
        outcome.map(|()| report)
    }

    /// Where the last reclaim pass left off (Unix microseconds), if it recorded it.
    async fn reclaim_watermark(&self) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.read_mark(RECLAIM_WATERMARK)
                .await?
                .as_ref()
                .try_into()
                .ok()?,
        ))
    }

    /// A low-water mark recorded in [`Namespace::Meta`]; `None` if absent or unreadable (the scan it bounds
    /// then starts from the beginning).
    pub(crate) async fn read_mark(&self, key: &[u8]) -> Option<Bytes> {
        self.backend.get_record(Namespace::Meta, key).await.ok()?
    }

    /// Records a low-water mark in [`Namespace::Meta`]; a failure is logged (the next pass scans more).
    pub(crate) async fn write_mark(&self, key: &'static [u8], value: &[u8]) {
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

    async fn reclaim_from(
        &self,
        cutoff: u64,
        dry_run: bool,
        prefix: &[u8],
        after: &mut Option<Bytes>,
        report: &mut ReclaimReport,
        first_kept: &mut Option<u64>,
    ) -> Result<()> {
        let now = now_micros();
        loop {
            let page = self
                .backend
                .scan_records(Namespace::Reclaim, b"", after.as_deref(), PAGE)
                .await?;
            let full = page.len() == PAGE;
            for (k, v) in page {
                *after = Some(k.clone());
                let Some(entry) = ReclaimEntry::decode(&k, &v) else {
                    report.undecodable += 1;
                    continue;
                };
                if entry.due_micros > cutoff {
                    // The queue is sorted by due time: nothing after this entry is due either.
                    report.next_due_micros = Some(entry.due_micros);
                    return Ok(());
                }
                if !entry.key.starts_with(prefix) {
                    continue;
                }
                let current = match self.read_manifest(&entry.key).await {
                    Ok(m) => m.map(|m| m.version),
                    // Unsure what is current: delete nothing.
                    Err(e) if e.is_corruption() => Some(entry.version),
                    Err(e) => return Err(e),
                };
                let blob = BlobRef {
                    key: entry.key.clone(),
                    version: entry.version,
                };
                if current == Some(entry.version) {
                    if now < entry.due_micros.saturating_add(COMMIT_WINDOW_MICROS) {
                        // The commit or delete that queued it may not have landed yet.
                        report.awaiting_commit += 1;
                        first_kept.get_or_insert(entry.due_micros);
                        continue;
                    }
                    report.still_current += 1;
                } else if self.live_intent(&blob).await? {
                    // Only when a gc pass died between queueing an abandoned put and fencing its intent.
                    report.in_flight += 1;
                    first_kept.get_or_insert(entry.due_micros);
                    continue;
                } else {
                    if !dry_run {
                        self.backend
                            .delete_chunks(&blob, entry.salt_count, entry.chunk_count)
                            .await?;
                    }
                    report.versions += 1;
                    report.chunks += entry.chunk_count;
                    report.bytes += entry.stored_bytes;
                }
                if !dry_run {
                    self.backend
                        .delete_record(Namespace::Reclaim, &k, &Precondition::None)
                        .await?;
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Fetches and decodes chunks `segment`, trimmed to `range`.
    async fn fetch_segment(
        self: Arc<Self>,
        blob: BlobRef,
        layout: ChunkLayout,
        size: u64,
        segment: Range<u64>,
        range: Range<u64>,
    ) -> Result<Vec<Bytes>> {
        let ids: Vec<ChunkId> = segment
            .map(|index| ChunkId {
                salt: layout.salt_of(index),
                index,
            })
            .collect();
        let slots = with_retry(self.attempts(), || self.backend.get_chunks(&blob, &ids)).await?;
        if slots.len() != ids.len() {
            return Err(Error::backend(
                self.info.name,
                format!("asked for {} chunks, got {} slots", ids.len(), slots.len()),
                false,
            ));
        }
        let mut out = Vec::with_capacity(ids.len());
        for (id, slot) in ids.iter().zip(slots) {
            let Some(stored) = slot else {
                return Err(self.missing_chunk(&blob, *id).await);
            };
            let place = ChunkPlace {
                key: &blob.key,
                version: blob.version,
                index: id.index,
            };
            let raw = decode_chunk(place, &stored)?;
            let span = layout.chunk_span(id.index, size);
            if raw.len() as u64 != span.end - span.start {
                return Err(Error::corrupt(
                    format!(
                        "chunk {} of key \"{}\" version {}",
                        id.index,
                        KeyDisplay::from(&blob.key[..]),
                        blob.version
                    ),
                    format!(
                        "holds {} bytes, the layout says {}",
                        raw.len(),
                        span.end - span.start
                    ),
                ));
            }
            let lo = range.start.max(span.start) - span.start;
            let hi = range.end.min(span.end) - span.start;
            out.push(raw.slice(usize::try_from(lo).unwrap_or(0)..usize::try_from(hi).unwrap_or(0)));
        }
        Ok(out)
    }

    /// The error for a chunk that is not there: the version was replaced and reclaimed during the read, or the
    /// chunk is lost.
    async fn missing_chunk(&self, blob: &BlobRef, id: ChunkId) -> Error {
        match self.read_manifest(&blob.key).await {
            Ok(current) if current.as_ref().map(|m| m.version) != Some(blob.version) => {
                Error::VersionReclaimed {
                    key: blob.key[..].into(),
                    version: blob.version,
                }
            }
            _ => Error::MissingChunk {
                key: blob.key[..].into(),
                version: blob.version,
                chunk: id.index,
                salt: id.salt,
            },
        }
    }
}

/// Writes the chunks of one version: groups them into segments of up to the batch size and keeps at most the
/// in-flight window of raw bytes in backend calls at once.
struct ChunkWriter {
    backend: Arc<dyn ChunkStore>,
    blob: BlobRef,
    salt_count: u32,
    codec: Codec,
    per_segment: usize,
    attempts: u32,
    window: Arc<Semaphore>,
    window_bytes: usize,
    tasks: JoinSet<Result<u64>>,
    segment: Vec<(u64, Bytes)>,
    next_index: u64,
    stored: u64,
    /// Shared with the put's intent lease, which records it at each renewal.
    progress: Arc<Progress>,
}

impl ChunkWriter {
    fn new(
        inner: &Inner,
        blob: BlobRef,
        salt_count: u32,
        codec: Codec,
        chunk_size: u32,
        progress: Arc<Progress>,
    ) -> Self {
        let window_bytes = inner.config.inflight_bytes;
        Self {
            backend: Arc::clone(&inner.backend),
            blob,
            salt_count,
            codec,
            per_segment: usize::try_from(inner.chunks_per_segment(chunk_size)).unwrap_or(1),
            attempts: inner.attempts(),
            window: Arc::new(Semaphore::new(window_bytes)),
            window_bytes,
            tasks: JoinSet::new(),
            segment: Vec::new(),
            next_index: 0,
            stored: 0,
            progress,
        }
    }

    fn add_stored(
        &mut self,
        done: std::result::Result<Result<u64>, tokio::task::JoinError>,
    ) -> Result<()> {
        let bytes = join_result(done)?;
        self.stored += bytes;
        self.progress.record(self.next_index, self.stored);
        Ok(())
    }

    async fn push(&mut self, raw: Bytes) -> Result<()> {
        self.segment.push((self.next_index, raw));
        self.next_index += 1;
        if self.segment.len() >= self.per_segment {
            self.flush().await?;
        }
        while let Some(done) = self.tasks.try_join_next() {
            self.add_stored(done)?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if self.segment.is_empty() {
            return Ok(());
        }
        let segment = std::mem::take(&mut self.segment);
        let raw_bytes: usize = segment.iter().map(|(_, b)| b.len()).sum();
        let permits = u32::try_from(raw_bytes.min(self.window_bytes)).unwrap_or(u32::MAX);
        let permit = Arc::clone(&self.window)
            .acquire_many_owned(permits)
            .await
            .map_err(|_| Error::backend("saltblob", "write window closed", false))?;
        let (backend, blob, salt_count, codec, attempts) = (
            Arc::clone(&self.backend),
            self.blob.clone(),
            self.salt_count,
            self.codec,
            self.attempts,
        );
        self.tasks.spawn(async move {
            let _permit = permit;
            let writes: Vec<ChunkWrite> = segment
                .iter()
                .map(|(index, raw)| {
                    let place = ChunkPlace {
                        key: &blob.key,
                        version: blob.version,
                        index: *index,
                    };
                    ChunkWrite {
                        salt: salt_of(*index, salt_count),
                        index: *index,
                        data: encode_chunk(place, raw, codec),
                    }
                })
                .collect();
            let stored: u64 = writes.iter().map(|w| w.data.len() as u64).sum();
            with_retry(attempts, || backend.put_chunks(&blob, writes.clone())).await?;
            Ok(stored)
        });
        Ok(())
    }

    /// Waits for every chunk; returns the stored bytes.
    async fn finish(&mut self) -> Result<u64> {
        self.flush().await?;
        while let Some(done) = self.tasks.join_next().await {
            self.add_stored(done)?;
        }
        Ok(self.stored)
    }

    /// Stops outstanding writes and deletes what was written; false if that failed (logged).
    async fn abort(mut self) -> bool {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        if self.next_index > 0
            && let Err(e) = self
                .backend
                .delete_chunks(&self.blob, self.salt_count, self.next_index)
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

fn join_result(done: std::result::Result<Result<u64>, tokio::task::JoinError>) -> Result<u64> {
    done.map_err(|e| Error::backend("saltblob", format!("write task failed: {e}"), false))?
}

/// A queued deletion of one version's chunks. Record key: due time (u64 big-endian, so that the queue sorts by
/// due time), version (u128 big-endian), blob key. Value: format byte 1, salt count (u32 LE), chunk count
/// (u64 LE), stored bytes (u64 LE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReclaimEntry {
    pub(crate) due_micros: u64,
    pub(crate) version: VersionId,
    pub(crate) key: Bytes,
    pub(crate) salt_count: u32,
    pub(crate) chunk_count: u64,
    pub(crate) stored_bytes: u64,
}

impl ReclaimEntry {
    pub(crate) fn encode(&self) -> (Vec<u8>, Bytes) {
        let mut k = Vec::with_capacity(24 + self.key.len());
        k.extend_from_slice(&self.due_micros.to_be_bytes());
        k.extend_from_slice(&self.version.to_be_bytes());
        k.extend_from_slice(&self.key);
        let mut v = Vec::with_capacity(21);
        v.push(1);
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunk_count.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        (k, Bytes::from(v))
    }

    pub(crate) fn decode(k: &Bytes, v: &Bytes) -> Option<Self> {
        let due_micros = u64::from_be_bytes(k.get(..8)?.try_into().ok()?);
        let version = VersionId(u128::from_be_bytes(k.get(8..24)?.try_into().ok()?));
        let key = k.slice(24..);
        if v.len() != 21 || v.first() != Some(&1) || key.is_empty() {
            return None;
        }
        Some(Self {
            due_micros,
            version,
            key,
            salt_count: u32::from_le_bytes(v.get(1..5)?.try_into().ok()?),
            chunk_count: u64::from_le_bytes(v.get(5..13)?.try_into().ok()?),
            stored_bytes: u64::from_le_bytes(v.get(13..21)?.try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaim_entries_round_trip_and_sort_by_due_time() {
        let e = ReclaimEntry {
            due_micros: 5,
            version: VersionId(9),
            key: Bytes::from_static(b"key"),
            salt_count: 3,
            chunk_count: 10,
            stored_bytes: 1000,
        };
        let (k, v) = e.encode();
        assert_eq!(
            ReclaimEntry::decode(&Bytes::from(k.clone()), &v),
            Some(e.clone())
        );
        let later = ReclaimEntry {
            due_micros: 256,
            ..e
        };
        assert!(k < later.encode().0);
        assert_eq!(
            ReclaimEntry::decode(&Bytes::from_static(b"short"), &v),
            None
        );
    }

    fn memory_store() -> (Arc<crate::MemoryStore>, BlobStore) {
        let backend = Arc::new(crate::MemoryStore::new());
        let config = StoreConfig::default().with_grace(Duration::ZERO);
        let store = BlobStore::new(backend.clone(), config).expect("store");
        (backend, store)
    }

    async fn put_chunked(store: &BlobStore, key: &Bytes) -> Manifest {
        let m = store
            .put(key, Bytes::from(vec![1u8; 300_000]), &PutOptions::new())
            .await
            .expect("put");
        assert!(matches!(m.body, ManifestBody::Chunked { .. }));
        m
    }

    /// A commit queues the version it replaces before its manifest write. A reclaim pass that runs before that
    /// write lands finds the version still current: it must keep the entry, or the version is orphaned once
    /// the write lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_queued_by_a_pending_commit_outlives_the_pass() {
        let (backend, store) = memory_store();
        let key = Bytes::from_static(b"k");
        let old = put_chunked(&store, &key).await;
        store
            .inner
            .schedule_reclaim(&key, &old)
            .await
            .expect("queue");
        let during = store.reclaim_all().await.expect("reclaim");
        assert_eq!(
            (
                during.awaiting_commit,
                during.still_current,
                during.versions
            ),
            (1, 0, 0),
            "{during:?}"
        );
        // The stalled commit (of an inline value) lands.
        let body = Bytes::from_static(b"new");
        let new = Manifest {
            version: VersionId::generate(),
            size: body.len() as u64,
            created_micros: now_micros(),
            expires_micros: None,
            digest: *blake3::hash(&body).as_bytes(),
            body: ManifestBody::Inline(body.clone()),
            content_type: None,
            metadata: Default::default(),
        };
        backend
            .put_record(Namespace::Manifest, &key, new.encode(), &Precondition::None)
            .await
            .expect("the commit lands");
        let after = store.reclaim_all().await.expect("reclaim");
        assert_eq!((after.versions, after.awaiting_commit), (1, 0), "{after:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0, "nothing orphaned");
        assert_eq!(store.get(&key).await.expect("get"), body);
    }

    /// An entry whose version is still current long after it fell due belongs to a write that never landed: it
    /// is dropped, and the version's chunks stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_of_a_commit_that_never_landed_is_dropped_after_the_window() {
        let (backend, store) = memory_store();
        let key = Bytes::from_static(b"k");
        let current = put_chunked(&store, &key).await;
        let ManifestBody::Chunked { layout, .. } = &current.body else {
            unreachable!("checked by put_chunked")
        };
        let stale = ReclaimEntry {
            due_micros: now_micros() - COMMIT_WINDOW_MICROS - 1,
            version: current.version,
            key: key.clone(),
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: 0,
        };
        let (k, v) = stale.encode();
        backend
            .put_record(Namespace::Reclaim, &k, v, &Precondition::None)
            .await
            .expect("queue");
        let chunks = backend.chunk_count().expect("count");
        let report = store.reclaim_all().await.expect("reclaim");
        assert_eq!(
            (
                report.still_current,
                report.awaiting_commit,
                report.versions
            ),
            (1, 0, 0),
            "{report:?}"
        );
        assert_eq!(backend.chunk_count().expect("count"), chunks);
        let queue = backend
            .scan_records(Namespace::Reclaim, b"", None, 10)
            .await
            .expect("scan");
        assert!(queue.is_empty(), "dropped: {queue:?}");
        assert_eq!(store.get(&key).await.expect("get").len(), 300_000);
    }

    /// A put whose commit fails and whose cleanup fails too (chunks not deleted, not queued) keeps its intent,
    /// so that gc reclaims the chunks once the lease is over; removing the intent would orphan them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_that_cannot_clean_up_leaves_its_intent_to_gc() {
        let backend = Arc::new(crate::MemoryStore::new());
        let lease = Duration::from_millis(300);
        let config = StoreConfig::default()
            .with_grace(Duration::ZERO)
            .with_intent_lease(lease);
        let store = BlobStore::new(backend.clone(), config).expect("store");
        backend
            .fail_writes(&[Namespace::Manifest, Namespace::Reclaim], true)
            .expect("inject");
        let failed = store
            .put("k", Bytes::from(vec![1u8; 300_000]), &PutOptions::new())
            .await;
        assert!(failed.is_err(), "the commit failed: {failed:?}");
        backend.fail_writes(&[], false).expect("heal");
        assert!(backend.chunk_count().expect("count") > 0);
        let intents = backend
            .scan_records(Namespace::Intent, b"", None, 10)
            .await
            .expect("scan");
        assert_eq!(intents.len(), 1, "the intent stays");

        tokio::time::sleep(lease + Duration::from_millis(100)).await;
        let gc = store
            .gc(&crate::GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!((gc.abandoned_puts, gc.reclaim.versions), (1, 1), "{gc:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0, "nothing orphaned");
    }

    #[test]
    fn keys_are_validated() {
        assert!(matches!(validate_key(b""), Err(Error::InvalidKey { .. })));
        assert!(validate_key(&[b'k'; MAX_KEY_LEN]).is_ok());
        let err = validate_key(&[b'k'; MAX_KEY_LEN + 1])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("1025 bytes long"), "{err}");
    }
}
