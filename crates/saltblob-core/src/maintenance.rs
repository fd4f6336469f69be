//! Garbage collection ([`BlobStore::gc`]) and the consistency check ([`BlobStore::fsck`]).
//!
//! Space is left behind in three ways, and each has a record that finds it again:
//! - a put replaces a version, or a delete removes one: the version goes to the **reclaim queue**, due after
//!   the grace period (readers that started before may still be reading it);
//! - a writer dies (or is cancelled) between its first chunk and its commit: before its first chunk a put
//!   writes an **intent** (key, version, start, lease expiry, salt count), renews it every third of the lease
//!   while it runs and removes it after the commit. gc treats an intent as abandoned only once its lease has
//!   expired, and a put that could not renew its lease in time fails instead of committing, so gc never
//!   reclaims chunks that a live put is about to publish. Renewals and gc's takeover are compare-and-set
//!   writes on the intent record: whichever comes second sees the other's write.
//!
//! `fsck` reads every committed blob in full (chunk checksums, lengths, the blob digest), lists every stored
//! chunk and compares the two: chunks of no committed version, no put in flight and no queued reclaim are
//! **orphans**, which `--repair` removes (and nothing else).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use crate::backend::{BlobRef, ChunkStore, Namespace, Precondition, RecordWrite, SpaceReport};
use crate::layout::ChunkLayout;
use crate::manifest::{Manifest, ManifestBody};
use crate::store::{BlobStore, CLOCK_MARGIN_MICROS, Inner, PAGE, ReclaimEntry, ReclaimReport};
use crate::version::{VersionId, now_micros};
use crate::{Error, KeyDisplay, Result};

/// Blobs verified concurrently by `fsck`.
const FSCK_CONCURRENCY: usize = 4;

/// Key of the intent scan's low-water mark in [`Namespace::Meta`]: a version id (u128 LE) below which every
/// intent has been processed, so that gc passes do not read the deletion markers (tombstones on Cassandra) of
/// the intents of long-committed puts again and again.
const INTENT_WATERMARK: &[u8] = b"intent-watermark";

/// Format byte of an intent record's value.
const INTENT_FORMAT: u8 = 1;

/// Length of an intent record's value.
const INTENT_LEN: usize = 37;

/// An intent record. Key: version (u128 big-endian), then the blob key. Value (37 bytes, little-endian):
/// format byte 1, start (u64 Unix µs), lease expiry (u64 Unix µs), salt count (u32), chunks written so far
/// (u64) and their stored bytes (u64), both as of the last renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) started_micros: u64,
    pub(crate) expires_micros: u64,
    pub(crate) salt_count: u32,
    pub(crate) chunks: u64,
    pub(crate) stored_bytes: u64,
}

impl Intent {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(INTENT_LEN);
        v.push(INTENT_FORMAT);
        v.extend_from_slice(&self.started_micros.to_le_bytes());
        v.extend_from_slice(&self.expires_micros.to_le_bytes());
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunks.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        Bytes::from(v)
    }

    fn decode(v: &[u8]) -> Option<Self> {
        if v.len() != INTENT_LEN || v.first() != Some(&INTENT_FORMAT) {
            return None;
        }
        let u64_at = |at: usize| Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?));
        Some(Self {
            started_micros: u64_at(1)?,
            expires_micros: u64_at(9)?,
            salt_count: u32::from_le_bytes(v.get(17..21)?.try_into().ok()?),
            chunks: u64_at(21)?,
            stored_bytes: u64_at(29)?,
        })
    }

    fn expired(&self, now: u64) -> bool {
        self.expires_micros <= now
    }
}

fn intent_key(blob: &BlobRef) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + blob.key.len());
    k.extend_from_slice(&blob.version.to_be_bytes());
    k.extend_from_slice(&blob.key);
    k
}

fn parse_intent_key(k: &Bytes) -> Option<BlobRef> {
    let version = VersionId(u128::from_be_bytes(k.get(..16)?.try_into().ok()?));
    let key = k.slice(16..);
    (!key.is_empty()).then_some(BlobRef { key, version })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// How far a put has got, shared between its chunk writer and its lease (recorded at each renewal).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    chunks: AtomicU64,
    stored: AtomicU64,
}

