//! The consistency check ([`crate::store::BlobStore::fsck`]).
//!
//! `fsck` reads every committed blob in full (chunk checksums, lengths, the blob digest), lists every stored
//! chunk, and every file the backend keeps for a version of its own (an extent), and compares them: chunks and
//! files of no committed version, no put in flight and no queued reclaim are **orphans**, which `--repair`
//! removes (and nothing else).
//!
//! Both sides stream, so that memory does not grow with the store. The blobs are read by a pass over the
//! manifests ([`crate::store::BlobStore::pass`]: the backend's ranges for the whole store, several at once; key
//! order under a prefix), a few verified at once. The chunk listing is read in batches of [`CHUNK_BATCH`]
//! addresses; the manifest of each key in a batch is read (a point read, [`LOOKUPS_IN_FLIGHT`] at once, the
//! last [`CACHED_MANIFESTS`] kept), and each address compared with its key's current manifest. What is kept is
//! what is reported (damage, orphans) and the versions that have chunks but no manifest (puts in flight,
//! versions awaiting reclaim, orphans), with the intents of the puts in flight: not the committed blobs.
//!
//! Last, a backend that keeps an index of the manifests' keys apart from them (the CQL listing index) compares
//! the two ([`crate::backend::ChunkStore::check_index`]): a key the index lacks is damage (listings miss it),
//! which `--repair` restores; an entry without a manifest is stale, which `--repair` removes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::backend::{BlobRef, ChunkAddress, IndexCheck, Namespace};
use crate::base::error::{Error, Result};
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::layout::ChunkLayout;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::intent::{self, Intent, StoredIntent};
use crate::ledger::kept;
use crate::ledger::liveness::{self, Ownership};
use crate::ledger::reclaim;
use crate::schedule;
use crate::state::Inner;
use crate::store::BlobStore;
use crate::store::pass::{PassEvent, PassOptions, unread_error};
use crate::store::read;

/// Blobs verified concurrently by `fsck`.
const FSCK_CONCURRENCY: usize = 4;
/// Chunk addresses (and version files) compared with their manifests together (a few in unit tests, so that
/// versions and keys span batches).
const CHUNK_BATCH: usize = if cfg!(test) { 5 } else { 16_384 };
/// Manifests of a batch read at once.
const LOOKUPS_IN_FLIGHT: usize = 32;
/// Manifests kept from one batch to the next (for keys whose chunks come again), at most.
const CACHED_MANIFESTS: usize = if cfg!(test) { 2 } else { 4096 };

/// Options of [`crate::store::BlobStore::fsck`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct FsckOptions {
    /// Remove orphaned chunks (and nothing else). Defaults to `false`.
    pub repair: bool,
    /// Orphans younger than this (by version time) are reported but not removed, in case a reader or a
    /// superseding put is still working with them. Defaults to the store's grace period.
    pub min_age: Option<Duration>,
    /// Only check blobs (and chunks) whose key starts with this. Defaults to empty: every blob.
    pub prefix: Bytes,
}

impl FsckOptions {
    /// Default options: check only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`FsckOptions::repair`].
    pub fn with_repair(mut self, repair: bool) -> Self {
        self.repair = repair;
        self
    }

    /// Sets [`FsckOptions::min_age`].
    pub fn with_min_age(mut self, age: Duration) -> Self {
        self.min_age = Some(age);
        self
    }

    /// Sets [`FsckOptions::prefix`].
    pub fn with_prefix(mut self, prefix: impl Into<Bytes>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// A committed blob that does not read back whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The blob's key.
    pub key: Bytes,
    /// The version, when the manifest decoded.
    pub version: Option<VersionId>,
    /// What is wrong, with the evidence.
    pub problem: String,
}

/// A committed sealed blob fsck could not read because its key is unavailable (the store was opened without its
/// key provider, or the provider refused): its chunks count as its own, not as orphans, but nothing of it was
/// verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unverified {
    /// The blob's key.
    pub key: Bytes,
    /// The version.
    pub version: VersionId,
    /// The key-unavailable error, naming the key and what to fix.
    pub reason: String,
}

/// Why chunks are orphans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanReason {
    /// A put that died before its commit: its intent has expired (gc also reclaims these).
    Abandoned,
    /// No manifest, intent or reclaim entry refers to the version (bookkeeping lost, e.g. a killed gc).
    Unreferenced,
}

