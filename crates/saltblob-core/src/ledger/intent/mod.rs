//! The intent lease of a chunked put: how gc tells a put in flight from an abandoned one.
//!
//! Before its first chunk a put writes an **intent** (key, version, start, lease expiry, salt count), renews it
//! every third of the lease while it runs and removes it after the commit. gc treats an intent as abandoned only
//! once its lease has expired (and, on a cluster, the takeover hold has passed since:
//! [`crate::base::timing::takeover_hold`]). Before its commit a put **claims** its intent: a compare-and-set that
//! extends the expiry by the commit hold ([`crate::base::timing::commit_hold`]), from the value it last wrote. gc's
//! takeover is a compare-and-set on the value gc read, so of a claim and a takeover exactly one wins: a put whose intent was taken over fails instead of committing,
//! and a claimed intent is not taken over before its manifest write has landed. Renewals go on through the
//! commit. Where the put's sink asks for a commit group ([`crate::backend::SinkShape::commit_group`], RocksDB)
//! there is no claim either: the put commits with one group that removes its intent under a
//! compare-and-set on the value it last wrote, with its manifest and reclaim entries, and of that group and
//! gc's takeover exactly one wins ([`IntentLease::commit_group`]). On a backend whose writes may land late ([`crate::backend::BackendInfo::late_writes`], a cluster) there is no
//! claim: a cluster that lost a node may time compare-and-sets out for a minute, which must not fail puts.
//! There the put issues its manifest writes only while its lease has a quarter left, and gc waits the takeover
//! hold past the lease, which outlasts any manifest write. Besides, gc and fsck never take over the intent of a put
//! that runs in their own process on the same store ([`crate::state::running::RunningPuts`]): such a put is alive by
//! definition.
//!
//! # Layout
//! Each module uses only those listed before it.
//! - `record.rs`: the record's format ([`Intent`], its key), with typed decode errors.
//! - `lease.rs`: a put's lease ([`IntentLease`]) and [`Progress`].
//! - this file: what others do with intents: a compose's claim of a segment's intent, gc's takeover, reads.

mod lease;
mod record;

use std::collections::HashMap;

use bytes::Bytes;

pub(crate) use self::lease::{IntentLease, Progress};
pub(crate) use self::record::{Intent, intent_key, legacy_intent_key, parse_intent_key};
use crate::backend::{BlobRef, Namespace, Precondition, RecordWrite};
use crate::base::error::{Error, KeyDisplay, Result};
use crate::base::retry::Backoff;
use crate::base::timing::commit_hold;
use crate::base::units::micros;
use crate::base::version::VersionId;
use crate::ledger::shards;
use crate::state::Inner;

/// An intent record as stored: where, and its raw value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredIntent {
    /// Its namespace: [`Namespace::ShardedIntent`], [`Namespace::ParkedIntent`], or an earlier build's
    /// [`Namespace::Intent`].
    pub(crate) ns: Namespace,
    /// Its record key.
    pub(crate) key: Vec<u8>,
    /// Its value as read.
    pub(crate) raw: Bytes,
}

/// The namespaces an intent may be found in, with the key it has in each: a put's, a segment's, an earlier
/// build's.
fn places(blob: &BlobRef) -> [(Namespace, Vec<u8>); 3] {
    [
        (Namespace::ShardedIntent, intent_key(blob)),
        (Namespace::ParkedIntent, intent_key(blob)),
        (Namespace::Intent, legacy_intent_key(blob)),
    ]
}

/// The intent record of `blob` as stored, if there is one: the places are read at once (an earlier build's not
/// once gc found it empty).
pub(crate) async fn read_record(inner: &Inner, blob: &BlobRef) -> Result<Option<StoredIntent>> {
    let legacy_gone = legacy_gone(inner);
    let places = places(blob)
        .into_iter()
        .filter(|(ns, _)| !(legacy_gone && *ns == Namespace::Intent));
    let reads = places.map(|(ns, key)| async move {
        let raw = inner.backend.get_record(ns, &key).await?;
        Ok::<_, Error>(raw.map(|raw| StoredIntent { ns, key, raw }))
    });
    let found = futures::future::try_join_all(reads).await?;
    Ok(found.into_iter().flatten().next())
}

