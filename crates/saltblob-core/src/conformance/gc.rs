//! Garbage collection of replaced versions and abandoned puts, the intent lease that guards a running put,
//! and `fsck`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use tokio::io::AsyncWriteExt;

use super::faults::Faulty;
use super::{assert_holds, data, prefix, small_config, store};
use crate::backend::{BlobRef, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition};
use crate::base::clock::{Clock, OffsetClock};
use crate::base::error::Error;
use crate::base::units::KIB;
use crate::base::version::VersionId;
use crate::format::layout::Layout;
use crate::format::manifest::Manifest;
use crate::ledger::intent::{Intent, intent_key};
use crate::ledger::reclaim::Queue;
use crate::ledger::work::Held;
use crate::state::config::PutOptions;
use crate::store::BlobStore;
use crate::upkeep::fsck::{FsckOptions, OrphanReason};
use crate::upkeep::gc::GcOptions;

/// Stored chunks of `key`, counted per version (via [`ChunkStore::scan_chunks`]).
pub(super) async fn chunks_by_version(
    backend: &Arc<dyn ChunkStore>,
    key: &str,
) -> BTreeMap<VersionId, u64> {
    let mut out = BTreeMap::new();
    let mut all = backend.scan_chunks();
    while let Some(addr) = all.try_next().await.expect("scan_chunks") {
        if addr.key == key.as_bytes() {
            *out.entry(addr.version).or_insert(0) += 1;
        }
    }
    out
}

/// Starts a put of `key` that streams from a pipe, feeds it `first` bytes and waits until its new version has
/// stored at least `chunks` chunks. Returns the pipe (write more, or drop it to end the stream), the put's task
/// and the new version.
async fn running_put(
    store: &BlobStore,
    backend: &Arc<dyn ChunkStore>,
    key: &str,
    committed: VersionId,
    first: usize,
    chunks: u64,
) -> (
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<crate::base::error::Result<Manifest>>,
    VersionId,
) {
    let (mut w, r) = tokio::io::duplex(16 * KIB as usize);
    let put = tokio::spawn({
        let (store, key) = (store.clone(), key.to_owned());
        async move { store.put_stream(&key, r, &PutOptions::new()).await }
    });
    w.write_all(&data(first, 2)).await.expect("feed");
    let version = wait_for_uncommitted_chunks(backend, key, committed, chunks).await;
    (w, put, version)
}

