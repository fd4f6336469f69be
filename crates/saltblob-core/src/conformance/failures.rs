//! Bad input is refused and damaged data is reported, and neither changes what is stored.

use std::sync::Arc;

use bytes::Bytes;

use super::{assert_holds, data, prefix, small_config, store, trickle};
use crate::backend::{BlobRef, ChunkId, ChunkStore, ChunkWrite, Namespace, Precondition};
use crate::base::error::Error;
use crate::format::layout::{Layout, LayoutPolicy};
use crate::state::config::PutOptions;
use crate::store::BlobStore;

pub async fn size_hint_mismatch_changes_nothing(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("hint"));
    let original = data(5000, 1);
    store
        .put(&key, original.clone(), &PutOptions::new())
        .await
        .expect("put");
    for (len, hint) in [
        (100_000usize, 90_000u64),
        (100_000, 200_000),
        (10, 5000),
        (5000, 10),
    ] {
        let opts = PutOptions::new().with_size_hint(hint);
        match store.put_stream(&key, trickle(&data(len, 2)), &opts).await {
            Err(Error::SizeMismatch { expected, .. }) => assert_eq!(expected, hint),
            other => panic!("len {len} hint {hint}: expected SizeMismatch, got {other:?}"),
        }
        assert_holds(&store, &key, &original).await;
    }
}

pub async fn corrupt_manifest_is_detected(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("corrupt-manifest"));
    store
        .put(&key, data(10, 1), &PutOptions::new())
        .await
        .expect("put");
    let raw = backend
        .get_record(Namespace::Manifest, key.as_bytes())
        .await
        .expect("read")
        .expect("present");
    let mut bad = raw.to_vec();
    bad[20] ^= 0x40;
    backend
        .put_record(
            Namespace::Manifest,
            key.as_bytes(),
            Bytes::from(bad),
            &Precondition::None,
        )
        .await
        .expect("write");
    let err = store.get(&key).await.expect_err("corrupt manifest");
    assert!(err.is_corruption() && !err.is_retryable(), "{err:?}");
    assert!(
        err.to_string().contains(&key) && err.to_string().contains("crc32c"),
        "{err}"
    );
}

pub async fn corrupt_chunk_is_detected(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("corrupt"));
    let payload = data(100_000, 9);
    let m = store
        .put(&key, payload.clone(), &PutOptions::new())
        .await
        .expect("put");
    let Layout::Chunked(l) = m.layout() else {
        panic!("chunked")
    };
    let blob = BlobRef {
        key: Bytes::copy_from_slice(key.as_bytes()),
        version: m.version,
    };
    // Chunk 3 holds the bytes of chunk 4: right format, wrong place.
    let four = backend
        .get_chunks(
            &blob,
            &[ChunkId {
                salt: l.salt_of(4),
                index: 4,
            }],
        )
        .await
        .expect("read");
    let four = four.into_iter().next().flatten().expect("chunk 4 exists");
    backend
        .put_chunks(
            &blob,
            vec![ChunkWrite {
                salt: l.salt_of(3),
                index: 3,
                data: four,
            }],
        )
        .await
        .expect("write");
    match store.get(&key).await {
        Err(Error::ChecksumMismatch { chunk, version, .. }) => {
            assert_eq!((chunk, version), (3, m.version))
        }
        other => panic!(
            "expected ChecksumMismatch, got {:?}",
            other.map(|b| b.len())
        ),
    }
    let err = store.get(&key).await.expect_err("corrupt").to_string();
    assert!(
        err.contains("chunk 3") && err.contains(&m.version.to_string()),
        "error names chunk and version: {err}"
    );
    // Ranges that avoid the damaged chunk still read.
    let ok = store
        .get_range(&key, 0..3 * 4096)
        .await
        .expect("range before the damage");
    assert_eq!(&ok[..], &payload[..3 * 4096]);
    // A lost chunk is reported as such.
    backend
        .delete_chunks(&blob, l.salt_count, l.chunk_count)
        .await
        .expect("delete chunks");
    match store.get_range(&key, 10 * 4096..10 * 4096 + 1).await {
        Err(Error::MissingChunk { chunk, .. }) => assert_eq!(chunk, 10),
        other => panic!("expected MissingChunk, got {other:?}"),
    }
}

pub async fn bad_input_changes_nothing(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("bad");
    assert!(matches!(
        store.put("", data(1, 1), &PutOptions::new()).await,
        Err(Error::InvalidKey { .. })
    ));
    assert!(matches!(store.get("").await, Err(Error::InvalidKey { .. })));
    let long = "k".repeat(1025);
    assert!(matches!(
        store.put(&long, data(1, 1), &PutOptions::new()).await,
        Err(Error::InvalidKey { .. })
    ));
    let key = format!("{p}k");
    let max = backend.info().max_chunk_bytes;
    for opts in [
        PutOptions::new().with_chunk_size(0),
        PutOptions::new().with_chunk_size(max),
        PutOptions::new().with_chunk_size(u32::MAX),
        PutOptions::new().with_max_salt(0),
    ] {
        match store.put(&key, data(100_000, 1), &opts).await {
            Err(Error::InvalidArgument { .. }) => {}
            other => panic!("{opts:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    let meta = PutOptions::new().with_metadata("m", "x".repeat(9000));
    assert!(matches!(
        store.put(&key, data(1, 1), &meta).await,
        Err(Error::InvalidArgument { .. })
    ));
    let capped = super::store(&backend, small_config().with_max_blob_size(50_000));
    assert!(matches!(
        capped.put(&key, data(60_000, 1), &PutOptions::new()).await,
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        capped
            .put_stream(&key, trickle(&data(60_000, 1)), &PutOptions::new())
            .await,
        Err(Error::TooLarge { .. })
    ));
    assert!(
        store.list(&p).await.expect("list").is_empty(),
        "nothing was stored"
    );
    let bad_config = small_config().with_policy(LayoutPolicy::default().with_chunk_size(1));
    assert!(matches!(
        BlobStore::new(Arc::clone(&backend), bad_config),
        Err(Error::InvalidArgument { .. })
    ));
}