/// Chunks of one version that nothing needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The blob's key.
    pub key: Bytes,
    /// The version the chunks belong to.
    pub version: VersionId,
    /// Chunks found.
    pub chunks: u64,
    /// Files of the version's own found (an extent file; see [`crate::backend::ChunkStore::scan_version_files`]).
    pub files: u64,
    /// Why they are orphans.
    pub reason: OrphanReason,
    /// Whether `--repair` removed them.
    pub removed: bool,
}

/// What [`crate::store::BlobStore::fsck`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Committed blobs checked (damaged ones included).
    pub blobs: u64,
    /// Logical bytes of the blobs that read back whole.
    pub bytes: u64,
    /// Stored chunks listed.
    pub chunks: u64,
    /// Files of a version's own listed (extent files).
    pub version_files: u64,
    /// Committed blobs that do not read back whole, and chunks stored outside their version's layout.
    pub damaged: Vec<Damage>,
    /// Chunks that nothing refers to.
    pub orphans: Vec<Orphan>,
    /// Sealed blobs not read for want of their key (not counted in [`FsckReport::blobs`]).
    pub unverified: Vec<Unverified>,
    /// Versions of puts in progress (live intent): not orphans.
    pub puts_in_flight: u64,
    /// Replaced or deleted versions waiting in the reclaim queue: not orphans.
    pub awaiting_reclaim: u64,
    /// The backend's own index of the manifests' keys compared with them (the CQL listing index); `None` when the
    /// backend keeps none (its manifests are their own index). A key the index lacks is also in
    /// [`FsckReport::damaged`], unless the repair restored it.
    pub index: Option<IndexCheck>,
}

impl FsckReport {
    /// Orphans still present (not removed by this run).
    pub fn orphans_left(&self) -> usize {
        self.orphans.iter().filter(|o| !o.removed).count()
    }
}

/// What `fsck` learns about one stored version that no manifest refers to, from the chunk listing.
#[derive(Debug, Default)]
struct Stored {
    chunks: u64,
    files: u64,
    max_salt: u32,
    max_index: u64,
}

impl Stored {
    /// (salt count, chunk count) that cover every chunk listed; `None` when a salt or index is at its type's
    /// maximum (no layout has one), which no count can name: such an orphan is reported and left.
    fn stored_range(&self) -> Option<(u32, u64)> {
        Some((
            self.max_salt.checked_add(1)?,
            self.max_index.checked_add(1)?,
        ))
    }
}

/// Chunks of a committed version stored outside its layout: how many, and the first one listed (salt, index).
type Strays = (u64, (u32, u64));

/// The committed versions of one key, as its current manifest and its kept versions have them: each version
/// its chunks lie under, with its layout (`None`: inline). Empty when the key has no manifest nor kept version,
/// or only ones that do not decode.
type Committed = Arc<HashMap<VersionId, Option<ChunkLayout>>>;

/// One thing the chunk listing found: a chunk (salt, index) of a version, or (`None`) a file of the version's own.
struct Listed {
    key: Bytes,
    version: VersionId,
    chunk: Option<(u32, u64)>,
}

/// The chunk side of a check: the listing compared with the manifests, batch by batch.
#[derive(Default)]
struct ChunkSide {
    /// Versions with chunks or files and no manifest.
    uncommitted: HashMap<(Bytes, VersionId), Stored>,
    /// Committed versions with chunks outside their layout.
    strays: BTreeMap<(Bytes, VersionId), Strays>,
    /// Manifests read, by key, at most [`CACHED_MANIFESTS`] kept between batches.
    cache: HashMap<Bytes, Committed>,
}

