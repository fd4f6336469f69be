//! The commit primitive: the one function through which a key's manifest is replaced or removed
//! ([`change_manifest`]). A put, a compose, a delete, a conditional delete, gc's removal of an expired blob and a
//! re-wrap of data keys all call it; none writes a manifest record itself.
//!
//! # The crash-safety rule
//!
//! **What a change replaces is queued for reclaim before the change is written, and what it turns out to have
//! replaced is queued after.** Before the write, the versions whose chunks the current manifest names and the new
//! one does not are queued (due after the grace period), so that a crash right after the write orphans nothing;
//! if the write never lands, the reclaim pass finds those versions still current and drops the entries (after the
//! commit window). After the write, whatever the backend says was replaced is queued too when it is not what was
//! queued before (another writer committed in between) or when the write landed so late that the reclaim pass
//! may already have dropped the first entry ([`crate::ledger::reclaim::queue_replaced`]). Where the put's sink
//! asks for a commit group ([`crate::backend::SinkShape::commit_group`]), the entries and the write are one atomic
//! group instead, and nothing is queued before.
//!
//! A put that keeps what it replaces ([`Change::PutKeeping`], S3's versioned buckets) writes the replaced
//! manifest's record into the kept versions ([`crate::ledger::kept`]) where the rule queues it for reclaim: before
//! the write, or in its group; and keeps, after the write, a version another writer committed in between. It is
//! always written as a compare-and-set on the record it read and kept, on CQL too (a Paxos round per keeping
//! put), so that no version committed in between goes unkept.
//!
//! A version with an expiry gets its entry in the expiry index ([`crate::ledger::expiry`]) the same way: before
//! the write, or in its group.
//!
//! On a backend whose conditional writes are cheap (those that report the replaced record), a change that
//! expects nothing ([`Expect::Any`]) is written as a compare-and-set on the record it read and queued, and reads,
//! queues and tries again (under [`Backoff::COMMIT_CAS`]) when another writer committed in between: what it
//! replaces is always queued first. Elsewhere (CQL, where a condition costs a Paxos round) it is written plainly,
//! and a version committed in between is queued after the write; a process that dies in that moment leaves it to
//! `fsck --repair`. There the write wins by its client timestamp, so a process whose clock is off the cluster's
//! by more than the margin refuses it, naming the skew, before anything is written ([`crate::state::skew`]).
//!
//! A put's chunks are the commit's too ([`CommitChunks`]): chunks written under an intent lease are settled when
//! the commit ends (committed, deleted, or queued for reclaim when the outcome is unknown) and the lease ended;
//! chunks the commit writes itself go in its atomic group, so a failure leaves nothing to clean. A manifest write
//! is issued only while the lease's claim holds with a margin and, for a compose, not after its `issue_by`
//! deadline ([`Fences`]); the backend checks the deadline again right before its engine write
//! ([`crate::backend::deadline`]), so that a write stalled after the check (in the scheduler's queue, say) is
//! refused, not landed late.

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::deadline::{self, IssueBy};
use crate::backend::{
    BlobRef, GroupChunks, GroupWrite, Namespace, Precondition, Previous, RecordChange, RecordWrite,
};
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::base::version::VersionId;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::expiry;
use crate::ledger::intent::IntentLease;
use crate::ledger::kept;
use crate::ledger::reclaim::{self, Queue};
use crate::state::Inner;
use crate::state::config::PutCondition;

/// What a change does to a key's manifest.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change<'a> {
    /// Makes this manifest current.
    Put(&'a Manifest),
    /// Makes this manifest current and keeps the version it replaces ([`crate::ledger::kept`]) instead of
    /// queueing it for reclaim.
    PutKeeping(&'a Manifest),
    /// Removes the key's manifest.
    Delete,
}

impl Change<'_> {
    /// The manifest the change writes, `None` for a delete.
    fn manifest(&self) -> Option<&Manifest> {
        match self {
            Change::Put(m) | Change::PutKeeping(m) => Some(m),
            Change::Delete => None,
        }
    }

    /// Whether the change keeps `old`, the version it replaces, at `now` (Unix µs): a put asked to, and `old` is
    /// another version, not expired (an expired blob is gone: kept, it would come back).
    fn keeps(&self, old: &Manifest, now: u64) -> bool {
        matches!(self, Change::PutKeeping(m) if m.version != old.version) && !old.is_expired(now)
    }
}

