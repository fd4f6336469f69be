//! Concurrent writers and readers on one hot key and on a few, and keeping clients (kept versions read and
//! removed by id), checked by the history checker.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::ViolationKind;
use saltblob_check::broken::DropsKept;
use saltblob_check::scenario::{hot_keys, kept_versions, kept_versions_with_promotions};
use saltblob_core::BlobStore;
use saltblob_core::conformance::{orphans_after_gc, small_config};

async fn checked(keys: usize) {
    let fixture = crate::conformance::fixture().await;
    let store = BlobStore::new(
        Arc::clone(&fixture.backend),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let outcome = hot_keys(&store, "hot/", keys, 8, 300 << 10, Duration::from_secs(3)).await;
    outcome.assert_clean(&format!("rocksdb, {keys} hot key(s)"));
    // Every replaced version was queued before its replacement (compare-and-set commits): gc leaves nothing.
    let orphans = orphans_after_gc(&store, "hot/").await;
    assert_eq!(orphans, vec![], "no orphan after gc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_and_readers_on_one_hot_key() {
    checked(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_and_readers_on_a_few_hot_keys() {
    checked(3).await;
}

/// The same load on a deliberately broken backend, RocksDB wrapped so that a manifest commits before its
/// chunks are written: the checker must flag the reads that see a manifest without its chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manifest_committed_before_its_chunks_is_caught() {
    let fixture = crate::conformance::fixture().await;
    let broken = saltblob_check::broken::ManifestFirst::new(Arc::clone(&fixture.backend));
    let store = BlobStore::new(Arc::new(broken), small_config()).expect("store");
    let outcome = hot_keys(&store, "broken/", 1, 8, 300 << 10, Duration::from_secs(3)).await;
    outcome.assert_caught("rocksdb, manifest before chunks", ViolationKind::Corrupt);
}

/// Keeping clients on a few hot keys (puts that keep what they replace, gets and removals by version id) while a
/// background gc reclaims with a short grace period: no kept version is lost or read wrong, no removed one comes
/// back, and gc then leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kept_versions_outlive_gc_and_removed_ones_stay_removed() {
    let fixture = crate::conformance::fixture().await;
    let store = BlobStore::new(
        Arc::clone(&fixture.backend),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let outcome = kept_versions(&store, "kept/", 3, 8, 300 << 10, Duration::from_secs(3)).await;
    outcome.assert_clean("rocksdb, kept versions");
    assert!(outcome.stats.removals > 0, "{}", outcome.stats);
    let orphans = orphans_after_gc(&store, "kept/").await;
    assert_eq!(orphans, vec![], "no orphan after gc");
}

/// The same load with removals of current versions, which make kept versions current again, and conditional puts
/// that keep (`kept_versions_with_promotions`): promotions race with keeping puts, gets by version and refused
/// keeping puts, and no version may be lost or come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kept_versions_with_promotions_are_clean() {
    let fixture = crate::conformance::fixture().await;
    let store = BlobStore::new(
        Arc::clone(&fixture.backend),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let outcome = kept_versions_with_promotions(
        &store,
        "kept-promoted/",
        3,
        8,
        300 << 10,
        Duration::from_secs(3),
    )
    .await;
    outcome.assert_clean("rocksdb, kept versions with promotions");
}

/// The same load on RocksDB wrapped so that half of the kept-version records are silently not written: the
/// checker must report the versions that keeping puts lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kept_versions_dropped_by_the_backend_are_caught() {
    let fixture = crate::conformance::fixture().await;
    let broken = Arc::new(DropsKept::new(Arc::clone(&fixture.backend), 0.5, 1));
    let store = BlobStore::new(
        broken.clone(),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let outcome = kept_versions(
        &store,
        "kept-broken/",
        2,
        8,
        300 << 10,
        Duration::from_secs(3),
    )
    .await;
    let label = format!("rocksdb, {} kept records dropped", broken.dropped());
    outcome.assert_caught(&label, ViolationKind::LostVersion);
}
