//! The reclaim queue: deferred deletion of the chunks of replaced, deleted and abandoned versions.
//!
//! A put's commit or a delete queues the version it replaces, due after the grace period (readers that started
//! before may still be reading it); gc queues the chunks of abandoned puts. A reclaim pass deletes the chunks of
//! every due entry whose version is no longer current and that no live put still holds, then the entry.
//!
//! The queue ([`Namespace::ReclaimBucket`]) is bucketed by due time ([`BUCKET_MICROS`]) and sharded by blob key
//! ([`shards`]): one partition per bucket and shard, so that no partition takes more than a shard's share of the
//! writes. A marker per bucket in [`Namespace::Meta`] lists the buckets that may hold entries. A pass drains the
//! due buckets, 16 partitions at once by default (`GcOptions::parallel`) and 8 entries at once within each
//! (`GcOptions::entries_at_once`, [`AtOnce`]), in the shards whose share of the work
//! the pass holds (`work.rs`); in a pass not restricted to a prefix, a partition of a bucket that is over (no entry
//! can be queued in it any more) and was drained whole is dropped with one partition deletion, not an entry at a
//! time, and a bucket with nothing left loses its marker. The single-partition queue of earlier builds ([`Namespace::Reclaim`]) is drained
//! first, as it always was. The expiry index (`ledger/expiry.rs`) is a queue of the same layout ([`Queue`]),
//! drained by the same passes ([`run_expiry`]).

use std::collections::HashSet;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use crate::backend::{BlobRef, Namespace, Precondition, RecordChange};
use crate::base::error::{Error, Result};
use crate::base::timing::{CLOCK_MARGIN_MICROS, COMMIT_WINDOW_MICROS};
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::decode::Reader;
use crate::format::layout::MAX_SALT_LIMIT;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::kept::{self, Burial};
use crate::ledger::liveness::{self, Ownership};
use crate::ledger::shards;
use crate::ledger::work::Held;
use crate::state::Inner;

/// Format byte of a reclaim entry's value.
const ENTRY_FORMAT: u8 = 1;
/// Format byte of the value of a removal marker's entry ([`REMOVAL_ENTRY`]): the byte alone. An earlier build
/// reports such an entry as undecodable and leaves it in place.
const MARKER_ENTRY_FORMAT: u8 = 2;

/// Key of the low-water mark of the queue of earlier builds ([`Namespace::Reclaim`]) in [`Namespace::Meta`]: a
/// due time (u64 LE, Unix µs).
const RECLAIM_WATERMARK: &[u8] = b"reclaim-watermark";

/// Width of a bucket of the queue: entries due in the same 15 minutes (of Unix time) share a bucket. Part of the
/// format.
pub(crate) const BUCKET_MICROS: u64 = 15 * 60 * 1_000_000;

/// Prefix of the bucket markers in [`Namespace::Meta`]: a marker's key is this, then the bucket (u64
/// big-endian); its value is [`MARKER_VALUE`].
const BUCKET_MARKER: &[u8] = b"reclaim-bucket/";

/// The value of a bucket marker: a format byte.
const MARKER_VALUE: &[u8] = &[1];

/// Prefix of the bucket markers of the expiry index, as [`BUCKET_MARKER`]'s.
const EXPIRY_MARKER: &[u8] = b"expiry-bucket/";

/// A queue bucketed by due time and sharded by blob key: the reclaim queue, or the expiry index
/// ([`crate::ledger::expiry`]), whose keys, bucket markers and passes are laid out alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// [`Namespace::ReclaimBucket`].
    Reclaim,
    /// [`Namespace::ExpiryBucket`].
    Expiry,
}

impl Queue {
    /// The queue's namespace.
    pub(crate) fn ns(self) -> Namespace {
        match self {
            Queue::Reclaim => Namespace::ReclaimBucket,
            Queue::Expiry => Namespace::ExpiryBucket,
        }
    }

    /// The prefix of its bucket markers in [`Namespace::Meta`].
    fn marker_prefix(self) -> &'static [u8] {
        match self {
            Queue::Reclaim => BUCKET_MARKER,
            Queue::Expiry => EXPIRY_MARKER,
        }
    }

    /// The buckets whose markers this process wrote.
    fn marked_here(self, inner: &Inner) -> &std::sync::Mutex<std::collections::BTreeSet<u64>> {
        match self {
            Queue::Reclaim => &inner.marked_buckets,
            Queue::Expiry => &inner.marked_expiry_buckets,
        }
    }
}

/// Partitions of the queue read at once where a pass is not told otherwise (its own checks of other shards), and
/// by default ([`AtOnce::DEFAULT`]).
const PARTITIONS_AT_ONCE: usize = 16;

/// How much of a pass is in flight at once: partitions drained together, and entries handled together within each
/// (each entry's reads and chunk deletion). Up to `partitions × entries` entries in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtOnce {
    /// Partitions drained at once (at least 1).
    pub partitions: usize,
    /// Entries of one partition handled at once (at least 1).
    pub entries: usize,
}

impl AtOnce {
    /// 16 partitions, 8 entries each: 128 entries in flight.
    pub const DEFAULT: AtOnce = AtOnce {
        partitions: PARTITIONS_AT_ONCE,
        entries: 8,
    };
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
    /// Blobs deleted because their expiry passed, found through the expiry index (a pass over the index only).
    pub expired: u64,
    /// Removal markers of kept versions deleted (`BlobStore::remove_version` leaves one for twenty minutes).
    pub removal_markers: u64,
}

/// A queued deletion of one version's chunks. Record key in [`Namespace::ReclaimBucket`]: bucket (due time ÷
/// [`BUCKET_MICROS`], u64 big-endian) and shard ([`shards::shard_of`] of the blob key), which name its partition,
/// then due time (u64 big-endian, so that a partition sorts by due time), version (u128 big-endian), blob key. In
/// the [`Namespace::Reclaim`] of earlier builds, the key lacks the bucket and shard. Value: format byte 1, salt
/// count (u32 LE), chunk count (u64 LE), stored bytes (u64 LE); or format byte 2 alone, the entry of a kept
/// version's removal marker ([`REMOVAL_ENTRY`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReclaimEntry {
    pub(crate) due_micros: u64,
    pub(crate) version: VersionId,
    pub(crate) key: Bytes,
    pub(crate) salt_count: u32,
    pub(crate) chunk_count: u64,
    pub(crate) stored_bytes: u64,
}

/// The partition of the queue of entries due at `due_micros` for blob key `key`: bucket, shard.
fn partition_of(due_micros: u64, key: &[u8]) -> [u8; 9] {
    partition(bucket_of(due_micros), shards::shard_of(key))
}

