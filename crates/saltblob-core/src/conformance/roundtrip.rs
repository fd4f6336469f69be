//! What is put reads back whole, with its manifest, in every layout, codec and policy.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;

use super::{assert_holds, data, expected_kind, prefix, small_config, store, trickle};
use crate::backend::{BlobRef, ChunkId, ChunkStore};
use crate::base::error::Error;
use crate::base::units::{KIB, MIB};
use crate::format::codec::Codec;
use crate::format::layout::Layout;
use crate::format::manifest::ManifestBody;
use crate::state::config::{PutOptions, StoreConfig};

pub async fn roundtrip_sizes(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("roundtrip");
    let sizes = [
        0,
        1,
        999,
        1000,
        1001,
        4095,
        4096,
        4097,
        8191,
        8192,
        8193,
        64 * 1024,
        64 * 1024 + 1,
        100_003,
        300_000,
    ];
    for (i, size) in sizes.into_iter().enumerate() {
        let payload = data(size as usize, i as u64);
        for streamed in [false, true] {
            let key = format!("{p}{size}-{streamed}");
            let opts = PutOptions::new()
                .with_content_type("application/x-test")
                .with_metadata("size", size.to_string());
            let m = if streamed {
                store.put_stream(&key, trickle(&payload), &opts).await
            } else {
                store.put(&key, payload.clone(), &opts).await
            }
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
            let head = assert_holds(&store, &key, &payload).await;
            assert_eq!(head, m, "{key}: head returns the committed manifest");
            assert_eq!(head.content_type.as_deref(), Some("application/x-test"));
            assert_eq!(head.metadata.get("size"), Some(&size.to_string()));
            let d = store.describe(&key).await.expect("describe");
            assert_eq!(d.layout_kind, expected_kind(size), "{key}: layout");
            if let Layout::Chunked(l) = head.layout() {
                assert_eq!(l.chunk_count, size.div_ceil(4096), "{key}: chunk count");
                // A stream longer than the fan-out threshold is laid out for the largest blob: on a
                // backend that bounds its partitions, more salts than max_salt.
                let stream_salts = store
                    .config()
                    .policy
                    .stream_salt_count(crate::format::layout::STREAM_PLAN_BYTES);
                let want_salt = if size <= 64 * KIB {
                    1
                } else if streamed && size > 64 * KIB {
                    l.chunk_count.min(u64::from(stream_salts)) as u32
                } else {
                    l.chunk_count.min(7) as u32
                };
                assert_eq!(l.salt_count, want_salt, "{key}: salt count");
            }
            let mut stream = store.get_stream(&key).await.expect("get_stream");
            let mut pieces = 0;
            let mut joined = Vec::new();
            while let Some(piece) = stream.next().await {
                joined.extend_from_slice(&piece.expect("stream piece"));
                pieces += 1;
            }
            assert_eq!(joined, payload, "{key}: streamed bytes");
            assert!(
                pieces <= size.div_ceil(4096).max(1),
                "{key}: at most one piece per chunk"
            );
        }
    }
}

pub async fn roundtrip_default_policy_large(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, StoreConfig::default());
    let p = prefix("default-large");
    let payload = data(20 * MIB as usize + 123, 7);
    let key = format!("{p}20mib");
    store
        .put_stream(&key, trickle(&payload), &PutOptions::new())
        .await
        .expect("put 20 MiB");
    assert_holds(&store, &key, &payload).await;
    let d = store.describe(&key).await.expect("describe");
    assert_eq!(d.layout_kind, "salted");
    // Large blobs take the backend's preferred chunk size when it is larger than the default's.
    let chunk_size = backend.info().large_chunk_size.unwrap_or(0).max(64 * 1024);
    let Layout::Chunked(l) = d.manifest.layout() else {
        panic!("20 MiB is chunked")
    };
    assert_eq!(l.chunk_size, chunk_size, "large-blob chunk size");
    let salts = payload.len().div_ceil(chunk_size as usize).min(100);
    assert_eq!(d.bytes_per_salt.len(), salts, "default max salt");
    assert_eq!(d.bytes_per_salt.iter().sum::<u64>(), payload.len() as u64);
    // Ranged reads across chunk and segment boundaries.
    let cs = u64::from(chunk_size);
    for r in [
        cs - 1..cs + 1,
        3..5 * cs + 7,
        7 * MIB - 5..payload.len() as u64,
    ] {
        let got = store.get_range(&key, r.clone()).await.expect("ranged get");
        assert_eq!(
            got,
            payload.slice(r.start as usize..r.end as usize),
            "{r:?}"
        );
    }
    let small = data(16 * KIB as usize, 8);
    store
        .put(format!("{p}16k"), small, &PutOptions::new())
        .await
        .expect("put 16 KiB");
    assert_eq!(
        store
            .describe(format!("{p}16k"))
            .await
            .expect("describe")
            .layout_kind,
        "inline"
    );
    store
        .put(
            format!("{p}8m"),
            data(8 * MIB as usize, 9),
            &PutOptions::new(),
        )
        .await
        .expect("put 8 MiB");
    assert_eq!(
        store
            .describe(format!("{p}8m"))
            .await
            .expect("describe")
            .layout_kind,
        "single-partition"
    );
}