impl Progress {
    pub(crate) fn record(&self, chunks: u64, stored: u64) {
        self.chunks.store(chunks, Ordering::Relaxed);
        self.stored.store(stored, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct LeaseState {
    /// The intent as last written.
    intent: Intent,
    /// Why the lease was lost, if it was (gc took the intent over).
    lost: Option<String>,
}

/// The intent lease of one chunked put: written before its first chunk, renewed in the background, checked
/// before the commit and removed after it. Dropping it (a cancelled put) stops the renewals and leaves the
/// intent to expire, after which gc reclaims the chunks.
pub(crate) struct IntentLease {
    backend: Arc<dyn ChunkStore>,
    blob: BlobRef,
    record_key: Vec<u8>,
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    progress: Arc<Progress>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl IntentLease {
    /// Writes the intent of `blob` and starts renewing it.
    pub(crate) async fn acquire(inner: &Inner, blob: &BlobRef, salt_count: u32) -> Result<Self> {
        let lease = inner.config.intent_lease;
        let now = now_micros();
        let intent = Intent {
            started_micros: now,
            expires_micros: now.saturating_add(micros(lease)),
            salt_count,
            chunks: 0,
            stored_bytes: 0,
        };
        let record_key = intent_key(blob);
        // The version is new, so nothing can be there: an unconditional write is enough (and cheaper).
        inner
            .backend
            .put_record(
                Namespace::Intent,
                &record_key,
                intent.encode(),
                &Precondition::None,
            )
            .await?;
        let state = Arc::new(Mutex::new(LeaseState { intent, lost: None }));
        let progress = Arc::new(Progress::default());
        let renewer = tokio::spawn(renew(
            Arc::clone(&inner.backend),
            record_key.clone(),
            lease,
            Arc::clone(&state),
            Arc::clone(&progress),
        ));
        Ok(Self {
            backend: Arc::clone(&inner.backend),
            blob: blob.clone(),
            record_key,
            lease,
            state,
            progress,
            renewer: Some(renewer),
        })
    }

    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// Succeeds when the lease is held with at least a quarter of it left, so that the commit lands well before
    /// any gc may treat the put as abandoned.
    pub(crate) fn confirm(&self) -> Result<()> {
        let lost = |detail: String| Error::IntentLost {
            key: self.blob.key[..].into(),
            version: self.blob.version,
            detail,
        };
        let state = self
            .state
            .lock()
            .map_err(|_| lost("the lease state was poisoned by a panic".into()))?;
        if let Some(why) = &state.lost {
            return Err(lost(why.clone()));
        }
        let left = state.intent.expires_micros.saturating_sub(now_micros());
        if left < micros(self.lease) / 4 {
            return Err(lost(format!(
                "only {left} µs of the {:?} lease were left (renewals failed or stalled)",
                self.lease
            )));
        }
        Ok(())
    }

    /// Stops renewing and removes the intent (best effort: a leftover intent of a committed version is removed
    /// by gc, one of a failed put makes gc reclaim its chunks).
    pub(crate) async fn release(mut self) {
        if let Some(task) = self.renewer.take() {
            task.abort();
            let _ = task.await;
        }
        if let Err(e) = self
            .backend
            .delete_record(Namespace::Intent, &self.record_key, &Precondition::None)
            .await
        {
            tracing::warn!(
                "could not remove the intent of version {} (gc will): {e}",
                self.blob.version
            );
        }
    }

    /// Ends the lease of a put that is over: removes the intent when the put's chunks are `settled` (committed,
    /// deleted or queued for reclaim), or else leaves it to expire, after which gc reclaims them.
    pub(crate) async fn end(self, settled: bool) {
        if settled {
            self.release().await;
        } else {
            tracing::warn!(
                "left the intent of version {} to expire: gc will reclaim its chunks",
                self.blob.version
            );
        }
    }
}

impl Drop for IntentLease {
    fn drop(&mut self) {
        if let Some(task) = &self.renewer {
            task.abort();
        }
    }
}

/// Renews an intent every third of the lease with a compare-and-set, until aborted or the intent was taken over.
async fn renew(
    backend: Arc<dyn ChunkStore>,
    record_key: Vec<u8>,
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    progress: Arc<Progress>,
) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let Ok(current) = state.lock().map(|s| s.intent) else {
            return;
        };
        let next = Intent {
            expires_micros: now_micros().saturating_add(micros(lease)),
            chunks: progress.chunks.load(Ordering::Relaxed),
            stored_bytes: progress.stored.load(Ordering::Relaxed),
            ..current
        };
        let outcome = backend
            .put_record(
                Namespace::Intent,
                &record_key,
                next.encode(),
                &Precondition::Equals(current.encode()),
            )
            .await;
        let Ok(mut st) = state.lock() else { return };
        match outcome {
            Ok(RecordWrite::Done(_)) => st.intent = next,
            Ok(RecordWrite::ConditionFailed(_)) => {
                st.lost = Some("garbage collection took the expired intent over".into());
                return;
            }
            // Retried at the next tick; `confirm` fails the put if the lease runs out meanwhile.
            Err(e) => tracing::warn!("could not renew a put's intent lease: {e}"),
        }
    }
}

/// Options of one garbage collection pass.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct GcOptions {
    /// How long replaced and deleted versions stay readable before their chunks go. `Some(ZERO)` reclaims them
    /// at once (readers still streaming them then fail with [`Error::VersionReclaimed`]). Defaults to the
    /// store's [`crate::StoreConfig::grace`]. Entries are assumed to have been queued with the store's grace.
    pub grace: Option<Duration>,
    /// Report what would be reclaimed without deleting anything. Defaults to `false`.
    pub dry_run: bool,
    /// Only collect blobs whose key starts with this. Defaults to empty: every blob.
    pub prefix: Bytes,
}

impl GcOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`GcOptions::grace`].
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Sets [`GcOptions::dry_run`].
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Sets [`GcOptions::prefix`].
    pub fn with_prefix(mut self, prefix: impl Into<Bytes>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// What one garbage collection pass found and freed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Whether this was a dry run (nothing deleted).
    pub dry_run: bool,
    /// Puts in progress (intent lease not expired): left alone.
    pub puts_in_flight: u64,
    /// Intents left behind by puts that did commit: removed.
    pub stale_intents: u64,
    /// Abandoned puts (intent expired, version not committed): their chunks were queued for reclaim.
    pub abandoned_puts: u64,
    /// Chunks the abandoned puts had written, as of their last lease renewal (a lower bound).
    pub abandoned_chunks: u64,
    /// What the reclaim queue pass freed (superseded and deleted versions, and the abandoned puts once due).
    pub reclaim: ReclaimReport,
    /// Disk space before and after, when the backend compacts and can tell.
    pub space: Option<SpaceReport>,
}

