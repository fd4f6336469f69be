//! Kept versions ([`PutOptions::keep_replaced`]): the versions a put keeps stay readable by id and their chunks
//! stay through gc and `fsck --repair`; removing one reclaims it, and removing the current one makes the newest
//! kept one current (S3's bucket versioning on the store's own versions).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::gc::chunks_by_version;
use super::segments::put_segments;
use super::{data, prefix, repair_now, small_config, store};
use crate::backend::{ChunkStore, Namespace};
use crate::base::clock::OffsetClock;
use crate::base::error::Error;
use crate::base::version::VersionId;
use crate::ledger::kept;
use crate::state::config::{GetOptions, PutOptions};
use crate::store::{BlobStore, RemovedVersion};
use crate::upkeep::fsck::FsckOptions;
use crate::upkeep::gc::GcOptions;

/// Reads version `version` of `key` whole.
async fn read_version(store: &BlobStore, key: &str, version: VersionId) -> crate::Result<Bytes> {
    store
        .get_with(key, &GetOptions::new().with_version(version))
        .await
}

/// The versions `store` lists for `key`, newest first, with whether each is current.
async fn listed(store: &BlobStore, key: &str) -> Vec<(VersionId, bool)> {
    store
        .versions(key)
        .await
        .expect("versions")
        .into_iter()
        .map(|v| {
            let m = v.manifest.expect("kept manifest decodes");
            assert_eq!(m.version, v.version);
            (v.version, v.current)
        })
        .collect()
}

/// A case's prefix (named after `name`), store, key and options of a keeping put.
fn case(backend: &Arc<dyn ChunkStore>, name: &str) -> (String, BlobStore, String, PutOptions) {
    let p = prefix(name);
    let key = format!("{p}doc");
    let store = store(backend, small_config());
    (p, store, key, PutOptions::new().with_keep_replaced(true))
}

/// fsck of the keys under `p` finds no damage and no orphan.
async fn assert_fsck_clean(store: &BlobStore, p: &str) {
    let report = store
        .fsck(&FsckOptions::new().with_prefix(p.to_owned()))
        .await
        .expect("fsck");
    assert!(
        report.damaged.is_empty() && report.orphans.is_empty(),
        "{report:?}"
    );
}

/// gc with no grace over `p`: everything due is reclaimed now.
async fn gc_now(store: &BlobStore, p: &str) {
    let opts = GcOptions::new()
        .with_grace(Duration::ZERO)
        .with_prefix(p.to_owned());
    store.gc(&opts).await.expect("gc");
}

pub async fn kept_versions_read_back_and_outlive_gc_and_fsck(backend: Arc<dyn ChunkStore>) {
    let (p, store, key, keep) = case(&backend, "kept");
    // Chunked, salted, inline, then a composed version: each kept by the put after it.
    let values = [data(200_000, 1), data(30_000, 2), data(300, 3)];
    let mut versions = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let opts = if i == 0 {
            PutOptions::new()
        } else {
            keep.clone()
        };
        versions.push(store.put(&key, value.clone(), &opts).await.expect("put"));
    }
    let parts = [data(9000, 4), data(5000, 5)];
    let segments = put_segments(&store, &key, &parts, Duration::from_secs(3600)).await;
    let composed = store
        .compose(&key, &segments, &keep)
        .await
        .expect("compose");
    let last = data(100, 6);
    let current = store.put(&key, last.clone(), &keep).await.expect("put");

    gc_now(&store, &p).await;
    let mut expected: Vec<(VersionId, bool)> =
        vec![(current.version, true), (composed.version, false)];
    expected.extend(versions.iter().rev().map(|m| (m.version, false)));
    assert_eq!(
        listed(&store, &key).await,
        expected,
        "newest first, current first"
    );
    for (m, value) in versions.iter().zip(&values) {
        assert_eq!(
            read_version(&store, &key, m.version).await.expect("kept"),
            value
        );
    }
    let whole: Vec<u8> = parts.concat();
    assert_eq!(
        &read_version(&store, &key, composed.version)
            .await
            .expect("composed")[..],
        &whole[..]
    );
    let range = GetOptions::new()
        .with_version(versions[0].version)
        .with_range(1000..5000u64);
    assert_eq!(
        store.get_with(&key, &range).await.expect("range"),
        values[0].slice(1000..5000)
    );
    assert_eq!(
        read_version(&store, &key, current.version)
            .await
            .expect("current"),
        last
    );
    assert_eq!(
        store.get(&key).await.expect("get"),
        last,
        "reads name the current version by default"
    );
    let stored = chunks_by_version(&backend, &key).await;
    for m in &versions[..2] {
        assert!(
            stored.contains_key(&m.version),
            "chunks of kept {} stay: {stored:?}",
            m.version
        );
    }
    for s in &segments {
        assert!(
            stored.contains_key(&s.version),
            "the composed version's segments stay"
        );
    }
    let report = store.fsck(&repair_now(&p)).await.expect("fsck --repair");
    assert!(
        report.damaged.is_empty() && report.orphans.is_empty(),
        "{report:?}"
    );
    assert_eq!(
        stored,
        chunks_by_version(&backend, &key).await,
        "fsck --repair removed nothing"
    );

    // A version the key never had.
    let missing = VersionId(current.version.0 + 1);
    let err = read_version(&store, &key, missing)
        .await
        .expect_err("no such version");
    assert!(matches!(err, Error::VersionNotFound { .. }), "{err}");
    let err = store
        .remove_version(&key, missing)
        .await
        .expect_err("no such version");
    assert!(matches!(err, Error::VersionNotFound { .. }), "{err}");

    // A plain put keeps nothing: the version it replaces is reclaimed, the kept ones stay.
    let plain = store
        .put(&key, data(50_000, 7), &PutOptions::new())
        .await
        .expect("put");
    gc_now(&store, &p).await;
    assert_eq!(listed(&store, &key).await[0], (plain.version, true));
    assert_eq!(
        listed(&store, &key).await.len(),
        5,
        "the replaced current one went"
    );
    assert!(matches!(
        read_version(&store, &key, current.version).await,
        Err(Error::VersionNotFound { .. })
    ));
    assert_eq!(
        read_version(&store, &key, versions[1].version)
            .await
            .expect("kept"),
        values[1]
    );
}

