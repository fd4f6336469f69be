//! The cluster's time: a node's `now()` is this machine's within a round trip, and gc and reclaim refuse to run
//! in a process whose clock is off the cluster's by more than the margin (a runner 12 minutes ahead would reclaim
//! versions before their grace, and take over live puts' intents). A test cannot move this machine's clock, so
//! the skew is made by a layer that reads the node's time and moves it back 12 minutes, while the store's clock
//! jumps 12 minutes forward (the replaced version then looks due). A writer as far off refuses plain writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use saltblob_core::backend::ChunkStore;
use saltblob_core::conformance::{data, small_config};
use saltblob_core::layer::ChunkStoreLayer;
use saltblob_core::{BlobStore, Clock, GcOptions, OffsetClock, PutOptions, SystemClock};
use saltblob_cql::CqlStore;

use crate::connect;

/// The cluster as a process 12 minutes ahead of it sees it: its time read from the node, then moved back.
#[derive(Debug)]
struct ClusterBehind {
    inner: Arc<CqlStore>,
    by_micros: u64,
    skewed: AtomicBool,
}

#[async_trait::async_trait]
impl ChunkStoreLayer for ClusterBehind {
    fn inner(&self) -> &dyn ChunkStore {
        &*self.inner
    }

    async fn cluster_time(&self) -> saltblob_core::Result<Option<u64>> {
        let node = ChunkStore::cluster_time(&*self.inner).await?;
        let back = if self.skewed.load(Ordering::Relaxed) {
            self.by_micros
        } else {
            0
        };
        Ok(node.map(|t| t.saturating_sub(back)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn gc_reclaim_and_writes_refuse_a_clock_twelve_minutes_ahead_of_the_clusters() {
    let backend = Arc::new(connect("").await);
    let node = ChunkStore::cluster_time(&*backend)
        .await
        .expect("read the cluster's time")
        .expect("a cluster has a time of its own");
    let here = SystemClock.now_micros();
    assert!(
        here.abs_diff(node) < 5_000_000,
        "the node on this machine is {} µs off this machine's clock",
        here.abs_diff(node)
    );
    let behind = Arc::new(ClusterBehind {
        inner: backend,
        by_micros: 12 * 60 * 1_000_000,
        skewed: AtomicBool::new(false),
    });
    let clock = OffsetClock::new();
    let store = BlobStore::new(
        behind.clone(),
        small_config()
            .with_grace(Duration::from_secs(600))
            .with_clock(clock.clone()),
    )
    .expect("store");
    let prefix = format!("clock-{:016x}/", rand::random::<u64>());
    let key = format!("{prefix}k");
    for seed in [1, 2] {
        store
            .put(&key, data(100_000, seed), &PutOptions::new())
            .await
            .expect("put");
    }
    let gc = GcOptions::new().with_prefix(prefix.clone());
    behind.skewed.store(false, Ordering::Relaxed);
    store.gc(&gc).await.expect("gc in step with the cluster");
    behind.skewed.store(true, Ordering::Relaxed);
    clock.advance(Duration::from_secs(12 * 60));
    let err = store
        .gc(&gc)
        .await
        .expect_err("12 minutes ahead")
        .to_string();
    assert!(
        err.contains("gc refused") && err.contains("ahead of the cluster's"),
        "{err}"
    );
    let err = store
        .reclaim_due()
        .await
        .expect_err("12 minutes ahead")
        .to_string();
    assert!(err.contains("reclaim refused"), "{err}");
    // A writer started with its clock 12 minutes ahead would win last-write-wins over the next 12 minutes of
    // other writers' puts: its plain puts and deletes are refused before anything is written.
    let writer = BlobStore::new(behind.clone(), small_config()).expect("store");
    for (what, outcome) in [
        (
            "put",
            writer
                .put(&key, data(100_000, 3), &PutOptions::new())
                .await
                .map(drop),
        ),
        ("delete", writer.delete(&key).await.map(drop)),
    ] {
        let err = outcome.expect_err(what).to_string();
        assert!(
            err.contains("write refused") && err.contains("ahead of the cluster's"),
            "{what}: {err}"
        );
    }
    assert_eq!(
        store.get(&key).await.expect("the current version reads"),
        data(100_000, 2)
    );
    behind.skewed.store(false, Ordering::Relaxed);
    writer
        .put(&key, data(100_000, 3), &PutOptions::new())
        .await
        .expect("in step again, the next write is taken");
}