/// The current manifest a change replaces, as read before its write: decoded, the record's bytes, and whether
/// the change keeps it ([`Change::keeps`]) or queues it for reclaim.
#[derive(Clone, Copy)]
struct Replacing<'a> {
    manifest: &'a Manifest,
    record: &'a Bytes,
    keep: bool,
}

/// What a change expects of the key's current record; the check and the write are one atomic step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Whatever is there, or nothing: a plain put or delete.
    Any,
    /// No blob: no record, or an expired one.
    Absent,
    /// A current, unexpired manifest of this version.
    Version(VersionId),
    /// Exactly these record bytes: the manifest as the caller read it (an expiry, a re-wrap of data keys, a put
    /// whose condition was checked before its chunks).
    Record(Bytes),
}

impl From<PutCondition> for Expect {
    fn from(condition: PutCondition) -> Self {
        match condition {
            PutCondition::None => Expect::Any,
            PutCondition::IfAbsent => Expect::Absent,
            PutCondition::IfVersion(v) => Expect::Version(v),
        }
    }
}

/// What of a version's chunks its commit deals with besides the manifest.
pub(crate) enum CommitChunks {
    /// None: a delete, an inline value, a re-wrap, or a compose (whose segments' claims and `issue_by` fence it).
    None,
    /// Chunks written under the put's intent lease, which the commit ends.
    Leased(IntentLease),
    /// Chunks not stored yet: the commit writes them in its atomic group
    /// ([`crate::backend::ChunkStore::write_records`]), and there is no intent.
    InGroup(GroupChunks),
}

/// The fences of a change: the put's chunks (and with them its lease), and the latest moment (Unix µs) its write
/// may be issued (a compose's: past it the claims of its segments may no longer hold).
pub(crate) struct Fences {
    pub(crate) chunks: CommitChunks,
    pub(crate) issue_by: Option<u64>,
}

impl Fences {
    /// No chunks, no deadline: a delete, a re-wrap, an inline put.
    pub(crate) fn none() -> Self {
        Self {
            chunks: CommitChunks::None,
            issue_by: None,
        }
    }

    /// A put's chunks, no deadline.
    pub(crate) fn chunks(chunks: CommitChunks) -> Self {
        Self {
            chunks,
            issue_by: None,
        }
    }
}

/// What a change did.
#[derive(Debug)]
pub(crate) enum Changed {
    /// Written; `replaced` is the manifest it replaced or removed (`None` when there was none, or it did not
    /// decode: a damaged manifest is replaced or removed all the same, its chunks left to `fsck --repair`).
    Written { replaced: Option<Box<Manifest>> },
    /// The expectation did not hold; nothing was written. `current` is the record found (`None`: no record).
    Refused { current: Option<Bytes> },
}

/// An expectation checked against a record read ([`pin`]): what the write's condition is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pinned {
    /// [`Expect::Any`]: no condition (or, where conditions are cheap, one on the record read just before).
    Any,
    /// No record.
    Absent,
    /// These record bytes.
    Record(Bytes),
}

impl From<Pinned> for Expect {
    fn from(pinned: Pinned) -> Self {
        match pinned {
            Pinned::Any => Expect::Any,
            Pinned::Absent => Expect::Absent,
            Pinned::Record(raw) => Expect::Record(raw),
        }
    }
}