/// Stops the background garbage collector started by [`BlobStore::spawn_gc`] when dropped.
#[derive(Debug)]
pub struct GcHandle(tokio::task::JoinHandle<()>);

impl Drop for GcHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Options of [`BlobStore::fsck`].
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
    /// Why they are orphans.
    pub reason: OrphanReason,
    /// Whether `--repair` removed them.
    pub removed: bool,
}

/// What [`BlobStore::fsck`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Committed blobs checked (damaged ones included).
    pub blobs: u64,
    /// Logical bytes of the blobs that read back whole.
    pub bytes: u64,
    /// Stored chunks listed.
    pub chunks: u64,
    /// Committed blobs that do not read back whole, and chunks stored outside their version's layout.
    pub damaged: Vec<Damage>,
    /// Chunks that nothing refers to.
    pub orphans: Vec<Orphan>,
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
    max_salt: u32,
    max_index: u64,
    /// Chunks outside the committed layout, with the first one as evidence.
    stray: u64,
    first_stray: Option<(u32, u64)>,
}

impl BlobStore {
    /// Runs one garbage collection pass: takes over the intents of abandoned puts (expired lease, version not
    /// committed) and queues their chunks, removes intents left by committed puts, reclaims every queued version
    /// that is due under `opts.grace`, and asks the backend to return the freed space to the file system.
    pub async fn gc(&self, opts: &GcOptions) -> Result<GcReport> {
        let inner = &self.inner;
        let now = now_micros();
        let mut report = GcReport {
            dry_run: opts.dry_run,
            ..GcReport::default()
        };
        let watermark = self.intent_watermark().await;
        // Every intent at or above the mark ("after" the 16-byte version just below it).
        let mut after: Option<Bytes> =
            watermark.map(|w| Bytes::copy_from_slice(&w.saturating_sub(1).to_be_bytes()));
        // Versions of puts started from now on are at least this (clocks may lag by the margin).
        let mut oldest_live = (u128::from(now.saturating_sub(CLOCK_MARGIN_MICROS) / 1000)) << 80;
        loop {
            let page = inner
                .backend
                .scan_records(Namespace::Intent, b"", after.as_deref(), PAGE)
                .await?;
            let full = page.len() == PAGE;
            for (k, v) in page {
                after = Some(k.clone());
                if k.get(16..).is_some_and(|key| key.starts_with(&opts.prefix)) {
                    let kept = self
                        .gc_intent(&k, &v, now, opts.dry_run, &mut report)
                        .await?;
                    if let (Some(version), true) = (parse_intent_key(&k), kept) {
                        oldest_live = oldest_live.min(version.version.0);
                    }
                }
            }
            if !full {
                break;
            }
        }
        if !opts.dry_run && opts.prefix.is_empty() && Some(oldest_live) > watermark {
            inner
                .write_mark(INTENT_WATERMARK, &oldest_live.to_le_bytes())
                .await;
        }
        let config_grace = micros(inner.config.grace);
        let cutoff = match opts.grace.map(micros) {
            Some(0) => u64::MAX,
            Some(g) => now.saturating_add(config_grace).saturating_sub(g),
            None => now,
        };
        report.reclaim = inner.reclaim(cutoff, opts.dry_run, &opts.prefix).await?;
        if !opts.dry_run && report.reclaim.versions > 0 {
            report.space = inner.backend.reclaim_space().await?;
        }
        Ok(report)
    }