/// Polls `chunks_by_version` until some version other than `committed` has at least `at_least` chunks.
async fn wait_for_uncommitted_chunks(
    backend: &Arc<dyn ChunkStore>,
    key: &str,
    committed: VersionId,
    at_least: u64,
) -> VersionId {
    // Polls for an event (chunks written by a task that runs in real time), not for time to pass.
    for _ in 0..200 {
        let found = chunks_by_version(backend, key).await;
        if let Some((v, _)) = found
            .iter()
            .find(|(v, n)| **v != committed && **n >= at_least)
        {
            return *v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key}: the running put never stored {at_least} chunks");
}

/// Waits until the running put of `version` has renewed its intent so that it holds at `clock`'s now: its
/// renewals run on real-time timers (every third of the lease), so this is a real wait, of at most that.
async fn wait_for_renewal(
    backend: &Arc<dyn ChunkStore>,
    key: &str,
    version: VersionId,
    clock: &dyn Clock,
) {
    let record = intent_key(&BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version,
    });
    for _ in 0..500 {
        let intent = backend
            .get_record(Namespace::ShardedIntent, &record)
            .await
            .expect("read the intent")
            .and_then(|v| Intent::decode(&v).ok());
        if intent.is_some_and(|i| !i.expired(clock.now_micros())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key}: the running put never renewed its intent");
}

pub async fn gc_reclaims_replaced_and_deleted_versions(backend: Arc<dyn ChunkStore>) {
    let p = prefix("gc-replaced");
    let store = store(
        &backend,
        small_config().with_grace(Duration::from_secs(3600)),
    );
    let (k1, k2) = (format!("{p}replaced"), format!("{p}deleted"));
    let old = store
        .put(&k1, data(200 * KIB as usize, 1), &PutOptions::new())
        .await
        .expect("put");
    let new_data = data(20 * KIB as usize, 2);
    let new = store
        .put(&k1, new_data.clone(), &PutOptions::new())
        .await
        .expect("overwrite");
    store
        .put(&k2, data(100 * KIB as usize, 3), &PutOptions::new())
        .await
        .expect("put");
    store.delete(&k2).await.expect("delete");
    let opts = GcOptions::new().with_prefix(p.clone());

    let r = store.gc(&opts).await.expect("gc");
    assert_eq!(r.reclaim.versions, 0, "inside the grace period: {r:?}");
    assert!(r.reclaim.next_due_micros.is_some(), "{r:?}");
    let r = store
        .gc(&opts.clone().with_grace(Duration::ZERO).with_dry_run(true))
        .await
        .expect("dry run");
    assert_eq!((r.reclaim.versions, r.dry_run), (2, true), "{r:?}");
    assert_eq!(
        chunks_by_version(&backend, &k1).await.len(),
        2,
        "dry run deletes nothing"
    );

    let r = store
        .gc(&opts.clone().with_grace(Duration::ZERO))
        .await
        .expect("gc");
    assert_eq!(r.reclaim.versions, 2, "{r:?}");
    assert!(
        r.reclaim.bytes > 300 * KIB,
        "freed bytes are reported: {r:?}"
    );
    let left = chunks_by_version(&backend, &k1).await;
    assert_eq!(left.keys().copied().collect::<Vec<_>>(), vec![new.version]);
    assert!(!left.contains_key(&old.version));
    assert!(chunks_by_version(&backend, &k2).await.is_empty());
    assert_holds(&store, &k1, &new_data).await;
    let r = store
        .gc(&opts.with_grace(Duration::ZERO))
        .await
        .expect("gc again");
    assert_eq!(r.reclaim.versions, 0, "nothing left: {r:?}");
}

pub async fn gc_reclaims_abandoned_puts(backend: Arc<dyn ChunkStore>) {
    let p = prefix("gc-abandoned");
    let key = format!("{p}blob");
    let lease = Duration::from_millis(400);
    let clock = OffsetClock::new();
    let config = small_config()
        .with_intent_lease(lease)
        .with_clock(clock.clone());
    // The writer and the cleaner are two clients of the backend, as two processes would be (gc never takes
    // over a put of its own process), on one clock.
    let writer = store(
        &(Faulty::new(Arc::clone(&backend)) as Arc<dyn ChunkStore>),
        config.clone(),
    );
    let store = store(&backend, config);
    let kept = data(10_000, 1);
    let committed = store
        .put(&key, kept.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (w, put, abandoned) = running_put(
        &writer,
        &backend,
        &key,
        committed.version,
        200 * KIB as usize,
        10,
    )
    .await;
    let opts = GcOptions::new().with_prefix(p.clone());
    // Stalled for longer than its lease, but alive: it renews, and gc leaves it alone.
    clock.advance(lease * 3 / 2);
    wait_for_renewal(&backend, &key, abandoned, &*clock).await;
    let r = store.gc(&opts).await.expect("gc");
    assert_eq!((r.puts_in_flight, r.abandoned_puts), (1, 0), "{r:?}");
    assert!(
        chunks_by_version(&backend, &key)
            .await
            .contains_key(&abandoned)
    );

    // The writer dies: its intent is no longer renewed and expires; gc takes it over then, or on a backend whose
    // writes may land late (where puts do not claim their intents) once the reclaim queue's commit window has
    // passed too.
    put.abort();
    let _ = put.await;
    drop(w);
    if backend.info().late_writes {
        clock.advance(lease * 2);
        let r = store.gc(&opts).await.expect("gc");
        assert_eq!(
            (r.puts_in_flight, r.abandoned_puts),
            (1, 0),
            "within the hold: {r:?}"
        );
        clock.advance(Duration::from_micros(
            crate::base::timing::COMMIT_WINDOW_MICROS,
        ));
    } else {
        clock.advance(lease * 2);
    }
    let r = store.gc(&opts).await.expect("gc");
    assert_eq!((r.puts_in_flight, r.abandoned_puts), (0, 1), "{r:?}");
    assert!(
        r.abandoned_chunks > 0,
        "progress is recorded at renewals: {r:?}"
    );
    assert_eq!(r.reclaim.versions, 1, "{r:?}");
    let left = chunks_by_version(&backend, &key).await;
    assert_eq!(
        left.keys().copied().collect::<Vec<_>>(),
        vec![committed.version]
    );
    assert_holds(&store, &key, &kept).await;
    let r = store.gc(&opts).await.expect("gc again");
    assert_eq!((r.abandoned_puts, r.stale_intents), (0, 0), "{r:?}");
}

pub async fn put_without_its_lease_does_not_commit(backend: Arc<dyn ChunkStore>) {
    let p = prefix("lease");
    let key = format!("{p}blob");
    let store = store(
        &backend,
        small_config().with_intent_lease(Duration::from_millis(300)),
    );
    let kept = data(10_000, 1);
    let committed = store
        .put(&key, kept.clone(), &PutOptions::new())
        .await
        .expect("put");
    let (mut w, put, running) = running_put(
        &store,
        &backend,
        &key,
        committed.version,
        100 * KIB as usize,
        5,
    )
    .await;
    // Do what gc does to an expired intent: take it over (here: remove it) so that the writer cannot commit.
    let intents = crate::ledger::intent::stored(&*backend, Namespace::ShardedIntent)
        .await
        .expect("scan intents");
    let (record, _) = intents
        .into_iter()
        .find(|(k, _)| k.get(1..17) == Some(&running.to_be_bytes()[..]))
        .expect("the running put has an intent");
    backend
        .delete_record(Namespace::ShardedIntent, &record, &Precondition::None)
        .await
        .expect("take over");
    // Real time for a renewal (every third of the lease) to find the intent gone and stop the writer; without
    // it, the put's claim (or, on a cluster, nothing: a removal by hand does not wait out the takeover hold as
    // gc does) tells. The put must fail.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The writer may already have stopped (its renewal found the intent gone) and closed the pipe.
    let _ = w.write_all(&data(50 * KIB as usize, 3)).await;
    drop(w);
    match put.await.expect("put task") {
        Err(Error::IntentLost { version, .. }) => assert_eq!(version, running),
        other => panic!("expected IntentLost, got {other:?}"),
    }
    assert_holds(&store, &key, &kept).await;
    let left = chunks_by_version(&backend, &key).await;
    assert_eq!(
        left.keys().copied().collect::<Vec<_>>(),
        vec![committed.version],
        "the failed put removed its chunks"
    );
}

pub async fn fsck_reports_damage_and_repairs_only_orphans(backend: Arc<dyn ChunkStore>) {
    let p = prefix("fsck");
    let store = store(&backend, small_config());
    let (a, b, c) = (format!("{p}a"), format!("{p}b"), format!("{p}c"));
    let sizes = [500usize, 200 * KIB as usize, 20 * KIB as usize];
    let mut manifests = Vec::new();
    for (i, (key, size)) in [&a, &b, &c].into_iter().zip(sizes).enumerate() {
        manifests.push(
            store
                .put(key, data(size, i as u64), &PutOptions::new())
                .await
                .expect("put"),
        );
    }
    let opts = FsckOptions::new().with_prefix(p.clone());
    let r = store.fsck(&opts).await.expect("fsck");
    assert_eq!(r.blobs, 3, "{r:?}");
    assert_eq!(r.bytes, sizes.iter().sum::<usize>() as u64);
    assert!(r.damaged.is_empty() && r.orphans.is_empty(), "{r:?}");
    assert_eq!(r.chunks, 50 + 5, "every chunk listed once: {r:?}");

    let blob = |key: &str, version| BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version,
    };
    // b: one bit of chunk 1 flipped in place.
    let Layout::Chunked(lb) = manifests[1].layout() else {
        panic!("b is chunked")
    };
    let bb = blob(&b, manifests[1].version);
    let one = ChunkId {
        salt: lb.salt_of(1),
        index: 1,
    };
    let mut flipped = backend
        .get_chunks(&bb, &[one])
        .await
        .expect("read b")
        .into_iter()
        .next()
        .flatten()
        .expect("chunk 1 of b")
        .to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    backend
        .put_chunks(
            &bb,
            vec![ChunkWrite {
                salt: one.salt,
                index: 1,
                data: Bytes::from(flipped),
            }],
        )
        .await
        .expect("damage b");
    // c: a second copy of chunk 0 under another salt.
    let cb = blob(&c, manifests[2].version);
    let zero = backend
        .get_chunks(&cb, &[ChunkId { salt: 0, index: 0 }])
        .await
        .expect("read c")
        .into_iter()
        .next()
        .flatten()
        .expect("chunk 0 of c");
    backend
        .put_chunks(
            &cb,
            vec![ChunkWrite {
                salt: 5,
                index: 0,
                data: zero,
            }],
        )
        .await
        .expect("stray copy");
    // d: chunks of a version nothing refers to, written long ago.
    let d = format!("{p}d");
    let ghost = VersionId((1u128 << 80) | 7);
    let ghost_chunks = (0..3)
        .map(|i| ChunkWrite {
            salt: i as u32,
            index: i,
            data: Bytes::from(vec![1u8; 100]),
        })
        .collect();
    backend
        .put_chunks(&blob(&d, ghost), ghost_chunks)
        .await
        .expect("orphan chunks");

    let r = store.fsck(&opts).await.expect("fsck");
    let damaged: Vec<(String, Option<VersionId>)> = r
        .damaged
        .iter()
        .map(|d| (String::from_utf8_lossy(&d.key).into_owned(), d.version))
        .collect();
    assert_eq!(
        damaged,
        vec![
            (b.clone(), Some(manifests[1].version)),
            (c.clone(), Some(manifests[2].version))
        ],
        "{r:?}"
    );
    assert!(r.damaged[0].problem.contains("checksum"), "{r:?}");
    assert!(r.damaged[1].problem.contains("salt 5"), "{r:?}");
    assert_eq!(r.orphans.len(), 1, "{r:?}");
    let o = &r.orphans[0];
    assert_eq!(
        (&o.key[..], o.version, o.chunks, o.reason, o.removed),
        (d.as_bytes(), ghost, 3, OrphanReason::Unreferenced, false)
    );

    let r = store
        .fsck(&opts.clone().with_repair(true).with_min_age(Duration::ZERO))
        .await
        .expect("repair");
    assert_eq!(r.orphans.len(), 1);
    assert!(r.orphans[0].removed, "{r:?}");
    assert_eq!(r.orphans_left(), 0);
    let r = store.fsck(&opts).await.expect("fsck after repair");
    assert!(r.orphans.is_empty(), "{r:?}");
    assert_eq!(
        r.damaged.len(),
        2,
        "repair touches nothing but orphans: {r:?}"
    );
    assert!(matches!(
        store.get(&b).await,
        Err(Error::ChecksumMismatch { chunk: 1, .. })
    ));
    assert_holds(&store, &c, &data(sizes[2], 2)).await;
}

/// A blob put with a ttl reads until its expiry and is then not found at once (get, head, listings, and a
/// delete conditional on its version, which fails with NotFound and deletes nothing) while a blob without one
/// stays; gc deletes it (a dry run only counts it) and, past the grace period, reclaims its chunks; fsck then
/// finds nothing. A ttl of zero or beyond the format's range changes
/// nothing. The clock is the test clock, jumped past the expiry.
pub async fn expired_blobs_read_as_not_found_and_gc_reclaims_them(backend: Arc<dyn ChunkStore>) {
    let p = prefix("ttl");
    let clock = OffsetClock::new();
    let store = store(&backend, small_config().with_clock(clock.clone()));
    let (short, kept) = (format!("{p}short"), format!("{p}kept"));
    let hour = Duration::from_secs(3600);
    let mut versions = Vec::new();
    for size in [10, 20_000, 100_000] {
        let key = format!("{short}{size}");
        let m = store
            .put(&key, data(size, 1), &PutOptions::new().with_ttl(hour))
            .await
            .expect("put with a ttl");
        let expires = m.expires_micros.expect("the manifest records the expiry");
        assert_eq!(expires, m.created_micros + 3_600_000_000);
        assert_eq!(
            store.head(&key).await.expect("head").expires_micros,
            Some(expires)
        );
        assert_eq!(
            store.get(&key).await.expect("readable before it expires"),
            data(size, 1)
        );
        versions.push(m.version);
    }
    store
        .put(&kept, data(20_000, 2), &PutOptions::new())
        .await
        .expect("put");
    for bad in [Duration::ZERO, Duration::from_secs(u64::MAX / 1_000_000)] {
        let e = store
            .put(&kept, data(10, 3), &PutOptions::new().with_ttl(bad))
            .await
            .expect_err("a ttl out of range");
        assert!(
            matches!(&e, Error::InvalidArgument { what, .. } if *what == "ttl"),
            "{e}"
        );
    }
    assert_eq!(store.get(&kept).await.expect("unchanged"), data(20_000, 2));

    clock.advance(hour + Duration::from_secs(1));
    for (size, version) in [10, 20_000, 100_000].into_iter().zip(versions) {
        let key = format!("{short}{size}");
        let deleted = store.delete_version(&key, version).await;
        assert!(
            matches!(deleted, Err(Error::NotFound { .. })),
            "{key}: {deleted:?}"
        );
        assert!(
            matches!(store.get(&key).await, Err(Error::NotFound { .. })),
            "{key}"
        );
        assert!(
            matches!(store.head(&key).await, Err(Error::NotFound { .. })),
            "{key}"
        );
    }
    let listed: Vec<_> = store
        .list(p.as_bytes())
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        listed,
        [Bytes::from(kept.clone())],
        "only the blob without a ttl is listed"
    );

    let opts = GcOptions::new()
        .with_prefix(p.clone())
        .with_grace(Duration::ZERO);
    let dry = store
        .gc(&opts.clone().with_dry_run(true))
        .await
        .expect("gc dry run");
    assert_eq!(
        dry.expired, 3,
        "the conditional deletes left them to gc: {dry:?}"
    );
    let chunked = store.head(&kept).await.expect("head").stored_bytes() > 0;
    let before = chunks_by_version(&backend, &format!("{short}100000")).await;
    assert!(
        !before.is_empty(),
        "the expired blob's chunks are still there"
    );
    // The expiry index holds the three, and its pass alone deletes them; gc's pass over every manifest then
    // finds none.
    let indexed = crate::ledger::reclaim::stored_in(&*backend, Queue::Expiry)
        .await
        .expect("index")
        .into_iter()
        .filter_map(|(k, v)| crate::ledger::reclaim::decode_expiry(&k, &v).ok())
        .filter(|(_, _, key)| key.starts_with(p.as_bytes()))
        .count();
    assert_eq!(indexed, 3);
    let inner = &*store.inner;
    let delete = |key: Bytes, raw: Bytes| -> futures::future::BoxFuture<'_, crate::Result<bool>> {
        Box::pin(async move { crate::store::delete::delete_expired(inner, &key, raw).await })
    };
    let held = Held::all();
    let by_index = crate::ledger::reclaim::run_expiry(
        inner,
        clock.now_micros(),
        false,
        p.as_bytes(),
        &held,
        crate::ledger::reclaim::AtOnce::DEFAULT,
        &delete,
    )
    .await
    .expect("the index's pass");
    assert_eq!(by_index.expired, 3, "{by_index:?}");
    let report = store.gc(&opts).await.expect("gc");
    assert_eq!(report.expired, 0, "{report:?}");
    assert!(
        report.reclaim.versions >= 2,
        "the chunked expired versions reclaimed: {report:?}"
    );
    for size in [20_000, 100_000] {
        let left = chunks_by_version(&backend, &format!("{short}{size}")).await;
        assert!(left.is_empty(), "{size}: {left:?}");
    }
    assert_eq!(store.gc(&opts).await.expect("gc again").expired, 0);
    assert_eq!(
        store
            .get(&kept)
            .await
            .expect("the blob without a ttl stays"),
        data(20_000, 2)
    );
    assert!(
        chunked,
        "the kept blob is chunked, so its chunks were spared"
    );
    let r = store
        .fsck(&FsckOptions::new().with_prefix(p.clone()))
        .await
        .expect("fsck");
    assert_eq!(r.blobs, 1, "{r:?}");
    assert!(
        r.damaged.is_empty() && r.orphans.is_empty() && r.awaiting_reclaim == 0,
        "{r:?}"
    );
}