/// Checks `expect` against the current record of `key` now and pins it to what was read: [`Expect::Version`]
/// becomes the record of the manifest read, [`Expect::Absent`] over an expired manifest becomes the record of
/// it. `Err(current)` when it does not hold (with the record found). [`Expect::Any`] and [`Expect::Record`] are
/// pinned as they are, without a read. A put pins its condition before it writes its chunks, so that a failed
/// condition costs no chunk.
pub(crate) async fn pin(
    inner: &Inner,
    key: &Bytes,
    expect: Expect,
) -> Result<std::result::Result<Pinned, Option<Bytes>>> {
    let version = match expect {
        Expect::Any => return Ok(Ok(Pinned::Any)),
        Expect::Record(raw) => return Ok(Ok(Pinned::Record(raw))),
        Expect::Absent => None,
        Expect::Version(v) => Some(v),
    };
    let Some(raw) = inner.backend.get_record(Namespace::Manifest, key).await? else {
        return Ok(match version {
            None => Ok(Pinned::Absent),
            Some(_) => Err(None),
        });
    };
    // A damaged manifest is a blob of no version: it holds the key.
    let found = inner.decode_manifest(key, &raw).ok();
    let expired = found
        .as_ref()
        .is_some_and(|m| m.is_expired(inner.now_micros()));
    Ok(match (version, found) {
        (None, Some(_)) if expired => Ok(Pinned::Record(raw)),
        (Some(v), Some(m)) if m.version == v && !expired => Ok(Pinned::Record(raw)),
        _ => Err(Some(raw)),
    })
}

/// Applies `change` to the manifest of `key` if `expect` holds, under `fences`, following the crash-safety rule
/// of this module: the one writer of manifest records.
///
/// # Errors
/// [`Error::IntentLost`] when a fence no longer holds (nothing written), [`Error::Corrupt`] never (a damaged
/// current manifest is replaced or removed), [`Error::Backend`] when a read, the queueing before the write or the
/// write fails (the write's outcome may then be unknown: a leased put's chunks are queued for reclaim, which
/// leaves them alone if the write did land).
pub(crate) async fn change_manifest(
    inner: &Inner,
    key: &Bytes,
    change: Change<'_>,
    expect: Expect,
    fences: Fences,
) -> Result<Changed> {
    let outcome = write(inner, key, change, expect, &fences).await;
    let Fences {
        chunks: CommitChunks::Leased(lease),
        ..
    } = fences
    else {
        return outcome.map_err(Failure::into_error);
    };
    // The one exit of a leased put: the lease ends once the chunks are committed, deleted, or queued for reclaim.
    let manifest = change.manifest();
    let settled = match (&outcome, manifest) {
        (Ok(Changed::Written { .. }), _) | (_, None) => true,
        (Ok(Changed::Refused { .. }) | Err(Failure::NotWritten(_)), Some(m)) => {
            discard(inner, key, m).await
        }
        // The commit may or may not have happened. Queue this version for reclaim: the reclaimer leaves it alone
        // if it did become current.
        (Err(Failure::Unknown(_)), Some(m)) => reclaim::schedule_logged(inner, key, m).await,
    };
    lease.end(settled).await;
    outcome.map_err(Failure::into_error)
}

/// How a change failed: before its write (nothing changed), or in it (the outcome is unknown).
enum Failure {
    NotWritten(Error),
    Unknown(Error),
}

impl Failure {
    fn into_error(self) -> Error {
        match self {
            Failure::NotWritten(e) | Failure::Unknown(e) => e,
        }
    }
}

