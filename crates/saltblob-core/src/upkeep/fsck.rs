//! The consistency check ([`crate::store::BlobStore::fsck`]).
//!
//! `fsck` reads every committed blob in full (chunk checksums, lengths, the blob digest), lists every stored
//! chunk, and every file the backend keeps for a version of its own (an extent), and compares them: chunks and
//! files of no committed version, no put in flight and no queued reclaim are **orphans**, which `--repair`
//! removes (and nothing else).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::backend::{BlobRef, Namespace};
use crate::base::error::{Error, Result};
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::format::layout::ChunkLayout;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::intent::{self, Intent, intent_key};
use crate::ledger::liveness::{self, Ownership};
use crate::ledger::reclaim;
use crate::schedule;
use crate::state::Inner;
use crate::store::BlobStore;
use crate::store::read;

/// Blobs verified concurrently by `fsck`.
const FSCK_CONCURRENCY: usize = 4;

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
}

impl FsckReport {
    /// Orphans still present (not removed by this run).
    pub fn orphans_left(&self) -> usize {
        self.orphans.iter().filter(|o| !o.removed).count()
    }
}

/// What `fsck` learns about one stored version from the chunk listing.
#[derive(Debug, Default)]
struct Stored {
    chunks: u64,
    files: u64,
    max_salt: u32,
    max_index: u64,
    /// Chunks outside the committed layout, with the first one as evidence.
    stray: u64,
    first_stray: Option<(u32, u64)>,
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

/// One check; see [`crate::store::BlobStore::fsck`].
pub(crate) async fn run(inner: &Arc<Inner>, opts: &FsckOptions) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let committed = check_manifests(inner, &opts.prefix, &mut report).await?;

    let mut stored: HashMap<(Bytes, VersionId), Stored> = HashMap::new();
    let mut chunks = inner.backend.scan_chunks();
    while let Some(addr) = chunks.try_next().await? {
        if !addr.key.starts_with(&opts.prefix) {
            continue;
        }
        report.chunks += 1;
        let entry = stored.entry((addr.key.clone(), addr.version)).or_default();
        entry.chunks += 1;
        entry.max_salt = entry.max_salt.max(addr.salt);
        entry.max_index = entry.max_index.max(addr.index);
        let in_place = match committed.get(&(addr.key, addr.version)) {
            Some(Some(layout)) => {
                addr.index < layout.chunk_count && layout.salt_of(addr.index) == addr.salt
            }
            // An inline version has no chunks.
            Some(None) => false,
            None => true,
        };
        if !in_place {
            entry.stray += 1;
            entry.first_stray.get_or_insert((addr.salt, addr.index));
        }
    }
    drop(chunks);
    let mut files = inner.backend.scan_version_files();
    while let Some(blob) = files.try_next().await? {
        if !blob.key.starts_with(&opts.prefix) {
            continue;
        }
        report.version_files += 1;
        stored.entry((blob.key, blob.version)).or_default().files += 1;
    }
    drop(files);

    // Read after the listing, so that a put that wrote chunks before it shows here as in flight or done.
    let intents = intent::all(inner).await?;
    let queued = reclaim::queued_versions(inner).await?;
    let now = inner.now_micros();
    let min_age = micros(opts.min_age.unwrap_or(inner.config.grace));
    let mut candidates = Vec::new();
    let mut versions: Vec<_> = stored.into_iter().collect();
    versions.sort_by(|a, b| a.0.cmp(&b.0));
    for ((key, version), s) in versions {
        if committed.contains_key(&(key.clone(), version)) {
            if let Some((salt, index)) = s.first_stray {
                report.damaged.push(Damage {
                    key,
                    version: Some(version),
                    problem: format!(
                        "{} chunk(s) stored outside the layout, e.g. chunk {index} under salt {salt}",
                        s.stray
                    ),
                });
            }
            continue;
        }
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
    let queued = reclaim::queued_versions(inner).await?;
    for (c, blob, intent_now) in still {
        if queued.contains(&(blob.key.clone(), blob.version)) {
            continue;
        }
        // Take the expired intent over first, so that its writer cannot claim it and commit.
        if let Some(raw) = intent_now
            && !intent::take_over(inner, &intent_key(&blob), raw).await?
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

/// Reads and verifies every committed blob; returns the committed versions' chunk layouts (`None`: inline).
async fn check_manifests(
    inner: &Arc<Inner>,
    prefix: &[u8],
    report: &mut FsckReport,
) -> Result<HashMap<(Bytes, VersionId), Option<ChunkLayout>>> {
    let mut committed = HashMap::new();
    let mut pages = inner.scan(Namespace::Manifest, prefix, None);
    while let Some(page) = pages.next_page().await? {
        let mut manifests = Vec::with_capacity(page.len());
        for (key, bytes) in page {
            match inner.decode_manifest(&key, &bytes) {
                Ok(m) => manifests.push((key, m)),
                Err(e) => report.damaged.push(Damage {
                    key,
                    version: None,
                    problem: e.to_string(),
                }),
            }
        }
        let checked: Vec<(Bytes, Manifest, Result<u64>)> = stream::iter(manifests)
            .map(|(key, m)| async move {
                let read = verify_version(inner, key.clone(), m.clone()).await;
                (key, m, read)
            })
            .buffer_unordered(FSCK_CONCURRENCY)
            .collect()
            .await;
        for (key, m, read) in checked {
            match read {
                Ok(bytes) => {
                    report.blobs += 1;
                    report.bytes += bytes;
                }
                // Replaced (and reclaimed) while being checked: not damage.
                Err(Error::VersionReclaimed { .. }) => {}
                // Sealed, and its key is not at hand: its layout still tells its chunks from orphans.
                Err(e @ Error::KeyUnavailable { .. }) => report.unverified.push(Unverified {
                    key: key.clone(),
                    version: m.version,
                    reason: e.to_string(),
                }),
                Err(e) if e.is_corruption() => {
                    report.blobs += 1;
                    report.damaged.push(Damage {
                        key: key.clone(),
                        version: Some(m.version),
                        problem: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
            // A segmented version's chunks lie under its segments' versions.
            for segment in m.segments() {
                let layout = match segment.body {
                    ManifestBody::Chunked { layout, .. } => Some(layout),
                    _ => None,
                };
                committed.insert((key.clone(), segment.version), layout);
            }
        }
    }
    Ok(committed)
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
) -> Result<Option<Option<Bytes>>> {
    if inner.running.contains(blob.version) {
        return Ok(None);
    }
    let intent_now = intent::read_record(inner, blob).await?;
    let unchanged = match (&seen, &intent_now) {
        (None, None) => true,
        (Some(seen), Some(now)) => Intent::decode(now).ok() == Some(*seen),
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
    pub async fn fsck(&self, opts: &FsckOptions) -> Result<FsckReport> {
        schedule::in_class(self.maintenance_class(), run(&self.inner, opts)).await
    }
}