/// Partition `shard` of `bucket`: the first 9 bytes of its entries' keys.
fn partition(bucket: u64, shard: u8) -> [u8; 9] {
    let mut part = [0u8; 9];
    part[..8].copy_from_slice(&bucket.to_be_bytes());
    part[8] = shard;
    part
}

/// The bucket of due time `due_micros`.
pub(crate) fn bucket_of(due_micros: u64) -> u64 {
    due_micros / BUCKET_MICROS
}

impl ReclaimEntry {
    /// The entry's record key and value in [`Namespace::ReclaimBucket`].
    pub(crate) fn encode(&self) -> (Vec<u8>, Bytes) {
        let k = bucketed_key(self.due_micros, self.version, &self.key);
        (k, self.value())
    }

    /// The entry's record key in the [`Namespace::Reclaim`] of earlier builds: due time, version, blob key (for
    /// tests, which queue entries as those builds did).
    #[cfg(any(test, feature = "conformance"))]
    pub(crate) fn legacy_key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(24 + self.key.len());
        k.extend_from_slice(&self.due_micros.to_be_bytes());
        k.extend_from_slice(&self.version.to_be_bytes());
        k.extend_from_slice(&self.key);
        k
    }

    /// Whether this is the entry of a kept version's removal marker ([`REMOVAL_ENTRY`]), not of chunks.
    pub(crate) fn is_removal_marker(&self) -> bool {
        let chunks = ChunkSet {
            salt_count: self.salt_count,
            chunk_count: self.chunk_count,
            stored_bytes: self.stored_bytes,
        };
        chunks == REMOVAL_ENTRY
    }

    fn value(&self) -> Bytes {
        if self.is_removal_marker() {
            return Bytes::from_static(&[MARKER_ENTRY_FORMAT]);
        }
        let mut v = Vec::with_capacity(21);
        v.push(ENTRY_FORMAT);
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunk_count.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        Bytes::from(v)
    }

    /// Decodes an entry of namespace `ns`; fails with [`Error::Corrupt`] for a record that is not an entry of this
    /// format, one in another partition than its due time and key say, or whose salt count is out of bounds (a
    /// reclaim pass deletes chunks salt by salt: a damaged count must not make it loop billions of times).
    pub(crate) fn decode(ns: Namespace, k: &Bytes, v: &Bytes) -> Result<Self> {
        let corrupt = |detail: String| Error::corrupt("reclaim entry", detail);
        let (due_micros, version, key) = entry_key(ns, k)?;
        let mut r = Reader::new(v.clone(), &corrupt);
        let format = r.u8()?;
        if format == MARKER_ENTRY_FORMAT {
            r.end()?;
            return Ok(Self {
                due_micros,
                version,
                key,
                salt_count: REMOVAL_ENTRY.salt_count,
                chunk_count: REMOVAL_ENTRY.chunk_count,
                stored_bytes: REMOVAL_ENTRY.stored_bytes,
            });
        }
        if format != ENTRY_FORMAT {
            return Err(corrupt(format!(
                "unknown format byte {format} (expected {ENTRY_FORMAT})"
            )));
        }
        let salt_count = r.u32()?;
        let entry = Self {
            due_micros,
            version,
            key,
            salt_count,
            chunk_count: r.u64()?,
            stored_bytes: r.u64()?,
        };
        r.end()?;
        if !(1..=MAX_SALT_LIMIT).contains(&salt_count) {
            return Err(corrupt(format!(
                "salt count {salt_count} outside 1..={MAX_SALT_LIMIT}"
            )));
        }
        Ok(entry)
    }
}

/// Decodes the key of an entry of a bucketed queue (or of the [`Namespace::Reclaim`] of earlier builds, `ns`
/// saying which): its due time, version and blob key; fails with [`Error::Corrupt`] for a key that does not decode
/// or lies in another partition than its due time and blob key say.
pub(crate) fn entry_key(ns: Namespace, k: &Bytes) -> Result<(u64, VersionId, Bytes)> {
    let what = match ns {
        Namespace::ExpiryBucket => "expiry index entry",
        _ => "reclaim entry",
    };
    let corrupt = |detail: String| Error::corrupt(what, detail);
    let mut key = Reader::new(k.clone(), &corrupt);
    let part = match ns.partition_len() {
        0 => None,
        _ => Some((key.u64_be()?, key.u8()?)),
    };
    let (due_micros, version) = (key.u64_be()?, VersionId(key.u128_be()?));
    let key = key.rest_nonempty()?;
    if let Some((bucket, shard)) = part {
        let (due_bucket, key_shard) = (bucket_of(due_micros), shards::shard_of(&key));
        if (bucket, shard) != (due_bucket, key_shard) {
            return Err(corrupt(format!(
                "in partition (bucket {bucket}, shard {shard}), but its due time and key place it in \
                 (bucket {due_bucket}, shard {key_shard})"
            )));
        }
    }
    Ok((due_micros, version, key))
}