/// What a change's atomic group holds besides the manifest and the reclaim entries.
#[derive(Clone, Copy)]
enum Group<'a> {
    /// The removal of the put's intent ([`IntentLease::commit_group`]).
    IntentRemoval(&'a IntentLease),
    /// The put's chunks.
    Chunks(&'a GroupChunks),
}

/// The steps of [`change_manifest`] up to and including the write, and the queueing of what it replaced.
async fn write(
    inner: &Inner,
    key: &Bytes,
    change: Change<'_>,
    expect: Expect,
    fences: &Fences,
) -> std::result::Result<Changed, Failure> {
    use Failure::NotWritten;
    // A plain write wins by its timestamp where the backend does not compare (CQL): not with a skewed clock.
    if expect == Expect::Any {
        inner
            .write_clock
            .check(&*inner.backend)
            .await
            .map_err(NotWritten)?;
    }
    // When the record the change replaces was read: now (by `pin`, or below), unless the caller pinned it earlier.
    let mut read_at = match expect {
        Expect::Record(_) => 0,
        _ => inner.now_micros(),
    };
    let expect = match pin(inner, key, expect).await.map_err(NotWritten)? {
        Ok(pinned) => pinned,
        Err(current) => return Ok(Changed::Refused { current }),
    };
    let (condition, mut raw) = match &expect {
        // Not knowing what the change replaces would leave it unqueued: fail instead.
        Pinned::Any => (
            Precondition::None,
            inner
                .backend
                .get_record(Namespace::Manifest, key)
                .await
                .map_err(NotWritten)?,
        ),
        Pinned::Record(expected) => (
            Precondition::Equals(expected.clone()),
            Some(expected.clone()),
        ),
        Pinned::Absent => (Precondition::Absent, None),
    };
    let new = change.manifest();
    let written_version = new.map(|m| m.version);
    // A keeping put compares and sets even where a condition costs a Paxos round (CQL): a version another writer
    // committed in between would otherwise be replaced without being kept.
    let keeping = matches!(change, Change::PutKeeping(_));
    let cas = expect == Pinned::Any && (inner.info.reports_previous || keeping);
    let lease = match &fences.chunks {
        CommitChunks::Leased(lease) => Some(lease),
        CommitChunks::None | CommitChunks::InGroup(_) => None,
    };
    // Where the put's sink asks for a commit group, a put's reclaim entries, manifest and intent removal (or chunks, for
    // a put without an intent) are one write.
    let group = match (&fences.chunks, new) {
        (CommitChunks::Leased(lease), Some(_)) if lease.commits_in_group() => {
            Some(Group::IntentRemoval(lease))
        }
        (CommitChunks::InGroup(chunks), Some(_)) => Some(Group::Chunks(chunks)),
        _ => None,
    };
    // A version with an expiry is in the expiry index before it can be current (in the group, where there is one).
    if let (Some(m), None) = (new, group) {
        expiry::index(inner, key, m).await.map_err(NotWritten)?;
    }
    let mut tries = Backoff::COMMIT_CAS.start();
    loop {
        // A delete where reads are exact (compare-and-set backends) that finds nothing writes nothing: the
        // delete took effect when the key was read absent.
        if cas && raw.is_none() && new.is_none() {
            return Ok(Changed::Written { replaced: None });
        }
        // A kept record written apart from the commit is issued soon after the read of what it keeps, so that a
        // removal's marker outlasts it (`ledger/kept.rs`): read long ago, the version may have been replaced and
        // removed since. Read it again.
        let late = inner.now_micros() > read_at.saturating_add(kept::KEEP_ISSUE_MICROS);
        if keeping && group.is_none() && raw.is_some() && late {
            let current = inner
                .backend
                .get_record(Namespace::Manifest, key)
                .await
                .map_err(NotWritten)?;
            read_at = inner.now_micros();
            if current != raw {
                if !cas {
                    return Ok(Changed::Refused { current });
                }
                raw = current;
            }
        }
        let before = raw
            .as_ref()
            .and_then(|b| inner.decode_manifest(key, b).ok());
        let queued_at = inner.now_micros();
        let replacing = match (&before, &raw) {
            (Some(manifest), Some(record)) => Some(Replacing {
                manifest,
                record,
                keep: change.keeps(manifest, queued_at),
            }),
            _ => None,
        };
        match (replacing, group) {
            (Some(old), None) if old.keep => {
                let by = IssueBy::new(
                    read_at.saturating_add(kept::KEEP_ISSUE_MICROS),
                    Arc::clone(&inner.config.clock),
                    key.clone(),
                    old.manifest.version,
                    "the version it keeps was read too long ago (it may have been removed since)",
                );
                let call = kept::keep(inner, key, old.manifest.version, old.record.clone());
                deadline::within(Some(by), call)
                    .await
                    .output
                    .map_err(NotWritten)?;
            }
            (Some(old), None) => reclaim::schedule(inner, key, old.manifest, new)
                .await
                .map_err(NotWritten)?,
            _ => {}
        }
        check_fences(inner, key, written_version, lease, fences.issue_by).map_err(NotWritten)?;
        let attempt = if cas && tries.next_attempt().await {
            raw.clone()
                .map_or(Precondition::Absent, Precondition::Equals)
        } else {
            condition.clone()
        };
        // The fences just checked hold until this deadline, which the backend checks again right before its
        // engine write: a write stalled on the way (the scheduler's queue, the runtime, a pool) is refused.
        let by = issue_deadline(inner, key, written_version, fences.issue_by);
        let outcome = match (new, group) {
            (Some(m), Some(group)) => {
                let call = write_group(inner, group, key, m, replacing, queued_at, &attempt);
                unchecked(inner, deadline::within(by, call).await)?
            }
            (Some(m), None) => {
                let call = inner
                    .backend
                    .put_record(Namespace::Manifest, key, m.encode(), &attempt);
                unchecked(inner, deadline::within(by, call).await).map_err(not_issued)?
            }
            (None, _) => {
                let call = inner
                    .backend
                    .delete_record(Namespace::Manifest, key, &attempt);
                unchecked(inner, deadline::within(by, call).await).map_err(not_issued)?
            }
        };
        let (replaced, replaced_record) = match outcome {
            RecordWrite::Done(Previous::Value(bytes)) => {
                (inner.decode_manifest(key, &bytes).ok(), Some(bytes))
            }
            RecordWrite::Done(Previous::Absent) => (None, None),
            RecordWrite::Done(Previous::Unknown) => (before.clone(), raw.clone()),
            // Another writer committed since the read: queue what it committed and try again.
            RecordWrite::ConditionFailed(current) if attempt != condition => {
                raw = current;
                read_at = inner.now_micros();
                continue;
            }
            RecordWrite::ConditionFailed(current) => return Ok(Changed::Refused { current }),
        };
        match (&change, replaced.as_ref(), replaced_record) {
            // Another writer's version committed in between is kept too (its writer queued nothing for it).
            (Change::PutKeeping(_), Some(old), Some(record)) => {
                let other = Some(old.version) != before.as_ref().map(|b| b.version);
                if change.keeps(old, inner.now_micros()) && other {
                    let kept = kept::keep(inner, key, old.version, record).await;
                    if let Err(e) = kept {
                        tracing::warn!(
                            "could not keep version {} replaced by a concurrent commit: {e}",
                            old.version
                        );
                    }
                }
            }
            (Change::PutKeeping(_), _, _) => {}
            _ => {
                reclaim::queue_replaced(
                    inner,
                    key,
                    written_version,
                    replaced.as_ref(),
                    before.as_ref(),
                    queued_at,
                )
                .await
            }
        }
        return Ok(Changed::Written {
            replaced: replaced.map(Box::new),
        });
    }
}

/// Fails with [`Error::IntentLost`] when the put's claim no longer holds with a margin (its write might land after
/// gc took its intent over), or when the compose's `issue_by` has passed.
fn check_fences(
    inner: &Inner,
    key: &Bytes,
    version: Option<VersionId>,
    lease: Option<&IntentLease>,
    issue_by: Option<u64>,
) -> Result<()> {
    if let Some(lease) = lease {
        lease.check_claim()?;
    }
    if let Some(by) = issue_by {
        let now = inner.now_micros();
        if now > by {
            return Err(Error::IntentLost {
                key: key[..].into(),
                version: version.unwrap_or(VersionId(0)),
                detail: format!(
                    "its commit was due {} µs ago (the claims of its segments may no longer hold)",
                    now - by
                ),
            });
        }
    }
    Ok(())
}

/// The deadline of a change's write ([`deadline`]): a compose's `issue_by`. A put needs none: where its commit is
/// an atomic group, the group's compare-and-set on its intent fences it; with a claim (memory), the claim's hold
/// outlasts the margin [`check_fences`] asks for; where writes land late (Cassandra), gc waits the commit window
/// past the lease.
fn issue_deadline(
    inner: &Inner,
    key: &Bytes,
    version: Option<VersionId>,
    issue_by: Option<u64>,
) -> Option<IssueBy> {
    Some(IssueBy::new(
        issue_by?,
        Arc::clone(&inner.config.clock),
        key.clone(),
        version.unwrap_or(VersionId(0)),
        "the claims of the compose's segments may no longer hold",
    ))
}

/// A write's outcome, logging one that completed without the backend checking its deadline (a layer that moved
/// it to another task without carrying the deadline, or a backend that ignores it): the fence then rested on
/// the check before the call alone.
fn unchecked<T, E>(
    inner: &Inner,
    within: deadline::Within<std::result::Result<T, E>>,
) -> std::result::Result<T, E> {
    if !within.checked && within.output.is_ok() {
        tracing::warn!(
            "backend {} completed a commit's write without checking its deadline",
            inner.info.name
        );
    }
    within.output
}

/// A single record write's error: `IntentLost` is the backend's deadline check, before anything was written;
/// any other leaves the outcome unknown.
fn not_issued(e: Error) -> Failure {
    match e {
        e @ Error::IntentLost { .. } => Failure::NotWritten(e),
        e => Failure::Unknown(e),
    }
}

/// The manifest write of [`write`] as one atomic group with the reclaim entries of what `replaces` names and
/// `manifest` does not (queued at `queued_at`) or, where the change keeps it, its kept record, `manifest`'s
/// expiry index entry if it has an expiry, and either the removal of the put's intent
/// ([`IntentLease::commit_group`]) or the put's chunks; reported as the manifest write alone.
async fn write_group(
    inner: &Inner,
    group: Group<'_>,
    key: &Bytes,
    manifest: &Manifest,
    replaces: Option<Replacing<'_>>,
    queued_at: u64,
    condition: &Precondition,
) -> std::result::Result<RecordWrite, Failure> {
    let (mut changes, marked) = match replaces {
        Some(old) if old.keep => (
            vec![kept::change(key, old.manifest.version, old.record.clone())],
            Default::default(),
        ),
        Some(old) => reclaim::schedule_changes(inner, key, old.manifest, Some(manifest), queued_at),
        None => Default::default(),
    };
    let marked_expiry = expiry::index_changes(inner, key, manifest, &mut changes);
    let at = changes.len();
    changes.push(RecordChange::put(
        Namespace::Manifest,
        key.clone(),
        manifest.encode(),
        condition.clone(),
    ));
    let written = match group {
        Group::IntentRemoval(lease) => lease.commit_group(changes).await,
        Group::Chunks(chunks) => {
            inner
                .backend
                .write_records(changes, Some(chunks.clone()))
                .await
        }
    };
    if let Ok(GroupWrite::Done(_)) = &written {
        reclaim::remember_marked(inner, Queue::Reclaim, &marked);
        reclaim::remember_marked(inner, Queue::Expiry, &marked_expiry);
    }
    match written {
        Ok(GroupWrite::Done(previous)) => previous
            .get(at)
            .cloned()
            .map(RecordWrite::Done)
            .ok_or_else(|| {
                Failure::Unknown(Error::internal(
                    "commit",
                    "the backend reported fewer writes than the group held",
                ))
            }),
        Ok(GroupWrite::ConditionFailed { index, current }) if index == at => {
            Ok(RecordWrite::ConditionFailed(current))
        }
        // Reclaim entries are written unconditionally: nothing was written, yet a condition that cannot fail did.
        Ok(GroupWrite::ConditionFailed { index, .. }) => Err(Failure::NotWritten(Error::internal(
            "commit",
            format!("the backend failed the condition-less write {index} of a commit's group"),
        ))),
        Err(e @ Error::IntentLost { .. }) => Err(Failure::NotWritten(e)),
        Err(e) => Err(Failure::Unknown(e)),
    }
}

/// Deletes the chunks of a version that was never committed; false if that failed (logged). A segmented version
/// has no chunks of its own: its segments stay as they were, claimable by another compose until their leases end.
async fn discard(inner: &Inner, key: &Bytes, manifest: &Manifest) -> bool {
    if let ManifestBody::Chunked { layout, .. } = &manifest.body {
        let blob = BlobRef {
            key: key.clone(),
            version: manifest.version,
        };
        if let Err(e) = inner
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

#[cfg(test)]
mod tests;
