//! Blobs beyond Cassandra's 16 MiB mutation limit, at default settings, and chunk sizes beyond the backend's.

use std::sync::Arc;
use std::time::Instant;

use saltblob_core::conformance::data;
use saltblob_core::{BlobStore, Error, FsckOptions, LayoutPolicy, PutOptions, StoreConfig};
use saltblob_cql::backend::{LARGE_CHUNK_SIZE, MAX_CHUNK_BYTES};

use crate::{connect, connect_to, limits_keyspace};

/// A store with default settings on the limits tests' own keyspace: their `reclaim_all` must not reclaim the
/// versions other tests keep for their grace period.
async fn default_store() -> BlobStore {
    BlobStore::new(
        Arc::new(connect_to(&limits_keyspace(), "").await),
        StoreConfig::default(),
    )
    .expect("default config fits the backend")
}

/// `reclaim_all` on the limits keyspace leaves alone a version that the shared keyspace keeps for its grace
/// period (issue 12, item 21: on one keyspace, it reclaimed the versions other tests were still reading).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn reclaim_all_here_leaves_the_shared_keyspace_alone() {
    let shared = BlobStore::new(
        Arc::new(connect("").await),
        StoreConfig::default().with_grace(std::time::Duration::from_secs(3600)),
    )
    .expect("store");
    let key = format!("limits-isolation-{:016x}", rand::random::<u64>());
    for seed in [1, 2] {
        shared
            .put(&key, data(300_000, seed), &PutOptions::new())
            .await
            .expect("put");
    }
    default_store().await.reclaim_all().await.expect("reclaim");
    let fsck = shared
        .fsck(&FsckOptions::new().with_prefix(key.clone().into_bytes()))
        .await
        .expect("fsck");
    assert_eq!(
        (fsck.awaiting_reclaim, fsck.orphans.len()),
        (1, 0),
        "the replaced version still waits out its grace: {fsck:?}"
    );
    shared.delete(&key).await.expect("delete");
}

/// Puts, reads back and verifies a blob of `mib` MiB with default settings; deletes it after.
async fn round_trip(store: &BlobStore, mib: usize) {
    let key = format!("limits-{:016x}/{mib}mib", rand::random::<u64>());
    let payload = data((mib << 20) + 4321, mib as u64);
    let t0 = Instant::now();
    let m = store
        .put(&key, payload.clone(), &PutOptions::new())
        .await
        .unwrap_or_else(|e| panic!("put {mib} MiB: {e}"));
    let put = t0.elapsed();
    let t1 = Instant::now();
    let got = store
        .get(&key)
        .await
        .unwrap_or_else(|e| panic!("get {mib} MiB: {e}"));
    let get = t1.elapsed();
    assert!(got == payload, "{mib} MiB read back differs");
    assert_eq!(
        m.digest,
        *blake3::hash(&got).as_bytes(),
        "digest of what was read"
    );
    let d = store.describe(&key).await.expect("describe");
    let chunks = payload.len().div_ceil(LARGE_CHUNK_SIZE as usize);
    assert_eq!(
        (d.layout_kind, d.bytes_per_salt.len()),
        ("salted", chunks.min(100)),
        "fanned out over one salt per 1 MiB chunk, at most the default 100"
    );
    let rate = |t: std::time::Duration| (mib as f64) / t.as_secs_f64();
    eprintln!(
        "{mib} MiB: put {put:.2?} ({:.0} MiB/s), get {get:.2?} ({:.0} MiB/s)",
        rate(put),
        rate(get)
    );
    store.delete(&key).await.expect("delete");
    store.reclaim_all().await.expect("reclaim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn blobs_of_30_and_100_mib_with_defaults() {
    let store = default_store().await;
    round_trip(&store, 30).await;
    round_trip(&store, 100).await;
}

/// Puts `payload` under `key`, reads it back and compares, then deletes it; returns how long the put took.
async fn put_get_delete(
    store: &BlobStore,
    key: &str,
    payload: bytes::Bytes,
) -> Result<std::time::Duration, String> {
    let t = Instant::now();
    store
        .put(key, payload.clone(), &PutOptions::new())
        .await
        .map_err(|e| format!("put {key}: {e}"))?;
    let put = t.elapsed();
    let got = store
        .get(key)
        .await
        .map_err(|e| format!("get {key}: {e}"))?;
    if got != payload {
        return Err(format!("{key}: read back differs"));
    }
    store
        .delete(key)
        .await
        .map_err(|e| format!("delete {key}: {e}"))?;
    Ok(put)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn concurrent_60_mib_puts_wait_instead_of_failing() {
    let store = default_store().await;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..3u64 {
        let store = store.clone();
        tasks.spawn(async move {
            let key = format!("limits-{:016x}/60mib-{i}", rand::random::<u64>());
            put_get_delete(&store, &key, data(60 << 20, 60 + i)).await?;
            Ok::<_, String>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("a 60 MiB put under load succeeds");
    }
    eprintln!("3 concurrent 60 MiB puts and gets: {:.2?}", t0.elapsed());
    store.reclaim_all().await.expect("reclaim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn largest_chunks_round_trip_and_larger_are_refused() {
    let store = default_store().await;
    let largest = MAX_CHUNK_BYTES - 12;
    let key = format!("limits-{:016x}/big-chunks", rand::random::<u64>());
    let payload = data(20 << 20, 3);
    store
        .put(
            &key,
            payload.clone(),
            &PutOptions::new().with_chunk_size(largest),
        )
        .await
        .expect("8 MiB chunks");
    assert!(store.get(&key).await.expect("get") == payload);
    store.delete(&key).await.expect("delete");

    for chunk_size in [largest + 1, 16 << 20, 64 << 20] {
        match store
            .put(
                &key,
                payload.clone(),
                &PutOptions::new().with_chunk_size(chunk_size),
            )
            .await
        {
            Err(e @ Error::InvalidArgument { .. }) => {
                assert!(e.to_string().contains("chunk size"), "{e}");
            }
            other => panic!("chunk size {chunk_size}: expected InvalidArgument, got {other:?}"),
        }
    }
    let too_big =
        StoreConfig::default().with_policy(LayoutPolicy::default().with_chunk_size(16 << 20));
    let backend = Arc::clone(store.backend());
    match BlobStore::new(backend, too_big) {
        Err(e @ Error::InvalidArgument { .. }) => eprintln!("refused as expected: {e}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(
        matches!(store.head(&key).await, Err(Error::NotFound { .. })),
        "nothing stored by refused puts"
    );
    store.reclaim_all().await.expect("reclaim");
}

/// Heavier than CI needs: six processes' worth of clients (one session and throttle each) putting 60 MiB at
/// once. Run with `--ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "stress: run by hand with --ignored"]
async fn six_clients_putting_60_mib_at_once() {
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6u64 {
        let store = default_store().await;
        tasks.spawn(async move {
            let key = format!("limits-{:016x}/stress-{i}", rand::random::<u64>());
            let payload = data(60 << 20, 600 + i);
            let put = put_get_delete(&store, &key, payload).await?;
            store
                .reclaim_all()
                .await
                .map_err(|e| format!("reclaim: {e}"))?;
            Ok::<_, String>(put)
        });
    }
    while let Some(r) = tasks.join_next().await {
        let put = r
            .expect("task")
            .expect("a 60 MiB put under heavy load succeeds");
        eprintln!("one 60 MiB put took {put:.2?}");
    }
    eprintln!("6 clients x 60 MiB put + get: {:.2?}", t0.elapsed());
}