pub async fn describe_layouts(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("describe");
    for (size, kind, salts) in [
        (10u64, "inline", 0usize),
        (9000, "single-partition", 1),
        (70_000, "salted", 7),
    ] {
        let key = format!("{p}{size}");
        store
            .put(&key, data(size as usize, 3), &PutOptions::new())
            .await
            .expect("put");
        let d = store.describe(&key).await.expect("describe");
        assert_eq!(d.layout_kind, kind);
        assert_eq!(d.bytes_per_salt.len(), salts);
        if salts > 0 {
            assert_eq!(d.bytes_per_salt.iter().sum::<u64>(), size);
            let ManifestBody::Chunked {
                stored_bytes,
                layout,
                ..
            } = d.manifest.body
            else {
                panic!("chunked")
            };
            assert!(stored_bytes >= size, "stored bytes count headers too");
            // Every chunk is stored under salt index % salt_count, and under no other salt.
            let blob = BlobRef {
                key: Bytes::copy_from_slice(key.as_bytes()),
                version: d.manifest.version,
            };
            for index in 0..layout.chunk_count {
                let right = ChunkId {
                    salt: u32::try_from(index % u64::from(layout.salt_count)).expect("salt"),
                    index,
                };
                let wrong = ChunkId {
                    salt: (right.salt + 1) % (layout.salt_count + 1),
                    index,
                };
                let slots = backend
                    .get_chunks(&blob, &[right, wrong])
                    .await
                    .expect("get_chunks");
                assert!(
                    slots[0].is_some() && slots[1].is_none(),
                    "chunk {index} of {size} bytes is under salt {}",
                    right.salt
                );
            }
        }
    }
    assert!(matches!(
        store.describe(format!("{p}none")).await,
        Err(Error::NotFound { .. })
    ));
}

pub async fn streaming_put_of_unknown_length(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("stream");
    // Within the look-ahead the layout is exact; beyond it, a stream is fanned out.
    for size in [1000usize, 1001, 65_536, 65_537, 1_000_000] {
        let payload = data(size, size as u64);
        let key = format!("{p}{size}");
        store
            .put_stream(&key, trickle(&payload), &PutOptions::new())
            .await
            .expect("put_stream");
        assert_holds(&store, &key, &payload).await;
        assert_eq!(
            store.describe(&key).await.expect("describe").layout_kind,
            expected_kind(size as u64),
            "{size}"
        );
    }
    // A known length beyond the window is exact too.
    let payload = data(500_000, 5);
    let key = format!("{p}hinted");
    let opts = PutOptions::new().with_size_hint(500_000);
    store
        .put_stream(&key, trickle(&payload), &opts)
        .await
        .expect("put_stream hinted");
    assert_holds(&store, &key, &payload).await;
}

