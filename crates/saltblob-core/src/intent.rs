//! The intent lease of a chunked put: how gc tells a put in flight from an abandoned one.
//!
//! Before its first chunk a put writes an **intent** (key, version, start, lease expiry, salt count), renews it
//! every third of the lease while it runs and removes it after the commit. gc treats an intent as abandoned only
//! once its lease has expired (and, on a cluster, the takeover hold has passed since: [`takeover_hold`]). Before
//! its commit a put **claims** its intent: a compare-and-set that extends the expiry by the commit hold
//! ([`commit_hold`]), from the value it last wrote. gc's takeover is a compare-and-set on the value gc read, so
//! of a claim and a takeover exactly one wins: a put whose intent was taken over fails instead of committing,
//! and a claimed intent is not taken over before its manifest write has landed. Renewals go on through the
//! commit. On a backend whose writes may land late ([`crate::BackendInfo::late_writes`], a cluster) there is no
//! claim: a cluster that lost a node may time compare-and-sets out for a minute, which must not fail puts.
//! There the put issues its manifest writes only while its lease has a quarter left, and gc waits the takeover
//! hold past the lease, which outlasts any manifest write. Besides, gc and fsck never take over the intent of a put
//! that runs in their own process on the same backend ([`running_here`]): such a put is alive by definition.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::Clock;
use crate::backend::{BlobRef, ChunkStore, Namespace, Precondition, RecordWrite};
use crate::layout::MAX_SALT_LIMIT;
use crate::reclaim::COMMIT_WINDOW_MICROS;
use crate::records::{Inner, micros};
use crate::version::VersionId;
use crate::{Error, Result};

/// Format byte of an intent record's value.
const INTENT_FORMAT: u8 = 1;

/// Attempts of a claim whose outcome is unknown (a timeout), whether or not the backend retries by itself:
/// backends do not retry conditional writes (not idempotent), and a claim's retry is safe (see
/// [`IntentLease::claim`]).
const CLAIM_ATTEMPTS: u32 = 4;

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
    pub(crate) fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(INTENT_LEN);
        v.push(INTENT_FORMAT);
        v.extend_from_slice(&self.started_micros.to_le_bytes());
        v.extend_from_slice(&self.expires_micros.to_le_bytes());
        v.extend_from_slice(&self.salt_count.to_le_bytes());
        v.extend_from_slice(&self.chunks.to_le_bytes());
        v.extend_from_slice(&self.stored_bytes.to_le_bytes());
        Bytes::from(v)
    }

    /// `None` for a record of another format or length, or whose salt count is out of bounds (gc deletes an
    /// abandoned put's chunks salt by salt: a damaged count must not make it loop billions of times).
    pub(crate) fn decode(v: &[u8]) -> Option<Self> {
        if v.len() != INTENT_LEN || v.first() != Some(&INTENT_FORMAT) {
            return None;
        }
        let u64_at = |at: usize| Some(u64::from_le_bytes(v.get(at..at + 8)?.try_into().ok()?));
        let salt_count = u32::from_le_bytes(v.get(17..21)?.try_into().ok()?);
        if !(1..=MAX_SALT_LIMIT).contains(&salt_count) {
            return None;
        }
        Some(Self {
            started_micros: u64_at(1)?,
            expires_micros: u64_at(9)?,
            salt_count,
            chunks: u64_at(21)?,
            stored_bytes: u64_at(29)?,
        })
    }

    /// Whether the lease has ended at `now`.
    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expires_micros <= now
    }

    /// Whether the put is abandoned at `now`: its lease expired and `hold` ([`takeover_hold`]) passed since.
    pub(crate) fn abandoned(&self, now: u64, hold: Duration) -> bool {
        self.expires_micros.saturating_add(micros(hold)) <= now
    }
}

pub(crate) fn intent_key(blob: &BlobRef) -> Vec<u8> {
    let mut k = Vec::with_capacity(16 + blob.key.len());
    k.extend_from_slice(&blob.version.to_be_bytes());
    k.extend_from_slice(&blob.key);
    k
}