    /// Where the last full gc pass left the intent scan, if it recorded it.
    async fn intent_watermark(&self) -> Option<u128> {
        Some(u128::from_le_bytes(
            self.inner
                .read_mark(INTENT_WATERMARK)
                .await?
                .as_ref()
                .try_into()
                .ok()?,
        ))
    }

    /// Handles one intent; returns whether it stays (a put in flight, or an intent left in place).
    async fn gc_intent(
        &self,
        k: &Bytes,
        v: &Bytes,
        now: u64,
        dry_run: bool,
        report: &mut GcReport,
    ) -> Result<bool> {
        let inner = &self.inner;
        let (Some(blob), Some(intent)) = (parse_intent_key(k), Intent::decode(v)) else {
            tracing::warn!(
                "undecodable intent record {:?} left in place",
                KeyDisplay::from(&k[..])
            );
            return Ok(true);
        };
        if !intent.expired(now) {
            report.puts_in_flight += 1;
            return Ok(true);
        }
        let current = match inner.read_manifest(&blob.key).await {
            Ok(m) => m.map(|m| m.version),
            // Unsure what is current: leave it.
            Err(e) if e.is_corruption() => return Ok(true),
            Err(e) => return Err(e),
        };
        let fence = Precondition::Equals(v.clone());
        if current == Some(blob.version) {
            report.stale_intents += 1;
            if !dry_run {
                inner
                    .backend
                    .delete_record(Namespace::Intent, k, &fence)
                    .await?;
            }
            return Ok(dry_run);
        }
        report.abandoned_puts += 1;
        report.abandoned_chunks += intent.chunks;
        if dry_run {
            return Ok(true);
        }
        // Queue first, then fence the writer off by removing its intent with a compare-and-set: a writer that
        // renewed in between keeps its put (and the queue entry goes again). A crash in between leaves a queue
        // entry that the reclaimer skips while the intent is live.
        let entry = ReclaimEntry {
            due_micros: now.saturating_add(micros(inner.config.grace)),
            version: blob.version,
            key: blob.key.clone(),
            salt_count: intent.salt_count,
            chunk_count: intent.chunks,
            stored_bytes: intent.stored_bytes,
        };
        let (qk, qv) = entry.encode();
        inner
            .backend
            .put_record(Namespace::Reclaim, &qk, qv, &Precondition::None)
            .await?;
        match inner
            .backend
            .delete_record(Namespace::Intent, k, &fence)
            .await?
        {
            RecordWrite::Done(_) => Ok(false),
            RecordWrite::ConditionFailed(_) => {
                report.abandoned_puts -= 1;
                report.abandoned_chunks -= intent.chunks;
                report.puts_in_flight += 1;
                inner
                    .backend
                    .delete_record(Namespace::Reclaim, &qk, &Precondition::None)
                    .await?;
                Ok(true)
            }
        }
    }