/// Chunk partitions are bounded by bytes: past `max_salt` the salt count grows with the blob, and a stream of
/// unknown length is laid out for the store's largest blob; both read back whole and by range, and gc leaves
/// nothing of them once deleted.
pub async fn partitions_stay_within_their_bound(backend: Arc<dyn ChunkStore>) {
    let cap = 16 * MIB;
    let base = small_config();
    let policy = base
        .policy
        .clone()
        .with_single_chunk_size(MIB as u32)
        .with_max_salt(1)
        .with_max_partition_bytes(cap);
    let config = base
        .with_policy(policy)
        .with_max_blob_size(40 * MIB)
        .with_inflight_bytes(4 * MIB as usize);
    let store = store(&backend, config);
    let p = prefix("partition-bound");
    // 20 MiB of 1 MiB chunks: 21 chunks, 16 to a partition at most, so 2 salts where max_salt gives 1.
    let payload = data(20 * MIB as usize + 123, 9);
    let known = format!("{p}known");
    let m = store
        .put(&known, payload.clone(), &PutOptions::new())
        .await
        .expect("put");
    let Layout::Chunked(l) = m.layout() else {
        panic!("{known} is not chunked: {m:?}")
    };
    assert_eq!((l.chunk_count, l.salt_count), (21, 2), "{l:?}");
    assert!(l.max_partition_bytes() <= cap, "{l:?}");
    // A stream planned for the store's largest blob (40 MiB: 3 salts).
    let streamed = format!("{p}stream");
    let m = store
        .put_stream(&streamed, trickle(&payload), &PutOptions::new())
        .await
        .expect("put_stream");
    let Layout::Chunked(l) = m.layout() else {
        panic!("{streamed} is not chunked: {m:?}")
    };
    assert_eq!((l.chunk_count, l.salt_count), (21, 3), "{l:?}");
    for key in [&known, &streamed] {
        assert_holds(&store, key, &payload).await;
        let range = 16 * MIB - 5..16 * MIB + 4101;
        let got = store.get_range(key, range.clone()).await.expect("range");
        assert_eq!(
            got,
            payload.slice(range.start as usize..range.end as usize),
            "{key}"
        );
        store.delete(key).await.expect("delete");
    }
    let orphans = super::orphans_after_gc(&store, &p).await;
    assert!(orphans.is_empty(), "{orphans:?}");
}

pub async fn compression_round_trips(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let p = prefix("codec");
    let text: Bytes = b"saltblob stores values of any size. "
        .iter()
        .copied()
        .cycle()
        .take(200_000)
        .collect();
    for codec in [Codec::Zstd, Codec::Lz4, Codec::None] {
        let key = format!("{p}{codec}");
        let m = store
            .put(&key, text.clone(), &PutOptions::new().with_codec(codec))
            .await
            .expect("put");
        assert_holds(&store, &key, &text).await;
        let ManifestBody::Chunked {
            stored_bytes,
            codec: stored_codec,
            ..
        } = m.body
        else {
            panic!("chunked")
        };
        assert_eq!(stored_codec, codec);
        if codec == Codec::None {
            assert!(stored_bytes > 200_000);
        } else {
            assert!(
                stored_bytes < 200_000 / 5,
                "{codec} stored {stored_bytes} bytes"
            );
        }
        let got = store
            .get_range(&key, 4000..9000)
            .await
            .expect("range of compressed blob");
        assert_eq!(&got[..], &text[4000..9000]);
    }
    let random = data(100_000, 4);
    let m = store
        .put(
            format!("{p}random"),
            random.clone(),
            &PutOptions::new().with_codec(Codec::Zstd),
        )
        .await
        .expect("put");
    // Each chunk's header, and the tag of a sealed one.
    let per_chunk = 12
        + m.sealing
            .as_ref()
            .map_or(0, |_| crate::encryption::seal::TAG_LEN as u64);
    let ManifestBody::Chunked { stored_bytes, .. } = m.body else {
        panic!("chunked")
    };
    assert!(
        stored_bytes <= 100_000 + 25 * per_chunk,
        "incompressible chunks are stored raw: {stored_bytes}"
    );
}

pub async fn per_put_overrides(backend: Arc<dyn ChunkStore>) {
    let store = store(&backend, small_config());
    let key = format!("{}k", prefix("override"));
    let payload = data(400_000, 11);
    let opts = PutOptions::new().with_chunk_size(8192).with_max_salt(3);
    let m = store.put(&key, payload.clone(), &opts).await.expect("put");
    assert_holds(&store, &key, &payload).await;
    match m.layout() {
        Layout::Chunked(l) => {
            assert_eq!((l.chunk_size, l.chunk_count, l.salt_count), (8192, 49, 3))
        }
        Layout::Inline => panic!("chunked expected"),
    }
    // A store whose policy changes later still reads what was written before.
    let other = super::store(&backend, StoreConfig::default());
    assert_eq!(other.get(&key).await.expect("old layout readable"), payload);
    let got = other.get_range(&key, 8191..8193).await.expect("range");
    assert_eq!(&got[..], &payload[8191..8193]);
}