pub async fn removing_versions_reclaims_them_and_promotes_the_newest_kept(
    backend: Arc<dyn ChunkStore>,
) {
    let (p, store, key, keep) = case(&backend, "kept-remove");
    let values = [data(100_000, 1), data(60_000, 2), data(40_000, 3)];
    let mut v = Vec::new();
    for value in &values {
        v.push(store.put(&key, value.clone(), &keep).await.expect("put"));
    }

    // A kept version: removed, then reclaimed.
    assert_eq!(
        store
            .remove_version(&key, v[0].version)
            .await
            .expect("remove"),
        RemovedVersion::Kept
    );
    assert!(matches!(
        read_version(&store, &key, v[0].version).await,
        Err(Error::VersionNotFound { .. })
    ));
    gc_now(&store, &p).await;
    let stored = chunks_by_version(&backend, &key).await;
    assert!(
        !stored.contains_key(&v[0].version),
        "removed version reclaimed: {stored:?}"
    );
    assert!(stored.contains_key(&v[1].version) && stored.contains_key(&v[2].version));

    // The current version: the newest kept one takes its place.
    assert_eq!(
        store
            .remove_version(&key, v[2].version)
            .await
            .expect("remove current"),
        RemovedVersion::CurrentPromoting(v[1].version)
    );
    assert_eq!(store.get(&key).await.expect("get"), values[1]);
    assert_eq!(listed(&store, &key).await, vec![(v[1].version, true)]);
    gc_now(&store, &p).await;
    let stored = chunks_by_version(&backend, &key).await;
    assert_eq!(
        stored.keys().copied().collect::<Vec<_>>(),
        vec![v[1].version],
        "{stored:?}"
    );
    assert_eq!(
        store.get(&key).await.expect("promoted version reads whole"),
        values[1]
    );

    // The last one: the key holds nothing.
    assert_eq!(
        store
            .remove_version(&key, v[1].version)
            .await
            .expect("remove"),
        RemovedVersion::Current
    );
    assert!(matches!(store.get(&key).await, Err(Error::NotFound { .. })));
    assert!(store.versions(&key).await.expect("versions").is_empty());
    gc_now(&store, &p).await;
    assert!(chunks_by_version(&backend, &key).await.is_empty());

    // An expired version is gone: a keeping put over it keeps nothing, and it is reclaimed.
    let ttl = PutOptions::new().with_ttl(Duration::from_millis(50));
    let expired = store.put(&key, data(20_000, 8), &ttl).await.expect("put");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let m = store.put(&key, data(10, 9), &keep).await.expect("put");
    assert_eq!(listed(&store, &key).await, vec![(m.version, true)]);
    gc_now(&store, &p).await;
    let stored = chunks_by_version(&backend, &key).await;
    assert!(!stored.contains_key(&expired.version), "{stored:?}");
}