/// The record key of an entry of a bucketed queue: its partition (bucket of `due_micros`, shard of `key`), then
/// `due_micros` and `version` (big-endian, so that a partition sorts by due time) and `key`.
pub(crate) fn bucketed_key(due_micros: u64, version: VersionId, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(33 + key.len());
    k.extend_from_slice(&partition_of(due_micros, key));
    k.extend_from_slice(&due_micros.to_be_bytes());
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The chunks of one version, as a reclaim entry records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkSet {
    pub(crate) salt_count: u32,
    pub(crate) chunk_count: u64,
    pub(crate) stored_bytes: u64,
}

/// The chunks the reclaim entry of a kept version's removal marker names: none, and a salt count of 0, which no
/// chunk entry has. Stored as value format [`MARKER_ENTRY_FORMAT`]; the pass deletes the marker once it may go
/// ([`kept::bury`]) and deletes no chunk. Due once the marker may go, [`kept::MARKER_HOLD_MICROS`] after the
/// removal (or after the grace period, if longer).
pub(crate) const REMOVAL_ENTRY: ChunkSet = ChunkSet {
    salt_count: 0,
    chunk_count: 0,
    stored_bytes: 0,
};

/// Queues the chunks `chunks` of `blob` for deletion after the grace period counted from `queued_at`: the one
/// writer of reclaim entries (but for [`schedule_changes`]). Marks the entry's bucket first. Returns the entry's
/// record key.
pub(crate) async fn enqueue(
    inner: &Inner,
    blob: &BlobRef,
    chunks: ChunkSet,
    queued_at: u64,
) -> Result<Vec<u8>> {
    let entry = entry(inner, blob, chunks, queued_at);
    mark_bucket(inner, Queue::Reclaim, bucket_of(entry.due_micros)).await?;
    let (k, v) = entry.encode();
    inner
        .backend
        .put_record(Namespace::ReclaimBucket, &k, v, &Precondition::None)
        .await?;
    Ok(k)
}

/// The key of the marker of `bucket` of `queue` in [`Namespace::Meta`].
fn marker_key(queue: Queue, bucket: u64) -> Vec<u8> {
    [queue.marker_prefix(), &bucket.to_be_bytes()].concat()
}

/// Writes the marker of `bucket` of `queue`, unless this process wrote it before: a pass finds the buckets by
/// their markers.
pub(crate) async fn mark_bucket(inner: &Inner, queue: Queue, bucket: u64) -> Result<()> {
    if queue
        .marked_here(inner)
        .lock()
        .is_ok_and(|marked| marked.contains(&bucket))
    {
        return Ok(());
    }
    inner
        .backend
        .put_record(
            Namespace::Meta,
            &marker_key(queue, bucket),
            Bytes::from_static(MARKER_VALUE),
            &Precondition::None,
        )
        .await?;
    remember_marked(inner, queue, &[bucket]);
    Ok(())
}

/// The buckets of `queue` whose markers are set, in order.
async fn marked(inner: &Inner, queue: Queue) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let prefix = queue.marker_prefix();
    let mut pages = inner.scan(Namespace::Meta, prefix, None);
    while let Some(page) = pages.next_page().await? {
        for (k, _) in page {
            match <[u8; 8]>::try_from(&k[prefix.len()..]) {
                Ok(b) => out.push(u64::from_be_bytes(b)),
                Err(_) => tracing::warn!(
                    "{}: left out",
                    Error::corrupt(
                        "reclaim bucket marker",
                        format!("key {:?} names no bucket", k.escape_ascii().to_string())
                    )
                ),
            }
        }
    }
    Ok(out)
}

/// The entry that queues `chunks` of `blob`, due the grace period after `queued_at`.
fn entry(inner: &Inner, blob: &BlobRef, chunks: ChunkSet, queued_at: u64) -> ReclaimEntry {
    let mut wait = micros(inner.config.grace);
    if chunks == REMOVAL_ENTRY {
        // Due once the marker may go.
        wait = wait.max(kept::MARKER_HOLD_MICROS);
    }
    ReclaimEntry {
        due_micros: queued_at.saturating_add(wait),
        version: blob.version,
        key: blob.key.clone(),
        salt_count: chunks.salt_count,
        chunk_count: chunks.chunk_count,
        stored_bytes: chunks.stored_bytes,
    }
}

/// Removes the entry [`enqueue`] wrote under `entry_key`.
pub(crate) async fn withdraw(inner: &Inner, entry_key: &[u8]) -> Result<()> {
    inner
        .backend
        .delete_record(Namespace::ReclaimBucket, entry_key, &Precondition::None)
        .await
        .map(|_| ())
}

/// Every partition of the queue that may hold entries, with its namespace: the queue of earlier builds, then each
/// shard of each marked bucket.
async fn partitions(inner: &Inner) -> Result<Vec<(Namespace, Vec<u8>)>> {
    let mut out = vec![(Namespace::Reclaim, Vec::new())];
    for bucket in marked(inner, Queue::Reclaim).await? {
        out.extend(
            shards::all()
                .map(|shard| (Namespace::ReclaimBucket, partition(bucket, shard).to_vec())),
        );
    }
    Ok(out)
}

/// Every entry of the queue ([`Namespace::ReclaimBucket`]) as stored, in queue order within each partition (for
/// tests and tools).
///
/// # Errors
/// The backend's.
#[cfg(test)]
pub(crate) async fn stored(
    backend: &dyn crate::backend::ChunkStore,
) -> Result<Vec<(Bytes, Bytes)>> {
    stored_in(backend, Queue::Reclaim).await
}

/// Every entry of `queue` as stored, in order within each partition (for tests and tools).
///
/// # Errors
/// The backend's.
#[cfg(any(test, feature = "conformance"))]
pub(crate) async fn stored_in(
    backend: &dyn crate::backend::ChunkStore,
    queue: Queue,
) -> Result<Vec<(Bytes, Bytes)>> {
    let prefix = queue.marker_prefix();
    let markers = backend
        .scan_records(Namespace::Meta, prefix, None, usize::MAX)
        .await?;
    let mut out = Vec::new();
    for (k, _) in markers {
        let Ok(bucket) = <[u8; 8]>::try_from(&k[prefix.len()..]) else {
            continue;
        };
        for shard in shards::all() {
            let part = partition(u64::from_be_bytes(bucket), shard);
            out.extend(
                backend
                    .scan_records(queue.ns(), &part, None, usize::MAX)
                    .await?,
            );
        }
    }
    Ok(out)
}

/// The versions in the queue, due or not, of those `among` holds: the queue is read a page at a time, so memory
/// is bounded by `among`, not by the queue.
pub(crate) async fn queued_versions(
    inner: &Inner,
    among: &HashSet<(Bytes, VersionId)>,
) -> Result<HashSet<(Bytes, VersionId)>> {
    let mut out = HashSet::new();
    for (ns, part) in partitions(inner).await? {
        let mut pages = inner.scan(ns, &part, None);
        while let Some(page) = pages.next_page().await? {
            for (k, v) in &page {
                match ReclaimEntry::decode(ns, k, v) {
                    Ok(e) => {
                        let version = (e.key, e.version);
                        if among.contains(&version) {
                            out.insert(version);
                        }
                    }
                    Err(e) => tracing::warn!("{e}: left out of the queued versions"),
                }
            }
        }
    }
    Ok(out)
}

/// Queues the chunks of `old` that `new` does not use (all of them for a delete, `new` being `None`) for deletion
/// after the grace period: one entry per version its chunks lie under (its own, or each chunked segment's); inline
/// versions have none. A manifest that keeps its version (a re-wrap of its data keys) queues nothing.
pub(crate) async fn schedule(
    inner: &Inner,
    key: &Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
) -> Result<()> {
    let now = inner.now_micros();
    for (blob, chunks) in replaced_sets(key, old, new) {
        enqueue(inner, &blob, chunks, now).await?;
    }
    Ok(())
}