impl ChunkSide {
    /// Compares `batch` with the current manifests of its keys.
    async fn check(&mut self, inner: &Inner, batch: Vec<Listed>) -> Result<()> {
        if self.cache.len() > CACHED_MANIFESTS {
            self.cache.clear();
        }
        let mut wanted: Vec<Bytes> = batch
            .iter()
            .filter(|l| !self.cache.contains_key(&l.key))
            .map(|l| l.key.clone())
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let read: Vec<(Bytes, Committed)> = stream::iter(wanted)
            .map(|key| async move {
                let committed = committed_versions(inner, &key).await?;
                Ok::<_, Error>((key, committed))
            })
            .buffer_unordered(LOOKUPS_IN_FLIGHT)
            .try_collect()
            .await?;
        self.cache.extend(read);
        for listed in batch {
            let committed = self
                .cache
                .get(&listed.key)
                .and_then(|c| c.get(&listed.version).copied());
            match (committed, listed.chunk) {
                // A file of a committed version is its own.
                (Some(_), None) => {}
                (Some(layout), Some((salt, index))) => {
                    // An inline version has no chunks.
                    let in_place =
                        layout.is_some_and(|l| index < l.chunk_count && l.salt_of(index) == salt);
                    if !in_place {
                        let (count, _) = self
                            .strays
                            .entry((listed.key, listed.version))
                            .or_insert((0, (salt, index)));
                        *count += 1;
                    }
                }
                (None, chunk) => {
                    let entry = self
                        .uncommitted
                        .entry((listed.key, listed.version))
                        .or_default();
                    match chunk {
                        Some((salt, index)) => {
                            entry.chunks += 1;
                            entry.max_salt = entry.max_salt.max(salt);
                            entry.max_index = entry.max_index.max(index);
                        }
                        None => entry.files += 1,
                    }
                }
            }
        }
        Ok(())
    }
}

/// The committed versions of `key` ([`Committed`]), from its manifest as stored now (expired or not) and its kept
/// versions.
async fn committed_versions(inner: &Inner, key: &Bytes) -> Result<Committed> {
    let mut committed = HashMap::new();
    let record = inner.backend.get_record(Namespace::Manifest, key).await?;
    let kept = kept::list(inner, key)
        .await?
        .0
        .into_iter()
        .map(|k| k.record);
    // A manifest that does not decode refers to nothing (the manifest pass reports it; `--repair` re-checks an
    // orphan's ownership, which such a manifest holds).
    for m in record
        .into_iter()
        .chain(kept)
        .filter_map(|r| inner.decode_manifest(key, &r).ok())
    {
        // A segmented version's chunks lie under its segments' versions.
        for segment in m.segments() {
            let layout = match segment.body {
                ManifestBody::Chunked { layout, .. } => Some(layout),
                _ => None,
            };
            committed.insert(segment.version, layout);
        }
    }
    Ok(Arc::new(committed))
}

/// One check; see [`crate::store::BlobStore::fsck`].
pub(crate) async fn run(store: &BlobStore, opts: &FsckOptions) -> Result<FsckReport> {
    let inner = &store.inner;
    let mut report = FsckReport::default();
    check_manifests(store, &opts.prefix, &mut report).await?;

    let mut side = ChunkSide::default();
    let mut batch = Vec::with_capacity(CHUNK_BATCH);
    let mut chunks = inner.backend.scan_chunks();
    while let Some(addr) = chunks.try_next().await? {
        let ChunkAddress {
            key,
            version,
            salt,
            index,
        } = addr;
        if !key.starts_with(&opts.prefix) {
            continue;
        }
        report.chunks += 1;
        batch.push(Listed {
            key,
            version,
            chunk: Some((salt, index)),
        });
        if batch.len() >= CHUNK_BATCH {
            side.check(inner, std::mem::take(&mut batch)).await?;
        }
    }
    drop(chunks);
    let mut files = inner.backend.scan_version_files();
    while let Some(blob) = files.try_next().await? {
        if !blob.key.starts_with(&opts.prefix) {
            continue;
        }
        report.version_files += 1;
        batch.push(Listed {
            key: blob.key,
            version: blob.version,
            chunk: None,
        });
        if batch.len() >= CHUNK_BATCH {
            side.check(inner, std::mem::take(&mut batch)).await?;
        }
    }
    drop(files);
    side.check(inner, batch).await?;
    for ((key, version), (count, (salt, index))) in std::mem::take(&mut side.strays) {
        report.damaged.push(Damage {
            key,
            version: Some(version),
            problem: format!(
                "{count} chunk(s) stored outside the layout, e.g. chunk {index} under salt {salt}"
            ),
        });
    }

    // Read after the listing and the manifests, so that a put that wrote chunks before it shows here as in
    // flight or done.
    let intents = intent::all(inner).await?;
    let candidates: HashSet<(Bytes, VersionId)> = side.uncommitted.keys().cloned().collect();
    let queued = reclaim::queued_versions(inner, &candidates).await?;
    drop(candidates);
    let now = inner.now_micros();
    let min_age = micros(opts.min_age.unwrap_or(inner.config.grace));
    let mut candidates = Vec::new();
    let mut versions: Vec<_> = side.uncommitted.into_iter().collect();
    versions.sort_by(|a, b| a.0.cmp(&b.0));
    for ((key, version), s) in versions {
        let intent = intents.get(&(key.clone(), version));
        if liveness::in_flight(inner, version, intent, now) {
            report.puts_in_flight += 1;
            continue;
        }
        if queued.contains(&(key.clone(), version)) {
            report.awaiting_reclaim += 1;
            continue;
        }
        let reason = if intent.is_some() {
            OrphanReason::Abandoned
        } else {
            OrphanReason::Unreferenced
        };
        let old_enough = version
            .timestamp_millis()
            .saturating_mul(1000)
            .saturating_add(min_age)
            <= now;
        if opts.repair
            && old_enough
            && let Some(stored) = s.stored_range()
        {
            candidates.push(Candidate {
                orphan: report.orphans.len(),
                stored,
                intent: intent.copied(),
            });
        }
        report.orphans.push(Orphan {
            key,
            version,
            chunks: s.chunks,
            files: s.files,
            reason,
            removed: false,
        });
    }
    repair(inner, &mut report.orphans, candidates).await?;
    if report.orphans.iter().any(|o| o.removed) {
        inner.backend.reclaim_space().await?;
    }
    report.index = inner.backend.check_index(&opts.prefix, opts.repair).await?;
    if let Some(index) = &report.index
        && index.restored < index.missing.len() as u64
    {
        for key in &index.missing {
            report.damaged.push(Damage {
                key: key.clone(),
                version: None,
                problem: format!(
                    "committed, but absent from the {}: listings do not show it (fsck --repair writes it back)",
                    index.name
                ),
            });
        }
        report.damaged.sort_by(|a, b| a.key.cmp(&b.key));
    }
    Ok(report)
}

