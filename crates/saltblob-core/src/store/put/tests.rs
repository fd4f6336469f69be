//! Tests of `store/put.rs`.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::ChunkStore;
use crate::backend::memory::MemoryStore;
use crate::base::version::VersionId;
use crate::state::config::StoreConfig;
use crate::store::BlobStore;

/// The buffer a put was given whole is freed off the put's path, on a blocking thread, not by whichever
/// chunk task dropped its last slice (here the test's own thread, which runs every task): freeing a big
/// buffer takes milliseconds that the put must not wait for.
#[tokio::test]
async fn a_large_buffer_given_to_a_put_is_freed_off_its_path() {
    struct Owner(Vec<u8>, std::sync::mpsc::Sender<std::thread::ThreadId>);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    impl Drop for Owner {
        fn drop(&mut self) {
            let _ = self.1.send(std::thread::current().id());
        }
    }
    let (freed, freed_on) = std::sync::mpsc::channel();
    let store =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    let value = Bytes::from_owner(Owner(vec![7; FREE_OFF_PATH_MIN], freed));
    store
        .put("big", value, &PutOptions::new())
        .await
        .expect("put");
    let thread = freed_on
        .recv_timeout(Duration::from_secs(30))
        .expect("the buffer is freed once the put returned");
    assert_ne!(
        thread,
        std::thread::current().id(),
        "freed on the put's thread"
    );
    assert_eq!(
        store.get("big").await.expect("get").len(),
        FREE_OFF_PATH_MIN,
        "the value was stored before its buffer went"
    );
}

/// A large put stores its chunks unlogged where the backend asks for it, and makes them durable before its
/// commit: losing whatever was not synced (a crash of such an engine) right after the commit loses nothing
/// of it. A put below the threshold writes its chunks logged.
#[tokio::test]
async fn unlogged_chunks_are_synced_before_the_commit() {
    use crate::backend::memory::MEMORY_UNLOGGED_MIN_BYTES;

    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(backend.clone(), StoreConfig::default()).expect("store");
    let min = usize::try_from(MEMORY_UNLOGGED_MIN_BYTES).expect("fits");
    let large = Bytes::from((0..min * 3).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    let small = Bytes::from(vec![5u8; min / 2]);
    store
        .put("large", large.clone(), &PutOptions::new())
        .await
        .expect("put");
    assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
    assert_eq!(store.get("large").await.expect("get after a crash"), large);

    // The same chunks, written unlogged and not synced, are lost: the test can tell.
    let blob = BlobRef {
        key: Bytes::from_static(b"probe"),
        version: VersionId(1),
    };
    let chunk = crate::backend::ChunkWrite {
        salt: 0,
        index: 0,
        data: Bytes::from_static(b"x"),
    };
    backend
        .put_chunks_unlogged(&blob, vec![chunk])
        .await
        .expect("write");
    assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 1);

    // A stream of unknown length past the threshold is unlogged too; a small put is logged.
    store
        .put_stream("stream", &large[..], &PutOptions::new())
        .await
        .expect("stream");
    store
        .put("small", small.clone(), &PutOptions::new())
        .await
        .expect("put");
    assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
    assert_eq!(store.get("stream").await.expect("get"), large);
    assert_eq!(store.get("small").await.expect("get"), small);
}

/// A put of at least the backend's records threshold begins its version's storage (a "file"), stores its
/// chunks as records and syncs them before its commit: losing what was not synced right after the commit
/// loses nothing of it. A put that fails after the begin deletes the file with its chunks; reclaiming a
/// replaced version deletes its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_records_are_synced_before_the_commit() {
    use crate::backend::memory::MEMORY_RECORDS_MIN_BYTES;

    let backend = Arc::new(MemoryStore::new());
    let store = BlobStore::new(
        backend.clone(),
        StoreConfig::default().with_grace(Duration::ZERO),
    )
    .expect("store");
    let min = usize::try_from(MEMORY_RECORDS_MIN_BYTES).expect("fits");
    let large = Bytes::from(
        (0..min * 2 + 7)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<_>>(),
    );
    store
        .put("large", large.clone(), &PutOptions::new())
        .await
        .expect("put");
    assert_eq!(backend.lose_unsynced_chunks().expect("lose"), 0);
    assert_eq!(backend.version_file_count().expect("files"), 1);
    assert_eq!(store.get("large").await.expect("get after a crash"), large);
    let d = store.describe("large").await.expect("describe");
    assert_eq!(d.storage.as_deref(), Some("version file"));

    // A stream of unknown length that fails after its begin leaves no file and no chunk behind.
    struct Failing(usize);
    impl AsyncRead for Failing {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other("source failed")));
            }
            let n = self.0.min(buf.remaining()).min(1 << 20);
            buf.put_slice(&vec![9u8; n]);
            self.0 -= n;
            std::task::Poll::Ready(Ok(()))
        }
    }
    let chunks = backend.chunk_count().expect("count");
    let failed = store
        .put_stream("failing", Failing(min * 3), &PutOptions::new())
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(backend.version_file_count().expect("files"), 1);
    assert_eq!(backend.chunk_count().expect("count"), chunks);

    // Replaced, then reclaimed: the replaced version's file goes.
    store
        .put(
            "large",
            Bytes::from_static(b"small now"),
            &PutOptions::new(),
        )
        .await
        .expect("overwrite");
    store.reclaim_all().await.expect("reclaim");
    assert_eq!(backend.version_file_count().expect("files"), 0);
    assert_eq!(backend.chunk_count().expect("count"), 0);
}

/// What a reader puts in [`LateMetadata`] before its end is stored with the version, for inline and chunked
/// puts alike; oversized late metadata fails the put before anything is stored.
#[tokio::test]
async fn late_metadata_learnt_from_the_body_is_stored() {
    use tokio::io::AsyncRead;

    /// Yields `data`, then records its length in `late` just before its end.
    struct Measuring {
        data: Bytes,
        late: crate::state::config::LateMetadata,
        value: String,
    }
    impl AsyncRead for Measuring {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.data.len().min(buf.remaining());
            if n == 0 {
                let value = self.value.clone();
                self.late.insert("learnt", value);
            } else {
                let part = self.data.split_to(n);
                buf.put_slice(&part);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    let store =
        BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).expect("store");
    for (key, len) in [("small", 10usize), ("large", 3 << 20)] {
        let late = crate::state::config::LateMetadata::new();
        let body = Measuring {
            data: Bytes::from(vec![1u8; len]),
            late: late.clone(),
            value: len.to_string(),
        };
        let opts = PutOptions::new()
            .with_metadata("given", "yes")
            .with_late_metadata(late);
        store.put_stream(key, body, &opts).await.expect("put");
        let m = store.head(key).await.expect("head");
        assert_eq!(m.metadata.get("learnt"), Some(&len.to_string()), "{key}");
        assert_eq!(m.metadata.get("given").map(String::as_str), Some("yes"));
    }
    let late = crate::state::config::LateMetadata::new();
    let body = Measuring {
        data: Bytes::from(vec![1u8; 3 << 20]),
        late: late.clone(),
        value: "x".repeat(10_000),
    };
    let err = store
        .put_stream(
            "too-much",
            body,
            &PutOptions::new().with_late_metadata(late),
        )
        .await
        .expect_err("oversized metadata");
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(matches!(
        store.head("too-much").await,
        Err(Error::NotFound { .. })
    ));
}
