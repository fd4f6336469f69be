//! Concurrent writers and readers on one hot key and on a few, checked by the history checker.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::ViolationKind;
use saltblob_check::scenario::hot_keys;
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
    println!(
        "rocksdb, manifest before chunks: checker: {}",
        outcome.report.summary()
    );
    assert!(
        outcome.report.count(ViolationKind::Corrupt) > 0,
        "not caught: {}",
        outcome.report.summary()
    );
}
