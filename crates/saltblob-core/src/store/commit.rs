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
//! may already have dropped the first entry ([`crate::ledger::reclaim::queue_replaced`]). Where the backend writes
//! atomic groups, the entries and the write are one group instead, and nothing is queued before.
//!
//! On a backend whose conditional writes are cheap (those that report the replaced record), a change that
//! expects nothing ([`Expect::Any`]) is written as a compare-and-set on the record it read and queued, and reads,
//! queues and tries again (under [`Backoff::COMMIT_CAS`]) when another writer committed in between: what it
//! replaces is always queued first. Elsewhere (CQL, where a condition costs a Paxos round) it is written plainly,
//! and a version committed in between is queued after the write; a process that dies in that moment leaves it to
//! `fsck --repair`.
//!
//! A put's chunks are the commit's too ([`CommitChunks`]): chunks written under an intent lease are settled when
//! the commit ends (committed, deleted, or queued for reclaim when the outcome is unknown) and the lease ended;
//! chunks the commit writes itself go in its atomic group, so a failure leaves nothing to clean. A manifest write
//! is issued only while the lease's claim holds with a margin and, for a compose, not after its `issue_by`
//! deadline ([`Fences`]).

use bytes::Bytes;

use crate::backend::{
    BlobRef, GroupChunks, GroupWrite, Namespace, Precondition, Previous, RecordChange, RecordWrite,
};
use crate::base::error::{Error, Result};
use crate::base::retry::Backoff;
use crate::base::version::VersionId;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::ledger::intent::IntentLease;
use crate::ledger::reclaim;
use crate::state::Inner;
use crate::state::config::PutCondition;

/// What a change does to a key's manifest.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change<'a> {
    /// Makes this manifest current.
    Put(&'a Manifest),
    /// Removes the key's manifest.
    Delete,
}