/// An orphan that `--repair` may remove, pending the re-checks of [`repair`].
struct Candidate {
    /// Its index in the report's orphans.
    orphan: usize,
    /// Salts and chunk indexes to delete: (salt count, chunk count) covering every chunk listed.
    stored: (u32, u64),
    /// Its intent as read by the check, if it had one.
    intent: Option<Intent>,
}

/// Removes the `candidates` that are still orphans, marking them removed in `orphans`.
///
/// Each is re-checked first, because the store is in use while `fsck` runs: its intent must be unchanged and
/// its version not current. The reclaim queue is read again after those reads: a version replaced or deleted
/// since the check was queued before its replacement was written, so the queue shows it, and it is left to
/// the reclaimer, which honours its readers' grace period.
async fn repair(inner: &Inner, orphans: &mut [Orphan], candidates: Vec<Candidate>) -> Result<()> {
    let mut still = Vec::with_capacity(candidates.len());
    for c in candidates {
        let Some(orphan) = orphans.get(c.orphan) else {
            continue;
        };
        let blob = BlobRef {
            key: orphan.key.clone(),
            version: orphan.version,
        };
        if let Some(intent_now) = still_orphan(inner, &blob, c.intent).await? {
            still.push((c, blob, intent_now));
        }
    }
    if still.is_empty() {
        return Ok(());
    }
    let versions = still
        .iter()
        .map(|(_, blob, _)| (blob.key.clone(), blob.version))
        .collect();
    let queued = reclaim::queued_versions(inner, &versions).await?;
    for (c, blob, intent_now) in still {
        if queued.contains(&(blob.key.clone(), blob.version)) {
            continue;
        }
        // Take the expired intent over first, so that its writer cannot claim it and commit.
        if let Some(found) = intent_now
            && !intent::take_over(inner, &found).await?
        {
            continue;
        }
        let (salt_count, chunk_count) = c.stored;
        inner
            .backend
            .delete_chunks(&blob, salt_count, chunk_count)
            .await?;
        if let Some(o) = orphans.get_mut(c.orphan) {
            o.removed = true;
        }
    }
    Ok(())
}

/// What the manifest pass of a check yields: an unread range, a manifest that does not decode, or a blob read.
enum Checked {
    Unread(usize, Error),
    Undecodable(Damage),
    Read(Bytes, VersionId, Result<u64>),
}