    /// Runs [`BlobStore::gc`] every `every` in a background task until the handle is dropped; failures are
    /// logged and retried at the next tick. Needs a Tokio runtime.
    pub fn spawn_gc(&self, every: Duration, opts: GcOptions) -> GcHandle {
        let store = self.clone();
        GcHandle(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match store.gc(&opts).await {
                    Ok(r) => tracing::debug!("background gc: {r:?}"),
                    Err(e) => tracing::warn!("background gc failed (will retry): {e}"),
                }
            }
        }))
    }

    /// Checks every blob: its manifest decodes, every chunk is present once and in its place, checksums and the
    /// blob digest match; lists the chunks that nothing refers to (orphans) and, with
    /// [`FsckOptions::repair`], removes those (older than [`FsckOptions::min_age`]) and nothing else.
    ///
    /// Reads every committed byte. Safe to run while the store is in use: orphans are re-checked against the
    /// current manifest and intent just before removal, and versions replaced during the check are skipped.
    pub async fn fsck(&self, opts: &FsckOptions) -> Result<FsckReport> {
        let inner = &self.inner;
        let mut report = FsckReport::default();
        let committed = self.fsck_manifests(&opts.prefix, &mut report).await?;

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

        // Read after the listing, so that a put that wrote chunks before it shows here as in flight or done.
        let intents = self.scan_intents().await?;
        let queued = self.scan_queue().await?;
        let now = now_micros();
        let min_age = micros(opts.min_age.unwrap_or(inner.config.grace));
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
            if intent.is_some_and(|i| !i.expired(now)) {
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
            let old_enough = version.timestamp_millis().saturating_mul(1000) + min_age <= now;
            let removed = opts.repair
                && old_enough
                && self
                    .remove_orphan(&key, version, &s, intent.copied())
                    .await?;
            report.orphans.push(Orphan {
                key,
                version,
                chunks: s.chunks,
                reason,
                removed,
            });
        }
        if report.orphans.iter().any(|o| o.removed) {
            inner.backend.reclaim_space().await?;
        }
        Ok(report)
    }

    /// Reads and verifies every committed blob; returns the committed versions' chunk layouts (`None`: inline).
    async fn fsck_manifests(
        &self,
        prefix: &[u8],
        report: &mut FsckReport,
    ) -> Result<HashMap<(Bytes, VersionId), Option<ChunkLayout>>> {
        let inner = &self.inner;
        let mut committed = HashMap::new();
        let mut after: Option<Bytes> = None;
        loop {
            let page = inner
                .backend
                .scan_records(Namespace::Manifest, prefix, after.as_deref(), PAGE)
                .await?;
            let full = page.len() == PAGE;
            after = page.last().map(|(k, _)| k.clone());
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
                    let read = self.verify_version(key.clone(), m.clone()).await;
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
                let layout = match m.body {
                    ManifestBody::Chunked { layout, .. } => Some(layout),
                    ManifestBody::Inline(_) => None,
                };
                committed.insert((key, m.version), layout);
            }
            if !full {
                return Ok(committed);
            }
        }
    }

    /// Reads one version in full, verifying chunk checksums, lengths and the digest; returns its size.
    async fn verify_version(&self, key: Bytes, manifest: Manifest) -> Result<u64> {
        let range = 0..manifest.size;
        let mut stream = self.stream_version(key, manifest, range);
        let mut total = 0u64;
        while let Some(piece) = stream.next().await {
            total += piece?.len() as u64;
        }
        Ok(total)
    }

    async fn scan_intents(&self) -> Result<HashMap<(Bytes, VersionId), Intent>> {
        let mut out = HashMap::new();
        self.scan_all(Namespace::Intent, |k, v| {
            if let (Some(blob), Some(intent)) = (parse_intent_key(k), Intent::decode(v)) {
                out.insert((blob.key, blob.version), intent);
            }
        })
        .await?;
        Ok(out)
    }

    async fn scan_queue(&self) -> Result<HashSet<(Bytes, VersionId)>> {
        let mut out = HashSet::new();
        self.scan_all(Namespace::Reclaim, |k, v| {
            if let Some(e) = ReclaimEntry::decode(k, v) {
                out.insert((e.key, e.version));
            }
        })
        .await?;
        Ok(out)
    }

    async fn scan_all(&self, ns: Namespace, mut each: impl FnMut(&Bytes, &Bytes)) -> Result<()> {
        let mut after: Option<Bytes> = None;
        loop {
            let page = self
                .inner
                .backend
                .scan_records(ns, b"", after.as_deref(), PAGE)
                .await?;
            let full = page.len() == PAGE;
            for (k, v) in &page {
                each(k, v);
            }
            after = page.last().map(|(k, _)| k.clone());
            if !full {
                return Ok(());
            }
        }
    }

    /// Deletes an orphan's chunks after re-checking that it is still one; returns whether it did.
    async fn remove_orphan(
        &self,
        key: &Bytes,
        version: VersionId,
        stored: &Stored,
        intent: Option<Intent>,
    ) -> Result<bool> {
        let inner = &self.inner;
        let blob = BlobRef {
            key: key.clone(),
            version,
        };
        let record_key = intent_key(&blob);
        let intent_now = inner
            .backend
            .get_record(Namespace::Intent, &record_key)
            .await?;
        let fenced = match (&intent, &intent_now) {
            (None, None) => true,
            (Some(seen), Some(now)) => Intent::decode(now) == Some(*seen),
            _ => false,
        };
        let current = inner.read_manifest(key).await?.map(|m| m.version);
        if !fenced || current == Some(version) {
            return Ok(false);
        }
        if let Some(raw) = intent_now {
            // Take the expired intent over first, so that its writer cannot renew it and commit.
            let taken = inner
                .backend
                .delete_record(Namespace::Intent, &record_key, &Precondition::Equals(raw))
                .await?;
            if matches!(taken, RecordWrite::ConditionFailed(_)) {
                return Ok(false);
            }
        }
        inner
            .backend
            .delete_chunks(&blob, stored.max_salt + 1, stored.max_index + 1)
            .await?;
        Ok(true)
    }
}

