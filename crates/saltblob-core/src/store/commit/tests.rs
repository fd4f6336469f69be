//! Tests of `store/commit.rs`.

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
        .fail_writes(&[Namespace::Manifest, Namespace::ReclaimBucket], true)
        .expect("inject");
    let failed = store
        .put("k", Bytes::from(vec![1u8; 300_000]), &PutOptions::new())
        .await;
    assert!(failed.is_err(), "the commit failed: {failed:?}");
    backend.fail_writes(&[], false).expect("heal");
    assert!(backend.chunk_count().expect("count") > 0);
    let intents = crate::ledger::intent::stored(&*backend, Namespace::ShardedIntent)
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
    // The queue's bucket is marked ("put Meta") before its first entry, once per process.
    let one_by_one = [
        "put ShardedIntent",
        "put ShardedIntent",
        "put Meta",
        "put ReclaimBucket",
        "put Manifest",
        "delete ShardedIntent",
    ];
    let with_intent = [
        "put ShardedIntent",
        "group [put ReclaimBucket, put Meta, put Manifest, delete ShardedIntent]",
    ];
    let with_chunks = ["group [2 chunks, put ReclaimBucket, put Meta, put Manifest]"];
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
        let intents = crate::ledger::intent::stored(&backend.inner, Namespace::ShardedIntent);
        assert_eq!(intents.await.expect("intents").len(), 0);
        let queue = reclaim::stored(&backend.inner).await.expect("queue");
        assert_eq!(queue.len(), 1);
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
                    .fail_writes(&[Namespace::ReclaimBucket], false)
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

    fn unreported(&self, write: Result<RecordWrite>, cond: &Precondition) -> Result<RecordWrite> {
        match write {
            Ok(RecordWrite::Done(_)) if !self.reports_previous && *cond == Precondition::None => {
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
    let entries = reclaim::stored(backend).await.unwrap();
    entries
        .iter()
        .map(|(k, v)| {
            reclaim::ReclaimEntry::decode(Namespace::ReclaimBucket, k, v)
                .unwrap()
                .version
        })
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