pub(crate) fn parse_intent_key(k: &Bytes) -> Option<BlobRef> {
    let version = VersionId(u128::from_be_bytes(k.get(..16)?.try_into().ok()?));
    let key = k.slice(16..);
    (!key.is_empty()).then_some(BlobRef { key, version })
}

/// How far a put has got, shared between its chunk writer and its lease (recorded at each renewal).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    chunks: AtomicU64,
    stored: AtomicU64,
    /// Set once gc took the intent over: the writer stops writing chunks that nothing would refer to.
    lost: AtomicBool,
}

impl Progress {
    pub(crate) fn record(&self, chunks: u64, stored: u64) {
        self.chunks.store(chunks, Ordering::Relaxed);
        self.stored.store(stored, Ordering::Relaxed);
    }

    /// Whether gc has taken the put's intent over.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

/// Puts running in this process: (backend instance, version). gc and fsck never take their intents over,
/// whatever the clock says: a renewal that is late because the process is starved does not make a put dead.
static RUNNING: Mutex<BTreeSet<(usize, VersionId)>> = Mutex::new(BTreeSet::new());

/// The identity of a backend instance, for [`RUNNING`].
fn backend_id(backend: &Arc<dyn ChunkStore>) -> usize {
    Arc::as_ptr(backend).cast::<()>() as usize
}

/// Whether a put of `version` runs in this process on this store's backend instance.
pub(crate) fn running_here(inner: &Inner, version: VersionId) -> bool {
    RUNNING
        .lock()
        .map(|r| r.contains(&(backend_id(&inner.backend), version)))
        // A poisoned registry: assume the put is running (nothing is taken over; gc retries later).
        .unwrap_or(true)
}

/// How long past its lease a claimed intent stays valid: a write lands before its call returns on the backends
/// that claim (see [`takeover_hold`] for the others), and one lease is kept as a margin.
pub(crate) fn commit_hold(inner: &Inner) -> Duration {
    inner.config.intent_lease
}

/// How long past an intent's expiry gc waits before taking it over: on a backend whose failed or timed-out
/// writes may still land later ([`crate::BackendInfo::late_writes`], a cluster, where puts do not claim) the
/// commit window of the reclaim queue (ten minutes), the longest a manifest write may take to land after it was
/// issued; elsewhere nothing (the claim fences the commit).
pub(crate) fn takeover_hold(inner: &Inner) -> Duration {
    if inner.info.late_writes {
        Duration::from_micros(COMMIT_WINDOW_MICROS)
    } else {
        Duration::ZERO
    }
}

#[derive(Debug)]
struct LeaseState {
    /// The intent as last written.
    intent: Intent,
    /// Why the lease was lost, if it was (gc took the intent over).
    lost: Option<String>,
    /// Added to every expiry once the intent is claimed for the commit ([`commit_hold`]); zero before.
    hold: Duration,
}

/// The intent lease of one chunked put: written before its first chunk, renewed in the background, claimed
/// before the commit and removed after it. Dropping it (a cancelled put) stops the renewals and leaves the
/// intent to expire, after which gc reclaims the chunks.
pub(crate) struct IntentLease {
    backend: Arc<dyn ChunkStore>,
    clock: Arc<dyn Clock>,
    blob: BlobRef,
    /// The entry of this put in [`RUNNING`].
    running: (usize, VersionId),
    record_key: Vec<u8>,
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    /// Taken by each write of the intent (renewal, claim), so that one never races another.
    writing: Arc<tokio::sync::Mutex<()>>,
    progress: Arc<Progress>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl IntentLease {
    /// Writes the intent of `blob` and starts renewing it.
    pub(crate) async fn acquire(inner: &Inner, blob: &BlobRef, salt_count: u32) -> Result<Self> {
        let lease = inner.config.intent_lease;
        let now = inner.now_micros();
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
        let running = (backend_id(&inner.backend), blob.version);
        if let Ok(mut r) = RUNNING.lock() {
            r.insert(running);
        }
        let state = Arc::new(Mutex::new(LeaseState {
            intent,
            lost: None,
            hold: Duration::ZERO,
        }));
        let writing = Arc::new(tokio::sync::Mutex::new(()));
        let progress = Arc::new(Progress::default());
        let renewer = tokio::spawn(renew(
            Arc::clone(&inner.backend),
            Arc::clone(&inner.config.clock),
            record_key.clone(),
            lease,
            Arc::clone(&state),
            Arc::clone(&writing),
            Arc::clone(&progress),
        ));
        Ok(Self {
            backend: Arc::clone(&inner.backend),
            clock: Arc::clone(&inner.config.clock),
            blob: blob.clone(),
            running,
            record_key,
            lease,
            state,
            writing,
            progress,
            renewer: Some(renewer),
        })
    }

    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    fn lost_error(&self, detail: String) -> Error {
        Error::IntentLost {
            key: self.blob.key[..].into(),
            version: self.blob.version,
            detail,
        }
    }

    /// Claims the intent for the commit: a compare-and-set from the value last written to one whose expiry
    /// is a lease plus the commit hold ([`commit_hold`]) from now. Fails with `IntentLost` if gc took the
    /// intent over first; once it succeeded, gc leaves the intent alone until the hold is over. A write whose
    /// outcome is unknown is tried again: finding its own claim in place means it landed.
    ///
    /// Where writes may land late ([`takeover_hold`]) there is no claim: this only checks the lease.
    pub(crate) async fn claim(&self, inner: &Inner) -> Result<()> {
        if inner.info.late_writes {
            return self.check_claim();
        }
        let hold = commit_hold(inner);
        self.write_settled("the claim", |state| {
            state.hold = hold;
            Intent {
                expires_micros: expiry(&*self.clock, self.lease, hold),
                ..state.intent
            }
        })
        .await
    }

    /// Succeeds while the claimed lease has at least a quarter of it left (before the hold): a manifest write
    /// issued now lands before gc may take the intent over, given the hold.
    pub(crate) fn check_claim(&self) -> Result<()> {
        let state = self.state.lock().map_err(|_| self.poisoned())?;
        if let Some(why) = &state.lost {
            return Err(self.lost_error(why.clone()));
        }
        let lease_end = state
            .intent
            .expires_micros
            .saturating_sub(micros(state.hold));
        let left = lease_end.saturating_sub(self.clock.now_micros());
        if left < micros(self.lease) / 4 {
            return Err(self.lost_error(format!(
                "only {left} µs of the {:?} lease were left before the commit (renewals failed or stalled)",
                self.lease
            )));
        }
        Ok(())
    }

    fn poisoned(&self) -> Error {
        self.lost_error("the lease state was poisoned by a panic".into())
    }

    /// Stops renewing and leaves the intent in place until `until_micros`, recording the chunks written: the
    /// put of a segment, which [`claim_segment`] claims later for a compose, or gc reclaims once it expired.
    pub(crate) async fn park(mut self, until_micros: u64) -> Result<()> {
        if let Some(task) = self.renewer.take() {
            task.abort();
            let _ = task.await;
        }
        let progress = Arc::clone(&self.progress);
        self.write_settled("parking", |state| Intent {
            expires_micros: until_micros,
            chunks: progress.chunks.load(Ordering::Relaxed),
            stored_bytes: progress.stored.load(Ordering::Relaxed),
            ..state.intent
        })
        .await
    }

    /// Writes the intent `next` makes of the lease state with a compare-and-set from the value last written,
    /// until it is in place ([`settle`]): tried again while the outcome is unknown or an own late write is found
    /// in place. Fails with `IntentLost` once gc took the intent over; `what` names the write in errors.
    async fn write_settled(
        &self,
        what: &str,
        mut next: impl FnMut(&mut LeaseState) -> Intent,
    ) -> Result<()> {
        let _turn = self.writing.lock().await;
        let mut last_error = None;
        for _ in 0..CLAIM_ATTEMPTS {
            let (current, wanted) = {
                let mut state = self.state.lock().map_err(|_| self.poisoned())?;
                if let Some(why) = &state.lost {
                    return Err(self.lost_error(why.clone()));
                }
                (state.intent, next(&mut state))
            };
            let outcome = self
                .backend
                .put_record(
                    Namespace::Intent,
                    &self.record_key,
                    wanted.encode(),
                    &Precondition::Equals(current.encode()),
                )
                .await;
            match outcome {
                Ok(outcome) => {
                    if settle(&self.state, &self.progress, wanted, outcome)? {
                        return Ok(());
                    }
                }
                Err(e) if e.is_retryable() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| self.lost_error(format!("{what} did not settle"))))
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
        if let Ok(mut r) = RUNNING.lock() {
            r.remove(&self.running);
        }
    }
}

/// The expiry of an intent renewed or claimed now, by `clock`.
fn expiry(clock: &dyn Clock, lease: Duration, hold: Duration) -> u64 {
    clock
        .now_micros()
        .saturating_add(micros(lease))
        .saturating_add(micros(hold))
}

/// Records the outcome of a compare-and-set of the intent to `next`; returns whether `next` is in place.
/// Only the put writes values under its intent's key (gc only deletes it), so a different value of this put
/// found in place is one of its own writes whose outcome was unknown and that landed late: it becomes the
/// value to compare against. An absent record means gc took the intent over.
fn settle(
    state: &Mutex<LeaseState>,
    progress: &Progress,
    next: Intent,
    outcome: RecordWrite,
) -> Result<bool> {
    let mut st = state
        .lock()
        .map_err(|_| Error::internal("intent lease", "state lock poisoned"))?;
    match outcome {
        RecordWrite::Done(_) => {
            st.intent = next;
            Ok(true)
        }
        RecordWrite::ConditionFailed(Some(found)) => match Intent::decode(&found) {
            Some(own) if own == next => {
                st.intent = next;
                Ok(true)
            }
            Some(own) if own.started_micros == next.started_micros => {
                st.intent = own;
                Ok(false)
            }
            _ => {
                st.lost = Some("the intent record was replaced by another writer".into());
                progress.lost.store(true, Ordering::Relaxed);
                Ok(false)
            }
        },
        RecordWrite::ConditionFailed(None) => {
            st.lost = Some("garbage collection took the expired intent over".into());
            progress.lost.store(true, Ordering::Relaxed);
            Ok(false)
        }
    }
}

/// Renews an intent every third of the lease with a compare-and-set, until aborted or the intent was taken over.
async fn renew(
    backend: Arc<dyn ChunkStore>,
    clock: Arc<dyn Clock>,
    record_key: Vec<u8>,
    lease: Duration,
    state: Arc<Mutex<LeaseState>>,
    writing: Arc<tokio::sync::Mutex<()>>,
    progress: Arc<Progress>,
) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let _turn = writing.lock().await;
        let Ok((current, hold)) = state.lock().map(|s| (s.intent, s.hold)) else {
            return;
        };
        let next = Intent {
            expires_micros: expiry(&*clock, lease, hold),
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
        match outcome {
            Ok(outcome) => match settle(&state, &progress, next, outcome) {
                Ok(true) => {}
                Ok(false) if progress.lost() => return,
                // Our own late write was found in place: renewed from it at the next tick.
                Ok(false) => {}
                Err(_) => return,
            },
            // Retried at the next tick; the put fails before its commit if the lease runs out meanwhile.
            Err(e) => tracing::warn!("could not renew a put's intent lease: {e}"),
        }
    }
}

/// The intent record of `blob` as stored, if there is one.
pub(crate) async fn read_record(inner: &Inner, blob: &BlobRef) -> Result<Option<Bytes>> {
    inner
        .backend
        .get_record(Namespace::Intent, &intent_key(blob))
        .await
}

/// Whether a put of `blob` is alive: it runs in this process, or holds an unexpired intent.
pub(crate) async fn is_live(inner: &Inner, blob: &BlobRef) -> Result<bool> {
    if running_here(inner, blob.version) {
        return Ok(true);
    }
    Ok(read_record(inner, blob)
        .await?
        .and_then(|v| Intent::decode(&v))
        .is_some_and(|i| !i.abandoned(inner.now_micros(), takeover_hold(inner))))
}

/// Claims the parked intent of segment `blob` for a compose whose manifest is about to be written, so that gc
/// leaves the segment's chunks alone until that write has landed: a compare-and-set to an expiry of at least a
/// lease plus the commit hold from now (a parked expiry further out is kept). Where writes may land late (no
/// claims, see [`IntentLease::claim`]) it checks that a lease is left instead. Fails with
/// [`Error::SegmentGone`] when the intent is absent, undecodable or expired.
pub(crate) async fn claim_segment(inner: &Inner, blob: &BlobRef) -> Result<()> {
    let gone = |detail: &str| Error::SegmentGone {
        key: blob.key[..].into(),
        version: blob.version,
        detail: detail.into(),
    };
    let record_key = intent_key(blob);
    let lease = micros(inner.config.intent_lease);
    let mut last_error = None;
    for _ in 0..CLAIM_ATTEMPTS {
        let now = inner.now_micros();
        let Some(raw) = inner
            .backend
            .get_record(Namespace::Intent, &record_key)
            .await?
        else {
            return Err(gone(
                "its intent is gone (expired and reclaimed, discarded, or never written)",
            ));
        };
        let intent =
            Intent::decode(&raw).ok_or_else(|| gone("its intent record does not decode"))?;
        if intent.expired(now) {
            return Err(gone("its lease has expired"));
        }
        if inner.info.late_writes {
            if intent.expires_micros.saturating_sub(now) < lease {
                return Err(gone("less than a lease is left of it"));
            }
            return Ok(());
        }
        let claimed = Intent {
            expires_micros: intent.expires_micros.max(
                now.saturating_add(lease)
                    .saturating_add(micros(commit_hold(inner))),
            ),
            ..intent
        };
        match inner
            .backend
            .put_record(
                Namespace::Intent,
                &record_key,
                claimed.encode(),
                &Precondition::Equals(raw),
            )
            .await
        {
            Ok(RecordWrite::Done(_)) => return Ok(()),
            // Changed in between (another compose claimed it, or gc took it over): read it again.
            Ok(RecordWrite::ConditionFailed(_)) => {}
            Err(e) if e.is_retryable() => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| gone("its intent kept changing while being claimed")))
}

/// Removes the intent of segment `blob` after a compose committed it (best effort: gc removes a leftover
/// intent of a version the current one owns).
pub(crate) async fn remove(inner: &Inner, blob: &BlobRef) {
    if let Err(e) = inner
        .backend
        .delete_record(Namespace::Intent, &intent_key(blob), &Precondition::None)
        .await
    {
        tracing::warn!(
            "could not remove the intent of segment {} (gc will): {e}",
            blob.version
        );
    }
}

/// Takes over the intent record under `record_key`, last seen holding `seen`: removes it with a compare-and-set,
/// so that its writer can no longer renew it and commit. False if the writer renewed it in between (it keeps
/// its put).
pub(crate) async fn take_over(inner: &Inner, record_key: &[u8], seen: Bytes) -> Result<bool> {
    let outcome = inner
        .backend
        .delete_record(Namespace::Intent, record_key, &Precondition::Equals(seen))
        .await?;
    Ok(matches!(outcome, RecordWrite::Done(_)))
}

/// Every intent record that decodes, by blob.
pub(crate) async fn all(inner: &Inner) -> Result<HashMap<(Bytes, VersionId), Intent>> {
    let mut out = HashMap::new();
    let mut pages = inner.scan(Namespace::Intent, b"", None);
    while let Some(page) = pages.next_page().await? {
        for (k, v) in &page {
            if let (Some(blob), Some(intent)) = (parse_intent_key(k), Intent::decode(v)) {
                out.insert((blob.key, blob.version), intent);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Arbitrary records never panic the decoder, and what decodes is within bounds.
        #[test]
        fn arbitrary_records_never_panic(mut v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), real_format in proptest::prelude::any::<bool>()) {
            if real_format && !v.is_empty() {
                v[0] = INTENT_FORMAT;
            }
            if let Some(i) = Intent::decode(&v) {
                proptest::prop_assert!((1..=MAX_SALT_LIMIT).contains(&i.salt_count));
            }
        }
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
        for salt_count in [0, MAX_SALT_LIMIT + 1, u32::MAX] {
            let bad = Intent { salt_count, ..i };
            assert_eq!(
                Intent::decode(&bad.encode()),
                None,
                "salt count {salt_count}"
            );
        }
        assert!(i.expired(2) && !i.expired(1));
        let hold = Duration::from_micros(3);
        assert!(i.abandoned(5, hold) && !i.abandoned(4, hold));
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