impl Change<'_> {
    /// The manifest the change writes, `None` for a delete.
    fn manifest(&self) -> Option<&Manifest> {
        match self {
            Change::Put(m) => Some(m),
            Change::Delete => None,
        }
    }
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
    use Failure::{NotWritten, Unknown};
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
    let cas = expect == Pinned::Any && inner.info.reports_previous;
    let lease = match &fences.chunks {
        CommitChunks::Leased(lease) => Some(lease),
        CommitChunks::None | CommitChunks::InGroup(_) => None,
    };
    // Where the backend writes atomic groups, a put's reclaim entries, manifest and intent removal (or chunks, for
    // a put without an intent) are one write.
    let group = match (&fences.chunks, new) {
        (CommitChunks::Leased(lease), Some(_)) if inner.info.atomic_record_groups => {
            Some(Group::IntentRemoval(lease))
        }
        (CommitChunks::InGroup(chunks), Some(_)) => Some(Group::Chunks(chunks)),
        _ => None,
    };
    let mut tries = Backoff::COMMIT_CAS.start();
    loop {
        // A delete where reads are exact (compare-and-set backends) that finds nothing writes nothing: the
        // delete took effect when the key was read absent.
        if cas && raw.is_none() && new.is_none() {
            return Ok(Changed::Written { replaced: None });
        }
        let before = raw
            .as_ref()
            .and_then(|b| inner.decode_manifest(key, b).ok());
        let queued_at = inner.now_micros();
        if let (Some(old), None) = (&before, group) {
            reclaim::schedule(inner, key, old, new)
                .await
                .map_err(NotWritten)?;
        }
        check_fences(inner, key, written_version, lease, fences.issue_by).map_err(NotWritten)?;
        let attempt = if cas && tries.next_attempt().await {
            raw.clone()
                .map_or(Precondition::Absent, Precondition::Equals)
        } else {
            condition.clone()
        };
        let outcome = match (new, group) {
            (Some(m), Some(group)) => {
                write_group(inner, group, key, m, before.as_ref(), queued_at, &attempt).await?
            }
            (Some(m), None) => inner
                .backend
                .put_record(Namespace::Manifest, key, m.encode(), &attempt)
                .await
                .map_err(Unknown)?,
            (None, _) => inner
                .backend
                .delete_record(Namespace::Manifest, key, &attempt)
                .await
                .map_err(Unknown)?,
        };
        let replaced = match outcome {
            RecordWrite::Done(Previous::Value(bytes)) => inner.decode_manifest(key, &bytes).ok(),
            RecordWrite::Done(Previous::Absent) => None,
            RecordWrite::Done(Previous::Unknown) => before.clone(),
            // Another writer committed since the read: queue what it committed and try again.
            RecordWrite::ConditionFailed(current) if attempt != condition => {
                raw = current;
                continue;
            }
            RecordWrite::ConditionFailed(current) => return Ok(Changed::Refused { current }),
        };
        reclaim::queue_replaced(
            inner,
            key,
            written_version,
            replaced.as_ref(),
            before.as_ref(),
            queued_at,
        )
        .await;
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

/// The manifest write of [`write`] as one atomic group with the reclaim entries of what `replaces` names and
/// `manifest` does not (queued at `queued_at`), and either the removal of the put's intent
/// ([`IntentLease::commit_group`]) or the put's chunks; reported as the manifest write alone.
async fn write_group(
    inner: &Inner,
    group: Group<'_>,
    key: &Bytes,
    manifest: &Manifest,
    replaces: Option<&Manifest>,
    queued_at: u64,
    condition: &Precondition,
) -> std::result::Result<RecordWrite, Failure> {
    let mut changes = replaces.map_or_else(Vec::new, |old| {
        reclaim::schedule_changes(inner, key, old, Some(manifest), queued_at)
    });
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
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::backend::ChunkStore;
    use crate::backend::memory::MemoryStore;
    use crate::base::clock::OffsetClock;
    use crate::state::config::{PutOptions, StoreConfig};
    use crate::store::BlobStore;
    use crate::upkeep::gc::GcOptions;

    /// A put whose commit fails and whose cleanup fails too (chunks not deleted, not queued) keeps its intent,
    /// so that gc reclaims the chunks once the lease is over; removing the intent would orphan them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_that_cannot_clean_up_leaves_its_intent_to_gc() {
        let backend = Arc::new(MemoryStore::new());
        let lease = Duration::from_millis(300);
        let clock = OffsetClock::new();
        let config = StoreConfig::default()
            .with_grace(Duration::ZERO)
            .with_intent_lease(lease)
            .with_clock(clock.clone());
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

        // The intent was claimed for the commit: it holds for the lease and the commit hold (one more lease here).
        clock.advance(lease * 2 + Duration::from_millis(100));
        let gc = store
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        assert_eq!((gc.abandoned_puts, gc.reclaim.versions), (1, 1), "{gc:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0, "nothing orphaned");
    }

    /// Counts the record writes that reach a store: `put`/`delete` with the namespace, or one `group` listing
    /// the namespaces of its writes.
    #[derive(Debug)]
    struct RecordWrites {
        inner: MemoryStore,
        seen: std::sync::Mutex<Vec<String>>,
    }

    impl RecordWrites {
        fn new(inner: MemoryStore) -> Arc<Self> {
            Arc::new(Self {
                inner,
                seen: std::sync::Mutex::new(Vec::new()),
            })
        }

        fn log(&self, what: String) {
            self.seen.lock().expect("log").push(what);
        }

        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.seen.lock().expect("log"))
        }
    }

    #[async_trait::async_trait]
    impl crate::backend::layer::ChunkStoreLayer for RecordWrites {
        fn inner(&self) -> &dyn ChunkStore {
            &self.inner
        }

        async fn put_record(
            &self,
            ns: Namespace,
            key: &[u8],
            value: Bytes,
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.log(format!("put {ns:?}"));
            self.inner.put_record(ns, key, value, cond).await
        }

        async fn delete_record(
            &self,
            ns: Namespace,
            key: &[u8],
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.log(format!("delete {ns:?}"));
            self.inner.delete_record(ns, key, cond).await
        }

        async fn write_records(
            &self,
            changes: Vec<RecordChange>,
            chunks: Option<GroupChunks>,
        ) -> Result<GroupWrite> {
            let chunk_count = chunks.as_ref().map(|c| c.chunks.len());
            let what: Vec<String> = chunk_count
                .map(|n| format!("{n} chunks"))
                .into_iter()
                .chain(changes.iter().map(|c| match c.value {
                    Some(_) => format!("put {:?}", c.ns),
                    None => format!("delete {:?}", c.ns),
                }))
                .collect();
            self.log(format!("group [{}]", what.join(", ")));
            self.inner.write_records(changes, chunks).await
        }
    }

    /// A chunked put that replaces a version makes these record writes besides its chunks: where the backend
    /// writes atomic groups, one group that holds its chunks too (the chunks, the replaced version's reclaim
    /// entry, the manifest) when they fit one backend call, else its intent and then one group (the reclaim
    /// entry, the manifest, the intent's removal); elsewhere its intent, the claim, the reclaim entry, the
    /// manifest and the intent's removal, one after another. Either way the value reads back, the replaced
    /// version is queued and no intent is left.
    #[tokio::test]
    async fn a_chunked_put_commits_in_one_group_where_the_backend_writes_them() {
        let one_by_one = [
            "put Intent",
            "put Intent",
            "put Reclaim",
            "put Manifest",
            "delete Intent",
        ];
        let with_intent = [
            "put Intent",
            "group [put Reclaim, put Manifest, delete Intent]",
        ];
        let with_chunks = ["group [2 chunks, put Reclaim, put Manifest]"];
        // 100 000 bytes are two chunks of 64 KiB: one call of the default 1 MiB batches, two of 64 KiB ones.
        for (memory, batch_bytes, expected) in [
            (MemoryStore::new(), 1 << 20, &one_by_one[..]),
            (
                MemoryStore::with_atomic_record_groups(),
                64 << 10,
                &with_intent[..],
            ),
            (
                MemoryStore::with_atomic_record_groups(),
                1 << 20,
                &with_chunks[..],
            ),
        ] {
            let backend = RecordWrites::new(memory);
            let config = StoreConfig::default()
                .with_grace(Duration::from_secs(60))
                .with_batch_bytes(batch_bytes);
            let store = BlobStore::new(backend.clone(), config).expect("store");
            let value = Bytes::from(vec![7u8; 100_000]);
            store
                .put("k", value.clone(), &PutOptions::new())
                .await
                .expect("first");
            backend.take();
            store
                .put("k", value.clone(), &PutOptions::new())
                .await
                .expect("replace");
            assert_eq!(backend.take(), expected);
            assert_eq!(store.get("k").await.expect("get"), value);
            let scan = |ns| backend.inner.scan_records(ns, b"", None, 10);
            assert_eq!(scan(Namespace::Intent).await.expect("intents").len(), 0);
            assert_eq!(scan(Namespace::Reclaim).await.expect("queue").len(), 1);
        }
    }

    /// A put that commits while an unconditional delete of its key is between its read of the manifest and its
    /// delete: the delete removes the new version, which it did not queue first; a crash before it queues it
    /// afterwards (here: reclaim writes fail from the delete on) leaves chunks that no manifest, intent or queue
    /// entry names, and gc never reclaims them (the crash loop's "no orphan after gc" flake).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delete_racing_a_commit_leaves_no_orphan_after_a_crash() {
        use crate::backend::layer::ChunkStoreLayer;
        use crate::upkeep::fsck::FsckOptions;
        use crate::upkeep::gc::GcOptions;

        #[derive(Debug)]
        struct CommitBeforeDelete {
            backend: Arc<MemoryStore>,
            racer: std::sync::Mutex<Option<BlobStore>>,
            armed: std::sync::Mutex<bool>,
        }
        #[async_trait::async_trait]
        impl ChunkStoreLayer for CommitBeforeDelete {
            fn inner(&self) -> &dyn ChunkStore {
                &*self.backend
            }
            async fn delete_record(
                &self,
                ns: Namespace,
                key: &[u8],
                cond: &Precondition,
            ) -> Result<RecordWrite> {
                let racer = if ns == Namespace::Manifest {
                    self.racer.lock().expect("lock").take()
                } else {
                    None
                };
                if let Some(racer) = racer {
                    racer
                        .put(key, Bytes::from(vec![2u8; 40_000]), &PutOptions::new())
                        .await
                        .expect("the racing put commits");
                    *self.armed.lock().expect("lock") = true;
                }
                let out = self.backend.delete_record(ns, key, cond).await;
                if ns == Namespace::Manifest
                    && matches!(out, Ok(RecordWrite::Done(_)))
                    && *self.armed.lock().expect("lock")
                {
                    // The process dies once the manifest is deleted: nothing more reaches the store.
                    self.backend
                        .fail_writes(&[Namespace::Reclaim], false)
                        .expect("inject");
                }
                out
            }
        }

        let backend = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_grace(Duration::ZERO);
        let plain = BlobStore::new(backend.clone(), config.clone()).expect("store");
        let layer = Arc::new(CommitBeforeDelete {
            backend: backend.clone(),
            racer: std::sync::Mutex::new(None),
            armed: std::sync::Mutex::new(false),
        });
        let store = BlobStore::new(layer.clone(), config).expect("store");
        store
            .put("k", Bytes::from(vec![1u8; 40_000]), &PutOptions::new())
            .await
            .expect("put");
        *layer.racer.lock().expect("lock") = Some(plain.clone());
        store.delete("k").await.expect("delete");
        backend.fail_writes(&[], false).expect("heal");
        plain
            .gc(&GcOptions::new().with_grace(Duration::ZERO))
            .await
            .expect("gc");
        let fsck = plain.fsck(&FsckOptions::new()).await.expect("fsck");
        assert!(fsck.orphans.is_empty(), "no orphan after gc: {fsck:?}");
        assert_eq!(backend.chunk_count().expect("count"), 0);
    }

    /// Sees every manifest write of a store and, at that moment, the versions queued for reclaim; optionally
    /// behaves as a backend whose writes do not report the record they replaced (as on Cassandra).
    #[derive(Debug)]
    struct QueuedFirst {
        inner: MemoryStore,
        reports_previous: bool,
        /// Per manifest write: the versions queued when it was issued.
        seen: std::sync::Mutex<Vec<Vec<VersionId>>>,
    }

    impl QueuedFirst {
        fn new(reports_previous: bool) -> Arc<Self> {
            Arc::new(Self {
                inner: MemoryStore::new(),
                reports_previous,
                seen: std::sync::Mutex::new(Vec::new()),
            })
        }

        async fn note(&self, ns: Namespace) {
            if ns == Namespace::Manifest {
                let queued = queued(&self.inner).await;
                self.seen.lock().unwrap().push(queued);
            }
        }

        fn unreported(
            &self,
            write: Result<RecordWrite>,
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            match write {
                Ok(RecordWrite::Done(_))
                    if !self.reports_previous && *cond == Precondition::None =>
                {
                    Ok(RecordWrite::Done(Previous::Unknown))
                }
                other => other,
            }
        }

        fn seen(&self) -> Vec<Vec<VersionId>> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    #[async_trait::async_trait]
    impl crate::backend::layer::ChunkStoreLayer for QueuedFirst {
        fn inner(&self) -> &dyn ChunkStore {
            &self.inner
        }

        fn info(&self) -> crate::backend::BackendInfo {
            let mut info = self.inner.info();
            info.reports_previous = self.reports_previous;
            info
        }

        async fn put_record(
            &self,
            ns: Namespace,
            key: &[u8],
            value: Bytes,
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.note(ns).await;
            let write = self.inner.put_record(ns, key, value, cond).await;
            self.unreported(write, cond)
        }

        async fn delete_record(
            &self,
            ns: Namespace,
            key: &[u8],
            cond: &Precondition,
        ) -> Result<RecordWrite> {
            self.note(ns).await;
            let write = self.inner.delete_record(ns, key, cond).await;
            self.unreported(write, cond)
        }
    }

    /// The versions in the reclaim queue, in queue order.
    async fn queued(backend: &dyn ChunkStore) -> Vec<VersionId> {
        let entries = backend
            .scan_records(Namespace::Reclaim, b"", None, 1000)
            .await
            .unwrap();
        entries
            .iter()
            .map(|(k, v)| reclaim::ReclaimEntry::decode(k, v).unwrap().version)
            .collect()
    }

    /// A chunked value (300 000 bytes: five 64 KiB chunks).
    fn chunked() -> Bytes {
        Bytes::from(vec![3u8; 300_000])
    }

    async fn record(store: &BlobStore, key: &str) -> Option<Bytes> {
        store
            .inner
            .backend
            .get_record(Namespace::Manifest, key.as_bytes())
            .await
            .unwrap()
    }

    /// [`Expect::Any`]: a put and a delete queue the version they replace before their manifest write, with or
    /// without a backend that reports what it replaced; a put and a delete of an inline or absent value queue
    /// nothing.
    #[tokio::test]
    async fn any_queues_what_it_replaces_before_the_write() {
        for reports_previous in [true, false] {
            let backend = QueuedFirst::new(reports_previous);
            let config = StoreConfig::default().with_grace(Duration::from_secs(60));
            let store = BlobStore::new(backend.clone(), config).unwrap();
            let first = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
            assert_eq!(
                backend.seen(),
                [vec![]],
                "nothing to queue before the first put"
            );
            let second = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
            assert_eq!(backend.seen(), [vec![first.version]], "{reports_previous}");
            assert_eq!(store.delete("k").await.unwrap(), Some(second.version));
            assert_eq!(backend.seen(), [vec![first.version, second.version]]);
            assert_eq!(store.delete("k").await.unwrap(), None);
            assert_eq!(
                queued(&backend.inner).await,
                [first.version, second.version]
            );
            store
                .put("i", &b"inline"[..], &PutOptions::new())
                .await
                .unwrap();
            store
                .put("i", &b"inline"[..], &PutOptions::new())
                .await
                .unwrap();
            assert_eq!(
                queued(&backend.inner).await.len(),
                2,
                "inline versions have no chunks"
            );
        }
    }

    /// [`Expect::Any`] on a backend whose conditional writes are cheap: a put that commits between the read and
    /// the write of another is queued by that other one before its write lands (the compare-and-set fails, the
    /// change reads, queues and tries again), so both replaced versions are queued and the last write wins.
    #[tokio::test]
    async fn any_retries_its_compare_and_set_and_queues_a_racing_commit_first() {
        #[derive(Debug)]
        struct Racing {
            inner: Arc<MemoryStore>,
            racer: std::sync::Mutex<Option<BlobStore>>,
            raced: std::sync::Mutex<Option<VersionId>>,
        }
        #[async_trait::async_trait]
        impl crate::backend::layer::ChunkStoreLayer for Racing {
            fn inner(&self) -> &dyn ChunkStore {
                &*self.inner
            }
            async fn put_record(
                &self,
                ns: Namespace,
                key: &[u8],
                value: Bytes,
                cond: &Precondition,
            ) -> Result<RecordWrite> {
                let racer = if ns == Namespace::Manifest {
                    self.racer.lock().unwrap().take()
                } else {
                    None
                };
                if let Some(racer) = racer {
                    let m = racer.put(key, chunked(), &PutOptions::new()).await.unwrap();
                    *self.raced.lock().unwrap() = Some(m.version);
                }
                self.inner.put_record(ns, key, value, cond).await
            }
        }
        let memory = Arc::new(MemoryStore::new());
        let config = StoreConfig::default().with_grace(Duration::from_secs(60));
        let plain = BlobStore::new(memory.clone(), config.clone()).unwrap();
        let layer = Arc::new(Racing {
            inner: memory.clone(),
            racer: std::sync::Mutex::new(None),
            raced: std::sync::Mutex::new(None),
        });
        let store = BlobStore::new(layer.clone(), config).unwrap();
        let first = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
        *layer.racer.lock().unwrap() = Some(plain.clone());
        let last = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
        let raced = layer.raced.lock().unwrap().expect("the racer committed");
        let queue = queued(&*memory).await;
        assert!(
            queue.contains(&first.version) && queue.contains(&raced),
            "{queue:?}"
        );
        assert!(!queue.contains(&last.version), "{queue:?}");
        assert_eq!(plain.head("k").await.unwrap().version, last.version);
    }

    /// [`Expect::Absent`]: refused by a live blob (nothing written, nothing queued), written over no record and
    /// over an expired blob, whose version it queues.
    #[tokio::test]
    async fn absent_is_refused_by_a_live_blob_and_replaces_an_expired_one() {
        let clock = OffsetClock::new();
        let config = StoreConfig::default().with_clock(clock.clone());
        let memory = Arc::new(MemoryStore::new());
        let store = BlobStore::new(memory.clone(), config).unwrap();
        let key = Bytes::from_static(b"k");
        let new = store
            .put("other", &b"new"[..], &PutOptions::new())
            .await
            .unwrap();
        let change = |expect| commit_change(&store, &key, Change::Put(&new), expect);
        assert!(matches!(
            change(Expect::Absent).await,
            Changed::Written { replaced: None }
        ));
        let live = record(&store, "k").await;
        assert!(
            matches!(change(Expect::Absent).await, Changed::Refused { current } if current == live)
        );
        let expiring = PutOptions::new().with_ttl(Duration::from_secs(1));
        let old = store.put("k", chunked(), &expiring).await.unwrap();
        clock.advance(Duration::from_secs(2));
        match change(Expect::Absent).await {
            Changed::Written { replaced: Some(m) } => assert_eq!(m.version, old.version),
            other => panic!("{other:?}"),
        }
        assert_eq!(queued(&*memory).await, [old.version]);
    }

    /// [`Expect::Version`]: refused by another version, an expired one and no blob; written over the named
    /// version, which it queues.
    #[tokio::test]
    async fn version_is_refused_by_another_and_queues_the_one_it_replaces() {
        let clock = OffsetClock::new();
        let config = StoreConfig::default().with_clock(clock.clone());
        let memory = Arc::new(MemoryStore::new());
        let store = BlobStore::new(memory.clone(), config).unwrap();
        let key = Bytes::from_static(b"k");
        let change = |expect| commit_change(&store, &key, Change::Delete, expect);
        assert!(matches!(
            change(Expect::Version(VersionId(7))).await,
            Changed::Refused { current: None }
        ));
        let old = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
        let current = record(&store, "k").await;
        let other = Expect::Version(VersionId(old.version.0 + 1));
        assert!(matches!(change(other).await, Changed::Refused { current: c } if c == current));
        assert!(
            queued(&*memory).await.is_empty(),
            "a refused change queues nothing"
        );
        match change(Expect::Version(old.version)).await {
            Changed::Written { replaced: Some(m) } => assert_eq!(m.version, old.version),
            other => panic!("{other:?}"),
        }
        assert_eq!(queued(&*memory).await, [old.version]);
        let expiring = PutOptions::new().with_ttl(Duration::from_secs(1));
        let expired = store.put("k", chunked(), &expiring).await.unwrap();
        clock.advance(Duration::from_secs(2));
        assert!(matches!(
            change(Expect::Version(expired.version)).await,
            Changed::Refused { .. }
        ));
    }

    /// [`Expect::Record`]: refused once the record changed; a rewrite of the same version (a re-wrap of its data
    /// keys) queues nothing, since the new manifest names the same chunks.
    #[tokio::test]
    async fn record_is_refused_once_changed_and_a_same_version_rewrite_queues_nothing() {
        let memory = Arc::new(MemoryStore::new());
        let store = BlobStore::new(memory.clone(), StoreConfig::default()).unwrap();
        let key = Bytes::from_static(b"k");
        let m = store.put("k", chunked(), &PutOptions::new()).await.unwrap();
        let raw = record(&store, "k").await.unwrap();
        let rewritten = Manifest {
            content_type: Some("text/plain".into()),
            ..m.clone()
        };
        let change = |expect| commit_change(&store, &key, Change::Put(&rewritten), expect);
        assert!(matches!(
            change(Expect::Record(raw.clone())).await,
            Changed::Written { .. }
        ));
        assert!(
            queued(&*memory).await.is_empty(),
            "the same version's chunks stay"
        );
        assert!(matches!(
            change(Expect::Record(raw)).await,
            Changed::Refused { current: Some(_) }
        ));
        assert_eq!(
            store.head("k").await.unwrap().content_type.as_deref(),
            Some("text/plain")
        );
    }

    /// A compose's deadline: past `issue_by`, the change fails with `IntentLost` and writes nothing.
    #[tokio::test]
    async fn a_change_past_its_deadline_writes_nothing() {
        let store = BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).unwrap();
        let key = Bytes::from_static(b"k");
        let m = store
            .put("other", &b"v"[..], &PutOptions::new())
            .await
            .unwrap();
        let fences = Fences {
            chunks: CommitChunks::None,
            issue_by: Some(store.inner.now_micros() - 1),
        };
        let err = change_manifest(&store.inner, &key, Change::Put(&m), Expect::Any, fences)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::IntentLost { .. }), "{err:?}");
        assert!(record(&store, "k").await.is_none());
    }

    async fn commit_change(
        store: &BlobStore,
        key: &Bytes,
        change: Change<'_>,
        expect: Expect,
    ) -> Changed {
        change_manifest(&store.inner, key, change, expect, Fences::none())
            .await
            .unwrap()
    }
}