/// Reads and verifies every committed blob under `prefix` (by a pass over the manifests, expired ones included),
/// [`FSCK_CONCURRENCY`] at once; its damage is reported in key order.
async fn check_manifests(store: &BlobStore, prefix: &[u8], report: &mut FsckReport) -> Result<()> {
    let inner = &store.inner;
    let plan = store.plan_pass(prefix).await?;
    let mut checked = store
        .pass(&plan, &PassOptions::new().with_expired(true))
        .flat_map(|event| match event {
            PassEvent::Page(page) => stream::iter(page.entries).map(Ok).left_stream(),
            PassEvent::Unread { range, error } => {
                stream::iter([Err((range, error))]).right_stream()
            }
        })
        .map(|entry| async move {
            let entry = match entry {
                Ok(entry) => entry,
                Err((range, error)) => return Checked::Unread(range, error),
            };
            match entry.manifest {
                Ok(m) => {
                    let version = m.version;
                    let read = verify_version(inner, entry.key.clone(), m).await;
                    Checked::Read(entry.key, version, read)
                }
                Err(e) => Checked::Undecodable(Damage {
                    key: entry.key,
                    version: None,
                    problem: e.to_string(),
                }),
            }
        })
        .buffer_unordered(FSCK_CONCURRENCY);
    let mut unread = Vec::new();
    let mut damaged = Vec::new();
    while let Some(outcome) = checked.next().await {
        match outcome {
            Checked::Unread(range, error) => unread.push((range, error)),
            Checked::Undecodable(damage) => damaged.push(damage),
            Checked::Read(_, _, Ok(bytes)) => {
                report.blobs += 1;
                report.bytes += bytes;
            }
            // Replaced (and reclaimed) while being checked: not damage.
            Checked::Read(_, _, Err(Error::VersionReclaimed { .. })) => {}
            // Sealed, and its key is not at hand: its layout still tells its chunks from orphans.
            Checked::Read(key, version, Err(e @ Error::KeyUnavailable { .. })) => {
                report.unverified.push(Unverified {
                    key,
                    version,
                    reason: e.to_string(),
                });
            }
            Checked::Read(key, version, Err(e)) if e.is_corruption() => {
                report.blobs += 1;
                damaged.push(Damage {
                    key,
                    version: Some(version),
                    problem: e.to_string(),
                });
            }
            Checked::Read(_, _, Err(e)) => return Err(e),
        }
    }
    if !unread.is_empty() {
        let ranges = plan.range_count();
        return Err(unread_error(inner.info.name, "fsck", unread, ranges));
    }
    damaged.sort_by(|a, b| a.key.cmp(&b.key));
    report.damaged.extend(damaged);
    report.unverified.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(())
}

/// Reads one version in full, verifying chunk checksums, lengths and the digest; returns its size.
async fn verify_version(inner: &Arc<Inner>, key: Bytes, manifest: Manifest) -> Result<u64> {
    let range = 0..manifest.size;
    // A version sealed under a customer key cannot be opened here: it is reported unverified.
    let keys = crate::store::sealing::for_read(inner, &key, &manifest, None).await?;
    let mut stream = read::stream_version(
        inner,
        key,
        manifest,
        range,
        crate::schedule::current_class(),
        keys,
        None,
    );
    let mut total = 0u64;
    while let Some(piece) = stream.next().await {
        total += piece?.len() as u64;
    }
    Ok(total)
}

/// Whether `blob`, seen with intent `seen`, is still an orphan: no put of it runs here, its intent record is
/// unchanged and its version is not current. Returns the intent record as read now (`Some(None)`: none).
async fn still_orphan(
    inner: &Inner,
    blob: &BlobRef,
    seen: Option<Intent>,
) -> Result<Option<Option<StoredIntent>>> {
    if inner.running.contains(blob.version) {
        return Ok(None);
    }
    let intent_now = intent::read_record(inner, blob).await?;
    let unchanged = match (&seen, &intent_now) {
        (None, None) => true,
        (Some(seen), Some(now)) => Intent::decode(&now.raw).ok() == Some(*seen),
        _ => false,
    };
    let not_owned = liveness::ownership(inner, blob).await? == Ownership::NotOwned;
    Ok((unchanged && not_owned).then_some(intent_now))
}

