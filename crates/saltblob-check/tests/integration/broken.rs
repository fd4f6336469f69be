//! Each deliberately broken backend must be caught. The loads run in rounds until the expected violation
//! appears, with a generous budget, so that the tests do not depend on lucky timing.

use std::sync::Arc;
use std::time::Duration;

use saltblob_check::ViolationKind;
use saltblob_check::broken::{LostAck, ManifestFirst, RefusedButApplied, StaleReads};
use saltblob_check::{OpMix, SizeMix};
use saltblob_core::MemoryStore;

use crate::common::{hot_keys, run_until, store_on};

const ROUNDS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_committed_before_chunks_is_caught() {
    let store = store_on(Arc::new(ManifestFirst::new(Arc::new(MemoryStore::new()))));
    let mut config = hot_keys(1, 6, Duration::from_millis(300), 10);
    // Chunked values only: inline ones have no chunks to miss.
    config.sizes = SizeMix::fixed([4097, 20_000, 70_000]);
    let report = run_until(
        "manifest before chunks",
        &store,
        &config,
        &[ViolationKind::Corrupt],
        ROUNDS,
    )
    .await;
    assert!(
        report.count(ViolationKind::Corrupt) > 0,
        "not caught: {report:?}"
    );
    let v = report
        .violations
        .iter()
        .find(|v| v.kind == ViolationKind::Corrupt)
        .expect("a corrupt read");
    assert!(v.detail.contains("missing chunk"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_manifest_reads_are_caught() {
    let backend = StaleReads::new(Arc::new(MemoryStore::new()), 0.3, 20);
    let store = store_on(Arc::new(backend));
    let mut config = hot_keys(2, 4, Duration::from_millis(300), 20);
    config.mix = OpMix {
        put: 30,
        get: 60,
        delete: 10,
        conditional_put: 0,
    };
    let report = run_until(
        "stale reads",
        &store,
        &config,
        &[ViolationKind::Stale],
        ROUNDS,
    )
    .await;
    assert!(
        report.count(ViolationKind::Stale) > 0,
        "not caught: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acknowledged_commits_are_caught() {
    let backend = Arc::new(LostAck::new(Arc::new(MemoryStore::new()), 0.2, 30));
    let store = store_on(backend.clone());
    let config = hot_keys(2, 4, Duration::from_millis(300), 30);
    let report = run_until(
        "lost acknowledgements",
        &store,
        &config,
        &[ViolationKind::Lost, ViolationKind::Stale],
        ROUNDS,
    )
    .await;
    assert!(backend.lost() > 0);
    assert!(
        report.count(ViolationKind::Lost) + report.count(ViolationKind::Stale) > 0,
        "not caught: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_conditional_puts_that_took_effect_are_caught() {
    let backend = Arc::new(RefusedButApplied::new(
        Arc::new(MemoryStore::new()),
        0.3,
        40,
    ));
    let store = store_on(backend.clone());
    let mut config = hot_keys(1, 4, Duration::from_millis(300), 40);
    // Inline values only: a refused chunked put deletes its chunks, and its read then fails as corrupt.
    config.sizes = SizeMix::fixed([100, 1000]);
    config.mix = OpMix {
        put: 10,
        get: 50,
        delete: 5,
        conditional_put: 35,
    };
    let report = run_until(
        "refused but applied",
        &store,
        &config,
        &[ViolationKind::Refused],
        ROUNDS,
    )
    .await;
    assert!(backend.applied() > 0);
    assert!(
        report.count(ViolationKind::Refused) > 0,
        "not caught: {report:?}"
    );
}