/// Whether a gc pass of this process found no intent of an earlier build.
fn legacy_gone(inner: &Inner) -> bool {
    inner
        .legacy_intents_gone
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Where the intent of segment `blob` is: in [`Namespace::ParkedIntent`], or where an earlier build parked it
/// (read there only when the first place holds none). The first place when neither holds it.
async fn segment_place(inner: &Inner, blob: &BlobRef) -> Result<(Namespace, Vec<u8>)> {
    let parked = (Namespace::ParkedIntent, intent_key(blob));
    if inner
        .backend
        .get_record(parked.0, &parked.1)
        .await?
        .is_some()
    {
        return Ok(parked);
    }
    if legacy_gone(inner) {
        return Ok(parked);
    }
    let legacy = (Namespace::Intent, legacy_intent_key(blob));
    match inner.backend.get_record(legacy.0, &legacy.1).await? {
        Some(_) => Ok(legacy),
        None => Ok(parked),
    }
}

/// What [`update_intent`] does with the intent it read.
enum Update<T> {
    /// Writes this intent in place of the one read, then returns the value.
    Write(Intent, T),
    /// Writes nothing and returns this.
    Stop(Result<T>),
}

/// Reads the intent record under `record_key` of `ns` and writes what `next` makes of it (`next` gets the decoded
/// record, `None` when there is none, and now), with a compare-and-set on the value read; reads again when the
/// record changed in between or the write failed and may be retried. Fails with `exhausted` when the record kept
/// changing, or with the last retryable error.
async fn update_intent<T>(
    inner: &Inner,
    (ns, record_key): (Namespace, Vec<u8>),
    mut next: impl FnMut(Option<Result<Intent>>, u64) -> Update<T>,
    exhausted: impl FnOnce() -> Error,
) -> Result<T> {
    let mut last_error = None;
    let mut tries = Backoff::INTENT_CAS.start();
    while tries.next_attempt().await {
        let raw = inner.backend.get_record(ns, &record_key).await?;
        let decoded = raw.as_ref().map(|r| Intent::decode(r));
        let (written, value) = match next(decoded, inner.now_micros()) {
            Update::Stop(outcome) => return outcome,
            Update::Write(intent, value) => (intent, value),
        };
        let condition = raw.map_or(Precondition::Absent, Precondition::Equals);
        match inner
            .backend
            .put_record(ns, &record_key, written.encode(), &condition)
            .await
        {
            Ok(RecordWrite::Done(_)) => return Ok(value),
            // Changed in between (a compose claimed it, a discard ended it, gc took it over): read it again.
            Ok(RecordWrite::ConditionFailed(_)) => {}
            Err(e) if e.is_retryable() => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.map_or_else(exhausted, |e| tries.give_up(e)))
}

/// Claims the parked intent of segment `blob` for a compose whose manifest is about to be written, so that gc
/// leaves the segment's chunks alone until that write has landed: a compare-and-set to an expiry of at least a
/// lease plus the commit hold from now (a parked expiry further out is kept). Where writes may land late (no
/// claims, see [`IntentLease::claim`]) it checks that a lease is left instead. Fails with
/// [`Error::SegmentGone`] when the intent is absent or undecodable, or less than a lease is left of it (it
/// expired, or was discarded: [`end_segment_lease`]).
pub(crate) async fn claim_segment(inner: &Inner, blob: &BlobRef) -> Result<()> {
    let gone = |detail: &str| Error::SegmentGone {
        key: blob.key[..].into(),
        version: blob.version,
        detail: detail.into(),
    };
    let lease = micros(inner.config.intent_lease);
    let hold = micros(commit_hold(inner.config.intent_lease));
    let claim = |read: Option<Result<Intent>>, now: u64| {
        let intent = match read {
            None => {
                return Update::Stop(Err(gone(
                    "its intent is gone (expired and reclaimed, discarded, or never written)",
                )));
            }
            Some(Err(e)) => {
                return Update::Stop(Err(gone(&format!(
                    "its intent record does not decode ({e})"
                ))));
            }
            Some(Ok(intent)) => intent,
        };
        if intent.expired(now) {
            return Update::Stop(Err(gone("its lease has expired")));
        }
        if intent.expires_micros.saturating_sub(now) < lease {
            return Update::Stop(Err(gone(
                "less than a lease is left of it (it was discarded, or is about to expire)",
            )));
        }
        if inner.info.late_writes {
            return Update::Stop(Ok(()));
        }
        let expires_micros = intent
            .expires_micros
            .max(now.saturating_add(lease).saturating_add(hold));
        Update::Write(
            Intent {
                expires_micros,
                ..intent
            },
            (),
        )
    };
    update_intent(inner, segment_place(inner, blob).await?, claim, || {
        gone("its intent kept changing while being claimed")
    })
    .await
}

/// Ends the parked lease of segment `blob` one intent lease from now (or keeps an earlier end), with a
/// compare-and-set, so that no compose can claim it any more ([`claim_segment`] wants a lease left) and gc
/// reclaims its chunks once the lease is over, under gc's own rules (the takeover hold where writes land late).
/// The intent is never removed here: a compose that claimed (or, where writes land late, checked) the segment
/// before this call issues its commit within three quarters of a lease of its own call, so its manifest lands
/// before gc may take the segment over (`docs/guarantees.md`, *Segments*). Returns false when there is no
/// intent (a compose committed the segment and removed it, or gc reclaimed it) or its lease already ends
/// within a lease.
///
/// # Errors
/// [`Error::Corrupt`] for an intent that does not decode (left in place, as gc leaves it), [`Error::Backend`].
pub(crate) async fn end_segment_lease(inner: &Inner, blob: &BlobRef) -> Result<bool> {
    let lease = micros(inner.config.intent_lease);
    let end = |read: Option<Result<Intent>>, now: u64| match read {
        None => Update::Stop(Ok(false)),
        Some(Err(e)) => Update::Stop(Err(e)),
        Some(Ok(intent)) if intent.expires_micros <= now.saturating_add(lease) => {
            Update::Stop(Ok(false))
        }
        Some(Ok(intent)) => Update::Write(
            Intent {
                expires_micros: now.saturating_add(lease),
                ..intent
            },
            true,
        ),
    };
    update_intent(inner, segment_place(inner, blob).await?, end, || {
        Error::internal(
            "segment discard",
            format!(
                "the intent of segment {} kept changing while its lease was being ended",
                blob.version
            ),
        )
    })
    .await
}

/// After a compose committed segment `blob`: ends its lease one intent lease from now ([`end_segment_lease`]),
/// never sooner, instead of removing the intent. Another compose of the same segment may have claimed it before
/// this one committed (a client retrying a complete whose outcome it did not see); its commit lands within
/// [`crate::store::BlobStore::compose_settles_within`] of its call, so the intent outlives it, and while the intent
/// lives gc and the reclaim pass leave the segment's chunks alone even if this compose's version is replaced
/// and queued meanwhile. Then gc drops the intent (the current version owns the segment) or reclaims the
/// chunks (it was replaced). Best effort: an intent left as claimed expires later and is handled the same way.
pub(crate) async fn settle_composed(inner: &Inner, blob: &BlobRef) {
    if let Err(e) = end_segment_lease(inner, blob).await {
        tracing::warn!(
            "could not end the lease of composed segment {} (gc will once it expires): {e}",
            blob.version
        );
    }
}

/// Takes over intent record `found`, as it was read: removes it with a compare-and-set, so that its writer can no
/// longer renew it and commit. False if the writer renewed it in between (it keeps its put).
pub(crate) async fn take_over(inner: &Inner, found: &StoredIntent) -> Result<bool> {
    let outcome = inner
        .backend
        .delete_record(
            found.ns,
            &found.key,
            &Precondition::Equals(found.raw.clone()),
        )
        .await?;
    Ok(matches!(outcome, RecordWrite::Done(_)))
}

/// Decodes an intent record of `ns` (key and value) as a scan returns it.
pub(crate) fn decode_record(ns: Namespace, k: &Bytes, v: &[u8]) -> Result<(BlobRef, Intent)> {
    Ok((parse_intent_key(ns, k)?, Intent::decode(v)?))
}

/// The partitions intents are kept in: each shard of the put and segment namespaces, and the one partition of an
/// earlier build's namespace. A scan of one reads the namespace with the prefix.
pub(crate) fn partitions() -> impl Iterator<Item = (Namespace, Vec<u8>)> {
    [Namespace::ShardedIntent, Namespace::ParkedIntent]
        .into_iter()
        .flat_map(|ns| shards::all().map(move |shard| (ns, vec![shard])))
        .chain(std::iter::once((Namespace::Intent, Vec::new())))
}

/// Every record of intent namespace `ns` as stored, partition by partition (for tests and tools).
///
/// # Errors
/// The backend's.
#[cfg(any(test, feature = "conformance"))]
pub(crate) async fn stored(
    backend: &dyn crate::backend::ChunkStore,
    ns: Namespace,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut out = Vec::new();
    for (_, part) in partitions().filter(|(n, _)| *n == ns) {
        out.extend(backend.scan_records(ns, &part, None, usize::MAX).await?);
    }
    Ok(out)
}

/// Every intent record that decodes, by blob (one that does not is logged and left out).
pub(crate) async fn all(inner: &Inner) -> Result<HashMap<(Bytes, VersionId), Intent>> {
    let mut out = HashMap::new();
    for (ns, prefix) in partitions() {
        let mut pages = inner.scan(ns, &prefix, None);
        while let Some(page) = pages.next_page().await? {
            for (k, v) in &page {
                match decode_record(ns, k, v) {
                    Ok((blob, intent)) => {
                        out.insert((blob.key, blob.version), intent);
                    }
                    Err(e) => tracing::warn!("{e}, under {:?}: left out", KeyDisplay::from(&k[..])),
                }
            }
        }
    }
    Ok(out)
}
