//! Concurrent writers and readers on one hot key and on a few, checked by the history checker.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::scenario::hot_keys;
use saltblob_core::BlobStore;
use saltblob_core::conformance::small_config;

async fn checked(keys: usize) {
    let fixture = crate::conformance::fixture().await;
    let store = BlobStore::new(
        Arc::clone(&fixture.backend),
        small_config().with_grace(Duration::from_millis(300)),
    )
    .expect("store");
    let outcome = hot_keys(&store, "hot/", keys, 8, 300 << 10, Duration::from_secs(3)).await;
    println!(
        "rocksdb, {keys} hot key(s): {}; checker: {}",
        outcome.stats,
        outcome.report.summary()
    );
    assert!(
        outcome.report.is_clean(),
        "{:#?}",
        outcome.report.violations
    );
    assert!(
        outcome.stats.puts > 0 && outcome.stats.gets_with_value > 0,
        "{}",
        outcome.stats
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_and_readers_on_one_hot_key() {
    checked(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_and_readers_on_a_few_hot_keys() {
    checked(3).await;
}