pub async fn a_kept_copy_of_the_current_version_is_that_version(backend: Arc<dyn ChunkStore>) {
    let (p, store, key, keep) = case(&backend, "kept-copy");
    let old = store.put(&key, data(20_000, 1), &keep).await.expect("put");
    let value = data(30_000, 2);
    let current = store.put(&key, value.clone(), &keep).await.expect("put");
    // What a keeping commit that failed after its kept record leaves: a kept copy of the current version.
    let raw = backend
        .get_record(Namespace::Manifest, key.as_bytes())
        .await
        .expect("read")
        .expect("manifest");
    kept::keep(&store.inner, key.as_bytes(), current.version, raw)
        .await
        .expect("keep");
    assert_eq!(
        listed(&store, &key).await,
        vec![(current.version, true), (old.version, false)],
        "listed once, as current"
    );
    // A plain put over it keeps nothing, yet the copy keeps its chunks (gc never reclaims what a record keeps).
    store
        .put(&key, data(10, 3), &PutOptions::new())
        .await
        .expect("put");
    gc_now(&store, &p).await;
    assert_eq!(
        read_version(&store, &key, current.version)
            .await
            .expect("kept copy"),
        value
    );
    assert_eq!(
        store
            .remove_version(&key, current.version)
            .await
            .expect("remove"),
        RemovedVersion::Kept
    );
    gc_now(&store, &p).await;
    let stored = chunks_by_version(&backend, &key).await;
    assert!(
        !stored.contains_key(&current.version) && stored.contains_key(&old.version),
        "{stored:?}"
    );
    assert_fsck_clean(&store, &p).await;
}

pub async fn concurrent_keeping_puts_keep_every_version(backend: Arc<dyn ChunkStore>) {
    let (p, store, key, keep) = case(&backend, "kept-race");
    let first = store
        .put(&key, data(5000, 0), &PutOptions::new())
        .await
        .expect("put");
    let puts = (1..=12u64).map(|i| {
        let (store, key, keep) = (store.clone(), key.clone(), keep.clone());
        tokio::spawn(async move {
            let value = data(5000 + i as usize, i);
            let m = store.put(&key, value.clone(), &keep).await.expect("put");
            (m.version, value)
        })
    });
    let mut written = vec![(first.version, data(5000, 0))];
    for put in futures::future::join_all(puts).await {
        written.push(put.expect("task"));
    }
    gc_now(&store, &p).await;
    let versions = listed(&store, &key).await;
    assert_eq!(
        versions.len(),
        written.len(),
        "every version kept or current: {versions:?}"
    );
    assert_eq!(versions.iter().filter(|(_, current)| *current).count(), 1);
    for (version, value) in &written {
        assert_eq!(
            &read_version(&store, &key, *version).await.expect("read"),
            value
        );
    }
    assert_fsck_clean(&store, &p).await;
}

pub async fn concurrent_removals_of_every_version_leave_none(backend: Arc<dyn ChunkStore>) {
    let (p, store, key, keep) = case(&backend, "kept-removals");
    for round in 0..3u64 {
        let mut versions = Vec::new();
        for i in 0..6u64 {
            let m = store
                .put(&key, data(3000, round * 10 + i), &keep)
                .await
                .expect("put");
            versions.push(m.version);
        }
        // Every version removed at once, as S3 clients empty a versioned bucket: the current one's removal
        // makes a kept one current while that one is being removed.
        let removals = versions.iter().map(|v| {
            let (store, key, v) = (store.clone(), key.clone(), *v);
            tokio::spawn(async move {
                match store.remove_version(&key, v).await {
                    Ok(_) | Err(Error::VersionNotFound { .. }) => {}
                    Err(e) => panic!("remove {v}: {e}"),
                }
            })
        });
        for r in futures::future::join_all(removals).await {
            r.expect("task");
        }
        let left = listed(&store, &key).await;
        assert!(
            left.is_empty(),
            "round {round}: removed versions came back: {left:?}"
        );
        assert!(matches!(store.get(&key).await, Err(Error::NotFound { .. })));
    }
    gc_now(&store, &p).await;
    assert!(chunks_by_version(&backend, &key).await.is_empty());
}