/// The writes of the entries [`schedule`] writes, queued at `queued_at`, and of their buckets' markers (those
/// this process has not written before): for a commit that writes them in one atomic group with its manifest.
/// Returns the buckets marked too, for [`remember_marked`] once the group is written.
pub(crate) fn schedule_changes(
    inner: &Inner,
    key: &Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
    queued_at: u64,
) -> (Vec<RecordChange>, Vec<u64>) {
    let mut changes = Vec::new();
    let mut buckets = Vec::new();
    for (blob, chunks) in replaced_sets(key, old, new) {
        let entry = entry(inner, &blob, chunks, queued_at);
        buckets.push(bucket_of(entry.due_micros));
        let (k, v) = entry.encode();
        changes.push(RecordChange::put(
            Namespace::ReclaimBucket,
            k,
            v,
            Precondition::None,
        ));
    }
    let buckets = marker_changes(inner, Queue::Reclaim, buckets, &mut changes);
    (changes, buckets)
}

/// Adds to `changes` the writes of the markers of `buckets` of `queue` that this process has not written before;
/// returns those buckets, for [`remember_marked`] once the changes are written.
pub(crate) fn marker_changes(
    inner: &Inner,
    queue: Queue,
    mut buckets: Vec<u64>,
    changes: &mut Vec<RecordChange>,
) -> Vec<u64> {
    buckets.sort_unstable();
    buckets.dedup();
    if let Ok(marked) = queue.marked_here(inner).lock() {
        buckets.retain(|b| !marked.contains(b));
    }
    for bucket in &buckets {
        let marker = Bytes::from_static(MARKER_VALUE);
        changes.push(RecordChange::put(
            Namespace::Meta,
            marker_key(queue, *bucket),
            marker,
            Precondition::None,
        ));
    }
    buckets
}

/// Notes that the markers of `buckets` of `queue` are written, so that this process does not write them again.
pub(crate) fn remember_marked(inner: &Inner, queue: Queue, buckets: &[u64]) {
    if let Ok(mut marked) = queue.marked_here(inner).lock() {
        // A pass drops the markers of buckets that are over, where no entry goes any more: forgotten here too. (The
        // expiry index's entries may go to buckets far ahead, each remembered until it is over.)
        let current = bucket_of(inner.now_micros());
        marked.retain(|b| b.saturating_add(1) >= current);
        marked.extend(buckets);
    }
}

/// The versions the chunks of `old` lie under (its own, or each chunked segment's), with their chunks, less those
/// that `new` names too (its own version, or a segment of it).
fn replaced_sets<'a>(
    key: &'a Bytes,
    old: &Manifest,
    new: Option<&Manifest>,
) -> impl Iterator<Item = (BlobRef, ChunkSet)> + 'a {
    let kept: Vec<VersionId> = new.map_or_else(Vec::new, |m| {
        m.segments().into_iter().map(|s| s.version).collect()
    });
    old.segments().into_iter().filter_map(move |segment| {
        let ManifestBody::Chunked {
            layout,
            stored_bytes,
            ..
        } = &segment.body
        else {
            return None;
        };
        if kept.contains(&segment.version) {
            return None;
        }
        let blob = BlobRef {
            key: key.clone(),
            version: segment.version,
        };
        let chunks = ChunkSet {
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: *stored_bytes,
        };
        Some((blob, chunks))
    })
}

/// Like [`schedule`] of all of `manifest`'s chunks, but failures are logged, not returned: for when the operation
/// that replaced the version has already succeeded, or may have. False if queueing failed.
pub(crate) async fn schedule_logged(inner: &Inner, key: &Bytes, manifest: &Manifest) -> bool {
    match schedule(inner, key, manifest, None).await {
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

/// After a commit of `written` (`None`: a delete) that the backend says replaced `replaced`, having queued
/// `queued` at `queued_at` before writing: queues what it replaced when that is not what it queued (another
/// write landed in between), or when this write landed so late that the reclaimer may have dropped the first
/// entry as still current (see [`COMMIT_WINDOW_MICROS`]).
pub(crate) async fn queue_replaced(
    inner: &Inner,
    key: &Bytes,
    written: Option<VersionId>,
    replaced: Option<&Manifest>,
    queued: Option<&Manifest>,
    queued_at: u64,
) {
    let Some(old) = replaced.filter(|old| Some(old.version) != written) else {
        return;
    };
    let late = inner.now_micros().saturating_sub(queued_at) > COMMIT_WINDOW_MICROS / 2;
    if late || Some(old.version) != queued.map(|q| q.version) {
        schedule_logged(inner, key, old).await;
    }
}

/// Processes the reclaim queue up to due time `cutoff` for keys starting with `prefix` (only counting what it
/// would do when `dry_run`), in the shards `held` holds: the queue of earlier builds (with share 0), then every due
/// bucket (see the module's documentation).
pub(crate) async fn run(
    inner: &Inner,
    cutoff: u64,
    dry_run: bool,
    prefix: &[u8],
    held: &Held,
    at_once: AtOnce,
) -> Result<ReclaimReport> {
    let started = inner.now_micros();
    let pass = Pass {
        queue: Queue::Reclaim,
        delete_expired: None,
        inner,
        cutoff,
        dry_run,
        prefix,
        now: started,
        held,
        at_once,
    };
    let report = match held.has(0) {
        true => pass.run_legacy().await?,
        false => ReclaimReport::default(),
    };
    pass.drain_due(report).await
}

/// Deletes the blobs whose expiry has passed by `now`, found through the expiry index ([`crate::ledger::expiry`]),
/// for keys starting with `prefix` (only counting when `dry_run`), in the shards `held` holds: every due bucket of
/// the index, drained and dropped as the reclaim queue's, each expired blob deleted by `delete`. The report counts
/// [`ReclaimReport::expired`].
pub(crate) async fn run_expiry<'a>(
    inner: &'a Inner,
    now: u64,
    dry_run: bool,
    prefix: &'a [u8],
    held: &'a Held,
    at_once: AtOnce,
    delete: &'a DeleteExpired<'a>,
) -> Result<ReclaimReport> {
    let pass = Pass {
        queue: Queue::Expiry,
        delete_expired: Some(delete),
        inner,
        cutoff: now,
        dry_run,
        prefix,
        now,
        held,
        at_once,
    };
    pass.drain_due(ReclaimReport::default()).await
}

/// The due time of the first entry of `bucket` of `queue`, if it holds any.
async fn first_due(inner: &Inner, queue: Queue, bucket: u64) -> Result<Option<u64>> {
    let firsts = futures::stream::iter(shards::all())
        .map(|shard| async move {
            let part = partition(bucket, shard);
            let page = inner
                .backend
                .scan_records(queue.ns(), &part, None, 1)
                .await?;
            Ok::<_, Error>(
                page.first()
                    .and_then(|(k, _)| entry_key(queue.ns(), k).ok().map(|(due, _, _)| due)),
            )
        })
        .buffer_unordered(PARTITIONS_AT_ONCE);
    let firsts: Vec<Option<u64>> = firsts.try_collect().await?;
    Ok(firsts.into_iter().flatten().min())
}

/// What a pass does with one entry.
pub(crate) enum Handled {
    /// Its chunks are gone (or it was dropped as still current): the entry may go.
    Done,
    /// Left in place, due at this time: awaiting its commit, or held by a live put.
    Kept(u64),
    /// Left in place: undecodable, or outside the pass's prefix.
    Skipped,
    /// Not due yet: neither is anything after it in its partition.
    NotDue,
}

/// What became of an entry of a page ([`Pass::handle_page`]).
enum Step {
    Handled(Handled),
    /// Not taken up: the pass's leases are no longer in time.
    OutOfTime,
}

/// One reclaim pass's settings.
struct Pass<'a> {
    /// The queue it drains.
    queue: Queue,
    /// For the expiry index: how an expired blob is deleted.
    delete_expired: Option<&'a DeleteExpired<'a>>,
    inner: &'a Inner,
    cutoff: u64,
    dry_run: bool,
    prefix: &'a [u8],
    /// When the pass started.
    now: u64,
    /// The shards it works on.
    held: &'a Held,
    /// Partitions drained at once, and entries handled at once in each.
    at_once: AtOnce,
}