impl BlobStore {
    /// Checks every blob: its manifest decodes, every chunk is present once and in its place, checksums and the
    /// blob digest match; lists the chunks that nothing refers to (orphans) and, with
    /// [`FsckOptions::repair`], removes those (older than [`FsckOptions::min_age`]) and nothing else.
    ///
    /// Reads every committed byte. Safe to run while the store is in use: orphans are re-checked against the
    /// current manifest and intent just before removal, and versions replaced during the check are skipped. A
    /// sealed blob whose key is unavailable (a store opened without its key provider) is not read but listed in
    /// [`FsckReport::unverified`]; its chunks are still told from orphans by its layout.
    ///
    /// Memory does not grow with the number of blobs (see the [module documentation](crate::fsck)): it holds a
    /// page of manifests per range read at once, the blobs being verified (their read-ahead), a batch of chunk
    /// addresses and a cache of their manifests, and what it reports, with the versions that have chunks but
    /// no manifest (puts in flight, versions awaiting reclaim, orphans).
    ///
    /// # Errors
    /// What the backend returns; an error naming the ranges of the manifests left unread after retries (a
    /// node down on a cluster whose other replicas cannot serve them): fsck does not report a partial check.
    pub async fn fsck(&self, opts: &FsckOptions) -> Result<FsckReport> {
        schedule::in_class(self.maintenance_class(), run(self, opts)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::backend::{ChunkStore, ChunkWrite};
    use crate::format::layout::LayoutPolicy;
    use crate::state::config::{PutOptions, StoreConfig};

    /// The chunk side in small batches (versions and keys span them, the manifest cache is cleared between
    /// them): chunks of committed blobs are theirs, a chunk outside a layout is damage, and the chunks of a
    /// version no manifest refers to make one orphan, however many batches they came in.
    #[tokio::test]
    async fn the_chunk_side_streams_in_batches() {
        let backend = Arc::new(MemoryStore::new());
        let policy = LayoutPolicy::default()
            .with_inline_limit(100)
            .with_single_chunk_size(4096)
            .with_fanout_threshold(16 << 10)
            .with_max_salt(3);
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default()
                .with_policy(policy)
                .with_grace(Duration::ZERO),
        )
        .unwrap();
        for (key, size) in [("a", 40_000), ("b", 10), ("c", 9000), ("d", 30_000)] {
            store
                .put(key, vec![1u8; size], &PutOptions::new())
                .await
                .unwrap();
        }
        let c = store.head("c").await.unwrap();
        let chunk = |index: u64| ChunkWrite {
            salt: 0,
            index,
            data: Bytes::from_static(b"not a chunk"),
        };
        // A chunk past the end of "c"'s layout, and an unreferenced version of "b" with 7 chunks.
        let c_ref = BlobRef {
            key: Bytes::from_static(b"c"),
            version: c.version,
        };
        backend.put_chunks(&c_ref, vec![chunk(99)]).await.unwrap();
        let lost = BlobRef {
            key: Bytes::from_static(b"b"),
            version: VersionId(1 << 80),
        };
        backend
            .put_chunks(&lost, (0..7).map(chunk).collect())
            .await
            .unwrap();

        let report = store.fsck(&FsckOptions::new()).await.unwrap();
        assert_eq!(report.blobs, 4, "{report:?}");
        assert_eq!(report.chunks as usize, backend.chunk_count().unwrap());
        let damaged: Vec<_> = report
            .damaged
            .iter()
            .map(|d| (&d.key[..], &d.problem))
            .collect();
        assert_eq!(damaged.len(), 1, "{report:?}");
        assert_eq!(damaged[0].0, b"c");
        assert!(damaged[0].1.contains("chunk 99 under salt 0"), "{report:?}");
        let orphans: Vec<_> = report
            .orphans
            .iter()
            .map(|o| (&o.key[..], o.version, o.chunks))
            .collect();
        assert_eq!(orphans, [(&b"b"[..], lost.version, 7)]);

        let repaired = store
            .fsck(
                &FsckOptions::new()
                    .with_repair(true)
                    .with_min_age(Duration::ZERO),
            )
            .await
            .unwrap();
        assert!(repaired.orphans[0].removed, "{repaired:?}");
        let after = store.fsck(&FsckOptions::new()).await.unwrap();
        assert!(after.orphans.is_empty(), "{after:?}");
    }
}
