//! Concurrent writers and readers on one hot key and on a few, and keeping clients (kept versions read and
//! removed by id), against the cluster, checked by the history checker.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::scenario::{hot_keys, kept_versions_keeping_only};
use saltblob_core::conformance::{orphans_after_gc, prefix, repair_now, small_config};
use saltblob_core::{BlobStore, OrphanReason};

async fn checked(keys: usize) {
    let store = BlobStore::new(
        Arc::new(crate::connect("").await),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let p = prefix("hot");
    let outcome = hot_keys(&store, &p, keys, 8, 300 << 10, Duration::from_secs(4)).await;
    outcome.assert_clean(&format!("cql, {keys} hot key(s)"));
    // Plain commits do not learn what they replaced: a version committed between another put's read of the
    // manifest and its write is left unqueued (docs/guarantees.md). Such orphans are unreferenced, and
    // `fsck --repair` removes them.
    let orphans = orphans_after_gc(&store, &p).await;
    println!(
        "cql, {keys} hot key(s): {} version(s) left by racing commits",
        orphans.len()
    );
    assert!(
        orphans
            .iter()
            .all(|o| o.reason == OrphanReason::Unreferenced),
        "{orphans:?}"
    );
    let repaired = store.fsck(&repair_now(&p)).await.expect("fsck --repair");
    assert_eq!(repaired.orphans_left(), 0, "{repaired:?}");
    assert_eq!(orphans_after_gc(&store, &p).await, vec![], "repaired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn writers_and_readers_on_one_hot_key() {
    checked(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn writers_and_readers_on_a_few_hot_keys() {
    checked(3).await;
}

/// Keeping clients on a few hot keys as S3's versioned buckets write (every put keeps what it replaces; gets by
/// version id; removals of kept and current versions) while a background gc reclaims with a short grace period:
/// no kept version is lost or read wrong, and no removed one comes back. Plain writes are left out: on Cassandra a
/// plain write and a keeping one (a lightweight transaction) on one key do not mix (see
/// `scenario::kept_versions_keeping_only`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn kept_versions_outlive_gc() {
    let store = BlobStore::new(
        Arc::new(crate::connect("").await),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let p = prefix("kept");
    let outcome =
        kept_versions_keeping_only(&store, &p, 3, 8, 300 << 10, Duration::from_secs(4)).await;
    outcome.assert_clean("cql, kept versions");
    assert!(outcome.stats.removals > 0, "{}", outcome.stats);
    let orphans = orphans_after_gc(&store, &p).await;
    assert!(
        orphans
            .iter()
            .all(|o| o.reason == OrphanReason::Unreferenced),
        "{orphans:?}"
    );
    let repaired = store.fsck(&repair_now(&p)).await.expect("fsck --repair");
    assert_eq!(repaired.orphans_left(), 0, "{repaired:?}");
}