impl Pass<'_> {
    /// Drains every due bucket of the queue, adding to `report`; notes when the first entry not due is.
    async fn drain_due(&self, mut report: ReclaimReport) -> Result<ReclaimReport> {
        let mut future_bucket = None;
        for bucket in marked(self.inner, self.queue).await? {
            if bucket.saturating_mul(BUCKET_MICROS) > self.cutoff {
                future_bucket = Some(bucket);
                break;
            }
            self.drain_bucket(bucket, &mut report).await?;
        }
        if report.next_due_micros.is_none()
            && let Some(bucket) = future_bucket
        {
            report.next_due_micros = first_due(self.inner, self.queue, bucket).await?;
        }
        Ok(report)
    }

    /// Drains every shard of `bucket` this pass holds, [`AtOnce::partitions`] at a time, adding to `report`. When the bucket is over
    /// (its end plus the clock margin has passed, so that no entry can be queued in it any more) and due whole, a
    /// partition drained whole is dropped with one deletion, and a bucket with nothing left loses its marker.
    ///
    /// A pass restricted to a prefix does neither: it removes its own entries one by one and leaves the bucket's
    /// partitions and marker to an unrestricted pass, so that what it decides never rests on entries of keys it does
    /// not read (a writer whose clock runs behind by more than the margin would otherwise lose an entry queued in
    /// between its scan and the drop).
    async fn drain_bucket(&self, bucket: u64, report: &mut ReclaimReport) -> Result<()> {
        let end = bucket.saturating_add(1).saturating_mul(BUCKET_MICROS);
        let droppable = self.prefix.is_empty()
            && end.saturating_add(CLOCK_MARGIN_MICROS) <= self.now
            && end <= self.cutoff;
        let mut drains = futures::stream::iter(shards::all().filter(|s| self.held.has(*s)))
            .map(|shard| self.drain_partition(partition(bucket, shard), droppable))
            .buffer_unordered(self.at_once.partitions.max(1));
        let mut emptied = true;
        while let Some(drained) = drains.next().await {
            let (part, empty) = drained?;
            report.add(&part);
            emptied &= empty;
        }
        // The other runners' shards: empty too? (A partition of theirs, dropped, reads as one tombstone.)
        if droppable && emptied && !self.dry_run && !self.held.every() {
            let others = shards::all()
                .filter(|s| !self.held.has(*s))
                .map(|shard| async move {
                    let part = partition(bucket, shard);
                    let page = self
                        .inner
                        .backend
                        .scan_records(self.queue.ns(), &part, None, 1)
                        .await?;
                    Ok::<_, Error>(page.is_empty())
                });
            let empty: Vec<bool> = futures::stream::iter(others)
                .buffer_unordered(PARTITIONS_AT_ONCE)
                .try_collect()
                .await?;
            emptied = empty.into_iter().all(|e| e);
        }
        if droppable && emptied && !self.dry_run {
            self.inner
                .backend
                .delete_record(
                    Namespace::Meta,
                    &marker_key(self.queue, bucket),
                    &Precondition::None,
                )
                .await?;
        }
        Ok(())
    }

    /// Drains partition `part` of the queue; returns what it did and whether nothing is left in it. A partition
    /// of a bucket that is `droppable` (over, in an unrestricted pass), drained whole, is dropped with one deletion;
    /// otherwise each entry done is removed.
    async fn drain_partition(
        &self,
        part: [u8; 9],
        droppable: bool,
    ) -> Result<(ReclaimReport, bool)> {
        let ns = self.queue.ns();
        let mut report = ReclaimReport::default();
        let mut done = Vec::new();
        let mut left = false;
        let mut pages = self.inner.scan(ns, &part, None);
        'scan: while let Some(page) = pages.next_page().await? {
            for (k, step) in self.handle_page(ns, page, &mut report).await? {
                match step {
                    Step::Handled(Handled::Done) => done.push(k),
                    Step::Handled(Handled::Kept(_) | Handled::Skipped) => left = true,
                    Step::Handled(Handled::NotDue) | Step::OutOfTime => {
                        left = true;
                        break 'scan;
                    }
                }
            }
        }
        if self.dry_run {
            return Ok((report, false));
        }
        if droppable && !left && !done.is_empty() {
            self.inner.backend.drop_partition(ns, &part).await?;
        } else {
            let backend = &self.inner.backend;
            futures::stream::iter(done)
                .map(|k| async move { backend.delete_record(ns, &k, &Precondition::None).await })
                .buffer_unordered(self.at_once.entries.max(1))
                .try_collect::<Vec<_>>()
                .await?;
        }
        Ok((report, !left))
    }

    /// Handles the entries of `page` (of namespace `ns`) in order, [`AtOnce::entries`] at a time, adding to `report`:
    /// what became of each, up to and including the first not due (nothing after it in its partition is due
    /// either) or the first not taken up because the pass's leases are no longer in time. Entries after that one
    /// may have been started and are dropped mid-way: deletions are idempotent and their entries stay.
    async fn handle_page(
        &self,
        ns: Namespace,
        page: Vec<(Bytes, Bytes)>,
        report: &mut ReclaimReport,
    ) -> Result<Vec<(Bytes, Step)>> {
        let mut steps = futures::stream::iter(page)
            .map(|(k, v)| self.step(ns, k, v))
            .buffered(self.at_once.entries.max(1));
        let mut out = Vec::new();
        while let Some(step) = steps.next().await {
            let (k, step, part) = step?;
            report.add(&part);
            let last = matches!(step, Step::Handled(Handled::NotDue) | Step::OutOfTime);
            out.push((k, step));
            if last {
                break;
            }
        }
        Ok(out)
    }

    /// Handles entry `k`, `v` of namespace `ns` unless the pass's leases are no longer in time; returns what became
    /// of it and what was done.
    async fn step(
        &self,
        ns: Namespace,
        k: Bytes,
        v: Bytes,
    ) -> Result<(Bytes, Step, ReclaimReport)> {
        let mut report = ReclaimReport::default();
        if !self.held.in_time(self.inner.now_micros()) {
            return Ok((k, Step::OutOfTime, report));
        }
        let handled = self.handle(ns, &k, &v, &mut report).await?;
        Ok((k, Step::Handled(handled), report))
    }

    /// Handles entry `k`, `v` of namespace `ns`: deletes its version's chunks when it is due, not current and not
    /// held by a live put (counting in `report`); does not remove the entry.
    async fn handle(
        &self,
        ns: Namespace,
        k: &Bytes,
        v: &Bytes,
        report: &mut ReclaimReport,
    ) -> Result<Handled> {
        if let Some(delete) = self.delete_expired {
            let (inner, now, dry_run, prefix) = (self.inner, self.now, self.dry_run, self.prefix);
            return handle_expiry(inner, k, v, now, dry_run, prefix, delete, report).await;
        }
        let entry = match ReclaimEntry::decode(ns, k, v) {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!("{e}: left in place");
                report.undecodable += 1;
                return Ok(Handled::Skipped);
            }
        };
        if entry.due_micros > self.cutoff {
            // A partition is sorted by due time: nothing after this entry is due either.
            report.next_due_micros = Some(
                report
                    .next_due_micros
                    .map_or(entry.due_micros, |d| d.min(entry.due_micros)),
            );
            return Ok(Handled::NotDue);
        }
        if !entry.key.starts_with(self.prefix) {
            return Ok(Handled::Skipped);
        }
        if entry.is_removal_marker() {
            // A removal marker's entry (kept.rs): the marker goes once it may.
            if self.dry_run {
                return Ok(Handled::Done);
            }
            let burial = kept::bury(self.inner, &entry.key, entry.version, self.now).await?;
            return Ok(match burial {
                Burial::HeldUntil(due) => Handled::Kept(due),
                Burial::Buried => {
                    report.removal_markers += 1;
                    Handled::Done
                }
                Burial::NoMarker => Handled::Done,
            });
        }
        let blob = BlobRef {
            key: entry.key.clone(),
            version: entry.version,
        };
        // Whether the current version owns the entry's chunks (its own, or a segment's); unsure what is current:
        // delete nothing.
        let current = liveness::ownership(self.inner, &blob).await? != Ownership::NotOwned;
        if current {
            if self.now < entry.due_micros.saturating_add(COMMIT_WINDOW_MICROS) {
                // The commit or delete that queued it may not have landed yet.
                report.awaiting_commit += 1;
                return Ok(Handled::Kept(entry.due_micros));
            }
            report.still_current += 1;
        } else if liveness::is_in_flight(self.inner, &blob).await? {
            // Only when a gc pass died between queueing an abandoned put and fencing its intent.
            report.in_flight += 1;
            return Ok(Handled::Kept(entry.due_micros));
        } else {
            if !self.dry_run {
                self.inner
                    .backend
                    .delete_chunks(&blob, entry.salt_count, entry.chunk_count)
                    .await?;
            }
            report.versions += 1;
            report.chunks += entry.chunk_count;
            report.bytes += entry.stored_bytes;
        }
        Ok(Handled::Done)
    }
}