impl Inner {
    /// Whether a put of `blob` still holds an unexpired intent.
    pub(crate) async fn live_intent(&self, blob: &BlobRef) -> Result<bool> {
        let raw = self
            .backend
            .get_record(Namespace::Intent, &intent_key(blob))
            .await?;
        Ok(raw
            .and_then(|v| Intent::decode(&v))
            .is_some_and(|i| !i.expired(now_micros())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, PutOptions, StoreConfig};

    /// Store-wide passes keep a low-water mark of the intent scan; an abandoned put below the newest mark but at
    /// or above the oldest live intent is still found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_intent_watermark_never_skips_a_live_intent() {
        let backend = Arc::new(MemoryStore::new());
        let store = BlobStore::new(
            backend.clone(),
            StoreConfig::default().with_intent_lease(Duration::from_millis(300)),
        )
        .expect("store");
        let (mut w, r) = tokio::io::duplex(1 << 16);
        let put = tokio::spawn({
            let store = store.clone();
            async move { store.put_stream("k", r, &PutOptions::new()).await }
        });
        // Past the read-ahead that picks the layout (the fan-out threshold): the put is writing chunks.
        let fanout = store.config().policy.fanout_threshold as usize;
        tokio::io::AsyncWriteExt::write_all(&mut w, &vec![7u8; fanout + (2 << 20)])
            .await
            .expect("feed");
        let first = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(first.puts_in_flight, 1, "{first:?}");
        let mark = store.intent_watermark().await.expect("a mark was recorded");
        let live = backend
            .scan_records(Namespace::Intent, b"", None, 10)
            .await
            .expect("scan");
        let version = parse_intent_key(&live[0].0).expect("intent key").version;
        assert!(
            mark <= version.0,
            "the mark stops at or below the oldest live intent"
        );

        put.abort();
        drop(w);
        tokio::time::sleep(Duration::from_millis(700)).await;
        let second = store.gc(&GcOptions::new()).await.expect("gc");
        assert_eq!(
            (second.abandoned_puts, second.reclaim.versions),
            (1, 0),
            "found, and queued for after the grace period: {second:?}"
        );
        let third = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!(third.reclaim.versions, 1, "{third:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0);
        assert!(
            store.intent_watermark().await > Some(mark),
            "the mark moved on"
        );
    }

    #[test]
    fn intents_round_trip_and_reject_other_formats() {
        let i = Intent {
            started_micros: 1,
            expires_micros: 2,
            salt_count: 3,
            chunks: 4,
            stored_bytes: 5,
        };
        let v = i.encode();
        assert_eq!(v.len(), INTENT_LEN);
        assert_eq!(Intent::decode(&v), Some(i));
        let mut other = v.to_vec();
        other[0] = 2;
        assert_eq!(Intent::decode(&other), None);
        assert_eq!(Intent::decode(&v[..36]), None);
        assert!(i.expired(2) && !i.expired(1));
    }

    #[test]
    fn intent_keys_round_trip() {
        let blob = BlobRef {
            key: Bytes::from_static(b"some/key"),
            version: VersionId(0x0102_0304),
        };
        assert_eq!(
            parse_intent_key(&Bytes::from(intent_key(&blob))),
            Some(blob)
        );
        assert_eq!(parse_intent_key(&Bytes::from_static(b"short")), None);
        assert_eq!(parse_intent_key(&Bytes::from(vec![0u8; 16])), None);
    }
}