/// [`BlobStore::update_version_metadata`]: a kept version's metadata changes in place (its id, bytes and
/// creation time stay; the other versions are untouched), as the current one's does; a version the key does not
/// have is `VersionNotFound`; a kept version made current carries its changed metadata.
pub async fn kept_versions_change_their_metadata_in_place(backend: Arc<dyn ChunkStore>) {
    let (p, store, key, keep) = case(&backend, "kept-metadata");
    let mut tagged = keep.clone();
    tagged.metadata.insert("tag".to_owned(), "one".to_owned());
    let v1 = store
        .put(&key, data(70_000, 1), &tagged)
        .await
        .expect("put");
    let v2 = store.put(&key, data(30, 2), &keep).await.expect("put");

    let changed = store
        .update_version_metadata(&key, v1.version, |m| {
            m.insert("acl".to_owned(), "public-read".to_owned());
        })
        .await
        .expect("change a kept version");
    assert_eq!(
        (changed.version, changed.created_micros, changed.size),
        (v1.version, v1.created_micros, v1.size)
    );
    let read = store.head_version(&key, v1.version).await.expect("head");
    assert_eq!(
        read.metadata.get("acl").map(String::as_str),
        Some("public-read")
    );
    assert_eq!(read.metadata.get("tag").map(String::as_str), Some("one"));
    assert_eq!(
        read_version(&store, &key, v1.version).await.expect("read"),
        data(70_000, 1),
        "the bytes stay"
    );
    let current = store.head(&key).await.expect("head");
    assert_eq!(
        (current.version, current.metadata.get("acl")),
        (v2.version, None)
    );
    store
        .update_version_metadata(&key, v2.version, |m| {
            m.insert("acl".to_owned(), "private".to_owned());
        })
        .await
        .expect("change the current version");
    let current = store.head(&key).await.expect("head");
    assert_eq!(
        current.metadata.get("acl").map(String::as_str),
        Some("private")
    );
    assert!(matches!(
        store
            .update_version_metadata(&key, VersionId(v2.version.0 + 1), |_| {})
            .await,
        Err(Error::VersionNotFound { .. })
    ));

    // Promoted, it carries the change; gc and fsck keep it whole.
    assert_eq!(
        store
            .remove_version(&key, v2.version)
            .await
            .expect("remove"),
        RemovedVersion::CurrentPromoting(v1.version)
    );
    let current = store.head(&key).await.expect("head");
    assert_eq!(
        (
            current.version,
            current.metadata.get("acl").map(String::as_str)
        ),
        (v1.version, Some("public-read"))
    );
    gc_now(&store, &p).await;
    assert_eq!(store.get(&key).await.expect("get"), data(70_000, 1));
    assert_fsck_clean(&store, &p).await;
}

/// A put that read a version as current keeps it with a record issued before the version was replaced and
/// removed, which lands after the removal (its commit then fails or retries): the version stays removed, gc
/// reclaims it, and fsck finds nothing. The removal's marker stays twenty minutes (past any such record), then the
/// reclaim pass deletes it with that record. The clock is the test clock, jumped past that.
pub async fn a_removed_version_stays_removed_when_an_earlier_kept_record_lands(
    backend: Arc<dyn ChunkStore>,
) {
    let p = prefix("kept-late");
    let key = format!("{p}doc");
    let clock = OffsetClock::new();
    let store = store(&backend, small_config().with_clock(clock.clone()));
    let keep = PutOptions::new().with_keep_replaced(true);
    let old = store.put(&key, data(50_000, 1), &keep).await.expect("put");
    let record = backend
        .get_record(Namespace::Manifest, key.as_bytes())
        .await
        .expect("read")
        .expect("manifest");
    let current = store.put(&key, data(20, 2), &keep).await.expect("put");
    assert_eq!(
        store
            .remove_version(&key, old.version)
            .await
            .expect("remove"),
        RemovedVersion::Kept
    );
    // The late record of the put that read `old` as current.
    kept::keep(&store.inner, key.as_bytes(), old.version, record)
        .await
        .expect("late keep");
    assert!(matches!(
        read_version(&store, &key, old.version).await,
        Err(Error::VersionNotFound { .. })
    ));
    assert!(matches!(
        store.remove_version(&key, old.version).await,
        Err(Error::VersionNotFound { .. })
    ));
    assert_eq!(listed(&store, &key).await, vec![(current.version, true)]);
    gc_now(&store, &p).await;
    let stored = chunks_by_version(&backend, &key).await;
    assert!(!stored.contains_key(&old.version), "reclaimed: {stored:?}");
    assert_fsck_clean(&store, &p).await;

    // The marker stays until the pass finds it twenty minutes old, then goes with the late record.
    let markers = |r: crate::upkeep::gc::GcReport| r.reclaim.removal_markers;
    let gc = GcOptions::new().with_prefix(p.clone());
    assert_eq!(markers(store.gc(&gc).await.expect("gc")), 0);
    clock.advance(Duration::from_secs(21 * 60));
    assert_eq!(markers(store.gc(&gc).await.expect("gc")), 1);
    let left = backend
        .scan_records(
            Namespace::Kept,
            &kept::record_key(key.as_bytes(), old.version),
            None,
            10,
        )
        .await
        .expect("scan");
    assert!(
        left.is_empty(),
        "the late record went with the marker: {left:?}"
    );
    assert!(matches!(
        read_version(&store, &key, old.version).await,
        Err(Error::VersionNotFound { .. })
    ));
    assert_eq!(store.get(&key).await.expect("get"), data(20, 2));
}