/// Deletes blob `key`'s expired manifest, stored as the record given, if it is still the current one; returns
/// whether it was. gc gives the store's conditional delete (`store/delete.rs`): the ledger writes no manifest.
pub(crate) type DeleteExpired<'a> =
    dyn Fn(Bytes, Bytes) -> futures::future::BoxFuture<'a, Result<bool>> + Send + Sync + 'a;

/// Format byte of an expiry index entry's value.
pub(crate) const EXPIRY_ENTRY_FORMAT: u8 = 1;

/// Handles expiry index entry `k`, `v` (`ledger/expiry.rs`) at `now`: deletes its blob when the blob's current manifest has expired (counting
/// in `report`); done with it when the blob is gone, was put again without that expiry, or does not decode. Left
/// in place: entries not due, outside `prefix`, that do not decode, and those whose version is later than the
/// current one within the commit window (its commit may still land).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn handle_expiry(
    inner: &Inner,
    k: &Bytes,
    v: &Bytes,
    now: u64,
    dry_run: bool,
    prefix: &[u8],
    delete: &DeleteExpired<'_>,
    report: &mut ReclaimReport,
) -> Result<Handled> {
    let (expires, version, key) = match decode_expiry(k, v) {
        Ok(entry) => entry,
        Err(e) => {
            tracing::warn!("{e}: left in place");
            report.undecodable += 1;
            return Ok(Handled::Skipped);
        }
    };
    if expires > now {
        // A partition is sorted by expiry: nothing after this entry is due either.
        report.next_due_micros = Some(report.next_due_micros.map_or(expires, |d| d.min(expires)));
        return Ok(Handled::NotDue);
    }
    if !key.starts_with(prefix) {
        return Ok(Handled::Skipped);
    }
    let Some(raw) = inner.backend.get_record(Namespace::Manifest, &key).await? else {
        return Ok(Handled::Done);
    };
    let manifest = match inner.decode_manifest(&key, &raw) {
        Ok(m) => m,
        // Damaged: fsck's to report, `rm`'s to remove; the index has nothing more to do with it.
        Err(_) => return Ok(Handled::Done),
    };
    if !manifest.is_expired(now) {
        if manifest.version < version && now < expires.saturating_add(COMMIT_WINDOW_MICROS) {
            // An earlier version is current: the commit that wrote this entry may not have landed yet.
            report.awaiting_commit += 1;
            return Ok(Handled::Kept(expires));
        }
        return Ok(Handled::Done);
    }
    if dry_run || delete(key, raw).await? {
        report.expired += 1;
    }
    Ok(Handled::Done)
}