/// A store written by an earlier build keeps its reclaim entries and intents in one partition each
/// ([`Namespace::Reclaim`], [`Namespace::Intent`], keys without a shard): gc drains them as it always did. A
/// version queued there is reclaimed; an abandoned put whose expired intent is there is taken over and its chunks
/// reclaimed; a current blob is untouched, and nothing of the case is left in either namespace.
pub async fn an_earlier_builds_queue_and_intents_are_drained(backend: Arc<dyn ChunkStore>) {
    use crate::format::manifest::ManifestBody;
    use crate::ledger::intent::legacy_intent_key;
    use crate::ledger::reclaim::ReclaimEntry;

    let p = prefix("earlier");
    let store = store(&backend, small_config());
    let (queued, abandoned, kept) = (
        format!("{p}queued"),
        format!("{p}abandoned"),
        format!("{p}kept"),
    );
    let kept_data = data(100 * KIB as usize, 9);
    store
        .put(&kept, kept_data.clone(), &PutOptions::new())
        .await
        .expect("put");
    // Two chunked versions that this build's records know nothing of: their manifests are removed by hand.
    let mut gone = Vec::new();
    for key in [&queued, &abandoned] {
        let m = store
            .put(key, data(100 * KIB as usize, 1), &PutOptions::new())
            .await
            .expect("put");
        backend
            .delete_record(Namespace::Manifest, key.as_bytes(), &Precondition::None)
            .await
            .expect("remove the manifest");
        let ManifestBody::Chunked {
            layout,
            stored_bytes,
            ..
        } = &m.body
        else {
            panic!("{key}: 100 KiB is chunked here");
        };
        let blob = BlobRef {
            key: Bytes::from(key.clone()),
            version: m.version,
        };
        gone.push((blob, layout.salt_count, layout.chunk_count, *stored_bytes));
    }
    let hour = 3_600_000_000;
    let now = crate::base::version::now_micros();
    let (blob, salt_count, chunk_count, stored_bytes) = gone[0].clone();
    let entry = ReclaimEntry {
        due_micros: now - hour,
        version: blob.version,
        key: blob.key.clone(),
        salt_count,
        chunk_count,
        stored_bytes,
    };
    let entry_key = entry.legacy_key();
    backend
        .put_record(
            Namespace::Reclaim,
            &entry_key,
            entry.encode().1,
            &Precondition::None,
        )
        .await
        .expect("an earlier build's queue entry");
    let (blob, salt_count, chunks, stored_bytes) = gone[1].clone();
    let intent = Intent {
        started_micros: now - 2 * hour,
        expires_micros: now - hour,
        salt_count,
        chunks,
        stored_bytes,
    };
    let intent_record = legacy_intent_key(&blob);
    backend
        .put_record(
            Namespace::Intent,
            &intent_record,
            intent.encode(),
            &Precondition::None,
        )
        .await
        .expect("an earlier build's intent");
    for key in [&queued, &abandoned] {
        assert_eq!(chunks_by_version(&backend, key).await.len(), 1, "{key}");
    }

    let r = store
        .gc(&GcOptions::new()
            .with_prefix(p.clone())
            .with_grace(Duration::ZERO))
        .await
        .expect("gc");
    assert_eq!((r.abandoned_puts, r.reclaim.versions), (1, 2), "{r:?}");
    for key in [&queued, &abandoned] {
        assert!(
            chunks_by_version(&backend, key).await.is_empty(),
            "{key}: reclaimed"
        );
    }
    assert_holds(&store, &kept, &kept_data).await;
    assert_eq!(chunks_by_version(&backend, &kept).await.len(), 1);
    let left = |ns, key: Vec<u8>| {
        let backend = Arc::clone(&backend);
        async move { backend.get_record(ns, &key).await.expect("read") }
    };
    assert_eq!(left(Namespace::Reclaim, entry_key).await, None, "drained");
    assert_eq!(
        left(Namespace::Intent, intent_record).await,
        None,
        "taken over"
    );
}
