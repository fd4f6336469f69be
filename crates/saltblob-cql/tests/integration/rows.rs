//! Chunk rows: large blobs take the backend's large chunk size, and a partition's consecutive chunks are read as
//! slices (one request per run), with checksums and missing-chunk detection intact across request boundaries.

use std::sync::Arc;

use bytes::Bytes;
use saltblob_core::conformance::data;
use saltblob_core::{
    BlobRef, BlobStore, ChunkId, ChunkStore, ChunkWrite, Error, Layout, Manifest, PutOptions,
    StoreConfig,
};
use saltblob_cql::CqlStore;
use saltblob_cql::backend::LARGE_CHUNK_SIZE;

use crate::{connect, keyspace};

const MIB: usize = 1 << 20;

async fn store() -> (Arc<CqlStore>, BlobStore) {
    let backend = Arc::new(connect("").await);
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    (backend, store)
}

fn chunked(m: &Manifest) -> saltblob_core::ChunkLayout {
    match m.layout() {
        Layout::Chunked(l) => l,
        Layout::Inline => panic!("chunked"),
    }
}

fn blob_of(key: &str, m: &Manifest) -> BlobRef {
    BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    }
}

/// An 8 MiB single-partition blob (128 chunks of 64 KiB) is read in one request per segment of the read, not
/// one per chunk; the backend reads a run of consecutive chunks in one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn a_single_partition_blob_is_read_in_fewer_requests_than_chunks() {
    let (backend, store) = store().await;
    let key = format!("rows-{:016x}/8mib", rand::random::<u64>());
    let payload = data(8 * MIB, 81);
    let m = store
        .put(&key, payload.clone(), &PutOptions::new())
        .await
        .expect("put");
    let l = chunked(&m);
    assert_eq!((l.chunk_size, l.chunk_count, l.salt_count), (65536, 128, 1));
    let before = backend.chunk_read_requests();
    assert_eq!(store.get(&key).await.expect("get"), payload);
    let requests = backend.chunk_read_requests() - before;
    // A read segment holds 1 MiB (16 chunks): one request each.
    assert_eq!(requests, 8, "requests for 128 chunks");

    // Straight through the backend: 100 consecutive chunks in one request, all in order.
    let ids: Vec<ChunkId> = (10..110).map(|index| ChunkId { salt: 0, index }).collect();
    let before = backend.chunk_read_requests();
    let slots = backend
        .get_chunks(&blob_of(&key, &m), &ids)
        .await
        .expect("get_chunks");
    assert_eq!(backend.chunk_read_requests() - before, 1);
    assert!(slots.iter().all(Option::is_some), "every chunk found");
    store.delete(&key).await.expect("delete");
}

/// Ranged gets across request boundaries return the right bytes; a chunk in the wrong place or missing in the
/// middle of a slice is detected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn slices_keep_ranges_checksums_and_missing_chunks_exact() {
    let (backend, store) = store().await;
    let key = format!("rows-{:016x}/slices", rand::random::<u64>());
    let payload = data(8 * MIB - 1000, 82);
    let m = store
        .put(&key, payload.clone(), &PutOptions::new())
        .await
        .expect("put");
    for r in [
        MIB - 10..MIB + 10,
        3..payload.len() - 3,
        65_535..3 * MIB + 65_537,
        payload.len() - 70_000..payload.len(),
    ] {
        let got = store
            .get_range(&key, r.start as u64..r.end as u64)
            .await
            .expect("ranged get");
        assert_eq!(got, payload.slice(r.clone()), "{r:?}");
    }
    let blob = blob_of(&key, &m);
    // Chunk 16, the first of the second read segment, holds chunk 17's bytes: right format, wrong place.
    let seventeen = backend
        .get_chunks(&blob, &[ChunkId { salt: 0, index: 17 }])
        .await
        .expect("read")
        .into_iter()
        .next()
        .flatten()
        .expect("chunk 17");
    let misplaced = ChunkWrite {
        salt: 0,
        index: 16,
        data: seventeen,
    };
    backend
        .put_chunks(&blob, vec![misplaced])
        .await
        .expect("write");
    match store.get(&key).await {
        Err(Error::ChecksumMismatch { chunk, .. }) => assert_eq!(chunk, 16),
        other => panic!(
            "expected ChecksumMismatch, got {:?}",
            other.map(|b| b.len())
        ),
    }
    // Chunk 40, inside a slice, is lost.
    let delete = format!(
        "DELETE FROM {}.chunks WHERE key = ? AND version = ? AND salt = 0 AND idx = 40",
        keyspace()
    );
    let version = m.version.to_be_bytes().to_vec();
    backend
        .session()
        .query_unpaged(delete, (key.as_bytes(), version))
        .await
        .expect("delete one row");
    match store.get_range(&key, 39 * 65536..42 * 65536).await {
        Err(Error::MissingChunk { chunk, .. }) => assert_eq!(chunk, 40),
        other => panic!("expected MissingChunk, got {:?}", other.map(|b| b.len())),
    }
    store.delete(&key).await.expect("delete");
}

/// A blob above the fan-out threshold, put whole or streamed, takes the backend's large chunk size, and reads
/// back whole and by range.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
async fn large_blobs_take_the_large_chunk_size() {
    let (_, store) = store().await;
    let prefix = format!("rows-{:016x}/", rand::random::<u64>());
    let payload = data(12 * MIB + 5, 83);
    let whole = store
        .put(
            format!("{prefix}whole"),
            payload.clone(),
            &PutOptions::new(),
        )
        .await
        .expect("put");
    let streamed = store
        .put_stream(format!("{prefix}stream"), &payload[..], &PutOptions::new())
        .await
        .expect("put_stream");
    for (name, m) in [("whole", whole), ("stream", streamed)] {
        let l = chunked(&m);
        assert_eq!(
            (l.chunk_size, l.chunk_count, l.salt_count),
            (LARGE_CHUNK_SIZE, 13, 13),
            "{name}"
        );
        let key = format!("{prefix}{name}");
        assert_eq!(store.get(&key).await.expect("get"), payload, "{name}");
        let r = MIB - 3..5 * MIB + 3;
        let got = store
            .get_range(&key, r.start as u64..r.end as u64)
            .await
            .expect("range");
        assert_eq!(got, payload.slice(r), "{name}");
        store.delete(&key).await.expect("delete");
    }
}