/// Decodes an expiry index entry: expiry time, version, blob key.
pub(crate) fn decode_expiry(
    k: &Bytes,
    v: &Bytes,
) -> Result<(u64, crate::base::version::VersionId, Bytes)> {
    let entry = entry_key(Namespace::ExpiryBucket, k)?;
    let corrupt = |detail: String| Error::corrupt("expiry index entry", detail);
    let mut r = Reader::new(v.clone(), &corrupt);
    let format = r.u8()?;
    if format != EXPIRY_ENTRY_FORMAT {
        return Err(corrupt(format!(
            "unknown format byte {format} (expected {EXPIRY_ENTRY_FORMAT})"
        )));
    }
    r.end()?;
    Ok(entry)
}

impl ReclaimReport {
    /// Adds what a pass over another partition did.
    fn add(&mut self, other: &ReclaimReport) {
        self.versions += other.versions;
        self.chunks += other.chunks;
        self.bytes += other.bytes;
        self.still_current += other.still_current;
        self.awaiting_commit += other.awaiting_commit;
        self.undecodable += other.undecodable;
        self.in_flight += other.in_flight;
        self.expired += other.expired;
        self.removal_markers += other.removal_markers;
        self.next_due_micros = match (self.next_due_micros, other.next_due_micros) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Pass<'_> {
    /// Drains the single-partition queue of earlier builds ([`Namespace::Reclaim`]) up to the cutoff, removing each
    /// entry done. The scan starts at the low-water mark left by the last full pass that removed entries, so that
    /// the deletion markers of processed entries (tombstones on Cassandra) are not read again and again.
    async fn run_legacy(&self) -> Result<ReclaimReport> {
        let (inner, ns) = (self.inner, Namespace::Reclaim);
        let mut report = ReclaimReport::default();
        let watermark = inner
            .read_mark(RECLAIM_WATERMARK)
            .await
            .map(u64::from_le_bytes);
        // "After" this 8-byte key is every entry due at or after the mark.
        let after = watermark.map(|w| Bytes::copy_from_slice(&w.saturating_sub(1).to_be_bytes()));
        let mut first_kept = None;
        let mut whole = true;
        let mut pages = inner.scan(ns, b"", after);
        'scan: while let Some(page) = pages.next_page().await? {
            for (k, step) in self.handle_page(ns, page, &mut report).await? {
                match step {
                    Step::Handled(Handled::Done) if !self.dry_run => {
                        inner
                            .backend
                            .delete_record(ns, &k, &Precondition::None)
                            .await?;
                    }
                    Step::Handled(Handled::Done | Handled::Skipped) => {}
                    Step::Handled(Handled::Kept(due)) => {
                        first_kept.get_or_insert(due);
                    }
                    Step::Handled(Handled::NotDue) => break 'scan,
                    Step::OutOfTime => {
                        whole = false;
                        break 'scan;
                    }
                }
            }
        }
        if whole
            && !self.dry_run
            && self.prefix.is_empty()
            && report.versions + report.still_current > 0
        {
            // Every entry due before min(start, cutoff) was processed, except those left in place (the first of
            // which is due at `first_kept`). The margin covers clocks of other clients that run behind.
            let mark = self
                .now
                .min(self.cutoff)
                .min(first_kept.unwrap_or(u64::MAX))
                .saturating_sub(CLOCK_MARGIN_MICROS);
            inner
                .write_mark(RECLAIM_WATERMARK, &mark.to_le_bytes())
                .await;
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;

    proptest::proptest! {
        /// Arbitrary records never panic the decoder, and what decodes is within bounds.
        #[test]
        fn arbitrary_records_never_panic(k in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60), v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30)) {
            for ns in [Namespace::Reclaim, Namespace::ReclaimBucket] {
                if let Ok(e) = ReclaimEntry::decode(ns, &Bytes::from(k.clone()), &Bytes::from(v.clone())) {
                    proptest::prop_assert!(
                        (e.is_removal_marker() || (1..=MAX_SALT_LIMIT).contains(&e.salt_count)) && !e.key.is_empty()
                    );
                }
            }
        }
    }

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
        let ns = Namespace::ReclaimBucket;
        assert_eq!(
            ReclaimEntry::decode(ns, &Bytes::from(k.clone()), &v).ok(),
            Some(e.clone())
        );
        assert_eq!(
            ReclaimEntry::decode(Namespace::Reclaim, &Bytes::from(e.legacy_key()), &v).ok(),
            Some(e.clone())
        );
        assert_eq!(&k[..9], &partition(0, shards::shard_of(b"key")));
        let later = ReclaimEntry {
            due_micros: 256,
            ..e.clone()
        };
        assert!(k < later.encode().0);
        // A removal marker's entry: the format byte alone, and no chunks.
        let marker = ReclaimEntry {
            salt_count: REMOVAL_ENTRY.salt_count,
            chunk_count: 0,
            stored_bytes: 0,
            ..e.clone()
        };
        let (mk, mv) = marker.encode();
        assert_eq!(&mv[..], &[MARKER_ENTRY_FORMAT]);
        let decoded = ReclaimEntry::decode(ns, &Bytes::from(mk.clone()), &mv).expect("decodes");
        assert!(decoded.is_removal_marker() && decoded == marker);
        assert!(ReclaimEntry::decode(ns, &Bytes::from(mk), &Bytes::from_static(&[2, 0])).is_err());
        assert!(!e.is_removal_marker());
        let next_bucket = ReclaimEntry {
            due_micros: BUCKET_MICROS + 1,
            ..e.clone()
        };
        assert_eq!(next_bucket.encode().0[..8], 1u64.to_be_bytes());
        // In another partition than its due time says: refused, with both.
        let mut moved = next_bucket.encode().0;
        moved[7] = 0;
        let err = ReclaimEntry::decode(ns, &Bytes::from(moved), &v)
            .expect_err("wrong bucket")
            .to_string();
        assert!(
            err.contains("bucket 0") && err.contains("bucket 1"),
            "{err}"
        );
        assert_eq!(
            ReclaimEntry::decode(ns, &Bytes::from_static(b"short"), &v).ok(),
            None
        );
        for salt_count in [0, MAX_SALT_LIMIT + 1, 1 << 31] {
            let (k, v) = ReclaimEntry {
                salt_count,
                ..e.clone()
            }
            .encode();
            assert_eq!(
                ReclaimEntry::decode(ns, &Bytes::from(k), &v).ok(),
                None,
                "salt count {salt_count}"
            );
        }
    }

    /// A store over a counted memory store, on a clock the test moves, with a grace period of 10 minutes.
    fn counted_store() -> (
        Arc<crate::backend::counting::CountingStore>,
        Arc<crate::base::clock::OffsetClock>,
        BlobStore,
    ) {
        let backend = Arc::new(crate::backend::counting::CountingStore::new(Arc::new(
            MemoryStore::new(),
        )));
        let clock = crate::base::clock::OffsetClock::new();
        let config = crate::conformance::small_config()
            .with_grace(Duration::from_secs(600))
            .with_clock(clock.clone());
        let store = BlobStore::new(backend.clone(), config).expect("store");
        (backend, clock, store)
    }

    /// The reclaim queue's bucket markers in `backend`.
    async fn markers(backend: &crate::backend::counting::CountingStore) -> usize {
        backend
            .counted()
            .scan_records(Namespace::Meta, BUCKET_MARKER, None, 100)
            .await
            .expect("markers")
            .len()
    }

    /// A bucket that is over, drained whole, goes with one partition deletion per shard that held entries (no
    /// entry is deleted one by one) and loses its marker. Entries of a bucket that is not over (due at once under
    /// grace 0) are removed one by one, and its marker stays.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drained_bucket_is_dropped_whole() {
        let (backend, clock, store) = counted_store();
        let value = Bytes::from(vec![5u8; 5000]);
        let mut shards_used = HashSet::new();
        for i in 0..40 {
            let key = format!("bucket/{i}");
            shards_used.insert(shards::shard_of(key.as_bytes()));
            for _ in 0..2 {
                store
                    .put(&key, value.clone(), &PutOptions::new())
                    .await
                    .expect("put");
            }
        }
        assert_eq!(markers(&backend).await, 1);
        clock.advance(Duration::from_secs(2 * 3600));
        let r = store
            .gc(&crate::upkeep::gc::GcOptions::new())
            .await
            .expect("gc");
        assert_eq!(r.reclaim.versions, 40, "{r:?}");
        let drops = backend.drops().len();
        assert_eq!(
            drops,
            shards_used.len(),
            "one drop per shard that held entries"
        );
        assert_eq!(
            backend.writes_to(Namespace::ReclaimBucket),
            40,
            "the entries' puts alone"
        );
        assert_eq!(markers(&backend).await, 0, "the bucket's marker went");
        assert!(
            stored(&**backend.counted())
                .await
                .expect("queue")
                .is_empty()
        );

        store
            .put("bucket/0", value.clone(), &PutOptions::new())
            .await
            .expect("put");
        let r = store
            .gc(&crate::upkeep::gc::GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!(r.reclaim.versions, 1, "{r:?}");
        assert_eq!(backend.drops().len(), drops, "no drop");
        assert_eq!(
            backend.writes_to(Namespace::ReclaimBucket),
            42,
            "put and removed"
        );
        assert_eq!(
            markers(&backend).await,
            1,
            "the current bucket keeps its marker"
        );
        assert_eq!(store.get("bucket/0").await.expect("get"), value);
    }

    /// A pass restricted to a prefix removes its own entries one by one, even in a bucket that is over: it drops no
    /// partition and no marker, which rest on keys it does not read. The unrestricted pass after it drops both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pass_restricted_to_a_prefix_leaves_the_bucket_to_an_unrestricted_one() {
        use crate::upkeep::gc::GcOptions;
        let (backend, clock, store) = counted_store();
        let value = Bytes::from(vec![5u8; 5000]);
        for key in ["a/0", "b/0"] {
            for _ in 0..2 {
                store
                    .put(key, value.clone(), &PutOptions::new())
                    .await
                    .expect("put");
            }
        }
        clock.advance(Duration::from_secs(2 * 3600));
        for prefix in ["a/", "b/"] {
            let r = store
                .gc(&GcOptions::new().with_prefix(prefix))
                .await
                .expect("gc");
            assert_eq!(r.reclaim.versions, 1, "{prefix}: {r:?}");
        }
        assert!(backend.drops().is_empty(), "{:?}", backend.drops());
        assert_eq!(
            backend.writes_to(Namespace::ReclaimBucket),
            4,
            "two entries put, and removed one by one"
        );
        assert!(
            stored(&**backend.counted())
                .await
                .expect("queue")
                .is_empty()
        );
        assert_eq!(
            markers(&backend).await,
            1,
            "the marker is left to a whole pass"
        );

        store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(
            markers(&backend).await,
            0,
            "the whole pass dropped the marker"
        );
    }

    /// Within one partition, a pass handles [`AtOnce::entries`] entries at once (8 by default), and one at a time
    /// when told so; every version is reclaimed once either way.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_of_one_partition_are_handled_at_once() {
        use crate::backend::counting::CountingStore;
        use crate::upkeep::gc::GcOptions;
        let keys: Vec<String> = (0..)
            .map(|i| format!("one-shard/{i}"))
            .filter(|k| shards::shard_of(k.as_bytes()) == 0)
            .take(24)
            .collect();
        for (entries, expected) in [(None, AtOnce::DEFAULT.entries), (Some(1), 1)] {
            let backend = Arc::new(
                CountingStore::new(Arc::new(MemoryStore::new()))
                    .with_delete_delay(Duration::from_millis(20)),
            );
            let config = crate::conformance::small_config().with_grace(Duration::ZERO);
            let store = BlobStore::new(backend.clone(), config).expect("store");
            for key in &keys {
                for seed in 0..2u8 {
                    store
                        .put(key, Bytes::from(vec![seed; 5000]), &PutOptions::new())
                        .await
                        .expect("put");
                }
            }
            let mut opts = GcOptions::new().with_parallel(1);
            if let Some(n) = entries {
                opts = opts.with_entries_at_once(n);
            }
            let r = store.gc(&opts).await.expect("gc");
            assert_eq!(r.reclaim.versions, keys.len() as u64, "{r:?}");
            assert_eq!(
                backend.chunk_deletes_at_once(),
                expected,
                "entries at once: {entries:?}"
            );
            assert!(
                backend.chunk_deletes().values().all(|n| *n == 1),
                "each version deleted once"
            );
            assert!(
                stored(&**backend.counted())
                    .await
                    .expect("queue")
                    .is_empty()
            );
        }
    }

    fn memory_store() -> (Arc<MemoryStore>, BlobStore) {
        let backend = Arc::new(MemoryStore::new());
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
        schedule(&store.inner, &key, &old, None)
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
            sealing: None,
            version: VersionId::generate(),
            size: body.len() as u64,
            created_micros: crate::base::version::now_micros(),
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
            due_micros: crate::base::version::now_micros() - COMMIT_WINDOW_MICROS - 1,
            version: current.version,
            key: key.clone(),
            salt_count: layout.salt_count,
            chunk_count: layout.chunk_count,
            stored_bytes: 0,
        };
        // In the queue of an earlier build: still drained.
        let (k, v) = (stale.legacy_key(), stale.encode().1);
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
}
